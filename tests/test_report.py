"""workbook.report: verdicts from records, the scoreboard, the rendered pages, and that the
committed docs/findings.md and README block are a fresh render of the committed records."""
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from workbook import report, report_cells
from fedlib import records
from fedlib.methods import display_name
from fedlib.paths import ROOT

T3 = "clust_psi_pfl/table3_like_for_like"


def _record(method, protocol, level, seed, acc, *, reproduction=None, reported=None, status="ok"):
    spec = {"dataset": "fmnist", "protocol": protocol, "level": level, "n_clients": 100, "seed": seed,
            "method": method, "hyper": {}}
    if reproduction:
        spec["reproduction"] = reproduction
    r = {"spec": spec, "status": status}
    if status == "ok":
        r.update(global_accuracy=acc, local_accuracy=[acc, acc])
        if reported is not None:
            r["reported_accuracy"] = reported
    return r


def _write(root, sub, records):
    d = root / sub
    d.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(records):
        (d / f"{i:04d}.json").write_text(json.dumps({"record_version": 1, **r}))


def _row(df, row, column, reading):
    d = df[(df.paper == "clust_psi_pfl") & (df.table == "Table III") & (df.row == row) & (df.column == column)
           & (df.reading == reading)]
    assert len(d) == 1, (row, column, reading)
    return d.iloc[0]


def test_verdicts_are_tests_and_seeds_are_averaged(tmp_path):
    # Table III: FedAvg at S = 1 is 0.86 ± 0.01 over 5 runs in the paper; CL 0.90 ± 0.02; Clust-PSI-PFL at S = 0 0.98.
    fedavg_s1 = [0.8600, 0.8605, 0.8595, 0.8602, 0.8598]
    _write(tmp_path, T3, [*(_record("fedavg", "similarity", 1.0, s, a) for s, a in enumerate(fedavg_s1)),
                          _record("fedavg", "similarity", 0.03, 0, 0.735), _record("fedavg", "similarity", 0.03, 1, 0.745),
                          _record("cl", "similarity", 1.0, 0, 0.80),
                          _record("clust_psi_pfl", "similarity", 0.0, 0, 0.5)])
    df = report.frame(tmp_path)
    fedavg = _row(df, "fedavg", "FMNIST, S = 1", "both readings")
    assert fedavg.n == 5 and fedavg["mean"] == pytest.approx(86.0) and fedavg.verdict == "reproduced"
    assert fedavg.sd == pytest.approx(np.std([100 * a for a in fedavg_s1], ddof=1))  # sample sd
    assert fedavg.verdict_text == "reproduced, 5 seeds" and fedavg.margin == pytest.approx(2.0)  # 2 × the paper's sd
    assert fedavg.paper_n == 5 and fedavg.low < 0 < fedavg.high and fedavg.pooled == ""
    # CL: one seed, no comparable row of two seeds for its method: it borrows the sd pooled over
    # every method read the same way at S (FedAvg's S = 1 and S = 0.03 rows), and says so
    cl = _row(df, "cl", "FMNIST, S = 1", "both readings")
    assert cl.delta == pytest.approx(-10.0) and cl.verdict == "differs" and cl.reason == ""
    assert cl.why.startswith("no cause identified; one seed: sd ") and "pooled over 2 rows" in cl.why
    assert cl.verdict_text == "differs, 1 seed" and cl.shared_value
    # one seed, no row of its reading has two: the widest scope, the folder's rows of its metric
    c = _row(df, "clust_psi_pfl", "FMNIST, S = 0", "paper_text")
    assert c.n == 1 and c.verdict == "differs" and "(its records folder, same data set and metric)" in c.why
    # a cell with no record reads "not run", naming the folder
    idle = _row(df, "fedavg", "FMNIST, S = 0", "both readings")
    assert idle.verdict == "not run" and idle.n == 0 and T3 in idle.why


def test_each_reading_takes_its_own_records_and_metric(tmp_path):
    # CFL runs differently under the code: the paper_text row reads global_accuracy of the
    # paper_text run, the paper_code row the code run's reported_accuracy.
    _write(tmp_path, T3, [_record("cfl", "similarity", 0.0, 0, 0.10),
                          _record("cfl", "similarity", 0.0, 0, 0.43, reproduction="paper_code", reported=0.59)])
    df = report.frame(tmp_path)
    text = _row(df, "cfl", "FMNIST, S = 0", "paper_text")
    code = _row(df, "cfl", "FMNIST, S = 0", "paper_code")
    assert text["mean"] == pytest.approx(10.0) and code["mean"] == pytest.approx(59.0)
    # one seed each, nothing comparable to pool a seed sd from: neither row is decided
    assert code.verdict == "undecided" and text.verdict == "undecided"  # paper: 0.59


def test_failed_records_do_not_count_as_results(tmp_path):
    _write(tmp_path, T3, [_record("fedavg", "similarity", 1.0, 0, None, status="failed")])
    row = _row(report.frame(tmp_path), "fedavg", "FMNIST, S = 1", "both readings")
    assert row.verdict == "not run" and "failed" in row.why


def test_a_diverged_record_says_where_it_broke(tmp_path):
    rec = _record("fedavg", "similarity", 1.0, 2, None, status="failed")
    rec["divergence"] = {"round_idx": 52, "optimizer": "sgd", "lr": 0.1, "clients": [0, 4]}
    _write(tmp_path, T3, [rec])
    row = _row(report.frame(tmp_path), "fedavg", "FMNIST, S = 1", "both readings")
    assert row.verdict == "not run" and row.n == 0
    assert row.why == "records: failed (FedAvg seed 2: diverged in round 53, sgd lr 0.1)"


def test_a_mean_over_the_seeds_that_ran_names_the_seeds_that_diverged(tmp_path):
    bad = _record("fedavg", "similarity", 1.0, 0, None, status="failed")
    bad["divergence"] = {"round_idx": 52, "optimizer": "sgd", "lr": 0.1, "clients": [3]}
    _write(tmp_path, T3, [bad, _record("fedavg", "similarity", 1.0, 1, 0.86)])
    row = _row(report.frame(tmp_path), "fedavg", "FMNIST, S = 1", "both readings")
    assert row.n == 1 and row["mean"] == pytest.approx(86.0) and row.verdict == "undecided"
    assert row.why.endswith("; not in the mean (1 of 2 seeds): failed (FedAvg seed 0: diverged in round 53, sgd lr 0.1)")


def test_unavailable_cells_never_read_records_and_the_scoreboard_counts_rows(tmp_path):
    df = report.frame(tmp_path)  # no records at all
    assert set(df.verdict) == {"not run"}
    sb = report.scoreboard(df).set_index("paper")
    assert sb["rows"].sum() == len(df)
    assert (sb["not run"] == sb["rows"]).all()
    # pFedLIA's CIFAR cells have no offline data
    assert sb.loc["pFedLIA", "of which no offline data"] == int(
        ((df.paper == "pfedlia") & df.column.str.startswith("CIFAR")).sum())


def test_format_ours_has_no_zero_spread_for_one_seed():
    assert report.format_ours([87.2]) == "87.20 (n = 1)"
    assert report.format_ours([1.0, 3.0]) == "2.00 ± 1.41 (n = 2)"  # sample sd: √2
    assert report.format_ours([]) == "—"
    assert report.format_ours([10.0, 12.0, np.nan], unit="") == "11.000 ± 1.414 (n = 2)"


def test_matches_reads_nested_fields_and_absent_reproduction():
    spec = {"method": "fedyogi", "hyper": {"eta": 0.3162}, "level": 1}
    assert report.matches(spec, (("hyper.eta", 0.3162), ("level", 1.0), ("reproduction", None)))
    assert not report.matches(spec, (("hyper.eta", 0.001),))
    assert not report.matches({**spec, "reproduction": "paper_code"}, (("reproduction", None),))
    assert report.matches({**spec, "reproduction": "paper_text"}, (("reproduction", None),))


def test_every_cell_uses_the_vocabularies():
    for c in report_cells.cells():
        for rd in c.readings:
            assert rd.metric in report_cells.METRICS
        names = {rd.name for rd in c.readings}
        for reading, cause in c.causes.items():
            assert cause.reason in report_cells.REASONS
            assert reading == "*" or reading in names, (c.row, c.column, reading)
            assert cause.evidence is None or cause.evidence in names, (c.row, c.column, cause.evidence)
            assert cause.evidence != reading  # a reading is no evidence for itself
        assert c.kind in report_cells.KINDS
        assert c.unavailable in (None, *report_cells.REASONS)
    ids = report.frame(ROOT / "nonexistent").id
    assert ids.is_unique


def test_deleting_a_record_turns_its_row_to_not_run(tmp_path):
    shutil.copytree(report.RECORDS / T3, tmp_path / T3)
    before = report.frame(tmp_path).set_index("id")
    row = "clust-psi-pfl-table-iii-cl-fmnist-s-1-both-readings"
    assert before.loc[row, "verdict"] != "not run"
    for p in (tmp_path / T3).glob("*.json"):
        s = json.loads(p.read_text())["spec"]
        if s["method"] == "cl" and s["protocol"] == "similarity" and s["level"] == 1.0:
            p.unlink()
    after = report.frame(tmp_path).set_index("id")
    assert after.loc[row, "verdict"] == "not run" and after.loc[row, "n"] == 0
    others = before.index[before.index != row]
    assert (after.loc[others, "verdict"] == before.loc[others, "verdict"]).all()


def test_committed_findings_and_readme_block_are_a_fresh_render():
    assert report.check() == [], "run: python -m workbook.report --write"


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else value


def _is_markdown_or_stream(output) -> bool:
    return output["output_type"] == "stream" or (
        output["output_type"] == "display_data" and "text/markdown" in output.get("data", {}))


def check_notebook_00_outputs(path, monkeypatch) -> int:
    """Run again, from the committed records, every code cell of the notebook at ``path`` that
    displays markdown or prints (and draws nothing: a cell with a figure, or one that saves a
    figure, is skipped); what it displays (the Markdown objects' text, in order) and prints must
    equal the cell's outputs in the notebook. Returns how many cells with outputs were compared."""
    import contextlib
    import io

    import IPython.display

    shown: list = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    nb = json.loads(Path(path).read_text())
    scope: dict = {"records": None}
    compared = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "code" or "parameters" in cell["metadata"].get("tags", []):
            continue
        source = "".join(cell["source"])
        outputs = cell.get("outputs", [])
        if "save_figure" in source or not all(_is_markdown_or_stream(o) for o in outputs):
            continue  # a figure: drawn, not compared here (nbval compares the notebook in CI)
        shown.clear()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(source, scope)
        assert all(isinstance(o, IPython.display.Markdown) for o in shown), source
        committed = [_text(o["data"]["text/markdown"]) for o in outputs if o["output_type"] == "display_data"]
        printed = "".join(_text(o["text"]) for o in outputs if o.get("name") == "stdout")
        assert [o.data for o in shown] == committed, "re-execute notebooks/00_report.ipynb (make refresh-notebooks)"
        assert out.getvalue() == printed, "re-execute notebooks/00_report.ipynb (make refresh-notebooks)"
        compared += bool(outputs)
    return compared


def test_notebook_00s_committed_displayed_tables_are_a_fresh_render(monkeypatch):
    """Notebook 00 displays the report's tables as rendered Markdown (report.sections, report.show):
    each such cell's committed output must be what it displays from the committed records now, as
    docs/findings.md must be a fresh render."""
    assert check_notebook_00_outputs(ROOT / "notebooks" / "00_report.ipynb", monkeypatch) >= 5


def test_notebook_00_displays_the_very_tables_of_the_page(committed_report):
    df, page = committed_report
    sec = report.sections(df)
    for name in ("scoreboard", "vocabularies", "beyond_label", "cross_paper"):
        assert sec[name] in page, name
    for paper in report_cells.PAPERS:  # the page's copy carries the rows' anchors
        page_copy = re.sub(r'<a id="[^"]*"></a>', "", "\n".join(report.paper_section(df, paper))).lstrip("\n")
        assert page_copy == sec[paper] and page_copy in re.sub(r'<a id="[^"]*"></a>', "", page), paper


def test_readme_block_links_to_rows_of_the_report(committed_report):
    df, page = committed_report
    block = report.readme_block(df)
    anchors = re.findall(r"findings\.md#([a-z0-9-]+)", block)
    assert len(anchors) >= len(report_cells.PAPERS)
    for anchor in anchors:
        assert f'<a id="{anchor}"></a>' in page


def test_the_cross_paper_table_is_the_reports_last_section(tmp_path):
    page = report.findings_markdown(report.frame(tmp_path), tmp_path)
    sections = re.findall(r"^## (.+)$", page, flags=re.M)
    assert sections[-2:] == ["PSI beyond label skew (notebook 12)", "Cross-paper table (notebook 11)"]


def test_the_readme_costs_block_is_rendered_from_its_record(tmp_path):
    """The README's commands' time and disk come from the committed measurement, by code."""
    rec = {"cores": 2, "commands": [
        {"command": "make workbook", "minutes": 23, "disk": {".venv/": 6.2e9, "data/": 1.59e8}, "note": "first run"},
        {"command": "make lab", "disk": {}, "note": "Lab"},
        {"command": "make site", "seconds": 39, "disk": {"build/site/": 1.8e7}, "note": "site"}]}
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(rec))
    lines = report.costs_block(path).splitlines()
    assert lines[0] == "| command | time (approximate, measured once on 2 cores) | disk | what |"
    assert lines[2] == "| `make workbook` | about 23 min | `.venv/` about 6.2 GB, `data/` about 159 MB | first run |"
    assert lines[3] == "| `make lab` | — | — | Lab |"
    assert lines[4] == "| `make site` | about 39 s | `build/site/` about 18 MB | site |"
    readme = (ROOT / "README.md").read_text()
    assert report.costs_block() in readme and "`make test` | about" in readme and "chromium" in readme


def test_missing_readme_markers_are_refused(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("no block here\n")
    with pytest.raises(ValueError, match="findings:start"):
        report.check(findings=tmp_path / "f.md", readme=readme)


def _pfedlia_row(df, row, reading):
    d = df[(df.paper == "pfedlia") & (df.row == row) & (df.column == "FMNIST, noisy") & (df.reading == reading)]
    assert len(d) == 1, (row, reading)
    return d.iloc[0]


def test_each_variant_of_a_method_answers_its_own_reading(tmp_path):
    """The grids run CFL at the paper's thresholds and at ε1 = auto, and pFedLIA clustering centrally
    and peer to peer, with the same seeds: each variant's records fill only its own row."""
    def rec(method, acc, **hyper):
        r = _record(method, "noisy_clusters", 5, 0, acc)
        r["spec"]["hyper"] = hyper
        return r
    _write(tmp_path, "pfedlia/table1", [
        rec("pfedlia", 0.90), rec("pfedlia", 0.60, clustering="p2p"),
        rec("cfl", 0.66, eps1=0.4, eps2=1.6, gamma=0.0), rec("cfl", 0.99, eps1="auto", eps2=0.0, gamma=0.0)])
    df = report.frame(tmp_path)
    wb = "workbook split, mean over clients"  # records without pool_test: the second reading
    assert _pfedlia_row(df, "pfedlia", wb)["mean"] == pytest.approx(90.0)
    assert _pfedlia_row(df, "pfedlia", f"{wb}, peer-to-peer clustering")["mean"] == pytest.approx(60.0)
    assert _pfedlia_row(df, "cfl", wb)["mean"] == pytest.approx(66.0)
    assert _pfedlia_row(df, "cfl", f"{wb}, CFL ε1 = auto (defective, superseded)")["mean"] == pytest.approx(99.0)
    assert _pfedlia_row(df, "cfl", "paper protocol, FL-bench split, pooled")["verdict"] == "not run"


def test_two_records_of_one_seed_answering_one_reading_are_refused(tmp_path):
    _write(tmp_path, T3, [_record("fedavg", "similarity", 1.0, 0, 0.86), _record("fedavg", "similarity", 1.0, 0, 0.80)])
    with pytest.raises(ValueError, match=r"two records of seed 0"):
        report.frame(tmp_path)


# ----------------------------------------------------------------------------- PSI-PFL §4.3 (EQ3)
PSI = "psi_pfl/comparison"


def _psi_record(method, seed, correct, n=(10, 10, 10), *, candidates=None, reproduction=None, level=None,
                status="ok"):
    """A run of notebook 07's grid at the paper's most heterogeneous setting, as run_grid writes it
    (strict JSON: the single run's AD/SDAD against CL are null)."""
    from workbook import psi_pfl_study
    from fedlib.evaluation import summarise_clients
    from fedlib.strict_json import dumps_strict

    spec = {"dataset": "adult", "protocol": "dirichlet", "n_clients": 100, "seed": seed, "method": method,
            **{k: v for k, v in psi_pfl_study.PAPER_MOST_HETEROGENEOUS.items() if k != "n_clients"}, "hyper": {}}
    if reproduction:
        spec["reproduction"] = reproduction
    if level is not None:
        spec["level"] = level
    if status != "ok":
        return {"spec": spec, "status": status, "error": "Dirichlet partition infeasible"}
    r = {"spec": spec, "status": "ok", "correct": list(correct), "n_test": list(n), "wpsi": 1.0, "info": {}}
    if candidates is not None:
        chosen = int(np.argmax([c["val_accuracy"] for c in candidates]))
        r["info"] = {"candidates": candidates, "selected_on": "val", "chosen": chosen}
        r["correct"] = candidates[chosen]["test_correct"]
    r.update(summarise_clients(r["correct"], r["n_test"]))
    return json.loads(dumps_strict(r))


def _psi_cand(p, val, test_correct, n=(10, 10, 10)):
    return {"percentile": float(p), "threshold": p / 100, "n_selected": 1, "val_accuracy": val,
            "test_correct": list(test_correct), "test_accuracy": sum(test_correct) / sum(n)}


def _psi_row(df, row, metric, reading):
    d = df[(df.paper == "psi_pfl") & (df.row == row) & df.column.str.startswith(metric + ",") & (df.reading == reading)]
    assert len(d) == 1, (row, metric, reading)
    return d.iloc[0]


def test_psi_pfl_ad_reads_the_papers_test_selected_variant_against_the_cl_run_of_its_seed(tmp_path):
    from workbook import psi_pfl_study

    # ζ at p10 is best on validation (ours), p50 best on test (the paper's variant)
    cands = [_psi_cand(10, 0.9, (6, 7, 8)), _psi_cand(50, 0.5, (9, 9, 6))]
    _write(tmp_path, PSI, [_psi_record("cl", 0, (8, 8, 8)), _psi_record("cl", 1, (9, 9, 9)),
                           _psi_record("psi_pfl", 0, (0, 0, 0), candidates=cands),
                           _psi_record("haccs", 0, (5, 8, 8)), _psi_record("haccs", 1, (5, 8, 8))])
    df = report.frame(tmp_path)
    variant = _psi_row(df, "psi_pfl", "AD", "paper's variant (ζ chosen on test)")
    ours = _psi_row(df, "psi_pfl", "AD", "ours (ζ chosen on validation)")
    # by hand, CL = 0.8: the variant's clients 0.9, 0.9, 0.6 -> |d| = 0.1, 0.1, 0.2; ours 0.6, 0.7, 0.8
    assert variant["values"] == pytest.approx([100 * 0.4 / 3]) and ours["values"] == pytest.approx([100 * 0.3 / 3])
    sdad = _psi_row(df, "psi_pfl", "SDAD", "paper's variant (ζ chosen on test)")
    assert sdad["values"] == pytest.approx([100 * np.std([0.1, 0.1, 0.2])])
    assert variant.paper_value == pytest.approx(100 * psi_pfl_study.PAPER_EQ3[(psi_pfl_study.PAPER_VARIANT, "ad_cl")])
    # each seed against its own CL run: seed 0 CL 0.8 (0.3, 0, 0), seed 1 CL 0.9 (0.4, 0.1, 0.1)
    haccs = _psi_row(df, "haccs", "AD", "paper_text")
    assert haccs["values"] == pytest.approx([10.0, 20.0]) and haccs.n == 2


def test_psi_pfl_ad_without_the_cl_run_of_its_seed_is_not_a_number(tmp_path):
    _write(tmp_path, PSI, [_psi_record("cl", 1, (8, 8, 8)), _psi_record("haccs", 0, (5, 8, 8))])
    row = _psi_row(report.frame(tmp_path), "haccs", "AD", "paper_text")
    assert row.verdict == "not run" and row.n == 0 and np.isnan(row["mean"])
    assert "no CL run of seed 0" in row.why


def test_psi_pfl_cp_leaves_the_clients_at_zero_out(tmp_path):
    from workbook import psi_pfl_study

    _write(tmp_path, PSI, [_psi_record("fedyogi", 0, (0, 4, 8)), _psi_record("fedyogi", 1, (5, 5, 5))])
    row = _psi_row(report.frame(tmp_path), "fedyogi", "CP", "paper protocol")
    # seed 0: the records' CP is inf (a client at 0); over the others (8 - 4) / 4 = 1; seed 1: 0
    assert row.metric == "cp_nonzero" and row["values"] == pytest.approx([1.0, 0.0])
    assert row.paper_value == psi_pfl_study.PAPER_EQ3[("fedyogi", "cp")]


def test_an_unknown_derivation_is_refused(tmp_path):
    rd = report_cells.Reading("x", PSI, (), "ad_cl", derive="no_such_transform")
    with pytest.raises(ValueError, match="derive must be one of"):
        report.row_values(rd, tmp_path)


def test_psi_pfl_rows_at_the_most_heterogeneous_alpha_that_ran_pass_over_an_infeasible_one(tmp_path):
    recs = [_psi_record(m, 0, None, status="infeasible") for m in ("cl", "fedyogi")]
    recs += [_psi_record("cl", 0, (8, 8, 8), level=0.7), _psi_record("fedyogi", 0, (8, 4, 8), level=0.7),
             _psi_record("fedyogi", 0, (8, 8, 8), level=50.0)]
    _write(tmp_path, PSI, recs)
    df = report.frame(tmp_path)
    at_paper = _psi_row(df, "fedyogi", "CP", "paper protocol")
    assert at_paper.verdict == "infeasible" and "infeasible" in at_paper.why  # a verdict, not a missing record
    ran = _psi_row(df, "fedyogi", "CP", "paper protocol, most heterogeneous α run here")
    assert ran["values"] == pytest.approx([1.0])  # α = 0.7, not 50: (8 - 4) / 4
    assert ran.verdict == "undecided" and "read at α=0.7" in ran.why  # one seed, no sd to pool
    assert ran.why.endswith("read at α=0.7")


def test_cross_paper_section_counts_the_committed_runs_and_invents_no_number(tmp_path):
    import json

    import yaml

    from workbook import cross_paper as X
    from fedlib.experiment import record_path

    lines = report.cross_paper_markdown(tmp_path)
    p = yaml.safe_load(report.CROSS_PAPER_PARAMS.read_text())
    specs = X.notebook_grid(**{k: p[k] for k in X.GRID_PARAMS})["cross"]
    assert f"0 of {len(specs)} runs recorded (0.0 CPU-hours" in " ".join(lines)
    assert "python -m fedlib.grid cross-paper --out benchmarks/records/cross_paper" in lines[-1]
    (tmp_path / "cross_paper").mkdir()
    s = specs[0]
    record_path(tmp_path / "cross_paper", s).write_text(json.dumps(
        {"record_version": 1, "key": s.key(), "spec": s.to_dict(), "status": "infeasible", "error": "too few samples"}))
    lines = report.cross_paper_markdown(tmp_path)
    assert f"1 of {len(specs)} runs recorded (0.0 CPU-hours" in " ".join(lines)  # an infeasible run: no CPU time
    table = lines[-1]
    header = table.splitlines()[0].strip("| ").split(" | ")
    assert header == ["method"] + [X.PARTITIONS[q].label for q in p["partitions"]]  # every partition of the grid
    row = [ln for ln in table.splitlines() if ln.startswith(f"| {display_name(s.method)} |")][0]
    assert set(row.strip("| ").split(" | ")[1:]) == {"—"}  # an infeasible run is no number
    assert any(ln.startswith("Not ranked yet (over the partitions whose every run is recorded): 0 partition(s)")
               for ln in lines)
    # three methods and CL on five partitions: not ranked while those partitions' other runs are missing
    accs = {"fedavg": 0.5, "ifca": 0.6, "pfedlia": 0.7, "cl": 0.9}
    five = [x for x in specs if X.partition_of(x.protocol, x.level) in p["partitions"][:5]]
    for spec in five:
        a = accs.get(spec.method)
        k = spec.n_clients
        body = ({"status": "ok", "global_accuracy": a, "ad": 0.0, "sdad": 0.0, "cp": 0.0, "wpsi": 0.0,
                 "local_accuracy": [a] * k, "global_test_accuracy": a, "info": {}, "seconds": 1.0}
                if a is not None else {"status": "failed", "error": "diverged"})
        if a is not None:
            record_path(tmp_path / "cross_paper", spec).write_text(json.dumps({"record_version": 1, "key": spec.key(),
                                                                               "spec": spec.to_dict(), **body}))
    lines = report.cross_paper_markdown(tmp_path)
    assert not [ln for ln in lines if ln.startswith("Mean rank")]  # incomplete partitions are no blocks
    # every other run of the five partitions recorded (failed: no score): ranked by autorank, CL a reference
    for spec in five:
        if spec.method not in accs:
            record_path(tmp_path / "cross_paper", spec).write_text(json.dumps(
                {"record_version": 1, "key": spec.key(), "spec": spec.to_dict(), "status": "failed", "error": "diverged"}))
    lines = report.cross_paper_markdown(tmp_path)
    ranked = [ln for ln in lines if ln.startswith("Mean rank over the 5 partitions whose every run is recorded")]
    assert ranked and "Friedman p = " in ranked[0] and "CL and the Oracle are references" in ranked[0]
    assert "nor are the methods without a score on every one of them" in ranked[0]
    rows = {ln.strip("| ").split(" | ")[0]: ln.strip("| ").split(" | ") for ln in lines[-1].splitlines()[2:]}
    assert lines[-1].splitlines()[0].endswith("| mean rank |")
    assert [rows[display_name(m)][-1] for m in ("pfedlia", "ifca", "fedavg", "cl")] == ["1.00", "2.00", "3.00", "—"]


def test_beyond_label_section_counts_the_committed_runs_and_reads_the_answer_from_them(tmp_path):
    import json

    import numpy as np
    import yaml

    from fedlib import partition as P
    from workbook import beyond_label as B
    from fedlib.experiment import record_path

    lines = report.beyond_label_markdown(tmp_path)
    p = yaml.safe_load(report.BEYOND_LABEL_PARAMS.read_text())
    specs = B.notebook_grid(**{k: p[k] for k in B.GRID_PARAMS})["study"]
    assert f"0 of {len(specs)} runs recorded" in " ".join(lines) and "python -m fedlib.grid beyond-label --out benchmarks/records/beyond_label" in lines[-1]
    (tmp_path / "beyond_label").mkdir()
    rot = {B.variant_of(s.to_dict()): s for s in specs if s.protocol == "rotated_groups" and s.seed == 0}
    truth = P.planted_clusters("rotated_groups", 100, 4)
    for s, grouping in ((rot["psi_label"], np.zeros(100, int)), (rot["psi_joint"], truth)):
        record_path(tmp_path / "beyond_label", s).write_text(json.dumps(
            {"record_version": 1, "key": s.key(), "spec": s.to_dict(), "status": "ok", "local_accuracy": [0.5] * 100,
             "global_accuracy": 0.5, "info": {"assignment": grouping.tolist()}, "cpu_seconds": 2700.0}))
    lines = report.beyond_label_markdown(tmp_path)
    assert f"2 of {len(specs)} runs recorded (1.5 CPU-hours, the sum of their `cpu_seconds`)." in " ".join(lines)
    table = [ln for ln in lines if "| n (seeds) |" in ln][0]
    row = [ln for ln in table.splitlines() if B.PARTITIONS["rotated"].label in ln][0]
    assert ("| 0.00 | cannot separate (one run: a single value) | joint label–attribute PSI | 1.00 | "
            "recovers (one run: a single value) | 1 of 5 | 1 |") in row
    assert "No clustering-only ARI is committed yet." in lines
    assert lines[-1] == "No pair of a baseline and FedAvg is recorded yet."
    # the clustering-only ARIs over seeds: the share of seeds ≥ 0.9 with its Clopper–Pearson interval
    (tmp_path / "beyond_label_ari").mkdir()
    import pandas as pd
    pd.DataFrame({"partition": "rotated", "variant": ["psi_label"] * 3 + ["psi_joint"] * 3, "seed": [0, 1, 2] * 2,
                  "n_clients": 100, "dataset": "fmnist", "ari": [0.0, 0.01, 0.02, 0.88, 0.95, 1.0], "tau": 2,
                  "groups": 2, "cpu_seconds": 1.0}).to_csv(tmp_path / "beyond_label_ari" / "aris.csv", index=False)
    lines = report.beyond_label_markdown(tmp_path)
    ari_table = [ln for ln in lines if "seeds ≥ 0.9 (" in ln][0]
    row = [ln for ln in ari_table.splitlines() if B.PARTITIONS["rotated"].label in ln][0]
    # label: 0 of 3 (CP [0, 1 − 0.025^(1/3)] = [0, 71 %]); joint: 2 of 3 (CP [9.4 %, 99.2 %]) — no limit above 1
    assert "| 0 of 3 seeds ≥ 0.9 (0 % [0, 71]), median 0.01 | cannot separate |" in row
    assert "| joint label–attribute PSI | 2 of 3 seeds ≥ 0.9 (67 % [9, 99]), median 0.95 | mixed |" in row
    assert "K-means seed fixed at 42" in " ".join(lines)
    # the small clients' gap to FedAvg over seeds (issue 70): FedAvg's small clients all right, pFedLIA's half
    from fedlib import notebook_params
    from workbook import beyond_label_seeds as S
    design = notebook_params.load(report.ROOT / S.SMALL_SEEDS_DESIGN, "12_beyond_label_skew")
    small = P.planted_clusters("small_clients", 100, 0.1) == 1
    for s in S.small_specs_over_seeds(p, design):
        v = B.variant_of(s.to_dict())
        if s.level == 0.1 and s.seed in (0, 1) and v in ("fedavg", "pfedlia"):
            correct = np.where(small, 2 if v == "fedavg" else 1, 2)
            record_path(tmp_path / "beyond_label", s).write_text(json.dumps(
                {"record_version": 1, "key": s.key(), "spec": s.to_dict(), "status": "ok",
                 "local_accuracy": (correct / 2).tolist(), "correct": correct.tolist(), "n_test": [2] * 100,
                 "global_accuracy": correct.sum() / 200, "info": {}, "cpu_seconds": 10.0}))
    lines = report.beyond_label_markdown(tmp_path)
    gap = [ln for ln in lines[-1].splitlines() if ln.startswith("| pFedLIA")][0]
    # the answer first (variant, all shares, verdict), then the one share recorded
    assert gap == "| pFedLIA | -50.0 [-50.0, -50.0] (n = 2) | below FedAvg | -50.0 [-50.0, -50.0] (n = 2) |"
    assert "4 of 75 runs recorded" in " ".join(lines)


# ----------------------------------------------------------------------------- the verdict rule
def test_the_papers_standard_error_and_ours_decide_and_noise_leaves_a_row_undecided(tmp_path):
    # Table III prints FedAvg at S = 0 as 0.14 ± 0.04 (5 runs): the margin is 2 × 4 pp
    _write(tmp_path, T3, [_record("fedavg", "similarity", 0.0, 0, 0.13), _record("fedavg", "similarity", 0.0, 1, 0.14),
                          _record("fedavg", "similarity", 0.0, 2, 0.15),
                          # FedAvg at α = 0.3: 0.82 ± 0.01; ours 84.0 and 86.0: Δ = 3 pp, but two noisy seeds
                          _record("fedavg", "dirichlet", 0.3, 0, 0.84), _record("fedavg", "dirichlet", 0.3, 1, 0.86),
                          # FedAvg at S = 1: 0.86 ± 0.01; ours 90.0, 90.2, 90.1: Δ = 4.1 pp, tight seeds
                          *(_record("fedavg", "similarity", 1.0, s, a) for s, a in enumerate((0.900, 0.902, 0.901)))])
    df = report.frame(tmp_path)
    s0 = _row(df, "fedavg", "FMNIST, S = 0", "both readings")
    assert s0.spread == pytest.approx(4.0) and s0.margin == pytest.approx(8.0) and s0.verdict == "reproduced"
    # the old rule (|Δ| ≤ spread + our sd = 1 + 1.41) said "differs"; two seeds of sd 1.41 decide nothing
    a3 = _row(df, "fedavg", "FMNIST, α = 0.3", "both readings")
    assert a3.verdict == "undecided" and a3.low < 2.0 < a3.high and "seeds in all would likely decide it" in a3.why
    s1 = _row(df, "fedavg", "FMNIST, S = 1", "both readings")
    assert s1.verdict == "differs" and s1.low > s1.margin == pytest.approx(2.0)
    page = "\n".join(report.paper_section(df, "clust_psi_pfl", root=tmp_path))
    assert "| 14.00 ± 4.00 (n = 5) |" in page  # the paper's ± and its runs are printed
    assert "| differs, 3 seeds (±2.00) |" in page


def test_fedprox_at_s0_is_no_longer_reproduced_by_its_noise(tmp_path):
    # the case: 35.64 ± 16.17 over 3 seeds against the paper's 15 ± 7: Δ = +20.64
    vals = [35.64 - 16.17, 35.64, 35.64 + 16.17]
    _write(tmp_path, T3, [_record("fedprox", "similarity", 0.0, s, v / 100) for s, v in enumerate(vals)])
    row = _row(report.frame(tmp_path), "fedprox", "FMNIST, S = 0", "paper_text")
    assert row.delta == pytest.approx(20.64) and row.verdict == "undecided"
    assert "no number of our seeds decides it" in row.why


def test_a_count_and_a_score_are_held_to_their_step():
    cbcc = {(c.row, c.column): c for c in report_cells.cells() if c.paper == "cafa" and c.row.startswith("CBCC")}
    assert cbcc[("CBCC k", "20 IID + 20 non-IID clients")].tolerance == 0.5  # half a cluster
    assert cbcc[("CBCC precision", "20 IID + 20 non-IID clients")].tolerance == pytest.approx(0.05)  # one client of 20
    assert cbcc[("CBCC acc", "20 IID + 20 non-IID clients")].tolerance == pytest.approx(1 / 40)
    assert all(c.kind == "label_only" for c in cbcc.values())


def test_k_of_ten_and_a_third_against_ten_reproduces(tmp_path):
    recs = [{"spec": {"generator": "authors", "n_iid": 20, "n_noniid": 20, "seed": s}, "status": "ok",
             "k": k, "acc": 1.0, "precision": 1.0, "recall": 1.0, "f1": 1.0} for s, k in enumerate((10, 10, 11))]
    (tmp_path / "cafa" / "cbcc").mkdir(parents=True)
    for r in recs:  # each under its spec's name, as benchmarks/cafa_cbcc.py writes it
        (tmp_path / "cafa" / "cbcc" / records.cbcc_name(r["spec"])).write_text(json.dumps({"record_version": 1, **r}))
    df = report.frame(tmp_path)
    k = df[(df.paper == "cafa") & (df.table == "Table III") & (df.row == "CBCC k")
           & (df.column == "20 IID + 20 non-IID clients") & (df.reading == "authors' generator")].iloc[0]
    assert k["mean"] == pytest.approx(10 + 1 / 3)
    # within half a cluster, but three seeds of sd 0.58 leave Δ's interval across ±0.5
    assert k.verdict == "undecided" and (k.seeds_to_decide is None or k.seeds_to_decide > 10)


# ----------------------------------------------------------------------------- causes and their evidence
def _cfl_s0(tmp_path, text, code, seeds=(0,)):
    """CFL at S = 0 (paper 0.59 ± 0.02): the paper_text runs at ``text``, the paper_code runs
    reporting ``code``, over ``seeds``; and three seeds of the paper_text reading at S = 0.03 so
    that one-seed rows have a seed sd to pool."""
    recs = [_record("cfl", "similarity", 0.03, s, 0.30 + 0.01 * s) for s in range(3)]
    recs += [_record("cfl", "similarity", 0.03, s, 0.43, reproduction="paper_code", reported=0.50 + 0.01 * s)
             for s in range(3)]
    for s in seeds:
        recs += [_record("cfl", "similarity", 0.0, s, text),
                 _record("cfl", "similarity", 0.0, s, 0.43, reproduction="paper_code", reported=code + 0.001 * s)]
    _write(tmp_path, T3, recs)
    return report.frame(tmp_path)


def test_a_cause_whose_evidence_moves_away_from_the_paper_is_only_suspected(tmp_path):
    # ours as the text says 10 %; the code's reading 30 %: it closes less than half of the 49 pp gap
    df = _cfl_s0(tmp_path, 0.10, 0.30)
    text = _row(df, "cfl", "FMNIST, S = 0", "paper_text")
    assert text.verdict == "differs" and text.reason == "text_vs_code" and text.cause_status == "suspected"
    assert text.why.startswith("suspected: ") and "evidence does not support it: 'paper_code' gives 30.00" in text.why
    sb = report.scoreboard(df).set_index("paper")
    assert sb.loc["Clust-PSI-PFL", "differ, cause confirmed"] == 0
    assert sb.loc["Clust-PSI-PFL", "differ, cause suspected"] >= 1


def test_one_seed_of_evidence_at_most_supports_a_cause(tmp_path):
    # paper 59; text 10 (gap 49); code 40: |Δ| = 19 ≤ 24.5 closes half the gap, on one seed
    text = _row(_cfl_s0(tmp_path, 0.10, 0.40), "cfl", "FMNIST, S = 0", "paper_text")
    assert text.cause_status == "supported" and text.why.startswith("supported (1 seed): ")


def test_evidence_that_overshoots_says_so(tmp_path):
    # paper 59; text 10 (Δ −49); code 85 (Δ +26): half the gap closed, but landing past the paper
    text = _row(_cfl_s0(tmp_path, 0.10, 0.85), "cfl", "FMNIST, S = 0", "paper_text")
    assert text.cause_status == "suspected" and "overshooting to the other side of the paper" in text.why


def test_evidence_that_reproduces_the_paper_on_several_seeds_confirms_a_cause(tmp_path):
    text = _row(_cfl_s0(tmp_path, 0.10, 0.59, seeds=(0, 1, 2)), "cfl", "FMNIST, S = 0", "paper_text")
    assert text.verdict == "differs" and text.cause_status == "confirmed"
    assert text.why.startswith("confirmed (3 seeds): ") and "evidence: 'paper_code' gives 59.10" in text.why


def test_a_cause_no_run_tests_is_suspected(tmp_path):
    # adult stands in for ACSIncome: nothing runs ACSIncome, so the cause stays a suspicion
    r = _record("fedavg", "similarity", 1.0, 0, 0.50)
    r["spec"]["dataset"] = "adult"
    _write(tmp_path, "clust_psi_pfl/table3_acs_income", [r])
    r2 = _record("fedavg", "similarity", 0.03, 0, 0.50)
    r3 = _record("fedavg", "similarity", 0.03, 1, 0.51)
    r2["spec"]["dataset"] = r3["spec"]["dataset"] = "adult"
    _write(tmp_path, "clust_psi_pfl/table3_acs_income", [r, r2, r3])
    row = _row(report.frame(tmp_path), "fedavg", "ACSIncome (adult stand-in), S = 1", "both readings")
    assert row.verdict == "differs" and row.cause_status == "suspected" and "(no run tests it)" in row.why
    assert row.stand_in


def test_variant_readings_carry_no_blanket_cause():
    for c in report_cells.cells():
        if c.paper == "pfedlia":
            assert c.cause(report_cells.CFL_AUTO) is None
            assert c.cause("paper protocol, peer-to-peer clustering") is None
        if c.paper == "fedprism" and c.table == "Table 9":
            assert not c.causes  # the ablations fix the components: γ's note does not apply
    prism = [c for c in report_cells.cells() if c.paper == "fedprism" and c.table == "Table 1" and c.row == "fedprism"]
    assert prism and all(c.cause("paper protocol").evidence == "paper protocol, Alg. 2's [0, 1] clip of α" for c in prism)


# ----------------------------------------------------------------------------- infeasible, not run, guesses
def test_infeasible_is_a_verdict_with_its_reason_not_a_missing_record(tmp_path):
    rec = _record("fedavg", "dirichlet", 0.05, 0, None, status="infeasible")
    rec["error"] = ("Dirichlet partition infeasible: no draw out of max_draws=20000 gave every one of K=100 clients "
                    "≥ 10 samples with alpha=0.05. Raise alpha, use fewer clients.")
    _write(tmp_path, T3, [rec])
    df = report.frame(tmp_path)
    row = _row(df, "fedavg", "FMNIST, α = 0.05", "both readings")
    assert row.verdict == "infeasible" and row.verdict_text == "infeasible"
    assert row.why.startswith("Dirichlet partition infeasible: no draw") and "Raise alpha" not in row.why
    sb = report.scoreboard(df).set_index("paper")
    assert sb.loc["Clust-PSI-PFL", "infeasible"] == 1
    assert sb.loc["Clust-PSI-PFL", "not run"] == int(((df.paper == "clust_psi_pfl") & (df.verdict == "not run")).sum())
    page = "\n".join(report.paper_section(df, "clust_psi_pfl", root=tmp_path))
    assert "Dirichlet partition infeasible" in page and "| infeasible |" in page


def test_a_row_infeasible_at_its_seed_is_not_run_where_another_method_drew_the_partition_at_another_seed(tmp_path):
    """The partition depends on the seed, not the method: CL's seed 0 infeasible at α = 0.05 while
    FedAvg ran on seed 1's partition leaves CL's row runnable there (not run), not infeasible."""
    cl = _record("cl", "dirichlet", 0.05, 0, None, status="infeasible")
    cl["error"] = "Dirichlet partition infeasible: no draw gave every client ≥ 10 samples. Raise alpha."
    _write(tmp_path, T3, [cl, _record("fedavg", "dirichlet", 0.05, 1, 0.7)])
    df = report.frame(tmp_path)
    row = _row(df, "cl", "FMNIST, α = 0.05", "both readings")
    assert row.verdict == "not run"
    assert row.why == ("its seeds' partitions cannot be drawn (Dirichlet partition infeasible: no draw gave every "
                       "client ≥ 10 samples); another method's run drew seed 1's")
    assert _row(df, "fedavg", "FMNIST, α = 0.05", "both readings").verdict != "infeasible"
    _write(tmp_path / "alone", T3, [cl])  # no other draw: infeasible stays the verdict
    assert _row(report.frame(tmp_path / "alone"), "cl", "FMNIST, α = 0.05", "both readings").verdict == "infeasible"


def _t3_record(method, protocol, level, seed=0, *, cpu=None, device="cpu", status="ok", root=None):
    """A record of Table III's like-for-like script (its spec, at its protocol: T = 40, E = 5, q = 0.5)
    written where the script writes it under ``root``, as fedlib.grid_cli's --list finds it."""
    import record_fakes
    from fedlib.spec import RunSpec, record_path
    from workbook.like_for_like import FRACTION

    s = RunSpec("fmnist", protocol, level, 100, seed, method, fl={"rounds": 40, "local_epochs": 5, "fraction": FRACTION})
    r = record_fakes.record(s, status, 0.86, device=device, fl={"rounds": 40, "local_epochs": 5}, host={"threads": 1},
                            **({} if cpu is None else {"cpu_seconds": cpu}))
    path = record_path(root / T3, s)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(r))
    return s


def _group_specs(command: str) -> list:
    return list({s.key(): s for c in command.split("\n") for s in report.command_specs(c)[0]}.values())


def test_rows_not_run_are_listed_with_their_command_and_cost(tmp_path):
    from fedlib import grid_cli

    _t3_record("fedavg", "similarity", 1.0, cpu=600.0, root=tmp_path)
    _t3_record("fedprox", "similarity", 1.0, cpu=1200.0, root=tmp_path)
    _t3_record("fedavg", "similarity", 0.0, cpu=60.0, device="cuda:0", root=tmp_path)  # no estimate of a CPU run
    df = report.frame(tmp_path)
    groups = report.not_run_groups(df, tmp_path).set_index("records")
    g = groups.loc[T3]
    missing = df[(df.records == T3) & (df.verdict == "not run")]
    assert g["rows"] == len(missing)
    # the paper table's grid command (workbook.paper_tables), filtered to the rows not run
    assert g["command"].startswith("python -m fedlib.grid clust-psi-pfl-table3 --out "
                                   "benchmarks/records/clust_psi_pfl/table3_like_for_like --methods ")
    assert "--seeds 0 1 2" in g["command"] and "fedavg" in g["command"] and "--settings " in g["command"]
    # the runs the printed command computes (its own spec list), less those recorded in the folder
    todo = [s for s in _group_specs(g["command"]) if grid_cli.run_state(tmp_path / T3, s) == "to compute"]
    assert g["runs"] == len(todo)
    # FedProx's S = 1 row left is its paper-code reading; the command (methods × settings × both
    # readings) computes its paper-text seeds 1 and 2 as well, and the page says so
    assert g["other_runs"] == 2
    # a FedAvg run is estimated at FedAvg's 600 CPU-seconds, a FedProx run at FedProx's 1,200, any
    # other method's at the median of the data set's CPU runs (900)
    per = {"fedavg": 600.0, "fedprox": 1200.0}
    assert g["device"] == "cpu" and g["hours"] == pytest.approx(sum(per.get(s.method, 900.0) for s in todo) / 3600)
    assert g["estimated_runs"] == g["runs"] and g["fallback_runs"] == 0
    page = "\n".join(report.paper_section(df, "clust_psi_pfl", root=tmp_path))
    assert "CPU-hours" in page and "python -m fedlib.grid clust-psi-pfl-table3" in page


def test_psi_pfl_rows_say_their_setting_is_a_guess_and_quote_the_paper():
    df = report.frame(ROOT / "nonexistent")
    psi = df[df.paper == "psi_pfl"]
    assert len(psi) and (psi.guess != "").all()
    assert "Under the most heterogeneous scenario, our solution achieves an AD of 3%" in psi.guess.iloc[0]
    assert (df[df.paper != "psi_pfl"].guess == "").all()


def test_chance_level_rows_and_seeds_at_chance_are_counted_apart(tmp_path):
    # FedAvgM at S = 0: paper 0.11 ± 0.01, ours at 10.02: both within 1 pp of 10 %
    # FedProx at S = 0: paper 0.15 ± 0.07; one of our three seeds at exactly 10.00 %, a one-class predictor's score
    _write(tmp_path, T3, [_record("fedavgm", "similarity", 0.0, 0, 0.1002),
                          *(_record("fedprox", "similarity", 0.0, s, a) for s, a in enumerate((0.10, 0.16, 0.18))),
                          *(_record("fedavg", "similarity", 1.0, s, a) for s, a in enumerate((0.860, 0.861, 0.859)))])
    df = report.frame(tmp_path)
    assert _row(df, "fedavgm", "FMNIST, S = 0", "both readings").chance_level
    fedprox = _row(df, "fedprox", "FMNIST, S = 0", "paper_text")
    assert not fedprox.chance_level and fedprox.at_chance == 1 and "1 of 3 seeds at chance level" in fedprox.why
    fedavg = _row(df, "fedavg", "FMNIST, S = 1", "both readings")
    assert not fedavg.chance_level and fedavg.at_chance == 0 and report.group(fedavg) == "own data"
    assert report.group(fedprox) == report.group(_row(df, "fedavgm", "FMNIST, S = 0", "both readings")) == "at chance"
    sb = report.scoreboard(df).set_index("paper")
    assert sb.loc["Clust-PSI-PFL", "at chance"] == 2
    assert sb.loc["Clust-PSI-PFL", "own data: reproduced"] == 1
    head = report.headline(df)
    assert head.startswith("Of 1 table rows (a paper cell read one way) trained on the paper's own data set, 1 reproduce")
    assert "2 sit at chance or have a seed at it" in head and "They rest on 7 distinct run records." in head


def test_cl_rows_share_one_printed_value_and_are_counted_apart():
    cl = [c for c in report_cells.cells() if c.paper == "clust_psi_pfl" and c.row == "cl"]
    assert cl and all(c.shared_value for c in cl)
    assert len({(c.value, c.column.split(",")[0]) for c in cl}) == 2  # one value per data set
    assert not any(c.shared_value for c in report_cells.cells() if c.row != "cl")


def test_pfedlia_rows_carry_their_own_cause_or_none():
    rows = [c for c in report_cells.cells() if c.paper == "pfedlia"]
    reasons = {c.row: {x.reason for x in c.causes.values()} for c in rows}
    assert reasons["local"] == {"paper_inconsistent"} and reasons["fesem"] <= {"known_defect", "rule_unresolved"}
    assert all(not r for m, r in reasons.items() if m not in ("local", "fesem"))
    assert "pretrained_unavailable" not in report_cells.REASONS


def test_fedamps_glob_note_quotes_the_papers_own_value():
    amp = next(c for c in report_cells.cells() if c.paper == "fedprism" and c.row == "fedamp"
               and c.column == "FMNIST, α = 0.1, Glob")
    note = amp.cause("paper protocol").note
    assert f"the paper's {amp.value:.2f} %" in note and "10.00 % is" not in note


def test_the_chaos_note_sits_beside_pfedlias_rows(committed_report):
    page = committed_report[1]
    pfedlia = page[page.index('<a id="pfedlia"></a>'):]
    assert "Across CPUs, pFedLIA is chaotic" in pfedlia[:pfedlia.index("### pFedLIA Table I")]


def test_pfedlias_fl_bench_rows_get_the_command_that_runs_that_split(tmp_path):
    df = report.frame(tmp_path)  # no records: every available row is not run
    groups = report.not_run_groups(df, tmp_path)
    workbook = [c for c in groups.command if "data_split: workbook" in c]
    assert len(workbook) == 1 and "--params /tmp/10_pfedlia_workbook.yaml" in workbook[0]
    assert "/^  pfedlia: {influence_samples: 100}/d" in workbook[0]  # the workbook records trained θ̂_j on everything
    fl_bench = [c for r, c in zip(groups.records, groups.command) if r == "pfedlia/table1" and "workbook" not in c]
    assert len(fl_bench) == 1 and "--params" not in fl_bench[0]  # the paper profile is FL-bench's split


def test_pfedlia_table_i_reads_fl_bench_pooled_first_and_the_workbook_mean_second(tmp_path):
    """A pooled record (FL-bench split) answers the paper-profile reading with Σ correct / Σ n; a
    workbook record the second reading with the mean over clients; pFedLIA's readings pin
    influence_samples (100 on FL-bench's, absent on the workbook's)."""
    def rec(method, local, n, **fields):
        r = _record(method, "noisy_clusters", 5, 0, 0.0)
        hyper = fields.pop("hyper", {})
        r["spec"].update(fields, hyper=hyper)
        r.update(local_accuracy=local, global_accuracy=sum(a * k for a, k in zip(local, n)) / sum(n))
        return r
    _write(tmp_path, "pfedlia/table1", [
        rec("fedavg", [0.9, 0.5], [30, 10], pool_test=True),       # pooled 0.8, mean 0.7
        rec("fedavg", [0.6, 0.4], [10, 10]),                       # workbook: mean 0.5
        rec("pfedlia", [1.0, 0.8], [10, 30], pool_test=True, hyper={"influence_samples": 100}),  # pooled 0.85
        rec("pfedlia", [0.2, 0.2], [10, 10], pool_test=True)])     # FL-bench split, whole train split: no reading
    df = report.frame(tmp_path)
    fb, wb = "paper protocol, FL-bench split, pooled", "workbook split, mean over clients"
    cells = df[(df.paper == "pfedlia") & (df.column == "FMNIST, noisy")]
    assert list(dict.fromkeys(cells[cells.row == "fedavg"].reading)) == [fb, wb]
    assert _pfedlia_row(df, "fedavg", fb)["mean"] == pytest.approx(80.0)
    assert _pfedlia_row(df, "fedavg", wb)["mean"] == pytest.approx(50.0)
    assert _pfedlia_row(df, "pfedlia", fb)["mean"] == pytest.approx(85.0)
    assert _pfedlia_row(df, "pfedlia", wb)["verdict"] == "not run"


def test_cfl_rows_say_their_thresholds_and_that_cfl_never_split(tmp_path):
    def rec(split, **hyper):
        r = _record("cfl", "noisy_clusters", 5, 0, 0.66)
        r["spec"]["hyper"] = hyper
        r["info"] = {"split_log": [{"round": 1, "split": False}, {"round": 2, "split": split}]}
        return r
    _write(tmp_path, "pfedlia/table1", [rec(False, eps1=0.4, eps2=1.6, gamma=0.0),
                                        rec(True, eps1="auto", eps2=0.0, gamma=0.0)])
    df = report.frame(tmp_path)
    wb = "workbook split, mean over clients"
    assert _pfedlia_row(df, "cfl", wb)["why"].endswith("CFL at ε1 = 0.4, ε2 = 1.6, γ = 0; CFL never split")
    auto = _pfedlia_row(df, "cfl", f"{wb}, CFL ε1 = auto (defective, superseded)")["why"]
    assert auto.endswith("CFL at ε1 = auto (defective, superseded; 0.5 × warm-up update), ε2 = 0, γ = 0") and "never split" not in auto
    assert report.cfl_row_note([{"spec": {"method": "fedavg"}}]) == ""


def test_not_run_counts_leave_out_the_runs_already_recorded(tmp_path):
    """A row whose only record failed is not run, but the command skips that (setting, seed): it is
    counted as recorded, not as a run to compute, and not in the cost. FedAvg, whose S = 1 row ran,
    gets its own command without S = 1: a command computes only runs of the rows it is printed for."""
    _t3_record("fedavg", "similarity", 1.0, cpu=600.0, root=tmp_path)
    _t3_record("fedavg", "similarity", 0.0, status="failed", root=tmp_path)
    df = report.frame(tmp_path)
    assert _row(df, "fedavg", "FMNIST, S = 0", "both readings").verdict == "not run"
    g = report.not_run_groups(df, tmp_path).set_index("records").loc[T3]
    commands = g["command"].split("\n")
    [fedavg] = [c for c in commands if "--methods fedavg " in c]
    assert len(commands) == 2 and "similarity:1 " not in fedavg and "similarity:1," not in fedavg
    specs = _group_specs(g["command"])
    assert g["recorded"] == 1 and g["runs"] == len(specs) - 1 and g["other_runs"] == 0
    assert g["hours"] == pytest.approx(g["runs"] * 600.0 / 3600)
    page = "\n".join(report.paper_section(df, "clust_psi_pfl", root=tmp_path))
    assert f"{g['runs']} of {g['runs'] + 1} runs to compute" in page and "the commands skip the 1 recorded" in page


def test_every_decided_row_of_the_committed_records_is_workbook_verdicts_test():
    """The page's verdicts are the simulated rule's (tests/test_verdicts.py), row by row: for every
    row of two seeds or more, the outcome, the interval and the margin are verdicts.verdict's."""
    from workbook import verdicts as V

    df = report.frame()
    rows = df[(df.n >= 2) & df.verdict.isin(["reproduced", "differs", "undecided"])]
    assert len(rows) > 50
    for r in rows.itertuples():
        paper_n = int(r.paper_n) if np.isfinite(r.paper_n) else 1  # NaN: no spread printed
        v = V.verdict(r.paper_value, r.spread, paper_n, r.values, r.tolerance)
        assert (v.outcome, v.margin) == (r.verdict, pytest.approx(r.margin)), r.id
        assert (v.low, v.high) == (pytest.approx(r.low), pytest.approx(r.high)), r.id


def test_cross_paper_table_prints_every_ranked_methods_mean_rank_cfl_included():
    """Issue 70: CFL's row label names its thresholds (method_row_label); its mean rank must be
    keyed the same, not printed as "—". On the committed records every ranked row has a number,
    and the split-half τ (not leave-one-block-out, not rounds 9 vs 10) says what it rests on."""
    lines = report.cross_paper_markdown()
    table = lines[-1].splitlines()
    assert table[0].rstrip(" |").endswith("mean rank")
    cfl = [ln for ln in table if ln.startswith("| CFL")]
    assert cfl and cfl[0].rstrip(" |").split(" | ")[-1] not in ("—", "", "nan")
    ranked = [ln for ln in table[2:] if not ln.startswith(("| CL", "| Oracle"))]
    float(cfl[0].rstrip(" |").split(" | ")[-1])
    assert all(ln.rstrip(" |").split(" | ")[-1] not in ("—", "nan") for ln in ranked)  # CL, the Oracle: references
    rests = [ln for ln in lines if ln.startswith("What it rests on")][0]
    assert "split-half Kendall τ" in rests and "leave-one-block-out" not in rests


def test_fesem_row_note_counts_the_stays_from_the_records():
    """Issue 69: a FeSEM row says how many re-assignments kept the cluster, read from its records
    (``info['stay']`` where the run wrote it, else replayed from ``selected``/``choices``)."""
    # client 1: E-steps in rounds 1 and 2 (same window, kept), then round 4 after the re-clustering (not counted)
    replayed = {"spec": {"method": "fesem", "seed": 1}, "status": "ok",
                "info": {"selected": [[0, 1], [1, 2], [1, 2], [0], [1]], "choices": [[0, 1], [1, 0], [1, 1], [0], [0]],
                         "reclustered": [3]}}
    written = {"spec": {"method": "fesem", "seed": 0}, "status": "ok", "info": {"stay": {"window": [9, 10]}}}
    assert report.fesem_row_note([replayed, written, {"spec": {"method": "cfl"}}]) == \
        "FeSEM kept the cluster in 10 of 12 re-assignments (9/10, 1/2 by seed)"
    assert report.fesem_row_note([{"spec": {"method": "cfl"}, "info": {}}]) == ""
