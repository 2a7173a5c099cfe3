"""Small CUDA graphs solved by the compiled CPU solver (``torchcut.solvers._host``).

The routing is exact: the CPU solvers return the same flow values and the same canonical minimum cut
as the CUDA kernels, and the result's tensors are on the graph's device. GPU tests are marked ``cuda``.
"""

from __future__ import annotations

import pytest
import torch

import torchcut
from torchcut import FlowGraph, GridGraph, grid_offsets
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
    out = _host._transfer(ts, torch.device("cpu"))
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
    back = _host._transfer([r.residual, r.node_mask, r.flow_values], torch.device("cpu"))
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
