"""The compiled libraries: loaded at import, one op namespace, and the fallbacks when they do not fit.

The end-to-end cases run in fresh processes on a copy of the installed package, so that the process
under test decides alone what to load.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchcut
from torchcut import _ops, build

PKG = Path(torchcut.__file__).resolve().parent
INSTALLED = _ops._installed("cpu") is not None

needs_installed = pytest.mark.skipif(not INSTALLED, reason="the package was not built (no torchcut/_C library)")

# A 64 x 64 segmentation whose flow the test knows from the reference solver.
SNIPPET = """
import sys, time, warnings
warnings.simplefilter("always")
t0 = time.perf_counter()
import torch, torchcut
from torchcut import _ops
g = torch.Generator().manual_seed(3)
img = torch.rand(64, 64, generator=g)
seeds = torch.zeros(64, 64, dtype=torch.int64); seeds[28:36, 28:36] = 1; seeds[0] = 2
mask, r = torchcut.segment(img, seeds, return_result=True)
ref = torchcut.maxflow(r.graph, backend="reference")
print("RESULT|" + "|".join(map(str, (_ops.status()["cpu"], r.stats["backend"], int(r.flow_value),
                                      int(ref.flow_value), r.verify()))))
"""


def _copy_package(tmp_path: Path, *, library: bool, info: dict | None) -> Path:
    """A copy of the installed package (its library only when ``library``) with the given build info."""
    root = tmp_path / "site"
    shutil.copytree(PKG, root / "torchcut", ignore=shutil.ignore_patterns("__pycache__", "*.so", "_build_info.json"))
    if library:
        for so in PKG.glob("_C*.so"):
            shutil.copy2(so, root / "torchcut" / so.name)
    if info is not None:
        (root / "torchcut" / "_build_info.json").write_text(json.dumps(info))
    return root


def _run(root: Path, tmp_path: Path, **env) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(root), "TORCHCUT_CACHE": str(tmp_path / "cache"), **env}
    return subprocess.run(
        [sys.executable, "-c", SNIPPET], capture_output=True, text=True, timeout=900, env=full, cwd=tmp_path
    )


def _result(p: subprocess.CompletedProcess) -> list[str]:
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")]
    assert p.returncode == 0 and lines, p.stdout[-2000:] + p.stderr[-3000:]
    return lines[0].split("|")[1:]


def test_one_namespace_and_names_from_the_library():
    _ops.ensure("cpu")
    ops = torch.ops.torchcut
    for name in (
        "grid_solve",
        "grid_solve_",
        "csr_solve_",
        "pairs_csr",
        "grid_pairs_csr",
        "grabcut_lloyd",
        "grabcut_models",
        "graph_expansion_move",
        "move_build",
        "move_apply",
        "seg_check",
        "seg_hist",
        "seg_energy",
        "names",
    ):
        assert hasattr(ops, name), name
    assert _ops.names("grid_cpu_options") == ("threads", "algorithm", "mask_only", "orient")
    assert _ops.names("grid_cpu_orients") == ("given", "mirrored", "auto", "auto-pseudoflow")
    assert _ops.names("grid_cpu_algorithms") == ("boykov-kolmogorov", "pseudoflow", "auto")
    assert _ops.names("cpu_stats")[0] == "flow" and "pseudoflow_items" in _ops.names("cpu_stats")
    assert _ops.names("grid_cuda_stats")[-1] == "status" and _ops.names("csr_cuda_stats")[-1] == "status"
    with pytest.raises(RuntimeError, match="table: expected one of grid_cuda_options.*got 'nope'"):
        torch.ops.torchcut.names("nope")


def test_documented_cuda_options_are_the_library_options():
    from torchcut.solvers.cuda import OPTIONS

    assert tuple(OPTIONS) == _ops.names("grid_cuda_options")


def test_the_cpu_op_is_dispatched_by_device_and_exact():
    # one form per device: the CPU implements the functional grid_solve, which leaves its inputs alone
    g = torchcut.GridGraph([[9, 0, 0]], [[0, 0, 9]], [[[4, 2, 0]], [[0, 0, 0]]], torchcut.grid_offsets(2, 4))
    caps, flat = g.caps.clone(), [v for o in g.offsets for v in o]
    mask, stats, res, excess, sink = torch.ops.torchcut.grid_solve(
        g.caps, g.source, g.sink, list(g.shape), flat, [1, 0]
    )
    assert torch.equal(g.caps, caps)
    assert mask.tolist() == [[True, True, False]] and stats[0, 0].item() == 2
    assert sink.tolist() == [[0, 0, 7]] and excess.tolist() == [[7, 0, 0]]
    # mask_only: the same cut and counters, no residual outputs; a bad flag is named
    m2, st2, res2, ex2, sink2 = torch.ops.torchcut.grid_solve(g.caps, g.source, g.sink, list(g.shape), flat, [1, 0, 1])
    assert torch.equal(m2, mask) and st2[0, 0].item() == 2
    assert res2.numel() == 0 and ex2.numel() == 0 and sink2.numel() == 0
    with pytest.raises(RuntimeError, match="mask_only: expected 0 or 1, got 2"):
        torch.ops.torchcut.grid_solve(g.caps, g.source, g.sink, list(g.shape), flat, [1, 0, 2])
    # the in-place form is the CUDA one
    ex, snk, c = excess.new_tensor([[9, 0, 0]]), sink.new_tensor([[0, 0, 9]]), g.caps.clone()
    with pytest.raises(NotImplementedError, match="torchcut::grid_solve_' with arguments from the 'CPU' backend"):
        torch.ops.torchcut.grid_solve_(c, ex, snk, list(g.shape), flat, [1, 0])


def test_import_loads_the_installed_library_without_compiling(tmp_path):
    if not INSTALLED:
        pytest.skip("the package was not built (no torchcut/_C library)")
    code = (
        "import sys, torchcut; from torchcut import _ops; print(_ops.status()['cpu']); "
        "print('cpp_extension' in ' '.join(sys.modules))"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TORCHCUT_CACHE": str(tmp_path / "cache")},
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["installed", "False"]
    assert not (tmp_path / "cache").exists()


@needs_installed
def test_version_mismatch_names_both_versions_then_falls_back(tmp_path):
    """A library built for another torch is not loaded; the message names both versions. With no working
    compiler the fallback build fails too, and the reference solver runs with one warning."""
    root = _copy_package(tmp_path, library=True, info={"torch": "0.0.1", "cuda": None})
    p = _run(root, tmp_path, CXX="false")
    status, backend, flow, ref_flow, ok = _result(p)
    assert backend == "reference" and flow == ref_flow and ok == "True"
    assert "built for torch 0.0.1 and this is torch " + torch.__version__ in status + p.stderr
    warnings = [ln for ln in p.stderr.splitlines() if "RuntimeWarning" in ln]
    assert len(warnings) == 1 and "compiled CPU solver unavailable" in warnings[0]
    assert "compiling it failed" in warnings[0]
    assert _ops._mismatch("cuda", {"torch": torch.__version__, "cuda": "11.8"}) == (
        f"it was built for CUDA 11.8 and this torch uses CUDA {torch.version.cuda}"
    )


@pytest.mark.slow
def test_missing_library_is_compiled_once_with_its_messages(tmp_path):
    """A source tree without a library compiles it into the cache on first use, saying so before and
    after; the next process loads that build without compiling again."""
    root = _copy_package(tmp_path, library=False, info=None)
    p = _run(root, tmp_path)
    status, backend, flow, ref_flow, ok = _result(p)
    assert (status, backend, flow, ok) == ("built", "cpu", ref_flow, "True")
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("torchcut:")]
    assert len(lines) == 2, p.stderr[-3000:]
    assert "no compiled library is installed" in lines[0] and "compiling them once into" in lines[0]
    assert "pip install --no-build-isolation ." in lines[0]
    assert lines[1].startswith("torchcut: compiled the CPU solvers in ")
    again = _run(root, tmp_path)
    assert _result(again)[:2] == ["cached", "cpu"]
    assert "torchcut:" not in again.stderr  # loaded from the cache: no compiler, no message


def test_build_command(capsys):
    assert build.main(["--help"]) == 0
    assert "python -m torchcut.build" in capsys.readouterr().out
    assert build.main(["cpu", "gpu"]) == 2
    assert "unknown part(s) gpu; expected some of cpu, cuda" in capsys.readouterr().out
    assert build.main(["cpu", "cpu", "cuda"]) == 0  # each part once; CUDA absent is skipped, not failed
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(("cpu: installed", "cpu: built", "cpu: cached"))
    if torch.version.cuda is None:
        assert out[1] == f"cuda: skipped (torch {torch.__version__} is not a CUDA build)"
    else:
        assert out[1].startswith(("cuda: installed", "cuda: built", "cuda: cached", "cuda: skipped"))
    assert len(out) == 2


def test_a_library_is_stale_only_after_its_own_sources_change(tmp_path):
    """A changed CUDA source leaves the CPU library current (it is not built from it); a changed shared
    header makes both libraries stale."""
    cpu, cuda = _ops._native_files("cpu"), _ops._native_files("cuda")
    names = {p.relative_to(_ops.CSRC).as_posix() for p in cpu}
    assert "torchcut.cpp" in names and "cpu/grid_arcs.cpp" in names
    assert not any(n.startswith("cuda/") or n.endswith((".cu", ".cuh")) for n in names)
    assert set(cpu) < set(cuda) and any(p.suffix == ".cu" for p in cuda)
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"")
    newest = max(p.stat().st_mtime for p in cuda)
    os.utime(lib, (newest + 10, newest + 10))
    assert _ops._newer_sources(lib, "cpu") == [] and _ops._newer_sources(lib, "cuda") == []
    cu = next(p for p in cuda if p.suffix == ".cu")
    header = next(p for p in cpu if p.suffix == ".h")
    os.utime(lib, (cu.stat().st_mtime - 1, cu.stat().st_mtime - 1))
    assert cu.name in _ops._newer_sources(lib, "cuda") and cu.name not in _ops._newer_sources(lib, "cpu")
    os.utime(lib, (header.stat().st_mtime - 1, header.stat().st_mtime - 1))
    assert header.name in _ops._newer_sources(lib, "cpu") and header.name in _ops._newer_sources(lib, "cuda")


def test_openmp_flags_follow_torchs_backend():
    """at::parallel_for splits a loop only in code compiled with OpenMP: the CPU library takes the flags
    wherever torch's parallel backend is OpenMP (Linux), and none elsewhere."""
    from torchcut import _build_config as config

    class Torch:
        class __config__:  # noqa: N801 - torch's own name
            info = ""

            @classmethod
            def parallel_info(cls):
                return cls.info

    Torch.__config__.info = "ATen parallel backend: OpenMP\n"
    assert config.openmp_flags(Torch, "linux") == (["-fopenmp"], ["-fopenmp"])
    assert config.openmp_flags(Torch, "darwin") == ([], [])
    Torch.__config__.info = "ATen parallel backend: native thread pool\n"
    assert config.openmp_flags(Torch, "linux") == ([], [])


@needs_installed
def test_the_cpu_library_splits_loops_over_torchs_threads():
    """The installed CPU library was compiled with OpenMP where torch uses it: its parallel loops call
    the OpenMP runtime (else every at::parallel_for in it ran on one thread)."""
    from torchcut import _build_config as config

    if not config.openmp_flags(torch, sys.platform)[0]:
        pytest.skip("torch's parallel backend is not OpenMP here")
    lib = next(p for p in PKG.glob("_C.*so") if not p.name.startswith("_C_cuda"))
    assert b"GOMP_parallel" in lib.read_bytes()


def _fake_compiler(folder: Path, found: dict) -> str:
    """A stand-in C++ compiler whose ``-print-file-name=NAME`` answers from ``found`` (else the bare name,
    as gcc answers for a file it does not find)."""
    script = folder / "fake-c++"
    cases = "".join(f'  "-print-file-name={k}") echo "{v}" ;;\n' for k, v in found.items())
    script.write_text(f'#!/bin/sh\ncase "$1" in\n{cases}  *) echo "${{1#-print-file-name=}}" ;;\nesac\n')
    script.chmod(0o755)
    return str(script)


def test_libstdcxx_flags_link_the_shared_runtime_where_the_dev_link_is_missing(tmp_path):
    """Where the compiler finds no libstdc++.so (a toolchain without its development link, which would
    link libstdc++.a into the library), the libraries link libstdc++.so.6 by its path; else nothing."""
    from torchcut import _build_config as config

    runtime = tmp_path / "libstdc++.so.6"
    runtime.write_bytes(b"")
    dev = tmp_path / "libstdc++.so"
    dev.write_bytes(b"")
    missing = _fake_compiler(tmp_path, {"libstdc++.so.6": runtime})
    assert config.libstdcxx_flags("linux", missing) == [str(runtime)]
    whole = tmp_path / "whole"
    whole.mkdir()
    assert config.libstdcxx_flags("linux", _fake_compiler(whole, {"libstdc++.so": dev})) == []
    neither = tmp_path / "neither"
    neither.mkdir()
    assert config.libstdcxx_flags("linux", _fake_compiler(neither, {})) == []
    assert config.libstdcxx_flags("linux", str(tmp_path / "no-such-compiler")) == []
    assert config.libstdcxx_flags("darwin", missing) == []


def test_an_ops_error_with_numbers_in_its_message_raises():
    """A library linked to its own copy of the C++ runtime crashes where an error message formats a
    number (the copy's stream locale is not the process's). The op's check, run in a child process so
    that a crash fails this test: a RuntimeError naming the arc and its nodes."""
    code = (
        "import torch, torchcut\n"
        "z = torch.zeros(3, dtype=torch.long)\n"
        "try:\n"
        "    torch.ops.torchcut.pairs_csr(z, torch.tensor([5, 0, 0]), z, z, 3)\n"
        "except RuntimeError as e:\n"
        "    print(str(e).splitlines()[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"the child ended with {out.returncode}: {out.stderr[-2000:]}"
    assert "arc 0 (0 -> 5) has a node outside [0, 3)" in out.stdout


@needs_installed
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF libraries")
def test_the_libraries_link_the_shared_cxx_runtime():
    """Each loaded library names libstdc++.so.6 among the shared libraries it needs (not a static copy)."""
    libs = sorted(PKG.glob("_C*.so"))
    if not libs:
        pytest.skip("no library built in the package here")
    for lib in libs:
        assert b"libstdc++.so.6" in lib.read_bytes(), f"{lib.name} does not link libstdc++.so.6"
