"""workbook.paper_claims: the papers' claims, tested as A − B on run records: paired
differences, the verdict rule (gain, reversal, tie, match, reduction, one seed, no record), the
conversion-artefact cleaning, and, on the committed records and seed texts, that every quote is
the paper's own sentence and every claim gets a verdict."""
import json
import re

import numpy as np
import pytest

from workbook import paper_claims as pc
from workbook import report, report_cells
from workbook.report_cells import Reading

SUB = "claims_test"


def _record(method, seed, acc, *, status="ok", level=0.0):
    """A record shaped like benchmarks/records/clust_psi_pfl/table3_like_for_like/*.json (the
    fields the report reads)."""
    spec = {"dataset": "fmnist", "protocol": "similarity", "level": level, "n_clients": 100, "seed": seed,
            "method": method, "hyper": {}, "fl": {"rounds": 40, "local_epochs": 5, "fraction": 0.5},
            "n_train": None, "test_fraction": 0.2, "arch": None}
    r = {"record_version": 1, "spec": spec, "status": status}
    if status == "ok":
        r.update(global_accuracy=acc, local_accuracy=[acc, acc], ad_cl=None, sdad_cl=None, cp=None)
    return r


def _write(root, records, sub=SUB):
    d = root / sub
    d.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(records):
        (d / f"{i:04d}.json").write_text(json.dumps(r))


def _reading(method, sub=SUB):
    return Reading("test", sub, tuple(sorted(dict(dataset="fmnist", protocol="similarity", level=0.0,
                                                  n_clients=100, method=method).items())), "global_accuracy")


def _claim(kind="gain", b="fedavg", b_value=None, tolerance=1.0):
    return pc.Claim("clust_psi_pfl", "q", "w", "s", _reading("clust_psi_pfl"),
                    _reading(b) if b else None, kind, "%", tolerance, float("nan"), b_value)


def _grid(root, a, b):
    """A's and B's accuracies (fractions) per seed: {seed: value}."""
    _write(root, [_record("clust_psi_pfl", s, v) for s, v in a.items()]
           + [_record("fedavg", s, v) for s, v in b.items()])


# ----------------------------------------------------------------------------- evaluate
def test_paired_differences_and_a_clear_gain(tmp_path):
    _grid(tmp_path, {0: 0.90, 1: 0.91, 2: 0.92}, {0: 0.80, 1: 0.805, 2: 0.82})
    e = pc.evaluate(_claim(), tmp_path)
    assert e["paired"] and e["seeds"] == [0, 1, 2] and e["n"] == 3
    assert np.allclose(e["diffs"], [10.0, 10.5, 10.0])
    assert e["mean"] == pytest.approx(np.mean([10.0, 10.5, 10.0]))
    assert e["sd"] == pytest.approx(np.std([10.0, 10.5, 10.0], ddof=1))
    assert e["values_a"] == pytest.approx({0: 90.0, 1: 91.0, 2: 92.0})
    assert e["margin"] == pytest.approx(e["sd"])  # a gain's margin: the per-seed noise
    assert e["verdict"] == "holds" and e["verdict_text"] == "holds"
    assert e["outcome"] == "A above B beyond the margin"


def test_a_reversal_does_not_hold(tmp_path):
    _grid(tmp_path, {0: 0.80, 1: 0.81}, {0: 0.85, 1: 0.87})
    e = pc.evaluate(_claim(), tmp_path)
    assert e["mean"] == pytest.approx(-5.5)
    assert e["verdict"] == "does not hold" and e["outcome"] == "A below B beyond the margin"
    # the same records support a claimed reduction ("lower")
    assert pc.evaluate(_claim("lower"), tmp_path)["verdict"] == "holds"


def test_a_tie_within_the_margin(tmp_path):
    # differences +0.5, -0.5, +0.3 pp: mean 0.1 within their sd 0.53
    _grid(tmp_path, {0: 0.905, 1: 0.895, 2: 0.903}, {0: 0.90, 1: 0.90, 2: 0.90})
    gain = pc.evaluate(_claim(), tmp_path)
    assert gain["mean"] == pytest.approx(0.1)
    assert gain["verdict"] == "does not hold" and gain["outcome"] == "within the margin"
    assert pc.evaluate(_claim("matches"), tmp_path)["verdict"] == "holds"
    assert pc.evaluate(_claim("lower"), tmp_path)["verdict"] == "does not hold"


def test_a_small_gain_every_seed_agrees_on_holds_and_one_seed_needs_the_tolerance(tmp_path):
    # +0.3, +0.4, +0.2 pp (the size of the papers' 0.4-0.6 pp claims): mean 0.3 > sd 0.1
    _grid(tmp_path, {0: 0.903, 1: 0.904, 2: 0.902}, {0: 0.90, 1: 0.90, 2: 0.90})
    assert pc.evaluate(_claim(), tmp_path)["verdict"] == "holds"
    # one seed: its noise is unknown, the 1 pp tolerance stands in
    _grid(tmp_path / "one", {0: 0.903}, {0: 0.90})
    e = pc.evaluate(_claim(), tmp_path / "one")
    assert e["margin"] == 1.0 and e["verdict_text"] == "does not hold (1 seed)"
    # a claimed match is held to the tolerance at least
    assert pc.margin_of("matches", 1.0, 0.1) == 1.0 and pc.margin_of("gain", 1.0, 0.1) == 0.1


def test_margin_is_the_sd_when_seeds_disagree(tmp_path):
    # differences 1, 5, 9 pp: mean 5 > sd 4 -> holds; -3, 3, 9: mean 3 <= sd 6 -> a tie, though > 1 pp
    _grid(tmp_path, {0: 0.51, 1: 0.55, 2: 0.59}, {0: 0.50, 1: 0.50, 2: 0.50})
    e = pc.evaluate(_claim(), tmp_path)
    assert e["sd"] == pytest.approx(4.0) and e["margin"] == pytest.approx(4.0) and e["verdict"] == "holds"
    _grid(tmp_path / "b", {0: 0.47, 1: 0.53, 2: 0.59}, {0: 0.50, 1: 0.50, 2: 0.50})
    e = pc.evaluate(_claim(), tmp_path / "b")
    assert e["mean"] == pytest.approx(3.0) and e["margin"] == pytest.approx(6.0)
    assert e["verdict"] == "does not hold" and e["outcome"] == "within the margin"


def test_only_shared_ok_seeds_are_paired(tmp_path):
    recs = [_record("clust_psi_pfl", 0, 0.95), _record("clust_psi_pfl", 1, 0.96), _record("clust_psi_pfl", 2, 0.5),
            _record("fedavg", 1, 0.90), _record("fedavg", 2, 0.91), _record("fedavg", 0, None, status="failed"),
            _record("fedavg", 3, 0.1, level=1.0)]  # another setting: not B's
    _write(tmp_path, recs)
    e = pc.evaluate(_claim(), tmp_path)
    assert e["values_b"] == pytest.approx({1: 90.0, 2: 91.0})
    assert e["seeds"] == [1, 2] and np.allclose(e["diffs"], [6.0, -41.0])


def test_one_seed_says_so(tmp_path):
    _grid(tmp_path, {0: 0.95}, {0: 0.90, 1: 0.20})
    e = pc.evaluate(_claim(), tmp_path)
    assert e["n"] == 1 and np.isnan(e["sd"]) and e["margin"] == 1.0
    assert e["verdict"] == "holds" and e["verdict_text"] == "holds (1 seed)"


def test_no_shared_seed_is_a_difference_of_means(tmp_path):
    _grid(tmp_path, {0: 0.90, 1: 0.92}, {2: 0.80, 3: 0.84})
    e = pc.evaluate(_claim(), tmp_path)
    assert not e["paired"] and e["diffs"] == [] and e["n"] == 2
    assert e["mean"] == pytest.approx(91.0 - 82.0)
    assert e["sd"] == pytest.approx(np.hypot(np.std([90, 92], ddof=1), np.std([80, 84], ddof=1)))
    assert e["verdict"] == "holds"
    _grid(tmp_path / "one", {0: 0.90}, {2: 0.80, 3: 0.84})
    e = pc.evaluate(_claim(), tmp_path / "one")
    assert np.isnan(e["sd"]) and e["n"] == 1 and e["verdict_text"] == "holds (1 seed)"


def test_missing_records_are_not_run(tmp_path):
    _grid(tmp_path, {0: 0.9, 1: 0.9}, {})
    e = pc.evaluate(_claim(), tmp_path)
    assert e["verdict"] == "not run" and e["n"] == 0 and np.isnan(e["mean"]) and "for B" in e["why"]
    _write(tmp_path / "failed", [_record("clust_psi_pfl", 0, None, status="failed"), _record("fedavg", 0, 0.5)])
    assert pc.evaluate(_claim(), tmp_path / "failed")["verdict"] == "not run"
    assert pc.evaluate(_claim(), tmp_path / "nothing here")["verdict"] == "not run"


def test_a_claim_against_the_papers_value(tmp_path):
    _grid(tmp_path, {0: 0.985, 1: 0.99, 2: 0.995}, {})
    e = pc.evaluate(_claim("matches", b=None, b_value=98.0), tmp_path)
    assert e["paired"] and np.allclose(e["diffs"], [0.5, 1.0, 1.5]) and e["verdict"] == "holds"
    e = pc.evaluate(_claim("matches", b=None, b_value=95.0), tmp_path)
    assert e["mean"] == pytest.approx(4.0) and e["verdict"] == "does not hold"
    assert e["b"].startswith("the paper's 95.00")


# ----------------------------------------------------------------------------- cleaning
@pytest.mark.parametrize("raw, cleaned", [
    ("(α=50\\alpha=50, S=1S=1)", "(α=50, S=1)"),
    ("small α\\alpha and", "small α and"),
    ("attains AD=0.17AD=0.17, with SDADSDAD", "attains AD=0.17, with SDAD"),
    ("0.01±0.020.01\\!\\pm\\!0.02 vs", "0.01±0.02 vs"),
    ("mean ±\\pm sd", "mean ± sd"),
    ("Importantly, *it matches the Oracle performance*, showcasing", "Importantly, it matches the Oracle performance, showcasing"),
    ("Table II in 2020, remember tt", "Table II in 2020, remember tt"),  # words, years and numerals untouched
])
def test_clean(raw, cleaned):
    assert pc.clean(raw) == cleaned


# ----------------------------------------------------------------------------- the committed claims
def test_every_quote_is_the_papers_own_sentence():
    for c in pc.CLAIMS:
        text = pc.paper_text(c.paper)
        assert c.quote in text, (c.paper, c.quote)
        assert c.quote[0].isupper() and c.quote.endswith("."), c.quote  # a whole sentence


def test_claims_read_the_reports_own_cells():
    per_paper = {p: sum(c.paper == p for c in pc.CLAIMS) for p in report_cells.PAPERS}
    assert all(2 <= n <= 4 for n in per_paper.values()), per_paper
    for c in pc.CLAIMS:
        assert c.kind in pc.KINDS
        ca = pc._owner(c.a)
        assert ca is not None and ca.paper == c.paper and c.unit == ca.unit and c.tolerance == ca.tolerance
        if c.b is None:
            assert c.b_value == ca.value and np.isnan(c.paper_delta)
        else:
            cb = pc._owner(c.b)
            assert cb is not None and c.paper_delta == pytest.approx(ca.value - cb.value)
    cafa = [c for c in pc.CLAIMS if c.paper == "cafa" and c.b is not None and "FedAvg" in c.statement][0]
    assert cafa.paper_delta == pytest.approx(1.35)  # Table V: 83.45 − 82.10, as the paper's text says
    with pytest.raises(LookupError):
        pc.reading_of("cafa", "Table V", "cafa", "best accuracy", "no such reading")


def test_frame_gives_every_claim_a_verdict_on_the_committed_records():
    df = pc.frame()
    assert len(df) == len(pc.CLAIMS)
    assert set(df.verdict) <= set(pc.VERDICTS)
    ran = df[df.verdict != "not run"]
    assert (ran.n >= 1).all() and np.isfinite(ran["mean"]).all()
    md = pc.markdown(df)
    assert md[0] == "## The papers' claims"
    assert sum(line.startswith("> “") for line in md) == len(pc.CLAIMS)
    lines = pc.readme_lines(df, link="docs/findings.md")
    assert len(lines) == df.paper.nunique()  # one bullet per paper
    for r in df.itertuples():
        line = next(x for x in lines if x.startswith(f"- [{report_cells.PAPERS[r.paper]}]"))
        assert f"(docs/findings.md#{report.anchor_slug(report_cells.PAPERS[r.paper])})" in line
        assert f"{r.short}: **{r.verdict_text}**" in line
    # a row that is not in the report's tables (not run) is named, never linked
    for line in md:
        assert "#nan)" not in line
    for r in df[df.verdict == "not run"].itertuples():
        assert f"#{r.a_id})" not in "\n".join(md)


def test_a_claim_links_only_to_rows_the_report_shows():
    """A claim pairs the seeds its two rows share, so it can hold a value where the report, which
    reads CAFA's Tables IV–V over the seeds the whole table shares, shows the rows as not run:
    docs/findings.md then has no anchor for them, and the claim names them without a link."""
    df = pc.frame()
    ran = df[df.verdict != "not run"]
    assert len(ran)
    r = ran.iloc[0]
    text = "\n".join(pc.markdown(df, link="", shown={r.b_id}))
    assert f"(#{r.b_id})" in text and f"(#{r.a_id})" not in text
    page = report.findings_markdown(report.frame())
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', page))
    assert set(re.findall(r"\]\(#([^)]+)\)", page)) <= anchors
