"""torchcut.distributed.maxflow over gloo on the loopback, 2 and 3 processes, against PyMaxflow.

Each test module run starts one pool of 2 and one of 3 processes (``tests/dist_pool.py``); every case
splits one global network into slabs, and the answers are checked against the whole grid: the flow
against PyMaxflow, the gathered masks against the canonical cut of the single-grid solver and,
independently, for being a cut whose capacity equals that flow.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from dist_pool import Pool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles import pymaxflow_grid

import torchcut


@pytest.fixture(scope="module")
def pool2():
    p = Pool(2)
    yield p
    p.close()


@pytest.fixture(scope="module")
def pool3():
    p = Pool(3)
    yield p
    p.close()


def make_case(rng, shape, connectivity, cuts, axis=0, symmetric=False, density=0.3, cmax=10):
    offsets = torchcut.grid_offsets(len(shape), connectivity)
    K = len(offsets)
    src = rng.integers(0, cmax, shape) * (rng.random(shape) < density)
    snk = rng.integers(0, cmax, shape) * (rng.random(shape) < density)
    edges = rng.integers(0, 8, (K,) + shape)
    reverse = None if symmetric else rng.integers(0, 8, (K,) + shape)
    return dict(source=src, sink=snk, edges=edges, reverse=reverse, offsets=offsets, axis=axis, cuts=list(cuts))


def cut_capacity(case, mask) -> int:
    """Capacity of the cut (mask = source side) of the global network, from the raw inputs."""
    src, snk, edges = case["source"], case["sink"], case["edges"]
    rev = edges if case["reverse"] is None else case["reverse"]
    total = int(src[~mask].sum()) + int(snk[mask].sum())
    shape = src.shape
    for k, o in enumerate(case["offsets"]):
        here = tuple(slice(max(0, -v), n - max(0, v)) for v, n in zip(o, shape))
        there = tuple(slice(max(0, v), n - max(0, -v)) for v, n in zip(o, shape))
        a, b = mask[here], mask[there]
        total += int(edges[k][here][a & ~b].sum()) + int(rev[k][here][b & ~a].sum())
    return total


def check_solved(case, answers):
    kinds = [k for k, _ in answers]
    assert kinds == ["ok"] * len(answers), answers
    want = pymaxflow_grid(case["source"], case["sink"], case["edges"], case["offsets"], case["reverse"])
    flows = [a["flow"] for _, a in answers]
    assert flows == [want] * len(answers)
    assert all(a["verified"] and a["untouched"] for _, a in answers)
    mask = np.concatenate([a["mask"] for _, a in answers], axis=case["axis"])
    assert cut_capacity(case, mask) == want
    g = torchcut.GridGraph(case["source"], case["sink"], case["edges"], case["offsets"], case["reverse"])
    assert np.array_equal(mask, torchcut.maxflow(g).mask.numpy())  # the canonical cut, bit for bit
    return answers


def split(draw, n, world):
    inner = draw(st.lists(st.integers(1, n - 1), min_size=world - 1, max_size=world - 1, unique=True))
    return [0] + sorted(inner) + [n]


@st.composite
def cases(draw, world):
    ndim = draw(st.sampled_from((2, 3)))
    shape = tuple(draw(st.integers(3, 9 if ndim == 2 else 5)) for _ in range(ndim))
    axis = draw(st.integers(0, ndim - 1))
    shape = tuple(max(n, world + 1) if i == axis else n for i, n in enumerate(shape))
    conn = draw(st.sampled_from((4, 8) if ndim == 2 else (6, 18, 26)))
    seed = draw(st.integers(0, 2**32 - 1))
    return make_case(
        np.random.default_rng(seed),
        shape,
        conn,
        split(draw, shape[axis], world),
        axis,
        symmetric=draw(st.booleans()),
        density=draw(st.sampled_from((0.1, 0.4))),
    )


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases(2))
def test_two_ranks_random_grids(pool2, case):
    check_solved(case, pool2.run(case))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases(3))
def test_three_ranks_random_grids(pool3, case):
    check_solved(case, pool3.run(case))


def test_uneven_slabs_and_a_one_layer_slab(pool3):
    rng = np.random.default_rng(1)
    case = make_case(rng, (12, 10), 8, [0, 1, 9, 12])
    check_solved(case, pool3.run(case))
    case = make_case(rng, (6, 5, 9), 26, [0, 4, 5, 9], axis=2)
    check_solved(case, pool3.run(case))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases(2), world3=cases(3))
def test_uneven_splits_in_both_pools(pool2, pool3, case, world3):
    """More random grids: two ranks and three, any split axis."""
    check_solved(case, pool2.run(case))
    check_solved(world3, pool3.run(world3))


def test_push_relabel_border_cases(pool2, pool3):
    """One-layer slabs, all flow crossing two borders, no path at all, and a border no flow can cross."""
    rng = np.random.default_rng(12)
    for shape, conn, cuts, axis in (((12, 10), 8, [0, 1, 9, 12], 0), ((6, 5, 9), 26, [0, 4, 5, 9], 2)):
        case = make_case(rng, shape, conn, cuts, axis)
        check_solved(case, pool3.run(case))
    case = make_case(rng, (9, 8), 4, [0, 3, 6, 9], density=0.5)
    case["source"][3:] = 0
    case["sink"][:6] = 0
    answers = check_solved(case, pool3.run(case))
    assert (
        answers[0][1]["flow"] > 0 and answers[0][1]["stats"]["bfs_rounds"] > answers[0][1]["stats"]["global_relabels"]
    )
    case = make_case(rng, (6, 7), 4, [0, 3, 6], density=0.5)
    case["sink"][:] = 0  # no path: the flow is 0 and every node is on the source side
    answers = check_solved(case, pool2.run(case))
    assert answers[0][1]["flow"] == 0 and all(a["mask"].all() for _, a in answers)
    case = make_case(rng, (4, 6, 5), 6, [0, 2, 4])
    for k, o in enumerate(case["offsets"]):
        if o[0] == 1:
            case["edges"][k][1] = 0
            case["reverse"][k][1] = 0
    check_solved(case, pool2.run(case))


def test_slab_without_source_or_sink_capacity(pool3):
    rng = np.random.default_rng(2)
    case = make_case(rng, (9, 8), 4, [0, 3, 6, 9], density=0.5)
    case["source"][3:] = 0  # ranks 1 and 2: no source capacity
    case["sink"][:6] = 0  # ranks 0 and 1: no sink capacity, so all flow crosses two borders
    answers = check_solved(case, pool3.run(case))
    assert answers[0][1]["flow"] > 0
    assert answers[0][1]["stats"]["bfs_rounds"] > answers[0][1]["stats"]["global_relabels"]  # distances crossed


def test_border_without_crossing_capacity(pool2):
    rng = np.random.default_rng(3)
    case = make_case(rng, (4, 6, 5), 26, [0, 2, 4])
    offs = case["offsets"]
    for k, o in enumerate(offs):  # no capacity on any arc between layers 1 and 2
        if o[0] == 1:
            case["edges"][k][1] = 0
            case["reverse"][k][1] = 0
    answers = check_solved(case, pool2.run(case))
    # two independent halves: the flow is the sum of their own maximum flows
    halves = [
        pymaxflow_grid(case["source"][a:b], case["sink"][a:b], case["edges"][:, a:b], offs, case["reverse"][:, a:b])
        for a, b in ((0, 2), (2, 4))
    ]
    assert answers[0][1]["flow"] == sum(halves)


def errors_on_every_rank(answers, exc, match):
    assert [k for k, _ in answers] == ["error"] * len(answers), answers
    for kind, (name, msg) in answers:
        assert name == exc.__name__, (name, msg)
        assert __import__("re").search(match, msg), msg


def test_bad_input_raises_on_every_rank_and_the_group_goes_on(pool3):
    rng = np.random.default_rng(4)
    base = make_case(rng, (9, 7), 4, [0, 3, 6, 9])

    def with_fault(rank, **fault):
        return dict(base, fault={rank: fault})

    # a rank with a different width: shapes must agree off the split axis
    case = with_fault(
        1, source=("narrow", 1, 5), sink=("narrow", 1, 5), edges=("narrow", 2, 5), reverse=("narrow", 2, 5)
    )
    errors_on_every_rank(pool3.run(case), ValueError, r"source: expected slabs whose shapes differ only along axis 0")
    # a rank with different offsets
    case = with_fault(2, offsets=("set", ((1, 0), (0, 1))))
    errors_on_every_rank(pool3.run(case), ValueError, r"offsets: expected the same offsets on every rank.*rank 2")
    # slabs out of rank order (declared starts)
    case = dict(base, start=[3, 0, 6])
    errors_on_every_rank(pool3.run(case), ValueError, r"start: expected slabs in rank order, rank 0 starting at 0")
    # a local error on one rank reaches the others, named with its rank
    case = with_fault(1, sink=("negate",))
    answers = pool3.run(case)
    errors_on_every_rank(answers, ValueError, r"sink: expected non-negative capacities")
    assert answers[0][1][1].startswith("rank 1: ") and not answers[1][1][1].startswith("rank")
    case = with_fault(0, source=("float",))
    errors_on_every_rank(pool3.run(case), TypeError, r"source: expected integer capacities")
    case = with_fault(0, axis=("set", 2))
    errors_on_every_rank(pool3.run(case), ValueError, r"axis: expected a spatial axis in \[0, 2\), got 2")
    # the same processes still solve correctly afterwards: no rank was left behind in a collective
    good = dict(base, start=[0, 3, 6])
    check_solved(good, pool3.run(good))


def test_verify_detects_a_tampered_border_residual(pool2):
    rng = np.random.default_rng(5)
    case = make_case(rng, (6, 6), 4, [0, 3, 6], density=0.6)
    case["tamper"] = 1
    answers = pool2.run(case)
    errors_on_every_rank(answers, torchcut.CertificateError, r"arc pair residuals do not sum")


def test_needs_a_process_group():
    assert not torch.distributed.is_initialized()
    with pytest.raises(RuntimeError, match=r"group: expected an initialized torch.distributed process group"):
        torchcut.distributed.maxflow(
            torch.ones(2, 2, dtype=torch.int32),
            torch.ones(2, 2, dtype=torch.int32),
            torch.ones(2, 2, 2, dtype=torch.int32),
            torchcut.grid_offsets(2, 4),
        )
    with pytest.raises(ValueError, match=r"edges: expected shape \(2, 2, 2\)"):
        torchcut.distributed.maxflow(
            torch.ones(2, 2, dtype=torch.int32),
            torch.ones(2, 2, dtype=torch.int32),
            torch.ones(3, 2, 2, dtype=torch.int32),
            torchcut.grid_offsets(2, 4),
        )


@pytest.mark.parametrize(
    "shape, axis, cuts, channels, options",
    [
        ((9, 8, 7), 0, [0, 4, 9], 0, {}),
        ((6, 10, 5), 1, [0, 7, 10], 0, {"connectivity": 26, "lam": 3.0}),
        ((12, 11), 1, [0, 5, 11], 3, {"channel_axis": 0}),
    ],
)
def test_segment_matches_the_whole_volume(pool2, shape, axis, cuts, channels, options):
    rng = np.random.default_rng(6)
    seeds = np.zeros(shape, np.uint8)
    seeds[(1,) * len(shape)] = 1
    seeds[tuple(n - 2 for n in shape)] = 2
    seeds.flat[rng.choice(seeds.size, 4, replace=False)] = rng.integers(1, 3, 4)
    image = rng.random(((channels,) if channels else ()) + shape).astype(np.float32)
    image[..., : shape[-1] // 2] += 0.7  # an object on one side
    case = dict(kind="segment", image=image, seeds=seeds, axis=axis, cuts=cuts, options=options)
    answers = pool2.run(case)
    assert [k for k, _ in answers] == ["ok", "ok"], answers
    whole, r = torchcut.segment(
        torch.from_numpy(image), torch.from_numpy(seeds), ndim=len(shape), return_result=True, **options
    )
    mask = np.concatenate([a["mask"] for _, a in answers], axis=axis)
    assert [a["flow"] for _, a in answers] == [r.flow_value] * 2
    assert np.array_equal(mask, whole.numpy())
    assert all(a["verified"] for _, a in answers)
    answers = pool2.run(dict(case, mask_only=True))
    assert [k for k, _ in answers] == ["ok", "ok"], answers
    assert np.array_equal(np.concatenate([a["mask"] for _, a in answers], axis=axis), whole.numpy())


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize(
    "shape, axis, channels, options",
    [
        ((14, 12, 10), 0, 0, {}),
        ((9, 13, 11), 2, 0, {"connectivity": 26, "lam": 2.5}),
        ((30, 26), 1, 3, {"channel_axis": 0, "connectivity": 8}),
        ((27, 25), 0, 0, {"connectivity": 4, "spacing": (2.0, 0.5)}),
    ],
)
def test_segment_energy_is_the_whole_volumes(pool2, pool3, world, shape, axis, channels, options):
    """Every capacity of every slab equals the whole volume's ``segmentation_graph``, bit for bit: sigma
    and the seed histograms are exact sums. A large ``scale`` makes the smallest change of sigma move
    capacities."""
    pool = pool2 if world == 2 else pool3
    rng = np.random.default_rng(sum(shape) + world)
    seeds = np.zeros(shape, np.uint8)
    seeds.flat[rng.choice(seeds.size, 12, replace=False)] = np.repeat([1, 2], 6)
    image = (rng.random(((channels,) if channels else ()) + shape) * 7.3).astype(np.float32)
    image[..., : shape[-1] // 2] += 2.1
    cuts = [0] + sorted(rng.choice(np.arange(1, shape[axis]), world - 1, replace=False).tolist()) + [shape[axis]]
    options = dict(options, scale=2.0**20 / options.get("lam", 8.0))
    case = dict(kind="segment", image=image, seeds=seeds, axis=axis, cuts=cuts, options=options, graph=True)
    answers = pool.run(case)
    assert [k for k, _ in answers] == ["ok"] * world, answers
    g = torchcut.segmentation_graph(torch.from_numpy(image), torch.from_numpy(seeds), ndim=len(shape), **options)
    K = len(g.offsets)
    for r, (_, a) in enumerate(answers):
        part = lambda t, lead: t.narrow(lead + axis, cuts[r], cuts[r + 1] - cuts[r]).numpy()  # noqa: E731
        assert np.array_equal(a["source"], part(g.source[0], 0))
        assert np.array_equal(a["sink"], part(g.sink[0], 0))
        assert a["caps"].shape[0] == 2 * K
        assert np.array_equal(a["caps"], part(g.caps[0], 1))
    whole = torchcut.maxflow(g)
    assert [a["flow"] for _, a in answers] == [whole.flow_value] * world
    assert np.array_equal(np.concatenate([a["mask"] for _, a in answers], axis=axis), whole.mask.numpy())
    assert all(a["verified"] for _, a in answers)


def test_sigma_is_an_exact_sum():
    """The contrast scale that the slabs share: exact on integer-valued images (every squared difference
    is a whole number of units), and the same bits for a volume read in another order."""
    import math
    from fractions import Fraction

    from torchcut.energy import estimate_sigma

    rng = np.random.default_rng(11)
    vol = rng.integers(0, 4000, (2, 1, 17, 23, 29)).astype(np.float32)
    vol[1] = rng.normal(0, 1e3, vol[1].shape) ** 2  # one image of floats spanning 12 orders of magnitude
    got = estimate_sigma(torch.from_numpy(vol))
    v = vol[0, 0].astype(np.int64)
    total = sum(int((np.diff(v, axis=a) ** 2).sum()) for a in range(3))
    count = sum(int(np.diff(v, axis=a).size) for a in range(3))
    assert got[0].item() == np.float32(math.sqrt(float(Fraction(total, count))))
    flipped = estimate_sigma(torch.from_numpy(np.ascontiguousarray(vol[:, :, ::-1, :, ::-1])))
    transposed = estimate_sigma(torch.from_numpy(np.ascontiguousarray(vol.transpose(0, 1, 4, 3, 2))))
    assert torch.equal(got, flipped) and torch.equal(got, transposed)


@pytest.mark.cuda
def test_cuda_one_rank_nccl_matches_pymaxflow():
    """The CUDA path of the local solves, in a group of one process (two GPUs: benchmarks/distributed.py under torchrun).
    In a spawned process (``dist_pool.one_rank_nccl``) with a time limit, so that a stall inside NCCL fails
    the test instead of hanging the suite."""
    import queue

    pytest.importorskip("maxflow")  # the oracle, imported in the child

    import torch.multiprocessing as mp
    from dist_pool import TIMEOUT_S, one_rank_nccl

    ctx = mp.get_context("spawn")
    outbox = ctx.Queue()
    proc = ctx.Process(target=one_rank_nccl, args=(outbox,), daemon=True)
    proc.start()
    try:
        kind, payload = outbox.get(timeout=TIMEOUT_S)
    except queue.Empty:
        proc.kill()
        pytest.fail(f"the one-rank NCCL solve gave no answer within {TIMEOUT_S} s (its process was killed)")
    proc.join(timeout=30)
    if proc.is_alive():
        proc.kill()
    assert kind == "ok", payload
