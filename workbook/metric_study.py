"""The metric study behind Fig. 3 of Clust-PSI-PFL (Section III-C; PSI-PFL Section 3.3).

Partition a dataset's labels over a grid of (protocol, level, K, seed), split every
client 80/20 (seeded), and compute WPSI, HD, JSD and EMD (faithful and corrected) on
the K×C label counts of the clients' **train** splits, as the authors do. Infeasible
partitions (e.g. Dirichlet α=0.05 with K=100) are rows with ``feasible=False`` and NaN
metrics, shown as "—" in the workbook, never a crash.

Main entry points
-----------------
metric_grid        one dataset, one protocol → one row per (level, K, seed)
run_study          several datasets (by registry name) and protocols at once
load_or_compute_grid  reuse a saved grid (the Fig. 3 CSV) when it holds every requested cell
client_label_table per-client label counts of a few partitions (notebook 01's figures)
feasibility_table  printable feasibility / client size / WPSI table, "—" for infeasible cells
infeasible_cells   the settings with infeasible seeds, compactly
summarise          median / mean / std / IQR over seeds per cell (tidy, long format)
monotone_report    does median WPSI fall strictly as the level rises? are HD/JSD/EMD monotone?
linearity_report   Pearson r of each median metric with median WPSI across levels
findings           plain-language verdicts on the paper's findings, computed from a report
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from fedlib import noniid
from fedlib.partition import (PROTOCOLS, InfeasiblePartitionError, label_counts, level_symbol, partition,
                        train_test_split)

__all__ = [
    "METRICS",
    "KEYS",
    "LEVEL_LABELS",
    "metric_grid",
    "run_study",
    "client_label_table",
    "feasibility_table",
    "infeasible_cells",
    "summarise",
    "monotone_report",
    "linearity_report",
    "findings",
    "load_or_compute_grid",
]

METRICS = tuple(noniid.METRIC_NAMES)
"""Metric columns of a grid: wpsi, hellinger, jensen_shannon, emd, emd_corrected."""

KEYS = ("dataset", "protocol", "level", "n_clients", "seed")
"""Columns identifying one cell of the grid."""

LEVEL_LABELS = {p: e.symbol for p, e in PROTOCOLS.items() if e.symbol}  # the registry's, {"dirichlet": "α", "similarity": "S"}
"""How each protocol's level is written in tables and figures."""

_SIZE_COLUMNS = ("n_min", "n_median", "n_max")


# ----------------------------------------------------------------------------- validation
def _as_list(name: str, values) -> list:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ValueError(f"{name} must be a list of values, got {values!r}")
    out = list(values)
    if not out:
        raise ValueError(f"{name} is empty: give at least one value")
    return out


def _check_ints(name: str, values, minimum: int) -> list[int]:
    out = _as_list(name, values)
    for v in out:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
            raise ValueError(f"{name} must hold integers ≥ {minimum}, got {v!r}")
    return [int(v) for v in out]


def _accepted(protocol: str) -> set[str]:
    """Keyword arguments the protocol's function takes."""
    return set(inspect.signature(PROTOCOLS[protocol].func).parameters)


def _protocol_kwargs(protocol: str, kwargs: dict, dataset_name: str) -> dict:
    """The options meant for ``protocol``.

    Options of other protocols (e.g. Dirichlet's ``max_draws`` in a Similarity grid) are
    dropped, so one set of options serves a whole study; an option no protocol knows
    is an error.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {sorted(PROTOCOLS)}")
    known = set().union(*(_accepted(p) for p in PROTOCOLS))
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ValueError(f"no partition protocol takes the option(s) {unknown}")
    mine = _accepted(protocol)
    out = {k: v for k, v in kwargs.items() if k in mine}
    if "dataset_name" in mine:
        out.setdefault("dataset_name", dataset_name)
    return out


# ----------------------------------------------------------------------------- one cell
def _cell(y: np.ndarray, n_classes: int, protocol: str, level: float, k: int, seed: int,
          test_fraction: float, dataset_name: str, partition_kwargs: dict) -> dict:
    """Metrics of one (protocol, level, K, seed) cell; NaN metrics if infeasible."""
    row = {"dataset": dataset_name, "protocol": protocol, "level": float(level),
           "n_clients": k, "seed": seed}
    try:
        parts = partition(y, protocol, k, level, seed, **partition_kwargs)
    except InfeasiblePartitionError:
        return {**row, "feasible": False, **dict.fromkeys(METRICS, np.nan),
                **dict.fromkeys(_SIZE_COLUMNS, np.nan)}
    train, _ = train_test_split(parts, seed, test_fraction)
    sizes = np.array([p.size for p in parts])
    metrics = noniid.federation_metrics(label_counts(y, train, n_classes))
    return {**row, "feasible": True, **metrics, "n_min": int(sizes.min()),
            "n_median": float(np.median(sizes)), "n_max": int(sizes.max())}


def metric_grid(labels, n_classes: int, protocol: str, levels: Sequence[float],
                n_clients_list: Sequence[int], seeds: Sequence[int], dataset_name: str,
                *, test_fraction: float = 0.2, progress: bool = False,
                **partition_kwargs) -> pd.DataFrame:
    """Non-IID metrics of one dataset under one protocol, over levels × K × seeds.

    Each cell: ``fedlib.partition.partition(labels, protocol, K, level, seed)``, then
    the per-client seeded split ``train_test_split(parts, seed, test_fraction)``, then
    :func:`fedlib.noniid.federation_metrics` of the K×C train label counts.

    Parameters
    ----------
    labels : array of int, shape (N,)
        The centralised dataset's (train) labels, values in 0..C-1.
    n_classes : int
        C (classes absent from ``labels`` still count as columns).
    protocol : str
        A protocol of :data:`fedlib.partition.PROTOCOLS` (the paper: 'dirichlet', 'similarity').
    levels : sequence of float
        The protocol's level: α for Dirichlet, S for Similarity.
    n_clients_list : sequence of int
        The K values.
    seeds : sequence of int
        Partition seeds (the split uses the same seed).
    dataset_name : str
        Written in the ``dataset`` column and in infeasibility messages.
    test_fraction : float, default 0.2
        Each client's test share (metrics use the train share).
    progress : bool, default False
        Show a tqdm bar (keep False in notebooks checked by nbval).
    **partition_kwargs
        Passed to the protocol (e.g. ``max_draws`` for Dirichlet); options that only
        other protocols take are ignored, unknown ones raise ValueError.

    Returns
    -------
    pandas.DataFrame, one row per (level, K, seed) in that nesting order, columns
    ``dataset, protocol, level, n_clients, seed, feasible, wpsi, hellinger,
    jensen_shannon, emd, emd_corrected, n_min, n_median, n_max`` (the last three are
    the smallest, median and largest client size, train+test). Infeasible cells have
    ``feasible=False`` and NaN metrics and sizes.
    """
    y = np.asarray(labels)
    if isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer)) or n_classes < 1:
        raise ValueError(f"n_classes must be a positive integer, got {n_classes!r}")
    if y.size and int(y.max()) >= n_classes:
        raise ValueError(f"labels hold class {int(y.max())} but n_classes={n_classes}")
    levels = [float(v) for v in _as_list("levels", levels)]
    ks = _check_ints("n_clients_list", n_clients_list, 1)
    seeds = _check_ints("seeds", seeds, 0)
    partition_kwargs = _protocol_kwargs(protocol, partition_kwargs, dataset_name)
    cells = [(lv, k, s) for lv in levels for k in ks for s in seeds]
    if progress:
        from tqdm.auto import tqdm
        cells = tqdm(cells, desc=f"{dataset_name}/{protocol}")
    rows = [_cell(y, int(n_classes), protocol, lv, k, s, test_fraction, dataset_name,
                  partition_kwargs) for lv, k, s in cells]
    df = pd.DataFrame(rows, columns=[*KEYS, "feasible", *METRICS, *_SIZE_COLUMNS])
    return df.astype({"feasible": bool})


def run_study(datasets: Sequence[str], protocol_levels: Mapping[str, Sequence[float]],
              n_clients_list: Sequence[int], seeds: Sequence[int], *,
              progress: bool = False, **partition_kwargs) -> pd.DataFrame:
    """:func:`metric_grid` for several datasets (loaded by registry name) and protocols.

    Parameters
    ----------
    datasets : sequence of str
        Names for :func:`fedlib.datasets.load` (their ``y_train`` is partitioned).
    protocol_levels : mapping protocol → levels
        E.g. ``{"dirichlet": [0.05, ..., 50], "similarity": [0.0, ..., 1.0]}``.
    n_clients_list, seeds, progress, **partition_kwargs
        As in :func:`metric_grid`.

    Returns
    -------
    pandas.DataFrame, the grids concatenated (datasets outermost, then protocols).
    """
    from fedlib.datasets import load

    frames = []
    for name in _as_list("datasets", datasets):
        ds = load(name)
        for protocol, levels in protocol_levels.items():
            frames.append(metric_grid(ds.y_train, ds.n_classes, protocol, levels, n_clients_list,
                                      seeds, name, progress=progress, **partition_kwargs))
    return pd.concat(frames, ignore_index=True)


def load_or_compute_grid(csv_path, datasets: Sequence[str],
                         protocol_levels: Mapping[str, Sequence[float]],
                         n_clients_list: Sequence[int], seeds: Sequence[int],
                         **kwargs) -> tuple[pd.DataFrame, str]:
    """Reuse a saved grid (e.g. the Fig. 3 CSV) when it holds every requested cell.

    Parameters
    ----------
    csv_path : path-like
        A CSV written from a :func:`metric_grid` / :func:`run_study` frame.
    datasets, protocol_levels, n_clients_list, seeds, **kwargs
        The requested grid, as in :func:`run_study`.

    Returns
    -------
    (grid, source) : the requested rows (in :func:`run_study` order) and
    ``"csv"`` if they were all found in ``csv_path``, else ``"computed"``.
    """
    wanted = [(d, p, float(lv), int(k), int(s)) for d in datasets
              for p, levels in protocol_levels.items() for lv in levels
              for k in n_clients_list for s in seeds]
    path = Path(csv_path)
    if path.is_file():
        saved = pd.read_csv(path)  # pandas ≥ 3 parses floats round-trip exactly
        if set(KEYS) <= set(saved.columns) and {"feasible", *METRICS} <= set(saved.columns):
            saved = saved.assign(_key=_keys(saved)).drop_duplicates("_key").set_index("_key")
            want = pd.Index(_keys(pd.DataFrame(wanted, columns=list(KEYS))))
            if want.isin(saved.index).all():
                grid = saved.loc[want].reset_index(drop=True)
                return grid.astype({"feasible": bool, "n_clients": int, "seed": int}), "csv"
    return run_study(datasets, protocol_levels, n_clients_list, seeds, **kwargs), "computed"


def _keys(df: pd.DataFrame) -> list[tuple]:
    """Hashable cell keys, with levels rounded so CSV round trips match."""
    return list(zip(df["dataset"], df["protocol"], np.round(df["level"].astype(float), 9),
                    df["n_clients"].astype(int), df["seed"].astype(int)))


# ----------------------------------------------------------------------------- notebook 01
def client_label_table(labels, n_classes: int, settings: Sequence[tuple[str, float]],
                       n_clients: int, seed: int, dataset_name: str,
                       **partition_kwargs) -> pd.DataFrame:
    """Per-client label counts (train+test) of a few partitions, in tidy form.

    Parameters
    ----------
    labels : array of int, shape (N,)
    n_classes : int
    settings : sequence of (protocol, level)
        E.g. ``[("dirichlet", 50), ("similarity", 0.0)]``.
    n_clients, seed, dataset_name
        K, the partition seed and the dataset's name.

    Returns
    -------
    pandas.DataFrame with columns ``dataset, protocol, level, setting, client, class,
    count`` — K·C rows per feasible setting (``setting`` is e.g. "α=0.5"); infeasible
    settings are left out.
    """
    y = np.asarray(labels)
    frames = []
    for protocol, level in settings:
        kwargs = _protocol_kwargs(protocol, partition_kwargs, dataset_name)
        try:
            parts = partition(y, protocol, n_clients, level, seed, **kwargs)
        except InfeasiblePartitionError:
            continue
        counts = label_counts(y, parts, n_classes)  # (K, C)
        client, cls = np.meshgrid(np.arange(n_clients), np.arange(n_classes), indexing="ij")
        frames.append(pd.DataFrame({
            "dataset": dataset_name, "protocol": protocol, "level": float(level),
            "setting": f"{level_symbol(protocol, 'level')}={level:g}",
            "client": client.ravel(), "class": cls.ravel(), "count": counts.ravel()}))
    return pd.concat(frames, ignore_index=True)


def infeasible_cells(grid: pd.DataFrame) -> pd.DataFrame:
    """The settings with at least one infeasible seed, compactly.

    Parameters
    ----------
    grid : DataFrame from :func:`metric_grid` / :func:`run_study`.

    Returns
    -------
    DataFrame ``dataset, protocol, level, n_clients, infeasible_seeds`` (e.g. "3/5"),
    one row per (dataset, protocol, level, K) with an infeasible seed, in grid order.
    """
    keys = ["dataset", "protocol", "level", "n_clients"]
    g = grid.assign(_bad=~grid["feasible"].astype(bool)).groupby(keys, sort=False)["_bad"]
    out = pd.DataFrame({"bad": g.sum(), "total": g.size()}).reset_index()
    out = out[out["bad"] > 0]
    return pd.DataFrame({**{k: out[k] for k in keys},
                         "infeasible_seeds": [f"{b}/{t}" for b, t in zip(out["bad"], out["total"])]}
                        ).reset_index(drop=True)


def feasibility_table(grid: pd.DataFrame, decimals: int = 3) -> pd.DataFrame:
    """Printable table of a grid: protocol, level, K, feasible, client sizes, WPSI.

    Parameters
    ----------
    grid : DataFrame from :func:`metric_grid` (one seed per cell is the intended use;
        with several seeds the rows are listed per seed).
    decimals : int
        Rounding of WPSI.

    Returns
    -------
    DataFrame of strings; infeasible cells show "—" for sizes and WPSI.
    """
    out = pd.DataFrame({
        "protocol": grid["protocol"],
        "level": [f"{level_symbol(p, 'level')}={lv:g}" for p, lv in zip(grid["protocol"], grid["level"])],
        "K": grid["n_clients"].astype(int),
        "seed": grid["seed"].astype(int),
        "feasible": np.where(grid["feasible"], "yes", "no"),
    })
    fmt_int = lambda v: "—" if pd.isna(v) else f"{int(round(v))}"  # noqa: E731
    for col, name in zip(_SIZE_COLUMNS, ("min size", "median size", "max size")):
        out[name] = [fmt_int(v) for v in grid[col]]
    out["WPSI"] = ["—" if pd.isna(v) else f"{v:.{decimals}f}" for v in grid["wpsi"]]
    return out


# ----------------------------------------------------------------------------- summaries
def summarise(df: pd.DataFrame, by: Sequence[str] = ("dataset", "protocol", "level", "n_clients"),
              metrics: Sequence[str] = METRICS) -> pd.DataFrame:
    """Median, mean, std and quartiles of each metric over the rows of each group.

    Infeasible rows are ignored; a group with none feasible gets NaN statistics.

    Parameters
    ----------
    df : DataFrame from :func:`metric_grid`.
    by : columns defining a cell; the default pools the seeds. Leave ``n_clients``
        out to pool over K as well (what Fig. 3 draws).
    metrics : metric columns to summarise.

    Returns
    -------
    Tidy DataFrame: ``*by, metric, n_feasible, n_total, median, mean, std, q25, q75``;
    cells in the order they first appear in ``df``, metrics in ``metrics`` order.
    """
    by = list(by)
    long = df.melt(id_vars=[*by, "feasible"], value_vars=list(metrics), var_name="metric")
    long.loc[~long["feasible"].astype(bool), "value"] = np.nan
    g = long.groupby([*by, "metric"], sort=False)["value"]
    out = pd.DataFrame({
        "n_feasible": g.count(), "n_total": g.size(), "median": g.median(), "mean": g.mean(),
        "std": g.std(), "q25": g.quantile(0.25), "q75": g.quantile(0.75)}).reset_index()
    cells = {key: i for i, key in enumerate(dict.fromkeys(zip(*(df[c] for c in by))))}
    order = {m: i for i, m in enumerate(metrics)}
    return (out.assign(_c=[cells[k] for k in zip(*(out[c] for c in by))],
                       _m=out["metric"].map(order))
               .sort_values(["_c", "_m"], kind="stable")
               .drop(columns=["_c", "_m"]).reset_index(drop=True))


def _median_curves(df: pd.DataFrame, by: Sequence[str]) -> dict:
    """{group key: DataFrame indexed by level (ascending) of median metrics over seeds}."""
    feas = df[df["feasible"].astype(bool)]
    curves = {}
    for key, g in feas.groupby(list(by), sort=False):  # groups in grid order
        curves[key] = g.groupby("level")[list(METRICS)].median().sort_index()
    return curves


def _strict(values: np.ndarray, direction: int) -> bool:
    d = np.diff(values)
    return bool(d.size > 0 and np.all(direction * d > 0))


def monotone_report(df: pd.DataFrame, by: Sequence[str] = ("dataset", "protocol", "n_clients"),
                    decimals: int = 3) -> pd.DataFrame:
    """Is the median (over seeds) of each metric monotone in the level?

    For each group (default: dataset, protocol, K) the medians over seeds of the
    feasible rows are taken per level and ordered by increasing level (more IID).

    Parameters
    ----------
    df : DataFrame from :func:`metric_grid`.
    by : grouping columns.

    Returns
    -------
    DataFrame with ``*by, n_levels`` (levels with ≥ 1 feasible seed), ``wpsi_falls``
    (median WPSI falls strictly at every step: the paper's finding (i)), and for each
    of hellinger, jensen_shannon, emd, emd_corrected a ``<metric>_monotone`` column
    (strictly falling or strictly rising at every step; finding (iii) says EMD is not);
    then ``rho_<metric>`` for all five: the Spearman rank correlation between level and
    median metric (−1 = perfectly falling), rounded to ``decimals``, which tells a
    near-tie between two close levels (ρ ≈ −1) from a curve that turns (|ρ| ≪ 1).
    """
    rows = []
    for key, curve in _median_curves(df, by).items():
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key), n_levels=len(curve))
        row["wpsi_falls"] = _strict(curve["wpsi"].to_numpy(), -1)
        for m in METRICS[1:]:
            v = curve[m].to_numpy()
            row[f"{m}_monotone"] = _strict(v, -1) or _strict(v, +1)
        for m in METRICS:
            row[f"rho_{m}"] = _spearman(curve.index.to_numpy(), curve[m].to_numpy(), decimals)
        rows.append(row)
    return pd.DataFrame(rows)


def _spearman(x: np.ndarray, y: np.ndarray, decimals: int) -> float:
    """Spearman rank correlation (average ranks for ties); NaN if undefined."""
    if len(x) < 3:
        return np.nan
    rx, ry = pd.Series(x).rank().to_numpy(), pd.Series(y).rank().to_numpy()
    if np.std(rx) == 0 or np.std(ry) == 0:
        return np.nan
    return round(float(np.corrcoef(rx, ry)[0, 1]), decimals)


def linearity_report(df: pd.DataFrame, by: Sequence[str] = ("dataset", "protocol", "n_clients"),
                     decimals: int = 3) -> pd.DataFrame:
    """Pearson r between median WPSI and each other median metric across levels.

    The paper's finding (ii): "JSD and HD vary more smoothly and approximately
    linearly with WPSI". Groups with fewer than 3 levels, or a constant curve, get NaN.

    Returns
    -------
    DataFrame ``*by, r_hellinger, r_jensen_shannon, r_emd, r_emd_corrected`` (rounded).
    """
    rows = []
    for key, curve in _median_curves(df, by).items():
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        for m in METRICS[1:]:
            x, y = curve["wpsi"].to_numpy(), curve[m].to_numpy()
            ok = len(curve) >= 3 and np.std(x) > 0 and np.std(y) > 0
            row[f"r_{m}"] = round(float(np.corrcoef(x, y)[0, 1]), decimals) if ok else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def findings(report: pd.DataFrame) -> list[str]:
    """Verdicts on the paper's findings (i) and (iii), computed from a :func:`monotone_report`.

    Returns
    -------
    list of str, one sentence per protocol for WPSI, then one per other metric.
    """
    lines = []
    n = len(report)
    for protocol, g in report.groupby("protocol", sort=False):
        lab = level_symbol(protocol, "the level")
        k = int(g["wpsi_falls"].sum())
        verdict = "confirmed" if k == len(g) else ("partly confirmed" if k else "not confirmed")
        rho = g["rho_wpsi"]
        lines.append(f"(i) median WPSI falls strictly as {lab} rises in {k}/{len(g)} "
                     f"(dataset, K) settings under {protocol}: {verdict} "
                     f"(Spearman ρ(level, WPSI) from {rho.min():.2f} to {rho.max():.2f}).")
    names = {"hellinger": "HD", "jensen_shannon": "JSD", "emd": "EMD (faithful)",
             "emd_corrected": "EMD (corrected)"}
    for m, label in names.items():
        k = int(report[f"{m}_monotone"].sum())
        rho = report[f"rho_{m}"]
        lines.append(f"{label} is strictly monotone in {k}/{n} settings, non-monotone in {n - k}/{n} "
                     f"(Spearman ρ from {rho.min():.2f} to {rho.max():.2f}).")
    emd_bad = int((~report["emd_monotone"]).sum())
    lines.append(f"(iii) EMD (faithful) non-monotone in some settings: "
                 f"{'confirmed' if emd_bad else 'not confirmed'} ({emd_bad}/{n}).")
    return lines
