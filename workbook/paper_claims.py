"""The papers' claims, with verdicts: each seed paper's headline claims in its own words, each
evaluated from the committed run records as a comparison A − B.

A :class:`Claim` quotes one sentence of a paper (verbatim from its text in ``../shared/seeds``,
only the machine conversion's artefacts cleaned: :func:`clean`; the claims are data, each paper's
``claims:`` in ``workbook/papers/<paper>.yaml``, read by :mod:`workbook.paper_values`) and operationalises it as a
difference of two of the report's readings, ``a`` − ``b`` (or ``a`` − the paper's own value of
that cell, ``b_value``, when the claim is about a value rather than a comparison). The readings
are picked out of :func:`workbook.report_cells.cells` by (paper, table, row, column,
reading name) (:func:`reading_of`), so a claim reads exactly the records its table rows read,
and the paper's own A − B (``paper_delta``) comes from the same cells' printed values.

Evaluation (:func:`evaluate`). Our values per seed come from the records with status ``ok``
(:func:`seed_values`). The difference is **paired** over the seeds both readings ran (the two
runs of one seed share the partition and the initialisation, so pairing removes that variance);
when they share no seed it is the difference of the means, with sd = √(sd_A² + sd_B²) (NaN when
either side has one seed). ``n`` = the paired seeds (or, unpaired, the smaller side); ``sd`` is
the sample sd (ddof = 1; NaN for n = 1).

The rule. A claimed gain or reduction is a statement about two of our runs, so its margin is
their seed-to-seed noise: m = sd, the sample sd of the per-seed differences, where n ≥ 2; with one
seed that noise is unknown and the cell's ``tolerance`` stands in for it (1 pp for accuracies and
distances, the artifact appendix's "±1 pp"; a score's or count's own step, e.g. one client more or
less for CBCC's F1). A claimed match is a statement of agreement, so its margin is the widest gap
the report itself calls agreement: m = max(tolerance, sd). Then

* ``gain`` (A − B > 0 claimed): **holds** iff mean > m;
* ``lower`` (A − B < 0 claimed, e.g. a distance): **holds** iff mean < −m;
* ``matches`` (A ≈ B claimed): **holds** iff |mean| ≤ m;
* otherwise **does not hold**; **not run** when A or B has no value (no ``ok`` record, data with
  no offline source, or two "most heterogeneous" readings that landed on different settings).

Why this rule. A gain smaller than the spread of the per-seed differences is one a rerun would
not reliably show; a gain the seeds agree on is one, however small (the papers claim gains of
0.4–0.6 pp). With 1–3 seeds no significance test is meaningful, and we do not claim one: mean > sd
is only t > √n (1.7 at n = 3), and every verdict states its n. For ``matches`` the margin is
the widest gap still called a tie, so a noisy A makes "matches" easier to hold: ``sd`` beside the
verdict says when that happened. With one seed the verdict says so: "holds (1 seed)".
``outcome`` says which of the three regions the mean fell in (A above B beyond the margin, within
the margin, A below B beyond it), so a reversal and a tie, both "does not hold" for a gain, stay
apart. The paper's own A − B is printed beside ours, without a verdict: the paper gives no
per-seed differences to judge it by.

:func:`frame` is one row per claim; :func:`markdown` renders the section "The papers' claims"
(above the report's tables) and :func:`readme_lines` the README's one line per claim.
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
from fedlib.validation import check_choice
from . import matching, paper_values, report_cells
from .report_cells import PAPERS, Reading
from .tables import setting_name

__all__ = ["SEED_FILES", "KINDS", "VERDICTS", "Claim", "CLAIMS", "seeds_dir", "paper_text", "clean",
           "cell_of", "reading_of", "seed_values", "evaluate", "frame", "markdown", "readme_lines"]

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
VERDICTS = ("holds", "does not hold", "not run")
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
class Claim:
    """One headline claim of a paper and how our records test it.

    paper : key of :data:`report_cells.PAPERS`
    quote : the sentence, verbatim from the paper's text (conversion artefacts cleaned, :func:`clean`)
    where : the section / table it is in
    statement : our operationalisation, one line (A − B, metric, data, setting)
    a, b : the report's readings whose difference is tested; ``b`` None: A against ``b_value``
    kind : key of :data:`KINDS`
    unit : "%" (differences in pp) or "" (scores, counts)
    tolerance : the A cell's own tolerance (the least disagreement the report counts)
    paper_delta : A − B as the paper's own table prints it (NaN where not a comparison)
    b_value : with ``b`` None, the paper's value A is held against
    short : the claim in a few words, as the README lists it
    """
    paper: str
    quote: str
    where: str
    statement: str
    a: Reading
    b: Reading | None
    kind: str
    unit: str = "%"
    tolerance: float = 1.0
    paper_delta: float = float("nan")
    b_value: float | None = None
    short: str = ""


def _claim(paper, quote, where, statement, kind, a, b=None) -> Claim:
    """A claim from (table, row, column, reading name) locations of ``paper``'s cells; the unit,
    tolerance, paper value(s) and paper Δ come from the cells, never typed."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    ca = cell_of(paper, *a[:3])
    ra = reading_of(paper, *a)
    if b is None:
        return Claim(paper, quote, where, statement, ra, None, kind, ca.unit, ca.tolerance,
                     float("nan"), float(ca.value))
    cb = cell_of(paper, *b[:3])
    return Claim(paper, quote, where, statement, ra, reading_of(paper, *b), kind, ca.unit, ca.tolerance,
                 float(ca.value) - float(cb.value))


_READING_KEYS = ("table", "row", "column", "reading")


def _claims_of(paper: str) -> tuple[Claim, ...]:
    """``paper``'s claims from its data file (workbook/papers/<paper>.yaml, ``claims:``;
    :mod:`workbook.paper_values`): the quote, its source (``where``: the section or table), our
    statement, the kind and the report readings A and B, each located by (table, row, column,
    reading name); the unit, tolerance and paper values come from the report's cells (:func:`_claim`)."""
    out = []
    for i, c in enumerate(paper_values.claims(paper)):
        check_choice(c["kind"], f"{paper}.yaml: claims[{i}].kind", tuple(KINDS))
        a = tuple(c["a"][k] for k in _READING_KEYS)
        b = None if c.get("b") is None else tuple(c["b"][k] for k in _READING_KEYS)
        claim = _claim(paper, c["quote"], c["source"]["ref"], c["statement"], c["kind"], a, b)
        out.append(replace(claim, short=c["short"]))
    return tuple(out)


CLAIMS: tuple[Claim, ...] = tuple(c for paper in PAPERS for c in _claims_of(paper))
"""The papers' headline claims, 3–4 per paper, in :data:`report_cells.PAPERS` order (the report's),
each paper's in its file's order; ``short`` is the claim in a few words, as the README lists it."""


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


def _region(delta: float, margin: float) -> str:
    if delta > margin + 1e-12:
        return "A above B beyond the margin"
    if delta < -margin - 1e-12:
        return "A below B beyond the margin"
    return "within the margin"


def _verdict(kind: str, region: str) -> str:
    holds = {"gain": "A above B beyond the margin", "lower": "A below B beyond the margin",
             "matches": "within the margin"}[kind]
    return "holds" if region == holds else "does not hold"


def _name(reading: Reading | None, claim: Claim) -> str:
    """``FedAvg (both readings)``: the method as the papers write it, and the reading."""
    if reading is None:
        return f"the paper's {_num(claim.b_value, claim.unit, signed=False)}"
    c = _owner(reading)
    row = c.row if c is not None else str(dict(reading.match).get("method", "?"))
    method, _, rest = row.partition(" ")
    return f"{display_name(method)}{(' ' + rest) if rest else ''} ({reading.name})"


def _row_id(reading: Reading | None) -> str | None:
    """The anchor of ``reading``'s row in docs/findings.md (as :func:`report.frame` names it)."""
    c = _owner(reading) if reading is not None else None
    return None if c is None else matching.anchor_slug(PAPERS[c.paper], c.table, c.row, c.column, reading.name)


def margin_of(kind: str, tolerance: float, sd: float) -> float:
    """The margin of the rule (module docstring): the per-seed sd of A − B for a gain or a
    reduction (the tolerance where one seed leaves it unknown), max(tolerance, sd) for a match."""
    if not np.isfinite(sd):
        return tolerance
    return max(tolerance, sd) if kind == "matches" else sd


def evaluate(claim: Claim, root: Path | str = matching.RECORDS) -> dict:
    """One claim against the records under ``root``: per-seed values of A and B, the differences
    (paired over shared seeds, else of the means), n, mean, sd (ddof = 1), margin, the region the
    mean falls in (``outcome``), ``verdict`` (module docstring), ``verdict_text`` (with "(1 seed)"
    where n = 1) and the paper's own A − B."""
    root = Path(root)
    out = dict(paper=claim.paper, where=claim.where, quote=claim.quote, statement=claim.statement, short=claim.short,
               kind=claim.kind,
               unit=claim.unit, a=_name(claim.a, claim), b=_name(claim.b, claim), a_id=_row_id(claim.a),
               b_id=_row_id(claim.b), tolerance=claim.tolerance,
               values_a={}, values_b={}, paired=False, seeds=[], diffs=[], n=0, mean=np.nan, sd=np.nan,
               margin=np.nan, outcome="", verdict="not run", verdict_text="not run", why="",
               paper_delta=claim.paper_delta)
    readings = (claim.a,) if claim.b is None else (claim.a, claim.b)
    off = [(r, _owner(r).unavailable) for r in readings if _owner(r) is not None and _owner(r).unavailable]
    if off:
        out["why"] = "; ".join(f"{_name(r, claim)}: {report_cells.REASONS.get(u, u)}" for r, u in off)
        return out
    va = seed_values(claim.a, root)
    vb = seed_values(claim.b, root) if claim.b is not None else None
    out["values_a"], out["values_b"] = va, (vb if vb is not None else {})
    missing = [n for n, v in (("A", va), ("B", vb)) if v is not None and not v]
    if missing:
        out["why"] = "; ".join(f"no ok record for {x} in benchmarks/records/{(claim.a if x == 'A' else claim.b).records}/"
                               for x in missing)
        return out
    if claim.b is not None:
        la, lb = _levels(claim.a, root), _levels(claim.b, root)
        if la and lb and la != lb:
            out["why"] = f"A read at {_settings(la)}, B at {_settings(lb)}: no common setting"
            return out
        if la or lb:
            out["why"] = f"read at {_settings(la | lb)}"
    if claim.b is None:
        seeds = sorted(va)
        diffs = [va[s] - claim.b_value for s in seeds]
        paired, n, mean, sd = True, len(diffs), float(np.mean(diffs)), _sd(diffs)
    else:
        seeds = sorted(set(va) & set(vb))
        diffs = [va[s] - vb[s] for s in seeds]
        if seeds:
            paired, n, mean, sd = True, len(diffs), float(np.mean(diffs)), _sd(diffs)
        else:
            a, b = list(va.values()), list(vb.values())
            paired, n, mean = False, min(len(a), len(b)), float(np.mean(a) - np.mean(b))
            sd = float(np.hypot(_sd(a), _sd(b)))
            out["why"] = ((out["why"] + "; ") if out["why"] else "") + \
                f"no seed in common (A: {sorted(va)}, B: {sorted(vb)}): difference of the means"
    margin = margin_of(claim.kind, claim.tolerance, sd)
    region = _region(mean, margin)
    verdict = _verdict(claim.kind, region)
    out.update(paired=paired, seeds=seeds, diffs=diffs, n=n, mean=mean, sd=sd, margin=margin, outcome=region,
               verdict=verdict, verdict_text=verdict + (" (1 seed)" if n == 1 else ""))
    return out


def frame(root: Path | str = matching.RECORDS) -> pd.DataFrame:
    """One row per claim of :data:`CLAIMS` (:func:`evaluate`), in order."""
    for f in ("_load", "_derived"):
        if hasattr(getattr(matching, f, None), "cache_clear"):
            getattr(matching, f).cache_clear()
    return pd.DataFrame([evaluate(c, root) for c in CLAIMS])


# ----------------------------------------------------------------------------- rendering
def _num(v: float, unit: str, signed: bool = True) -> str:
    if v is None or not np.isfinite(v):
        return "—"
    d = 2 if unit == "%" else 3
    return f"{v:+.{d}f}" if signed else f"{v:.{d}f}"


def _ours(r) -> str:
    """``+x.xx ± y.yy pp (n = k)``; "not run" where it did not."""
    if r.verdict == "not run":
        return "not run"
    pp = " pp" if r.unit == "%" else ""
    spread = f" ± {_num(r.sd, r.unit, False)}" if np.isfinite(r.sd) else ""
    how = f"n = {r.n}" if r.paired else f"unpaired, n = {len(r.values_a)} vs {len(r.values_b)}"
    return f"{_num(r.mean, r.unit)}{spread}{pp} ({how})"


def _paper(r) -> str:
    """``paper: +z.zz``, or "" where the claim compares with a paper value."""
    if not np.isfinite(r.paper_delta):
        return ""
    return f"paper: {_num(r.paper_delta, r.unit)}"


def _linked(name: str, row_id: str | None, link: str) -> str:
    return f"[{name}]({link}#{row_id})" if isinstance(row_id, str) and row_id else name


def markdown(df: pd.DataFrame, link: str = "docs/findings.md", shown: set | None = None) -> list[str]:
    """The section "The papers' claims" (markdown lines): per paper, each claim's quote as a
    blockquote, our operationalisation (A and B linking to their rows of the report at ``link``;
    ``""`` inside docs/findings.md itself), then ``ours: A − B = … · paper: … · verdict``.

    ``shown``: the ids of the rows the report's tables show (those it ran); A or B links only
    there. A claim pairs the seeds its two rows share, so it can have a value where a row the
    report restricts to the seeds its whole table shares (CAFA's Tables IV–V) is not run.
    None: the claim's own verdict decides (a claim not run links to neither row)."""
    out = ["## The papers' claims", "",
           "Each paper's headline claims in its own words, each tested on the committed records as a difference",
           "A − B of two of the report's rows (paired over the seeds both ran; mean ± sample sd, n = seeds). The",
           "margin of a claimed gain or reduction is the sd of the per-seed differences (their noise; with one seed,",
           "unknown, the row's tolerance stands in: 1 pp for accuracies and distances, a score's own step); a claimed",
           "gain *holds* when A − B exceeds it, a claimed reduction when A − B is below minus it. A claimed match",
           "*holds* when |A − B| is within max(tolerance, sd). *not run* when a side has no record. Every verdict",
           "states its n (\"(1 seed)\"). **paper**: A − B in the paper's own table.", ""]
    for p, name in PAPERS.items():
        d = df[df.paper == p]
        if d.empty:
            continue
        out += [f"### {name}: claims", ""]
        for r in d.itertuples():
            def target(row_id):  # rows not run have no anchor in the report's tables
                ok = (row_id in shown) if shown is not None else r.verdict != "not run"
                return row_id if ok else None
            a, b = _linked(r.a, target(r.a_id), link), _linked(r.b, target(r.b_id), link)
            margin = (f" · margin {_num(r.margin, r.unit, False)}" if np.isfinite(r.margin) else "")
            paper = f" · {_paper(r)}" if _paper(r) else ""
            why = f" ({r.why})" if r.why else ""
            out += [f"> “{r.quote}”", f"> — {name}, {r.where}", "",
                    f"{r.statement}; A = {a}, B = {b}, claimed: {KINDS[r.kind]}.  ",
                    f"ours: {'—' if r.verdict == 'not run' else 'A − B = ' + _ours(r)}{margin}{paper} · "
                    f"**{r.verdict_text}**{why}", ""]
    return out[:-1]


def readme_lines(df: pd.DataFrame, link: str = "docs/findings.md") -> list[str]:
    """The README's findings as claims: one bullet per paper (linking to its part of the report),
    each claim in a few words with its verdict, our A − B with n, and the paper's own."""
    lines = []
    for p, name in PAPERS.items():
        d = df[df.paper == p]
        if d.empty:
            continue
        parts = []
        for r in d.itertuples():
            paper = f"; paper {_num(r.paper_delta, r.unit)}" if np.isfinite(r.paper_delta) else ""
            ours = "" if r.verdict == "not run" else f" ({_ours(r).replace(' (', ', ').rstrip(')')}{paper})"
            parts.append(f"{r.short}: **{r.verdict_text}**{ours}")
        lines.append(f"- [{name}]({link}#{matching.anchor_slug(name)}): " + "; ".join(parts) + ".")
    return lines
