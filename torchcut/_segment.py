"""Seeded binary segmentation: ``segment(image, seeds) -> mask``.

The pipeline is ``segmentation_graph`` (:mod:`torchcut.energy`) -> :func:`torchcut.maxflow` -> the
source side of the minimum cut. Everything runs on the image's device.
"""

from __future__ import annotations

import json

import torch
from torch import Tensor

from ._ops import CUDAGRAPH_UNSAFE, check_not_capturing
from .energy import DEFAULT_LAM, segmentation_graph
from .solvers import maxflow
from .solvers._maxflow import _consume
from .solvers._options import check_options, device_of

__all__ = ["segment"]


def segment(
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
    backend: str = "auto",
    return_result: bool = False,
    **solver_options,
):
    """Segment an object from seed scribbles with a graph cut (Boykov and Jolly 2001).

    Parameters
    ----------
    image : torch.Tensor, numpy.ndarray or PIL.Image.Image
        ``[H, W]``, ``[D, H, W]`` or with a channel axis (``[C, H, W]``, ``[H, W, C]``, ...),
        optionally batched ``[B, ...]``. See :mod:`torchcut.energy` for how the channel axis and the
        number of spatial dimensions are found.
    seeds : torch.Tensor, numpy.ndarray or PIL.Image.Image
        Integer labels shaped like the image without its channel axis: 0 unknown, 1 object,
        2 background (as in ``skimage.segmentation.random_walker``).
    lam : float
        Weight of the smoothness term relative to the colour data term (default 8, the weight the
        Tsukuba example segments its lamp with; it weighs histogram log-likelihoods, so GrabCut's
        Gaussian-mixture costs and refine's ``-log p`` take other values).
    sigma : float, optional
        Contrast scale in the image's units; estimated per image by default.
    connectivity : int, optional
        4 or 8 (2D), 6, 18 or 26 (3D); default 4 in 2D, 6 in 3D, the smallest graphs (the fastest
        solves and least memory; 8 and 26 follow diagonal boundaries more closely).
    ndim : int, optional
        Number of spatial dimensions (2 or 3); required for 3-dimensional seeds unless
        ``connectivity`` tells it (``[B, H, W]`` batch or ``[D, H, W]`` volume).
    channel_axis : int, optional
        The image's channel axis when its shape alone does not tell it.
    bins : int, optional
        Colour histogram levels per channel.
    scale : float, optional
        Integer capacity units per energy unit (default ``1024 / max(lam, 1)``).
    spacing : sequence of float, optional
        Pixel or voxel size per spatial axis, for anisotropic volumes.
    backend : {"auto", "reference", "cpu", "cuda"}
        Max-flow backend, see :func:`torchcut.maxflow`: "auto" (default) takes the CUDA kernels for
        CUDA images and the compiled CPU solver for CPU images.
    return_result : bool
        Also return the :class:`~torchcut.CutResult` (flow value, ``verify()``, solver stats; its
        ``graph.energy`` records sigma, scale and the seed capacity). ``result.stats["syncs"]`` counts
        the values the energy build read back to the host (each a wait for a CUDA device): one, the
        checks (an estimated ``sigma`` is worked out on the device); the solver's own reads are not
        counted.
    **solver_options
        Passed to the backend: ``threads`` and ``algorithm`` for the compiled CPU solver, the tuning
        options in ``torchcut.solvers.cuda.OPTIONS`` for the CUDA kernels, ``max_iter`` and
        ``relabel_period`` for the reference. Any other keyword raises ``TypeError`` naming
        ``segment()``, what it takes and what the backend takes.

    Returns
    -------
    torch.Tensor or (torch.Tensor, CutResult)
        Bool mask shaped like ``seeds``, on the image's device: True = object (source side).
        (PyMaxflow's ``get_grid_segments`` returns the opposite, True = sink side.)

    Notes
    -----
    CUDA images are solved by the CUDA push-relabel kernels. CPU images are solved by the compiled
    CPU solver (:mod:`torchcut.solvers.cpu`): Boykov-Kolmogorov, or Hochbaum's pseudoflow for images
    whose smoothness term is strong next to the data term (``algorithm="auto"``). It is compiled
    when torchcut is installed and loaded at import; only where no installed build fits the running
    torch is it compiled once into a cache, and where that fails too, "auto" falls back (with one
    warning) to the reference push-relabel in torch ops, which is slow on large images.
    ``segmentation_graph`` gives the integer capacities, for other solvers.

    Examples
    --------
    >>> import torch, torchcut
    >>> image = torch.zeros(6, 6); image[1:4, 1:4] = 1.0
    >>> seeds = torch.zeros(6, 6, dtype=torch.int64); seeds[2, 2] = 1; seeds[5, 5] = 2
    >>> torchcut.segment(image, seeds).int()
    tensor([[0, 0, 0, 0, 0, 0],
            [0, 1, 1, 1, 0, 0],
            [0, 1, 1, 1, 0, 0],
            [0, 1, 1, 1, 0, 0],
            [0, 0, 0, 0, 0, 0],
            [0, 0, 0, 0, 0, 0]], dtype=torch.int32)
    >>> mask, result = torchcut.segment(image, seeds, return_result=True)
    >>> result.verify(), mask.device == image.device
    (True, True)

    ``torch.compile(..., fullgraph=True)`` traces it (the energy and the cut run as one custom op):

    >>> compiled = torch.compile(torchcut.segment, fullgraph=True)
    >>> torch.equal(compiled(image, seeds), torchcut.segment(image, seeds))  # doctest: +SKIP
    True
    """
    if torch.compiler.is_compiling() and not return_result:
        # One opaque custom op: the energy's checks and estimates depend on the data.
        from .solvers.ops import options_string

        return segment_mask(
            image,
            seeds,
            float(lam),
            sigma,
            connectivity,
            ndim,
            channel_axis,
            bins,
            scale,
            None if spacing is None else [float(v) for v in spacing],
            backend,
            options_string(solver_options),
        )
    if solver_options:
        check_options(segment, solver_options, device_of(image), backend)
    if device_of(image).type == "cuda":  # before the energy is queued: the capture stays valid
        check_not_capturing("torchcut.segment")
    graph = segmentation_graph(
        image,
        seeds,
        lam=lam,
        sigma=sigma,
        connectivity=connectivity,
        ndim=ndim,
        channel_axis=channel_axis,
        bins=bins,
        scale=scale,
        spacing=spacing,
    )
    if not return_result:  # nobody sees the graph again: solve in its tensors, without copies
        # (its terminals are netted as built: each node's data cost is on one side, a seed's on its own)
        return _consume(graph, backend, True, solver_options).bool()
    result = maxflow(graph, backend=backend, **solver_options)
    result.stats["syncs"] = graph.energy.syncs
    mask = result.mask
    if mask.dtype != torch.bool:  # pragma: no cover - backends return bool
        mask = mask.bool()
    return (mask, result) if return_result else mask


@torch.library.custom_op("torchcut::segment_mask", mutates_args=(), tags=CUDAGRAPH_UNSAFE)
def segment_mask(
    image: Tensor,
    seeds: Tensor,
    lam: float,
    sigma: float | None,
    connectivity: int | None,
    ndim: int | None,
    channel_axis: int | None,
    bins: int | None,
    scale: float | None,
    spacing: list[float] | None,
    backend: str,
    options: str,
) -> Tensor:
    """``torchcut.segment(image, seeds, ...)`` as one op: what ``segment`` calls inside ``torch.compile``.

    Examples
    --------
    >>> import torch
    >>> image = torch.zeros(4, 4); image[:2] = 1
    >>> seeds = torch.zeros(4, 4, dtype=torch.int64); seeds[0, 0] = 1; seeds[3, 3] = 2
    >>> segment_mask(image, seeds, 8.0, None, None, None, None, None, None, None, "auto", "{}").sum().item()
    8
    """
    return segment(
        image,
        seeds,
        lam=lam,
        sigma=sigma,
        connectivity=connectivity,
        ndim=ndim,
        channel_axis=channel_axis,
        bins=bins,
        scale=scale,
        spacing=spacing,
        backend=backend,
        **json.loads(options),
    )


@segment_mask.register_fake
def _(image, seeds, lam, sigma, connectivity, ndim, channel_axis, bins, scale, spacing, backend, options):
    return torch.empty(seeds.shape, dtype=torch.bool, device=image.device)
