"""The memory-lean path: the chunked data term and the in-place solve give the same answers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import pymaxflow_grid

import torchcut
from torchcut import energy
from torchcut.solvers import consume_mask


@pytest.mark.parametrize(
    "shape, kw", [((3, 11, 13), {"channel_axis": 0}), ((9, 8, 7), {"connectivity": 6}), ((2, 6, 7, 5), {"ndim": 3})]
)
def test_chunked_data_term_equals_one_chunk(monkeypatch, shape, kw):
    rng = np.random.default_rng(0)
    image = torch.from_numpy(rng.random(shape).astype(np.float32))
    sshape = shape[1:] if "channel_axis" in kw else shape
    seeds = torch.from_numpy(rng.integers(0, 3, sshape).astype(np.uint8))
    whole = torchcut.segmentation_graph(image, seeds, **kw)
    monkeypatch.setattr(energy, "CHUNK", 7)  # many chunks, ragged last one (of the tensor version)
    chunked = energy._reference_graph(image, seeds, **kw)
    for name in ("caps", "source", "sink"):
        a, b = getattr(whole, name), getattr(chunked, name)
        assert a.dtype == b.dtype and torch.equal(a, b), name
    assert whole.source.dtype == torch.int64 and whole.sink.dtype == torch.int32


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), conn=st.sampled_from((4, 8)), backend=st.sampled_from(("reference", "cpu")))
def test_consume_mask_is_the_canonical_cut(seed, conn, backend):
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(2, 9)), int(rng.integers(2, 9)))
    offs = torchcut.grid_offsets(2, conn)
    src = rng.integers(0, 9, shape) * (rng.random(shape) < 0.4)
    snk = rng.integers(0, 9, shape) * (rng.random(shape) < 0.4)
    edges = rng.integers(0, 6, (len(offs),) + shape)
    g = torchcut.GridGraph(src, snk, edges, offs)
    r = torchcut.maxflow(torchcut.GridGraph(src, snk, edges, offs))
    assert r.flow_value == pymaxflow_grid(src, snk, edges, offs)
    mask = consume_mask(g, backend=backend)
    assert torch.equal(mask, r.mask)
    if backend == "reference":  # solved in the graph's tensors: they now hold the residual network
        assert int(snk.sum()) - int(g.sink.sum()) == r.flow_value
        assert int(g.caps.sum()) == int(r.graph.caps.sum())  # flow moves capacity within arc pairs


@pytest.mark.parametrize("algorithm", ["boykov-kolmogorov", "pseudoflow", "auto"])
@pytest.mark.parametrize(
    "shape,conn,threads",
    [((3, 17, 23), 8, 2), ((2, 7, 8, 9), 6, 1), ((1, 640, 600), 4, 2)],  # the last: a grid cut over 2 threads
)
def test_cpu_mask_only_solve_equals_the_full_one(shape, conn, threads, algorithm):
    """On the CPU consume_mask runs the op in its mask-only form (no residual outputs): the same canonical
    cut as maxflow, item by item, for every algorithm and with the grid cut into ranges; the graph is left
    as it was."""
    from torchcut.solvers import cpu

    rng = np.random.default_rng(sum(shape) + conn)
    offs = torchcut.grid_offsets(len(shape) - 1, conn)
    src = torch.as_tensor(rng.integers(0, 40, shape) * (rng.random(shape) < 0.3))
    snk = torch.as_tensor(rng.integers(0, 40, shape) * (rng.random(shape) < 0.3))
    edges = torch.as_tensor(rng.integers(0, 25, (len(offs),) + shape))
    g = torchcut.GridGraph(src, snk, edges, offs)
    before = g.caps.clone(), g.source.clone(), g.sink.clone()
    full = torchcut.maxflow(g, threads=threads, algorithm=algorithm)
    mask, stats = cpu.solve_grid_mask(g, threads=threads, algorithm=algorithm)
    assert torch.equal(mask, full.node_mask) and stats["backend"] == "cpu"
    assert torch.equal(consume_mask(g, threads=threads, algorithm=algorithm), full.mask)
    assert all(torch.equal(a, b) for a, b in zip(before, (g.caps, g.source, g.sink)))


def test_segment_leaves_its_inputs_alone():
    image = torch.rand(12, 10, 9)
    seeds = torch.zeros(12, 10, 9, dtype=torch.uint8)
    seeds[6, 5, 4], seeds[0, 0, 0] = 1, 2
    before = image.clone(), seeds.clone()
    mask = torchcut.segment(image, seeds, connectivity=6, backend="reference")
    masked, result = torchcut.segment(image, seeds, connectivity=6, return_result=True)
    assert torch.equal(mask, masked) and result.verify()
    assert torch.equal(image, before[0]) and torch.equal(seeds, before[1])


def test_consume_mask_rejects_a_flow_graph():
    g = torchcut.FlowGraph.from_edges([0], [1], [1], source=[1, 0], sink=[0, 1])
    with pytest.raises(TypeError, match=r"graph: expected a torchcut.GridGraph, got FlowGraph"):
        consume_mask(g)


@pytest.mark.cuda
@pytest.mark.parametrize("n", [128, 256])
def test_cuda_segment_peak_memory_per_voxel(n):
    """segment() on an n^3 6-connected volume: at most 64 bytes per voxel, inputs included."""
    from flow_cases import sphere_volume

    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()  # what earlier tests keep (grabcut's cached CUDA graphs, say)
    image, seeds = sphere_volume(n, "cuda")
    torch.cuda.reset_peak_memory_stats()
    mask = torchcut.segment(image, seeds, connectivity=6)
    peak = torch.cuda.max_memory_allocated() - base
    # 64 bytes per voxel, plus a fixed allocation (chunk buffers, per-tile arrays) that matters only for
    # small volumes: measured 69 bytes/voxel at 128^3 (~10 MiB above 64) and 50.2 at 256^3 to 1024^3
    assert peak <= 64 * n**3 + 16 * 2**20, f"{peak / n**3:.1f} bytes per voxel"
    if n == 128:  # the same mask as the solve that keeps the graph
        _, r = torchcut.segment(image, seeds, connectivity=6, return_result=True)
        assert torch.equal(mask, r.mask) and r.verify()


@pytest.mark.cuda
def test_cuda_consume_mask_matches_maxflow():
    rng = np.random.default_rng(7)
    shape = (24, 20, 18)
    offs = torchcut.grid_offsets(3, 6)
    src = rng.integers(0, 50, shape) * (rng.random(shape) < 0.3)
    snk = rng.integers(0, 50, shape) * (rng.random(shape) < 0.3)
    edges = rng.integers(0, 20, (3,) + shape)
    make = lambda: torchcut.GridGraph(src, snk, edges, offs).to("cuda")  # noqa: E731
    r = torchcut.maxflow(make())
    assert r.flow_value == pymaxflow_grid(src, snk, edges, offs)
    g = make()
    assert torch.equal(consume_mask(g), r.mask)
    assert int(snk.sum()) - int(g.sink.sum()) == r.flow_value
