"""A pool of gloo processes on the loopback for the torchcut.distributed tests.

``Pool(world)`` starts ``world`` spawned processes that join one gloo group (127.0.0.1, a free port,
a 60 s timeout) and then serve cases: the parent sends a global grid network and how to split it,
each process solves its slab with :func:`torchcut.distributed.maxflow` and answers with its flow,
mask and certificate check, or with the error it raised. Starting processes once per test module
keeps each case at the cost of its solve.
"""

from __future__ import annotations

import queue
import socket

import numpy as np
import torch
import torch.multiprocessing as mp

TIMEOUT_S = int(__import__("os").environ.get("DIST_TIMEOUT", 120))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slab(x, axis, lo, hi, lead=0):
    """``x[..., lo:hi, ...]`` along spatial ``axis`` (``lead`` leading non-spatial dims)."""
    sl = [slice(None)] * x.ndim
    sl[lead + axis] = slice(lo, hi)
    return np.ascontiguousarray(x[tuple(sl)])


# deliberate faults, by name (cases travel to the processes pickled, so no lambdas)
_FAULTS = {
    "narrow": lambda t, dim, n: t.narrow(dim, 0, n),  # a different extent along dim
    "negate": lambda t: -t - 1,
    "float": lambda t: t.float(),
    "set": lambda t, value: value,  # replace the argument
}


def _part(case, rank):
    """This rank's arguments for distributed.maxflow, with the case's deliberate faults applied."""
    ax, cuts = case["axis"], case["cuts"]
    lo, hi = cuts[rank], cuts[rank + 1]
    args = dict(
        source=torch.from_numpy(slab(case["source"], ax, lo, hi)),
        sink=torch.from_numpy(slab(case["sink"], ax, lo, hi)),
        edges=torch.from_numpy(slab(case["edges"], ax, lo, hi, 1)),
        offsets=case["offsets"],
        reverse=None if case["reverse"] is None else torch.from_numpy(slab(case["reverse"], ax, lo, hi, 1)),
        axis=ax,
    )
    if case.get("start"):
        args["start"] = case["start"][rank]
    for key, value in case.get("fault", {}).get(rank, {}).items():
        args[key] = _FAULTS[value[0]](args[key], *value[1:])
    return args


def _serve(rank, world, port, inbox, outbox, backend="gloo"):
    import os

    import torch.distributed as dist

    from torchcut import distributed as tcd

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.set_num_threads(1)
    import datetime

    dev = torch.device("cpu")
    if backend == "nccl":  # one GPU per rank
        dev = torch.device("cuda", rank)
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=TIMEOUT_S))
    cpu = lambda t: t.cpu().numpy()  # noqa: E731
    while True:
        case = inbox.get()
        if case is None:
            break
        try:
            if case.get("kind") == "segment":
                ax, cuts = case["axis"], case["cuts"]
                lo, hi = cuts[rank], cuts[rank + 1]
                lead = case["image"].ndim - case["seeds"].ndim
                image = torch.from_numpy(slab(case["image"], ax, lo, hi, lead)).to(dev)
                seeds = torch.from_numpy(slab(case["seeds"], ax, lo, hi)).to(dev)
                if case.get("mask_only"):  # the path that solves in the energy's own tensors
                    mask = tcd.segment(image, seeds, axis=ax, **case.get("options", {}))
                    outbox.put((rank, "ok", dict(mask=cpu(mask))))
                    continue
                mask, r = tcd.segment(image, seeds, axis=ax, return_result=True, **case.get("options", {}))
                answer = dict(flow=r.flow_value, mask=cpu(mask), verified=r.verify(), stats=dict(r.stats))
                if case.get("graph"):  # the slab's network, for comparison with the whole volume's
                    answer.update(caps=cpu(r.graph.caps), source=cpu(r.graph.source), sink=cpu(r.graph.sink))
                outbox.put((rank, "ok", answer))
                continue
            tcd._slab_options = case.get("slab_options", [])  # CUDA grid options of the push-relabel's slabs
            args = {k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in _part(case, rank).items()}
            before = {k: v.clone() for k, v in args.items() if isinstance(v, torch.Tensor)}
            r = tcd.maxflow(**args)
            untouched = all(torch.equal(before[k], args[k]) for k in before)
            if case.get("tamper") == rank:  # break the certificate: one more unit on a border arc
                d = next(iter(r.ghost_residual))
                r.residual[0, d].select(case["axis"], 0 if d >= len(case["offsets"]) else -1).add_(1)
            outbox.put(
                (
                    rank,
                    "ok",
                    dict(
                        flow=r.flow_value,
                        mask=cpu(r.mask),
                        verified=r.verify(),
                        stats=dict(r.stats),
                        untouched=untouched,
                    ),
                )
            )
        except Exception as exc:  # reported to the parent, which checks type and message
            outbox.put((rank, "error", (type(exc).__name__, str(exc))))
    dist.destroy_process_group()


def one_rank_nccl(outbox):
    """The CUDA path in an NCCL group of one process (``test_cuda_one_rank_nccl...``):
    run in a spawned process so that a stuck NCCL call fails the test instead of hanging it. Answers
    ("ok", None) or ("fail", traceback) before the group is destroyed."""
    import traceback

    import torch.distributed as dist
    from oracles import pymaxflow_grid
    from test_distributed import make_case

    import torchcut

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        rng = np.random.default_rng(8)
        for shape, conn in (((20, 17, 15), 6), ((40, 33), 8)):
            case = make_case(rng, shape, conn, [0, shape[0]])
            args = [torch.from_numpy(case[k]).cuda() for k in ("source", "sink", "edges", "reverse")]
            r = torchcut.distributed.maxflow(*args[:3], case["offsets"], args[3])
            want = pymaxflow_grid(case["source"], case["sink"], case["edges"], case["offsets"], case["reverse"])
            assert r.flow_value == want, (shape, r.flow_value, want)
            assert r.mask.is_cuda and r.verify()
            g = torchcut.GridGraph(*args[:3], case["offsets"], args[3])
            assert torch.equal(r.mask, torchcut.maxflow(g).mask)
        # segment's backends and the slab options: the kernels (with options), torch ops, one device
        image = torch.from_numpy(rng.normal(0, 20, (24, 20, 18)).astype(np.float32)).cuda()
        image[6:18, 5:15, 4:14] += 100
        seeds = torch.zeros(24, 20, 18, dtype=torch.int64, device="cuda")
        seeds[12, 10, 9], seeds[0] = 1, 2
        want = torchcut.segment(image, seeds, ndim=3)
        tcd = torchcut.distributed
        for kw, kernels in (
            (dict(backend="cuda", rounds=8, repair=1, max_iter=5000), True),
            (dict(backend="reference"), False),
            (dict(ndim=3), True),
        ):
            mask, res = tcd.segment(image, seeds, return_result=True, **kw)
            assert torch.equal(mask, want), kw
            assert res.stats["kernels"] is kernels and res.verify(), kw
        outbox.put(("ok", None))
    except BaseException:  # reported to the test, which fails with it
        outbox.put(("fail", traceback.format_exc()))
    finally:
        dist.destroy_process_group()


class Pool:
    """``world`` processes serving cases (see the module docstring): gloo on CPU tensors, or NCCL with
    rank ``r`` on GPU ``r`` (``backend="nccl"``)."""

    def __init__(self, world: int, backend: str = "gloo"):
        ctx = mp.get_context("spawn")
        self.world = world
        self.outbox = ctx.Queue()
        self.inboxes = [ctx.Queue() for _ in range(world)]
        port = free_port()
        self.procs = [
            ctx.Process(target=_serve, args=(r, world, port, self.inboxes[r], self.outbox, backend), daemon=True)
            for r in range(world)
        ]
        for p in self.procs:
            p.start()

    def run(self, case) -> list:
        """Answers of all ranks, in rank order: ("ok", dict) or ("error", (type name, message))."""
        for q in self.inboxes:
            q.put(case)
        got = {}
        for _ in range(self.world):
            try:
                rank, kind, payload = self.outbox.get(timeout=TIMEOUT_S)
            except queue.Empty:
                raise AssertionError(
                    f"no answer within {TIMEOUT_S} s from ranks {sorted(set(range(self.world)) - set(got))}"
                ) from None
            got[rank] = (kind, payload)
        return [got[r] for r in range(self.world)]

    def close(self):
        for q in self.inboxes:
            q.put(None)
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
