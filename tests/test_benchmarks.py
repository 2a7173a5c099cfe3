"""The benchmark runner and its regression guard (``python -m benchmarks``), on small CPU cases."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import cases as C  # noqa: E402
from benchmarks import run as R  # noqa: E402
from benchmarks import worker as W  # noqa: E402

TINY = "2d/photo-astronaut-128-4c"


def test_vessel_tree_is_deterministic_and_seeded():
    a, sa = C.vessel_tree(160, seed=3)
    b, sb = C.vessel_tree(160, seed=3)
    c, _ = C.vessel_tree(160, seed=4)
    assert np.array_equal(a, b) and np.array_equal(sa, sb)
    assert not np.array_equal(a, c)
    assert a.dtype == np.float32 and 0 <= a.min() and a.max() <= 1
    # object seeds only on the thick trunks (a small share), background seeds far more
    assert 0 < (sa == 1).mean() < 0.01 < (sa == 2).mean()


def test_suites_list_the_families():
    cpu = {s["family"] for s in C.suite_cases("cpu", quick=True)}
    assert {"2d", "batch", "3d", "hard", "pipeline"} <= cpu
    gpu = C.suite_cases("gpu")
    ids = {s["id"] for s in gpu}
    assert "3d/blobs-512-cube-6c" in ids and "3d/blobs-256-cube-26c" in ids
    assert max(s["nodes"] for s in gpu if s["family"] == "2d") >= 8_000_000
    assert any(s["id"].startswith("2d/vessels-2832") for s in gpu)
    with pytest.raises(ValueError, match="suite: expected one of"):
        C.suite_cases("tpu")


def test_worker_flow_equals_pymaxflow():
    pytest.importorskip("maxflow")
    from benchmarks import peers

    spec = next(s for s in C.suite_cases("cpu", quick=True) if s["id"] == TINY)
    x = C.build(spec)
    res = W.run_case(spec, x, "cpu", repeats=2)
    assert res["median"] > 0 and len(res["times"]) == 2
    peer = peers.run_peer(spec, x, "pymaxflow", repeats=1)
    assert res["value"] == peer["value"] and res["value"][0] > 0


def test_worker_times_short_cases_for_min_time_and_keeps_repeats_for_long_ones(monkeypatch):
    """``min_time``: a case faster than it is timed again until its calls add up to it (at most 25 times the
    repeats); a slow one gets exactly its repeats; every call's value is checked."""
    clock = {"t": 0.0}
    monkeypatch.setattr(W.time, "perf_counter", lambda: clock["t"])

    def case(seconds):
        def fn():
            clock["t"] += seconds
            return 7, {}

        return fn

    times, value, _ = W.time_fn(case(0.001), repeats=3, warmup=1, min_time=0.05)
    assert value == 7 and len(times) == 50 and sum(times) == pytest.approx(0.05)
    assert len(W.time_fn(case(0.001), repeats=3, warmup=1, min_time=1.0)[0]) == 75  # capped at 25 x 3
    assert len(W.time_fn(case(0.1), repeats=3, warmup=1, min_time=0.05)[0]) == 3
    assert len(W.time_fn(case(0.001), repeats=3, warmup=1)[0]) == 3


def test_worker_reports_missing_api(monkeypatch):
    import torchcut

    spec = dict(id="x", kind="refine", params={})
    monkeypatch.delitem(torchcut._LAZY, "refine")  # as in a tree older than refine()
    assert W.run_case(spec, {}, "cpu")["unavailable"] == "torchcut.refine is missing"


def test_check_flags_a_peer_with_another_flow():
    spec = dict(id="g", family="2d", kind="grid", label="g", exact=True, peers=["pymaxflow"])
    row = dict(spec=spec, torchcut={"median": 0.1, "value": [5]}, peers={"pymaxflow": {"median": 0.2, "value": [6]}})
    assert R.check(row) == "MISMATCH: pymaxflow 6"
    row["peers"]["pymaxflow"]["value"] = [5]
    assert R.check(row) == "ok"


def _fake_results(specs, value, median):
    return {
        "torchcut": "",
        "results": [{"id": s["id"], "median": median, "times": [median], "value": value} for s in specs],
    }


def test_summarize_values_and_threshold():
    specs = [dict(id="a", exact=True), dict(id="b", exact=False)]
    same = [[{"median": 1.0, "value": [3]}, {"median": 1.0, "value": {"energy": 2.0}}]]
    rows, status = R.summarize(specs, same, {"REF": same}, 0.05)
    assert status == 0 and [r["ratio"] for r in rows] == [1.0, 1.0]
    slower = [[{"median": 1.2, "value": [3]}, {"median": 1.0, "value": {"energy": 2.0}}]]
    rows, status = R.summarize(specs, slower, {"REF": same}, 0.05)
    assert status == 2 and rows[0]["verdict"] == "SLOWER by 20% than REF"
    other = [[{"median": 1.0, "value": [4]}, {"median": 1.0, "value": {"energy": 2.5}}]]
    rows, status = R.summarize(specs, other, {"REF": same}, 0.05)
    assert status == 1 and rows[0]["verdict"].startswith("VALUES DIFFER: current 4, REF 3")
    assert rows[1]["verdict"].startswith("ok; output changed")  # pipelines: reported, not failed
    gone = [[{"unavailable": "torchcut.refine is missing"}, {"median": 1.0, "value": {"energy": 2.0}}]]
    rows, status = R.summarize(specs, same, {"REF": gone}, 0.05)
    assert status == 0 and rows[0]["verdict"] == "skipped: no reference runs it (REF: torchcut.refine is missing)"
    broken = [[{"error": "RuntimeError: boom"}, {"median": 1.0, "value": {"energy": 2.0}}]]
    rows, status = R.summarize(specs, broken, {"REF": same}, 0.05)
    assert status == 1 and rows[0]["verdict"] == "FAILED: current tree: RuntimeError: boom"


def _rounds(*medians, value=(3,)):
    """Per-round result lists of one exact case, one round per median."""
    return [[{"median": m, "value": list(value)}] for m in medians]


def test_summarize_takes_the_fastest_reference_as_the_bar():
    """The bar is the fastest reference per case (medians over rounds), not the first or the last."""
    spec = [dict(id="a", exact=True)]
    refs = {"old": _rounds(2.0, 2.2, 1.9), "mid": _rounds(1.0, 1.1, 0.9), "new": _rounds(1.5, 1.4, 1.6)}
    # 1.08 against mid's 1.0: fails, though it beats old (2.0) and new (1.5)
    rows, status = R.summarize(spec, _rounds(1.08, 1.07, 1.2), refs, 0.05)
    assert status == 2 and rows[0]["fastest"] == "mid" and rows[0]["ref"] == 1.0
    assert rows[0]["refs"] == {"old": 2.0, "mid": 1.0, "new": 1.5}
    assert rows[0]["ratio"] == pytest.approx(1.08) and rows[0]["verdict"] == "SLOWER by 8% than mid"
    rows, status = R.summarize(spec, _rounds(1.04, 1.0, 1.3), refs, 0.05)
    assert status == 0 and rows[0]["verdict"] == "ok"
    # a reference that lacks the case drops out of the bar; one that fails it is noted
    lacking = dict(refs, mid=[[{"unavailable": "torchcut.refine is missing"}]] * 3)
    rows, status = R.summarize(spec, _rounds(1.08, 1.07, 1.2), lacking, 0.05)
    assert status == 0 and rows[0]["fastest"] == "new" and rows[0]["refs"]["mid"] is None
    assert rows[0]["verdict"] == "ok; not in mid: torchcut.refine is missing"


def test_summarize_values_against_every_reference():
    """An exact case must give every reference's value, whichever is fastest."""
    spec = [dict(id="a", exact=True)]
    refs = {"old": _rounds(2.0, value=(4,)), "mid": _rounds(1.0), "new": _rounds(1.5)}
    rows, status = R.summarize(spec, _rounds(1.0), refs, 0.05)
    assert status == 1 and rows[0]["verdict"] == "VALUES DIFFER: current 3, old 4"
    rows, status = R.summarize(spec, _rounds(1.0), dict(refs, old=_rounds(2.0)), 0.05)
    assert status == 0


def test_summarize_noise_control():
    """Past the threshold but within what two workers of one tree differed by: not a regression;
    past both: slower."""
    spec = [dict(id="a", exact=True)]
    refs = {"r1": _rounds(1.0), "r2": _rounds(1.2)}
    rows, status = R.summarize(spec, _rounds(1.08), refs, 0.05, control={"a": 1.10})
    assert status == 0 and rows[0]["verdict"].startswith("within noise: 8% over r1")
    rows, status = R.summarize(spec, _rounds(1.12), refs, 0.05, control={"a": 1.10})
    assert status == 2 and rows[0]["verdict"] == "SLOWER by 12% than r1"


def test_read_references(tmp_path):
    f = tmp_path / "refs.txt"
    f.write_text("# accepted states\n\n35fdd34  # grid kernels\n  1a8b8c8 # chaining # ungated\n")
    assert R.read_references(f) == [("35fdd34", "grid kernels"), ("1a8b8c8", "chaining # ungated")]
    for bad in ("35fdd34\n", "35fdd34 1a8b8c8  # two\n", "35fdd34  #  \n", "35fdd34 gpu  # a device name\n"):
        f.write_text(bad)
        with pytest.raises(ValueError, match=r"refs.txt:1: expected 'REF \[DEVICE \.\.\.\]  # what it holds'"):
            R.read_references(f)
    # devices: a line that names some joins only their guards
    f.write_text("35fdd34 cuda  # grid kernels\n1a8b8c8  # both\n973fec6 cpu cuda  # both, named\n")
    assert [r for r, _ in R.read_references(f)] == ["35fdd34", "1a8b8c8", "973fec6"]
    assert [r for r, _ in R.read_references(f, "cuda")] == ["35fdd34", "1a8b8c8", "973fec6"]
    assert R.read_references(f, "cpu") == [("1a8b8c8", "both"), ("973fec6", "both, named")]
    f.write_text("# nothing yet\n")
    with pytest.raises(ValueError, match="expected at least one reference, found none"):
        R.read_references(f)


def test_the_repository_references_are_commits():
    """benchmarks/references.txt parses, and each line names a commit of this repository."""
    import subprocess

    refs = R.read_references(R.REFERENCES)
    assert [r for r, _ in refs][:3] == ["35fdd34", "1a8b8c8", "973fec6"]
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for ref, _ in refs:
        out = subprocess.run(["git", "cat-file", "-t", ref], cwd=ROOT, capture_output=True, text=True)
        assert out.stdout.strip() == "commit", (ref, out.stderr)


def test_reference_list_from_the_command_line_or_the_file(tmp_path):
    f = tmp_path / "refs.txt"
    f.write_text("aaa  # one\nbbb  # two\naaa  # one again\n")
    args = R.parse(["--compare", "--references", str(f)])
    assert R.reference_list(args) == [("aaa", "one"), ("bbb", "two")]
    args = R.parse(["--compare", "x,y", "x", "--references", str(f)])
    assert [r for r, _ in R.reference_list(args)] == ["x", "y"]
    args = R.parse(["--compare", "--references", str(tmp_path / "none.txt")])
    with pytest.raises(SystemExit, match="--references"):
        R.reference_list(args)


def _compare_args(refs, report, *extra):
    """Parsed ``--compare`` arguments on the quick CPU suite's tiny case, 2 rounds, with a report."""
    return R.parse(
        ["--compare", str(refs), "--suite", "cpu", "--quick", "--only", TINY, "--rounds", "2", "--report", str(report)]
        + list(extra)
    )


def test_compare_detects_an_injected_flow_mismatch(tmp_path):
    calls = []

    def fake(tree, cache, folder, device, repeats, warmup, out, budget=None):
        specs = json.loads((folder / "cases.json").read_text())
        calls.append(out.name)
        return _fake_results(specs, [8] if "current" in out.name else [7], 0.01)

    assert R.compare(_compare_args(ROOT, tmp_path / "cmp.md"), worker=fake) == 1
    name = R._safe(str(ROOT))
    assert calls == ["round0-current.json", f"round0-{name}.json", f"round1-{name}.json", "round1-current.json"]
    assert f"VALUES DIFFER: current 8, {ROOT} 7" in (tmp_path / "cmp.md").read_text()
    # with a warm-up worker: one untimed pass of the current tree first, its results left out
    calls.clear()
    assert R.compare(_compare_args(ROOT, tmp_path / "cmp.md", "--warm-worker", "on"), worker=fake) == 1
    assert calls[0] == "warm-current.json" and calls[1:] == [
        "round0-current.json",
        f"round0-{name}.json",
        f"round1-{name}.json",
        "round1-current.json",
    ]


def test_compare_retimes_a_slower_case_against_several_references(tmp_path, monkeypatch):
    """Three references, the middle one fastest: a case past the threshold in the first rounds is
    re-timed (beside a control worker of the current tree) and judged on all its rounds; a slowdown that
    holds fails, one that the re-timing does not confirm passes."""
    refs = [tmp_path / f"r{k}" for k in range(3)]  # folders: no checkout, and no build in the test
    for r in refs:
        r.mkdir()
    monkeypatch.setattr(R, "build_tree", lambda tree, jobs: None)
    speed = {"r0": 0.020, "r1": 0.010, "r2": 0.015}
    for again, want in ((0.0113, 2), (0.0100, 0)):
        calls = []

        def fake(tree, cache, folder, device, repeats, warmup, out, budget=None, calls=calls, again=again):
            specs = json.loads((folder / "cases.json").read_text())
            calls.append(out.name)
            t = speed.get(Path(tree).name, again if out.name.startswith("retime") else 0.0113)
            return _fake_results(specs, [8], t)

        args = _compare_args(",".join(map(str, refs)), tmp_path / "c.md", "--retime-rounds", "4")
        assert R.compare(args, worker=fake) == want
        # 4 trees: 2 rounds of 4 workers, then 4 re-timing rounds of 5 (the control is the fifth)
        assert len([c for c in calls if c.startswith("round")]) == 8
        assert len([c for c in calls if c.startswith("retime")]) == 20
        assert [c for c in calls if "control" in c] == [f"retime{k}-control.json" for k in range(4)]
        row = json.loads((tmp_path / "c.json").read_text())["rows"][0]
        assert row["fastest"] == str(refs[1]) and row["retimed"] == "2+4 rounds, control 1.000"
        assert row["verdict"] == (f"SLOWER by 13% than {refs[1]}" if want else "ok")
        assert row["refs"] == {str(r): speed[r.name] for r in refs}


@pytest.mark.slow
def test_compare_tree_with_itself(tmp_path):
    """Two workers on the same tree (no second build): equal values, ratios within noise."""
    args = _compare_args(ROOT, tmp_path / "c.md", "--repeats", "3", "--threshold", "100")
    assert R.compare(args) == 0
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    assert rows and all(r["verdict"] == "ok" for r in rows)
    assert all(0.2 < r["ratio"] < 5 for r in rows)
    assert rows[0]["value_cur"] == rows[0]["value_ref"] and rows[0]["value_cur"][0] > 0


def test_quick_suite_writes_tables(tmp_path):
    pytest.importorskip("maxflow")
    assert (
        R.main(
            [
                "--suite",
                "cpu",
                "--quick",
                "--only",
                f"{TINY},batch/",
                "--repeats",
                "1",
                "--peer-repeats",
                "1",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    md = (tmp_path / "cpu.md").read_text()
    data = json.loads((tmp_path / "cpu.json").read_text())
    assert [r["spec"]["id"] for r in data["rows"]] == [TINY, "batch/batch-2x64-4c"]
    for r in data["rows"]:
        assert r["check"] == "ok", r["check"]
        assert r["peers"]["pymaxflow"]["value"] == r["torchcut"]["value"]
    assert "| 2d | photo astronaut 128 | 4 | 16,384 |" in md


def test_gpu_suite_needs_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available")
    with pytest.raises(SystemExit, match="CUDA is not available"):
        R.main(["--suite", "gpu", "--quick"])


def test_small_gpu_script_needs_cuda(capsys):
    """benchmarks/small_gpu.py imports without a GPU and says what it needs."""
    import torch

    from benchmarks import small_gpu

    if torch.cuda.is_available():
        pytest.skip("CUDA is available")
    assert small_gpu.main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def _cpu_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("cpu_bench", ROOT / "benchmarks" / "cpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cpu_script_checks_autos_pick_and_renders_without_peers():
    """benchmarks/cpu.py: "pick / best" is the forced time of auto's pick over the faster forced one (so
    two timings of one solve do not count as a wrong choice), and --no-peers leaves no empty columns."""
    cpu = _cpu_script()
    row = {
        "case": "c",
        "nodes": 10,
        "torchcut": 0.13,
        "torchcut-bk": 0.10,
        "torchcut-pseudoflow": 0.20,
        "torchcut_stats": {"algorithm": "boykov-kolmogorov"},
        "flows": {},
    }
    assert cpu._auto_best(row) == pytest.approx(1.3)
    assert cpu._pick_best(row) == pytest.approx(1.0)
    wrong = dict(row, torchcut_stats={"algorithm": "pseudoflow"})
    assert cpu._pick_best(wrong) == pytest.approx(2.0)
    assert cpu._pick_best(dict(row, torchcut_stats={"algorithm": "mixed"})) is None
    meta = {"date": "d", "cores": 2, "machine": "m", "torch": "t", "load_before": (0, 0, 0), "load_after": (0, 0, 0)}
    for solvers in (
        ["torchcut", "torchcut-bk", "torchcut-pseudoflow"],
        ["torchcut", "torchcut-bk", "torchcut-pseudoflow", "pymaxflow"],
    ):
        r = dict(row, pymaxflow=0.3) if "pymaxflow" in solvers else row
        table = [ln for ln in cpu.render(meta, [r], solvers).splitlines() if ln.startswith("|")]
        widths = {ln.count("|") for ln in table}
        assert len(table) == 3 and len(widths) == 1, table
        assert "|  |" not in table[0]
        assert "| 1.30 | 1.00 |" in table[2]


def test_compare_clears_build_locks_left_in_the_reference_cache(tmp_path, capsys):
    """A compare killed while the reference tree compiled on first use leaves torch's build lock in the
    reference's private cache; the next compare removes it before any worker starts (else the loader
    waits forever), and leaves the built files alone."""
    ext = tmp_path / "torchcut_grid_cpu"
    ext.mkdir()
    (ext / "lock").write_text("")
    (ext / "build.ninja").write_text("rules")
    gone = R.clear_stale_locks(tmp_path)
    assert gone == [ext / "lock"] and not (ext / "lock").exists()
    assert (ext / "build.ninja").read_text() == "rules"
    assert "removed a build lock" in capsys.readouterr().out
    assert R.clear_stale_locks(tmp_path / "missing") == []


# ------------------------------------------------------------------------------------------- e2e
def test_e2e_cases_cover_the_calls_sizes_and_connectivities():
    from benchmarks import e2e as E

    specs = E.cases(devices=("cpu", "cuda"))
    ids = {s["id"] for s in specs}
    assert "cpu/refine/astronaut-rgb-2048x2048-8c" in ids and "cuda/segment/coffee-gray-256x256x256-26c" in ids
    assert {(s["ndim"], s["conn"]) for s in specs} == {(2, 4), (2, 8), (3, 6), (3, 26)}
    # refine and grabcut have no volume form
    assert not [s for s in specs if s["ndim"] == 3 and s["call"] in ("refine", "grabcut")]
    assert len(ids) == len(specs)


def test_e2e_inputs_are_deterministic_and_shaped():
    from benchmarks import e2e as E

    spec = dict(call="expansion", picture="coffee", colour=True, ndim=3, n=16, conn=26)
    a, b = E.inputs(spec), E.inputs(spec)
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    assert a["image"].shape == (3, 16, 16, 16) and a["image"].dtype == np.float32
    assert a["probs"].shape == (2, 16, 16, 16) and np.allclose(a["probs"].sum(0), 1)
    assert a["unary3"].shape == (3, 16, 16, 16) and a["weights"].shape == (13, 16, 16, 16)
    import torchcut

    offs = torchcut.grid_offsets(3, 26)
    w = a["weights"][offs.index((1, 0, 0))]  # the pair (p, p + (1, 0, 0)) leaves the volume from the last plane
    assert w[-1].max() == 0 and (w[:-1] > 0).mean() > 0.9 and a["weights"].max() <= E.LAM
    w = a["weights"][offs.index((0, 1, -1))]
    assert w[:, -1].max() == 0 and w[:, :, 0].max() == 0 and (w[:, :-1, 1:] > 0).mean() > 0.9
    assert set(np.unique(a["seeds"])) == {0, 1, 2} and (a["seeds"][0] == 2).all()
    gray = E.inputs(dict(spec, call="segment", colour=False, ndim=2, n=64))
    assert gray["image"].shape == (64, 64) and "weights" not in gray


def test_e2e_replay_reproduces_the_recorded_solve():
    """The solve column replays the solver ops a call ran: the replay gives the recorded masks, and a
    recording altered after the fact is caught."""
    import torch

    import torchcut
    from benchmarks import e2e as E

    img = torch.zeros(12, 12)
    img[3:9, 3:9] = 1.0
    seeds = torch.zeros(12, 12, dtype=torch.int64)
    seeds[6, 6], seeds[0, 0] = 1, 2
    calls = E.capture_solves(lambda: torchcut.segment(img, seeds))
    assert len(calls) == 1 and "solve" in calls[0][0].name()
    times, equal = E.time_replay(calls, repeats=2)
    assert equal and len(times) == 2
    mask = E._first_tensor(calls[0][3])
    assert int(mask.sum()) == 36  # the bright square
    mask.logical_not_() if mask.dtype == torch.bool else mask.neg_()
    times, equal = E.time_replay(calls, repeats=1)
    assert not equal and len(times) == 1


def test_e2e_suite_smallest_size(tmp_path):
    """The e2e suite at 64^2 in this process: every call runs, its solves are recorded and replayed
    equal, and refine's masks equal torchmaxflow's where the energies agree (4-connected)."""
    assert (
        R.main(
            [
                "--suite",
                "e2e",
                "--sizes",
                "64",
                "--sizes3d",
                "",
                "--pictures",
                "astronaut",
                "--devices",
                "cpu",
                "--only",
                "gray-64x64-4c,rgb-64x64-8c",
                "--repeats",
                "1",
                "--warmup",
                "0",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    data = json.loads((tmp_path / "e2e-cpu.json").read_text())
    rows = {r["spec"]["id"]: r for r in data["rows"]}
    assert len(rows) == 7 * 2  # calls x (gray 4-connected, colour 8-connected)
    for cid, r in rows.items():
        if r["spec"]["call"].startswith("compat") and "unavailable" in r:
            assert r["check"] == "not run: torchcut.compat.torchmaxflow is missing"
            continue
        assert r["check"] == "ok" and r["replay"] is True, (cid, r["check"])
        assert r["call"]["median"] > 0 and r["solve"]["median"] > 0
        want = {
            "segment": (1, 1),
            "refine": (1, 1),
            "refine_seeds": (1, 1),
            "grabcut": (1, 5),
            "expansion": (2, 60),
            "compat": (1, 9),
            "compat_interactive": (1, 9),
        }
        lo, hi = want[r["spec"]["call"]]
        assert lo <= r["solves"] <= hi, (cid, r["solves"])
    try:
        import torchmaxflow  # noqa: F401
    except ImportError:
        assert not any("torchmaxflow" in r for r in rows.values())
    else:
        for call in ("refine", "refine_seeds"):
            for colour, conn in (("gray", 4), ("rgb", 8)):
                row = rows[f"cpu/{call}/astronaut-{colour}-64x64-{conn}c"]
                peer = row["torchmaxflow"]
                assert peer["median"] > 0
                if conn == 4:
                    assert peer["iou"] == 1.0
                fg = row["call"]["foreground"]
                assert fg > 0 and (conn == 8 or peer["foreground"] == fg)
        for r in rows.values():
            if r["spec"]["call"].startswith("compat") and "iou" in r.get("torchmaxflow", {}):
                assert r["torchmaxflow"]["iou"] == 1.0, r["spec"]["id"]  # a drop-in: torchmaxflow's masks
    md = (tmp_path / "e2e-cpu.md").read_text()
    assert "## `refine`" in md and "| astronaut rgb | 64x64 | 8 | 4,096 |" in md


def test_auto_heldout_parts_are_disjoint_and_its_rule_table_matches_the_solver():
    """benchmarks/auto_heldout.py: the tuning and held-out parts share no (family, generator seed), the
    held-out part has at least 60 energies in 2D and 3D and every connectivity, energies are deterministic,
    and the current threshold table of its report picks what the solver's auto picks (small energies of
    every family, shrunk)."""
    import torch

    import torchcut
    from benchmarks import auto_heldout as A

    tuning, held = A.specs("tuning"), A.specs("heldout")
    assert not {(s["family"], s["seed"]) for s in tuning} & {(s["family"], s["seed"]) for s in held}
    assert len(held) >= 60 and {s["conn"] for s in held} == {4, 8, 6, 26}
    assert set(A.TUNING) < set(A.HELDOUT)
    table = A.RULES[A.CURRENT_RULE]
    seen = set()
    for spec in held:
        if spec["family"] in seen:
            continue
        seen.add(spec["family"])
        small = dict(spec, shape=(40, 44) if spec["ndim"] == 2 else (12, 12, 12))
        g, again = A.build(small), A.build(small)
        assert torch.equal(g.caps, again.caps) and torch.equal(g.source, again.source)
        row = dict(small, features=A.features(g))
        assert torchcut.maxflow(g, backend="cpu").stats["algorithm"] == A.rule_pick(row, table)
    assert seen == set(A.HELDOUT)


def test_auto_heldout_orient_mode_times_both_orientations_of_one_mask():
    """benchmarks/auto_heldout.py --orient: the share of nodes with excess less those with a deficit, both
    orientations timed on the same mask, and the summary per threshold counts what the rule would mirror."""
    from benchmarks import auto_heldout as A

    spec = dict(A.specs("heldout")[0], shape=(12, 12, 12))
    g = A.build(spec)
    row = A.measure_orient(g, 1)
    net = g.source[0].long() - g.sink[0].long()
    assert row["share"] == pytest.approx(float(((net > 0).sum() - (net < 0).sum()) / net.numel()))
    assert row["given"] > 0 and row["mirrored"] > 0 and row["ratio"] == row["mirrored"] / row["given"]
    rows = [dict(share=0.5, ratio=0.5), dict(share=0.1, ratio=1.5), dict(share=-0.3, ratio=2.0)]
    low, high = A.orient_summary(rows, (0.0, 0.2))
    assert (low["mirrored"], low["faster"], low["slower"], low["worst"]) == (2, 1, 1, 1.5)
    assert (high["mirrored"], high["faster"], high["slower"]) == (1, 1, 0)
    assert high["geomean"] == pytest.approx(0.5 ** (1 / 3))
