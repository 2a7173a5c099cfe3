"""GrabCut: iterated Gaussian-mixture colour models around a graph cut (Rother, Kolmogorov, Blake 2004).

Each class (object, background) has a mixture of ``components`` Gaussians with full covariance. One
iteration (i) gives every pixel the component of its current class that explains its colour best,
(ii) re-fits the mixtures to those assignments and (iii) cuts the graph

.. math::

    E(x) = \\sum_p -\\log p(I_p \\mid x_p) + \\lambda \\sum_{(p, q)} \\frac{[x_p \\ne x_q]}{\\mathrm{dist}(p, q)}
           \\exp(-\\beta \\lVert I_p - I_q \\rVert^2),
    \\qquad \\beta = \\frac{1}{2 \\langle \\lVert I_p - I_q \\rVert^2 \\rangle},

with the seeds as hard constraints; the mean in ``beta`` runs over all neighbour pairs of the image
(as in OpenCV's ``grabCut``). The first iteration takes its assignments from k-means instead (Lloyd
iterations in torch, started from luminance quantiles: deterministic, the same on every device). The
first models are fitted to the seeds alone when the image has both kinds of seeds; a class without
seeds (the object, from a box) starts from all unknown pixels. An image's iterations end as soon as
its mask no longer changes, or when a cut would leave it without object pixels (it keeps its last
mask); the others go on. All of it is batched tensor work on the image's device; the cut is a
:class:`~torchcut.GridGraph` solved by :func:`torchcut.maxflow`.

Capacities are integers: ``round(SCALE * value)`` with ``value`` in nats, and the data term is
clipped to ``DATA_CAP`` nats per pixel.
"""

from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np
import torch

from ._cudagraph import GraphCache
from ._deprecate import renamed_keywords
from ._validate import describe
from .energy import _as_image_tensor, _prepare
from .grid import GridGraph, _arc_layout, grid_offsets, overlap_slices
from .solvers import maxflow
from .solvers._options import check_options, device_of
from .solvers.warm import WarmGrid

__all__ = ["grabcut", "EmptyMaskWarning"]

#: Default smoothness weight (OpenCV's gamma is 50). Chosen on the GrabCut set's tuning half (the 25
#: images at even positions of the sorted list), trimap-20 mean IoU: lam 12 0.921, 25 0.931, 50 0.921,
#: 100 0.901; box: lam 25 0.856, 50 0.848.
DEFAULT_LAM = 25.0
#: Integer capacity units per nat.
SCALE = 64.0
#: Largest data-term difference in nats (keeps capacities far inside int32).
DATA_CAP = 1000.0
#: Added to every covariance diagonal, in squared units of 1/255 of the image's range.
COV_REG = 0.1
#: Lloyd iterations of the k-means initialisation.
KMEANS_ITERS = 10
# Largest smoothness weight: keeps the hard-constraint capacity (about 14 * lam * SCALE) inside int32.
MAX_LAM = 1e6


# ---------------------------------------------------------------------------------------------- inputs
def _spatial_shape(img: torch.Tensor, channel_axis) -> tuple:
    """Spatial (+ batch) shape of an image without seeds: the shape seeds for it would have."""
    shape = tuple(img.shape)
    if channel_axis is not None:
        n = len(shape)
        if (
            isinstance(channel_axis, bool)
            or not isinstance(channel_axis, (int, np.integer))
            or not -n <= channel_axis < n
        ):
            raise ValueError(f"channel_axis: expected an axis of the image (shape {shape}), got {channel_axis!r}")
        ax = int(channel_axis) % n
        return shape[:ax] + shape[ax + 1 :]
    if len(shape) == 2:
        return shape
    if len(shape) in (3, 4):
        lead = len(shape) - 3
        first, last = shape[lead] <= 4, shape[-1] <= 4
        if first and last:  # e.g. [3, 10, 3]: 3 channels of 10 x 3, or 3 x 10 pixels of 3 channels
            raise ValueError(
                f"image: shape {shape} is ambiguous without seeds: the channels could be axis {lead} "
                f"({'[B, C, H, W]' if lead else '[C, H, W]'}) or axis {len(shape) - 1} "
                f"({'[B, H, W, C]' if lead else '[H, W, C]'}); pass channel_axis (or seeds)"
            )
        if first:
            return shape[:lead] + shape[lead + 1 :]
        if last:
            return shape[:-1]
    raise ValueError(
        f"image: expected [H, W], [C, H, W], [H, W, C], [B, C, H, W] or [B, H, W, C] with at most 4 channels "
        f"when no seeds are given, got shape {shape}; pass seeds or channel_axis"
    )


def _as_boxes(box, n: int) -> np.ndarray:
    """``box`` as a float64 array ``[n, 4]``: one box (a tensor, array or sequence of 4 numbers) for
    every image, or one box per image (``[n, 4]``, or a sequence of ``n`` boxes)."""
    if isinstance(box, torch.Tensor):
        box = box.detach().cpu().numpy()
    elif isinstance(box, (list, tuple)):
        box = [b.detach().cpu().numpy() if isinstance(b, torch.Tensor) else b for b in box]
    try:
        arr = np.asarray(box, dtype=np.float64)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.dtype.kind != "f":
        raise ValueError(f"box: expected (x0, y0, x1, y1) as 4 numbers, or one such box per image, got {box!r}")
    if arr.shape == (4,):
        arr = np.broadcast_to(arr, (n, 4))
    if arr.shape != (n, 4):
        what = "(x0, y0, x1, y1)" if n == 1 else f"(x0, y0, x1, y1) or {n} such boxes (shape ({n}, 4))"
        raise ValueError(f"box: expected {what}, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"box: expected finite coordinates, got {arr.tolist() if n > 1 else arr[0].tolist()}")
    return arr


def _clip_box(b, H: int, W: int, where: str = "") -> tuple:
    """One box ``(x0, y0, x1, y1)`` in pixel coordinates, rounded outward (floor x0, y0; ceil x1, y1)
    and clipped to the ``W x H`` image (its intersection with the image)."""
    x0, y0, x1, y1 = (float(v) for v in b)
    shown = tuple(int(v) if v.is_integer() else v for v in (x0, y0, x1, y1))
    if not (x0 < x1 and y0 < y1):
        raise ValueError(f"box: expected x0 < x1 and y0 < y1 (an empty box selects nothing), got {shown}{where}")
    c = (max(math.floor(x0), 0), max(math.floor(y0), 0), min(math.ceil(x1), W), min(math.ceil(y1), H))
    if c[2] <= c[0] or c[3] <= c[1]:
        raise ValueError(
            f"box: expected a box that overlaps the {W} x {H} image (columns 0..{W}, rows 0..{H}), got {shown}{where}"
        )
    return c


def _box_seeds(box, B: int, H: int, W: int, device, index=None) -> tuple:
    """Labels from boxes: 2 (background) outside, 0 inside; and the boxes as clipped. ``box`` is one
    box or one per image; ``index``: the image's place in a list, for messages."""
    out = torch.full((B, H, W), 2, dtype=torch.uint8)
    clipped = []
    for b, row in enumerate(_as_boxes(box, B)):
        where = f" (image {b})" if B > 1 else f" (image {index})" if index is not None else ""
        x0, y0, x1, y1 = _clip_box(row, H, W, where)
        out[b, y0:y1, x0:x1] = 0
        clipped.append((x0, y0, x1, y1))
    return out.to(device), clipped


def _check_args(max_iter, components, lam, connectivity):
    for name, v, lo in (("max_iter", max_iter, 1), ("components", components, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name}: expected an int >= {lo}, got {v!r}")
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not math.isfinite(lam) or not 0 <= lam <= MAX_LAM:
        raise ValueError(f"lam: expected a finite number in [0, {MAX_LAM:g}], got {lam!r}")
    if connectivity not in (4, 8):
        raise ValueError(f"connectivity: expected 4 or 8, got {connectivity!r}")


def _one(image, seeds, box, channel_axis, connectivity, index=None):
    """One image or one batch tensor -> x float32 [B, C, H, W], labels uint8 [B, H, W], batched, and
    the boxes as clipped to the image (None without a box)."""
    img = _as_image_tensor(image, "image")
    if seeds is None:
        if box is None:
            raise ValueError("seeds, box: expected seeds (0 unknown, 1 object, 2 background) or a box, got neither")
        if img.numel() == 0:
            raise ValueError(f"image: expected a non-empty image, got shape {tuple(img.shape)}")
        shape = _spatial_shape(img, channel_axis)
        if len(shape) not in (2, 3):
            raise ValueError(f"image: expected 2 spatial dimensions (optionally batched), got shape {tuple(img.shape)}")
        seeds = torch.zeros(shape, dtype=torch.uint8, device=img.device)
    x, s, _, _, batched, _ = _prepare(img, seeds, 2, connectivity, channel_axis)
    boxes = None
    if box is not None:
        B, H, W = s.shape
        labels, boxes = _box_seeds(box, B, H, W, s.device, index)
        s = torch.where(s == 0, labels, s)
    return x, s, batched, boxes


# ---------------------------------------------------------------------------------------------- models
def _segment_sum(values: torch.Tensor, group: torch.Tensor, groups: int) -> torch.Tensor:
    """Sums of ``values`` [B, N, F] per group: ``group`` [B, N] in 0..groups-1 (others dropped) -> [B, groups, F].

    A one-hot matrix product rather than ``index_add_``: on CUDA the atomics of ``index_add_`` add in
    a different order on every run, so the mixtures (and, through rounding, a capacity now and then)
    would change from run to run; the product is the same on every run.
    """
    onehot = (group.unsqueeze(1) == torch.arange(groups, device=group.device).view(1, groups, 1)).to(values.dtype)
    return torch.bmm(onehot, values)


def _kmeans(x: torch.Tensor, cls: torch.Tensor, K: int) -> torch.Tensor:
    """Component labels [B, N] from k-means per (image, class); ``cls`` [B, N] in {0, 1, 2 = none}."""
    B, N, C = x.shape
    dev = x.device
    # start: K quantiles of luminance within each (image, class)
    key = x.sum(2) + cls.to(x.dtype) * (4 * 256.0 * C)  # classes in separate key ranges
    order = torch.argsort(key, dim=1, stable=True)
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(N, device=dev).expand(B, N))
    counts = torch.stack([(cls == c).sum(1) for c in range(2)], 1)  # [B, 2]
    start = torch.cat([torch.zeros_like(counts[:, :1]), counts[:, :1]], 1)  # first rank of each class
    c_idx = cls.clamp(max=1)
    within = rank - start.gather(1, c_idx)
    n_cls = counts.gather(1, c_idx).clamp(min=1)
    comp = (within * K // n_cls).clamp_(0, K - 1)
    if _use_cpu_ops(x):  # the Lloyd iterations in one compiled pass per iteration (cpu_grabcut.cpp)
        return torch.ops.torchcut.grabcut_lloyd(x.contiguous(), cls.contiguous(), comp.contiguous(), K, KMEANS_ITERS)
    # per pixel: the first group of its class (2K for pixels of no class), and whether it is an object pixel
    first = torch.where(cls < 2, c_idx * K, 2 * K)
    obj = (c_idx == 0).unsqueeze(2)
    xo = torch.cat([x, torch.ones_like(x[:, :, :1])], 2).to(torch.float64)  # sums in float64 (no TF32)
    for _ in range(KMEANS_ITERS):
        sums = _segment_sum(xo, first + comp, 2 * K)  # [B, 2K, C + 1]; groups past 2K are dropped
        cnt = sums[:, :, C:]
        centres = (sums[:, :, :C] / cnt.clamp(min=1)).to(x.dtype).view(B, 2, K, C)
        empty = (cnt == 0).view(B, 2, K)
        # ||x - c||^2 - ||x||^2 for the centres of the pixel's class: [B, N, K]
        cn = centres.square().sum(3).masked_fill(empty, float("inf"))  # [B, 2, K]
        d2 = torch.baddbmm(cn.view(B, 1, 2 * K), x, centres.view(B, 2 * K, C).transpose(1, 2), alpha=-2.0)
        d2 = torch.where(obj, d2[:, :, :K], d2[:, :, K:])
        # a fixed number of iterations, no convergence test: a converged assignment stays where it is
        # (same assignments, same centres), and a test would read back once per iteration
        comp = d2.argmin(2)
    return comp


def _fit(x: torch.Tensor, cls: torch.Tensor, comp: torch.Tensor, K: int):
    """Mixture parameters per (image, class, component): log weights [B, 2, K], means [B, 2, K, C],
    inverse Cholesky factors [B, 2, K, C, C] and log normalisers [B, 2, K]."""
    B, N, C = x.shape
    dev = x.device
    G = B * 2 * K
    group = torch.where(cls < 2, cls.clamp(max=1) * K + comp, 2 * K)  # [B, N]; 2K: no class
    xd = x.to(torch.float64)
    outer = (xd.unsqueeze(3) * xd.unsqueeze(2)).reshape(B, N, C * C)
    sums = _segment_sum(torch.cat([torch.ones_like(xd[:, :, :1]), xd, outer], 2), group, 2 * K).view(G, -1)
    cnt = sums[:, 0]
    mean = sums[:, 1 : 1 + C] / cnt.clamp(min=1).unsqueeze(1)
    cov = sums[:, 1 + C :].view(G, C, C) / cnt.clamp(min=1).view(G, 1, 1) - mean.unsqueeze(2) * mean.unsqueeze(1)
    eye = torch.eye(C, dtype=torch.float64, device=dev)
    cov = torch.where(cnt.view(G, 1, 1) > 0, cov, eye) + COV_REG * eye
    L = torch.linalg.cholesky_ex(cov).L  # positive definite (COV_REG); _ex skips the error read-back
    Linv = torch.linalg.solve_triangular(L, eye.expand(G, C, C), upper=False)
    lognorm = -torch.log(torch.diagonal(L, dim1=1, dim2=2)).sum(1) - 0.5 * C * math.log(2 * math.pi)
    tot = cnt.view(B, 2, K).sum(2, keepdim=True)
    logw = torch.log(cnt.view(B, 2, K) / tot.clamp(min=1))  # -inf for empty components
    f32 = torch.float32
    return (
        logw.to(f32),
        mean.view(B, 2, K, C).to(f32),
        Linv.view(B, 2, K, C, C).to(f32),
        lognorm.view(B, 2, K).to(f32),
    )


def _component_loglik(x: torch.Tensor, params) -> torch.Tensor:
    """``log w_k + log N(x | mu_k, Sigma_k)`` for every pixel, class and component: [B, N, 2, K]."""
    logw, mean, Linv, lognorm = params
    B, N, C = x.shape
    K = logw.shape[2]
    # whitened colours y = Linv (x - mu) for all 2K components in one batched product
    A = Linv.reshape(B, 2 * K * C, C)  # rows: (component, output channel)
    shift = torch.einsum("bmdc,bmc->bmd", Linv.view(B, 2 * K, C, C), mean.view(B, 2 * K, C)).reshape(B, 1, 2 * K * C)
    y = torch.baddbmm(shift, x, A.transpose(1, 2), beta=-1.0)  # [B, N, 2K * C]
    maha = y.square_().view(B, N, 2 * K, C).sum(3)
    const = (logw + lognorm).view(B, 1, 2 * K)
    return maha.mul_(-0.5).add_(const).view(B, N, 2, K)


# ---------------------------------------------------------------------------------------------- graph
def _smoothness(x: torch.Tensor, valid: torch.Tensor, offsets, lam: float) -> torch.Tensor:
    """Integer n-link capacities [K, B, H, W] (arc p -> p + o, symmetric); pairs touching padding are 0."""
    B, C, H, W = x.shape
    d2s, total, count = (
        [],
        torch.zeros(B, dtype=torch.float64, device=x.device),
        torch.zeros(B, dtype=torch.float64, device=x.device),
    )
    for o in offsets:
        here, there = overlap_slices((H, W), o)
        idx = (slice(None), slice(None))
        d2 = (x[idx + here] - x[idx + there]).square().sum(1)
        both = valid[(slice(None),) + here] & valid[(slice(None),) + there]
        d2 = d2 * both
        total += d2.reshape(B, -1).sum(1, dtype=torch.float64)
        count += both.reshape(B, -1).sum(1, dtype=torch.float64)
        d2s.append((d2, both))
    mean = total / count.clamp(min=1)
    beta = torch.where(mean > 0, 0.5 / mean, torch.zeros_like(mean)).to(x.dtype).view(B, 1, 1)
    edges = torch.zeros((len(offsets), B, H, W), dtype=torch.int32, device=x.device)
    for k, (o, (d2, both)) in enumerate(zip(offsets, d2s)):
        here, _ = overlap_slices((H, W), o)
        w = (d2 * -beta).exp_().mul_(lam * SCALE / math.hypot(*o)).round_() * both
        edges[(k, slice(None)) + here] = w.to(torch.int32)
    return edges


def _terminals(loglik: torch.Tensor, seeds: torch.Tensor, valid: torch.Tensor, hard: int):
    """Source and sink capacities [B, H, W] from the class log-likelihoods and the hard constraints."""
    B, H, W = seeds.shape
    mix = torch.logsumexp(loglik, dim=3)  # [B, N, 2]
    diff = (mix[:, :, 0] - mix[:, :, 1]).nan_to_num(nan=0.0).clamp_(-DATA_CAP, DATA_CAP).view(B, H, W)
    # one signed capacity: > 0 to the source, < 0 to the sink (rounding is symmetric about zero)
    q = diff.mul_(SCALE).round_().to(torch.int64)
    q = torch.where(seeds == 1, hard, torch.where(seeds == 2, -hard, q)).mul_(valid)
    return q.clamp(min=0), q.neg_().clamp_(min=0)


# ---------------------------------------------------------------------------------------------- driver
class _WarmCut(WarmGrid):
    """The cuts of the iterations as one flow problem: each solve starts from the last one's flow.

    Between GrabCut iterations only the terminal arcs change; the n-links, and so every n-link flow
    of the last solve, stay valid, and :class:`~torchcut.solvers.warm.WarmGrid` re-fits each node's
    terminals around that flow (``links_changed=False``; Kohli and Torr's constants where the
    n-links carry more out of a node than its new source capacity brings in). The masks are those
    of cuts from zero flow (``warm=False``, ``grabcut(warm_start=False)``, the benchmark's baseline).
    """

    def __init__(self, caps, offsets, backend, options, warm=True, graphs=True):
        super().__init__(offsets, backend, warm, graphs, **options)
        self.base = caps  # the n-link capacities of the images still iterating, never modified

    def keep(self, keep):
        index = keep.nonzero().squeeze(1)
        super().keep(index)
        self.base = self.base.index_select(0, index)  # once here, not a gather per iteration

    def __call__(self, s, k):
        # s, k: int64 terminal capacities, already netted (``_models`` gives each node one side only)
        return self.solve(self.base, s, k, links_changed=False)


def _models(x, cls, loglik, seeds, valid, K: int, hard: int):
    """One iteration's colour models: (log-likelihoods [B, N, 2, K], source, sink capacities).

    Components from k-means when ``loglik`` is None (the first iteration), otherwise each pixel's
    best component of its class under the last models; then the fit, the log-likelihoods and the
    terminal capacities. No read-back: it can be captured into a CUDA graph.
    """
    if loglik is None:
        comp = _kmeans(x, cls, K)
    else:
        c_idx = cls.clamp(max=1)
        comp = torch.where(c_idx.unsqueeze(2) == 0, loglik[:, :, 0], loglik[:, :, 1]).argmax(2)
    if _use_cpu_ops(x):  # fit, log-likelihoods and terminals in two compiled passes (cpu_grabcut.cpp)
        B = x.shape[0]
        loglik, src, snk = torch.ops.torchcut.grabcut_models(
            x.contiguous(),
            cls.contiguous(),
            comp.contiguous(),
            seeds.reshape(B, -1).contiguous(),
            valid.reshape(B, -1).contiguous(),
            K,
            hard,
            COV_REG,
            SCALE,
            DATA_CAP,
        )
        return loglik, src.view(seeds.shape), snk.view(seeds.shape)
    loglik = _component_loglik(x, _fit(x, cls, comp, K))
    return (loglik,) + _terminals(loglik, seeds, valid, hard)


#: On the CPU, run the colour models with the compiled ops of cpu_grabcut.cpp (when the CPU library
#: loads); False: the tensor version (the benchmark's baseline, and the tests' reference).
CPU_OPS = True
_CPU_OPS_OK = None


def _use_cpu_ops(x: torch.Tensor) -> bool:
    global _CPU_OPS_OK
    if not CPU_OPS or x.device.type != "cpu" or x.dtype != torch.float32 or not 1 <= x.shape[2] <= 8:
        return False
    if _CPU_OPS_OK is None:
        from . import _ops

        _CPU_OPS_OK = _ops.load_error("cpu") is None
    return _CPU_OPS_OK


# On CUDA, grabcut(cuda_graphs=True) replays _models as a CUDA graph once a problem of the same shape
# comes back (the step is ~100 small kernels for ~2 ms of GPU work; launching them from Python costs
# more than that). Graphs are kept per (device, shape, components, hard-constraint capacity), at most
# _GRAPH_ENTRIES of them, each with its own inputs and memory pool (roughly 0.5 KB per pixel).
_GRAPH_ENTRIES = 4
_GRAPH_MAX_PIXELS = 1 << 20


@contextlib.contextmanager
def _cusolver():
    """cuSOLVER for the small Cholesky factorisations while capturing: MAGMA's batched routines may
    wait on the host."""
    library = torch.backends.cuda.preferred_linalg_library()
    torch.backends.cuda.preferred_linalg_library("cusolver")
    try:
        yield
    finally:
        torch.backends.cuda.preferred_linalg_library(library)


_GRAPHS = GraphCache(_GRAPH_ENTRIES, _cusolver)


def _model_step(x, cls, loglik, seeds, valid, K: int, hard: int, graphs: bool):
    """:func:`_models`, through a cached CUDA graph where that applies (``graphs``, on CUDA)."""
    if not graphs or x.shape[0] * x.shape[1] > _GRAPH_MAX_PIXELS:
        return _models(x, cls, loglik, seeds, valid, K, hard)
    first = loglik is None

    def step(x, cls, seeds, valid, loglik=None):
        return _models(x, cls, loglik, seeds, valid, K, hard)

    key = ("grabcut", tuple(x.shape), tuple(seeds.shape), K, hard, first)
    return _GRAPHS.run(key, step, (x, cls, seeds, valid) + (() if first else (loglik,)))


def _grabcut(x, seeds, valid, iterations, K, lam, connectivity, backend, options, graphs=True, warm=True):
    """x float32 [B, C, H, W] (0..255 per image), seeds uint8 [B, H, W] (padding: 2), valid bool.

    Returns masks [B, H, W], the terminal capacities of each image's last cut, the n-links, the
    offsets, the number of iterations each image ran.
    """
    B, C, H, W = x.shape
    offsets = grid_offsets(2, connectivity)
    edges = _smoothness(x, valid, offsets, lam)
    # the n-links do not change between iterations, only the terminal arcs: lay them out once (known
    # non-negative int32 below ``hard``: no checks needed); every cut continues from the last one's flow
    cut = _WarmCut(_arc_layout(edges, edges, offsets, torch.int32), offsets, backend, options, warm, graphs)
    hard = 1 + 2 * sum(round(lam * SCALE / math.hypot(*o)) for o in offsets)
    xf = x.reshape(B, C, -1).transpose(1, 2).contiguous()  # [B, N, C]
    lab = seeds.reshape(B, -1)
    vflat = valid.reshape(B, -1)
    unknown = (lab == 0) & vflat
    # first fit: unknown pixels count as object (GrabCut's initial T_U; OpenCV's GC_PR_FGD)
    cls = torch.full(lab.shape, 2, dtype=torch.int64, device=lab.device)
    cls = torch.where((lab == 1) | unknown, 0, cls)
    cls = torch.where((lab == 2) & vflat, 1, cls)
    mask = torch.zeros((B, H, W), dtype=torch.bool, device=x.device)
    src_last = torch.zeros((B, H, W), dtype=torch.int64, device=x.device)
    snk_last = torch.zeros_like(src_last)
    ran = torch.zeros(B, dtype=torch.int64, device=x.device)
    active = torch.arange(B, device=x.device)
    loglik = None
    every = True  # all images still iterating: no gathers and scatters by index
    for it in range(iterations):
        xa, ca = (xf, cls) if every else (xf[active], cls[active])
        sa, va = (seeds, valid) if every else (seeds[active], valid[active])
        # every capacity is a known int32 below ``hard`` (lam <= MAX_LAM): no constructor checks needed
        loglik, src, snk = _model_step(xa, ca, loglik, sa, va, K, hard, graphs)
        new = cut(src, snk) & va
        old = mask if every else mask[active]
        accepted = torch.ones(len(new), dtype=torch.bool, device=new.device)
        if it > 0:
            # A cut that leaves an image without object pixels gives the next object model nothing to
            # fit, and GrabCut never recovers from it: that image keeps its last mask (and cut) and
            # ends its iterations, as if it had been given one iteration fewer.
            accepted = new.flatten(1).any(1) | ~old.flatten(1).any(1)
            keep_old = ~accepted.view(-1, 1, 1)
            new = torch.where(keep_old, old, new)
            src = torch.where(keep_old, src_last if every else src_last[active], src)
            snk = torch.where(keep_old, snk_last if every else snk_last[active], snk)
        if every:
            src_last, snk_last = src, snk
            ran += accepted  # on the device: no read-back per iteration
            same = (new == mask).flatten(1).all(1)
            mask = new
        else:
            src_last[active], snk_last[active] = src, snk
            ran[active] += accepted
            same = (new == old).flatten(1).all(1)
            mask[active] = new
        if it == 0:
            same = torch.zeros_like(same)
        left = int((~same).sum())  # the one read-back per iteration
        if left == 0:
            break
        labels = torch.where(new.reshape(len(new), -1), 0, 1).masked_fill_(~va.reshape(len(new), -1), 2)
        if every:
            cls = labels
        else:
            cls[active] = labels
        if left < len(new):
            keep = ~same
            if every:  # from here on, write into full-size tensors by index
                cls, mask = cls.clone(), mask.clone()
                src_last, snk_last = src_last.clone(), snk_last.clone()
            every = False
            active, loglik = active[keep], loglik[keep]
            cut.keep(keep)
    return mask, src_last, snk_last, edges, offsets, ran


def _normalise(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Map each image's value range (over its valid pixels, all channels) onto 0..255."""
    B = x.shape[0]
    v = valid.unsqueeze(1).expand_as(x)
    lo = torch.where(v, x, torch.full_like(x, float("inf"))).reshape(B, -1).amin(1)
    hi = torch.where(v, x, torch.full_like(x, float("-inf"))).reshape(B, -1).amax(1)
    span = torch.where(hi > lo, hi - lo, torch.ones_like(hi))
    return (x - lo.view(B, 1, 1, 1)) * (255.0 / span).view(B, 1, 1, 1) * valid.unsqueeze(1)


class EmptyMaskWarning(UserWarning):
    """:func:`torchcut.grabcut` returned an empty mask for an image that had pixels to segment."""


def _warn_empty(empty, boxes, lam: float) -> None:
    """One warning naming every image whose mask came back empty, with the box it was given."""
    many = len(empty) > 1
    which = []
    for b, e in enumerate(empty):
        if e:
            box = boxes[b] if boxes is not None else None
            which.append((f"image {b}" if many else "the image") + ("" if box is None else f" (box {tuple(box)})"))
    warnings.warn(
        f"torchcut.grabcut: no object pixel left in {', '.join(which)}: the first colour models do not tell "
        f"the pixels to segment from the background by enough to pay for an object boundary at lam={lam:g} "
        "(typical when the object crosses the box's border, or in a small image). Try a box that encloses "
        "the whole object with a margin, a smaller lam, or object seeds (label 1).",
        EmptyMaskWarning,
        stacklevel=3,
    )


@renamed_keywords(iterations="max_iter")
def grabcut(
    image,
    seeds=None,
    *,
    box=None,
    max_iter: int = 5,
    components: int = 5,
    lam: float = DEFAULT_LAM,
    connectivity: int = 8,
    channel_axis: int | None = None,
    backend: str = "auto",
    return_result: bool = False,
    cuda_graphs: bool = True,
    warm_start: bool = True,
    **solver_options,
):
    """Segment objects with GrabCut: per-class Gaussian mixtures re-fitted around a graph cut.

    Parameters
    ----------
    image : torch.Tensor, numpy.ndarray, PIL.Image.Image, or a list of them
        ``[H, W]``, ``[C, H, W]``, ``[H, W, C]`` or batched ``[B, C, H, W]`` / ``[B, H, W, C]``
        (shapes read as in :func:`torchcut.segment`), any numeric dtype. Each image's value range is
        mapped onto 0..255 first, so the result does not depend on the units. A list of images of
        different sizes is solved in one batch: they are padded to the largest height and width with
        pixels that have no n-links and no colour model, and cropped back.
    seeds : like image without its channel axis, or a list of them, optional
        0 unknown, 1 object, 2 background (as in :func:`torchcut.segment`); object and background
        seeds are hard constraints.
    box : (x0, y0, x1, y1), or one box per image, optional
        Columns ``x0 <= x < x1`` and rows ``y0 <= y < y1`` (``image[..., y0:y1, x0:x1]``) may hold the
        object; every pixel outside is background. With seeds too, seeds win inside the box and
        unknown pixels outside become background. A tensor, array or sequence of 4 numbers, or
        ``[B, 4]`` / a sequence of boxes for a batch or a list of images (one box alone is used for
        every image). Fractional coordinates are rounded outward (``floor`` of x0 and y0, ``ceil``
        of x1 and y1), and a box that reaches past the image's border is clipped to it (its part
        inside the image is used; detector boxes often cross the border).
    max_iter : int
        Largest number of model fits and cuts (default 5, as OpenCV's ``iterCount``; formerly
        ``iterations``, which still works with a ``FutureWarning``). An image ends
        earlier once its mask repeats, or when a cut would leave it without any object pixel (it
        then keeps its last mask; see Notes).
    components : int
        Gaussians per class (default 5).
    lam : float
        Weight of the contrast-sensitive smoothness term (OpenCV's gamma; default 25, tuned on half
        of the GrabCut set, see ``DEFAULT_LAM``).
    connectivity : {4, 8}
        Neighbourhood of the grid (default 8, as OpenCV's GrabCut and the ``lam`` tuning used; diagonal
        pairs weigh ``1 / sqrt(2)``; ``segment`` defaults to 4, the smaller graph, as it has no tuning).
    channel_axis : int, optional
        The image's channel axis when its shape does not tell it.
    backend : {"auto", "reference", "cpu", "cuda"}
        Max-flow backend, see :func:`torchcut.maxflow` (default: the CUDA kernels for CUDA images,
        the compiled CPU solver for CPU images).
    return_result : bool
        Also return the :class:`~torchcut.CutResult` of the last cut of every image (solved once more
        as a batch; its mask equals the returned one).
    cuda_graphs : bool
        On CUDA, replay each iteration's colour-model step as a CUDA graph once images of the same
        size come back (see Notes); False: launch it op by op and keep nothing between calls.
    warm_start : bool
        Start each iteration's cut from the previous iteration's flow (default); False: from zero flow.
        The masks are the same either way (see Notes); False is the baseline the benchmarks time.
    **solver_options
        Passed to the backend, as in :func:`torchcut.segment` (any other keyword raises
        ``TypeError`` naming ``grabcut()``).

    Returns
    -------
    torch.Tensor, list of torch.Tensor, or a pair (masks, CutResult)
        Bool mask shaped like the seeds (``[H, W]`` or ``[B, H, W]``), True = object, on the image's
        device; a list of masks for a list of images (the CutResult is then for the padded batch).
        The CutResult's ``stats`` add ``grabcut_iterations`` (the cuts each image kept) and
        ``grabcut_empty`` (whether each image's mask is empty).

    Raises
    ------
    ValueError
        Neither seeds nor a box; a box that is empty (``x1 <= x0`` or ``y1 <= y0``) or has no pixel
        in common with the image; ``components`` or ``max_iter`` below 1; no unknown pixel or no
        background left in an image; the errors of :func:`torchcut.segment` for shapes and labels.
    TypeError
        Inputs of the wrong type (see :func:`torchcut.segment`), or a keyword that neither
        ``grabcut`` nor the max-flow backend takes.

    Warns
    -----
    EmptyMaskWarning
        When an image's mask comes back empty although it had pixels to segment (see Notes).

    Notes
    -----
    An empty mask is a minimum of GrabCut's energy (``cv2.grabCut`` returns it too) when the first
    colour models tell the box's pixels from the background by too little to pay for the object's
    boundary: typically when the object crosses the box's border (its colours then also fill the
    background model) or in a small image, where the boundary is long next to the area. The image's
    mask is then empty and an :class:`EmptyMaskWarning` names it and its box; a box that encloses
    the whole object with a margin, a smaller ``lam`` or a few object seeds help. A later
    iteration's cut that would empty a mask is not taken: with no object pixel, the next object
    model would have nothing to fit and the mask could never come back, so the image keeps its last
    mask (the result of one iteration fewer) and ends its iterations.

    Each iteration's cut starts from the previous iteration's flow; the masks are those of cuts from
    zero flow. On CUDA, once images of the same size come back (a later call, or the third iteration
    of this one), the colour-model step of an iteration runs as a replayed CUDA graph: the process then
    keeps up to four such graphs (images of up to 2**20 pixels per batch), each holding about 0.5 KB
    of GPU memory per pixel; ``cuda_graphs=False`` turns this off. The masks are the same either way.

    Examples
    --------
    >>> import torch
    >>> from torchcut import grabcut
    >>> g = torch.Generator().manual_seed(0)
    >>> image = torch.rand(3, 24, 24, generator=g) * 40
    >>> image[:, 6:18, 6:18] += 150.0
    >>> mask = grabcut(image, box=(4, 4, 20, 20))
    >>> mask[6:18, 6:18].all().item(), mask.sum().item()
    (True, 144)
    >>> seeds = torch.full((24, 24), 2, dtype=torch.uint8); seeds[2:22, 2:22] = 0; seeds[12, 12] = 1
    >>> mask, result = grabcut(image, seeds, return_result=True)
    >>> mask.sum().item(), result.verify()
    (144, True)
    """
    _check_args(max_iter, components, lam, connectivity)
    if solver_options:
        check_options(grabcut, solver_options, device_of(image), backend)
    if isinstance(image, (list, tuple)):
        n = len(image)
        if n == 0:
            raise ValueError("image: expected at least one image, got an empty list")
        if seeds is not None and (not isinstance(seeds, (list, tuple)) or len(seeds) != n):
            raise ValueError(
                f"seeds: expected a list of {n} seed arrays for a list of {n} images, got {describe(seeds)}"
            )
        boxes = None if box is None else _as_boxes(box, n)
        parts, clipped = [], []
        for i in range(n):
            xi, si, batched, bi = _one(
                image[i],
                None if seeds is None else seeds[i],
                None if boxes is None else boxes[i],
                channel_axis,
                connectivity,
                i,
            )
            if batched:
                raise ValueError(
                    f"image: expected a list of single images, got a batch at index {i} (shape {tuple(xi.shape)})"
                )
            parts.append((xi, si))
            clipped.append(None if bi is None else bi[0])
        chans = {p[0].shape[1] for p in parts}
        devs = {p[0].device for p in parts}
        if len(chans) > 1 or len(devs) > 1:
            raise ValueError(
                f"image: expected the same number of channels and device for every image, got {sorted(chans)} "
                f"channels on {sorted(map(str, devs))}"
            )
        H = max(p[1].shape[1] for p in parts)
        W = max(p[1].shape[2] for p in parts)
        x = torch.zeros((n, parts[0][0].shape[1], H, W), dtype=torch.float32, device=parts[0][0].device)
        s = torch.full((n, H, W), 2, dtype=torch.uint8, device=x.device)
        valid = torch.zeros((n, H, W), dtype=torch.bool, device=x.device)
        sizes = []
        for i, (xi, si) in enumerate(parts):
            h, w = si.shape[1:]
            x[i, :, :h, :w] = xi[0]
            s[i, :h, :w] = si[0]
            valid[i, :h, :w] = True
            sizes.append((h, w))
        batched = None
    else:
        x, s, batched, clipped = _one(image, seeds, box, channel_axis, connectivity)
        valid = torch.ones(s.shape, dtype=torch.bool, device=s.device)
    # per image: any unknown pixel, any background pixel (one read-back for the batch)
    flags = torch.stack([((s == v) & valid).flatten(1).any(1) for v in (0, 2)], 1).tolist()
    for b, (has_unknown, has_background) in enumerate(flags):
        where = f" in image {b}" if s.shape[0] > 1 else ""
        if not has_unknown:
            raise ValueError(f"seeds: expected some unknown pixels (label 0) to segment{where}, got none")
        if not has_background:
            raise ValueError(
                f"seeds, box: expected some background (seeds labelled 2 or pixels outside the box){where}, got none"
            )
    x = _normalise(x, valid)
    masks, src, snk, edges, offsets, ran = _grabcut(
        x,
        s,
        valid,
        int(max_iter),
        int(components),
        float(lam),
        connectivity,
        backend,
        solver_options,
        bool(cuda_graphs),
        bool(warm_start),
    )
    empty = (~masks.flatten(1).any(1)).tolist()
    if any(empty):
        _warn_empty(empty, clipped, float(lam))
    result = None
    if return_result:
        if batched is False:  # one image: an unbatched graph, as segment() returns
            src, snk, edges = src[0], snk[0], edges[:, 0]
        result = maxflow(GridGraph(src, snk, edges, offsets), backend=backend, **solver_options)
        result.stats = dict(result.stats or {}, grabcut_iterations=ran.tolist(), grabcut_empty=empty)
    if batched is None:
        out = [masks[i, :h, :w] for i, (h, w) in enumerate(sizes)]
    else:
        out = masks if batched else masks[0]
    return (out, result) if return_result else out
