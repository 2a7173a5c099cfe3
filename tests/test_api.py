"""The API's conventions: one keyword per concept, renamed keywords that still work (with a FutureWarning
naming the new one, and the same result), the former module paths, the exports, ``python -m torchcut``."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

import torchcut
from torchcut import stereo

ROOT = Path(__file__).resolve().parent.parent


def two_blocks(n=12):
    g = torch.Generator().manual_seed(3)
    img = torch.rand(3, n, n, generator=g) * 40
    img[:, 3:9, 3:9] += 150
    return img


def potts_energy():
    g = torch.Generator().manual_seed(5)
    U = torch.randint(0, 20, (3, 6, 7), generator=g)
    V = 4 * (1 - torch.eye(3, dtype=torch.int64))
    return U, V


def same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def old_and_new(fn, old: dict, new: dict, *args, **common):
    """Call ``fn`` with the old keywords (expecting one FutureWarning that names the new one) and the new."""
    (name_old,), (name_new,) = old, new
    with pytest.warns(FutureWarning, match=rf"the keyword {name_old}= is deprecated; use {name_new}="):
        got_old = fn(*args, **old, **common)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # the new name warns about nothing
        got_new = fn(*args, **new, **common)
    return got_old, got_new


def test_expansion_renamed_keywords_give_the_same_result():
    U, V = potts_energy()
    a, b = old_and_new(torchcut.expansion, {"return_info": True}, {"return_result": True}, U, V)
    assert same(a, b) and isinstance(b[1], dict) and b[1]["cycles"] >= 1
    a, b = old_and_new(torchcut.expansion, {"max_cycles": 1}, {"max_iter": 1}, U, V, init=0, return_result=True)
    assert same(a, b) and b[1]["cycles"] == 1
    with pytest.raises(
        TypeError,
        match=r"^expansion\(\): got both max_cycles= \(deprecated\) and max_iter=; pass "
        r"max_iter= only$",
    ):
        torchcut.expansion(U, V, max_cycles=1, max_iter=1)


def test_grabcut_iterations_is_max_iter():
    img = two_blocks()
    a, b = old_and_new(
        torchcut.grabcut, {"iterations": 2}, {"max_iter": 2}, img, box=(2, 2, 10, 10), return_result=True
    )
    assert torch.equal(a[0], b[0]) and a[1].stats["grabcut_iterations"] == b[1].stats["grabcut_iterations"]
    assert b[1].stats["grabcut_iterations"][0] <= 2


def test_disparity_and_expansion_moves_renamed_keywords():
    g = torch.Generator().manual_seed(0)
    right = torch.rand(10, 20, generator=g) * 255
    left = torch.roll(right, 2, dims=1)
    a, b = old_and_new(stereo.disparity, {"return_info": True}, {"return_result": True}, left, right, 4)
    assert same(a, b) and "energy" in b[1]
    L = np.random.default_rng(0).integers(0, 255, (6, 8))
    R = np.roll(L, -1, axis=1)
    old = lambda **kw: [(m.alpha, m.flow, m.labels.tolist()) for m in stereo.expansion_moves(L, R, 3, **kw)]  # noqa: E731
    a, b = old_and_new(old, {"solver": "torchcut"}, {"backend": "torchcut"})
    assert a == b and [m[0] for m in b] == [0, 1, 2]
    # lam is a float now; 20.0 (the default) and 20 give the same moves, a fraction is refused
    assert old(backend="torchcut", lam=20) == b == old(backend="torchcut", lam=20.0)
    with pytest.raises(
        ValueError,
        match=r"^lam: expected a non-negative whole number \(the capacities are "
        r"integers\), got 2.5$",
    ):
        old(lam=2.5)
    with pytest.raises(
        ValueError,
        match=r"^backend: expected one of 'auto', 'pymaxflow', 'torchcut', 'reference', "
        r"'cpu', 'cuda', got 'gpu'$",
    ):
        old(backend="gpu")


def test_reference_max_rounds_is_max_iter():
    g = torchcut.GridGraph([[5, 0, 0]], [[0, 0, 5]], [[[3, 2, 0]], [[0, 0, 0]]], torchcut.grid_offsets(2, 4))
    a, b = old_and_new(torchcut.maxflow, {"max_rounds": 100}, {"max_iter": 100}, g, backend="reference")
    assert a.flow_value == b.flow_value == 2 and torch.equal(a.mask, b.mask)


@pytest.fixture
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_distributed_max_iter_backend_ndim_and_options(group):
    from torchcut import distributed as tcd

    src, snk = torch.tensor([[5, 0, 0]]), torch.tensor([[0, 0, 5]])
    edges = torch.tensor([[[3, 2, 0]], [[0, 0, 0]]])
    offs = torchcut.grid_offsets(2, 4)
    a, b = old_and_new(tcd.maxflow, {"max_sweeps": 50}, {"max_iter": 50}, src, snk, edges, offs)
    assert a.flow_value == b.flow_value == 2 and torch.equal(a.mask, b.mask) and b.verify()
    with pytest.raises(RuntimeError, match=r"^max_iter: the solve did not finish in 1 rounds; pass a larger max_iter$"):
        tcd.maxflow(src, snk, edges, offs, max_iter=1)
    image = torch.zeros(6, 8)
    image[:, :4] = 1.0
    seeds = torch.zeros(6, 8, dtype=torch.int64)
    seeds[0, 0], seeds[0, 7] = 1, 2
    want = torchcut.segment(image, seeds)
    assert torch.equal(tcd.segment(image, seeds, ndim=2, backend="reference", max_iter=500), want)
    assert torch.equal(tcd.segment(image, seeds, backend="auto"), want)
    with pytest.raises(
        ValueError,
        match=r"^ndim: expected None or 2 \(seeds.dim\(\): a slab is one grid, never a "
        r"batch\), got 3$",
    ):
        tcd.segment(image, seeds, ndim=3)
    with pytest.raises(
        ValueError,
        match=r"^backend: expected one of 'auto', 'cuda', 'reference', got 'cpu' \(the "
        r"compiled CPU solvers do not run split grids; 'reference' runs CPU slabs\)$",
    ):
        tcd.segment(image, seeds, backend="cpu")
    with pytest.raises(
        ValueError,
        match=r"^backend: 'cuda' runs the grid kernels on CUDA slabs split along axis 0, "
        r"got slabs on cpu split along axis 0",
    ):
        tcd.segment(image, seeds, backend="cuda")
    with pytest.raises(
        TypeError,
        match=r"^segment\(\): unexpected keyword argument 'rounds'; further keywords go to "
        r"the CUDA kernels of the slabs, which take rounds, persist, repair \(here they "
        r"do not run: backend='auto', cpu slabs along axis 0; options taken here: none\)$",
    ):
        tcd.segment(image, seeds, rounds=8)
    with pytest.raises(TypeError, match=r"^maxflow\(\): unexpected keyword argument 'tile_x'"):
        tcd.maxflow(src, snk, edges, offs, tile_x=32)
    with pytest.raises(ValueError, match=r"^max_iter: expected a positive int, got 0$"):
        tcd.segment(image, seeds, max_iter=0)


def test_one_keyword_per_convention_in_the_public_signatures():
    import inspect

    from torchcut import distributed as tcd

    results = [torchcut.segment, torchcut.grabcut, tcd.segment, torchcut.expansion, stereo.disparity]
    for fn in results:
        assert "return_result" in inspect.signature(fn).parameters, fn.__name__
    everything = [
        torchcut.segment,
        torchcut.grabcut,
        tcd.segment,
        tcd.maxflow,
        torchcut.expansion,
        torchcut.refine,
        stereo.disparity,
        stereo.expansion_moves,
        torchcut.maxflow,
    ]
    for fn in everything:
        names = set(inspect.signature(fn).parameters)
        assert not names & {"return_info", "solver", "iterations", "max_cycles", "max_sweeps", "max_rounds"}, fn
        assert "backend" in names, fn.__name__
    assert set(inspect.signature(tcd.segment).parameters) >= {"ndim", "backend", "solver_options"}


def test_module_paths_and_exports():
    seg_mod = importlib.import_module("torchcut._segment")
    grab_mod = importlib.import_module("torchcut._grabcut")
    assert torchcut.segment is seg_mod.segment and torchcut.grabcut is grab_mod.grabcut
    assert torchcut.EmptyMaskWarning is grab_mod.EmptyMaskWarning
    # the former module paths forward every name, with a warning naming the new place
    with pytest.warns(
        FutureWarning,
        match=r"the module torchcut.grabcut is deprecated: import EmptyMaskWarning as "
        r"torchcut.EmptyMaskWarning",
    ):
        from torchcut.grabcut import EmptyMaskWarning
    assert EmptyMaskWarning is torchcut.EmptyMaskWarning
    with pytest.warns(FutureWarning, match=r"import segment_mask as torchcut._segment.segment_mask"):
        from torchcut.segment import segment_mask
    assert segment_mask is seg_mod.segment_mask
    # torchcut.segment is the function, however it is reached
    import torchcut.segment as m

    assert m is torchcut.segment and callable(m)
    assert "add_arguments" not in stereo.__all__ and "main" not in stereo.__all__
    assert all(callable(getattr(stereo, n)) for n in stereo.__all__ if n != "DISPARITY_DEFAULTS")


def test_python_m_torchcut_runs_the_command_line(tmp_path):
    path = tmp_path / "g.max"
    path.write_text("p max 3 2\nn 1 s\nn 3 t\na 1 2 4\na 2 3 3\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, "-m", "torchcut", "maxflow", str(path), "--device", "cpu"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "s 3" in out.stdout.splitlines()
    bad = subprocess.run(
        [sys.executable, "-m", "torchcut", "maxflow", str(tmp_path / "missing.max")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    assert bad.stderr.startswith("torchcut maxflow: error: ")
