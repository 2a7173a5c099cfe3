"""Inputs a new user tried that gave a wrong result, a traceback or an error about the wrong thing: each
now gets an error naming the argument (matched by message here) or the right result."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import pytest
import torch

import torchcut
from torchcut.cli import main as cli_main

ROOT = Path(__file__).resolve().parent.parent


def rand(*shape, seed=0):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------- grabcut
def test_grabcut_small_channels_last_image_without_seeds_is_ambiguous():
    img = rand(3, 10, 3) * 255  # 3 rows of 10 RGB pixels, or 3 channels of 10 x 3
    with pytest.raises(
        ValueError,
        match=r"^image: shape \(3, 10, 3\) is ambiguous without seeds: the channels could be "
        r"axis 0 \(\[C, H, W\]\) or axis 2 \(\[H, W, C\]\); pass channel_axis \(or seeds\)$",
    ):
        torchcut.grabcut(img, box=(1, 0, 8, 2))
    with pytest.raises(ValueError, match=r"axis 1 \(\[B, C, H, W\]\) or axis 3 \(\[B, H, W, C\]\)"):
        torchcut.grabcut(rand(2, 4, 10, 3), box=(1, 0, 8, 2))
    # channel_axis tells it: the mask has the image's 3 x 10 pixels, and equals the channels-first call's
    last = torchcut.grabcut(img, box=(1, 0, 8, 2), channel_axis=-1)
    first = torchcut.grabcut(img.movedim(-1, 0).contiguous(), box=(1, 0, 8, 2), channel_axis=0)
    assert last.shape == (3, 10) and torch.equal(last, first)
    # so do seeds shaped like the pixels
    seeds = torch.zeros(3, 10, dtype=torch.uint8)
    seeds[:, 9] = 2
    assert torchcut.grabcut(img, seeds, box=(1, 0, 8, 2)).shape == (3, 10)


def test_grabcut_empty_image_blames_the_image():
    for shape in ((0, 0), (0, 0, 3)):
        with pytest.raises(ValueError, match=rf"^image: expected a non-empty image, got shape {re_shape(shape)}$"):
            torchcut.grabcut(torch.zeros(shape), box=(0, 0, 1, 1))


def re_shape(shape):
    return str(tuple(shape)).replace("(", r"\(").replace(")", r"\)")


# ---------------------------------------------------------------------------------------------- expansion
def test_expansion_volume_without_connectivity():
    V = 1 - torch.eye(4)
    with pytest.raises(
        ValueError,
        match=r"^unary: shape \(4, 4, 5, 6\) with a 4 x 4 pairwise is ambiguous: a batch "
        r"\[B, L, H, W\] of 4 2D grids, or one 3D grid \[L, D, H, W\] of depth 4; "
        r"pass connectivity \(4 or 8 for the batch, 6, 18 or 26 for the volume\)$",
    ):
        torchcut.expansion(rand(4, 4, 5, 6), V)
    with pytest.raises(
        ValueError,
        match=r"^connectivity: a unary of shape \(3, 4, 5, 6\) with a 3 x 3 pairwise is one "
        r"3D grid \[L, D, H, W\]; pass connectivity 6, 18 or 26",
    ):
        torchcut.expansion(rand(3, 4, 5, 6), 1 - torch.eye(3))
    # with connectivity both readings work, and give what the items give alone
    U = (rand(4, 4, 5, 6) * 10).round().to(torch.int64)
    Vi = 3 * (1 - torch.eye(4, dtype=torch.int64))
    vol = torchcut.expansion(U, Vi, connectivity=6)
    assert vol.shape == (4, 5, 6)
    assert int(torchcut.labeling_energy(U, Vi, vol, connectivity=6)) <= int(
        torchcut.labeling_energy(U, Vi, U.argmin(0), connectivity=6)
    )
    batch = torchcut.expansion(U, Vi, connectivity=4)
    assert all(torch.equal(batch[b], torchcut.expansion(U[b], Vi)) for b in range(4))
    with pytest.raises(ValueError, match=r"^unary: shape \(4, 4, 5, 6\) with a 4 x 4 pairwise is ambiguous"):
        torchcut.labeling_energy(U, Vi, vol)


def test_expansion_labels_last_unary():
    with pytest.raises(
        ValueError,
        match=r"^unary: expected the labels on axis 0 \(\[L, H, W\]\), got shape \(5, 6, 3\), "
        r"whose last axis has the pairwise table's 3 labels; move them with "
        r"unary.movedim\(-1, 0\)$",
    ):
        torchcut.expansion(rand(5, 6, 3), 1 - torch.eye(3))
    with pytest.raises(ValueError, match=r"^unary: expected the labels on axis 1 \(\[B, L, H, W\]\)"):
        torchcut.expansion(rand(2, 5, 6, 3), 1 - torch.eye(3))


def test_expansion_weights_in_gridgraph_layout_are_transposed_with_a_warning():
    U = (rand(3, 4, 5, 6, seed=2) * 10).round().to(torch.int64)  # B = 3 items, L = 4 labels
    V = 2 * (1 - torch.eye(4, dtype=torch.int64))
    W = (rand(3, 2, 5, 6, seed=3) * 4).round().to(torch.int64)  # [B, K, H, W]
    want = torchcut.expansion(U, V, weights=W)
    with pytest.warns(FutureWarning, match=r"weights: shape \(2, 3, 5, 6\) is GridGraph's edge layout"):
        got = torchcut.expansion(U, V, weights=W.transpose(0, 1))
    assert torch.equal(got, want)


# ---------------------------------------------------------------------------------------------- refine
def test_refine_classes_last_probabilities():
    image = rand(8, 8, 3)
    probs = torch.softmax(rand(8, 8, 3, seed=1) * 4, -1)
    with pytest.raises(
        ValueError,
        match=r"^probs: expected the classes on axis 0 \(\[C, H, W\]\), got shape \(8, 8, 3\), "
        r"whose last axis sums to 1 \(classes last\); pass probs.movedim\(-1, 0\)$",
    ):
        torchcut.refine(image, probs)
    with pytest.raises(ValueError, match=r"^probs: expected the classes on axis 1 \(\[B, C, H, W\]\)"):
        torchcut.refine(image.unsqueeze(0), probs.unsqueeze(0))
    labels = torchcut.refine(image, probs.movedim(-1, 0))
    assert labels.shape == (8, 8)


# ---------------------------------------------------------------------------------------------- meta tensors
def test_meta_tensors_are_refused_by_name():
    meta = "expected a tensor with values \\(on the CPU or a CUDA device\\), got one on the meta device"
    seeds = torch.zeros(6, 6, dtype=torch.int64)
    seeds[0, 0], seeds[5, 5] = 1, 2
    with pytest.raises(ValueError, match=rf"^seeds: {meta}"):
        torchcut.segment(rand(6, 6), seeds.to("meta"))
    with pytest.raises(ValueError, match=rf"^image: {meta}"):
        torchcut.segment(rand(6, 6).to("meta"), seeds)
    edges = torch.zeros(2, 2, 2, dtype=torch.int64)
    with pytest.raises(ValueError, match=rf"^source: {meta}"):
        torchcut.GridGraph(
            torch.zeros(2, 2, dtype=torch.int64, device="meta"),
            torch.zeros(2, 2, dtype=torch.int64),
            edges,
            torchcut.grid_offsets(2, 4),
        )
    with pytest.raises(ValueError, match=rf"^edges: {meta}"):
        torchcut.GridGraph(
            torch.zeros(2, 2, dtype=torch.int64),
            torch.zeros(2, 2, dtype=torch.int64),
            edges.to("meta"),
            torchcut.grid_offsets(2, 4),
        )
    with pytest.raises(ValueError, match=rf"^unary: {meta}"):
        torchcut.expansion(torch.zeros(2, 3, 3, device="meta"), 1 - torch.eye(2))


# ---------------------------------------------------------------------------------------------- FlowGraph
def test_from_edges_terminals_are_capacities_not_node_ids():
    with pytest.raises(
        ValueError,
        match=r"^source: expected the capacities of the arcs source -> p, one per node \(a 1-D "
        r"tensor or array of length N\), got the single number 0; the terminals are "
        r"implicit, not node ids",
    ):
        torchcut.FlowGraph.from_edges([0], [1], [3], [0], source=0, sink=1)
    with pytest.raises(ValueError, match=r"^sink: expected the capacities of the arcs p -> sink"):
        torchcut.FlowGraph.from_edges([0], [1], [3], source=[5, 0], sink=torch.tensor(1))
    # the README's form: per-node capacity arrays
    g = torchcut.FlowGraph.from_edges([0], [1], [3], [0], source=[5, 0], sink=[0, 5])
    assert torchcut.maxflow(g).flow_value == 3


def test_from_edges_with_empty_lists():
    g = torchcut.FlowGraph.from_edges([], [], [], source=[5, 0], sink=[0, 5])
    r = torchcut.maxflow(g)
    assert g.num_nodes == 2 and g.num_pairs == 0 and r.flow_value == 0 and r.verify()
    g = torchcut.FlowGraph.from_edges([], [], [], [], source=[4, 1], sink=[2, 3])  # flow straight through nodes
    assert torchcut.maxflow(g).flow_value == 3
    with pytest.raises(
        ValueError,
        match=r"^num_nodes: expected a positive integer; with no arcs \(empty u and v\) and "
        r"no source or sink capacities nothing tells the number of nodes$",
    ):
        torchcut.FlowGraph.from_edges([], [], [])


def test_grid_options_on_a_flowgraph_name_maxflow():
    g = torchcut.FlowGraph.from_edges([0], [1], [3], source=[5, 0], sink=[0, 5])
    with pytest.raises(
        TypeError,
        match=r"^maxflow\(\): keyword argument 'algorithm' does not apply to this FlowGraph: "
        r"it is solved as a general graph by the 'cpu' backend \(backend='auto' on cpu\), "
        r"whose solver takes no options; grid options reach the grid solver only when a "
        r"lattice-shaped FlowGraph is routed there \(lattice=True\)$",
    ):
        torchcut.maxflow(g, algorithm="pseudoflow")
    assert torchcut.maxflow(g, lattice=True, algorithm="pseudoflow").flow_value == 3


# ---------------------------------------------------------------------------------------------- files, CLI, example
def test_truncated_gzip_gives_one_line(tmp_path, capsys):
    data = gzip.compress(b"p max 3 2\nn 1 s\nn 3 t\na 1 2 4\na 2 3 3\n" * 40)
    path = tmp_path / "cut.max.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(
        ValueError, match=r"^path: .*cut.max.gz is a truncated gzip file \(.*\); download or copy it again$"
    ):
        torchcut.read_dimacs(path)
    assert cli_main(["maxflow", str(path), "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("torchcut maxflow: error: path: ")
    bad = tmp_path / "bad.max.gz"
    bad.write_bytes(b"\x1f\x8b" + bytes(40))
    with pytest.raises(ValueError, match=r"^path: .*bad.max.gz is not a valid gzip file"):
        torchcut.read_dimacs(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_example_with_cuda_device_and_no_cuda(capsys):
    spec = importlib.util.spec_from_file_location("segment_tsukuba_example", ROOT / "examples" / "segment_tsukuba.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(SystemExit) as exc:
        mod.main(["--device", "cuda", "--no-download"])
    assert exc.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert ": error: --device cuda: CUDA is not available (" in last  # prog: the script, or pytest under -m
    assert last.endswith("); run with --device cpu")
    with pytest.raises(SystemExit):
        mod.main(["--device", "gpu", "--no-download"])
    assert "--device: expected a torch device such as cpu or cuda, got 'gpu'" in capsys.readouterr().err
