"""Figure functions of the workbook (Agg-safe matplotlib: no interactive calls; fixed sizes).

Every figure function takes the tidy DataFrame it draws and returns the
``matplotlib.figure.Figure``; :func:`save_figure` writes ``figures/<name>.png`` and
``figures/<name>.csv`` (that DataFrame) and closes the figure.

label_distribution   stacked bars of per-client label counts (first 20 clients), one panel per setting
client_sizes         histogram of client sizes, one panel per setting
fig3_metrics         Fig. 3: WPSI vs level, HD/JSD/EMD on a secondary axis, per protocol (and dataset)
fig4_importance      Fig. 4: importance bars per model, per protocol (each model's method on its tick)
paper_vs_ours        the reproduction report: paper value against ours per table row
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fedlib.partition import PROTOCOLS, level_axis, level_log_scale
from fedlib.paths import figures_dir

__all__ = ["save_figure", "label_distribution", "client_sizes", "fig3_metrics", "fig4_importance", "paper_vs_ours"]

DPI = 110
METRIC_STYLE = {  # label, colour, line style
    "wpsi": ("WPSI", "black", "-"),
    "hellinger": ("HD", "tab:blue", "-"),
    "jensen_shannon": ("JSD", "tab:orange", "-"),
    "emd": ("EMD (faithful)", "tab:green", "-"),
    "emd_corrected": ("EMD (corrected)", "tab:green", "--"),
}
LEVEL_AXIS = {p: e.axis for p, e in PROTOCOLS.items() if e.axis}  # the registry's x-axis labels


def save_figure(fig, df: pd.DataFrame, name: str, directory=None) -> tuple[Path, Path]:
    """Write ``<dir>/<name>.png`` and ``<dir>/<name>.csv``, then close the figure.

    Parameters
    ----------
    fig : matplotlib Figure
    df : DataFrame
        The tidy data the figure was drawn from (written without the index).
    name : str
        File stem, e.g. ``"fig3_noniid_metrics"`` (no directory, no extension).
    directory : path-like, optional
        Default :func:`fedlib.paths.figures_dir` (``$FEDLIB_FIGURES`` or ``<root>/figures``).

    Returns
    -------
    (png_path, csv_path)
    """
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.endswith((".png", ".csv")):
        raise ValueError(f"name must be a bare file stem such as 'fig3_noniid_metrics', got {name!r}")
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"df must be the DataFrame behind the figure, got {type(df).__name__}")
    out = figures_dir(directory)
    png, csv = out / f"{name}.png", out / f"{name}.csv"
    fig.savefig(png, dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    df.to_csv(csv, index=False)
    plt.close(fig)
    return png, csv


def _panel_grid(n: int, ncols: int, panel_w: float, panel_h: float, **kw):
    ncols = max(1, min(ncols, n))
    nrows = int(np.ceil(n / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_w * ncols, panel_h * nrows),
                             squeeze=False, **kw)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


# ----------------------------------------------------------------------------- notebook 01
def label_distribution(table: pd.DataFrame, n_show: int = 20, class_names=None, ncols: int = 3):
    """Stacked bars of label counts for the first ``n_show`` clients of each setting.

    Parameters
    ----------
    table : DataFrame from :func:`workbook.metric_study.client_label_table`
        (columns setting, client, class, count).
    n_show : int
        Clients drawn per panel (clients 0..n_show-1).
    class_names : sequence of str, optional
        Legend labels by class id.
    ncols : int
        Panels per row.

    Returns
    -------
    matplotlib Figure (one panel per setting, in order of appearance).
    """
    settings = list(dict.fromkeys(table["setting"]))
    n_classes = int(table["class"].max()) + 1
    colours = plt.get_cmap("tab20" if n_classes > 10 else "tab10")(np.arange(n_classes) % 20)
    fig, axes = _panel_grid(len(settings), ncols, 4.6, 3.2, sharey=False)
    for ax, setting in zip(axes, settings):
        t = table[(table["setting"] == setting) & (table["client"] < n_show)]
        counts = t.pivot_table(index="client", columns="class", values="count", aggfunc="sum",
                               fill_value=0).reindex(columns=range(n_classes), fill_value=0)
        bottom = np.zeros(len(counts))
        for c in range(n_classes):
            ax.bar(counts.index, counts[c].to_numpy(), bottom=bottom, color=colours[c], width=0.85,
                   label=class_names[c] if class_names is not None else str(c))
            bottom += counts[c].to_numpy()
        ax.set_title(setting)
        ax.set_xlabel("client")
        ax.set_ylabel("samples")
        ax.set_xticks(range(0, n_show, 5))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, title="class")
    fig.tight_layout()
    return fig


def client_sizes(table: pd.DataFrame, bins: int = 20, ncols: int = 3):
    """Histogram of client sizes (train+test samples) per setting.

    Parameters
    ----------
    table : DataFrame from :func:`workbook.metric_study.client_label_table`.
    bins : int
    ncols : int

    Returns
    -------
    matplotlib Figure.
    """
    sizes = table.groupby(["setting", "client"], sort=False)["count"].sum().reset_index()
    settings = list(dict.fromkeys(sizes["setting"]))
    fig, axes = _panel_grid(len(settings), ncols, 4.0, 2.8)
    for ax, setting in zip(axes, settings):
        s = sizes.loc[sizes["setting"] == setting, "count"].to_numpy()
        ax.hist(s, bins=bins, color="tab:gray", edgecolor="white")
        ax.set_title(f"{setting} (K={s.size})")
        ax.set_xlabel("client size")
        ax.set_ylabel("clients")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- Fig. 3
def fig3_metrics(summary: pd.DataFrame, secondary=("hellinger", "jensen_shannon", "emd", "emd_corrected")):
    """Fig. 3: median WPSI against the level, other metrics on a secondary axis.

    One panel per (dataset, protocol): rows are datasets, columns protocols. Lines are
    medians, bands the inter-quartile range over the pooled rows (seeds and K).
    Dirichlet α is drawn on a log axis.

    Parameters
    ----------
    summary : DataFrame from ``metric_study.summarise(grid, by=("dataset", "protocol", "level"))``
        (columns dataset, protocol, level, metric, median, q25, q75).
    secondary : metrics drawn on the right axis (all lie in [0, 1]).

    Returns
    -------
    matplotlib Figure.
    """
    datasets = list(dict.fromkeys(summary["dataset"]))
    protocols = list(dict.fromkeys(summary["protocol"]))
    fig, axes = plt.subplots(len(datasets), len(protocols), squeeze=False,
                             figsize=(5.6 * len(protocols), 3.6 * len(datasets)))
    for i, d in enumerate(datasets):
        for j, p in enumerate(protocols):
            ax = axes[i, j]
            s = summary[(summary["dataset"] == d) & (summary["protocol"] == p)]
            ax2 = ax.twinx()
            for m in ("wpsi", *secondary):
                c = s[s["metric"] == m].sort_values("level")
                if c.empty:
                    continue
                label, colour, ls = METRIC_STYLE.get(m, (m, None, "-"))
                target = ax if m == "wpsi" else ax2
                target.plot(c["level"], c["median"], ls, color=colour, marker="o", ms=3,
                            lw=2.2 if m == "wpsi" else 1.3, label=label)
                target.fill_between(c["level"], c["q25"], c["q75"], color=colour, alpha=0.15, lw=0)
            if level_log_scale(p):
                ax.set_xscale("log")
            ax.set_xlabel(level_axis(p, "level"))
            ax.set_ylabel("WPSI")
            ax2.set_ylabel("HD / JSD / EMD")
            ax2.set_ylim(0, 1.02)
            ax.set_ylim(bottom=0)
            ax.set_title(f"{d} — {p}")
            if i == 0 and j == 0:
                h1, l1 = ax.get_legend_handles_labels()
                h2, l2 = ax2.get_legend_handles_labels()
                ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- Fig. 4
MODEL_NAMES = {"lightgbm": "LightGBM", "svm": "SVM", "mlp": "MLP", "tree": "tree"}
KIND_TITLES = {"own": "model's own importance", "permutation": "permutation importance (all models)"}


def _model_tick(model: str, methods) -> str:
    """Tick label of a model: its display name, with the importance method(s) of its bars."""
    name = MODEL_NAMES.get(model, model)
    methods = [str(m) for m in dict.fromkeys(methods) if isinstance(m, str) and m]
    return f"{name}\n({' / '.join(methods)})" if methods else name


def fig4_importance(importances: pd.DataFrame, by: str = "protocol"):
    """Fig. 4: normalised feature importances, grouped bars per model.

    Rows: one per protocol (``by``); columns: one per ``kind``: the model's own importance
    (``own``: LightGBM gain, tree impurity; SVM and MLP have none and fall back to
    permutation) and permutation importance for all models. Where the frame has a ``method``
    column, the tick labels of a panel name each model's method where the panel title does not
    (e.g. ``LightGBM (gain)``, ``SVM (permutation)`` in the model's-own panel).

    Parameters
    ----------
    importances : DataFrame from :func:`workbook.importance.metric_importance`.
    by : grouping column.

    Returns
    -------
    matplotlib Figure.
    """
    groups = list(dict.fromkeys(importances[by])) if by in importances.columns else [None]
    kinds = list(dict.fromkeys(importances["kind"]))
    models = list(dict.fromkeys(importances["model"]))
    features = list(dict.fromkeys(importances["feature"]))
    has_method = "method" in importances.columns
    width = 0.8 / len(features)
    fig, axes = plt.subplots(len(groups), len(kinds), squeeze=False, sharey=True,
                             figsize=(5.8 * len(kinds), 3.4 * len(groups)))
    for i, g in enumerate(groups):
        for j, kind in enumerate(kinds):
            ax = axes[i, j]
            sub = importances[importances["kind"] == kind]
            if g is not None:
                sub = sub[sub[by] == g]
            for f_i, f in enumerate(features):
                vals = [sub.loc[(sub["model"] == m) & (sub["feature"] == f), "importance"].sum()
                        for m in models]
                label, colour, _ = METRIC_STYLE.get(f, (f, None, "-"))
                hatch = "//" if f == "emd_corrected" else None
                ax.bar(np.arange(len(models)) + (f_i - (len(features) - 1) / 2) * width, vals,
                       width, color=colour if f != "wpsi" else "dimgray", hatch=hatch, label=label)
            # name each model's method unless the panel title already does (kind == method)
            panel_methods = set(sub["method"].dropna()) if has_method else set()
            if any(m != kind for m in panel_methods):
                ticks = [_model_tick(m, sub.loc[sub["model"] == m, "method"]) for m in models]
            else:
                ticks = [MODEL_NAMES.get(m, m) for m in models]
            title = KIND_TITLES.get(kind, kind)
            ax.set_xticks(np.arange(len(models)), ticks)
            ax.set_ylim(0, 1)
            if j == 0:
                ax.set_ylabel("normalised importance")
            ax.set_title(f"{str(g) + ' — ' if g is not None else ''}{title}")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.tight_layout()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, title="metric")
    return fig


def paper_vs_ours(rows: pd.DataFrame, tolerance: float = 1.0):
    """The reproduction report's figure: each row that ran (tidy frame with ``paper_value``,
    ``mean``, ``reading``, ``verdict``; one paper table, % values) as a point (paper, ours), with
    the diagonal and its ±``tolerance`` band; one marker per reading."""
    fig, ax = plt.subplots(figsize=(5.2, 5.0), dpi=DPI)
    lo = float(np.nanmin([rows.paper_value.min(), rows["mean"].min(), 0.0]))
    hi = float(np.nanmax([rows.paper_value.max(), rows["mean"].max(), 100.0]))
    grid = np.array([lo, hi])
    ax.plot(grid, grid, color="black", lw=0.8)
    ax.fill_between(grid, grid - tolerance, grid + tolerance, color="0.85", label=f"±{tolerance:g} pp")
    markers = dict(zip(dict.fromkeys(rows.reading), "osD^v"))
    colours = {"reproduced": "tab:green", "differs": "tab:red", "undecided": "tab:orange"}
    for (reading, verdict), d in rows.groupby(["reading", "verdict"], sort=True):
        ax.scatter(d.paper_value, d["mean"], marker=markers[reading], color=colours.get(verdict, "0.5"),
                   s=28, alpha=0.8, label=f"{reading}: {verdict}")
    ax.set_xlabel("paper (%)")
    ax.set_ylabel("ours (%)")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig
