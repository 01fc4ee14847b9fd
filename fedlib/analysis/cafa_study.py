"""What notebook 08 shows of CAFA (Zhang et al.): CBCC's identification of the IID clients
(Tables II–III, Figs. 4–5) and FedAvg vs FedProx vs CAFA training (Tables IV–V, Fig. 6).

CBCC depends on the labels only (label counts → K-means), so Tables II–III run on real label
vectors: FMNIST's and one with CIFAR-10's class counts (:func:`cifar10_labels`). The training
comparison runs through :mod:`fedlib.experiment` (one record per run) on a stand-in data set.
"""
from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.decomposition import PCA

from .. import partition as P
from ..experiment import grid_specs
from ..methods import DISPLAY_NAMES
from ..methods.cafa import cbcc
from ..validation import check_int, check_number, check_seed, fail

__all__ = ["PAPER_TABLE2", "PAPER_TABLE3", "PAPER_TABLE4", "PAPER_TABLE5", "cifar10_labels", "true_iid_mask",
           "identification_scores", "cbcc_case", "cbcc_table", "with_paper", "silhouette_frame",
           "pca_frame", "fig_silhouette", "fig_pca", "training_specs", "history_frame", "window_table",
           "best_table", "ordering_holds", "fig_curves", "table_markdown"]

# CAFA Table II (25 % IID clients) and Table III (50 %): (n_IID, n_non-IID) -> k, Acc, Precision,
# Recall, F1, as printed in the paper.
PAPER_TABLE2 = {(5, 15): (9, 0.95, 0.83, 1.00, 0.91), (10, 30): (11, 1.00, 1.00, 1.00, 1.00),
                (15, 45): (12, 1.00, 1.00, 1.00, 1.00)}
PAPER_TABLE3 = {(10, 10): (7, 0.95, 0.91, 1.00, 0.95), (20, 20): (10, 1.00, 1.00, 1.00, 1.00),
                (30, 30): (11, 1.00, 1.00, 1.00, 1.00)}
# CAFA Table IV: average accuracy (%) per round window; Table V: best accuracy (%). CIFAR-10, VGG-19.
PAPER_WINDOWS = [(0, 29), (30, 59), (60, 89), (90, 119), (120, 149)]
PAPER_TABLE4 = {"fedavg": (55.36, 77.1, 79.05, 81.06, 79.68), "fedprox": (50.96, 70.13, 79.52, 77.2, 78.68),
                "cafa": (57.78, 79.37, 82.29, 82.71, 83.07)}
PAPER_TABLE5 = {"fedavg": 82.1, "fedprox": 80.42, "cafa": 83.45}
METRICS = ["acc", "precision", "recall", "f1"]


def cifar10_labels() -> np.ndarray:
    """A label vector with CIFAR-10's training class counts: 5,000 of each of 10 classes, (50000,)."""
    return np.repeat(np.arange(10, dtype=np.int64), 5000)


def true_iid_mask(n_clients: int, iid_fraction: float) -> np.ndarray:
    """(K,) bool: the IID clients of :func:`fedlib.partition.iid_fraction_classes` (the first
    ⌊iid_fraction·K + ½⌋)."""
    k = check_int(n_clients, "n_clients", 1)
    f = check_number(iid_fraction, "iid_fraction", 0, 1)
    return np.arange(k) < int(np.floor(f * k + 0.5))


def identification_scores(predicted, truth) -> dict:
    """Accuracy, precision, recall, F1 of ``predicted`` (K,) bool "IID" against ``truth`` (K,)
    (IID = positive; precision/F1 are 0 when nothing is predicted IID)."""
    p, t = np.asarray(predicted, bool), np.asarray(truth, bool)
    if p.shape != t.shape or p.ndim != 1:
        fail("predicted", f"a bool vector shaped like truth {t.shape}", p.shape)
    tp = int((p & t).sum())
    precision = tp / p.sum() if p.sum() else 0.0
    recall = tp / t.sum() if t.sum() else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"acc": float((p == t).mean()), "precision": float(precision), "recall": float(recall),
            "f1": float(f1)}


def cbcc_case(labels, n_clients: int, iid_fraction: float, seed: int, classes=(2, 4), n_init: int = 10):
    """One partition (:func:`fedlib.partition.iid_fraction_classes`, seed ``seed``) and CBCC on its
    label counts (K-means random_state = ``seed``).

    Returns (scores dict with k, acc, precision, recall, f1; the CBCC result; truth (K,) bool).
    """
    labels = np.asarray(labels)
    parts = P.iid_fraction_classes(labels, n_clients, iid_fraction, seed, classes=classes)
    counts = P.label_counts(labels, parts, int(labels.max()) + 1)
    res = cbcc(counts, random_state=check_seed(seed), n_init=n_init)
    truth = true_iid_mask(n_clients, iid_fraction)
    return {"k": res.k, **identification_scores(res.iid_mask, truth)}, res, truth


def cbcc_table(label_sets: dict, cases: dict, seeds, classes=(2, 4), n_init: int = 10) -> pd.DataFrame:
    """Tables II–III: one row per (labels, IID share, K) with the mean over ``seeds`` of k and
    the four scores.

    label_sets : dict name -> label vector; cases : dict iid_fraction -> list of K; seeds : list.
    """
    rows = []
    for name, labels in label_sets.items():
        for f, ks in cases.items():
            for k in ks:
                scores = [cbcc_case(labels, k, f, s, classes, n_init)[0] for s in seeds]
                mean = pd.DataFrame(scores).mean()
                n_iid = int(true_iid_mask(k, f).sum())
                rows.append({"labels": name, "iid_share": f, "n_iid": n_iid, "n_noniid": k - n_iid,
                             "n_seeds": len(scores), **mean.to_dict()})
    return pd.DataFrame(rows)


def with_paper(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with the paper's k and scores beside (columns ``paper_*``; NaN where the paper has
    no such case)."""
    paper = {**PAPER_TABLE2, **PAPER_TABLE3}
    out = table.copy()
    for i, col in enumerate(["k", *METRICS]):
        out[f"paper_{col}"] = [paper.get((a, b), (np.nan,) * 5)[i] for a, b in zip(out.n_iid, out.n_noniid)]
    return out


def silhouette_frame(res) -> pd.DataFrame:
    """Fig. 4's data: k and s̄_k of a CBCC result, with the chosen k flagged."""
    return pd.DataFrame({"k": list(res.silhouettes), "silhouette": list(res.silhouettes.values()),
                         "chosen": [k == res.k for k in res.silhouettes]})


def pca_frame(res, truth) -> pd.DataFrame:
    """Fig. 5's data: the 2-D PCA of the class distributions v_i, with truth and CBCC's clusters."""
    xy = PCA(n_components=2).fit_transform(res.v)
    return pd.DataFrame({"client": np.arange(len(xy)), "pc1": xy[:, 0], "pc2": xy[:, 1],
                         "true_iid": np.asarray(truth, bool), "cluster": res.labels,
                         "cbcc_iid": res.iid_mask})


def fig_silhouette(df: pd.DataFrame, title: str):
    """Fig. 4: s̄_k against k, the chosen k marked."""
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(df.k, df.silhouette, marker="o", ms=3)
    best = df[df.chosen]
    ax.scatter(best.k, best.silhouette, color="C3", zorder=3, label=f"chosen k = {int(best.k.iloc[0])}")
    ax.set(xlabel="number of clusters k", ylabel="mean silhouette s̄_k", title=title)
    ax.legend()
    fig.tight_layout()
    return fig


def fig_pca(df: pd.DataFrame, title: str):
    """Fig. 5: clients in the PCA plane, before CBCC (true IID / non-IID) and after (clusters,
    the IID cluster ringed)."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), sharex=True, sharey=True)
    for flag, name, colour in ((True, "IID", "C0"), (False, "non-IID", "C1")):
        sub = df[df.true_iid == flag]
        axes[0].scatter(sub.pc1, sub.pc2, s=18, color=colour, label=f"{name} ({len(sub)})")
    axes[0].set(title="before CBCC (truth)", xlabel="PC 1", ylabel="PC 2")
    axes[0].legend()
    axes[1].scatter(df.pc1, df.pc2, s=18, c=df.cluster, cmap="tab20")
    iid = df[df.cbcc_iid]
    axes[1].scatter(iid.pc1, iid.pc2, s=80, facecolors="none", edgecolors="k", label=f"IID cluster ({len(iid)})")
    axes[1].set(title="after CBCC (clusters)", xlabel="PC 1")
    axes[1].legend()
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def training_specs(dataset: str, n_train, iid_fraction: float, n_clients: int, seeds, methods,
                   hyper: dict | None, fl: dict, val_fraction: float):
    """The RunSpecs of Tables IV–V: every method on the same CAFA partitions with a validation
    split (the paper's 20 %, for every method so that all train on the same data)."""
    check_number(val_fraction, "val_fraction", 0, 1, low_open=True, high_open=True)
    specs = grid_specs([dataset], {"iid_fraction_classes": [iid_fraction]}, [n_clients], seeds, methods,
                       hyper=hyper, fl=fl, n_train=n_train)
    return [dataclasses.replace(s, val_fraction=float(val_fraction)) for s in specs]


def history_frame(records) -> pd.DataFrame:
    """One row per (method, seed, round): the global model's accuracy on the clients' pooled test
    splits (``global_accuracy``) after that round (1-based), from run records."""
    rows = [{"method": r["spec"]["method"], "seed": r["spec"]["seed"], "round": h["round"],
             "accuracy": h["global_accuracy"]}
            for r in records if r["status"] == "ok" for h in r["history"]]
    return pd.DataFrame(rows)


def window_table(hist: pd.DataFrame, windows) -> pd.DataFrame:
    """Table IV: mean accuracy per method over each window [a, b] of 0-based rounds (the paper's
    0–29 … 120–149), per seed then mean and std over seeds. Columns: method, window, mean, std."""
    rows = []
    for a, b in windows:
        sub = hist[(hist["round"] - 1 >= a) & (hist["round"] - 1 <= b)]
        per_seed = sub.groupby(["method", "seed"], sort=False).accuracy.mean()
        for m, g in per_seed.groupby(level=0, sort=False):
            rows.append({"method": m, "window": f"{a}-{b}", "mean": g.mean(), "std": g.std(ddof=0)})
    return pd.DataFrame(rows)


def best_table(hist: pd.DataFrame) -> pd.DataFrame:
    """Table V: best (max over rounds) accuracy per method, mean and std over seeds, and CAFA's
    improvement over each method (mean best of CAFA − mean best of the method)."""
    per_seed = hist.groupby(["method", "seed"], sort=False).accuracy.max().groupby(level=0, sort=False)
    best = pd.DataFrame({"mean": per_seed.mean(), "std": per_seed.std(ddof=0)})
    best["cafa_improvement"] = best.loc["cafa", "mean"] - best["mean"] if "cafa" in best.index else np.nan
    return best.reset_index()


def ordering_holds(windows_df: pd.DataFrame, best_df: pd.DataFrame) -> dict:
    """The paper's claims, computed: CAFA's best accuracy above FedAvg's and FedProx's (Table V),
    and CAFA's window mean above both in every window (Table IV). dict claim -> bool."""
    best = best_df.set_index("method")["mean"]
    win = windows_df.pivot(index="window", columns="method", values="mean")
    out = {}
    for other in ("fedavg", "fedprox"):
        if "cafa" in best and other in best:
            out[f"best: CAFA > {DISPLAY_NAMES.get(other, other)}"] = bool(best["cafa"] > best[other])
            out[f"every window: CAFA > {DISPLAY_NAMES.get(other, other)}"] = bool((win["cafa"] > win[other]).all())
    return out


def table_markdown(windows_df: pd.DataFrame, best_df: pd.DataFrame) -> str:
    """Tables IV–V as one Markdown table, cells "x.xx ± y.yy" in % (mean ± std over seeds)."""
    order = [w for w in dict.fromkeys(windows_df.window)]
    header = "| Method | " + " | ".join(f"rounds {w}" for w in order) + " | best |"
    lines = [header, "|---" * (len(order) + 2) + "|"]
    for m in dict.fromkeys(windows_df.method):
        w = windows_df[windows_df.method == m].set_index("window")
        b = best_df.set_index("method").loc[m]
        cells = [f"{100 * w.loc[x, 'mean']:.2f} ± {100 * w.loc[x, 'std']:.2f}" for x in order]
        lines.append(f"| {DISPLAY_NAMES.get(m, m)} | " + " | ".join(cells)
                     + f" | {100 * b['mean']:.2f} ± {100 * b['std']:.2f} |")
    return "\n".join(lines)


def fig_curves(hist: pd.DataFrame, title: str):
    """Fig. 6: accuracy per round, mean over seeds, one line per method."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for m, g in hist.groupby("method", sort=False):
        mean = g.groupby("round").accuracy.mean()
        ax.plot(mean.index, mean.values, label=DISPLAY_NAMES.get(m, m))
    ax.set(xlabel="round", ylabel="test accuracy", title=title)
    ax.legend()
    fig.tight_layout()
    return fig
