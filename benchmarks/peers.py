"""The peers of each case: other solvers of the same instance, where installed.

A peer is optional: a missing package is a note in the table, not an error. Grid peers are
PyMaxflow (Boykov-Kolmogorov) and thinhpf (Hochbaum's pseudoflow), build plus solve from the same
int32 arrays (through :mod:`benchmarks.cpu`); the BVZ moves and DIMACS instances have the same two
(DIMACS: PyMaxflow); whole expansions have PyMaxflow's ``aexpansion_grid`` (plain Potts only) and
GCO; GrabCut has ``cv2.grabCut``. :func:`run_peer` returns the median time and the peer's value:
flow values (which must equal torchcut's), or an energy / IoU (approximate methods: side by side).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from . import cases as C

#: the Python module each peer needs
MODULES = {"pymaxflow": "maxflow", "thinhpf": "thinhpf", "aexpansion": "maxflow", "gco": "gco", "cv2": "cv2"}


def missing(peer: str) -> str | None:
    """Why ``peer`` cannot run here (its module does not import), or None."""
    try:
        __import__(MODULES[peer])
    except ImportError as exc:
        return f"{peer} not installed ({exc})"
    return None


def _cpu():
    """benchmarks/cpu.py, whose peer functions the grid and BVZ cases use. Expected interface:
    ``solve_pymaxflow(offs, items)`` and ``solve_thinhpf(offs, items)`` (items: a list of int32
    ``(source, sink, edges [K, *shape])``), ``bvz_pymaxflow(moves)`` and ``bvz_thinhpf(moves)`` (moves:
    objects with ``u, v, cap, rev_cap, source, sink, num_nodes``); each returns ``(flows, masks or
    None, stats)``."""
    from . import cpu

    return cpu


def _solver(spec, x, peer):
    """``fn() -> value`` for ``peer`` on the case, or raise ValueError when it has no such peer."""
    kind = spec["kind"]
    if kind == "grid":
        offs, items = C.grid_items(x, spec.get("batch", 1))
        f = {"pymaxflow": "solve_pymaxflow", "thinhpf": "solve_thinhpf"}[peer]
        fn = getattr(_cpu(), f)
        return lambda: [int(round(v)) for v in fn(offs, items)[0]]
    if kind == "moves":
        moves = C.moves_of(x)
        fn = getattr(_cpu(), {"pymaxflow": "bvz_pymaxflow", "thinhpf": "bvz_thinhpf"}[peer])
        return lambda: [int(v) for v in fn(moves)[0]]
    if kind == "dimacs" and peer == "pymaxflow":
        from types import SimpleNamespace

        import torchcut

        from . import dimacs as D

        g = torchcut.read_dimacs(str(x["path"]))
        u, v, cf, cb = (t.numpy() for t in g.edges())
        m = SimpleNamespace(
            num_nodes=g.num_nodes,
            u=u,
            v=v,
            cap=cf,
            rev_cap=cb,
            source=g.source[0].numpy(),
            sink=g.sink[0].numpy().astype(np.int64),
        )
        return lambda: [D.pymaxflow_solve(m)[0]]
    if kind == "expansion" and peer in ("aexpansion", "gco"):
        import torch

        import torchcut

        from . import multilabel as ML

        U, V, W = x["unary"], x["pairwise"], x["weights"]

        def fn():
            lab = ML.aexp_labels(U, V) if peer == "aexpansion" else ML.gco_labels(U, V, W)
            e = torchcut.labeling_energy(torch.from_numpy(U), torch.from_numpy(V), lab, weights=torch.from_numpy(W))
            return {"energy": float(e)}

        return fn
    if kind == "grabcut" and peer == "cv2":
        from . import grabcut_quality as GQ

        items = C.grabcut_items(x)
        iters = spec["params"]["iterations"]

        def fn():
            ious = []
            for img, seeds, box, truth in items:
                m = GQ.run_cv2(np.ascontiguousarray(img[:, :, ::-1]), seeds, box, iters, "bg" if box is None else "fg")
                ious.append(round(C.iou(m, truth), 6))
            return {"iou": ious}

        return fn
    raise ValueError(f"no peer {peer!r} for {kind} cases")


def run_peer(spec, x, peer: str, repeats: int = 3, budget: float = 60.0) -> dict:
    """Time ``peer`` on a case: up to ``repeats`` calls, fewer when they pass ``budget`` seconds
    (the first call counts: these peers have no warm-up to pay). Returns ``peer``, ``median``,
    ``runs``, ``value``; or ``peer`` and ``skipped`` (why)."""
    why = missing(peer)
    if why:
        return {"peer": peer, "skipped": why}
    try:
        fn = _solver(spec, x, peer)
    except Exception as exc:  # noqa: BLE001 - a note in the table
        return {"peer": peer, "skipped": f"{type(exc).__name__}: {exc}"}
    times, value, t_start = [], None, time.perf_counter()
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - t_start + times[-1] > budget:
            break
    return {"peer": peer, "median": statistics.median(times), "runs": len(times), "value": value}


def peer_job(spec, npz_path, peer, repeats, budget, queue):
    """Child-process entry: run one peer on saved inputs and put the result on ``queue``."""
    with np.load(npz_path, allow_pickle=False) as z:
        x = {k: z[k] for k in z.files}
    try:
        queue.put(run_peer(spec, x, peer, repeats, budget))
    except Exception as exc:  # noqa: BLE001
        queue.put({"peer": peer, "skipped": f"{type(exc).__name__}: {exc}"})
