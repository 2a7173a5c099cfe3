"""Replaying fixed sequences of small GPU ops as CUDA graphs, cached by shape.

Steps such as GrabCut's colour-model update and the warm re-fit of its cuts are
hundreds of small kernels whose GPU work is well under the time Python takes to launch them one by
one. :class:`GraphCache` captures such a step as a CUDA graph the second time a key (its shapes and
constants) comes up, then replays it: the inputs are copied into the graph's own tensors (except an
input that is the same tensor as at the last replay and not modified since, by its version counter:
an energy's constant terms are copied once), the graph is replayed, and copies of its outputs are
handed back (the next replay overwrites them). The step must not modify its inputs.

The step must be a function of its tensor arguments and of constants that the key pins down; any
tensor it reaches otherwise would be baked into the graph. Steps that cannot be captured (a library
that reads values back) fall back to eager execution for that key.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import weakref

import torch

__all__ = ["GraphCache"]


class _Graphed:
    """``fn`` captured on static copies of ``inputs``: copy in, replay, copy out."""

    def __init__(self, fn, inputs, context):
        self.fn = fn
        self.inputs = [t.clone() for t in inputs]
        self.last = [(weakref.ref(t), t._version) for t in inputs]  # what each static input holds
        with context():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up (library handles, workspaces); its result is this call's
                self.warm = fn(*self.inputs)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.outputs = fn(*self.inputs)

    def __call__(self, inputs):
        if self.warm is not None:  # made on the side stream: hand out copies made on this one
            out, self.warm = tuple(t.clone() for t in self.warm), None
            return out
        for i, (dst, src) in enumerate(zip(self.inputs, inputs)):
            ref, version = self.last[i]
            if ref() is src and src._version == version:  # the same tensor, unmodified: already there
                continue
            dst.copy_(src)
            self.last[i] = (weakref.ref(src), src._version)
        self.graph.replay()
        return tuple(t.clone() for t in self.outputs)


class GraphCache:
    """At most ``entries`` captured steps, least recently used first out.

    Parameters
    ----------
    entries : int
        Graphs kept (each holds its inputs, outputs and a memory pool).
    context : callable, optional
        Returns a context manager entered around the warm-up and the capture (e.g. a library choice).

    Examples
    --------
    >>> import torch
    >>> from torchcut._cudagraph import GraphCache
    >>> cache = GraphCache(entries=2)
    >>> x = torch.arange(4.0)
    >>> cache.run(("double", tuple(x.shape)), lambda t: (2 * t,), (x,))[0].tolist()  # eager on the CPU
    [0.0, 2.0, 4.0, 6.0]
    """

    def __init__(self, entries: int, context=None):
        self.entries = entries
        self.context = context or contextlib.nullcontext
        self.graphs: collections.OrderedDict = collections.OrderedDict()
        self.seen: dict = {}
        self.replays = 0  # replays and captures so far (the tests read them)
        self.captures = 0
        self.lock = threading.Lock()

    def run(self, key, fn, inputs):
        """``fn(*inputs)`` (a tuple of tensors), replayed from a graph once ``key`` comes back on CUDA."""
        if inputs[0].device.type != "cuda" or torch.compiler.is_compiling() or torch.cuda.is_current_stream_capturing():
            return fn(*inputs)
        key = (inputs[0].device,) + tuple(key)
        with self.lock:  # one thread at a time: the graphs' inputs and outputs are shared
            g = self.graphs.get(key)
            if g is None:
                seen = self.seen.get(key, 0)
                if len(self.seen) > 1000:
                    self.seen.clear()
                self.seen[key] = seen + 1
                if seen < 1:  # capture once a key comes back: a key seen once costs no capture
                    return fn(*inputs)
                try:
                    g = _Graphed(fn, inputs, self.context)
                except Exception:  # not capturable here: stay eager for this key
                    self.seen[key] = -(1 << 30)
                    return fn(*inputs)
                self.captures += 1
                self.graphs[key] = g
                while len(self.graphs) > self.entries:
                    self.graphs.popitem(last=False)
            else:
                self.graphs.move_to_end(key)
                self.replays += 1
            return g(inputs)
