"""Where fedlib reads and writes: the checkout when it runs from one, else the working
directory; never into an installed package."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fedlib import paths

ROOT = Path(__file__).resolve().parent.parent


def test_checkout_defaults_and_environment(monkeypatch, tmp_path):
    for var in (paths.ENV_DATA, paths.ENV_FIGURES, paths.ENV_RESULTS):
        monkeypatch.delenv(var, raising=False)
    assert paths.checkout_root() == ROOT
    assert paths.data_root() == ROOT / "data"
    assert paths.results_dir() == ROOT / "results"
    monkeypatch.setenv(paths.ENV_FIGURES, str(tmp_path / "figs"))
    monkeypatch.setenv(paths.ENV_RESULTS, str(tmp_path / "res"))
    assert paths.figures_dir() == tmp_path / "figs" and (tmp_path / "figs").is_dir()
    assert paths.results_dir() == tmp_path / "res"
    assert paths.results_dir(tmp_path / "arg") == tmp_path / "arg"  # the argument wins


_USE = """
import pandas as pd, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from fedlib import paths
from workbook import plots
from fedlib.datasets import data_dir
from fedlib import records
assert paths.checkout_root() is None, paths.checkout_root()
fig = plt.figure()
plots.save_figure(fig, pd.DataFrame({"a": [1]}), "probe")
records.write(paths.results_dir() / "probe.json", {"ok": 1})
print(paths.figures_dir(), paths.results_dir(), data_dir(), sep="\\n")
"""


def _tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts}


def test_installed_package_writes_to_the_working_directory(tmp_path):
    """fedlib copied into a bare site-packages (what `pip install .` gives) writes figures and
    records under the current directory and resolves data there; the package is untouched."""
    site = tmp_path / "site-packages"
    shutil.copytree(ROOT / "fedlib", site / "fedlib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    before = _tree(site)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in (paths.ENV_DATA, paths.ENV_FIGURES, paths.ENV_RESULTS)}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *sys.path[1:]])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    out = subprocess.run([sys.executable, "-c", _USE], cwd=work, env=env, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    figures, results, data = (Path(line) for line in out.stdout.split())
    assert (figures, results, data) == (work / "figures", work / "results", work / "data")
    assert (work / "figures" / "probe.png").is_file() and (work / "results" / "probe.json").is_file()
    assert _tree(site) == before, "something was written into the installed package"
