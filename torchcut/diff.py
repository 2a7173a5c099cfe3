"""Gradients through graph cuts: the flow value, binary masks and multi-label labellings.

Three estimators (``docs/gradients.md`` says what each computes and its bias):

* :func:`flow_value`: the maximum flow as a function of float capacities. It is the capacity of the
  minimum cut, a concave piecewise-linear function of the capacities; the returned cut's indicator (1 on
  the arcs that cross it from the source side) is an exact supergradient, and the gradient wherever the
  minimum cut is unique. No extra solve.
* ``estimator="blackbox"`` (Vlastelica, Paulus, Musil, Martius and Rolinek, "Differentiation of
  Blackbox Combinatorial Solvers", ICLR 2020): the backward pass solves once more, as one batch, with the
  scores shifted by ``-lambda_ * grad``, and returns the difference of the two solutions over
  ``lambda_``: the gradient of a piecewise-linear interpolation of the loss.
* ``estimator="perturbed"`` (Berthet, Blondel, Teboul, Cuturi, Vert and Bach, "Learning with
  Differentiable Perturbed Optimizers", NeurIPS 2020): the forward pass solves ``samples`` copies with
  Gaussian noise of scale ``noise`` added to the scores, as one batch, and returns their mean, a smooth
  function of the scores whose Jacobian the backward pass estimates from the same samples (no solve).

Conventions: :func:`cut_mask` and :func:`cut_labels` take *scores* (higher = preferred: logits,
log-probabilities) and *weights* (non-negative costs of a label change across an edge), and return
the maximiser of ``sum_p scores[f_p, p] - sum_k sum_p weights[k, p] * V[f_p, f_{p + offsets[k]}]`` (the
minimiser of the energy with unary ``-scores``), as floats so that it can carry a gradient: a 0/1
mask or one-hot labelling (blackbox), or the mean of the perturbed ones (perturbed).
``offsets = torchcut.grid_offsets(ndim, connectivity)``.

All solves run on the scores' device, detached, under ``torch.no_grad()``; the functions are
:class:`torch.autograd.Function` s that save only their inputs and the forward's masks or labels
(plus a noise seed for the perturbed estimator). Under ``torch.no_grad()`` (or when nothing requires
grad) nothing is saved and only the forward runs. Inside ``torch.compile`` the solves are left out of
the compiled graph (a graph break): ``fullgraph=True`` is not supported.

Examples
--------
>>> import torch, torchcut
>>> src = torch.tensor([[3.0, 0.0]], requires_grad=True)
>>> g = torchcut.GridGraph(src, [[0.0, 2.5]], [[[1.5, 0.0]], [[0.0, 0.0]]], torchcut.grid_offsets(2, 4))
>>> v = torchcut.maxflow(g).flow_value
>>> v.backward()
>>> v, src.grad
(tensor(1.5000, grad_fn=<_GridFlowValueBackward>), tensor([[0., 1.]]))
"""

from __future__ import annotations

import math

import torch

from ._flowgrad import flow_value  # noqa: F401 - a public name of this module
from .grid import GridGraph, grid_offsets, shift

__all__ = ["flow_value", "cut_mask", "cut_labels", "refine", "contrast_weights", "ESTIMATORS"]

ESTIMATORS = ("blackbox", "perturbed")
_CONN_NDIM = {4: 2, 8: 2, 6: 3, 18: 3, 26: 3}


# ---------------------------------------------------------------------------------------------- shared checks
def _check_estimator(estimator, lambda_, samples, noise):
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator: expected one of {ESTIMATORS}, got {estimator!r}")
    if not (
        isinstance(lambda_, (int, float)) and not isinstance(lambda_, bool) and math.isfinite(lambda_) and lambda_ > 0
    ):
        raise ValueError(f"lambda_: expected a positive finite number, got {lambda_!r}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples: expected a positive int, got {samples!r}")
    if not (isinstance(noise, (int, float)) and not isinstance(noise, bool) and math.isfinite(noise) and noise > 0):
        raise ValueError(f"noise: expected a positive finite number, got {noise!r}")


def _float_input(x, name: str, device=None) -> torch.Tensor:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        x = torch.tensor(float(x), device=device)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a float tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name}: expected a float tensor, got dtype {x.dtype}")
    if device is not None and x.device != device:
        raise ValueError(f"{name}: expected a tensor on {device} (the scores' device), got one on {x.device}")
    with torch.no_grad():
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name}: expected finite values, got NaN or infinite value(s)")
    return x


def _layout(scores: torch.Tensor, connectivity, ndim, extra: int):
    """(ndim, offsets, batched) of scores shaped ``[*extra dims][*spatial]`` or with a batch dim in front."""
    if connectivity is not None and connectivity not in _CONN_NDIM:
        raise ValueError(f"connectivity: expected 4 or 8 (2D) or 6, 18 or 26 (3D), got {connectivity!r}")
    if ndim is None:
        ndim = _CONN_NDIM[connectivity] if connectivity is not None else 2
    if ndim not in (2, 3):
        raise ValueError(f"ndim: expected 2 or 3, got {ndim!r}")
    if connectivity is None:
        connectivity = 4 if ndim == 2 else 6
    if _CONN_NDIM[connectivity] != ndim:
        raise ValueError(
            f"connectivity: expected {'4 or 8' if ndim == 2 else '6, 18 or 26'} for ndim={ndim}, got {connectivity}"
        )
    if scores.dim() not in (ndim + extra, ndim + extra + 1):
        lead = "" if not extra else "L, "
        raise ValueError(
            f"scores: expected shape [{lead}*spatial] or [B, {lead}*spatial] with {ndim} spatial dims, "
            f"got shape {tuple(scores.shape)}"
        )
    if any(n == 0 for n in scores.shape):
        raise ValueError(f"scores: expected a non-empty tensor, got shape {tuple(scores.shape)}")
    return ndim, grid_offsets(ndim, connectivity), scores.dim() == ndim + extra + 1


def _weights_full(weights, B: int, K: int, spatial, batched: bool, device, name: str = "weights") -> torch.Tensor:
    """``weights`` as ``[B, K, *spatial]`` (a view where it broadcasts), checked non-negative and finite."""
    w = _float_input(weights, name, device)
    full = (B, K) + tuple(spatial)
    if w.dim() == 0:
        w = w.expand(full)
    elif tuple(w.shape) == full[1:]:
        w = w.expand(full)
    elif not (batched and tuple(w.shape) == full):
        want = "a number, " + f"{full[1:]}" + (f" or {full}" if batched else "")
        raise ValueError(f"{name}: expected {want} (K={K} offsets), got shape {tuple(w.shape)}")
    with torch.no_grad():
        low = w.min()
        if bool(low < 0):
            raise ValueError(f"{name}: expected non-negative edge weights, got minimum {low.item()}")
    return w


def _inside(spatial, offsets, device) -> torch.Tensor:
    """Bool ``[K, *spatial]``: True where ``p + offsets[k]`` is in the grid."""
    one = torch.ones(tuple(spatial), dtype=torch.bool, device=device)
    return torch.stack([shift(one, o, False) for o in offsets])


def _noise(seed: int, shape, like: torch.Tensor) -> torch.Tensor:
    """Standard Gaussian noise drawn from ``seed`` (the same draw in the forward and the backward)."""
    gen = torch.Generator(device=like.device).manual_seed(seed)
    return torch.randn(shape, generator=gen, device=like.device, dtype=like.dtype)


def _seed(generator) -> int:
    return int(torch.randint(0, 2**62, (), generator=generator))


def _perturbed_vjp(g, y, Z, noise: float):
    """Berthet et al.'s estimate of ``g^T d E[y] / d theta`` from K samples ``y = y*(theta + noise Z)``.

    ``g`` ``[B, *E]``, ``y`` and ``Z`` ``[K, B, *E]``: ``sum_k <g, y_k - mean(y)> Z_k / (noise (K - 1))``,
    unbiased (the sample mean as a baseline, with the K / (K - 1) correction); plain Monte Carlo for K = 1.
    """
    K = y.shape[0]
    dims = tuple(range(2, y.dim()))
    if K > 1:
        gy = (g.unsqueeze(0) * (y - y.mean(0, keepdim=True))).sum(dims)
        div = noise * (K - 1)
    else:
        gy = (g.unsqueeze(0) * y).sum(dims)
        div = noise
    return (gy.view(gy.shape + (1,) * len(dims)) * Z).sum(0) / div


def _perturbed_pair_vjp(gz, z, noise: float):
    """``-sum_k (z_k - mean(z)) <g, Z_k> / (noise (K - 1))``: the pair weights' part (``gz`` ``[K, B]``)."""
    K = z.shape[0]
    if K > 1:
        z = z - z.mean(0, keepdim=True)
        div = noise * (K - 1)
    else:
        div = noise
    return -(gz.view(gz.shape + (1,) * (z.dim() - 2)) * z).sum(0) / div


# ---------------------------------------------------------------------------------------------- binary cuts
def _solve_masks(scores, weights, reverse, offsets, backend, options):
    """Bool ``[B, *S]``: the binary labelling of :func:`cut_mask` (scores ``[B, *S]``, weights ``[B, K, *S]``)."""
    from .solvers import maxflow

    with torch.no_grad():
        s = scores.detach()
        r = None if reverse is None else reverse.detach().transpose(0, 1)
        g = GridGraph(s.clamp(min=0), (-s).clamp(min=0), weights.detach().transpose(0, 1), offsets, r)
        return maxflow(g, backend=backend, **options).node_mask


def _pair_changes(x: torch.Tensor, offsets, inside, dtype, kind: str = "both") -> torch.Tensor:
    """``[..., K, *S]`` of a bool mask ``[..., *S]``, 0 where the edge leaves the grid, else 1 where
    ``x_p != x_{p + offsets[k]}`` (``kind="both"``), ``x_p and not x_{p + o}`` ("fwd") or
    ``x_{p + o} and not x_p`` ("bwd")."""
    if kind == "both":
        parts = [x ^ shift(x, o, False) for o in offsets]
    elif kind == "fwd":
        parts = [x & ~shift(x, o, True) for o in offsets]
    else:
        parts = [shift(x, o, False) & ~x for o in offsets]
    z = torch.stack(parts, x.dim() - len(offsets[0]))
    return (z & inside).to(dtype)


class _BinaryCut(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, weights, reverse, offsets, estimator, lambda_, samples, noise, seed, backend, options):
        ctx.offsets, ctx.estimator, ctx.lambda_, ctx.noise, ctx.seed = offsets, estimator, lambda_, noise, seed
        ctx.backend, ctx.options = backend, options
        ctx.symmetric = reverse is None
        if estimator == "blackbox":
            mask = _solve_masks(scores, weights, reverse, offsets, backend, options)
            ctx.save_for_backward(scores, weights, reverse, mask)
            return mask.to(scores.dtype)
        K = samples
        Z = _noise(seed, (K,) + tuple(scores.shape), scores)
        noisy = (scores.detach().unsqueeze(0) + noise * Z).flatten(0, 1)

        def repeat(t):
            return None if t is None else t.detach().unsqueeze(0).expand((K,) + tuple(t.shape)).flatten(0, 1)

        masks = _solve_masks(noisy, repeat(weights), repeat(reverse), offsets, backend, options)
        masks = masks.view((K,) + tuple(scores.shape))
        ctx.save_for_backward(masks)
        return masks.to(scores.dtype).mean(0)

    @staticmethod
    def backward(ctx, grad):
        need_s, need_w, need_r = ctx.needs_input_grad[:3]
        offsets = ctx.offsets
        kinds = ("both", None) if ctx.symmetric else ("fwd", "bwd")
        g_s = g_w = g_r = None
        if ctx.estimator == "blackbox":
            scores, weights, reverse, mask = ctx.saved_tensors
            lam = ctx.lambda_
            shifted = _solve_masks(scores.detach() - lam * grad, weights, reverse, offsets, ctx.backend, ctx.options)
            if need_s:
                g_s = (mask.to(grad.dtype) - shifted.to(grad.dtype)) / lam
            inside = _inside(mask.shape[1:], offsets, mask.device)

            def change(kind):
                return (
                    _pair_changes(shifted, offsets, inside, grad.dtype, kind)
                    - _pair_changes(mask, offsets, inside, grad.dtype, kind)
                ) / lam

            g_w = change(kinds[0]) if need_w else None
            g_r = change(kinds[1]) if need_r else None
            return (g_s, g_w, g_r) + (None,) * 8
        (masks,) = ctx.saved_tensors
        Z = _noise(ctx.seed, tuple(masks.shape), grad)
        if need_s:
            g_s = _perturbed_vjp(grad, masks.to(grad.dtype), Z, ctx.noise)
        if need_w or need_r:
            inside = _inside(masks.shape[2:], offsets, masks.device)
            gz = (grad.unsqueeze(0) * Z).flatten(2).sum(2)

            def pair(kind):
                return _perturbed_pair_vjp(gz, _pair_changes(masks, offsets, inside, grad.dtype, kind), ctx.noise)

            g_w = pair(kinds[0]) if need_w else None
            g_r = pair(kinds[1]) if need_r else None
        return (g_s, g_w, g_r) + (None,) * 8


@torch.compiler.disable
def _apply_binary(*args):
    return _BinaryCut.apply(*args)


def cut_mask(
    scores,
    weights,
    *,
    reverse=None,
    connectivity: int | None = None,
    ndim: int | None = None,
    estimator: str = "blackbox",
    lambda_: float = 10.0,
    samples: int = 8,
    noise: float = 1.0,
    generator: torch.Generator | None = None,
    backend: str = "auto",
    **solver_options,
):
    """The minimum cut of a binary labelling as a differentiable float mask.

    Maximises ``sum_p scores[p] x_p - sum_k sum_p weights[k, p] [x_p != x_{p + offsets[k]}]`` over
    ``x`` in {0, 1} (one exact max-flow per item: the source side, x = 1, is the object), and
    propagates gradients to ``scores`` and ``weights`` with the chosen estimator (module docstring,
    ``docs/gradients.md``).

    Parameters
    ----------
    scores : float tensor ``[*S]`` or ``[B, *S]``
        Per-pixel preference for the object (logits: positive = object). ``S`` is 2D or 3D.
    weights : number or float tensor ``[K, *S]`` or ``[B, K, *S]``
        Non-negative cost of cutting the edge p -- p + offsets[k]; a number or a ``[K, *S]`` tensor is
        shared by the batch. Entries whose edge leaves the grid are ignored (their gradient is 0).
        With ``reverse``: the cost of ``x_p = 1, x_{p + offsets[k]} = 0`` only (the arc p -> p + o of a
        :class:`torchcut.GridGraph`).
    reverse : number or float tensor like ``weights``, optional
        Directed pair terms: the cost of ``x_p = 0, x_{p + offsets[k]} = 1`` (the arc p + o -> p). Default:
        ``weights`` (symmetric).
    connectivity : int, optional
        4 or 8 (2D), 6, 18 or 26 (3D); default 4 or 6.
    ndim : int, optional
        Spatial dims, 2 (default) or 3; told by ``connectivity`` when that is given.
    estimator : {"blackbox", "perturbed"}
        "blackbox": the forward returns the exact 0/1 mask; the backward solves once more (the batch at
        once) with ``scores - lambda_ * grad``. "perturbed": the forward returns the mean of ``samples``
        masks solved with ``scores + noise * Z`` (Z standard Gaussian, the batch of all samples at once);
        the backward uses the same samples and no solve.
    lambda_ : float
        Blackbox interpolation strength: the shift ``lambda_ * grad`` must be comparable to the margins
        of the scores for the backward solve to differ from the forward one (scale it with the number
        of pixels when the loss is a mean).
    samples : int
        Perturbed: noisy copies per item (K).
    noise : float
        Perturbed: standard deviation of the Gaussian noise on the scores.
    generator : torch.Generator, optional
        Perturbed: the CPU generator that draws the noise seed (default: torch's global one).
    backend, **solver_options
        Passed to :func:`torchcut.maxflow`.

    Returns
    -------
    torch.Tensor
        Shaped like ``scores``, in its dtype: the mask (1 = object) or, perturbed, the fraction of the
        samples that put each pixel on the object side.

    Examples
    --------
    >>> import torch
    >>> scores = torch.tensor([[2.0, 0.5, -0.2, -3.0]], requires_grad=True)
    >>> mask = cut_mask(scores, 0.4)              # a 1 x 4 grid, every edge weight 0.4
    >>> mask.tolist()
    [[1.0, 1.0, 0.0, 0.0]]
    >>> (mask * torch.tensor([[0.0, 0.0, -1.0, 0.0]])).sum().backward()   # wants pixel 2 on
    >>> scores.grad                               # the solve with scores + 10 * [0, 0, 1, 0] turns it on
    tensor([[ 0.0000,  0.0000, -0.1000,  0.0000]])
    """
    _check_estimator(estimator, lambda_, samples, noise)
    s = _float_input(scores, "scores")
    nd, offsets, batched = _layout(s, connectivity, ndim, 0)
    s3 = s if batched else s.unsqueeze(0)
    w = _weights_full(weights, s3.shape[0], len(offsets), s3.shape[1:], batched, s.device)
    r = (
        None
        if reverse is None
        else _weights_full(reverse, s3.shape[0], len(offsets), s3.shape[1:], batched, s.device, "reverse")
    )
    seed = _seed(generator) if estimator == "perturbed" else 0
    out = _apply_binary(
        s3, w, r, offsets, estimator, float(lambda_), samples, float(noise), seed, backend, solver_options
    )
    return out if batched else out[0]


# ---------------------------------------------------------------------------------------------- labellings
def _solve_labels(scores, weights, V, connectivity, backend, init, max_iter):
    """int64 ``[B, *S]``: alpha-expansion labels of the unary ``-scores`` (``[B, L, *S]``)."""
    from .multilabel import expansion

    with torch.no_grad():
        U = -scores.detach().to(torch.float64)
        W = None if weights is None else weights.detach().to(torch.float64)
        if init is None and U.shape[1] == 2:
            # from all-zero labels, the move to label 1 reaches every labelling: exact in one cut
            init = torch.zeros((U.shape[0],) + tuple(U.shape[2:]), dtype=torch.int64, device=U.device)
        return expansion(U, V, weights=W, connectivity=connectivity, init=init, max_iter=max_iter, backend=backend)


def _one_hot(labels: torch.Tensor, L: int, dtype) -> torch.Tensor:
    """``[B, L, *S]`` one-hot of int labels ``[B, *S]``."""
    return torch.nn.functional.one_hot(labels, L).movedim(-1, 1).to(dtype)


def _pair_costs(labels: torch.Tensor, V: torch.Tensor, offsets, inside) -> torch.Tensor:
    """``[..., K, *S]``: ``V[f_p, f_{p + offsets[k]}]`` of labels ``[..., *S]`` (0 where the edge leaves)."""
    L = V.shape[0]
    nd = len(offsets[0])
    flat = V.reshape(-1)
    z = torch.stack([flat[labels * L + shift(labels, o, 0)] for o in offsets], labels.dim() - nd)
    return torch.where(inside, z, torch.zeros((), dtype=z.dtype, device=z.device))


class _Labels(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, scores, weights, V, connectivity, offsets, estimator, lambda_, samples, noise, seed, backend, max_iter
    ):
        ctx.conf = (V, connectivity, offsets, estimator, lambda_, noise, seed, backend, max_iter)
        B, L = scores.shape[:2]
        if estimator == "blackbox":
            labels = _solve_labels(scores, weights, V, connectivity, backend, None, max_iter)
            ctx.save_for_backward(scores, weights, labels)
            return _one_hot(labels, L, scores.dtype)
        K = samples
        Z = _noise(seed, (K,) + tuple(scores.shape), scores)
        noisy = (scores.detach().unsqueeze(0) + noise * Z).flatten(0, 1)
        w = None if weights is None else weights.detach().unsqueeze(0).expand((K,) + tuple(weights.shape)).flatten(0, 1)
        labels = _solve_labels(noisy, w, V, connectivity, backend, None, max_iter)
        labels = labels.view((K, B) + tuple(scores.shape[2:]))
        ctx.save_for_backward(labels)
        return torch.stack([_one_hot(x, L, scores.dtype) for x in labels]).mean(0)

    @staticmethod
    def backward(ctx, grad):
        V, connectivity, offsets, estimator, lam, noise, seed, backend, max_iter = ctx.conf
        need_s, need_w = ctx.needs_input_grad[:2]
        g_s = g_w = None
        L = grad.shape[1]
        if estimator == "blackbox":
            scores, weights, labels = ctx.saved_tensors
            init = None if L == 2 else labels  # from the forward's labels: the shifted solve moves only what it must
            shifted = _solve_labels(scores.detach() - lam * grad, weights, V, connectivity, backend, init, max_iter)
            if need_s:
                g_s = (_one_hot(labels, L, grad.dtype) - _one_hot(shifted, L, grad.dtype)) / lam
            if need_w:
                inside = _inside(labels.shape[1:], offsets, labels.device)
                Vd = V.to(grad.dtype)
                g_w = (_pair_costs(shifted, Vd, offsets, inside) - _pair_costs(labels, Vd, offsets, inside)) / lam
            return (g_s, g_w) + (None,) * 10
        (labels,) = ctx.saved_tensors
        K = labels.shape[0]
        Z = _noise(seed, (K,) + tuple(grad.shape), grad)
        if need_s:
            y = torch.stack([_one_hot(x, L, grad.dtype) for x in labels])
            g_s = _perturbed_vjp(grad, y, Z, noise)
            del y
        if need_w:
            inside = _inside(labels.shape[2:], offsets, labels.device)
            gz = (grad.unsqueeze(0) * Z).flatten(2).sum(2)
            g_w = _perturbed_pair_vjp(gz, _pair_costs(labels, V.to(grad.dtype), offsets, inside), noise)
        return (g_s, g_w) + (None,) * 10


@torch.compiler.disable
def _apply_labels(*args):
    return _Labels.apply(*args)


def cut_labels(
    scores,
    weights=None,
    *,
    pairwise=None,
    connectivity: int | None = None,
    ndim: int | None = None,
    estimator: str = "blackbox",
    lambda_: float = 10.0,
    samples: int = 8,
    noise: float = 1.0,
    generator: torch.Generator | None = None,
    backend: str = "auto",
    max_iter: int | None = None,
):
    """A multi-label labelling by alpha-expansion (:func:`torchcut.expansion`) as a differentiable one-hot.

    Minimises ``sum_p -scores[f_p, p] + sum_k sum_p weights[k, p] * pairwise[f_p, f_{p + offsets[k]}]``
    and propagates gradients to ``scores`` and ``weights`` with the chosen estimator (see
    :func:`cut_mask`). With two labels the labelling is exact (one cut); with more it is a local
    minimum with respect to expansion moves, and the estimators differentiate that solver.

    Parameters
    ----------
    scores : float tensor ``[L, *S]`` or ``[B, L, *S]``
        Per-pixel preference for each label (logits, log-probabilities).
    weights : number or float tensor ``[K, *S]`` or ``[B, K, *S]``, optional
        Non-negative multipliers of the pair term of the edge p -- p + offsets[k]; 1 by default (then no
        gradient for them).
    pairwise : tensor ``[L, L]``, optional
        A metric (see :func:`torchcut.expansion`); default Potts ``1 - eye(L)``. Constant: a table that
        requires grad raises ``ValueError``.
    connectivity, ndim
        As for :func:`cut_mask`.
    estimator, lambda_, samples, noise, generator, backend
        As for :func:`cut_mask` (perturbed: the samples are one batched :func:`torchcut.expansion`).
    max_iter : int, optional
        Passed to :func:`torchcut.expansion`.

    Returns
    -------
    torch.Tensor
        ``[L, *S]`` or ``[B, L, *S]`` in the scores' dtype: one-hot labels, or (perturbed) the fraction
        of the samples that chose each label.

    Examples
    --------
    >>> import torch
    >>> scores = torch.log(torch.tensor([[[0.9, 0.6, 0.1]], [[0.1, 0.4, 0.9]]])).requires_grad_()
    >>> y = cut_labels(scores, 1.0)                   # 2 labels on a 1 x 3 grid, Potts weight 1
    >>> y.argmax(0)
    tensor([[0, 0, 1]])
    >>> (y[1] * torch.tensor([[0.0, -1.0, 0.0]])).sum().backward()   # wants label 1 in the middle
    >>> scores.grad[1]
    tensor([[ 0.0000, -0.1000,  0.0000]])
    """
    _check_estimator(estimator, lambda_, samples, noise)
    s = _float_input(scores, "scores")
    nd, offsets, batched = _layout(s, connectivity, ndim, 1)
    connectivity = {(2, 2): 4, (2, 4): 8, (3, 3): 6, (3, 9): 18, (3, 13): 26}[(nd, len(offsets))]
    s4 = s if batched else s.unsqueeze(0)
    B, L = s4.shape[:2]
    if L < 2:
        raise ValueError(f"scores: expected at least 2 labels, got shape {tuple(s.shape)}")
    if pairwise is None:
        V = 1.0 - torch.eye(L, dtype=torch.float64, device=s.device)
    else:
        if isinstance(pairwise, torch.Tensor) and pairwise.requires_grad:
            raise ValueError(
                "pairwise: expected a constant label table; gradients w.r.t. it are not computed "
                "(scale the edges through weights instead), got a tensor that requires grad"
            )
        V = torch.as_tensor(pairwise, device=s.device).to(torch.float64)
        if tuple(V.shape) != (L, L):
            raise ValueError(f"pairwise: expected shape ({L}, {L}) for {L} labels, got {tuple(V.shape)}")
    w = None if weights is None else _weights_full(weights, B, len(offsets), s4.shape[2:], batched, s.device)
    seed = _seed(generator) if estimator == "perturbed" else 0
    out = _apply_labels(
        s4, w, V, connectivity, offsets, estimator, float(lambda_), samples, float(noise), seed, backend, max_iter
    )
    return out if batched else out[0]


def contrast_weights(image, connectivity: int = 4, sigma=None) -> torch.Tensor:
    """Contrast-sensitive edge weights ``exp(-||I_p - I_q||^2 / (2 sigma^2)) / dist(p, q)`` of a 2D image.

    Parameters
    ----------
    image : float tensor ``[H, W]``, ``[C, H, W]`` or ``[B, C, H, W]`` (channels first)
    connectivity : {4, 8}
    sigma : float or tensor ``[B]``, optional
        Contrast scale; default per image the root mean square difference of axis-aligned neighbours
        (1 for a constant image).

    Returns
    -------
    torch.Tensor
        ``[K, H, W]`` (``[B, K, H, W]`` for a batch), the edge p -- p + offsets[k] for
        ``offsets = torchcut.grid_offsets(2, connectivity)``; 0 where the edge leaves the image.
        Differentiable with respect to ``image`` and ``sigma``.

    Examples
    --------
    >>> contrast_weights(torch.tensor([[0.0, 0.0, 1.0]]), sigma=1.0)
    tensor([[[1.0000, 0.6065, 0.0000]],
    <BLANKLINE>
            [[0.0000, 0.0000, 0.0000]]])
    """
    if connectivity not in (4, 8):
        raise ValueError(f"connectivity: expected 4 or 8, got {connectivity!r}")
    x = _float_input(image, "image")
    if x.dim() not in (2, 3, 4):
        raise ValueError(f"image: expected shape [H, W], [C, H, W] or [B, C, H, W], got {tuple(x.shape)}")
    batched = x.dim() == 4
    x = x.reshape((1,) * (4 - x.dim()) + tuple(x.shape))
    B = x.shape[0]
    offsets = grid_offsets(2, connectivity)
    inside = _inside(x.shape[2:], offsets, x.device)
    d2 = torch.stack([(x - shift(x, o, 0.0)).square().sum(1) for o in offsets], 1)  # [B, K, H, W]
    if sigma is None:
        n = inside[:2].sum()
        ms = (d2[:, :2] * inside[:2]).flatten(1).sum(1) / n
        s2 = torch.where(ms > 0, ms, torch.ones_like(ms))
    else:
        s = torch.as_tensor(sigma, dtype=x.dtype, device=x.device).reshape(-1)
        if not bool((s > 0).all()) or not bool(torch.isfinite(s).all()):
            raise ValueError(f"sigma: expected positive finite values, got {sigma!r}")
        s2 = s.square().expand(B)
    dist = torch.tensor([math.sqrt(sum(v * v for v in o)) for o in offsets], dtype=x.dtype, device=x.device)
    w = torch.exp(-d2 / (2 * s2.view(B, 1, 1, 1))) / dist.view(1, -1, 1, 1)
    w = torch.where(inside, w, torch.zeros((), dtype=w.dtype, device=w.device))
    return w if batched else w[0]


def refine(
    image,
    probs,
    *,
    lam=1.0,
    sigma=None,
    connectivity: int = 4,
    estimator: str = "blackbox",
    lambda_: float = 10.0,
    samples: int = 8,
    noise: float = 1.0,
    generator=None,
    backend: str = "auto",
):
    """:func:`torchcut.refine` with gradients: contrast-sensitive Potts labels of class probabilities.

    The energy of :func:`torchcut.refine` (``-log(max(probs, 1e-6))`` per pixel, ``lam * w_pq`` per
    edge with :func:`contrast_weights`), minimised by :func:`cut_labels`; gradients reach ``probs``,
    ``lam`` (a float or a tensor, for instance a learned parameter) and ``image``/``sigma`` through the
    edge weights.

    Parameters
    ----------
    image : float tensor ``[H, W]``, ``[C, H, W]`` or ``[B, C, H, W]`` (channels first)
    probs : float tensor ``[L, H, W]`` or ``[B, L, H, W]``
    lam : float or tensor
    sigma, connectivity
        As for :func:`contrast_weights`.
    estimator, lambda_, samples, noise, generator, backend
        As for :func:`cut_labels`.

    Returns
    -------
    torch.Tensor
        One-hot labels (or their perturbed mean) shaped like ``probs``.

    Examples
    --------
    >>> probs = torch.tensor([[[0.9, 0.6, 0.1]], [[0.1, 0.4, 0.9]]], requires_grad=True)
    >>> refine(torch.zeros(1, 3), probs, lam=2.0).argmax(0)
    tensor([[0, 0, 1]])
    """
    p = _float_input(probs, "probs")
    with torch.no_grad():
        if bool((p < 0).any()):
            raise ValueError(f"probs: expected non-negative probabilities, got minimum {p.min().item()}")
    img = _float_input(image, "image", p.device)
    if p.dim() == 4 and img.dim() == 3 and img.shape[0] == p.shape[0] and img.shape[1:] == p.shape[2:]:
        img = img.unsqueeze(1)  # a batch of grey images [B, H, W]
    w = contrast_weights(img, connectivity, sigma)
    if not isinstance(lam, torch.Tensor):
        if not (isinstance(lam, (int, float)) and math.isfinite(lam) and lam >= 0):
            raise ValueError(f"lam: expected a non-negative finite number or tensor, got {lam!r}")
    w = w * lam
    if p.dim() == 4 and w.dim() == 3:
        w = w.unsqueeze(0).expand((p.shape[0],) + tuple(w.shape))
    scores = torch.log(p.clamp(min=1e-6))
    return cut_labels(
        scores,
        w,
        connectivity=connectivity,
        estimator=estimator,
        lambda_=lambda_,
        samples=samples,
        noise=noise,
        generator=generator,
        backend=backend,
    )
