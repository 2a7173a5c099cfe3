"""The house reads one way: no torchcut module imports one that imports it back, at any depth, counting
imports inside functions too; and ``import torchcut`` stays cheap (no compiler stack, nothing CUDA)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import torchcut

PKG = Path(torchcut.__file__).resolve().parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str) -> set[str]:
    """The torchcut modules that the module ``name`` (file ``path``) imports, anywhere in its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("torchcut"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("torchcut"):
                continue
            folder = PKG.parent.joinpath(*mod.split("."))
            submodules = {
                a.name
                for a in node.names
                if (folder / f"{a.name}.py").exists() or (folder / a.name / "__init__.py").exists()
            }
            if len(submodules) < len(node.names):  # a name defined in mod itself
                out.add(mod)
            out.update(f"{mod}.{a}" for a in submodules)  # "from . import x" names a module
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        deps = {d for d in _imports(path, name) if d in files and d != name}
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle found by depth-first search (one per back edge)."""
    found, state = [], {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                found.append(stack[stack.index(dep) :] + [dep])
            elif dep not in state:
                visit(dep, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return found


def test_the_import_graph_has_no_cycle():
    # "from . import x" of a submodule x is an edge to x alone (Python runs the package's __init__ first,
    # but that is not a choice of the importer); a name taken from a package's __init__ is an edge to it,
    # so a submodule that reaches back into its package's __init__ makes a cycle
    cycles = _cycles(_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_import_is_cheap_and_touches_no_cuda():
    code = (
        "import sys, torch; before = set(sys.modules); import torchcut; new = set(sys.modules) - before; "
        "bad = sorted(m for m in new if m.startswith(('torch._dynamo', 'torch.utils.cpp_extension', 'torch._inductor')));"
        "print(bad, torch.cuda.is_initialized())"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=os.environ)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[0] == "[] False"
