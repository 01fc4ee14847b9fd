"""fedlib.analysis.report: verdicts from records, the scoreboard, the rendered pages, and that the
committed docs/findings.md and README block are a fresh render of the committed records."""
import json
import re
import shutil

import numpy as np
import pytest

from fedlib.analysis import report, report_cells
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
        (d / f"{i:04d}.json").write_text(json.dumps(r))


def _row(df, row, column, reading):
    d = df[(df.paper == "clust_psi_pfl") & (df.table == "Table III") & (df.row == row) & (df.column == column)
           & (df.reading == reading)]
    assert len(d) == 1, (row, column, reading)
    return d.iloc[0]


def test_verdicts_follow_the_tolerance_and_seeds_are_averaged(tmp_path):
    # Table III: FedAvg at S = 1 is 0.86 in the paper; CL 0.90; Clust-PSI-PFL at S = 0 0.98.
    _write(tmp_path, T3, [_record("fedavg", "similarity", 1.0, 0, 0.865), _record("fedavg", "similarity", 1.0, 1, 0.855),
                          _record("cl", "similarity", 1.0, 0, 0.95),
                          _record("clust_psi_pfl", "similarity", 0.0, 0, 0.5)])
    df = report.frame(tmp_path)
    fedavg = _row(df, "fedavg", "FMNIST, S = 1", "both readings")
    assert fedavg.n == 2 and fedavg["mean"] == pytest.approx(86.0) and fedavg.verdict == "reproduced"
    assert fedavg.sd == pytest.approx(np.std([86.5, 85.5]))
    cl = _row(df, "cl", "FMNIST, S = 1", "both readings")
    assert cl.verdict == "differs" and cl.delta == pytest.approx(5.0) and cl.reason == ""
    assert cl.why == "no cause identified"
    # paper 0.98 → 98 %; ours 50 % (one seed)
    c = _row(df, "clust_psi_pfl", "FMNIST, S = 0", "paper_text")
    assert c.verdict == "differs" and c.n == 1
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
    assert code.verdict == "reproduced"  # paper: 0.59
    assert text.verdict == "differs" and text.reason == "text_vs_code"  # a cause is listed for it


def test_failed_records_do_not_count_as_results(tmp_path):
    _write(tmp_path, T3, [_record("fedavg", "similarity", 1.0, 0, None, status="failed")])
    row = _row(report.frame(tmp_path), "fedavg", "FMNIST, S = 1", "both readings")
    assert row.verdict == "not run" and "failed" in row.why


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
    assert report.format_ours([1.0, 3.0]) == "2.00 ± 1.00 (n = 2)"
    assert report.format_ours([]) == "—"
    assert report.format_ours([10.0, 12.0, np.nan], unit="") == "11.000 ± 1.000 (n = 2)"


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
        for reason, _ in c.causes.values():
            assert reason in report_cells.REASONS
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
    assert report.check() == [], "run: python -m fedlib.analysis.report --write"


def test_readme_block_links_to_rows_of_the_report():
    df = report.frame()
    block = report.readme_block(df)
    page = report.findings_markdown(df)
    anchors = re.findall(r"findings\.md#([a-z0-9-]+)", block)
    assert len(anchors) >= len(report_cells.PAPERS)
    for anchor in anchors:
        assert f'<a id="{anchor}"></a>' in page


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
    assert _pfedlia_row(df, "pfedlia", "paper protocol")["mean"] == pytest.approx(90.0)
    assert _pfedlia_row(df, "pfedlia", "paper protocol, peer-to-peer clustering")["mean"] == pytest.approx(60.0)
    assert _pfedlia_row(df, "cfl", "paper protocol")["mean"] == pytest.approx(66.0)
    assert _pfedlia_row(df, "cfl", "paper protocol, CFL ε1 = auto")["mean"] == pytest.approx(99.0)


def test_two_records_of_one_seed_answering_one_reading_are_refused(tmp_path):
    _write(tmp_path, T3, [_record("fedavg", "similarity", 1.0, 0, 0.86), _record("fedavg", "similarity", 1.0, 0, 0.80)])
    with pytest.raises(ValueError, match=r"two records of seed 0"):
        report.frame(tmp_path)
