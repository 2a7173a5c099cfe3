"""The compiled CPU solver's paths under AddressSanitizer (run by hand; not collected by pytest).

Builds the CPU library with ``-fsanitize=address`` into a scratch folder, makes torchcut load that
build instead of the installed one (``TORCHCUT_CPU_LIBRARY``), and runs grid solves (every connectivity,
int32/int64, batches), alpha-expansion with and
without warm starts, GrabCut (compiled colour models, warm-started cuts), refine, the segmentation
energy's ops (gray to four channels, 2D and 3D, seed dtypes, ragged shapes), general (CSR)
networks (a grid's from its structure too), the fixed-model segmenter's kept state and a PyMaxflow-style
graph that leaves the grid. Any out-of-bounds
access aborts with a report. From the repository root::

    ASAN_OPTIONS=detect_leaks=0 LD_PRELOAD=$(gcc -print-file-name=libasan.so) python tests/asan_cpu.py
"""

import os
import runpy
import subprocess
import sys
import tempfile

import torch

# read without importing torchcut: the package would load its own library, whose op schemas the
# sanitizer build then declares a second time
SOURCES = runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "torchcut", "_build_config.py"))["CPU_SOURCES"]


def build() -> str:
    """Compile the CPU library with AddressSanitizer; return its path."""
    from torch.utils.cpp_extension import load

    folder = tempfile.mkdtemp()
    load(
        name="tc_cpu_asan",
        sources=[f"torchcut/csrc/{s}" for s in SOURCES],
        extra_cflags=["-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer"],
        extra_ldflags=["-fsanitize=address"],
        build_directory=folder,
        is_python_module=False,
    )
    return os.path.join(folder, "tc_cpu_asan.so")


def main():
    if "TORCHCUT_CPU_LIBRARY" not in os.environ:  # build in this process, run the checks in a fresh one
        lib = build()
        sys.exit(subprocess.call([sys.executable, __file__], env={**os.environ, "TORCHCUT_CPU_LIBRARY": lib}))
    import torchcut

    g = torch.Generator().manual_seed(1)
    for ndim, conn, shape in (
        (2, 4, (13, 17)),
        (2, 8, (10, 9)),
        (3, 6, (5, 6, 7)),
        (3, 18, (4, 5, 6)),
        (3, 26, (4, 5, 6)),
    ):
        offs = torchcut.grid_offsets(ndim, conn)
        for dt in (torch.int32, torch.int64):
            e = torch.randint(0, 9, (len(offs), 3) + shape, generator=g)
            s = torch.randint(0, 20, (3,) + shape, generator=g)
            t = torch.randint(0, 20, (3,) + shape, generator=g)
            assert torchcut.maxflow(torchcut.GridGraph(s, t, e.to(dt), offs), backend="cpu").verify()
            one = torchcut.FlowGraph.from_grid(torchcut.GridGraph(s[0], t[0], e[:, 0].to(dt), offs))  # grid_pairs_csr
            assert torchcut.maxflow(one, backend="cpu").verify()
    U = torch.randint(0, 30, (2, 6, 23, 29), generator=g)
    W = torch.randint(0, 4, (2, 2, 23, 29), generator=g)
    V = torch.minimum((torch.arange(6)[:, None] - torch.arange(6)[None]).abs(), torch.tensor(2)) * 6
    for schedule in ("sequential", "batched"):
        for warm in (True, False):
            torchcut.expansion(U, V, weights=W, schedule=schedule, warm_start=warm)
            torchcut.expansion(U * 0.3, V * 1.1, weights=W * 0.7, schedule=schedule, warm_start=warm)
    torchcut.expansion(torch.randint(0, 30, (4, 6, 7, 8), generator=g), V[:4, :4], connectivity=26)
    # general graphs: the compiled expansion move (Potts, integer and float tables, per-edge tables, repeated edges)
    edges = torch.randint(0, 40, (120, 2), generator=g)
    edges = edges[edges[:, 0] != edges[:, 1]]
    Ug, wg = torch.randint(0, 30, (4, 40), generator=g), torch.randint(0, 5, (edges.shape[0],), generator=g)
    for Vg in (V[:4, :4], (V[:4, :4] > 0).long(), V[:4, :4].double() * 0.7, V[:4, :4].expand(edges.shape[0], 4, 4)):
        torchcut.expansion(Ug, Vg, edges=edges, edge_weights=wg)
        Vr = Vg[:30].repeat(2, 1, 1) if Vg.dim() == 3 else Vg  # a per-edge table follows its edges
        torchcut.expansion(Ug, Vr, edges=edges[:30].repeat(2, 1), edge_weights=wg[:60])
        torchcut.graph_multilabel.swap(Ug, Vg, edges, wg)
    im = torch.rand(3, 40, 50, generator=g) * 60
    im[:, 10:30, 12:40] += 120
    torchcut.grabcut([im, im[:, :31, :37]], box=[(8, 6, 44, 34), (5, 5, 30, 25)])
    torchcut.refine(torch.rand(3, 30, 30, generator=g) * 255, torch.softmax(torch.randn(4, 30, 30, generator=g), 0))
    # the fixed-model segmenter: the kept network and search trees, strokes through set_terminals
    seg = torchcut.Segmenter(torch.rand(24, 30, 3, generator=g) * 255, model="fixed")
    seeds = torch.zeros(24, 30, dtype=torch.int64)
    seeds[8:14, 10:18], seeds[0] = 1, 2
    seg.update(seeds)
    for label, rows in ((2, slice(10, 12)), (1, slice(20, 23)), (0, slice(8, 10))):
        seeds = seeds.clone()
        seeds[rows, 5:25] = label
        seg.update(seeds)
    from torchcut import energy

    for C, shape, conn, sdt in (
        (1, (1, 1, 9), 8, torch.int64),
        (2, (2, 7, 5), 4, torch.uint8),
        (3, (3, 4, 5), 26, torch.int16),
        (4, (1, 33, 2), 18, torch.int32),
    ):
        x = torch.rand((C,) + shape, generator=g) * 200
        sd = torch.randint(0, 3, shape, generator=g).to(sdt)
        sd.view(-1)[0], sd.view(-1)[-1] = 1, 2
        kw = {"connectivity": conn, "ndim": 2 if conn in (4, 8) else 3}
        if kw["ndim"] == 2:  # a batch of images
            sd[:, 0, 0], sd[:, -1, -1] = 1, 2
        g1 = energy.segmentation_graph(x if C > 1 else x[0], sd, channel_axis=0 if C > 1 else None, **kw)
        assert g1.energy.syncs <= 2 and torch.equal(
            g1.caps, energy._reference_graph(x if C > 1 else x[0], sd, channel_axis=0 if C > 1 else None, **kw).caps
        )
    for seed in range(6):  # general networks (CSR): random arcs, parallel/antiparallel, isolated nodes
        rng = torch.Generator().manual_seed(100 + seed)
        n, m = 30 + 17 * seed, 120 + 40 * seed
        u, v = torch.randint(0, n, (m,), generator=rng), torch.randint(0, n, (m,), generator=rng)
        fg = torchcut.FlowGraph.from_edges(
            u,
            v,
            torch.randint(0, 20, (m,), generator=rng),
            torch.randint(0, 5, (m,), generator=rng),
            source=torch.randint(0, 30, (n,), generator=rng) * (seed % 2),
            sink=torch.randint(0, 30, (n,), generator=rng),
            num_nodes=n,
        )
        assert torchcut.maxflow(fg, backend="cpu").verify()
    import numpy as np

    import torchcut.compat.pymaxflow as pm

    gi = pm.Graph[int]()
    ids = gi.add_grid_nodes((6, 7))
    gi.add_grid_edges(ids, weights=np.arange(42).reshape(6, 7) % 5, symmetric=False)
    gi.add_grid_tedges(ids, np.arange(42).reshape(6, 7) % 7, 3)
    gi.add_edge(int(ids[0, 0]), int(ids[5, 6]), 4, 1)  # not a grid any more: the CSR path
    gi.maxflow()
    gi.get_grid_segments(ids)
    print("asan_cpu: every path ran clean")


if __name__ == "__main__":
    main()
