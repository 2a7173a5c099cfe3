"""Small CUDA graphs solved by the compiled CPU solver (``torchcut.solvers._host``).

The routing is exact: the CPU solvers return the same flow values and the same canonical minimum cut
as the CUDA kernels, and the result's tensors are on the graph's device. GPU tests are marked ``cuda``.
"""

from __future__ import annotations

import pytest
import torch

import torchcut
from torchcut import FlowGraph, GridGraph, _copy, grid_offsets
from torchcut.solvers import _host


def _grid(shape, seed, device="cpu", batch=None):
    g = torch.Generator().manual_seed(seed)
    lead = () if batch is None else (batch,)
    offs = grid_offsets(2, 4)
    src = torch.randint(0, 20, lead + shape, generator=g)
    snk = torch.randint(0, 20, lead + shape, generator=g)
    edges = torch.randint(0, 12, (len(offs),) + lead + shape, generator=g)
    return GridGraph(src.to(device), snk.to(device), edges.to(device), offs)


def test_wants_host_rules():
    g = _grid((8, 8), 0)
    assert not _host.wants_host(g, "grid", "auto", {})  # a CPU graph is solved where it is


def test_transfer_packs_every_dtype_and_shape():
    ts = [
        torch.arange(5),
        torch.tensor([True, False, True]),
        torch.arange(7, dtype=torch.int32).view(7, 1),
        torch.tensor(3),
        torch.zeros(0, 4, dtype=torch.int16),
        torch.arange(6, dtype=torch.int64).view(2, 3)[:, 1:],
    ]
    out = _copy.transfer(ts, torch.device("cpu"))
    for a, b in zip(ts, out):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def test_solve_on_host_keeps_device_and_values():
    g = _grid((12, 10), 1)
    r = _host.solve_on_host(g, lambda h: torchcut.maxflow(h))
    ref = torchcut.maxflow(g, backend="reference")
    assert r.flow_value == ref.flow_value and r.verify()
    assert torch.equal(r.mask, ref.mask)
    assert r.stats["route"].startswith("host")


@pytest.mark.cuda
@pytest.mark.parametrize("shape,batch", [((16, 16), None), ((8, 12), 3), ((32, 32), None)])
def test_small_cuda_grid_stays_on_gpu_in_one_launch(shape, batch):
    """Small CUDA grids are solved by the grid kernels in one launch (faster than the host route); the host
    route, called directly, gives the same flows and canonical cut on the graph's device."""
    g = _grid(shape, 2, "cuda", batch)
    k = torchcut.maxflow(g)
    assert k.stats["backend"] == "cuda" and k.stats["one_launch"] == 1 and "route" not in k.stats
    r = _host.solve_on_host(g, lambda h: torchcut.maxflow(h))
    assert r.stats["route"].startswith("host") and r.mask.is_cuda and r.residual.is_cuda
    assert r.flow_values.tolist() == k.flow_values.tolist()
    assert torch.equal(r.node_mask, k.node_mask) and r.verify() and k.verify()
    back = _copy.transfer([r.residual, r.node_mask, r.flow_values], torch.device("cpu"))
    assert torch.equal(back[0], r.residual.cpu()) and torch.equal(back[1], r.node_mask.cpu())
    m = torchcut.solvers.consume_mask(_grid(shape, 2, "cuda", batch))
    assert m.is_cuda and torch.equal(m, r.mask)


@pytest.mark.cuda
def test_large_cuda_grid_and_options_stay_on_gpu():
    r = torchcut.maxflow(_grid((72, 72), 3, "cuda"))
    assert r.stats["backend"] == "cuda" and r.verify()
    r = torchcut.maxflow(_grid((8, 8), 3, "cuda"), rounds=8)  # a CUDA option: the CUDA solver
    assert r.stats["backend"] == "cuda" and r.verify()


@pytest.mark.cuda
def test_small_cuda_flowgraph_goes_to_host():
    g = torch.Generator().manual_seed(4)
    n, m = 60, 300
    u = torch.randint(0, n, (m,), generator=g)
    v = (u + torch.randint(1, n, (m,), generator=g)) % n
    fg = FlowGraph.from_edges(
        u,
        v,
        torch.randint(1, 9, (m,), generator=g),
        source=torch.randint(0, 30, (n,), generator=g),
        sink=torch.randint(0, 30, (n,), generator=g),
    )
    host, dev = fg.to("cpu"), fg.to("cuda")
    r = torchcut.maxflow(dev)
    assert r.stats["route"].startswith("host") and r.mask.is_cuda and r.verify()
    assert r.flow_value == torchcut.maxflow(host).flow_value == torchcut.maxflow(dev, backend="cuda").flow_value


def _flowgraph(seed, n=60, m=300):
    g = torch.Generator().manual_seed(seed)
    u = torch.randint(0, n, (m,), generator=g)
    v = (u + torch.randint(1, n, (m,), generator=g)) % n
    return FlowGraph.from_edges(
        u,
        v,
        torch.randint(1, 9, (m,), generator=g),
        source=torch.randint(0, 30, (n,), generator=g),
        sink=torch.randint(0, 30, (n,), generator=g),
    )


def _pack(ts):
    """``ts`` as views of one byte buffer, each part starting at a multiple of 8 (transfer's layout)."""
    sizes = [t.numel() * t.element_size() for t in ts]
    buf = torch.zeros(sum(n + (-n % 8) for n in sizes), dtype=torch.uint8)
    out, at = [], 0
    for t, n in zip(ts, sizes):
        part = buf[at : at + n]
        part.copy_(t.contiguous().reshape(-1).view(torch.uint8))
        out.append(part.view(t.dtype).view(t.shape))
        at += n + (-n % 8)
    return out


def test_transfer_copies_and_finds_a_packed_span():
    """On one device a transfer clones; tensors laid out as a transfer lays them are found as one span (what
    a copy to the other device then sends whole)."""
    ts = [torch.arange(5, dtype=torch.int32), torch.tensor([True, False, True]), torch.arange(6).view(2, 3)]
    copies = _copy.transfer(ts, torch.device("cpu"))
    assert all(a.data_ptr() != b.data_ptr() and torch.equal(a, b) for a, b in zip(ts, copies))
    packed = _pack(ts)
    span = _copy.span(packed)
    assert span is not None and span.numel() == 24 + 8 + 48  # 5 int32 and 4 bytes of padding, 3 bools and 5, 6 int64
    assert span.data_ptr() == packed[0].data_ptr()
    assert _copy.span([packed[0], packed[2]]) is None  # not consecutive
    assert _copy.span([torch.arange(4), torch.arange(4)]) is None  # two storages
    assert _copy.span([packed[0], torch.zeros(0)]) is None  # an empty part


def test_solve_csr_on_host_equals_the_solver_on_every_field():
    fg = _flowgraph(5)
    r, ref = _host.solve_csr_on_host(fg), torchcut.maxflow(fg)
    assert r.stats["route"] == "host, csr" and r.verify()
    assert r.flow_value == ref.flow_value
    for name in ("flow_values", "node_mask", "residual", "source_flow", "sink_flow"):
        assert torch.equal(getattr(r, name), getattr(ref, name)), name
    assert torch.equal(fg.caps, ref.graph.caps)  # the graph is not modified


def test_flow_value_kept_on_host_follows_changes_of_flow_values():
    r = _host.solve_csr_on_host(_flowgraph(6))
    value = r.flow_value
    assert value == torchcut.maxflow(_flowgraph(6)).flow_value
    r.flow_values[0] += 1  # in place: the kept host value no longer holds
    assert r.flow_value == value + 1
    r.flow_values = torch.tensor([7])
    assert r.flow_value == 7


@pytest.mark.cuda
def test_flowgraph_to_cuda_packs_the_solver_fields_and_routes_in_one_span():
    fg = _flowgraph(7)
    dev = fg.to("cuda")
    assert _copy.span([getattr(dev, n) for n in ("caps", "source", "sink", "row_ptr", "head", "rev")]) is not None
    for name in ("caps", "source", "sink", "row_ptr", "head", "rev", "tail", "pair_fwd", "pair_bwd"):
        a, b = getattr(fg, name), getattr(dev, name)
        assert b.is_cuda and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b.cpu()), name
    r, ref = torchcut.maxflow(dev), torchcut.maxflow(fg)
    assert r.stats["route"] == "host, csr" and r.mask.is_cuda and r.verify()
    assert r.flow_value == ref.flow_value
    for name in ("flow_values", "node_mask", "residual", "source_flow", "sink_flow"):
        assert torch.equal(getattr(r, name).cpu(), getattr(ref, name)), name
    back = dev.to("cpu")
    assert all(torch.equal(getattr(back, n), getattr(fg, n)) for n in ("caps", "row_ptr", "tail", "pair_bwd"))


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["no edges", "float", "one node"])
def test_flowgraph_to_cuda_edge_cases_route_like_the_cpu(kind):
    if kind == "no edges":
        fg = FlowGraph.from_edges([], [], [], source=[3, 0, 2], sink=[1, 4, 2], num_nodes=3)
    elif kind == "float":
        fg = FlowGraph.from_edges([0, 1], [1, 2], [0.5, 1.25], source=[2.0, 0.0, 0.0], sink=[0.0, 0.0, 1.5])
    else:
        fg = FlowGraph.from_edges([], [], [], source=[5], sink=[2], num_nodes=1)
    dev = fg.to("cuda")
    r, ref = torchcut.maxflow(dev), torchcut.maxflow(fg)
    assert r.mask.is_cuda and r.verify() and r.flow_value == ref.flow_value
    assert torch.equal(r.mask.cpu(), ref.mask) and torch.equal(r.residual.cpu(), ref.residual)
    back = dev.to("cpu")
    assert all(torch.equal(getattr(back, n), getattr(fg, n)) for n in ("caps", "source", "sink", "row_ptr", "head"))


@pytest.mark.cuda
def test_routed_graph_solved_again_keeps_results_apart_and_sees_changes():
    """A graph moved by ``FlowGraph.to`` and solved again is routed through its kept pinned buffer: each
    solve's tensors are its own (a later solve does not overwrite them), an in-place change of the graph's
    tensors is seen by the next solve, and threads solving the same graph get the same results."""
    fg = _flowgraph(8)
    dev = fg.to("cuda")
    first, ref = torchcut.maxflow(dev), torchcut.maxflow(fg)
    names = ("flow_values", "node_mask", "residual", "source_flow", "sink_flow")
    kept = {n: getattr(first, n).clone() for n in names}
    assert first.stats["route"] == "host, csr" and _host._TWINS.get(dev) is _host._FIRST  # the general route
    for _ in range(3):
        again = torchcut.maxflow(dev)
        assert again.flow_value == ref.flow_value and again.verify()
        for name in names:
            assert torch.equal(getattr(again, name).cpu(), getattr(ref, name)), name
            assert getattr(again, name).data_ptr() != getattr(first, name).data_ptr(), name
        assert isinstance(_host._TWINS.get(dev), _host._Twin)  # from the second solve on: the kept buffer
    torch.cuda.synchronize()
    assert all(torch.equal(getattr(first, n), kept[n]) for n in names)  # untouched by the later solves
    assert torch.equal(dev.caps.cpu(), fg.caps)  # the graph is not modified

    dev.source.mul_(2)  # in place: the next solve sees it
    fg.source.mul_(2)
    changed, ref2 = torchcut.maxflow(dev), torchcut.maxflow(fg)
    assert changed.flow_value == ref2.flow_value and changed.verify()
    assert torch.equal(changed.mask.cpu(), ref2.mask)

    import threading

    values, errors = [], []

    def work():
        try:
            for _ in range(20):
                r = torchcut.maxflow(dev)
                values.append((r.flow_value, bool(torch.equal(r.mask.cpu(), ref2.mask))))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and values == [(ref2.flow_value, True)] * 60
