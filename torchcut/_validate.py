"""Argument checks shared by the public constructors.

Every error raised here names the argument, what was expected and what was given.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

CAPACITY_DTYPES = (torch.int32, torch.int64, torch.float32, torch.float64)
INT32_MAX = 2**31 - 1
# Flows, excesses and cut values live in int64: keep every sum of capacities below this.
SUM_LIMIT = 2**62


def describe(x: Any) -> str:
    """A short description of ``x`` for error messages: type, dtype and shape."""
    if isinstance(x, torch.Tensor):
        return f"tensor of dtype {x.dtype} and shape {tuple(x.shape)}"
    if isinstance(x, np.ndarray):
        return f"numpy array of dtype {x.dtype} and shape {x.shape}"
    return f"{type(x).__name__}"


def check_has_data(t: torch.Tensor, name: str) -> torch.Tensor:
    """Raise ValueError for a tensor without values (the ``meta`` device); return ``t``.

    Examples
    --------
    >>> check_has_data(torch.zeros(2, device="meta"), "seeds")
    Traceback (most recent call last):
    ...
    ValueError: seeds: expected a tensor with values (on the CPU or a CUDA device), got one on the meta device, which holds only a shape
    """
    if t.device.type == "meta":
        raise ValueError(
            f"{name}: expected a tensor with values (on the CPU or a CUDA device), got one on the meta "
            "device, which holds only a shape"
        )
    return t


def as_tensor(x: Any, name: str, device: torch.device | None = None) -> torch.Tensor:
    """Turn a tensor, numpy array or nested sequence into a tensor, or raise TypeError."""
    if isinstance(x, torch.Tensor):
        t = check_has_data(x, name)
    elif isinstance(x, np.ndarray):
        if x.dtype == np.bool_ or x.dtype.kind not in "iuf":
            raise TypeError(f"{name}: expected a numeric array, got {describe(x)}")
        t = torch.from_numpy(np.ascontiguousarray(x))
    elif isinstance(x, (list, tuple, int, float)):
        try:
            t = torch.as_tensor(x)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"{name}: expected a tensor, array or nested sequence of numbers, got {describe(x)}"
            ) from exc
    else:
        raise TypeError(f"{name}: expected a torch tensor or numpy array, got {describe(x)}")
    if device is not None:
        t = t.to(device)
    return t


def check_capacity(t: torch.Tensor, name: str) -> torch.Tensor:
    """Check dtype and values of a capacity tensor; unsigned and small ints are widened to int64."""
    t = capacity_dtype(t, name)
    if t.numel() == 0:
        return t
    if t.is_floating_point():
        bad = ~torch.isfinite(t)
        if bool(bad.any()):
            raise ValueError(f"{name}: expected finite capacities, got {int(bad.sum())} NaN or infinite value(s)")
    low = t.min()
    if bool(low < 0):
        raise ValueError(f"{name}: expected non-negative capacities, got minimum {low.item()}")
    return t


def capacity_dtype(t: torch.Tensor, name: str) -> torch.Tensor:
    """Check a capacity tensor's dtype (unsigned and small ints are widened to int64); no values read."""
    if t.dtype in (torch.uint8, torch.int8, torch.int16):
        t = t.to(torch.int64)
    if t.dtype not in CAPACITY_DTYPES:
        raise ValueError(f"{name}: expected dtype int32, int64, float32 or float64, got {t.dtype}")
    return t


def capacity_ranges(tensors, names) -> list:
    """:func:`check_capacity` for several tensors at once: one read-back per kind (integer or float)
    instead of one or two per tensor, which on a CUDA device is a host synchronisation each.

    Returns ``[(tensor, min, max)]``: each tensor after :func:`capacity_dtype`, its smallest and largest
    value as Python numbers (None for an empty tensor). Raises the errors of :func:`check_capacity`, for
    the first offending tensor in the order given.

    Examples
    --------
    >>> [(lo, hi) for _, lo, hi in capacity_ranges([torch.tensor([3, 1]), torch.tensor([0.5])], ["a", "b"])]
    [(1, 3), (0.5, 0.5)]
    """
    tensors = [capacity_dtype(t, n) for t, n in zip(tensors, names)]
    rows = {False: [], True: []}  # per kind: [bad count, min, max] of each non-empty tensor
    for t in tensors:
        if t.numel():
            f = t.is_floating_point()
            kind = torch.float64 if f else torch.int64
            bad = (~torch.isfinite(t)).sum() if f else t.new_zeros((), dtype=kind)
            rows[f].append(torch.stack([bad.to(kind), t.min().to(kind), t.max().to(kind)]))
    got = {f: iter(torch.stack(r).tolist()) if r else iter(()) for f, r in rows.items()}
    out = []
    for t, name in zip(tensors, names):
        if not t.numel():
            out.append((t, None, None))
            continue
        bad, low, high = next(got[t.is_floating_point()])
        if bad:
            raise ValueError(f"{name}: expected finite capacities, got {int(bad)} NaN or infinite value(s)")
        if low < 0:
            raise ValueError(f"{name}: expected non-negative capacities, got minimum {low}")
        out.append((t, low, high))
    return out


def check_sum(tensors, what: str) -> None:
    """Raise when the sum of all capacities could overflow the int64 flow accumulators.

    ``tensors``: an iterable of tensors (summed in float64, so the check itself cannot wrap around;
    no float64 copy is made, and one value is read back for all of them) or an exact Python int total.
    """
    if isinstance(tensors, int):
        total = tensors
    else:
        sums = [t.sum(dtype=torch.float64) for t in tensors]
        total = float(torch.stack(sums).sum()) if sums else 0.0
    if total >= SUM_LIMIT:
        total = int(total)
        raise ValueError(
            f"{what}: the capacities sum to {total}, at or above 2**62; flows are accumulated in "
            "int64 and could overflow. Scale the capacities down."
        )


# Quantized float capacities map the largest pair sum / terminal capacity to this value.
FLOAT_QUANTUM_RANGE = 2**30


def quantization_scale(top: float, scale) -> float:
    """The factor that turns float capacities into integers, given the largest capacity ``top``.

    ``scale=None`` maps ``top`` to 2**30; a given scale is checked (positive, finite, and keeping
    ``top * scale`` within int32).

    Examples
    --------
    >>> quantization_scale(4.0, None) == 2**28
    True
    """
    if scale is None:
        return FLOAT_QUANTUM_RANGE / top if top > 0 else 1.0
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale: expected a positive finite number, got {scale!r}")
    if top * scale > INT32_MAX:
        raise ValueError(
            f"scale: the largest capacity {top} times scale {scale} exceeds the int32 range {INT32_MAX}; "
            "use a smaller scale"
        )
    return float(scale)
