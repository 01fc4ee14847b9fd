"""Figures of notebooks 04–06 (Figs. 5–8). Each returns a matplotlib Figure; save it with
the CSV behind it through :func:`workbook.plots.save_figure`.

Colours are stable: a method always gets :func:`method_color` (one distinct colour for each
of the 14 registered methods, Clust-PSI-PFL in black), and a series of Figs. 5–6 gets its
colour from the sorted set of series in the frame, so two series never share a colour.

Units: the runs' frames hold accuracies as fractions of 1 (as the records do); the figures plot
them in percent, the workbook's one unit for readers, and every accuracy axis says "(%)"."""
from __future__ import annotations

import zlib

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D

from fedlib.methods import METHODS, display_name
from fedlib.partition import level_axis, level_log_scale, level_symbol, partition_name

__all__ = ["fig5_silhouette", "fig6_tau", "fig7_accuracy", "fig8_ecdf", "ecdf_panel", "method_color", "method_order",
           "method_legend"]

PROPOSED = "clust_psi_pfl"
REFERENCES = ("cl", "local")  # not federated: drawn dashed
# tab10, then three colours outside its hues (indigo, gold, plum); the proposed method is black
# (a registry grown past 13 other methods takes further distinct colours from seaborn's husl)
_OTHERS = [m for m in METHODS if m != PROPOSED]
_METHOD_PALETTE = [*sns.color_palette("tab10").as_hex(), "#393b79", "#e7ba52", "#7b4173"]
_METHOD_PALETTE += sns.color_palette("husl", max(0, len(_OTHERS) - len(_METHOD_PALETTE))).as_hex()
_METHOD_COLORS = dict(zip(_OTHERS, _METHOD_PALETTE))
_METHOD_COLORS[PROPOSED] = "#000000"
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_LINESTYLES = ("-", "--", ":", "-.")


def method_color(method: str, proposed: str = PROPOSED):
    """A stable colour per method: distinct for every registered method (registry order),
    black for the ``proposed`` one (Clust-PSI-PFL; notebook 07 passes PSI-PFL); any other
    method gets a fixed colour derived from its name."""
    if method == proposed:
        return "#000000"
    if method in _METHOD_COLORS and method != PROPOSED:
        return _METHOD_COLORS[method]
    return sns.color_palette("husl", 16).as_hex()[zlib.crc32(str(method).encode()) % 16]


def _method_line(method: str, proposed: str = PROPOSED) -> dict:
    """Line keywords of a method: its colour, thick for the proposed method, dashed for references."""
    return {"color": method_color(method, proposed), "lw": 2.4 if method == proposed else 1.3,
            "ls": "--" if method in REFERENCES else "-"}


def method_order(methods) -> list:
    """Registered methods in registry order, then any others in order of appearance."""
    present = list(dict.fromkeys(methods))
    return [m for m in METHODS if m in present] + [m for m in present if m not in METHODS]


def method_legend(fig, methods, extra=(), ncol=8, marker="o", proposed: str = PROPOSED) -> None:
    """One legend below the panels: a handle per method (registry order), then ``extra``."""
    handles = [Line2D([], [], marker=marker, ms=5, **_method_line(m, proposed)) for m in methods]
    labels = [display_name(m) for m in methods]
    for h, lab in extra:
        handles.append(h)
        labels.append(lab)
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(len(labels), ncol), fontsize=8, frameon=False)


def _series_styles(keys) -> dict:
    """Distinct colour (and a marker and line style per dataset) for each (dataset, condition) key.

    With at most two datasets and ten conditions, a condition gets one tab20 hue and the
    datasets its dark and light shade, so the series of one condition read as a pair;
    otherwise every series gets its own colour of an evenly spaced seaborn ``husl`` palette.
    """
    keys = sorted(set(keys))
    datasets = list(dict.fromkeys(k[0] for k in keys))
    conditions = sorted({k[1:] for k in keys})
    if len(datasets) <= 2 and len(conditions) <= 10:
        tab20 = sns.color_palette("tab20").as_hex()
        colours = {k: tab20[2 * conditions.index(k[1:]) + datasets.index(k[0])] for k in keys}
        edges = {k: tab20[2 * conditions.index(k[1:])] for k in keys}
    else:
        order = sorted(keys, key=lambda k: (k[1:], datasets.index(k[0])))
        pal = sns.color_palette("husl", len(order)).as_hex()
        colours = {k: pal[i] for i, k in enumerate(order)}
        edges = colours
    return {k: {"color": colours[k], "edge": edges[k],
                "marker": _MARKERS[datasets.index(k[0]) % len(_MARKERS)],
                "ls": _LINESTYLES[datasets.index(k[0]) % len(_LINESTYLES)]} for k in keys}


def _label(protocol, level) -> str:
    return f"{level_symbol(protocol, protocol)}={level:g}"


def fig5_silhouette(curves: pd.DataFrame) -> plt.Figure:
    """Mean silhouette s(j) against j, one panel per (dataset, protocol, level), a line per K
    (median over seeds, band = min..max). K has the same colour in every panel; one legend."""
    panels = curves[["dataset", "protocol", "level"]].drop_duplicates().values.tolist()
    ks = sorted(curves["n_clients"].unique())
    pal = sns.color_palette("colorblind" if len(ks) <= 10 else "husl", len(ks)).as_hex()
    k_colour = dict(zip(ks, pal))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.4), squeeze=False)
    for ax, (ds, proto, level) in zip(axes[0], panels):
        sub = curves[(curves.dataset == ds) & (curves.protocol == proto) & (curves.level == level)]
        for k, g in sub.groupby("n_clients"):
            stats = g.groupby("j").silhouette.agg(["median", "min", "max"])
            ax.plot(stats.index, stats["median"], color=k_colour[k], label=f"K={k}")
            ax.fill_between(stats.index, stats["min"], stats["max"], color=k_colour[k], alpha=0.15, lw=0)
        ax.set(xscale="log", xlabel="number of clusters j", ylabel="mean silhouette s(j)",
               title=f"{ds}, {_label(proto, level)}")
    handles = [Line2D([], [], color=k_colour[k]) for k in ks]
    fig.legend(handles, [f"K={k}" for k in ks], loc="center left", bbox_to_anchor=(1.0, 0.5),
               fontsize=8, title="clients", frameon=False)
    fig.tight_layout()
    return fig


def fig6_tau(selections: pd.DataFrame) -> plt.Figure:
    """Selected τ against K (left) and against the non-IID level's WPSI (right), per protocol.

    Left: a line per (dataset, protocol, level), median over seeds, bars = min..max.
    Right: a point per feasible cell, a series per (dataset, protocol, K). Every series of a
    panel has its own colour (see :func:`_series_styles`); the dataset sets marker and line style.
    """
    ok = selections[selections.feasible.astype(bool)]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 5.2))
    left = ok.groupby(["dataset", "protocol", "level"])
    styles = _series_styles(left.groups.keys())
    for key, g in left:
        ds, proto, level = key
        st = styles[key]
        stats = g.groupby("n_clients").tau.agg(["median", "min", "max"])
        a.errorbar(stats.index, stats["median"], yerr=[stats["median"] - stats["min"],
                   stats["max"] - stats["median"]], marker=st["marker"], ls=st["ls"], capsize=3,
                   color=st["color"], mec=st["edge"], label=f"{ds}, {_label(proto, level)}")
    a.set(xlabel="number of clients K", ylabel="selected τ", title="τ against K")
    right = ok.groupby(["dataset", "protocol", "n_clients"])
    styles = _series_styles(right.groups.keys())
    for key, g in right:
        ds, proto, k = key
        st = styles[key]
        b.scatter(g.wpsi, g.tau, s=26, marker=st["marker"], color=st["color"],
                  edgecolors=st["edge"], linewidths=0.8, label=f"{ds}, {proto}, K={k}")
    b.set(xlabel="WPSI (non-IID level)", ylabel="selected τ", title="τ against WPSI")
    for ax in (a, b):
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    fig.tight_layout()
    return fig


def _level_panel(ax, sub, proto, methods, proposed: str = PROPOSED) -> None:
    """Global accuracy (mean over seeds) against the level, a line per method; median WPSI dashed
    on a twin axis."""
    for m in methods:
        s = 100.0 * sub[sub.method == m].groupby("level").global_accuracy.mean()
        if not s.empty:
            ax.plot(s.index, s.values, marker="o", ms=4, **_method_line(m, proposed))
    ax.set(xlabel=level_symbol(proto, "level"), ylabel="global accuracy (%)", ylim=(0, 102))
    if level_log_scale(proto) and (sub.level > 0).all():
        ax.set_xscale("log")
    w = sub.groupby("level").wpsi.median()
    twin = ax.twinx()
    twin.plot(w.index, w.values, "k:", lw=1.4)
    twin.set_ylabel("median WPSI (dotted)")
    twin.set_ylim(bottom=0)


def _single_level_panel(ax, sub, methods, proposed: str = PROPOSED) -> None:
    """One level only: a dot per method at its mean global accuracy over seeds, bars = min..max."""
    stats = 100.0 * sub.groupby("method").global_accuracy.agg(["mean", "min", "max"])
    shown = [m for m in methods if m in stats.index]
    for y, m in enumerate(shown):
        mean, lo, hi = stats.loc[m, ["mean", "min", "max"]]
        ax.errorbar([mean], [y], xerr=[[mean - lo], [hi - mean]], fmt="o", color=method_color(m, proposed),
                    ms=7 if m == proposed else 5, capsize=2, lw=1.2)
    ax.set_yticks(range(len(shown)), [display_name(m) for m in shown], fontsize=8)
    for t, m in zip(ax.get_yticklabels(), shown):
        if m == proposed:
            t.set_fontweight("bold")
    ax.set_ylim(len(shown) - 0.5, -0.5)  # first method on top
    ax.grid(axis="y", color="0.9", lw=0.8)
    ax.set_axisbelow(True)
    ax.set(xlabel="global accuracy (%) (mean over seeds; bars = min..max)", xlim=(0, 102))


def fig7_accuracy(runs: pd.DataFrame, proposed: str = PROPOSED) -> plt.Figure:
    """Global accuracy (%) per method, one panel per (dataset, protocol, K).

    A panel with at least two levels draws accuracy (mean over seeds) against the level, a line
    per method, and the median WPSI dotted on a second axis. A panel with a single level draws a
    dot per method (mean over seeds, bars = min..max over seeds) and gives the median WPSI in
    its title. Colours follow :func:`method_color` (``proposed`` drawn black and thick); one
    legend for all panels.
    """
    ok = runs[runs.status == "ok"]
    panels = ok[["dataset", "protocol", "n_clients"]].drop_duplicates().values.tolist()
    methods = method_order(ok.method)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    any_lines = False
    for ax, (ds, proto, k) in zip(axes[0], panels):
        sub = ok[(ok.dataset == ds) & (ok.protocol == proto) & (ok.n_clients == k)]
        levels = sub.level.unique()
        if len(levels) >= 2:
            _level_panel(ax, sub, proto, methods, proposed)
            ax.set_title(f"{ds}, {level_axis(proto, proto).replace(' (log scale)', '')}, K={k}")
            any_lines = True
        else:
            _single_level_panel(ax, sub, methods, proposed)
            ax.set_title(f"{ds}, {partition_name(proto, levels[0])}, K={k}\n"
                         f"median WPSI = {sub.wpsi.median():.3g}")
    extra = [(Line2D([], [], color="k", ls=":", lw=1.4), "median WPSI")] if any_lines else []
    method_legend(fig, methods, extra, proposed=proposed)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return fig


def ecdf_panel(ax, runs: pd.DataFrame, methods, proposed: str = PROPOSED) -> None:
    """One ECDF per method of the clients' local accuracies in ``runs`` (seeds pooled, NaN —
    clients without a test split — dropped), in each method's colour and line style; accuracy
    in percent on the x axis."""
    for m in methods:
        g = runs[runs.method == m]
        if g.empty:
            continue
        acc = np.concatenate([np.asarray(a, float).ravel() for a in g.local_accuracy])
        acc = 100.0 * acc[~np.isnan(acc)]
        if acc.size:
            sns.ecdfplot(x=acc, ax=ax, label=display_name(m), **_method_line(m, proposed))
    ax.set(xlabel="local accuracy (%)", ylabel="ECDF (share of clients)", xlim=(0, 101), ylim=(0, 1.02))


def fig8_ecdf(runs: pd.DataFrame, protocol: str, level: float, n_clients: int,
              proposed: str = PROPOSED) -> plt.Figure:
    """ECDF of clients' local accuracy per method (all seeds pooled) for one setting,
    one panel per dataset (titled by the partition's display name), one legend below the panels."""
    ok = runs[(runs.status == "ok") & (runs.protocol == protocol) & (runs.level == level)
              & (runs.n_clients == n_clients)]
    datasets = list(dict.fromkeys(ok.dataset))
    methods = method_order(ok.method)
    n = max(1, len(datasets))
    fig, axes = plt.subplots(1, n, figsize=(max(5.0 * n, 8.0), 4.2), squeeze=False)
    for ax, ds in zip(axes[0], datasets):
        ecdf_panel(ax, ok[ok.dataset == ds], methods, proposed)
        ax.set_title(f"{ds}, {partition_name(protocol, level)}, K={n_clients}")
    method_legend(fig, methods, marker=None, proposed=proposed)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    return fig
