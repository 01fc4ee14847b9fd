"""Forest plots of the reproduction report (notebook 00): each row of the report drawn as its
difference from the paper, and each paper claim drawn as its margin.

Two pure functions build the tidy frames the figures draw, two draw them:

forest_rows   the report's rows (:func:`workbook.report.frame`) -> one row per cell × reading
              that ran or is infeasible: Δ = ours − paper (pp for % values, else the value's own
              unit), Δ's 90 % interval (the verdict's test, :mod:`workbook.verdicts`), the paper's
              spread, the verdict's tolerance and its margin, the colour of the verdict; rows not
              run are left out (they have no Δ).
forest_plot   one figure of those rows: one panel per table (per table and column where a table
              has more rows than ``split_over``; per table and metric for values that are not %),
              a marker per row coloured by verdict, Δ's 90 % interval as an error bar, the paper's
              spread as a grey bar about 0, the margin ± max(tolerance, 2 × the paper's sd) as a
              shaded band: a row reproduces when its interval lies inside it.
claims_rows   the papers' claims (:func:`workbook.paper_claims.frame`) -> one row per claim:
              our A − B with its sd, the margin, and the region the claim needs.
claims_plot   one figure of those rows: the region each claim needs shaded, our A − B as a marker
              coloured by whether the claim holds, the paper's own A − B as an open diamond.
forest_figures  the forest plot split for reading: one figure per panel (a table, or a table's
              column where it is split), as docs/findings.md shows them.

Legibility (issue 71). Every figure is :data:`FIGURE_WIDTH` inches wide, one panel to a line,
with its row labels at :data:`LABEL_PT` points, wrapped at about :data:`WRAP` characters: saved at
:data:`workbook.plots.DPI` the figure is about ``FIGURE_WIDTH × DPI`` ≈ 935 px wide, close to the
site's content width, so a label shows about ``LABEL_PT × DPI / 72 × shown width / natural width``
≈ 13 px tall there (``tests/test_site.py`` measures it in Chromium at a 1,440-px window; the bar is
10 px). Rows take :data:`ROW_IN` inches each, and :data:`LINE_IN` more per extra line of label.

The figures are saved by :func:`workbook.plots.save_figure` (fixed dpi, PNG metadata
without the matplotlib version, so the files are deterministic).
"""
from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fedlib.methods import display_name
from .plots import DPI

__all__ = ["VERDICT_COLOURS", "VERDICT_LABELS", "CLAIM_COLOURS", "MARKER_GID", "FIGURE_WIDTH", "LABEL_PT",
           "verdict_colour", "forest_rows", "forest_plot", "forest_figures", "claims_rows", "claims_plot",
           "wrap_label"]

FIGURE_WIDTH = 8.5
"""Width of every forest and claims figure, inches (one panel to a line): about 935 px at DPI 110."""
LABEL_PT = 9.0
"""Font size of the row labels, points (the smallest text a reader must read)."""
WRAP = 52
"""Row labels are wrapped at about this many characters (at their `` · `` separators first)."""
ROW_IN, LINE_IN = 0.26, 0.15
"""Height of a row with a one-line label, inches; and what each further line of label adds."""

VERDICT_COLOURS = {"reproduced": "tab:green", "differs": "tab:red", "undecided": "tab:orange", "infeasible": "0.6"}
"""Verdict of a report row -> its marker's colour (rows not run are not drawn)."""
VERDICT_LABELS = {"reproduced": "reproduced", "differs": "differs", "undecided": "undecided",
                  "infeasible": "infeasible (no Δ; drawn at 0)"}
CLAIM_COLOURS = {"holds": "tab:green", "contradicted": "tab:red", "not resolved": "tab:orange", "not run": "0.6",
                 "does not hold": "tab:red"}
"""Outcome of a claim (:data:`workbook.paper_claims.VERDICTS`) -> its marker's colour; "does not hold", the
earlier rule's, is still drawn (red)."""
MARKER_GID = "forest-marker"
"""The ``gid`` of the marker collections: one marker per drawn row (tests count them)."""

FOREST_COLUMNS = ["paper", "table", "panel", "label", "row", "column", "reading", "unit", "metric", "verdict", "n",
                  "paper_value", "ours", "delta", "sd", "lo", "hi", "spread", "tolerance", "allowed", "colour", "id"]
CLAIM_COLUMNS = ["paper", "label", "kind", "unit", "verdict", "n", "delta", "sd", "lo", "hi", "margin", "need_lo",
                 "need_hi", "paper_delta", "colour"]


def verdict_colour(verdict: str) -> str:
    """The marker colour of a report row's verdict (:data:`VERDICT_COLOURS`); ValueError for
    "not run" and unknown verdicts (those rows are not drawn)."""
    if verdict not in VERDICT_COLOURS:
        raise ValueError(f"verdict must be one of {sorted(VERDICT_COLOURS)} to be drawn, got {verdict!r}")
    return VERDICT_COLOURS[verdict]


def _num(x) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return float("nan")
    return v


def _method(row: str) -> str:
    method, _, rest = str(row).partition(" ")
    return display_name(method) + (f" {rest}" if rest else "")


def forest_rows(cells, split_over: int = 40) -> pd.DataFrame:
    """The forest plot's rows (:data:`FOREST_COLUMNS`) from report rows.

    ``cells``: :func:`workbook.report.frame`'s DataFrame (or a list of dicts with its
    columns paper, table, row, column, reading, unit, metric, paper_value, spread, tolerance, n,
    mean, sd, verdict, low, high, margin; ``id`` optional). Rows not run are left out. ``delta`` =
    mean − paper value; ``lo``/``hi`` = Δ's 90 % interval (the frame's low, high; NaN where the
    row has none); ``spread`` the paper's (NaN where it gives none); ``allowed`` = the margin,
    max(tolerance, 2 × the paper's sd), within which the interval must lie to reproduce;
    infeasible rows keep a NaN delta. ``panel``: the table, with the metric where the unit is not
    %, and with the column where the table (within one paper) has more than ``split_over`` drawn
    rows; ``label`` names the row within its panel."""
    df = pd.DataFrame(cells) if not isinstance(cells, pd.DataFrame) else cells
    df = df[df["verdict"] != "not run"]
    # which (paper, table) get one panel per column
    counts = df.groupby(["paper", "table"]).size() if len(df) else pd.Series(dtype=int)
    split = {k for k, v in counts.items() if v > split_over}
    out = []
    for r in df.to_dict("records"):
        verdict = r["verdict"]
        unit = r.get("unit", "%")
        by_column = (r["paper"], r["table"]) in split
        panel = str(r["table"])
        if unit != "%":
            panel += f" · {r.get('metric', '')}"
        if by_column:
            panel += f" · {r['column']}"
        label = _method(r["row"]) + ("" if by_column else f" · {r['column']}") + f" · {r['reading']}"
        n = int(r.get("n", 0) or 0)
        paper_value, mean, sd = _num(r["paper_value"]), _num(r.get("mean")), _num(r.get("sd"))
        spread, tolerance = _num(r.get("spread")), _num(r["tolerance"])
        delta = mean - paper_value if verdict != "infeasible" and n > 0 else float("nan")
        lo, hi = _num(r.get("low")), _num(r.get("high"))
        has = np.isfinite(lo) and np.isfinite(hi) and np.isfinite(delta)
        allowed = _num(r.get("margin"))
        out.append(dict(paper=r["paper"], table=r["table"], panel=panel, label=label, row=r["row"],
                        column=r["column"], reading=r["reading"], unit=unit, metric=r.get("metric", ""),
                        verdict=verdict, n=n, paper_value=paper_value, ours=mean if n else float("nan"),
                        delta=delta, sd=sd if n >= 2 else float("nan"),
                        lo=lo if has else float("nan"), hi=hi if has else float("nan"),
                        spread=spread, tolerance=tolerance, allowed=allowed, colour=verdict_colour(verdict),
                        id=r.get("id", "")))
    return pd.DataFrame(out, columns=FOREST_COLUMNS)


def _extent(rows: pd.DataFrame, *cols) -> float:
    vals = np.concatenate([np.abs(rows[c].to_numpy(float)) for c in cols]) if len(rows) else np.array([])
    vals = vals[np.isfinite(vals)]
    return float(vals.max()) * 1.08 if vals.size and vals.max() > 0 else 1.0


LEGEND_IN = 0.75  # three lines of legend below the panels


def wrap_label(label: str, width: int = WRAP) -> str:
    """``label`` on lines of at most about ``width`` characters, broken at its `` · `` separators
    first, then between words."""
    lines: list[str] = []
    for part in str(label).split(" · "):
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " · " + part
        else:
            lines += textwrap.wrap(part, width) or [""]
    return "\n".join(lines)


def _row_layout(labels) -> tuple[np.ndarray, np.ndarray, float, list[str]]:
    """(y centre, height) of each row, in inches from the panel's bottom (first row on top), the
    panel's height of rows, and the wrapped labels."""
    wrapped = [wrap_label(x) for x in labels]
    h = np.array([ROW_IN + LINE_IN * w.count("\n") for w in wrapped], dtype=float)
    top = np.cumsum(h) - h
    total = float(h.sum())
    return total - top - h / 2, h, total, wrapped


def _panel_height(labels) -> float:
    return _row_layout(labels)[2] + 1.0  # the rows, then the title and the x axis


def _panel_axes(keys: list, heights: list, ncols: int, width: float, title: str | None):
    ncols = max(1, min(ncols, len(keys)))
    nrows = int(np.ceil(len(keys) / ncols))
    row_h = [max(heights[i * ncols:(i + 1) * ncols]) for i in range(nrows)]
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, sum(row_h) + LEGEND_IN + (0.4 if title else 0)),
                             dpi=DPI, squeeze=False, gridspec_kw={"height_ratios": row_h})
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=LABEL_PT + 2)
    return fig, list(axes.flat)


def _forest_panel(ax, rows: pd.DataFrame, title: str | None) -> None:
    y, h, total, labels = _row_layout(rows["label"])  # first row at the top; y in inches
    tol = np.nan_to_num(rows["allowed"].to_numpy(float))  # the margin: max(tolerance, 2 × paper's sd)
    ax.barh(y, 2 * tol, left=-tol, height=h - 0.05, color="tab:green", alpha=0.12, linewidth=0, zorder=0)
    spread = rows["spread"].to_numpy(float)
    has = np.isfinite(spread)
    if has.any():
        ax.hlines(y[has] - 0.3 * ROW_IN, -spread[has], spread[has], color="0.45", linewidth=2.0, zorder=1)
    delta = rows["delta"].to_numpy(float)
    lo, hi = rows["lo"].to_numpy(float), rows["hi"].to_numpy(float)
    colours = rows["colour"].tolist()
    ran = np.isfinite(delta)
    for i in np.flatnonzero(ran & np.isfinite(lo) & np.isfinite(hi)):
        ax.errorbar(delta[i], y[i], xerr=[[delta[i] - lo[i]], [hi[i] - delta[i]]], fmt="none", ecolor=colours[i],
                    elinewidth=1.2, capsize=2, zorder=2)
    if ran.any():
        m = ax.scatter(delta[ran], y[ran], c=[colours[i] for i in np.flatnonzero(ran)], s=18, zorder=3,
                       edgecolors="none")
        m.set_gid(MARKER_GID)
    if (~ran).any():  # infeasible: no Δ
        m = ax.scatter(np.zeros(int((~ran).sum())), y[~ran], c=[colours[i] for i in np.flatnonzero(~ran)],
                       marker="x", s=22, zorder=3)
        m.set_gid(MARKER_GID)
    ax.axvline(0, color="0.3", linewidth=0.6, zorder=1)
    lim = _extent(rows, "delta", "hi", "lo", "spread", "allowed")
    ax.set_xlim(-lim, lim)
    ax.set_ylim(0, total)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=LABEL_PT)
    unit = rows["unit"].iloc[0] if len(rows) else "%"
    ax.set_xlabel("Δ = ours − paper" + (" (pp)" if unit == "%" else " (the value's own unit)"), fontsize=LABEL_PT)
    ax.tick_params(axis="x", labelsize=LABEL_PT)
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=LABEL_PT + 1)


def _legend(fig, handles) -> None:
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=LABEL_PT, frameon=False,
               bbox_to_anchor=(0.5, 0.0))


def _fit(fig, title: bool) -> None:
    """Lay the panels out above the legend (:data:`LEGEND_IN` inches) and below the title."""
    h = fig.get_figheight()
    fig.tight_layout(rect=(0, LEGEND_IN / h, 1, 1 - (0.4 / h if title else 0)))


def forest_plot(rows: pd.DataFrame, ax=None, ncols: int = 1, panel_width: float = FIGURE_WIDTH,
                title: str | None = None):
    """The forest plot of ``rows`` (:func:`forest_rows`), as a Figure: one marker per row at its
    Δ (coloured by verdict, :data:`VERDICT_COLOURS`; an infeasible row an × at 0), Δ's 90 %
    interval as an error bar, the paper's spread ± s as a grey bar about 0 below the marker, and
    the margin as a green band about 0: ± max(tolerance, 2 × the paper's sd); a row reproduces when
    its interval lies inside the band, differs when it lies wholly outside
    (:data:`workbook.report.VERDICT_RULE`). With ``ax`` every row is
    drawn on it (one panel); else one panel per ``panel``, ``ncols`` to a line (one by default:
    each panel the figure's width, so that its labels stay legible where the figure is shown at
    that width; see the module docstring)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Line2D([], [], marker="o", linestyle="", color=VERDICT_COLOURS[v], label=VERDICT_LABELS[v])
               for v in ("reproduced", "differs", "undecided")]
    handles += [Line2D([], [], marker="x", linestyle="", color=VERDICT_COLOURS["infeasible"],
                       label=VERDICT_LABELS["infeasible"]),
                Line2D([], [], color="0.45", linewidth=2, label="paper's spread (±)"),
                Line2D([], [], color="0.2", linewidth=1.2, label="Δ's 90 % interval"),
                Patch(color="tab:green", alpha=0.12, label="margin ± max(tolerance, 2 × paper's sd)")]
    if ax is not None:
        _forest_panel(ax, rows, title)
        return ax.figure
    if rows.empty:
        fig, ax = plt.subplots(figsize=(panel_width, 1.2), dpi=DPI)
        ax.text(0.5, 0.5, "no row of this paper ran", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    keys = list(dict.fromkeys(rows["panel"]))
    heights = [_panel_height(rows.loc[rows["panel"] == k, "label"]) for k in keys]
    fig, axes = _panel_axes(keys, heights, ncols, panel_width, title)
    for a, k in zip(axes, keys):
        _forest_panel(a, rows[rows["panel"] == k], k)
    _fit(fig, bool(title))
    _legend(fig, handles)
    return fig


def forest_figures(rows: pd.DataFrame, title: str | None = None) -> dict:
    """The forest plot of ``rows`` (:func:`forest_rows`) split for reading: panel name -> a
    Figure of that panel alone (:func:`forest_plot`; a table's rows, or one column's where the
    table is split), in the rows' order; ``title`` over each. Empty ``rows``: no figure."""
    return {k: forest_plot(rows[rows["panel"] == k], title=title) for k in dict.fromkeys(rows["panel"])}


# ----------------------------------------------------------------------------- the claims
def claims_rows(claims) -> pd.DataFrame:
    """One row per claim (:data:`CLAIM_COLUMNS`) of :func:`workbook.paper_claims.frame`
    (or a list of dicts with its columns paper, short, kind, unit, verdict, n, mean, sd, margin,
    paper_delta): ``delta`` our A − B (NaN not run), ``lo``/``hi`` = delta ∓ sd where the sd exists,
    the margin, and the region the claim needs: a gain (margin, ∞), a reduction (−∞, −margin), a
    match [−margin, margin] (``need_lo``/``need_hi``, ±inf for open ends; NaN when not run)."""
    from .report_cells import PAPERS

    df = pd.DataFrame(claims) if not isinstance(claims, pd.DataFrame) else claims
    out = []
    for r in df.to_dict("records"):
        verdict, kind = r["verdict"], r["kind"]
        if verdict not in CLAIM_COLOURS:
            raise ValueError(f"claim verdict must be one of {sorted(CLAIM_COLOURS)}, got {verdict!r}")
        ran = verdict != "not run"
        delta, sd, margin = (_num(r.get("mean")), _num(r.get("sd")), _num(r.get("margin"))) if ran else (np.nan,) * 3
        if not ran:
            need = (np.nan, np.nan)
        elif kind == "gain":
            need = (margin, np.inf)
        elif kind == "lower":
            need = (-np.inf, -margin)
        elif kind == "matches":
            need = (-margin, margin)
        else:
            raise ValueError(f"claim kind must be gain, lower or matches, got {kind!r}")
        has_sd = np.isfinite(sd)
        out.append(dict(paper=r["paper"], label=f"{PAPERS.get(r['paper'], r['paper'])}: {r.get('short') or r.get('statement', '')}",
                        kind=kind, unit=r.get("unit", "%"), verdict=verdict, n=int(r.get("n", 0) or 0),
                        delta=delta, sd=sd if has_sd else np.nan, lo=delta - sd if has_sd else np.nan,
                        hi=delta + sd if has_sd else np.nan, margin=margin, need_lo=need[0], need_hi=need[1],
                        paper_delta=_num(r.get("paper_delta")), colour=CLAIM_COLOURS[verdict]))
    return pd.DataFrame(out, columns=CLAIM_COLUMNS)


def _claims_panel(ax, rows: pd.DataFrame, title: str | None) -> None:
    y, h, total, labels = _row_layout(rows["label"])
    lim = _extent(rows, "delta", "lo", "hi", "margin", "paper_delta")
    lo = np.clip(rows["need_lo"].to_numpy(float), -lim, lim)
    hi = np.clip(rows["need_hi"].to_numpy(float), -lim, lim)
    ok = np.isfinite(lo) & np.isfinite(hi)
    ax.barh(y[ok], (hi - lo)[ok], left=lo[ok], height=(h - 0.05)[ok], color="tab:blue", alpha=0.13, linewidth=0, zorder=0)
    delta, sd = rows["delta"].to_numpy(float), rows["sd"].to_numpy(float)
    colours = rows["colour"].tolist()
    ran = np.isfinite(delta)
    for i in np.flatnonzero(ran & np.isfinite(sd)):
        ax.errorbar(delta[i], y[i], xerr=sd[i], fmt="none", ecolor=colours[i], elinewidth=1.2, capsize=2, zorder=2)
    if ran.any():
        m = ax.scatter(delta[ran], y[ran], c=[colours[i] for i in np.flatnonzero(ran)], s=22, zorder=3,
                       edgecolors="none")
        m.set_gid(MARKER_GID)
    if (~ran).any():
        m = ax.scatter(np.zeros(int((~ran).sum())), y[~ran], c=[colours[i] for i in np.flatnonzero(~ran)],
                       marker="x", s=24, zorder=3)
        m.set_gid(MARKER_GID)
    pd_ = rows["paper_delta"].to_numpy(float)
    has = np.isfinite(pd_)
    if has.any():
        ax.scatter(pd_[has], y[has], marker="D", s=16, facecolors="none", edgecolors="0.25", linewidths=0.8, zorder=3)
    ax.axvline(0, color="0.3", linewidth=0.6, zorder=1)
    ax.set_xlim(-lim, lim)
    margins = rows["margin"].to_numpy(float)
    margins = margins[np.isfinite(margins) & (margins > 0)]
    if margins.size and lim > 20 * margins.min():  # a few claims far out: keep the margins readable
        ax.set_xscale("symlog", linthresh=float(np.median(margins)), linscale=1.5)
    ax.set_ylim(0, total)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=LABEL_PT)
    unit = rows["unit"].iloc[0] if len(rows) else "%"
    ax.set_xlabel("A − B" + (" (pp)" if unit == "%" else " (the value's own unit)")
                  + ("; symmetric log scale beyond ±" + f"{ax.xaxis.get_transform().linthresh:g}"
                     if ax.get_xscale() == "symlog" else ""), fontsize=LABEL_PT)
    ax.tick_params(axis="x", labelsize=LABEL_PT)
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=LABEL_PT + 1)


def claims_plot(rows: pd.DataFrame, ax=None, width: float = FIGURE_WIDTH):
    """The papers' claims (:func:`claims_rows`) as a Figure: per claim, the region of A − B the
    claim needs (shaded; clipped to the axis), our A − B ± sd as a marker coloured by verdict
    (:data:`CLAIM_COLOURS`; a claim not run an × at 0), the paper's own A − B as an open diamond.
    With ``ax`` every row is drawn on it; else one panel per unit (pp, then the others)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if ax is not None:
        _claims_panel(ax, rows, None)
        return ax.figure
    units = sorted(dict.fromkeys(rows["unit"]), key=lambda u: u != "%") or ["%"]
    heights = [_panel_height(rows.loc[rows["unit"] == u, "label"]) for u in units]
    fig, axes = plt.subplots(len(units), 1, figsize=(width, sum(heights) + LEGEND_IN), dpi=DPI, squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for a, u in zip(axes.flat, units):
        _claims_panel(a, rows[rows["unit"] == u], "claims in pp" if u == "%" else "claims on scores and counts")
    handles = [Line2D([], [], marker="o", linestyle="", color=CLAIM_COLOURS[v], label=v)
               for v in ("holds", "contradicted", "not resolved")]
    handles += [Line2D([], [], marker="x", linestyle="", color=CLAIM_COLOURS["not run"], label="not run (drawn at 0)"),
                Line2D([], [], marker="D", linestyle="", markerfacecolor="none", color="0.25", label="paper's A − B"),
                Patch(color="tab:blue", alpha=0.13, label="what the claim needs")]
    _fit(fig, False)
    _legend(fig, handles)
    return fig
