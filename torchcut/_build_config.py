"""What the native libraries are built from: read by ``setup.py`` (at install) and by the run-time
fallback build in :mod:`torchcut._ops`, so both compile the same sources with the same flags.

This module imports nothing, so that ``setup.py`` can run it without importing the package.

``_C``: the op schemas and every CPU implementation (C++ only, always built).
``_C_cuda``: the CUDA implementations (built when torch has CUDA and nvcc is found).
"""

# paths inside torchcut/csrc
CPU_SOURCES = [
    "torchcut.cpp",
    "cpu/grid_solve.cpp",
    "cpu/grid_arcs.cpp",
    "cpu/csr_solve.cpp",
    "cpu/csr_layout.cpp",
    "cpu/cpu_grabcut.cpp",
    "cpu/energy.cpp",
    "cpu/energy_potts.cpp",
    "cpu/cpu_graph_moves.cpp",
    "seg_terms.cpp",
]
CUDA_SOURCES = [
    "cuda/grid_ops.cpp",
    "cuda/grid_solve.cpp",
    "cuda/grid_push_i32.cu",
    "cuda/grid_push_i64.cu",
    "cuda/grid_bfs.cu",
    "cuda/grid_small.cu",
    "cuda/grid_arcs.cu",
    "cuda/grid_slab.cpp",
    "cuda/grid_slab_kernels.cu",
    "cuda/grid_moves.cu",
    "cuda/csr_ops.cpp",
    "cuda/csr_kernels.cu",
    "cuda/energy_ops.cpp",
    "cuda/energy.cu",
    "cuda/energy_potts.cu",
]
CXX_FLAGS = [
    "-O3",
    "-g0",
    "-ffp-contract=off",
    "-fno-wrapv",
]  # the C++ standard is the one torch asks for; no debug info
# (the build 20% faster); no fused multiply-adds, so float formulas round as the tensor ops they repeat
NVCC_FLAGS = ["-O3", "--expt-relaxed-constexpr", "-lineinfo"]
# Architectures built when TORCH_CUDA_ARCH_LIST is unset and no GPU is visible at build time: Turing,
# Ampere and Hopper as machine code, plus Hopper's PTX, which the driver compiles for newer GPUs
# (Blackwell). Every CUDA toolkit from 11.8 to 13 accepts this list.
DEFAULT_CUDA_ARCHS = "7.5;8.0;8.6;9.0+PTX"
# File written next to the libraries at build time: the torch and CUDA versions they were built for.
BUILD_INFO = "_build_info.json"


def openmp_flags(torch, platform):
    """Compiler and linker flags that let ``at::parallel_for`` in the CPU library use torch's threads.

    ``at::parallel_for`` is inline: under torch's OpenMP backend it splits a loop only where the code
    calling it is compiled with OpenMP, else it runs the whole range on the calling thread. The
    library then links the OpenMP runtime torch already loaded (the same ``libgomp.so.1``). Empty
    where torch's backend is not OpenMP, or on macOS and Windows (their compilers take other flags).
    ``torch`` and ``platform`` (``sys.platform``) are passed in: this module imports nothing."""
    if platform.startswith(("darwin", "win")):
        return [], []
    try:
        info = torch.__config__.parallel_info()
    except Exception:  # noqa: BLE001 - an old torch: no OpenMP flags
        return [], []
    if "parallel backend: OpenMP" not in info or "OpenMP not found" in info:
        return [], []
    return ["-fopenmp"], ["-fopenmp"]


def libstdcxx_flags(platform, compiler=None):
    """Linker flags that make the libraries use the shared C++ runtime that torch uses.

    A toolchain installed without its development link (``libstdc++.so`` beside the compiler) links the
    static ``libstdc++.a`` into each library without a word. The library then carries its own copy of
    the standard streams, whose locale data are not the process's: formatting a number into an error
    message (``TORCH_CHECK(ok, "index ", i)``) crashes the process instead of raising. Where the
    compiler finds no ``libstdc++.so`` but finds ``libstdc++.so.6``, that file is passed to the linker by
    its path. ``platform`` is ``sys.platform``; ``compiler`` the C++ compiler (default ``$CXX`` or
    ``c++``, as torch's build uses). Empty elsewhere and wherever the compiler cannot be asked."""
    if not platform.startswith("linux"):
        return []
    import os
    import subprocess

    cxx = compiler or os.environ.get("CXX") or "c++"

    def find(name):
        try:
            out = subprocess.run([cxx, f"-print-file-name={name}"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        path = out.stdout.strip()
        return path if out.returncode == 0 and os.path.isabs(path) and os.path.exists(path) else None

    if find("libstdc++.so") is not None:
        return []
    shared = find("libstdc++.so.6")
    return [shared] if shared is not None else []


def cuda_unavailable(torch, cpp_extension):
    """Why this machine cannot build the CUDA library (a CPU-only torch, no toolkit), or None when it can.
    ``torch`` and ``torch.utils.cpp_extension`` are passed in: this module imports nothing."""
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is not a CUDA build"
    if cpp_extension.CUDA_HOME is None:
        return "no CUDA toolkit found (set CUDA_HOME)"
    return None
