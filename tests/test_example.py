"""examples/segment_tsukuba.py runs end to end on CPU and writes its PNGs (Tsukuba and the fallback)."""

import importlib.util
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "segment_tsukuba.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("segment_tsukuba_example", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def read_mask(path):
    m = np.array(Image.open(path))
    assert m.dtype == np.uint8 and set(np.unique(m)) <= {0, 255}
    return m > 0


def test_seed_pngs_are_what_make_seeds_draws():
    spec = importlib.util.spec_from_file_location("make_seeds", ROOT / "assets" / "make_seeds.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, (w, h, obj, bkg) in mod.SCRIBBLES.items():
        stored = np.array(Image.open(ROOT / "assets" / name))
        assert stored.shape == (h, w) and set(np.unique(stored)) == {0, 1, 2}
        drawn = mod.draw(w, h, obj, bkg)
        # the same strokes (Pillow versions may rasterize a few edge pixels differently)
        assert (stored != drawn).mean() < 0.002, name


def test_tsukuba_lamp(example, shared_data, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TORCHCUT_DATA", str(shared_data))
    monkeypatch.setenv("TORCHCUT_CACHE", str(tmp_path / "cache"))
    assert example.main(["--size", "96", "--out", str(tmp_path), "--device", "cpu", "--no-download"]) == 0
    out = capsys.readouterr().out
    assert "Segmenting Middlebury's Tsukuba (left view, " in out and "object: the orange desk lamp." in out
    assert "tsukuba: (72, 96) on cpu, lam 8, 8-connected, object the orange desk lamp: " in out
    assert "astronaut" not in out
    mask = read_mask(tmp_path / "tsukuba_mask.png")
    overlay = np.array(Image.open(tmp_path / "tsukuba_overlay.png"))
    assert mask.shape == (72, 96) and overlay.shape == (72, 96, 3)
    f = 96 / 384
    assert mask[round(140 * f), round(232 * f)]  # inside the lamp shade
    assert not mask[round(250 * f), round(150 * f)]  # the box under the head
    assert not mask[round(180 * f), round(150 * f)]  # the head
    assert 0.02 < mask.mean() < 0.08  # the lamp is about 4.5% of the picture
    seeds = np.array(Image.open(ROOT / "assets" / "tsukuba_seeds.png").resize((96, 72), Image.NEAREST))
    assert mask[seeds == 1].all() and not mask[seeds == 2].any()


def test_fallback_without_tsukuba(example, monkeypatch, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("TORCHCUT_DATA", str(empty))
    monkeypatch.setenv("TORCHCUT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCHCUT_NO_DOWNLOAD", raising=False)

    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network in this test")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    assert example.main(["--size", "64", "--out", str(tmp_path / "out"), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "Tsukuba not available" in out and "no network in this test" in out
    assert (
        "Segmenting scikit-image's 'astronaut' image instead (bundled with scikit-image); object: the astronaut "
        "(hair, face and suit)."
    ) in out
    assert "astronaut: (64, 64) on cpu" in out and "desk lamp" not in out
    mask = read_mask(tmp_path / "out" / "astronaut_mask.png")
    assert (tmp_path / "out" / "astronaut_overlay.png").is_file()
    assert mask.shape == (64, 64)
    assert mask[int(100 / 8), int(225 / 8)]  # the face
    assert mask[int(330 / 8), int(150 / 8)]  # the suit
    assert not mask[int(40 / 8), int(470 / 8)]  # the backdrop
    assert 0.2 < mask.mean() < 0.5


def test_custom_image_and_seeds(example, tmp_path, capsys):
    rng = np.random.default_rng(0)
    img = np.full((30, 40, 3), 40, np.uint8)
    img[8:22, 10:28] = (200, 120, 30)
    img = np.clip(img + rng.normal(0, 6, img.shape), 0, 255).astype(np.uint8)
    seeds = np.zeros((30, 40), np.uint8)
    seeds[14:16, 16:22] = 1
    seeds[0, :] = 2
    Image.fromarray(img).save(tmp_path / "box.png")
    Image.fromarray(seeds).save(tmp_path / "box_seeds.png")
    args = ["--image", str(tmp_path / "box.png"), "--seeds", str(tmp_path / "box_seeds.png")]
    assert example.main(args + ["--size", "0", "--out", str(tmp_path), "--lam", "2", "--connectivity", "4"]) == 0
    mask = read_mask(tmp_path / "box_mask.png")
    want = np.zeros((30, 40), bool)
    want[8:22, 10:28] = True
    assert np.array_equal(mask, want)
    with pytest.raises(SystemExit):
        example.main(["--image", str(tmp_path / "box.png")])  # --seeds missing
    assert "--seeds is required" in capsys.readouterr().err


def test_command_line(tmp_path):
    """The README's command, as a user runs it (small size, no network)."""
    env = dict(os.environ, TORCHCUT_DATA=str(tmp_path / "none"), TORCHCUT_CACHE=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--size",
            "48",
            "--out",
            str(tmp_path / "out"),
            "--no-download",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "downloads are disabled" in proc.stdout
    assert (tmp_path / "out" / "astronaut_mask.png").is_file()
    assert (tmp_path / "out" / "astronaut_overlay.png").is_file()


def test_docstring_says_which_image_and_why(example):
    doc = example.__doc__
    first = doc.splitlines()[0]
    assert "desk lamp in Tsukuba" in first and "astronaut" in first
    assert "when Tsukuba is nowhere to be found" in " ".join(doc.split())
