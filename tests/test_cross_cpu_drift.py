"""scripts/cross_cpu_drift.py: how far the numbers the notebooks print move between an executed copy
and the committed notebook; these notebooks are made by hand."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location("cross_cpu_drift", ROOT / "scripts" / "cross_cpu_drift.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


drift = _module()


def stdout(text):
    return {"output_type": "stream", "name": "stdout", "text": text}


def markdown(text):
    return {"output_type": "display_data", "metadata": {},
            "data": {"text/markdown": text, "text/plain": "<IPython.core.display.Markdown object>"}}


def notebook(*cells, injected=False):
    """Code cells given as lists of outputs (a markdown cell first, as in the workbook)."""
    out = [{"cell_type": "markdown", "metadata": {}, "source": "# title"}]
    if injected:  # papermill's cell: the committed notebooks have none
        out.append({"cell_type": "code", "metadata": {"tags": ["injected-parameters"]}, "source": "seeds = [0]",
                    "outputs": [stdout("99.99\n")], "execution_count": 1})
    for outputs in cells:
        out.append({"cell_type": "code", "metadata": {}, "source": "", "outputs": list(outputs),
                    "execution_count": 1})
    return {"cells": out, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def accuracy_table(pfedlia: str, fedavg: str = "33.08") -> dict:
    return markdown("| Method | Dirichlet α = 0.3 | per-client Dir(0.1) |\n|---|---|---|\n"
                    f"| FedAvg | {fedavg} (n = 1) | 36.75 (n = 1) |\n"
                    f"| pFedLIA | 34.09 (n = 1) | {pfedlia} (n = 1) |\n")


def cpu_table(seconds: str) -> list[dict]:
    return [stdout("CPU time (s): the run's process CPU time\n"),
            markdown(f"| Method | Dirichlet α = 0.3 |\n|---|---|\n| FedAvg | {seconds} (n = 1) |\n")]


COMMITTED = notebook(
    [stdout("weighted local accuracy (%): over the clients' own test splits\n"), accuracy_table("33.00")],
    cpu_table("2.2"),
    [stdout("Friedman test over 7 partitions: p = 0.0992\n"
            "         meanrank  mean_accuracy\nFedAvg       3.43          29.43\npFedLIA      3.43          45.37\n")],
)


def test_one_moved_value_is_found_with_its_method_and_size_and_the_unmoved_ones_are_not():
    executed = notebook(
        [stdout("weighted local accuracy (%): over the clients' own test splits\n"), accuracy_table("45.50")],
        cpu_table("9.9"),  # time moves on every run: never compared
        COMMITTED["cells"][3]["outputs"],  # the printed lines, unchanged
        injected=True,  # papermill's extra cell does not shift the cells
    )
    result = drift.compare(COMMITTED, executed)
    assert [(d["row"], d["cell"], d["table"], d["column"], d["committed"], d["executed"])
            for d in result["differences"]] == [
        ("pFedLIA", 0, "weighted local accuracy (%)", "per-client Dir(0.1)", 33.0, 45.5)]
    assert abs(result["differences"][0]["diff"] - 12.5) < 1e-12
    assert result["rows"]["pFedLIA"]["differ"] == 1 and abs(result["rows"]["pFedLIA"]["max_abs_diff"] - 12.5) < 1e-12
    assert result["rows"]["FedAvg"]["differ"] == 0 and result["rows"]["FedAvg"]["max_abs_diff"] == 0.0
    # 4 table cells (n = 1 is a run count, not a result), then 7 and p, 2 × 2 in the printed lines;
    # no CPU time
    assert result["compared"] == 4 + 2 + 4
    assert drift.compare(COMMITTED, COMMITTED)["differences"] == []


def test_a_table_printed_in_another_order_pairs_by_row_and_changed_words_count_as_text():
    executed = notebook(
        [stdout("weighted local accuracy (%): over the clients' own test splits\n"), accuracy_table("33.00", "33.10")],
        cpu_table("2.2"),
        [stdout("Friedman test over 7 partitions: p = 0.106\n"  # pFedLIA now ranks first
                "         meanrank  mean_accuracy\npFedLIA      3.14          47.15\nFedAvg       3.57          29.43\n"
                "a line that was not there\n")],
    )
    result = drift.compare(COMMITTED, executed)
    moved = {(d["row"], d["column"]): (d["committed"], d["executed"]) for d in result["differences"]}
    assert moved == {("FedAvg", "Dirichlet α = 0.3"): (33.08, 33.10),
                     ("Friedman test over 7 partitions", "number 2"): (0.0992, 0.106),
                     ("pFedLIA", "meanrank"): (3.43, 3.14), ("pFedLIA", "mean_accuracy"): (45.37, 47.15),
                     ("FedAvg", "meanrank"): (3.43, 3.57),
                     ("a line that was not there", "text"): ("(absent)", "a line that was not there")}
    fedavg = result["rows"]["FedAvg"]
    assert fedavg["differ"] == 2 and abs(fedavg["max_abs_diff"] - 0.14) < 1e-9
    assert result["rows"]["a line that was not there"]["largest"]["diff"] is None


def test_the_script_measures_a_folder_reports_and_always_exits_zero(tmp_path, capsys):
    committed, executed = tmp_path / "notebooks", tmp_path / "executed"
    committed.mkdir(), executed.mkdir()
    (committed / "11_x.ipynb").write_text(json.dumps(COMMITTED), encoding="utf-8")
    (committed / "12_y.ipynb").write_text(json.dumps(COMMITTED), encoding="utf-8")  # not executed
    moved = notebook([COMMITTED["cells"][1]["outputs"][0], accuracy_table("45.50")], cpu_table("2.2"),
                     COMMITTED["cells"][3]["outputs"])
    (executed / "11_x.ipynb").write_text(json.dumps(moved), encoding="utf-8")
    out = tmp_path / "drift.json"
    paths = [str(committed / "11_x.ipynb"), str(committed / "12_y.ipynb")]
    assert drift.main([str(executed), *paths, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "pFedLIA: 1 of 4 differ, max |Δ| 12.5" in text and "12_y: not executed" in text
    assert "33.00 → 45.50" in text  # as the notebook printed them
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["summary"]["differ"] == 1 and result["summary"]["largest"]["row"] == "pFedLIA"
    assert drift.main([str(executed), *paths, "--markdown"]) == 0
    table = capsys.readouterr().out
    assert "| 11_x | pFedLIA | 4 | 1 | 12.5 |" in table and "Not compared: 12_y (not executed)" in table
    assert drift.main([str(tmp_path / "absent"), *paths]) == 0  # nothing executed: still 0
    assert "0 notebook(s) compared (2 not)" in capsys.readouterr().out
    (executed / "11_x.ipynb").write_text("{not json", encoding="utf-8")
    assert drift.main([str(executed), *paths]) == 0
    assert "11_x: error" in capsys.readouterr().out
