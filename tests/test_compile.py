"""torch.compile(fullgraph=True) around segment and maxflow: results equal to eager, errors unchanged.

The solvers are custom ops with fake implementations (torchcut.solvers.ops); these tests trace them
with Dynamo and AOTAutograd, on the CPU and (marked ``cuda``) on the GPU.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torchcut
from torchcut import CertificateError, GridGraph, grid_offsets
from torchcut.solvers import ops

OFF4 = grid_offsets(2, 4)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True)


def _image(device, B=2, H=24, W=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    img = torch.rand(B, 3, H, W, generator=g)
    img[:, :, 6:18, 5:15] += 1.0
    seeds = torch.zeros(B, H, W, dtype=torch.int64)
    seeds[:, 10:13, 8:11] = 1
    seeds[:, 0, :] = 2
    return img.to(device), seeds.to(device)


def _grid(device, B=2, H=9, W=7, seed=0, dtype=torch.int64):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, 20, (B, H, W), generator=g).to(dtype)
    snk = torch.randint(0, 20, (B, H, W), generator=g).to(dtype)
    edges = torch.randint(0, 12, (2, B, H, W), generator=g).to(dtype)
    return src.to(device), snk.to(device), edges.to(device)


@pytest.mark.parametrize("device", DEVICES)
def test_segment_compiled_equals_eager(device):
    img, seeds = _image(device)
    seg = _compiled(lambda x, s: torchcut.segment(x, s, ndim=2, connectivity=8))
    got = seg(img, seeds)
    want = torchcut.segment(img, seeds, ndim=2, connectivity=8)
    assert got.dtype == torch.bool and got.device == img.device and got.shape == seeds.shape
    assert torch.equal(got, want)
    assert 0 < int(want.sum()) < want.numel()  # a real cut, not a trivial mask
    # the compiled function stays inside a pipeline: ops before and after the cut are traced too
    pipe = _compiled(lambda x, s: torchcut.segment(x * 2.0, s, ndim=2).float().mean((1, 2)))
    assert torch.allclose(pipe(img, seeds), torchcut.segment(img * 2.0, seeds, ndim=2).float().mean((1, 2)))


@pytest.mark.parametrize("device", DEVICES)
def test_segment_compiled_volume_and_options(device):
    g = torch.Generator().manual_seed(3)
    vol = torch.rand(10, 12, 11, generator=g)
    vol[3:8, 3:9, 3:8] += 1
    seeds = torch.zeros(10, 12, 11, dtype=torch.uint8)
    seeds[5, 6, 5] = 1
    seeds[0] = 2
    vol, seeds = vol.to(device), seeds.to(device)
    kw = dict(connectivity=6, lam=4.0, sigma=0.3, spacing=(2.0, 1.0, 1.0))
    got = _compiled(lambda v, s: torchcut.segment(v, s, **kw))(vol, seeds)
    assert torch.equal(got, torchcut.segment(vol, seeds, **kw))


@pytest.mark.parametrize("device", DEVICES)
def test_segment_compiled_raises_what_eager_raises(device):
    img, seeds = _image(device)
    seg = _compiled(lambda x, s: torchcut.segment(x, s, ndim=2))
    with pytest.raises(ValueError, match=r"seeds: expected labels 0 \(unknown\), 1 \(object\) and 2"):
        seg(img, seeds + 5)
    before = seeds.clone()
    seg(img, seeds)
    assert torch.equal(seeds, before)  # inputs untouched


@pytest.mark.parametrize("device", DEVICES)
def test_maxflow_graph_built_outside(device):
    src, snk, edges = _grid(device)
    graph = GridGraph(src, snk, edges, OFF4)
    solve = _compiled(lambda g: torchcut.maxflow(g))
    got = solve(graph)
    want = torchcut.maxflow(graph)
    assert torch.equal(got.flow_values, want.flow_values)
    assert torch.equal(got.node_mask, want.node_mask)
    assert got.verify()  # the certificate survives compilation
    assert got.stats["compiled"] is True


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_maxflow_graph_built_inside(device, dtype):
    src, snk, edges = _grid(device, dtype=dtype)
    if dtype.is_floating_point:
        edges = edges + 0.25
    solve = _compiled(lambda s, t, e: torchcut.maxflow(GridGraph(s, t, e, OFF4)))
    got = solve(src, snk, edges)
    want = torchcut.maxflow(GridGraph(src, snk, edges, OFF4))
    assert got.flow_value == want.flow_value
    assert torch.equal(got.mask, want.mask)
    with pytest.raises(CertificateError, match="built inside torch.compile"):
        got.verify()


def test_maxflow_compiled_unbatched_and_reverse():
    src, snk, edges = _grid("cpu", B=1)
    src, snk, edges = src[0], snk[0], edges[:, 0]
    rev = edges.flip(-1)
    solve = _compiled(lambda s, t, e, r: torchcut.maxflow(GridGraph(s, t, e, OFF4, r)))
    got = solve(src, snk, edges, rev)
    want = torchcut.maxflow(GridGraph(src, snk, edges, OFF4, rev))
    assert got.flow_value == want.flow_value and isinstance(got.flow_value, int)
    assert got.mask.shape == src.shape and torch.equal(got.mask, want.mask)


def test_maxflow_compiled_bad_input_and_options():
    src, snk, edges = _grid("cpu")
    solve = _compiled(lambda s, t, e: torchcut.maxflow(GridGraph(s, t, e, OFF4), threads=1))
    assert solve(src, snk, edges).flow_value == torchcut.maxflow(GridGraph(src, snk, edges, OFF4)).flow_value
    bad = edges.clone()
    bad[0, 0, 0, 0] = -3
    with pytest.raises(ValueError, match="edges: expected non-negative capacities, got minimum -3"):
        solve(src, snk, bad)
    with pytest.raises(ValueError, match="backend: expected one of"):
        _compiled(lambda s, t, e: torchcut.maxflow(GridGraph(s, t, e, OFF4), backend="gpu"))(src, snk, edges)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), cap=st.sampled_from([1, 7, 1000, 2**30]))
def test_maxflow_compiled_random(seed, cap):
    g = torch.Generator().manual_seed(seed)
    src, snk = (torch.randint(0, cap + 1, (3, 6, 5), generator=g) for _ in range(2))
    edges = torch.randint(0, cap + 1, (4, 3, 6, 5), generator=g)
    off8 = grid_offsets(2, 8)
    got = _SOLVE8(src, snk, edges)
    want = torchcut.maxflow(GridGraph(src, snk, edges, off8))
    assert got.flow_value == want.flow_value and torch.equal(got.mask, want.mask)


_SOLVE8 = torch.compile(lambda s, t, e: torchcut.maxflow(GridGraph(s, t, e, grid_offsets(2, 8))), fullgraph=True)


def test_custom_ops_pass_opcheck():
    src, snk, edges = _grid("cpu")
    g = GridGraph(src, snk, edges, OFF4)
    flat = [v for o in OFF4 for v in o]
    torch.library.opcheck(torch.ops.torchcut.grid_maxflow, (g.caps, g.source, g.sink, flat, 2, "auto", "{}"))
    torch.library.opcheck(torch.ops.torchcut.grid_build_maxflow, (src, snk, edges, None, flat, 2, None, "cpu", "{}"))
    img, seeds = _image("cpu", B=1)
    torch.library.opcheck(
        torch.ops.torchcut.segment_mask, (img[0], seeds[0], 8.0, None, None, None, None, None, None, None, "auto", "{}")
    )


def test_compiled_op_fakes_match_real_outputs():
    # the C++ ops' stats hold timings, so only the schema and the fake (shapes, dtypes) are compared
    torchcut.maxflow(GridGraph(*_grid("cpu"), OFF4))  # loads the CPU library (and registers its fakes)
    src, snk, edges = _grid("cpu")
    g = GridGraph(src, snk, edges, OFF4)
    flat = [v for o in OFF4 for v in o]
    args = (g.caps, g.source, g.sink, list(g.shape), flat, [1, 2])
    torch.library.opcheck(torch.ops.torchcut.grid_solve, args, test_utils=("test_schema", "test_faketensor"))
    args = (g.caps, g.source, g.sink, list(g.shape), flat, [1, 2, 1])  # mask_only: empty residual outputs
    torch.library.opcheck(torch.ops.torchcut.grid_solve, args, test_utils=("test_schema", "test_faketensor"))
    fg = torchcut.FlowGraph.from_edges([0, 1], [1, 2], [4, 3], source=[5, 0, 0], sink=[0, 0, 5])
    args = (fg.row_ptr, fg.head, fg.rev, fg.caps.clone(), fg.source[0].clone(), fg.sink[0].clone(), [])
    torch.library.opcheck(torch.ops.torchcut.csr_solve_, args, test_utils=("test_schema", "test_faketensor"))


def test_options_string_rejects_objects():
    assert ops.options_string({"b": 1, "a": None}) == '{"a": null, "b": 1}'
    with pytest.raises(TypeError, match="solver options: expected ints"):
        ops.options_string({"threads": object()})


def test_flowgraph_inside_compile():
    fg = torchcut.FlowGraph.from_edges([0, 1], [1, 2], [4, 3], source=[5, 0, 0], sink=[0, 0, 5])
    # not traced: it breaks the graph (fullgraph=False) and solves eagerly
    torch._dynamo.reset()
    assert torch.compile(lambda g: torchcut.maxflow(g).flow_values)(fg).tolist() == [3]
    with pytest.raises(TypeError, match="inside torch.compile, expected a torchcut.GridGraph, got FlowGraph"):
        ops.compiled_maxflow(fg, "auto", {})


@pytest.mark.cuda
def test_cuda_compiled_pipeline_batch():
    img, seeds = _image("cuda", B=4, H=64, W=48, seed=5)
    seg = _compiled(lambda x, s: torchcut.segment(x, s, ndim=2, connectivity=8))
    want = torchcut.segment(img, seeds, ndim=2, connectivity=8)
    assert torch.equal(seg(img, seeds), want)
    # inductor's CUDA graphs skip the graphs that call the solver (tag cudagraph_unsafe): no capture error
    torch._dynamo.reset()
    fast = torch.compile(lambda x, s: torchcut.segment(x, s, ndim=2, connectivity=8), mode="reduce-overhead")
    for _ in range(3):
        assert torch.equal(fast(img, seeds), want)
    from torchcut.solvers.cuda import OPTIONS

    g = GridGraph(*_grid("cuda"), OFF4)
    flat = [v for o in OFF4 for v in o]
    excess = g.source - torch.minimum(g.source, g.sink.long())
    args = (g.caps.clone(), excess, g.sink.clone(), list(g.shape), flat, [0] * len(OPTIONS))
    torch.library.opcheck(torch.ops.torchcut.grid_solve_, args, test_utils=("test_schema", "test_faketensor"))
