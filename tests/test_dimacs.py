"""DIMACS reader and writer: format variants, round trips, compression, malformed input, speed."""

from __future__ import annotations

import bz2
import gzip
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import torchcut
from torchcut.dimacs import parse_dimacs

sys.path.insert(0, str(Path(__file__).resolve().parent))
import flow_cases as fc  # noqa: E402

TINY = "c tiny\np max 4 5\nn 1 s\nn 4 t\na 1 2 3\na 1 3 2\na 2 3 1\na 2 4 2\na 3 4 4\n"


def write(tmp_path, text, name="g.max", mode="plain"):
    p = tmp_path / name
    data = text.encode() if isinstance(text, str) else text
    if mode == "gz":
        data = gzip.compress(data)
    elif mode == "bz2":
        data = bz2.compress(data)
    p.write_bytes(data)
    return p


def same_graph(a, b):
    for name in ("row_ptr", "head", "tail", "rev", "caps", "source", "sink"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.num_nodes == b.num_nodes


def test_tiny(tmp_path):
    g = torchcut.read_dimacs(write(tmp_path, TINY))
    assert g.num_nodes == 2 and g.node_ids.tolist() == [2, 3] and g.terminal_ids == (1, 4)
    r = torchcut.maxflow(g)
    assert r.flow_value == 5 and r.verify()


@pytest.mark.parametrize("mode", ["plain", "gz", "bz2"])
def test_compressed(tmp_path, mode):
    suffix = {"plain": ".max", "gz": ".max.gz", "bz2": ".max.bz2"}[mode]
    g = torchcut.read_dimacs(write(tmp_path, TINY, "g" + suffix, mode))
    assert torchcut.maxflow(g).flow_value == 5


def test_crlf_comments_blank_lines_and_tabs(tmp_path):
    text = "c head\r\n\r\np max 4 5\r\nc between\r\nn 1 s\r\n\r\nn\t4\tt\r\na 1 2 3\r\nc x\r\na 1 3 2\r\na 2 3 1\r\n   \r\na 2 4 2\r\na 3 4 4"  # noqa: E501
    g = torchcut.read_dimacs(write(tmp_path, text))
    same_graph(g, torchcut.read_dimacs(write(tmp_path, TINY, "t.max")))


def test_folding_rules(tmp_path):
    # parallel arcs summed, antiparallel merged, arcs into the source / out of the sink dropped,
    # source -> sink added to both terminal capacities of the first node, self-loops dropped
    text = "p max 5 9\nn 2 s\nn 5 t\na 1 3 4\na 1 3 1\na 3 1 2\na 1 2 7\na 5 3 9\na 2 5 6\na 2 1 3\na 3 3 8\na 3 5 2\n"
    g = torchcut.read_dimacs(write(tmp_path, text))
    assert g.node_ids.tolist() == [1, 3, 4]
    assert g.source.tolist() == [[3 + 6, 0, 0]] and g.sink.tolist() == [[6, 2, 0]]
    u, v, c, rc = g.edges()
    assert (u.tolist(), v.tolist(), c.tolist(), rc.tolist()) == ([0], [1], [5], [2])
    net = (
        5,
        np.array([0, 0, 2, 0, 4, 1, 1, 2, 2]),
        np.array([2, 2, 0, 1, 2, 4, 0, 2, 4]),
        np.array([4, 1, 2, 7, 9, 6, 3, 8, 2]),
        1,
        4,
    )
    assert torchcut.maxflow(g).flow_value == fc.scipy_flow(*net) == 8


@pytest.mark.parametrize("mode", ["plain", "gz", "bz2"])
def test_round_trip_random(tmp_path, mode):
    rng = np.random.default_rng(1)
    for k in range(10):
        net = fc.uniform(rng, n=int(rng.integers(3, 30)))
        g = torchcut.FlowGraph.from_network(*net[1:4], net[4], net[5], net[0])
        path = tmp_path / f"r{k}.max{'' if mode == 'plain' else '.' + mode}"
        torchcut.write_dimacs(g, path)
        h = torchcut.read_dimacs(path)
        same_graph(g, h)
        assert h.node_ids.tolist() == (g.node_ids + 1).tolist()
        assert torchcut.maxflow(h).flow_value == fc.scipy_flow(*net)
        # and once more: reading what we wrote is a fixed point
        torchcut.write_dimacs(h, tmp_path / "again.max")
        same_graph(h, torchcut.read_dimacs(tmp_path / "again.max"))


def test_round_trip_from_edges_and_grid(tmp_path):
    g = torchcut.FlowGraph.from_edges([0, 1, 2], [1, 2, 0], [3, 0, 0], [0, 0, 0], source=[4, 0, 0], sink=[0, 0, 2])
    torchcut.write_dimacs(g, tmp_path / "e.max")
    same_graph(g, torchcut.read_dimacs(tmp_path / "e.max"))  # the zero pair survives
    grid = torchcut.GridGraph([[5, 0], [0, 0]], [[0, 0], [0, 4]], torch.full((2, 2, 2), 3), torchcut.grid_offsets(2, 4))
    torchcut.write_dimacs(grid, tmp_path / "grid.max")
    h = torchcut.read_dimacs(tmp_path / "grid.max")
    assert h.lattice_shape() == (2, 2)
    assert torchcut.maxflow(h).flow_value == torchcut.maxflow(grid).flow_value == 4


def test_parse_agrees_between_fast_and_checked_paths():
    from torchcut.dimacs import _parse_checked, _parse_fast

    rng = np.random.default_rng(2)
    n, m = 50, 400
    t, h, c = rng.integers(1, n + 1, m), rng.integers(1, n + 1, m), rng.integers(0, 10**12, m)
    text = f"p max {n} {m}\nn 3 s\nn 9 t\n" + "".join(f"a {a} {b} {x}\n" for a, b, x in zip(t, h, c))
    a, b = _parse_fast(text.encode()), _parse_checked(text.encode())
    assert a is not None
    for key in ("tail", "head", "cap"):
        assert np.array_equal(a[key], b[key])
    assert np.array_equal(a["cap"], c)


# ------------------------------------------------------------------ malformed input
MALFORMED = [
    ("n 1 s\nn 2 t\na 1 2 3\n", r"line 1: expected a problem line"),
    ("p max 3 1\nn 1 s\nn 3 t\na 1 2 3\np max 3 1\n", r"line 5: a second problem line"),
    ("n 1 s\np max 3 1\nn 3 t\na 1 2 3\n", r"line 1: expected the problem line .* before"),
    ("p max 3 x\nn 1 s\nn 3 t\n", r"line 1: expected non-negative integer NODES and ARCS"),
    ("p min 3 1\nn 1 s\nn 3 t\na 1 2 3\n", r"line 1: expected 'p max NODES ARCS'"),
    ("p max 3 2\nn 1 s\nn 3 t\na 1 2 3\n", r"line 1: the problem line declares 2 arcs, the file has 1"),
    ("p max 3 1\nn 1 s\nn 3 t\na 1 2 3\na 2 3 1\n", r"line 1: the problem line declares 1 arcs, the file has 2"),
    ("p max 3 2\nn 1 s\nn 3 t\na 1 2 3\na 2 4 1\n", r"line 5: node id 4 out of range 1..3"),
    ("p max 3 2\nn 1 s\nn 3 t\na 0 2 3\na 2 3 1\n", r"line 4: node id 0 out of range 1..3"),
    ("p max 3 2\nn 1 s\nn 3 t\r\na 1 2 -3\r\na 2 3 1\n", r"line 4: negative capacity -3"),
    ("p max 3 2\nn 1 s\nn 3 t\na 1 2 3\na 2 3 1.5\n", r"line 5: expected a non-negative integer CAPACITY, got '1.5'"),
    ("p max 3 1\nn 1 s\nn 3 t\na 1 x 3\n", r"line 4: expected a non-negative integer TO, got 'x'"),
    ("p max 3 1\nn 1 s\nn 3 t\na 1 2\n", r"line 4: expected 'a FROM TO CAPACITY' \(4 fields\), got 3"),
    ("p max 3 1\nn 1 s\nn 3 t\na 1 2 3 4\n", r"line 4: expected 'a FROM TO CAPACITY' \(4 fields\), got 5"),
    ("p max 3 1\nn 3 t\na 1 2 3\n", r"line 1: no 'n ID s' line"),
    ("p max 3 1\nn 1 s\na 1 2 3\n", r"line 1: no 'n ID t' line"),
    ("p max 3 1\nn 2 s\nn 2 t\na 1 2 3\n", r"line 3: source and sink are the same node \(2\)"),
    ("p max 3 1\nn 1 s\nn 2 s\nn 3 t\na 1 2 3\n", r"line 3: a second source"),
    ("p max 3 1\nn 1 s\nn 7 t\na 1 2 3\n", r"line 3: node id 7 out of range 1..3"),
    ("p max 3 1\nn 1 x\nn 3 t\na 1 2 3\n", r"line 2: expected 'n ID s' or 'n ID t'"),
    ("p max 3 1\nn 1 s\nn 3 t\nq 1 2 3\n", r"line 4: expected a line starting with 'c', 'p', 'n' or 'a', got 'q'"),
    ("p max 3 1\nn 1 s\nn 3 t\nab 1 2 3\n", r"line 4: expected a line starting with 'c', 'p', 'n' or 'a', got 'ab'"),
    ("p max 3 1\nn 1 s\nn 3 t\na 1 2 99999999999999999999\n", r"line 4: CAPACITY 99999999999999999999 is too large"),
    ("p max 2 0\nn 1 s\nn 2 t\n", r"line 1: expected at least 3 nodes"),
]


@pytest.mark.parametrize("text, match", MALFORMED)
def test_malformed(tmp_path, text, match):
    with pytest.raises(ValueError, match=match):
        torchcut.read_dimacs(write(tmp_path, text))


def test_malformed_in_a_large_file_names_the_line(tmp_path):
    m = 5000
    lines = [f"p max 100 {m}", "n 1 s", "n 100 t"] + [f"a {1 + k % 98} {2 + k % 98} {k}" for k in range(m)]
    lines[3 + 4321] = "a 5 6 seven"
    with pytest.raises(ValueError, match=r"line 4325: expected a non-negative integer CAPACITY, got 'seven'"):
        torchcut.read_dimacs(write(tmp_path, "\n".join(lines)))


def test_solution_files(tmp_path):
    assert torchcut.read_dimacs_solution(write(tmp_path, "c x\ns 186\n", "a.sol")) == 186
    assert torchcut.read_dimacs_solution(write(tmp_path, "s 7\r\n", "b.sol.gz", "gz")) == 7
    with pytest.raises(ValueError, match=r"line 2: expected an 's VALUE' line"):
        torchcut.read_dimacs_solution(write(tmp_path, "c nothing\n", "c.sol"))
    with pytest.raises(ValueError, match=r"line 1: expected a number after 's', got 'abc'"):
        torchcut.read_dimacs_solution(write(tmp_path, "s abc\n", "d.sol"))


def test_bvz_solutions_are_readable(shared_data):
    folder = shared_data / "maxflow" / "BVZ-tsukuba_sol"
    if not folder.is_dir():
        pytest.skip(f"{folder} not found")
    vals = {p.stem: torchcut.read_dimacs_solution(p) for p in folder.glob("*.sol")}
    assert vals["BVZ-tsukuba0"] == 34669 and vals["BVZ-tsukuba13"] == 0 and len(vals) == 16


def test_parse_speed_500k_arcs(tmp_path, capsys):
    """Prints the parse time of a synthetic file of 500k arcs (a benchmark, not a timed assert)."""
    rng = np.random.default_rng(0)
    n, m = 100_000, 500_000
    t, h, c = rng.integers(1, n + 1, m), rng.integers(1, n + 1, m), rng.integers(0, 100_000, m)
    from torchcut.dimacs import _format_rows

    body = _format_rows(b"a", [t, h, c])
    data = f"c synthetic\np max {n} {m}\nn 1 s\nn {n} t\n".encode() + body
    t0 = time.perf_counter()
    d = parse_dimacs(data)
    t1 = time.perf_counter()
    path = tmp_path / "big.max"
    path.write_bytes(data)
    t2 = time.perf_counter()
    g = torchcut.read_dimacs(path)
    t3 = time.perf_counter()
    assert np.array_equal(d["tail"], t) and np.array_equal(d["cap"], c) and g.num_nodes == n - 2
    with capsys.disabled():
        print(
            f"\n[dimacs speed] parse {m} arcs ({len(data) / 1e6:.1f} MB): {t1 - t0:.3f} s; "
            f"read_dimacs (parse + FlowGraph build): {t3 - t2:.3f} s"
        )


# ------------------------------------------------------------------ properties
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def dimacs_texts(draw):
    n = draw(st.integers(3, 10))
    m = draw(st.integers(0, 25))
    node = st.integers(1, n)
    arcs = draw(st.lists(st.tuples(node, node, st.integers(0, 10**6)), min_size=m, max_size=m))
    s = draw(node)
    t = draw(node.filter(lambda x: x != s))
    sep = draw(st.sampled_from([" ", "\t", "  "]))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    lines = [f"p{sep}max{sep}{n}{sep}{m}", f"n{sep}{s}{sep}s", f"n{sep}{t}{sep}t"]
    lines += [f"a{sep}{a}{sep}{b}{sep}{c}" for a, b, c in arcs]
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), "c a comment")
    return eol.join(lines) + eol * draw(st.integers(0, 2)), (n, arcs, s, t)


@settings(max_examples=60, deadline=None)
@given(dimacs_texts())
def test_property_parse_write_read(tmp_path_factory, case):
    text, (n, arcs, s, t) = case
    d = tmp_path_factory.mktemp("prop")
    p = d / "g.max"
    p.write_bytes(text.encode())
    g = torchcut.read_dimacs(p)
    net = (
        n,
        np.array([a for a, _, _ in arcs], dtype=np.int64) - 1,
        np.array([b for _, b, _ in arcs], dtype=np.int64) - 1,
        np.array([c for _, _, c in arcs], dtype=np.int64),
        s - 1,
        t - 1,
    )
    r = torchcut.maxflow(g)
    assert r.verify() and r.flow_value == fc.scipy_flow(*net)
    torchcut.write_dimacs(g, d / "w.max")
    same_graph(g, torchcut.read_dimacs(d / "w.max"))
