"""Backend choice shared by the grid and the general-graph solvers."""

from __future__ import annotations

import importlib
import warnings

import torch

BACKENDS = ("auto", "reference", "cpu", "cuda")


class BackendChoice:
    """Picks the reference module or a compiled module for a device and a ``backend`` argument.

    ``auto`` takes the CUDA module for CUDA graphs and the compiled CPU module for CPU graphs when
    their extension loads, and otherwise falls back to the reference with one RuntimeWarning per
    process (per choice and device type); ``cuda`` and ``cpu`` raise instead. Other devices take the
    reference.

    Examples
    --------
    >>> from torchcut.solvers import reference
    >>> choice = BackendChoice(reference, {"cuda": ("torchcut.solvers.cuda", "CUDA extension")})
    >>> choice(torch.device("cpu"), "auto") is reference
    True
    """

    def __init__(self, reference, compiled: dict[str, tuple[str, str]]):
        self.reference = reference
        self.compiled = compiled  # device type -> (module name, what it is called in messages)
        self.warned: set[str] = set()

    def _compiled(self, kind: str, required: bool):
        name, what = self.compiled[kind]
        module = importlib.import_module(name)
        err = module.load_error()
        if err is None:
            return module
        if required:
            raise RuntimeError(f"backend={kind!r}: the {what} is unavailable: {err}")
        if kind not in self.warned:
            warnings.warn(
                f"torchcut: {what} unavailable ({err}); using the reference push-relabel in torch ops, "
                "which is much slower. Set TORCHCUT_VERBOSE=1 to see the compiler's log.",
                RuntimeWarning,
                stacklevel=4,
            )
            self.warned.add(kind)
        return self.reference

    def __call__(self, device: torch.device, backend: str):
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        if backend == "reference":
            return self.reference
        if backend in ("cuda", "cpu"):
            if device.type != backend:
                where = "a CUDA device" if backend == "cuda" else "the CPU"
                raise ValueError(f"backend={backend!r}: expected a graph on {where}, got one on {device}")
            return self._compiled(backend, required=True)
        if device.type in self.compiled:
            return self._compiled(device.type, required=False)
        return self.reference
