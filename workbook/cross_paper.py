"""What notebook 11 shows: every registered method on every seed paper's own partition rule,
on one training protocol, ranked with the statistics of Demšar (2006) — a table no seed paper
has (each compares its method with its own baselines, on its own partitions, with its own
optimiser and its own meaning of "accuracy").

**Partitions** (:data:`PARTITIONS`; FMNIST, K clients), each seed paper's own rule:

* Clust-PSI-PFL: Dirichlet α = 0.3 (``dirichlet``), Similarity S = 0 and S = 1 (``similarity``);
* pFedLIA: pathological and noisy clusters, 5 planted clusters (``pathological_clusters``,
  ``noisy_clusters``: the only protocols that plant groups, :data:`fedlib.partition.CLUSTERED_PROTOCOLS`);
* FedPrism: a class mix per client, p_i ~ Dir(0.1) (``dirichlet_client``);
* CAFA: 25 % IID clients (Tables II–III's smaller share), the others 1–2 classes
  (``iid_fraction_classes_1_2``: the class count of the authors' code, on disjoint clients).

**Methods**: every method of :data:`fedlib.methods.METHODS` on every partition, except where a
method refuses the partition (its ``PROTOCOLS``: the Oracle, FedAvg per planted cluster, is
defined on the pathological partition only — pFedLIA's Table I shows "–" for noisy); CL (one
model on the pooled data) is the ceiling. CL and the Oracle are references: they are shown, but
not ranked (one is not federated, the other reads the truth).

**CFL's thresholds**: no seed paper's protocol here gives CFL its own. Table II's ε1 = 1e-5 never
splits against the mean update norms of this protocol (0.36–0.95: CFL's split log reads "mean ≥ ε1"
every round and its rows were FedAvg's, bit for bit), and Sattler's own rule (ε1 0.4, ε2 1.6, from
round 20: :data:`fedlib.methods.cfl.SATTLER`) never splits at R ≤ 20 rounds. The params run the
scale-free test (``{split_rule: ratio}``: ‖mean ΔW‖ < 0.25 · max ‖ΔW_i‖ of the same cluster and
round, :func:`fedlib.methods.cfl.ratio_test`), which the spec shows; the tables name the test in
CFL's row and say "CFL never split" in a cell where it did not (:func:`cfl_notes`). Two older sets of
records stay in the folder, not ranked: Table II's 1e-5 (before issue 57, :func:`table_ii_cfl_specs`,
a labelled second reading) and ε1 = auto (issues 57–69, :func:`superseded_cfl_specs`): defective —
its ε1, a multiple of the mean of the clients' update norms, is compared with the norm of their mean,
which is never larger, so nearly every cluster passed it and it split an IID federation — labelled
"auto (defective, superseded)" where shown.

**One training protocol** for every method (``fl``): Clust-PSI-PFL's Table II (Adam, lr 10⁻³,
batch 32, E local epochs, a share q of the clients per round), rounds and E scaled to the
budget the params state. Every method keeps its paper defaults except its schedule constants
(warm-up and re-clustering rounds), which the params scale with the rounds. Every client's data
is split into train / validation / test (``val_fraction``, ``test_fraction`` 0.2) for every
method, so that all train on the same data and the methods that select on validation data
(PSI-PFL, CAFA, FedFomo, pFedLIA) have it.

**Per run** (:func:`runs_frame`): the **weighted local accuracy** Σ_k CC_k / Σ_k n_k (record
field ``global_accuracy``; Clust-PSI-PFL calls it "global accuracy"), the worst 10 % clients'
mean local accuracy and the ECDF of the clients' local accuracies A_k, the **official-test
accuracy** (each client's model on the data set's official test set, ``global_test_accuracy``),
AD from CL (mean |A_k − CL's weighted local accuracy| of the same partition and seed,
:func:`workbook.tables.records_frame`), the ARI of the method's grouping against the
planted clusters (where planted and where the method groups clients, :data:`GROUPING_METHODS`),
and the run's CPU time (``cpu_seconds``: the process CPU time, every thread summed).

**Ranking** (:func:`ranking`): ``autorank`` (Herbold 2020) on a block design — one block per
partition (the weighted local accuracy averaged over seeds), one column per ranked method —
with ``force_mode='nonparametric'``: mean ranks, the Friedman test, the Nemenyi critical
difference and the CD diagram (Demšar 2006). autorank needs ≥ 5 blocks.

**Which method when** (:func:`which_method_when`): per partition, autorank on the clients as
blocks (each client's local accuracy under every method: the same clients, test splits and
seeds for all, so the comparison is paired), Friedman with the Nemenyi post-hoc at α = 0.05:
the best method (lowest mean rank) and those whose mean rank is within the critical distance
of it ("not significantly worse").
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fedlib import partition as P
from fedlib.evaluation import cluster_recovery
from fedlib.experiment import RunSpec, grid_specs, present_records
from fedlib.methods import METHODS, cfl, display_name, method_info
from fedlib.validation import check_choice, check_int, check_number, fail
from .tables import frame_markdown as table_markdown, records_frame

__all__ = ["Partition", "PARTITIONS", "REFERENCES", "GROUPING_METHODS", "WORST_SHARE", "worst_clients_accuracy", "ALPHA", "allowed",
           "training_specs", "GRID_PARAMS", "notebook_grid", "grid_label", "present_records", "partition_of", "runs_frame", "RUN_COLUMNS", "status_table",
           "score_table", "METRICS", "DIGITS", "cell_table", "cell_csv", "ranking", "fig_cd", "fig_heatmap", "ecdf_frame", "fig_ecdf", "which_method_when",
           "table_markdown", "method_row_label", "cfl_notes", "table_ii_cfl_specs", "superseded_cfl_specs", "tau_lines"]

GROUPING_METHODS = tuple(m for m in METHODS if m in {"clust_psi_pfl", "cfl", "ifca", "fedclust", "fedprism", "fesem",
                                                      "pfedlia", "oracle"})
"""The methods whose record's ``info`` holds a grouping of the clients (``cluster_of_client`` or
``assignment``) that this study scores by ARI, in the registry's order; FedAMP's "grouping" is
every client alone, the one-model methods and Local group nothing. A new clustering method is
added here once its records hold a grouping."""


@dataclass(frozen=True)
class Partition:
    """One seed paper's partition rule: a protocol of :data:`fedlib.partition.PROTOCOLS` at a level;
    ``label`` its one display name (:func:`fedlib.partition.partition_name`), as tables, figures and
    the grid command's lines show it."""
    protocol: str
    level: float
    paper: str

    @property
    def label(self) -> str:
        return P.partition_name(self.protocol, self.level)


PARTITIONS = {
    "dirichlet_0.3": Partition("dirichlet", 0.3, "Clust-PSI-PFL"),
    "similarity_0": Partition("similarity", 0.0, "Clust-PSI-PFL"),
    "similarity_1": Partition("similarity", 1.0, "Clust-PSI-PFL"),
    "pathological": Partition("pathological_clusters", 5, "pFedLIA"),
    "noisy": Partition("noisy_clusters", 5, "pFedLIA"),
    "client_dirichlet_0.1": Partition("dirichlet_client", 0.1, "FedPrism"),
    "cafa_iid_0.25": Partition("iid_fraction_classes_1_2", 0.25, "CAFA"),
    # more levels of the same rules, for the focused design of issue 58 (params/designs/11_*focused*.yaml)
    "dirichlet_0.1": Partition("dirichlet", 0.1, "Clust-PSI-PFL"),
    "dirichlet_1": Partition("dirichlet", 1.0, "Clust-PSI-PFL"),
    "similarity_0.5": Partition("similarity", 0.5, "Clust-PSI-PFL"),
    "client_dirichlet_0.5": Partition("dirichlet_client", 0.5, "FedPrism"),
    "cafa_iid_0.5": Partition("iid_fraction_classes_1_2", 0.5, "CAFA"),
}
"""The partitions by name (the notebook's ``partitions`` parameter); level: α, S, the number of
planted clusters, or the IID share (the protocol's ``level_name``)."""
SEED_PAPER_PARTITIONS = ("dirichlet_0.3", "similarity_0", "similarity_1", "pathological", "noisy",
                         "client_dirichlet_0.1", "cafa_iid_0.25")
"""Each seed paper's own partitions (the paper profile's); the other :data:`PARTITIONS` are further
levels of the same rules, for the focused design (:mod:`workbook.cross_paper_design`)."""

REFERENCES = ("cl", "oracle")  # shown beside the ranked methods, never ranked
WORST_SHARE = 0.10  # the worst 10 % clients
ALPHA = 0.05  # the family-wise significance level of the Friedman / Nemenyi tests


def allowed(method: str, protocol: str) -> bool:
    """Whether ``method`` runs on ``protocol`` (its ``PROTOCOLS``, e.g. the Oracle: pathological only)."""
    protocols = method_info(method).protocols
    return protocols is None or protocol in protocols


# ----------------------------------------------------------------------------- the grid
def training_specs(partitions, n_clients: int, seeds, methods, fl: dict, *, hyper: dict | None = None,
                   n_train=None, dataset: str = "fmnist", val_fraction: float = 0.1,
                   n_global_test: int | None = None, arch: str | None = None) -> list[RunSpec]:
    """``methods`` × ``partitions`` (names of :data:`PARTITIONS`) × ``seeds``, each method only
    where it is :func:`allowed`; every run with the same validation share (so all train on the
    same data) and scored on the official test set (``n_global_test``: its stratified subset,
    None = all of it), with one model for every method: ``arch`` (None: the data set's default,
    :mod:`fedlib.models`; adult's is logistic regression, which FedPrism's prototype refuses —
    ``'mlp'`` gives every method a hidden layer)."""
    if not isinstance(partitions, (list, tuple)) or not partitions:
        fail("partitions", f"a non-empty list of names from {list(PARTITIONS)}", partitions)
    for name in partitions:
        check_choice(name, "partitions", tuple(PARTITIONS))
    if not isinstance(methods, (list, tuple)) or not methods:
        fail("methods", f"a non-empty list of methods from {list(METHODS)}", methods)
    for m in methods:
        check_choice(m, "methods", METHODS)
    check_int(n_clients, "n_clients", 1)
    check_number(val_fraction, "val_fraction", 0, 1, low_open=True, high_open=True)
    specs = []
    for name in partitions:
        part = PARTITIONS[name]
        ms = [m for m in methods if allowed(m, part.protocol)]
        specs += grid_specs([dataset], {part.protocol: [part.level]}, [n_clients], list(seeds), ms, hyper=hyper,
                            fl=fl, n_train=n_train)
    if arch is not None and not isinstance(arch, str):
        fail("arch", "None (the data set's default model) or an architecture name such as 'mlp'", arch)
    return [dataclasses.replace(s, val_fraction=float(val_fraction), global_test=True, n_global_test=n_global_test,
                                arch=arch)
            for s in specs]


GRID_PARAMS = ("dataset", "n_train", "n_global_test", "partitions", "n_clients", "seeds", "methods", "fl", "hyper",
               "val_fraction", "arch")
"""The parameters of notebook 11 (``params/*/11_cross_paper.yaml``) that its grid depends on:
:func:`notebook_grid`'s keywords."""


_CFL_RULE_KEYS = ("eps1", "auto_scale", "split_rule", "rho")
"""CFL's hyperparameters that choose its split test (the rest of a spec's ``hyper`` is kept)."""


def _cfl_rule_specs(specs, rule: dict) -> list[RunSpec]:
    """The CFL runs of ``specs`` that pick their split test (ε1 = auto or the scale-free rule), with
    ``rule`` in place of that choice; no duplicates, in order."""
    out = []
    for s in specs:
        if s.method == "cfl" and (cfl.calibrated(s.hyper) or cfl.scale_free(s.hyper)):
            new = dataclasses.replace(s, hyper={**{k: v for k, v in s.hyper.items() if k not in _CFL_RULE_KEYS},
                                                **rule})
            if new not in out:
                out.append(new)
    return out


def table_ii_cfl_specs(specs) -> list[RunSpec]:
    """The CFL runs of ``specs`` that choose their split test (``split_rule='ratio'``, or
    ``eps1='auto'``), at Table II's thresholds instead (the choice dropped: the default 1e-5): the
    specs of the CFL records this grid ran before issue 57 (they never split: CFL trained as
    FedAvg). They are not ranked; notebook 11 and the report show them as a labelled second reading
    (:func:`fedlib.experiment.present_records`)."""
    return _cfl_rule_specs(specs, {})


def superseded_cfl_specs(specs) -> list[RunSpec]:
    """The CFL runs of ``specs`` that choose their split test, at ``eps1='auto'`` (scale 0.7)
    instead: the specs of the CFL records this grid ran from issue 57 to issue 69, whose ε1 test
    every cluster passed (:data:`fedlib.methods.cfl.AUTO_LABEL`). Not ranked; the report names them
    "auto (defective, superseded)" (:func:`fedlib.methods.cfl.thresholds_label`)."""
    return _cfl_rule_specs(specs, {"eps1": "auto", "auto_scale": 0.7})


def notebook_grid(*, dataset: str, n_train, n_global_test, partitions, n_clients: int, seeds, methods, fl: dict,
                  hyper: dict, val_fraction: float, arch: str | None = None) -> dict[str, list[RunSpec]]:
    """Notebook 11's grid from its parameters (:data:`GRID_PARAMS`), by table: ``'cross'`` —
    every method on every partition (:func:`training_specs`)."""
    return {"cross": training_specs(partitions, n_clients, seeds, methods, fl, hyper=hyper, n_train=n_train,
                                    dataset=dataset, val_fraction=val_fraction, n_global_test=n_global_test,
                                    arch=arch)}


# ----------------------------------------------------------------------------- records → frames


def grid_label(spec: RunSpec) -> str:
    """A run's row as the grid command's progress lines print it (``python -m fedlib.grid
    cross-paper``): as the seed paper's own table names it — FedPrism with its ablation, a run on
    pFedLIA's partitions by :func:`workbook.pfedlia_study.method_label`, any other by
    :func:`workbook.fedprism_study.method_label` (the study's partitions are label skews; runs
    beyond label skew are the beyond-label table's, named by :func:`workbook.beyond_label.grid_label`)."""
    from . import fedprism_study, pfedlia_study  # imported for a label only: each costs seconds

    if spec.method == "fedprism" or spec.protocol not in pfedlia_study.SETTINGS:
        return fedprism_study.grid_label(spec)
    return pfedlia_study.method_label(spec.to_dict())


def partition_of(protocol: str, level: float) -> str:
    """The name in :data:`PARTITIONS` of a (protocol, level); ValueError for another one."""
    for name, p in PARTITIONS.items():
        if p.protocol == protocol and float(p.level) == float(level):
            return name
    fail("protocol, level", f"one of the partitions {[(p.protocol, p.level) for p in PARTITIONS.values()]}",
         (protocol, level))


def worst_clients_accuracy(acc, share: float = WORST_SHARE) -> float:
    """Mean local accuracy of the worst ⌈share·K⌉ clients with a test split."""
    a = np.sort(np.asarray(acc, float)[~np.isnan(np.asarray(acc, float))])
    return float(a[:max(1, int(np.ceil(share * a.size)))].mean()) if a.size else np.nan


RUN_COLUMNS = ["partition", "method", "seed", "status", "error", "seconds", "cpu_seconds", "weighted_local", "worst10",
               "official_test", "ad_cl", "ari", "groups", "local_accuracy", "thresholds", "never_split"]
"""The columns of :func:`runs_frame`, in order."""


def _grouping(record: dict) -> tuple[float, float]:
    """(ARI against the planted clusters, distinct groups) of a finished run's final grouping
    (``info['cluster_of_client']`` or ``info['assignment']``) for a :data:`GROUPING_METHODS`
    method; NaN for what does not exist (no grouping, no planted clusters)."""
    s, info = record["spec"], record.get("info", {})
    truth = P.planted_clusters(s["protocol"], int(s["n_clients"]), s["level"])
    grouping = info.get("cluster_of_client", info.get("assignment"))
    if grouping is None or s["method"] not in GROUPING_METHODS:
        return np.nan, np.nan
    g = np.asarray(grouping, np.int64)
    return (np.nan if truth is None else cluster_recovery(g, truth)), len(np.unique(g))


def runs_frame(records) -> pd.DataFrame:
    """One row per run: ``partition`` (:data:`PARTITIONS` name), ``method``, ``seed``, ``status``,
    ``error`` (why a run failed or was infeasible), and, for a finished run, in %:
    ``weighted_local`` (the weighted local accuracy, record field ``global_accuracy``),
    ``worst10`` (mean of the worst 10 % clients), ``official_test`` (``global_test_accuracy``),
    ``ad_cl`` (AD from CL, same partition and seed), ``ari`` (NaN without planted clusters or a
    grouping), ``groups`` (distinct groups in the final grouping of a :data:`GROUPING_METHODS`
    method, else NaN), ``seconds`` (wall time), ``cpu_seconds`` (CPU time) and ``local_accuracy``
    (per client, fractions), and for CFL ``thresholds`` (:func:`fedlib.methods.cfl.thresholds_label`
    of its spec: a spec without ``eps1`` ran Table II's 1e-5) and ``never_split``
    (:func:`fedlib.methods.cfl.never_split` of its record; None for other methods).

    A column selection of :func:`fedlib.frame.records_frame`; the per-client columns are read
    from its ``record`` column. Shape (runs, :data:`RUN_COLUMNS`)."""
    f = records_frame(records)
    if f.empty:
        return pd.DataFrame([], columns=RUN_COLUMNS)
    ok, recs = (f.status == "ok").tolist(), f.record.tolist()
    cfl_run = (f.method == "cfl").tolist()
    acc = [np.asarray(r["local_accuracy"], float) if o else None for r, o in zip(recs, ok)]
    grouping = [_grouping(r) if o else (np.nan, np.nan) for r, o in zip(recs, ok)]
    official = f["global_test_accuracy"] if "global_test_accuracy" in f else pd.Series(np.nan, index=f.index)
    out = pd.DataFrame({
        "partition": [partition_of(p, lv) for p, lv in zip(f.protocol, f.level)], "method": f.method.tolist(),
        "seed": f.seed.tolist(), "status": f.status.tolist(), "error": [r.get("error", "") for r in recs],
        "seconds": f.seconds.tolist(), "cpu_seconds": f.cpu_seconds.tolist(),
        "weighted_local": (100 * f.global_accuracy).where(ok).tolist(),
        "worst10": [100 * worst_clients_accuracy(a) if o else np.nan for a, o in zip(acc, ok)],
        "official_test": (100 * official).where(ok).tolist(), "ad_cl": (100 * f.ad_cl).where(ok).tolist(),
        "ari": [a for a, _ in grouping], "groups": [g for _, g in grouping], "local_accuracy": acc,
        "thresholds": [cfl.thresholds_label(r["spec"].get("hyper")) if c else "" for r, c in zip(recs, cfl_run)],
        "never_split": [cfl.never_split(r.get("info")) if c and o else None for r, c, o in zip(recs, cfl_run, ok)]})
    return out[RUN_COLUMNS]


def _order(df: pd.DataFrame, column: str, names) -> list:
    return [n for n in names if n in set(df[column])]


def method_row_label(df: pd.DataFrame, method: str) -> str:
    """A table row's name: the method's display name, and for CFL the thresholds its runs in ``df``
    used (``'CFL (‖mean ΔW‖ < 0.25 · max ‖ΔW_i‖ (scale-free), γ = 0.5)'``; several, joined by " / ")."""
    name = display_name(method)
    if method != "cfl" or "thresholds" not in df:
        return name
    used = sorted({x for x in df[df.method == "cfl"].thresholds if x})
    return f"{name} ({' / '.join(used)})" if used else name


def cfl_notes(df: pd.DataFrame) -> dict:
    """Partition -> :func:`fedlib.methods.cfl.split_note` of the CFL runs of ``df`` there
    ("CFL never split" where none split), for the partitions with a finished CFL run."""
    g = df[(df.method == "cfl") & (df.status == "ok")]
    return {p: cfl.split_note(x.never_split) for p, x in g.groupby("partition", sort=False)}


def status_table(df: pd.DataFrame) -> pd.DataFrame:
    """The runs that did not finish: partition, method, seed, status and the reason."""
    bad = df[df.status != "ok"]
    return bad[["partition", "method", "seed", "status", "error"]].reset_index(drop=True)


def score_table(df: pd.DataFrame, value: str = "weighted_local") -> pd.DataFrame:
    """Methods × partitions of ``value`` (a column of :func:`runs_frame`), mean over the seeds
    that finished; NaN where a method did not run (the Oracle without planted clusters) or where
    a seed failed or was infeasible (never a number from the surviving seeds)."""
    methods, parts = _order(df, "method", METHODS), _order(df, "partition", PARTITIONS)
    out = pd.DataFrame(np.nan, index=pd.Index(methods, name="method"), columns=parts)
    for (m, p), g in df.groupby(["method", "partition"]):
        if (g.status == "ok").all():
            out.loc[m, p] = g[value].mean()
    return out


METRICS = {
    "weighted_local": "weighted local accuracy (%): Σ_k CC_k / Σ_k n_k over the clients' own test splits "
                      "(Clust-PSI-PFL's \"global accuracy\"; record field global_accuracy)",
    "worst10": "worst 10 % clients (%): the mean local accuracy A_k = CC_k / n_k of the ⌈0.1·K⌉ worst clients",
    "official_test": "official-test accuracy (%): each client's model on the data set's official test set, mean "
                     "over clients (FedPrism's \"global accuracy\"; record field global_test_accuracy)",
    "ad_cl": "AD from CL (%): mean over clients of |A_k − CL's weighted local accuracy| (same partition and seed)",
    "ari": "ARI: adjusted Rand index of the method's final grouping against the planted clusters (1 = recovered)",
    "groups": "groups found: distinct groups in the final grouping of a method that groups clients (1: one model "
              "for all, as CFL when its split criterion is never met and it trains as FedAvg)",
    "cpu_seconds": "CPU time (s): the run's process CPU time, every thread summed (record field cpu_seconds), data "
                   "loading and evaluation included",
}
"""The per-run quantities of :func:`runs_frame` that :func:`cell_table` renders, with their definitions."""
DIGITS = {"groups": 1, "cpu_seconds": 1}  # decimals shown per quantity (else 2)


def cell_csv(df: pd.DataFrame, value: str, partitions=None) -> pd.DataFrame:
    """:func:`cell_table`'s cells as numbers (:func:`workbook.tables.cell_numbers`): method, partition,
    mean, sd, n, status — the CSV beside the notebook's table (never "mean ± sd" strings)."""
    from .tables import cell_numbers

    check_choice(value, "value", tuple(METRICS))
    parts = _order(df, "partition", PARTITIONS) if partitions is None else list(partitions)
    cells = []
    for m in _order(df, "method", METHODS):
        for p in parts:
            g = df[(df.method == m) & (df.partition == p)]
            bad = sorted(set(g.status) - {"ok"})
            status = "not run" if g.empty else "/".join(bad) if bad else "ok"
            cells.append((method_row_label(df, m), PARTITIONS[p].label, g[value] if status == "ok" else [], status))
    return cell_numbers(cells).rename(columns={"row": "method", "column": "partition"})


def cell_table(df: pd.DataFrame, value: str, partitions=None) -> pd.DataFrame:
    """Methods × partitions of ``value`` (a key of :data:`METRICS`) as the notebook prints it:
    "mean ± std (n = seeds)" (:func:`workbook.tables.mean_sd`); a cell with a failed or
    infeasible run shows that status (never a number from the surviving seeds), a method not
    run on a partition "not run", a number that does not exist (ARI without planted clusters
    or without a grouping) "—". ``partitions``: the columns, in that order (keys of
    :data:`PARTITIONS`; a partition without any record yet is a column of "not run"); None:
    the partitions of ``df``. CFL's row names its thresholds (:func:`method_row_label`) and a
    cell whose CFL runs never split says so: "(CFL never split)" (:func:`cfl_notes`)."""
    from .tables import mean_sd

    check_choice(value, "value", tuple(METRICS))
    methods = _order(df, "method", METHODS)
    if partitions is None:
        parts = _order(df, "partition", PARTITIONS)
    else:
        parts = list(partitions)
        for p in parts:
            check_choice(p, "partitions entries", tuple(PARTITIONS))
    rows = []
    for m in methods:
        row = {"Method": method_row_label(df, m)}
        for p in parts:
            g = df[(df.method == m) & (df.partition == p)]
            bad = sorted(set(g.status) - {"ok"})
            row[PARTITIONS[p].label] = ("not run" if g.empty else "/".join(bad) if bad
                                        else mean_sd(g[value], digits=DIGITS.get(value, 2)))
            note = cfl.split_note(g.never_split) if m == "cfl" and not g.empty and not bad else ""
            if note:
                row[PARTITIONS[p].label] += f" ({note})"
        rows.append(row)
    return pd.DataFrame(rows)


def planted_partitions(partitions, n_clients: int) -> list[str]:
    """The partitions of ``partitions`` (keys of :data:`PARTITIONS`) that plant clusters at K =
    ``n_clients``: the columns an ARI can exist in."""
    return [p for p in partitions
            if P.planted_clusters(PARTITIONS[p].protocol, n_clients, PARTITIONS[p].level) is not None]


def complete_partitions(missing) -> set:
    """The partitions (keys of :data:`PARTITIONS`) of which no run of ``missing`` (the specs without
    a record yet, :func:`fedlib.experiment.present_records`) remains: the ones a ranking may use
    while the grid's records are coming in (its other partitions hold only the methods run so far)."""
    return set(PARTITIONS) - {partition_of(s.protocol, s.level) for s in missing}


MIN_BLOCKS, MIN_METHODS = 5, 3
"""What :func:`ranking` needs: partitions (blocks; autorank's minimum) and methods scored on all of them."""


def unrankable(scores: pd.DataFrame, exclude=REFERENCES) -> str | None:
    """Why :func:`ranking` cannot rank ``scores`` yet (e.g. while a grid's records are coming in),
    or None when it can: it needs ≥ :data:`MIN_BLOCKS` partitions and ≥ :data:`MIN_METHODS`
    methods (``exclude`` aside) scored on all of them."""
    data = scores.drop(index=[m for m in exclude if m in scores.index]).T.dropna(axis=0, how="all")
    full = data.dropna(axis=1, how="any")
    if data.shape[0] < MIN_BLOCKS or full.shape[1] < MIN_METHODS:
        return (f"{data.shape[0]} partition(s) with a score and {full.shape[1]} method(s) scored on all of them; "
                f"the ranking needs ≥ {MIN_BLOCKS} partitions and ≥ {MIN_METHODS} methods scored on all")
    return None


def ranking(scores: pd.DataFrame, *, alpha: float = ALPHA, exclude=REFERENCES):
    """autorank on ``scores`` (methods × partitions, higher is better, e.g. :func:`score_table`):
    blocks are the partitions, populations the methods; the methods in ``exclude`` and those
    without a score on every partition are left out (returned). ``force_mode='nonparametric'``:
    Friedman's test and the Nemenyi post-hoc (Demšar 2006).

    Returns
    -------
    (autorank RankResult, list of the methods left out). ``result.rankdf.meanrank``: the mean
    rank (1 = best) of each method; ``result.pvalue``: Friedman's p; ``result.cd``: the
    critical distance.
    """
    # rows: partitions (blocks); a partition without any score yet is no block
    data = scores.drop(index=[m for m in exclude if m in scores.index]).T.dropna(axis=0, how="all")
    left_out = [m for m in data.columns if data[m].isna().any()]
    data = data.drop(columns=left_out)
    if data.shape[0] < MIN_BLOCKS or data.shape[1] < MIN_METHODS:
        fail("scores", "≥ 5 partitions (blocks: autorank's minimum) and ≥ 3 methods scored on all of them",
             f"{data.shape[0]} partitions × {data.shape[1]} methods")
    return _autorank(data, alpha), left_out


def _autorank(data: pd.DataFrame, alpha: float):
    """autorank's Friedman / Nemenyi analysis of ``data`` (rows: blocks, columns: populations,
    higher is better), its notice about the forced mode kept off the notebook's output."""
    import contextlib
    import io
    import warnings

    from autorank import autorank

    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        # its effect sizes (not used here) divide by a spread that is 0 for constant columns
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.filterwarnings("ignore", message=".*range zero.*", category=UserWarning)  # Shapiro on a constant column
        return autorank(data, alpha=alpha, order="descending", force_mode="nonparametric")


def fig_cd(result):
    """The critical-difference diagram of ``result`` (:func:`ranking`), drawn by autorank."""
    from autorank import plot_stats

    renamed = result._replace(rankdf=result.rankdf.rename(index=display_name))
    ax = plot_stats(renamed, allow_insignificant=True, width=9)
    return ax.get_figure()


def fig_heatmap(scores: pd.DataFrame, title: str = "weighted local accuracy (%)"):
    """Methods × partitions of ``scores`` (:func:`score_table`) as a heat map; blank: not run
    (or not finished)."""
    fig, ax = plt.subplots(figsize=(1.3 * scores.shape[1] + 3, 0.32 * scores.shape[0] + 1.5))
    im = ax.imshow(scores.to_numpy(float), cmap="viridis", aspect="auto")
    ax.set_xticks(range(scores.shape[1]), [PARTITIONS[p].label for p in scores.columns], rotation=30, ha="right",
                  fontsize=8)
    ax.set_yticks(range(scores.shape[0]), [display_name(m) for m in scores.index], fontsize=8)
    for i, j in zip(*np.where(~np.isnan(scores.to_numpy(float)))):
        v = scores.iat[i, j]
        ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=6,
                color="white" if v < np.nanmean(scores.to_numpy(float)) else "black")
    fig.colorbar(im, ax=ax, label=title)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def ecdf_frame(df: pd.DataFrame, partition: str) -> pd.DataFrame:
    """The clients' local accuracies (%, every finished seed pooled) of every method on
    ``partition``, one row per (method, client, seed), sorted, with the ECDF value ``F``."""
    rows = []
    for m in _order(df, "method", METHODS):
        g = df[(df.partition == partition) & (df.method == m) & (df.status == "ok")]
        acc = np.sort(np.concatenate([a[~np.isnan(a)] for a in g.local_accuracy])) if len(g) else np.array([])
        rows += [{"method": m, "accuracy": 100 * a, "F": (i + 1) / acc.size} for i, a in enumerate(acc)]
    return pd.DataFrame(rows, columns=["method", "accuracy", "F"])


def fig_ecdf(frames: dict, highlight=("cl", "fedavg", "clust_psi_pfl", "pfedlia", "fedprism", "cafa")):
    """One panel per partition of ``frames`` ({partition: :func:`ecdf_frame`}); the
    ``highlight`` methods coloured, the others grey."""
    cols = min(4, len(frames))
    rows = -(-len(frames) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.9 * rows), squeeze=False, sharey=True)
    cmap = plt.get_cmap("tab10")
    for ax in axes.flat[len(frames):]:
        ax.set_visible(False)
    for ax, (name, f) in zip(axes.flat, frames.items()):
        for m in _order(f, "method", METHODS):
            d = f[f.method == m]
            if m in highlight:
                ax.step(d.accuracy, d.F, where="post", lw=1.6, color=cmap(highlight.index(m)), label=display_name(m))
            else:
                ax.step(d.accuracy, d.F, where="post", lw=0.6, color="0.75")
        ax.set_title(PARTITIONS[name].label, fontsize=9)
        ax.set_xlabel("client's local accuracy (%)")
    for ax in axes[:, 0]:
        ax.set_ylabel("share of clients ≤ x")
    axes.flat[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def _client_blocks(df: pd.DataFrame, partition: str, methods) -> pd.DataFrame:
    """Rows (seed, client) with a test split, columns the methods: each client's local accuracy."""
    cols = {}
    for m in methods:
        g = df[(df.partition == partition) & (df.method == m)].sort_values("seed")
        cols[m] = np.concatenate(list(g.local_accuracy))
    data = pd.DataFrame(cols)
    return data.dropna().reset_index(drop=True)


def which_method_when(df: pd.DataFrame, *, alpha: float = ALPHA, exclude=REFERENCES) -> pd.DataFrame:
    """Per partition: the best method and those not significantly worse.

    Blocks are the clients (every seed's clients with a test split; each method's local accuracy
    of the client: the same clients and test splits for all methods, so paired); populations the
    methods that finished every seed of the partition, less ``exclude``. autorank with
    ``force_mode='nonparametric'``: Friedman's test, then the Nemenyi post-hoc: a method is not
    significantly worse than the best (lowest mean rank) when its mean rank is within the
    critical distance CD of the best's.

    Returns
    -------
    DataFrame, one row per partition: ``partition``, ``best`` (missing where fewer than 3
    methods or 5 clients leave nothing to test), ``not_worse`` (list, best first by
    mean rank), ``friedman_p``, ``cd``, ``n_blocks``, ``n_methods``, ``left_out`` (methods not
    finished on every seed).
    """
    rows = []
    for p in _order(df, "partition", PARTITIONS):
        here = df[df.partition == p]
        candidates = [m for m in _order(here, "method", METHODS) if m not in exclude]
        left_out = [m for m in candidates if not (here[here.method == m].status == "ok").all()]
        methods = [m for m in candidates if m not in left_out]
        data = _client_blocks(here, p, methods)
        if len(methods) < 3 or len(data) < 5:
            rows.append({"partition": p, "best": None, "not_worse": [], "friedman_p": np.nan, "cd": np.nan,
                         "n_blocks": len(data), "n_methods": len(methods), "left_out": left_out})
            continue
        res = _autorank(data, alpha)
        ranks = res.rankdf.meanrank.sort_values()
        best = ranks.index[0]
        close = [m for m in ranks.index if ranks[m] - ranks[best] <= res.cd]
        rows.append({"partition": p, "best": best, "not_worse": close, "friedman_p": res.pvalue, "cd": res.cd,
                     "n_blocks": len(data), "n_methods": len(methods), "left_out": left_out})
    return pd.DataFrame(rows, columns=["partition", "best", "not_worse", "friedman_p", "cd", "n_blocks",
                                       "n_methods", "left_out"])


def tau_lines(found, scores: pd.DataFrame) -> list[str]:
    """One line per Clust-PSI-PFL record of ``found`` that chose τ: what τ is in terms of the clients'
    label histograms (:func:`workbook.cluster_study.tau_readings`, the train label counts rebuilt
    from each record's spec) and Clust-PSI-PFL's score minus Local's in ``scores`` (:func:`score_table`)."""
    from fedlib.experiment import build_federation
    from .cluster_study import tau_explanations, tau_readings

    taus = tau_readings(found, lambda r: build_federation(RunSpec.from_record(r["spec"]), "cpu")[1],
                        lambda r: partition_of(r["spec"]["protocol"], r["spec"]["level"]))
    if taus.empty:
        return []
    gap = ({q: scores.loc["clust_psi_pfl", q] - scores.loc["local", q] for q in scores.columns}
           if {"clust_psi_pfl", "local"} <= set(scores.index) else None)
    return tau_explanations(taus, gap, label=lambda q: PARTITIONS[q].label)
