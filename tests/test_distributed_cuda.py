"""torchcut.distributed on two GPUs and more (NCCL, one process per GPU): the push-relabel over all slabs
with the CUDA grid kernels (CUDA slabs split along axis 0), against PyMaxflow and against one GPU's solve
of the whole grid. Skipped without two GPUs (the N-rank test without three)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from dist_pool import Pool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_distributed import check_solved, make_case, split

import torchcut

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def gpus2():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    p = Pool(2, backend="nccl")
    yield p
    p.close()


@st.composite
def axis0_cases(draw):
    ndim = draw(st.sampled_from((2, 3)))
    shape = tuple(draw(st.integers(3, 40 if ndim == 2 else 12)) for _ in range(ndim))
    conn = draw(st.sampled_from((4, 8) if ndim == 2 else (6, 18, 26)))
    seed = draw(st.integers(0, 2**32 - 1))
    return make_case(
        np.random.default_rng(seed),
        shape,
        conn,
        split(draw, shape[0], 2),
        0,
        symmetric=draw(st.booleans()),
        density=draw(st.sampled_from((0.1, 0.4))),
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=axis0_cases())
def test_kernels_over_two_gpus_random_grids(gpus2, case):
    answers = check_solved(case, gpus2.run(case))
    assert answers[0][1]["stats"]["kernels"] and answers[0][1]["stats"]["global_relabels"] >= 1


def repair_always():
    names = list(torch.ops.torchcut.names("grid_cuda_options"))
    opts = [0] * len(names)
    opts[names.index("repair")] = 1
    return opts


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=axis0_cases())
def test_repaired_relabels_over_two_gpus(gpus2, case):
    """Every global relabel after the first a repair (on large slabs the rule picks them): the ghost planes
    restart at infinity, the border rows are repaired, and the rounds give the exact distances."""
    answers = check_solved(case, gpus2.run(dict(case, slab_options=repair_always())))
    stats = answers[0][1]["stats"]
    assert stats["repairs"] == stats["global_relabels"] - 1


def test_kernels_border_cases(gpus2):
    """One-layer slabs, all flow crossing the border, no path, a border no flow crosses, int64 capacities,
    slabs whose planes are no multiple of the tile, and grids larger than one tile in every direction."""
    rng = np.random.default_rng(21)
    for shape, conn, cuts in (((12, 10), 8, [0, 1, 12]), ((9, 5, 6), 26, [0, 8, 9]), ((7, 6, 5), 6, [0, 1, 7])):
        case = make_case(rng, shape, conn, cuts)
        check_solved(case, gpus2.run(case))
    case = make_case(rng, (40, 37), 4, [0, 20, 40], density=0.5)
    case["source"][20:] = 0
    case["sink"][:20] = 0  # every unit of flow crosses the border
    answers = check_solved(case, gpus2.run(case))
    assert (
        answers[0][1]["flow"] > 0 and answers[0][1]["stats"]["bfs_rounds"] > answers[0][1]["stats"]["global_relabels"]
    )
    case = make_case(rng, (10, 9, 8), 6, [0, 5, 10], density=0.5)
    case["sink"][:] = 0  # no path: the flow is 0 and every node is on the source side
    answers = check_solved(case, gpus2.run(case))
    assert answers[0][1]["flow"] == 0 and all(a["mask"].all() for _, a in answers)
    case = make_case(rng, (8, 6, 5), 26, [0, 4, 8])
    for k, o in enumerate(case["offsets"]):
        if o[0] == 1:  # no capacity between layers 3 and 4
            case["edges"][k][3] = 0
            case["reverse"][k][3] = 0
    check_solved(case, gpus2.run(case))
    case = make_case(rng, (30, 21), 8, [0, 13, 30], density=0.5)
    case["source"] = case["source"] * 2**29  # beyond int32 sums: int64 capacities
    case["sink"] = case["sink"] * 2**29
    check_solved(case, gpus2.run(case))
    case = make_case(rng, (37, 19, 21), 6, [0, 17, 37], density=0.2)  # 17 and 20 planes: not multiples of 8
    check_solved(case, gpus2.run(case))


@pytest.mark.parametrize(
    "shape, channels, options",
    [
        ((33, 20, 18), 0, {}),
        ((21, 17, 19), 0, {"connectivity": 26, "lam": 3.0}),
        ((70, 45), 3, {"channel_axis": 0, "connectivity": 8}),
    ],
)
def test_segment_over_two_gpus_is_one_gpus(gpus2, shape, channels, options):
    """The same network, capacity for capacity, the same flow and the same mask as one GPU's segment()."""
    rng = np.random.default_rng(sum(shape))
    seeds = np.zeros(shape, np.uint8)
    seeds.flat[rng.choice(seeds.size, 12, replace=False)] = np.repeat([1, 2], 6)
    image = (rng.random(((channels,) if channels else ()) + shape) * 7.3).astype(np.float32)
    image[..., : shape[-1] // 2] += 2.1
    cuts = [0, shape[0] // 2 + 1, shape[0]]
    case = dict(kind="segment", image=image, seeds=seeds, axis=0, cuts=cuts, options=options, graph=True)
    answers = gpus2.run(case)
    assert [k for k, _ in answers] == ["ok", "ok"], answers
    g = torchcut.segmentation_graph(
        torch.from_numpy(image).cuda(), torch.from_numpy(seeds).cuda(), ndim=len(shape), **options
    )
    whole = torchcut.maxflow(g)
    for r, (_, a) in enumerate(answers):
        part = lambda t, lead: t.narrow(lead, cuts[r], cuts[r + 1] - cuts[r]).cpu().numpy()  # noqa: E731
        assert np.array_equal(a["caps"], part(g.caps[0], 1))
        assert np.array_equal(a["source"], part(g.source[0], 0))
        assert np.array_equal(a["sink"], part(g.sink[0], 0))
        assert a["stats"]["kernels"]  # the CUDA grid kernels ran
    assert [a["flow"] for _, a in answers] == [whole.flow_value] * 2
    mask = np.concatenate([a["mask"] for _, a in answers], axis=0)
    assert np.array_equal(mask, whole.mask.cpu().numpy())
    assert all(a["verified"] for _, a in answers)
    answers = gpus2.run(dict(case, mask_only=True))
    assert np.array_equal(np.concatenate([a["mask"] for _, a in answers], axis=0), mask)


@pytest.fixture(scope="module")
def gpus_all():
    n = torch.cuda.device_count()
    if n < 3:
        pytest.skip("needs three or more CUDA GPUs")
    p = Pool(n, backend="nccl")
    yield p
    p.close()


def test_kernels_over_every_gpu(gpus_all):
    """N ranks, each slab between two others: random grids, one-layer slabs, repaired relabels."""
    world = gpus_all.world
    rng = np.random.default_rng(30)
    for shape, conn in (((6 * world, 13), 4), ((3 * world, 7, 6), 26), ((5 * world, 17, 9), 6), ((4 * world, 21), 8)):
        inner = sorted(rng.choice(np.arange(1, shape[0]), world - 1, replace=False).tolist())
        case = make_case(rng, shape, conn, [0] + inner + [shape[0]], density=0.4)
        check_solved(case, gpus_all.run(case))
        check_solved(case, gpus_all.run(dict(case, slab_options=repair_always())))
    case = make_case(rng, (world + 1, 9, 8), 6, list(range(world)) + [world + 1])  # one-layer slabs
    check_solved(case, gpus_all.run(case))
