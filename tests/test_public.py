"""The public namespace: every public module and name is reachable after a plain ``import torchcut``,
and the heavier modules are imported only on first use (each check in a fresh interpreter)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Every public module of the package (no leading underscore), with a name it must offer.
MODULES = {
    "build": "main",
    "cli": "main",
    "compat": "pymaxflow",
    "datasets": "tsukuba_pair",
    "diff": "flow_value",
    "dimacs": "read_dimacs",
    "distributed": "maxflow",
    "energy": "segmentation_graph",
    "graph": "FlowGraph",
    "graph_multilabel": "expansion",
    "grid": "GridGraph",
    "interactive": "Segmenter",
    "multilabel": "expansion",
    "nn": "CutHead",
    "result": "CutResult",
    "solvers": "maxflow",
    "stereo": "disparity",
}
# Imported by ``import torchcut`` only when something asks for them.
LAZY = (
    "build",
    "cli",
    "compat",
    "datasets",
    "diff",
    "dimacs",
    "distributed",
    "graph",
    "graph_multilabel",
    "interactive",
    "multilabel",
    "nn",
    "stereo",
)


def run_fresh(code: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_public_module_is_in_the_package_listing():
    found = {p.stem for p in (ROOT / "torchcut").glob("*.py") if not p.stem.startswith("_")}
    found |= {p.parent.name for p in (ROOT / "torchcut").glob("*/__init__.py")}
    found -= {"csrc"}
    assert found == set(MODULES)


def test_modules_are_reachable_after_import_torchcut_and_imported_lazily():
    got = run_fresh(f"""
import json, sys, types
import torchcut
before = sorted(m for m in {LAZY!r} if "torchcut." + m in sys.modules)
reach = {{}}
for name, attr in {MODULES!r}.items():
    mod = getattr(torchcut, name)
    reach[name] = isinstance(mod, types.ModuleType) and mod.__name__ == "torchcut." + name and hasattr(mod, attr)
print(json.dumps({{"before": before, "reach": reach}}))
""")
    assert got["before"] == []
    assert got["reach"] == {name: True for name in MODULES}


def test_readme_usages_work_after_import_torchcut():
    got = run_fresh("""
import json, torch
import torchcut
g = torch.Generator().manual_seed(0)
right = torch.rand(12, 30, generator=g) * 255
left = torch.roll(right, 2, dims=1)
d = torchcut.stereo.disparity(left, right, 4)                  # README: multi-label energies
G = torchcut.compat.pymaxflow.Graph[int]()                       # README: coming from PyMaxflow
ids = G.add_nodes(2); G.add_edge(0, 1, 3, 0); G.add_tedge(0, 5, 0); G.add_tedge(1, 0, 5)
fg = torchcut.FlowGraph.from_edges([0], [1], [3], source=[5, 0], sink=[0, 5])
print(json.dumps({
    "disparity": float((d[:, 6:] == 2).float().mean()),
    "pymaxflow": G.maxflow(),
    "fastmin": callable(torchcut.compat.fastmin.aexpansion_grid),
    "flowgraph": torchcut.maxflow(fg).flow_value,
    "dimacs": [torchcut.read_dimacs is torchcut.dimacs.read_dimacs, callable(torchcut.write_dimacs)],
    "multilabel": [torchcut.expansion is torchcut.multilabel.expansion, torchcut.refine is torchcut.multilabel.refine],
    "distributed": callable(torchcut.distributed.segment),
    "datasets": callable(torchcut.datasets.fetch),
    "segment_is_function": callable(torchcut.segment) and callable(torchcut.grabcut),
    "dir": all(n in dir(torchcut) for n in torchcut.__all__),
}))
""")
    assert got == {
        "disparity": pytest.approx(got["disparity"]),
        "pymaxflow": 3,
        "fastmin": True,
        "flowgraph": 3,
        "dimacs": [True, True],
        "multilabel": [True, True],
        "distributed": True,
        "datasets": True,
        "segment_is_function": True,
        "dir": True,
    }
    assert got["disparity"] > 0.9


def test_star_import_and_unknown_names():
    got = run_fresh("""
import json
ns = {}
exec("from torchcut import *", ns)
import torchcut
try:
    torchcut.stereoo
    err = ""
except AttributeError as exc:
    err = str(exc)
print(json.dumps({"missing": sorted(n for n in torchcut.__all__ if n not in ns), "err": err}))
""")
    assert got == {"missing": [], "err": "module 'torchcut' has no attribute 'stereoo'"}
