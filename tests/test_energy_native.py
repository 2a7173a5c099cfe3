"""The native segmentation energy (torch.ops.torchcut.seg_*) equals the tensor version bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torchcut
from torchcut import energy

pytestmark = pytest.mark.skipif(
    not energy._native_ops(torch.device("cpu"), 1), reason="the compiled library has no seg_ ops"
)

DTYPES = {"uint8": np.uint8, "int16": np.int16, "int64": np.int64, "float32": np.float32, "float64": np.float64}


def assert_same(native, reference):
    """Capacities, dtypes, sigma and the recorded choices of two graphs are identical."""
    for name in ("caps", "source", "sink"):
        a, b = getattr(native, name), getattr(reference, name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert torch.equal(a, b), (name, int((a.long() - b.long()).abs().max()))
    assert torch.equal(native.energy.sigma, reference.energy.sigma)
    for key in ("lam", "scale", "hard", "bins", "channels", "connectivity", "ndim", "channel_axis"):
        assert getattr(native.energy, key) == getattr(reference.energy, key), key
    assert native.offsets == reference.offsets and native.batched == reference.batched


def _with_and_without(monkeypatch, flag, image, seeds, **kw):
    """The native build with the module switch ``energy.<flag>`` on, then off (left on)."""
    on = energy.segmentation_graph(image, seeds, **kw)
    monkeypatch.setattr(energy, flag, False)
    off = energy.segmentation_graph(image, seeds, **kw)
    monkeypatch.setattr(energy, flag, True)
    return on, off


def both(image, seeds, **kw):
    native = energy.segmentation_graph(image, seeds, **kw)
    reference = energy._reference_graph(image, seeds, **kw)
    assert native.energy.syncs < reference.energy.syncs  # the native ops ran, with fewer reads
    return native, reference


def make_case(rng, ndim, batch, channels, dtype, last, cover):
    """A random image (values of ``dtype``, channels first or last) and seeds of both kinds per image."""
    shape = tuple(int(v) for v in rng.integers(1, 7 if ndim == 3 else 24, ndim))
    lead = (batch,) if batch else ()
    cshape = (channels,) if channels > 1 else ()
    full = lead + (shape + cshape if last else cshape + shape)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -3000), min(info.max, 3000)
        image = rng.integers(lo, hi, full, endpoint=True).astype(dtype)
        if rng.random() < 0.3:  # few distinct values: ties, empty bins, zero differences
            image = (image // 97 * 97).astype(dtype)
    else:
        image = (rng.normal(0, 10 ** rng.uniform(-3, 4), full) + rng.normal(0, 100)).astype(dtype)
    seeds = (rng.random(lead + shape) < cover) * rng.integers(1, 3, lead + shape)
    seeds = seeds.astype(rng.choice([np.uint8, np.int64, np.int32]))
    for b in range(batch or 1):  # at least one seed of each kind per image
        item = seeds[b] if batch else seeds
        flat = item.reshape(-1)
        if flat.size < 2:
            return None
        i, j = rng.choice(flat.size, 2, replace=False)
        flat[i], flat[j] = 1, 2
    return image, seeds, shape


CASES = {
    "seed": st.integers(0, 2**32 - 1),
    "ndim": st.sampled_from((2, 3)),
    "batch": st.sampled_from((0, 0, 2)),
    "channels": st.sampled_from((1, 2, 3, 4)),
    "dtype": st.sampled_from(sorted(DTYPES)),
    "last": st.booleans(),
    "cover": st.sampled_from((0.0, 0.05, 0.9)),
    "given_sigma": st.booleans(),
    "lam": st.sampled_from((0.0, 0.5, 8.0, 40.0)),
    "spaced": st.booleans(),
}


def check_case(device, seed, ndim, batch, channels, dtype, last, cover, given_sigma, lam, spaced):
    rng = np.random.default_rng(seed)
    case = make_case(rng, ndim, batch, channels, DTYPES[dtype], last, cover)
    if case is None:
        return
    image, seeds, _ = case
    conn = int(rng.choice((4, 8) if ndim == 2 else (6, 18, 26)))
    kw = {"connectivity": conn, "lam": lam}
    if channels > 1:
        kw["channel_axis"] = -1 if last else (1 if batch else 0)
    if given_sigma:
        kw["sigma"] = float(10 ** rng.uniform(-2, 3))
    if spaced:
        kw["spacing"] = tuple(float(v) for v in rng.uniform(0.3, 3.0, ndim))
    if rng.random() < 0.3:
        kw["bins"] = int(rng.integers(1, 9))
    native, reference = both(torch.from_numpy(image).to(device), torch.from_numpy(seeds).to(device), **kw)
    assert native.caps.device.type == device
    assert_same(native, reference)


@settings(max_examples=60, deadline=None)
@given(**CASES)
def test_native_equals_reference(**case):
    check_case("cpu", **case)


@pytest.mark.parametrize("gray, conn", [(True, 4), (False, 8)])
def test_astronaut(gray, conn):
    data = pytest.importorskip("skimage.data")
    image = torch.from_numpy(data.astronaut()[::2, ::2].copy())  # 256 x 256 x 3 uint8
    if gray:
        image = image.float().mean(-1)
    seeds = torch.zeros(256, 256, dtype=torch.uint8)
    seeds[60:200, 90:170] = 1
    seeds[:, :6], seeds[:, -6:], seeds[:6], seeds[-6:] = 2, 2, 2, 2
    seeds[100:140, 110:150] = 0  # unseeded inside the box
    native, reference = both(image, seeds, connectivity=conn)
    assert_same(native, reference)
    # the reference reads: finite check (float images), label range (2), seed counts, colour range (2), 2 axis sums
    assert native.energy.syncs == 1 and reference.energy.syncs == gray + 2 + 1 + 2 + 2
    native, reference = both(image, seeds, connectivity=conn, sigma=12.5)
    assert_same(native, reference)
    assert native.energy.syncs == 1


def test_one_thread_and_two_agree():
    """torch's exp takes other thread ranges with another thread count: the native build follows it."""
    rng = np.random.default_rng(3)
    image = torch.from_numpy(rng.normal(100, 40, (3, 181, 203)).astype(np.float32))
    seeds = torch.from_numpy(rng.integers(0, 3, (181, 203)).astype(np.uint8))
    threads = torch.get_num_threads()
    try:
        for n in (1, max(2, threads)):
            torch.set_num_threads(n)
            assert_same(*both(image, seeds, connectivity=8, channel_axis=0))
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("magnitude", [1e30, 1e-21, 1.0])
def test_extreme_value_ranges(magnitude):
    """Colour ranges whose unit of the exact sigma sums is not a normal float32 (sums in double)."""
    rng = np.random.default_rng(6)
    ramp = np.linspace(-1, 1, 40, dtype=np.float64)[None, :] * np.ones((30, 1))
    image = torch.from_numpy((magnitude * (ramp + rng.normal(0, 1e-3, (2, 30, 40)))).astype(np.float32))
    seeds = torch.zeros(2, 30, 40, dtype=torch.uint8)
    seeds[:, 5, 3], seeds[:, 20, 35] = 1, 2
    assert_same(*both(image, seeds, ndim=2, connectivity=8))


def test_sigma_sums_beyond_int64_take_the_tensor_version(monkeypatch):
    monkeypatch.setattr(energy, "_SIGMA_TERMS", 10)
    rng = np.random.default_rng(8)
    image = torch.from_numpy(rng.normal(0, 50, (3, 16, 17)).astype(np.float32))
    seeds = torch.from_numpy(rng.integers(0, 3, (16, 17)).astype(np.uint8))
    native = energy.segmentation_graph(image, seeds, channel_axis=0)
    assert_same(native, energy._reference_graph(image, seeds, channel_axis=0))
    assert native.energy.syncs == 1 + 2 + 2  # the checks, then the tensor version's sigma


def test_five_channels_take_the_tensor_version():
    rng = np.random.default_rng(5)
    image = torch.from_numpy(rng.random((9, 10, 5)).astype(np.float32))
    seeds = torch.zeros(9, 10, dtype=torch.uint8)
    seeds[0, 0], seeds[8, 9] = 1, 2
    g = energy.segmentation_graph(image, seeds, channel_axis=-1)
    assert_same(g, energy._reference_graph(image, seeds, channel_axis=-1))
    assert g.energy.syncs == energy._reference_graph(image, seeds, channel_axis=-1).energy.syncs


IMG = np.random.default_rng(9).uniform(0, 255, (8, 9)).astype(np.float32)
SEEDS = np.zeros((8, 9), np.int64)
SEEDS[0, 0], SEEDS[7, 8] = 1, 2


@pytest.mark.parametrize(
    "image, seeds, kw, match",
    [
        (np.where(IMG > 200, np.nan, IMG), SEEDS, {}, r"image: expected finite pixel values, got \d+ NaN or infinite"),
        (
            np.where(IMG > 100, np.inf, IMG).astype(np.float16),
            SEEDS,
            {},
            r"image: expected finite pixel values, got \d+ NaN or infinite",
        ),
        (
            np.where(IMG > 100, -np.inf, IMG).astype(np.float64),
            SEEDS,
            {},
            r"image: expected finite pixel values, got \d+ NaN or infinite",
        ),
        (
            IMG,
            SEEDS - 1,
            {},
            r"seeds: expected labels 0 \(unknown\), 1 \(object\) and 2 \(background\), got values in \[-1, 1\]",
        ),
        (IMG, SEEDS * 3, {}, r"got values in \[0, 6\]"),
        (IMG, np.where(SEEDS == 1, 0, SEEDS), {}, r"seeds: expected at least one object \(label 1\) seed, got none"),
        (
            np.stack([IMG, IMG]),
            np.stack([SEEDS, np.where(SEEDS == 2, 0, SEEDS)]),
            {"ndim": 2},
            r"seeds: expected at least one background \(label 2\) seed in batch item 1, got none",
        ),
        (np.where(IMG > 200, np.nan, IMG), SEEDS * 3, {}, r"image: expected finite pixel values"),  # image first
        (IMG, np.zeros_like(SEEDS), {"scale": 1e9}, r"scale: lam \* scale"),  # the scale before the seeds
    ],
)
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_errors_are_the_reference_errors(image, seeds, kw, match, device):
    for build in (energy.segmentation_graph, energy._reference_graph):
        with pytest.raises(ValueError, match=match):
            build(torch.from_numpy(image).to(device), torch.from_numpy(seeds).to(device), **kw)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_host_sigma_coefficient_is_torchs(device):
    """The native path works out ``-0.5 / sigma**2`` on the host; torch's float32 ops on ``device`` give
    the same bits, over the whole float32 range of sigma."""
    rng = np.random.default_rng(3)
    sig = np.concatenate(
        [(rng.random(200_000) * 10.0**e).astype(np.float32) + np.float32(1e-38) for e in (-20, -3, 0, 3, 15, 19)]
    )
    want = (-0.5 / torch.from_numpy(sig).to(device).square()).cpu().numpy()
    got = energy._sigma_coef(sig)
    assert np.array_equal(got[0], sig)
    assert np.array_equal(got[1].view(np.int32), want.view(np.int32))


@pytest.mark.cuda
@pytest.mark.parametrize("seed_dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_cuda_check_equals_cpu_check(seed_dtype, channels):
    """seg_check's packed answer (counts, label range, colour range as float bits) and its uint8 labels
    are the CPU op's, bit for bit; negative and tiny values, NaN and infinities included."""
    rng = np.random.default_rng(channels)
    x = torch.from_numpy(rng.normal(0, 50, (3, channels, 5000)).astype(np.float32))
    x[0, 0, :7] = torch.tensor([0.0, -0.0, -1e-30, 3e38, -3e38, 1e-45, -2.5])
    x[1, -1, 10:13] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    seeds = torch.from_numpy(rng.integers(-1 if seed_dtype != torch.uint8 else 0, 3, (3, 5000))).to(seed_dtype)
    seeds[2] = 0  # no seeds of either kind
    torchcut._ops.ensure("cuda")  # the ops are called directly: the CUDA library loads on first need
    for finite in (True, False):
        want = torch.ops.torchcut.seg_check(x, seeds, finite)
        got = torch.ops.torchcut.seg_check(x.cuda(), seeds.cuda(), finite)
        assert got[0].device.type == "cuda"
        assert torch.equal(got[0].cpu(), want[0])  # NaN counted when finite, left out of the ranges
        assert torch.equal(got[1].cpu(), want[1])
    torch.library.opcheck(torch.ops.torchcut.seg_check.default, (x.cuda(), seeds.cuda(), True))


def test_inputs_are_left_alone():
    image = torch.from_numpy(np.ascontiguousarray(np.random.default_rng(2).uniform(0, 9, (7, 8, 3)).astype(np.float32)))
    seeds = torch.zeros(7, 8, dtype=torch.uint8)
    seeds[0, 0], seeds[6, 7] = 1, 2
    before = image.clone(), seeds.clone()
    g = energy.segmentation_graph(image, seeds)
    assert torch.equal(image, before[0]) and torch.equal(seeds, before[1])
    assert g.caps.data_ptr() != image.data_ptr()


def test_segment_reports_its_syncs():
    image = torch.zeros(6, 6)
    image[1:4, 1:4] = 1.0
    seeds = torch.zeros(6, 6, dtype=torch.int64)
    seeds[2, 2], seeds[5, 5] = 1, 2
    mask, result = torchcut.segment(image, seeds, return_result=True)
    assert result.stats["syncs"] == 1 and result.verify()  # sigma is worked out on the device
    assert torch.equal(mask, torchcut.segment(image, seeds))
    _, result = torchcut.segment(image, seeds, sigma=0.5, return_result=True)
    assert result.stats["syncs"] == 1


def test_ops_pass_opcheck():
    """Schemas, fakes (torch.compile traces with them) and the CPU kernels agree."""
    rng = np.random.default_rng(4)
    x = torch.from_numpy(rng.random((2, 3, 30)).astype(np.float32))
    seeds = torch.from_numpy(rng.integers(0, 3, (2, 30)).astype(np.int64))
    ops = torch.ops.torchcut
    torch.library.opcheck(ops.seg_check.default, (x, seeds, True))
    s8 = seeds.to(torch.uint8)
    lo, span = x.amin(2), x.amax(2) - x.amin(2)
    torch.library.opcheck(ops.seg_hist.default, (x, s8, lo, span, 4, [2.0**20, 2.0**20], False, [5, 6], True))
    table = torch.from_numpy(rng.normal(0, 1, (2, 64)).astype(np.float32))
    coef = torch.tensor([-0.5, -0.25])
    args = (x, s8, table, lo, span, coef, 4, 100.0, 9999, [5, 6], [0, 1, 1, -1, 1, 0, 1, 1], [8.0, 5.6, 8.0, 5.6])
    torch.library.opcheck(ops.seg_energy.default, args)
    torch.library.opcheck(ops.seg_sigma.default, (torch.tensor([[12345, 0], [0, 1]]), [3, -4], 77))
    lo_l, span_l = lo.reshape(-1).tolist(), span.reshape(-1).tolist()
    offs, w = [0, 1, 1, 0], [8.0, 8.0]
    for sums, given_sc in ((True, []), (False, [2.0, 3.0, -0.125, -0.0555])):
        args = (x, s8, lo_l, span_l, 4, [2.0**20, 2.0**20], False, [5, 6], sums, [1, 2], 49, given_sc, 0.01,
                100.0, 9999, offs, w)  # fmt: skip
        torch.library.opcheck(ops.seg_terms.default, args)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_terms_in_one_call_equal_the_ops_one_by_one(device, monkeypatch):
    """seg_terms (the default build of CPU images; called here on CUDA tensors too) and the op-by-op
    composition give the same graph bit for bit, and both the reference's: sigma estimated from the sums
    or given, any channels, batches, volumes, lam 0."""
    assert energy._fused_op()
    monkeypatch.setattr(energy, "_FUSED_DEVICES", ("cpu", "cuda"))  # the op on CUDA tensors too
    rng = np.random.default_rng(23)
    done = 0
    for k in range(40):
        case = make_case(rng, 2 + k % 2, 2 if k % 3 == 0 else 0, 1 + k % 4, np.float32, k % 5 == 0, 0.05)
        if case is None:
            continue
        image, seeds, _ = case
        kw = {"ndim": 2 + k % 2, "lam": (0.0, 8.0, 40.0)[k % 3]}
        if 1 + k % 4 > 1:
            kw["channel_axis"] = -1 if k % 5 == 0 else (1 if k % 3 == 0 else 0)
        if k % 4 == 1:
            kw["sigma"] = float(rng.uniform(0.01, 50))
        x, sd = torch.from_numpy(image).to(device), torch.from_numpy(seeds).to(device)
        fused, steps = _with_and_without(monkeypatch, "_FUSED", x, sd, **kw)
        assert_same(fused, steps)
        assert_same(fused, energy._reference_graph(x, sd, **kw))
        assert fused.energy.syncs == steps.energy.syncs == 1
        done += 1
    assert done >= 30


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_tables_on_the_seeds_support_equal_the_dense_ones(channels, monkeypatch):
    """seg_terms works out a CPU log-ratio table on the support of the blurred seed histograms where the seeds
    fill few bins (and their counts keep the blur exact), the dense tensor operations otherwise: the same
    graphs bit for bit, whether the seeds sit on the colour cube's faces, fill a few bins or most of them, or
    pile up in one bin past the exact range (2^(24 - 2C) seeds)."""
    g = torch.Generator().manual_seed(7 + channels)
    axis = 0 if channels > 1 else None
    done = 0
    for bins in (None, 2, 3, 7, 16):
        if bins and bins**channels > 2**16:
            continue
        for size, cover in ((9, 0.3), (40, 0.02), (40, 0.6), (120, 0.05)):
            image = torch.rand(channels, size, size, generator=g)
            image[:, :3] = 0.0  # the range's ends: bins on the cube's faces
            image[:, -3:] = 1.0
            pick = torch.rand(size, size, generator=g)
            seeds = (pick < cover).long() + (pick < cover / 2).long()
            seeds[0, 0], seeds[-1, -1] = 1, 2
            x = image if channels > 1 else image[0]
            kw = {"bins": bins, "channel_axis": axis, "sigma": None if size < 100 else 12.0}
            fused, steps = _with_and_without(monkeypatch, "_FUSED", x, seeds, **kw)
            assert_same(fused, steps)
            done += 1
    # one colour, every pixel seeded: counts past the exact range take the dense operations
    limit = 1 << (24 - 2 * channels)
    side = int(math.isqrt(limit)) + 2
    flat = torch.zeros(channels, side, side)
    flat[:, :, : side // 2] = 0.75
    seeds = torch.ones(side, side, dtype=torch.int64)
    seeds[:, -1] = 2
    fused, steps = _with_and_without(monkeypatch, "_FUSED", flat if channels > 1 else flat[0], seeds, channel_axis=axis)
    assert_same(fused, steps)
    assert done >= 12


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    channels=st.integers(1, 4),
    bins=st.integers(1, 9),
    side=st.integers(1, 14),
    cover=st.floats(0.0, 1.0),
    levels=st.integers(1, 6),
)
def test_support_tables_equal_dense_ones_on_random_images(seed, channels, bins, side, cover, levels):
    """The CPU table on the seeds' support and the dense tensor operations agree bit for bit on random small
    images: few or many colour levels (seeds in few bins or spread), any bins per channel (one bin: no blur),
    seeds anywhere from two pixels to all of them."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, levels, (channels, side + 1, side + 1)).astype(np.float32) / levels
    seeds = np.where(rng.random((side + 1, side + 1)) < cover, rng.integers(1, 3, (side + 1, side + 1)), 0)
    seeds[0, 0], seeds[-1, -1] = 1, 2
    x = torch.from_numpy(image if channels > 1 else image[0])
    kw = {"bins": bins, "channel_axis": 0 if channels > 1 else None}
    support = energy.segmentation_graph(x, torch.from_numpy(seeds), **kw)
    energy._FUSED = False
    try:
        dense = energy.segmentation_graph(x, torch.from_numpy(seeds), **kw)
    finally:
        energy._FUSED = True
    assert_same(support, dense)


def test_seg_terms_errors():
    op = torch.ops.torchcut.seg_terms
    x, s8 = torch.zeros(1, 1, 4), torch.tensor([[1, 2, 0, 0]], dtype=torch.uint8)
    common = (4, [1.0], False, [2, 2])
    with pytest.raises(RuntimeError, match=r"lo, span: expected 1 values each .*, got 2 and 1"):
        op(x, s8, [0.0, 0.0], [1.0], *common, True, [0], 2, [], 0.01, 1.0, 9, [0, 1], [1.0])
    with pytest.raises(RuntimeError, match=r"sig_coef: expected 2 values \(sigma and the coefficient"):
        op(x, s8, [0.0], [1.0], *common, False, [], 0, [1.0], 0.01, 1.0, 9, [0, 1], [1.0])


def _host_sigma(s, inf, e, count):
    """sigma and its coefficient as the host works them out from exact fractions (float32 [2, B])."""
    return energy._sigma_coef(energy._sigma_floats([math.inf if f else v for v, f in zip(s, inf)], count, e))


@settings(max_examples=400, deadline=None)
@given(
    s=st.integers(0, 2**63 - 1) | st.integers(0, 2**24),
    inf=st.booleans(),
    e=st.integers(-330, 330),
    count=st.integers(1, 2**35),
)
def test_seg_sigma_is_the_host_sigma(s, inf, e, count):
    """seg_sigma rounds the exact mean once, as Python's fractions do: the same float32 bits."""
    got = torch.ops.torchcut.seg_sigma(torch.tensor([[s], [int(inf)]]), [e], count).numpy()
    assert np.array_equal(got.view(np.int32), _host_sigma([s], [inf], [e], count).view(np.int32))


@pytest.mark.parametrize("count", [2, 6, 10, 1000])
def test_seg_sigma_rounds_ties_to_even(count):
    """Means exactly halfway between two doubles (54 significant bits) and next to them."""
    m = np.arange(2**53, 2**53 + 64, dtype=np.uint64).astype(object)
    sums = [int(v) * count + count // 2 + d for v in m for d in (-1, 0, 1)]
    sums = [v for v in sums if v < 2**63]
    n = len(sums)
    got = torch.ops.torchcut.seg_sigma(torch.tensor([sums, [0] * n]), [0] * n, count).numpy()
    want = _host_sigma(sums, [False] * n, [0] * n, count)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))


def test_seg_sigma_errors():
    op = torch.ops.torchcut.seg_sigma
    with pytest.raises(RuntimeError, match=r"exps: expected 1 exponents, got 2"):
        op(torch.tensor([[5], [0]]), [1, 2], 3)
    with pytest.raises(RuntimeError, match=r"sums: expected a contiguous int64 tensor \[2, B\]"):
        op(torch.tensor([[5.0], [0.0]]), [1], 3)
    with pytest.raises(RuntimeError, match=r"exps: expected exponents in \[-900, 900\], got 901"):
        op(torch.tensor([[5], [0]]), [901], 3)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_sigma_on_the_device_is_the_hosts(device, monkeypatch):
    """The build with seg_sigma (no read back) and with the host's fractions give the same graph."""
    rng = np.random.default_rng(11)
    for k in range(6):
        case = make_case(rng, 2 + k % 2, 2 if k % 3 == 0 else 0, 1 + k % 4, np.float32, False, 0.05)
        image, seeds, _ = case
        kw = {"channel_axis": (1 if k % 3 == 0 else 0)} if 1 + k % 4 > 1 else {}
        kw["ndim"] = 2 + k % 2
        x, sd = torch.from_numpy(image).to(device), torch.from_numpy(seeds).to(device)
        on_device, on_host = _with_and_without(monkeypatch, "_SIGMA_OP", x, sd, **kw)
        assert_same(on_device, on_host)
        assert on_device.energy.syncs == 1 and on_host.energy.syncs == 2


@settings(max_examples=60, deadline=None)
@given(**CASES)
def test_terminals_are_netted_as_built(**case):
    """No node holds both terminal capacities (segment() skips the in-place netting on that ground)."""
    rng = np.random.default_rng(case["seed"])
    made = make_case(rng, case["ndim"], case["batch"], 1, DTYPES[case["dtype"]], False, case["cover"])
    if made is None:
        return
    image, seeds, _ = made
    kw = {"ndim": case["ndim"], "lam": case["lam"]}
    for build in (energy.segmentation_graph, energy._reference_graph):
        g = build(torch.from_numpy(image), torch.from_numpy(seeds), **kw)
        assert int(torch.minimum(g.source, g.sink.to(g.source.dtype)).max()) == 0


# channels-last colour images whose estimated sigma differed on CUDA while the tensor version summed the
# channels' squares with torch's sum over the channel axis (it paired them on channels-last memory)
_CHANNELS_LAST = [
    dict(seed=2730921541, ndim=2, batch=2, channels=4, dtype="int64", cover=0.0, lam=0.5, spaced=False),
    dict(seed=3326772781, ndim=3, batch=0, channels=4, dtype="float32", cover=0.9, lam=0.5, spaced=True),
    dict(seed=253733055, ndim=3, batch=2, channels=4, dtype="float32", cover=0.05, lam=40.0, spaced=True),
    dict(seed=3182953013, ndim=3, batch=0, channels=4, dtype="float64", cover=0.9, lam=8.0, spaced=True),
    dict(seed=1401388426, ndim=2, batch=2, channels=4, dtype="float64", cover=0.9, lam=0.5, spaced=True),
    dict(seed=1785572163, ndim=3, batch=2, channels=3, dtype="float64", cover=0.9, lam=0.5, spaced=True),
]


@pytest.mark.cuda
@settings(max_examples=40, deadline=None)
@given(**CASES)
def test_cuda_native_equals_reference(**case):
    check_case("cuda", **case)


@pytest.mark.cuda
def test_cuda_seg_sigma_equals_cpu():
    rng = np.random.default_rng(12)
    n = 4000
    sums = torch.from_numpy(
        np.stack([rng.integers(0, 2**63 - 1, n, dtype=np.int64), rng.random(n) < 0.02]).astype(np.int64)
    )
    sums[0, : n // 2] >>= torch.from_numpy(rng.integers(0, 62, n // 2))
    exps = [int(v) for v in rng.integers(-330, 331, n)]
    torchcut._ops.ensure("cuda")  # the op is called directly: the CUDA library loads on first need
    for count in (1, 7, 12345, 2**35 - 3):
        want = torch.ops.torchcut.seg_sigma(sums, exps, count)
        got = torch.ops.torchcut.seg_sigma(sums.cuda(), exps, count)
        assert got.device.type == "cuda"
        assert torch.equal(got.cpu().view(torch.int32), want.view(torch.int32))


@pytest.mark.cuda
@settings(max_examples=30, deadline=None)
@given(**CASES)
def test_cuda_segment_equals_the_cut_of_its_graph(**case):
    """segment() solves its own graph without netting it: the mask is maxflow's on the same graph."""
    rng = np.random.default_rng(case["seed"])
    made = make_case(rng, case["ndim"], case["batch"], 1, np.float32, False, case["cover"])
    if made is None:
        return
    image, seeds, _ = made
    kw = {"ndim": case["ndim"], "lam": case["lam"]}
    # the CPU build is the CUDA build bit for bit (test_cuda_native_equals_reference)
    want = torchcut.maxflow(energy.segmentation_graph(torch.from_numpy(image), torch.from_numpy(seeds), **kw))
    mask = torchcut.segment(torch.from_numpy(image).cuda(), torch.from_numpy(seeds).cuda(), **kw)
    assert mask.device.type == "cuda" and torch.equal(mask.cpu(), want.mask.cpu())


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("case", _CHANNELS_LAST)
def test_channels_last_sigma_is_the_native_one(device, case):
    check_case(device, last=True, given_sigma=False, **case)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("channels", [1, 2, 3, 4])
@pytest.mark.parametrize("volume", [False, True])
def test_large_images(device, channels, volume):
    """Many tasks or blocks per image (thread ranges, grid-stride loops), a batch of images or one volume,
    float and uint8."""
    rng = np.random.default_rng(channels)
    shape = (9, 70, 81) if volume else (2, 300, 257)
    image = torch.from_numpy(rng.normal(80, 30, (channels,) + shape).astype(np.float32)).to(device)
    seeds = torch.from_numpy((rng.random(shape) < 0.1) * rng.integers(1, 3, shape)).to(device)
    seeds[..., 0, 0], seeds[..., -1, -1] = 1, 2
    if not volume:
        image = image.transpose(0, 1)  # [B, C, H, W]
    kw = {"connectivity": 26 if volume else 8}
    if channels == 1:
        image = image.squeeze(1 if not volume else 0)
    else:
        kw["channel_axis"] = 0 if volume else 1
    assert_same(*both(image, seeds, **kw))
    assert_same(*both(image.clamp(0, 255).to(torch.uint8), seeds, sigma=7.0, **kw))


@pytest.mark.cuda
@pytest.mark.parametrize("channels", [1, 3])
def test_cuda_tables_replayed_as_graphs_equal_the_reference(channels, monkeypatch):
    # built op by op (where the library has no seg_terms), one shape over and over, with new pictures: the
    # log-ratio table is captured as a CUDA graph and replayed (the same kernels), and every energy stays
    # the reference's bit for bit
    monkeypatch.setattr(energy, "_FUSED", False)
    rng = np.random.default_rng(11)
    before = energy._TABLES.replays
    for _ in range(5):
        image = rng.uniform(0, 255, (40, 36) + ((3,) if channels == 3 else ())).astype(np.float32)
        seeds = np.zeros((40, 36), np.uint8)
        seeds[rng.integers(0, 40, 30), rng.integers(0, 36, 30)] = 1
        seeds[rng.integers(0, 40, 30), rng.integers(0, 36, 30)] = 2
        kw = {"channel_axis": -1} if channels == 3 else {}
        native, reference = both(torch.from_numpy(image).cuda(), torch.from_numpy(seeds).cuda(), **kw)
        assert_same(native, reference)
    assert energy._TABLES.replays >= before + 3


@pytest.mark.cuda
@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_cuda_table_kernel_equals_the_tensor_operations(channels):
    """seg_table's kernel gives the dense tensor operations' log ratios bit for bit while the seed counts keep
    the blur exact: sparse and dense histograms, odd and even bins, counts up to the bound's last value; it
    refuses a bound past that range and more than four channels."""
    torch.ops.torchcut.seg_table  # noqa: B018 - the op exists where the library was built with it
    torchcut._ops.ensure("cuda")
    g = torch.Generator().manual_seed(channels)
    limit = 1 << (24 - 2 * channels)
    for bins in (1, 2, 3, 5, 16, 32):
        if bins**channels > 2**15:
            continue
        nb = bins**channels
        for fill in (0.002, 0.1, 1.0):
            counts = ((torch.rand(2, 2, nb, generator=g) < fill) * torch.randint(1, 50, (2, 2, nb), generator=g)).int()
            counts[:, :, 0] += 1  # a corner bin in every histogram
            want = energy._table(counts.cuda(), bins, channels)
            got = torch.ops.torchcut.seg_table(counts.cuda(), bins, channels, energy.UNIFORM_WEIGHT, limit - 1)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.equal(got, want), (bins, fill)
    # counts summing to the bound's last value, in one bin and spread over a few
    nb = 5**channels
    counts = torch.zeros(1, 2, nb, dtype=torch.int32)
    counts[0, 0, nb // 2] = limit - 1
    counts[0, 1, :7] = (limit - 1) // 7
    want = energy._table(counts.cuda(), 5, channels)
    assert torch.equal(torch.ops.torchcut.seg_table(counts.cuda(), 5, channels, energy.UNIFORM_WEIGHT, limit - 1), want)
    torch.library.opcheck(torch.ops.torchcut.seg_table.default, (counts.cuda(), 5, channels, 0.01, limit - 1))
    with pytest.raises(RuntimeError, match="bound: expected a bound on the seed counts"):
        torch.ops.torchcut.seg_table(counts.cuda(), 5, channels, energy.UNIFORM_WEIGHT, limit)
    with pytest.raises(RuntimeError, match="channels: expected at most 4"):
        torch.ops.torchcut.seg_table(torch.zeros(1, 2, 32, dtype=torch.int32).cuda(), 2, 5, 0.01, 10)
    with pytest.raises(RuntimeError, match="counts: expected bins"):
        torch.ops.torchcut.seg_table(torch.zeros(1, 2, 30, dtype=torch.int32).cuda(), 2, 5, 0.01, 10)
    with pytest.raises(RuntimeError, match="counts: expected at most 65535 images, got 65536"):
        torch.ops.torchcut.seg_table(torch.zeros(65536, 2, 8, dtype=torch.int32).cuda(), 2, 3, 0.01, 10)


@pytest.mark.cuda
def test_cuda_energy_with_the_table_kernel_equals_the_ops_one_by_one(monkeypatch):
    """CUDA images whose seeds keep the blur exact build in one seg_terms call with seg_table; many seeds
    (past 2^18 of a class in colour) take the op-by-op path: the graphs are the reference's either way."""
    rng = np.random.default_rng(5)
    for size, channels, cover in ((24, 3, 0.2), (64, 1, 0.05), (100, 3, 0.5), (800, 3, 0.95), (300, 2, 0.3)):
        image = rng.uniform(0, 255, (size, size, channels)).astype(np.float32)
        seeds = np.where(rng.random((size, size)) < cover, rng.integers(1, 3, (size, size)), 0).astype(np.int64)
        seeds[0, 0], seeds[-1, -1] = 1, 2
        x = torch.from_numpy(image if channels > 1 else image[..., 0]).cuda()
        sd = torch.from_numpy(seeds).cuda()
        kw = {"channel_axis": -1} if channels > 1 else {}
        kernel, steps = _with_and_without(monkeypatch, "_CUDA_TABLE", x, sd, **kw)
        assert_same(kernel, steps)
        assert_same(kernel, energy._reference_graph(x, sd, **kw))
        assert kernel.energy.syncs == 1


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 70000),
    channels=st.integers(1, 4),
    seed_dtype=st.sampled_from((np.uint8, np.int8, np.int64)),
)
def test_seg_check_equals_numpy(seed, n, channels, seed_dtype):
    """The check's reductions (split over lanes, chunks and threads): the non-finite count, the label
    range, the seed counts and the colour range without NaN, as numpy computes them."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 10.0 ** rng.uniform(-3, 3), (2, channels, n)).astype(np.float32)
    special = rng.random(x.shape) < 0.01
    x[special] = rng.choice(np.array([np.nan, np.inf, -np.inf], np.float32), int(special.sum()))
    seeds = rng.integers(-1 if seed_dtype != np.uint8 else 0, 4, (2, n)).astype(seed_dtype)
    info = torch.ops.torchcut.seg_check(torch.from_numpy(x), torch.from_numpy(seeds), True)[0].tolist()
    assert info[0] == int((~np.isfinite(x)).sum())
    assert info[1:3] == [int(seeds.min()), int(seeds.max())]
    assert info[3:7] == [int((seeds[b] == k).sum()) for b in range(2) for k in (1, 2)]
    bits = np.array(info[7:], dtype=np.int64).astype(np.int32).view(np.float32).reshape(2, 2, channels)
    lo = np.where(np.isnan(x), np.float32(np.inf), x).min(axis=2)  # a channel of NaN alone: the empty range
    hi = np.where(np.isnan(x), np.float32(-np.inf), x).max(axis=2)
    assert np.array_equal(bits[0], lo) and np.array_equal(bits[1], hi)
