"""python -m fedlib.grid (fedlib.grid_cli): its --help and its list of tables name each registered
table's paper, notebook and records folder (fedlib.tables, workbook.paper_tables); benchmarks/paper_grid.py is the same command; a run prints
its progress while it trains without changing the command's own lines."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import record_fakes
from fedlib import grid_cli

ROOT = Path(__file__).resolve().parents[1]
SMOKE09 = ROOT / "params" / "smoke" / "09_fedprism.yaml"


def _command(*args, script=None):
    """The command in a subprocess of this checkout's fedlib (``-m fedlib.grid`` or a script)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, *([str(script)] if script else ["-m", "fedlib.grid"]), *args]
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_help_names_every_tables_notebook_paper_and_records_folder_and_what_a_run_costs():
    done = _command("--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("usage: python -m fedlib.grid ")
    assert "clust-psi-pfl-table3" in grid_cli.registry()
    for table, t in grid_cli.registry().items():
        assert f"  {table}\n" in text and f"notebooks/{t.notebook}.ipynb" in text and t.paper in text
        assert t.records is None or t.records in text
    assert "--list" in text and "CPU-hours" in text and "GPU-minutes" in text and "--progress" in text


@pytest.mark.parametrize("argv", [[], ["--tables"]])
def test_without_a_table_it_lists_the_tables_with_their_records(argv, capsys):
    assert grid_cli.main(argv) is None
    out = capsys.readouterr().out
    for table, t in grid_cli.registry().items():
        folder = t.records
        block = out.split(f"\n  {table}\n", 1)[1].split("\n  ", 4)
        assert f"notebooks/{t.notebook}.ipynb" in block[1]
        if folder is None:
            assert "none committed" in block[2]
        else:
            n = len(list((ROOT / folder).glob("*.json")))
            expected = f"records:  {folder} ({n} records)" if n else f"records:  {folder} (none yet)"
            assert block[2].splitlines()[0].strip() == expected
    assert "python -m fedlib.grid TABLE --out FOLDER --list" in out


def test_the_records_folders_are_those_the_report_and_the_notebooks_read():
    """The registry's records folders are those of the report's grid commands
    (report_cells.record_command, read from the same registry) and of the studies' PAPER_RECORDS."""
    from workbook import fedprism_study, like_for_like, pfedlia_study
    from workbook.report_cells import GRID_VARIANTS, grid_tables, record_command

    records = {name: t.records for name, t in grid_cli.registry().items()}
    for folder, t in grid_tables().items():
        for key in (folder, *(k for k in GRID_VARIANTS if k.split(":")[0] == folder)):
            m = re.search(r"fedlib\.grid (\S+) .*--out (\S+)", record_command(key, {}))
            assert m and (m.group(1), m.group(2)) == (t.name, records[t.name]), (key, m)
    assert records["fedprism-table1"] == str(fedprism_study.PAPER_RECORDS["table1"].relative_to(ROOT))
    assert records["fedprism-table9"] == str(fedprism_study.PAPER_RECORDS["table9"].relative_to(ROOT))
    assert records["pfedlia-table1"] == str(pfedlia_study.PAPER_RECORDS.relative_to(ROOT))
    assert records["clust-psi-pfl-table3"] == str(like_for_like.RECORDS.relative_to(ROOT))


def test_a_table_without_out_is_refused_with_its_records_folder(capsys):
    with pytest.raises(SystemExit) as exc:
        grid_cli.main(["fedprism-table9"])
    assert exc.value.code == 2
    assert "--out (e.g. --out benchmarks/records/fedprism/table9)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        grid_cli.main(["fedprism-table2"])
    assert "table must be one of" in capsys.readouterr().err


def test_benchmarks_paper_grid_is_the_same_command():
    spec = importlib.util.spec_from_file_location("paper_grid_alias", ROOT / "benchmarks" / "paper_grid.py")
    alias = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(alias)
    assert alias.main is grid_cli.main and alias.select is grid_cli.select and alias.run_state is grid_cli.run_state
    assert alias.registry is grid_cli.registry
    done = _command("--tables", script=ROOT / "benchmarks" / "paper_grid.py")
    assert done.returncode == 0 and "  fedprism-table1\n" in done.stdout, done.stderr
    done = _command("fedprism-table1", "--out", "unused", "--params", str(SMOKE09), "--list-datasets")
    assert done.returncode == 0 and done.stdout.split() == ["fmnist"], done.stderr


def test_the_console_script_is_declared():
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["fedlib-grid"] == "fedlib.grid_cli:cli"


def _fake_run_saying_its_progress(line):
    """A stand-in for fedlib.experiment.run: says a progress line through the run's checkpointer
    (as fedlib.checkpoint does a minute into a run) and returns a finished record."""
    from fedlib import checkpoint

    def run(spec, device="auto"):
        checkpoint.current().say(line)
        return record_fakes.record(spec)

    return run


@pytest.mark.parametrize("progress", ["rounds", "off"])
def test_a_run_prints_its_progress_lines_and_the_commands_own_lines_stay(tmp_path, monkeypatch, capsys, progress):
    """--progress rounds (the default): the lines of a run in progress reach stderr (run_grid's
    'rounds' mode: no per-run lines of run_grid's own); the command's lines are unchanged."""
    import importlib

    X = importlib.import_module("fedlib.run")  # the one run (fedlib.grid reads fedlib.run.run)

    monkeypatch.setattr(X, "run", _fake_run_saying_its_progress("  a run: round 3/40 (phase 1), phase ends in ≈ 2.0 min"))
    lines = []
    result = grid_cli.run_table("fedprism-table1", tmp_path / "t1", params=str(SMOKE09), seeds=[0],
                                methods=["fedavg"], alphas=[0.1], device="cpu", echo=lines.append, progress=progress)
    (spec,) = result["specs"]
    assert lines == [f"fedprism-table1: 1 runs, 0 already recorded in {tmp_path / 't1'}, 1 to compute",
                     f"{grid_cli.describe(spec, 'fedprism-table1')}: ok in {result['computed'][0]['seconds']:.1f} s, "
                     f"weighted local accuracy {100 * result['computed'][0]['global_accuracy']:.2f} %"]
    err = capsys.readouterr().err
    assert ("round 3/40" in err) == (progress == "rounds"), err
    assert "run_grid: 1 runs" not in err and "run_grid [1/1]" not in err
    with pytest.raises(ValueError, match=r"--progress must be one of \['rounds', 'off'\], got 'lines'"):
        grid_cli.run_table("fedprism-table1", tmp_path / "t2", params=str(SMOKE09), progress="lines", echo=print)
    grid_cli._PROGRESS = "rounds"
