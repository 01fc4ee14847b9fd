"""benchmarks/table3_like_for_like.py: its report reads the committed records, and bad input
is refused before any training."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "records" / "table3_like_for_like"


def _script():
    spec = importlib.util.spec_from_file_location("table3_like_for_like", ROOT / "benchmarks" / "table3_like_for_like.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_report_prints_every_committed_paper_text_record(capsys):
    _script().main(["--results", str(RECORDS), "--report"])
    lines = capsys.readouterr().out.splitlines()
    checked = 0
    for path in sorted(RECORDS.glob("*.json")):
        record = json.loads(path.read_text())
        spec = record["spec"]
        if spec.get("reproduction", "paper_text") != "paper_text":
            continue
        head = f"{spec['protocol']}={spec['level']:g} {spec['method']} "
        line = next(x for x in lines if x.startswith(head))
        assert f"paper_text={record['global_accuracy']:.4f}" in line, (line, path.name)
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


def test_report_shows_no_paper_code_number_for_a_run_still_to_come(capsys):
    """Where the code ran a method differently, the paper_text run does not stand in for the
    missing paper_code run (the table's own fallback is for methods run the same way)."""
    from fedlib.reproduction import runs_differently

    _script().main(["--results", str(RECORDS), "--report"])
    lines = capsys.readouterr().out.splitlines()
    records = [json.loads(p.read_text())["spec"] for p in RECORDS.glob("*.json")]
    ran_code = {(s["protocol"], s["level"], s["method"]) for s in records if s.get("reproduction") == "paper_code"}
    ran_text = {(s["protocol"], s["level"], s["method"]) for s in records if s.get("reproduction", "paper_text") == "paper_text"}
    missing = [k for k in ran_text - ran_code if runs_differently(k[2], 100, 0.5)]
    assert missing, "the committed records should include such a cell"
    for protocol, level, method in missing:
        line = next(x for x in lines if x.startswith(f"{protocol}={level:g} {method} "))
        assert "paper_code=—" in line, line
