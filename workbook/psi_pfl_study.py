"""PSI-PFL's figures and observations (PSI-PFL paper Section 4) rebuilt from run records.

``candidates_frame`` reads every candidate threshold a ``psi_pfl`` record trained (one row per
run × percentile); ``fig5_thresholds`` draws Fig. 5 (global accuracy per percentile × K × α);
``paper_variant_records`` derives from the validation-selected records the runs the paper
reports, ζ chosen on the **test** set as the authors' ``main.py`` chose it (:func:`authors_zeta_choice`:
one percentile per setting, by the best mean test accuracy over the setting's seeds, duplicate
thresholds dropped — optimistic, labelled as such);
``fairness_table`` gives CP, AD and SDAD against CL (Fig. 7's numbers); ``fig7_ecdfs`` the ECDFs
of local accuracy, one panel per (dataset, α); ``observations`` computes whether Observations
2–4 hold here, each on both variants, naming the one the paper's statement is about;
``paper_comparison`` puts §4.3's quoted values (:data:`PAPER_EQ3`) beside ours at the paper's
most heterogeneous setting; ``threshold_ties`` shows whether reading the text's "PSI below ζ"
as < instead of the code's ≤ changes a selection. ``grid_specs`` builds notebook 07's runs,
with the ``paper_code`` reading (:mod:`fedlib.reproduction`) of the baselines when asked
(``notebook_grid``: the same from the notebook's parameters, for ``benchmarks/paper_grid.py psi-pfl``).
Nothing is retrained.

Which variant each Observation speaks about. §4.2 chooses the threshold by the global accuracy
of Fig. 5 (the test accuracy it reports) and says "the results in the following sections are
based on the optimal threshold": Observations 2, 3 and 4 are all about the test-selected run,
:data:`PAPER_VARIANT`. Ours (``psi_pfl``) chooses ζ on the validation split; both are computed.

Client parity. The records' ``cp`` is inf as soon as one client scores 0 (every FMNIST α = 0.3
run); PSI-PFL is silent on that case (:mod:`fedlib.evaluation`, CP). Here ``cp_nonzero`` leaves
the clients at 0 out (``client_parity(zero='exclude')``) and ``n_zero`` counts them, computed
from the records' local accuracies, so no run is repeated.
"""
from __future__ import annotations

import copy
import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from fedlib.evaluation import client_parity, summarise_clients
from fedlib.experiment import present_records
from fedlib.frame import records_frame
from fedlib.methods.psi_pfl import rule_changes
from fedlib.validation import fail
from . import paper_values
from .tables import SETTING_KEYS
from .training_plots import REFERENCES, method_legend, method_order, ecdf_panel

__all__ = ["PAPER_VARIANT", "VARIANTS", "LOW_PERCENTILES", "PAPER_EQ3", "PAPER_MOST_HETEROGENEOUS",
           "grid_specs", "GRID_PARAMS", "notebook_grid", "grid_label", "candidates_frame", "fig5_thresholds",
           "AUTHORS_SMALL_POOL", "AUTHORS_POOL_COPIES", "authors_pool", "authors_zeta_choice",
           "paper_variant_records", "with_finite_cp",
           "fairness_table", "fig7_ecdfs", "observations", "paper_comparison", "threshold_ties",
           "threshold_tie_lines", "present_records"]

METHOD = "psi_pfl"
PAPER_VARIANT = "PSI-PFL (ζ chosen on test, the paper's)"
VARIANTS = {PAPER_VARIANT: "ζ chosen on test, the paper's variant", METHOD: "ζ chosen on validation, ours"}
"""The two PSI-PFL variants, the paper's first: method name -> label."""
LOW_PERCENTILES = (10.0, 25.0)  # the paper's "Low" and "Medium-low" thresholds (Observation 2)

PAPER_EQ3 = {(PAPER_VARIANT if m == METHOD else m, metric): v
             for (m, metric), (v,) in paper_values.rows("psi_pfl", "eq3").items()}
"""PSI-PFL §4.3 (EQ3), (method, metric) -> value, AD/SDAD against CL as fractions: "Under the
most heterogeneous scenario, our solution achieves an AD of 3% from the CL (target), with an
SDAD of 6%. [...] HACCS and FedCLS have an AD of 24% with an SDAD of 13%", and "CPs of the order
of 2.2 for [...] HACCS and FedCLS and 3.7 for FedYogi, FedAdam, and FedAdagrad". PSI-PFL's own CP
and the α of the CP sentence are lost in the text; the text names no data set (ACSIncome's
figures are the main text's). The values: workbook/papers/psi_pfl.yaml (block eq3, whose
``psi_pfl`` is the paper's method, i.e. :data:`PAPER_VARIANT`)."""

PAPER_MOST_HETEROGENEOUS = dict(zip(paper_values.column_labels("psi_pfl", "most_heterogeneous"),
                                    paper_values.rows("psi_pfl", "most_heterogeneous")["setting"]))
"""Where :func:`paper_comparison` reads ours: the smallest α of the paper profile's grid
(``params/paper/07_psi_pfl.yaml``, from Clust-PSI-PFL: PSI-PFL's own α list is lost in the
text) and its largest K ("its performance improves in scenarios with more clients"):
workbook/papers/psi_pfl.yaml, block most_heterogeneous."""


def grid_specs(datasets, alphas, n_clients, seeds, baselines, *, hyper=None, fl=None, n_train=None,
               val_fraction=0.0, reproductions=("paper_text",)) -> list:
    """Notebook 07's runs: the baselines and ``psi_pfl`` on Dirichlet(α) partitions
    (:func:`fedlib.experiment.grid_specs`). ``reproductions`` may add ``'paper_code'``: the
    baselines as the authors' PSI-PFL code ran them (PoC, HACCS, FedCLS on plain SGD lr 0.001,
    batch 64, :data:`fedlib.reproduction.PAPER_CODE`), where that differs at the run's K and q.
    ``psi_pfl`` gets no ``paper_code`` run: the code's only change is choosing ζ on the test
    set, which :func:`paper_variant_records` rebuilds from the ``paper_text`` records (one ζ per
    setting over its seeds, :func:`authors_zeta_choice`; the ×4 copy of a ≤ 2-client pool is not
    replayed)."""
    from fedlib import experiment

    specs = experiment.grid_specs(datasets, {"dirichlet": alphas}, n_clients, seeds, [*baselines, METHOD],
                                  hyper=hyper, fl=fl, n_train=n_train, val_fraction=val_fraction,
                                  reproductions=reproductions)
    return [s for s in specs if not (s.method == METHOD and s.reproduction == "paper_code")]


GRID_PARAMS = ("datasets", "alphas", "n_clients", "seeds", "baselines", "hyper", "fl", "n_train", "val_fraction",
               "reproductions")
"""The parameters of notebook 07 (``params/*/07_psi_pfl.yaml``) that its grid depends on:
:func:`notebook_grid`'s keywords."""


def notebook_grid(*, datasets, alphas, n_clients, seeds, baselines, hyper, fl: dict, n_train, val_fraction: float,
                  reproductions) -> dict[str, list]:
    """Notebook 07's grid from its parameters (:data:`GRID_PARAMS`), by table: ``'comparison'`` —
    Fig. 5 (``psi_pfl``'s candidate thresholds), Figs. 6–7 and §4.3's comparison with the
    baselines (:func:`grid_specs`)."""
    return {"comparison": grid_specs(datasets, alphas, n_clients, seeds, baselines, hyper=hyper, fl=fl,
                                     n_train=n_train, val_fraction=val_fraction, reproductions=reproductions)}


def grid_label(spec) -> str:
    """A run's row as the grid command's progress lines print it (``python -m fedlib.grid psi-pfl``):
    its method (``psi_pfl`` or a baseline)."""
    return spec.method


def candidates_frame(records) -> pd.DataFrame:
    """One row per (psi_pfl run, candidate threshold): the setting, seed, percentile, threshold
    ζ, number of selected clients, validation and test global accuracy, and whether it was the
    chosen one."""
    rows = []
    for key, r in _finished_runs(records):
        info = r["info"]
        for i, c in enumerate(info["candidates"]):
            rows.append({**key, "percentile": c["percentile"],
                         "threshold": c["threshold"], "n_selected": c["n_selected"],
                         "val_accuracy": c.get("val_accuracy", np.nan), "test_accuracy": c["test_accuracy"],
                         "chosen": i == info["chosen"], "selected_on": info["selected_on"]})
    return pd.DataFrame(rows)


def _finished_runs(records) -> list[tuple[dict, dict]]:
    """(setting and seed, record) of each finished ``psi_pfl`` run among ``records``, in their
    order: :func:`fedlib.frame.records_frame`'s rows, its ``SETTING_KEYS`` + ``seed`` columns."""
    f = records_frame(records)
    if f.empty:
        return []
    runs = f[(f.method == METHOD) & (f.status == "ok")]
    return list(zip(runs[SETTING_KEYS + ["seed"]].to_dict("records"), runs.record))


def fig5_thresholds(cands: pd.DataFrame) -> plt.Figure:
    """Fig. 5: global (test) accuracy (%) against the threshold's PSI percentile, mean over seeds,
    one panel per (dataset, K), a line per α."""
    panels = cands[["dataset", "n_clients"]].drop_duplicates().values.tolist()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
    levels = sorted(cands.level.unique(), reverse=True)
    colours = dict(zip(levels, sns.color_palette("viridis", len(levels)).as_hex()))
    for ax, (ds, k) in zip(axes[0], panels):
        sub = cands[(cands.dataset == ds) & (cands.n_clients == k)]
        for level, g in sub.groupby("level"):
            m = 100.0 * g.groupby("percentile").test_accuracy.mean()
            ax.plot(m.index, m.values, marker="o", color=colours[level], label=f"α={level:g}")
        ax.set(xlabel="threshold ζ: PSI percentile", ylabel="global accuracy (%)", ylim=(0, 102),
               title=f"{ds}, K={k}", xticks=sorted(cands.percentile.unique()))
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


AUTHORS_SMALL_POOL = 2
AUTHORS_POOL_COPIES = 4
"""The authors' Flower workaround: a pool of ≤ :data:`AUTHORS_SMALL_POOL` clients trains on its
client list copied :data:`AUTHORS_POOL_COPIES` times (reference-notes, "Clust-PSI-PFL clustering")."""


def authors_pool(clients) -> list:
    """The client list the authors' code trains a candidate ζ on: ``clients`` (ids) copied ×4
    when it holds ≤ 2 clients (Flower samples max(⌊q·n⌋, 2) of the list), else unchanged."""
    clients = [int(c) for c in clients]
    return clients * AUTHORS_POOL_COPIES if len(clients) <= AUTHORS_SMALL_POOL else clients


def authors_zeta_choice(candidates_by_seed: dict) -> dict:
    """ζ as the authors' ``main.py`` picks it for one setting: one percentile for every seed.

    Per seed, a candidate whose threshold equals that of a lower percentile is dropped (its pool
    is the same; the code trains each distinct threshold once). The percentile with the best
    mean test accuracy over the seeds that kept it is chosen (ties: the lower percentile); each
    seed reports its candidate at that percentile or, where that one was dropped, the kept
    candidate of the same threshold (the same run).

    Parameters
    ----------
    candidates_by_seed : dict seed -> list of dict
        That seed's candidates in percentile order (a ``psi_pfl`` record's ``info['candidates']``:
        ``percentile``, ``threshold``, ``test_accuracy``), every seed the same percentiles.

    Returns
    -------
    dict with ``percentile`` (the chosen one), ``mean`` (percentile -> mean test accuracy over
    the seeds that kept it), ``kept`` (seed -> the percentiles kept) and ``chosen`` (seed -> the
    index of the reported candidate in that seed's list).
    """
    if not isinstance(candidates_by_seed, dict) or not candidates_by_seed:
        fail("candidates_by_seed", "a non-empty dict seed -> list of candidates", candidates_by_seed)
    grids = {s: [float(c["percentile"]) for c in cands] for s, cands in candidates_by_seed.items()}
    first = next(iter(grids.values()))
    if not first or any(g != first for g in grids.values()) or first != sorted(first):
        fail("candidates_by_seed", "every seed's candidates at the same percentiles, in ascending order", grids)
    kept, scores = {}, {p: [] for p in first}
    for s, cands in candidates_by_seed.items():
        seen, kept[s] = set(), []
        for c in cands:
            z = float(c["threshold"])
            if z in seen:
                continue
            seen.add(z)
            kept[s].append(float(c["percentile"]))
            scores[float(c["percentile"])].append(float(c["test_accuracy"]))
    mean = {p: float(np.mean(v)) for p, v in scores.items() if v}
    best = max(mean.values())
    chosen_p = min(p for p, m in mean.items() if m == best)
    chosen = {}
    for s, cands in candidates_by_seed.items():
        z = float(cands[first.index(chosen_p)]["threshold"])
        chosen[s] = next(i for i, c in enumerate(cands) if float(c["threshold"]) == z)  # the kept one
    return {"percentile": chosen_p, "mean": mean, "kept": kept, "chosen": chosen}


def _setting_key(spec: dict) -> str:
    """Every spec field but the seed: the runs one ζ choice spans."""
    return json.dumps({k: v for k, v in spec.items() if k != "seed"}, sort_keys=True, default=str)


def paper_variant_records(records) -> list[dict]:
    """The records of the runs the paper reports, ζ chosen on the test set as the authors'
    ``main.py`` chose it (:func:`authors_zeta_choice`): for every setting (spec but the seed) of
    the validation-selected ``psi_pfl`` records, one percentile by the best mean test accuracy
    over the setting's seeds, and per seed that candidate's per-client results and metrics,
    under the method name :data:`PAPER_VARIANT`. With one seed this is the seed's best test
    candidate; with n > 1 it is less optimistic than a best per seed.

    The chosen pool's training is this workbook's: where it holds ≤ 2 clients the authors' code
    trained it on its client list copied ×4 (:func:`authors_pool`), which a record cannot
    replay; ``info['authors_pool_copied']`` says where. An infeasible record stays infeasible; a
    failed one has no candidates and is left out."""
    out, groups = [], {}
    for r in records:
        if r["spec"]["method"] != METHOD or r.get("status") == "failed":
            continue
        if r["status"] != "ok":  # an infeasible setting is infeasible for the variant too ("—")
            out.append({**r, "spec": {**r["spec"], "method": PAPER_VARIANT}})
            continue
        if r["info"]["selected_on"] != "val":
            continue
        groups.setdefault(_setting_key(r["spec"]), []).append(r)
    for recs in groups.values():
        choice = authors_zeta_choice({r["spec"]["seed"]: r["info"]["candidates"] for r in recs})
        for r in recs:
            i = choice["chosen"][r["spec"]["seed"]]
            c = r["info"]["candidates"][i]
            v = copy.deepcopy(r)
            v["spec"]["method"] = PAPER_VARIANT
            v["correct"] = c["test_correct"]
            v.update(summarise_clients(v["correct"], v["n_test"]))
            v["info"].update(chosen=i, percentile=c["percentile"], selected_on="test",
                             zeta_rule="authors: best mean test accuracy over seeds",
                             zeta_seeds=sorted(choice["chosen"]), zeta_mean_test_accuracy=choice["mean"][choice["percentile"]],
                             authors_pool_copied=int(c["n_selected"]) <= AUTHORS_SMALL_POOL)
            out.append(v)
    return out


def with_finite_cp(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (``records_frame`` rows) with ``cp_nonzero`` (CP over the clients whose accuracy is
    not 0, :func:`fedlib.evaluation.client_parity` ``zero='exclude'``) and ``n_zero`` (how many
    clients score 0), from each run's local accuracies; NaN for a run without them."""
    out = df.copy()
    cp, n0 = [], []
    for acc, status in zip(out.get("local_accuracy", pd.Series([None] * len(out), index=out.index)), out.status):
        if status != "ok" or not isinstance(acc, (list, tuple, np.ndarray)):
            cp.append(np.nan)
            n0.append(np.nan)
            continue
        a = np.asarray(acc, dtype=np.float64)
        cp.append(client_parity(a, zero="exclude"))
        n0.append(float(np.sum(a == 0)))
    out["cp_nonzero"], out["n_zero"] = cp, n0
    return out


def fairness_table(df: pd.DataFrame) -> pd.DataFrame:
    """CP (``cp``: inf when a client scores 0; ``cp_nonzero``, with ``n_zero`` clients at 0 left
    out), AD and SDAD against the CL accuracy (PSI-PFL's definitions) per setting and method,
    means over seeds (``records_frame`` rows)."""
    ok = with_finite_cp(df[(df.status == "ok") & (df.method != "cl")])
    cols = ["cp", "cp_nonzero", "n_zero", "ad_cl", "sdad_cl", "global_accuracy"]
    return ok.groupby(SETTING_KEYS + ["method"], sort=False)[cols].mean().reset_index()


def fig7_ecdfs(df: pd.DataFrame, n_clients: int) -> plt.Figure:
    """Fig. 7: ECDF of the clients' local accuracy per method (seeds pooled), one panel per
    (dataset, α) at K = ``n_clients``; CL (the target) dashed, PSI-PFL black."""
    ok = df[(df.status == "ok") & (df.n_clients == n_clients)]
    panels = ok[["dataset", "level"]].drop_duplicates().sort_values(["dataset", "level"],
                                                                     ascending=[True, False]).values.tolist()
    methods = method_order(ok.method)
    fig, axes = plt.subplots(1, len(panels), figsize=(3.9 * len(panels), 3.7), squeeze=False)
    for ax, (ds, level) in zip(axes[0], panels):
        ecdf_panel(ax, ok[(ok.dataset == ds) & (ok.level == level)], methods, METHOD)
        ax.set_title(f"{ds}, α={level:g}, K={n_clients}")
    method_legend(fig, methods, marker=None, ncol=6, proposed=METHOD)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    return fig


def _federated(methods) -> list:
    return [m for m in methods if m not in REFERENCES and m != METHOD and m != PAPER_VARIANT]


def _label(variant: str) -> str:
    about = " — the paper's statement is about this variant" if variant == PAPER_VARIANT else ""
    return f"[{VARIANTS[variant]}{about}]"


def observations(df: pd.DataFrame, cands: pd.DataFrame) -> tuple[list[str], dict]:
    """Whether the paper's Observations 2–4 hold in these runs, each on both PSI-PFL variants.

    Observation 2: the best threshold is a Low or Medium-low one (10th/25th percentile) in every
    (dataset, α, K) — for the paper's variant the best by mean test accuracy over seeds (Fig. 5),
    for ours the best by mean validation accuracy (what selects ζ here). Observation 3: the
    variant's global accuracy (mean over seeds) is at least every federated baseline's in every
    setting. Observation 4: at the most heterogeneous α of each (dataset, K), the variant has
    the smallest AD against CL among the federated methods. All three speak about the paper's
    test-selected variant (module docstring); a variant without rows in ``df`` is left out.

    Parameters
    ----------
    df : ``records_frame`` rows, with the :func:`paper_variant_records` rows for the paper's variant
    cands : :func:`candidates_frame`

    Returns
    -------
    (lines, frames): one verdict sentence per observation × variant (the paper's variant first),
    and the per-setting tables behind them (``obs2``, ``obs3``, ``obs4``, a ``variant`` column each);
    accuracies and AD in percent, margins in percentage points (CP a ratio), in lines and frames.
    """
    lines, frames = [], {}
    keys = ["dataset", "level", "n_clients"]
    present = [v for v in VARIANTS if v in set(df.method)] if len(df) else []
    obs2 = []
    for variant, score in ((PAPER_VARIANT, "test_accuracy"), (METHOD, "val_accuracy")):
        if variant not in present or cands.empty or cands[score].isna().all():
            continue
        mean = cands.groupby(keys + ["percentile"])[score].mean().reset_index()  # sorted by percentile
        best = mean.loc[mean.groupby(keys)[score].idxmax()].copy()  # ties: the lower percentile
        best[score] = 100.0 * best[score]  # percent, the readers' unit
        best = best.rename(columns={"percentile": "best_percentile", score: "best_" + score})
        best.insert(0, "variant", variant)
        obs2.append(best.reset_index(drop=True))
        k = int(best.best_percentile.isin(LOW_PERCENTILES).sum())
        by = "mean test accuracy" if variant == PAPER_VARIANT else "mean validation accuracy"
        lines.append(f"Observation 2 {_label(variant)} (Low/Medium-low ζ give the highest global accuracy): "
                     f"the best ζ by {by} is the 10th or 25th percentile in {k}/{len(best)} (dataset, α, K) "
                     f"settings: {_verdict(k, len(best))}.")
    frames["obs2"] = pd.concat(obs2, ignore_index=True) if obs2 else pd.DataFrame()
    ok = df[df.status == "ok"]
    acc = ok.groupby(SETTING_KEYS + ["method"]).global_accuracy.mean().unstack("method") if len(ok) else pd.DataFrame()
    obs3 = []
    for variant in present:
        rows = []
        for setting, row in acc.iterrows():
            base = row[_federated(row.dropna().index)]
            if variant not in row or pd.isna(row[variant]) or base.empty:
                continue
            rows.append({"variant": variant, **dict(zip(SETTING_KEYS, setting)), "psi_pfl": 100.0 * row[variant],
                         "best_baseline": base.idxmax(), "best_baseline_accuracy": 100.0 * base.max(),
                         "margin": 100.0 * (row[variant] - base.max())})
        o = pd.DataFrame(rows)
        obs3.append(o)
        k = int((o.margin >= 0).sum()) if len(o) else 0
        lines.append(f"Observation 3 {_label(variant)} (PSI-PFL ≥ every baseline's global accuracy): holds in "
                     f"{k}/{len(o)} settings: {_verdict(k, len(o))}"
                     + (f" (margin from {o.margin.min():+.2f} to {o.margin.max():+.2f} pp)." if len(o) else "."))
    frames["obs3"] = pd.concat(obs3, ignore_index=True) if obs3 else pd.DataFrame()
    fair = fairness_table(df) if len(ok) else pd.DataFrame(columns=SETTING_KEYS + ["method"])
    obs4 = []
    for variant in present:
        rows = []
        for (ds, kk), g in fair.groupby(["dataset", "n_clients"]):
            g = g[g.level == g.level.min()].set_index("method")
            base = g.loc[_federated(g.index)]
            if variant not in g.index or base.empty:
                continue
            rows.append({"variant": variant, "dataset": ds, "n_clients": kk, "level": g.level.iloc[0],
                         "psi_pfl_ad_cl": 100.0 * g.loc[variant, "ad_cl"],
                         "psi_pfl_sdad_cl": 100.0 * g.loc[variant, "sdad_cl"],
                         "psi_pfl_cp": g.loc[variant, "cp"], "psi_pfl_cp_nonzero": g.loc[variant, "cp_nonzero"],
                         "best_baseline": base.ad_cl.idxmin(), "best_baseline_ad_cl": 100.0 * base.ad_cl.min()})
        o = pd.DataFrame(rows)
        obs4.append(o)
        k = int((o.psi_pfl_ad_cl <= o.best_baseline_ad_cl).sum()) if len(o) else 0
        lines.append(f"Observation 4 {_label(variant)} (smallest AD from CL at the most heterogeneous α here): "
                     f"holds in {k}/{len(o)} (dataset, K) settings: {_verdict(k, len(o))}"
                     + (f" (PSI-PFL's AD {o.psi_pfl_ad_cl.min():.2f}–{o.psi_pfl_ad_cl.max():.2f} %; the paper's "
                        f"{100 * PAPER_EQ3[(PAPER_VARIANT, 'ad_cl')]:.2f} % is compared at its own setting by "
                        f"paper_comparison)." if len(o) else "."))
    frames["obs4"] = pd.concat(obs4, ignore_index=True) if obs4 else pd.DataFrame()
    order = {"2": 0, "3": 1, "4": 2}
    lines.sort(key=lambda line: order[line.split()[1]])  # stable: the paper's variant first per observation
    return lines, frames


def paper_comparison(df: pd.DataFrame, level: float = PAPER_MOST_HETEROGENEOUS["level"],
                     n_clients: int = PAPER_MOST_HETEROGENEOUS["n_clients"]) -> pd.DataFrame:
    """PSI-PFL §4.3's quoted values (:data:`PAPER_EQ3`) beside ours at Dirichlet α = ``level``,
    K = ``n_clients`` (default: the paper's most heterogeneous setting), per dataset.

    Parameters
    ----------
    df : ``records_frame`` rows, with the :func:`paper_variant_records` rows
    level, n_clients : the setting ours is read at

    Returns
    -------
    DataFrame, one row per (dataset, method, metric): ``unit`` ("%" for AD and SDAD, the
    readers' unit, as the report prints them; "ratio" for CP), ``paper``, ``ours`` (mean over seeds; NaN
    where no run of that setting exists here), ``n_seeds``, and for CP ``ours_cp_inf`` (the
    records' ``cp``, inf when a client scores 0) beside ``ours`` (``cp_nonzero``) and ``n_zero``
    (mean number of clients at 0). A PSI-PFL row is added for our validation-selected variant
    under each of the paper's PSI-PFL metrics. ``dataset`` is "—" when ``df`` has no rows.
    """
    datasets = sorted(df.dataset.unique()) if len(df) else ["—"]
    here = df[(df.status == "ok") & (df.level == level) & (df.n_clients == n_clients)] if len(df) else df
    here = with_finite_cp(here) if len(here) else here
    wanted = list(PAPER_EQ3.items())
    wanted += [((METHOD, metric), np.nan) for (m, metric), _ in PAPER_EQ3.items() if m == PAPER_VARIANT]
    rows = []
    for ds in datasets:
        for (method, metric), paper in wanted:
            g = here[(here.dataset == ds) & (here.method == method)] if len(here) else here
            col = "cp_nonzero" if metric == "cp" else metric
            scale = 1.0 if metric == "cp" else 100.0  # AD, SDAD in percent; CP is a ratio
            row = {"dataset": ds, "setting": f"α={level:g}, K={n_clients}", "method": method,
                   "metric": {"ad_cl": "AD vs CL", "sdad_cl": "SDAD vs CL", "cp": "CP"}[metric],
                   "unit": "ratio" if metric == "cp" else "%",
                   "paper": scale * paper, "ours": scale * float(g[col].mean()) if len(g) else np.nan,
                   "n_seeds": len(g)}
            if metric == "cp":
                row["ours_cp_inf"] = float(g["cp"].mean()) if len(g) else np.nan
                row["n_zero"] = float(g["n_zero"].mean()) if len(g) else np.nan
            rows.append(row)
    return pd.DataFrame(rows)


def threshold_ties(records) -> pd.DataFrame:
    """Whether reading the text's "PSI below ζ" as PSI < ζ instead of the code's PSI ≤ ζ changes
    a candidate's selection, for every candidate of every ``psi_pfl`` record
    (:func:`fedlib.methods.psi_pfl.rule_changes` on the record's ``info['psi']``).

    Returns
    -------
    DataFrame, one row per (run, candidate): the setting, seed, ``percentile``, ``threshold``,
    ``n_le``, ``n_lt``, ``n_at`` (clients with PSI = ζ), ``changed``, and ``same_zeta_as``: the
    lower percentile with the same ζ (the two candidates train the same clients), else NaN.
    """
    rows = []
    for key, r in _finished_runs(records):
        info = r["info"]
        cands = sorted(info["candidates"], key=lambda c: c["percentile"])
        seen = {}
        for c, ch in zip(cands, rule_changes(info["psi"], [c["threshold"] for c in cands])):
            rows.append({**key, "percentile": c["percentile"], **ch,
                         "same_zeta_as": seen.get(c["threshold"], np.nan)})
            seen.setdefault(c["threshold"], c["percentile"])
    return pd.DataFrame(rows)


def threshold_tie_lines(ties: pd.DataFrame) -> list[str]:
    """One sentence per (dataset, α, K) of :func:`threshold_ties` rows (seed pooled): how many
    candidates the < reading changes, and which percentiles share ζ."""
    lines = []
    if ties.empty:
        return ["no psi_pfl runs"]
    for (ds, level, k), g in ties.groupby(["dataset", "level", "n_clients"], sort=False):
        changed = g[g.changed]
        what = ", ".join(f"p{p:g} ({a} → {b} clients)" for p, a, b in zip(changed.percentile, changed.n_le,
                                                                         changed.n_lt)) or "none"
        same = g.dropna(subset=["same_zeta_as"])
        twins = ", ".join(sorted({f"p{a:g} = p{b:g}" for a, b in zip(same.same_zeta_as, same.percentile)}))
        lines.append(f"{ds} α={level:g} K={k}: PSI < ζ instead of ≤ ζ changes {len(changed)}/{len(g)} candidate "
                     f"selections: {what}" + (f"; identical ζ: {twins}" if twins else ""))
    return lines


def _verdict(k: int, n: int) -> str:
    return "no settings" if n == 0 else "confirmed" if k == n else "partly confirmed" if k else "not confirmed"
