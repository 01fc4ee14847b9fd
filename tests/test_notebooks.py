"""Every numbered notebook: one `parameters` cell whose defaults are params/smoke (nbval runs
the committed notebook as is), a paper profile with the same keys, and committed outputs."""
import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_the_numbered_notebooks_exist():
    assert [n[:2] for n in NOTEBOOKS] == ["00", "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12"]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_defaults_equal_smoke_params(name):
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, "exactly one cell tagged 'parameters'"
    namespace: dict = {}
    exec("".join(cells[0]["source"]), namespace)
    smoke = yaml.safe_load((ROOT / "params" / "smoke" / f"{name}.yaml").read_text())
    paper = yaml.safe_load((ROOT / "params" / "paper" / f"{name}.yaml").read_text())
    assert {k: namespace[k] for k in smoke} == smoke
    assert set(paper) == set(smoke), "paper and smoke profiles must set the same parameters"
    assert nb["cells"][0]["cell_type"] == "markdown"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_papermill_reads_every_parameter_of_the_cell(name, caplog):
    """`papermill --help-notebook` and papermill's parameter inspection parse the cell line by line
    and skip, with a warning, a line holding two '=' (e.g. one inside its comment)."""
    import nbformat
    from papermill.translators import PythonTranslator

    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
    (cell,) = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    namespace: dict = {}
    exec("".join(cell["source"]), namespace)
    with caplog.at_level("WARNING", logger="papermill"):
        parsed = PythonTranslator.inspect(nbformat.from_dict({**cell, "source": "".join(cell["source"])}))
    assert not [r.message for r in caplog.records if "Unable to parse" in r.getMessage()]
    assert [p.name for p in parsed] == [k for k in namespace if not k.startswith("__")]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_has_outputs_for_nbval(name):
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    printed = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "stream"
               and o.get("name") == "stdout"]
    assert printed, "the committed notebook prints nothing: nbval would check nothing"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_kernelspec_is_what_jupyterlab_saves(name):
    """JupyterLab rewrites a notebook's kernelspec to its kernel's on save: the committed one
    must already be that, or opening a notebook in `make lab` leaves the tree dirty."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
    assert nb["metadata"]["kernelspec"] == {"display_name": spec.display_name,
                                            "language": spec.language, "name": "python3"}


def _clean_notebooks():
    """scripts/clean_notebooks.py as a module (scripts/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("clean_notebooks", ROOT / "scripts" / "clean_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_carries_no_kernel_version(name):
    """JupyterLab writes its kernel's Python version (patch level included) into
    ``language_info``: a committed version would differ from any other 3.11.x kernel's."""
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
    assert "version" not in nb["metadata"].get("language_info", {})


def test_make_lab_strips_the_kernel_version_when_jupyter_saves(tmp_path, monkeypatch):
    """The Jupyter server of `make lab` (its config found through JUPYTER_CONFIG_PATH) writes a
    notebook without the ``language_info.version`` JupyterLab copied from the kernel."""
    import re

    import nbformat
    from jupyter_server.services.contents.filemanager import FileContentsManager
    from traitlets.config.loader import PyFileConfigLoader

    recipe = re.search(r"^lab:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert "JUPYTER_CONFIG_PATH=$(CURDIR)/scripts/jupyter " in recipe
    config = PyFileConfigLoader("jupyter_server_config.py", str(ROOT / "scripts" / "jupyter")).load_config()
    manager = FileContentsManager(root_dir=str(tmp_path), config=config)
    nb = nbformat.v4.new_notebook(metadata={"language_info": {"name": "python", "version": "3.11.9"}})
    manager.save({"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(nb))}, "a.ipynb")
    saved = json.loads((tmp_path / "a.ipynb").read_text())
    assert saved["metadata"]["language_info"] == {"name": "python"}


def test_clean_notebooks_strips_the_kernel_version_and_progress_lines_only():
    import nbformat

    cn = _clean_notebooks()
    nb = nbformat.v4.new_notebook(metadata={"language_info": {"name": "python", "version": "3.11.7"}})
    progress = ["run_grid: 3 runs, 0 already recorded, 3 to train\n",
                "run_grid [1/3] adult dirichlet=0.5 K=4 fedavg seed=0: weighted local accuracy 0.700 in 0.1 s\n",
                "\n", "run_grid: waiting for 1 runs that other processes are computing\n"]
    warning = "UserWarning: a class has fewer than 2 examples\n"
    cell = nbformat.v4.new_code_cell("records = run_grid(specs, out)", execution_count=4, outputs=[
        *(nbformat.v4.new_output("stream", name="stderr", text=t) for t in progress),
        nbformat.v4.new_output("stream", name="stderr", text=warning),
        nbformat.v4.new_output("stream", name="stdout", text="run_grid [1/3] printed by the notebook\n")])
    nb.cells = [cell]
    out = cn.clean(nb)
    assert out.metadata.language_info == {"name": "python"}
    assert [(o.name, o.text) for o in out.cells[0].outputs] == [
        ("stderr", warning), ("stdout", "run_grid [1/3] printed by the notebook\n")]
    assert out.cells[0].execution_count == 1


def test_the_progress_pattern_matches_what_run_grid_prints(tmp_path, monkeypatch, capsys):
    """PROGRESS_LINE (what clean_notebooks strips and the check below looks for) is every line
    run_grid prints with progress='lines' (the run itself replaced: no training here)."""
    from fedlib import experiment as X

    def fake_run(spec, device="auto"):
        return {"record_version": X.RECORD_VERSION, "status": "ok", "global_accuracy": 0.5, "seconds": 0.1,
                "spec": spec.to_dict()}

    monkeypatch.setattr(X, "run", fake_run)
    specs = [X.RunSpec("adult", "dirichlet", 0.5, 4, seed, "fedavg") for seed in (0, 1)]
    X.run_grid(specs, tmp_path, device="cpu", progress="lines")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and lines[1].startswith("run_grid [1/2] ")
    pattern = _clean_notebooks().PROGRESS_LINE
    assert all(pattern.match(line) for line in lines), lines


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_has_no_run_grid_progress_on_stderr(name):
    """run_grid's progress lines (FEDLIB_PROGRESS=lines under `make refresh-notebooks`, for
    papermill's log) carry timings: committed, every refresh would change them. In JupyterLab
    run_grid draws a progress bar instead (FEDLIB_PROGRESS unset)."""
    pattern = _clean_notebooks().PROGRESS_LINE
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
    found = [line for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
             if o.get("output_type") == "stream" and o.get("name") == "stderr"
             for line in "".join(o.get("text", "")).splitlines() if pattern.match(line)]
    assert not found, f"{len(found)} run_grid progress lines on stderr, e.g. {found[0]!r}"
