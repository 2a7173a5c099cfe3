"""CUDA push-relabel for general graphs (``torchcut_csr``): exactness against scipy and the reference."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import torchcut
from torchcut import FlowGraph

sys.path.insert(0, str(Path(__file__).resolve().parent))
import flow_cases as fc  # noqa: E402

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def csr_ext():
    from torchcut.solvers import cuda_csr

    err = cuda_csr.load_error()
    if err is not None:
        pytest.fail(f"the CUDA CSR extension does not build: {err}")
    return cuda_csr


def cuda_solve(net, **kw):
    g = FlowGraph.from_network(*net[1:4], net[4], net[5], net[0]).to("cuda")
    r = torchcut.maxflow(g, backend="cuda", lattice=False, **kw)
    assert r.stats["backend"] == "cuda_csr"
    assert r.verify()
    return g, r


@pytest.mark.parametrize("family", ["uniform", "layered", "rmfgen"])
def test_random_networks(csr_ext, family):
    gen = {"uniform": fc.uniform, "layered": fc.layered, "rmfgen": fc.rmfgen}[family]
    rng = np.random.default_rng(abs(hash(family)) % 2**32)
    for _ in range(60):
        net = gen(rng)
        _, r = cuda_solve(net)
        assert r.flow_value == fc.scipy_flow(*net)


def test_mask_equals_reference(csr_ext):
    rng = np.random.default_rng(4)
    for _ in range(30):
        net = fc.uniform(rng, n=int(rng.integers(5, 60)))
        g, r = cuda_solve(net)
        ref = torchcut.maxflow(g.to("cpu"), backend="reference", lattice=False)
        assert r.flow_value == ref.flow_value
        assert torch.equal(r.mask.cpu(), ref.mask)  # the canonical cut is unique (docs/design.md)


def test_high_degree_vertices(csr_ext):
    # hubs of degree in the hundreds exercise the warp-per-vertex path
    rng = np.random.default_rng(8)
    for _ in range(10):
        n = 400
        hubs = rng.integers(0, n, 4)
        tail = np.concatenate([np.repeat(hubs, 300), rng.integers(0, n, 800)])
        head = np.concatenate([rng.integers(0, n, 1200), rng.integers(0, n, 800)])
        cap = rng.integers(0, 1000, tail.size)
        net = (n, tail, head, cap, int(hubs[0]), int((hubs[0] + 1) % n))
        _, r = cuda_solve(net)
        assert r.flow_value == fc.scipy_flow(*net)


def test_terminal_heavy_and_large(csr_ext):
    rng = np.random.default_rng(9)
    n, m = 20000, 80000
    u, v = rng.integers(0, n, m), rng.integers(0, n, m)
    cap, rcap = rng.integers(0, 100, m), rng.integers(0, 100, m)
    src = rng.integers(0, 200, n) * (rng.random(n) < 0.3)
    snk = rng.integers(0, 200, n) * (rng.random(n) < 0.3)
    g = FlowGraph.from_edges(u, v, cap, rcap, source=src, sink=snk, num_nodes=n).to("cuda")
    r = torchcut.maxflow(g, backend="cuda", lattice=False)
    assert r.verify()
    assert r.flow_value == fc.scipy_flow(*fc.terminal_network(n, u, v, cap, rcap, src, snk))


def test_options_period_iters(csr_ext):
    rng = np.random.default_rng(10)
    net = fc.rmfgen(rng, a=4, b=4)
    want = fc.scipy_flow(*net)
    for period, iters in [(1, 1), (3, 2), (50, 8)]:
        _, r = cuda_solve(net, period=period, iters=iters)
        assert r.flow_value == want


def test_max_cycles_is_a_clean_exception(csr_ext):
    """The limit is returned by the op as a status and raised in Python; the solver works after it."""
    rng = np.random.default_rng(11)
    net = fc.rmfgen(rng, a=4, b=6)
    with pytest.raises(RuntimeError, match="did not converge in 1 cycles"):
        cuda_solve(net, max_cycles=1, period=1, iters=1)
    _, r = cuda_solve(net)
    assert r.flow_value == fc.scipy_flow(*net)


def test_int64_capacities(csr_ext):
    big = 2**40
    g = FlowGraph.from_edges([0, 1], [1, 2], [big, big + 5], source=[big + 9, 0, 0], sink=[0, 0, big + 7]).to("cuda")
    r = torchcut.maxflow(g, backend="cuda", lattice=False)
    assert r.flow_value == big and r.verify()


def test_lattice_route_on_cuda(csr_ext, shared_data):
    for name, value in (("16x16", 50), ("32x32", 186)):
        path = shared_data / "maxflow" / "tsukuba_crops" / f"tsukuba_crop_{name}.max"
        g = torchcut.read_dimacs(path, device="cuda")
        r = torchcut.maxflow(g, lattice=True)  # lattice -> grid kernels (or the grid reference if they do not build)
        assert r.flow_value == value and r.verify()
        r2 = torchcut.maxflow(g, backend="cuda", lattice=False)
        assert r2.flow_value == value and r2.verify()
        assert torch.equal(r.mask, r2.mask)
        r3 = torchcut.maxflow(g)  # small: the CPU solver, the result back on the GPU
        assert r3.stats["route"].startswith("host") and r3.mask.is_cuda
        assert r3.flow_value == value and r3.verify() and torch.equal(r3.mask, r2.mask)
