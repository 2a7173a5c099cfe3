"""Read and write max-flow instances in DIMACS format (plain, ``.gz``, ``.bz2``) and ``.sol`` files.

The format::

    c a comment
    p max NODES ARCS
    n ID s
    n ID t
    a FROM TO CAPACITY

Node ids are 1-based. Lines may end in CRLF; blank lines and ``c`` lines are skipped.

How the network becomes a :class:`torchcut.FlowGraph`:

* arcs leaving the source become source capacities, arcs entering the sink sink capacities;
* an arc source -> sink adds its capacity to both terminal capacities of the first other node (which
  adds exactly that much to every cut, hence to the maximum flow);
* arcs entering the source or leaving the sink can carry no source-to-sink flow and are dropped, as
  are self-loops;
* parallel arcs are summed and antiparallel arcs merged into one pair;
* ``graph.node_ids`` keeps the DIMACS id of every node, ``graph.terminal_ids`` those of the terminals.

Malformed input raises ValueError naming the line number and the problem. The parser is vectorized
with numpy (no Python loop per arc): half a million arcs take a fraction of a second.
"""

from __future__ import annotations

import bz2
import gzip
import os
from pathlib import Path

import numpy as np
import torch

__all__ = ["read_dimacs", "write_dimacs", "read_dimacs_solution", "parse_dimacs"]

_MAX_DIGITS = 18  # every value of up to 18 digits fits int64


def _open_bytes(path) -> bytes:
    p = Path(os.fspath(path))
    with open(p, "rb") as f:
        magic = f.read(3)
    opener = gzip.open if magic[:2] == b"\x1f\x8b" else bz2.open if magic == b"BZh" else None
    if opener is None:
        return p.read_bytes()
    kind = "gzip" if opener is gzip.open else "bzip2"
    try:
        with opener(p, "rb") as f:
            return f.read()
    except EOFError as exc:  # a download or copy cut short
        raise ValueError(f"path: {p} is a truncated {kind} file ({exc}); download or copy it again") from None
    except OSError as exc:  # corrupt data (gzip.BadGzipFile, bz2's "Invalid data stream")
        raise ValueError(f"path: {p} is not a valid {kind} file ({exc})") from None


def _write_bytes(path, data: bytes) -> None:
    p = Path(os.fspath(path))
    if p.suffix == ".gz":
        with gzip.open(p, "wb", compresslevel=6) as f:
            f.write(data)
    elif p.suffix == ".bz2":
        with bz2.open(p, "wb") as f:
            f.write(data)
    else:
        p.write_bytes(data)


def _digits_value(buf: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """int64 value of the decimal tokens ``buf[start:end]`` (already checked: digits only, <= 18 long)."""
    length = end - start
    if length.size == 0:
        return np.zeros(0, dtype=np.int64)
    W = int(length.max())
    pad = np.concatenate((np.full(W, 48, dtype=np.uint8), buf))
    dt = np.int32 if W <= 9 else np.int64
    val = np.zeros(start.shape, dtype=dt)
    first = end - length  # right-aligned digit j of a token sits at end - W + j
    for j in range(W):
        pos = end - W + j
        d = pad[pos + W].astype(dt) - 48
        d[pos < first] = 0
        val *= 10
        val += d
    return val.astype(np.int64)


class _Lines:
    """Vectorized view of the lines and whitespace-separated tokens of a byte buffer."""

    def __init__(self, data: bytes):
        if not data.endswith(b"\n"):
            data = data + b"\n"
        self.buf = buf = np.frombuffer(data, dtype=np.uint8)
        nl = np.flatnonzero(buf == 10)
        self.line_start = np.concatenate(([0], nl[:-1] + 1))
        self.num_lines = nl.size
        space = (buf == 32) | ((buf >= 9) & (buf <= 13))
        prev_space = np.concatenate(([True], space[:-1]))
        next_space = np.concatenate((space[1:], [True]))
        self.tok_start = np.flatnonzero(~space & prev_space)
        self.tok_end = np.flatnonzero(~space & next_space) + 1
        self.tok_line = np.searchsorted(self.line_start, self.tok_start, side="right") - 1
        self.ntok = np.bincount(self.tok_line, minlength=self.num_lines)
        self.first_tok = np.searchsorted(self.tok_line, np.arange(self.num_lines))
        nondigit = (buf < 48) | (buf > 57)
        self._nd_cum = np.concatenate(([0], np.cumsum(nondigit, dtype=np.int64)))

    def token(self, i: int) -> str:
        return bytes(self.buf[self.tok_start[i] : self.tok_end[i]]).decode("latin-1")

    def line_tokens(self, line: int) -> list[str]:
        f = self.first_tok[line]
        return [self.token(i) for i in range(f, f + self.ntok[line])]

    def is_number(self, toks: np.ndarray) -> np.ndarray:
        """Tokens made of digits only and short enough for int64."""
        s, e = self.tok_start[toks], self.tok_end[toks]
        return (self._nd_cum[e] - self._nd_cum[s] == 0) & (e - s <= _MAX_DIGITS)

    def value(self, toks: np.ndarray) -> np.ndarray:
        return _digits_value(self.buf, self.tok_start[toks], self.tok_end[toks])


def _fail(line_index, msg):
    raise ValueError(f"line {int(line_index) + 1}: {msg}")


def parse_dimacs(data: bytes):
    """Parse DIMACS max-flow text into numpy arrays.

    Returns a dict with ``num_nodes``, ``num_arcs``, ``source``, ``sink`` (1-based ids) and
    ``tail``, ``head``, ``cap`` (int64 arrays, 1-based ids), in file order.

    Examples
    --------
    >>> d = parse_dimacs(b"p max 3 2\\nn 1 s\\nn 3 t\\na 1 2 5\\r\\na 2 3 4\\n")
    >>> d["num_nodes"], d["source"], d["sink"], d["cap"].tolist()
    (3, 1, 3, [5, 4])
    """
    fast = _parse_fast(data)
    if fast is not None:
        return fast
    return _parse_checked(data)


# byte classes
_SPACE = np.zeros(256, dtype=bool)
_SPACE[[9, 10, 11, 12, 13, 32]] = True
_A_OK = _SPACE.copy()
_A_OK[48:58] = True


def _parse_fast(data: bytes):
    """The common case in a few passes over the bytes; None whenever anything looks off.

    Valid input gives the same result as :func:`_parse_checked`, which also locates errors.
    """
    if not data.endswith(b"\n"):
        data = data + b"\n"
    buf = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(buf == 10)
    ls = np.concatenate(([0], nl[:-1] + 1))
    kind = buf[ls]
    is_a = kind == 97
    other = np.flatnonzero(~is_a & (kind != 99) & (kind != 10) & (kind != 13))
    # the few non-arc, non-comment lines: p, n (and anything odd -> checked path)
    n_nodes = n_arcs = source = sink = None
    p_line = None
    for i in other.tolist():
        tk = bytes(buf[ls[i] : nl[i]]).split()
        if (
            tk
            and tk[0] == b"p"
            and len(tk) == 4
            and tk[1] == b"max"
            and tk[2].isdigit()
            and tk[3].isdigit()
            and p_line is None
        ):
            n_nodes, n_arcs, p_line = int(tk[2]), int(tk[3]), i
        elif tk and tk[0] == b"n" and len(tk) == 3 and tk[1].isdigit() and tk[2] in (b"s", b"t") and p_line is not None:
            if tk[2] == b"s":
                if source is not None:
                    return None
                source = int(tk[1])
            else:
                if sink is not None:
                    return None
                sink = int(tk[1])
        else:
            return None
    if p_line is None or source is None or sink is None or source == sink or n_nodes < 3:
        return None
    if not (1 <= source <= n_nodes and 1 <= sink <= n_nodes):
        return None
    a_idx = np.flatnonzero(is_a)
    if a_idx.size != n_arcs or (a_idx.size and a_idx[0] < p_line):
        return None
    if a_idx.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return {"num_nodes": n_nodes, "num_arcs": 0, "source": source, "sink": sink, "tail": z, "head": z, "cap": z}
    a_start = ls[a_idx]
    if not _SPACE[buf[a_start + 1]].all():
        return None
    lens = np.diff(np.concatenate((ls, [buf.size])))
    in_a = np.repeat(is_a, lens)
    in_a[a_start] = False  # the 'a' itself
    if (in_a & ~_A_OK[buf]).any():
        return None
    txt = np.where(in_a, buf, np.uint8(32))
    # token starts inside arc lines: 3 per line, at most 18 digits each
    sp = _SPACE[txt]
    start = ~sp[1:] & sp[:-1]
    starts = np.flatnonzero(start) + 1
    if starts.size != 3 * a_idx.size:
        return None
    per_line = np.add.reduceat(start, np.minimum(ls, start.size - 1), dtype=np.int32)
    if (per_line[a_idx] != 3).any():
        return None
    ends = np.flatnonzero(~sp[:-1] & sp[1:]) + 1
    if ends.size != starts.size or (ends - starts).max() > _MAX_DIGITS:
        return None
    vals = _digits_value(txt, starts, ends).reshape(-1, 3)
    tail, head, cap = vals[:, 0], vals[:, 1], vals[:, 2]
    if ((tail < 1) | (tail > n_nodes) | (head < 1) | (head > n_nodes)).any():
        return None
    return {
        "num_nodes": n_nodes,
        "num_arcs": n_arcs,
        "source": source,
        "sink": sink,
        "tail": np.ascontiguousarray(tail),
        "head": np.ascontiguousarray(head),
        "cap": np.ascontiguousarray(cap),
    }


def _parse_checked(data: bytes):
    """Token-by-token (still vectorized) parse that names the first bad line."""
    L = _Lines(data)
    has_tok = L.ntok > 0
    kind = np.zeros(L.num_lines, dtype=np.uint8)
    ft = L.first_tok[has_tok]
    kind[has_tok] = L.buf[L.tok_start[ft]]
    first_len = np.zeros(L.num_lines, dtype=np.int64)
    first_len[has_tok] = L.tok_end[ft] - L.tok_start[ft]
    comment = kind == ord("c")
    content = has_tok & ~comment
    bad_kind = content & (((kind != ord("p")) & (kind != ord("n")) & (kind != ord("a"))) | (first_len != 1))
    if bad_kind.any():
        i = int(np.argmax(bad_kind))
        _fail(i, f"expected a line starting with 'c', 'p', 'n' or 'a', got {L.line_tokens(i)[0]!r}")

    p_lines = np.flatnonzero(content & (kind == ord("p")))
    if p_lines.size == 0:
        raise ValueError("line 1: expected a problem line 'p max NODES ARCS', found none in the file")
    pl = int(p_lines[0])
    if p_lines.size > 1:
        _fail(p_lines[1], f"a second problem line (the first is line {pl + 1})")
    early = np.flatnonzero(content[:pl])
    if early.size:
        _fail(early[0], "expected the problem line 'p max NODES ARCS' before any 'n' or 'a' line")
    pt = L.line_tokens(pl)
    if len(pt) != 4 or pt[1] != "max":
        _fail(pl, f"expected 'p max NODES ARCS', got {' '.join(pt)!r}")
    try:
        n_nodes, n_arcs = int(pt[2]), int(pt[3])
        if n_nodes < 0 or n_arcs < 0 or not (pt[2].isdigit() and pt[3].isdigit()):
            raise ValueError
    except ValueError:
        _fail(pl, f"expected non-negative integer NODES and ARCS, got {pt[2]!r} and {pt[3]!r}")

    source = sink = None
    s_line = t_line = None
    for i in np.flatnonzero(content & (kind == ord("n"))):
        tk = L.line_tokens(int(i))
        if len(tk) != 3 or tk[2] not in ("s", "t"):
            _fail(i, f"expected 'n ID s' or 'n ID t', got {' '.join(tk)!r}")
        if not tk[1].isdigit():
            _fail(i, f"expected an integer node id, got {tk[1]!r}")
        nid = int(tk[1])
        if not 1 <= nid <= n_nodes:
            _fail(i, f"node id {nid} out of range 1..{n_nodes}")
        if tk[2] == "s":
            if source is not None:
                _fail(i, f"a second source (the first, node {source}, is on line {s_line + 1})")
            source, s_line = nid, int(i)
        else:
            if sink is not None:
                _fail(i, f"a second sink (the first, node {sink}, is on line {t_line + 1})")
            sink, t_line = nid, int(i)

    a_lines = np.flatnonzero(content & (kind == ord("a")))
    if a_lines.size:
        wrong = L.ntok[a_lines] != 4
        if wrong.any():
            i = int(a_lines[np.argmax(wrong)])
            _fail(i, f"expected 'a FROM TO CAPACITY' (4 fields), got {L.ntok[i]} field(s)")
        f0 = L.first_tok[a_lines]
        toks = np.stack([f0 + 1, f0 + 2, f0 + 3])  # [3, M]
        ok = L.is_number(toks.reshape(-1)).reshape(3, -1)
        if not ok.all():
            col, k = np.unravel_index(int(np.argmax(~ok.reshape(-1))), ok.shape)
            i = int(a_lines[k])
            tok = L.token(int(toks[col, k]))
            what = ("FROM", "TO", "CAPACITY")[col]
            if col == 2 and tok.startswith("-") and tok[1:].isdigit():
                _fail(i, f"negative capacity {tok}")
            if tok.isdigit():
                _fail(i, f"{what} {tok} is too large (more than {_MAX_DIGITS} digits)")
            _fail(i, f"expected a non-negative integer {what}, got {tok!r}")
        vals = L.value(toks.reshape(-1)).reshape(3, -1)
        tail, head, cap = vals[0], vals[1], vals[2]
        out = (tail < 1) | (tail > n_nodes) | (head < 1) | (head > n_nodes)
        if out.any():
            k = int(np.argmax(out))
            bad = tail[k] if not 1 <= tail[k] <= n_nodes else head[k]
            _fail(a_lines[k], f"node id {bad} out of range 1..{n_nodes}")
    else:
        tail = head = cap = np.zeros(0, dtype=np.int64)
    if a_lines.size != n_arcs:
        _fail(pl, f"the problem line declares {n_arcs} arcs, the file has {a_lines.size} 'a' lines")
    if source is None or sink is None:
        _fail(
            pl,
            f"no 'n ID {'s' if source is None else 't'}' line: the {'source' if source is None else 'sink'} is not given",
        )
    if source == sink:
        _fail(t_line if t_line > s_line else s_line, f"source and sink are the same node ({source})")
    if n_nodes < 3:
        _fail(pl, f"expected at least 3 nodes (source, sink and one more), got {n_nodes}")
    return {
        "num_nodes": n_nodes,
        "num_arcs": n_arcs,
        "source": source,
        "sink": sink,
        "tail": tail,
        "head": head,
        "cap": cap,
    }


def read_dimacs(path, *, device=None):
    """Read a DIMACS max-flow file (plain, ``.gz`` or ``.bz2``, detected from the content).

    Parameters
    ----------
    path : str or path-like
    device : torch device, optional
        Where the graph lives (default CPU).

    Returns
    -------
    FlowGraph
        With ``node_ids`` (1-based DIMACS ids of the non-terminal nodes) and ``terminal_ids``.

    Raises
    ------
    ValueError
        Malformed input: the message starts with ``line K:`` and names the problem.

    Examples
    --------
    >>> import tempfile, os, torchcut
    >>> path = os.path.join(tempfile.mkdtemp(), "tiny.max")
    >>> _ = open(path, "w").write("p max 4 4\\nn 1 s\\nn 4 t\\na 1 2 3\\na 2 3 2\\na 3 4 5\\na 1 3 1\\n")
    >>> g = torchcut.read_dimacs(path)
    >>> g.num_nodes, g.node_ids.tolist(), torchcut.maxflow(g).flow_value
    (2, [2, 3], 3)
    """
    from .graph import FlowGraph

    d = parse_dimacs(_open_bytes(path))
    tail = torch.from_numpy(d["tail"] - 1)
    head = torch.from_numpy(d["head"] - 1)
    cap = torch.from_numpy(d["cap"])
    g = FlowGraph.from_network(tail, head, cap, d["source"] - 1, d["sink"] - 1, d["num_nodes"])
    g.node_ids = g.node_ids + 1
    g.terminal_ids = (d["source"], d["sink"])
    g.id_base = 1
    if device is not None:
        g = g.to(device)
    return g


def _format_ints(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decimal digits of non-negative int64 ``x``: a ``[n, W]`` uint8 matrix, right-aligned, 0 = unused."""
    x = np.asarray(x, dtype=np.int64)
    pw = 10 ** np.arange(19, dtype=np.int64)[::-1]  # 10^18 .. 10^0
    nd = np.maximum(1, np.searchsorted(10 ** np.arange(1, 19, dtype=np.int64), x, side="right") + 1)
    W = int(nd.max()) if x.size else 1
    digits = (x[:, None] // pw[None, 19 - W :]) % 10 + 48
    col = np.arange(W)[None, :]
    return np.where(col >= W - nd[:, None], digits, 0).astype(np.uint8), nd


def _format_rows(prefix: bytes, cols: list[np.ndarray]) -> bytes:
    """Lines ``prefix c0 c1 ...`` for integer columns, vectorized."""
    n = cols[0].size if cols else 0
    if n == 0:
        return b""
    parts = [np.broadcast_to(np.frombuffer(prefix, dtype=np.uint8), (n, len(prefix)))]
    for _k, c in enumerate(cols):
        parts.append(np.full((n, 1), 32, np.uint8))
        parts.append(_format_ints(c)[0])
    parts.append(np.full((n, 1), 10, np.uint8))
    m = np.concatenate(parts, axis=1)
    return m[m != 0].tobytes()


def write_dimacs(graph, path, *, comment: str | None = None) -> None:
    """Write a :class:`torchcut.FlowGraph` (or a lattice :class:`torchcut.GridGraph`) as DIMACS.

    Node ids: the graph's ``node_ids``/``terminal_ids`` when it has them (a graph read from DIMACS is
    written back with its own ids), else source = 1, sink = 2, node ``p`` = ``p + 3`` (the BVZ
    layout). Terminal capacities become arcs from the source and into the sink; arcs of zero capacity
    are left out (a pair that is zero both ways is written as one zero arc). ``.gz`` and ``.bz2``
    suffixes compress. Float graphs are written in their quantized
    integer units.

    Examples
    --------
    >>> import tempfile, os, torchcut
    >>> g = torchcut.FlowGraph.from_edges([0], [1], [4], [1], source=[3, 0], sink=[0, 5])
    >>> path = os.path.join(tempfile.mkdtemp(), "g.max")
    >>> torchcut.write_dimacs(g, path)
    >>> print(open(path).read().strip())
    p max 4 4
    n 1 s
    n 2 t
    a 1 3 3
    a 4 2 5
    a 3 4 4
    a 4 3 1
    >>> torchcut.maxflow(torchcut.read_dimacs(path)).flow_value
    3
    """
    from .graph import FlowGraph
    from .grid import GridGraph

    if isinstance(graph, GridGraph):
        graph = _grid_to_flowgraph(graph)
    if not isinstance(graph, FlowGraph):
        raise TypeError(f"graph: expected a torchcut.FlowGraph or GridGraph, got {type(graph).__name__}")
    N = graph.num_nodes
    if graph.node_ids is not None and graph.terminal_ids is not None:
        base = 1 - getattr(graph, "id_base", 1)  # from_network ids are 0-based
        ids = graph.node_ids.cpu().numpy().astype(np.int64) + base
        s_id, t_id = (int(x) + base for x in graph.terminal_ids)
        n_total = int(max(ids.max(initial=0), s_id, t_id))
    else:
        ids = np.arange(N, dtype=np.int64) + 3
        s_id, t_id = 1, 2
        n_total = N + 2
    src = graph.source[0].cpu().numpy().astype(np.int64)
    snk = graph.sink[0].cpu().numpy().astype(np.int64)
    u, v, cf, cb = (t.cpu().numpy() for t in graph.edges())
    ks, kt = np.flatnonzero(src > 0), np.flatnonzero(snk > 0)
    arc_t = np.concatenate([ids[u], ids[v]])
    arc_h = np.concatenate([ids[v], ids[u]])
    arc_c = np.concatenate([cf, cb])
    # pair order: forward then backward of each pair, adjacent
    M = u.size
    order = np.stack([np.arange(M), np.arange(M) + M], axis=1).reshape(-1)
    arc_t, arc_h, arc_c = arc_t[order], arc_h[order], arc_c[order]
    # zero arcs are left out, except one arc of a pair that is zero both ways (kept for round trips)
    both_zero = np.repeat((cf == 0) & (cb == 0), 2) & np.tile([True, False], M)
    nz = (arc_c > 0) | both_zero
    arc_t, arc_h, arc_c = arc_t[nz], arc_h[nz], arc_c[nz]
    n_arcs = ks.size + kt.size + arc_t.size
    head = []
    if comment:
        head += [f"c {line}" for line in comment.splitlines()]
    head += [f"p max {n_total} {n_arcs}", f"n {s_id} s", f"n {t_id} t"]
    body = (
        _format_rows(b"a", [np.full(ks.size, s_id), ids[ks], src[ks]])
        + _format_rows(b"a", [ids[kt], np.full(kt.size, t_id), snk[kt]])
        + _format_rows(b"a", [arc_t, arc_h, arc_c])
    )
    _write_bytes(path, ("\n".join(head) + "\n").encode() + body)


def _grid_to_flowgraph(grid):
    """A 2D 4-connected single grid as a FlowGraph (for writing)."""
    from .graph import FlowGraph

    if grid.batched or grid.ndim != 2 or set(grid.offsets) - {(0, 1), (1, 0)}:
        raise ValueError("graph: expected an unbatched 2D GridGraph with offsets (0, 1) and (1, 0)")
    H, W = grid.shape
    N = H * W
    node = torch.arange(N, device=grid.device).view(H, W)
    us, vs, cf, cb = [], [], [], []
    K = len(grid.offsets)
    for k, o in enumerate(grid.offsets):
        sl = (slice(None), slice(0, W - 1)) if o == (0, 1) else (slice(0, H - 1), slice(None))
        p = node[sl].reshape(-1)
        q = p + (1 if o == (0, 1) else W)
        us.append(p)
        vs.append(q)
        cf.append(grid.caps[0, k].reshape(-1)[p].to(torch.int64))
        cb.append(grid.caps[0, K + k].reshape(-1)[q].to(torch.int64))
    return FlowGraph.from_edges(
        torch.cat(us),
        torch.cat(vs),
        torch.cat(cf),
        torch.cat(cb),
        source=grid.source.reshape(-1),
        sink=grid.sink.reshape(-1).to(torch.int64),
        num_nodes=N,
    )


def read_dimacs_solution(path) -> int:
    """The flow value of a DIMACS solution file (its ``s VALUE`` line).

    Examples
    --------
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.sol")
    >>> _ = open(path, "w").write("c Flow value\\ns 34669\\n")
    >>> read_dimacs_solution(path)
    34669
    """
    text = _open_bytes(path).decode("latin-1")
    for k, line in enumerate(text.splitlines()):
        tk = line.split()
        if tk and tk[0] == "s":
            if len(tk) != 2:
                raise ValueError(f"line {k + 1}: expected 's VALUE', got {line.strip()!r}")
            try:
                return int(tk[1])
            except ValueError:
                try:
                    val = float(tk[1])
                except ValueError:
                    raise ValueError(f"line {k + 1}: expected a number after 's', got {tk[1]!r}") from None
                return int(val) if val.is_integer() else val
    raise ValueError(f"line {len(text.splitlines()) + 1}: expected an 's VALUE' line, found none")
