"""Backend choice shared by the grid and the general-graph solvers."""

from __future__ import annotations

import importlib
import warnings

import torch

BACKENDS = ("auto", "reference", "cuda")


class BackendChoice:
    """Picks the reference module or a CUDA module for a device and a ``backend`` argument.

    ``auto`` takes the CUDA module for CUDA graphs when its extension loads, and otherwise falls back
    to the reference with one RuntimeWarning per process (per choice); ``cuda`` raises instead.

    Examples
    --------
    >>> from torchcut.solvers import reference
    >>> choice = BackendChoice(reference, "torchcut.solvers.cuda", "CUDA extension")
    >>> choice(torch.device("cpu"), "auto") is reference
    True
    """

    def __init__(self, reference, cuda_module: str, what: str):
        self.reference = reference
        self.cuda_module = cuda_module
        self.what = what
        self.warned = False

    def _cuda(self, required: bool):
        module = importlib.import_module(self.cuda_module)
        err = module.load_error()
        if err is None:
            return module
        if required:
            raise RuntimeError(f"backend='cuda': the {self.what} is unavailable: {err}")
        if not self.warned:
            warnings.warn(
                f"torchcut: {self.what} unavailable ({err}); using the reference push-relabel in torch ops, "
                "which is much slower. Set TORCHCUT_VERBOSE=1 to see the build log.",
                RuntimeWarning,
                stacklevel=4,
            )
            self.warned = True
        return self.reference

    def __call__(self, device: torch.device, backend: str):
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        if backend == "reference":
            return self.reference
        if backend == "cuda":
            if device.type != "cuda":
                raise ValueError(f"backend='cuda': expected a graph on a CUDA device, got one on {device}")
            return self._cuda(required=True)
        return self._cuda(required=False) if device.type == "cuda" else self.reference
