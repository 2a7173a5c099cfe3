"""Copies of several tensors between the host and a GPU in one transfer.

A small solve on the other device costs its copies' fixed parts (an API call, a launch, a wait) more
than their bytes, so the tensors travel packed in one byte buffer: one copy each way. A graph moved
by ``FlowGraph.to`` keeps its tensors as views of such a buffer, so that moving them back is one span.
"""

from __future__ import annotations

import torch

__all__ = ["transfer", "span", "views", "padded", "FLOWGRAPH_HOST_FIELDS"]

#: The FlowGraph fields the compiled CPU solver reads: ``FlowGraph.to`` lays them out first in its one
#: buffer, in this order, and the small-graph route (``solvers._host``) copies them back as one span.
FLOWGRAPH_HOST_FIELDS = ("caps", "source", "sink", "row_ptr", "head", "rev")


def transfer(tensors, device: torch.device) -> list:
    """Copies of ``tensors`` on ``device`` through one byte buffer: one copy between the devices.

    Each tensor's bytes start at a multiple of 8 in the buffer, so every part can be viewed back as its
    dtype. A copy to the host lands in pinned memory and is waited for; a copy to the GPU is queued.
    Tensors that already lie in one storage in that layout (a previous transfer's) are copied as one
    span, with no gather on the source device. On one device type the copies are plain clones.

    Examples
    --------
    >>> import torch
    >>> a, b = transfer([torch.arange(3), torch.tensor([True, False])], torch.device("cpu"))  # clones here
    >>> a.tolist(), b.tolist()
    ([0, 1, 2], [True, False])
    >>> if torch.cuda.is_available():  # to the GPU: one buffer, the parts views of it
    ...     a, b = transfer([a, b], torch.device("cuda"))
    ...     assert span([a, b]) is not None
    """
    src = tensors[0].device
    if src.type == torch.device(device).type:  # no second device: plain copies
        return [t.clone() for t in tensors]
    whole, size, parts = span(tensors), 0, []
    for t in tensors:
        n = t.numel() * t.element_size()
        if whole is None:
            parts.append(t.contiguous().reshape(-1).view(torch.uint8))
            if n % 8:
                parts.append(torch.zeros(-n % 8, dtype=torch.uint8, device=src))
        size += padded(n)
    if device.type == "cpu":
        buf = (whole if whole is not None else torch.cat(parts)).to(device, non_blocking=True)
        if src.type == "cuda":
            torch.cuda.current_stream(src).synchronize()
    else:
        if whole is not None:
            buf = whole.to(device, non_blocking=True)
        else:
            host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
            torch.cat(parts, out=host)
            buf = host.to(device, non_blocking=True)
    return views(buf, tensors)


def padded(n: int) -> int:
    """``n`` bytes rounded up to a multiple of 8: where the next part of a transfer's buffer starts.

    Examples
    --------
    >>> padded(12), padded(16)
    (16, 16)
    """
    return n + (-n % 8)


def views(buf: torch.Tensor, like) -> list:
    """Views of the byte tensor ``buf`` as the tensors ``like`` in :func:`transfer`'s layout: each one's
    dtype and shape, its bytes from the next multiple of 8 (``buf`` may end before the last part's
    padding, as a span does).

    Examples
    --------
    >>> import torch
    >>> a, b = torch.arange(3, dtype=torch.int32), torch.tensor([True, False])
    >>> buf = torch.cat([a.view(torch.uint8), torch.zeros(4, dtype=torch.uint8), b.view(torch.uint8)])
    >>> [t.tolist() for t in views(buf, [a, b])]
    [[0, 1, 2], [True, False]]
    """
    out, at = [], 0
    for t in like:
        n = t.numel() * t.element_size()
        out.append(buf[at : at + n].view(t.dtype).view(t.shape))
        at += padded(n)
    return out


def span(tensors):
    """A byte view over ``tensors`` when they lie one after the other in one storage, each contiguous
    and starting at a multiple of 8 bytes after the last (as :func:`transfer` lays them out); else None.

    Examples
    --------
    >>> import torch
    >>> span([torch.arange(3), torch.arange(3)]) is None   # two storages
    True
    """
    first = tensors[0]
    if any(t.numel() == 0 for t in tensors):
        return None
    storage = first.untyped_storage()
    base = storage.data_ptr()
    at = first.data_ptr()
    if (at - base) % 8:
        return None
    start = at
    for t in tensors:
        if not t.is_contiguous() or t.data_ptr() != at or t.untyped_storage().data_ptr() != base:
            return None
        n = t.numel() * t.element_size()
        at += n + (-n % 8)
    end = min(at, base + storage.nbytes())
    return torch.empty(0, dtype=torch.uint8, device=first.device).set_(storage, start - base, (end - start,))
