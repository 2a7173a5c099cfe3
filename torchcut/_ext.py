"""Build and load the C++/CUDA extensions with ``torch.utils.cpp_extension`` (JIT, cached).

Each extension registers its ops with ``TORCH_LIBRARY(<name>, m)``; after :func:`load` they are
called as ``torch.ops.<name>.<op>``. Builds are cached under ``$TORCHCUT_CACHE`` (default
``~/.cache/torchcut``), one folder per extension, torch version and CUDA version, so the first call
of a session pays the compile (tens of seconds) once per machine. Extensions whose sources are all
C++ (the CPU solver) need only the system C++ compiler; the others need nvcc and a CUDA build of torch.

Build ahead of time with ``python -m torchcut.build`` (see README).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

CSRC = Path(__file__).resolve().parent / "csrc"
_loaded: dict[str, object] = {}
_errors: dict[str, str] = {}


def cache_dir(name: str) -> Path:
    root = Path(os.environ.get("TORCHCUT_CACHE", Path.home() / ".cache" / "torchcut"))
    tag = f"{name}-torch{torch.__version__.replace('+', '_')}-cu{torch.version.cuda}"
    return root / tag


def load(name: str, sources: list[str], *, extra_cuda_cflags: list[str] | None = None) -> None:
    """Compile (once) and load extension ``name`` from files in ``torchcut/csrc``.

    Raises RuntimeError with the reason when it cannot be built; the reason is remembered so later
    calls fail fast.

    Examples
    --------
    >>> load("torchcut_cpu", ["cpu_ops.cpp"])
    """
    if name in _loaded:
        return
    if name in _errors:
        raise RuntimeError(_errors[name])
    try:
        cuda = any(s.endswith(".cu") for s in sources)
        if cuda and torch.version.cuda is None:
            raise RuntimeError(f"this torch build ({torch.__version__}) has no CUDA support")
        if cuda:
            _ninja_on_path()
        else:
            _check_cxx()
        from torch.utils import cpp_extension

        # torch's versioning hashes the sources and flags, not the headers they include: the flag
        # carries a hash of the headers, so editing one rebuilds
        tag = f"-DTORCHCUT_HEADERS={_headers_hash()}"
        build = cache_dir(name)
        build.mkdir(parents=True, exist_ok=True)
        cpp_extension.load(
            name=name,
            sources=[str(CSRC / s) for s in sources],
            build_directory=str(build),
            extra_cflags=["-O3", tag],
            extra_cuda_cflags=["-O3", "--expt-relaxed-constexpr", "-lineinfo", tag, *(extra_cuda_cflags or [])],
            is_python_module=False,
            verbose=os.environ.get("TORCHCUT_VERBOSE", "") not in ("", "0"),
        )
        _loaded[name] = True
    except Exception as exc:  # compiler missing, nvcc error, no CUDA toolkit ...
        msg = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else exc!r}"
        _errors[name] = msg
        raise RuntimeError(msg) from exc
    from .solvers.ops import register_fakes  # so that torch.compile can trace around the ops

    register_fakes(name)


def _headers_hash() -> str:
    import hashlib

    h = hashlib.sha1()
    for f in sorted(CSRC.glob("*.h")) + sorted(CSRC.glob("*.cuh")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:12]


def _check_cxx() -> None:
    """Raise RuntimeError naming the compiler when no C++ compiler can be run (fast, before ninja)."""
    import shutil

    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx.split()[0]) is None:
        raise RuntimeError(f"no C++ compiler found (looked for {cxx!r}; set CXX to one)")
    _ninja_on_path()


def _ninja_on_path() -> None:
    """Put the ``ninja`` of the pip package on PATH (torch runs ``ninja`` by name), or raise."""
    import shutil

    try:
        import ninja

        bin_dir = getattr(ninja, "BIN_DIR", None)
        if bin_dir and bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    except ImportError:
        pass
    if shutil.which("ninja") is None:
        raise RuntimeError("ninja is not installed (pip install ninja)")


# Every extension of the package: name -> sources in torchcut/csrc.
EXTENSIONS: dict[str, list[str]] = {
    "torchcut_grid": ["grid_ops.cpp", "grid_solve.cpp", "grid_push_i32.cu", "grid_push_i64.cu", "grid_bfs.cu",
                      "grid_moves.cu"],
    "torchcut_csr": ["csr_ops.cpp", "csr_kernels.cu"],
    "torchcut_cpu": ["cpu_ops.cpp", "cpu_grabcut.cpp"],
}


def load_named(name: str) -> None:
    """Load one of :data:`EXTENSIONS` by name (see :func:`load`)."""
    load(name, EXTENSIONS[name])


def load_error(name: str) -> str | None:
    """Why extension ``name`` cannot be used (building it first if needed), or None when it can.

    What the backends' ``load_error()`` return: a build failure is reported, never raised.

    Examples
    --------
    >>> load_error("torchcut_cpu") is None or isinstance(load_error("torchcut_cpu"), str)
    True
    """
    try:
        load_named(name)
    except Exception as exc:  # noqa: BLE001 - any build failure is reported, never raised here
        return str(exc) or type(exc).__name__
    return None
