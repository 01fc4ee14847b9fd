"""workbook.like_for_like: the like-for-like Table III cells and their markdown, by hand."""
from __future__ import annotations

import json

import pytest

import numpy as np

from workbook import like_for_like as lfl
from fedlib.reproduction import runs_differently

NAN = float("nan")


def test_closer_names_the_reading_nearer_the_paper():
    assert lfl.closer(0.50, 0.58, 0.30) == "paper_text"
    assert lfl.closer(0.50, 0.80, 0.45) == "paper_code"
    assert lfl.closer(0.50, 0.625, 0.375) == "tie"
    assert lfl.closer(0.50, 0.58, NAN) == "—"
    assert lfl.closer(NAN, 0.58, 0.30) == "—"


def test_markdown_writes_each_cell_as_paper_text_code_by_hand():
    protocols = {"similarity": [0.0], "dirichlet": [0.3]}
    table = {("similarity", 0.0, "fedavg"): (0.14, 0.1004, NAN, True),      # one run, both readings
             ("dirichlet", 0.3, "fedavg"): (0.82, NAN, NAN, True),           # not run yet
             ("similarity", 0.0, "cfl"): (0.59, 0.1, 0.48215, False),        # two runs
             ("dirichlet", 0.3, "cfl"): (0.74, 0.8799, NAN, False)}          # its code run to come
    assert lfl.markdown(table, protocols, ["fedavg", "cfl"]) == "\n".join([
        "| Method | S = 0 (%) | α = 0.3 (%) |",
        "|---|---|---|",
        "| FedAvg | 14 · 10.0 · = | 82 · — · — |",
        "| CFL | 59 · 10.0 · 48.2 | 74 · 88.0 · — |"])
    lines = lfl.report_lines(table)
    assert lines[2] == "similarity=0 cfl paper=59.00% paper_text=10.00% paper_code=48.22% closer=paper_code"
    assert lines[1] == "dirichlet=0.3 fedavg paper=82.00% paper_text=— paper_code=— closer=—"


def test_cells_without_records_hold_the_papers_values_only():
    table = lfl.cells([])
    assert len(table) == 3 * len(lfl.METHODS)
    paper, text, code, same = table[("similarity", 0.0, "cfl")]
    assert (paper, np.isnan(text), np.isnan(code), same) == (0.59, True, True, False)
    assert table[("dirichlet", 0.3, "fedavg")][0] == 0.82 and table[("dirichlet", 0.3, "fedavg")][3]


def test_committed_records_land_in_their_cells():
    """Every cell holds the mean over the seeds of its committed records; a one-run method's
    paper_code is its paper_text."""
    from collections import defaultdict

    paths = sorted(lfl.RECORDS.glob("*.json"))
    shown = {(p, float(x)) for p, levels in lfl.SETTINGS.items() for x in levels}  # the table's columns
    records = [r for r in map(json.loads, (p.read_text() for p in paths))
               if (r["spec"]["protocol"], float(r["spec"]["level"])) in shown]  # other columns: the report's
    table = lfl.cells(records)
    text_runs, code_runs = defaultdict(list), defaultdict(list)
    for r in records:
        spec = r["spec"]
        key = (spec["protocol"], float(spec["level"]), spec["method"])
        if spec.get("reproduction", "paper_text") == "paper_text":
            text_runs[key].append(r["global_accuracy"])
        else:
            code_runs[key].append(r["reported_accuracy"])
    assert any(len(v) > 1 for v in text_runs.values())  # several seeds: the cell is their mean
    for key, values in text_runs.items():
        paper, text, code, same = table[key]
        assert same == (not runs_differently(key[2], 100, lfl.FRACTION))
        assert text == pytest.approx(np.mean(values), abs=1e-12)
        if same:
            assert code == text
    for key, values in code_runs.items():
        assert table[key][2] == pytest.approx(np.mean(values), abs=1e-12)
    assert len(records) >= 50
