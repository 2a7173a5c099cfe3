"""Keyword checks for the public functions that pass ``**options`` on to a max-flow backend.

A misspelt keyword (``segment(image, seeds, lamda=2)``) would otherwise reach the backend and fail
there with a message about an internal function. :func:`check_options` names the public function,
lists what it takes and what the backend that would run takes, and suggests the nearest name.
"""

from __future__ import annotations

import difflib
import inspect

import torch

from ._backends import CSR, GRID

__all__ = ["check_options", "backend_options"]

# Renamed backend options: the old name still reaches the backend, which warns and takes the new one.
RENAMED_OPTIONS = {"max_rounds": "max_iter"}


def _keyword_names(fn) -> tuple:
    """The names ``fn`` takes by keyword (``**kwargs`` left out)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds)


def _all_backend_options(layout: str) -> dict:
    """Options of every backend of a layout, by backend name (nothing compiled)."""
    table = GRID if layout == "grid" else CSR
    return {b.name: b.options() for b in table.all()}


def backend_options(device, backend: str = "auto", layout: str = "grid") -> tuple:
    """The backend that would solve a graph on ``device`` and the options it takes.

    Parameters
    ----------
    device : torch.device or str
        Where the graph lives.
    backend : {"auto", "reference", "cpu", "cuda"}
        As for :func:`torchcut.maxflow`.
    layout : {"grid", "csr"}
        Grid graphs (:class:`torchcut.GridGraph`) or general ones (:class:`torchcut.FlowGraph`; their
        options are those of the general solver and, as lattice graphs go to the grid solver, the
        grid solver's).

    Returns
    -------
    (str, tuple of str)
        The backend's name and its option names.

    Examples
    --------
    >>> backend_options("cpu", "reference")
    ('reference', ('max_iter', 'relabel_period', 'on_relabel'))
    """
    grid = GRID(torch.device(device), backend)
    name, options = grid.name, grid.options()
    if layout == "csr":
        general = CSR(torch.device(device), backend).options()
        options = general + tuple(o for o in options if o not in general)
    return name, options


def check_options(fn, options: dict, device, backend: str = "auto", *, layout: str = "grid", also: tuple = ()) -> None:
    """Raise ``TypeError`` for a keyword that neither ``fn`` nor the backend that would run takes.

    Parameters
    ----------
    fn : callable
        The public function that received ``options`` as ``**options`` (named in the message).
    options : dict
        The keywords it did not take itself.
    device, backend, layout
        As for :func:`backend_options`: which backend would run.
    also : tuple of str
        Further keywords that are passed on and accepted (listed with the backend's).

    Examples
    --------
    >>> import torchcut
    >>> check_options(torchcut.segment, {"max_iter": 100}, "cpu", "reference")
    >>> check_options(torchcut.segment, {"lamda": 2.0}, "cpu", "reference")
    Traceback (most recent call last):
    ...
    TypeError: segment(): unexpected keyword argument 'lamda' (did you mean 'lam'?). ...
    """
    if not options:
        return
    name, accepted = backend_options(device, backend, layout)
    accepted = tuple(also) + accepted
    bad = [k for k in options if k not in accepted and RENAMED_OPTIONS.get(k) not in accepted]
    if not bad:
        return
    key = bad[0]
    own = _keyword_names(fn)
    title = f"{fn.__name__}()"
    everywhere = _all_backend_options("grid")
    if layout == "csr":
        everywhere = {b: everywhere[b] + opts for b, opts in _all_backend_options("csr").items()}
    known = RENAMED_OPTIONS.get(key, key)
    others = {b: opts for b, opts in everywhere.items() if b != name and known in opts}
    takes = ", ".join(accepted) if accepted else "no options"
    if others:
        raise TypeError(
            f"{title}: keyword argument {key!r} is an option of the {' and '.join(map(repr, others))} backend, "
            f"not of the {name!r} backend that runs here (backend={backend!r} on {torch.device(device).type}), "
            f"which takes {takes}"
        )
    close = difflib.get_close_matches(key, own + accepted, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise TypeError(
        f"{title}: unexpected keyword argument {key!r}{hint}. {title} takes {', '.join(own)}; further keywords "
        f"go to the max-flow backend, here {name!r} (backend={backend!r} on {torch.device(device).type}), which "
        f"takes {takes}"
    )


def device_of(x) -> torch.device:
    """The device of a tensor (or of the first of a list of them); the CPU for anything else.

    Examples
    --------
    >>> device_of([torch.zeros(2)]).type
    'cpu'
    """
    if isinstance(x, (list, tuple)) and x:
        x = x[0]
    return x.device if isinstance(x, torch.Tensor) else torch.device("cpu")
