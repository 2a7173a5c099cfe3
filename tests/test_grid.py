"""GridGraph construction, layout and argument validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchcut
from torchcut import GridGraph, grid_offsets
from torchcut.grid import shift

OFF4 = grid_offsets(2, 4)


def small(dtype=torch.int64, shape=(3, 4)):
    src = torch.arange(12, dtype=dtype).reshape(shape)
    return src, src.flip(0), torch.ones((2,) + shape, dtype=dtype)


@pytest.mark.parametrize(
    "ndim,conn,count",
    [(2, 4, 2), (2, 8, 4), (3, 6, 3), (3, 18, 9), (3, 26, 13)],
)
def test_grid_offsets_counts_and_halves(ndim, conn, count):
    offs = grid_offsets(ndim, conn)
    assert len(offs) == count
    full = set(offs) | {tuple(-v for v in o) for o in offs}
    assert len(full) == conn  # the offsets and their negations cover the neighbourhood once


def test_grid_offsets_errors():
    with pytest.raises(ValueError, match=r"connectivity: expected one of \(4, 8\) for ndim=2, got 6"):
        grid_offsets(2, 6)
    with pytest.raises(ValueError, match="ndim: expected 2 or 3, got 4"):
        grid_offsets(4, 8)


def test_shift_fills_outside():
    x = torch.arange(6).view(2, 3)
    assert shift(x, (0, 1), -1).tolist() == [[1, 2, -1], [4, 5, -1]]
    assert shift(x, (-1, 0), -1).tolist() == [[-1, -1, -1], [0, 1, 2]]
    assert shift(x, (0, 5), 9).tolist() == [[9, 9, 9], [9, 9, 9]]


def test_layout_directions_and_border():
    src, snk, _ = small()
    edges = torch.stack([torch.full((3, 4), 2), torch.full((3, 4), 3)])
    reverse = torch.stack([torch.full((3, 4), 5), torch.full((3, 4), 7)])
    g = GridGraph(src, snk, edges, OFF4, reverse)
    assert g.caps.shape == (1, 4, 3, 4) and g.caps.dtype == torch.int32
    # direction 0: p -> p + (0, 1), zero in the last column
    assert g.caps[0, 0, :, :3].eq(2).all() and g.caps[0, 0, :, 3].eq(0).all()
    # direction 2: p -> p - (0, 1) = reverse capacity of the pair (p - (0,1), p), zero in the first column
    assert g.caps[0, 2, :, 1:].eq(5).all() and g.caps[0, 2, :, 0].eq(0).all()
    assert g.caps[0, 3, 1:].eq(7).all() and g.caps[0, 3, 0].eq(0).all()
    assert g.source.dtype == torch.int64 and g.batch_size == 1 and not g.batched


def test_inputs_as_numpy_lists_and_tensors_agree():
    src, snk, edges = small()
    a = torchcut.maxflow(GridGraph(src, snk, edges, OFF4))
    b = torchcut.maxflow(GridGraph(src.numpy(), snk.numpy(), edges.numpy(), OFF4))
    c = torchcut.maxflow(GridGraph(src.tolist(), snk.tolist(), [e for e in edges], OFF4))
    assert a.flow_value == b.flow_value == c.flow_value
    assert torch.equal(a.mask, b.mask) and torch.equal(a.mask, c.mask)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.float64])
def test_accepted_dtypes(dtype):
    src, snk, edges = small(dtype)
    r = torchcut.maxflow(GridGraph(src, snk, edges, OFF4))
    assert r.verify()
    assert r.flow_value == pytest.approx(torchcut.maxflow(GridGraph(*small(), OFF4)).flow_value, rel=1e-6)


def test_bad_dtype():
    src, snk, edges = small()
    with pytest.raises(
        ValueError, match="source: expected dtype int32, int64, float32 or float64, got torch.complex64"
    ):
        GridGraph(src.to(torch.complex64), snk, edges, OFF4)
    with pytest.raises(TypeError, match="sink: expected a torch tensor or numpy array, got str"):
        GridGraph(src, "nope", edges, OFF4)
    with pytest.raises(TypeError, match="source: expected a numeric array"):
        GridGraph(np.zeros((3, 4), dtype=bool), snk, edges, OFF4)


def test_negative_nan_inf():
    src, snk, edges = small()
    with pytest.raises(ValueError, match="edges: expected non-negative capacities, got minimum -1"):
        GridGraph(src, snk, edges - 2 * (edges > 0) * (torch.rand_like(edges, dtype=torch.float) < 2), OFF4)
    bad = src.double()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"source: expected finite capacities, got 1 NaN or infinite value\(s\)"):
        GridGraph(bad, snk, edges, OFF4)
    bad[0, 0] = float("inf")
    with pytest.raises(ValueError, match="source: expected finite"):
        GridGraph(bad, snk, edges, OFF4)


def test_shape_errors():
    src, snk, edges = small()
    with pytest.raises(ValueError, match=r"sink: expected the shape of source \(3, 4\), got \(4, 3\)"):
        GridGraph(src, snk.T, edges, OFF4)
    with pytest.raises(ValueError, match=r"edges: expected shape \(2, 3, 4\) \(one capacity map per offset, K=2\)"):
        GridGraph(src, snk, edges[:1], OFF4)
    with pytest.raises(ValueError, match=r"reverse\[1\]: expected the shape of source"):
        GridGraph(src, snk, edges, OFF4, [edges[0], edges[1, :2]])
    with pytest.raises(ValueError, match="edges: expected 2 tensors"):
        GridGraph(src, snk, [edges[0]], OFF4)
    with pytest.raises(ValueError, match=r"source: expected shape \[\*shape\] or \[B, \*shape\] with 2 spatial dims"):
        GridGraph(src[0], snk[0], edges[:, 0], OFF4)
    with pytest.raises(ValueError, match="source: expected a non-empty grid"):
        GridGraph(src[:0], snk[:0], edges[:, :0], OFF4)


def test_offset_errors():
    src, snk, edges = small()
    with pytest.raises(ValueError, match="self-loop"):
        GridGraph(src, snk, edges, ((0, 0), (1, 0)))
    with pytest.raises(ValueError, match="offsets: expected tuples of length 2 or 3"):
        GridGraph(src, snk, edges, ((1,), (1,)))
    with pytest.raises(ValueError, match="offsets: expected all offsets of length 2"):
        GridGraph(src, snk, edges, ((0, 1), (1, 0, 0)))
    with pytest.raises(ValueError, match="offsets: expected integer offsets"):
        GridGraph(src, snk, edges, ((0, 1.5), (1, 0)))
    with pytest.raises(ValueError, match="offsets: expected at least one offset"):
        GridGraph(src, snk, edges[:0], ())


def test_overflow_is_refused():
    big = torch.full((3, 4), 2**61, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"GridGraph: the capacities sum to \d+, at or above 2\*\*62"):
        GridGraph(big, big, torch.zeros((2, 3, 4), dtype=torch.int64), OFF4)


def test_scale_argument():
    src, snk, edges = small(torch.float32)
    g = GridGraph(src, snk, edges, OFF4, scale=10.0)
    assert g.scale == 10.0 and int(g.source.max()) == 110
    with pytest.raises(ValueError, match="scale: expected a positive finite number, got -1"):
        GridGraph(src, snk, edges, OFF4, scale=-1)
    with pytest.raises(ValueError, match="scale: only applies to float capacities"):
        GridGraph(*small(), OFF4, scale=2.0)
    with pytest.raises(ValueError, match="exceeds the int32 range"):
        GridGraph(src, snk, edges, OFF4, scale=1e12)


def test_maxflow_argument_errors():
    g = GridGraph(*small(), OFF4)
    with pytest.raises(ValueError, match=r"backend: expected one of \('auto', 'reference', 'cpu', 'cuda'\), got 'gpu'"):
        torchcut.maxflow(g, backend="gpu")
    with pytest.raises(ValueError, match="backend='cuda': expected a graph on a CUDA device, got one on cpu"):
        torchcut.maxflow(g, backend="cuda")
    with pytest.raises(TypeError, match="graph: expected a torchcut.GridGraph or torchcut.FlowGraph, got dict"):
        torchcut.maxflow({})


def test_repr_and_to():
    g = GridGraph(*small(), OFF4)
    assert "GridGraph(shape=(3, 4), K=2" in repr(g)
    assert g.to("cpu").caps.data_ptr() == g.caps.data_ptr() or torch.equal(g.to("cpu").caps, g.caps)
    r = torchcut.maxflow(g)
    assert repr(r).startswith("CutResult(flow_value=")


@pytest.mark.cuda
def test_reference_on_cuda_tensors():
    rng = np.random.default_rng(0)
    src, snk = rng.integers(0, 20, (2, 9, 9))
    edges = rng.integers(0, 9, (2, 9, 9))
    g_cpu = GridGraph(src, snk, edges, OFF4)
    g = g_cpu.to("cuda")
    r = torchcut.maxflow(g, backend="reference")
    assert r.mask.device.type == "cuda"
    assert r.verify()
    assert r.flow_value == torchcut.maxflow(g_cpu).flow_value


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_graph_never_shares_the_callers_tensors(dtype):
    # the solvers may work in a graph's own tensors (consume_mask): they must not be the caller's
    src = torch.tensor([[5, 0, 2]], dtype=dtype)
    snk = torch.tensor([[0, 4, 1]], dtype=dtype)
    edges = torch.tensor([[[3, 1, 0]], [[0, 0, 0]]], dtype=dtype)
    kept = (src.clone(), snk.clone(), edges.clone())
    g = GridGraph(src, snk, edges, grid_offsets(2, 4))
    for t in (g.source, g.sink, g.caps):
        assert all(t.data_ptr() != u.data_ptr() for u in (src, snk, edges))
    from torchcut.solvers import consume_mask

    expected = torchcut.maxflow(GridGraph(src, snk, edges, grid_offsets(2, 4))).mask
    assert torch.equal(consume_mask(g, backend="reference"), expected)
    assert all(torch.equal(a, b) for a, b in zip(kept, (src, snk, edges)))
    assert g.sink.dtype == torch.int32  # small capacities: int32 whatever the input dtype


@pytest.mark.parametrize("chunk", [1, 5, 64, 1 << 21])
@pytest.mark.parametrize("contiguous", [True, False])
def test_in_place_netting_in_chunks_equals_the_netting_into_new_tensors(chunk, contiguous):
    from torchcut.solvers._terminals import net_terminals, net_terminals_

    g = torch.Generator().manual_seed(3)
    source = torch.randint(0, 9, (3, 7, 11), generator=g)
    sink = torch.randint(0, 9, (3, 7, 11), generator=g).to(torch.int32)
    if not contiguous:  # every other column of wider tensors
        source = torch.randint(0, 9, (3, 7, 22), generator=g)[..., ::2]
        sink = torch.randint(0, 9, (3, 7, 22), generator=g).to(torch.int32)[..., ::2]
    want_excess, want_sink = net_terminals(source, sink)
    low = torch.minimum(source, sink.to(torch.int64))
    assert torch.equal(want_excess, source - low) and torch.equal(want_sink, (sink - low).to(torch.int32))
    net_terminals_(source, sink, chunk=chunk)
    assert torch.equal(source, want_excess) and torch.equal(sink, want_sink) and sink.dtype == torch.int32


def test_consume_mask_nets_a_batch_in_place_and_agrees_with_maxflow():
    g = torch.Generator().manual_seed(4)
    shape = (3, 9, 10)
    args = (
        torch.randint(0, 20, shape, generator=g),
        torch.randint(0, 20, shape, generator=g),
        torch.randint(0, 10, (2,) + shape, generator=g),
    )
    want = torchcut.maxflow(GridGraph(*args, grid_offsets(2, 4)), backend="reference")
    graph = GridGraph(*args, grid_offsets(2, 4))
    mask = torchcut.solvers.consume_mask(graph, backend="reference")
    assert torch.equal(mask, want.mask)
    assert bool((torch.minimum(graph.source, graph.sink.to(torch.int64)) == 0).all())  # netted in place


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("ndim,conn", [(2, 4), (2, 8), (3, 6), (3, 26)])
@pytest.mark.parametrize(
    "din,dout", [(torch.int32, torch.int32), (torch.int32, torch.int64), (torch.int64, torch.int32)]
)
def test_native_arc_layout_equals_the_tensor_ops(ndim, conn, din, dout, device):
    """``grid_arcs`` (the CPU and CUDA op behind the constructor) writes the same layout as the tensor-op
    reference, arcs that leave the grid zeroed, for grids thinner than an offset and for long offsets."""
    from torchcut.grid import _arc_layout, _arc_layout_tensors, _native_arcs

    assert _native_arcs(device)
    gen = torch.Generator().manual_seed(ndim * 100 + conn)
    offsets = [tuple(o) for o in grid_offsets(ndim, conn)] + [(3,) + (-5,) * (ndim - 1)]
    shapes = [(1, 1), (2, 7), (6, 4)] if ndim == 2 else [(1, 1, 1), (2, 3, 4), (5, 1, 6)]
    for shape in shapes:
        for B in (1, 3):
            edges = torch.randint(0, 1000, (len(offsets), B) + shape, generator=gen).to(din).to(device)
            reverse = torch.randint(0, 1000, (len(offsets), B) + shape, generator=gen).to(din).to(device)
            got = _arc_layout(edges, reverse, offsets, dout)
            want = _arc_layout_tensors(edges, reverse, offsets, dout)
            assert got.dtype == dout and got.device == edges.device and torch.equal(got, want), (shape, B)
    # a direction whose arcs all leave the grid is zero; an inner node holds its arc
    e = torch.arange(1, 13, dtype=din, device=device).reshape((1, 1, 3, 4) if ndim == 2 else (1, 1, 1, 3, 4))
    offs = [(0, 1)] if ndim == 2 else [(0, 0, 1)]
    caps = _arc_layout(e, e + 100, offs, dout)
    assert caps[0, 0].flatten().tolist() == [1, 2, 3, 0, 5, 6, 7, 0, 9, 10, 11, 0]
    assert caps[0, 1].flatten().tolist() == [0, 101, 102, 103, 0, 105, 106, 107, 0, 109, 110, 111]
    if (
        device == "cuda" and din == dout == torch.int32
    ):  # slabs longer than the kernel's blocks: each thread walks several values
        shape = (300, 301) if ndim == 2 else (40, 41, 43)
        edges = torch.randint(0, 1000, (len(offsets), 2) + shape, generator=gen).to(din).to(device)
        reverse = torch.randint(0, 1000, (len(offsets), 2) + shape, generator=gen).to(din).to(device)
        assert torch.equal(
            _arc_layout(edges, reverse, offsets, dout), _arc_layout_tensors(edges, reverse, offsets, dout)
        )


def test_native_arc_layout_checks_its_arguments():
    """The op's own checks (shared by its CPU and CUDA versions) name the argument and what was given."""
    e = torch.zeros(2, 1, 3, 3, dtype=torch.int32)
    arcs = torch.ops.torchcut.grid_arcs
    with pytest.raises(RuntimeError, match=r"edges: expected \[K, B, \*shape\] with 2 or 3 spatial dims"):
        arcs(e[0], e[0], [0, 1, 1, 0], False)
    with pytest.raises(RuntimeError, match="reverse: expected the shape of edges"):
        arcs(e, e[:, :, :2], [0, 1, 1, 0], False)
    with pytest.raises(RuntimeError, match="offsets: expected 4 values, got 3"):
        arcs(e, e, [0, 1, 1], False)
    with pytest.raises(RuntimeError, match="reverse: expected dtype Int .that of edges., got Long"):
        arcs(e, e.long(), [0, 1, 1, 0], False)
    assert arcs(e, e, [0, 1, 1, 0], True).shape == (1, 4, 3, 3)


def _syncs(fn) -> int:
    """Host synchronisations that torch ops in ``fn()`` make (torch's sync debug mode, as warnings)."""
    import warnings

    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode(1)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return sum("synchroniz" in str(w.message) for w in caught)


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["int32", "int64", "float32", "mixed"])
def test_constructor_reads_back_once_per_kind(kind):
    # the value checks and the maxima behind the layout's dtype: one read-back per kind of capacity,
    # two more for float graphs (their maxima after zeroing the arcs that leave the grid)
    dev = "cuda"
    g = torch.Generator().manual_seed(0)
    src, snk, e = (torch.randint(0, 50, s, generator=g) for s in ((6, 7), (6, 7), (4, 6, 7)))
    if kind in ("int32", "int64"):
        src, snk, e = (t.to(getattr(torch, kind)) for t in (src, snk, e))
    elif kind == "float32":
        src, snk, e = (t.float() for t in (src, snk, e))
    else:
        e = e.float()
    src, snk, e = src.to(dev), snk.to(dev), e.to(dev)
    want = {"int32": 1, "int64": 1, "float32": 2, "mixed": 3}[kind]
    assert _syncs(lambda: GridGraph(src, snk, e, grid_offsets(2, 8))) == want
    ref = GridGraph(src.cpu(), snk.cpu(), e.cpu(), grid_offsets(2, 8))
    got = GridGraph(src, snk, e, grid_offsets(2, 8))
    assert torch.equal(got.caps.cpu(), ref.caps) and torch.equal(got.sink.cpu(), ref.sink)
    assert got.caps.dtype == ref.caps.dtype and got.scale == ref.scale
