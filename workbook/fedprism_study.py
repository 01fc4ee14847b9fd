"""What notebook 09 shows of FedPrism (Kumbhakar et al.): the FMNIST columns of Tables 1, 6
and 7 (FedPrism, FedAvg, IFCA, FedClust, FedAMP, FedCFL, Local; global and local accuracy),
the FMNIST ablations of Tables 9–11, and the partition of Appendix Fig. 6 — with the paper's
values beside ours.

Accuracy definitions (per run, over its K clients)
--------------------------------------------------
local accuracy   mean over clients of each client's accuracy on its own held-out test split
                 (20 % of its partition, so drawn from the client's own class distribution),
                 through the method's predictor (FedPrism: expert/backbone mixture).
                 FedPrism's paper partitions the official test set with each client's class
                 proportions instead; both measure accuracy on the client's distribution,
                 ours trains on the other 80 % of the client's share of the training pool.
                 (Clust-PSI-PFL's "global accuracy" is the sample-weighted version of this,
                 the workbook's "weighted local accuracy".)
official-test accuracy (the paper's "global accuracy", its Glob columns)
                 mean over clients of each client's model on the full official test set
                 (``RunSpec(global_test=True)``, record field ``global_test_accuracy``);
                 FedPrism: the client's backbone (the mixture is not used: the paper's global
                 column hardly moves with the expert weight). Names: :mod:`fedlib.evaluation`.
parameter-average accuracy (a second reading of Glob, the column "Glob, param. avg")
                 the uniform parameter average of the distinct models the clients use, on the
                 official test set (record field ``param_average_accuracy``): how public code
                 by one of the paper's authors scored FedClust's global accuracy, which explains
                 Table 1's exact 10.00 % for FedClust and CFL (a one-class predictor).

Partition
---------
The grids take the partition protocol as ``partition`` (default :data:`PARTITION`, the paper's
§4.2 rule :func:`fedlib.partition.dirichlet_client`: a class mix p_i ~ Dir(α·1) per client,
equal client sizes). ``'dirichlet'`` (:func:`fedlib.partition.dirichlet`, NIID-Bench's split of
each class over the clients, with unequal client sizes) stays selectable; the paper does not use it.
"""
from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fedlib import partition as P
from fedlib import records as R
from fedlib.experiment import RunSpec, grid_specs
from fedlib.frame import records_frame
from fedlib.methods import cfl, display_name, fedamp
from fedlib.paths import ROOT
from .tables import mean_sd, frame_markdown as table_markdown
from fedlib.validation import check_choice, check_int, check_number, fail
from . import paper_values

__all__ = ["main_numbers", "PARTITION", "PARTITIONS", "PAPER_MAIN", "PAPER_TABLE9", "PAPER_TABLE10", "PAPER_TABLE11", "NOT_RUN_HERE", "METHODS",
           "CFL_PAPER", "FEDAMP_ATTENTIONS", "CLIP_NAMES", "PAPER_RECORDS", "alpha_gamma_table", "private_part_lines", "local_epochs_total", "training_specs", "ablation_specs", "GRID_PARAMS", "notebook_grid", "grid_label", "accuracy_frame", "variant_of",
           "method_label", "fedamp_sigma_label",
           "main_table", "ablation_table", "weight_sweep_table", "observations", "training_labels", "partition_preview",
           "total_variation", "mix_drift", "mix_drift_lines", "fig_partition", "table_markdown"]

METHODS = ["fedprism", "fedavg", "ifca", "fedclust", "fedamp", "cfl", "local"]  # Table 1's rows


def _main_tables(*names: str) -> dict:
    """Tables 1, 6 and 7 of workbook/papers/fedprism.yaml as {data set: {α: {method: (Glob, Loc)}}}:
    each column is (data set, α, glob | loc), each row a method of :data:`METHODS`."""
    out: dict = {}
    for name in names:
        cols = paper_values.column_labels("fedprism", name)
        for method, cells in paper_values.rows("fedprism", name).items():
            if method not in METHODS:
                fail(f"fedprism.yaml: tables.{name} row", f"one of {METHODS}", method)
            got = {}
            for (ds, alpha, kind), v in zip(cols, cells):
                got.setdefault((ds, alpha), {})[kind] = v
            for (ds, alpha), v in got.items():
                out.setdefault(ds, {}).setdefault(alpha, {})[method] = (v["glob"], v["loc"])
    return out
# (Glob, Loc) in %, as printed — Table 1 (Dirichlet α = 0.1), Table 6 (α = 0.3), Table 7 (α = 0.5);
# data sets SVHN, FMNIST, CIFAR-10, CIFAR-100 (only FMNIST is available offline); FMNIST, α = 0.1:
# Table 9 (components), Table 10 (fixed expert weight), Table 11 (global weight α). The values:
# workbook/papers/fedprism.yaml (workbook.paper_values).
PAPER_MAIN = _main_tables("table1", "table6", "table7")
"""data set -> Dirichlet α -> method (:data:`METHODS` order) -> (Glob, Loc) in %."""
PAPER_TABLE9 = paper_values.rows("fedprism", "table9")
PAPER_TABLE10 = paper_values.rows("fedprism", "table10")
PAPER_TABLE11 = paper_values.rows("fedprism", "table11")
PAPER_RECORDS = {table: ROOT / "benchmarks" / "records" / "fedprism" / table for table in ("table1", "table9")}
"""The committed paper-protocol records (``benchmarks/paper_grid.py``), read by notebook 09 and the
reproduction report without retraining."""
NOT_RUN_HERE = {"svhn": "SVHN", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}
# FedPrism states no CFL thresholds (and has no public code): its CFL row is read at Clust-PSI-PFL's
# Table II (the cfl module's defaults; workbook/papers/clust_psi_pfl.yaml, block table2_cfl), labelled
# as such; other thresholds are rows of their own.
CFL_PAPER = {k: v for k, (v,) in paper_values.rows("clust_psi_pfl", "table2_cfl").items()}
CFL_PAPER_SOURCE = "Clust-PSI-PFL's Table II; FedPrism states none"
PARTITION = "dirichlet_client"  # §4.2: p_i ~ Dir(α·1) per client (fedlib.partition.dirichlet_client)
PARTITIONS = tuple(p for p, spec in P.PROTOCOLS.items() if spec.level_name == "alpha")  # protocols whose level is α
CLIP_NAMES = {"simplex": "[0, 1 − β] (the workbook's default: γ ≥ 0)", "paper": "[0, 1] (Alg. 2, line 30)"}
COMPONENT_NAMES = {"full": "Full FedPrism", "global": "Pure Global", "cluster": "Pure Cluster",
                   "global_cluster": "Global + Cluster (no private)", "private": "Pure Private"}


# ----------------------------------------------------------------------------- the grids
def local_epochs_total(fl: dict) -> int:
    """Local-only's epochs: R·C·E, what a client trains on average under FedPrism's protocol
    (100·0.1·10 = 100 in the paper's), rounded, at least 1."""
    r, c, e = fl.get("rounds", 40), fl.get("fraction", 0.5), fl.get("local_epochs", 5)
    return max(1, int(round(r * c * e)))


def _check_partition(partition: str) -> str:
    """A partition protocol whose level is a Dirichlet α (:data:`PARTITIONS`)."""
    return check_choice(partition, "partition", PARTITIONS)


def _fedprism_protocol(specs, arch: str, n_global_test: int | None) -> list[RunSpec]:
    return [dataclasses.replace(s, arch=arch, global_test=True, n_global_test=n_global_test) for s in specs]


def training_specs(alphas, n_clients: int, seeds, fl: dict, *, hyper: dict | None = None, n_train=None,
                   methods=None, arch: str = "lenet5", dataset: str = "fmnist",
                   n_global_test: int | None = None, cfl_variants=(), fedamp_variants=(),
                   partition: str = PARTITION) -> list[RunSpec]:
    """Tables 1/6/7 on one data set: ``methods`` (default :data:`METHODS`) × Dirichlet ``alphas`` ×
    ``seeds`` under the ``partition`` protocol (default :data:`PARTITION`, the paper's; module
    docstring), LeNet-5, the official test set (or its stratified ``n_global_test`` subset)
    evaluated. Local-only trains :func:`local_epochs_total`
    epochs unless ``hyper['local']`` says otherwise. One more CFL run per dict of
    ``cfl_variants`` (its hyperparameters over ``hyper['cfl']``, e.g. ``{'eps1': 'auto'}``) when
    CFL is among ``methods``: a row of its own (:func:`method_label`); likewise one more FedAMP
    run per dict of ``fedamp_variants`` (e.g. ``{'attention': 'paper'}``, Huang et al.'s A′)."""
    partition = _check_partition(partition)
    hyper = {m: dict(v) for m, v in (hyper or {}).items()}
    hyper.setdefault("local", {}).setdefault("epochs", local_epochs_total(fl))
    methods = list(methods or METHODS)
    specs = grid_specs([dataset], {partition: list(alphas)}, [n_clients], list(seeds), methods,
                       hyper=hyper, fl=fl, n_train=n_train)
    for m, variants, example in (("cfl", cfl_variants, "{'eps1': 'auto'}"),
                                 ("fedamp", fedamp_variants, "{'attention': 'paper'}")):
        for v in variants if m in methods else ():
            if not isinstance(v, dict):
                fail(f"{m}_variants", f"a list of dicts of {display_name(m)} hyperparameters, e.g. [{example}]", v)
            specs += grid_specs([dataset], {partition: list(alphas)}, [n_clients], list(seeds), [m],
                                hyper={m: {**hyper.get(m, {}), **v}}, fl=fl, n_train=n_train)
    return _fedprism_protocol(specs, arch, n_global_test)


def ablation_specs(alpha: float, n_clients: int, seeds, fl: dict, *, components, global_weights,
                   hyper: dict | None = None, n_train=None, arch: str = "lenet5", dataset: str = "fmnist",
                   n_global_test: int | None = None, partition: str = PARTITION, alpha_clips=()):
    """Tables 9 and 11: FedPrism with each ablated ``components`` and each initial global weight
    α in ``global_weights`` (β fixed), at Dirichlet ``alpha`` under the ``partition`` protocol
    (default :data:`PARTITION`); and the full FedPrism under each clip of α in ``alpha_clips``
    other than the default (``'paper'``: Alg. 2's [0, 1], which lets γ = 1 − α − β go negative).
    Table 10 needs no runs: every FedPrism record holds its fixed-expert-weight sweep."""
    partition = _check_partition(partition)
    base = dict((hyper or {}).get("fedprism", {}))
    variants = ([{**base, "components": c} for c in components] + [{**base, "alpha": float(a)} for a in global_weights]
                + [{**base, "alpha_clip": c} for c in alpha_clips])
    specs = []
    for v in variants:
        specs += grid_specs([dataset], {partition: [alpha]}, [n_clients], list(seeds), ["fedprism"],
                            hyper={"fedprism": v}, fl=fl, n_train=n_train)
    return _fedprism_protocol(specs, arch, n_global_test)


GRID_PARAMS = ("dataset", "n_train", "n_global_test", "alphas", "partition", "n_clients", "seeds", "methods", "fl",
               "hyper", "cfl_variants", "fedamp_variants", "ablation_alpha", "components", "global_weights",
               "alpha_clips")
"""The parameters of notebook 09 (``params/*/09_fedprism.yaml``) that its grid depends on:
:func:`notebook_grid`'s keywords."""


def notebook_grid(*, dataset: str, n_train, n_global_test, alphas, partition: str, n_clients: int, seeds, methods,
                  fl: dict, hyper: dict, cfl_variants, ablation_alpha: float, components,
                  global_weights, fedamp_variants=(), alpha_clips=()) -> dict[str, list[RunSpec]]:
    """Notebook 09's grid from its parameters (:data:`GRID_PARAMS`), by table:

    * ``'table1'`` — Tables 1, 6, 7 (one α each): :func:`training_specs`, ``methods`` ×
      ``alphas`` × ``seeds`` and the ``cfl_variants`` and ``fedamp_variants`` rows;
    * ``'table9'`` — Table 9's ``components`` ablations at ``ablation_alpha``, and the full
      FedPrism under each of ``alpha_clips`` (the α/γ trace under Alg. 2's own clip);
    * ``'table11'`` — Table 11's initial global weights ``global_weights`` at ``ablation_alpha``
      (:func:`ablation_specs`).

    The full FedPrism run at ``ablation_alpha`` (in ``'table1'``) is the reference row of Tables
    9–11; Table 10 needs no runs of its own."""
    common = dict(hyper=hyper, n_train=n_train, dataset=dataset, n_global_test=n_global_test, partition=partition)
    return {
        "table1": training_specs(alphas, n_clients, seeds, fl, methods=methods, cfl_variants=cfl_variants,
                                 fedamp_variants=fedamp_variants, **common),
        "table9": ablation_specs(ablation_alpha, n_clients, seeds, fl, components=components, global_weights=[],
                                 alpha_clips=alpha_clips, **common),
        "table11": ablation_specs(ablation_alpha, n_clients, seeds, fl, components=[],
                                  global_weights=global_weights, **common),
    }


# ----------------------------------------------------------------------------- records → frames
def variant_of(spec: dict) -> str:
    """A FedPrism record's ablation: 'full', a component name, 'alpha=<a>', or 'clip=<rule>'
    (the full FedPrism under another clip of α)."""
    h = spec.get("hyper", {})
    if h.get("components", "full") != "full":
        return h["components"]
    if h.get("alpha_clip", "simplex") != "simplex":
        return f"clip={h['alpha_clip']}"
    if "alpha" in h and float(h["alpha"]) != 0.9:
        return f"alpha={float(h['alpha']):g}"
    return "full"


FEDAMP_ATTENTIONS = {"paper": "Huang et al.'s attention A′(x) = e^(−x/σ)/σ",
                     "softmax": "the workbook's softmax over −‖wᵢ − wⱼ‖²/σ, not the paper's"}
"""FedAMP's attention rules other than the default HeurFedAMP (the paper's rule for deep
networks), as their rows are named. A record whose spec has no ``attention`` ran ``softmax``
(:func:`fedlib.records.with_recorded_defaults`)."""


def method_label(spec: dict) -> str:
    """The row name of a run: its method, and CFL's thresholds when they are not
    :data:`CFL_PAPER`, e.g. ``'cfl (ε1 = auto (defective, superseded; 0.5 × warm-up update), ε2 = 0.1, γ = 0.5)'``, or
    FedAMP's attention when it is not the default HeurFedAMP (:data:`FEDAMP_ATTENTIONS`; a
    record's spec is read as the attention it ran), and HeurFedAMP's σ when it is not the
    default per-round σ (:func:`fedamp_sigma_label`: every record before issue 69 ran σ = 1)."""
    if spec["method"] == "cfl" and cfl.thresholds(spec.get("hyper", {})) != cfl.thresholds(CFL_PAPER):
        return f"cfl ({cfl.thresholds_label(spec.get('hyper', {}))})"
    hyper = R.with_recorded_defaults(spec).get("hyper") or {}
    attention = hyper.get("attention", "heurfedamp")
    if spec["method"] == "fedamp" and attention != "heurfedamp":
        return f"fedamp ({FEDAMP_ATTENTIONS[attention]})"
    if spec["method"] == "fedamp" and hyper.get("sigma", fedamp.SIGMA_MEDIAN) != fedamp.SIGMA_MEDIAN:
        return f"fedamp ({fedamp_sigma_label(hyper)})"
    return spec["method"]


def fedamp_sigma_label(hyper: dict) -> str:
    """HeurFedAMP's σ reading as rows name it (issue 69): ``'σ = 1 (near-uniform attention)'``
    for the records before issue 69, FLGo's ``'σ = 25, ξ = 1/N (FLGo)'``, or ``'σ = …'``."""
    sigma, xi = hyper.get("sigma", fedamp.SIGMA_MEDIAN), hyper.get("self_weight", 0.5)
    if sigma == fedamp.SIGMA_MEDIAN:
        return "σ = 1/median(1 − cos) per round"
    flgo = fedamp.READINGS["flgo"]
    if sigma == flgo["sigma"] and xi == flgo["self_weight"]:
        return "σ = 25, ξ = 1/N (FLGo)"
    tail = "" if xi == 0.5 else f", ξ = {xi}"
    return f"σ = {sigma:g}{tail}" + (" (near-uniform attention)" if sigma == 1 else "")


def grid_label(spec: RunSpec) -> str:
    """A run's row as the grid command's progress lines print it (``python -m fedlib.grid
    fedprism-table1``, ``-table9``, ``-table11``): FedPrism with its ablation
    (``'fedprism (full)'``, :func:`variant_of`), another method by :func:`method_label`."""
    d = spec.to_dict()
    return f"fedprism ({variant_of(d)})" if spec.method == "fedprism" else method_label(d)


def _display(label: str) -> str:
    if label == "cfl":
        return f"{display_name('cfl')} (FedCFL; {cfl.thresholds_label(CFL_PAPER)}: {CFL_PAPER_SOURCE})"
    base, _, rest = label.partition(" ")
    return display_name(base) + (f" {rest}" if rest else "")


def accuracy_frame(records) -> pd.DataFrame:
    """One row per run: method (:func:`method_label`), variant, level (Dirichlet α), seed, status, ``local`` and
    ``global`` accuracy in % (module docstring), ``param_average`` (the parameter-average accuracy,
    %, :mod:`fedlib.evaluation`; NaN for FedPrism's mixture and records made before it existed),
    ``global_model`` (FedPrism's G alone, %),
    ``seconds``; FedPrism rows carry ``sweep``: fixed expert weight → local accuracy (%); CFL rows
    ``never_split`` (:func:`fedlib.methods.cfl.never_split` of the record)."""
    rows = []
    for r in records:
        s = r["spec"]
        row = {"method": method_label(s), "variant": variant_of(s) if s["method"] == "fedprism" else "",
               "level": s["level"], "n_clients": s["n_clients"], "seed": s["seed"], "status": r["status"],
               "seconds": r.get("seconds", np.nan)}
        if r["status"] == "ok":
            acc = np.asarray(r["local_accuracy"], float)
            row["local"] = 100 * float(np.nanmean(acc))
            if s["method"] == "cfl":
                row["never_split"] = cfl.never_split(r.get("info"))
            row["global"] = 100 * float(r["global_test_accuracy"]) if "global_test_accuracy" in r else np.nan
            row["param_average"] = (100 * float(r["param_average_accuracy"]) if "param_average_accuracy" in r
                                    else np.nan)
            info = r.get("info", {})
            row["global_model"] = 100 * info["global_model_accuracy"] if "global_model_accuracy" in info else np.nan
            n = np.asarray(r["n_test"], float)
            sweep = info.get("expert_weight_sweep")
            if sweep:
                row["sweep"] = {float(w): 100 * float(np.nanmean(np.asarray(c, float) / np.where(n > 0, n, np.nan)))
                                for w, c in sweep.items()}
        rows.append(row)
    df = pd.DataFrame(rows)
    for col in ("local", "global", "param_average", "global_model", "never_split"):
        if col not in df:
            df[col] = np.nan
    return df


def alpha_gamma_table(records, every: int = 10) -> pd.DataFrame:
    """α and γ = 1 − α − β of FedPrism's full runs over the rounds (``info['alpha_trace']``),
    every ``every`` rounds and the last: one row per (clip of α, round), over the clients and
    the seeds: mean α, the largest α, mean γ, the smallest γ, and the share of clients whose α
    sits at its cap (1 − β under the default clip, where γ = 0 and the private part P_i has no
    weight in the backbone)."""
    check_int(every, "every", 1)
    f = records_frame(records)
    runs = f[(f.status == "ok") & (f.method == "fedprism")].record if len(f) else []
    rows = []
    for r in runs:
        s = r["spec"]
        if variant_of(s) not in ("full", "clip=paper"):
            continue
        clip = s.get("hyper", {}).get("alpha_clip", "simplex")
        trace = r.get("info", {}).get("alpha_trace") or []
        last = max((t["round"] for t in trace), default=0)
        rows += [{"clip": clip, "seed": s["seed"], **t} for t in trace if t["round"] % every == 0 or t["round"] == last]
    if not rows:
        return pd.DataFrame(columns=["α clip", "round", "seeds", "α mean", "α max", "γ mean", "γ min", "share at cap"])
    df = pd.DataFrame(rows)
    out = df.groupby(["clip", "round"]).agg(seeds=("seed", "nunique"), a_mean=("alpha_mean", "mean"),
                                            a_max=("alpha_max", "max"), g_mean=("gamma_mean", "mean"),
                                            g_min=("gamma_min", "min"), cap=("at_cap", "mean")).reset_index()
    out["clip"] = out["clip"].map(lambda c: CLIP_NAMES.get(c, c))
    out.columns = ["α clip", "round", "seeds", "α mean", "α max", "γ mean", "γ min", "share at cap"]
    out = out.round({"α mean": 4, "α max": 4, "γ mean": 4, "γ min": 4, "share at cap": 2})
    return out.apply(lambda c: c + 0.0 if c.dtype.kind == "f" else c)  # no "-0.0" after rounding


def private_part_lines(records) -> list[str]:
    """Whether FedPrism's private part P_i enters the backbone, computed from the records: per
    clip of α, the largest mean γ = 1 − α − β and the smallest γ over the rounds (traces of the
    full runs), then the full FedPrism beside Table 9's run without P (global + cluster)."""
    t = alpha_gamma_table(records, every=1)
    lines = []
    for clip, g in t.groupby("α clip", sort=False):
        last = g[g["round"] == g["round"].max()]
        lines.append(f"α clipped to {clip}: P_i's weight γ = 1 − α − β averages at most {g['γ mean'].max():.4f} "
                     f"over the clients in any round, {last['γ mean'].iloc[0]:.4f} in the last (smallest γ of any "
                     f"client {g['γ min'].min():.4f}; {int(g['round'].max())} rounds, {int(g.seeds.max())} seed(s))")
    df = accuracy_frame(records)
    ok = df[(df.method == "fedprism") & (df.status == "ok")]
    for level in sorted(set(ok.level[ok.variant == "global_cluster"])):  # Table 9's α: the same partitions
        at = ok[np.isclose(ok.level, level)]
        no_p = at[at.variant == "global_cluster"]
        for variant in ("full", "clip=paper"):
            full = at[at.variant == variant]
            if len(full):
                name = "full FedPrism" + ("" if variant == "full" else f", α clipped to {CLIP_NAMES['paper']},")
                lines.append(f"α_Dir = {level:g}: {name} vs without P (global + cluster): Loc "
                             f"{_cell(full['local'])} vs {_cell(no_p['local'])}, Glob {_cell(full['global'])} vs "
                             f"{_cell(no_p['global'])}")
    return lines


def _cell(values) -> str:
    return mean_sd(values)


def main_table(df: pd.DataFrame, methods=None, dataset: str = "fmnist") -> pd.DataFrame:
    """Tables 1/6/7: per method and α, ours (Glob, Loc: mean ± std over seeds) and the paper's
    column for ``dataset`` ('svhn', 'fmnist', 'cifar10', 'cifar100'); runs that failed or were
    infeasible show their status. CFL runs at other thresholds than :data:`CFL_PAPER` follow
    the CFL row, without the paper's values; a CFL cell whose runs never split says so
    ("(CFL never split)", :func:`fedlib.methods.cfl.split_note`)."""
    paper_ds = _paper_columns(dataset)
    rows = []
    main = df[(df.method != "fedprism") | (df.variant == "full")]
    labels = []
    for m in methods or METHODS:
        labels += [m] + (sorted(x for x in set(main.method) if x.startswith(m + " (")) if m in ("cfl", "fedamp")
                         else [])
    for m in labels:
        row = {"Method": _display(m)}
        for a in sorted(main.level.unique()):
            g = main[(main.method == m) & (main.level == a)]
            ok = g[g.status == "ok"]
            bad = sorted(set(g.status) - {"ok"})
            paper = paper_ds.get(round(a, 6), {}).get(m, (np.nan, np.nan))
            row[f"α={a:g} Glob"] = _cell(ok["global"]) if not bad else "/".join(bad)
            row[f"α={a:g} Glob, param. avg"] = _cell(ok["param_average"]) if not bad else "/".join(bad)
            row[f"α={a:g} Glob (paper)"] = "—" if np.isnan(paper[0]) else f"{paper[0]:.2f}"
            row[f"α={a:g} Loc"] = _cell(ok["local"]) if not bad else "/".join(bad)
            row[f"α={a:g} Loc (paper)"] = "—" if np.isnan(paper[1]) else f"{paper[1]:.2f}"
            note = cfl.split_note(ok.never_split) if m.startswith("cfl") and not bad and len(ok) else ""
            if note:
                for col in (f"α={a:g} Glob", f"α={a:g} Glob, param. avg", f"α={a:g} Loc"):
                    row[col] += f" ({note})"
        rows.append(row)
    return pd.DataFrame(rows)


def main_numbers(df: pd.DataFrame, methods=None, dataset: str = "fmnist") -> pd.DataFrame:
    """:func:`main_table`'s numbers for its CSV, one row per (method, α, column): ``method``
    (display name, as the table), ``alpha``, ``column`` ("Glob", "Glob, param. avg", "Loc"),
    ``mean``, ``sd`` (population, over seeds), ``n`` (seeds that finished), ``paper`` (the
    paper's value; NaN where it has none), all in percent; ``status`` ("ok", or the runs'
    non-ok statuses joined by "/", with NaN numbers) and ``note`` (e.g. "CFL never split").
    Numbers only: no formatted "mean ± sd" string."""
    paper_ds = _paper_columns(dataset)
    main = df[(df.method != "fedprism") | (df.variant == "full")]
    labels = []
    for m in methods or METHODS:
        labels += [m] + (sorted(x for x in set(main.method) if x.startswith(m + " (")) if m in ("cfl", "fedamp")
                         else [])
    rows = []
    for m in labels:
        for a in sorted(main.level.unique()):
            g = main[(main.method == m) & (main.level == a)]
            ok = g[g.status == "ok"]
            bad = "/".join(sorted(set(g.status) - {"ok"}))
            paper = paper_ds.get(round(a, 6), {}).get(m, (np.nan, np.nan))
            note = cfl.split_note(ok.never_split) if m.startswith("cfl") and not bad and len(ok) else ""
            for column, field, p in (("Glob", "global", paper[0]), ("Glob, param. avg", "param_average", np.nan),
                                     ("Loc", "local", paper[1])):
                v = np.asarray([] if bad else ok[field].dropna(), float)
                rows.append({"method": _display(m), "alpha": a, "column": column,
                             "mean": v.mean() if v.size else np.nan, "sd": v.std() if v.size else np.nan,
                             "n": int(v.size), "paper": p, "status": bad or "ok", "note": note})
    return pd.DataFrame(rows, columns=["method", "alpha", "column", "mean", "sd", "n", "paper", "status", "note"])


def ablation_table(df: pd.DataFrame, alpha: float, table: int) -> pd.DataFrame:
    """Table 9 (components) or Table 11 (initial global weight α) at Dirichlet ``alpha``: ours
    (Glob, Loc) beside the paper's. The full run (α = 0.9) serves both tables."""
    fp = df[(df.method == "fedprism") & (np.isclose(df.level, alpha)) & (df.status == "ok")]
    rows = []
    if table == 9:
        clips = sorted(v for v in set(fp.variant) if v.startswith("clip="))
        for c in ["full", "global", "cluster", "global_cluster", "private", *clips]:
            g = fp[fp.variant == c]
            paper = PAPER_TABLE9.get(c, (np.nan, np.nan))
            name = COMPONENT_NAMES.get(c) or f"Full FedPrism, α clipped by {CLIP_NAMES[c.split('=', 1)[1]]}"
            rows.append({"Configuration": name, "Glob": _cell(g["global"]), "Glob (paper)": paper[0],
                         "Loc": _cell(g["local"]), "Loc (paper)": paper[1]})
    elif table == 11:
        for a, paper in PAPER_TABLE11.items():
            g = fp[fp.variant == ("full" if a == 0.9 else f"alpha={a:g}")]
            rows.append({"α": a, "Glob": _cell(g["global"]), "Glob (paper)": paper[0], "Loc": _cell(g["local"]),
                         "Loc (paper)": paper[1]})
    else:
        fail("table", "9 or 11 (Table 10 is weight_sweep_table)", table)
    return pd.DataFrame(rows)


def weight_sweep_table(df: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Table 10 from the full FedPrism runs' recorded sweep: local accuracy per fixed expert
    weight (global: the backbone's, the same for every weight), the paper's beside."""
    fp = df[(df.method == "fedprism") & (df.variant == "full") & np.isclose(df.level, alpha) & (df.status == "ok")]
    rows = []
    for w, paper in PAPER_TABLE10.items():
        loc = [s.get(w, np.nan) for s in fp["sweep"]] if "sweep" in fp else []
        rows.append({"Local expert weight": w, "Glob": _cell(fp["global"]), "Glob (paper)": paper[0],
                     "Loc": _cell(loc), "Loc (paper)": paper[1]})
    return pd.DataFrame(rows)


def _paper_columns(dataset: str) -> dict:
    if dataset not in PAPER_MAIN:
        fail("dataset", f"one of the paper's data sets {sorted(PAPER_MAIN)}", dataset)
    return PAPER_MAIN[dataset]


def observations(df: pd.DataFrame, dataset: str = "fmnist") -> list[str]:
    """The paper's claims on ``dataset``, each computed from these runs (mean over seeds)."""
    paper_ds = _paper_columns(dataset)
    ok = df[(df.status == "ok") & ((df.method != "fedprism") | (df.variant == "full"))]
    mean = ok.groupby(["method", "level"])[["local", "global"]].mean()
    lines = []

    def get(m, a, col):
        return mean[col].get((m, a), np.nan)

    for a in sorted(ok.level.unique()):
        fp_l, fa_l, lo_l = get("fedprism", a, "local"), get("fedavg", a, "local"), get("local", a, "local")
        fp_g, fa_g = get("fedprism", a, "global"), get("fedavg", a, "global")
        pa = paper_ds.get(round(a, 6), {})
        if not np.isnan(fp_l) and not np.isnan(fa_l) and pa:
            lines.append(f"α={a:g}: FedPrism local {fp_l:.2f} vs FedAvg {fa_l:.2f} — ahead: {fp_l > fa_l} "
                         f"(paper: {pa['fedprism'][1]:.2f} vs {pa['fedavg'][1]:.2f}, ahead: "
                         f"{pa['fedprism'][1] > pa['fedavg'][1]})")
        if not np.isnan(fp_l) and not np.isnan(lo_l) and pa:
            lines.append(f"α={a:g}: FedPrism local ≥ Local-only's ({fp_l:.2f} vs {lo_l:.2f}): {fp_l >= lo_l} "
                         f"(paper: {pa['fedprism'][1] >= pa['local'][1]})")
        if not np.isnan(fp_g) and not np.isnan(fa_g) and pa:
            lines.append(f"α={a:g}: FedPrism global within 5 points of FedAvg's ({fp_g:.2f} vs {fa_g:.2f}): "
                         f"{fa_g - fp_g <= 5} (paper: {pa['fedavg'][0] - pa['fedprism'][0] <= 5})")
        best = mean.xs(a, level="level")["local"].idxmax() if (ok.level == a).any() else None
        if best is not None and pa:
            paper_best = max(pa, key=lambda m: pa[m][1])
            lines.append(f"α={a:g}: best local accuracy: {_display(best)} "
                         f"(paper: {display_name(paper_best)})")
    return lines


# ----------------------------------------------------------------------------- Appendix Fig. 6
def training_labels(dataset: str, n_train: int | None) -> tuple[np.ndarray, str]:
    """The training-pool labels the runs partition (the same subset as
    :func:`fedlib.experiment.build_federation`: seed-0 stratified ``n_train``), and the data
    set's paper name."""
    from fedlib.datasets import load, subsample

    ds = load(dataset)
    if n_train is not None and check_int(n_train, "n_train", 1) < len(ds.y_train):
        ds = subsample(ds, n_train, None, seed=0)
    return ds.y_train, ds.paper_name


def partition_preview(labels, n_clients: int, alpha: float, seed: int, n_show: int = 20,
                      dataset_name: str | None = None, partition: str = PARTITION) -> pd.DataFrame:
    """Class counts (n_show, C) of the first ``n_show`` clients of the Dirichlet ``partition``
    (default :data:`PARTITION`) the runs use (the same call as
    :func:`fedlib.experiment.build_federation`, before the 80/20 split) — Appendix Fig. 6."""
    k = check_int(n_clients, "n_clients", 1)
    n_show = check_int(n_show, "n_show", 1, k)
    check_number(alpha, "alpha", 0, low_open=True)
    partition = _check_partition(partition)
    y = np.asarray(labels)
    extra = P.partition_inputs(partition, dataset_name=dataset_name or None)  # what its entry takes
    parts = P.partition(y, partition, k, alpha, seed, **extra)
    counts = P.label_counts(y, parts[:n_show], int(y.max()) + 1)
    return pd.DataFrame(counts, index=pd.Index(range(n_show), name="client"),
                        columns=[f"class {c}" for c in range(counts.shape[1])])


def total_variation(p, q) -> np.ndarray:
    """Row-wise total variation ½ Σ_c |p_c − q_c| between class mixes, shape (K,) from two (K, C)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if p.shape != q.shape or p.ndim != 2:
        fail("p, q", "two class-mix matrices of one shape (K, C)", (p.shape, q.shape))
    return 0.5 * np.abs(p - q).sum(axis=1)


def mix_drift(labels, n_clients: int, alphas, seeds) -> pd.DataFrame:
    """How far each client's realised class mix is from the p_i ~ Dir(α·1) it drew (§4.2), under
    :func:`fedlib.partition.dirichlet_client` (a finite pool: classes run out), beside a draw from
    an unlimited pool — n = ⌊N/K⌋ classes from p_i, multinomial, generator
    ``default_rng([seed, 1])`` — which differs from p_i only by sampling.

    Returns one row per (alpha, seed): ``n`` (samples per client), and of the K clients' total
    variations (:func:`total_variation`) the ``median``, ``p90`` and ``max`` for this partition,
    ``median_unlimited`` and ``max_unlimited`` for the unlimited pool, and ``forced_share``: the share
    of clients holding a class their p_i gives < 1e-6 (a leftover forced onto them).
    """
    y = np.asarray(labels)
    k = check_int(n_clients, "n_clients", 1, len(y))
    rows = []
    for a in alphas:
        check_number(a, "alphas", 0, low_open=True)
        for seed in seeds:
            mix, counts = P.dirichlet_client_mixes(y, k, float(a), int(seed))
            n = int(counts[0].sum())
            tv = total_variation(mix, counts / n)
            rng = np.random.default_rng([int(seed), 1])
            ref = np.stack([rng.multinomial(n, p / p.sum()) for p in mix]) / n
            tv_ref = total_variation(mix, ref)
            rows.append({"alpha": float(a), "seed": int(seed), "K": k, "n": n, "median": float(np.median(tv)),
                         "p90": float(np.quantile(tv, 0.9)), "max": float(tv.max()),
                         "median_unlimited": float(np.median(tv_ref)), "max_unlimited": float(tv_ref.max()),
                         "forced_share": float(((counts > 0) & (mix < 1e-6)).any(axis=1).mean())})
    return pd.DataFrame(rows)


def mix_drift_lines(drift: pd.DataFrame) -> list[str]:
    """One line per α of :func:`mix_drift` (ranges over the seeds where there are several)."""
    def rng_(v):
        return f"{v.min():.3f}" if v.min() == v.max() else f"{v.min():.3f}–{v.max():.3f}"
    out = []
    for a, g in drift.groupby("alpha", sort=True):
        out.append(f"α = {a:g} (K = {g.K.iloc[0]}, n = {g.n.iloc[0]} per client, {len(g)} seed{'s' * (len(g) > 1)}): "
                   f"total variation between drawn p_i and realised mix — median {rng_(g['median'])}, 90th percentile "
                   f"{rng_(g.p90)}, max {rng_(g['max'])}; from an unlimited pool: median {rng_(g.median_unlimited)}, "
                   f"max {rng_(g.max_unlimited)}; clients given a class their p_i excludes: "
                   f"{rng_(100 * g.forced_share).replace('.000', '')} %")
    return out


def fig_partition(counts: pd.DataFrame, title: str):
    """Stacked bars of each client's class counts (Appendix Figs. 4–7)."""
    fig, ax = plt.subplots(figsize=(9, 3.2))
    bottom = np.zeros(len(counts))
    cmap = plt.get_cmap("tab10")
    for c, col in enumerate(counts.columns):
        ax.bar(counts.index, counts[col], bottom=bottom, color=cmap(c % 10), label=col, width=0.8)
        bottom += counts[col].to_numpy()
    ax.set_xlabel("client")
    ax.set_ylabel("samples")
    ax.set_title(title)
    ax.legend(ncol=5, fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig
