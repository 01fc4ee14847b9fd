"""Every long command speaks (issue 71, part 4): a run of any method, resumable or not, prints a
progress line every ``$FEDLIB_PROGRESS_INTERVAL`` seconds (default 60) through the grid; a
finished run's line carries its accuracy."""
from __future__ import annotations

import time

import pytest

import fedlib.run
from fedlib import checkpoint as C
from fedlib import experiment as X
from fedlib import grid_cli
from fedlib.grid import run_grid
from fedlib.methods import method_info

import record_fakes


@pytest.mark.cross_cpu  # it trains (tests/conftest.py)
def test_a_non_resumable_methods_run_prints_a_line_every_interval(tmp_path, monkeypatch, capsys):
    """'local' goes through no resumable round loop (the per-round progress of
    :meth:`fedlib.checkpoint.Checkpointer.rounds` never runs): the grid's heartbeat speaks for it,
    naming the run and, once the run has evaluated, its last accuracy."""
    assert not method_info("local").resumable
    monkeypatch.setenv(C.ENV_PROGRESS, "0.2")
    monkeypatch.setenv(C.ENV_FOLDER, str(tmp_path / "ck"))
    real = fedlib.run.run

    def slow(spec, device="auto"):  # the real run, then quiet for 1.5 s before it returns
        record = real(spec, device)
        time.sleep(1.5)
        return record

    monkeypatch.setattr(fedlib.run, "run", slow)
    spec = X.RunSpec("adult", "dirichlet", 0.5, 4, 0, "local", fl={"rounds": 2, "local_epochs": 1}, n_train=400)
    (record,) = run_grid([spec], tmp_path / "out", device="cpu", progress="rounds")
    assert record["status"] == "ok"
    beats = [line for line in capsys.readouterr().err.splitlines() if ": training, " in line]
    assert len(beats) >= 3, beats  # 1.5 s quiet at 0.2 s a line
    label = "adult (Dirichlet α = 0.5) K=4 local seed=0"  # the partition by its display name (partition_name)
    assert all(line.startswith(f"run_grid: {label}: training, ") and " min so far" in line for line in beats), beats
    last = record["history"][-1]
    assert f"accuracy {100 * last['global_accuracy']:.2f}% after round {last['round']}" in beats[-1], beats


def test_the_heartbeat_stops_with_the_run_and_is_silent_with_nowhere_to_say(monkeypatch):
    monkeypatch.setenv(C.ENV_PROGRESS, "0.05")
    said = []
    ck = C.Checkpointer(C.checkpoint_path("k", "/nonexistent"), "k", label="a run", say=said.append)
    assert ck.progress_every == 0.05
    with C.active(ck):
        time.sleep(0.5)
    n = len(said)
    assert n >= 3 and all(s.startswith("run_grid: a run: training, ") for s in said), said
    time.sleep(0.3)
    assert len(said) == n  # no line after the run
    with C.active(C.Checkpointer(C.checkpoint_path("k", "/nonexistent"), "k", say=None)):
        time.sleep(0.2)  # no thread, nothing said, nothing raised


@pytest.mark.parametrize("raw", ["0", "-1", "soon"])
def test_a_bad_interval_is_refused_before_any_run(raw, monkeypatch):
    from fedlib.grid import check_settings

    monkeypatch.setenv(C.ENV_PROGRESS, raw)
    with pytest.raises(ValueError, match=rf"\$FEDLIB_PROGRESS_INTERVAL must be a number of seconds > 0, got '{raw}'"):
        check_settings()


def test_a_finished_runs_line_carries_its_accuracy():
    spec = X.RunSpec("adult", "dirichlet", 0.5, 4, 0, "fedprism", fl={"rounds": 2, "local_epochs": 1}, n_train=400)
    ok = record_fakes.record(spec, accuracy=0.7)
    assert grid_cli._line(grid_cli.describe, spec, {**ok, "seconds": 15.7}) == (
        "adult (Dirichlet α = 0.5) K=4 fedprism seed=0: ok in 15.7 s, weighted local accuracy 70.00 %")
    failed = record_fakes.record(spec, status="failed", seconds=3.0)
    assert grid_cli._line(grid_cli.describe, spec, failed) == "adult (Dirichlet α = 0.5) K=4 fedprism seed=0: failed in 3.0 s"


def test_report_check_says_what_it_compared(tmp_path, monkeypatch, capsys):
    """``python -m workbook.report --check`` on success: the page (its lines) and the README block
    it compared, the record files and the table rows behind them (the render itself, 1.5 min on
    the committed records, is a stand-in here: tests/test_report.py checks it)."""
    import functools

    import pandas as pd

    from workbook import report

    root, findings, readme = tmp_path / "records", tmp_path / "findings.md", tmp_path / "README.md"
    (root / "a").mkdir(parents=True)
    for name in ("a/r1.json", "a/r2.json", "r3.json"):
        (root / name).write_text("{}")
    monkeypatch.setattr(report, "frame", lambda r: pd.DataFrame({"paper": ["psi_pfl", "psi_pfl", "cafa"]}))
    monkeypatch.setattr(report, "_rendered", lambda df, text, r: ("# page\n\nrows\n", "the readme\n"))
    findings.write_text("# page\n\nrows\n")
    readme.write_text("the readme\n")
    monkeypatch.setattr(report, "check", functools.partial(report.check, root, findings, readme))
    monkeypatch.setattr(report, "refused_lines", lambda: [])
    monkeypatch.setattr(report, "forest_figure_stems", lambda df: [])  # the page's forest figures: none here
    assert report.main(["--check"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == (f"report --check: current: {findings} (3 lines) and the findings block of {readme} are what the 3 "
                   "record files under benchmarks/records render: 3 table rows of 2 papers, no record refused"), out
    findings.write_text("edited\n")
    assert report.main(["--check"]) == 1 and "report --check: current" not in capsys.readouterr().out


def test_list_summary_counts_by_row_and_setting_with_the_same_totals(tmp_path, capsys):
    """``--list --summary`` (or ``--summary``): the counts by row and by setting instead of a line
    per run; its totals line is --list's, and its counts add up to the runs --list prints."""
    from collections import Counter

    from fedlib import records
    from fedlib.spec import record_path

    smoke = grid_cli.ROOT / "params" / "smoke" / "09_fedprism.yaml"
    table = "fedprism-table1"
    specs = grid_cli.select(table, grid_cli.load_params(table, str(smoke)), seeds=[0])
    for s in specs[:2]:
        records.write(record_path(tmp_path, s), record_fakes.record(s))
    argv = [table, "--out", str(tmp_path), "--params", str(smoke), "--seeds", "0", "--device", "cpu",
            "--estimate-from", str(tmp_path)]
    grid_cli.main(argv + ["--list"])
    full = capsys.readouterr().out.splitlines()
    grid_cli.main(argv + ["--summary"])
    short = capsys.readouterr().out.splitlines()
    assert short[-1] == full[-1] and len(full) == len(specs) + 1
    rows = Counter(grid_cli.table_of(table).label(s) for s in specs)
    settings = Counter(f"{s.dataset} {s.protocol}={s.level:g} K={s.n_clients}" for s in specs)
    assert short[0] == "by row:" and short[1 + len(rows)] == "by setting:"
    assert len(short) == 3 + len(rows) + len(settings)
    recorded = {grid_cli.table_of(table).label(s) for s in specs[:2]}
    for line in short[1:1 + len(rows)]:
        row, counts = line.strip().split(": ", 1)
        done = sum(grid_cli.table_of(table).label(s) == row for s in specs[:2])
        assert counts.startswith(f"{rows[row]} runs, {done} recorded, 0 running, {rows[row] - done} to compute"), line
    assert recorded and {line.strip().split(": ")[0] for line in short[2 + len(rows):-1]} == set(settings)
