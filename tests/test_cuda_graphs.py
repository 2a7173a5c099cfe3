"""CUDA graph capture: the CUDA solvers refuse to run inside a capture with a clear RuntimeError, before
anything is queued on the stream, and the CUDA context stays usable afterwards (GPU tests)."""

from __future__ import annotations

import pytest
import torch

import torchcut
from torchcut import FlowGraph, GridGraph, grid_offsets

pytestmark = pytest.mark.cuda


def _grid():
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, 50, (40, 50), generator=g)
    snk = torch.randint(0, 50, (40, 50), generator=g)
    edges = torch.randint(0, 20, (2, 40, 50), generator=g)
    return GridGraph(src, snk, edges, grid_offsets(2, 4)).to("cuda")


def _flowgraph():
    return FlowGraph.from_edges([0, 1, 0, 2], [1, 3, 2, 3], [2, 2, 3, 1], source=[5, 0, 0, 0], sink=[0, 0, 0, 5]).to(
        "cuda"
    )


def _capture_raises(run):
    """Run `run` inside a CUDA graph capture; it must raise RuntimeError naming the capture."""
    graph = torch.cuda.CUDAGraph()
    x = torch.zeros(8, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        with pytest.raises(RuntimeError, match="CUDA graph is being captured"):
            with torch.cuda.graph(graph, stream=stream):
                x.add_(1)
                run()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    return graph, x


@pytest.mark.parametrize("route", ["grid", "csr"])
def test_maxflow_during_capture_is_a_clear_error_and_the_context_survives(route):
    if route == "grid":
        g = _grid()
        run = lambda: torchcut.maxflow(g, backend="cuda")  # noqa: E731
    else:
        g = _flowgraph()
        run = lambda: torchcut.maxflow(g, backend="cuda", lattice=False)  # noqa: E731
    expected = run().flow_value  # also builds the extension outside the capture
    graph, x = _capture_raises(run)
    # the capture ended cleanly: what was captured before the error replays, and the solver still works
    graph.replay()
    torch.cuda.synchronize()
    assert x.tolist() == [1.0] * 8
    r = run()
    assert r.flow_value == expected and r.verify()
    assert torch.cuda.is_current_stream_capturing() is False


@pytest.mark.parametrize("call", ["segment", "refine"])
def test_segment_and_refine_during_capture_name_themselves(call):
    # the error names the function the caller used, before any of its work is queued
    g = torch.Generator().manual_seed(1)
    image = torch.rand(24, 32, generator=g).cuda()
    if call == "segment":
        seeds = torch.zeros(24, 32, dtype=torch.int64, device="cuda")
        seeds[0], seeds[12, 16] = 2, 1
        run = lambda: torchcut.segment(image, seeds)  # noqa: E731
    else:
        p = torch.rand(24, 32, generator=g).cuda()
        run = lambda: torchcut.refine(image, torch.stack([p, 1 - p]))  # noqa: E731
    expected = run()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        with pytest.raises(RuntimeError, match=f"torchcut.{call}: the CUDA solver cannot run while a CUDA graph"):
            with torch.cuda.graph(graph, stream=stream):
                run()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    assert torch.equal(run(), expected)


def test_check_outside_capture_passes():
    from torchcut.solvers.cuda import check_not_capturing

    check_not_capturing("test")  # no capture: no error


def test_graph_cache_copies_inputs_only_when_changed():
    from torchcut._cudagraph import GraphCache

    cache = GraphCache(entries=2)
    step = lambda a, b: (a * 2 + b,)  # noqa: E731
    a = torch.arange(6, device="cuda")
    key = ("axpb", (6,))
    for b in (torch.ones(6, device="cuda", dtype=torch.int64), torch.full((6,), 3, device="cuda")):
        assert cache.run(key, step, (a, b))[0].tolist() == (a * 2 + b).tolist()  # eager, then captured
    b = torch.full((6,), 5, device="cuda")
    assert cache.run(key, step, (a, b))[0].tolist() == [5, 7, 9, 11, 13, 15]  # replay; a not copied again
    a.add_(10)  # the same tensor, modified in place: copied again
    assert cache.run(key, step, (a, b))[0].tolist() == [25, 27, 29, 31, 33, 35]
    a2 = torch.arange(6, device="cuda")  # another tensor: copied
    assert cache.run(key, step, (a2, b))[0].tolist() == [5, 7, 9, 11, 13, 15]
    a2[0] = 100  # through an index assignment (a view's write bumps the shared version counter)
    b.view(2, 3)[1].fill_(0)
    assert cache.run(key, step, (a2, b))[0].tolist() == [205, 7, 9, 6, 8, 10]
    assert cache.captures == 1 and cache.replays == 4
