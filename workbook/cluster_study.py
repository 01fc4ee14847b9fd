"""Algorithm 1 across settings: silhouette curves (Fig. 5) and the selected τ (Fig. 6).

Only labels are needed: each (dataset, protocol, level, K, seed) cell is partitioned and
split exactly as a training run would be (fedlib.partition + 80/20 per client), and
Algorithm 1 runs on the train-split PSI features.

:func:`privacy_study` (one federation) and :func:`privacy_grid` (a grid of them) measure what
ε-DP Laplace noise on the label counts (:mod:`fedlib.privacy`, the methods' ``dp_epsilon``)
does to the server's decisions: Clust-PSI-PFL's τ and cluster assignment, and PSI-PFL's
selected clients; :func:`privacy_summary` and :func:`privacy_figure` condense the result.
"""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.metrics import adjusted_rand_score

from fedlib import partition as P
from fedlib.clustering import psi_features, select_n_clusters
from fedlib.frame import records_frame
from fedlib.methods import clust_psi_pfl, psi_pfl
from fedlib.noniid import psi, wpsi
from fedlib.privacy import POSTPROCESS, noisy_label_counts, server_histograms
from fedlib.validation import check_choice, check_number, check_seed, fail

__all__ = ["cluster_selection_study", "tau_reading", "tau_readings", "tau_explanations", "privacy_study", "privacy_grid", "privacy_summary", "privacy_figure",
           "epsilon_label", "NO_NOISE"]

NO_NOISE = math.inf
"""The ``epsilon`` value of the noiseless rows (``dp_epsilon=None``) in the privacy tables."""


def _train_counts(labels, n_classes: int, protocol: str, k: int, level, seed: int, dataset_name: str,
                  test_fraction: float) -> np.ndarray:
    """Train-split label counts (K, C) of one cell, exactly as a training run splits it; raises
    P.InfeasiblePartitionError."""
    extra = P.partition_inputs(protocol, dataset_name=dataset_name)  # what its entry takes
    parts = P.partition(labels, protocol, int(k), level, int(seed), **extra)
    train, _ = P.train_test_split(parts, int(seed), test_fraction)
    return P.label_counts(labels, train, n_classes)


def cluster_selection_study(labels, n_classes: int, protocols: dict, n_clients, seeds, *,
                            dataset_name: str = "", kmeans_seed: int = 42, n_init="auto",
                            test_fraction: float = 0.2) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run Algorithm 1 on every cell of a grid.

    Parameters
    ----------
    labels : int array (N,)
        The training pool's labels.
    n_classes : int
    protocols : dict protocol -> list of levels, e.g. {'dirichlet': [0.3], 'similarity': [0.0]}
    n_clients, seeds : iterables of int
    kmeans_seed, n_init : K-means settings (the authors': 42, 'auto')

    Returns
    -------
    selections : DataFrame, one row per cell: dataset, protocol, level, n_clients, seed,
        feasible, tau, max_silhouette, degenerate, note, wpsi, cluster_sizes
    curves : DataFrame, one row per (cell, j): … , j, silhouette (NaN where undefined)
    """
    sel_rows, curve_rows = [], []
    for protocol, levels in protocols.items():
        for level in levels:
            for k in n_clients:
                for seed in seeds:
                    key = dict(dataset=dataset_name, protocol=protocol, level=float(level),
                               n_clients=int(k), seed=int(seed))
                    try:
                        counts = _train_counts(labels, n_classes, protocol, k, level, seed, dataset_name,
                                               test_fraction)
                    except P.InfeasiblePartitionError:
                        sel_rows.append({**key, "feasible": False})
                        continue
                    sel = select_n_clusters(psi_features(counts), seed=kmeans_seed, n_init=n_init)
                    sel_rows.append({**key, "feasible": True, "tau": sel.tau,
                                     "max_silhouette": float(np.nanmax(sel.silhouettes))
                                     if not sel.degenerate else np.nan,
                                     "degenerate": sel.degenerate, "note": sel.note,
                                     "wpsi": wpsi(counts), "cluster_sizes": list(sel.cluster_sizes)})
                    curve_rows += [{**key, "j": int(j), "silhouette": float(s)}
                                   for j, s in zip(sel.candidates, sel.silhouettes)]
    return pd.DataFrame(sel_rows), pd.DataFrame(curve_rows)


# ----------------------------------------------------------------------------- τ of a trained run
def tau_reading(info: dict, counts, planted=None) -> dict:
    """Why Algorithm 1 chose τ in one Clust-PSI-PFL run, from the run's record and its clients' labels.

    ``info``: the record's ``info`` (``tau``, ``assignment`` (K,), ``silhouette_candidates``,
    ``silhouettes``); ``counts``: (K, C) the clients' train label counts (what the server clustered);
    ``planted``: (K,) the planted clusters, or None.

    Returns a dict: ``tau``; ``planted`` (number of planted clusters, or None); ``distinct_histograms``
    (distinct rows of ``counts``); ``class_supports`` (distinct sets of classes held);
    ``silhouette_tau`` and ``silhouette_planted`` (s(j) at j = τ and at j = the planted count);
    ``singletons`` (clusters of one client); ``median_size``; ``share_in_le2`` (share of clients in
    clusters of ≤ 2); ``identical_clusters`` (every cluster holds one label histogram only). When
    ``identical_clusters`` holds and τ = ``distinct_histograms`` (one cluster per histogram), each client of a multi-client cluster has a(i) = 0, so s(i) = 1, and
    a singleton scores 0 (scikit-learn's convention): s(τ) = 1 − singletons / K exactly
    (``one_per_histogram``), the largest value any j can reach when singletons cannot be avoided.
    """
    counts = np.asarray(counts)
    assign = np.asarray(info["assignment"], dtype=np.int64)
    if assign.shape != (len(counts),):
        fail("info['assignment']", f"one cluster per client ({len(counts)})", assign.shape)
    sizes = np.bincount(assign)
    sizes = sizes[sizes > 0]
    sil = dict(zip(info.get("silhouette_candidates", []), info.get("silhouettes", [])))
    n_planted = None if planted is None else len(np.unique(planted))
    identical = all(len(np.unique(counts[assign == c], axis=0)) == 1 for c in np.unique(assign))
    k = len(counts)
    out = {"tau": int(info["tau"]), "planted": n_planted,
           "distinct_histograms": len(np.unique(counts, axis=0)),
           "class_supports": len({tuple(row > 0) for row in counts}),
           "silhouette_tau": sil.get(int(info["tau"])),
           "silhouette_planted": None if n_planted is None else sil.get(n_planted),
           "singletons": int((sizes == 1).sum()), "median_size": float(np.median(sizes)),
           "share_in_le2": float(sizes[sizes <= 2].sum() / k), "identical_clusters": bool(identical)}
    one_each = identical and out["tau"] == out["distinct_histograms"]
    out["one_per_histogram"] = (1 - out["singletons"] / k) if one_each else None
    return out


def tau_readings(records, counts_of, label_of=lambda r: r["spec"]["protocol"]) -> pd.DataFrame:
    """:func:`tau_reading` for every Clust-PSI-PFL record (label-PSI features, τ chosen by Algorithm 1),
    one row each with ``block`` (``label_of(record)``), ``seed`` and ``K``; ``counts_of(record)`` gives
    the (K, C) train label counts of the record's clients (e.g. from
    :func:`fedlib.experiment.build_federation`)."""
    f = records_frame(records)
    runs = f[(f.method == "clust_psi_pfl") & (f.status == "ok")].record if len(f) else []
    rows = []
    for r in runs:
        spec, info = r["spec"], r.get("info") or {}
        if "assignment" not in info or info.get("tau_fixed") or info.get("features", "label") != "label":
            continue
        planted = P.planted_clusters(spec["protocol"], int(spec["n_clients"]), spec["level"])
        rows.append({"block": label_of(r), "seed": int(spec["seed"]), "K": int(spec["n_clients"]),
                     **tau_reading(info, counts_of(r), planted)})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- differential privacy
def _check_epsilons(epsilons) -> list:
    """Distinct privacy budgets: None or ∞ (no noise, returned as None) or finite numbers > 0."""
    allowed = "a non-empty list of privacy budgets (None for no noise, or numbers > 0)"
    if isinstance(epsilons, (str, bytes, dict)) or not hasattr(epsilons, "__iter__"):
        fail("epsilons", allowed, epsilons)
    values = list(epsilons)
    if not values:
        fail("epsilons", allowed, epsilons)
    out = []
    for e in values:
        if e is None or (isinstance(e, (float, np.floating)) and e == math.inf):
            out.append(None)
        else:
            out.append(check_number(e, "epsilons", 0, low_open=True))
    if len(set(out)) != len(out):
        fail("epsilons", "distinct privacy budgets (None and inf are both no noise)", values)
    return out


def _check_seeds(seeds, name: str) -> list:
    if isinstance(seeds, (str, bytes, dict)) or not hasattr(seeds, "__iter__") or len(list(seeds)) == 0:
        fail(name, "a non-empty list of seeds (integers ≥ 0)", seeds)
    out = [check_seed(s, name) for s in seeds]
    if len(set(out)) != len(out):
        fail(name, "distinct seeds", out)
    return out


def _server_view(counts, hp: clust_psi_pfl.Hyper, percentile: float) -> dict:
    """What the server derives from ``counts`` (K, C): Algorithm 1's assignment (K,), τ, the
    maximum silhouette, and PSI-PFL's selection (M,) at the ``percentile``-th PSI percentile."""
    labels, info = clust_psi_pfl.cluster_clients(counts, hp)
    sil = [s for s in info.get("silhouettes", []) if s is not None]
    values = psi(counts)
    chosen = psi_pfl.selected_clients(values, psi_pfl.candidate_thresholds(values, [percentile])[0])
    return {"labels": labels, "tau": int(info["tau"]), "max_silhouette": max(sil) if sil else np.nan,
            "degenerate": bool(info.get("degenerate", False)), "selected": set(chosen.tolist())}


def privacy_study(counts, epsilons, noise_seeds, *, percentile: float = 50, kmeans_seed: int = 42,
                  n_init="auto", nonpositive_silhouette: str = "argmax", postprocess: str = "clip") -> pd.DataFrame:
    """The server's decisions on ε-DP noisy label counts, against those on the exact counts.

    For every ε and noise seed s the server receives ``noisy_label_counts(counts, ε, s)``
    (:mod:`fedlib.privacy`; ε = None: the exact counts), post-processes them (``postprocess``:
    'clip' as received, 'round' to integers — :func:`fedlib.privacy.server_histograms`) and runs Clust-PSI-PFL's Algorithm 1
    (:func:`fedlib.methods.clust_psi_pfl.cluster_clients`) and PSI-PFL's threshold rule at one
    percentile (:func:`fedlib.methods.psi_pfl.selected_clients`) on them — exactly what the
    methods do with ``hyper dp_epsilon=ε, dp_seed=s, dp_postprocess=postprocess``.

    Parameters
    ----------
    counts : array-like, shape (K, C), non-negative — the clients' exact train-split label counts
    epsilons : list of privacy budgets: None (or ``math.inf``) for no noise, numbers > 0
    noise_seeds : list of distinct seeds ≥ 0 (``dp_seed``)
    percentile : number in [0, 100] — PSI-PFL's candidate threshold compared (default: the median)
    kmeans_seed, n_init, nonpositive_silhouette : Algorithm 1's settings (clust_psi_pfl.Hyper)
    postprocess : 'clip' (default) or 'round' — the server's post-processing of noisy counts

    Returns
    -------
    DataFrame, one row per (ε, noise seed) in the order given — ε = None gives identical rows:
        postprocess, epsilon (float; ``NO_NOISE`` = ∞ for None), noise_seed, tau, tau_exact (τ on the exact
        counts), ari (adjusted Rand index of the assignment against the exact one; 1 = the same
        partition), max_silhouette (NaN if degenerate), degenerate, n_selected, n_selected_exact,
        psi_kept (share of the exact selection still selected), psi_jaccard (|S ∩ S₀| / |S ∪ S₀|),
        zero_share (share of the exact counts that are 0 — where PSI's ε-smoothing of an empty
        class makes it most sensitive to noise)
    """
    exact_counts = noisy_label_counts(counts, None, 0)  # validates: (K, C), finite, ≥ 0
    eps = _check_epsilons(epsilons)
    seeds = _check_seeds(noise_seeds, "noise_seeds")
    p = check_number(percentile, "percentile", 0, 100)
    check_choice(postprocess, "postprocess", POSTPROCESS)
    hp = clust_psi_pfl.Hyper(kmeans_seed=kmeans_seed, n_init=n_init, nonpositive_silhouette=nonpositive_silhouette)
    exact = _server_view(exact_counts, hp, p)
    zero_share = float((exact_counts == 0).mean())
    rows = []
    for e in eps:
        for s in seeds:
            view = exact if e is None else _server_view(server_histograms(exact_counts, e, s, postprocess), hp, p)
            both = view["selected"] & exact["selected"]
            rows.append({"postprocess": postprocess, "epsilon": NO_NOISE if e is None else e, "noise_seed": s, "tau": view["tau"],
                         "tau_exact": exact["tau"], "ari": float(adjusted_rand_score(exact["labels"], view["labels"])),
                         "max_silhouette": view["max_silhouette"], "degenerate": view["degenerate"],
                         "n_selected": len(view["selected"]), "n_selected_exact": len(exact["selected"]),
                         "psi_kept": len(both) / len(exact["selected"]),
                         "psi_jaccard": len(both) / len(view["selected"] | exact["selected"]),
                         "zero_share": zero_share})
    return pd.DataFrame(rows)


def privacy_grid(labels, n_classes: int, protocols: dict, n_clients, seeds, epsilons, noise_seeds, *,
                 dataset_name: str = "", percentile: float = 50, kmeans_seed: int = 42, n_init="auto",
                 test_fraction: float = 0.2, postprocess=("clip",)) -> pd.DataFrame:
    """:func:`privacy_study` on every cell of a grid, the federations built as
    :func:`cluster_selection_study` builds them (partition, 80/20 train/test per client,
    train-split counts).

    Parameters
    ----------
    labels : int array (N,) — the training pool's labels; n_classes : int
    protocols : dict protocol -> list of levels; n_clients, seeds : lists of int
    epsilons, noise_seeds, percentile, kmeans_seed, n_init : as :func:`privacy_study`
    postprocess : list of the server's post-processing rules to compare ('clip', 'round')

    Returns
    -------
    DataFrame: dataset, protocol, level, n_clients, seed, then :func:`privacy_study`'s columns;
    infeasible partitions are left out.
    """
    _check_epsilons(epsilons)
    _check_seeds(noise_seeds, "noise_seeds")
    rules = [postprocess] if isinstance(postprocess, str) else list(postprocess)
    if not rules or len(set(rules)) != len(rules) or any(r not in POSTPROCESS for r in rules):
        fail("postprocess", f"a non-empty list of distinct rules from {list(POSTPROCESS)}", postprocess)
    if not isinstance(protocols, dict) or not protocols:
        fail("protocols", "a non-empty dict protocol -> list of levels, e.g. {'dirichlet': [0.3]}", protocols)
    frames = []
    for protocol, levels in protocols.items():
        for level in levels:
            for k in n_clients:
                for seed in seeds:
                    try:
                        counts = _train_counts(labels, n_classes, protocol, k, level, seed, dataset_name,
                                               test_fraction)
                    except P.InfeasiblePartitionError:
                        continue
                    df = pd.concat([privacy_study(counts, epsilons, noise_seeds, percentile=percentile,
                                                  kmeans_seed=kmeans_seed, n_init=n_init, postprocess=r)
                                    for r in rules], ignore_index=True)
                    key = dict(dataset=dataset_name, protocol=protocol, level=float(level), n_clients=int(k),
                               seed=int(seed))
                    frames.append(pd.concat([pd.DataFrame([key] * len(df)), df], axis=1))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def privacy_summary(study: pd.DataFrame, by=("dataset",)) -> pd.DataFrame:
    """Per group of ``by`` and ε (no noise first, then ε falling): over every cell and noise
    seed, ``runs``, ``tau_same`` (share of runs whose τ equals the exact τ), ``median_tau``,
    ``mean_ari``, ``mean_psi_kept``, ``mean_psi_jaccard`` and (when the study has it)
    ``zero_share`` (mean share of zero counts).

    ``study`` is :func:`privacy_study`'s or :func:`privacy_grid`'s frame; ``by`` its key columns
    (``()``: one group per ε). The server's post-processing rule (``postprocess``) is always a
    key: two rules are never pooled.
    """
    need = {"epsilon", "tau", "tau_exact", "ari", "psi_kept", "psi_jaccard"}
    if not isinstance(study, pd.DataFrame) or not need <= set(study.columns):
        fail("study", f"privacy_study's DataFrame (columns {sorted(need)})", type(study).__name__)
    by = [by] if isinstance(by, str) else list(by)
    missing = [c for c in by if c not in study.columns]
    if missing:
        fail("by", f"columns of study ({list(study.columns)})", missing)
    if "postprocess" in study.columns and "postprocess" not in by:  # never pool two server rules
        by = [*by, "postprocess"]
    g = study.assign(tau_same=(study.tau == study.tau_exact).astype(float)).groupby([*by, "epsilon"])
    out = g.agg(runs=("tau", "size"), tau_same=("tau_same", "mean"), median_tau=("tau", "median"),
                mean_ari=("ari", "mean"), mean_psi_kept=("psi_kept", "mean"),
                mean_psi_jaccard=("psi_jaccard", "mean"),
                **({"zero_share": ("zero_share", "mean")} if "zero_share" in study.columns else {})).reset_index()
    return out.sort_values([*by, "epsilon"], ascending=[True] * len(by) + [False], ignore_index=True)


def epsilon_label(e) -> str:
    """'∞' for no noise, else the budget as written (10, 1, 0.1, …)."""
    return "∞" if e == NO_NOISE else f"{e:g}"


def privacy_figure(summary: pd.DataFrame, series=("dataset",)) -> plt.Figure:
    """Three panels against ε (no noise at the left, ε falling to the right): the share of runs
    that keep the exact τ, the mean ARI against the exact assignment, and the mean Jaccard of
    PSI-PFL's selection against the exact one; a line per ``series`` group of
    :func:`privacy_summary`'s frame."""
    if not isinstance(summary, pd.DataFrame) or "epsilon" not in summary.columns or summary.empty:
        fail("summary", "privacy_summary's non-empty DataFrame", type(summary).__name__)
    series = [series] if isinstance(series, str) else list(series)
    eps = sorted(summary.epsilon.unique(), reverse=True)
    x = {e: i for i, e in enumerate(eps)}
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), sharex=True)
    panels = (("tau_same", "share of runs with the exact τ"), ("mean_ari", "ARI vs the exact clusters"),
              ("mean_psi_jaccard", "PSI-PFL selection: Jaccard vs exact"))
    for key, g in summary.groupby(series):
        name = ", ".join(str(v) for v in (key if isinstance(key, tuple) else (key,)))
        g = g.sort_values("epsilon", ascending=False)
        for ax, (col, _) in zip(axes, panels):
            ax.plot([x[e] for e in g.epsilon], g[col], marker="o", label=name)
    for ax, (_, title) in zip(axes, panels):
        ax.set(xticks=range(len(eps)), xticklabels=[epsilon_label(e) for e in eps], xlabel="ε (Laplace noise 1/ε)",
               ylim=(-0.05, 1.05), title=title)
        ax.axhline(0, color="0.8", lw=0.8)
    axes[0].legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def tau_explanations(readings: pd.DataFrame, local_gap: dict | None = None, label=str) -> list[str]:
    """One line per row of :func:`tau_readings`: τ, what it is in terms of the clients' label
    histograms, the silhouette at τ against the planted count's, and how small the clusters are.

    ``local_gap``: block → Clust-PSI-PFL's score minus Local's (pp), shown where given; ``label``:
    block → display name."""
    lines = []
    for r in readings.itertuples():
        what = (f"one cluster per distinct label histogram ({r.distinct_histograms} distinct among {r.K} clients; "
                f"s(τ) = 1 − {r.singletons}/{r.K} = {r.one_per_histogram:.3f} exactly: a client that shares its "
                f"histogram has a(i) = 0, s(i) = 1" + (f", the {r.singletons} alone score 0)" if r.singletons else ")")
                if r.one_per_histogram is not None and not pd.isna(r.one_per_histogram)
                else f"{r.distinct_histograms} distinct label histograms, {r.class_supports} class supports; "
                     f"s(τ) = {r.silhouette_tau:.3f}")
        planted = ("" if r.planted is None or pd.isna(r.planted) or r.silhouette_planted is None
                   or pd.isna(r.silhouette_planted)
                   else f"; at the planted {int(r.planted)} clusters s = {r.silhouette_planted:.3f}")
        size = (f"; median cluster size {r.median_size:g}, {100 * r.share_in_le2:.0f} % of the clients in "
                f"clusters of ≤ 2")
        gap = ""
        if local_gap and r.block in local_gap and not pd.isna(local_gap[r.block]):
            gap = f"; Clust-PSI-PFL − Local: {local_gap[r.block]:+.2f} pp"
        lines.append(f"{label(r.block)} (K = {r.K}, seed {r.seed}): τ = {r.tau}: {what}{planted}{size}{gap}")
    return lines
