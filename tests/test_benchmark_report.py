"""docs/performance.md's tables come from the committed speed records (benchmarks/report.py), and
the benchmarks' ``--record`` files are what the report reads (benchmarks/_record.py)."""
from __future__ import annotations

import json
import math
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import _record  # noqa: E402
import report  # noqa: E402


def _run(timestamp: str, cpu: str, ratio: float, gpu: str | None = None, benchmark: str = "engine_vs_sequential",
         file: str = "") -> dict:
    """A hand-made record of one run with one result row whose ratio identifies it."""
    return {"schema": 1, "benchmark": benchmark, "args": {"clients": 100}, "timestamp": timestamp,
            "results": [{"model": "lenet5", "clients": 100, "sequential_s": ratio, "engine_s": 1.0, "ratio": ratio}],
            "device": "cuda" if gpu else "cpu", "torch": "2.0", "commit": "a" * 40,
            "host": {"cpu": cpu, "cpu_capability": "AVX512", "threads": 2, "gpu": gpu}, "_file": file}


def test_latest_run_per_machine_and_the_history_newest_first():
    """Runs of the same arguments: the newest per machine is shown, the others below it."""
    a1, a2, a3 = (_run(f"2026-01-0{d}T00:00:00Z", "CPU A", r) for d, r in ((1, 11.0), (3, 13.0), (5, 15.0)))
    b1, b2 = _run("2026-01-02T00:00:00Z", "CPU B", 22.0), _run("2026-01-04T00:00:00Z", "CPU B", 24.0)
    g1 = _run("2026-01-01T12:00:00Z", "CPU A", 31.0, gpu="GPU G")  # CPU A with a GPU: another kind of machine
    latest, history = report.latest_and_history([a2, b1, g1, a1, a3, b2])
    assert latest == [a3, b2, g1]  # newest machine first
    assert history == [a2, b1, a1]

    text = report.render([a2, b1, g1, a1, a3, b2])
    section = text[text.index("### Engine vs. the per-client loop"):text.index("### The engine's two paths")]
    head, tail = section.split("Earlier runs, newest first:")
    assert [x in head for x in ("15.0×", "24.0×", "31.0×")] == [True] * 3
    assert [x in head for x in ("13.0×", "22.0×", "11.0×")] == [False] * 3
    assert tail.index("13.0×") < tail.index("22.0×") < tail.index("11.0×")
    assert "GPU G (host CPU CPU A)" in head and "No GPU record yet" not in text


def test_other_arguments_on_one_machine_are_another_configuration_with_its_own_latest_run():
    plain, ab, plain_old = (_run(f"2026-01-0{d}T00:00:00Z", "CPU A", r) for d, r in ((2, 2.0), (3, 3.0), (1, 1.0)))
    ab["args"] = {"clients": 100, "without_workers": True}
    assert report.latest_and_history([plain_old, ab, plain]) == ([ab, plain], [plain_old])
    assert "without_workers=True" in report.render([ab])


def test_equal_times_go_to_the_later_file_and_missing_figures_render_as_a_dash():
    early, late = _run("2026-01-01T00:00:00Z", "CPU A", 5.0, file="x/1.json"), _run("2026-01-01T00:00:00Z", "CPU A", 6.0,
                                                                                  file="x/2.json")
    assert report.latest_and_history([late, early]) == ([late], [early])
    text = report.render([late])
    row = next(line for line in text.splitlines() if line.startswith("| lenet5"))
    assert "6.0×" in row and report.MISSING in row  # of_bound etc. were not recorded
    assert "No GPU record yet" in text


def test_a_benchmark_without_records_says_how_to_make_one():
    text = report.render([])
    for spec in report.BENCHMARKS:
        assert f"`{spec.command} --record benchmarks/records/speed/{spec.name}` writes one" in text


def test_records_of_an_unknown_benchmark_fail_with_the_names():
    with pytest.raises(ValueError, match=r"unknown benchmarks \['typo'\].*BENCHMARKS"):
        report.render([_run("2026-01-01T00:00:00Z", "CPU A", 1.0, benchmark="typo")])


def test_splice_replaces_only_the_generated_part_and_needs_both_markers():
    page = f"advice\n{report.BEGIN}\nold tables\n{report.END}\nmore advice\n"
    new = report.splice(page, "new tables\n")
    assert new == f"advice\n{report.BEGIN}\n\nnew tables\n\n{report.END}\nmore advice\n"
    assert report.splice(new, "new tables\n") == new
    with pytest.raises(ValueError, match="markers"):
        report.splice("advice without markers\n", "x")


def test_a_written_record_is_strict_json_that_the_report_reads_back(tmp_path, monkeypatch):
    rows = [{"model": "mlp", "ratio": 2.5, "of_shapes": float("nan"), "accuracy_sequential": 0.5,
             "accuracy_engine": 0.75}]
    args = {"clients": 100, "models": "mlp", "record": str(tmp_path)}
    path = _record.save(tmp_path / "engine_vs_sequential", "engine_vs_sequential", args, rows,
                        notes=["reduced"])
    text = path.read_text()
    assert "NaN" not in text and path.suffix == ".json" and not list(tmp_path.rglob("*.part"))
    raw = json.loads(text)
    assert raw["args"] == {"clients": 100, "models": "mlp"}  # --record itself is not an argument of the run
    assert set(raw["host"]) >= {"cpu", "cpu_capability", "threads", "gpu"} and raw["host"]["gpu"] is None
    assert raw["commit"] is None or len(raw["commit"]) == 40
    assert raw["timestamp"].endswith("Z") and raw["notes"] == ["reduced"]
    [back] = report.load_records(tmp_path)
    assert math.isnan(back["results"][0]["of_shapes"]) and back["_file"] == f"engine_vs_sequential/{path.name}"
    assert _record.save(None, "engine_vs_sequential", args, rows) is None  # no --record: nothing written


def test_check_fails_on_a_stale_page_and_passes_on_a_fresh_one(tmp_path):
    records = tmp_path / "records"
    (records / "scaling").mkdir(parents=True)
    rec = _run("2026-01-01T00:00:00Z", "CPU A", 1.0, benchmark="scaling")
    rec.pop("_file")
    (records / "scaling" / "r.json").write_text(json.dumps(rec))
    page = tmp_path / "performance.md"
    page.write_text(f"advice\n{report.BEGIN}\nstale\n{report.END}\n")
    args = ["--records", str(records), "--page", str(page)]
    assert report.main(args + ["--check"]) == 1
    assert report.main(args) == 0 and "stale" not in page.read_text()
    assert report.main(args + ["--check"]) == 0


def test_the_committed_performance_page_is_a_fresh_render_of_the_committed_records():
    page = report.PAGE.read_text()
    assert page == report.splice(page, report.render(report.load_records(report.RECORDS))), (
        "docs/performance.md is stale: run `python benchmarks/report.py`")


def test_gpu_runs_are_named_at_the_top_and_the_header_states_the_kernels_the_rows_ran():
    """A GPU's records get a line naming the GPU and its benchmarks; a paper run timed inside
    ``gpu_kernels(tf32=True, ...)`` records the host after leaving it (the default policy in
    ``host``), so the run's header states the rows' setting, not the host's."""
    ieee = {"tf32": False, "deterministic": True}
    run = _run("2026-01-02T00:00:00Z", "CPU A", 1.0, gpu="GPU G", benchmark="paper_run")
    run["host"]["gpu_kernels"] = ieee
    run["results"] = [{"dataset": "fmnist", "protocol": "similarity", "level": 0.0, "seconds": 13.75,
                       "of_bound": 1.7e-5, "gpu_kernels": {"tf32": True, "deterministic": False}}]
    plain = _run("2026-01-01T00:00:00Z", "CPU A", 7.0, gpu="GPU G")
    plain["host"]["gpu_kernels"] = ieee
    text = report.render([run, plain, _run("2026-01-01T00:00:00Z", "CPU B", 2.0)])
    assert "On a GPU: **GPU G** ran `engine_vs_sequential`, `paper_run`" in text
    assert "No GPU record yet" not in text
    paper = text[text.index("### One paper-protocol run"):]
    assert "GPU kernels tf32, any." in paper and "GPU kernels ieee" not in paper
    assert "| 13.8 |" in paper and "| 0.002% |" in paper  # a share under 0.05 % keeps a significant digit
    engine = text[text.index("### Engine vs. the per-client loop"):text.index("### The engine's two paths")]
    assert "GPU kernels ieee, deterministic." in engine  # no row names a setting: the host's
