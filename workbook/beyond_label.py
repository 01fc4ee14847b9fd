"""What notebook 12 shows: PSI beyond label skew — Clust-PSI-PFL §V's and PSI-PFL §5's stated
future work, made runnable and measured. The question, computed (:func:`answer`): **does
label-only PSI fail where labels are balanced, and which extension recovers the groups?**

**Partitions** (:data:`PARTITIONS`; every one plants groups, :func:`fedlib.partition.planted_clusters`):

* ``quantity``: quantity skew, labels balanced — 3 size tiers (tier ratio 4), log-normal spread
  σ = 0.5 within a tier (``quantity_skew``);
* ``age``: attribute skew on a real attribute — adult's clients drawn by 4 quantile bins of
  **age** (purity 0.8), labels as they fall (``attribute_skew``). Age because it is the adult
  column with the most distinct values that every census has, and it moves income (older people
  earn > 50K more often), so labels shift a little with it — the realistic case;
* ``rotated`` / ``brightness`` / ``noise``: covariate skew on FMNIST, 4 groups with identical
  label histograms whose inputs are turned by 0/90/180/270°, dimmed, or noised (the rotated-MNIST
  family; ``rotated_groups`` …);
* ``joint``: joint label–attribute skew — 2 label groups (disjoint label sets) × 2 rotations,
  4 planted groups, of which label PSI can see only the label half (``joint_label_rotation``);
* ``small_<s>``: very small clients — a share s of clients hold 5–20 samples, the others a regular
  share, labels IID (``small_clients``; planted: small vs regular). The notebook sweeps s
  (``small_shares``) and draws the curve (:func:`small_curve`).

**Variants** (:data:`VARIANTS`): Clust-PSI-PFL with label PSI (the paper, Algorithm 1 as printed),
then with each extension — ln n_i appended, small clients down-weighted, attribute PSI with one
descriptor per feature (its PSI) or one per (feature, bin) (the bin's PSI term, signed by whether the
client over- or under-holds the bin), joint label–attribute PSI — FedAvg, and the clustered methods that need no
histograms (IFCA, FedClust, CFL, pFedLIA). The extensions with a new descriptor column run with ``standardize=False`` (K-means on
PSI's own scale): standardising gives the columns that carry only sampling noise (the classes every
client shares, the summaries a transform leaves alone) unit variance, and at K = 20 on 6,000 FMNIST
images they then hide the groups (measured, seeds 0–1, clustering step alone: rotated, attribute PSI
ARI 0.26 / 0.50 standardised vs 0.76 / 0.68 not; joint 0.56 / 0.74 vs 1.00 / 1.00; quantity, ln n_i
0.41 / 0.01 vs 0.59 / 0.66). Per feature, a feature's PSI is a magnitude, blind to *which* bins a
client over-holds: the four age groups of adult are equally far from the pool, so they look alike;
PSI's per-bin terms are ≥ 0 whether a bin is over- or under-held, and at K = 100 (309 people a
client) they look alike too (seed 0, clustering step alone: ARI 0.33 per feature, 0.33 unsigned per
bin), while the signed per-bin terms separate them (0.93). Both readings stay selectable through ``hyper``. IFCA and FedClust need the number of clusters k: they are given the planted number of groups (an advantage the methods
that choose their own k — Clust-PSI-PFL, CFL, pFedLIA — do not have). Images are summarised for
attribute PSI by six statistics (:func:`fedlib.noniid.image_summaries`: mean, s.d., the four
quadrant means; the module docstring of that function says why); tabular rows use every input column.
CFL runs the scale-free split test (``hyper: cfl: {split_rule: ratio}`` in the params,
:func:`fedlib.methods.cfl.ratio_test`: no protocol here gives CFL's own thresholds, and Sattler's, from
round 20, never split at R = 10; Table II's 1e-5 never split on any partition of this study, the
records before issue 57, :func:`table_ii_cfl_specs`, a labelled second reading; ε1 = auto, issues 57–69,
:func:`superseded_cfl_specs`, is defective and not ranked); its row names the test and a cell says "CFL
never split" where it did not.

**Per run** (:func:`runs_frame`): the weighted local accuracy, the worst 10 % clients, the small
clients' mean local accuracy (``small_*`` partitions), the ARI against the planted groups, and
the number of groups found; :func:`reveals_table` says what each variant reveals to the server.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fedlib import partition as P
from fedlib.frame import records_frame
from fedlib.evaluation import cluster_recovery
from fedlib.experiment import RunSpec, present_records
from fedlib.noniid import IMAGE_SUMMARIES, psi
from fedlib.validation import check_choice, check_int, check_number, fail
from fedlib.methods import cfl
from .cross_paper import superseded_cfl_specs, table_ii_cfl_specs, worst_clients_accuracy
from .tables import frame_markdown as table_markdown, mean_sd

__all__ = ["Partition", "PARTITIONS", "Variant", "VARIANTS", "EXTENSIONS", "NEEDS_K", "CHANCE", "RECOVERED",
           "partition_named", "small_name", "training_specs", "GRID_PARAMS", "notebook_grid", "grid_label", "present_records",
           "extension_label", "variant_of", "runs_frame", "RUN_COLUMNS", "METRICS", "cell_table", "cell_csv", "label_spread", "answer",
           "small_curve", "small_gap",
           "fig_small_curve", "fig_ari", "n_bins_of", "dataset_shapes", "reveals_table", "partition_of_spec", "table_markdown",
           "variant_row_label", "table_ii_cfl_specs", "superseded_cfl_specs"]


@dataclass(frozen=True)
class Partition:
    """One partition of the study: ``protocol`` of :data:`fedlib.partition.PROTOCOLS` at ``level``
    on ``dataset``."""
    dataset: str
    protocol: str
    level: float
    label: str


PARTITIONS = {
    "quantity": Partition("fmnist", "quantity_skew", 0.5, "quantity skew, 3 size tiers (σ = 0.5)"),
    "age": Partition("adult", "attribute_skew", 0.8, "adult by age bins (purity 0.8)"),
    "rotated": Partition("fmnist", "rotated_groups", 4, "rotated 0/90/180/270°"),
    "brightness": Partition("fmnist", "brightness_groups", 4, "brightness ×1/.75/.5/.25"),
    "noise": Partition("fmnist", "noise_groups", 4, "Gaussian noise s.d. 0/.1/.2/.3"),
    "joint": Partition("fmnist", "joint_label_rotation", 2, "2 label groups × 2 rotations"),
}
"""The fixed partitions by name (the notebook's ``partitions``); the small-client partitions are
named by :func:`small_name` from the notebook's ``small_shares``."""

SMALL_PREFIX = "small_"


def small_name(share: float) -> str:
    """The partition name of the small-client share ``share`` (e.g. 0.3 → ``'small_0.3'``)."""
    return f"{SMALL_PREFIX}{float(share):g}"


def partition_named(name: str) -> Partition:
    """The :class:`Partition` of ``name``: a key of :data:`PARTITIONS` or ``small_<share>``."""
    if isinstance(name, str) and name.startswith(SMALL_PREFIX):
        try:
            share = float(name[len(SMALL_PREFIX):])
        except ValueError:
            share = None
        if share is not None and 0 < share < 1:
            return Partition("fmnist", "small_clients", share, f"{100 * share:g} % small clients (5–20 samples)")
    return PARTITIONS[check_choice(name, "partitions", tuple(PARTITIONS) + ("small_<share in (0, 1)>",))]


@dataclass(frozen=True)
class Variant:
    """One row of the study: ``method`` with ``hyper`` over its defaults."""
    method: str
    hyper: dict
    label: str
    histogram: str | None  # what the clustering step reads: 'label', 'attribute', 'joint' or None (models only)


VARIANTS = {
    "psi_label": Variant("clust_psi_pfl", {}, "Clust-PSI-PFL, label PSI (paper)", "label"),
    "psi_size": Variant("clust_psi_pfl", {"size_feature": True, "standardize": False},
                        "Clust-PSI-PFL, label PSI + ln n_i", "label"),
    "psi_downweight": Variant("clust_psi_pfl", {"downweight_small": True},
                              "Clust-PSI-PFL, label PSI, small clients down-weighted", "label"),
    "psi_attribute": Variant("clust_psi_pfl", {"features": "attribute", "standardize": False},
                             "Clust-PSI-PFL, attribute PSI per feature", "attribute"),
    "psi_attribute_bins": Variant("clust_psi_pfl", {"features": "attribute", "attribute_terms": "bin",
                                                    "standardize": False},
                                  "Clust-PSI-PFL, attribute PSI per bin", "attribute"),
    "psi_joint": Variant("clust_psi_pfl", {"features": "joint", "standardize": False},
                         "Clust-PSI-PFL, joint label–attribute PSI", "joint"),
    "fedavg": Variant("fedavg", {}, "FedAvg", None),
    "ifca": Variant("ifca", {}, "IFCA (k = planted groups)", None),
    "fedclust": Variant("fedclust", {}, "FedClust (k = planted groups)", None),
    "cfl": Variant("cfl", {}, "CFL", None),
    "pfedlia": Variant("pfedlia", {}, "pFedLIA", None),
}
"""The study's rows by name (the notebook's ``variants``)."""

def extension_label(variant: str) -> str:
    """The label of an extension without the method's name (``'psi_joint'`` → ``'joint label–attribute PSI'``)."""
    return VARIANTS[variant].label.split(", ", 1)[1]


EXTENSIONS = ("psi_size", "psi_downweight", "psi_attribute", "psi_attribute_bins", "psi_joint")
"""The variants that extend label PSI (Clust-PSI-PFL §V)."""
NEEDS_K = ("ifca", "fedclust")  # given the planted number of groups as k
GROUPING = ("psi_label", "psi_size", "psi_downweight", "psi_attribute", "psi_attribute_bins", "psi_joint", "ifca",
            "fedclust", "cfl", "pfedlia")
"""The variants whose record holds a grouping of the clients (scored by ARI)."""
CHANCE = 0.1
"""ARI at or below which a grouping "cannot separate" the planted groups (ARI ≈ 0 is chance)."""
RECOVERED = 0.9
"""ARI at or above which a grouping "recovers" the planted groups (1 = exactly)."""


# ----------------------------------------------------------------------------- the grid
def _names(partitions, small_shares) -> list[str]:
    if not isinstance(partitions, (list, tuple)):
        fail("partitions", f"a list of names from {list(PARTITIONS)}", partitions)
    if not isinstance(small_shares, (list, tuple)):
        fail("small_shares", "a list of shares in (0, 1), e.g. [0.1, 0.3, 0.5]", small_shares)
    for s in small_shares:
        check_number(s, "small_shares", 0, 1, low_open=True, high_open=True)
    names = list(partitions) + [small_name(s) for s in small_shares]
    if not names:
        fail("partitions", "at least one partition (or a small share)", partitions)
    for n in partitions:
        partition_named(n)
    return names


def training_specs(partitions, small_shares, n_clients: int, seeds, variants, fl: dict, *,
                   hyper: dict | None = None, n_train: dict | None = None,
                   val_fraction: float = 0.1) -> list[RunSpec]:
    """``variants`` × partitions (``partitions`` and one ``small_<s>`` per share) × ``seeds``.

    ``hyper``: per method, hyperparameters under each variant's own (schedule constants);
    ``n_train``: per data set, the stratified training subset (absent or None: all of it). IFCA
    and FedClust get k = the partition's number of planted groups (:data:`NEEDS_K`)."""
    names = _names(partitions, small_shares)
    if not isinstance(variants, (list, tuple)) or not variants:
        fail("variants", f"a non-empty list of names from {list(VARIANTS)}", variants)
    for v in variants:
        check_choice(v, "variants", tuple(VARIANTS))
    check_int(n_clients, "n_clients", 2)
    check_number(val_fraction, "val_fraction", 0, 1, low_open=True, high_open=True)
    hyper, n_train = dict(hyper or {}), dict(n_train or {})
    specs = []
    for name in names:
        part = partition_named(name)
        groups = int(P.planted_clusters(part.protocol, n_clients, part.level).max()) + 1
        for v in variants:
            var = VARIANTS[v]
            hp = {**hyper.get(var.method, {}), **var.hyper}
            if v in NEEDS_K:
                hp["n_clusters"] = groups
            for seed in seeds:
                specs.append(RunSpec(part.dataset, part.protocol, float(part.level), int(n_clients), int(seed),
                                     var.method, hyper=hp, fl=dict(fl), n_train=n_train.get(part.dataset),
                                     val_fraction=float(val_fraction)))
    return specs


GRID_PARAMS = ("partitions", "small_shares", "n_clients", "seeds", "variants", "fl", "hyper", "n_train",
               "val_fraction")
"""The parameters of notebook 12 (``params/*/12_beyond_label_skew.yaml``) its grid depends on."""


def notebook_grid(*, partitions, small_shares, n_clients: int, seeds, variants, fl: dict, hyper: dict, n_train,
                  val_fraction: float) -> dict[str, list[RunSpec]]:
    """Notebook 12's grid from its parameters (:data:`GRID_PARAMS`): ``'study'`` — every variant on
    every partition (:func:`training_specs`)."""
    return {"study": training_specs(partitions, small_shares, n_clients, seeds, variants, fl, hyper=hyper,
                                    n_train=n_train, val_fraction=val_fraction)}


# ----------------------------------------------------------------------------- records → frames
def _psi_key(hyper: dict) -> tuple:
    """Clust-PSI-PFL's variant key: (features, attribute_terms, size_feature, downweight_small),
    defaults filled in."""
    features = hyper.get("features", "label")
    return (features, hyper.get("attribute_terms", "feature") if features != "label" else None,
            bool(hyper.get("size_feature", False)), bool(hyper.get("downweight_small", False)))


def variant_of(spec: dict) -> str:
    """The :data:`VARIANTS` name of a record's spec: its method and, for Clust-PSI-PFL, what its
    clustering step reads (:func:`_psi_key`); ValueError for a run that is none of them."""
    for name, v in VARIANTS.items():
        if v.method == spec["method"] and (v.method != "clust_psi_pfl"
                                           or _psi_key(v.hyper) == _psi_key(spec.get("hyper", {}))):
            return name
    fail("spec", f"a run of one of the variants {list(VARIANTS)}", {k: spec.get(k) for k in ("method", "hyper")})


def grid_label(spec: RunSpec) -> str:
    """A run's row as the grid command's progress lines print it (``python -m fedlib.grid
    beyond-label``): its variant (:func:`variant_of`), CFL's with the split test it runs."""
    d = spec.to_dict()
    row = variant_of(d)
    return f"{row} ({cfl.thresholds_label(d.get('hyper'))})" if row == "cfl" else row


def partition_of_spec(spec: dict) -> str:
    """The study's partition name of a spec (dict): a key of :data:`PARTITIONS` or ``small_<share>``."""
    if spec["protocol"] == "small_clients":
        return small_name(spec["level"])
    for name, p in PARTITIONS.items():
        if p.protocol == spec["protocol"] and float(p.level) == float(spec["level"]):
            return name
    fail("protocol, level", f"one of the study's partitions {list(PARTITIONS)} or small_clients",
         (spec["protocol"], spec["level"]))


RUN_COLUMNS = ["partition", "variant", "seed", "status", "error", "seconds", "cpu_seconds", "weighted_local", "worst10",
               "small", "ari", "groups", "local_accuracy", "thresholds", "never_split"]
"""The columns of :func:`runs_frame`, in order."""


def _planted_columns(record: dict, variant: str) -> tuple[float, float, float]:
    """(small, ari, groups) of a finished run: the planted small clients' mean local accuracy (%,
    ``small_clients`` only) and, for a :data:`GROUPING` variant with a final grouping
    (``info['cluster_of_client']`` or ``info['assignment']``), its ARI against the planted groups
    and the distinct groups found; NaN for what does not exist."""
    s = record["spec"]
    acc = np.asarray(record["local_accuracy"], float)
    truth = P.planted_clusters(s["protocol"], int(s["n_clients"]), s["level"])
    small = 100 * np.nanmean(acc[truth == 1]) if s["protocol"] == "small_clients" else np.nan
    info = record.get("info", {})
    grouping = info.get("cluster_of_client", info.get("assignment"))
    if grouping is None or variant not in GROUPING:
        return small, np.nan, np.nan
    g = np.asarray(grouping, np.int64)
    return small, cluster_recovery(g, truth), len(set(g[g >= 0].tolist()))


def runs_frame(records) -> pd.DataFrame:
    """One row per run: ``partition``, ``variant``, ``seed``, ``status``, ``error``, ``seconds`` (wall
    time), ``cpu_seconds`` (CPU time), and for a finished run (in %): ``weighted_local`` (record field ``global_accuracy``),
    ``worst10``, ``small`` (mean local accuracy of the planted small clients, ``small_*`` only),
    ``ari`` against the planted groups and ``groups`` found (grouping variants), and
    ``local_accuracy`` (per client, fractions), and for CFL ``thresholds``
    (:func:`fedlib.methods.cfl.thresholds_label` of its spec: without ``eps1``, Table II's 1e-5) and
    ``never_split`` (:func:`fedlib.methods.cfl.never_split`; None for the other variants).

    A column selection of :func:`fedlib.frame.records_frame`; the per-client columns are read
    from its ``record`` column. Shape (runs, :data:`RUN_COLUMNS`)."""
    f = records_frame(records)
    if f.empty:
        return pd.DataFrame([], columns=RUN_COLUMNS)
    ok, recs = (f.status == "ok").tolist(), f.record.tolist()
    cfl_run = (f.method == "cfl").tolist()
    variant = [variant_of(r["spec"]) for r in recs]
    acc = [np.asarray(r["local_accuracy"], float) if o else None for r, o in zip(recs, ok)]
    planted = [_planted_columns(r, v) if o else (np.nan,) * 3 for r, v, o in zip(recs, variant, ok)]
    out = pd.DataFrame({
        "partition": [partition_of_spec(r["spec"]) for r in recs], "variant": variant, "seed": f.seed.tolist(),
        "status": f.status.tolist(), "error": [r.get("error", "") for r in recs], "seconds": f.seconds.tolist(),
        "cpu_seconds": f.cpu_seconds.tolist(), "weighted_local": (100 * f.global_accuracy).where(ok).tolist(),
        "worst10": [100 * worst_clients_accuracy(a) if o else np.nan for a, o in zip(acc, ok)],
        "small": [p[0] for p in planted], "ari": [p[1] for p in planted], "groups": [p[2] for p in planted],
        "local_accuracy": acc,
        "thresholds": [cfl.thresholds_label(r["spec"].get("hyper")) if c else "" for r, c in zip(recs, cfl_run)],
        "never_split": [cfl.never_split(r.get("info")) if c and o else None for r, c, o in zip(recs, cfl_run, ok)]})
    return out[RUN_COLUMNS]


METRICS = {
    "weighted_local": "weighted local accuracy (%): Σ_k CC_k / Σ_k n_k over the clients' own test splits "
                      "(Clust-PSI-PFL's \"global accuracy\"; record field global_accuracy)",
    "worst10": "worst 10 % clients (%): the mean local accuracy A_k = CC_k / n_k of the ⌈0.1·K⌉ worst clients",
    "small": "small clients (%): the mean local accuracy A_k of the planted small clients (5–20 samples)",
    "ari": "ARI: adjusted Rand index of the final grouping against the planted groups (1 = recovered, ≈ 0 chance)",
    "groups": "groups found: the number of distinct groups in the final grouping",
    "cpu_seconds": "CPU time (s): the run's process CPU time, every thread summed (record field cpu_seconds), data "
                   "loading and evaluation included",
}
"""The per-run quantities of :func:`runs_frame` that :func:`cell_table` renders, with their definitions."""
DIGITS = {"groups": 1, "cpu_seconds": 1}  # decimals shown per quantity (else 2)


def _order(df: pd.DataFrame, column: str, names) -> list:
    present = list(dict.fromkeys(df[column]))
    return [n for n in names if n in present] + [n for n in present if n not in names]


def variant_row_label(df: pd.DataFrame, variant: str) -> str:
    """A row's name: the variant's label, and for CFL the thresholds its runs in ``df`` used
    (``'CFL (‖mean ΔW‖ < 0.25 · max ‖ΔW_i‖ (scale-free), γ = 0.5)'``; several, joined by " / ")."""
    label = VARIANTS[variant].label if variant in VARIANTS else variant
    if variant != "cfl" or "thresholds" not in df:
        return label
    used = sorted({x for x in df[df.variant == "cfl"].thresholds if x})
    return f"{label} ({' / '.join(used)})" if used else label


def cell_csv(df: pd.DataFrame, value: str, partitions=None) -> pd.DataFrame:
    """:func:`cell_table`'s cells as numbers (:func:`workbook.tables.cell_numbers`): variant, partition,
    mean, sd, n, status — the CSV beside the notebook's table (never "mean ± sd" strings)."""
    from .tables import cell_numbers

    check_choice(value, "value", tuple(METRICS))
    present = set(df.partition)
    parts = ([p for p in partitions if p in present] if partitions is not None
             else _order(df, "partition", list(PARTITIONS)))
    cells = []
    for v in _order(df, "variant", list(VARIANTS)):
        for p in parts:
            g = df[(df.variant == v) & (df.partition == p)]
            bad = sorted(set(g.status) - {"ok"})
            status = "not run" if g.empty else "/".join(bad) if bad else "ok"
            cells.append((variant_row_label(df, v), partition_named(p).label, g[value] if status == "ok" else [], status))
    return cell_numbers(cells).rename(columns={"row": "variant", "column": "partition"})


def cell_table(df: pd.DataFrame, value: str, partitions=None) -> pd.DataFrame:
    """Variants × partitions of ``value`` (a key of :data:`METRICS`), "mean ± std (n = seeds)";
    a cell with an unfinished run shows its status, a variant not run "not run", a number that
    does not exist (ARI of FedAvg) "—". CFL's row names its thresholds (:func:`variant_row_label`) and
    a cell whose CFL runs never split says so: "(CFL never split)" (:func:`fedlib.methods.cfl.split_note`)."""
    check_choice(value, "value", tuple(METRICS))
    present = set(df.partition)
    parts = ([p for p in partitions if p in present] if partitions is not None
             else _order(df, "partition", list(PARTITIONS)))
    digits = DIGITS.get(value, 2)
    rows = []
    for v in _order(df, "variant", list(VARIANTS)):
        row = {"Variant": variant_row_label(df, v)}
        for p in parts:
            g = df[(df.variant == v) & (df.partition == p)]
            bad = sorted(set(g.status) - {"ok"})
            row[partition_named(p).label] = ("not run" if g.empty else "/".join(bad) if bad
                                             else "—" if g[value].isna().all() else mean_sd(g[value], digits))
            note = cfl.split_note(g.never_split) if v == "cfl" and not g.empty and not bad else ""
            if note:
                row[partition_named(p).label] += f" ({note})"
        rows.append(row)
    return pd.DataFrame(rows)


def label_spread(spec: RunSpec) -> dict:
    """How different the clients' label histograms are under ``spec``'s partition, computed from its
    train splits (:func:`fedlib.experiment.build_federation`): the mean and the largest client PSI_i
    (Eq. 2 against the pooled histogram; 0 = identical histograms)."""
    from fedlib.experiment import build_federation

    _, counts, _ = build_federation(dataclasses.replace(spec, method="fedavg", hyper={}), "cpu")
    v = psi(counts)
    return {"mean_label_psi": float(np.mean(v)), "max_label_psi": float(np.max(v))}


def answer(df: pd.DataFrame, spreads: dict) -> pd.DataFrame:
    """The study's question, per partition: the label histograms' spread (``spreads``: partition →
    :func:`label_spread`), label-only PSI's ARI (mean over seeds), the best extension and its ARI,
    and the verdict — label-only "cannot separate" (ARI ≤ :data:`CHANCE`), "partly" or "recovers"
    (≥ :data:`RECOVERED`); the extension likewise, with how many of :data:`EXTENSIONS` have a finished
    run there (``extensions_run``: the best is the best of those). Only finished runs count; a partition without
    the label-only run is left out."""
    ok = df[df.status == "ok"]
    mean_ari = ok.groupby(["partition", "variant"]).ari.mean()

    def verdict(a):
        return ("not run" if pd.isna(a) else "cannot separate" if a <= CHANCE else "recovers" if a >= RECOVERED
                else "partly")

    rows = []
    for p in _order(df, "partition", list(PARTITIONS)):
        if (p, "psi_label") not in mean_ari.index:
            continue
        label_ari = mean_ari[(p, "psi_label")]
        ext = {v: mean_ari[(p, v)] for v in EXTENSIONS if (p, v) in mean_ari.index and not pd.isna(mean_ari[(p, v)])}
        best = max(ext, key=ext.get) if ext else None
        spread = spreads.get(p, {})
        rows.append({"partition": p, "label": partition_named(p).label,
                     "mean_label_psi": spread.get("mean_label_psi", np.nan),
                     "label_only_ari": label_ari, "label_only": verdict(label_ari),
                     "best_extension": best, "best_extension_ari": ext.get(best, np.nan),
                     "extension": verdict(ext.get(best, np.nan)), "extensions_run": len(ext)})
    return pd.DataFrame(rows, columns=["partition", "label", "mean_label_psi", "label_only_ari", "label_only",
                                       "best_extension", "best_extension_ari", "extension", "extensions_run"])


def small_curve(df: pd.DataFrame) -> pd.DataFrame:
    """The small-client regime over the share s: one row per (variant, s) with the mean over
    seeds of the weighted local accuracy, the small clients' accuracy and the ARI (finished runs)."""
    ok = df[(df.status == "ok") & df.partition.str.startswith(SMALL_PREFIX)]
    out = ok.assign(share=ok.partition.str[len(SMALL_PREFIX):].astype(float)).groupby(
        ["variant", "share"], sort=True)[["weighted_local", "small", "worst10", "ari"]].mean().reset_index()
    return out


def small_gap(curve: pd.DataFrame, reference: str = "fedavg") -> pd.DataFrame:
    """Per variant, averaged over the small shares of ``curve`` (:func:`small_curve`): the ARI of
    small vs regular clients, and the small clients' accuracy minus ``reference``'s at the same
    share (pp) — whether finding the small clients helps them or cuts them off from the others'
    data. Empty without the reference's runs."""
    ref = curve[curve.variant == reference].set_index("share").small
    if ref.empty:
        return pd.DataFrame(columns=["variant", "ari", "small_minus_reference"])
    c = curve[curve.share.isin(ref.index)]
    out = c.assign(small_minus_reference=c.small - c.share.map(ref)).groupby("variant", sort=False)[
        ["ari", "small_minus_reference"]].mean()
    return out.reindex([v for v in VARIANTS if v in out.index]).reset_index()


def _colour(variant: str):
    """One colour per variant, the same in every figure (tab20, in :data:`VARIANTS` order)."""
    return plt.get_cmap("tab20")(list(VARIANTS).index(variant) % 20)


def fig_small_curve(curve: pd.DataFrame):
    """Three panels over the small share s: weighted local accuracy, small clients' accuracy, ARI."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for v in _order(curve, "variant", list(VARIANTS)):
        c = curve[curve.variant == v]
        style = "-" if VARIANTS[v].method == "clust_psi_pfl" else "--"
        for ax, col in zip(axes, ("weighted_local", "small", "ari")):
            if c[col].notna().any():
                ax.plot(c.share, c[col], style, marker="o", color=_colour(v), label=VARIANTS[v].label)
    for ax, title in zip(axes, ("weighted local accuracy (%)", "small clients' accuracy (%)", "ARI (small vs regular)")):
        ax.set_xlabel("share of small clients s")
        ax.set_title(title, fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    plt.close(fig)
    return fig


def fig_ari(df: pd.DataFrame, partitions=None):
    """ARI of every grouping variant per partition (mean over seeds), a grouped bar chart."""
    ok = df[(df.status == "ok") & df.variant.isin(GROUPING)]
    t = ok.groupby(["partition", "variant"]).ari.mean().unstack("variant")
    t = t.reindex(index=_order(ok, "partition", list(partitions or PARTITIONS)),
                  columns=[v for v in GROUPING if v in t.columns])
    fig, ax = plt.subplots(figsize=(12, 4.6))
    width = 0.8 / max(1, len(t.columns))
    for j, v in enumerate(t.columns):
        ax.bar(np.arange(len(t)) + j * width, t[v].to_numpy(), width, color=_colour(v), label=VARIANTS[v].label)
    ax.set_xticks(np.arange(len(t)) + 0.4 - width / 2, [partition_named(p).label for p in t.index], rotation=15,
                  fontsize=8)
    ax.axhline(RECOVERED, color="grey", lw=0.8, ls=":")
    ax.set_ylabel("ARI vs planted groups")
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.28), frameon=False)
    fig.tight_layout()
    plt.close(fig)
    return fig


def n_bins_of(hyper: dict | None) -> int:
    """The quantile bins per attribute the study's Clust-PSI-PFL variants use: ``hyper``'s
    ``clust_psi_pfl.n_bins``, else the method's default."""
    from fedlib.methods.clust_psi_pfl import Hyper

    return int((hyper or {}).get("clust_psi_pfl", {}).get("n_bins", Hyper().n_bins))


def dataset_shapes(datasets) -> dict[str, tuple[int, int]]:
    """Per data set, (C, F): its number of classes and of attribute features — the six
    :func:`fedlib.noniid.image_summaries` for images, every input column for tabular rows."""
    from fedlib.datasets import load

    out = {}
    for d in datasets:
        ds = load(d)
        out[d] = (int(ds.n_classes), len(IMAGE_SUMMARIES) if ds.x_train.ndim >= 3 else int(ds.x_train.shape[1]))
    return out


def reveals_table(shapes: dict, n_bins: int, variants=None) -> pd.DataFrame:
    """What each variant's server learns from every client, beyond the model updates every
    federated method exchanges: the histogram sent and its size per data set (``shapes``: data
    set → (C, F), :func:`dataset_shapes`), how the client size n_i is used, and the Laplace option
    (:mod:`fedlib.privacy`: scale 1/ε for the label histogram, F/ε for the F attribute or joint
    histograms)."""
    check_int(n_bins, "n_bins", 2)
    rows = []
    for v in variants or VARIANTS:
        var = VARIANTS[check_choice(v, "variants", tuple(VARIANTS))]
        kind, hp = var.histogram, var.hyper
        if kind is None:
            sent, sizes, dp = ("no histogram: model updates, and each client's influence row I(i, ·) of Eq. 1 "
                               "(K loss differences)" if v == "pfedlia" else "no histogram: model updates only",
                               "—", "—")
        elif kind == "label":
            sent = "label histogram (C counts)"
            sizes = ", ".join(f"{d}: {c}" for d, (c, f) in shapes.items())
            dp = "Laplace(1/ε) per count"
        elif kind == "attribute":
            sent = "attribute histograms: per feature, counts in B quantile bins of the pooled marginal (F·B)"
            sizes = ", ".join(f"{d}: {f}·{n_bins} = {f * n_bins}" for d, (c, f) in shapes.items())
            dp = "Laplace(F/ε) per count"
        else:
            sent = ("joint histograms: per feature, counts in each (class, bin) cell (F·C·B); their margins are "
                    "the label and the attribute histograms")
            sizes = ", ".join(f"{d}: {f}·{c}·{n_bins} = {f * c * n_bins}" for d, (c, f) in shapes.items())
            dp = "Laplace(F/ε) per count"
        uses_n = ("as a clustering feature (ln n_i)" if hp.get("size_feature")
                  else "as a K-means / silhouette weight" if hp.get("downweight_small")
                  else "as the FedAvg weight only")
        rows.append({"variant": var.label, "histogram sent": sent, "values per client": sizes,
                     "client size n_i": uses_n, "ε-DP option": dp})
    return pd.DataFrame(rows)
