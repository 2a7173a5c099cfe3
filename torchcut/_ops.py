"""torchcut's compiled libraries: loaded, checked, and built at run time only as a fallback.

Every native op lives in one namespace, ``torch.ops.torchcut`` (schemas in ``csrc/torchcut.cpp``). Two
libraries implement them, both built at install time by ``setup.py``:

``_C``       the schemas and every CPU implementation (always built);
``_C_cuda``  the CUDA implementations (built when torch is a CUDA build and nvcc was found).

``import torchcut`` loads ``_C`` with :func:`torch.ops.load_library` when ``_build_info.json`` beside it
names the running torch version; ``_C_cuda`` is loaded the same way when a CUDA tensor first needs it,
so importing touches nothing CUDA-related. Nothing is compiled, hashed or checked with a compiler at
run time.

Fallback: when a library is missing (a source checkout that was never built) or was built for another
torch or CUDA version, the first solve that needs it compiles it once with
``torch.utils.cpp_extension`` into ``$TORCHCUT_CACHE`` (default ``~/.cache/torchcut``), printing one
line before and one after. When that fails too, the callers fall back to the reference solver with one
warning (see :mod:`torchcut.solvers._backends`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from . import _build_config as config

__all__ = ["ensure", "load_error", "has_kernels", "names", "status", "check_not_capturing"]

PKG = Path(__file__).resolve().parent
CSRC = PKG / "csrc"
_LIBS = {"cpu": "_C", "cuda": "_C_cuda"}
_SOURCES = {"cpu": config.CPU_SOURCES, "cuda": config.CUDA_SOURCES}
# kind -> "installed" / "built" (where it was loaded from), or the reason it cannot be used
_state: dict[str, str] = {}
_ok = ("installed", "built", "cached")


def _installed(kind: str) -> Path | None:
    """The library file of ``kind`` in the package folder, or None."""
    for path in sorted(PKG.glob(_LIBS[kind] + ".*")):
        if path.suffix in (".so", ".pyd", ".dylib"):
            return path
    return None


def build_info() -> dict | None:
    """The versions the installed libraries were built for (``_build_info.json``), or None.

    Examples
    --------
    >>> info = build_info()
    >>> info is None or set(info) >= {"torch", "cuda"}
    True
    """
    try:
        return json.loads((PKG / config.BUILD_INFO).read_text())
    except (OSError, ValueError):
        return None


def _mismatch(kind: str, info: dict | None) -> str | None:
    """Why the installed library of ``kind`` does not fit this torch, or None when it does."""
    if info is None:
        return f"{config.BUILD_INFO} is missing beside it"
    if info.get("torch") != torch.__version__:
        return f"it was built for torch {info.get('torch')} and this is torch {torch.__version__}"
    if kind == "cuda" and info.get("cuda") != torch.version.cuda:
        return f"it was built for CUDA {info.get('cuda')} and this torch uses CUDA {torch.version.cuda}"
    return None


def _native_files(kind: str = "cuda") -> list[Path]:
    """The C++/CUDA sources and headers under ``csrc`` that the library of ``kind`` is built from, sorted:
    every one for "cuda" (it includes the shared headers), all but ``csrc/cuda`` and CUDA files for "cpu"."""
    files = (p for p in CSRC.rglob("*") if p.suffix in (".cpp", ".cu", ".h", ".cuh"))
    if kind == "cpu":
        files = (p for p in files if p.suffix in (".cpp", ".h") and "cuda" not in p.relative_to(CSRC).parts[:-1])
    return sorted(files)


def _newer_sources(path: Path, kind: str) -> list[str]:
    """The names of the native sources of ``kind``'s library modified after the file ``path`` was written."""
    built = path.stat().st_mtime
    return [p.name for p in _native_files(kind) if p.stat().st_mtime > built]


def _warn_if_stale(path: Path, kind: str) -> None:
    """In a source checkout, warn once when a C++/CUDA source is newer than the library built from it."""
    if not (PKG.parent / "setup.py").is_file():
        return
    newer = _newer_sources(path, kind)
    if newer:
        import warnings

        warnings.warn(
            f"torchcut: {path.name} is older than {', '.join(sorted(newer)[:3])}"
            f"{' ...' if len(newer) > 3 else ''}; rebuild it with `python setup.py build_ext --inplace`",
            RuntimeWarning,
            stacklevel=3,
        )


def _load_installed(kind: str) -> str | None:
    """Load the installed library of ``kind``; None when loaded, else why it was not.

    ``TORCHCUT_CPU_LIBRARY`` names a CPU library to load instead, unchecked (a sanitizer build, say)."""
    if kind == "cpu" and os.environ.get("TORCHCUT_CPU_LIBRARY"):
        torch.ops.load_library(os.environ["TORCHCUT_CPU_LIBRARY"])
        return None
    path = _installed(kind)
    if path is None:
        return "no compiled library is installed (a source checkout that was not built)"
    why = _mismatch(kind, build_info())
    if why is not None:
        return why
    _warn_if_stale(path, kind)
    try:
        torch.ops.load_library(str(path))
    except OSError as exc:  # torch's message names the file; the loader's (an undefined symbol, say) is the cause
        cause = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        return f"it could not be loaded ({exc}{cause})"
    return None


def cache_dir(kind: str) -> Path:
    """Where the fallback build of ``kind`` ("cpu" or "cuda") goes.

    Examples
    --------
    >>> cache_dir("cpu").name.startswith("_C-torch")
    True
    """
    root = Path(os.environ.get("TORCHCUT_CACHE", Path.home() / ".cache" / "torchcut"))
    return root / f"{_LIBS[kind]}-torch{torch.__version__.replace('+', '_')}-cu{torch.version.cuda}"


def _load_cached(kind: str) -> bool:
    """Load an earlier fallback build of ``kind`` from the cache when it is newer than every source file."""
    lib = cache_dir(kind) / f"torchcut{_LIBS[kind]}.so"
    try:
        if _newer_sources(lib, kind):
            return False
    except OSError:  # no cached build
        return False
    try:
        torch.ops.load_library(str(lib))
    except OSError:
        return False
    return True


def _build(kind: str, why: str) -> str:
    """Load the cached fallback build of ``kind``, or compile it into the cache and load it: "cached" or
    "built"."""
    if kind == "cuda" and torch.version.cuda is None:
        raise RuntimeError(f"this torch ({torch.__version__}) is not a CUDA build")
    if _load_cached(kind):
        return "cached"
    _check_tools(kind)
    from torch.utils import cpp_extension

    folder = cache_dir(kind)
    folder.mkdir(parents=True, exist_ok=True)
    what = "CPU solvers" if kind == "cpu" else "CUDA kernels"
    took = "1-2 minutes on two cores" if kind == "cpu" else "about 4 minutes on two cores, 1-2 on sixteen"
    print(
        f"torchcut: the compiled {what} are not usable ({why}); compiling them once into {folder} ({took}; "
        "`pip install --no-build-isolation .` builds them at install time) ...",
        file=sys.stderr,
        flush=True,
    )
    t0 = time.perf_counter()
    # the flag carries a hash of the headers: cpp_extension versions the sources and flags, not the headers
    tag = f"-DTORCHCUT_HEADERS={_headers_hash()}"
    omp_cflags, omp_ldflags = config.openmp_flags(torch, sys.platform) if kind == "cpu" else ([], [])
    cpp_extension.load(
        name=f"torchcut{_LIBS[kind]}",
        sources=[str(CSRC / s) for s in _SOURCES[kind]],
        build_directory=str(folder),
        extra_cflags=[*config.CXX_FLAGS, *omp_cflags, tag],
        extra_ldflags=[*omp_ldflags, *config.libstdcxx_flags(sys.platform)],
        extra_cuda_cflags=[*config.NVCC_FLAGS, tag],
        is_python_module=False,
        verbose=os.environ.get("TORCHCUT_VERBOSE", "") not in ("", "0"),
    )
    print(f"torchcut: compiled the {what} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return "built"


def _headers_hash() -> str:
    import hashlib

    h = hashlib.sha1()
    for f in _native_files():
        if f.suffix in (".h", ".cuh"):
            h.update(str(f.relative_to(CSRC)).encode() + f.read_bytes())
    return h.hexdigest()[:12]


def _check_tools(kind: str) -> None:
    """Raise RuntimeError naming what is missing for a fallback build (fast, before cpp_extension)."""
    import shutil

    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx.split()[0]) is None:
        raise RuntimeError(f"no C++ compiler found (looked for {cxx!r}; set CXX to one)")
    try:
        import ninja

        bin_dir = getattr(ninja, "BIN_DIR", None)  # torch runs ninja by name
        if bin_dir and bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    except ImportError:
        pass
    if shutil.which("ninja") is None:
        raise RuntimeError("ninja is not installed (pip install ninja)")


def ensure(kind: str, *, build: bool = True) -> None:
    """Make the ops of ``kind`` ("cpu" or "cuda") callable, or raise RuntimeError saying why they are not.

    Loads the installed library; when there is none that fits, compiles it once (unless ``build`` is
    False). The CUDA library needs the CPU one (it holds the schemas). A failure is remembered, so later
    calls fail fast with the same reason.

    Examples
    --------
    >>> ensure("cpu")  # doctest: +SKIP
    >>> torch.ops.torchcut.names("grid_cpu_options")
    ['threads', 'algorithm', 'mask_only', 'orient']
    """
    if _state.get(kind) in _ok:
        return
    if kind not in _LIBS:
        raise ValueError(f"kind: expected 'cpu' or 'cuda', got {kind!r}")
    if kind == "cuda":
        try:
            ensure("cpu", build=build)
        except RuntimeError as exc:
            raise RuntimeError(f"the CPU library, which declares the ops, is unavailable: {exc}") from None
    if kind in _state:
        raise RuntimeError(_state[kind])
    why = _load_installed(kind)
    if why is None:
        _state[kind] = "installed"
    elif not build:
        raise RuntimeError(why)
    else:
        try:
            _state[kind] = _build(kind, why)
        except Exception as exc:  # compiler missing, nvcc error, no CUDA toolkit ...
            text = str(exc).strip()
            _state[kind] = (
                f"{why}; compiling it failed: {type(exc).__name__}: {text.splitlines()[-1] if text else exc!r}"
            )
            raise RuntimeError(_state[kind]) from exc
    if kind == "cpu":
        _register_fakes()


def load_error(kind: str) -> str | None:
    """Why the ops of ``kind`` cannot be used (compiling them first if needed), or None when they can.

    Examples
    --------
    >>> load_error("cpu") is None or isinstance(load_error("cpu"), str)
    True
    """
    try:
        ensure(kind)
    except RuntimeError as exc:
        return str(exc)
    return None


def has_kernels(device_type: str, *ops: str) -> bool:
    """Whether ``torch.ops.torchcut.<op>`` runs on tensors of ``device_type`` ("cpu", "cuda") for every
    op of ``ops``: the libraries load (the CPU one declares every schema) and register a kernel for each
    op there (a library built before an op has neither its schema nor its kernel).

    Examples
    --------
    >>> has_kernels("cpu", "grid_solve") == (load_error("cpu") is None)
    True
    """
    if device_type not in ("cpu", "cuda") or load_error("cpu") is not None:
        return False
    if device_type == "cuda" and load_error("cuda") is not None:
        return False
    if not all(hasattr(torch.ops.torchcut, op) for op in ops):
        return False
    has = getattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", None)
    return has is None or all(has(f"torchcut::{op}", device_type.upper()) for op in ops)


def status() -> dict:
    """Where each library came from: "installed", "built" (compiled by the fallback in this process),
    "cached" (an earlier fallback build), the reason it is unusable, or "not loaded".

    Examples
    --------
    >>> sorted(status())
    ['cpu', 'cuda']
    """
    return {kind: _state.get(kind, "not loaded") for kind in _LIBS}


_NAMES: dict[str, tuple[str, ...]] = {}


def names(table: str) -> tuple[str, ...]:
    """A name list of the ops (options or counters, in the ops' order), from the compiled library.

    Examples
    --------
    >>> names("grid_cpu_algorithms")  # doctest: +SKIP
    ('boykov-kolmogorov', 'pseudoflow', 'auto')
    """
    if table not in _NAMES:
        ensure("cpu")
        _NAMES[table] = tuple(torch.ops.torchcut.names(table))
    return _NAMES[table]


def _register_fakes() -> None:
    """Fake implementations of the solver ops, so that ``torch.compile`` traces around them."""
    if "fakes" in _state:
        return
    cpu_stats, grid_stats, csr_stats = (
        len(names("cpu_stats")),
        len(names("grid_cuda_stats")),
        len(names("csr_cuda_stats")),
    )

    def stats(t: torch.Tensor, B: int, cuda_len: int) -> torch.Tensor:
        shape = (cuda_len,) if t.device.type == "cuda" else (B, cpu_stats)
        return torch.empty(shape, dtype=torch.int64, device="cpu")

    # grid_solve is the CPU form (counters per item), grid_solve_ the CUDA form (one vector)
    def grid_solve(caps, source, sink, shape, offsets, options):
        B, n = caps.shape[0], source.numel() // caps.shape[0]
        if len(options) > 2 and options[2]:  # mask_only: empty residual outputs
            return (
                source.new_empty((B, n), dtype=torch.bool),
                torch.empty((B, cpu_stats), dtype=torch.int64),
                caps.new_empty((0,)),
                source.new_empty((0, n)),
                sink.new_empty((0, n)),
            )
        return (
            source.new_empty((B, n), dtype=torch.bool),
            torch.empty((B, cpu_stats), dtype=torch.int64),
            torch.empty_like(caps, memory_format=torch.contiguous_format),
            source.new_empty((B, n)),
            sink.new_empty((B, n)),
        )

    def grid_solve_(caps, excess, sink, shape, offsets, options):
        B = caps.shape[0]
        return excess.new_empty((B, excess.numel() // B), dtype=torch.bool), torch.empty(
            (grid_stats,), dtype=torch.int64
        )

    def csr_solve_(row_ptr, head, rev, caps, excess, sink, options):
        return excess.new_empty((excess.numel(),), dtype=torch.bool), stats(caps, 1, csr_stats)

    def csr_solve(row_ptr, head, rev, caps, source, sink):
        n = source.shape[1]
        return (
            source.new_empty((1,)),
            source.new_empty((1, n), dtype=torch.bool),
            caps.new_empty(caps.shape),
            source.new_empty((1, n)),
            source.new_empty((1, n)),
            stats(caps, 1, csr_stats),
        )

    def graph_labeling_energy(U, f, u, v, W, V, mode):
        return U.new_empty((), dtype=torch.int64)

    def graph_swap_move(U, f, u, v, W, V, alpha, beta, mode, wide):
        ctx = torch.library.get_ctx()
        n, a = ctx.new_dynamic_size(), ctx.new_dynamic_size()  # the move's nodes and arcs: data-dependent
        index, cap = U.new_empty((a,)), U.new_empty((a,), dtype=torch.int64 if wide else torch.int32)
        return [U.new_empty((n,)), U.new_empty((n + 1,)), index, index.clone(), cap, U.new_empty((n,)),
                U.new_empty((n,), dtype=cap.dtype), U.new_empty(())]  # fmt: skip

    def grid_arcs(edges, reverse, offsets, wide):
        K, B, S = edges.shape[0], edges.shape[1], tuple(edges.shape[2:])
        return edges.new_empty((B, 2 * K) + S, dtype=torch.int64 if wide else torch.int32)

    def potts_energy(image, probs, denom, mult, offsets, floor, seeds, graph):
        B, C, S = probs.shape[0], probs.shape[1], tuple(probs.shape[2:])
        K = len(offsets) // len(S)
        checks = torch.empty(8, dtype=torch.float64, device="cpu")  # always on the host (energy_potts.cpp)
        if graph:
            return (
                probs.new_empty((B, 2 * K) + S, dtype=torch.int32),
                probs.new_empty((B,) + S, dtype=torch.int64),
                probs.new_empty((B,) + S, dtype=torch.int32),
                checks,
            )
        return (
            probs.new_empty((B, C) + S, dtype=torch.int32),
            probs.new_empty((B, K) + S, dtype=torch.int32),
            probs.new_empty((B,), dtype=torch.float64),
            checks,
        )

    fakes = {
        "grid_solve": grid_solve,
        "grid_solve_": grid_solve_,
        "csr_solve_": csr_solve_,
        "csr_solve": csr_solve,
        "potts_energy": potts_energy,
        "grid_arcs": grid_arcs,
        "graph_labeling_energy": graph_labeling_energy,
        "graph_swap_move": graph_swap_move,
        **_segmentation_fakes(),
    }
    for name, fake in fakes.items():
        if hasattr(torch.ops.torchcut, name):  # a library built before an op has not its schema
            torch.library.register_fake(f"torchcut::{name}")(fake)
    _state["fakes"] = "registered"


def _segmentation_fakes() -> dict:
    """Fakes of the segmentation energy ops (csrc/cpu/energy.cpp) by name: the shapes of their outputs."""

    def seg_check(x, seeds, finite):
        B, C = x.shape[:2]
        s8 = seeds.new_empty((0,) if seeds.dtype == torch.uint8 else tuple(seeds.shape), dtype=torch.uint8)
        return x.new_empty((3 + 2 * B + 2 * B * C,), dtype=torch.int64), s8

    def seg_hist(x, seeds, lo, span, bins, unit, wide, shape, sigma):
        B, C = x.shape[:2]
        return x.new_empty((B, 2, bins**C), dtype=torch.int32), x.new_empty((2, B), dtype=torch.int64)

    def seg_energy(x, seeds, table, lo, span, coef, bins, scale, hard, shape, offsets, weights):
        B, full = x.shape[0], tuple(shape)
        return (
            x.new_empty((B,) + full, dtype=torch.int64),
            x.new_empty((B,) + full, dtype=torch.int32),
            x.new_empty((B, 2 * len(weights)) + full, dtype=torch.int32),
        )

    def seg_sigma(sums, exps, count):
        return sums.new_empty((2, sums.shape[1]), dtype=torch.float32)

    def seg_table(counts, bins, channels, uniform, bound):
        return counts.new_empty((counts.shape[0], counts.shape[2]), dtype=torch.float32)

    def seg_terms(x, seeds, lo, span, bins, unit, wide, shape, sums, exps, count, sig_coef, uniform, scale, hard,
                  offsets, weights, bound=-1):  # fmt: skip
        source, sink, caps = seg_energy(x, seeds, None, None, None, None, bins, scale, hard, shape, offsets, weights)
        return source, sink, caps, x.new_empty((x.shape[0],), dtype=torch.float32)

    return {
        "seg_check": seg_check,
        "seg_hist": seg_hist,
        "seg_energy": seg_energy,
        "seg_sigma": seg_sigma,
        "seg_terms": seg_terms,
        "seg_table": seg_table,
    }


# The solves read counters back to the host, which a CUDA graph cannot hold: ops tagged so are left out of
# inductor's CUDA graphs (mode="reduce-overhead").
CUDAGRAPH_UNSAFE = (torch.Tag.cudagraph_unsafe,) if hasattr(torch.Tag, "cudagraph_unsafe") else ()


def check_not_capturing(what: str) -> None:
    """Raise RuntimeError when the current CUDA stream is capturing a CUDA graph.

    The CUDA solvers read counters back to the host between launches (their termination test), which
    a graph capture cannot hold; called before anything is queued, it leaves the capture valid, so the
    caller's ``torch.cuda.graph`` block ends cleanly and the CUDA context stays usable.

    Examples
    --------
    >>> check_not_capturing("torchcut.maxflow")  # outside a capture: nothing happens
    """
    # no capture without an initialised CUDA context (a flag, where is_available() asks the driver)
    if torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"{what}: the CUDA solver cannot run while a CUDA graph is being captured (it reads counters "
            "back to the host between kernel launches to decide when to stop); call it outside "
            "torch.cuda.graph(...) / stream capture"
        )


def _load_at_import() -> None:
    """What ``import torchcut`` does: load the installed CPU library when it fits (no fallback build)."""
    why = _load_installed("cpu")
    if why is None:
        _state["cpu"] = "installed"
        _register_fakes()
