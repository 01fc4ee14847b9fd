"""The layers import bottom-up, without a loop: fedlib.experiment (the spec and the run) imports
neither fedlib.grid (which re-exports from it on first use, not at import) nor the Ray backend;
fedlib.grid imports the experiment and, when a grid runs on Ray, fedlib.ray_grid directly (no
importlib registry); fedlib.ray_grid depends on the experiment only."""
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_importing_experiment_and_grid_leaves_the_ray_backend_out():
    code = ("import fedlib.experiment, sys; assert 'fedlib.grid' not in sys.modules, 'grid imported'; "
            "import fedlib.grid; assert 'fedlib.ray_grid' not in sys.modules, 'ray_grid imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _imports(path: Path, *, module_level: bool) -> set[str]:
    """Every module an import statement of ``path`` names (relative imports resolved against the
    fedlib package): at module level only, or anywhere (inside functions too)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if module_level else list(ast.walk(tree))
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ("fedlib." + (node.module or "")) if node.level else (node.module or "")
            names.add(base.rstrip("."))
            names.update(f"{base.rstrip('.')}.{a.name}" for a in node.names)
    return names


def test_grid_depends_on_experiment_and_imports_the_ray_backend_directly():
    from fedlib import experiment as X, grid as G

    experiment = _imports(ROOT / "fedlib" / "experiment.py", module_level=True)
    assert "fedlib.grid" not in experiment and "fedlib.ray_grid" not in _imports(
        ROOT / "fedlib" / "experiment.py", module_level=False)
    grid = _imports(ROOT / "fedlib" / "grid.py", module_level=False)
    assert "fedlib.experiment" in _imports(ROOT / "fedlib" / "grid.py", module_level=True)
    assert "fedlib.ray_grid" in grid and "importlib" not in grid  # the arrow is visible
    ray_grid = _imports(ROOT / "fedlib" / "ray_grid.py", module_level=False)
    assert "fedlib.experiment" in ray_grid and "fedlib.grid" not in ray_grid
    import fedlib.ray_grid as RG

    assert G._ray_backend() is RG and G.BACKENDS == ("local", "ray")
    assert X.run_grid is G.run_grid and X.load_records is G.load_records  # re-exported for the notebooks
