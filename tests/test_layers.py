"""The layers import bottom-up, without a loop: fedlib.experiment (RunSpec, run, run_grid) does
not import the backends that depend on it; run_grid reaches them through its registry."""
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_importing_experiment_leaves_the_ray_backend_out():
    code = "import fedlib.experiment, sys; assert 'fedlib.ray_grid' not in sys.modules, 'ray_grid imported'"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _imported_modules(path: Path) -> set[str]:
    """Every module an import statement of ``path`` names, at module level or inside a function
    (relative imports resolved against the fedlib package)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ("fedlib." + (node.module or "")) if node.level else (node.module or "")
            names.add(base.rstrip("."))
            names.update(f"{base.rstrip('.')}.{a.name}" for a in node.names)
    return names


def test_experiment_has_no_import_of_a_backend_and_the_backend_depends_on_experiment():
    from fedlib import experiment as X

    assert X.BACKENDS == ("local", *X.BACKEND_MODULES)
    backends = set(X.BACKEND_MODULES.values())
    assert not backends & _imported_modules(ROOT / "fedlib" / "experiment.py")
    assert "fedlib.experiment" in _imported_modules(ROOT / "fedlib" / "ray_grid.py")
    import fedlib.ray_grid as RG

    assert X._backend("ray") is RG  # the registry resolves to the module run_grid dispatches to
