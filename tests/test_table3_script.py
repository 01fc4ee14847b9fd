"""benchmarks/table3_like_for_like.py: its report reads the committed records, and bad input
is refused before any training."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "records" / "clust_psi_pfl" / "table3_like_for_like"


def _seed0(paths):
    """The records of seed 0 at the script's settings, what ``--report`` reads by default (``--seeds 0``);
    the folder holds other seeds, and other Table III columns (the report's), too."""
    from workbook.like_for_like import SETTINGS

    shown = {(p, float(x)) for p, levels in SETTINGS.items() for x in levels}
    for path in sorted(paths):
        spec = json.loads(path.read_text())["spec"]
        if spec.get("seed", 0) == 0 and (spec["protocol"], float(spec["level"])) in shown:
            yield path


def _script():
    spec = importlib.util.spec_from_file_location("table3_like_for_like", ROOT / "benchmarks" / "table3_like_for_like.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_report_prints_every_committed_paper_text_record(capsys):
    _script().main(["--results", str(RECORDS), "--report"])
    lines = capsys.readouterr().out.splitlines()
    checked = 0
    for path in _seed0(RECORDS.glob("*.json")):
        record = json.loads(path.read_text())
        spec = record["spec"]
        if spec.get("reproduction", "paper_text") != "paper_text":
            continue
        head = f"{spec['protocol']}={spec['level']:g} {spec['method']} "
        line = next(x for x in lines if x.startswith(head))
        assert f"paper_text={100 * record['global_accuracy']:.2f}%" in line, (line, path.name)
        checked += 1
    assert checked >= 10


def test_bad_hyper_is_refused_before_training(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        _script().main(["--hyper", "{fedyogi: 1}", "--results", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--hyper" in err and "is not JSON" in err and '{"fedyogi"' in err
    assert not any(tmp_path.iterdir())


def test_unknown_hyperparameter_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match="etaa"):
        _script().main(["--settings", "similarity:1", "--methods", "fedyogi", "--hyper", '{"fedyogi": {"etaa": 1}}',
                        "--results", str(tmp_path)])
    assert not any(tmp_path.iterdir())


def test_report_shows_no_paper_code_number_for_a_run_still_to_come(capsys, tmp_path):
    """Where the code ran a method differently, the paper_text run does not stand in for the
    missing paper_code run (the table's own fallback is for methods run the same way)."""
    import shutil

    from fedlib.reproduction import runs_differently

    specs = {p: json.loads(p.read_text())["spec"] for p in _seed0(RECORDS.glob("*.json"))}
    path, spec = next((p, s) for p, s in sorted(specs.items())
                      if s.get("reproduction", "paper_text") == "paper_text" and runs_differently(s["method"], 100, 0.5))
    shutil.copy(path, tmp_path / path.name)  # its paper_text run alone
    _script().main(["--results", str(tmp_path), "--report", "--markdown",
                    "--settings", f"{spec['protocol']}:{spec['level']:g}", "--methods", spec["method"]])
    lines = capsys.readouterr().out.splitlines()
    line = next(x for x in lines if x.startswith(f"{spec['protocol']}={spec['level']:g} {spec['method']} "))
    assert f"paper_text={100 * json.loads(path.read_text())['global_accuracy']:.2f}%" in line and "paper_code=—" in line, line
    from fedlib.methods import display_name

    row = next(x for x in lines if x.startswith(f"| {display_name(spec['method'])} |"))  # rows by display name
    assert row.endswith(" · — |"), row


def test_markdown_table_holds_every_committed_record_in_its_cell(capsys):
    from fedlib.reproduction import runs_differently

    script = _script()
    script.main(["--results", str(RECORDS), "--report", "--markdown"])
    out = capsys.readouterr().out
    from fedlib.methods import display_name

    rows = {line.split(" | ")[0][2:]: line.strip("| ").split(" | ")[1:] for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| Method")}
    assert set(rows) == {display_name(m) for m in script.METHODS}  # rows by display name
    columns = {("similarity", 0.0): 0, ("similarity", 1.0): 1, ("dirichlet", 0.3): 2}
    for path in _seed0(RECORDS.glob("*.json")):
        record = json.loads(path.read_text())
        spec = record["spec"]
        paper, text, code = rows[display_name(spec["method"])][columns[(spec["protocol"], spec["level"])]].split(" · ")
        if spec.get("reproduction", "paper_text") == "paper_text":
            assert text == f"{100 * record['global_accuracy']:.1f}", (path.name, text)  # percent
            if not runs_differently(spec["method"], 100, 0.5):
                assert code == "=", (path.name, code)
        else:
            assert code == f"{100 * record['reported_accuracy']:.1f}", (path.name, code)
