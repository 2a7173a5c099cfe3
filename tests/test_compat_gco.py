"""torchcut.compat.gco: gco-wrapper's cut_general_graph call, its layout and its errors, and the same
labels as gco-wrapper where both reach the same energy (compared when gco is importable)."""

import numpy as np
import pytest
import torch

from torchcut import graph_multilabel as gm
from torchcut.compat import gco as tgco


def problem(seed=0, n=60, L=4, integer=True):
    rng = np.random.default_rng(seed)
    pos = rng.random((n, 2))
    d = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    edges = np.argwhere(np.triu(d < 0.2, 1)).astype(np.int32)
    unary = rng.integers(0, 30, (n, L))
    w = rng.integers(1, 6, len(edges))
    if not integer:
        unary, w = unary + rng.random(unary.shape), w + rng.random(len(w))
    return edges, w, unary


def energy(edges, w, unary, V, labels):
    return float(
        gm.labeling_energy(
            torch.from_numpy(unary.T.copy()),
            torch.from_numpy(V),
            torch.from_numpy(labels.astype(np.int64)),
            torch.from_numpy(edges.astype(np.int64)),
            torch.from_numpy(w),
        )
    )


@pytest.mark.parametrize("algorithm", ["expansion", "swap"])
def test_layout_and_result_are_gcos(algorithm):
    edges, w, unary = problem()
    V = 3 * (1 - np.eye(4, dtype=np.int64))
    lab = tgco.cut_general_graph(edges, w, unary, V, algorithm=algorithm)
    assert isinstance(lab, np.ndarray) and lab.dtype == np.int32 and lab.shape == (60,)
    run = gm.expansion if algorithm == "expansion" else gm.swap
    ref = run(
        torch.from_numpy(unary.T.copy()), torch.from_numpy(V), torch.from_numpy(edges), torch.from_numpy(w), init=0
    )
    assert lab.tolist() == ref.tolist()
    # GCO starts from label 0 everywhere: one cycle from there, or from given labels
    one = tgco.cut_general_graph(edges, w, unary, V, n_iter=1, algorithm=algorithm)
    assert energy(edges, w, unary, V, one) >= energy(edges, w, unary, V, lab)
    start = unary.argmin(1)
    same = tgco.cut_general_graph(edges, w, unary, V, n_iter=0, init_labels=start)
    assert same.tolist() == start.tolist()
    # pairwise_cost=None is Potts; down_weight_factor changes nothing
    assert (
        tgco.cut_general_graph(edges, w, unary, None).tolist()
        == tgco.cut_general_graph(edges, w, unary, 1 - np.eye(4, dtype=np.int64), down_weight_factor=7.5).tolist()
    )


def test_errors_name_gcos_arguments():
    edges, w, unary = problem()
    with pytest.raises(ValueError, match=r"unary_cost: expected shape \[N, L\]"):
        tgco.cut_general_graph(edges, w, unary[None], None)
    with pytest.raises(ValueError, match=r"pairwise_cost: expected shape \[L, L\] = \(4, 4\)"):
        tgco.cut_general_graph(edges, w, unary, np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"pairwise_cost: expected a metric"):
        tgco.cut_general_graph(edges, w, unary, np.array([[0, 1, 4, 4], [1, 0, 1, 4], [4, 1, 0, 1], [4, 4, 1, 0]]))
    bad = edges.copy()
    bad[3, 1] = 60
    with pytest.raises(
        ValueError,
        match=r"edges: expected node indices in \[0, 60\) \(unary_cost is \[N, L\] with N = 60 nodes\), got edges\[3, 1\] = 60",
    ):
        tgco.cut_general_graph(bad, w, unary, None)
    with pytest.raises(ValueError, match=r"edge_weights: expected non-negative weights"):
        tgco.cut_general_graph(edges, -w, unary, None)
    with pytest.raises(ValueError, match=r"init_labels: expected labels in \[0, 3\]"):
        tgco.cut_general_graph(edges, w, unary, None, init_labels=np.full(60, 4))
    with pytest.raises(ValueError, match=r"algorithm: expected 'expansion' or 'swap', got 'icm'"):
        tgco.cut_general_graph(edges, w, unary, None, algorithm="icm")
    with pytest.raises(ValueError, match=r"n_iter: expected -1"):
        tgco.cut_general_graph(edges, w, unary, None, n_iter=-2)
    with pytest.raises(ValueError, match=r"down_weight_factor: expected a positive finite number"):
        tgco.cut_general_graph(edges, w, unary, None, down_weight_factor=0)


@pytest.mark.parametrize("integer", [True, False])
def test_energies_against_gco_wrapper(integer):
    gco = pytest.importorskip("gco")
    for seed in range(4):
        edges, w, unary = problem(seed, n=200, integer=integer)
        V = np.minimum(np.abs(np.arange(4)[:, None] - np.arange(4)[None]), 2)
        kw = dict(down_weight_factor=1) if integer else {}
        theirs = gco.cut_general_graph(
            edges,
            w.astype(np.int32) if integer else w,
            unary.astype(np.int32) if integer else unary,
            V.astype(np.int32) if integer else V.astype(np.float64),
            **kw,
        )
        ours = tgco.cut_general_graph(edges, w, unary, V)
        e_ours, e_theirs = energy(edges, w, unary, V, ours), energy(edges, w, unary, V, np.asarray(theirs))
        assert e_ours <= 1.01 * e_theirs
        if integer:  # same start (label 0), same exact energy, same label order: the same local minimum
            assert e_ours == e_theirs
