"""Issue 68 parts 3–4: records checked on read, one reader for every table. Each planted record
is refused by name before it changes a number: the report's row keeps its n and mean, the page
lists the file and why; a duplicate is refused naming both files, by the report and by notebook
06's like-for-like reader; every committed record passes the strict reader."""
from __future__ import annotations

import json
import shutil

import pytest

import fedlib
from fedlib import experiment, records
from fedlib.paths import ROOT
from fedlib.spec import RunSpec
from workbook import report

RECORDS = ROOT / "benchmarks" / "records"
FEDAVG = "1781e57d33e2826f.json"  # CAFA Table V FedAvg's one committed ok run (seed 1)
OTHERS = ("180314a8466418e0.json", "0779c3f90b77941c.json")  # FedProx's and CAFA's of that setting
CBCC = "authors_iid10_noniid10_seed0.json"  # CAFA Table III's CBCC k, 10 IID + 10 non-IID
TABLE_V = "cafa-table-v-fedavg-best-accuracy-authors-protocol"
TABLE_III_K = "cafa-table-iii-cbcc-k-10-iid-10-non-iid-clients-authors-generator"


def test_every_committed_record_passes_the_strict_reader():
    checked = 0
    for path in sorted(RECORDS.rglob("*.json")):
        raw = records.read(path)
        if raw is not None and not {"spec", "status", "record_version"} & set(raw):
            continue  # not a run record (a benchmark's timings, the cross-CPU summary)
        records.read_strict(path)  # raises RecordError naming the file and why
        checked += 1
    assert checked > 1600


def test_a_records_key_is_its_specs():
    s = RunSpec("fmnist", "dirichlet", 0.3, 10, 2, "fedavg")
    assert records.key_of(s.to_dict(), fedlib.__version__) == s.key()


def _cafa(tmp_path):
    shutil.copytree(RECORDS / "cafa", tmp_path / "cafa")
    return tmp_path / "cafa" / "training", tmp_path / "cafa" / "cbcc"


def _seed(rec: dict, seed: int) -> dict:
    """``rec`` as another seed's valid record (its key recomputed)."""
    spec = {**rec["spec"], "seed": seed}
    return {**rec, "spec": spec, "key": records.key_of(spec, rec["versions"]["fedlib"])}


def _row(df, row_id):
    r = df.set_index("id").loc[row_id]
    return r.n, r["mean"]


def test_planted_records_are_refused_by_name_and_leave_the_rows_unchanged(tmp_path):
    training, cbcc = _cafa(tmp_path)
    before = report.frame(tmp_path)
    assert _row(before, TABLE_V) == (1, pytest.approx(87.17)) and _row(before, TABLE_III_K)[0] == 3
    assert report.refused_lines(tmp_path) == []
    for name in OTHERS:  # the table counts a seed every method finished: give the others seeds 4-7
        for seed in (4, 5, 6, 7):
            rec = _seed(json.loads((training / name).read_text()), seed)
            (training / f"{rec['key']}.json").write_text(json.dumps(rec))
    base = json.loads((training / FEDAVG).read_text())
    valid = _seed(base, 5)  # a valid new seed does move the row: the plants below would too
    (training / f"{valid['key']}.json").write_text(json.dumps(valid))
    assert _row(report.frame(tmp_path), TABLE_V)[0] == 2
    (training / f"{valid['key']}.json").unlink()

    planted = {}
    high = _seed(base, 5)
    high["history"] = [dict(e) for e in high["history"]]
    high["history"][10]["global_accuracy"] = 1.7
    planted[f"{high['key']}.json"] = (high, r"history\[10\]\.global_accuracy is 1\.7, not an accuracy in \[0, 1\]")
    null = _seed(base, 6)
    null["history"] = [dict(e) for e in null["history"]]
    null["history"][3]["global_accuracy"] = None
    planted[f"{null['key']}.json"] = (null, r"history\[3\]\.global_accuracy is null and not listed in 'nonfinite'")
    wrong = {**_seed(base, 7), "global_accuracy": base["global_accuracy"] + 0.01}
    planted[f"{wrong['key']}.json"] = (wrong, r"global_accuracy .* is not correct / n_test")
    forged = {**base, "spec": {**base["spec"], "seed": 4}}  # the seed changed, not the key nor the file name
    planted["forged.json"] = (forged, rf"its key '{base['key']}' is not its spec's .*changed after the run")
    for name, (rec, _) in planted.items():
        (training / name).write_text(json.dumps(rec))
    k = json.loads((cbcc / CBCC).read_text())
    k = {**k, "spec": {**k["spec"], "seed": 3}, "k": 10 ** 9}
    (cbcc / records.cbcc_name(k["spec"])).write_text(json.dumps(k))

    after = report.frame(tmp_path)
    assert _row(after, TABLE_V) == _row(before, TABLE_V)
    assert _row(after, TABLE_III_K) == _row(before, TABLE_III_K)
    lines = report.refused_lines(tmp_path)
    assert lines[0] == "5 records refused (left out of every row):"
    text = "\n".join(lines)
    for name, (_, why) in planted.items():
        assert f"cafa/training/{name}" in text
        with pytest.raises(records.RecordError, match=why):
            records.read_strict(training / name)
    assert "cafa/cbcc/authors_iid10_noniid10_seed3.json: k is 1000000000, not a cluster count in [1, 20]" in text
    page = report.findings_markdown(after, tmp_path)
    assert text in page and page.index(lines[0]) < page.index("## How to read a row")  # after the scoreboard
    assert text in report.sections(after, tmp_path)["scoreboard"]
    for name in list(planted)[1:]:
        (training / name).unlink()
    (cbcc / "authors_iid10_noniid10_seed3.json").unlink()
    assert report.refused_lines(tmp_path) == [f"1 record refused: cafa/training/{high['key']}.json: "
                                              "history[10].global_accuracy is 1.7, not an accuracy in [0, 1] "
                                              "(left out of every row)"]


def _duplicate(folder, name):
    """A second record of the run in ``folder / name``, as written under another fedlib version."""
    rec = json.loads((folder / name).read_text())
    rec = {**rec, "versions": {**rec["versions"], "fedlib": "0.0.9"}}
    rec["key"] = records.key_of(rec["spec"], "0.0.9")
    (folder / f"{rec['key']}.json").write_text(json.dumps(rec))
    return f"{rec['key']}.json"


def test_a_duplicate_is_refused_naming_both_files_by_the_report(tmp_path):
    training, _ = _cafa(tmp_path)
    other = _duplicate(training, FEDAVG)
    a, b = sorted([FEDAVG, other])
    with pytest.raises(ValueError, match=rf"{a} and {b} both match"):
        report.frame(tmp_path)


def test_notebook_06s_like_for_like_reader_refuses_a_duplicate(tmp_path):
    folder = tmp_path / "table3_like_for_like"
    shutil.copytree(RECORDS / "clust_psi_pfl" / "table3_like_for_like", folder)
    n = len(experiment.load_records(folder))
    name = sorted(p.name for p in folder.glob("*.json"))[0]
    other = _duplicate(folder, name)
    a, b = sorted([name, other])
    with pytest.raises(ValueError, match=rf"{a} and {b} both match"):
        experiment.load_records(folder)
    (folder / other).unlink()
    assert len(experiment.load_records(folder)) == n


def test_check_names_the_refused_record_rather_than_only_stale(monkeypatch, capsys):
    monkeypatch.setattr(report, "check", lambda: ["docs/findings.md"])
    monkeypatch.setattr(report, "refused_lines", lambda: ["1 record refused: cafa/training/x.json: k is 1e9"])
    assert report.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "1 record refused: cafa/training/x.json: k is 1e9" in err and "stale" not in err
