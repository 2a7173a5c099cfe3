"""Build torchcut's native libraries at install time (``pip install .``, ``pip install -e .``, ``pip wheel .``).

``torchcut._C`` (op schemas and the CPU solvers) is always built. ``torchcut._C_cuda`` (the CUDA kernels)
is built when torch is a CUDA build and nvcc is found; ``TORCHCUT_FORCE_CUDA=1`` builds it regardless of
what is detected (it then fails loudly if it cannot), ``TORCHCUT_NO_CUDA=1`` skips it. CUDA architectures
come from ``TORCH_CUDA_ARCH_LIST``; unset, the visible GPU's, else ``DEFAULT_CUDA_ARCHS`` of
``torchcut/_build_config.py``. ``MAX_JOBS`` bounds the parallel compiles (ninja).

torch must be importable while building, and the libraries are bound to that torch (and CUDA) version:
install with ``pip install --no-build-isolation`` into the environment that holds the torch you run.
"""

import json
import os
import runpy
import sys
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
CSRC = Path("torchcut") / "csrc"
CONFIG = runpy.run_path(str(ROOT / "torchcut" / "_build_config.py"))


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _cuda_wanted(torch, cpp_extension) -> tuple[bool, str]:
    """Whether to build the CUDA library, and why (printed)."""
    if _flag("TORCHCUT_NO_CUDA"):
        return False, "TORCHCUT_NO_CUDA is set"
    if _flag("TORCHCUT_FORCE_CUDA"):
        return True, "TORCHCUT_FORCE_CUDA is set"
    missing = CONFIG["cuda_unavailable"](torch, cpp_extension)
    if missing:
        return False, missing
    return True, f"torch {torch.__version__} with CUDA {torch.version.cuda}, CUDA_HOME={cpp_extension.CUDA_HOME}"


def _arch_list(torch) -> str:
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    try:
        if torch.cuda.is_available():
            caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
            return ";".join(f"{a}.{b}" for a, b in caps)
    except Exception:  # noqa: BLE001 - no driver: fall back to the documented list
        pass
    return CONFIG["DEFAULT_CUDA_ARCHS"]


def _extensions():
    import torch
    from torch.utils import cpp_extension

    sources = lambda names: [str(CSRC / n) for n in names]  # noqa: E731
    omp_cflags, omp_ldflags = CONFIG["openmp_flags"](torch, sys.platform)
    cxx_ldflags = CONFIG["libstdcxx_flags"](sys.platform)
    if cxx_ldflags:
        print(f"torchcut: no libstdc++.so beside the compiler; linking {cxx_ldflags[0]}")
    exts = [
        cpp_extension.CppExtension(
            "torchcut._C",
            sources(CONFIG["CPU_SOURCES"]),
            extra_compile_args={"cxx": CONFIG["CXX_FLAGS"] + omp_cflags},
            extra_link_args=omp_ldflags + cxx_ldflags,
        )
    ]
    cuda, why = _cuda_wanted(torch, cpp_extension)
    info = {"torch": torch.__version__, "cuda": torch.version.cuda if cuda else None, "cuda_archs": None}
    if cuda:
        archs = _arch_list(torch)
        os.environ["TORCH_CUDA_ARCH_LIST"] = archs
        info["cuda_archs"] = archs
        exts.append(
            cpp_extension.CUDAExtension(
                "torchcut._C_cuda",
                sources(CONFIG["CUDA_SOURCES"]),
                extra_compile_args={"cxx": CONFIG["CXX_FLAGS"], "nvcc": CONFIG["NVCC_FLAGS"]},
                extra_link_args=cxx_ldflags,
            )
        )
        print(f"torchcut: building the CPU and CUDA libraries ({why}; architectures {archs})")
    else:
        print(f"torchcut: building the CPU library; CUDA library skipped ({why})")
    return exts, info, cpp_extension.BuildExtension


def _cmdclass(build_extension, info):
    class Build(build_extension.with_options(use_ninja=True)):
        """BuildExtension that also records the versions the libraries were built for."""

        def run(self):
            super().run()
            # beside the libraries: in the source tree when built in place (editable installs), else in
            # the build folder that becomes the wheel
            out = ROOT if self.inplace else Path(self.build_lib)
            target = out / "torchcut" / CONFIG["BUILD_INFO"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(info, indent=1) + "\n")

    return {"build_ext": Build}


try:
    _exts, _info, _build_extension = _extensions()
except ImportError as exc:  # torch missing: say how to build
    raise SystemExit(
        f"torchcut: building needs torch in the build environment ({exc}); install torch first, "
        "then `pip install --no-build-isolation .`"
    ) from None

setup(ext_modules=_exts, cmdclass=_cmdclass(_build_extension, _info))
