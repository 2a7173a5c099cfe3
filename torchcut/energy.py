"""Seeded segmentation energies: an image and seed labels become a :class:`~torchcut.GridGraph`.

The energy follows Boykov and Jolly (ICCV 2001), "Interactive graph cuts for optimal boundary & region
segmentation of objects in N-D images". For a labelling ``x`` (1 = object, 0 = background)

.. math::

    E(x) = \\sum_p D_p(x_p) + \\lambda \\sum_{(p, q)} w_{pq} [x_p \\ne x_q]

* **Data term** ``D_p``: negative log-likelihood of the pixel's colour under a colour histogram of the
  object seeds and one of the background seeds. Colours are quantized into ``bins`` levels per channel
  (the range of each channel of each image is mapped onto the bins), the two histograms are smoothed
  (a ``[1, 2, 1] / 4`` blur along every colour axis) and mixed with a uniform distribution
  (weight ``1e-2``), so that colours no seed has shown keep a finite cost. Only the difference of the
  two costs matters: a pixel more likely under the object model gets a source capacity of
  ``log P(I | object) - log P(I | background)`` nats, a pixel more likely under the background model
  a sink capacity of the opposite. (Boykov and Jolly weight the data term by their lambda; here
  ``lam`` weights the smoothness term, so their lambda is ``1 / lam``.)
* **Smoothness term**: contrast sensitive, ``w_pq = exp(-||I_p - I_q||^2 / (2 sigma^2)) / dist(p, q)``
  with ``dist`` the Euclidean length of the offset (1, sqrt 2, sqrt 3; with a ``spacing``, the physical
  length divided by the smallest spacing). When ``sigma`` is not given it
  is estimated per image as the root mean square colour difference over axis-aligned neighbour pairs,
  ``sigma = sqrt(mean ||I_p - I_q||^2)`` (the choice of Rother et al.'s GrabCut), in the units of the
  image's values.
* **Hard constraints**: an object seed gets source capacity ``hard`` and sink capacity 0, a background
  seed the opposite, where ``hard = 1 + sum over the 2K directions of the largest possible n-link
  capacity``: more than the total capacity of the n-links leaving (or, equally, entering) any node, so
  moving a seed to its own side always lowers a cut that separates it from its terminal, and no
  minimum cut does.

Integer capacities
------------------
The solvers are exact on integers. Energies are quantized: every capacity is
``round(scale * value)`` with ``value`` in energy units (nats for the data term, ``lam * w_pq`` for the
smoothness term), stored as int32. By default ``scale = 1024 / max(lam, 1)``, so that the largest
n-link (``lam``, an axis-aligned pair of equal colours) is 1024 integer units for ``lam >= 1``: the
rounding error of any capacity is at most ``1 / 2048`` of ``lam``. ``hard`` must fit in int32; a
``scale`` (or ``lam``) so large that it does not raises ``ValueError``. The graph records these
choices in ``graph.energy`` (an :class:`EnergyInfo`).

Native ops
----------
The build runs as compiled ops, ``torch.ops.torchcut.seg_check``, ``seg_hist``, ``seg_sigma`` and
``seg_energy`` (multi-threaded on the CPU, kernels on CUDA): the checks with the colour ranges and
seed counts, then the seed histograms with the exact sums of the sigma estimate, sigma from those
sums where they lie, then every capacity. They repeat the float32 operations of the tensor-op
version kept here as the specification, so the integer capacities and sigma are the same bit for
bit. Images of more than four channels and builds given ``reduce`` use the tensor-op version.
``graph.energy.syncs`` counts the values the build read back to the host: one, the checks.

Shapes
------
Seeds decide the spatial shape: ``[H, W]``, ``[B, H, W]``, ``[D, H, W]`` or ``[B, D, H, W]``. The
number of spatial dimensions comes from ``ndim``, else from ``connectivity`` (4 or 8: 2D; 6, 18 or 26:
3D), else from the seeds alone when that is unambiguous (2 dims: one 2D image; 4 dims: a batch of
volumes). Three-dimensional seeds with neither ``ndim`` nor ``connectivity`` raise ``ValueError``:
they could be a batch of images or a volume. The image has the seeds' shape (one channel) or one
more axis, the channel axis: ``channel_axis`` when given, else the axis whose removal leaves the
seeds' shape, looked for right before the spatial dims (``[C, H, W]``, ``[B, C, H, W]``) and last
(``[H, W, C]``, ``[B, H, W, C]``); when both fit, pass ``channel_axis``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import torch

from ._cudagraph import GraphCache
from ._validate import INT32_MAX, SUM_LIMIT, check_has_data, describe
from .grid import GridGraph, grid_offsets, overlap_slices

__all__ = ["segmentation_graph", "model_terms", "to_pymaxflow", "EnergyInfo", "DEFAULT_LAM"]

#: Default weight of the smoothness term relative to the data term (nats per unit of ``w_pq``).
DEFAULT_LAM = 8.0
#: Integer units per energy unit are ``SCALE_UNITS / max(lam, 1)`` unless ``scale`` is given.
SCALE_UNITS = 1024
#: Weight of the uniform distribution mixed into the colour histograms.
UNIFORM_WEIGHT = 1e-2
#: Largest number of histogram bins per model (bins ** channels).
MAX_BINS_TOTAL = 2**20

_CONN_NDIM = {4: 2, 8: 2, 6: 3, 18: 3, 26: 3}


@dataclass(frozen=True)
class EnergyInfo:
    """How a segmentation graph was built (``graph.energy``).

    Attributes
    ----------
    lam : float
        Weight of the smoothness term.
    sigma : torch.Tensor
        float32 ``[B]``: the contrast scale used for each image (estimated or given).
    scale : float
        Integer capacity units per energy unit: a cut value ``c`` is an energy of ``c / scale``.
    hard : int
        Capacity of the terminal arc that ties a seed to its terminal.
    bins : int
        Histogram levels per colour channel.
    channels : int
        Number of colour channels of the image.
    connectivity : int
        Neighbourhood size (4, 8, 6, 18 or 26).
    ndim : int
        Number of spatial dimensions (2 or 3).
    channel_axis : int or None
        The axis of the input image that held the channels (None for one-channel images).
    syncs : int
        Values the build read back to the host, each a wait for the device on CUDA: the checks and
        seed counts (and, in the tensor-op version, the sums of the sigma estimate when ``sigma`` was
        not given).

    Examples
    --------
    >>> import torch, torchcut
    >>> seeds = torch.tensor([[1, 0, 0, 2]])
    >>> info = torchcut.segmentation_graph(torch.tensor([[0., 0., 9., 9.]]), seeds, lam=1.0).energy
    >>> info.lam, info.connectivity, info.ndim, info.channels
    (1.0, 4, 2, 1)
    """

    lam: float
    sigma: torch.Tensor
    scale: float
    hard: int
    bins: int
    channels: int
    connectivity: int
    ndim: int
    channel_axis: int | None
    syncs: int = 0


# ---------------------------------------------------------------------------------------------- inputs
def _pil_array(x) -> np.ndarray | None:
    """A numpy array of a PIL image (palette, alpha and exotic modes converted), or None."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - pillow is a dependency
        return None
    if not isinstance(x, Image.Image):
        return None
    mode = x.mode
    if mode in ("L", "RGB", "I", "F") or mode.startswith("I;16"):
        return np.asarray(x)
    if mode == "1":
        return np.asarray(x.convert("L"))
    if mode == "LA":
        return np.asarray(x.convert("L"))
    return np.asarray(x.convert("RGB"))


def _as_image_tensor(x: Any, name: str) -> torch.Tensor:
    arr = _pil_array(x)
    if arr is not None:
        x = arr
    if isinstance(x, np.ndarray):
        if x.dtype == np.bool_ or x.dtype.kind not in "iuf":
            raise TypeError(f"{name}: expected a numeric (integer or float) array, got {describe(x)}")
        if x.dtype == np.uint16 or x.dtype == np.uint32 or x.dtype == np.uint64:
            x = x.astype(np.int64)
        x = np.ascontiguousarray(x)
        return torch.from_numpy(x if x.flags.writeable else x.copy())
    if isinstance(x, torch.Tensor):
        if x.dtype == torch.bool or x.is_complex():
            raise TypeError(f"{name}: expected an integer or floating-point tensor, got {describe(x)}")
        return check_has_data(x, name)
    raise TypeError(f"{name}: expected a torch tensor, numpy array or PIL image, got {describe(x)}")


def _as_seed_tensor(x: Any, device: torch.device) -> torch.Tensor:
    if _pil_array(x) is not None:  # a PIL image: its values (palette indices for mode P) are the labels
        if not (x.mode in ("L", "P", "I") or x.mode.startswith("I;16")):
            raise TypeError(f"seeds: expected a one-channel PIL image (mode L, P or I) of labels, got mode {x.mode}")
        x = np.asarray(x)
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "iu":
            raise TypeError(
                f"seeds: expected an integer array of labels 0 (unknown), 1 (object), 2 (background), got {describe(x)}"
            )
        x = np.ascontiguousarray(x.astype(np.int64) if x.dtype.kind == "u" and x.itemsize > 1 else x)
        x = torch.from_numpy(x if x.flags.writeable else x.copy())
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"seeds: expected a torch tensor, numpy array or PIL image of labels, got {describe(x)}")
    if x.dtype == torch.bool or x.is_floating_point() or x.is_complex():
        raise TypeError(
            f"seeds: expected an integer tensor of labels 0 (unknown), 1 (object), 2 (background), got {describe(x)}"
        )
    return check_has_data(x, "seeds").to(device)


def _resolve_ndim(seed_shape: tuple, ndim, connectivity) -> tuple[int, int]:
    if connectivity is not None and connectivity not in _CONN_NDIM:
        raise ValueError(f"connectivity: expected 4 or 8 (2D) or 6, 18 or 26 (3D), got {connectivity!r}")
    if ndim is not None and ndim not in (2, 3):
        raise ValueError(f"ndim: expected 2 or 3 spatial dimensions, got {ndim!r}")
    if ndim is not None and connectivity is not None and _CONN_NDIM[connectivity] != ndim:
        raise ValueError(
            f"connectivity: expected {'4 or 8' if ndim == 2 else '6, 18 or 26'} for ndim={ndim}, got {connectivity}"
        )
    if ndim is None and connectivity is not None:
        ndim = _CONN_NDIM[connectivity]
    if ndim is None:
        if len(seed_shape) == 2:
            ndim = 2
        elif len(seed_shape) == 4:
            ndim = 3
        elif len(seed_shape) == 3:
            raise ValueError(
                f"seeds: shape {seed_shape} is ambiguous: a batch of 2D images [B, H, W] or one 3D volume "
                "[D, H, W]; pass ndim=2 or ndim=3 (or connectivity=4/8 for 2D, 6/18/26 for 3D)"
            )
        else:
            raise ValueError(f"seeds: expected shape [H, W], [B, H, W], [D, H, W] or [B, D, H, W], got {seed_shape}")
    if len(seed_shape) not in (ndim, ndim + 1):
        names = "[H, W] or [B, H, W]" if ndim == 2 else "[D, H, W] or [B, D, H, W]"
        raise ValueError(f"seeds: expected shape {names} for ndim={ndim}, got {seed_shape}")
    if connectivity is None:
        connectivity = 4 if ndim == 2 else 6
    return ndim, connectivity


def _spatial_candidates(img_shape: tuple, n: int, lead: int) -> list:
    """The shapes of ``n`` dims the image could have without its channel axis, most likely first."""
    if len(img_shape) == n:
        return [img_shape]
    if len(img_shape) != n + 1:
        return []
    cands = []
    for a in (len(img_shape) - 1, lead):  # [..., C] or [C, ...] with few channels first
        rest = img_shape[:a] + img_shape[a + 1 :]
        if img_shape[a] <= 4 and rest not in cands:
            cands.append(rest)
    if not cands:  # no small axis: either end could hold the channels
        for a in (lead, len(img_shape) - 1):
            rest = img_shape[:a] + img_shape[a + 1 :]
            if rest not in cands:
                cands.append(rest)
    return cands


def _shape_mismatch(img_shape: tuple, seed_shape: tuple, lead: int, ref: str, ref_shape=None, to_ref=None):
    """ValueError naming ``ref`` (the seeds, or what else decides the spatial shape): the shape the
    image asks for, and the one given."""
    to_ref = to_ref or (lambda shape: shape)
    ref_shape = seed_shape if ref_shape is None else ref_shape
    cands = [to_ref(c) for c in _spatial_candidates(img_shape, len(seed_shape), lead)]
    if cands:
        want = " or ".join(str(c) for c in cands)
        return ValueError(
            f"{ref}: expected shape {want}, from the image's spatial shape (image of shape {img_shape}), "
            f"got {ref_shape}"
        )
    return ValueError(
        f"{ref}: expected the image's spatial shape (the image's shape {img_shape} with at most one channel axis, "
        f"before the spatial dims or last), got {ref_shape}"
    )


def _channel_axis(
    img_shape: tuple, seed_shape: tuple, lead: int, channel_axis, ref: str = "seeds", ref_shape=None, to_ref=None
) -> int | None:
    """The image axis holding the channels (None: no channel axis), checked against the seeds' shape.

    ``ref`` names what gave ``seed_shape`` in messages (``ref_shape``: its full shape, ``to_ref``:
    spatial shape -> the shape it should have had, when it has more axes than the spatial ones).
    """
    if channel_axis is not None:
        if not isinstance(channel_axis, (int, np.integer)) or isinstance(channel_axis, bool):
            raise TypeError(f"channel_axis: expected an int or None, got {type(channel_axis).__name__}")
        n = len(img_shape)
        if len(img_shape) != len(seed_shape) + 1 or not -n <= channel_axis < n:
            raise ValueError(
                f"channel_axis: expected an axis of an image with one axis more than the {ref} {seed_shape}, "
                f"got channel_axis={channel_axis} for an image of shape {img_shape}"
            )
        ax = int(channel_axis) % n
        rest = img_shape[:ax] + img_shape[ax + 1 :]
        if rest != seed_shape:
            want = (to_ref or (lambda shape: shape))(rest)
            raise ValueError(
                f"{ref}: expected shape {want}, from the image's spatial shape (image of shape {img_shape}, "
                f"channel_axis={channel_axis}), got {seed_shape if ref_shape is None else ref_shape}"
            )
        return ax
    if img_shape == seed_shape:
        return None
    if len(img_shape) == len(seed_shape) + 1:
        cands = sorted({a for a in (lead, len(img_shape) - 1) if img_shape[:a] + img_shape[a + 1 :] == seed_shape})
        if len(cands) == 1:
            return cands[0]
        if len(cands) == 2:
            raise ValueError(
                f"image: shape {img_shape} with {ref} of shape {seed_shape} is ambiguous: channels could be "
                f"axis {cands[0]} or axis {cands[1]}; pass channel_axis"
            )
    raise _shape_mismatch(img_shape, seed_shape, lead, ref, ref_shape, to_ref)


def _prepare(image, seeds, ndim, connectivity, channel_axis, check: bool = True):
    """Validate inputs; return x float32 [B, C, *S], seeds uint8 [B, *S] and the layout.

    ``check=False`` leaves the values alone (no finite or label checks, no conversion): x and the seeds
    keep their dtypes, for the native ops that check them in their own pass.
    """
    img = _as_image_tensor(image, "image")
    device = img.device
    s = _as_seed_tensor(seeds, device)
    seed_shape = tuple(s.shape)
    ndim, connectivity = _resolve_ndim(seed_shape, ndim, connectivity)
    batched = len(seed_shape) == ndim + 1
    lead = 1 if batched else 0
    ax = _channel_axis(tuple(img.shape), seed_shape, lead, channel_axis)
    if any(n == 0 for n in seed_shape):
        raise ValueError(f"seeds: expected a non-empty grid, got shape {seed_shape}")
    # image -> [B, C, *S] float32 (float64 is narrowed: the energy does not need it)
    x = img if ax is not None else img.unsqueeze(lead)
    if ax is not None and ax != lead:
        x = x.movedim(ax, lead)
    if not batched:
        x = x.unsqueeze(0)
    s = s if batched else s.unsqueeze(0)
    if check:
        x, s, _ = _check_values(x, s)
    return x, s, ndim, connectivity, batched, ax


def _finite_error(bad: int) -> ValueError:
    return ValueError(f"image: expected finite pixel values, got {bad} NaN or infinite value(s)")


def _labels_error(lo: int, hi: int) -> ValueError:
    return ValueError(f"seeds: expected labels 0 (unknown), 1 (object) and 2 (background), got values in [{lo}, {hi}]")


def _check_values(x, s):
    """The tensor version's checks: finite pixels, labels in {0, 1, 2}; (x float32, seeds uint8, host reads)."""
    syncs = 0
    if x.is_floating_point():
        bad = ~torch.isfinite(x)
        syncs += 1
        if bool(bad.any()):
            raise _finite_error(int(bad.sum()))
    x = x.to(torch.float32)
    lo, hi = int(s.min()), int(s.max())
    syncs += 2
    if lo < 0 or hi > 2:
        raise _labels_error(lo, hi)
    return x, s.to(torch.uint8), syncs


# ---------------------------------------------------------------------------------------------- terms
def _sq_diff(x: torch.Tensor, o) -> torch.Tensor | None:
    """``||I_p - I_{p+o}||^2`` over the nodes p whose neighbour p + o lies inside: ``[B, *S']``."""
    shape = x.shape[2:]
    if any(abs(v) >= n for v, n in zip(o, shape)):
        return None
    here, there = overlap_slices(shape, o)
    idx = (slice(None), slice(None))
    d = x[idx + here] - x[idx + there]
    d.square_()
    if d.shape[1] == 1:
        return d[:, 0]  # one channel: no second copy
    # the channels added one after the other, in channel order, as the native ops add them (a sum over
    # the channel axis may pair them otherwise: on CUDA it did for channels-last images)
    s = d[:, 0].clone()
    for c in range(1, d.shape[1]):
        s.add_(d[:, c])
    return s


def estimate_sigma(x: torch.Tensor) -> torch.Tensor:
    """Per-image contrast scale: root mean square colour difference over axis-aligned neighbours.

    The squared differences are summed exactly, as integers (see :func:`_sigma_sums`), so the value
    does not depend on the order of the sum: a volume split into parts (:func:`torchcut.distributed.segment`)
    gets the same bits.

    Parameters
    ----------
    x : torch.Tensor
        float ``[B, C, *S]`` (batch, channels, 2 or 3 spatial dims).

    Returns
    -------
    torch.Tensor
        float32 ``[B]``; 1 for a constant image.

    Examples
    --------
    >>> x = torch.tensor([[[[0., 2.], [0., 2.]]]])
    >>> estimate_sigma(x)
    tensor([1.4142])
    """
    nd = x.dim() - 2
    exps = _sigma_exponents(x.amin(tuple(range(2, x.dim()))), x.amax(tuple(range(2, x.dim()))))
    sums, count = [0] * x.shape[0], 0
    for axis in range(nd):
        s, n = _sigma_sums(x, tuple(1 if i == axis else 0 for i in range(nd)), exps)
        sums = [a + b for a, b in zip(sums, s)]
        count += n
    return _sigma_value(sums, count, exps, x.device)


# Squared differences are summed as integers in units of 2**e, e chosen per image so that every term
# is below 2**SIGMA_BITS units: a chunk of CHUNK rounded terms sums exactly in float64 (below 2**53, in
# any order), and the chunk sums are added as Python ints. Exact sums do not depend on their order.
SIGMA_BITS = 30


def _sigma_exponents(lo, hi) -> list:
    """Per image, the exponent ``e`` of the unit ``2**e`` of the exact sums (None: constant image).

    ``lo``, ``hi``: ``[B, C]`` colour range of each image (over the whole volume), tensors or host
    arrays (read as Python numbers, exact). No squared difference exceeds ``M = sum_c (hi_c - lo_c)**2``;
    the unit makes ``2 M`` less than ``2**SIGMA_BITS`` units.
    """
    out = []
    for row_lo, row_hi in zip(lo.tolist(), hi.tolist()):
        m = sum((b - a) ** 2 for a, b in zip(row_lo, row_hi))
        out.append(math.frexp(2.0 * m)[1] - SIGMA_BITS if 0 < m < math.inf else None)
    return out


def _sigma_sums(x: torch.Tensor, o, exps) -> tuple:
    """Per image, the sum of ``||I_p - I_{p+o}||^2`` in units of ``2**exps[b]``, each term rounded to
    an integer (Python ints), and the number of pairs per image."""
    B = x.shape[0]
    d2 = _sq_diff(x, o)
    if d2 is None:
        return [0] * B, 0
    flat = d2.reshape(B, -1)
    units = [0.0 if e is None else 2.0**-e for e in exps]
    # scaling by a power of two is exact in float32 while the unit is a normal float32
    wide = any(u != 0 and not 2.0**-126 <= u <= 2.0**127 for u in units)
    unit = torch.tensor(units, dtype=torch.float64 if wide else torch.float32, device=x.device).unsqueeze(1)
    parts = []
    for a in range(0, flat.shape[1], CHUNK):
        part = flat[:, a : a + CHUNK]
        q = (part.to(torch.float64) if wide else part).mul(unit).round_()
        parts.append(q.sum(1, dtype=torch.float64))
    # one copy to the host; integral float64 chunk sums, added as Python ints
    # (a squared difference beyond the float32 range makes the sum infinite, as a float sum would)
    sums = [sum(int(v) if math.isfinite(v) else math.inf for v in col) for col in zip(*torch.stack(parts).tolist())]
    return sums, flat.shape[1]


def _sigma_floats(sums, count: int, exps) -> np.ndarray:
    """float32 ``[B]`` on the host: ``sqrt(sums[b] * 2**exps[b] / count)`` from exact integers, 1 where
    that is 0."""
    out = []
    for s, e in zip(sums, exps):
        if s == math.inf:
            mean = math.inf
        else:
            mean = 0.0 if e is None or count == 0 or s == 0 else float(Fraction(s) * Fraction(2) ** e / count)
        out.append(math.sqrt(mean) if mean > 0 else 1.0)
    return np.asarray(out, dtype=np.float32)


def _sigma_value(sums, count: int, exps, device) -> torch.Tensor:
    """:func:`_sigma_floats` as a tensor on ``device``."""
    return _to_device(_sigma_floats(sums, count, exps), device)


def _sigma_coef(sig: np.ndarray) -> np.ndarray:
    """float32 ``[2, B]``: ``sig`` and the exponent's coefficient ``-0.5 / sig**2``, rounded as torch's
    float32 ops round ``-0.5 / sig.square()`` (a square, a reciprocal, an exact product by -0.5)."""
    with np.errstate(over="ignore", divide="ignore", under="ignore"):
        coef = (np.float32(1) / (sig * sig)) * np.float32(-0.5)
    return np.stack([sig, coef.astype(np.float32)])


def _to_device(a: np.ndarray, device) -> torch.Tensor:
    """A host array as a tensor on ``device``: one copy, not waited for on a GPU."""
    t = torch.from_numpy(np.ascontiguousarray(a))
    return t if torch.device(device).type == "cpu" else t.to(device, non_blocking=True)


def _default_bins(channels: int) -> int:
    # Colour (3 channels): 32 levels. Mean IoU with 20-px trimaps on the GrabCut set, 4-connected,
    # levels 8/16/32/64: 0.858/0.880/0.885/0.881 on its even half, 0.883/0.909/0.918/0.914 on the odd.
    if channels == 3:
        return 32
    b = int(math.floor(4096 ** (1.0 / channels) + 1e-6))
    return max(2, min(64, b))


def _smooth_hist(h: torch.Tensor, channels: int) -> torch.Tensor:
    """``[1, 2, 1] / 4`` blur along each of the trailing ``channels`` axes (zero outside)."""
    for axis in range(h.dim() - channels, h.dim()):
        n = h.shape[axis]
        if n < 2:
            continue
        out = h * 0.5
        out.narrow(axis, 1, n - 1).add_(h.narrow(axis, 0, n - 1), alpha=0.25)
        out.narrow(axis, 0, n - 1).add_(h.narrow(axis, 1, n - 1), alpha=0.25)
        h = out
    return h


# The largest float32: sigma is used in float32.
FLOAT32_MAX = float(np.finfo(np.float32).max)

# Nodes per chunk of the data term: its temporaries (bin indices, log ratios) stay this small.
CHUNK = 1 << 22


def _bin_index(flat: torch.Tensor, lo, span, bins: int) -> torch.Tensor:
    """Colour bin of each node of ``flat`` ``[B, C, n]``: int64 ``[B, n]``."""
    idx = torch.zeros((flat.shape[0], flat.shape[2]), dtype=torch.int64, device=flat.device)
    for c in range(flat.shape[1]):
        q = ((flat[:, c] - lo[:, c]) / span[:, c] * bins).floor_().clamp_(0, bins - 1)
        idx.mul_(bins).add_(q.to(torch.int64))
    return idx


def _log_ratio_table(x: torch.Tensor, s: torch.Tensor, bins: int, reduce=None):
    """``log P(c | object) - log P(c | background)`` per colour bin ``c``: (float32 ``[B, bins**C]``, lo, span).

    Also checks that every image has object and background seeds. Nodes are read in chunks of
    ``CHUNK``, so no full-size temporary is made. ``reduce(tensor, op)`` (op "min", "max" or "sum"),
    when given, combines the colour range and the seed histograms with the other parts of the same
    volume (see :func:`torchcut.distributed.segment`).
    """
    B, C = x.shape[:2]
    dev = x.device
    flat = x.reshape(B, C, -1)
    N = flat.shape[2]
    lo = flat.amin(2, keepdim=True)
    hi = flat.amax(2, keepdim=True)
    if reduce is not None:
        lo, hi = reduce(lo, "min"), reduce(hi, "max")
    span = torch.where(hi > lo, hi - lo, torch.ones_like(hi))
    nb = bins**C
    lab = s.reshape(B, -1)
    base = (torch.arange(B, device=dev) * (2 * nb)).unsqueeze(1)
    counts = torch.zeros(2 * B * nb + 1, dtype=torch.int32, device=dev)
    for a in range(0, N, CHUNK):
        part = lab[:, a : a + CHUNK]
        slot = _bin_index(flat[:, :, a : a + CHUNK], lo, span, bins)
        slot.add_((part == 2).to(torch.int64).mul_(nb)).add_(base)  # object: first half, background: second
        slot.masked_fill_(part == 0, 2 * B * nb)  # unlabelled pixels go to a spare slot
        counts.scatter_add_(0, slot.reshape(-1), torch.ones(1, dtype=torch.int32, device=dev).expand(slot.numel()))
        del slot
    if reduce is not None:
        counts = reduce(counts, "sum")
    hist = counts[:-1].view(B, 2, nb)
    n_seeds = hist.sum(2)  # [B, 2]
    missing = (n_seeds == 0).nonzero().tolist()
    if missing:
        raise _missing_error(*missing[0], B)
    return _table(hist, bins, C), lo, span


def _missing_error(b: int, k: int, B: int) -> ValueError:
    which = "object (label 1)" if k == 0 else "background (label 2)"
    where = f" in batch item {b}" if B > 1 else ""
    return ValueError(f"seeds: expected at least one {which} seed{where}, got none")


def _table(hist: torch.Tensor, bins: int, C: int) -> torch.Tensor:
    """The log ratios (float32 ``[B, nb]``) of the seed histograms ``hist`` (int32 ``[B, 2, nb]``)."""
    B, _, nb = hist.shape
    h = hist.to(torch.float32).view((B * 2,) + (bins,) * C)
    h = _smooth_hist(h, C).reshape(B, 2, nb)
    p = h / h.sum(2, keepdim=True)
    p = p.mul_(1 - UNIFORM_WEIGHT).add_(UNIFORM_WEIGHT / nb)
    logp = p.log_()
    return logp[:, 0] - logp[:, 1]


def _data_caps(x, s, bins, scale, hard, reduce=None, seeds_hard=True):
    """Terminal capacities of the data term and the seeds: (source int64, sink int32), ``[B, *S]``.

    Written chunk by chunk straight into their final tensors (int64 source: the GridGraph layout).
    ``seeds_hard=False``: the seeds shape the histograms only; every node keeps its data term.
    """
    table, lo, span = _log_ratio_table(x, s, bins, reduce)
    B, C = x.shape[:2]
    flat = x.reshape(B, C, -1)
    lab = s.reshape(B, -1)
    source = torch.empty(s.shape, dtype=torch.int64, device=x.device)
    sink = torch.empty(s.shape, dtype=torch.int32, device=x.device)
    src_f, snk_f = source.view(B, -1), sink.view(B, -1)
    for a in range(0, flat.shape[2], CHUNK):
        part = lab[:, a : a + CHUNK]
        llr = torch.gather(table, 1, _bin_index(flat[:, :, a : a + CHUNK], lo, span, bins))
        src = (llr.clamp(min=0) * scale).round_()
        snk = (llr.neg_().clamp_(min=0) * scale).round_()
        del llr
        if seeds_hard:
            obj, bkg = part == 1, part == 2
            src.masked_fill_(obj, hard).masked_fill_(bkg, 0)
            snk.masked_fill_(bkg, hard).masked_fill_(obj, 0)
        src_f[:, a : a + CHUNK] = src  # integral floats: the conversion is exact
        snk_f[:, a : a + CHUNK] = snk
    return source, sink


# ---------------------------------------------------------------------------------------------- graph
def _grid_graph(caps, source, sink, offsets, batched) -> GridGraph:
    """A GridGraph from capacities already in its internal layout, without the constructor's copies.

    ``GridGraph(source, sink, edges, offsets)`` widens every capacity to int64 and checks sums, which
    for a segmentation energy is known in advance: n-links are symmetric, non-negative int32 with
    pair sums at most ``hard`` (int32), terminal capacities at most ``hard``, so every total stays far
    below 2**62 for any grid that fits in memory. This builds the same object (the test suite checks
    it against the constructor attribute by attribute) with int32 ``caps`` and ``sink`` and int64
    ``source``, the dtypes the constructor picks for these values.
    """
    offsets = tuple(tuple(int(v) for v in o) for o in offsets)
    return GridGraph._from_layout(
        caps.contiguous(), source.to(torch.int64).contiguous(), sink.to(caps.dtype).contiguous(), offsets, batched
    )


def segmentation_graph(
    image,
    seeds,
    *,
    lam: float = DEFAULT_LAM,
    sigma: float | None = None,
    connectivity: int | None = None,
    ndim: int | None = None,
    channel_axis: int | None = None,
    bins: int | None = None,
    scale: float | None = None,
    spacing=None,
    reduce=None,
) -> GridGraph:
    """The Boykov-Jolly graph of a seeded segmentation: integer capacities on the image's device.

    See the module documentation for the energy, the quantization and how shapes are read.

    Parameters
    ----------
    image : torch.Tensor, numpy.ndarray or PIL.Image.Image
        Gray ``[*S]`` or with one channel axis (``[C, *S]`` or ``[*S, C]``), optionally batched
        ``[B, ...]``; ``S`` is ``(H, W)`` or ``(D, H, W)``. Integer or floating point, finite.
    seeds : torch.Tensor, numpy.ndarray or PIL.Image.Image
        Integer labels shaped ``[*S]`` or ``[B, *S]``: 0 unknown, 1 object, 2 background (the
        convention of ``skimage.segmentation.random_walker``). Every image needs at least one object
        and one background seed.
    lam : float
        Weight of the smoothness term (>= 0). Larger: shorter, smoother boundaries.
    sigma : float, optional
        Contrast scale of the smoothness term, in the units of the image's values. Default: estimated
        per image (root mean square neighbour difference).
    connectivity : int, optional
        4 or 8 (2D), 6, 18 or 26 (3D). Default 4 in 2D, 6 in 3D.
    ndim : int, optional
        Number of spatial dimensions, 2 or 3; needed for 3-dimensional seeds unless ``connectivity``
        tells it.
    channel_axis : int, optional
        The image's channel axis, for images with one more axis than the seeds when the shapes alone
        do not tell it.
    bins : int, optional
        Histogram levels per channel. Default: 64 for one channel, 64 for two, 32 for three, 8 for four.
    scale : float, optional
        Integer capacity units per energy unit. Default ``1024 / max(lam, 1)``.
    spacing : sequence of float, optional
        Physical size of a pixel or voxel along each spatial axis (e.g. ``(2.5, 0.7, 0.7)`` for a CT
        volume with thick slices); ``dist(p, q)`` in the smoothness term is measured in these units,
        divided by the smallest spacing (so the default, isotropic, has distance 1 between axis
        neighbours).
    reduce : callable, optional
        ``reduce(tensor, op)`` with op "min", "max" or "sum": combines the colour range and the seed
        histograms over the processes that hold parts of one volume (used by
        :func:`torchcut.distributed.segment`); default: this image alone.

    Returns
    -------
    GridGraph
        Batched exactly when the seeds are; ``graph.energy`` holds an :class:`EnergyInfo`.

    Raises
    ------
    TypeError
        An input of the wrong type or dtype (e.g. boolean or float seeds).
    ValueError
        Shapes that do not match or are ambiguous, labels outside {0, 1, 2}, an image without object
        or background seeds, non-finite pixels, or capacities that would not fit in int32.

    Examples
    --------
    >>> import torch, torchcut
    >>> image = torch.tensor([[0., 0., 9., 9.]] * 3)
    >>> seeds = torch.zeros(3, 4, dtype=torch.uint8)
    >>> seeds[1, 0], seeds[1, 3] = 1, 2
    >>> g = torchcut.segmentation_graph(image, seeds, lam=1.0)
    >>> g.shape, g.caps.dtype, g.energy.hard
    ((3, 4), torch.int32, 4097)
    >>> torchcut.maxflow(g).mask.int().tolist()
    [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]]
    """
    return _build(image, seeds, lam, sigma, connectivity, ndim, channel_axis, bins, scale, spacing, reduce, True)


def _reference_graph(
    image,
    seeds,
    *,
    lam: float = DEFAULT_LAM,
    sigma=None,
    connectivity=None,
    ndim=None,
    channel_axis=None,
    bins=None,
    scale=None,
    spacing=None,
    reduce=None,
) -> GridGraph:
    """:func:`segmentation_graph` built by tensor ops alone: the specification of the native ops, which
    must give the same capacities bit for bit (the tests compare the two)."""
    return _build(image, seeds, lam, sigma, connectivity, ndim, channel_axis, bins, scale, spacing, reduce, False)


def _native_ops(device: torch.device, channels: int) -> bool:
    """Whether the compiled seg_ ops can build this energy: a CPU or CUDA image of at most
    ``NATIVE_MAX_CHANNELS`` channels, and a compiled library that holds them."""
    if channels > NATIVE_MAX_CHANNELS or device.type not in ("cpu", "cuda"):
        return False
    if device.type not in _NATIVE:
        from . import _ops

        _NATIVE[device.type] = _ops.has_kernels(device.type, "seg_check", "seg_hist", "seg_energy")
    return _NATIVE[device.type]


def _energy_params(lam, bins, scale, spacing, B, C, ndim, connectivity, shape):
    """segmentation_graph's parameters, checked against the sizes alone (not the values):
    ``(bins, scale, offsets, dists, hard)``."""
    if bins is None:
        bins = _default_bins(C)
    elif isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins: expected a positive int, got {bins!r}")
    bins = int(bins)
    if bins**C > MAX_BINS_TOTAL:
        raise ValueError(
            f"bins: {bins} levels for {C} channels make {bins**C} histogram bins, above the limit "
            f"{MAX_BINS_TOTAL}; pass a smaller bins"
        )
    if scale is None:
        scale = SCALE_UNITS / max(float(lam), 1.0)
    scale = float(scale)
    offsets = grid_offsets(ndim, connectivity)
    if spacing is None:
        spacing = (1.0,) * ndim
    else:
        try:
            spacing = tuple(float(v) for v in spacing)
        except (TypeError, ValueError):
            raise ValueError(f"spacing: expected {ndim} positive numbers, got {spacing!r}") from None
        if len(spacing) != ndim or not all(math.isfinite(v) and v > 0 for v in spacing):
            raise ValueError(
                f"spacing: expected {ndim} positive finite numbers (one per spatial axis), got {spacing!r}"
            )
    unit = min(spacing)
    dists = [math.sqrt(sum((v * h / unit) ** 2 for v, h in zip(o, spacing))) for o in offsets]
    top = [round(lam * scale / d) for d in dists]  # largest capacity of each n-link
    hard = 1 + 2 * sum(top)
    if hard > INT32_MAX:
        raise ValueError(
            f"scale: lam * scale = {lam * scale:g} makes the seed capacity {hard} exceed the int32 range "
            f"{INT32_MAX}; pass a smaller scale"
        )
    # The data term is bounded by the uniform mixture: |log ratio| <= log(1 + nb (1 - u) / u).
    nb = bins**C
    data_top = math.ceil(math.log1p(nb * (1 - UNIFORM_WEIGHT) / UNIFORM_WEIGHT) * scale)
    if data_top > INT32_MAX:
        raise ValueError(
            f"scale: the data term can reach {data_top} integer units at scale {scale:g}, beyond the int32 "
            f"range {INT32_MAX}; pass a smaller scale"
        )
    # Flows are summed in int64 without further checks: bound every total by the capacities' maxima.
    bound = B * math.prod(shape) * (2 * max(hard, data_top) + 2 * sum(top))
    if bound >= SUM_LIMIT:
        raise ValueError(
            f"scale: {B * math.prod(shape)} nodes with capacities up to {max(hard, data_top)} could sum to "
            f"2**62 or more (int64 flows); pass a smaller scale"
        )

    return bins, scale, offsets, dists, hard


def _build(image, seeds, lam, sigma, connectivity, ndim, channel_axis, bins, scale, spacing, reduce, native):
    """segmentation_graph; ``native``: by the compiled ops where they apply."""
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not math.isfinite(lam) or lam < 0:
        raise ValueError(f"lam: expected a finite number >= 0, got {lam!r}")
    if sigma is not None and (
        isinstance(sigma, bool)
        or not isinstance(sigma, (int, float))
        or not math.isfinite(sigma)
        or sigma <= 0
        or sigma > FLOAT32_MAX
    ):
        raise ValueError(f"sigma: expected a finite number > 0 (at most {FLOAT32_MAX:.4g}) or None, got {sigma!r}")
    if scale is not None and (
        isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0
    ):
        raise ValueError(f"scale: expected a finite number > 0 or None, got {scale!r}")
    x, s, ndim, connectivity, batched, ax = _prepare(image, seeds, ndim, connectivity, channel_axis, check=False)
    B, C = x.shape[:2]
    shape = tuple(x.shape[2:])
    dev = x.device
    native = native and reduce is None and _native_ops(dev, C)
    if native:  # queued on a CUDA device: the parameters below are worked out while the checks run
        pending = _native_check_launch(x, s)
    else:
        x, s, syncs = _check_values(x, s)
    try:
        bins, scale, offsets, dists, hard = _energy_params(lam, bins, scale, spacing, B, C, ndim, connectivity, shape)
    except ValueError:
        if native:
            _native_check_read(*pending)  # the values' errors first, as where the checks come first
        raise
    if native:
        x, s, info, vals, syncs = _native_check_read(*pending)

    if native:
        source, sink, caps, sig, n = _native_terms(
            x, s, info, vals, shape, bins, scale, hard, lam, sigma, offsets, dists
        )
        syncs += n
    else:
        source, sink, caps, sig, n = _reference_terms(x, s, bins, scale, hard, lam, sigma, offsets, dists, reduce)
        syncs += n
    graph = _grid_graph(caps, source, sink, offsets, batched)
    graph.energy = EnergyInfo(
        lam=float(lam),
        sigma=sig,
        scale=scale,
        hard=hard,
        bins=bins,
        channels=C,
        connectivity=connectivity,
        ndim=ndim,
        channel_axis=ax,
        syncs=syncs,
    )
    return graph


def model_terms(image, seeds, graph: GridGraph):
    """The data term of ``graph`` (built by :func:`segmentation_graph` from ``image`` and ``seeds``)
    without the seeds' hard constraints: (source int64, sink int32), shaped as ``graph.source``.

    Every node gets the capacities an unseeded node of that colour has in ``graph``: the seeds shape
    the colour histograms only. :class:`torchcut.Segmenter` keeps them to re-apply the hard
    constraints of later seeds on a fixed appearance model. Built by the tensor ops (the same values
    as the native ops, bit for bit).

    Examples
    --------
    >>> import torch, torchcut
    >>> from torchcut.energy import model_terms
    >>> img, seeds = torch.tensor([[0., 0., 9., 9.]]), torch.tensor([[1, 0, 0, 2]])
    >>> g = torchcut.segmentation_graph(img, seeds, lam=1.0)
    >>> src, snk = model_terms(img, seeds, g)
    >>> g.source.tolist(), src.tolist()          # the seeds' hard capacity 4097 gives way to the data term
    ([[[4097, 8549, 0, 0]]], [[[8549, 8549, 0, 0]]])
    """
    info = graph.energy
    x, s, *_ = _prepare(image, seeds, info.ndim, info.connectivity, info.channel_axis)
    source, sink = _data_caps(x, s, info.bins, info.scale, info.hard, seeds_hard=False)
    return source.view(graph.source.shape), sink.view(graph.source.shape)


def _reference_terms(x, s, bins, scale, hard, lam, sigma, offsets, dists, reduce):
    """The capacities by tensor ops: (source, sink, caps, sigma, host reads)."""
    B = x.shape[0]
    shape = tuple(x.shape[2:])
    ndim = len(shape)
    dev = x.device
    # data term
    source, sink = _data_caps(x, s, bins, scale, hard, reduce)
    syncs = 1  # the seed counts

    # smoothness term, written straight into the solver layout (see _grid_graph)
    if sigma is None:
        sig = estimate_sigma(x)
        syncs += 2 + ndim  # the colour range, one sum per axis
    else:
        sig = torch.full((B,), float(sigma), dtype=torch.float32, device=dev)
    coef = (-0.5 / sig.square()).view((B,) + (1,) * ndim)
    K = len(offsets)
    caps = torch.zeros((B, 2 * K) + shape, dtype=torch.int32, device=dev)
    if lam > 0:
        for k, (o, d) in enumerate(zip(offsets, dists)):
            d2 = _sq_diff(x, o)
            if d2 is None:
                continue
            here, there = overlap_slices(shape, o)
            w = d2.mul_(coef).exp_().mul_(lam * scale / d).round_()  # integral: copied exactly into int32
            caps[(slice(None), k) + here] = w  # arc p -> p + o, stored at p
            caps[(slice(None), K + k) + there] = w  # arc p + o -> p, stored at p + o (direction -o)
            del d2, w
    return source, sink, caps, sig, syncs


# ---------------------------------------------------------------------------------------------- native ops
#: The log-ratio tables of the native path on CUDA, as CUDA graphs by (counts shape, bins, channels).
_TABLES = GraphCache(entries=8)
#: Channels the native ops take (they add the squared differences of the channels in channel order, as
#: the tensor version does; more channels are built by the tensor version).
NATIVE_MAX_CHANNELS = 4
# device type -> whether the compiled seg_ ops are there
_NATIVE: dict[str, bool] = {}
# int64 sums of the sigma estimate hold 2**33 terms below 2**30 units; larger images take the tensor version
_SIGMA_TERMS = 2**33
# The native terms of a CPU image in one call (torch.ops.torchcut.seg_terms) where the library has it;
# False: op by op (tests, A/B).
_FUSED = True
_FUSED_DEVICES = ("cpu",)


# CUDA images whose seed counts keep the histograms' blur exact in float32 (below 2^(24 - 2C) per image and
# class, at most 4 channels) take seg_terms too, its table by one kernel (torch.ops.torchcut.seg_table: the
# same values as the tensor operations). False: the op-by-op path (tests, A/B).
_CUDA_TABLE = True


@functools.cache
def _fused_op() -> bool:
    """Whether the loaded library has seg_terms (a library built before it has not)."""
    return hasattr(torch.ops.torchcut, "seg_terms")


@functools.cache
def _has_table_kernel() -> bool:
    from . import _ops

    return _ops.has_kernels("cuda", "seg_table")


def _table_kernel(C: int, most: int) -> bool:
    """Whether seg_table's kernel takes the table of ``C`` channels with at most ``most`` seeds of a class."""
    return C <= 4 and most < 1 << (24 - 2 * C) and _has_table_kernel()


# sigma from those sums by torch.ops.torchcut.seg_sigma on the sums' device: the same float32 bits as
# _sigma_floats and _sigma_coef on the host, which need the sums read back (one wait for a CUDA device).
# Float32 colour ranges keep the unit's exponent within +-330, inside the op's +-900. False: the host's
# (tests, A/B).
_SIGMA_OP = True


def _native_check_launch(x, s):
    """Queue the checks in one pass (torch.ops.torchcut.seg_check), nothing read yet: the arguments of
    :func:`_native_check_read`."""
    B, C = x.shape[:2]
    syncs = 0
    finite = x.is_floating_point()
    if finite and x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        # values beyond the float32 range: checked as given, as the tensor version does
        bad = ~torch.isfinite(x)
        syncs += 1
        if bool(bad.any()):
            raise _finite_error(int(bad.sum()))
        finite = False
    if x.dtype == torch.float32 and x.is_contiguous():
        xf = x.reshape(B, C, -1)
    else:  # one pass: the conversion and the move of the channel axis (a copy, the caller's image is kept)
        xf = torch.empty(x.shape, dtype=torch.float32, device=x.device).copy_(x).view(B, C, -1)
    sv = s.reshape(B, -1)
    if sv.dtype not in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
        sv = sv.to(torch.int64)  # torch's wide unsigned types
    if not sv.is_contiguous():
        sv = sv.contiguous()
    info, s8 = torch.ops.torchcut.seg_check(xf, sv, finite)
    return xf, sv, info, s8, syncs


def _native_check_read(xf, sv, info, s8, syncs):
    """Read the checks back (the one wait) and raise their errors: (x float32 [B, C, N], seeds uint8
    [B, N], info on the device, info on the host, host reads)."""
    vals = info.tolist()  # the one read of the checks
    syncs += 1
    if vals[0]:
        raise _finite_error(vals[0])
    if vals[1] < 0 or vals[2] > 2:
        raise _labels_error(vals[1], vals[2])
    return xf, (sv if s8.numel() == 0 else s8), info, vals, syncs


def _native_terms(x, s, info, vals, shape, bins, scale, hard, lam, sigma, offsets, dists):
    """The capacities by the native ops: (source, sink, caps, sigma, host reads). ``x``, ``s``, ``info``,
    ``vals``: what :func:`_native_check_read` returned."""
    B, C = x.shape[:2]
    dev = x.device
    nd = len(shape)
    syncs = 0
    for b in range(B):
        for k in range(2):
            if vals[3 + 2 * b + k] == 0:
                raise _missing_error(b, k, B)
    # the colour range, read back with the checks: lo and span are worked out here, in float32 as the
    # reference's tensor ops round them, and go to the device in one copy
    host = np.asarray(vals[3 + 2 * B :], dtype=np.int64).astype(np.int32).view(np.float32).reshape(2, B, C)
    lo_h, hi_h = host[0], host[1]
    span_h = np.where(hi_h > lo_h, hi_h - lo_h, np.float32(1))
    sums = sigma is None and 3 * math.prod(shape) < _SIGMA_TERMS
    units, wide, exps = [0.0] * B, False, None
    if sums:
        exps = _sigma_exponents(lo_h, hi_h)
        units = [0.0 if e is None else 2.0**-e for e in exps]
        wide = any(u != 0 and not 2.0**-126 <= u <= 2.0**127 for u in units)
    count = sum(math.prod(n - (i == a) for i, n in enumerate(shape)) for a in range(nd)) if sums else 0
    e_in = [0 if e is None else e for e in exps] if sums else []  # a constant image sums to 0: sigma 1 either way
    weights = [lam * scale / d for d in dists] if lam > 0 else [0.0] * len(dists)
    flat = [int(v) for o in offsets for v in o]
    most = max(vals[3 : 3 + 2 * B])  # the largest seed count of an image and class
    here = dev.type in _FUSED_DEVICES or (dev.type == "cuda" and _CUDA_TABLE and B <= 65535 and _table_kernel(C, most))
    if _FUSED and here and (sigma is not None or (sums and _SIGMA_OP)) and _fused_op():
        # the steps below in one call (csrc/seg_terms.cpp: the same ops, the same values); on CUDA where its
        # table is one kernel (seg_table), not the dozen ops that the op-by-op path replays as a CUDA graph
        given = [] if sums else _sigma_coef(np.full(B, sigma, dtype=np.float32)).ravel().tolist()
        source, sink, caps, sig = torch.ops.torchcut.seg_terms(
            x, s, lo_h.ravel().tolist(), span_h.ravel().tolist(), bins, units, wide, list(shape), sums, e_in,
            count, given, UNIFORM_WEIGHT, scale, hard, flat, weights, most,
        )  # fmt: skip
        return source, sink, caps, sig, syncs
    lo, span = _to_device(np.stack([lo_h, span_h]), dev)
    counts, total = torch.ops.torchcut.seg_hist(x, s, lo, span, bins, units, wide, list(shape), sums)
    # the table's dozen small ops, replayed as one CUDA graph once a shape comes back (the same kernels:
    # the same values bit for bit); eager on the CPU
    table = _TABLES.run(("table", tuple(counts.shape), bins, C), lambda h: (_table(h, bins, C),), (counts,))[0]
    if sums:
        if _SIGMA_OP:
            sig, coef = torch.ops.torchcut.seg_sigma(total, e_in, count)  # where the sums are: no read back
        else:
            got = total.tolist()
            syncs += 1
            sig, coef = _to_device(
                _sigma_coef(_sigma_floats([math.inf if f else v for v, f in zip(*got)], count, exps)), dev
            )
    elif sigma is None:
        sig = estimate_sigma(x.view((B, C) + tuple(shape)))
        syncs += 2 + nd
        coef = -0.5 / sig.square()
    else:
        sig, coef = _to_device(_sigma_coef(np.full(B, sigma, dtype=np.float32)), dev)  # sigma <= FLOAT32_MAX
    source, sink, caps = torch.ops.torchcut.seg_energy(
        x, s, table, lo, span, coef, bins, scale, hard, list(shape), flat, weights
    )
    return source, sink, caps, sig, syncs


def to_pymaxflow(graph: GridGraph, index: int = 0):
    """The same integer network as a PyMaxflow graph (to compare with, or solve by, PyMaxflow).

    Works for any :class:`~torchcut.GridGraph`, not only segmentation graphs. Capacities are copied to
    the CPU; PyMaxflow's ``Graph[int]`` holds 32-bit capacities, which the int32 layout guarantees, but
    its flow is also 32-bit: for networks whose flow could exceed ``2**31 - 1`` use ``Graph[float]``
    (exact up to 2**53) by passing a float graph yourself.

    Parameters
    ----------
    graph : GridGraph
        The network.
    index : int
        Which batch item.

    Returns
    -------
    (maxflow.Graph, numpy.ndarray)
        The graph and its grid of node ids. PyMaxflow's ``get_grid_segments(ids)`` is True on the
        *sink* side: ``~segments`` is torchcut's mask.

    Examples
    --------
    >>> import torch, torchcut
    >>> image = torch.tensor([[0., 0., 9., 9.]] * 3)
    >>> seeds = torch.tensor([[0, 0, 0, 0], [1, 0, 0, 2], [0, 0, 0, 0]])
    >>> g = torchcut.segmentation_graph(image, seeds)
    >>> pg, ids = to_pymaxflow(g)
    >>> pg.maxflow() == torchcut.maxflow(g).flow_value
    True
    >>> (~pg.get_grid_segments(ids)).astype(int).tolist()  # one minimum cut; ties may differ
    [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]]
    """
    import maxflow  # PyMaxflow, an optional dependency

    K = len(graph.offsets)
    nd = graph.ndim
    caps = graph.caps[index].to(torch.int64).cpu().numpy()
    pg = maxflow.Graph[int]()
    ids = pg.add_grid_nodes(graph.shape)
    for k, o in enumerate(graph.offsets):
        for slot, sign in ((k, 1), (K + k, -1)):  # arc p -> p + o, then arc p -> p - o
            structure = np.zeros((3,) * nd, dtype=np.int64)
            structure[tuple(1 + sign * v for v in o)] = 1
            pg.add_grid_edges(ids, weights=caps[slot], structure=structure, symmetric=False)
    pg.add_grid_tedges(ids, graph.source[index].cpu().numpy(), graph.sink[index].to(torch.int64).cpu().numpy())
    return pg, ids
