"""The layers: the core (``fedlib``) imports nothing of the workbook (``workbook``), and neither
package has an import loop, counting the imports inside functions too. Without a loop the
import graph is a DAG, so every module sits on a layer above everything it imports: no import
runs from a lower module back up to a higher one.

The graph is read from the source (``ast``), every ``import`` and ``from … import`` anywhere in
a module, relative imports resolved; ``python tests/test_layers.py`` prints the loops, if any.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fedlib", "workbook")


def modules(packages=PACKAGES, root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> its file, for every module of ``packages`` under ``root``."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _targets(module: str, path: Path, node, known: dict) -> list[str]:
    """The known modules an import statement of ``module`` names (the longest known prefix)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join(package + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = []
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name:
            out.append(name)
    return out


def import_graph(packages=PACKAGES, root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports anywhere in its file (a package's own
    ``__init__`` excluded: importing ``a.b`` runs ``a`` first, which is no arrow of the code)."""
    known = modules(packages, root)
    graph = {}
    for module, path in known.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(t for t in _targets(module, path, node, known)
                             if t != module and not module.startswith(t + "."))
        graph[module] = edges
    return graph


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_core_and_the_workbook_have_no_import_loop():
    assert loops(import_graph()) == []


def test_the_core_imports_nothing_of_the_workbook():
    graph = import_graph()
    up = sorted((m, t) for m, ts in graph.items() if m.startswith("fedlib") for t in ts if t.startswith("workbook"))
    assert up == []
    named = [str(p.relative_to(ROOT)) for p in (ROOT / "fedlib").rglob("*.py")
             if "import_module(\"workbook" in p.read_text() or "import_module('workbook" in p.read_text()]
    assert named == []  # nor by name


def test_a_loop_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert loops(graph) == [["a", "b", "c"]]
    assert loops({"a": {"b"}, "b": set()}) == []


def test_relative_imports_resolve_to_their_modules(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("X = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "high.py").write_text("from ..low import X\n\ndef f():\n    from .. import low\n")
    assert import_graph(("pkg",), tmp_path)["pkg.sub.high"] == {"pkg.low"}


def test_importing_the_spec_and_a_grid_leaves_the_ray_backend_and_the_workbook_out():
    code = ("import fedlib.experiment, fedlib.grid, sys; "
            "assert 'fedlib.ray_grid' not in sys.modules, 'ray_grid imported'; "
            "assert not [m for m in sys.modules if m.startswith('workbook')], 'workbook imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


if __name__ == "__main__":
    for loop in loops(import_graph()):
        print("loop:", " -> ".join(loop))
