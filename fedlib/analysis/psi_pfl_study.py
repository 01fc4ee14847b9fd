"""PSI-PFL's figures and observations (PSI-PFL paper Section 4) rebuilt from run records.

``candidates_frame`` reads every candidate threshold a ``psi_pfl`` record trained (one row per
run × percentile); ``fig5_thresholds`` draws Fig. 5 (global accuracy per percentile × K × α);
``paper_variant_records`` derives from each validation-selected record the run the paper
reports (the threshold with the best **test** accuracy — optimistic, labelled as such);
``fairness_table`` gives CP, AD and SDAD against CL (Fig. 7's numbers); ``fig7_ecdfs`` the ECDFs
of local accuracy, one panel per (dataset, α); ``observations`` computes whether Observations
2–4 hold here. Nothing is retrained.
"""
from __future__ import annotations

import copy

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..evaluation import summarise_clients
from .tables import SETTING_KEYS
from .training_plots import REFERENCES, _method_legend, _method_order, ecdf_panel

__all__ = ["PAPER_VARIANT", "LOW_PERCENTILES", "candidates_frame", "fig5_thresholds",
           "paper_variant_records", "fairness_table", "fig7_ecdfs", "observations"]

METHOD = "psi_pfl"
PAPER_VARIANT = "PSI-PFL (ζ chosen on test, the paper's)"
LOW_PERCENTILES = (10.0, 25.0)  # the paper's "Low" and "Medium-low" thresholds (Observation 2)


def candidates_frame(records) -> pd.DataFrame:
    """One row per (psi_pfl run, candidate threshold): the setting, seed, percentile, threshold
    ζ, number of selected clients, validation and test global accuracy, and whether it was the
    chosen one."""
    rows = []
    for r in records:
        if r["spec"]["method"] != METHOD or r.get("status") != "ok":
            continue
        s, info = r["spec"], r["info"]
        for i, c in enumerate(info["candidates"]):
            rows.append({**{k: s[k] for k in SETTING_KEYS}, "seed": s["seed"], "percentile": c["percentile"],
                         "threshold": c["threshold"], "n_selected": c["n_selected"],
                         "val_accuracy": c.get("val_accuracy", np.nan), "test_accuracy": c["test_accuracy"],
                         "chosen": i == info["chosen"], "selected_on": info["selected_on"]})
    return pd.DataFrame(rows)


def fig5_thresholds(cands: pd.DataFrame) -> plt.Figure:
    """Fig. 5: global (test) accuracy against the threshold's PSI percentile, mean over seeds,
    one panel per (dataset, K), a line per α."""
    panels = cands[["dataset", "n_clients"]].drop_duplicates().values.tolist()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
    levels = sorted(cands.level.unique(), reverse=True)
    colours = dict(zip(levels, sns.color_palette("viridis", len(levels)).as_hex()))
    for ax, (ds, k) in zip(axes[0], panels):
        sub = cands[(cands.dataset == ds) & (cands.n_clients == k)]
        for level, g in sub.groupby("level"):
            m = g.groupby("percentile").test_accuracy.mean()
            ax.plot(m.index, m.values, marker="o", color=colours[level], label=f"α={level:g}")
        ax.set(xlabel="threshold ζ: PSI percentile", ylabel="global accuracy", ylim=(0, 1.02),
               title=f"{ds}, K={k}", xticks=sorted(cands.percentile.unique()))
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def paper_variant_records(records) -> list[dict]:
    """For every validation-selected psi_pfl record, the record of the run the paper would
    report: the candidate with the best test accuracy (ties: lower percentile), its per-client
    results and metrics, under the method name :data:`PAPER_VARIANT` (an infeasible record
    stays infeasible; a failed one has no candidates and is left out)."""
    out = []
    for r in records:
        if r["spec"]["method"] != METHOD or r.get("status") == "failed":
            continue
        if r["status"] != "ok":  # an infeasible setting is infeasible for the variant too ("—")
            out.append({**r, "spec": {**r["spec"], "method": PAPER_VARIANT}})
            continue
        if r["info"]["selected_on"] != "val":
            continue
        cands = r["info"]["candidates"]
        best = int(np.argmax([c["test_accuracy"] for c in cands]))
        v = copy.deepcopy(r)
        v["spec"]["method"] = PAPER_VARIANT
        v["correct"] = cands[best]["test_correct"]
        v.update(summarise_clients(v["correct"], v["n_test"]))
        v["info"].update(chosen=best, percentile=cands[best]["percentile"], selected_on="test")
        out.append(v)
    return out


def fairness_table(df: pd.DataFrame) -> pd.DataFrame:
    """CP, AD and SDAD against the CL accuracy (PSI-PFL's definitions) per setting and method,
    means over seeds (``records_frame`` rows)."""
    ok = df[(df.status == "ok") & (df.method != "cl")]
    return (ok.groupby(SETTING_KEYS + ["method"], sort=False)[["cp", "ad_cl", "sdad_cl", "global_accuracy"]]
            .mean().reset_index())


def fig7_ecdfs(df: pd.DataFrame, n_clients: int) -> plt.Figure:
    """Fig. 7: ECDF of the clients' local accuracy per method (seeds pooled), one panel per
    (dataset, α) at K = ``n_clients``; CL (the target) dashed, PSI-PFL black."""
    ok = df[(df.status == "ok") & (df.n_clients == n_clients)]
    panels = ok[["dataset", "level"]].drop_duplicates().sort_values(["dataset", "level"],
                                                                     ascending=[True, False]).values.tolist()
    methods = _method_order(ok.method)
    fig, axes = plt.subplots(1, len(panels), figsize=(3.9 * len(panels), 3.7), squeeze=False)
    for ax, (ds, level) in zip(axes[0], panels):
        ecdf_panel(ax, ok[(ok.dataset == ds) & (ok.level == level)], methods, METHOD)
        ax.set_title(f"{ds}, α={level:g}, K={n_clients}")
    _method_legend(fig, methods, marker=None, ncol=6, proposed=METHOD)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    return fig


def _federated(methods) -> list:
    return [m for m in methods if m not in REFERENCES and m != METHOD and m != PAPER_VARIANT]


def observations(df: pd.DataFrame, cands: pd.DataFrame) -> tuple[list[str], dict]:
    """Whether the paper's Observations 2–4 hold in these runs.

    Observation 2: the best threshold (mean test accuracy over seeds) is a Low or Medium-low
    one (10th/25th percentile) in every (dataset, α, K). Observation 3: PSI-PFL's global
    accuracy (mean over seeds) is at least every federated baseline's in every setting.
    Observation 4: at the most heterogeneous α of each (dataset, K), PSI-PFL has the smallest
    AD against CL among the federated methods.

    Returns
    -------
    (lines, frames): one verdict sentence per observation, and the per-setting tables behind them.
    """
    lines, frames = [], {}
    keys = ["dataset", "level", "n_clients"]
    mean = cands.groupby(keys + ["percentile"]).test_accuracy.mean().reset_index()  # sorted by percentile
    best = mean.loc[mean.groupby(keys).test_accuracy.idxmax()]  # ties: the lower percentile
    best = best.rename(columns={"percentile": "best_percentile"})
    frames["obs2"] = best.reset_index(drop=True)
    k = int(best.best_percentile.isin(LOW_PERCENTILES).sum())
    lines.append(f"Observation 2 (Low/Medium-low ζ give the highest global accuracy): best ζ is the 10th or "
                 f"25th percentile in {k}/{len(best)} (dataset, α, K) settings: "
                 f"{_verdict(k, len(best))}.")
    ok = df[df.status == "ok"]
    acc = ok.groupby(SETTING_KEYS + ["method"]).global_accuracy.mean().unstack("method")
    rows = []
    for setting, row in acc.iterrows():
        base = row[_federated(row.dropna().index)]
        if METHOD not in row or pd.isna(row[METHOD]) or base.empty:
            continue
        rows.append({**dict(zip(SETTING_KEYS, setting)), "psi_pfl": row[METHOD], "best_baseline": base.idxmax(),
                     "best_baseline_accuracy": base.max(), "margin": row[METHOD] - base.max()})
    obs3 = pd.DataFrame(rows)
    frames["obs3"] = obs3
    k = int((obs3.margin >= 0).sum()) if len(obs3) else 0
    lines.append(f"Observation 3 (PSI-PFL ≥ every baseline's global accuracy): holds in {k}/{len(obs3)} "
                 f"settings: {_verdict(k, len(obs3))}"
                 + (f" (margin from {obs3.margin.min():+.3f} to {obs3.margin.max():+.3f})." if len(obs3) else "."))
    fair = fairness_table(df)
    rows = []
    for (ds, kk), g in fair.groupby(["dataset", "n_clients"]):
        g = g[g.level == g.level.min()].set_index("method")
        base = g.loc[_federated(g.index)]
        if METHOD not in g.index or base.empty:
            continue
        rows.append({"dataset": ds, "n_clients": kk, "level": g.level.iloc[0], "psi_pfl_ad_cl": g.loc[METHOD, "ad_cl"],
                     "psi_pfl_sdad_cl": g.loc[METHOD, "sdad_cl"], "psi_pfl_cp": g.loc[METHOD, "cp"],
                     "best_baseline": base.ad_cl.idxmin(), "best_baseline_ad_cl": base.ad_cl.min()})
    obs4 = pd.DataFrame(rows)
    frames["obs4"] = obs4
    k = int((obs4.psi_pfl_ad_cl <= obs4.best_baseline_ad_cl).sum()) if len(obs4) else 0
    lines.append(f"Observation 4 (smallest AD from CL at the most heterogeneous α): holds in {k}/{len(obs4)} "
                 f"(dataset, K) settings: {_verdict(k, len(obs4))}"
                 + (f" (PSI-PFL's AD {obs4.psi_pfl_ad_cl.min():.3f}–{obs4.psi_pfl_ad_cl.max():.3f}; "
                    f"paper: 0.03)." if len(obs4) else "."))
    return lines, frames


def _verdict(k: int, n: int) -> str:
    return "no settings" if n == 0 else "confirmed" if k == n else "partly confirmed" if k else "not confirmed"
