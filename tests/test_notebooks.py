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
    shown = [o for c in code for o in c.get("outputs", []) if o.get("output_type") in ("display_data", "execute_result")
             and "text/markdown" in o.get("data", {})]  # displayed tables (notebook 00): nbval compares their text
    assert printed or shown, "the committed notebook prints and shows no text: nbval would check nothing"


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
def test_committed_language_info_is_the_kernels(name):
    """JupyterLab copies its kernel's ``language_info`` (Python version included) into a notebook
    when the kernel starts, and marks the notebook modified where it differs: the committed one
    is the venv's ``python3`` kernel's (ipykernel's), so opening it in `make lab` changes nothing
    (tests/test_lab_browser.py checks it in a real JupyterLab)."""
    from ipykernel.ipkernel import IPythonKernel

    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
    kernel = {**IPythonKernel.language_info, "version": _clean_notebooks().kernel_python_version()}
    assert nb["metadata"]["language_info"] == kernel


def _lab_recipe() -> tuple[str, str]:
    """The Makefile's ``lab:`` lines: (its target-specific variables, its recipe)."""
    import re

    text = (ROOT / "Makefile").read_text()
    variables = "".join(re.findall(r"^lab: export .*\n", text, re.M))
    recipe = re.search(r"^lab: setup.*\n((?:\t.*\n)+)", text, re.M).group(1)
    return variables, recipe


def _lab_contents_manager(root_dir, monkeypatch):
    """A Jupyter contents manager configured as the server of `make lab` configures it (the
    config its JUPYTER_CONFIG_PATH finds); notebook signatures go to a temporary folder."""
    from jupyter_server.services.contents.filemanager import FileContentsManager
    from traitlets.config.loader import PyFileConfigLoader

    assert "JUPYTER_CONFIG_PATH=$(CURDIR)/scripts/jupyter " in _lab_recipe()[1]
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(root_dir / ".jupyter-data"))
    config = PyFileConfigLoader("jupyter_server_config.py", str(ROOT / "scripts" / "jupyter")).load_config()
    return FileContentsManager(root_dir=str(root_dir), config=config)


def _as_jupyterlab_sends(nb: dict) -> dict:
    """What JupyterLab (4.x) sends the server when it saves notebook ``nb`` (a dict, modified):
    each cell's consecutive stream outputs of one name merged, as its output area holds them
    from the moment it loads or runs the cell (written independently of clean_notebooks);
    every multiline text as one string; and the kernel's ``language_info``, here a kernel of
    another patch level than the committed one."""
    def joined(text):
        return "".join(text) if isinstance(text, list) else text

    for cell in nb["cells"]:
        cell["source"] = joined(cell["source"])
        merged = []
        for out in cell.get("outputs", []):
            if out["output_type"] == "stream":
                out["text"] = joined(out["text"])
                if merged and merged[-1]["output_type"] == "stream" and merged[-1]["name"] == out["name"]:
                    merged[-1]["text"] += out["text"]
                    continue
            for mime, value in out.get("data", {}).items():
                out["data"][mime] = joined(value) if mime.startswith("text/") else value
            merged.append(out)
        if cell["cell_type"] == "code":
            cell["outputs"] = merged
    nb["metadata"]["language_info"]["version"] = "3.11.9"
    return nb


def test_make_lab_keeps_the_python_version_of_the_file_it_saves_over(tmp_path, monkeypatch):
    """The Jupyter server of `make lab` (its config found through JUPYTER_CONFIG_PATH) writes a
    new notebook with the ``language_info.version`` JupyterLab copied from the kernel, and keeps
    the version of the file it replaces (a kernel of another 3.11.x patch level does not rewrite
    the line)."""
    import nbformat

    manager = _lab_contents_manager(tmp_path, monkeypatch)

    def save(version):
        nb = nbformat.v4.new_notebook(metadata={"language_info": {"name": "python", "version": version}})
        manager.save({"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(nb))}, "a.ipynb")
        return json.loads((tmp_path / "a.ipynb").read_text())["metadata"]["language_info"]

    assert save("3.11.9") == {"name": "python", "version": "3.11.9"}
    assert save("3.11.4") == {"name": "python", "version": "3.11.9"}
    (tmp_path / "a.ipynb").unlink()
    assert save("3.11.4") == {"name": "python", "version": "3.11.4"}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_saving_a_committed_notebook_in_make_lab_leaves_it_byte_identical(name, tmp_path, monkeypatch):
    """Open in JupyterLab (consecutive streams merged, the kernel's version added), saved
    through the contents manager of `make lab`: the file written is the committed one, byte
    for byte."""
    committed = (ROOT / "notebooks" / f"{name}.ipynb").read_bytes()
    (tmp_path / f"{name}.ipynb").write_bytes(committed)  # saved over, as in `make lab`
    manager = _lab_contents_manager(tmp_path, monkeypatch)
    model = _as_jupyterlab_sends(json.loads(committed))
    manager.save({"type": "notebook", "format": "json", "content": model}, f"{name}.ipynb")
    assert (tmp_path / f"{name}.ipynb").read_bytes() == committed


def _split_streams(nb: dict) -> int:
    """Split every multiline stream output of ``nb`` in two (as papermill writes a cell whose
    printing reached it in two messages); return how many it split."""
    n = 0
    for cell in nb["cells"]:
        outputs = []
        for out in cell.get("outputs", []):
            lines = out.get("text", [])
            if out["output_type"] == "stream" and isinstance(lines, list) and len(lines) > 1:
                outputs += [{**out, "text": lines[:1]}, {**out, "text": lines[1:]}]
                n += 1
            else:
                outputs.append(out)
        if cell["cell_type"] == "code":
            cell["outputs"] = outputs
    return n


def _with_multiline_streams() -> list[str]:
    """The notebooks with a stream output of several lines (what papermill may split)."""
    return [name for name in NOTEBOOKS if any(
        o.get("output_type") == "stream" and isinstance(o.get("text"), list) and len(o["text"]) > 1
        for c in json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())["cells"] for o in c.get("outputs", []))]


@pytest.mark.parametrize("name", _with_multiline_streams())
def test_split_streams_are_saved_and_cleaned_to_the_committed_form(name, tmp_path, monkeypatch):
    """A notebook as papermill may write it (a cell's printing split over several stream
    outputs) is saved by the server of `make lab`, and cleaned by `make refresh-notebooks`'s
    clean_notebooks, into the committed form: the streams merged (one function does both:
    clean_notebooks.canonical_form)."""
    import nbformat

    committed = (ROOT / "notebooks" / f"{name}.ipynb").read_text()
    split = json.loads(committed)
    assert _split_streams(split) > 0
    manager = _lab_contents_manager(tmp_path, monkeypatch)
    manager.save({"type": "notebook", "format": "json", "content": split}, f"{name}.ipynb")
    assert (tmp_path / f"{name}.ipynb").read_text() == committed
    split = json.loads(committed)
    _split_streams(split)
    cleaned = _clean_notebooks().clean(nbformat.from_dict(split))
    assert nbformat.writes(cleaned, version=nbformat.NO_CONVERT) + "\n" == committed


def test_make_lab_loads_its_hook_without_warnings(tmp_path, monkeypatch):
    """jupyter_server warned "Overriding existing pre_save_hook" once per contents manager (the
    server's and jupytext's) for the one hook `make lab` sets: silenced, while a warning
    about another hook replacing it is still shown."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        manager = _lab_contents_manager(tmp_path, monkeypatch)
        assert manager.pre_save_hook is not None

        def other_hook(model, **kwargs):
            pass

        with pytest.warns(UserWarning, match="Overriding existing pre_save_hook"):
            manager.pre_save_hook = other_hook


def test_make_lab_writes_figures_under_build():
    """The notebooks run in `make lab` write their figures where `make workbook` writes them,
    not into the committed figures/ (docs/running.md: only refresh-notebooks modifies a tracked file)."""
    variables, _ = _lab_recipe()
    assert "lab: export FEDLIB_FIGURES := $(BUILD_FIGURES)" in variables
    assert "BUILD_FIGURES := $(CURDIR)/build/figures" in (ROOT / "Makefile").read_text()


def test_committed_notebooks_are_in_their_clean_form():
    """scripts/clean_notebooks.py --check: every committed notebook is what it writes (no
    volatile metadata, streams merged), so refresh and save leave it unchanged."""
    assert _clean_notebooks().main(["--check", *map(str, sorted((ROOT / "notebooks").glob("*.ipynb")))]) == 0


def test_clean_notebooks_keeps_the_kernel_version_and_strips_progress_lines():
    import nbformat

    cn = _clean_notebooks()
    nb = nbformat.v4.new_notebook(metadata={"language_info": {"name": "python", "version": "3.11.7"}})
    progress = ["run_grid: 3 runs, 0 already recorded, 3 to train\n",
                "run_grid [1/3] adult dirichlet=0.5 K=4 fedavg seed=0: weighted local accuracy 70.00% in 0.1 s\n",
                "\n", "run_grid: waiting for 1 runs that other processes are computing\n"]
    warning = "UserWarning: a class has fewer than 2 examples\n"
    cell = nbformat.v4.new_code_cell("records = run_grid(specs, out)", execution_count=4, outputs=[
        *(nbformat.v4.new_output("stream", name="stderr", text=t) for t in progress),
        nbformat.v4.new_output("stream", name="stderr", text=warning),
        nbformat.v4.new_output("stream", name="stdout", text="run_grid [1/3] printed by the notebook\n")])
    nb.cells = [cell]
    out = cn.clean(nb)
    assert out.metadata.language_info == {"name": "python", "version": "3.11.7"}  # the kernel that ran it
    bare = cn.clean(nbformat.v4.new_notebook(metadata={"language_info": {"name": "python"}}))
    assert bare.metadata.language_info == {"name": "python", "version": cn.kernel_python_version()}
    assert [(o.name, o.text) for o in out.cells[0].outputs] == [
        ("stderr", warning), ("stdout", "run_grid [1/3] printed by the notebook\n")]
    assert out.cells[0].execution_count == 1


def test_the_progress_pattern_matches_what_run_grid_prints(tmp_path, monkeypatch, capsys):
    """PROGRESS_LINE (what clean_notebooks strips and the check below looks for) is every line
    run_grid prints with progress='lines' (the run itself replaced: no training here)."""
    import fedlib.run
    from fedlib import experiment as X
    from fedlib.records import RECORD_VERSION

    def fake_run(spec, device="auto"):
        return {"record_version": RECORD_VERSION, "status": "ok", "global_accuracy": 0.5, "seconds": 0.1,
                "spec": spec.to_dict()}

    monkeypatch.setattr(fedlib.run, "run", fake_run)
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


def _conforms(value, annotation) -> bool:
    """Whether ``value`` (a parameter's default or a profile's value) has type ``annotation``
    (the parameters cell's: builtins, list[...], dict[..., ...], Optional and Union; an int is a float)."""
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return value is None
    if origin is typing.Union:
        return any(_conforms(value, a) for a in args)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_conforms(k, args[0]) and _conforms(v, args[1])
                                               for k, v in value.items())
    return isinstance(value, annotation) and not (annotation is int and isinstance(value, bool))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_parameter_is_annotated_with_its_type(name):
    """`papermill --help-notebook` prints each parameter's type from its annotation (``name: int
    = 3``; "Unknown type" without one). Every statement of the parameters cell is an annotated
    assignment to one name, the annotation one papermill reads (builtins, [], commas; Optional
    and Union in quotes, so that the cell needs no import), and the defaults and both profiles'
    values have the annotated types."""
    import ast
    import typing

    import nbformat
    from papermill.translators import PythonTranslator

    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
    (cell,) = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    source = "".join(cell["source"])
    body = ast.parse(source).body
    plain = [ast.unparse(n).split("\n")[0] for n in body
             if not (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None)]
    assert not plain, f"not an annotated assignment: {plain}"
    parsed = PythonTranslator.inspect(nbformat.from_dict({**cell, "source": source}))
    assert [p.name for p in parsed] == [n.target.id for n in body]
    assert [p.name for p in parsed if p.inferred_type_name == "None"] == []
    namespace: dict = {}
    exec(source, namespace)
    types = {k: eval(v, vars(typing)) if isinstance(v, str) else v for k, v in namespace["__annotations__"].items()}
    values = {f"default {k}": (namespace[k], k) for k in types}
    for profile in ("smoke", "paper"):
        params = yaml.safe_load((ROOT / "params" / profile / f"{name}.yaml").read_text()) or {}
        values.update({f"{profile} {k}": (v, k) for k, v in params.items()})
    wrong = {where: (v, str(types[k])) for where, (v, k) in values.items() if not _conforms(v, types[k])}
    assert not wrong, wrong


@pytest.mark.parametrize("name", NOTEBOOKS)
@pytest.mark.parametrize("profile", ["smoke", "paper"])
def test_papermill_applies_each_profile_to_the_annotated_cell(name, profile, tmp_path):
    """papermill injects a profile after the annotated parameters cell; the two cells run in
    order set every parameter to the profile's value, and fedlib.notebook_params (which checks
    the profiles' keys) reads the annotated names."""
    import papermill as pm

    from fedlib.notebook_params import notebook_parameters

    params = yaml.safe_load((ROOT / "params" / profile / f"{name}.yaml").read_text()) or {}
    out = tmp_path / f"{name}.ipynb"
    pm.execute_notebook(str(ROOT / "notebooks" / f"{name}.ipynb"), str(out), parameters=params,
                        prepare_only=True, progress_bar=False, log_output=False)
    cells = json.loads(out.read_text())["cells"]
    tags = [c.get("metadata", {}).get("tags", []) for c in cells]
    i = next(i for i, t in enumerate(tags) if "parameters" in t)
    assert "injected-parameters" in tags[i + 1]
    namespace: dict = {}
    for cell in cells[i:i + 2]:
        exec("".join(cell["source"]), namespace)
    assert {k: namespace[k] for k in params} == params
    assert notebook_parameters(name) == tuple(namespace["__annotations__"])
