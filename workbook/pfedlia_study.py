"""What notebook 10 shows of pFedLIA (the fourth seed paper): the FMNIST columns of Table I
(Oracle, Local-only, FedAvg, FedFomo, FedProto, FeSEM, CFL, pFedLIA; pathological and noisy),
the rounds curve of Fig. 4 on FMNIST, the influence row of Fig. 3b, and the cluster recovery
(adjusted Rand index against the planted clusters) of pFedLIA, FeSEM, CFL and Clust-PSI-PFL —
a table no paper has — with the paper's values beside ours.

Two readings of Table I (:data:`READINGS`), by the data split of the records (``data_split``,
:data:`DATA_SPLITS`):

* ``'fl_bench'`` — the paper profile's (``params/paper/10_pfedlia.yaml``): how FL-bench, the
  paper's code base, generates and scores FMNIST. Its ``generate_data.py`` pools the official
  training and test sets (70,000 images, ``RunSpec.pool_test``) before the partition and splits
  each client 75/25 train/test (``--test_ratio 0.25``, ``--val_ratio 0``: no validation split; the
  paper's "train and validation set, with a ratio of 3 : 1"). Every method trains on the whole
  75 % except those that select or weight on held-out data: FL-bench's FedFomo holds out the first
  ``--valset_ratio`` = 20 % of its client's train set (15 % of the client's data) and trains on the
  rest; pFedLIA's validation split for Eq. (1) is taken the same way — an assumption of the
  workbook's, not a setting of the paper's (its code is not public; the only held-out set
  FL-bench makes is the test split). Accuracy is pooled, Σ correct / Σ test
  samples over the clients (FL-bench's), record field ``global_accuracy``.
* ``'workbook'`` — ours (the committed records): the official training set only, each client
  split 60/20/20 into train, validation and test for every method (train:validation the paper's
  3:1), the official test set unused; accuracy is the unweighted mean over clients of each
  client's accuracy on its own test split. A labelled second reading.

The paper's model is a pretrained ResNet-18 (not obtainable offline): ours is the workbook's FMNIST
CNN from random initialisation (``arch='resnet18'`` is available, from random initialisation too).

pFedLIA's influence models θ̂_j: Sec. III-D and Fig. 2 train them on "a batch of [j's] training
data"; the one batch size the paper states is Fig. 3a's (the influence of "a batch B (100 data
points)"), so the paper profile sets ``influence_samples: 100``; the workbook records trained them
on the whole train split (the method's default, ``influence_samples`` absent from their spec).

CFL: the paper ran it through FL-bench, whose defaults are ε1 = 0.4, ε2 = 1.6, no γ check
(:data:`CFL_PAPER`; the row "CFL"). Other thresholds (``cfl_variants`` of
:func:`training_specs`, e.g. ``eps1='auto'``) are rows of their own, named by their thresholds
(:func:`method_label`), without the paper's value beside them.
"""
from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fedlib import partition as P
from fedlib.evaluation import cluster_recovery
from fedlib.frame import records_frame
from fedlib.experiment import RunSpec, grid_specs
from fedlib.methods import cfl, display_name
from fedlib.paths import ROOT
from .tables import mean_sd, frame_markdown as table_markdown
from fedlib import records as R
from fedlib.validation import check_choice, check_int, fail
from . import paper_values

__all__ = ["PAPER_RECORDS", "DATA_SPLITS", "READINGS", "FL_BENCH_TEST", "FL_BENCH_VAL_OF_TRAIN", "split_of", "fl_bench_val_fraction", "METHODS", "SETTINGS", "PAPER_TABLE1", "RECOVERY_METHODS", "NOT_RUN_HERE", "FESEM_ESTEPS", "fesem_stay", "stay_note", "CFL_PAPER", "local_epochs_total",
           "training_specs", "GRID_PARAMS", "notebook_grid", "grid_label", "method_label", "accuracy_frame", "table1", "table1_csv", "TABLE1_CSV_COLUMNS", "recovery_table", "recovery_csv", "rounds_frame",
           "fig_rounds", "influence_frame", "fig_influence", "observations", "table_markdown", "one_split"]

METHODS = ["oracle", "local", "fedavg", "fedfomo", "fedproto", "fesem", "cfl", "pfedlia"]  # Table I's rows
SETTINGS = {"pathological_clusters": "Pathological", "noisy_clusters": "Noisy"}
RECOVERY_METHODS = ["pfedlia", "pfedlia (p2p)", "fesem", "cfl", "clust_psi_pfl"]
DATA_SPLITS = ("workbook", "fl_bench")
"""Where the clients' data and test splits come from (module docstring)."""
READINGS = {"fl_bench": ("pooled", "FL-bench split (official train + test pooled, 75/25 per client), pooled accuracy "
                                   "Σ correct / Σ test samples: the paper's code base"),
            "workbook": ("accuracy", "workbook split (official train set, 60/20/20 per client), mean over clients "
                                     "of each client's accuracy")}
"""Data split -> (the :func:`accuracy_frame` column Table I reads, its label)."""
FL_BENCH_TEST = 0.25
"""FL-bench's ``generate_data.py --test_ratio`` default (``--val_ratio`` defaults to 0)."""
FL_BENCH_VAL_OF_TRAIN = 0.2
"""FL-bench FedFomo's ``--valset_ratio``: the share of a client's train set a method that needs
held-out data keeps from training (FedFomo's; pFedLIA's Eq. (1) on the same rule is an
ASSUMPTION: pFedLIA's code is not public and the paper states no validation share for it)."""
PAPER_RECORDS = ROOT / "benchmarks" / "records" / "pfedlia" / "table1"
"""The committed paper-protocol records of Table I (``benchmarks/paper_grid.py pfedlia-table1``),
read by notebook 10 and the reproduction report without retraining."""
NOT_RUN_HERE = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100 (superclasses)"}
# CFL's thresholds in the paper's runs: FL-bench's defaults (src/server/cfl.py: eps_1 0.4, eps_2 1.6,
# no γ check; clustering from round 20, the warm-up, which params/paper/10_pfedlia.yaml sets).
# The values: workbook/papers/pfedlia.yaml (workbook.paper_values), blocks cfl_thresholds and table1.
CFL_PAPER = {k: v for k, (v,) in paper_values.rows("pfedlia", "cfl_thresholds").items()}


def _table1() -> dict:
    """Table I, accuracy (%) (mean, std) over 4 runs as printed, None where the paper shows "–":
    {setting: {data set: {method: (mean, std) or None}}}, each column of the block a (setting, data set)."""
    out: dict = {}
    cols = paper_values.column_labels("pfedlia", "table1")
    for (setting, ds) in cols:
        check_choice(setting, "pfedlia.yaml: tables.table1 column setting", tuple(SETTINGS))
        out.setdefault(setting, {})[ds] = {}
    for method, cells in paper_values.rows("pfedlia", "table1").items():
        for (setting, ds), v in zip(cols, cells):
            out[setting][ds][method] = v
    return out


PAPER_TABLE1 = _table1()


# ----------------------------------------------------------------------------- the grid
def local_epochs_total(fl: dict) -> int:
    """Local-only's epochs: R·q·E, what a client trains on average when q of the clients train
    E epochs in each of R rounds (FL-bench's Local-only trains only the selected clients),
    rounded, at least 1."""
    r, q, e = fl.get("rounds", 40), fl.get("fraction", 0.5), fl.get("local_epochs", 5)
    return max(1, int(round(r * q * e)))


def training_specs(settings, n_clients: int, seeds, fl: dict, *, n_clusters: int = 5, hyper: dict | None = None,
                   n_train=None, methods=None, p2p: bool = True, recovery_extra=("clust_psi_pfl",),
                   arch: str | None = None, dataset: str = "fmnist", val_fraction: float = 0.2,
                   cfl_variants=(), data_split: str = "workbook") -> list[RunSpec]:
    """Table I on one data set: ``methods`` (default :data:`METHODS`) × ``settings`` (partition
    protocols, :data:`SETTINGS`) × ``seeds``, with ``n_clusters`` planted clusters; the Oracle
    only where it is defined (pathological); pFedLIA's peer-to-peer variant too when ``p2p``;
    ``recovery_extra`` methods for the cluster-recovery table only; one more CFL run per dict of
    ``cfl_variants`` (its hyperparameters over ``hyper['cfl']``, e.g. ``{'eps1': 'auto'}``) when
    CFL is among ``methods``. Every run splits its clients 60/20/20 (train/validation/test: the
    paper's 3:1) so every method trains on the same data; ``data_split='fl_bench'`` pools the
    official test set into the partition and tests on 25 % of each client, and only the methods that
    need held-out data keep a validation split, 15 % of the client (:func:`fl_bench_val_fraction`;
    module docstring)."""
    check_choice(data_split, "data_split", DATA_SPLITS)
    for s in settings:
        check_choice(s, "settings", tuple(SETTINGS))
    check_int(n_clusters, "n_clusters", 1)
    hyper = {m: dict(v) for m, v in (hyper or {}).items()}
    hyper.setdefault("local", {}).setdefault("epochs", local_epochs_total(fl))
    if "warmup_rounds" in hyper.get("pfedlia", {}):  # the Oracle runs pFedLIA's schedule (oracle.py)
        hyper.setdefault("oracle", {}).setdefault("warmup_rounds", hyper["pfedlia"]["warmup_rounds"])
    methods = list(methods or METHODS) + [m for m in recovery_extra if m not in (methods or METHODS)]
    specs = []
    for setting in settings:
        ms = [m for m in methods if not (m == "oracle" and setting != "pathological_clusters")]
        specs += grid_specs([dataset], {setting: [n_clusters]}, [n_clients], list(seeds), ms, hyper=hyper, fl=fl,
                            n_train=n_train)
        for v in cfl_variants if "cfl" in methods else ():
            if not isinstance(v, dict):
                fail("cfl_variants", "a list of dicts of CFL hyperparameters, e.g. [{'eps1': 'auto'}]", v)
            specs += grid_specs([dataset], {setting: [n_clusters]}, [n_clients], list(seeds), ["cfl"],
                                hyper={"cfl": {**hyper.get("cfl", {}), **v}}, fl=fl, n_train=n_train)
        if p2p and "pfedlia" in methods:
            specs += grid_specs([dataset], {setting: [n_clusters]}, [n_clients], list(seeds), ["pfedlia"],
                                hyper={"pfedlia": {**hyper.get("pfedlia", {}), "clustering": "p2p"}}, fl=fl,
                                n_train=n_train)
    if data_split == "fl_bench":
        return [dataclasses.replace(s, arch=arch, test_fraction=FL_BENCH_TEST, pool_test=True,
                                    val_fraction=fl_bench_val_fraction(s.method, s.hyper)) for s in specs]
    return [dataclasses.replace(s, val_fraction=val_fraction, arch=arch) for s in specs]


def fl_bench_val_fraction(method: str, hyper: dict | None = None) -> float:
    """A run's validation share of the client's data on FL-bench's split: 0 for a method that
    uses none, else :data:`FL_BENCH_VAL_OF_TRAIN` of the train part, (1 − 0.25) · 0.2 = 0.15
    (FL-bench's FedFomo; for pFedLIA an assumption, FedFomo's share, not the paper's; the test
    split stays 25 %)."""
    from fedlib.methods import make_hyper, method_info

    needs = method_info(method).needs_val(make_hyper(method, hyper or {}))
    return round((1 - FL_BENCH_TEST) * FL_BENCH_VAL_OF_TRAIN, 12) if needs else 0.0


def split_of(spec: dict) -> str:
    """The data split (:data:`DATA_SPLITS`) a record's spec ran: ``'fl_bench'`` when it pooled the
    official test set (``pool_test``), else ``'workbook'``."""
    return "fl_bench" if spec.get("pool_test") else "workbook"


GRID_PARAMS = ("dataset", "n_train", "settings", "n_clusters", "n_clients", "seeds", "methods", "fl", "hyper",
               "cfl_variants", "arch", "data_split")
"""The parameters of notebook 10 (``params/*/10_pfedlia.yaml``) that its grid depends on:
:func:`notebook_grid`'s keywords."""


def notebook_grid(*, dataset: str, n_train, settings, n_clusters: int, n_clients: int, seeds, methods, fl: dict,
                  hyper: dict, cfl_variants, arch, data_split="workbook") -> dict[str, list[RunSpec]]:
    """Notebook 10's grid from its parameters (:data:`GRID_PARAMS`), by table: ``'table1'`` —
    Table I's runs and the cluster-recovery table's (:func:`training_specs`)."""
    return {"table1": training_specs(settings, n_clients, seeds, fl, n_clusters=n_clusters, hyper=hyper,
                                     n_train=n_train, methods=methods, arch=arch, dataset=dataset,
                                     cfl_variants=cfl_variants, data_split=data_split)}


# ----------------------------------------------------------------------------- records → frames
def method_label(spec: dict) -> str:
    """The row name of a run: the method, pFedLIA's clustering when it is peer-to-peer, CFL's
    thresholds when they are not the paper's (:data:`CFL_PAPER`), e.g. ``'cfl (ε1 = auto (defective, superseded; 0.5 ×
    warm-up update), ε2 = 0, γ = 0)'``, FeSEM's start when it is not the paper's
    (``'fesem (all-clients start)'``: ``init='clients'``, which every FeSEM record written before
    ``init`` existed ran — :func:`fedlib.records.with_recorded_defaults`) and its E-step when it is
    not the paper's (``'fesem (update-direction E-step)'``: ``estep='update_cosine'``)."""
    hyper = R.with_recorded_defaults(spec).get("hyper") or {}
    if spec["method"] == "fesem" and (hyper.get("init", "forgy") != "forgy" or hyper.get("estep", "distance") != "distance"):
        parts = [FESEM_STARTS[hyper["init"]]] if hyper.get("init", "forgy") != "forgy" else []
        parts += [FESEM_ESTEPS[hyper["estep"]]] if hyper.get("estep", "distance") != "distance" else []
        return f"fesem ({', '.join(parts)})"
    if spec["method"] == "pfedlia" and hyper.get("clustering", "centralised") == "p2p":
        return "pfedlia (p2p)"
    if spec["method"] == "cfl" and cfl.thresholds(hyper) != cfl.thresholds(CFL_PAPER):
        return f"cfl ({cfl.thresholds_label(hyper)})"
    return spec["method"]


def grid_label(spec: RunSpec) -> str:
    """A run's row as the grid command's progress lines print it (``python -m fedlib.grid
    pfedlia-table1``): :func:`method_label` of its spec."""
    return method_label(spec.to_dict())


def _display(label: str) -> str:
    if label == "cfl":
        return f"{display_name('cfl')} ({cfl.thresholds_label(CFL_PAPER)}: FL-bench's)"
    base, _, rest = label.partition(" ")
    return display_name(base) + (f" {rest}" if rest else "")


FESEM_STARTS = {"clients": "all-clients start"}
"""FeSEM's starts other than the paper's (Forgy), as their rows are named."""
FESEM_ESTEPS = {"update_cosine": "update-direction E-step"}
"""FeSEM's E-steps other than the paper's (distance to the centres), as their rows are named."""


def fesem_stay(record: dict) -> tuple[int, int] | None:
    """(kept, re-assigned) of a FeSEM run: E-steps of rounds ≥ 1 of a client whose previous
    E-step (round ≥ 1) lies in the same re-clustering window, and how many of them kept the
    client's cluster (issue 69). Read from ``info['stay']['window']`` where the run wrote it,
    else replayed from the record's ``selected``, ``choices`` and ``reclustered`` (the same
    count: tests/test_fesem.py); None for another method or a record without them."""
    info = record.get("info") or {}
    if record.get("spec", {}).get("method") != "fesem":
        return None
    if isinstance(info.get("stay"), dict) and "window" in info["stay"]:
        kept, total = info["stay"]["window"]
        return int(kept), int(total)
    if not all(k in info for k in ("selected", "choices", "reclustered")):
        return None
    last, kept, total = {}, 0, 0
    for t, (sel, ch) in enumerate(zip(info["selected"], info["choices"])):
        for i, c in zip(sel, ch):
            if t >= 1 and i in last and last[i][0] >= 1 and not any(last[i][0] < v <= t for v in info["reclustered"]):
                kept, total = kept + int(c == last[i][1]), total + 1
            last[i] = (t, c)
    return kept, total


def stay_note(stays) -> str:
    """'stays 1011/1014' — the kept and re-assigned counts summed over runs ((kept, total)
    pairs, None skipped); '' when there are none."""
    pairs = [p for p in stays if p is not None and not (isinstance(p, float) and np.isnan(p))]
    if not pairs:
        return ""
    return f"stays {sum(k for k, _ in pairs)}/{sum(t for _, t in pairs)}"


def _with_variants(names, present) -> list[str]:
    """``names`` present, each CFL row of other thresholds right after "cfl", each FeSEM row of
    another start right after "fesem"."""
    out = []
    for m in names:
        out += [m] if m in present else []
        if m in ("cfl", "fesem"):
            out += sorted(x for x in present if x.startswith(m + " ("))
    return out


_ACCURACY_COLUMNS = ["method", "setting", "seed", "status", "data_split", "seconds", "accuracy", "pooled", "ari",
                    "n_clusters", "never_split", "stay"]
"""The columns of :func:`accuracy_frame`, in order."""


def _recovery(record: dict) -> tuple[float, float]:
    """(ARI against the planted clusters, clusters found) of a finished run's grouping
    (``info['cluster_of_client']`` or ``info['assignment']``); NaN for a method without one
    (``local``, ``fedfomo``, ``fedproto``) or a partition without planted clusters."""
    s, info = record["spec"], record.get("info", {})
    grouping = info.get("cluster_of_client", info.get("assignment"))
    truth = P.planted_clusters(s["protocol"], int(s["n_clients"]), s["level"])
    if grouping is None or truth is None or s["method"] in ("local", "fedfomo", "fedproto"):
        return np.nan, np.nan
    return cluster_recovery(grouping, truth), len(set(grouping))


def accuracy_frame(records) -> pd.DataFrame:
    """One row per run: method (:func:`method_label`), setting (protocol), seed, status,
    ``data_split`` (:func:`split_of`), ``accuracy`` (%, the unweighted mean over clients of each
    client's test accuracy), ``pooled`` (%, Σ correct / Σ test samples: record field
    ``global_accuracy``), ``ari`` (the run's grouping against the planted clusters; NaN for
    methods without one), ``n_clusters`` found, ``never_split`` (CFL:
    :func:`fedlib.methods.cfl.never_split`), ``stay`` (FeSEM: (kept, re-assigned),
    :func:`fesem_stay`; None otherwise), ``seconds``.

    A column selection of :func:`fedlib.frame.records_frame`; the per-client columns are read
    from its ``record`` column. Shape (runs, the columns of ``_ACCURACY_COLUMNS``)."""
    f = records_frame(records)
    if f.empty:
        return pd.DataFrame([], columns=_ACCURACY_COLUMNS)
    ok, recs = (f.status == "ok").tolist(), f.record.tolist()
    recovery = [_recovery(r) if o else (np.nan, np.nan) for r, o in zip(recs, ok)]
    out = pd.DataFrame({
        "method": [method_label(r["spec"]) for r in recs], "setting": f.protocol.tolist(), "seed": f.seed.tolist(),
        "status": f.status.tolist(), "data_split": [split_of(r["spec"]) for r in recs], "seconds": f.seconds.tolist(),
        "accuracy": [100 * float(np.nanmean(np.asarray(r["local_accuracy"], float))) if o else np.nan
                     for r, o in zip(recs, ok)],
        "pooled": (100 * f.global_accuracy).where(ok).tolist(),
        "ari": [a for a, _ in recovery], "n_clusters": [n for _, n in recovery],
        "never_split": [cfl.never_split(r.get("info")) if o and m == "cfl" else None
                        for r, o, m in zip(recs, ok, f.method)],
        "stay": [fesem_stay(r) if o else None for r, o in zip(recs, ok)]})
    return out[_ACCURACY_COLUMNS]


def one_split(df: pd.DataFrame, split: str | None = None) -> tuple[pd.DataFrame, str]:
    """The rows of ``df`` (:func:`accuracy_frame`) of one data split and its name: ``split``, or
    the one split of ``df`` when None (a ValueError asks to choose when ``df`` holds both)."""
    present = sorted(set(df.data_split)) if "data_split" in df else ["workbook"]
    if split is None:
        if len(present) > 1:
            fail("split", f"one of {present}: these records ran on both data splits (module docstring)", split)
        split = present[0] if present else "workbook"
    check_choice(split, "split", DATA_SPLITS)
    return (df[df.data_split == split] if "data_split" in df else df), split


def _cell(values) -> str:
    return mean_sd(values)


def _paper_value(setting: str, dataset: str, method: str) -> tuple[float, float] | None:
    """The paper's Table I cell (mean, std) (%) of a row label on ``dataset``; None where the paper
    shows "–" or has no such row (a CFL row of other thresholds, pFedLIA's peer-to-peer row)."""
    if dataset not in PAPER_TABLE1[setting]:
        fail("dataset", f"one of the paper's data sets {sorted(PAPER_TABLE1[setting])}", dataset)
    return PAPER_TABLE1[setting][dataset].get(method) if " " not in method else None


def _paper(setting: str, dataset: str, method: str) -> str:
    v = _paper_value(setting, dataset, method)
    return "—" if v is None else f"{v[0]:.2f} ± {v[1]:.2f}"


def _cells(df: pd.DataFrame, labels):
    """Each (row label, setting, its runs in ``df``, status) of a table, row by row: status "ok",
    the runs' other statuses joined by "/" (the cell shows it, never a number from the surviving
    seeds), or "not run"."""
    for m in labels:
        for setting in SETTINGS:
            g = df[(df.method == m) & (df.setting == setting)]
            bad = sorted(set(g.status) - {"ok"})
            yield m, setting, g, "not run" if g.empty else "/".join(bad) if bad else "ok"


def _table1_labels(df: pd.DataFrame) -> list[str]:
    return _with_variants(METHODS + ["pfedlia (p2p)"], set(df.method))


def table1(df: pd.DataFrame, dataset: str = "fmnist", split: str | None = None) -> pd.DataFrame:
    """Table I on ``dataset``, read on the records of one data split (:func:`one_split`) by its
    metric (:data:`READINGS`: FL-bench's pooled accuracy, or the mean over clients on the
    workbook's split): per method and setting, ours (mean ± std over seeds, %) and the paper's;
    runs that failed or were infeasible show their status, missing cells "—"; a CFL cell whose
    runs never split says so ("(CFL never split)"); a FeSEM cell shows its stay count over its
    runs ("(stays 1011/1014)": :func:`fesem_stay`, the re-assignments that kept the cluster).
    Its numbers as numbers: :func:`table1_csv`."""
    df, split = one_split(df, split)
    column = READINGS[split][0]
    rows = {}
    for m, setting, g, status in _cells(df, _table1_labels(df)):
        row, name = rows.setdefault(m, {"Method": _display(m)}), SETTINGS[setting]
        row[name] = status if status not in ("ok", "not run") else _cell(g[column])
        note = cfl.split_note(g.never_split) if m.startswith("cfl") and status == "ok" else ""
        note = stay_note(g.stay) if m.startswith("fesem") and status == "ok" else note
        if note:
            row[name] += f" ({note})"
        row[f"{name} (paper)"] = _paper(setting, dataset, m)
    return pd.DataFrame(list(rows.values()))


def _counts(pairs, columns) -> dict:
    """{columns[0]: Σ first, columns[1]: Σ second} of (count, of) pairs, None and NaN skipped; NA for none."""
    pairs = [p for p in pairs if p is not None and not (isinstance(p, float) and np.isnan(p))]
    return {c: sum(int(p[i]) for p in pairs) if pairs else pd.NA for i, c in enumerate(columns)}


TABLE1_CSV_COLUMNS = ["method", "setting", "mean", "sd", "n", "status", "paper_mean", "paper_sd", "stays",
                      "stays_of", "never_split", "never_split_of"]
"""The columns of :func:`table1_csv`, in order."""


def table1_csv(df: pd.DataFrame, dataset: str = "fmnist", split: str | None = None) -> pd.DataFrame:
    """:func:`table1`'s cells as numbers (:func:`workbook.tables.cell_numbers`), one row per method
    and setting: ``method`` and ``setting`` as the table names them, ``mean``, ``sd``, ``n`` (%, over
    seeds; NaN where the cell shows a status or "—"), ``status`` ("ok", the runs' other statuses,
    "not run"), ``paper_mean``, ``paper_sd`` (the paper's cell, %; NaN where it has none), and the
    notes as counts (integers, empty where the row has none): ``stays`` of ``stays_of`` (FeSEM:
    :func:`fesem_stay` summed over the runs), ``never_split`` of ``never_split_of`` (CFL: the runs
    that kept one cluster, of those whose record says, :func:`fedlib.methods.cfl.never_split`).
    Shape (rows × settings, :data:`TABLE1_CSV_COLUMNS`) — the CSV beside the notebook's table,
    never "mean ± sd" strings."""
    from .tables import cell_numbers

    df, split = one_split(df, split)
    column = READINGS[split][0]
    cells, extra = [], []
    for m, setting, g, status in _cells(df, _table1_labels(df)):
        cells.append((_display(m), SETTINGS[setting], g[column] if status == "ok" else [], status))
        paper = _paper_value(setting, dataset, m) or (np.nan, np.nan)
        flags = [bool(f) for f in g.never_split if f is not None and f == f] if m.startswith("cfl") else []
        extra.append({"paper_mean": float(paper[0]), "paper_sd": float(paper[1]),
                      **_counts(g.stay if m.startswith("fesem") and status == "ok" else [], ("stays", "stays_of")),
                      **_counts([(f, 1) for f in flags] if status == "ok" else [], ("never_split", "never_split_of"))})
    out = cell_numbers(cells).rename(columns={"row": "method", "column": "setting"})
    extra = pd.DataFrame(extra, columns=TABLE1_CSV_COLUMNS[6:])
    for c in TABLE1_CSV_COLUMNS[8:]:
        extra[c] = extra[c].astype("Int64")
    return pd.concat([out, extra], axis=1)[TABLE1_CSV_COLUMNS]


_RECOVERY = {"ARI": "ari", "groups": "n_clusters"}
"""The cluster-recovery table's quantities: column suffix -> :func:`accuracy_frame` column."""


def recovery_table(df: pd.DataFrame, split: str | None = None) -> pd.DataFrame:
    """Adjusted Rand index (mean ± std over seeds) of each clustering method's groups against
    the planted clusters, and the number of groups it found, per setting, on the records of one
    data split (:func:`one_split`); a cell with a failed or infeasible run shows its status, as in
    :func:`table1`. Its numbers as numbers: :func:`recovery_csv`."""
    df, _ = one_split(df, split)
    rows = {}
    for m, setting, g, status in _cells(df, _with_variants(RECOVERY_METHODS, set(df.method))):
        row = rows.setdefault(m, {"Method": _display(m)})
        for q, c in _RECOVERY.items():
            row[f"{SETTINGS[setting]} {q}"] = status if status not in ("ok", "not run") else _cell(g[c])
    return pd.DataFrame(list(rows.values()))


def recovery_csv(df: pd.DataFrame, split: str | None = None) -> pd.DataFrame:
    """:func:`recovery_table`'s cells as numbers (:func:`workbook.tables.cell_numbers`), one row per
    method, setting and quantity (``'ARI'``: the adjusted Rand index, a fraction of 1 as the table
    prints it; ``'groups'``: the number of groups found): method, setting, quantity, mean, sd, n,
    status."""
    from .tables import cell_numbers

    df, _ = one_split(df, split)
    cells, quantity = [], []
    for m, setting, g, status in _cells(df, _with_variants(RECOVERY_METHODS, set(df.method))):
        for q, c in _RECOVERY.items():
            cells.append((_display(m), SETTINGS[setting], g[c] if status == "ok" else [], status))
            quantity.append(q)
    out = cell_numbers(cells).rename(columns={"row": "method", "column": "setting"})
    out.insert(2, "quantity", quantity)
    return out


def rounds_frame(records) -> pd.DataFrame:
    """Fig. 4's data: per setting, method label and round, the accuracy (%) after that round
    (the per-round history: correct over all clients' test samples), mean over seeds."""
    f = records_frame(records)
    runs = f[(f.status == "ok") & (f.method != "clust_psi_pfl")] if len(f) else f
    rows = [{"setting": r["spec"]["protocol"], "method": method_label(r["spec"]), "seed": r["spec"]["seed"],
             "round": h["round"], "accuracy": 100 * h["global_accuracy"]}
            for r in (runs.record if len(runs) else []) for h in r.get("history", [])]
    df = pd.DataFrame(rows, columns=["setting", "method", "seed", "round", "accuracy"])
    return df.groupby(["setting", "method", "round"], as_index=False).accuracy.mean()


def fig_rounds(curves: pd.DataFrame, warmup_rounds: int):
    """Fig. 4 on FMNIST: one panel per setting of ``curves`` (:func:`rounds_frame`), the end of
    pFedLIA's warm-up marked."""
    settings = [s for s in SETTINGS if s in set(curves.setting)]
    if not settings:
        fail("curves", "a rounds_frame with at least one of the settings " + str(list(SETTINGS)), "no rows")
    fig, axes = plt.subplots(1, len(settings), figsize=(5.2 * len(settings), 3.4), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, setting in zip(axes[0], settings):
        df = curves[curves.setting == setting]
        for i, m in enumerate(_with_variants(METHODS + ["pfedlia (p2p)"], set(df.method))):
            d = df[df.method == m]
            if len(d):
                ax.plot(d["round"], d.accuracy, label=_display(m), color=cmap(i % 10),
                        lw=2.2 if m.startswith("pfedlia") else 1.2, ls="--" if "p2p" in m else "-")
        ax.axvline(warmup_rounds, color="grey", lw=0.8, ls=":")
        ax.set_title(f"{SETTINGS[setting]} non-IID")
        ax.set_xlabel("communication round")
        ax.set_ylabel("accuracy (%)")
    axes[0, -1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def influence_frame(record: dict, client: int = 0) -> pd.DataFrame:
    """Fig. 3b's data: client ``client``'s view I(client, j) of every client j of a pFedLIA
    record, each j's planted cluster, and whether the client's 2-means split finds j beneficial."""
    from fedlib.methods.pfedlia import beneficial_peers

    if record.get("spec", {}).get("method") != "pfedlia" or "influence" not in record.get("info", {}):
        fail("record", "a finished pFedLIA record (its info holds the influence matrix)",
             record.get("spec", {}).get("method"))
    scores = np.asarray(record["info"]["influence"], float)
    k = check_int(client, "client", 0, len(scores) - 1)
    s = record["spec"]
    truth = P.planted_clusters(s["protocol"], int(s["n_clients"]), s["level"])
    return pd.DataFrame({"client": np.arange(len(scores)), "influence": scores[k],
                         "planted_cluster": truth if truth is not None else -1,
                         "beneficial": beneficial_peers(scores[k])})


def fig_influence(frame: pd.DataFrame, client: int, setting: str):
    """Fig. 3b on our data: bars of :func:`influence_frame` coloured by planted cluster, with
    the client's peer-to-peer 2-means frontier (red)."""
    row, side = frame.influence.to_numpy(), frame.beneficial.to_numpy(bool)
    fig, ax = plt.subplots(figsize=(8, 3))
    cmap = plt.get_cmap("tab10")
    ax.bar(frame.client, row, color=[cmap(int(c) % 10) for c in frame.planted_cluster], width=0.8)
    if side.any() and (~side).any():
        ax.axhline((row[side].min() + row[~side].max()) / 2, color="red", lw=1)
    ax.set_xlabel("client j (colour: planted cluster)")
    ax.set_ylabel(f"I({client}, j)")
    ax.set_title(f"Lazy Influence from client {client}'s view, {SETTINGS.get(setting, setting)}")
    fig.tight_layout()
    return fig


def observations(df: pd.DataFrame, dataset: str = "fmnist", split: str | None = None) -> list[str]:
    """The paper's claims on ``dataset``, each computed from these runs (mean over seeds) on one
    data split by its metric (:func:`one_split`, :data:`READINGS`)."""
    df, split = one_split(df, split)
    ok = df[df.status == "ok"]
    mean = ok.groupby(["method", "setting"])[READINGS[split][0]].mean()
    ari = ok.groupby(["method", "setting"]).ari.mean()
    lines = []
    path, noisy = "pathological_clusters", "noisy_clusters"
    lia, orc = mean.get(("pfedlia", path), np.nan), mean.get(("oracle", path), np.nan)
    if not np.isnan(lia) and not np.isnan(orc):
        lines.append(f"Pathological: pFedLIA {lia:.2f} vs Oracle {orc:.2f} — within 1 point: {abs(lia - orc) <= 1} "
                     f"(paper: {PAPER_TABLE1[path][dataset]['pfedlia'][0]:.2f} vs "
                     f"{PAPER_TABLE1[path][dataset]['oracle'][0]:.2f})")
    r = ari.get(("pfedlia", path), np.nan)
    if not np.isnan(r):
        lines.append(f"Pathological: pFedLIA recovers the planted clusters (ARI = 1): {r == 1.0} (ARI {r:.2f}; "
                     "paper: 'pFedLIA can perfectly cluster clients')")
    for setting in (path, noisy):
        base = [m for m in METHODS if m not in ("pfedlia", "oracle") and (m, setting) in mean.index]
        lia = mean.get(("pfedlia", setting), np.nan)
        if base and not np.isnan(lia):
            best = max(base, key=lambda m: mean[(m, setting)])
            paper = PAPER_TABLE1[setting][dataset]
            paper_best = max((m for m in paper if m not in ("pfedlia", "oracle") and paper[m]), key=lambda m: paper[m][0])
            lines.append(f"{SETTINGS[setting]}: pFedLIA {lia:.2f} vs the best baseline {_display(best)} "
                         f"{mean[(best, setting)]:.2f} — ahead: {lia > mean[(best, setting)]} (paper: "
                         f"{paper['pfedlia'][0]:.2f} vs {_display(paper_best)} {paper[paper_best][0]:.2f}, ahead: "
                         f"{paper['pfedlia'][0] > paper[paper_best][0]})")
    return lines


