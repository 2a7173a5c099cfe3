"""Interactive segmentation: one image, strokes added or erased, each answer re-solved from the last flow.

A :class:`Segmenter` holds an image's smoothness network (built once) and the last maximum flow, and
solves every :meth:`Segmenter.update` from the previous flow instead of from zero (Kohli and Torr's
dynamic graph cuts: the flow is re-fitted to the new terminal capacities, see
:mod:`torchcut.solvers.warm`). Its data term follows one of two models:

* ``model="refit"`` (default): every update rebuilds the data term from the current seeds (the colour
  histograms of the object and background strokes, the hard constraints on the stroked pixels). The
  mask is always the one :func:`torchcut.segment` returns for the same image and seeds: the canonical
  minimum cut does not depend on where the solver started. A stroke changes the histograms, so every
  pixel's terminal capacities change.
* ``model="fixed"``: the histograms are fitted to the seeds of the first update (and again where an
  update asks with ``refit=True``) and kept; later strokes change only the hard constraints of the
  pixels whose seed changed, as in Boykov and Jolly's interactive editing (ICCV 2001). A stroke then
  changes the terminal capacities of its own pixels alone, and the last flow is nearly a maximum flow
  of the new network. On the CPU the network and its Boykov-Kolmogorov search trees are kept between
  updates (:class:`torchcut.solvers.dynamic.DynamicFlowGraph`), so the search continues from the
  stroke's pixels. A 512^2 update took about a third of the time of ``"refit"`` on one H200 and a
  twentieth on 2 CPU cores (``benchmarks/interactive.py``; docs/performance.md); the first update
  costs more on the CPU (the network is converted to a FlowGraph once). The mask is the canonical
  minimum cut of that energy (the same with ``warm=False``).

Examples
--------
>>> import torch, torchcut
>>> image = torch.zeros(6, 8); image[:, 4:] = 1.0
>>> seg = torchcut.Segmenter(image)
>>> seeds = torch.zeros(6, 8, dtype=torch.int64); seeds[2, 1] = 1; seeds[2, 6] = 2
>>> seg.update(seeds).int().tolist()[0]
[1, 1, 1, 1, 0, 0, 0, 0]
>>> m = seg.stroke([(0, 5), (5, 5)], label=1, radius=0.5)   # object strokes on the bright half too
>>> m.int().tolist()[2]                                        # all object but the background seed
[1, 1, 1, 1, 1, 1, 0, 1]
"""

from __future__ import annotations

import math
import time

import torch

from ._validate import describe
from .energy import DEFAULT_LAM, _as_image_tensor, _labels_error, model_terms, segmentation_graph
from .graph import FlowGraph
from .solvers.dynamic import DynamicFlowGraph
from .solvers.warm import WarmGrid

__all__ = ["Segmenter"]


class Segmenter:
    """Segment one image or volume from seeds that change, re-solving each change from the last flow.

    Parameters
    ----------
    image : torch.Tensor, numpy.ndarray or PIL.Image.Image
        One image ``[H, W]`` / ``[H, W, C]`` / ``[C, H, W]`` or volume ``[D, H, W]`` (no batch), as for
        :func:`torchcut.segment`. Its device is where every solve runs.
    lam, sigma, connectivity, ndim, channel_axis, bins, scale, spacing
        The energy, as for :func:`torchcut.segment` (same defaults). ``sigma`` is estimated once, from
        the image, when not given.
    backend : {"auto", "cpu", "cuda", "reference"}
        The grid solver, as for :func:`torchcut.maxflow`.
    warm : bool
        Solve every update from the last flow (default). False solves from zero flow every time (the
        same masks; for comparisons).
    model : {"refit", "fixed"}
        The data term: "refit" rebuilds the colour histograms from the seeds of every update (the masks
        of :func:`torchcut.segment`); "fixed" keeps the histograms of the first update's seeds (or of the
        last update with ``refit=True``), so that a stroke changes its own pixels' terminal capacities
        alone (faster re-solves; see the module documentation).

    Attributes
    ----------
    mask : torch.Tensor or None
        bool, the last update's object mask (True = object), on the image's device.
    seeds : torch.Tensor or None
        int64, the seeds of the last update.
    stats : dict
        Counters of the last solve, with ``seconds`` (the whole update), ``warm`` (whether it started
        from the last flow) and ``refit`` (whether the update fitted the histograms to its seeds).

    Examples
    --------
    >>> import torch, torchcut
    >>> image = torch.zeros(5, 5); image[:, 3:] = 1.0
    >>> seg = torchcut.Segmenter(image, lam=2.0)
    >>> seeds = torch.zeros(5, 5, dtype=torch.int64); seeds[0, 0] = 1; seeds[0, 4] = 2
    >>> seg.update(seeds).int().sum().item()
    15
    >>> bool((seg.update(seeds) == torchcut.segment(image, seeds, lam=2.0)).all())
    True
    """

    def __init__(
        self,
        image,
        *,
        lam: float = DEFAULT_LAM,
        sigma: float | None = None,
        connectivity: int | None = None,
        ndim: int | None = None,
        channel_axis: int | None = None,
        bins: int | None = None,
        scale: float | None = None,
        spacing=None,
        backend: str = "auto",
        warm: bool = True,
        model: str = "refit",
    ):
        if model not in ("refit", "fixed"):
            raise ValueError(f"model: expected 'refit' or 'fixed', got {model!r}")
        self.image = _as_image_tensor(image, "image")
        self._energy = dict(
            lam=lam,
            sigma=sigma,
            connectivity=connectivity,
            ndim=ndim,
            channel_axis=channel_axis,
            bins=bins,
            scale=scale,
            spacing=spacing,
        )
        self.backend = backend
        self.warm = bool(warm)
        self.model = model
        self._solver = None
        self._caps = None  # the smoothness network: the same for every update
        self._terms = None  # model "fixed": the data term without hard constraints (source, sink), hard
        self._dynamic = None  # model "fixed" on the CPU: the kept network and search trees
        self.mask = None
        self.seeds = None
        self.stats: dict = {}

    @property
    def device(self) -> torch.device:
        """The device of the image, where the solves run."""
        return self.image.device

    def _check_seeds(self, seeds) -> torch.Tensor:
        s = seeds if isinstance(seeds, torch.Tensor) else torch.as_tensor(seeds)
        if s.dtype == torch.bool or s.is_floating_point() or s.is_complex():
            raise TypeError(
                f"seeds: expected integer labels 0 (unknown), 1 (object), 2 (background), got {describe(s)}"
            )
        if s.device != self.device:
            raise ValueError(f"seeds: expected a tensor on {self.device} (the image's device), got one on {s.device}")
        if self.seeds is not None and s.shape != self.seeds.shape:
            raise ValueError(
                f"seeds: expected shape {tuple(self.seeds.shape)} (that of the earlier seeds), got {tuple(s.shape)}"
            )
        return s.to(torch.int64)

    def update(self, seeds, refit: bool = False) -> torch.Tensor:
        """The object mask for ``seeds`` (the whole seed map: strokes added or erased), re-solved from the
        last flow.

        Parameters
        ----------
        seeds : torch.Tensor or numpy.ndarray
            Integer labels shaped like the image without its channel axis, on the image's device: 0 unknown,
            1 object, 2 background. The update that fits the histograms (every update with
            ``model="refit"``, the first with ``"fixed"``) needs at least one object and one background
            seed.
        refit : bool
            With ``model="fixed"``: fit the histograms to these seeds and keep them for the updates that
            follow. (``"refit"`` fits them at every update.)

        Returns
        -------
        torch.Tensor
            bool mask (True = object). With ``model="refit"``, equal to ``torchcut.segment(image, seeds,
            ...)`` with this segmenter's energy options; with ``"fixed"``, the canonical minimum cut of
            the energy whose data term comes from the fitted histograms and whose hard constraints are
            ``seeds``.

        Examples
        --------
        >>> import torch, torchcut
        >>> seg = torchcut.Segmenter(torch.tensor([[0., 0., 1., 1.]]))
        >>> seg.update(torch.tensor([[1, 0, 0, 2]])).tolist()
        [[True, True, False, False]]
        >>> fixed = torchcut.Segmenter(torch.tensor([[0., 0., 1., 1.]]), model="fixed")
        >>> _ = fixed.update(torch.tensor([[1, 0, 0, 2]]))
        >>> fixed.update(torch.tensor([[1, 0, 2, 0]])).tolist()   # only the hard constraints moved
        [[True, True, False, False]]
        """
        t0 = time.perf_counter()
        s = self._check_seeds(seeds)
        fit = self.model == "refit" or self._terms is None or bool(refit)
        if fit:
            opts = dict(self._energy)
            g = segmentation_graph(self.image, s, **opts)
            if g.batched:
                raise ValueError(
                    f"image: expected one image or volume (no batch), got shape {tuple(self.image.shape)} "
                    f"with seeds {tuple(s.shape)}"
                )
            if opts["sigma"] is None:  # the contrast scale depends on the image alone: estimate it once
                self._energy["sigma"] = float(g.energy.sigma[0])
            if self.model == "fixed":
                self._terms = model_terms(self.image, s, g) + (g.energy.hard,)
        if self.model == "fixed" and self.device.type == "cpu" and self.backend in ("auto", "cpu"):
            return self._update_kept(s, g if fit else None, fit, t0)
        if fit:
            offsets, caps, source, sink = g.offsets, g.caps, g.source, g.sink
        else:
            offsets, caps = None, None
            source, sink = self._hard_constraints(s)
        if self._solver is None:
            self._solver = WarmGrid(offsets, backend=self.backend, warm=self.warm)
        links_changed = self._caps is None
        if links_changed:
            self._caps = caps
        mask = self._solver.solve(self._caps, source, sink, links_changed=links_changed)
        self.mask = mask[0]
        self.seeds = s
        self.stats = dict(self._solver.log[-1])
        self.stats.update(warm=self.warm and not links_changed, refit=fit, seconds=time.perf_counter() - t0)
        del self._solver.log[:-1]
        return self.mask

    def _update_kept(self, s: torch.Tensor, g, fit: bool, t0: float) -> torch.Tensor:
        """Model "fixed" on the CPU: the network as a FlowGraph whose residuals and Boykov-Kolmogorov
        search trees live on between updates (:class:`~torchcut.solvers.dynamic.DynamicFlowGraph`); an
        update passes the terminal capacities of the pixels whose seed changed, and the search continues
        from them alone."""
        d = self._dynamic
        first = d is None
        if first:  # the graph of the first update, solved from scratch
            d = self._dynamic = DynamicFlowGraph(FlowGraph.from_grid(g), backend="cpu", warm=self.warm)
        elif fit:  # histograms fitted again: every pixel's terminals
            d.set_terminals(source=g.source.reshape(-1), sink=g.sink.reshape(-1))
        else:
            changed = (s != self.seeds).reshape(-1).nonzero().squeeze(1)
            if changed.numel():
                labels = s.reshape(-1).index_select(0, changed)
                src, snk = self._hard_constraints(labels, changed)
                d.set_terminals(source=src, sink=snk, nodes=changed)
        r = d.maxflow()
        self.mask = r.mask.view(s.shape)
        self.seeds = s
        self.stats = dict(r.stats)
        self.stats.update(warm=self.warm and not first, refit=fit, seconds=time.perf_counter() - t0)
        return self.mask

    def _hard_constraints(self, s: torch.Tensor, nodes: torch.Tensor | None = None):
        """Model "fixed": the kept data term with the hard constraints of seeds ``s``: terminals ``[1, *S]``,
        or, with ``nodes`` (flat pixel indices, ``s`` their labels), of those pixels alone; one read of the
        labels' range."""
        lo, hi = torch.stack(torch.aminmax(s)).tolist()
        if lo < 0 or hi > 2:
            raise _labels_error(lo, hi)
        soft_src, soft_snk, hard = self._terms
        if nodes is not None:
            soft_src, soft_snk = (t.reshape(-1).index_select(0, nodes) for t in (soft_src, soft_snk))
        obj, bkg = s == 1, s == 2
        source = torch.where(obj, hard, soft_src.masked_fill(bkg, 0))
        sink = torch.where(bkg, hard, soft_snk.masked_fill(obj, 0))
        return source, sink

    def stroke(self, points, label: int, radius: float = 2.0) -> torch.Tensor:
        """Paint a brush stroke into the current seeds and update: the mask after the stroke.

        Parameters
        ----------
        points : sequence of coordinates
            The stroke's polyline, one ``(row, col)`` (2D) or ``(z, row, col)`` (3D) point per vertex, in
            pixels; a single point paints a dot.
        label : {0, 1, 2}
            1 paints object seeds, 2 background seeds, 0 erases seeds.
        radius : float
            The brush radius in pixels (pixels within it of the polyline are painted).

        Returns
        -------
        torch.Tensor
            The mask after the stroke (see :meth:`update`).

        Examples
        --------
        >>> import torch, torchcut
        >>> seg = torchcut.Segmenter(torch.zeros(8, 8), lam=1.0)
        >>> _ = seg.stroke([(1, 1)], label=1, radius=1)
        >>> seg.stroke([(6, 0), (6, 7)], label=2, radius=1).int().sum().item() > 0
        True
        """
        if isinstance(label, bool) or label not in (0, 1, 2):
            raise ValueError(f"label: expected 0 (erase), 1 (object) or 2 (background), got {label!r}")
        if not (isinstance(radius, (int, float)) and math.isfinite(radius) and radius >= 0):
            raise ValueError(f"radius: expected a finite number >= 0, got {radius!r}")
        shape = self._seed_shape()
        pts = torch.as_tensor(points, dtype=torch.float64)
        if pts.dim() != 2 or pts.shape[0] < 1 or pts.shape[1] != len(shape):
            raise ValueError(
                f"points: expected a sequence of {len(shape)}-coordinate points, got shape {tuple(pts.shape)}"
            )
        if not bool(torch.isfinite(pts).all()):
            raise ValueError("points: expected finite coordinates, got NaN or infinite value(s)")
        seeds = (
            self.seeds.clone() if self.seeds is not None else torch.zeros(shape, dtype=torch.int64, device=self.device)
        )
        seeds[brush(shape, pts, radius).to(self.device)] = label
        if self.seeds is None and not (bool((seeds == 1).any()) and bool((seeds == 2).any())):
            self.seeds = seeds  # the first strokes: wait for both kinds of seed before solving
            return torch.zeros(shape, dtype=torch.bool, device=self.device)
        return self.update(seeds)

    def _seed_shape(self) -> tuple:
        if self.seeds is not None:
            return tuple(self.seeds.shape)
        nd = self._energy["ndim"] or (3 if self._energy["connectivity"] in (6, 18, 26) else None)
        shape = tuple(self.image.shape)
        if self._energy["channel_axis"] is not None:
            ax = self._energy["channel_axis"] % len(shape)
            return shape[:ax] + shape[ax + 1 :]
        if nd is None:
            nd = 2 if len(shape) == 2 or (len(shape) == 3 and (shape[-1] in (1, 3, 4) or shape[0] in (1, 3, 4))) else 3
        if len(shape) == nd:
            return shape
        return shape[:-1] if shape[-1] <= 4 else shape[1:]


def brush(shape, points: torch.Tensor, radius: float) -> torch.Tensor:
    """bool ``shape``: the pixels within ``radius`` of the polyline through ``points`` (``[P, ndim]``).

    Examples
    --------
    >>> brush((3, 5), torch.tensor([[1.0, 0.0], [1.0, 4.0]]), 0.5).int().tolist()
    [[0, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]
    """
    grids = torch.meshgrid(*[torch.arange(n, dtype=torch.float64) for n in shape], indexing="ij")
    x = torch.stack(grids, -1)  # [*shape, nd]
    best = torch.full(tuple(shape), math.inf, dtype=torch.float64)
    segs = [(points[i], points[i + 1]) for i in range(points.shape[0] - 1)] or [(points[0], points[0])]
    for a, b in segs:
        ab = b - a
        den = float((ab * ab).sum())
        t = ((x - a) * ab).sum(-1) / den if den > 0 else torch.zeros(tuple(shape), dtype=torch.float64)
        closest = a + t.clamp(0, 1).unsqueeze(-1) * ab
        best = torch.minimum(best, ((x - closest) ** 2).sum(-1))
    return best <= radius * radius + 1e-9
