"""scripts/compare_notebooks.py: `make test` compares the workbook's executed notebooks with the
committed ones by nbval's rules instead of executing them again; these notebooks are made by hand."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

ROOT = Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location("compare_notebooks", ROOT / "scripts" / "compare_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


cn = _module()
PATTERNS = cn.sanitize_patterns()


def stdout(text):
    return new_output("stream", name="stdout", text=text)


def stderr(text):
    return new_output("stream", name="stderr", text=text)


def result(text, png=None):
    data = {"text/plain": text}
    if png:
        data["image/png"] = png
    return new_output("execute_result", data=data, execution_count=1)


def notebook(*cells):
    """Code cells given as (source, outputs); every cell counts as run."""
    out = [new_markdown_cell("# title")]
    for i, (source, outputs) in enumerate(cells, start=1):
        out.append(new_code_cell(source, outputs=list(outputs), execution_count=i))
    return new_notebook(cells=out)


def differences(reference, executed):
    return cn.compare(reference, executed, PATTERNS)


def test_equal_outputs_agree_and_a_changed_number_is_found_in_its_cell():
    ref = notebook(("print(1)", [stdout("1\n")]), ("x", [result("accuracy 0.81")]))
    assert differences(ref, notebook(("print(1)", [stdout("1\n")]), ("x", [result("accuracy 0.81")]))) == []
    found = differences(ref, notebook(("print(1)", [stdout("1\n")]), ("x", [result("accuracy 0.82")])))
    assert [d.cell for d in found] == [1]
    assert "0.81" in found[0].what and "0.82" in found[0].what


def test_the_sanitize_file_masks_what_nbval_masks():
    ref = notebook(("t", [stdout("fedavg  81.23 ± 1.05\nlocal 70.10 (n = 1)\nat 0x7f00aa11bb22\n")]))
    run = notebook(("t", [stdout("fedavg  81.24 ± 1.04\nlocal 70.11 (n = 1)\nat 0x7f11cc22dd33\n")]))
    assert differences(ref, run) == []
    # what the file does not mask is still compared
    assert differences(ref, notebook(("t", [stdout("fedprox 81.24 ± 1.04\nlocal 70.11 (n = 1)\nat 0x7f\n")])))


def test_nbval_markers_exempt_a_cell():
    for marker in ("# NBVAL_IGNORE_OUTPUT", "# NBVAL_SKIP"):
        source = f"{marker}\nprint(time())"
        assert differences(notebook((source, [stdout("1.0\n")])), notebook((source, [stdout("2.0\n")]))) == []
    tagged = notebook(("print(time())", [stdout("1.0\n")]))
    tagged.cells[1].metadata["tags"] = ["nbval-ignore-output"]
    assert differences(tagged, notebook(("print(time())", [stdout("2.0\n")]))) == []


def test_papermills_parameters_cell_and_the_progress_lines_are_not_compared():
    ref = notebook(("seeds = [0]", []), ("run()", [stdout("done\n")]))
    run = notebook(("seeds = [0]", []), ("run()", [stderr("run_grid: 4 runs, 0 recorded\nrun_grid [1/4] a: 1.0 s\n"),
                                                   stdout("done\n")]))
    injected = new_code_cell("# Parameters\nseeds = [0]\n", execution_count=2)
    injected.metadata["tags"] = ["injected-parameters"]
    run.cells.insert(2, injected)
    assert differences(ref, run) == []


def test_a_new_output_kind_or_a_warning_is_a_difference():
    ref = notebook(("f()", [stdout("ok\n")]))
    found = differences(ref, notebook(("f()", [stderr("UserWarning: x\n"), stdout("ok\n")])))
    assert len(found) == 1 and "stderr" in found[0].what


def test_images_are_not_compared_as_under_nbval():
    ref = notebook(("plot()", [result("<Figure>", png="AAAA")]))
    assert differences(ref, notebook(("plot()", [result("<Figure>", png="BBBB")]))) == []


def test_a_stale_copy_is_reported_as_stale():
    ref = notebook(("print(1)", [stdout("1\n")]), ("print(2)", [stdout("2\n")]))
    edited = differences(ref, notebook(("print(1)", [stdout("1\n")]), ("print(3)", [stdout("3\n")])))
    assert [d.cell for d in edited] == [1] and "stale" in edited[0].what
    fewer = differences(ref, notebook(("print(1)", [stdout("1\n")])))
    assert len(fewer) == 1 and "stale" in fewer[0].what


def test_an_error_in_the_executed_copy_is_a_difference():
    ref = notebook(("f()", [stdout("ok\n")]))
    error = new_output("error", ename="ValueError", evalue="bad", traceback=[])
    found = differences(ref, notebook(("f()", [error])))
    assert len(found) == 1 and "ValueError" in found[0].what


def test_main_names_the_missing_copies_and_fails_on_a_difference(tmp_path, capsys):
    committed, executed = tmp_path / "notebooks", tmp_path / "executed"
    committed.mkdir(), executed.mkdir()
    nbformat.write(notebook(("print(1)", [stdout("1\n")])), committed / "01_a.ipynb")
    assert cn.main([str(executed), str(committed / "01_a.ipynb")]) == 2
    assert "01_a.ipynb" in capsys.readouterr().err
    nbformat.write(notebook(("print(1)", [stdout("1\n")])), executed / "01_a.ipynb")
    assert cn.main([str(executed), str(committed / "01_a.ipynb")]) == 0
    nbformat.write(notebook(("print(1)", [stdout("2\n")])), executed / "01_a.ipynb")
    assert cn.main([str(executed), str(committed / "01_a.ipynb")]) == 1
    assert "01_a.ipynb::Cell 0" in capsys.readouterr().out
