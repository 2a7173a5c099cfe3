"""The ``torchcut`` command.

Subcommands:

``torchcut maxflow FILE [--device cuda|cpu] [--backend ...] [--verify] [--cut OUT]``
    Solve a DIMACS max-flow file (plain, .gz, .bz2). Prints the flow value as a DIMACS solution line
    ``s VALUE``, with ``c`` comment lines for the sizes (nodes with the source and the sink, arc pairs
    between nodes, terminal arcs) and the times: reading and solving apart, and the one-time start-up
    (imports, loading the compiled solver) on a line of its own. ``--cut OUT`` writes the DIMACS ids
    of the source side of the minimum cut (the source itself included), one per line.
``torchcut segment IMAGE SEEDS --out MASK.png [--device cuda|cpu] [--lam L] [--connectivity 4|8] [--verify]``
    Segment an image from a seed PNG (labels 0 unknown, 1 object, 2 background, as in
    :func:`torchcut.segment`, with its defaults: ``lam`` 8, 4-connected) and write the mask as a PNG
    (255 = object). Prints the time to read the PNGs, the time of the segmentation (energy, graph and
    cut) and, apart, the one-time start-up.
``torchcut bvz --left L --right R --out DIR [...]``
    Write the max-flow instances of one alpha-expansion pass of Potts stereo (see
    :mod:`torchcut.stereo`).

Exit codes: 0 on success, 1 on bad input or a failed solve (one line on stderr, no traceback),
2 on a wrong command line (argparse).
"""

from __future__ import annotations

import argparse
import sys
import time

__all__ = ["main", "build_parser"]


def _load_solver(device, backend: str, reader: bool = False) -> None:
    """Import and load the compiled solver that ``backend`` picks on ``device`` (a one-time cost per
    process, which the commands time apart from their work); with ``reader``, the CPU extension too,
    which lays out general graphs as they are read."""
    import torch

    from .solvers._backends import GRID

    if reader:
        from .graph import _compiled_layout

        _compiled_layout()
    GRID(torch.device(device), backend)


def _startup_line(seconds: float) -> str:
    return (
        f"c start-up: {seconds:.4f} s, once per process (imports, loading the compiled solver), not in the times above"
    )


def _cmd_maxflow(args) -> int:
    t_start = time.perf_counter()
    import torch

    from .dimacs import read_dimacs
    from .solvers import maxflow

    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available (use --device cpu)")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    _load_solver(device, args.backend, reader=True)
    t0 = time.perf_counter()
    g = read_dimacs(args.file)
    t1 = time.perf_counter()
    g = g.to(device)
    if device == "cuda":
        torch.cuda.synchronize()
    t2 = time.perf_counter()
    r = maxflow(g, backend=args.backend, lattice=False if args.no_lattice else None)
    if device == "cuda":
        torch.cuda.synchronize()
    t3 = time.perf_counter()
    n_src, n_snk = (int((t[0] != 0).sum()) for t in (g.source, g.sink))
    print(
        f"c {args.file}: {g.num_nodes + 2} nodes, {g.num_pairs} arc pairs, {n_src + n_snk} terminal arcs "
        f"({n_src} from the source, {n_snk} to the sink)"
    )
    route = r.stats.get("route", "csr")
    print(f"s {r.flow_value}")
    copy = f" (+ {t2 - t1:.4f} s to copy it to {device})" if device != "cpu" else ""
    print(
        f"c time: read {t1 - t0:.4f} s{copy}, solve {t3 - t2:.4f} s on {device} "
        f"(backend {r.stats.get('backend')}, route {route})"
    )
    print(_startup_line(t0 - t_start))
    if device == "cpu" and r.stats.get("backend") == "reference" and g.num_nodes > 50_000:
        print(
            "c note: the compiled CPU solver is unavailable, so torchcut ran its reference solver (torch "
            "ops), which is slow on large graphs; install a C++ compiler and ninja, or use --device cuda"
        )
    if args.verify:
        r.verify()
        print("c verified: the flow and the cut certify each other")
    if args.cut:
        ids = g.node_ids[r.mask.to(g.node_ids.device)].cpu().tolist()
        src = g.terminal_ids[0]
        with open(args.cut, "w") as f:
            f.write("\n".join(str(i) for i in sorted([src, *ids])) + "\n")
        print(f"c source side: {len(ids) + 1} nodes written to {args.cut}")
    return 0


def _cmd_segment(args) -> int:
    t_start = time.perf_counter()
    import numpy as np
    import torch
    from PIL import Image

    from ._segment import segment

    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available (use --device cpu)")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    _load_solver(device, "auto")
    startup = time.perf_counter() - t_start
    t_read = time.perf_counter()
    with Image.open(args.image) as im:
        image = np.array(im.convert("L" if im.mode in ("1", "L", "I;16", "I", "F") else "RGB"))
    with Image.open(args.seeds) as im:
        if im.mode not in ("1", "L", "P", "I"):
            raise ValueError(f"seeds: expected a one-channel PNG of labels 0/1/2, got an image of mode {im.mode}")
        seeds = np.array(im, dtype=np.int64)
    read = time.perf_counter() - t_read
    t0 = time.perf_counter()
    mask, r = segment(
        torch.as_tensor(image, device=device),
        torch.as_tensor(seeds, device=device),
        lam=args.lam,
        connectivity=args.connectivity,
        return_result=True,
    )
    mask = mask.cpu()
    t1 = time.perf_counter()
    Image.fromarray(mask.numpy().astype(np.uint8) * 255).save(args.out)
    print(
        f"c {args.image}: {image.shape[1]}x{image.shape[0]}, {args.connectivity}-connected, {int(mask.sum())} "
        f"object pixels ({float(mask.float().mean()) * 100:.1f}%), cut {r.flow_value} (integer energy units)"
    )
    print(
        f"c time: read {read:.4f} s, segment {t1 - t0:.4f} s on {device} (backend {r.stats.get('backend')}; "
        f"energy, graph and cut); mask written to {args.out}"
    )
    print(_startup_line(startup))
    if args.verify:
        r.verify()
        print("c verified: the flow and the cut certify each other")
    return 0


def _cmd_bvz(args) -> int:
    from .stereo import main as stereo_main

    return stereo_main(args)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one subparser per command.

    Examples
    --------
    >>> build_parser().parse_args(["maxflow", "g.max", "--verify"]).verify
    True
    """
    p = argparse.ArgumentParser(prog="torchcut", description="Graph cuts and max-flow on PyTorch tensors.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    m = sub.add_parser(
        "maxflow",
        help="solve a DIMACS max-flow file",
        description="Solve a DIMACS max-flow file (.max, .max.gz, .max.bz2); print 's VALUE' and 'c' comment lines.",
    )
    m.add_argument("file", help="DIMACS max-flow file")
    m.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    m.add_argument("--backend", choices=("auto", "reference", "cpu", "cuda"), default="auto")
    m.add_argument("--no-lattice", action="store_true", help="do not route lattice graphs to the grid solver")
    m.add_argument("--verify", action="store_true", help="check the flow/cut certificate")
    m.add_argument("--cut", metavar="OUT", help="write the DIMACS ids of the source side, one per line")
    m.set_defaults(func=_cmd_maxflow)

    sg = sub.add_parser(
        "segment",
        help="segment an image from seed scribbles",
        description="Segment an image with a graph cut from a seed PNG (0 unknown, 1 object, "
        "2 background); write the mask as a PNG (255 = object).",
    )
    sg.add_argument("image", help="image file (gray or colour)")
    sg.add_argument("seeds", help="one-channel PNG of labels 0/1/2, the size of the image")
    sg.add_argument("--out", required=True, help="mask PNG to write")
    sg.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    sg.add_argument("--lam", type=float, default=8.0, help="smoothness weight (default 8)")
    sg.add_argument(
        "--connectivity",
        type=int,
        choices=(4, 8),
        default=4,
        help="4 or 8 neighbours per pixel (default 4, as torchcut.segment)",
    )
    sg.add_argument("--verify", action="store_true", help="check the flow/cut certificate")
    sg.set_defaults(func=_cmd_segment)

    from .stereo import add_arguments

    b = sub.add_parser(
        "bvz",
        help="write BVZ-style stereo expansion instances",
        description="Write the max-flow instances of the first alpha-expansion pass of Potts "
        "stereo (Boykov-Veksler-Zabih) as DIMACS files, one per label.",
    )
    add_arguments(b)
    b.set_defaults(func=_cmd_bvz)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code.

    Examples
    --------
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "g.max")
    >>> _ = open(path, "w").write("p max 3 2\\nn 1 s\\nn 3 t\\na 1 2 4\\na 2 3 3\\n")
    >>> main(["maxflow", path, "--device", "cpu"])  # doctest: +ELLIPSIS
    c ...
    s 3
    c time: ...
    0
    """
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError, EOFError, RuntimeError, TypeError) as exc:
        msg = " ".join(str(exc).split()) or type(exc).__name__
        print(f"torchcut {args.command}: error: {msg}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
