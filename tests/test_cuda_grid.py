"""The CUDA grid solver against PyMaxflow and the reference solver (GPU tests, marked ``cuda``).

Flow values must equal PyMaxflow's and the reference's exactly; every result must verify; masks are the
canonical minimum cut, so they must equal the reference's and be identical over repeated runs even
though atomics make the flows themselves vary. The fallback test at the end runs without a GPU.

``TORCHCUT_TEST_GRID_OPTS='{"persist": -1, "push_tail": -1}' pytest -m cuda ...`` runs the whole file
with those solver options as defaults (options a test passes itself win).
"""

from __future__ import annotations

import json
import os
import warnings

import flow_cases as fc
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles import pymaxflow_grid

import torchcut
from torchcut import GridGraph, grid_offsets
from torchcut.solvers import cuda as cuda_backend
from torchcut.solvers._backends import GRID

INT32_MAX = 2**31 - 1
ENV_OPTS = json.loads(os.environ.get("TORCHCUT_TEST_GRID_OPTS") or "{}")


@pytest.fixture(autouse=True)
def _default_grid_opts(monkeypatch):
    """Apply ``TORCHCUT_TEST_GRID_OPTS`` (JSON dict) as default options of the CUDA grid solver."""
    if ENV_OPTS:
        solve = cuda_backend.solve_grid

        def with_defaults(caps, excess, sink, offsets, **options):
            return solve(caps, excess, sink, offsets, **{**ENV_OPTS, **options})

        monkeypatch.setattr(cuda_backend, "solve_grid", with_defaults)


# ---------------------------------------------------------------------------------------- helpers
def _pymaxflow(source, sink, edges, offsets, reverse) -> int:
    """Max flow of one grid item by PyMaxflow, built straight from the raw arrays (float64: exact)."""
    pytest.importorskip("maxflow")
    return int(round(pymaxflow_grid(source, sink, edges, offsets, reverse)))


def _instance(shape, offsets, *, batch=None, directed=False, hi=100, density=0.7, seed=0, term_hi=None):
    """Random capacities: arcs zeroed with probability 1 - density, terminals sparse-ish."""
    rng = np.random.default_rng(seed)
    full = ((batch,) if batch else ()) + tuple(shape)
    K = len(offsets)
    th = term_hi or 3 * hi

    def arcs():
        a = rng.integers(0, hi + 1, size=(K,) + full, dtype=np.int64)
        return a * (rng.random(a.shape) < density)

    edges = arcs()
    reverse = arcs() if directed else edges
    source = rng.integers(0, th + 1, size=full, dtype=np.int64) * (rng.random(full) < 0.5)
    sink = rng.integers(0, th + 1, size=full, dtype=np.int64) * (rng.random(full) < 0.5)
    return source, sink, edges, reverse


def _check(source, sink, edges, offsets, reverse, *, batch=False, reference=True, repeats=5, **opts):
    """Solve on the GPU `repeats` times; compare with PyMaxflow and (optionally) the reference."""
    dev = "cuda"
    g = GridGraph(
        torch.as_tensor(source, device=dev),
        torch.as_tensor(sink, device=dev),
        torch.as_tensor(edges, device=dev),
        offsets,
        reverse=torch.as_tensor(reverse, device=dev),
    )
    results = [torchcut.maxflow(g, backend="cuda", **opts) for _ in range(repeats)]
    first = results[0]
    assert first.stats["backend"] == "cuda"
    for r in results:
        assert r.verify()
        assert torch.equal(r.node_mask, first.node_mask), "mask differs between repeated runs"
        assert torch.equal(r.flow_values, first.flow_values)
    items = range(source.shape[0]) if batch else [None]
    expected = []
    for b in items:
        sel = (lambda a: a[b]) if batch else (lambda a: a)
        sel_k = (lambda a: a[:, b]) if batch else (lambda a: a)
        expected.append(_pymaxflow(sel(source), sel(sink), sel_k(edges), offsets, sel_k(reverse)))
    assert first.flow_values.tolist() == expected
    if reference:
        ref = torchcut.maxflow(g.to("cpu"), backend="reference")
        assert ref.flow_values.tolist() == expected
        assert torch.equal(ref.node_mask, first.node_mask.cpu()), "mask is not the canonical minimum cut"
    return first


def _long_path_batch(shape, K, seed):
    """A batch of three long-path energies with many relabels: strong arcs (20-59) both ways, sources
    (200-899) in the first 2 columns and sinks in the last 2; item 1 has a weak wall across the middle,
    item 2 sink arcs scattered everywhere. Returns int64 ``(source, sink, edges, reverse)``."""
    rng = np.random.default_rng(seed)
    B = 3
    edges = rng.integers(20, 60, size=(K, B) + shape).astype(np.int64)
    edges[:, 1, ..., shape[-1] // 2] = rng.integers(0, 3, size=(K,) + shape[:-1])  # item 1: a weak wall
    source = np.zeros((B,) + shape, np.int64)
    sink = np.zeros((B,) + shape, np.int64)
    source[..., :2] = rng.integers(200, 900, size=(B,) + shape[:-1] + (2,))
    sink[..., -2:] = rng.integers(200, 900, size=(B,) + shape[:-1] + (2,))
    sink[2] += rng.integers(0, 2, size=shape) * 3  # item 2: sink arcs scattered everywhere
    rev = rng.integers(20, 60, size=edges.shape).astype(np.int64)
    return source, sink, edges, rev


CASES = [
    (2, 4, (23, 37)),
    (2, 8, (29, 18)),
    (3, 6, (7, 9, 11)),
    (3, 26, (6, 7, 9)),
]


# ------------------------------------------------------------------------------------ random suite
@pytest.mark.cuda
@pytest.mark.parametrize("ndim,conn,shape", CASES)
@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_random_small_matches_pymaxflow_and_reference(ndim, conn, shape, directed, seed):
    offs = grid_offsets(ndim, conn)
    s, t, e, r = _instance(shape, offs, directed=directed, seed=seed)
    _check(s, t, e, offs, r)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "ndim,conn,shape", [(2, 4, (300, 257)), (2, 8, (190, 211)), (3, 6, (40, 33, 37)), (3, 26, (21, 19, 23))]
)
@pytest.mark.parametrize("directed", [False, True])
def test_random_large_matches_pymaxflow(ndim, conn, shape, directed):
    offs = grid_offsets(ndim, conn)
    s, t, e, r = _instance(shape, offs, directed=directed, seed=7, hi=50, density=0.9)
    _check(s, t, e, offs, r, reference=False)


@pytest.mark.cuda
def test_segmentation_like_long_paths():
    """Smooth, strong pairwise terms and terminals far apart: flow must travel across many tiles."""
    offs = grid_offsets(2, 4)
    H, W = 200, 300
    source = np.zeros((H, W), np.int64)
    sink = np.zeros((H, W), np.int64)
    source[:, :3] = 1000
    sink[:, -3:] = 1000
    rng = np.random.default_rng(3)
    edges = rng.integers(5, 20, size=(2, H, W))
    _check(source, sink, edges, offs, edges, reference=False)


@pytest.mark.cuda
@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("shape", [(70, 100), (37, 131)])
def test_diagonal_only_paths(shape, directed):
    """8-connected grids whose only residual arcs are diagonal: every path to the sink runs diagonally
    through many BFS tiles and across the x edges of their wrapped diagonal lines (the 8-connected BFS
    scans diagonals like axes). Flows equal PyMaxflow's, masks repeat, certificates verify; and the same
    with the axis arcs present but weak, so that shortest paths still prefer the diagonals."""
    offs = grid_offsets(2, 8)
    H, W = shape
    rng = np.random.default_rng(H * W + directed)
    diagonal = np.array([abs(dy) == 1 and abs(dx) == 1 for dy, dx in offs])
    edges = rng.integers(5, 40, size=(len(offs), H, W)).astype(np.int64)
    edges[~diagonal] = 0
    reverse = rng.integers(5, 40, size=edges.shape).astype(np.int64) if directed else edges.copy()
    reverse[~diagonal] = 0
    source = np.zeros((H, W), np.int64)
    sink = np.zeros((H, W), np.int64)
    source[:4, :] = 400  # top rows to bottom rows: about H diagonal steps
    sink[-4:, :] = 400
    _check(source, sink, edges, offs, reverse, reference=False, repeats=2)
    weak = edges.copy()
    weak[~diagonal] = 1
    weak_rev = reverse.copy()
    weak_rev[~diagonal] = 1
    _check(source, sink, weak, offs, weak_rev, reference=False, repeats=2)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "ndim,conn,opts",
    [
        (2, 4, {}),
        (2, 8, {}),
        (2, 4, {"tile_x": 16, "tile_y": 8}),  # push tiles inside BFS tiles
        (2, 8, {"bfs_tile_x": 8, "bfs_tile_y": 4}),  # push tiles over several BFS tiles
        (3, 6, {}),
        (3, 26, {}),
    ],
    ids=["2d-4", "2d-8", "2d-4-small-push", "2d-8-small-bfs", "3d-6", "3d-26"],
)
def test_repaired_relabels_equal_full_ones(ndim, conn, opts):
    """Relabels that repair the last distances (repair=1: every one after the first), a full BFS each time
    (repair=-1) and the default choice between them: flows, canonical masks and certificates equal to
    PyMaxflow's on a batch of long-path energies with many relabels (strong arcs, a weak wall, scattered
    sink arcs). On grids this small every BFS is bound by its depth, so the default never repairs."""
    offs = grid_offsets(ndim, conn)
    shape = (96, 160) if ndim == 2 else (12, 16, 40)
    source, sink, edges, rev = _long_path_batch(shape, len(offs), seed=21 + conn)
    opts = {"push_chain": -1, **opts}  # plain push launches: many relabels to repair
    fast = _check(source, sink, edges, offs, rev, batch=True, reference=False, repeats=2, repair=1, **opts)
    full = _check(source, sink, edges, offs, rev, batch=True, reference=False, repeats=1, repair=-1, **opts)
    auto = _check(source, sink, edges, offs, rev, batch=True, reference=False, repeats=1, **opts)
    for r in (full, auto):
        assert torch.equal(fast.node_mask, r.node_mask)
        assert torch.equal(fast.flow_values, r.flow_values)
    assert fast.stats["repairs"] == fast.stats["global_relabels"] - 1
    assert full.stats["repairs"] == 0
    assert full.stats["global_relabels"] >= 4
    if not ENV_OPTS:  # TORCHCUT_TEST_GRID_OPTS may set the default
        assert auto.stats["repairs"] == 0


@pytest.mark.cuda
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from([(2, 4), (2, 8), (3, 6), (3, 26)]),
    a=st.integers(3, 80),
    b=st.integers(3, 80),
    c=st.integers(2, 12),
    batch=st.integers(1, 3),
    directed=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
    density=st.floats(0.3, 1.0),
    tiles=st.sampled_from([{}, {"bfs_tile_x": 8, "bfs_tile_y": 4}, {"tile_x": 8, "tile_y": 4}]),
)
def test_property_repaired_relabels(case, a, b, c, batch, directed, seed, density, tiles):
    """Random grids, batches and tiles: every relabel repaired (repair=1) gives PyMaxflow's flows and the
    same canonical masks as a full BFS every time (repair=-1)."""
    ndim, conn = case
    shape = (a, b) if ndim == 2 else (c, a // 4 + 2, b // 4 + 2)
    offs = grid_offsets(ndim, conn)
    s, t, e, r = _instance(shape, offs, batch=batch, directed=directed, seed=seed, density=density)
    fast = _check(s, t, e, offs, r, batch=True, reference=False, repeats=1, repair=1, **tiles)
    dev = "cuda"
    g = GridGraph(*(torch.as_tensor(x, device=dev) for x in (s, t, e)), offs, reverse=torch.as_tensor(r, device=dev))
    full = torchcut.maxflow(g, backend="cuda", repair=-1, **tiles)
    assert full.verify()
    assert torch.equal(fast.node_mask, full.node_mask)
    assert torch.equal(fast.flow_values, full.flow_values)


@pytest.mark.cuda
@pytest.mark.parametrize("conn", [4, 8])
@pytest.mark.parametrize("chain", [1, 2, 8])
def test_chained_pushes_equal_plain_ones(conn, chain):
    """Push launches that also visit the tiles flow enters during the launch (push_chain=n: every launch,
    up to n times the listed tiles) against plain launches (push_chain=-1): flows, canonical masks and
    certificates equal to PyMaxflow's on long-path energies (strong arcs, a weak wall, scattered sink
    arcs), with more tile visits than listed tiles where it chains."""
    offs = grid_offsets(2, conn)
    source, sink, edges, rev = _long_path_batch((96, 224), len(offs), seed=40 + conn)
    chained = _check(
        source, sink, edges, offs, rev, batch=True, reference=False, repeats=2, push_chain=chain, profile=1
    )
    plain = _check(source, sink, edges, offs, rev, batch=True, reference=False, repeats=1, push_chain=-1, profile=1)
    assert torch.equal(chained.node_mask, plain.node_mask)
    assert torch.equal(chained.flow_values, plain.flow_values)
    assert plain.stats["chained_launches"] == 0
    if not ENV_OPTS:
        assert chained.stats["chained_launches"] == chained.stats["push_launches"] > 0
        if chain > 1:  # tiles entered by flow were visited within the launch
            assert chained.stats["push_visits"] != plain.stats["push_visits"]


@pytest.mark.cuda
@pytest.mark.parametrize("conn", [4, 8])
def test_default_chains_only_single_large_grids(conn):
    """The default rule chains push launches on a single grid of 512^2 nodes or more whose BFS is many
    tiles deep (a 128 x 2048 strip, sources on the left, sinks on the right), never in a batch. Checked
    by the certificates (``verify``: a cut whose capacity equals the flow) and against plain launches,
    not PyMaxflow: its Boykov-Kolmogorov search takes 16-24 s on this strip."""
    offs = grid_offsets(2, conn)
    source, sink, edges, rev = fc.strip((128, 2048), offs, seed=60 + conn)

    def solve(s, t, e, r, **opts):
        g = GridGraph(
            *(torch.as_tensor(x, device="cuda") for x in (s, t, e)), offs, reverse=torch.as_tensor(r, device="cuda")
        )
        res = torchcut.maxflow(g, backend="cuda", **opts)
        assert res.verify()
        return res

    auto = solve(source, sink, edges, rev)
    plain = solve(source, sink, edges, rev, push_chain=-1)
    assert torch.equal(auto.node_mask, plain.node_mask)
    assert torch.equal(auto.flow_values, plain.flow_values)
    stack = lambda a, k: np.stack([a, a[..., ::-1].copy()], axis=k)  # noqa: E731 - two items
    batch = solve(stack(source, 0), stack(sink, 0), stack(edges, 1), stack(rev, 1))
    assert batch.flow_values[0] == auto.flow_values[0]
    assert torch.equal(batch.node_mask[0], auto.node_mask[0])
    if not ENV_OPTS:
        assert 0 < auto.stats["chained_launches"] < auto.stats["push_launches"]
        assert plain.stats["chained_launches"] == 0
        assert batch.stats["chained_launches"] == 0


@pytest.mark.cuda
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    conn=st.sampled_from([4, 8]),
    a=st.integers(3, 120),
    b=st.integers(3, 120),
    batch=st.integers(1, 3),
    directed=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
    density=st.floats(0.3, 1.0),
    chain=st.integers(1, 8),
)
def test_property_chained_pushes(conn, a, b, batch, directed, seed, density, chain):
    """Random 2D grids and batches: every push launch chained (push_chain=n) gives PyMaxflow's flows and
    the same canonical masks as plain launches (push_chain=-1)."""
    offs = grid_offsets(2, conn)
    s, t, e, r = _instance((a, b), offs, batch=batch, directed=directed, seed=seed, density=density)
    fast = _check(s, t, e, offs, r, batch=True, reference=False, repeats=1, push_chain=chain)
    dev = "cuda"
    g = GridGraph(*(torch.as_tensor(x, device=dev) for x in (s, t, e)), offs, reverse=torch.as_tensor(r, device=dev))
    plain = torchcut.maxflow(g, backend="cuda", push_chain=-1)
    assert plain.verify()
    assert torch.equal(fast.node_mask, plain.node_mask)
    assert torch.equal(fast.flow_values, plain.flow_values)


@pytest.mark.cuda
@pytest.mark.parametrize("ndim,conn,shape", CASES)
def test_batches(ndim, conn, shape):
    offs = grid_offsets(ndim, conn)
    s, t, e, r = _instance(shape, offs, batch=5, directed=True, seed=11)
    res = _check(s, t, e, offs, r, batch=True)
    assert len(res.flow_value) == 5


@pytest.mark.cuda
@pytest.mark.parametrize(
    "offsets",
    [
        ((0, 2), (1, 1), (3, -1)),  # exotic 2D, short reach
        ((0, 1), (1, 0), (0, 40), (45, 0)),  # reach beyond a tile: BFS tile skipping is off
        tuple((a, b) for a in range(0, 4) for b in range(-3, 4) if (a, b) > (0, 0))[:17],  # 34 directions: 64-bit masks
        grid_offsets(3, 18),
        ((0, 0, 1), (0, 2, 0), (1, 0, 0), (1, 1, -1)),  # exotic 3D
    ],
    ids=["2d-exotic", "2d-long-reach", "2d-34-dirs", "3d-18", "3d-exotic"],
)
def test_other_offsets(offsets):
    shape = (50, 61) if len(offsets[0]) == 2 else (9, 12, 10)
    s, t, e, r = _instance(shape, offsets, directed=True, seed=5)
    _check(s, t, e, offsets, r)


# ------------------------------------------------------------------------------------- edge cases
@pytest.mark.cuda
def test_all_zero():
    offs = grid_offsets(2, 4)
    z = np.zeros((40, 50), np.int64)
    res = _check(z, z, np.zeros((2, 40, 50), np.int64), offs, np.zeros((2, 40, 50), np.int64))
    assert res.flow_value == 0
    assert bool(res.mask.all())  # nothing reaches the sink: all on the source side


@pytest.mark.cuda
def test_sink_unreachable():
    offs = grid_offsets(2, 8)
    s, t, e, r = _instance((33, 47), offs, seed=2)
    t[:] = 0
    res = _check(s, t, e, offs, r)
    assert res.flow_value == 0 and bool(res.mask.all())


@pytest.mark.cuda
def test_all_tied_to_source():
    offs = grid_offsets(3, 6)
    s, t, e, r = _instance((8, 20, 17), offs, seed=4)
    s[:] = 50
    t[:] = 0
    t[0, 0, 0] = 7
    res = _check(s, t, e, offs, r)
    assert res.flow_value == 7


@pytest.mark.cuda
def test_single_node_and_line():
    offs = grid_offsets(2, 4)
    _check(np.array([[5]]), np.array([[3]]), np.zeros((2, 1, 1), np.int64), offs, np.zeros((2, 1, 1), np.int64))
    src = np.zeros((1, 700), np.int64)
    snk = np.zeros((1, 700), np.int64)
    src[0, 0], snk[0, -1] = 100, 100
    e = np.full((2, 1, 700), 9, np.int64)
    res = _check(src, snk, e, offs, e)
    assert res.flow_value == 9


@pytest.mark.cuda
@pytest.mark.parametrize("ndim,conn,shape", [(2, 4, (40, 45)), (3, 6, (9, 10, 11))])
def test_near_int32_max_uses_int64_path(ndim, conn, shape):
    offs = grid_offsets(ndim, conn)
    rng = np.random.default_rng(9)
    K = len(offs)
    edges = rng.integers(INT32_MAX - 1000, INT32_MAX, size=(K,) + shape)
    reverse = rng.integers(INT32_MAX - 1000, INT32_MAX, size=(K,) + shape)
    source = rng.integers(0, 4 * INT32_MAX, size=shape) * (rng.random(shape) < 0.3)
    sink = rng.integers(0, INT32_MAX, size=shape) * (rng.random(shape) < 0.3)
    g = GridGraph(
        torch.as_tensor(source), torch.as_tensor(sink), torch.as_tensor(edges), offs, reverse=torch.as_tensor(reverse)
    )
    assert g.caps.dtype == torch.int64
    _check(source, sink, edges, offs, reverse)


@pytest.mark.cuda
def test_tuning_options_do_not_change_the_answer():
    offs = grid_offsets(2, 4)
    s, t, e, r = _instance((70, 90), offs, directed=True, seed=8)
    for opts in ({"rounds": 1, "push_launches": 1}, {"rounds": 3}, {"tile_x": 8, "tile_y": 4}):
        _check(s, t, e, offs, r, repeats=2, **opts)


# Host loop options: grid sizes, tile shapes (the generic kernels), tail rules and the profile counters.
HOST_LOOP_OPTS = [
    {},
    {"persist": -1},
    {"persist": 1},
    {"profile": 1},
    {"profile": 2},
    {"push_tail": 40},
    {"push_tail": -1},
    {"push_launches": 1, "rounds": 4},
    {"push_tail": 40, "tile_x": 8, "tile_y": 4},
    {"tile_x": 8, "tile_y": 8, "tile_z": 8},
    {"tile_x": 16, "tile_y": 8, "tile_z": 4},
    {"item_skip": -1},
    {"repair": -1},
    {"repair": 1},
    {"repair": 1, "profile": 2},
    {"push_chain": 8},
    {"push_chain": 1},
    {"push_chain": 3, "profile": 2},
    {"push_chain": -1},
]


@pytest.mark.cuda
@pytest.mark.parametrize("opts", HOST_LOOP_OPTS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
@pytest.mark.parametrize("ndim,conn,shape", [(2, 4, (70, 90)), (2, 4, (300, 400)), (3, 6, (9, 17, 13))])
def test_host_loop_options(opts, ndim, conn, shape):
    offs = grid_offsets(ndim, conn)
    s, t, e, r = _instance(shape, offs, batch=3, directed=True, seed=12)
    opts = {"small": -1, **opts}  # the tiled solver's host loop, also on the small volume
    res = _check(s, t, e, offs, r, batch=True, reference=False, repeats=2, **opts)
    if ENV_OPTS:
        return
    assert res.stats["bfs_launches"] == res.stats["global_relabels"]  # one worklist launch per BFS
    assert res.stats["host_syncs"] == res.stats["global_relabels"]  # one read-back per cycle
    if opts.get("profile"):  # the per-visit counters of the push tiles and the queue BFS
        assert res.stats["push_visits"] > 0 and res.stats["push_rounds"] >= res.stats["push_visits"]
        assert res.stats["bfs_passes"] > 0 and res.stats["bfs_relax_us"] > 0
    if opts.get("push_chain", 0) > 0 and ndim == 2:  # forced: every launch chained (2D default tiles)
        assert res.stats["chained_launches"] >= res.stats["push_launches"] > 0
    elif opts.get("push_chain") == -1 or ndim == 3:  # never, or no chained kernel for the grid
        assert res.stats["chained_launches"] == 0


@pytest.mark.cuda
@pytest.mark.parametrize("conn", [4, 8])
def test_batch_items_that_finish_early_leave_the_bfs(conn):
    """A batch of one hard item (the long-path energy) and seven easy ones that finish at the first global
    relabel (no source capacity, or no path to the sink). Every item's flow and mask must equal its own
    solve and PyMaxflow's, with finished items left out of later BFS (default) or not (item_skip=-1); the
    skipping does fewer BFS tile visits."""
    offs = grid_offsets(2, conn)
    H, W, B = 96, 256, 8
    rng = np.random.default_rng(4)
    K = len(offs)
    edges = rng.integers(5, 20, size=(K, B, H, W)).astype(np.int64)
    source = np.zeros((B, H, W), np.int64)
    sink = np.zeros((B, H, W), np.int64)
    source[0, :, :3] = 1000  # item 0: the flow crosses the whole grid, many relabel cycles
    sink[0, :, -3:] = 1000
    sink[1:] = rng.integers(0, 50, size=(B - 1, H, W))  # items 1-7: sink arcs everywhere,
    source[1:4] = 0  # no source capacity on 1-3,
    source[4:, :5, :5] = 7  # a little on 4-7, drained at once
    edges[:, 6:] = 0  # item 6: no n-links (terminals only)
    res_skip = _check(source, sink, edges, offs, edges, batch=True, reference=False, repeats=2)
    res_all = _check(source, sink, edges, offs, edges, batch=True, reference=False, repeats=2, item_skip=-1)
    assert torch.equal(res_skip.node_mask, res_all.node_mask)
    for b in range(B):  # each item alone gives the same mask
        g1 = GridGraph(
            *(torch.as_tensor(a[b], device="cuda") for a in (source, sink)),
            torch.as_tensor(edges[:, b], device="cuda"),
            offs,
        )
        assert torch.equal(torchcut.maxflow(g1, backend="cuda").node_mask[0], res_skip.node_mask[b])
    if ENV_OPTS:
        return
    assert res_skip.stats["global_relabels"] >= 4  # the hard item keeps the batch going
    # items 1-7 hold 7 of 8 BFS tiles of every later BFS when they are not skipped
    assert res_skip.stats["bfs_visits"] < res_all.stats["bfs_visits"]


# BFS tiles: the defaults, and small, flat and deep tiles (lines of 1, 2, 4 ... 32 nodes along each axis),
# alone and with push tiles that differ from the BFS tiles.
BFS_OPTS = [
    {},
    {"bfs_tile_x": 8, "bfs_tile_y": 4, "bfs_tile_z": 1},
    {"bfs_tile_x": 32, "bfs_tile_y": 1, "bfs_tile_z": 1},
    {"bfs_tile_x": 1, "bfs_tile_y": 32, "bfs_tile_z": 4},
    {"bfs_tile_x": 4, "bfs_tile_y": 8, "bfs_tile_z": 32},
    {"tile_x": 8, "tile_y": 4},
    {"bfs_tile_x": 8, "bfs_tile_y": 8, "bfs_tile_z": 8, "tile_x": 16, "tile_y": 8, "tile_z": 4},
    {"bfs_tile_x": 1, "bfs_tile_y": 32, "bfs_tile_z": 4, "repair": 1},
    {"bfs_tile_x": 8, "bfs_tile_y": 8, "bfs_tile_z": 8, "tile_x": 16, "tile_y": 8, "tile_z": 4, "repair": 1},
]


@pytest.mark.cuda
@pytest.mark.parametrize("opts", BFS_OPTS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
@pytest.mark.parametrize(
    "ndim,conn,shape", [(2, 4, (70, 90)), (2, 8, (130, 70)), (3, 6, (9, 17, 40)), (3, 26, (12, 10, 11))]
)
def test_bfs_variants(opts, ndim, conn, shape):
    offs = grid_offsets(ndim, conn)
    s, t, e, r = _instance(shape, offs, batch=3, directed=True, seed=21)
    res = _check(s, t, e, offs, r, batch=True, reference=False, repeats=2, **opts)
    if ENV_OPTS:
        return
    assert res.stats["bfs_launches"] == res.stats["global_relabels"]  # one launch per BFS
    assert res.stats["bfs_visits"] > 0


@pytest.mark.cuda
@pytest.mark.parametrize(
    "opts", [{}, {"bfs_tile_x": 4, "bfs_tile_y": 8}, {"bfs_tile_x": 32, "bfs_tile_y": 1}, {"push_chain": 4}]
)
def test_bfs_follows_a_long_serpentine(opts):
    """One corridor snaking through the grid: the sink is ~2000 steps and many tiles from the source, so
    every BFS must carry its wavefront through a long chain of tiles (flow = the narrowest corridor arc)."""
    rng = np.random.default_rng(5)
    H, W = 32, 128
    offs = grid_offsets(2, 4)
    right, down = (0, 1), (1, 0)
    edges = np.zeros((2, H, W), dtype=np.int64)
    edges[offs.index(right), 0::2, :-1] = rng.integers(20, 60, size=(H // 2, W - 1))
    for r in range(0, H - 2, 2):  # the corridor turns down at alternate ends
        x = W - 1 if (r // 2) % 2 == 0 else 0
        edges[offs.index(down), r : r + 2, x] = rng.integers(20, 60, size=2)
    edges[offs.index(right), 2 * 7, 50] = 13  # the bottleneck, mid-corridor
    source = np.zeros((H, W), dtype=np.int64)
    sink = np.zeros((H, W), dtype=np.int64)
    source[0, 0] = 1000
    sink[H - 2, W - 1 if ((H - 2) // 2) % 2 == 0 else 0] = 1000
    res = _check(source, sink, edges, offs, edges, reference=False, repeats=2, **opts)
    assert res.flow_values.tolist() == [13]


@pytest.mark.cuda
def test_bfs_tile_must_be_powers_of_two():
    offs = grid_offsets(2, 4)
    g = GridGraph(
        torch.ones(8, 8, device="cuda"), torch.ones(8, 8, device="cuda"), torch.ones(2, 8, 8, device="cuda"), offs
    )
    with pytest.raises(ValueError, match="bfs_tile_x.*expected powers of two.*got 24x4x1"):
        torchcut.maxflow(g, bfs_tile_x=24, bfs_tile_y=4)
    with pytest.raises(ValueError, match="with 32 to 1024 nodes in all; got 2x4x1"):
        torchcut.maxflow(g, bfs_tile_x=2, bfs_tile_y=4, bfs_tile_z=32)


@pytest.mark.cuda
def test_error_inside_the_op_is_a_clean_exception():
    """A limit hit inside the C++ loop raises RuntimeError (not a crash), and the solver works after."""
    offs = grid_offsets(2, 4)
    s, t, e, r = _instance((64, 64), offs, seed=3)
    g = GridGraph(*(torch.as_tensor(a, device="cuda") for a in (s, t, e)), offs)
    with pytest.raises(RuntimeError, match="did not converge in 1 global relabels"):
        torchcut.maxflow(g, backend="cuda", max_cycles=1, rounds=1, push_launches=1)
    assert torchcut.maxflow(g, backend="cuda").verify()


@pytest.mark.cuda
def test_float_capacities_through_segment_path():
    offs = grid_offsets(2, 8)
    g = GridGraph(
        torch.rand(64, 80, device="cuda"),
        torch.rand(64, 80, device="cuda"),
        torch.rand(4, 64, 80, device="cuda") * 0.3,
        offs,
    )
    r = torchcut.maxflow(g)
    assert r.stats["backend"] == "cuda" and r.verify()
    ref = torchcut.maxflow(g.to("cpu"), backend="reference")
    assert r.flow_values.tolist() == ref.flow_values.tolist()


@pytest.mark.cuda
def test_memory_error_names_the_bytes(monkeypatch):
    offs = grid_offsets(2, 4)
    g = GridGraph(
        torch.ones(64, 64, device="cuda"),
        torch.ones(64, 64, device="cuda"),
        torch.ones(2, 64, 64, device="cuda", dtype=torch.int32),
        offs,
    )
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1024, 80 * 2**30))
    # small buffers are not checked (torch's allocator answers for them) ...
    assert torchcut.maxflow(g, backend="cuda").flow_value == torchcut.maxflow(g.to("cpu")).flow_value
    # ... larger ones are, against the free memory
    from torchcut.solvers import cuda as cuda_backend

    monkeypatch.setattr(cuda_backend, "MEMORY_CHECK_BYTES", 0)
    with pytest.raises(torch.cuda.OutOfMemoryError, match="MiB"):
        torchcut.maxflow(g, backend="cuda")


@pytest.mark.cuda
def test_bad_option_is_named():
    offs = grid_offsets(2, 4)
    g = GridGraph(
        torch.ones(4, 4, device="cuda"), torch.ones(4, 4, device="cuda"), torch.ones(2, 4, 4, device="cuda"), offs
    )
    with pytest.raises(TypeError, match="max_rounds"):
        torchcut.maxflow(g, backend="cuda", max_rounds=3)
    with pytest.raises(TypeError, match="pipeline"):  # removed: measured no faster (docs/performance.md)
        torchcut.maxflow(g, backend="cuda", pipeline=2)


# ------------------------------------------------------------------- small grids in one launch
SMALL_CASES = [
    (2, 4, (23, 37), None),
    (2, 8, (29, 18), 3),
    (2, 4, (64, 64), None),  # the largest item: 4096 nodes
    (2, 4, (1, 4096), None),  # one row: the longest paths
    (2, 8, (4096, 1), 2),
    (3, 6, (7, 9, 11), 4),
    (3, 6, (16, 16, 16), None),
]


def _one_launch(nodes: int, directions: int, cap_bytes: int) -> int:
    """1 where an item fits one block's shared memory (grid_small.cu, small_smem_bytes), else 0."""
    need = nodes * (8 + (directions + 1) * cap_bytes + 4) + (8 + 2) * 128 * 4 + 16 + 64  # + the bit sets
    return int(need <= torch.cuda.get_device_properties(0).shared_memory_per_block_optin)


@pytest.mark.cuda
@pytest.mark.parametrize("ndim,conn,shape,batch", SMALL_CASES)
@pytest.mark.parametrize("wide", [False, True])
def test_small_grids_in_one_launch(ndim, conn, shape, batch, wide):
    """Items of at most 4096 nodes and 8 directions that fit one block's shared memory are solved by one
    block each (stats one_launch): the flows equal PyMaxflow's, the certificates verify, and the masks are
    the canonical minimum cut, equal to the tiled solver's (small=-1) and to themselves over repeated
    runs; int32 and int64 capacities (the largest int64 items do not fit and run tiled)."""
    offs = grid_offsets(ndim, conn)
    hi = 2**40 if wide else 100
    s, t, e, r = _instance(shape, offs, batch=batch, directed=True, hi=hi, seed=sum(shape) + conn)
    one = _check(s, t, e, offs, r, batch=batch is not None, reference=False, repeats=3)
    expected = _one_launch(int(np.prod(shape)), 2 * len(offs), 8 if wide else 4)
    assert one.stats["one_launch"] == expected
    if expected:
        assert one.stats["host_syncs"] == 1 and one.stats["global_relabels"] >= 1
    tiled = _check(s, t, e, offs, r, batch=batch is not None, reference=False, repeats=1, small=-1)
    assert tiled.stats["one_launch"] == 0
    assert torch.equal(one.flow_values, tiled.flow_values)
    assert torch.equal(one.node_mask, tiled.node_mask)
    assert (one.graph.caps.dtype == torch.int64) == wide


@pytest.mark.cuda
def test_small_grids_long_paths():
    """Strong arcs, sources and sinks at the two ends of a 32 x 128 grid and of a batch: many global
    relabels, each a long search; flows equal PyMaxflow's and the tiled solver's."""
    offs = grid_offsets(2, 4)
    s, t, e, r = _long_path_batch((32, 128), len(offs), seed=5)
    one = _check(s, t, e, offs, r, batch=True, reference=False, repeats=2)
    tiled = torchcut.maxflow(one.graph, backend="cuda", small=-1)
    assert one.stats["one_launch"] == 1 and one.stats["global_relabels"] > 1
    assert torch.equal(one.flow_values, tiled.flow_values) and torch.equal(one.node_mask, tiled.node_mask)


@pytest.mark.cuda
def test_small_grids_where_the_tiled_solver_runs():
    """More than 4096 nodes per item, more than 8 directions, or any option of the tiled solver: the
    tiled solver runs (one_launch 0), with the same answer."""
    for ndim, conn, shape, opts in [
        (2, 4, (65, 64), {}),
        (3, 26, (6, 7, 9), {}),
        (2, 4, (20, 20), {"rounds": 8}),
        (2, 8, (20, 20), {"push_tail": -1}),
    ]:
        offs = grid_offsets(ndim, conn)
        s, t, e, r = _instance(shape, offs, seed=ndim + conn)
        res = _check(s, t, e, offs, r, reference=False, repeats=1, **opts)
        assert res.stats["one_launch"] == 0, (shape, conn, opts)


@pytest.mark.cuda
def test_small_grid_max_cycles_is_an_error():
    offs = grid_offsets(2, 4)
    s, t, e, r = _long_path_batch((64, 64), len(offs), seed=1)
    g = GridGraph(*(torch.as_tensor(a, device="cuda") for a in (s, t, e)), offs, reverse=torch.as_tensor(r).cuda())
    assert torchcut.maxflow(g, backend="cuda").stats["global_relabels"] >= 3  # one cycle is not enough
    with pytest.raises(RuntimeError, match="did not converge in 1 global relabels"):
        torchcut.maxflow(g, backend="cuda", max_cycles=1)


@pytest.mark.cuda
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    h=st.integers(1, 48),
    w=st.integers(1, 80),
    offsets=st.lists(
        st.tuples(st.integers(-3, 3), st.integers(-3, 3)).filter(lambda o: o > (0, 0)),
        min_size=1,
        max_size=4,
        unique=True,
    ),
    seed=st.integers(0, 10**6),
)
def test_small_grids_any_offsets_property(h, w, offsets, seed):
    """Random small grids with any offsets of up to 3 steps (up to 8 directions): the one-launch solve
    gives the CPU solver's flows and its canonical masks."""
    s, t, e, r = _instance((h, w), offsets, directed=True, seed=seed, hi=50)
    dev = [torch.as_tensor(a, device="cuda") for a in (s, t, e, r)]
    g = GridGraph(dev[0], dev[1], dev[2], offsets, reverse=dev[3])
    got = torchcut.maxflow(g, backend="cuda")
    want = torchcut.maxflow(g.to("cpu"), backend="cpu")
    assert got.stats["one_launch"] == _one_launch(h * w, 2 * len(offsets), 4)
    assert got.flow_values.tolist() == want.flow_values.tolist()
    assert torch.equal(got.node_mask.cpu(), want.node_mask)
    assert got.verify()


# ------------------------------------------------------------------- fallback (runs without a GPU)
def test_fallback_warns_once(monkeypatch):
    monkeypatch.setattr(cuda_backend, "load_error", lambda: "nvcc not found (test)")
    monkeypatch.setattr(GRID, "warned", set())
    with pytest.warns(RuntimeWarning, match="nvcc not found"):
        assert GRID(torch.device("cuda"), "auto") is GRID.reference
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert GRID(torch.device("cuda"), "auto") is GRID.reference
    with pytest.raises(RuntimeError, match="nvcc not found"):
        GRID(torch.device("cuda"), "cuda")
