"""A grid finds a recorded run by its spec's fields (fedlib.lookup), not by its file name (the
spec's key, which holds fedlib's version): after a version bump ``--list`` counts the same runs
recorded and run_grid recomputes none of them, on every local backend; two records of one run in
a folder are refused naming both files (the grid, --list, the report). Nothing is trained here."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import fedlib
import fedlib.run
import fedlib.spec
import record_fakes
from fedlib import grid as G, grid_cli, lookup, records
from fedlib.spec import record_path

ROOT = Path(__file__).resolve().parents[1]
SMOKE09 = ROOT / "params" / "smoke" / "09_fedprism.yaml"
TABLE = "fedprism-table1"
FILTERS = ["--seeds", "0", "--alphas", "0.1"]


def _specs():
    return grid_cli.select(TABLE, grid_cli.load_params(TABLE, str(SMOKE09)), seeds=[0], alphas=[0.1])


def _bump(monkeypatch, version="9.9.9"):
    monkeypatch.setattr(fedlib, "__version__", version)
    monkeypatch.setattr(fedlib.spec, "__version__", version)


def _list(out, capsys) -> list[str]:
    grid_cli.main([TABLE, "--out", str(out), "--params", str(SMOKE09), *FILTERS, "--list", "--device", "cpu",
                   "--estimate-from", str(out)])
    return capsys.readouterr().out.splitlines()


def _folder(tmp_path):
    """Three of the filtered runs recorded, as the grid writes them: one ok, one failed (diverged),
    one infeasible (finished: a grid never retries them); the others not."""
    specs = _specs()
    assert len(specs) >= 5
    for s, status in zip(specs, ("ok", "failed", "infeasible")):
        records.write(record_path(tmp_path, s), record_fakes.record(s, status))
    return specs


@pytest.mark.parametrize("kw", [{}, {"on_run": lambda *a: None}, {"workers": 2}, {"together": True}])
def test_a_version_bump_keeps_the_recorded_runs_recorded(tmp_path, monkeypatch, capsys, kw):
    specs = _folder(tmp_path)
    before = _list(tmp_path, capsys)
    assert before[-1].startswith(f"totals: {len(specs)} runs, 3 recorded, 0 running elsewhere, {len(specs) - 3} to compute")
    keys = [s.key() for s in specs]
    _bump(monkeypatch)
    assert all(s.key() != k for s, k in zip(specs, keys))  # a lookup by file name would find nothing now
    assert _list(tmp_path, capsys) == before
    assert [grid_cli.run_state(tmp_path, s) for s in specs[:3]] == ["recorded (ok)", "recorded (failed)",
                                                                   "recorded (infeasible)"]
    monkeypatch.setattr(fedlib.run, "run", lambda s, device="auto": pytest.fail(f"{s} recomputed"))
    found = G.run_grid(specs[:3], tmp_path, progress=False, device="cpu", **kw)
    assert [r["status"] for r in found] == ["ok", "failed", "infeasible"]
    assert [r["key"] for r in found] == keys[:3]  # the records written under 0.1.0, read, not rewritten
    ran = []
    monkeypatch.setattr(fedlib.run, "run", lambda s, device="auto": ran.append(s) or record_fakes.record(s))
    found = G.run_grid(specs[:4], tmp_path, progress=False, device="cpu", **{k: v for k, v in kw.items()
                                                                             if k != "together"})
    assert ran == [specs[3]] and len(found) == 4
    assert sorted(p.name for p in tmp_path.glob("*.json")) == sorted([f"{k}.json" for k in keys[:3]]
                                                                      + [f"{specs[3].key()}.json"])


def test_the_command_skips_the_runs_recorded_before_a_version_bump(tmp_path, monkeypatch):
    specs = _folder(tmp_path)
    _bump(monkeypatch)
    ran = []
    monkeypatch.setattr(fedlib.run, "run", lambda s, device="auto": ran.append(s) or record_fakes.record(s))
    lines = []
    result = grid_cli.run_table(TABLE, tmp_path, params=str(SMOKE09), seeds=[0], alphas=[0.1], device="cpu",
                                echo=lines.append, progress="off")
    assert result["recorded"] == 3 and ran == specs[3:]
    assert lines[0] == f"{TABLE}: {len(specs)} runs, 3 already recorded in {tmp_path}, {len(specs) - 3} to compute"
    assert len(list(tmp_path.glob("*.json"))) == len(specs)


def test_a_manifest_names_the_files_recorded_before_a_version_bump(tmp_path, monkeypatch):
    specs = _folder(tmp_path)
    keys = [s.key() for s in specs]
    _bump(monkeypatch)
    G.write_manifest(tmp_path, specs)
    assert json.loads((tmp_path / "manifest.json").read_text())["keys"] == keys[:3] + [s.key() for s in specs[3:]]


def _duplicate(tmp_path, monkeypatch):
    """The first run recorded twice: under fedlib 0.1.0's key and under 9.9.9's."""
    s = _specs()[0]
    old = record_path(tmp_path, s)
    records.write(old, record_fakes.record(s))
    _bump(monkeypatch)
    new = record_path(tmp_path, s)
    records.write(new, record_fakes.record(s, accuracy=0.6))
    assert old != new
    return s, sorted([old.name, new.name])


def test_two_records_of_one_run_are_refused_naming_both_files(tmp_path, monkeypatch, capsys):
    s, (a, b) = _duplicate(tmp_path, monkeypatch)
    both = rf"{a} and {b} both match the spec \(dataset='fmnist'.*seed=0.*\): two records of seed 0 of one run"
    with pytest.raises(ValueError, match=both):
        lookup.find([s], tmp_path)
    monkeypatch.setattr(fedlib.run, "run", lambda s, device="auto": pytest.fail("trained"))
    with pytest.raises(ValueError, match=both):
        G.run_grid([s], tmp_path, progress=False, device="cpu")
    with pytest.raises(SystemExit):
        _list(tmp_path, capsys)
    assert f"{a} and {b} both match" in capsys.readouterr().err


def test_the_report_refuses_two_records_of_one_run_naming_both_files(tmp_path):
    from workbook import report

    rec = {"record_version": 1, "spec": {"dataset": "fmnist", "protocol": "similarity", "level": 1.0,
                                         "n_clients": 100, "seed": 1, "method": "fedavg", "hyper": {}},
           "status": "ok", "global_accuracy": 0.8, "local_accuracy": [0.8] * 100}
    d = tmp_path / "clust_psi_pfl" / "table3_like_for_like"
    d.mkdir(parents=True)
    (d / "0aa1.json").write_text(json.dumps(rec))
    (d / "0bb2.json").write_text(json.dumps({**rec, "global_accuracy": 0.7}))
    with pytest.raises(ValueError, match=r"0aa1\.json and 0bb2\.json both match .*two records of seed 1"):
        report.frame(tmp_path)
    # two runs (not one run twice) that one reading matches: row_values names both files too
    (d / "0bb2.json").write_text(json.dumps({**rec, "spec": {**rec["spec"], "hyper": {"lr": 0.5}}}))
    with pytest.raises(ValueError, match=r"two records of seed 1 match .*, 0aa1\.json and 0bb2\.json \(pin"):
        report.frame(tmp_path)


def test_cafa_run_status_finds_a_record_written_before_a_version_bump(monkeypatch):
    from workbook import cafa_study as S

    specs = _specs()[:2]
    recorded = [record_fakes.record(specs[0], "failed")]
    _bump(monkeypatch)
    assert list(S.run_status(specs, recorded)["status"]) == ["failed", "not run yet"]
