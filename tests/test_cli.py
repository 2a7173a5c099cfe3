"""The ``torchcut`` command line, run in-process through ``torchcut.cli.main``."""

from __future__ import annotations

import gzip
import time

import numpy as np
import pytest

import torchcut
from torchcut.cli import build_parser, main

TINY = "c tiny\np max 4 5\nn 1 s\nn 4 t\na 1 2 3\na 1 3 2\na 2 3 1\na 2 4 2\na 3 4 4\n"


def run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_maxflow_prints_solution_line(tmp_path, capsys):
    p = tmp_path / "g.max"
    p.write_text(TINY)
    code, out, err = run(capsys, ["maxflow", str(p), "--device", "cpu", "--verify"])
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert "s 5" in lines
    assert all(line.startswith(("c ", "s ")) for line in lines)
    assert any(line.startswith("c time:") for line in lines)
    assert "c verified: the flow and the cut certify each other" in lines


def test_maxflow_counts_terminal_arcs_and_times_start_up_apart(tmp_path, capsys, monkeypatch):
    import re

    from torchcut import cli

    # s = 1, t = 4: two arcs from the source, one arc pair between nodes, two arcs to the sink
    p = tmp_path / "tiny.max"
    p.write_text("p max 4 5\nn 1 s\nn 4 t\na 1 2 4\na 1 3 2\na 2 3 3\na 2 4 1\na 3 4 5\n")
    load = cli._load_solver

    def slow_load(*args, **kwargs):  # a one-time cost that neither the read nor the solve time may include
        time.sleep(0.5)
        return load(*args, **kwargs)

    monkeypatch.setattr(cli, "_load_solver", slow_load)
    code, out, err = run(capsys, ["maxflow", str(p), "--device", "cpu"])
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"c {p}: 4 nodes, 1 arc pairs, 4 terminal arcs (2 from the source, 2 to the sink)"
    assert lines[1] == "s 6"
    read, solve = map(float, re.match(r"c time: read ([0-9.]+) s, solve ([0-9.]+) s on cpu", lines[2]).groups())
    start = float(re.match(r"c start-up: ([0-9.]+) s, once per process", lines[3]).group(1))
    assert start >= 0.5 > max(read, solve)


def test_cut_file_lists_source_side_dimacs_ids(tmp_path, capsys):
    # s=1, t=5: 1 -> 2 (9) -> 5 (1); 1 -> 3 (1) -> 5 (9); 1 -> 4 (2), a dead end. Flow 2.
    text = "p max 5 5\nn 1 s\nn 5 t\na 1 2 9\na 2 5 1\na 1 3 1\na 3 5 9\na 1 4 2\n"
    p = tmp_path / "g.max.gz"
    p.write_bytes(gzip.compress(text.encode()))
    out_cut = tmp_path / "cut.txt"
    code, out, _ = run(capsys, ["maxflow", str(p), "--device", "cpu", "--cut", str(out_cut)])
    assert code == 0 and "s 2" in out.splitlines()
    # node 2 (saturated sink arc) and node 4 (no way to the sink) stay on the source side
    assert out_cut.read_text().split() == ["1", "2", "4"]


def test_cut_matches_the_result_mask(tmp_path, capsys):
    rng = np.random.default_rng(0)
    n, m = 30, 120
    t, h, c = rng.integers(1, n + 1, m), rng.integers(1, n + 1, m), rng.integers(0, 20, m)
    p = tmp_path / "r.max"
    p.write_text(f"p max {n} {m}\nn 3 s\nn 17 t\n" + "".join(f"a {a} {b} {x}\n" for a, b, x in zip(t, h, c)))
    cut = tmp_path / "cut"
    code, out, _ = run(capsys, ["maxflow", str(p), "--device", "cpu", "--cut", str(cut), "--no-lattice"])
    assert code == 0
    g = torchcut.read_dimacs(p)
    r = torchcut.maxflow(g, lattice=False)
    want = sorted([3] + g.node_ids[r.mask].tolist())
    assert [int(x) for x in cut.read_text().split()] == want
    assert f"s {r.flow_value}" in out.splitlines()


@pytest.mark.parametrize(
    "text, msg",
    [
        ("p max 3 1\nn 1 s\nn 3 t\na 1 2 -3\n", "line 4: negative capacity -3"),
        ("n 1 s\n", "line 1: expected a problem line"),
    ],
)
def test_bad_input_exit_code_one_line(tmp_path, capsys, text, msg):
    p = tmp_path / "bad.max"
    p.write_text(text)
    code, out, err = run(capsys, ["maxflow", str(p), "--device", "cpu"])
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and msg in err and "Traceback" not in err


def test_missing_file(tmp_path, capsys):
    code, _, err = run(capsys, ["maxflow", str(tmp_path / "nope.max"), "--device", "cpu"])
    assert code == 1 and "nope.max" in err and err.count("\n") == 1


def test_usage_errors_exit_two(capsys):
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["maxflow", "x.max", "--device", "tpu"])
    assert e.value.code == 2


def test_cuda_device_without_gpu(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    p = tmp_path / "g.max"
    p.write_text(TINY)
    code, _, err = run(capsys, ["maxflow", str(p), "--device", "cuda"])
    assert code == 1 and "--device cuda: no CUDA device is available" in err


def test_bvz_subcommand_writes_instances(tmp_path, capsys):
    from PIL import Image

    rng = np.random.default_rng(1)
    left = rng.integers(0, 255, (6, 9, 3)).astype(np.uint8)
    right = np.roll(left, -1, axis=1)
    Image.fromarray(left).save(tmp_path / "l.png")
    Image.fromarray(right).save(tmp_path / "r.png")
    out = tmp_path / "inst"
    code, text, err = run(
        capsys,
        [
            "bvz",
            "--left",
            str(tmp_path / "l.png"),
            "--right",
            str(tmp_path / "r.png"),
            "--out",
            str(out),
            "--disparities",
            "3",
            "--backend",
            "torchcut",
            "--name",
            "T",
        ],
    )
    assert code == 0, err
    for a in range(3):
        g = torchcut.read_dimacs(out / f"T{a}.max")
        assert g.lattice_shape() == (6, 9) and g.terminal_ids == (1, 2)
        assert torchcut.maxflow(g).flow_value == torchcut.read_dimacs_solution(out / f"T{a}.sol")
    # the option's former name still works, with a warning, and writes the same instances
    code, _, err = run(
        capsys,
        [
            "bvz",
            "--left",
            str(tmp_path / "l.png"),
            "--right",
            str(tmp_path / "r.png"),
            "--out",
            str(tmp_path / "old"),
            "--disparities",
            "3",
            "--solver",
            "torchcut",
            "--name",
            "T",
        ],
    )
    assert code == 0 and "warning: --solver is deprecated; use --backend (same values)" in err
    assert all((tmp_path / "old" / f"T{a}.max").read_bytes() == (out / f"T{a}.max").read_bytes() for a in range(3))
    code, _, err = run(
        capsys,
        [
            "bvz",
            "--left",
            str(tmp_path / "l.png"),
            "--right",
            str(tmp_path / "r.png"),
            "--out",
            str(out),
            "--disparities",
            "1",
        ],
    )
    assert code == 1 and "--disparities: expected at least 2, got 1" in err


# ------------------------------------------------------------------------------ torchcut segment
def _disk_pngs(tmp_path, size=40):
    from PIL import Image

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:size, :size]
    disk = (yy - size / 2) ** 2 + (xx - size / 2) ** 2 < (size / 4) ** 2
    image = np.clip(disk * 120 + 60 + rng.normal(0, 25, disk.shape), 0, 255).astype(np.uint8)
    seeds = np.zeros_like(image)
    seeds[size // 2 - 2 : size // 2 + 2, size // 2 - 2 : size // 2 + 2] = 1
    seeds[:3, :] = 2
    seeds[-3:, :] = 2
    Image.fromarray(image).save(tmp_path / "img.png")
    Image.fromarray(seeds).save(tmp_path / "seeds.png")
    return image, seeds, disk


def test_segment_writes_the_mask(tmp_path, capsys):
    from PIL import Image

    image, seeds, disk = _disk_pngs(tmp_path)
    out = tmp_path / "mask.png"
    code, stdout, err = run(
        capsys,
        [
            "segment",
            str(tmp_path / "img.png"),
            str(tmp_path / "seeds.png"),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--verify",
        ],
    )
    assert code == 0 and err == ""
    assert "c verified" in stdout
    mask = np.asarray(Image.open(out)) > 0
    expected = torchcut.segment(image, seeds)  # the library's defaults (lam 8, 4-connected)
    assert np.array_equal(mask, expected.numpy())
    assert "4-connected" in stdout
    iou = (mask & disk).sum() / (mask | disk).sum()
    assert iou > 0.9
    code, stdout, _ = run(
        capsys,
        [
            "segment",
            str(tmp_path / "img.png"),
            str(tmp_path / "seeds.png"),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--connectivity",
            "8",
        ],
    )
    assert code == 0 and "8-connected" in stdout
    assert np.array_equal(np.asarray(Image.open(out)) > 0, torchcut.segment(image, seeds, connectivity=8).numpy())


def test_segment_default_connectivity_is_the_librarys():
    from torchcut.energy import _resolve_ndim

    assert build_parser().parse_args(["segment", "i.png", "s.png", "--out", "m.png"]).connectivity == 4
    assert _resolve_ndim((5, 5), None, None) == (2, 4)


def test_segment_times_start_up_apart(tmp_path, capsys, monkeypatch):
    import re

    from torchcut import cli

    _disk_pngs(tmp_path)
    load = cli._load_solver

    def slow_load(*args, **kwargs):  # a one-time cost the segment time must not include
        time.sleep(0.5)
        return load(*args, **kwargs)

    monkeypatch.setattr(cli, "_load_solver", slow_load)
    code, stdout, _ = run(
        capsys,
        [
            "segment",
            str(tmp_path / "img.png"),
            str(tmp_path / "seeds.png"),
            "--out",
            str(tmp_path / "m.png"),
            "--device",
            "cpu",
        ],
    )
    assert code == 0
    seg = float(re.search(r"^c time: read [0-9.]+ s, segment ([0-9.]+) s on cpu", stdout, re.M).group(1))
    start = float(re.search(r"^c start-up: ([0-9.]+) s, once per process", stdout, re.M).group(1))
    assert start >= 0.5 > seg


def test_segment_bad_seeds_exit_1(tmp_path, capsys):
    from PIL import Image

    _disk_pngs(tmp_path)
    Image.new("RGB", (40, 40)).save(tmp_path / "rgb.png")
    code, _, err = run(
        capsys,
        [
            "segment",
            str(tmp_path / "img.png"),
            str(tmp_path / "rgb.png"),
            "--out",
            str(tmp_path / "m.png"),
            "--device",
            "cpu",
        ],
    )
    assert code == 1
    assert (
        err.strip()
        == "torchcut segment: error: seeds: expected a one-channel PNG of labels 0/1/2, got an image of mode RGB"
    )
    Image.fromarray(np.zeros((30, 40), np.uint8)).save(tmp_path / "small.png")
    code, _, err = run(
        capsys,
        [
            "segment",
            str(tmp_path / "img.png"),
            str(tmp_path / "small.png"),
            "--out",
            str(tmp_path / "m.png"),
            "--device",
            "cpu",
        ],
    )
    assert (
        code == 1
        and err.count("\n") == 1
        and "seeds: expected shape (40, 40), from the image's spatial shape" in err
        and "got (30, 40)" in err
    )
    code, _, err = run(
        capsys, ["segment", str(tmp_path / "nope.png"), str(tmp_path / "small.png"), "--out", str(tmp_path / "m.png")]
    )
    assert code == 1 and "No such file" in err
