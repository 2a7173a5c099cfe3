"""torchmaxflow's two calls over torchcut: change one import line, keep the script.

>>> from torchcut.compat import torchmaxflow   # instead of ``import torchmaxflow``

:func:`maxflow` and :func:`maxflow_interactive` take torchmaxflow's arguments and shapes (``[1, C, H, W]``
or ``[1, C, D, H, W]`` images, ``[1, 2, ...]`` probabilities of background and foreground, ``lamda``,
``sigma``, ``connectivity`` 4/8 in 2D and 6/18/26 in 3D) and return what it returns: a float32 mask
``[1, 1, ...]``, 1 on the foreground. The energy is torchmaxflow's: a pixel pays
``-log(max(p, eps))`` (``eps`` float32's machine epsilon) for the class it takes, and each neighbour
pair with different classes pays ``lamda * exp(-(||I_p - I_q|| / dist(p, q))^2 / (2 sigma^2))``, over
torchmaxflow's neighbourhoods: the pixels above and to the left (4), also the one above-left (8); in
3D the three face neighbours before the voxel (6), also the three edge neighbours before it in two
axes (18) and the corner one (26).

How it is solved
----------------
The unaries and weights are built by one native op (``torch.ops.torchcut.potts_energy``, CPU and
CUDA), quantised to integers (the largest terminal capacity about 2**30) and cut by torchcut's grid
solvers: the compiled Boykov-Kolmogorov / pseudoflow solver on CPU tensors, the CUDA kernels on CUDA
tensors, where the mask stays on the GPU.

Differences from torchmaxflow
-----------------------------
* Which minimum cut: torchcut returns the cut whose foreground is largest (every pixel that cannot
  reach the background terminal in the final residual network). torchmaxflow's float solver may leave
  a tied region as background; on ties (a region whose two labellings cost exactly the same) the masks
  can differ, nowhere else. Its float arithmetic and torchcut's quantisation may also settle a pixel
  whose two labellings differ by about 1e-7 of the energy either way.
* CUDA tensors are solved on the GPU (torchmaxflow takes CPU tensors only), a batch of several items
  is accepted (torchmaxflow takes one), and any real dtype of image (torchmaxflow: float32).
* ``maxflow_interactive`` leaves ``prob`` as it was (torchmaxflow writes the seeds into it).
* Stricter input: negative or non-finite probabilities, non-finite pixel values, ``sigma <= 0`` and a
  negative ``lamda`` raise ``ValueError``; connectivity 0 means the default (4 in 2D, 6 in 3D) without
  torchmaxflow's printed warning.

Examples
--------
>>> import torch
>>> from torchcut.compat import torchmaxflow
>>> image = torch.tensor([[[[0., 0., 200., 200.]]]])            # [1, 1, 1, 4]
>>> fg = torch.tensor([0.2, 0.45, 0.9, 0.6])
>>> prob = torch.stack([1 - fg, fg])[None, :, None]            # [1, 2, 1, 4]
>>> torchmaxflow.maxflow(image, prob, 1.0, 30.0, 4)
tensor([[[[0., 0., 1., 1.]]]])
"""

from __future__ import annotations

import math

import torch

from .._validate import describe
from ..solvers._terminals import net_terminals

__all__ = ["maxflow", "maxflow_interactive"]

#: torchmaxflow's floor under the probabilities (float32's machine epsilon).
EPS = float(torch.finfo(torch.float32).eps)
# torchmaxflow's neighbourhoods: the neighbours before a pixel, as torchcut's offsets (the arc pairs)
_OFFSETS = {
    4: ((1, 0), (0, 1)),
    8: ((1, 0), (0, 1), (1, 1)),
    6: ((1, 0, 0), (0, 1, 0), (0, 0, 1)),
    18: ((1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 0), (1, 0, 1), (0, 1, 1)),
    26: ((1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 0), (1, 0, 1), (0, 1, 1), (1, 1, 1)),
}
_MAX_CHANNELS = 16


def maxflow(image, prob, lamda, sigma, connectivity=0):
    """Foreground mask of a contrast-sensitive graph cut of a probability map (torchmaxflow's ``maxflow``).

    Parameters
    ----------
    image : torch.Tensor
        ``[1, C, H, W]`` or ``[1, C, D, H, W]`` (C at most 16; a batch ``[B, ...]`` is accepted too), any
        real dtype, CPU or CUDA.
    prob : torch.Tensor
        ``[1, 2, H, W]`` or ``[1, 2, D, H, W]``: background and foreground probabilities (non-negative;
        they need not sum to 1), on the image's device.
    lamda : float
        Weight of the pairwise term (non-negative).
    sigma : float
        Contrast scale in the image's units (positive).
    connectivity : int
        4 or 8 in 2D, 6, 18 or 26 in 3D; 0 for the default (4 or 6).

    Returns
    -------
    torch.Tensor
        float32 ``[1, 1, H, W]`` or ``[1, 1, D, H, W]`` on the image's device: 1 foreground, 0 background.

    Examples
    --------
    >>> import torch
    >>> from torchcut.compat import torchmaxflow
    >>> image = torch.zeros(1, 1, 3, 3)
    >>> prob = torch.stack([torch.full((3, 3), 0.6), torch.full((3, 3), 0.4)])[None]   # background 0.6
    >>> prob[0, :, 1, 1] = torch.tensor([0.1, 0.9])          # but one confident foreground pixel
    >>> torchmaxflow.maxflow(image, prob, 0.5, 10.0, 4)[0, 0]
    tensor([[0., 0., 0.],
            [0., 1., 0.],
            [0., 0., 0.]])
    >>> torchmaxflow.maxflow(image, prob, 2.0, 10.0, 4)[0, 0]   # stronger smoothing removes it
    tensor([[0., 0., 0.],
            [0., 0., 0.],
            [0., 0., 0.]])
    """
    x, P, conn = _check(image, prob, lamda, sigma, connectivity)
    return _solve(x, P.flip(1), float(lamda), float(sigma), conn, None)


def maxflow_interactive(image, prob, seed, lamda, sigma, connectivity=0):
    """:func:`maxflow` with scribbles (torchmaxflow's ``maxflow_interactive``).

    Where ``seed[0, 0] > 0`` the pixel's probabilities become (1, 0) (background), elsewhere where
    ``seed[0, 1] > 0`` they become (0, 1) (foreground), as in torchmaxflow (a strong unary of
    ``-log(eps)`` = 15.9 against 0, not a hard constraint); ``prob`` itself is left unchanged.

    Parameters
    ----------
    image, prob, lamda, sigma, connectivity
        As for :func:`maxflow`.
    seed : torch.Tensor
        ``[1, 2, H, W]`` or ``[1, 2, D, H, W]`` (the shape of ``prob``): background and foreground scribbles.

    Returns
    -------
    torch.Tensor
        float32 ``[1, 1, ...]`` mask, 1 foreground.

    Examples
    --------
    >>> import torch
    >>> from torchcut.compat import torchmaxflow
    >>> image = torch.zeros(1, 1, 1, 4)
    >>> prob = torch.tensor([0.6, 0.6, 0.6, 0.6]).view(1, 1, 1, 4).repeat(1, 2, 1, 1)
    >>> prob[0, 1] = 1 - prob[0, 0]                       # background 0.6 everywhere
    >>> seed = torch.zeros(1, 2, 1, 4)
    >>> seed[0, 1, 0, 3] = 1                              # one foreground scribble
    >>> torchmaxflow.maxflow_interactive(image, prob, seed, 0.1, 10.0, 4)
    tensor([[[[0., 0., 0., 1.]]]])
    """
    x, P, conn = _check(image, prob, lamda, sigma, connectivity)
    if not isinstance(seed, torch.Tensor):
        raise TypeError(f"seed: expected a torch tensor, got {describe(seed)}")
    if tuple(seed.shape) != tuple(prob.shape):
        raise ValueError(f"seed: expected the shape of prob {tuple(prob.shape)}, got {tuple(seed.shape)}")
    if seed.dtype == torch.bool or seed.is_complex():
        raise TypeError(f"seed: expected a real tensor, got {describe(seed)}")
    seed = seed.to(P.device)
    bg = seed[:, 0] > 0
    fg = (seed[:, 1] > 0) & ~bg
    one, zero = P.new_ones(()), P.new_zeros(())
    p_fg = torch.where(bg, zero, torch.where(fg, one, P[:, 1]))
    p_bg = torch.where(bg, one, torch.where(fg, zero, P[:, 0]))
    return _solve(x, torch.stack([p_fg, p_bg], 1), float(lamda), float(sigma), conn, None)


def _check(image, prob, lamda, sigma, connectivity):
    """(image, prob, connectivity) checked: tensors on one device, shapes, numbers."""
    for name, t in (("image", image), ("prob", prob)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch tensor, got {describe(t)}")
        if t.dtype == torch.bool or t.is_complex():
            raise TypeError(f"{name}: expected a real tensor, got {describe(t)}")
    if prob.dim() not in (4, 5):
        raise ValueError(f"prob: expected shape [1, 2, H, W] or [1, 2, D, H, W], got {tuple(prob.shape)}")
    if prob.shape[1] != 2:
        raise ValueError(f"prob: expected 2 channels (background, foreground), got shape {tuple(prob.shape)}")
    if image.dim() != prob.dim() or image.shape[0] != prob.shape[0] or image.shape[2:] != prob.shape[2:]:
        raise ValueError(
            f"image: expected shape [{prob.shape[0]}, C, {', '.join(map(str, prob.shape[2:]))}] "
            f"(prob's batch and spatial shape), got {tuple(image.shape)}"
        )
    if prob.numel() == 0 or image.shape[1] == 0:
        raise ValueError(
            f"image, prob: expected non-empty tensors, got shapes {tuple(image.shape)} and {tuple(prob.shape)}"
        )
    if image.shape[1] > _MAX_CHANNELS:
        raise ValueError(f"image: expected at most {_MAX_CHANNELS} channels, got {image.shape[1]}")
    nd = prob.dim() - 2
    allowed = (0, 4, 8) if nd == 2 else (0, 6, 18, 26)
    if isinstance(connectivity, bool) or connectivity not in allowed:
        raise ValueError(f"connectivity: expected one of {allowed} for {nd}D inputs, got {connectivity!r}")
    conn = connectivity or (4 if nd == 2 else 6)
    if isinstance(lamda, bool) or not isinstance(lamda, (int, float)) or not math.isfinite(lamda) or lamda < 0:
        raise ValueError(f"lamda: expected a non-negative finite number, got {lamda!r}")
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not math.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"sigma: expected a positive finite number, got {sigma!r}")
    return image.to(prob.device), prob, conn


def _terms(conn: int, sigma: float, lamda: float, B: int, device):
    """(offsets, denominators float32 [B, K], multipliers) of torchmaxflow's pairwise term."""
    offsets = _OFFSETS[conn]
    dist2 = torch.tensor([float(sum(v * v for v in o)) for o in offsets], dtype=torch.float32)
    denom = (2 * torch.tensor(sigma, dtype=torch.float32) ** 2 * dist2).to(device).expand(B, -1).contiguous()
    return offsets, denom, [lamda] * len(offsets)


def _graph(image, prob, lamda, sigma, connectivity=0):
    """The integer grid graph :func:`maxflow` cuts (source side = foreground), as a GridGraph."""
    from ..energy import _grid_graph

    x, P, conn = _check(image, prob, lamda, sigma, connectivity)
    caps, source, sink, offsets = _build(x, P.flip(1), float(lamda), float(sigma), conn, None)
    return _grid_graph(caps, source, sink, offsets, True)


def _build(x, P, lamda, sigma, conn, seeds):
    """caps, source, sink of the two-class graph of ``P`` = (foreground, background) probabilities; class 1
    (background) is the sink side."""
    from ..multilabel import _native_potts, _potts_checks

    B = P.shape[0]
    offsets, denom, mult = _terms(conn, sigma, lamda, B, P.device)
    if x.dtype not in (torch.float32, torch.float64, torch.uint8):
        x = x.to(torch.float32)
    if P.dtype not in (torch.float32, torch.float64):
        P = P.to(torch.float32)
    flat = [v for o in offsets for v in o]
    if _native_potts(P.device):
        caps, source, sink, checks = torch.ops.torchcut.potts_energy(x, P, denom, mult, flat, EPS, seeds, True)
        _potts_checks(checks, 2, probs="prob")
    else:
        caps, source, sink = potts_graph_reference(x, P, denom, mult, offsets, EPS, seeds, probs="prob")
    return caps, source, sink, offsets


def _solve(x, P, lamda, sigma, conn, seeds):
    from ..multilabel import _source_side

    caps, source, sink, offsets = _build(x, P, lamda, sigma, conn, seeds)
    # 1 = foreground (the source side); auto's algorithm on every connectivity (pseudoflow on these energies)
    return _source_side(caps, source, sink, offsets, "auto").to(torch.float32).unsqueeze(1)


def potts_graph_reference(x, P, denom, mult, offsets, floor, seeds=None, probs="probs"):
    """``potts_energy``'s two-class graph in tensor ops, operation for operation (the tests' reference,
    and the path taken where the op is not built): caps int32 ``[B, 2K, *S]``, source int64, sink int32.

    Parameters as the op's: ``x`` ``[B, Ch, *S]``, ``P`` ``[B, 2, *S]``, ``denom`` float32 ``[B, K]``,
    ``mult`` K floats, ``offsets`` K tuples, ``floor``, ``seeds`` int64 ``[B, *S]`` or None; ``probs`` names
    ``P`` in error messages.

    Examples
    --------
    >>> import torch
    >>> x, P = torch.zeros(1, 1, 1, 3), torch.tensor([[[[0.9, 0.5, 0.2]], [[0.1, 0.5, 0.8]]]])
    >>> caps, source, sink = potts_graph_reference(x, P, torch.ones(1, 1), [0.5], [(0, 1)], 1e-6)
    >>> caps.shape, source.dtype, sink.dtype
    (torch.Size([1, 2, 1, 3]), torch.int64, torch.int32)
    """
    from ..grid import shift

    B, nd = P.shape[0], P.dim() - 2
    bad = ~torch.isfinite(P)
    if bool(bad.any()):
        raise ValueError(f"{probs}: expected finite values, got {int(bad.sum())} NaN or infinite value(s)")
    if bool((P < 0).any()):
        raise ValueError(f"{probs}: expected non-negative probabilities, got minimum {P.min().item()}")
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise ValueError("image: expected finite pixel values, got NaN or infinite value(s)")
    x = x.to(torch.float32)
    U = -torch.log(P.to(torch.float64).contiguous().clamp(min=floor))
    K = len(offsets)
    ones = torch.ones(P.shape[2:], dtype=torch.bool, device=P.device)
    view = (B,) + (1,) * nd
    w_all, w_in = [], []
    for k, o in enumerate(offsets):
        diff = x - shift(x, o, 0.0)
        d2 = diff[:, 0].square()
        for c in range(1, x.shape[1]):  # channel by channel, in order (as the op sums them)
            d2 = d2 + diff[:, c].square()
        w = torch.exp(-d2 / denom[:, k].reshape(view)) * mult[k]
        w_all.append(w)
        w_in.append(torch.where(shift(ones, o, False), w, 0.0))
    if seeds is not None:
        lo, hi = int(seeds.min()), int(seeds.max())
        if lo < -1 or hi >= 2:
            raise ValueError(f"seeds: expected -1 (free) or a class in [0, 1], got values in [{lo}, {hi}]")
        hard = 1.0 + float(U.max()) + 2 * K * float(torch.stack(w_all).max())
        cls = torch.arange(2, device=P.device).view((1, 2) + (1,) * nd)
        fixed = (seeds >= 0).unsqueeze(1)
        U = torch.where(fixed & (cls != seeds.unsqueeze(1)), hard, torch.where(fixed, 0.0, U))
    U = U - U.amin(1, keepdim=True)
    Wd = torch.stack(w_in, 1).to(torch.float64)
    umax, wmax = float(U.max()), float(Wd.max())
    top = umax + 4 * K * 1.0 * wmax
    scale = 2.0**30 / top if top > 0 else 1.0
    Uq = torch.round(U * scale).to(torch.int32)
    Wq = torch.round(Wd * scale).to(torch.int32)
    caps = torch.zeros((B, 2 * K) + tuple(P.shape[2:]), dtype=torch.int32, device=P.device)
    caps[:, :K] = Wq
    for k, o in enumerate(offsets):  # the reverse arc p + o -> p, stored at p + o
        caps[:, K + k] = shift(Wq[:, k], tuple(-v for v in o), 0)
    src, snk = Uq[:, 1], Uq[:, 0]
    excess, sink = net_terminals(src, snk)
    return caps, excess, sink
