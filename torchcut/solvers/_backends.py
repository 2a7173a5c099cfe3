"""The backend table: every max-flow backend, per graph layout, as an object with one interface.

A :class:`GridBackend` solves :class:`torchcut.GridGraph` layouts, a :class:`CsrBackend` solves
:class:`torchcut.FlowGraph` layouts. Each names its backend (what ``backend=`` says), the device type it
runs on, why it cannot run (:meth:`Backend.load_error`) and the options it takes, and calls the module
that implements it: :mod:`~torchcut.solvers.reference` / :mod:`~torchcut.solvers.csr_reference` (the
specification, any device), :mod:`~torchcut.solvers.cpu` (compiled, CPU) and
:mod:`~torchcut.solvers.cuda` / :mod:`~torchcut.solvers.cuda_csr` (compiled, CUDA).

:data:`GRID` and :data:`CSR` pick one for a device and a ``backend`` argument. This module imports only
the backend modules, so every other module of the package may import it.
"""

from __future__ import annotations

import inspect
import warnings

import torch

from . import cpu, csr_reference, cuda, cuda_csr, reference

__all__ = ["BACKENDS", "Backend", "GridBackend", "CsrBackend", "BackendTable", "GRID", "CSR"]

BACKENDS = ("auto", "reference", "cpu", "cuda")

# Arguments of the layouts' solve functions, left out when their keywords are read as options.
_LAYOUT_ARGS = frozenset({"row_ptr", "head", "tail", "rev", "caps", "excess", "sink", "offsets"})


def keyword_options(fn) -> tuple:
    """The options ``fn`` takes by keyword, the layout's own arguments and ``**kwargs`` left out.

    Examples
    --------
    >>> keyword_options(reference.solve_grid)
    ('max_iter', 'relabel_period', 'on_relabel')
    """
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(
        p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds and p.name not in _LAYOUT_ARGS
    )


class Backend:
    """One max-flow backend of one graph layout.

    Attributes
    ----------
    name : str
        What ``backend=`` calls it: "reference", "cpu" or "cuda".
    device_type : str or None
        The device type it runs on; None for the reference, which runs on any.
    what : str
        Its name in warnings and errors.
    """

    name: str = ""
    device_type: str | None = None
    what: str = ""

    def load_error(self) -> str | None:
        """Why this backend cannot run here, or None when it can (the reference always can)."""
        return None

    def options(self) -> tuple:
        """The names of the options it takes."""
        raise NotImplementedError

    def renamed_options(self) -> dict:
        """Former option names it still accepts (with a warning), mapped to the current ones."""
        return {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class GridBackend(Backend):
    """A solver of grid networks (the layout of :mod:`torchcut.grid`).

    Every grid backend solves in place (:meth:`solve_grid`); one that reads the graph and writes its
    results into new tensors instead (``new_tensors``) also has :meth:`solve_graph`, which the
    dispatcher then calls, with no copy or netting of the graph's tensors.
    """

    new_tensors: bool = False

    def solve_grid(self, caps, excess, sink, offsets, **options):
        """Maximum flow in place on netted terminals: ``(mask, stats)`` (see :func:`reference.solve_grid`)."""
        raise NotImplementedError

    def solve_graph(self, graph, **options):
        """Maximum flow of a GridGraph into new tensors: ``(mask, residual, excess, sink, stats)``."""
        raise NotImplementedError(f"the {self.name!r} grid backend solves in place")

    def solve_mask(self, graph, **options):
        """The source side of a GridGraph's minimum cut alone, into a new tensor: ``(mask, stats)`` (the
        ``new_tensors`` backends; the others solve in place and give the mask from that)."""
        raise NotImplementedError(f"the {self.name!r} grid backend solves in place")


class CsrBackend(Backend):
    """A solver of general networks (the CSR layout of :mod:`torchcut.graph`), in place.

    ``route_lattices``: whether FlowGraphs that are 2D lattices of at least ``lattice_min_nodes`` nodes go
    to the grid solver when the caller leaves it open (the grid solver is the faster one).
    """

    route_lattices: bool = True
    lattice_min_nodes: int = 0

    def solve_csr(self, row_ptr, head, tail, rev, caps, excess, sink, **options):
        """Maximum flow in place: ``(mask, stats)`` (see :func:`csr_reference.solve_csr`)."""
        raise NotImplementedError

    def solve_graph(self, row_ptr, head, rev, caps, source, sink):
        """Maximum flow of a FlowGraph's tensors, left as they are, in one call: ``(flows, mask, residual,
        source_flow, sink_flow, stats)``, or None where the backend has no such call (the caller then
        solves copies in place with :meth:`solve_csr`)."""
        return None


class ReferenceGrid(GridBackend):
    name, what = "reference", "reference push-relabel"

    def options(self):
        return keyword_options(reference.solve_grid)

    def renamed_options(self):
        return dict(getattr(reference.solve_grid, "__renamed__", {}))

    def solve_grid(self, caps, excess, sink, offsets, **options):
        return reference.solve_grid(caps, excess, sink, offsets, **options)


class CpuGrid(GridBackend):
    name, device_type, what, new_tensors = "cpu", "cpu", "compiled CPU solver", True

    def load_error(self):
        return cpu.load_error()

    def options(self):
        return keyword_options(cpu.solve_grid)

    def solve_grid(self, caps, excess, sink, offsets, **options):
        return cpu.solve_grid(caps, excess, sink, offsets, **options)

    def solve_graph(self, graph, **options):
        return cpu.solve_grid_graph(graph, **options)

    def solve_mask(self, graph, **options):
        return cpu.solve_grid_mask(graph, **options)


class CudaGrid(GridBackend):
    name, device_type, what = "cuda", "cuda", "CUDA solver"

    def load_error(self):
        return cuda.load_error()

    def options(self):
        return tuple(cuda.OPTIONS)

    def solve_grid(self, caps, excess, sink, offsets, **options):
        return cuda.solve_grid(caps, excess, sink, offsets, **options)


class ReferenceCsr(CsrBackend):
    name, what = "reference", "reference push-relabel"

    def options(self):
        return keyword_options(csr_reference.solve_csr)

    def renamed_options(self):
        return dict(getattr(csr_reference.solve_csr, "__renamed__", {}))

    def solve_csr(self, row_ptr, head, tail, rev, caps, excess, sink, **options):
        return csr_reference.solve_csr(row_ptr, head, tail, rev, caps, excess, sink, **options)


class CpuCsr(CsrBackend):
    # FlowGraph lattices go to the grid solver from 2**15 nodes: its solve takes ~0.75x the CSR solve's
    # time (implicit neighbours, the ranges of a cut grid) and the conversion ~2 ms at 1e5 nodes (compiled:
    # lattice_grid, lattice_residual); below, the route's fixed ~0.2 ms outweighs it (docs/performance.md).
    name, device_type, what = "cpu", "cpu", "compiled CPU solver"
    lattice_min_nodes = 1 << 15

    def load_error(self):
        return cpu.load_error()

    def options(self):
        return keyword_options(cpu.solve_csr)

    def solve_csr(self, row_ptr, head, tail, rev, caps, excess, sink, **options):
        return cpu.solve_csr(row_ptr, head, tail, rev, caps, excess, sink, **options)

    def solve_graph(self, row_ptr, head, rev, caps, source, sink):
        return cpu.solve_graph(row_ptr, head, rev, caps, source, sink)


class CudaCsr(CsrBackend):
    name, device_type, what = "cuda", "cuda", "CUDA CSR extension"

    def load_error(self):
        return cuda_csr.load_error()

    def options(self):
        return keyword_options(cuda_csr.solve_csr)

    def solve_csr(self, row_ptr, head, tail, rev, caps, excess, sink, **options):
        return cuda_csr.solve_csr(row_ptr, head, tail, rev, caps, excess, sink, **options)


class BackendTable:
    """The backends of one layout, and the choice of one for a device and a ``backend`` argument.

    ``auto`` takes the compiled backend of the graph's device type when it loads, and otherwise falls
    back to the reference with one RuntimeWarning per process (per table and device type); ``cuda`` and
    ``cpu`` raise instead. Other devices take the reference.

    Examples
    --------
    >>> GRID(torch.device("cpu"), "reference").name
    'reference'
    >>> GRID(torch.device("cpu"), "cpu").device_type
    'cpu'
    """

    def __init__(self, reference: Backend, *compiled: Backend):
        self.reference = reference
        self.compiled = {b.device_type: b for b in compiled}
        self.warned: set[str] = set()

    def all(self) -> tuple:
        """Every backend of the table, the reference first."""
        return (self.reference,) + tuple(self.compiled.values())

    def _compiled(self, kind: str, required: bool) -> Backend:
        backend = self.compiled[kind]
        err = backend.load_error()
        if err is None:
            return backend
        if required:
            raise RuntimeError(f"backend={kind!r}: the {backend.what} is unavailable: {err}")
        if kind not in self.warned:
            warnings.warn(
                f"torchcut: {backend.what} unavailable ({err}); using the reference push-relabel in torch ops, "
                "which is much slower. Set TORCHCUT_VERBOSE=1 to see the compiler's log.",
                RuntimeWarning,
                stacklevel=4,
            )
            self.warned.add(kind)
        return self.reference

    def __call__(self, device: torch.device, backend: str) -> Backend:
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        if backend == "reference":
            return self.reference
        if backend in ("cuda", "cpu"):
            if device.type != backend:
                where = "a CUDA device" if backend == "cuda" else "the CPU"
                raise ValueError(f"backend={backend!r}: expected a graph on {where}, got one on {device}")
            return self._compiled(backend, required=True)
        if device.type in self.compiled:
            return self._compiled(device.type, required=False)
        return self.reference


#: Grid backends (:class:`torchcut.GridGraph`).
GRID = BackendTable(ReferenceGrid(), CpuGrid(), CudaGrid())
#: General-graph backends (:class:`torchcut.FlowGraph`).
CSR = BackendTable(ReferenceCsr(), CpuCsr(), CudaCsr())
