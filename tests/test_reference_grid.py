"""The reference push-relabel on grids: flow values equal PyMaxflow's, every certificate verifies."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles import pymaxflow_grid

import torchcut
from torchcut import GridGraph, grid_offsets

pytest.importorskip("maxflow")

I32 = 2**31 - 1


def make_case(seed: int):
    """A random grid instance; the seed picks the family, shape, connectivity and capacity law."""
    rng = np.random.default_rng(seed)
    family = seed % 10
    if family in (0, 1, 2, 3):  # 2D 4-connected, sizes from 1x1 to 64x64
        ndim, conn = 2, 4
        shape = tuple(rng.integers(1, 65 if seed % 20 == 0 else 24, size=2))
    elif family in (4, 5):  # 2D 8-connected
        ndim, conn = 2, 8
        shape = tuple(rng.integers(1, 20, size=2))
    elif family in (6, 7):  # 3D 6-connected, up to 16^3
        ndim, conn = 3, 6
        shape = tuple(rng.integers(1, 17 if seed % 20 == 6 else 8, size=3))
    elif family == 8:  # 3D 26-connected
        ndim, conn = 3, 26
        shape = tuple(rng.integers(1, 6, size=3))
    else:  # 2D 4-connected with long offsets (non-local arcs)
        ndim, conn = 2, 0
        shape = tuple(rng.integers(2, 16, size=2))
    offsets = grid_offsets(ndim, conn) if conn else ((0, 3), (2, -1), (1, 0))
    K = len(offsets)
    kind = (seed // 10) % 8
    hi = {0: 10, 1: 1000, 2: 3, 3: 100, 4: 50, 5: I32, 6: 20, 7: 100}[kind]
    src = rng.integers(0, hi, size=shape, endpoint=True)
    snk = rng.integers(0, hi, size=shape, endpoint=True)
    # sparse terminals are the common vision case: most nodes tied to neither terminal
    if kind in (0, 3, 6):
        src = src * (rng.random(shape) < 0.2)
        snk = snk * (rng.random(shape) < 0.2)
    edges = rng.integers(0, hi, size=(K,) + shape, endpoint=True)
    reverse = None if seed % 3 == 0 else rng.integers(0, hi, size=(K,) + shape, endpoint=True)
    if kind == 4:
        snk[:] = 0  # a sink nobody can reach: flow 0
    if kind == 7:
        src = rng.integers(1, hi, size=shape, endpoint=True)  # every node tied to the source
    if seed % 50 == 1:
        src[:] = snk[:] = edges[:] = 0  # all-zero network
        reverse = None
    return src, snk, edges, offsets, reverse


@pytest.mark.parametrize("seed", range(300))
def test_random_grid_matches_pymaxflow(seed):
    src, snk, edges, offsets, reverse = make_case(seed)
    result = torchcut.maxflow(GridGraph(src, snk, edges, offsets, reverse), backend="reference")
    assert result.verify()
    assert result.flow_value == pymaxflow_grid(src, snk, edges, offsets, reverse)
    assert result.mask.shape == src.shape and result.mask.dtype == torch.bool


@pytest.mark.parametrize("ndim,conn", [(2, 4), (2, 8), (3, 6)])
def test_batch_equals_items(ndim, conn):
    rng = np.random.default_rng(conn)
    shape = (5,) + (7,) * ndim
    offsets = grid_offsets(ndim, conn)
    src = rng.integers(0, 30, size=shape)
    snk = rng.integers(0, 30, size=shape)
    edges = rng.integers(0, 15, size=(len(offsets),) + shape)
    result = torchcut.maxflow(GridGraph(src, snk, edges, offsets))
    assert result.verify()
    assert isinstance(result.flow_value, list) and len(result.flow_value) == 5
    for b in range(5):
        single = torchcut.maxflow(GridGraph(src[b], snk[b], edges[:, b], offsets))
        assert result.flow_value[b] == single.flow_value == pymaxflow_grid(src[b], snk[b], edges[:, b], offsets)
        assert torch.equal(result.mask[b], single.mask)


def test_near_int32_max_uses_int64_storage():
    rng = np.random.default_rng(5)
    shape = (9, 11)
    src = rng.integers(I32 - 100, I32, size=shape, endpoint=True)
    snk = rng.integers(I32 - 100, I32, size=shape, endpoint=True)
    edges = rng.integers(I32 - 100, I32, size=(2,) + shape, endpoint=True)
    g = GridGraph(src, snk, edges, grid_offsets(2, 4))
    assert g.caps.dtype == torch.int64  # a symmetric pair sums past int32
    r = torchcut.maxflow(g)
    assert r.verify()
    assert r.flow_value == pymaxflow_grid(src, snk, edges, grid_offsets(2, 4))
    assert r.flow_value > I32  # the flow itself needs int64


def test_canonical_cut_is_sink_reachable_set():
    # a 1x4 chain s -> 0 -> 1 -> 2 -> 3 -> t with a bottleneck of 1 on both middle arcs:
    # two minimum cuts exist ({0,1} | {2,3} and {0,1,2} | {3}); the canonical one has as sink side exactly
    # the nodes that can reach the sink in the residual network: node 2 cannot (2 -> 3 is saturated)
    src = [[5, 0, 0, 0]]
    snk = [[0, 0, 0, 5]]
    edges = [[[5, 1, 1, 0]], [[0, 0, 0, 0]]]
    r = torchcut.maxflow(GridGraph(src, snk, edges, grid_offsets(2, 4)))
    assert r.flow_value == 1
    assert r.mask.tolist() == [[True, True, True, False]]


def test_float_capacities_are_quantized():
    rng = np.random.default_rng(7)
    shape = (12, 13)
    src = rng.random(shape) * (rng.random(shape) < 0.3)
    snk = rng.random(shape) * (rng.random(shape) < 0.3)
    edges = rng.random((2,) + shape).astype(np.float32)
    g = GridGraph(src, snk, edges, grid_offsets(2, 4))
    assert g.scale is not None and g.caps.dtype == torch.int32
    r = torchcut.maxflow(g)
    assert r.verify()
    assert isinstance(r.flow_value, float)
    exact = pymaxflow_grid(src, snk, edges.astype(np.float64), grid_offsets(2, 4))
    # each quantized capacity is off by at most 0.5 / scale; a cut has at most 3 * nodes arcs
    assert abs(r.flow_value - exact) <= 3 * src.size * 0.5 / g.scale


def test_verify_catches_a_broken_certificate():
    rng = np.random.default_rng(3)
    src, snk = rng.integers(0, 9, (2, 6, 6))
    edges = rng.integers(1, 9, (2, 6, 6))
    r = torchcut.maxflow(GridGraph(src, snk, edges, grid_offsets(2, 4)))
    assert r.verify() and r.flow_value > 0
    flipped = r.node_mask.clone()
    flipped[0, 0, 0] = ~flipped[0, 0, 0]
    bad = torchcut.CutResult(r.graph, r.flow_values, flipped, r.residual, r.source_flow, r.sink_flow)
    with pytest.raises(torchcut.CertificateError):
        bad.verify()
    wrong_value = torchcut.CutResult(r.graph, r.flow_values + 1, r.node_mask, r.residual, r.source_flow, r.sink_flow)
    with pytest.raises(torchcut.CertificateError, match="differs from flow_values"):
        wrong_value.verify()
    res = r.residual.clone()
    res[0, 0, 2, 2] += 1
    with pytest.raises(torchcut.CertificateError, match="pair's capacities"):
        torchcut.CutResult(r.graph, r.flow_values, r.node_mask, res, r.source_flow, r.sink_flow).verify()


def test_max_rounds_guard():
    src = np.zeros((1, 40), dtype=np.int64)
    snk = np.zeros((1, 40), dtype=np.int64)
    src[0, 0] = snk[0, -1] = 100
    edges = np.full((2, 1, 40), 100)
    g = GridGraph(src, snk, edges, grid_offsets(2, 4))
    with pytest.raises(RuntimeError, match=r"did not converge in 2 rounds \(option max_iter\)"):
        torchcut.maxflow(g, backend="reference", max_iter=2, relabel_period=4)
    with pytest.warns(FutureWarning, match="max_rounds= is deprecated; use max_iter="):  # the former name
        with pytest.raises(RuntimeError, match=r"did not converge in 2 rounds"):
            torchcut.maxflow(g, backend="reference", max_rounds=2, relabel_period=4)


caps_strategy = st.one_of(st.integers(0, 5), st.integers(0, 1000), st.integers(0, I32))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    h=st.integers(1, 7),
    w=st.integers(1, 7),
    conn=st.sampled_from([4, 8]),
    directed=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
    hi=caps_strategy,
)
def test_property_grid_2d(h, w, conn, directed, seed, hi):
    rng = np.random.default_rng(seed)
    offsets = grid_offsets(2, conn)
    shape = (h, w)
    src = rng.integers(0, hi, size=shape, endpoint=True)
    snk = rng.integers(0, hi, size=shape, endpoint=True)
    edges = rng.integers(0, hi, size=(len(offsets),) + shape, endpoint=True)
    reverse = rng.integers(0, hi, size=(len(offsets),) + shape, endpoint=True) if directed else None
    r = torchcut.maxflow(GridGraph(src, snk, edges, offsets, reverse))
    assert r.verify()
    assert r.flow_value == pymaxflow_grid(src, snk, edges, offsets, reverse)
    # a cut never exceeds the trivial cuts
    assert r.flow_value <= min(int(src.sum()), int(snk.sum()))


@settings(max_examples=25, deadline=None)
@given(d=st.integers(1, 4), h=st.integers(1, 4), w=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_property_grid_3d(d, h, w, seed):
    rng = np.random.default_rng(seed)
    offsets = grid_offsets(3, 6)
    shape = (d, h, w)
    src = rng.integers(0, 50, size=shape)
    snk = rng.integers(0, 50, size=shape)
    edges = rng.integers(0, 30, size=(3,) + shape)
    reverse = rng.integers(0, 30, size=(3,) + shape)
    r = torchcut.maxflow(GridGraph(src, snk, edges, offsets, reverse))
    assert r.verify()
    assert r.flow_value == pymaxflow_grid(src, snk, edges, offsets, reverse)
