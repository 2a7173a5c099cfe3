"""``torch.nn`` modules that put graph cuts into a model: a binary cut head, a multi-label refine head
and a structured loss from the cut energy for weak labels (scribbles).

The heads turn a network's logits into a labelling by a graph cut whose pairwise term is the image's
contrast (:func:`torchcut.diff.contrast_weights`), learned from features by a small convolution, or
uniform, times a learned strength ``lam``. In training mode gradients go through the cut with the
chosen estimator (:mod:`torchcut.diff`); in evaluation mode the heads return the exact cut (no noise,
no extra solve unless something asks for a gradient).

Examples
--------
>>> import torch
>>> from torchcut.nn import CutHead
>>> head = CutHead(lam=0.5, pairwise="uniform")
>>> logits = torch.tensor([[[[2.0, 0.3, -0.1, -2.0]]]], requires_grad=True)   # [B, 1, H, W]
>>> mask = head(logits)
>>> mask.tolist()
[[[1.0, 1.0, 0.0, 0.0]]]
>>> (mask - torch.tensor([[[1.0, 1.0, 1.0, 0.0]]])).abs().sum().backward()
>>> round(head.lam.item(), 4), logits.grad.flatten().tolist()   # the cut wants a higher logit at pixel 2
(0.5, [0.0, 0.0, -0.10000000149011612, 0.0])
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .diff import ESTIMATORS, contrast_weights, cut_labels, cut_mask
from .grid import GridGraph, grid_offsets, shift

__all__ = ["CutHead", "RefineHead", "ScribbleCutLoss"]

_PAIRWISE = ("contrast", "learned", "uniform")


class _PairwiseTerm(nn.Module):
    """The edge weights ``lam * w`` of a 2D grid: ``w`` from contrast, a learned convolution, or 1."""

    def __init__(self, lam, pairwise, in_channels, connectivity, sigma, learn_lam):
        super().__init__()
        if pairwise not in _PAIRWISE:
            raise ValueError(f"pairwise: expected one of {_PAIRWISE}, got {pairwise!r}")
        if connectivity not in (4, 8):
            raise ValueError(f"connectivity: expected 4 or 8, got {connectivity!r}")
        if not (isinstance(lam, (int, float)) and math.isfinite(lam) and lam > 0):
            raise ValueError(f"lam: expected a positive finite number, got {lam!r}")
        self.pairwise, self.connectivity, self.sigma = pairwise, connectivity, sigma
        self.K = len(grid_offsets(2, connectivity))
        log_lam = torch.tensor(math.log(lam))
        if learn_lam:
            self.log_lam = nn.Parameter(log_lam)
        else:
            self.register_buffer("log_lam", log_lam)
        if pairwise == "learned":
            if not isinstance(in_channels, int) or in_channels < 1:
                raise ValueError(f"in_channels: expected a positive int for pairwise='learned', got {in_channels!r}")
            self.edge_net = nn.Conv2d(in_channels, self.K, 3, padding=1)
        elif in_channels is not None:
            raise ValueError(
                f"in_channels: only used with pairwise='learned', got {in_channels!r} with pairwise={pairwise!r}"
            )

    @property
    def lam(self) -> torch.Tensor:
        """The pairwise strength (positive: stored as its logarithm)."""
        return self.log_lam.exp()

    def weights(self, shape, guide, device, dtype) -> torch.Tensor:
        """``[B, K, H, W]`` edge weights for logits of spatial ``shape`` and batch ``B``."""
        B, H, W = shape
        if self.pairwise == "uniform":
            w = torch.ones((B, self.K, H, W), device=device, dtype=dtype)
        else:
            if guide is None:
                raise ValueError(f"image: expected a [B, C, H, W] tensor for pairwise={self.pairwise!r}, got None")
            if guide.dim() != 4 or guide.shape[0] != B or tuple(guide.shape[2:]) != (H, W):
                raise ValueError(f"image: expected shape [{B}, C, {H}, {W}], got {tuple(guide.shape)}")
            if self.pairwise == "contrast":
                w = contrast_weights(guide.to(dtype), self.connectivity, self.sigma)
            else:
                w = nn.functional.softplus(self.edge_net(guide)).to(dtype)
        return w * self.lam.to(dtype)


class _Head(nn.Module):
    """What the cut heads share: the pairwise term and the estimator's settings (see :class:`CutHead`)."""

    def __init__(
        self,
        lam: float = 1.0,
        *,
        pairwise: str = "contrast",
        in_channels: int | None = None,
        connectivity: int = 4,
        sigma: float | None = None,
        estimator: str = "blackbox",
        lambda_: float = 10.0,
        samples: int = 8,
        noise: float = 1.0,
        learn_lam: bool = True,
    ):
        super().__init__()
        if estimator not in ESTIMATORS:
            raise ValueError(f"estimator: expected one of {ESTIMATORS}, got {estimator!r}")
        self.pair = _PairwiseTerm(lam, pairwise, in_channels, connectivity, sigma, learn_lam)
        self.estimator, self.lambda_, self.samples, self.noise = estimator, lambda_, samples, noise

    @property
    def lam(self) -> torch.Tensor:
        """The pairwise strength."""
        return self.pair.lam


class CutHead(_Head):
    """Binary graph-cut head: object logits to a mask, trained end to end through the cut.

    The mask maximises ``sum_p logits[p] x_p - lam * sum_pq w_pq [x_p != x_q]`` (one exact max-flow
    per image, :func:`torchcut.diff.cut_mask`).

    Parameters
    ----------
    lam : float
        Initial pairwise strength (a parameter, kept positive as its logarithm).
    pairwise : {"contrast", "learned", "uniform"}
        ``w_pq``: the image's contrast (:func:`torchcut.diff.contrast_weights`), ``softplus`` of a 3 x 3
        convolution of the ``image`` argument (a feature map with ``in_channels`` channels), or 1.
    in_channels : int, optional
        Channels of the feature map that ``pairwise="learned"`` reads.
    connectivity : {4, 8}
    sigma : float, optional
        Contrast scale for ``pairwise="contrast"`` (default: per image).
    estimator, lambda_, samples, noise
        The training-mode gradient (see :func:`torchcut.diff.cut_mask`).
    learn_lam : bool
        Register ``lam`` as a parameter (default) or as a fixed buffer.

    Shapes
    ------
    ``forward(logits, image=None)``: logits ``[B, 1, H, W]`` or ``[B, H, W]``, image ``[B, C, H, W]``
    (needed unless ``pairwise="uniform"``); returns a float mask ``[B, H, W]`` (1 = object). In
    training mode with ``estimator="perturbed"``, the mean of the perturbed masks; in evaluation mode
    always the exact cut.

    Examples
    --------
    >>> import torch
    >>> head = CutHead(lam=1.0, pairwise="contrast", sigma=0.5).eval()
    >>> image = torch.zeros(1, 1, 4, 4); image[..., :, 2:] = 1.0     # a vertical edge
    >>> logits = torch.full((1, 1, 4, 4), -0.3); logits[..., :2] = 0.8; logits[..., 1, 2] = 0.5
    >>> head(logits, image)[0].int()                                  # the stray pixel follows the edge
    tensor([[1, 1, 0, 0],
            [1, 1, 0, 0],
            [1, 1, 0, 0],
            [1, 1, 0, 0]], dtype=torch.int32)
    """

    def forward(self, logits: torch.Tensor, image: torch.Tensor | None = None) -> torch.Tensor:
        if logits.dim() == 4:
            if logits.shape[1] != 1:
                raise ValueError(f"logits: expected shape [B, 1, H, W] or [B, H, W], got {tuple(logits.shape)}")
            logits = logits[:, 0]
        if logits.dim() != 3:
            raise ValueError(f"logits: expected shape [B, 1, H, W] or [B, H, W], got {tuple(logits.shape)}")
        w = self.pair.weights(tuple(logits.shape), image, logits.device, logits.dtype)
        estimator = self.estimator if self.training else "blackbox"
        return cut_mask(
            logits,
            w,
            connectivity=self.pair.connectivity,
            estimator=estimator,
            lambda_=self.lambda_,
            samples=self.samples,
            noise=self.noise,
        )

    def extra_repr(self) -> str:
        return (
            f"pairwise={self.pair.pairwise!r}, connectivity={self.pair.connectivity}, "
            f"estimator={self.estimator!r}, lambda_={self.lambda_}, samples={self.samples}, noise={self.noise}"
        )


class RefineHead(_Head):
    """Multi-label graph-cut head: class logits to a one-hot labelling (alpha-expansion, Potts).

    The labelling maximises ``sum_p log_softmax(logits)[f_p, p] - lam * sum_pq w_pq [f_p != f_q]``
    (:func:`torchcut.diff.cut_labels`; exact for two classes, a local optimum by expansion moves for
    more).

    Parameters
    ----------
    lam, pairwise, in_channels, connectivity, sigma, estimator, lambda_, samples, noise, learn_lam
        As for :class:`CutHead`.

    Shapes
    ------
    ``forward(logits, image=None)``: logits ``[B, L, H, W]``, image ``[B, C, H, W]``; returns a float
    ``[B, L, H, W]``: one-hot labels (training, perturbed: their mean over the samples).

    Examples
    --------
    >>> import torch
    >>> head = RefineHead(lam=1.0, pairwise="uniform").eval()
    >>> logits = torch.tensor([[[[2.0, 0.2, -1.0]], [[0.0, 0.0, 0.0]], [[-1.0, 0.1, 2.0]]]])
    >>> head(logits).argmax(1)
    tensor([[[0, 0, 2]]])
    """

    def forward(self, logits: torch.Tensor, image: torch.Tensor | None = None) -> torch.Tensor:
        if logits.dim() != 4 or logits.shape[1] < 2:
            raise ValueError(f"logits: expected shape [B, L, H, W] with L >= 2, got {tuple(logits.shape)}")
        B, _, H, W = logits.shape
        w = self.pair.weights((B, H, W), image, logits.device, logits.dtype)
        estimator = self.estimator if self.training else "blackbox"
        return cut_labels(
            torch.log_softmax(logits, 1),
            w,
            connectivity=self.pair.connectivity,
            estimator=estimator,
            lambda_=self.lambda_,
            samples=self.samples,
            noise=self.noise,
        )

    extra_repr = CutHead.extra_repr


class ScribbleCutLoss(nn.Module):
    """Structured loss from the cut energy for weak labels: how much the best labelling consistent with
    the scribbles falls short of the best labelling overall.

    With ``S(x) = sum_p scores[p] x_p - sum_pq weights_pq [x_p != x_q]``, the loss of an image is
    ``max_x S(x) - max_{x agrees with the scribbles} S(x) >= 0`` (a structured hinge without margin,
    as in a latent structured SVM). It is 0 when the cut of the scores already agrees with every
    scribble. Both maxima are minimum cuts (``sum_p relu(scores[p])`` minus the flow value), so the
    gradient is exact (the difference of the two cuts, see :func:`torchcut.diff.flow_value`), with
    respect to the scores and the weights, and costs the two solves of the forward pass.

    Parameters
    ----------
    connectivity : {4, 8}
    reduction : {"mean", "sum", "none"}
        Over the batch (each image's loss is a sum over its pixels and edges).

    Shapes
    ------
    ``forward(scores, scribbles, weights)``: scores ``[B, H, W]`` (or ``[B, 1, H, W]``) object logits,
    scribbles int ``[B, H, W]`` (0 unlabelled, 1 object, 2 background, as for
    :func:`torchcut.segment`), weights a number, ``[K, H, W]`` or ``[B, K, H, W]`` (non-negative);
    returns a scalar (``reduction="none"``: ``[B]``).

    Examples
    --------
    >>> import torch
    >>> loss = ScribbleCutLoss()
    >>> scores = torch.tensor([[[1.0, 0.5, -0.5, -1.0]]], requires_grad=True)
    >>> scribbles = torch.tensor([[[1, 0, 1, 2]]])       # pixel 2 is marked object
    >>> value = loss(scores, scribbles, 0.2)
    >>> round(value.item(), 4)                           # the cut must move: 0.5 more cost
    0.5
    >>> value.backward()
    >>> scores.grad.tolist()                              # raise pixel 2
    [[[0.0, 0.0, -1.0, 0.0]]]
    """

    def __init__(self, connectivity: int = 4, reduction: str = "mean"):
        super().__init__()
        if connectivity not in (4, 8):
            raise ValueError(f"connectivity: expected 4 or 8, got {connectivity!r}")
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction: expected 'mean', 'sum' or 'none', got {reduction!r}")
        self.connectivity, self.reduction = connectivity, reduction
        self.offsets = grid_offsets(2, connectivity)

    def forward(self, scores: torch.Tensor, scribbles: torch.Tensor, weights) -> torch.Tensor:
        if scores.dim() == 4 and scores.shape[1] == 1:
            scores = scores[:, 0]
        if scores.dim() != 3 or not scores.is_floating_point():
            raise ValueError(
                f"scores: expected a float tensor [B, H, W] or [B, 1, H, W], got "
                f"{scores.dtype} of shape {tuple(scores.shape)}"
            )
        if (
            not isinstance(scribbles, torch.Tensor)
            or scribbles.is_floating_point()
            or tuple(scribbles.shape) != tuple(scores.shape)
        ):
            raise ValueError(
                f"scribbles: expected an integer tensor of shape {tuple(scores.shape)}, got "
                f"{scribbles.dtype if isinstance(scribbles, torch.Tensor) else type(scribbles).__name__}"
                f" of shape {tuple(getattr(scribbles, 'shape', ()))}"
            )
        bad = (scribbles < 0) | (scribbles > 2)
        if bool(bad.any()):
            raise ValueError(
                f"scribbles: expected 0 (unlabelled), 1 (object) or 2 (background), got {scribbles[bad][0].item()}"
            )
        B, H, W = scores.shape
        K = len(self.offsets)
        if isinstance(weights, (int, float)):
            weights = torch.tensor(float(weights), dtype=scores.dtype, device=scores.device)
        w = weights if weights.dim() else weights.expand(K, H, W)
        if w.dim() == 3:
            w = w.expand(B, K, H, W)
        if tuple(w.shape) != (B, K, H, W):
            raise ValueError(
                f"weights: expected a number, ({K}, {H}, {W}) or ({B}, {K}, {H}, {W}), got {tuple(weights.shape)}"
            )
        if bool((w < 0).any()):
            raise ValueError(f"weights: expected non-negative edge weights, got minimum {w.min().item()}")
        src, snk = scores.clamp(min=0), (-scores).clamp(min=0)
        edges = w.transpose(0, 1)
        with torch.no_grad():  # more than a pixel's terms can ever save: a scribbled pixel never moves
            inside = torch.stack(
                [shift(torch.ones(H, W, dtype=torch.bool, device=w.device), o, False) for o in self.offsets]
            )
            reach = (w * inside).sum(1) + sum(
                shift(w[:, k] * inside[k], tuple(-v for v in o), 0.0) for k, o in enumerate(self.offsets)
            )
            hard = float((reach + scores.abs()).max()) + 1.0
        fixed_src = (scribbles == 1).to(scores.dtype) * hard
        fixed_snk = (scribbles == 2).to(scores.dtype) * hard
        free = self._flow(src, snk, edges)
        # a scribbled pixel's added arc is never cut: the held flow is the best consistent cut exactly
        held = self._flow(src + fixed_src, snk + fixed_snk, edges)
        loss = held - free
        if self.reduction == "mean":
            return loss.mean()
        if self.reduction == "sum":
            return loss.sum()
        return loss

    @torch.compiler.disable  # the graph must be built eagerly to carry the flow value's gradient
    def _flow(self, source, sink, edges) -> torch.Tensor:
        from .solvers import maxflow

        g = GridGraph(source, sink, edges, self.offsets)
        v = maxflow(g).flow_value
        if not isinstance(v, torch.Tensor):  # nothing requires grad: the value as a tensor all the same
            v = torch.tensor(v, dtype=source.dtype, device=source.device)
        return v.to(source.dtype)

    def extra_repr(self) -> str:
        return f"connectivity={self.connectivity}, reduction={self.reduction!r}"
