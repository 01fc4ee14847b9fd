"""The reproduction report: what reproduces, and why not where it doesn't.

For every cell of the seed papers' tables that the workbook reproduces
(:func:`workbook.report_cells.cells`), and each way of reading it, one row:

    paper value · ours (mean ± sample sd over seeds, n) · Δ = ours − paper · verdict · reason

from the paper-protocol run records committed under ``benchmarks/records/`` only — nothing is
trained. Verdicts (:data:`VERDICTS`, by :data:`VERDICT_RULE`: a test through standard errors,
:mod:`workbook.verdicts`):

* ``reproduced``: Δ's 90 % interval lies inside the margin ±m, m = max(tolerance, 2 × the
  paper's sd); the tolerance is 1 pp for accuracies (the artifact appendix's "±1 pp accuracy")
  and a count's or score's own step;
* ``differs``: the interval lies wholly outside ±m, with its cause *confirmed* by an evidence
  reading on two seeds or more, *supported* (with its n), *suspected* (:data:`EVIDENCE_RULE`), or
  "no cause identified";
* ``undecided``: neither, with the seeds that would likely decide it;
* ``infeasible``: every matching record says its partition cannot be made (with the reason), and
  no other record of its folder drew that partition at another seed (where one did, the row is
  *not run*: runnable at that seed, :func:`workbook.matching.drawn_seeds`);
* ``not run``: no committed record (or the data have no offline source); listed per records
  folder with the command that computes them and an estimate of their cost.

A one-seed row borrows a seed sd pooled over comparable rows, stated on the row. Each verdict
states the seeds it rests on; the scoreboard (:func:`scoreboard`, :func:`headline`) counts rows
trained on the paper's own data apart from stand-in data, label-only rows, rows at chance (a seed
of ours at chance level is flagged, whatever the paper printed) and rows repeating one printed
value (:data:`GROUPS`), and counts distinct records. Above the tables, each paper's headline
claims are judged from the same records (:mod:`workbook.paper_claims`).

Notebook 00 and ``docs/findings.md`` render the same frame (:func:`frame`), so they cannot
disagree: the notebook displays, as rendered Markdown, the same tables (:func:`sections`,
:func:`show`) and draws each paper's rows as a forest plot (:mod:`workbook.forest`). The
README's findings block is :func:`readme_block`.
``python -m workbook.report --write`` rewrites both files, ``--check`` fails if either is
stale. docs/findings.md also shows each paper's forest plot split into one figure per table (or
per column of a split table; :func:`workbook.forest.forest_figures`), under :data:`FOREST_DIR`:
``--write`` draws them (with the CSV behind each), ``--check`` fails when one the page links is
missing (it does not redraw them: a figure's pixels depend on the machine's fonts).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from fedlib.methods import cfl, display_name
from fedlib.paths import ROOT
from fedlib import cost, lookup
from fedlib.validation import fail
from .tables import frame_markdown, setting_name
from .report_cells import METRICS, PAPERS, REASONS, cells, group_of, record_command
from .matching import (DERIVATIONS, RECORDS, _load, _most_heterogeneous, anchor_slug, clear_caches, cl_distance, drawn_seeds, matched_records,
                       matches, record_value)
from . import paper_claims, verdicts as V

__all__ = ["RECORDS", "VERDICTS", "GROUPS", "group", "headline", "AT_CHANCE", "DERIVATIONS", "record_value", "cfl_row_note", "cl_distance", "matches", "row_values", "frame", "scoreboard", "refused_lines", "VERDICT_RULE", "EVIDENCE_RULE", "NOT_RUN_SEEDS", "not_run_groups",
           "matched_records", "anchor_slug", "format_ours", "paper_section", "cpu_hours", "cross_paper_markdown", "beyond_label_markdown", "findings_markdown", "sections", "show", "readme_block", "forest_figure_stems", "write_forest_figures", "write", "check", "main"]

VERDICTS = ("reproduced", "differs", "undecided", "infeasible", "not run")
FINDINGS = ROOT / "docs" / "findings.md"
FOREST_DIR = ROOT / "figures" / "findings"
"""Where ``--write`` draws docs/findings.md's forest plots (:func:`forest_figure_stems`)."""
README = ROOT / "README.md"
_BLOCK = re.compile(r"(<!-- findings:start -->\n)(.*?)(<!-- findings:end -->)", re.S)
_COSTS_BLOCK = re.compile(r"(<!-- costs:start -->\n)(.*?)(<!-- costs:end -->)", re.S)
COSTS = ROOT / "benchmarks" / "records" / "commands" / "costs.json"
"""The measured time and disk of the README's commands (:func:`costs_block` renders them)."""


# ----------------------------------------------------------------------------- records
def _not_ok(record) -> str:
    """A record that gives no value, as the report says it: its status, and for a diverged run
    the method, the seed, the round and the client optimiser, e.g. "failed (FedAvg seed 0:
    diverged in round 53, sgd lr 0.1)"."""
    div = record.get("divergence") if record.get("status") == "failed" else None
    if not div or div.get("round_idx") is None:
        return str(record.get("status"))
    how = f", {div['optimizer']} lr {div['lr']:g}" if div.get("optimizer") and div.get("lr") is not None else ""
    method = display_name(record["spec"].get("method"))
    return f"failed ({method} seed {record['spec'].get('seed', 0)}: diverged in round {int(div['round_idx']) + 1}{how})"


def _ok_seeds(folder, match: tuple) -> set:
    """The seeds of the ``ok`` records of ``folder`` that answer ``match``."""
    return {r["spec"].get("seed", 0) for r in folder
            if r.get("status") == "ok" and matches(r.get("spec", {}), match)}


def _run_name(match: tuple) -> str:
    m = dict(match)
    return display_name(m.get("method")) + (f" ({m['reproduction']})" if m.get("reproduction") else "")


def row_values(reading, root: Path = RECORDS) -> tuple[list[float], list[str]]:
    """(our values, one per seed in seed order; statuses of the matching records that are not
    ``ok``) for one reading. With ``reading.shared_with``, only the seeds that every run it names
    finished count; the reading's other ok seeds are listed among the statuses ("seed s: not
    finished by every method of the table (…)")."""
    folder, recs = matched_records(reading, root)
    by_seed, other = {}, []
    per_run = {m: _ok_seeds(folder, m) for m in reading.shared_with}
    for r in recs:
        if r.get("status") != "ok":
            other.append(_not_ok(r))
            continue
        seed = r["spec"].get("seed", 0)
        lacking = [_run_name(m) for m, seeds in per_run.items() if seed not in seeds]
        if lacking:
            other.append(f"seed {seed}: not finished by every method of the table (no {', '.join(lacking)} run)")
            continue
        if seed in by_seed:
            from .matching import seed_files  # the files, named

            fail("reading", f"a match that one record per seed answers; in {reading.records}/ two records of "
                            f"seed {seed} match {dict(reading.match)}, {seed_files(reading, root, recs, seed)} "
                            "(pin the field that tells them apart, "
                            "e.g. the variant's hyperparameter, in workbook/report_cells.py)",
                 reading.name)
        by_seed[seed] = record_value(r, reading.metric, reading.window, folder)
        if reading.metric in ("ad_cl", "sdad_cl") and np.isnan(by_seed[seed]):
            other.append(f"ok, but no CL run of seed {seed} (AD/SDAD against CL need it)")
    values = [by_seed[s] for s in sorted(by_seed) if np.isfinite(by_seed[s])]
    return values, other


# ----------------------------------------------------------------------------- the frame
VERDICT_RULE = ("a test of Δ = ours − paper through both means' standard errors (`workbook.verdicts`): "
                "se(Δ) = √(s_p²/n_p + s²/n), the paper's sd s_p over its n_p runs (5 for Clust-PSI-PFL, 4 for "
                "pFedLIA, FedPrism's unstated \"multiple\" read as 3; a value printed without a spread counts as "
                "exact) and ours, s over our n seeds — for a one-seed row a seed sd pooled over comparable rows "
                "(the same method, data set and protocol at other levels, else every row of its records folder), "
                "stated on the row, never 0. The margin m = max(tolerance, 2 × the paper's sd): a rerun of the "
                "paper's own protocol lands within about two of its seed sds, and the tolerance is the least "
                "difference the table resolves (1 pp for accuracies, the Clust-PSI-PFL artifact appendix's ±1 pp; a "
                "count's or a score's own step). *reproduced* when Δ's 90 % interval (Welch t, two one-sided tests "
                "at 5 %) lies inside ±m; *differs* when it lies wholly outside; *undecided* otherwise, with the number "
                "of our seeds that would likely decide it at today's mean and sd (or none, where the paper's own "
                "standard error is too wide); *infeasible* when every record of the row says its partition cannot be "
                "made at any seed another method drew; *not run* when no record is committed. Every verdict says how many seeds it rests on; a seed "
                "at chance level (what a one-class predictor scores) is flagged on its row.")
"""The verdict rule, as the report states it (applied by :func:`frame`, :func:`workbook.verdicts.verdict`)."""

EVIDENCE_RULE = ("A cause's evidence reading is the run with the suspected difference undone, judged by the same "
                 "test: the cause is *confirmed* when that reading reproduces the paper on two seeds or more; "
                 "*supported (n seeds)* when it reproduces the paper on one seed, or closes at least half of the "
                 "gap (|Δ evidence| ≤ |Δ| / 2) — said with its n, and with the side it lands on where it overshoots "
                 "the paper by more than the margin; *suspected* otherwise, or when no run tests it.")
"""When a listed cause counts as known (applied by :func:`frame`)."""

AT_CHANCE = 0.005
"""A seed's value within this of a cell's chance level (to the printed two decimals) is flagged
"at chance": what a one-class predictor scores, whatever the paper printed."""


def _sd(values) -> float:
    """Sample standard deviation (ddof = 1); NaN for fewer than two values."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else np.nan


def _infeasible_why(recs) -> str:
    """The first sentence of an infeasible record's error."""
    err = str(next((r.get("error") for r in recs if r.get("error")), "the partition cannot be made"))
    return err.split(". ")[0].rstrip(".")


def _seeds(n: int) -> str:
    return f"{n} seed" + ("" if n == 1 else "s")


def _test(cell, values, pools, rd) -> tuple:
    """(:class:`workbook.verdicts.Verdict` or None, the pooled sd's note or ""): the row's test; None
    for one seed with no comparable row to pool a seed sd from."""
    if cell.spread is not None and cell.paper_n is None:
        fail("Cell.paper_n", f"the runs behind the paper's spread of {cell.paper} {cell.table} {cell.row} "
                             f"(a block's runs: {{n, line}} in workbook/papers/{cell.paper}.yaml)", None)
    pool, note = None, ""
    if len(values) == 1:
        pool = next((pools[k] for k in V.pool_keys(rd) if k in pools), None)
        if pool is None:
            return None, ""
        unit = " pp" if cell.unit == "%" else ""
        note = f"one seed: sd {_num(pool[0], cell.unit)}{unit} pooled over {pool[2]} rows ({pool[3]})"
    v = V.verdict(cell.value, cell.spread, cell.paper_n or 1, values, cell.tolerance,
                  pooled=None if pool is None else pool[:2])
    return v, note


def _undecided_why(cell, t) -> str:
    """Why a row is undecided, and what would decide it."""
    if t is None:
        return ("undecided: one seed, and no comparable row with two seeds to pool a seed sd from; a second seed "
                "gives the row its own")
    u = " pp" if cell.unit == "%" else ""
    head = (f"undecided: Δ's 90 % interval [{_num(t.low, cell.unit, True)}, {_num(t.high, cell.unit, True)}]{u} "
            f"reaches across the margin ±{_num(t.margin, cell.unit)}{u}")
    if t.seeds_to_decide is None:
        return head + "; no number of our seeds decides it (the paper's own standard error is too wide)"
    return head + f"; about {t.seeds_to_decide} seeds in all would likely decide it"


def _record_ids(rd, root: Path) -> tuple:
    """The identities of the ``ok`` records a row reads (a hash of the folder and the spec): the
    distinct runs behind it."""
    import hashlib
    import json

    return tuple(sorted({hashlib.sha256(json.dumps([rd.records, r.get("spec", {})], sort_keys=True, default=str)
                                        .encode()).hexdigest()[:16]
                         for r in matched_records(rd, root)[1] if r.get("status") == "ok"}))


def frame(root: Path | str = RECORDS) -> pd.DataFrame:
    """One row per (cell, reading): paper, table, row, column, reading, metric, unit, paper
    (value), spread, paper_n (the runs behind the paper's spread), tolerance, values (ours, per
    seed), n, mean, sd (sample sd), delta, low, high (Δ's 90 % interval), margin, seeds_to_decide,
    pooled (the pooled seed sd's note of a one-seed row, or ""), verdict (:data:`VERDICTS`, by
    :data:`VERDICT_RULE`), verdict_text (the verdict with its number of seeds), kind, chance_level
    (the paper's value and ours both within the tolerance of chance), at_chance (our seeds at
    chance level, :data:`AT_CHANCE`), stand_in (the cell runs on stand-in data), shared_value (the
    paper's one value repeated across columns, CL), reason (key or ""), cause_status
    ("confirmed", "supported", "suspected" or ""), why (the cause's note and its evidence, why the
    row is undecided, or why it did not run), guess (the paper's sentence a guessed setting reads,
    or ""), records, match, record_ids (the distinct ok records it reads), id (the row's anchor in
    docs/findings.md)."""
    clear_caches()
    root = Path(root)
    table = [(c, {rd.name: (([], []) if c.unavailable else row_values(rd, root)) for rd in c.readings}) for c in cells()]
    pools = V.seed_sd_pools((rd, got[rd.name][0]) for c, got in table for rd in c.readings)
    rows = []
    for c, got in table:
        tests = {rd.name: _test(c, got[rd.name][0], pools, rd) if got[rd.name][0] else (None, "") for rd in c.readings}
        for rd in c.readings:
            values, other = got[rd.name]
            n = len(values)
            mean = float(np.mean(values)) if n else np.nan
            sd = _sd(values)
            delta = mean - c.value if n else np.nan
            t, pooled = tests[rd.name]
            reason, status, why = "", "", ""
            if c.unavailable:
                verdict, reason, why = "not run", c.unavailable, REASONS[c.unavailable]
            elif n == 0 and other and all(o == "infeasible" for o in other) and not drawn_seeds(rd, root):
                verdict = "infeasible"
                why = _infeasible_why(matched_records(rd, root)[1])
            elif n == 0:
                verdict = "not run"
                why = (f"records: {', '.join(sorted(set(other)))}" if other
                       else f"no committed record in benchmarks/records/{rd.records}/")
                if other and all(o == "infeasible" for o in other):
                    why = (f"its seeds' partitions cannot be drawn ({_infeasible_why(matched_records(rd, root)[1])}); "
                           f"another method's run drew seed {', '.join(map(str, drawn_seeds(rd, root)))}'s")
            elif t is None or t.outcome == "undecided":
                verdict, why = "undecided", _undecided_why(c, t)
            elif t.outcome == "reproduced":
                verdict = "reproduced"
            else:
                verdict = "differs"
                cause = c.cause(rd.name)
                if cause is None:
                    why = "no cause identified"
                else:
                    reason, status, why = cause.reason, *_cause_status(c, cause, delta, got, tests)
            def add(note):
                nonlocal why
                why = (f"{why}; " if why and note else why) + note
            if n and pooled:
                add(pooled)
            at_chance = [v for v in values if c.chance is not None and abs(v - c.chance) <= AT_CHANCE]
            if at_chance:
                add(f"{len(at_chance)} of {n} seeds at chance level ({_num(c.chance, c.unit)} %: what a one-class "
                    "predictor scores)")
            if n and other:  # seeds that ran but give no value: the mean is over the others
                add(f"not in the mean ({len(other)} of {n + len(other)} seeds): {', '.join(sorted(set(other)))}")
            if n and c.kind == "trained":  # CFL: the thresholds its records ran, and whether they ever split
                ok_records = [r for r in matched_records(rd, root)[1] if r.get("status") == "ok"]
                add(cfl_row_note(ok_records))
                add(fesem_row_note(ok_records))
            if n and _most_heterogeneous(rd):  # say which level answered it
                r0 = matched_records(rd, root)[1][0]["spec"]
                add(f"read at {setting_name(r0['protocol'], float(r0['level']))}")
            chance = (c.chance is not None and n > 0 and abs(c.value - c.chance) <= c.tolerance + 1e-9
                      and abs(mean - c.chance) <= c.tolerance + 1e-9)
            text = verdict if verdict in ("not run", "infeasible") else f"{verdict}, {_seeds(n)}"
            if verdict == "undecided" and t is not None and t.seeds_to_decide:
                text += f" (≈ {t.seeds_to_decide} decide)"
            rows.append(dict(paper=c.paper, table=c.table, row=c.row, column=c.column, reading=rd.name,
                             metric=rd.metric, unit=c.unit, paper_value=c.value, spread=c.spread, paper_n=c.paper_n,
                             tolerance=c.tolerance, values=values, n=n, mean=mean, sd=sd, delta=delta,
                             low=t.low if t else np.nan, high=t.high if t else np.nan,
                             margin=t.margin if t else V.margin_of(c.tolerance, c.spread),
                             seeds_to_decide=t.seeds_to_decide if t else None, pooled=pooled if n == 1 else "",
                             verdict=verdict, verdict_text=text, kind=c.kind, chance_level=bool(chance),
                             at_chance=len(at_chance), stand_in=c.stand_in, shared_value=c.shared_value,
                             reason=reason, cause_status=status, why=why, guess=c.guess or "",
                             records=rd.records, match=rd.match,
                             record_ids=_record_ids(rd, root) if n else (),
                             id=anchor_slug(PAPERS[c.paper], c.table, c.row, c.column, rd.name)))
    return pd.DataFrame(rows)


def cfl_row_note(records) -> str:
    """What a report row says of the CFL runs ``records`` it reads (other methods' records: ""):
    the thresholds they ran (:func:`fedlib.methods.cfl.thresholds_label` of their specs; a spec
    without ``eps1`` ran Table II's 1e-5), then :func:`fedlib.methods.cfl.split_note` ("CFL never
    split" where no run split), e.g. ``'CFL at ε1 = 1e-05, ε2 = 0.1, γ = 0.5; CFL never split'``."""
    runs = [r for r in records if r.get("spec", {}).get("method") == "cfl"]
    if not runs:
        return ""
    used = sorted({cfl.thresholds_label(r["spec"].get("hyper")) for r in runs})
    note = cfl.split_note(cfl.never_split(r.get("info")) for r in runs)
    return f"CFL at {' / '.join(used)}" + (f"; {note}" if note else "")


def fesem_row_note(records) -> str:
    """What a report row says of the FeSEM runs ``records`` it reads (other methods' records:
    ""): how many re-assignments kept the client's cluster, summed and per seed
    (:func:`workbook.pfedlia_study.fesem_stay`, read from each record), e.g. ``'FeSEM kept the
    cluster in 1011 of 1014 re-assignments (353/354, 326/326, 332/334 by seed)'``."""
    from .pfedlia_study import fesem_stay

    runs = sorted((r for r in records if r.get("spec", {}).get("method") == "fesem"),
                  key=lambda r: r["spec"].get("seed", 0))
    stays = [s for s in (fesem_stay(r) for r in runs) if s is not None]
    if not stays:
        return ""
    kept, total = sum(k for k, _ in stays), sum(t for _, t in stays)
    each = f" ({', '.join(f'{k}/{t}' for k, t in stays)} by seed)" if len(stays) > 1 else ""
    return f"FeSEM kept the cluster in {kept} of {total} re-assignments{each}"


def _cause_status(cell, cause, delta: float, got: dict, tests: dict) -> tuple[str, str]:
    """(``"confirmed"``, ``"supported"`` or ``"suspected"``, the text the report prints) for a
    differing row's ``cause``, by :data:`EVIDENCE_RULE`: its evidence reading's values (``got``:
    reading -> (values, other)) judged by the same test (``tests``: reading -> (Verdict or None, note))."""
    unit = " pp" if cell.unit == "%" else ""
    if cause.evidence is None:
        return "suspected", f"suspected: {cause.note} (no run tests it)"
    if cause.evidence not in got:
        fail("Cause.evidence", f"the name of a reading of the cell ({sorted(got)})", cause.evidence)
    values = got[cause.evidence][0]
    n = len(values)
    if n == 0:
        return "suspected", f"suspected: {cause.note} (its evidence, the '{cause.evidence}' reading, has no record)"
    mean = float(np.mean(values))
    d_e = mean - cell.value
    t = tests[cause.evidence][0]
    margin = t.margin if t is not None else V.margin_of(cell.tolerance, cell.spread)
    reading = f"'{cause.evidence}' gives {_num(mean, cell.unit)} (Δ {_num(d_e, cell.unit, True)}{unit}, {_seeds(n)})"
    if np.sign(d_e) != np.sign(delta) and abs(d_e) > margin:
        reading += (f", overshooting to the other side of the paper by more than the margin "
                    f"±{_num(margin, cell.unit)}{unit}")
    reproduces = t is not None and t.outcome == "reproduced"
    if reproduces and n >= 2:
        return "confirmed", f"confirmed ({_seeds(n)}): {cause.note}; evidence: {reading}"
    if reproduces or abs(d_e) <= abs(delta) / 2 + 1e-9:
        return "supported", f"supported ({_seeds(n)}): {cause.note}; evidence: {reading}"
    return "suspected", f"suspected: {cause.note} (evidence does not support it: {reading})"


GROUPS = {"own data": "trained on the paper's own data set, its own printed value, no seed at chance",
          "stand-in data": "trained on a stand-in for the paper's data set (its data have no offline source)",
          "label-only": "a clustering of the clients' label histograms: no model is trained",
          "at chance": "the paper's value and ours at chance level, or one of our seeds at it (a one-class "
                       "predictor's score)",
          "shared value": "one printed value repeated in every column (CL's one accuracy per data set)"}
"""How the scoreboard sets rows apart (:func:`group`), in order of precedence."""


def group(row) -> str:
    """The key of :data:`GROUPS` a frame row is counted under: label-only first, then rows at
    chance (the paper's and ours, or any seed of ours), then rows repeating one printed value, then
    stand-in data; the rest are "own data"."""
    if row["kind"] == "label_only":
        return "label-only"
    if row["chance_level"] or row["at_chance"]:
        return "at chance"
    if row["shared_value"]:
        return "shared value"
    return "stand-in data" if row["stand_in"] else "own data"


_DECIDED = ("reproduced", "differs", "undecided")


def scoreboard(df: pd.DataFrame) -> pd.DataFrame:
    """Per paper: rows (cell × reading), records (distinct ok records behind them); for the rows
    that ran, per group of :data:`GROUPS` the rows reproduced, differing and undecided (own data,
    stand-in data, label-only) or counted (at chance, shared value); the differing
    rows by their cause's status (confirmed, supported, suspected, none identified); infeasible,
    not run (of which: no offline data)."""
    out = []
    for p, name in PAPERS.items():
        d = df[df.paper == p]
        ran = d[d.verdict.isin(_DECIDED)]
        g = ran.apply(group, axis=1) if len(ran) else pd.Series([], dtype=str)
        row = {"paper": name, "rows": len(d), "records": len({i for ids in d.record_ids for i in ids})}
        for key in ("own data", "stand-in data", "label-only"):
            for v in _DECIDED:
                row[f"{key}: {v}"] = int(((g == key) & (ran.verdict == v)).sum())
        for key in ("at chance", "shared value"):
            row[key] = int((g == key).sum())
        differs = d[d.verdict == "differs"]
        row.update({"differ, cause confirmed": int((differs.cause_status == "confirmed").sum()),
                    "differ, cause supported": int((differs.cause_status == "supported").sum()),
                    "differ, cause suspected": int((differs.cause_status == "suspected").sum()),
                    "differ, no cause identified": int((differs.reason == "").sum()),
                    "infeasible": int((d.verdict == "infeasible").sum()),
                    "not run": int((d.verdict == "not run").sum()),
                    "of which no offline data": int((d.reason == "no_offline_data").sum())})
        out.append(row)
    return pd.DataFrame(out)


def headline(df: pd.DataFrame) -> str:
    """The report's first sentence, with its denominators: the rows trained on the papers' own
    data sets and what they read, then each group counted apart, the rows not decided by a run,
    and the distinct records behind it all."""
    sb = scoreboard(df)
    tot = sb.drop(columns="paper").sum()
    own = [int(tot[f"own data: {v}"]) for v in _DECIDED]
    stand = [int(tot[f"stand-in data: {v}"]) for v in _DECIDED]
    label = [int(tot[f"label-only: {v}"]) for v in _DECIDED]
    ran = df[df.verdict.isin(_DECIDED)]
    own_n3 = int(((ran.apply(group, axis=1) == "own data") & (ran.n >= 3)).sum()) if len(ran) else 0
    return (f"Of {sum(own)} table rows (a paper cell read one way) trained on the paper's own data set, {own[0]} "
            f"reproduce, {own[1]} differ and {own[2]} are undecided ({own_n3} of the {sum(own)} rest on three seeds or "
            f"more). Counted apart: {sum(stand)} ran on stand-in data ({stand[0]} reproduce, {stand[1]} differ, "
            f"{stand[2]} undecided), {sum(label)} are label-only ({label[0]} reproduce, {label[1]} differ, {label[2]} "
            f"undecided), {int(tot['at chance'])} sit at chance "
            f"or have a seed at it, and {int(tot['shared value'])} repeat one printed value (CL); "
            f"{int(tot['infeasible'])} are infeasible and {int(tot['not run'])} not run "
            f"({int(tot['of which no offline data'])} of them for want of offline data). They rest on "
            f"{len({i for ids in df.record_ids for i in ids})} distinct run records.")


def format_ours(values, unit: str = "%") -> str:
    """Our value as the report prints it: mean ± sample sd (n = seeds), two decimals for %
    values, three otherwise; one seed has no ± (a spread of one run is unknown, not zero)."""
    v = [float(x) for x in values if np.isfinite(x)]
    if not v:
        return "—"
    digits = 2 if unit == "%" else 3
    if len(v) == 1:
        return f"{v[0]:.{digits}f} (n = 1)"
    return f"{np.mean(v):.{digits}f} ± {_sd(v):.{digits}f} (n = {len(v)})"


def _num(v: float, unit: str, signed: bool = False) -> str:
    if v is None or not np.isfinite(v):
        return "—"
    digits = 2 if unit == "%" else 3
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def _name(row: str) -> str:
    """A row's method as the papers write it (``clust_psi_pfl`` -> ``Clust-PSI-PFL``); other rows as they are."""
    method, _, rest = row.partition(" ")
    return display_name(method) + (f" {rest}" if rest else "")


def _paper(r) -> str:
    s = _num(r.paper_value, r.unit)
    if r.spread is None or not np.isfinite(r.spread):
        return s
    return f"{s} ± {_num(r.spread, r.unit)} (n = {int(r.paper_n)})"


def _md_table(d: pd.DataFrame, anchors: bool) -> list[str]:
    lines = ["| row | column | reading | paper | ours | Δ [90 % interval] | verdict (margin) | reason |",
             "|---|---|---|---|---|---|---|---|"]
    for r in d.itertuples():
        anchor = f'<a id="{r.id}"></a>' if anchors else ""
        reason = f"{r.reason}: {r.why}" if r.reason else r.why
        if r.guess:
            reason = f"guessed setting: {r.guess}" + (f"; {reason}" if reason else "")
        interval = (f" [{_num(r.low, r.unit, True)}, {_num(r.high, r.unit, True)}]" if np.isfinite(r.low) else "")
        margin = f" (±{_num(r.margin, r.unit)})" if r.verdict in _DECIDED and np.isfinite(r.margin) else ""
        lines.append(f"| {anchor}{_name(r.row)} | {r.column} | {r.reading} | {_paper(r)} | {format_ours(r.values, r.unit)} | "
                     f"{_num(r.delta, r.unit, True)}{interval} | {r.verdict_text}{margin} | {reason} |")
    return lines


NOT_RUN_SEEDS = (0, 1, 2)
"""The seeds the report's commands ask for where a row has none: three, the least that gives a
spread."""


def _sed(tokens: list, root: Path) -> tuple[str, str]:
    """``(output path, text)`` of a printed ``sed [-e SCRIPT]... FILE > OUT`` (``tokens``: its
    words), applied here to ``root/FILE``: the two sed scripts the report's commands use,
    ``s/REGEX/REPLACEMENT/`` (the first match on each line) and ``/REGEX/d`` (delete the lines
    that match). Anything else is a ValueError naming the command."""
    words, scripts = list(tokens[1:]), []
    while words and words[0] == "-e":
        scripts.append(words[1])
        words = words[2:]
    if not scripts and words:
        scripts, words = [words[0]], words[1:]
    if len(words) != 3 or words[1] != ">":
        fail("command", "sed [-e SCRIPT]... FILE > OUT", " ".join(tokens))
    lines = (Path(root) / words[0]).read_text().splitlines(keepends=True)
    for script in scripts:
        parts = script.split("/")
        if len(parts) == 4 and parts[0] == "s" and parts[3] == "":
            lines = [re.sub(parts[1], parts[2], line, count=1) for line in lines]
        elif len(parts) == 3 and parts[0] == "" and parts[2] == "d":
            lines = [line for line in lines if not re.search(parts[1], line)]
        else:
            fail("command", "a sed script s/REGEX/REPLACEMENT/ or /REGEX/d", script)
    return words[2], "".join(lines)


_GRID_FILTERS = {"--seeds": ("seeds", int), "--methods": ("methods", str), "--alphas": ("alphas", float),
                 "--levels": ("levels", float), "--settings": ("settings", str),
                 "--iid-fractions": ("iid_fractions", float), "--datasets": ("datasets", str),
                 "--n-clients": ("n_clients", int), "--reproductions": ("reproductions", str)}
"""``python -m fedlib.grid``'s filter flags -> :func:`fedlib.grid_cli.select`'s argument and type."""


def command_specs(command: str, root: Path | str = ROOT) -> tuple[list, Path]:
    """``(specs, folder)``: the RunSpecs that a printed ``command`` computes and its records folder
    (relative to the checkout ``root``), built by the functions the command runs —
    ``python -m fedlib.grid TABLE ...``: :func:`fedlib.grid_cli.select` on the table's params
    (``--params``, written by a ``sed ... > FILE &&`` before it: :func:`_sed`);
    ``python benchmarks/table3_like_for_like.py ...``: :func:`workbook.like_for_like.script_specs`.
    So the report counts and prices the runs of the command it prints, and ``--list`` of the same
    command (:func:`fedlib.grid_cli.list_runs`) finds the same runs. ValueError for a command of
    another form."""
    import shlex
    import tempfile

    from fedlib import grid_cli
    from . import like_for_like

    parts = [shlex.split(part) for part in command.split(" && ")]
    written = dict(_sed(tokens, root) for tokens in parts[:-1] if tokens[:1] == ["sed"])
    if len(written) != len(parts) - 1:
        fail("command", "[sed ... > FILE && ] python ... (the report's commands)", command)
    words = parts[-1]
    if words[:2] == ["python", "benchmarks/table3_like_for_like.py"]:
        try:
            a = like_for_like.script_parser().parse_args(words[2:])
        except SystemExit:  # argparse named the bad argument on stderr
            fail("command", "arguments of benchmarks/table3_like_for_like.py", command)
        return like_for_like.script_specs(a), Path(a.results)
    if words[:3] != ["python", "-m", "fedlib.grid"] or len(words) < 4:
        fail("command", "python -m fedlib.grid TABLE ... or python benchmarks/table3_like_for_like.py ...", command)
    table, flags, flag = words[3], {}, None
    for w in words[4:]:
        if w.startswith("--"):
            flag = w
            flags[flag] = []
        elif flag is None:
            fail("command", "flags after the table", command)
        else:
            flags[flag].append(w)
    unknown = sorted(set(flags) - set(_GRID_FILTERS) - {"--out", "--params", "--device", "--workers"})
    if unknown or "--out" not in flags:
        fail("command", "python -m fedlib.grid TABLE --out FOLDER with filter flags only", command)
    params = flags.get("--params", [None])[0]
    if params in written:  # the file the sed before it writes
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(params).name
            path.write_text(written[params])
            p = grid_cli.load_params(table, path)
    else:
        p = grid_cli.load_params(table, None if params is None else Path(root) / params)
    given = {name: [kind(v) for v in flags[f]] for f, (name, kind) in _GRID_FILTERS.items() if f in flags}
    return grid_cli.select(table, p, **given), Path(flags["--out"][0])


def _settings_of(matches) -> tuple[list, list]:
    """The ``protocol:level`` settings and the levels of ``matches``, in order."""
    ms = [dict(m) for m in matches]
    settings = list(dict.fromkeys(f"{m['protocol']}:{float(m['level']):g}" for m in ms
                                  if "protocol" in m and isinstance(m.get("level"), (int, float))))
    levels = list(dict.fromkeys(f"{float(m['level']):g}" for m in ms if isinstance(m.get("level"), (int, float))))
    return settings, levels


def _command_parts(group: pd.DataFrame) -> list[pd.DataFrame]:
    """``group``'s rows split so that each part's command (methods × settings, a cross product)
    selects its rows' runs only: the methods that need the same settings share a part (one part
    where every method needs all of them)."""
    def need(method):
        settings, levels = _settings_of([m for m in group["match"] if dict(m).get("method") == method])
        return tuple(settings), tuple(levels)
    methods = list(dict.fromkeys(dict(m).get("method") for m in group["match"]))
    by_need: dict = {}
    for m in methods:
        by_need.setdefault(need(m), []).append(m)
    return [group[[dict(m).get("method") in ms for m in group["match"]]] for ms in by_need.values()]


def _values(part: pd.DataFrame) -> dict:
    """What :func:`report_cells.record_command` fills in for the rows ``part``: their methods (the
    registered ones; a derived reading's label, e.g. PSI-PFL's paper variant, runs as its method),
    settings (``protocol:level``), levels, seeds (:data:`NOT_RUN_SEEDS`), data sets, K and protocols."""
    from fedlib.methods import METHODS

    matches = [dict(m) for m in dict.fromkeys(part["match"])]
    settings, levels = _settings_of(matches)
    return {"settings": settings, "levels": levels, "seeds": list(map(str, NOT_RUN_SEEDS)),
            "methods": list(dict.fromkeys(m.get("method") for m in matches if m.get("method") in METHODS)),
            **{name: list(dict.fromkeys(str(m[field]) for m in matches if isinstance(m.get(field), (str, int))
                                        and not isinstance(m.get(field), bool)))
               for name, field in (("datasets", "dataset"), ("n_clients", "n_clients"), ("protocols", "protocol"))}}


_FALLBACK_TEXT = {cost.FALLBACK_THREADS: "their wall seconds × threads",
                  cost.FALLBACK_WALL: "their wall seconds, no thread count being recorded either",
                  cost.FALLBACK_MIXED: "their wall seconds, × threads where recorded"}
"""How the page words :mod:`fedlib.cost`'s fallback bases."""


def not_run_groups(df: pd.DataFrame, root: Path | str = RECORDS) -> pd.DataFrame:
    """The rows not run (the data being available), grouped by the command that computes them
    (:func:`report_cells.record_command`, one per records folder or variant — a paper table's
    grid command, :mod:`workbook.paper_tables` — filled with the rows' methods, settings, levels and
    :data:`NOT_RUN_SEEDS`): rows, methods, settings, the command, and the runs and cost of
    that command exactly as ``--list`` counts them (:func:`fedlib.grid_cli.list_runs`): its spec
    list (:func:`command_specs`), ``runs`` those without a record in the folder (found by the
    specs' fields, :func:`fedlib.lookup.find`, as the rows read them: a version bump changes
    nothing; the command's ``--list`` finds the same while the version is the records'), ``recorded``
    the others, and ``hours`` the estimates of the
    runs to compute summed (:func:`fedlib.cost.estimate`, from the records in the folder and under
    ``root``, as ``--estimate-from``'s default; :func:`fedlib.cost.on_reference_host`): CPU-hours of a
    :data:`fedlib.cost.REFERENCE_CAPABILITY` host, or — where no CPU record is comparable
    — GPU-hours of device wall time (``device`` 'cuda', and the command gets ``--device cuda``).
    ``estimated_runs``: the runs with an estimate; ``fallback_runs``: those priced by records
    without ``cpu_seconds`` (:mod:`fedlib.cost`'s labelled fallback, named in ``fallback``);
    ``other_runs``: runs to compute that no row of the group reads (another seed or variant of a row
    that ran, which no filter of the command leaves out). The command holds one line per part of
    the rows (:func:`_command_parts`)."""
    from fedlib.grid import timing_records

    d = df[(df.verdict == "not run") & (df.reason != "no_offline_data")]
    keys = [group_of(f, m) for f, m in zip(d["records"], d["match"])]
    out = []
    for key, g in d.groupby(pd.Series(keys, index=d.index), sort=False):
        folder = g["records"].iloc[0]
        rows = list(dict.fromkeys(g["match"]))
        methods = list(dict.fromkeys(dict(m).get("method") for m in rows if dict(m).get("method")))
        settings, _ = _settings_of(rows)
        row = {"records": folder, "rows": len(g), "runs": len(rows) * len(NOT_RUN_SEEDS), "recorded": 0,
               "methods": methods, "settings": settings, "command": "", "device": "cpu", "hours": np.nan,
               "estimated_runs": 0, "fallback_runs": 0, "fallback": "", "other_runs": 0}
        commands = [c for c in (record_command(key, _values(part)) for part in _command_parts(g)) if c]
        if commands:
            specs = list({s.key(): s for c in commands for s in command_specs(c)[0]}.values())
            where = Path(root) / folder
            todo = lookup.find(specs, where)[1]  # by the specs' fields, as the rows read records
            timings = cost.on_reference_host(timing_records(where, Path(root)))  # one host's CPU-seconds
            device = "cpu"
            est = cost.estimate_each(todo, timings, device)
            if todo and all(e.seconds is None for e in est):
                gpu = cost.estimate_each(todo, timings, "cuda")
                if any(e.seconds is not None for e in gpu):
                    device, est, commands = "cuda", gpu, [c + " --device cuda" for c in commands]
            known = [e for e in est if e.seconds is not None]
            bases = {e.basis for e in known if e.fallback}
            other = sum(not any(matches(d, m) for m in rows) for d in (s.to_dict() for s in todo))
            row.update(runs=len(todo), recorded=len(specs) - len(todo), command="\n".join(commands), device=device,
                       other_runs=other,
                       hours=sum(e.seconds for e in known) / 3600.0 if known else np.nan,
                       estimated_runs=len(known), fallback_runs=sum(e.fallback for e in known),
                       fallback="" if not bases else _FALLBACK_TEXT[bases.pop() if len(bases) == 1
                                                                     else cost.FALLBACK_MIXED])
        out.append(row)
    return pd.DataFrame(out, columns=["records", "rows", "runs", "recorded", "methods", "settings", "command", "device",
                                      "hours", "estimated_runs", "fallback_runs", "fallback", "other_runs"])


def _not_run_md(groups: pd.DataFrame) -> list[str]:
    out = []
    for g in groups.itertuples():
        if not np.isfinite(g.hours):
            price = "no comparable record to estimate the cost from"
        elif g.device == "cpu":
            price = (f"≈ {g.hours:.1f} CPU-hours at the median CPU time of comparable committed CPU runs, on an "
                     f"{cost.REFERENCE_CAPABILITY} host (`fedlib.cost:on_reference_host`)")
        else:
            price = (f"≈ {60 * g.hours:.0f} GPU-minutes at the median wall time of comparable committed GPU runs, "
                     "one at a time on the GPU (no CPU run is comparable)")
        if np.isfinite(g.hours) and g.fallback_runs:
            price += f" ({g.fallback_runs} of them priced from records without `cpu_seconds`: {g.fallback})"
        if np.isfinite(g.hours) and g.estimated_runs != g.runs:
            price += f" ({g.estimated_runs} of the {g.runs} runs estimated)"
        what = ", ".join(_name(m) for m in g.methods) or "—"
        commands = g.command.split("\n") if g.command else []
        where = f" at {', '.join(g.settings)}" if g.settings else ""
        runs = f"{g.runs} of {g.runs + g.recorded} runs" if g.recorded else f"{g.runs} runs"
        done = (f"; the command{'s skip' if len(commands) > 1 else ' skips'} the {g.recorded} recorded"
                if g.recorded else "")
        if g.other_runs:
            done += (f"; {g.other_runs} of the runs to compute {'is' if g.other_runs == 1 else 'are'} another seed "
                     "or variant of a row that ran, which no filter of the command leaves out")
        out += [f"- {g.rows} rows in `benchmarks/records/{g.records}/` ({what}{where}): {runs} to compute "
                f"(seeds {', '.join(map(str, NOT_RUN_SEEDS))}{done}), {price}:", "",
                "  ```bash\n" + "".join(f"  {c}\n" for c in commands) + "  ```" if commands
                else "  (no command is known for this folder)", ""]
    return out


def _scoreboard_md(sb: pd.DataFrame, link: str | None = None) -> list[str]:
    """The scoreboard as a markdown table of nine narrow columns (each paper linking to its part of
    the report at ``link``, if given)."""
    lines = ["| paper | rows | records | own data: reproduced / differ / undecided | stand-in data: reproduced / "
             "differ / undecided | label-only: reproduced / differ / undecided | at chance / shared value | differ: cause "
             "confirmed / supported / suspected / none | infeasible | not run |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in sb.to_dict("records"):
        name = f"[{s['paper']}]({link}#{anchor_slug(s['paper'])})" if link is not None else s["paper"]
        triple = lambda k: " / ".join(str(s[f"{k}: {v}"]) for v in _DECIDED)  # noqa: E731
        lines.append(f"| {name} | {s['rows']} | {s['records']} | {triple('own data')} | {triple('stand-in data')} | "
                     f"{triple('label-only')} | {s['at chance']} / {s['shared value']} | {s['differ, cause confirmed']} / "
                     f"{s['differ, cause supported']} / {s['differ, cause suspected']} / "
                     f"{s['differ, no cause identified']} | {s['infeasible']} | {s['not run']} |")
    return lines


CROSS_PAPER_PARAMS = ROOT / "params" / "paper" / "11_cross_paper.yaml"
BEYOND_LABEL_PARAMS = ROOT / "params" / "paper" / "12_beyond_label_skew.yaml"
"""Notebook 11's paper profile: the cross-paper grid the report's last section reads."""


def cpu_hours(records) -> float:
    """The CPU time the finished ``records`` took, in hours: the sum of their ``cpu_seconds``
    (each run's process CPU time, every thread summed; :func:`fedlib.experiment.run`)."""
    return sum(float(r.get("cpu_seconds") or 0.0) for r in records) / 3600.0


def cross_paper_markdown(root: Path | str = RECORDS, params: Path = CROSS_PAPER_PARAMS) -> list[str]:
    """The report's last section: notebook 11's cross-paper table (weighted local accuracy,
    methods × partitions; :mod:`workbook.cross_paper`) from the records committed in
    ``root/cross_paper`` for the grid of ``params``, with how many of its runs are recorded; a
    method × partition without a finished record is "—", never a number."""
    from fedlib import notebook_params
    from . import cross_paper as X

    p = notebook_params.load(params, "11_cross_paper")
    specs = X.notebook_grid(**{k: p[k] for k in X.GRID_PARAMS})["cross"]
    found, missing = X.present_records(specs, Path(root) / "cross_paper")
    out = ["## Cross-paper table (notebook 11)", "",
           "Every method on every seed paper's partition, one training protocol (`params/paper/11_cross_paper.yaml`),",
           f"from the records in `benchmarks/records/cross_paper/`: {len(found)} of {len(specs)} runs recorded "
           f"({cpu_hours(found):.1f} CPU-hours, the sum of their `cpu_seconds`).",
           "Weighted local accuracy (%): Σ correct / Σ test samples over the clients, each with its own model",
           "(Clust-PSI-PFL's \"global accuracy\"). Ranks, the Friedman test and the critical-difference diagram:",
           "notebook 11.", ""]
    if not found:
        return out + [f"No run of this grid is recorded yet: `{record_command('cross_paper', {})}` computes it, "
                      "resumably."]
    frame = X.runs_frame(found)
    scores = X.score_table(frame)
    table = scores.reindex(columns=p["partitions"]).rename(index=lambda m: X.method_row_label(frame, m),
                                                          columns=lambda c: X.PARTITIONS[c].label)
    done = set(X.complete_partitions(missing))
    complete = [q for q in scores.columns if q in done]  # every run recorded
    why = X.unrankable(scores[complete])
    if why is None:  # autorank's Friedman / Nemenyi over the complete partitions (cross_paper.ranking)
        result, left_out = X.ranking(scores[complete])
        # the row labels are method_row_label's (CFL names its thresholds): the rank keys must be the same
        table["mean rank"] = result.rankdf.meanrank.rename(index=lambda m: X.method_row_label(frame, m))
        out += [f"Mean rank over the {len(complete)} partitions whose every run is recorded (1 = best; Friedman "
                f"p = {result.pvalue:.3g}, Nemenyi critical distance {result.cd:.2f} ranks at α = {X.ALPHA}): the "
                "last column; CL and the Oracle are references, not ranked"
                + (f", nor are the methods without a score on every one of them ({len(left_out)})" if left_out else "")
                + ".", *_ranking_power_lines(found, scores[complete]), ""]
    else:
        out += [f"Not ranked yet (over the partitions whose every run is recorded): {why}.", ""]
    return (out + _cfl_lines(frame, specs, root) + _tau_lines(found, scores) + chaos_lines("pFedLIA")[1:] + [""]
            + [frame_markdown(table.reset_index(names="method"))])


def _tau_lines(found, scores) -> list[str]:
    """Clust-PSI-PFL's τ per partition and its gap to Local (:func:`workbook.cross_paper.tau_lines`):
    why its rank is near-local training where Algorithm 1 forms one cluster per distinct label histogram."""
    from . import cross_paper as X

    lines = X.tau_lines(found, scores)
    if not lines:
        return []
    return ["Clust-PSI-PFL's number of clusters τ (Algorithm 1 as printed: the argmax of the mean silhouette over "
            "j = 2, …, K − 1; the paper's Fig. 6 shows τ = 3–4 at K = 100 on ACSIncome's 2 classes) and what it "
            "means for its training (a cluster of n clients samples max(1, ⌊q·n⌋) of them per round; the gap to Local "
            "says how near its training comes to Local's):", "", *[f"- {line}" for line in lines], ""]


def _cfl_lines(frame: pd.DataFrame, specs, root) -> list[str]:
    """Above the cross-paper table (each line followed by a blank one): where CFL never split
    (:func:`workbook.cross_paper.cfl_notes`), then the CFL readings that are not ranked: Table II's
    ε1 = 1e-5 (the records before issue 57) and ε1 = auto (issues 57–69, "auto (defective,
    superseded)": :func:`workbook.cross_paper.superseded_cfl_specs`)."""
    from . import cross_paper as X

    notes = X.cfl_notes(frame)
    out = []
    if notes:
        never = [X.PARTITIONS[q].label for q, n in notes.items() if n]
        out += [f"{X.method_row_label(frame, 'cfl')}: "
                + (f"{', '.join(f'{X.PARTITIONS[q].label}: {n}' for q, n in notes.items() if n)}." if never
                   else "it split on every partition it ran."), ""]
    for pick, what in ((X.table_ii_cfl_specs, "a second reading: {}, the records before issue 57"),
                       (X.superseded_cfl_specs, "superseded: {}, the records of issues 57–69, whose ε1 test "
                        "nearly every cluster passed (issue 69)")):
        old, _ = X.present_records(pick(specs), Path(root) / "cross_paper")
        if old:
            cells = X.cell_table(X.runs_frame(old), "weighted_local")
            out += [f"Not ranked, {what.format(cells.Method.iloc[0])} — "
                    + "; ".join(f"{c} {cells[c].iloc[0]}" for c in cells.columns[1:]) + ".", ""]
    return out


def _ranking_power_lines(found, scores) -> list[str]:
    """What the cross-paper ranking rests on (issues 58, 70; :mod:`workbook.ranking_power`): N, k,
    the post-hoc test and CD, the seeds per block, and the split-half Kendall τ (every split of the
    blocks into halves) against its null (random rankings, the same k and N)."""
    from . import cross_paper as X, ranking_power as RP

    power = RP.ranking_power(scores, exclude=X.REFERENCES, alpha=X.ALPHA)
    halves = RP.split_half_tau(scores, exclude=X.REFERENCES)
    null = RP.split_half_null(power.k, power.n, n_sim=1000, seed=0)
    df = X.runs_frame(found)
    seeds = df[df.status == "ok"].groupby(["partition", "method"]).seed.nunique()
    lo, hi = int(seeds.min()), int(seeds.max())
    n_seeds = f"{lo} seed{'s' if lo > 1 else ''}" if lo == hi else f"{lo}–{hi} seeds"
    line = (f"What it rests on: N = {power.n} blocks, k = {power.k} methods, {n_seeds} per block; post-hoc test: Nemenyi, CD = {power.cd:.2f} of a possible {power.k - 1} ranks, "
            f"{power.within_cd_of_best} methods within CD of the best; split-half Kendall τ (the mean ranks on "
            f"{power.n // 2} blocks against the other {power.n - power.n // 2}, all {halves.size} splits): median "
            f"{np.nanmedian(halves):.2f}, min {np.nanmin(halves):.2f}; with no signal (random rankings, the same k and "
            f"N, 1,000 tables) the median's 95th percentile is {null['median'].quantile(0.95):.2f} — a budget reading "
            "at R = 10, not a converged one (notebook 11: the plateau rule, three metrics, the designs)")
    return [line + "."]


def beyond_label_markdown(root: Path | str = RECORDS, params: Path = BEYOND_LABEL_PARAMS) -> list[str]:
    """The section before the cross-paper table (the report's last): notebook 12's answer (:func:`workbook.beyond_label.answer`,
    label-only PSI's ARI and the best extension's, per partition) from the records committed in
    ``root/beyond_label`` for the grid of ``params``, with how many of its runs are recorded. The label
    histograms' spread needs the data, so it is left to the notebook."""
    from fedlib import notebook_params
    from . import beyond_label as B

    p = notebook_params.load(params, "12_beyond_label_skew")
    specs = B.notebook_grid(**{k: p[k] for k in B.GRID_PARAMS})["study"]
    found, missing = B.present_records(specs, Path(root) / "beyond_label")
    out = ["## PSI beyond label skew (notebook 12)", "",
           "Does label-only PSI fail where labels are balanced, and which extension recovers the groups? ARI of the",
           "clients' grouping against the planted groups (the mean over the trained runs' seeds, n in the last column;",
           "≤ 0.1: cannot separate, ≥ 0.9: recovers — with n = 1 a single value, no verdict over seeds: the second table),",
           f"from the records in `benchmarks/records/beyond_label/` (`params/paper/12_beyond_label_skew.yaml`): "
           f"{len(found)} of {len(specs)} runs recorded ({cpu_hours(found):.1f} CPU-hours, the sum of their `cpu_seconds`).", ""]
    ans = B.answer(B.runs_frame(found), {}) if found else None
    if ans is None or ans.empty:
        return out + [f"No label-only run of this grid is recorded yet: `{record_command('beyond_label', {})}` "
                      "computes it, resumably."]
    n_seeds = _trained_seeds(found, ans.partition)
    single = lambda verdicts: [f"{v} (one run: a single value)" if n == 1 and v != "not run" else v  # noqa: E731
                               for v, n in zip(verdicts, n_seeds)]
    t = pd.DataFrame({"partition": ans.label, "label-only PSI, ARI": ans.label_only_ari.round(2),
                      "label-only": single(ans.label_only),
                      "best extension": [B.extension_label(v) if isinstance(v, str) else "none run"
                                         for v in ans.best_extension],
                      "its ARI": ans.best_extension_ari.round(2), "extension": single(ans.extension),
                      "extensions run": [f"{n} of {len(B.EXTENSIONS)}" for n in ans.extensions_run],
                      "n (seeds)": n_seeds})
    return out + [frame_markdown(t), "", *_beyond_label_over_seeds(p, Path(root)), "", *_small_gaps_over_seeds(p, Path(root))]


def _trained_seeds(found, partitions) -> list[int]:
    """Per partition, the seeds of label-only PSI's finished trained runs."""
    from . import beyond_label as B

    df = B.runs_frame(found)
    ok = df[(df.status == "ok") & (df.variant == "psi_label")]
    return [int(ok[ok.partition == q].seed.nunique()) for q in partitions]


def _beyond_label_over_seeds(p: dict, root: Path) -> list[str]:
    """Notebook 12's verdicts over seeds: the clustering-only ARIs committed in
    ``root/beyond_label_ari/aris.csv`` (:mod:`workbook.beyond_label_seeds`), each the share of
    seeds with ARI ≥ 0.9 with its Clopper–Pearson interval and the seeds' median (issue 70)."""
    from . import beyond_label as B, beyond_label_seeds as S

    rows, reading = S.ari_reading(S.read_ari_rows(root / "beyond_label_ari" / "aris.csv", p["n_clients"]))
    head = ["Over seeds, the clustering step alone (the grouping a Clust-PSI-PFL run trains with, recomputed per seed",
            "without training; `benchmarks/records/beyond_label_ari/aris.csv`, `python benchmarks/beyond_label_ari.py",
            f"--seeds 0-19`; {reading}): how many seeds reach ARI ≥ {B.RECOVERED:g}, that share with its 95 %",
            "Clopper–Pearson interval, and the seeds' median ARI. A verdict says what the seeds did: *recovers in every",
            "seed*, *in most seeds* (interval above ½), *in few seeds* (interval below ½), *in no seed* (median above",
            f"chance), *cannot separate* (no seed, median ≤ {B.CHANCE:g}), *mixed* otherwise.", ""]
    if rows.empty:
        return head + ["No clustering-only ARI is committed yet."]
    names = list(p["partitions"]) + [B.small_name(s) for s in p["small_shares"]]
    a = S.answer_over_seeds(rows, [q for q in names if q in set(rows.partition)])
    t = pd.DataFrame({"partition": [B.partition_named(q).label for q in a.partition],
                      "label-only PSI, ARI": a.label_only, "label-only": a.label_only_verdict,
                      "best extension": [B.extension_label(v) if isinstance(v, str) else "none run"
                                         for v in a.best_extension],
                      "its ARI": a.extension, "extension": a.extension_verdict})
    return head + [frame_markdown(t)]


def _small_gaps_over_seeds(p: dict, root: Path) -> list[str]:
    """The baselines' small-client gap to FedAvg over the paper seed and the pre-registered seeds 1–2
    (:data:`workbook.beyond_label_seeds.SMALL_SEEDS_DESIGN`), paired by share and seed, from
    ``root/beyond_label`` (:func:`workbook.beyond_label_seeds.small_gap_table`; issue 70)."""
    from fedlib import notebook_params
    from . import beyond_label as B, beyond_label_seeds as S

    design = notebook_params.load(ROOT / S.SMALL_SEEDS_DESIGN, "12_beyond_label_skew")
    specs = S.small_specs_over_seeds(p, design)
    found, missing = B.present_records(specs, root / "beyond_label")
    head = ["The small clients' accuracy against FedAvg's, over seeds: each clustered baseline's pooled small-client",
            "accuracy (Σ correct / Σ test samples over the planted small clients) minus FedAvg's at the same share and seed",
            f"(pp; `{S.SMALL_SEEDS_DESIGN}` pre-registers seeds 1–2): per share the seeds' mean with its 95 % t-interval,",
            "over all shares the mean over the (share, seed) pairs, and the verdict that interval gives against 0; "
            f"{len(found)} of {len(specs)} runs recorded.", ""]
    pairs = S.small_gap_pairs(S.small_pooled_frame(found, B.variant_of))
    if pairs.empty:
        return head + ["No pair of a baseline and FedAvg is recorded yet."]
    return head + [frame_markdown(S.small_gap_table(pairs, {v: B.VARIANTS[v].label for v in B.VARIANTS}))]


def refused_lines(root: Path | str = RECORDS) -> list[str]:
    """The record files under ``root`` that every reader refuses (:func:`fedlib.lookup.refused`:
    they fail :func:`fedlib.records.read_strict`), each with why, as the page says it right after the
    scoreboard: "1 record refused: <file>: <why>"; [] when there is none."""
    root = Path(root)
    bad = [(p.relative_to(root).as_posix(), why) for d in sorted({p.parent for p in root.rglob("*.json")})
           for p, why in lookup.refused(d)]
    if len(bad) == 1:
        return [f"1 record refused: {bad[0][0]}: {bad[0][1]} (left out of every row)"]
    return [f"{len(bad)} records refused (left out of every row):", ""] + [f"- {f}: {why}" for f, why in bad] if bad else []


def findings_markdown(df: pd.DataFrame, root: Path | str = RECORDS) -> str:
    """docs/findings.md: the rules, the scoreboard, the papers' claims, the vocabularies, then
    every row, per paper and table, with the rows not run listed with their command."""

    out = ["# Findings: what reproduces, and why not where it doesn't", "",
           "Generated by `python -m workbook.report --write` from the run records committed under",
           "`benchmarks/records/` (`workbook.report:frame`); notebook `00_report` renders the same",
           "frame. Do not edit by hand: `tests/test_report.py` fails when this page is stale.", "",
           "## Scoreboard", "", headline(df), "",
           *_groups_md(), ""]
    out += _scoreboard_md(scoreboard(df))
    out += ["", *refused] if (refused := refused_lines(root)) else []
    out += ["", *_forest_md(df)]  # issue 71: the picture first, legible at the site's width
    from . import plan  # issue 67: the plan's head, right after the scoreboard
    out += ["", *plan.head_markdown(df, root=root, report=sys.modules[__name__])]
    out += ["", "## How to read a row", "",
            "Each row is one cell of a paper's table read one way. **paper**: the printed value (± its",
            "spread over its n runs where the paper gives one). **ours**: mean ± sample sd over seeds, n = seeds",
            "(one seed has no ±: its spread is unknown). **Δ** = ours − paper, with its 90 % interval.", "",
            f"**Verdict**: {VERDICT_RULE}", "", f"**Causes**: {EVIDENCE_RULE}"]
    out += ["", *paper_claims.markdown(paper_claims.frame(root), link="", shown=_shown_ids(df))]
    out += ["", *_vocabularies_md(df)]
    for p in PAPERS:
        out += ["", *paper_section(df, p, root=root)]
    out += ["", *beyond_label_markdown(root)]
    out += ["", *cross_paper_markdown(root)]  # last: every method on every seed paper's partition
    return "\n".join(out) + "\n"


def forest_figure_stems(df: pd.DataFrame) -> list[tuple[str, str, str]]:
    """``(paper, panel, file stem)`` of each forest figure docs/findings.md shows, in the page's
    order: one per panel of :func:`workbook.forest.forest_rows` of each paper (a table, or a
    column of a split table); stem ``forest_<paper>_<nn>_<panel slug>``."""
    from . import forest

    out = []
    for paper in PAPERS:
        panels = dict.fromkeys(forest.forest_rows(df[df.paper == paper])["panel"])
        for i, panel in enumerate(panels):
            slug = re.sub(r"[^a-z0-9]+", "_", panel.lower()).strip("_")
            out.append((paper, panel, f"forest_{paper}_{i:02d}_{slug}"))
    return out


def _forest_md(df: pd.DataFrame) -> list[str]:
    """The page's section of forest plots: per paper, one figure per table (or column)."""
    rel = Path("..") / FOREST_DIR.relative_to(ROOT)
    out = ["## Δ = ours − paper, per paper and table", "",
           "Each row that ran, as a marker at Δ (pp for accuracies, the value's own unit for scores and counts):",
           "green reproduced, red differs, orange undecided, a grey × at 0 infeasible; the error bar is Δ's",
           "90 % interval, the grey bar the paper's spread, the green band the margin. The rows are in the",
           "tables below; on the site a click enlarges a figure."]
    last = None
    for paper, panel, stem in forest_figure_stems(df):
        if paper != last:
            out += ["", f"### {PAPERS[paper]}: Δ per row", ""]
            last = paper
        out += [f"![Forest plot: {PAPERS[paper]} {panel}]({(rel / stem).as_posix()}.png)", ""]
    while out[-1] == "":
        out.pop()
    return out


def write_forest_figures(df: pd.DataFrame, directory: Path = FOREST_DIR) -> list[Path]:
    """Draw docs/findings.md's forest figures (:func:`forest_figure_stems`) into ``directory``,
    each PNG with the CSV of its rows (:func:`workbook.plots.save_figure`), and remove the figures
    of panels that no longer exist; returns the PNGs' paths."""
    from . import forest, plots

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stems = forest_figure_stems(df)
    written = []
    for paper in PAPERS:
        rows = forest.forest_rows(df[df.paper == paper])
        figs = forest.forest_figures(rows)
        for (_, panel, stem) in (t for t in stems if t[0] == paper):
            png, _ = plots.save_figure(figs.pop(panel), rows[rows.panel == panel], stem, directory)
            written.append(png)
    keep = {s for _, _, s in stems}
    for old in directory.glob("forest_*.*"):
        if old.suffix in (".png", ".csv") and old.stem not in keep:
            old.unlink()
    return written


def _shown_ids(df: pd.DataFrame) -> set:
    """The ids of the rows :func:`paper_section`'s tables show (every row but those not run): the
    anchors a link into docs/findings.md can reach."""
    return set(df.loc[df.verdict != "not run", "id"])


def _vocabularies_md(df: pd.DataFrame) -> list[str]:
    """The sections "Reasons" and "Metrics" (the metrics ``df``'s rows use), as markdown lines."""
    out = ["## Reasons", "", "| reason | meaning |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in REASONS.items()]
    out += ["", "## Metrics", "", "| metric | definition |", "|---|---|"]
    used = set(df.metric)
    return out + [f"| {k} | {v} |" for k, v in METRICS.items() if k in used]


def _groups_md() -> list[str]:
    return ["Rows are counted in the first group that fits: " + "; ".join(f"*{k}*: {v}" for k, v in GROUPS.items())
            + ". Records: the distinct run records behind the rows (a record read by two rows counts once)."]


def _rules_md(df: pd.DataFrame) -> list[str]:
    return [headline(df), "", f"**Verdict**: {VERDICT_RULE}", "", f"**Causes**: {EVIDENCE_RULE}"]


def sections(df: pd.DataFrame, root: Path | str = RECORDS, claims: pd.DataFrame | None = None,
             link: str = "../docs/findings.md") -> dict[str, str]:
    """The report as notebook 00 displays it: section name -> markdown text, in the report's order.

    ``rules`` (the row count and the rules), ``scoreboard`` (its table, as docs/findings.md has it),
    ``plan`` (what to run next: :func:`workbook.plan.head_markdown`, the next 10 CPU-hours),
    ``claims`` (:func:`workbook.paper_claims.markdown` of ``claims``, default
    ``paper_claims.frame(root)``, linking to the rows of the page at ``link``), ``vocabularies``
    (the reasons and the metrics the rows use), one entry per paper of :data:`PAPERS` (its key:
    :func:`paper_section` without anchors), ``beyond_label`` and ``cross_paper``
    (:func:`beyond_label_markdown`, :func:`cross_paper_markdown`). The tables are the very lines
    :func:`findings_markdown` writes into docs/findings.md; :func:`show` displays one."""

    if claims is None:
        claims = paper_claims.frame(root)
    from . import plan  # issue 67: the plan's head (workbook.plan.head_markdown)
    out = {"rules": _rules_md(df), "scoreboard": [*_groups_md(), "", *_scoreboard_md(scoreboard(df)),
                                                  *(["", *r] if (r := refused_lines(root)) else [])],
           "plan": plan.head_markdown(df, root=root, report=sys.modules[__name__]),
           "claims": paper_claims.markdown(claims, link=link, shown=_shown_ids(df)),
           "vocabularies": _vocabularies_md(df)}
    out.update({p: paper_section(df, p, anchors=False, root=root) for p in PAPERS})
    out["beyond_label"] = beyond_label_markdown(root)
    out["cross_paper"] = cross_paper_markdown(root)
    return {k: "\n".join(v) for k, v in out.items()}


def show(markdown: str) -> None:
    """Display ``markdown`` in the notebook as rendered Markdown (tables as tables):
    ``IPython.display.display(IPython.display.Markdown(markdown))``."""
    from IPython.display import Markdown, display

    display(Markdown(markdown))


def paper_section(df: pd.DataFrame, paper: str, anchors: bool = True, root: Path | str = RECORDS) -> list[str]:
    """One paper's part of the report (markdown lines): per table, the rows that ran (infeasible
    ones with their reason), then the rows not run: those without offline data counted, the others
    listed by records folder with the command that computes them and its estimated cost
    (:func:`not_run_groups`)."""
    name = PAPERS[paper]
    d = df[df.paper == paper]
    out = ([f'<a id="{anchor_slug(name)}"></a>', ""] if anchors else []) + [f"## {name}"]
    out += _partition_notes(paper)
    for table in dict.fromkeys(d.table):
        t = d[d.table == table]
        ran = t[t.verdict != "not run"]
        out += ["", f"### {name} {table}", ""]
        if len(ran):
            out += _md_table(ran, anchors)
        idle = t[t.verdict == "not run"]
        if len(idle):
            offline = idle[idle.reason == "no_offline_data"]
            line = f"Not run: {len(idle)} rows"
            if len(offline):
                line += f" ({len(offline)} of them: {REASONS['no_offline_data']})"
            out += ([""] if len(ran) else []) + [line + ("." if len(offline) == len(idle) else ":"), ""]
            out += _not_run_md(not_run_groups(idle, root))
            while out and out[-1] == "":
                out.pop()
    return out


CROSS_CPU = RECORDS / "cross_cpu" / "smoke_other_cpu_env.json"
"""The committed cross-CPU drift of the smoke notebooks (``scripts/cross_cpu_drift.py --json``)."""


def chaos_lines(row: str = "pFedLIA", path: Path = CROSS_CPU) -> list[str]:
    """A note for the rows of a chaotic method (``row``: its label in the notebooks' tables): how far
    its printed numbers moved when the smoke notebooks ran on other CPU kernels, per notebook
    where they moved (from ``path``, checked before use); [] where nothing moved or nothing is
    committed."""
    import json

    if not Path(path).is_file():
        return []
    data = json.loads(Path(path).read_text())
    notebooks = data.get("notebooks") if isinstance(data, dict) else None
    if not isinstance(notebooks, dict):
        fail(str(path), "the JSON of scripts/cross_cpu_drift.py --json (a 'notebooks' mapping)", type(data).__name__)
    moved = []
    for nb, v in notebooks.items():
        x = (v.get("rows") or {}).get(row) if isinstance(v, dict) else None
        big = x.get("largest") if isinstance(x, dict) else None
        if isinstance(big, dict) and all(isinstance(big.get(k), (int, float)) for k in ("committed", "executed", "diff")):
            moved.append(f"notebook {nb.split('_')[0]}, {big.get('table')} at {big.get('column')}: "
                         f"{big['committed']:.2f} → {big['executed']:.2f} ({x.get('differ')} of {x.get('compared')} "
                         "values moved)")
    if not moved:
        return []
    return ["", f"**Across CPUs, {row} is chaotic** (docs/reproducibility.md, \"Results that move across CPUs\"): "
            "it groups its clients by OPTICS on influence scores, a last-bit difference in training can move one client "
            "to another group, and the groups then train different models. When the smoke notebooks ran on other CPU "
            f"kernels (`{Path(path).relative_to(ROOT) if Path(path).is_relative_to(ROOT) else path}`), its printed "
            "numbers moved by whole points: " + "; ".join(moved) + f". The {row} rows here rest on one CPU's runs and "
            "can move likewise on another."]


def _partition_notes(paper: str) -> list[str]:
    """What a paper's partition gives its clients, where it departs from the paper's words: FedPrism's
    per-client Dirichlet on FMNIST's 60,000 training images at K = 100 (its tables' α, seeds 0–2),
    each client's realised class mix against the p_i it drew (:func:`workbook.fedprism_study.mix_drift`)."""
    if paper == "pfedlia":
        return chaos_lines("pFedLIA")
    if paper != "fedprism":
        return []
    from . import fedprism_study as FP

    labels, _ = FP.training_labels("fmnist", None)
    drift = FP.mix_drift(labels, 100, [0.1, 0.3, 0.5], [0, 1, 2])
    return ["", "Partition (§4.2: each client draws p_i ~ Dir(α·1); `fedlib.partition:dirichlet_client`): with "
            "K·n = N every sample is placed, so where a class runs out the clients still drawing take what is left. "
            "The clients' realised class mixes against their drawn p_i (FMNIST, N = 60,000; "
            "`workbook.fedprism_study:mix_drift`):", "", *[f"- {x}" for x in FP.mix_drift_lines(drift)]]


def readme_block(df: pd.DataFrame, link: str = "docs/findings.md", root: Path | str = RECORDS) -> str:
    """The README's findings: the scoreboard as a table (each paper linking to its part of the
    report), then the papers' headline claims as our records judge them
    (:func:`workbook.paper_claims.readme_lines`)."""

    lines = [headline(df), "", *_scoreboard_md(scoreboard(df), link)]
    lines.append("")
    lines += paper_claims.readme_lines(paper_claims.frame(root), link)
    return "\n".join(lines) + "\n"


def _size(n: float) -> str:
    return f"about {n / 1e9:.1f} GB" if n >= 1e9 else f"about {n / 1e6:.0f} MB"


def costs_block(path: Path | str = COSTS) -> str:
    """The README's table of its commands' time and disk, from the committed measurement at
    ``path`` (:data:`COSTS`: per command its minutes or seconds, the folders it fills in bytes,
    a note; the cores it ran on): one row per command."""
    import json

    rec = json.loads(Path(path).read_text())
    lines = [f"| command | time (approximate, measured once on {rec['cores']} cores) | disk | what |", "|---|---|---|---|"]
    for c in rec["commands"]:
        time = (f"about {c['minutes']} min" if "minutes" in c else f"about {c['seconds']} s" if "seconds" in c else "—")
        disk = ", ".join(f"`{folder}` {_size(n)}" for folder, n in c["disk"].items()) or "—"
        lines.append(f"| `{c['command']}` | {time} | {disk} | {c['note']} |")
    return "\n".join(lines) + "\n"


def _rendered(df: pd.DataFrame, readme_text: str, root: Path | str = RECORDS) -> tuple[str, str]:
    if not _BLOCK.search(readme_text):
        fail("README.md", "a file with a '<!-- findings:start -->' line and a '<!-- findings:end -->' line "
             "(the findings go between them)", "no such block")
    new_readme = _BLOCK.sub(lambda m: m.group(1) + readme_block(df, root=root) + m.group(3), readme_text, count=1)
    if not _COSTS_BLOCK.search(new_readme):
        fail("README.md", "a file with a '<!-- costs:start -->' line and a '<!-- costs:end -->' line "
             "(the commands' time and disk go between them)", "no such block")
    new_readme = _COSTS_BLOCK.sub(lambda m: m.group(1) + costs_block() + m.group(3), new_readme, count=1)
    return findings_markdown(df, root), new_readme


def write(root: Path | str = RECORDS, findings: Path = FINDINGS, readme: Path = README,
          figures: Path = FOREST_DIR) -> None:
    """Rewrite docs/findings.md, its forest figures (:func:`write_forest_figures`) and the
    README's findings block from the records."""
    df = frame(root)
    page, new_readme = _rendered(df, Path(readme).read_text(), root)
    write_forest_figures(df, figures)
    Path(findings).parent.mkdir(parents=True, exist_ok=True)
    Path(findings).write_text(page)
    Path(readme).write_text(new_readme)


#: What the last :func:`check` compared (``--check`` prints it on success): the rows rendered, their
#: papers, the record files under the records folder, the findings page's lines.
LAST_CHECK: dict = {}


def check(root: Path | str = RECORDS, findings: Path = FINDINGS, readme: Path = README) -> list[str]:
    """The files that differ from a fresh render ([] when both are current), and the forest
    figures the page links that are missing from :data:`FOREST_DIR`; what was compared goes to
    :data:`LAST_CHECK`."""
    df = frame(root)
    page, new_readme = _rendered(df, Path(readme).read_text(), root)
    LAST_CHECK.clear()
    LAST_CHECK.update(rows=len(df), papers=int(df["paper"].nunique()) if "paper" in df else 0,
                      records=sum(1 for _ in Path(root).rglob("*.json")), lines=page.count("\n"),
                      findings=str(findings), readme=str(readme))
    stale = [str(FOREST_DIR / f"{stem}.png") for _, _, stem in forest_figure_stems(df)
             if not (FOREST_DIR / f"{stem}.png").is_file()]
    if not Path(findings).is_file() or Path(findings).read_text() != page:
        stale.append(str(findings))
    if Path(readme).read_text() != new_readme:
        stale.append(str(readme))
    return stale


def _shown(path) -> str:
    """``path`` relative to the repository where it is inside it."""
    try:
        return Path(path).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workbook.report", description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true",
                    help="rewrite docs/findings.md, its forest figures (figures/findings/) and the README's block")
    ap.add_argument("--check", action="store_true", help="exit 1 if either is stale; on success, say what was compared")
    a = ap.parse_args(argv)
    if a.write:
        write()
    if a.check:
        stale, refused = check(), refused_lines()
        if refused:  # a refused record: fix or delete it; --write would only state the loss on the page
            print("refused (fix or delete the record; the page leaves it out):", *refused, sep="\n", file=sys.stderr)
        elif stale:
            print("stale (run python -m workbook.report --write):", *stale, file=sys.stderr)
        if stale or refused:
            return 1
        c = LAST_CHECK
        if c:
            print(f"report --check: current: {_shown(c['findings'])} ({c['lines']} lines) and the findings block of "
                  f"{_shown(c['readme'])} are what the {c['records']} record files under {_shown(RECORDS)} render: "
                  f"{c['rows']} table rows of {c['papers']} papers, no record refused")
    if not (a.write or a.check):
        print(findings_markdown(frame()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
