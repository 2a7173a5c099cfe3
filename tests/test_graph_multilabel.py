"""Multi-label energies on general graphs (torchcut.graph_multilabel): expansion and swap moves checked
by brute force on tiny graphs, float and per-edge energies, bad input, and GCO's energies when the
gco-wrapper package is importable."""

import itertools

import numpy as np
import pytest
import torch

import torchcut
from torchcut import graph_multilabel as gm


def energies_np(U, V, edges, w, F):
    """Exact energies of the labellings F [K, N] (numpy; V [L, L] or [E, L, L])."""
    U, V, edges, w, F = (np.asarray(x) for x in (U, V, edges, w, F))
    un = np.take_along_axis(U.T[None], F[..., None], 2)[..., 0].sum(1)
    a, b = F[:, edges[:, 0]], F[:, edges[:, 1]]
    pv = V[a, b] if V.ndim == 2 else V[np.arange(len(edges))[None], a, b]
    return un + (pv * w[None]).sum(1)


def random_problem(g, table, max_nodes=6, max_labels=3, integer=True):
    N = int(torch.randint(2, max_nodes + 1, (1,), generator=g))
    L = int(torch.randint(2, max_labels + 1, (1,), generator=g))
    E = int(torch.randint(1, 2 * N + 1, (1,), generator=g))
    u = torch.randint(0, N, (E,), generator=g)
    v = (u + torch.randint(1, N, (E,), generator=g)) % N  # never a self-loop
    edges = torch.stack([u, v], 1)
    if integer:
        U = torch.randint(0, 20, (L, N), generator=g)
        w = torch.randint(0, 5, (E,), generator=g)
    else:
        U = torch.rand(L, N, generator=g, dtype=torch.float64) * 20
        w = torch.rand(E, generator=g, dtype=torch.float64) * 5
    a = torch.arange(L)
    d = (a[:, None] - a[None]).abs()
    V = {
        "potts": 3 * (1 - torch.eye(L, dtype=torch.int64)),
        "trunc": 2 * torch.minimum(d, torch.tensor(2)),
        "linear": d,
    }[table]
    if not integer:
        V = V.to(torch.float64) * 1.5
    return U, V, edges, w


def all_moves(f, L, N, kind):
    """Every labelling one expansion move (or one swap move) away from f: [K, N]."""
    out = []
    f = np.asarray(f)
    for x in itertools.product([0, 1], repeat=N):
        x = np.array(x, dtype=bool)
        if kind == "expansion":
            for alpha in range(L):
                out.append(np.where(x, alpha, f))
        else:
            for a in range(L):
                for b in range(a + 1, L):
                    var = (f == a) | (f == b)
                    out.append(np.where(var, np.where(x, b, a), f))
    return np.stack(out)


@pytest.mark.parametrize("table", ["potts", "trunc", "linear"])
def test_expansion_is_a_local_minimum_of_every_expansion_move(table):
    g = torch.Generator().manual_seed(1)
    for _ in range(40):
        U, V, edges, w = random_problem(g, table)
        L, N = U.shape
        f, info = gm.expansion(U, V, edges, w, return_result=True)
        en = info["energies"]
        assert all(x >= y for x, y in zip(en, en[1:]))
        assert info["energy"] == int(gm.labeling_energy(U, V, f, edges, w))
        assert info["energy"] == energies_np(U, V, edges, w, f[None])[0]
        neighbours = energies_np(U, V, edges, w, all_moves(f, L, N, "expansion"))
        assert neighbours.min() >= info["energy"]
        # the expansion bound: within 2 max V / min V (off the diagonal) of the optimum
        every = np.array(list(itertools.product(range(L), repeat=N)))
        best = energies_np(U, V, edges, w, every).min()
        off = V[~torch.eye(L, dtype=torch.bool)]
        assert info["energy"] <= 2 * float(off.max()) / float(off.min()) * best


@pytest.mark.parametrize("schedule", ["sequential", "batched"])
def test_schedules_reach_a_local_minimum_from_any_start(schedule):
    g = torch.Generator().manual_seed(2)
    for trial in range(30):
        U, V, edges, w = random_problem(g, "trunc")
        L, N = U.shape
        f, info = gm.expansion(U, V, edges, w, init=trial % L, schedule=schedule, return_result=True)
        en = info["energies"]
        assert en[0] == energies_np(U, V, edges, w, np.full((1, N), trial % L))[0]
        assert all(x >= y for x, y in zip(en, en[1:]))
        assert info["energy"] == energies_np(U, V, edges, w, f[None])[0]
        assert energies_np(U, V, edges, w, all_moves(f, L, N, "expansion")).min() >= info["energy"]


@pytest.mark.parametrize("schedule", ["sequential", "batched"])
def test_the_reference_backend_takes_the_tensor_path_to_the_same_guarantee(schedule):
    """backend="reference": moves built by tensor ops and solved by the reference CSR push-relabel (the
    path CUDA takes, with its kernels instead)."""
    g = torch.Generator().manual_seed(12)
    for _ in range(8):
        U, V, edges, w = random_problem(g, "trunc", max_nodes=5)
        L, N = U.shape
        f, info = gm.expansion(U, V, edges, w, schedule=schedule, backend="reference", return_result=True)
        assert info["energy"] == energies_np(U, V, edges, w, f[None])[0]
        assert energies_np(U, V, edges, w, all_moves(f, L, N, "expansion")).min() >= info["energy"]
        fs, infs = gm.swap(U, V, edges, w, backend="reference", return_result=True)
        assert infs["energy"] == energies_np(U, V, edges, w, fs[None])[0]


def test_swap_is_a_local_minimum_of_every_swap_move_and_takes_semimetrics():
    g = torch.Generator().manual_seed(3)
    for trial in range(40):
        U, V, edges, w = random_problem(g, ["potts", "trunc", "linear"][trial % 3])
        L, N = U.shape
        if trial % 4 == 0 and L > 2:  # a semimetric that is not a metric (squared differences)
            a = torch.arange(L)
            V = (a[:, None] - a[None]) ** 2
        f, info = gm.swap(U, V, edges, w, return_result=True)
        en = info["energies"]
        assert all(x >= y for x, y in zip(en, en[1:]))
        assert info["energy"] == energies_np(U, V, edges, w, f[None])[0]
        assert energies_np(U, V, edges, w, all_moves(f, L, N, "swap")).min() >= info["energy"]


def test_per_edge_tables_and_float_energies():
    g = torch.Generator().manual_seed(4)
    for trial in range(30):
        integer = trial % 2 == 0
        U, _, edges, w = random_problem(g, "potts", integer=integer)
        L, N = U.shape
        E = edges.shape[0]
        a = torch.arange(L)
        d = (a[:, None] - a[None]).abs()
        # one metric per edge: a Potts or truncated linear cost of its own scale
        scale = torch.randint(1, 4, (E, 1, 1), generator=g)
        kind = torch.randint(0, 2, (E, 1, 1), generator=g).bool()
        Ve = torch.where(kind, (d > 0).long(), torch.minimum(d, torch.tensor(2))) * scale
        if not integer:
            Ve = Ve.to(torch.float64) * 0.7
        f, info = gm.expansion(U, Ve, edges, w, return_result=True)
        exact = float(gm.labeling_energy(U, Ve, f, edges, w))
        assert info["energy"] == pytest.approx(exact, rel=1e-6, abs=1e-6)
        assert exact == pytest.approx(energies_np(U, Ve, edges, w, f[None])[0])
        en = info["energies"]
        assert all(x >= y for x, y in zip(en, en[1:]))
        neighbours = energies_np(U, Ve, edges, w, all_moves(f, L, N, "expansion"))
        assert neighbours.min() >= exact - 1e-6 * (1 + abs(exact))


def test_torchcut_expansion_takes_edges_and_leaves_inputs_alone():
    g = torch.Generator().manual_seed(5)
    U, V, edges, w = random_problem(g, "trunc", max_nodes=8)
    copies = [t.clone() for t in (U, V, edges, w)]
    f1 = torchcut.expansion(U, V, edges=edges, edge_weights=w)
    f2 = gm.expansion(U, V, edges, w)
    assert torch.equal(f1, f2)
    assert f1.dtype == torch.int64 and f1.shape == (U.shape[1],)
    for t, c in zip((U, V, edges, w), copies):
        assert torch.equal(t, c)
    # numpy inputs and reversed edges: the same energy
    f3 = torchcut.expansion(U.numpy(), V.numpy(), edges=edges.flip(1).numpy(), edge_weights=w.numpy())
    assert torch.equal(f3, f1)


def test_a_chain_with_strong_smoothness_takes_one_label():
    N, L = 50, 4
    U = torch.zeros(L, N, dtype=torch.int64)
    U[0] = 1  # label 0 costs 1 everywhere, the others 2, except label 2 costs 0 at every 7th node
    U[1:, :] = 2
    U[2, ::7] = 0
    edges = torch.stack([torch.arange(N - 1), torch.arange(1, N)], 1)
    f, info = gm.expansion(U, 100 * (1 - torch.eye(L, dtype=torch.int64)), edges, return_result=True)
    assert f.tolist() == [0] * N
    assert info["energy"] == N


def test_isolated_nodes_and_no_edges_take_their_unary_minimum():
    U = torch.tensor([[3, 0, 2], [1, 5, 3], [0, 4, 9]])
    f = gm.expansion(U, 1 - torch.eye(3, dtype=torch.int64), torch.zeros(0, 2, dtype=torch.int64))
    assert f.tolist() == [2, 0, 0]
    f = gm.expansion(U, 1 - torch.eye(3, dtype=torch.int64), [[0, 1]], init=1)
    assert f.tolist() == [2, 0, 0]


def test_parallel_edges_add_up():
    U = torch.tensor([[0, 5], [4, 0]])  # node 0 prefers label 0 (by 4), node 1 label 1 (by 5)
    V = 1 - torch.eye(2, dtype=torch.int64)
    # one edge of weight 3 does not tie them; three parallel edges of weight 3 (9 > 4) do, on label 1
    assert gm.expansion(U, V, [[0, 1]], [3]).tolist() == [0, 1]
    f, info = gm.expansion(U, V, [[0, 1], [1, 0], [0, 1]], [3, 3, 3], return_result=True)
    assert f.tolist() == [1, 1] and info["energy"] == 4


def _move_problems():
    g = torch.Generator().manual_seed(7)
    for trial in range(24):
        U, V, edges, w = random_problem(
            g, ["potts", "trunc", "linear"][trial % 3], max_nodes=9, max_labels=4, integer=trial % 2 == 0
        )
        if trial % 4 == 1:  # repeated edges, in both orientations
            edges = torch.cat([edges, edges.flip(1)])
            w = torch.cat([w, w])
        if trial % 6 == 5:  # per-edge tables
            V = V.unsqueeze(0).repeat(edges.shape[0], 1, 1) * torch.arange(1, edges.shape[0] + 1).view(-1, 1, 1)
        yield U, V, edges, w


def test_compiled_moves_equal_the_tensor_moves(monkeypatch):
    if not gm._compiled_move(torch.device("cpu")):
        pytest.skip("the CPU library has no graph_expansion_move op (an older build)")
    g = torch.Generator().manual_seed(8)
    for U, V, edges, w in _move_problems():
        G = gm._GraphEnergy(U, V, edges, w)
        f = torch.randint(0, G.L, (G.N,), generator=g)
        for alpha in range(G.L):
            al = torch.tensor([alpha])
            monkeypatch.setattr(gm, "COMPILED_MOVES", True)
            fast = G.expansion_moves(f, al)
            monkeypatch.setattr(gm, "COMPILED_MOVES", False)
            slow = G.expansion_moves(f, al)
            for x, y in zip(fast[:3], slow[:3]):
                assert x.dtype == y.dtype and torch.equal(x, y)
            assert (fast[3] is None) == (slow[3] is None) and (fast[3] is None or bool(fast[3]) == bool(slow[3]))
        for a in range(G.L):  # swap moves too
            for b in range(a + 1, G.L):
                monkeypatch.setattr(gm, "COMPILED_MOVES", True)
                fast = G.swap_move(f, a, b)
                monkeypatch.setattr(gm, "COMPILED_MOVES", False)
                slow = G.swap_move(f, a, b)
                for x, y in zip(fast, slow):
                    assert x.dtype == y.dtype and torch.equal(x, y)
        monkeypatch.setattr(gm, "COMPILED_MOVES", True)
        a = gm.expansion(U, V, edges, w, return_result=True)
        monkeypatch.setattr(gm, "COMPILED_MOVES", False)
        b = gm.expansion(U, V, edges, w, return_result=True)
        assert torch.equal(a[0], b[0]) and a[1]["energies"] == b[1]["energies"]


def test_compiled_energy_equals_the_tensor_energy(monkeypatch):
    """graph_labeling_energy (one pass in C++) gives the tensor version's quantised energy of any labelling:
    Potts, integer and float tables, per-edge tables, repeated edges; and bad labels raise."""
    if not gm._compiled_energy(torch.device("cpu")):
        pytest.skip("the CPU library has no graph_labeling_energy op (an older build)")
    g = torch.Generator().manual_seed(9)
    for U, V, edges, w in _move_problems():
        G = gm._GraphEnergy(U, V, edges, w)
        for _ in range(4):
            f = torch.randint(0, G.L, (G.N,), generator=g)
            monkeypatch.setattr(gm, "COMPILED_MOVES", True)
            fast = G.energy(f)
            monkeypatch.setattr(gm, "COMPILED_MOVES", False)
            slow = G.energy(f)
            assert fast.dtype == slow.dtype == torch.int64 and int(fast) == int(slow)
    monkeypatch.setattr(gm, "COMPILED_MOVES", True)
    W, mode = G.op_pairs
    bad = torch.full((G.N,), G.L, dtype=torch.int64)
    with pytest.raises(RuntimeError, match="f: label out of range at node 0"):
        torch.ops.torchcut.graph_labeling_energy(G.U, bad, G.u, G.v, W, G.Vflat, mode)
    f = torch.zeros(G.N, dtype=torch.int64)
    torch.library.opcheck(torch.ops.torchcut.graph_labeling_energy, (G.U, f, G.u, G.v, W, G.Vflat, mode))


def test_subgraph_swaps_equal_the_whole_graph_swaps(monkeypatch):
    """graph_swap_move (the move on the nodes labelled alpha or beta alone) gives the whole-graph swap move's
    labels and energy for every pair of labels: Potts, integer and float tables, per-edge tables, repeated
    edges; swap() returns the same labels and energies with it and without it; bad arguments raise."""
    if not gm._compiled(torch.device("cpu"), "graph_swap_move"):
        pytest.skip("the CPU library has no graph_swap_move op (an older build)")
    g = torch.Generator().manual_seed(10)
    for U, V, edges, w in _move_problems():
        G = gm._GraphEnergy(U, V, edges, w, metric=False)
        fast = gm._cpu_swaps(G, "auto")
        assert fast is not None
        for _ in range(3):
            f = torch.randint(0, G.L, (G.N,), generator=g)
            e = int(G.energy(f))
            for a in range(G.L):
                for b in range(a + 1, G.L):
                    caps, source, sink, var = G.swap_move(f, a, b)  # the whole graph's move
                    mask, _ = gm._solve(G, caps, source, sink, "auto", {"solves": 0})
                    whole = torch.where(var, torch.where(mask, a, b), f)
                    cand, e_new = fast(a, b, f, e)
                    assert e_new == int(G.energy(whole))
                    assert torch.equal(cand, whole if e_new < e else f)
        with_it = gm.swap(U, V, edges, w, return_result=True)
        monkeypatch.setattr(gm, "_cpu_swaps", lambda G, backend: None)
        without = gm.swap(U, V, edges, w, return_result=True)
        monkeypatch.undo()
        assert torch.equal(with_it[0], without[0]) and with_it[1]["energies"] == without[1]["energies"]
    W, mode = G.op_pairs
    wide = G.cap_dtype == torch.int64
    with pytest.raises(RuntimeError, match="f: label out of range at node 0"):
        torch.ops.torchcut.graph_swap_move(G.U, torch.full((G.N,), G.L), G.u, G.v, W, G.Vflat, 0, 1, mode, wide)
    with pytest.raises(RuntimeError, match="alpha, beta: expected two different labels"):
        torch.ops.torchcut.graph_swap_move(
            G.U, torch.zeros(G.N, dtype=torch.int64), G.u, G.v, W, G.Vflat, 1, 1, mode, wide
        )
    f = torch.arange(G.N) % G.L
    torch.library.opcheck(torch.ops.torchcut.graph_swap_move, (G.U, f, G.u, G.v, W, G.Vflat, 0, 1, mode, wide))


@pytest.mark.parametrize("top", [1, 2, 7, 2**16, 2**16 + 1, 10**6, 2**32, 2**32 + 1, 2**40])
def test_stable_argsort_is_numpys(top):
    """The radix passes (keys below 2**32) and the packed sort above them order like numpy's stable sort."""
    rng = np.random.default_rng(top % 1000)
    for n in (0, 1, 2, 50, 5000):
        x = rng.integers(0, top, n).astype(np.int64)
        if n > 10:
            x[: n // 3] = x[n // 3 : 2 * (n // 3)]  # many ties
        got = gm._stable_argsort(torch.from_numpy(x), top)
        assert np.array_equal(got.numpy(), np.argsort(x, kind="stable")), (top, n)


def test_a_move_is_a_flowgraph_whose_cut_is_the_move():
    """Each move's FlowGraph, solved by torchcut.maxflow, verifies; its cut value is the energy change."""
    g = torch.Generator().manual_seed(9)
    for U, V, edges, w in _move_problems():
        G = gm._GraphEnergy(U, V, edges, w)
        if not G.exact:
            continue
        f = torch.randint(0, G.L, (G.N,), generator=g)
        e0 = int(G.energy(f))
        for alpha in range(G.L):
            caps, source, sink, _ = G.expansion_moves(f, torch.tensor([alpha]))
            graph = G.graph(caps, source, sink)
            assert isinstance(graph, torchcut.FlowGraph) and graph.num_nodes == G.N
            r = torchcut.maxflow(graph)
            assert r.verify()
            take = ~r.mask  # [N] for a FlowGraph
            moved = torch.where(take, alpha, f)
            assert int(G.energy(moved)) == e0 + r.flow_value - int(sink.sum())
            # the minimum over every switch set (brute force) is what the cut found
            best = min(
                int(G.energy(torch.where(torch.tensor(x, dtype=torch.bool), alpha, f)))
                for x in itertools.product([0, 1], repeat=G.N)
            )
            assert int(G.energy(moved)) == best


# ---------------------------------------------------------------------------------------------- errors
def _ok():
    U = torch.tensor([[0, 1, 2], [2, 1, 0]])
    return U, 1 - torch.eye(2, dtype=torch.int64), torch.tensor([[0, 1], [1, 2]]), torch.tensor([1, 2])


@pytest.mark.parametrize(
    "change, match",
    [
        (
            dict(edges=torch.tensor([[0, 1], [1, 3]])),
            r"edges: expected node indices in \[0, 3\) .* got edges\[1, 1\] = 3",
        ),
        (dict(edges=torch.tensor([[0, 1], [-1, 2]])), r"got edges\[1, 0\] = -1"),
        (
            dict(edges=torch.tensor([[0, 1], [2, 2]])),
            r"edges: expected two different nodes per edge, got a self-loop edges\[1\] = \(2, 2\)",
        ),
        (dict(edges=torch.tensor([0, 1, 2])), r"edges: expected shape \[E, 2\]"),
        (
            dict(edge_weights=torch.tensor([1, -2])),
            r"edge_weights: expected non-negative weights, got edge_weights\[1\] = -2",
        ),
        (dict(edge_weights=torch.tensor([1.0, float("nan")])), r"edge_weights: expected finite values"),
        (dict(edge_weights=torch.tensor([1, 2, 3])), r"edge_weights: expected shape \[E\] = \(2,\)"),
        (dict(pairwise=torch.tensor([[0, 1], [2, 0]])), r"pairwise: expected a symmetric table"),
        (dict(pairwise=torch.tensor([[1, 1], [1, 1]])), r"pairwise: expected V\[a, a\] = 0"),
        (
            dict(pairwise=torch.ones(3, 3)),
            r"pairwise: expected shape \[L, L\] = \(2, 2\) or per-edge \[E, L, L\] = \(2, 2, 2\)",
        ),
        (dict(unary=torch.zeros(2, 3, 1)), r"unary: expected shape \[L, N\]"),
        (dict(init=torch.tensor([0, 1])), r"init: expected labels of shape \[N\] = \(3,\)"),
        (dict(init=torch.tensor([0, 1, 2])), r"init: expected labels in \[0, 1\]"),
        (dict(init=5), r"init: expected a label in \[0, 1\], got 5"),
        (
            dict(edge_weights=torch.ones(2, device="meta")),
            r"edge_weights: expected a tensor on cpu \(the unary's device\), got one on meta",
        ),
        (dict(edges=torch.tensor([[0, 1]], device="meta")), r"edges: expected a tensor on cpu"),
    ],
)
def test_bad_input_is_named(change, match):
    U, V, edges, w = _ok()
    args = dict(unary=U, pairwise=V, edges=edges, edge_weights=w)
    init = change.pop("init", None)
    args.update(change)
    with pytest.raises(ValueError, match=match):
        gm.expansion(args["unary"], args["pairwise"], args["edges"], args["edge_weights"], init=init)


def test_float_edges_are_a_type_error():
    U, V, _, _ = _ok()
    with pytest.raises(TypeError, match=r"edges: expected integer node indices, got tensor of dtype torch.float32"):
        gm.expansion(U, V, torch.tensor([[0.0, 1.0]]))


def test_non_metric_tables_are_refused_by_expansion_not_by_swap():
    U = torch.zeros(3, 4, dtype=torch.int64)
    edges = torch.tensor([[0, 1], [1, 2], [2, 3]])
    sq = torch.tensor([[0, 1, 4], [1, 0, 1], [4, 1, 0]])
    with pytest.raises(
        ValueError, match=r"pairwise: expected a metric, got V\[0, 2\] = 4 > V\[0, 1\] \+ V\[1, 2\] = 2"
    ):
        gm.expansion(U, sq, edges)
    with pytest.raises(ValueError, match=r"pairwise: expected a metric on every edge, got pairwise\[1, 0, 2\] = 4"):
        gm.expansion(U, torch.stack([sq.clamp(max=1), sq, sq.clamp(max=1)]), edges)
    assert gm.swap(U, sq, edges).tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError, match=r"pairwise: expected non-negative costs, got pairwise\[0, 0, 1\] = -1"):
        gm.swap(U, -sq.unsqueeze(0).expand(3, 3, 3), edges)


def test_grid_arguments_with_edges_are_refused():
    U, V, edges, w = _ok()
    with pytest.raises(ValueError, match=r"connectivity: applies to grid energies only"):
        torchcut.expansion(U, V, edges=edges, connectivity=4)
    with pytest.raises(
        ValueError, match=r"weights: applies to grid energies only; with edges, pass per-edge weights as edge_weights"
    ):
        torchcut.expansion(U, V, edges=edges, weights=w)
    with pytest.raises(ValueError, match=r"warm_start: not available"):
        torchcut.expansion(U, V, edges=edges, warm_start=True)
    with pytest.raises(ValueError, match=r"edges: expected an \[E, 2\] integer tensor"):
        torchcut.expansion(U, V, edge_weights=w)
    with pytest.raises(ValueError, match=r"schedule: expected one of"):
        torchcut.expansion(U, V, edges=edges, schedule="fast")


def test_integer_energies_that_could_overflow_are_refused():
    U = torch.tensor([[0, 2**61], [2**61, 0]])
    with pytest.raises(ValueError, match=r"unary: the energy of one labelling can reach .* 2\*\*62"):
        gm.expansion(U, 1 - torch.eye(2, dtype=torch.int64), [[0, 1]])


# ---------------------------------------------------------------------------------------------- GCO
def _rgg(n, seed, integer=True):
    rng = np.random.default_rng(seed)
    pos = rng.random((n, 2))
    d = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    r = np.sqrt(6 / (np.pi * n))
    e = np.argwhere(np.triu(d < r, 1))
    L = 5
    truth = np.clip((pos[:, 0] * L).astype(int), 0, L - 1)
    obs = np.clip(truth + rng.integers(-2, 3, n) * (rng.random(n) < 0.5), 0, L - 1)
    U = 10 * np.abs(np.arange(L)[None] - obs[:, None])
    w = rng.integers(2, 9, len(e))
    if not integer:
        U = U + rng.random(U.shape)
        w = w + rng.random(len(e))
    return e, w, U


@pytest.mark.parametrize("integer", [True, False])
def test_energies_match_or_beat_gco(integer):
    gco = pytest.importorskip("gco")
    ratios = []
    for seed in range(6):
        e, w, U = _rgg(400, seed, integer)
        L = U.shape[1]
        a = np.arange(L)
        for V in (1 - np.eye(L, dtype=np.int64), np.minimum(np.abs(a[:, None] - a[None]), 2)):
            if integer:
                lg = gco.cut_general_graph(
                    e.astype(np.int32), w.astype(np.int32), U.astype(np.int32), V.astype(np.int32), down_weight_factor=1
                )
            else:
                lg = gco.cut_general_graph(e.astype(np.int32), w, U, V.astype(np.float64))
            f = torchcut.expansion(
                torch.from_numpy(U.T.copy()),
                torch.from_numpy(V),
                edges=torch.from_numpy(e),
                edge_weights=torch.from_numpy(w),
            )
            mine = energies_np(U.T, V, e, w, f.numpy()[None])[0]
            theirs = energies_np(U.T, V, e, w, np.asarray(lg, dtype=np.int64)[None])[0]
            assert mine <= 1.01 * theirs
            ratios.append(mine / theirs)
    assert np.mean(ratios) <= 1.0


# ---------------------------------------------------------------------------------------------- CUDA
@pytest.mark.cuda
@pytest.mark.parametrize("schedule", ["sequential", "batched"])
def test_cuda_moves_reach_a_local_minimum_like_the_cpu(schedule):
    g = torch.Generator().manual_seed(6)
    for _ in range(10):
        U, V, edges, w = random_problem(g, "trunc")
        L, N = U.shape
        f, info = gm.expansion(U.cuda(), V.cuda(), edges.cuda(), w.cuda(), schedule=schedule, return_result=True)
        assert f.device.type == "cuda"
        f = f.cpu()
        assert info["energy"] == energies_np(U, V, edges, w, f[None])[0]
        assert energies_np(U, V, edges, w, all_moves(f, L, N, "expansion")).min() >= info["energy"]
    e, w, U = _rgg(3000, 0)
    Ut, Vt = torch.from_numpy(U.T.copy()), 1 - torch.eye(U.shape[1], dtype=torch.int64)
    et, wt = torch.from_numpy(e), torch.from_numpy(w)
    _, cpu = gm.expansion(Ut, Vt, et, wt, return_result=True)
    _, gpu = gm.expansion(Ut.cuda(), Vt.cuda(), et.cuda(), wt.cuda(), schedule=schedule, return_result=True)
    assert gpu["energy"] <= 1.01 * cpu["energy"]


def test_the_benchmark_script_runs_and_reports_every_case(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "graph_expansion.py"
    spec = importlib.util.spec_from_file_location("graph_expansion_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.main(["--sizes", "2e3", "--rag-sizes", "", "--repeat", "1", "--out", str(tmp_path)])
    assert [r["case"] for r in rows] == [
        "rgg-2e3 potts",
        "rgg-2e3 trunc-linear",
        "knn-2e3 potts",
        "knn-2e3 trunc-linear",
    ]
    for r in rows:  # the energies printed are those of the labels, evaluated exactly
        assert r["nodes"] == 2000 and r["ours_energy"] > 0
        if "gco_energy" in r:
            assert r["ratio"] <= 1.01
    assert (tmp_path / "graph_expansion.md").read_text().count("\n") == 2 + len(rows)
    assert "rgg-2e3 potts" in capsys.readouterr().out
