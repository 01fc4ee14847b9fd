"""The papers' claims, with outcomes: each seed paper's headline claims in its own words, each
tested on the committed run records as one or more comparisons A − B.

A :class:`Claim` quotes one sentence of a paper (verbatim from its text in ``../shared/seeds``,
only the machine conversion's artefacts cleaned: :func:`clean`; the claims are data, each paper's
``claims:`` in ``workbook/papers/<paper>.yaml``, read by :mod:`workbook.paper_values`) and tests
it on every baseline the quote names and every case (table, column) it covers: one
:class:`Comparison` per case × baseline, each a difference of two of the report's readings,
``a`` − ``b`` (or ``a`` − the paper's own value of A's cell, ``b_value``, where the claim is about
a value). The readings are picked out of :func:`workbook.report_cells.cells` by (paper, table,
row, column, reading name) (:func:`reading_of`), so a claim reads exactly the records its table
rows read; a baseline is read in the reading the report says produced the paper's numbers
(``paper_code`` where its ``paper_text`` row's cause says the authors' code trained the published
baseline). The paper's own A − B (``paper_delta``) comes from the same cells' printed values.

Our difference (:func:`difference`). Our values per seed come from the records with status ``ok``
(:func:`seed_values`). The difference is **paired** over the seeds both readings ran (the two runs
of one seed share the partition and the initialisation): mean d̄ and sample sd s_d of the per-seed
differences, se = s_d/√n, df = n − 1. With one paired seed (or no shared seed) the difference's
noise is built from each side's seed sd (:func:`seed_sd`: its own over ≥ 2 seeds, else the seed
sd pooled over the same method's runs at the other levels and client counts of the same data set
and protocol in the folder, :func:`workbook.verdicts.pooled_sd`): se = √(s_A²/n_A + s_B²/n_B),
Welch–Satterthwaite df. A side with one seed and no such run has no sd: the difference's noise is
unknown, never taken as 0, and the comparison cannot be decided. Against the paper's value the
comparison is the report row's own test (:func:`workbook.verdicts.verdict`).

The rule (:func:`decide`). The 90 % interval [low, high] = d̄ ∓ t(0.95, df)·se (two one-sided tests
at α = 5 %, as :mod:`workbook.verdicts`), and m the equivalence margin: the least difference the
report counts, ``verdicts.margin_of(tolerance, paper sd)`` (the tolerance, or two of the paper's
own sds of A's or B's cell where larger); for a claimed match at least |the paper's own Δ| (what
the paper itself calls a match is one).

* ``gain`` (A − B > 0 claimed): **holds** iff low > 0; **contradicted** iff high < 0 (a reversal,
  decided) or the interval lies inside (−m, m) while the paper's own Δ ≥ m (a tie, decided, where
  the paper claims a gain the tie rules out); otherwise **not resolved**.
* ``lower`` (A − B < 0 claimed): the mirror image (holds iff high < 0; contradicted iff low > 0,
  or inside (−m, m) with the paper's Δ ≤ −m).
* ``matches`` (A ≈ B claimed): **holds** iff the interval lies inside (−m, m); **contradicted**
  iff it lies wholly outside [−m, m]; otherwise **not resolved**.
* **not run** when A or B has no value (no ``ok`` record, data with no offline source, or two
  "most heterogeneous" readings that landed on different settings).

Why. A gain is claimed, not its size (the papers claim gains of 0.4 pp and of 80 pp alike), so a
gain holds once its interval excludes 0, whatever its size; the paper's Δ ± its uncertainty is
printed beside ours. A decided tie only contradicts a claimed gain the paper itself puts beyond m:
a gain of 0.44 pp is not refuted by a tie within ±1 pp. A wrong verdict needs a 5 % tail: a claim
whose true A − B is 0 reads "holds" at most 5 % of the time. A comparison not resolved states the
seeds that would likely decide it at today's mean and sd (:func:`seeds_to_decide`), or none (a
mean at the boundary, or the noise unknown).

A claim's outcome (:func:`overall`) over its comparisons that ran: **contradicted** if any is,
**holds** if every one holds, else **not resolved**; **not run** when none ran (comparisons not
run are listed and counted beside it). A comparison whose baseline itself misses its paper value
by more than its row's margin says so (``baseline_note``): the claim then rests on a baseline
that is not the paper's.

The paper's uncertainty: sd of its Δ = √(s_A² + s_B²) from the cells' printed spreads (a block's
caption spread where no cell prints its own, ``spread`` in the paper file), shown as the se over
the paper's runs where it states them (``runs``), else as that sd; "no spread printed" where
neither cell has one.

:func:`frame` is one row per claim (its comparisons in ``comparisons``; the first comparison's
numbers at top level, for the forest plot); :func:`markdown` renders the section "The papers'
claims" (above the report's tables) and :func:`readme_lines` the README's one line per claim.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from fedlib.methods import display_name
from fedlib.paths import ROOT
from fedlib.validation import check_choice, check_number, fail
from . import matching, paper_values, report_cells, verdicts
from .report_cells import PAPERS, Reading
from .tables import setting_name

__all__ = ["SEED_FILES", "KINDS", "VERDICTS", "Comparison", "Claim", "CLAIMS", "seeds_dir", "paper_text", "clean",
           "cell_of", "reading_of", "comparison", "seed_values", "seed_sd", "difference", "interval", "decide", "overall",
           "seeds_to_decide", "claim_margin",
           "compare", "evaluate", "frame", "markdown", "readme_lines"]

SEED_FILES = {
    "clust_psi_pfl": "000_8fc8799db8c4d298.txt",
    "cafa": "001_5a82f5e33b5d9d96.txt",
    "fedprism": "002_e167f030f69971a6.txt",
    "psi_pfl": "003_7286d975a966da5d.txt",
    "pfedlia": "004_2c39ed195090344b.txt",
}
"""Paper key -> its text's file in the seeds folder (``../shared/seeds/README.md``)."""
KINDS = {"gain": "A − B > 0", "lower": "A − B < 0", "matches": "A ≈ B"}
"""Claim kind -> what the paper claims of A − B."""
VERDICTS = ("holds", "contradicted", "not resolved", "not run")
"""A comparison's and a claim's outcomes (module docstring)."""
ENV_SEEDS = "FEDLIB_SEEDS"


# ----------------------------------------------------------------------------- the papers' text
def seeds_dir() -> Path:
    """The folder of the seed papers' texts: ``$FEDLIB_SEEDS``, else ``shared/seeds`` beside the
    checkout (``../shared/seeds``), else inside it."""
    if os.environ.get(ENV_SEEDS):
        return Path(os.environ[ENV_SEEDS])
    for d in (ROOT.parent / "shared" / "seeds", ROOT / "shared" / "seeds"):
        if d.is_dir():
            return d
    return ROOT.parent / "shared" / "seeds"


@lru_cache(maxsize=None)
def paper_text(paper: str, folder: str | None = None) -> str:
    """The paper's text, cleaned (:func:`clean`)."""
    return clean((Path(folder) if folder else seeds_dir()).joinpath(SEED_FILES[paper]).read_text())


_COMMANDS = {"alpha": "α", "beta": "β", "gamma": "γ", "tau": "τ", "zeta": "ζ", "epsilon": "ϵ", "mu": "μ",
             "sigma": "σ", "pm": "±", "times": "×", "sim": "∼", "in": "∈", "leq": "≤", "geq": "≥",
             "rightarrow": "→", "cdot": "·", "%": "%", "!": "", ",": "", ";": "", " ": ""}
_MARKERS = re.compile(r"[\\^_{}]")
_ROMAN = set("IVXLCDM")


def _render(latex: str) -> str:
    """What a LaTeX fragment prints as, for comparison with the text the conversion put before it."""
    s = re.sub(r"\\([A-Za-z]+|.)", lambda m: _COMMANDS.get(m.group(1), ""), latex)
    return re.sub(r"[\^_{}\s]", "", s)


def _undouble_latex(tok: str) -> str:
    """``α=0.3\\alpha=0.3,`` -> ``α=0.3,``: drop a LaTeX source L that follows its own rendering."""
    while True:
        first = _MARKERS.search(tok)
        if not first:
            return tok
        i, found = first.start(), None
        for k in range(len(tok), i, -1):
            for j in range(0, i + 1):
                r = _render(tok[j:k])
                if r and j >= len(r) and tok[j - len(r):j] == r:
                    found = (j, k)
                    break
            if found:
                break
        if not found:
            return tok
        tok = tok[:found[0]] + tok[found[1]:]


_DOUBLE = re.compile(r"([(\[]*)(.+?)\2([)\].,;:]*)")


def _undouble_plain(tok: str) -> str:
    """``S=0S=0`` -> ``S=0``, ``ADAD`` -> ``AD``, ``SS`` -> ``S``: a symbol printed twice (its
    rendering and its plain source). Only units with a capital, a '=', a '.' or a non-ASCII
    character count (never a word or a year), and no Roman numeral ("II")."""
    m = _DOUBLE.fullmatch(tok)
    if not m:
        return tok
    unit = m.group(2)
    ok = (len(unit) >= 2 and not unit.isdigit() and re.search(r"[A-Z=.]|[^\x00-\x7f]", unit)
          and not (set(unit) <= _ROMAN)) or (len(unit) == 1 and unit.isupper() and unit not in _ROMAN)
    return m.group(1) + unit + m.group(3) if ok else tok


def clean(text: str) -> str:
    """The seed text without the PDF conversion's artefacts, words untouched: a LaTeX source
    printed after its rendering (``α\\alpha``, ``0.01±0.020.01\\!\\pm\\!0.02``), a symbol printed
    twice (``S=1S=1``, ``ADAD``) and markdown emphasis (``*it matches*``)."""
    text = re.sub(r"\*+", "", text)
    parts = re.split(r"(\s+)", text)
    return "".join(p if p.isspace() or not p else _undouble_plain(_undouble_latex(p)) for p in parts)


# ----------------------------------------------------------------------------- the claims
@lru_cache(maxsize=None)
def _cells() -> tuple:
    return tuple(report_cells.cells())


def cell_of(paper: str, table: str, row: str, column: str):
    """The report's :class:`report_cells.Cell` at (paper, table, row, column)."""
    found = [c for c in _cells() if (c.paper, c.table, c.row, c.column) == (paper, table, row, column)]
    if len(found) != 1:
        raise LookupError(f"{len(found)} report cells at {(paper, table, row, column)} (want 1)")
    return found[0]


def reading_of(paper: str, table: str, row: str, column: str, name: str) -> Reading:
    """The reading ``name`` of the report's cell at (paper, table, row, column)."""
    c = cell_of(paper, table, row, column)
    found = [r for r in c.readings if r.name == name]
    if len(found) != 1:
        raise LookupError(f"no reading {name!r} of {(paper, table, row, column)}; it has "
                          f"{[r.name for r in c.readings]}")
    return found[0]


def _owner(reading: Reading):
    """The report cell ``reading`` belongs to, or None (a reading made up outside the report)."""
    found = [c for c in _cells() if reading in c.readings]
    return found[0] if found else None


@dataclass(frozen=True)
class Comparison:
    """One comparison A − B of a claim (one case × one baseline).

    a, b : the report's readings whose difference is tested; ``b`` None: A against ``b_value``
    kind : key of :data:`KINDS`
    unit : "%" (differences in pp) or "" (scores, counts)
    tolerance : the A cell's own tolerance (the least disagreement the report counts)
    paper_delta : A − B as the paper's own table prints it (NaN against a paper value)
    b_value : with ``b`` None, the paper's value A is held against
    paper_sd : the paper's sd of its Δ, √(s_A² + s_B²) of the cells' spreads (None: none printed)
    paper_runs : the runs the paper's cells average (None: not stated)
    margin_sd : the larger printed spread of the A and B cells (the margin's paper sd; None: none)
    b_paper : B's own paper value (None: no B), ``b_tolerance`` and ``b_spread`` its row's
    case : the setting, as the report's column names it (``Table II, …`` where the claim spans tables)
    """
    a: Reading
    b: Reading | None
    kind: str
    unit: str = "%"
    tolerance: float = 1.0
    paper_delta: float = float("nan")
    b_value: float | None = None
    paper_sd: float | None = None
    paper_runs: int | None = None
    margin_sd: float | None = None
    b_paper: float | None = None
    b_tolerance: float = 1.0
    b_spread: float | None = None
    case: str = ""


@dataclass(frozen=True)
class Claim:
    """One headline claim of a paper and the comparisons that test it.

    paper : key of :data:`report_cells.PAPERS`
    quote : the sentence, verbatim from the paper's text (conversion artefacts cleaned, :func:`clean`)
    where : the section / table it is in
    statement : our operationalisation, one line (A − B, metric, data, setting)
    kind : the claim's kind (key of :data:`KINDS`; a comparison may carry its own)
    comparisons : every case × baseline the quote covers (:class:`Comparison`)
    short : the claim in a few words, as the README lists it
    """
    paper: str
    quote: str
    where: str
    statement: str
    kind: str
    comparisons: tuple
    short: str = ""


def _spread(cell) -> float | None:
    """The cell's printed sd, or its block's caption spread (``spread`` in the paper file)."""
    if cell.spread is not None:
        return float(cell.spread)
    for name in _blocks(cell.paper, cell.table):
        sd = paper_values.spread_of(cell.paper, name)
        if sd is not None:
            return sd
    return None


def _runs(cell) -> int | None:
    """The runs the paper's cell averages (``runs`` of its block), or None (not stated)."""
    for name in _blocks(cell.paper, cell.table):
        n = paper_values.runs_of(cell.paper, name)
        if n is not None:
            return n
    return None


@lru_cache(maxsize=None)
def _blocks(paper: str, table: str) -> tuple:
    """The paper file's blocks of the report's ``table``: those whose source ``ref`` starts with
    the table's name ("TABLE III: …" for "Table III")."""
    tables = paper_values.load(paper)["tables"]
    return tuple(n for n, b in tables.items() if b["source"]["ref"].lower().startswith(table.lower() + ":"))


def comparison(paper: str, kind: str, a: tuple, b: tuple | None = None, case: str = "") -> Comparison:
    """A comparison from (table, row, column, reading name) locations of ``paper``'s cells; the
    unit, tolerance, paper values, spreads and runs come from the cells, never typed."""
    check_choice(kind, "kind", tuple(KINDS))
    ca = cell_of(paper, *a[:3])
    ra = reading_of(paper, *a)
    sa = _spread(ca)
    if b is None:
        return Comparison(ra, None, kind, ca.unit, ca.tolerance, float("nan"), float(ca.value), sa, _runs(ca), sa,
                          case=case)
    cb = cell_of(paper, *b[:3])
    sb = _spread(cb)
    spreads = [s for s in (sa, sb) if s is not None]
    runs = {r for r in (_runs(ca), _runs(cb)) if r is not None}
    return Comparison(ra, reading_of(paper, *b), kind, ca.unit, ca.tolerance, float(ca.value) - float(cb.value), None,
                      float(np.hypot(sa or 0.0, sb or 0.0)) if spreads else None, min(runs) if runs else None,
                      max(spreads) if spreads else None, float(cb.value), cb.tolerance, sb, case)


_READING_KEYS = ("table", "row", "column", "reading")


def _claims_of(paper: str) -> tuple[Claim, ...]:
    """``paper``'s claims from its data file (workbook/papers/<paper>.yaml, ``claims:``;
    :mod:`workbook.paper_values`): the quote, its source (``where``), our statement, the kind,
    reading A, the baselines B (null, one, or a list, each with an optional ``kind`` of its own)
    and the ``cases`` (table, column) the claim covers: one :class:`Comparison` per case × B."""
    out = []
    for i, c in enumerate(paper_values.claims(paper)):
        check_choice(c["kind"], f"{paper}.yaml: claims[{i}].kind", tuple(KINDS))
        a = c["a"]
        bs = c.get("b")
        bs = [None] if bs is None else (bs if isinstance(bs, list) else [bs])
        cases = c.get("cases") or [{"table": a["table"], "column": a["column"]}]
        tables = {case.get("table", a["table"]) for case in cases}
        comps = []
        for case in cases:
            table, column = case.get("table", a["table"]), case["column"]
            label = f"{table}, {column}" if len(tables) > 1 else column
            for b in bs:
                kind = (b or {}).get("kind", c["kind"])
                check_choice(kind, f"{paper}.yaml: claims[{i}].b.kind", tuple(KINDS))
                ra = (table, a["row"], column, a["reading"])
                rb = None if b is None else (table, b["row"], column, b["reading"])
                comps.append(comparison(paper, kind, ra, rb, label))
        out.append(Claim(paper, c["quote"], c["source"]["ref"], c["statement"], c["kind"], tuple(comps), c["short"]))
    return tuple(out)


CLAIMS: tuple[Claim, ...] = tuple(c for paper in PAPERS for c in _claims_of(paper))
"""The papers' headline claims, 3–4 per paper, in :data:`report_cells.PAPERS` order (the report's),
each paper's in its file's order; ``short`` is the claim in a few words, as the README lists it."""


# ----------------------------------------------------------------------------- the rule (pure)
def difference(diffs=None, *, mean: float | None = None, sd_a: float | None = None, n_a: int = 0,
               sd_b: float | None = None, n_b: int = 0, df_a: float = 0, df_b: float = 0) -> tuple[float, float, float]:
    """(mean, se, df) of A − B: from the paired per-seed differences ``diffs`` (n ≥ 2: se = s_d/√n,
    df = n − 1), else from each side's seed sd over its seeds (``sd_a`` over ``n_a``, its df
    ``df_a``; one seed: the pooled sd and its df): se = √(s_A²/n_A + s_B²/n_B), Welch–Satterthwaite
    df. se NaN where a side's sd is unknown (never 0: a difference with unknown noise is not decided)."""
    if diffs is not None and len(diffs) >= 2:
        d = np.asarray(diffs, dtype=float)
        return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d))), float(len(d) - 1)
    if mean is None:
        mean = float(np.mean(diffs)) if diffs is not None and len(diffs) else float("nan")
    parts = []
    for sd, n, df in ((sd_a, n_a, df_a), (sd_b, n_b, df_b)):
        if n == 0:  # no such side (a paper value)
            continue
        if sd is None or not np.isfinite(sd) or sd <= 0 or df < 1:
            return float(mean), float("nan"), float("nan")
        parts.append((sd * sd / n, df))
    if not parts:
        return float(mean), float("nan"), float("nan")
    var = sum(v for v, _ in parts)
    return float(mean), float(np.sqrt(var)), float(var * var / sum(v * v / df for v, df in parts))


def interval(mean: float, se: float, df: float, alpha: float = verdicts.ALPHA) -> tuple[float, float]:
    """The 1 − 2α interval mean ∓ t(1 − α, df)·se (NaN where se is unknown)."""
    if not (np.isfinite(se) and np.isfinite(mean)):
        return float("nan"), float("nan")
    half = float(verdicts.t_quantile(1 - alpha, df)) * se if se > 0 else 0.0
    return mean - half, mean + half


def decide(kind: str, low: float, high: float, margin: float, paper_delta: float = float("nan")) -> str:
    """The outcome of one comparison from its interval [low, high] (module docstring): "holds",
    "contradicted" or "not resolved"; NaN bounds (noise unknown) are never decided."""
    check_choice(kind, "kind", tuple(KINDS))
    check_number(margin, "margin", 0, low_open=True)
    if not (np.isfinite(low) and np.isfinite(high)):
        return "not resolved"
    inside = -margin < low and high < margin
    if kind == "matches":
        if inside:
            return "holds"
        return "contradicted" if low > margin or high < -margin else "not resolved"
    sign = 1.0 if kind == "gain" else -1.0
    lo, hi = (low, high) if sign > 0 else (-high, -low)  # the mirror image: a reduction is a gain of B − A
    if lo > 0:
        return "holds"
    if hi < 0 or (inside and np.isfinite(paper_delta) and sign * paper_delta >= margin):
        return "contradicted"
    return "not resolved"


def seeds_to_decide(kind: str, mean: float, seed_sd: float, n: int, margin: float,
                    paper_delta: float = float("nan"), alpha: float = verdicts.ALPHA) -> int | None:
    """The fewest paired seeds N > n (up to :data:`workbook.verdicts.MAX_SEEDS`) at which a
    comparison with today's mean and per-seed sd of the difference would be decided (se = sd/√N,
    df N − 1); None where none does (a mean at the boundary) or the sd is unknown."""
    if not (np.isfinite(mean) and np.isfinite(seed_sd) and seed_sd > 0):
        return None
    for total in range(max(n + 1, 2), verdicts.MAX_SEEDS + 1):
        low, high = interval(mean, seed_sd / np.sqrt(total), total - 1, alpha)
        if decide(kind, low, high, margin, paper_delta) != "not resolved":
            return total
    return None


def overall(outcomes) -> str:
    """A claim's outcome from its comparisons' (module docstring): over those that ran,
    contradicted if any is, holds if all hold, else not resolved; not run when none ran."""
    ran = [o for o in outcomes if o != "not run"]
    for o in ran:
        if o not in VERDICTS:
            fail("outcome", f"one of {list(VERDICTS)}", o)
    if not ran:
        return "not run"
    if "contradicted" in ran:
        return "contradicted"
    return "holds" if all(o == "holds" for o in ran) else "not resolved"


def claim_margin(kind: str, tolerance: float, paper_sd: float | None, paper_delta: float = float("nan")) -> float:
    """m (module docstring): ``verdicts.margin_of(tolerance, paper_sd)``; for a match at least
    |the paper's own Δ|."""
    m = verdicts.margin_of(tolerance, paper_sd)
    if kind == "matches" and np.isfinite(paper_delta):
        m = max(m, abs(float(paper_delta)))
    return m


# ----------------------------------------------------------------------------- evaluation
def seed_values(reading: Reading, root: Path | str = matching.RECORDS) -> dict:
    """{seed: our value} of ``reading``, from the records with status ``ok`` and a finite value
    (:func:`workbook.matching.matched_records`, :func:`~workbook.matching.record_value`)."""
    folder, recs = matching.matched_records(reading, Path(root))
    out = {}
    for r in recs:
        if r.get("status") != "ok":
            continue
        seed = r["spec"].get("seed", 0)
        if seed in out:
            raise ValueError(f"two ok records of seed {seed} answer {reading.name!r} in {reading.records}/")
        v = matching.record_value(r, reading.metric, reading.window, folder)
        out[seed] = float(v)
    return {s: v for s, v in sorted(out.items()) if np.isfinite(v)}


_POOL_FREE = ("level", "n_clients")
"""The spec fields a one-seed side's sd is pooled across (:func:`seed_sd`)."""


def seed_sd(reading: Reading, values: dict, root: Path | str = matching.RECORDS) -> tuple[float, float, bool]:
    """(sd, df, pooled) of one side's seed values: its own sample sd over ≥ 2 seeds (df n − 1);
    for one seed, :func:`workbook.verdicts.pooled_sd` over the same method's runs at every
    (level, client count) of the folder with the reading's other fields (data set, protocol,
    variant), one group per setting; (nan, 0, True) where no group has two seeds."""
    v = list(values.values())
    if len(v) >= 2:
        return float(np.std(v, ddof=1)), float(len(v) - 1), False
    free = replace(reading, match=tuple((k, x) for k, x in reading.match if k not in _POOL_FREE))
    folder, recs = matching.matched_records(free, Path(root))
    groups: dict = {}
    for r in recs:
        if r.get("status") != "ok":
            continue
        key = tuple(r["spec"].get(k) for k in _POOL_FREE)
        val = float(matching.record_value(r, reading.metric, reading.window, folder))
        if np.isfinite(val):
            groups.setdefault(key, []).append(val)
    s, df = verdicts.pooled_sd(groups.values())
    return (s, float(df), True) if df and s > 0 else (float("nan"), 0.0, True)


def _levels(reading: Reading, root: Path) -> set:
    """The (protocol, level) settings a "most heterogeneous" reading was read at (empty for
    other readings)."""
    if not any(k == "level" and v == "most_heterogeneous" for k, v in reading.match):
        return set()
    return {(r["spec"].get("protocol"), float(r["spec"]["level"])) for r in matching.matched_records(reading, root)[1]
            if r.get("status") == "ok"}


def _settings(levels: set) -> str:
    return ", ".join(setting_name(p, lv) for p, lv in sorted(levels))


def _sd(values) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")


def _name(reading: Reading | None, comp: Comparison) -> str:
    """``FedAvg (both readings)``: the method as the papers write it, and the reading."""
    if reading is None:
        return f"the paper's {_num(comp.b_value, comp.unit, signed=False)}"
    c = _owner(reading)
    row = c.row if c is not None else str(dict(reading.match).get("method", "?"))
    method, _, rest = row.partition(" ")
    return f"{display_name(method)}{(' ' + rest) if rest else ''} ({reading.name})"


def _method(reading: Reading | None) -> str:
    c = _owner(reading) if reading is not None else None
    row = c.row if c is not None else str(dict(reading.match).get("method", "?")) if reading is not None else "?"
    method, _, rest = row.partition(" ")
    return f"{display_name(method)}{(' ' + rest) if rest else ''}"


def _row_id(reading: Reading | None) -> str | None:
    """The anchor of ``reading``'s row in docs/findings.md (as :func:`report.frame` names it)."""
    c = _owner(reading) if reading is not None else None
    return None if c is None else matching.anchor_slug(PAPERS[c.paper], c.table, c.row, c.column, reading.name)


def compare(comp: Comparison, root: Path | str = matching.RECORDS) -> dict:
    """One comparison against the records under ``root``: per-seed values of A and B, the
    differences (paired over shared seeds), n, mean, sd, se, df, the 90 % interval, the margin m,
    ``outcome`` (:func:`decide`), ``seeds_to_decide``, and ``baseline_note`` where B misses its
    own paper value by more than its row's margin."""
    root = Path(root)
    out = dict(kind=comp.kind, unit=comp.unit, case=comp.case, a=_name(comp.a, comp), b=_name(comp.b, comp),
               b_method=_method(comp.b) if comp.b is not None else "", a_id=_row_id(comp.a), b_id=_row_id(comp.b),
               tolerance=comp.tolerance, values_a={}, values_b={}, paired=False, seeds=[], diffs=[], n=0,
               mean=np.nan, sd=np.nan, se=np.nan, df=np.nan, low=np.nan, high=np.nan, pooled=False,
               margin=claim_margin(comp.kind, comp.tolerance, comp.margin_sd, comp.paper_delta),
               outcome="not run", seeds_to_decide=None, why="", baseline_note="",
               paper_delta=comp.paper_delta, paper_sd=comp.paper_sd, paper_runs=comp.paper_runs)
    readings = (comp.a,) if comp.b is None else (comp.a, comp.b)
    off = [(r, _owner(r).unavailable) for r in readings if _owner(r) is not None and _owner(r).unavailable]
    if off:
        out["why"] = "; ".join(f"{_name(r, comp)}: {report_cells.REASONS.get(u, u)}" for r, u in off)
        return out
    va = seed_values(comp.a, root)
    vb = seed_values(comp.b, root) if comp.b is not None else None
    out["values_a"], out["values_b"] = va, (vb if vb is not None else {})
    missing = [x for x, v in (("A", va), ("B", vb)) if v is not None and not v]
    if missing:
        out["why"] = "; ".join(f"no ok record for {x} in benchmarks/records/{(comp.a if x == 'A' else comp.b).records}/"
                               for x in missing)
        return out
    if comp.b is None:  # against the paper's value: the report row's own test
        seeds = sorted(va)
        diffs = [va[s] - comp.b_value for s in seeds]
        mean, sd = float(np.mean(diffs)), _sd(diffs)
        s_a, df_a, pooled = seed_sd(comp.a, va, root)
        out.update(paired=True, seeds=seeds, diffs=diffs, n=len(diffs), mean=mean, sd=sd, pooled=pooled and len(va) < 2)
        if not np.isfinite(s_a):
            out.update(outcome="not resolved", why=f"one seed of {_method(comp.a)} and no run of it with two: "
                                                   "its noise is unknown")
            return out
        v = verdicts.verdict(comp.b_value, comp.paper_sd, comp.paper_runs or 1, list(va.values()), comp.tolerance,
                             pooled=(s_a, max(1, int(df_a))) if len(va) < 2 else None)
        out.update(se=v.se, df=v.df, low=v.low, high=v.high, margin=v.margin,
                   outcome={"reproduced": "holds", "differs": "contradicted"}.get(v.outcome, "not resolved"),
                   seeds_to_decide=v.seeds_to_decide)
        return out
    la, lb = _levels(comp.a, root), _levels(comp.b, root)
    if la and lb and la != lb:
        out["why"] = f"A read at {_settings(la)}, B at {_settings(lb)}: no common setting"
        return out
    if la or lb:
        out["why"] = f"read at {_settings(la | lb)}"
    seeds = sorted(set(va) & set(vb))
    diffs = [va[s] - vb[s] for s in seeds]
    if len(seeds) >= 2:
        mean, se, df = difference(diffs)
        sd, n, pooled, per_seed = _sd(diffs), len(seeds), False, _sd(diffs)
    else:
        (s_a, df_a, p_a), (s_b, df_b, p_b) = seed_sd(comp.a, va, root), seed_sd(comp.b, vb, root)
        mean = float(np.mean(diffs)) if seeds else float(np.mean(list(va.values())) - np.mean(list(vb.values())))
        n_a, n_b = (1, 1) if seeds else (len(va), len(vb))
        mean, se, df = difference(mean=mean, sd_a=s_a, n_a=n_a, df_a=df_a, sd_b=s_b, n_b=n_b, df_b=df_b)
        n = len(seeds) if seeds else min(len(va), len(vb))
        sd = _sd(diffs) if seeds else float(np.hypot(_sd(list(va.values())), _sd(list(vb.values()))))
        pooled = (p_a and len(va) < 2) or (p_b and len(vb) < 2)
        per_seed = float(np.hypot(s_a, s_b))
        if not seeds:
            out["why"] = ((out["why"] + "; ") if out["why"] else "") + \
                f"no seed in common (A: {sorted(va)}, B: {sorted(vb)}): difference of the means"
        unknown = [_method(r) for r, s, v in ((comp.a, s_a, va), (comp.b, s_b, vb)) if not np.isfinite(s)]
        if unknown:
            out["why"] = ((out["why"] + "; ") if out["why"] else "") + \
                f"one seed of {' and '.join(unknown)}, and no run of {'it' if len(unknown) == 1 else 'either'} " \
                "with two at another level: the difference's noise is unknown"
    low, high = interval(mean, se, df)
    outcome = decide(comp.kind, low, high, out["margin"], comp.paper_delta)
    more = seeds_to_decide(comp.kind, mean, per_seed, n, out["margin"], comp.paper_delta) \
        if outcome == "not resolved" else None
    out.update(paired=bool(seeds), seeds=seeds, diffs=diffs, n=n, mean=mean, sd=sd, se=se, df=df, low=low, high=high,
               pooled=pooled, outcome=outcome, seeds_to_decide=more)
    if comp.b_paper is not None:  # the baseline against its own paper value
        gap = float(np.mean(list(vb.values()))) - comp.b_paper
        if abs(gap) > verdicts.margin_of(comp.b_tolerance, comp.b_spread):
            pp = " pp" if comp.unit == "%" else ""
            out["baseline_note"] = (f"{_method(comp.b)} misses its paper value by {_num(gap, comp.unit)}{pp} "
                                    f"(ours {_num(float(np.mean(list(vb.values()))), comp.unit, False)}, "
                                    f"paper {_num(comp.b_paper, comp.unit, False)})")
    return out


def evaluate(claim: Claim, root: Path | str = matching.RECORDS) -> dict:
    """One claim against the records under ``root``: every comparison (:func:`compare`, in
    ``comparisons``), the claim's ``verdict`` (:func:`overall`), how many comparisons ran and
    hold, and the first comparison's numbers at top level (n, mean, sd, margin, paper_delta)."""
    comps = [compare(c, root) for c in claim.comparisons]
    verdict = overall([c["outcome"] for c in comps])
    first = comps[0]
    ran = [c for c in comps if c["outcome"] != "not run"]
    return dict(paper=claim.paper, where=claim.where, quote=claim.quote, statement=claim.statement, short=claim.short,
                kind=claim.kind, unit=first["unit"], verdict=verdict, comparisons=comps, n_comparisons=len(comps),
                n_ran=len(ran), n_hold=sum(c["outcome"] == "holds" for c in comps),
                n_contradicted=sum(c["outcome"] == "contradicted" for c in comps),
                a=first["a"], b=first["b"], a_id=first["a_id"], b_id=first["b_id"], n=first["n"],
                mean=first["mean"], sd=first["sd"], margin=first["margin"], low=first["low"], high=first["high"],
                paper_delta=first["paper_delta"], why=first["why"])


def frame(root: Path | str = matching.RECORDS) -> pd.DataFrame:
    """One row per claim of :data:`CLAIMS` (:func:`evaluate`), in order."""
    matching.clear_caches()
    return pd.DataFrame([evaluate(c, root) for c in CLAIMS])


# ----------------------------------------------------------------------------- rendering
def _num(v: float, unit: str, signed: bool = True) -> str:
    if v is None or not np.isfinite(v):
        return "—"
    d = 2 if unit == "%" else 3
    return f"{v:+.{d}f}" if signed else f"{v:.{d}f}"


def _ours(c: dict) -> str:
    """``+x.xx ± y.yy pp (n = k), 90 % [lo, hi]``; "not run" where it did not."""
    if c["outcome"] == "not run":
        return "not run"
    pp = " pp" if c["unit"] == "%" else ""
    spread = f" ± {_num(c['sd'], c['unit'], False)}" if np.isfinite(c["sd"]) else ""
    how = f"n = {c['n']}" if c["paired"] else f"unpaired, n = {len(c['values_a'])} vs {len(c['values_b'])}"
    if c["pooled"] and np.isfinite(c["se"]):
        how += ", pooled seed sd"
    ci = (f", 90 % [{_num(c['low'], c['unit'])}, {_num(c['high'], c['unit'])}]" if np.isfinite(c["low"]) else "")
    return f"{_num(c['mean'], c['unit'])}{spread}{pp} ({how}{ci})"


def _paper(c: dict) -> str:
    """``paper: +z.zz ± u.uu (se, 5 runs)``, "no spread printed", or "" against a paper value."""
    if not np.isfinite(c["paper_delta"]):
        return ""
    sd, runs = c["paper_sd"], c["paper_runs"]
    if sd is None:
        unc = " (no spread printed)"
    elif runs:
        unc = f" ± {_num(sd / np.sqrt(runs), c['unit'], False)} (se over {runs} runs)"
    else:
        unc = f" ± {_num(sd, c['unit'], False)} (sd; runs not stated)"
    return f"paper {_num(c['paper_delta'], c['unit'])}{unc}"


def _outcome_text(c: dict) -> str:
    o = c["outcome"]
    if o == "not resolved":
        more = c["seeds_to_decide"]
        if more:
            return f"{o}, ~{more} seeds would decide it"
        return o + (", no seed count decides it at today's numbers" if np.isfinite(c["se"]) else "")
    return o


def _linked(name: str, row_id: str | None, link: str) -> str:
    return f"[{name}]({link}#{row_id})" if isinstance(row_id, str) and row_id else name


def _tally(r) -> str:
    """``3 of 4 comparisons hold, 1 not run``."""
    parts = [f"{r.n_hold} of {r.n_comparisons} hold"]
    if r.n_contradicted:
        parts.append(f"{r.n_contradicted} contradicted")
    if r.n_ran < r.n_comparisons:
        parts.append(f"{r.n_comparisons - r.n_ran} not run")
    return ", ".join(parts)


def markdown(df: pd.DataFrame, link: str = "docs/findings.md", shown: set | None = None) -> list[str]:
    """The section "The papers' claims" (markdown lines): per paper, each claim's quote as a
    blockquote, our operationalisation, the claim's outcome, then one line per comparison (A and B
    linking to their rows of the report at ``link``; ``""`` inside docs/findings.md itself): our
    A − B with n and its 90 % interval, the paper's Δ ± its uncertainty, the outcome, and a note
    where the baseline misses its own paper value.

    ``shown``: the ids of the rows the report's tables show (those it ran); A or B links only
    there. None: a comparison's own outcome decides (one not run links to neither row)."""
    out = ["## The papers' claims", "",
           "Each paper's headline claims in its own words, each tested on the committed records against every baseline",
           "its quote names and on every case it covers: one comparison A − B of two of the report's rows each (paired",
           "over the seeds both ran; mean ± sample sd, n = seeds; one seed: each side's seed sd pooled over its runs at",
           "other levels). With the 90 % interval of A − B (two one-sided tests at 5 %) and m the least difference the",
           "report counts (tolerance, or two of the paper's sds): a claimed gain **holds** when the interval lies above 0,",
           "is **contradicted** when it lies below 0 (or within ±m where the paper claims a gain ≥ m), and is **not",
           "resolved** otherwise (with the seeds that would likely decide it); a reduction is the mirror image; a claimed",
           "match holds inside ±m (at least the paper's own gap), is contradicted wholly outside. A claim holds when every",
           "comparison that ran holds, is contradicted when any is. **paper**: A − B in the paper's own table ± its",
           "uncertainty.", ""]
    for p, name in PAPERS.items():
        d = df[df.paper == p]
        if d.empty:
            continue
        out += [f"### {name}: claims", ""]
        for r in d.itertuples():
            out += [f"> “{r.quote}”", f"> — {name}, {r.where}", "",
                    f"{r.statement}; claimed: {KINDS[r.kind]}.  ",
                    f"**{r.verdict}** ({_tally(r)})", ""]
            for c in r.comparisons:
                def target(row_id):  # rows not run have no anchor in the report's tables
                    ok = (row_id in shown) if shown is not None else c["outcome"] != "not run"
                    return row_id if ok else None
                a, b = _linked(c["a"], target(c["a_id"]), link), _linked(c["b"], target(c["b_id"]), link)
                case = f"{c['case']}: " if c["case"] and r.n_comparisons > 1 else ""
                claimed = f" ({KINDS[c['kind']]})" if c["kind"] != r.kind else ""
                bits = [f"A − B = {_ours(c)}" if c["outcome"] != "not run" else "not run",
                        f"m {_num(c['margin'], c['unit'], False)}"]
                if _paper(c):
                    bits.append(_paper(c))
                bits.append(f"**{_outcome_text(c)}**")
                notes = "; ".join(x for x in (c["why"], c["baseline_note"]) if x)
                out.append(f"- {case}{a} − {b}{claimed}: " + " · ".join(bits) + (f" ({notes})" if notes else ""))
            out.append("")
    return out[:-1]


def readme_lines(df: pd.DataFrame, link: str = "docs/findings.md") -> list[str]:
    """The README's findings as claims: one bullet per paper (linking to its part of the report),
    each claim in a few words with its outcome and how many of its comparisons hold."""
    lines = []
    for p, name in PAPERS.items():
        d = df[df.paper == p]
        if d.empty:
            continue
        parts = []
        for r in d.itertuples():
            if r.n_comparisons == 1:
                c = r.comparisons[0]
                detail = "" if r.verdict == "not run" else f" ({_ours(c).split(' (')[0]}, n = {c['n']}" + \
                    (f"; {_paper(c)}" if _paper(c) else "") + ")"
            else:
                detail = f" ({_tally(r)})"
            parts.append(f"{r.short}: **{r.verdict}**{detail}")
        lines.append(f"- [{name}]({link}#{matching.anchor_slug(name)}): " + "; ".join(parts) + ".")
    return lines
