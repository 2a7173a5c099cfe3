"""examples/superpixels.py runs end to end on CPU: SLIC, the region adjacency graph, expansion, the PNG."""

import importlib.util
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent


def load_example():
    spec = importlib.util.spec_from_file_location("superpixels_example", ROOT / "examples" / "superpixels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_superpixels_are_labelled_and_painted(tmp_path, capsys):
    ex = load_example()
    assert (
        ex.main(
            [
                "--image",
                "coffee",
                "--size",
                "200",
                "--segments",
                "300",
                "--clusters",
                "4",
                "--lam",
                "3",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "coffee: 200x133 pixels" in out and "4 colour clusters, lam 3" in out
    before, after = (
        float(x) for x in out.split("best cluster per superpixel ")[1].split(" (")[0].split(", expansion ")
    )
    assert after < before
    png = np.array(Image.open(tmp_path / "coffee_superpixels.png"))
    assert png.shape == (133, 400, 3)
    right = png[:, 200:].reshape(-1, 3)
    colours = {tuple(c) for c in right}
    assert len(colours - {(0, 0, 0)}) <= 4  # one colour per cluster, borders black


def test_region_graph_of_a_small_label_image():
    ex = load_example()
    seg = np.array([[0, 0, 1], [2, 2, 1], [2, 3, 3]])
    img = np.zeros((3, 3, 3))
    img[..., 0] = seg
    edges, length, colour, size = ex.region_graph(seg, img)
    assert edges.tolist() == [[0, 1], [0, 2], [1, 2], [1, 3], [2, 3]]
    assert length.tolist() == [1, 2, 1, 1, 2]
    assert size.tolist() == [2, 2, 3, 2] and colour[:, 0].tolist() == [0, 1, 2, 3]
