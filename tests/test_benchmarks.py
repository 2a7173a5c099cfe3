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
    return {"torchcut": "", "results": [{"id": s["id"], "median": median, "times": [median], "value": value}
                                        for s in specs]}


def test_summarize_values_and_threshold():
    specs = [dict(id="a", exact=True), dict(id="b", exact=False)]
    same = [[{"median": 1.0, "value": [3]}, {"median": 1.0, "value": {"energy": 2.0}}]]
    rows, status = R.summarize(specs, same, same, 0.05)
    assert status == 0 and [r["ratio"] for r in rows] == [1.0, 1.0]
    slower = [[{"median": 1.2, "value": [3]}, {"median": 1.0, "value": {"energy": 2.0}}]]
    rows, status = R.summarize(specs, slower, same, 0.05)
    assert status == 2 and rows[0]["verdict"] == "SLOWER by 20%"
    other = [[{"median": 1.0, "value": [4]}, {"median": 1.0, "value": {"energy": 2.5}}]]
    rows, status = R.summarize(specs, other, same, 0.05)
    assert status == 1 and rows[0]["verdict"].startswith("VALUES DIFFER: current 4, REF 3")
    assert rows[1]["verdict"].startswith("output changed")  # pipelines: reported, not failed
    gone = [[{"unavailable": "torchcut.refine is missing"}, {"median": 1.0, "value": {"energy": 2.0}}]]
    rows, status = R.summarize(specs, same, gone, 0.05)
    assert status == 0 and rows[0]["verdict"] == "skipped: REF torchcut.refine is missing"
    broken = [[{"error": "RuntimeError: boom"}, {"median": 1.0, "value": {"energy": 2.0}}]]
    rows, status = R.summarize(specs, broken, same, 0.05)
    assert status == 1 and rows[0]["verdict"] == "FAILED: current tree: RuntimeError: boom"


def test_compare_detects_an_injected_flow_mismatch(tmp_path):
    calls = []

    def fake(tree, cache, folder, device, repeats, warmup, out, budget=None):
        specs = json.loads((folder / "cases.json").read_text())
        calls.append(out.name)
        return _fake_results(specs, [7] if "REF" in out.name else [8], 0.01)

    args = R.parse(["--compare", str(ROOT), "--suite", "cpu", "--quick", "--only", TINY, "--rounds", "2",
                    "--report", str(tmp_path / "cmp.md")])
    assert R.compare(args, worker=fake) == 1
    assert calls == ["round0-current.json", "round0-REF.json", "round1-REF.json", "round1-current.json"]
    assert "VALUES DIFFER: current 8, REF 7" in (tmp_path / "cmp.md").read_text()


def test_compare_tree_with_itself(tmp_path):
    """Two workers on the same tree (no second build): equal values, ratios within noise."""
    args = R.parse(["--compare", str(ROOT), "--suite", "cpu", "--quick", "--only", TINY,
                    "--rounds", "2", "--repeats", "3", "--threshold", "100", "--report", str(tmp_path / "c.md")])
    assert R.compare(args) == 0
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    assert rows and all(r["verdict"] == "ok" for r in rows)
    assert all(0.2 < r["ratio"] < 5 for r in rows)
    assert rows[0]["value_cur"] == rows[0]["value_ref"] and rows[0]["value_cur"][0] > 0


def test_quick_suite_writes_tables(tmp_path):
    pytest.importorskip("maxflow")
    assert R.main(["--suite", "cpu", "--quick", "--only", f"{TINY},batch/", "--repeats", "1", "--peer-repeats", "1",
                   "--out", str(tmp_path)]) == 0
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
    row = {"case": "c", "nodes": 10, "torchcut": 0.13, "torchcut-bk": 0.10, "torchcut-pseudoflow": 0.20,
           "torchcut_stats": {"algorithm": "boykov-kolmogorov"}, "flows": {}}
    assert cpu._auto_best(row) == pytest.approx(1.3)
    assert cpu._pick_best(row) == pytest.approx(1.0)
    wrong = dict(row, torchcut_stats={"algorithm": "pseudoflow"})
    assert cpu._pick_best(wrong) == pytest.approx(2.0)
    assert cpu._pick_best(dict(row, torchcut_stats={"algorithm": "mixed"})) is None
    meta = {"date": "d", "cores": 2, "machine": "m", "torch": "t", "load_before": (0, 0, 0), "load_after": (0, 0, 0)}
    for solvers in (["torchcut", "torchcut-bk", "torchcut-pseudoflow"],
                    ["torchcut", "torchcut-bk", "torchcut-pseudoflow", "pymaxflow"]):
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
    table = A.RULES["volumes 3.2 / 1.55"]
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
