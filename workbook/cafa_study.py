"""What notebook 08 shows of CAFA (Zhang et al.): CBCC's identification of the IID clients
(Tables II–III, Figs. 4–5) and FedAvg vs FedProx vs CAFA training (Tables IV–V, Fig. 6).

CBCC depends on the labels only (label counts → K-means), so Tables II–III run on a label
vector with CIFAR-10's class counts (:func:`cifar10_labels`; any class-balanced label vector
gives the same rows). The training comparison runs through :mod:`fedlib.experiment` (one record
per run) on a stand-in data set.

Tables II–III, two partition generators (``generator=``, :data:`GENERATORS`):

* ``'authors'`` — :func:`fedlib.partition.cafa_authors`, what the authors' code ran for these
  tables: equal client sizes, IID clients as random subsets, non-IID clients with 1–2 classes
  and Dirichlet(0.5) shares.
* ``'workbook'`` — :func:`fedlib.partition.iid_fraction_classes`, the paper's text (§IV-B):
  non-IID clients with 2–4 random classes, random shares and sizes.

and two k searches (``k_search=``, :data:`K_SEARCHES`):

* ``'authors'`` — as their ``cluster_vis.py``: k over 2 … 19 (:data:`AUTHORS_K_RANGE`, capped
  at K − 1), the silhouette curve averaged over ``repeats`` fresh partitions of the same
  generator (seeds :func:`repeat_seed`), k its argmax, then K-means with that k on the
  partition of seed ``seed``; every K-means with random_state 0. ``repeats`` defaults to
  :data:`AUTHORS_REPEATS` = 10, their ``--round_for_silhouette`` default. The argmax of one
  partition's curve moves by several k from one partition to the next (a few one-class
  clients more or less), that of a mean of 10 by about one; their Fig. 4 is such a mean.
* ``'paper_text'`` — §III-A.2 as written and as :mod:`fedlib.methods.cafa` trains: k over
  2 … K − 1 on the one partition being classified (K-means random_state = ``seed``).

The committed records of Tables II–III (``benchmarks/cafa_cbcc.py``, :data:`CBCC_RECORDS`) run
both generators under the authors' search.

Tables IV–V score as the paper (§IV-A) and the authors' code do: the global model on the data
set's **official test set** after every round (:func:`training_specs` sets
``RunSpec.global_test``; history field ``global_test_accuracy``), the column "official-test
accuracy". The global model on the clients' pooled 20 % test splits (history field
``global_accuracy``) is kept beside it as the extra column "pooled-split accuracy", the
workbook's own reading, never CAFA's number.

The training protocol of the paper profile is the authors' code's (:data:`AUTHORS_FL`: plain
SGD at lr 0.1, 6 of 20 clients per round, E = 5, batch 32; the paper gives neither E nor q).
:func:`run_label` names the protocol a set of records ran, and :func:`verdicts` prefixes every
computed claim with it, so a smoke grid's verdict is not read as the paper protocol's.

A run that diverges (non-finite weights or loss; at the authors' lr 0.1 the FMNIST stand-in's
small CNN, which has no BatchNorm unlike the authors' VGG-19, can) is a failed record without a
number: :func:`run_status` says which runs of a grid ran, failed (and in which round) or are not
run yet, and :func:`diverged_history_frame` draws a diverged run's curve until it broke (the
record's ``history_before_divergence``), never a Tables IV–V cell.

Two options of the training grid the paper leaves open (departures or readings, stated here):

* **IID clients** (``iid_fractions``). §IV-B's training partition gives every client 2–4 classes,
  i.e. no IID client (``iid_fraction`` 0), yet §V-C says CAFA's gain "accumulates more when there
  are more non-IID clients", which implies settings with some IID clients; the paper gives no
  share. The paper profile runs 0 (§IV-B as written) and 0.5 (Table III's share);
  :func:`by_iid_fraction` splits the records into one Tables IV–V per setting and
  :func:`noniid_verdicts` computes §V-C's claim across them.
* **VGG-19** (``arch='vgg19'``, :mod:`fedlib.models`: configuration E with BatchNorm, the
  authors' 512-512-C classifier). Randomly initialised: no pretrained weights can be fetched
  offline, and the paper does not say whether its VGG19 was pretrained. The default
  (``arch`` None) is the data set's workbook model (FMNIST: ``fmnist_cnn``, no BatchNorm);
  ``arch='fmnist_cnn_bn'`` is that CNN with a BatchNorm after every conv, as every conv of the
  authors' VGG-19 has (a labelled reading: whether BatchNorm keeps lr 0.1 finite,
  ``benchmarks/cafa_bn_probe.py``, records in ``benchmarks/records/cafa/bn_probe``).

Two readings of CAFA's training (``reproductions``, :mod:`fedlib.reproduction`): ``paper_text``
clusters by §III-A.2's silhouette search; ``paper_code`` by the authors' ``train.py``, K-means with
a fixed k and random_state 0 (``cafa.Hyper(clustering='fixed')``). Only CAFA gets a ``paper_code``
run here (:data:`PAPER_CODE_METHODS`): the PSI code's FedAvg/FedProx quirks that
:data:`fedlib.reproduction.PAPER_CODE` lists are not the CAFA code's.

Tables IV–V compare methods: a row is read only over the seeds that every method of the table
ran to the end (:func:`shared_seeds`, :func:`shared_seed_records`); a seed that one method lacks
or diverged in leaves the table for every method, and the table says which seeds it rests on.
"""
from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.decomposition import PCA

from fedlib import partition as P
from fedlib.experiment import grid_specs
from fedlib.frame import records_frame
from fedlib.methods import display_name
from fedlib.methods.cafa import class_distribution, cbcc, mean_silhouette_curve, select_k
from fedlib.models import ARCHITECTURES
from fedlib.paths import ROOT
from fedlib.validation import check_choice, check_int, check_number, check_seed, fail
from . import paper_values

__all__ = ["PAPER_TABLE2", "PAPER_TABLE3", "PAPER_TABLE4", "PAPER_TABLE5", "PAPER_CASES", "GENERATORS",
           "K_SEARCHES", "AUTHORS_K_RANGE", "AUTHORS_REPEATS", "CBCC_RECORDS", "cifar10_labels", "true_iid_mask",
           "generate", "repeat_seed", "identification_scores", "cbcc_case", "cbcc_table", "records_table", "case_record",
           "with_paper", "silhouette_frame",
           "pca_frame", "fig_silhouette", "fig_pca", "training_specs", "history_frame", "window_table",
           "best_table", "ordering_holds", "fig_curves", "table_markdown", "AUTHORS_FL", "OFFICIAL_TEST", "POOLED_SPLIT",
           "run_label", "is_paper_protocol", "verdicts", "GRID_PARAMS", "notebook_grid", "grid_label", "by_iid_fraction",
           "gain_by_iid_fraction", "noniid_verdicts", "diverged_round", "run_status", "diverged_history_frame",
           "PAPER_CODE_METHODS", "shared_seeds", "shared_seed_records"]

AUTHORS_FL_KEYS = ("rounds", "local_epochs", "fraction", "optimizer", "lr", "batch_size")
"""The keys of :data:`AUTHORS_FL`, the authors' protocol."""


def _authors_fl() -> dict:
    """The ``fl`` of ``params/paper/08_cafa.yaml``: the authors' code's protocol, written there
    once (:data:`AUTHORS_FL`); ValueError naming the file when its keys are not :data:`AUTHORS_FL_KEYS`."""
    from fedlib import notebook_params
    from fedlib.paths import params_file

    path = params_file("08_cafa", "paper")
    fl = notebook_params.load(path, "08_cafa").get("fl")
    if not isinstance(fl, dict) or tuple(fl) != AUTHORS_FL_KEYS:
        fail(f"{path}: fl", f"the authors' protocol, a mapping with the keys {list(AUTHORS_FL_KEYS)} in that order", fl)
    return dict(fl)


# CAFA Table II (25 % IID clients) and Table III (50 %): (n_IID, n_non-IID) -> k, Acc, Precision,
# Recall, F1; Table IV: average accuracy (%) per round window (PAPER_WINDOWS); Table V: best accuracy
# (%). CIFAR-10, VGG-19. As printed in the paper: workbook/papers/cafa.yaml (workbook.paper_values).
PAPER_TABLE2 = paper_values.rows("cafa", "table2")
PAPER_TABLE3 = paper_values.rows("cafa", "table3")
PAPER_WINDOWS = paper_values.column_labels("cafa", "table4")
PAPER_TABLE4 = paper_values.rows("cafa", "table4")
PAPER_TABLE5 = {m: v for m, (v,) in paper_values.rows("cafa", "table5").items()}
METRICS = ["acc", "precision", "recall", "f1"]
PAPER_CASES = [*PAPER_TABLE2, *PAPER_TABLE3]
"""The six (n_IID, n_non-IID) cases of Tables II–III, in the paper's order."""
GENERATORS = ("authors", "workbook")
"""Tables II–III's partition generators: the authors' code's (:func:`fedlib.partition.cafa_authors`)
and the paper text's, the workbook's (:func:`fedlib.partition.iid_fraction_classes`)."""
K_SEARCHES = ("authors", "paper_text")
AUTHORS_K_RANGE = (2, 19)
AUTHORS_REPEATS = 10
AUTHORS_FL = _authors_fl()
"""Tables IV–V's training protocol in the authors' code (Gengsheng-Li/Non-IID-Robust-Federated-
Learning-Algorithms): plain SGD at lr 0.1, q = 0.3 (6 of 20 clients per round), E = 5, batch 32,
150 rounds (the paper's Table IV windows). Written once, as the ``fl`` of
``params/paper/08_cafa.yaml`` (the paper profile notebook 08 runs), and read from there."""
PAPER_SEEDS = 3
"""Seeds of the paper-protocol training grid (params/paper/08_cafa.yaml)."""
OFFICIAL_TEST = "official-test accuracy"
"""CAFA's reported number: the global model on the official test set (history ``global_test_accuracy``)."""
POOLED_SPLIT = "pooled-split accuracy"
"""The extra column: the global model on the clients' pooled 20 % test splits (history ``global_accuracy``)."""
CBCC_RECORDS = ROOT / "benchmarks" / "records" / "cafa" / "cbcc"
"""The committed Tables II–III records (one per generator, case and seed; present in a checkout)."""


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


def generate(labels, generator: str, n_iid: int, n_noniid: int, seed: int, classes=(2, 4)) -> list[np.ndarray]:
    """One Tables II–III partition of K = n_iid + n_noniid clients, the first n_iid IID:
    ``'authors'`` (:func:`fedlib.partition.cafa_authors`) or ``'workbook'``
    (:func:`fedlib.partition.iid_fraction_classes`, non-IID clients with ``classes`` classes)."""
    check_choice(generator, "generator", GENERATORS)
    n_iid = check_int(n_iid, "n_iid", 0)
    n_noniid = check_int(n_noniid, "n_noniid", 0)
    if generator == "authors":
        return P.cafa_authors(labels, n_iid, n_noniid, seed)
    k = n_iid + n_noniid
    if k < 1:
        fail("n_iid + n_noniid", "≥ 1 (at least one client)", k)
    return P.iid_fraction_classes(labels, k, n_iid / k, seed, classes=classes)  # its n_IID = ⌊(n_iid/K)·K + ½⌋


def repeat_seed(seed: int, r: int) -> int:
    """The seed of the r-th (r ≥ 1) extra partition of the authors' averaged silhouette curve for
    seed ``seed``: a SeedSequence of (seed, r), so the repeats of different seeds do not overlap."""
    check_seed(seed)
    check_int(r, "r", 1)
    return int(np.random.SeedSequence([int(seed), int(r)]).generate_state(1)[0])


def cbcc_case(labels, n_iid: int, n_noniid: int, seed: int, *, generator: str = "authors",
              k_search: str = "authors", repeats: int = AUTHORS_REPEATS, k_range=AUTHORS_K_RANGE,
              classes=(2, 4), n_init: int = 10):
    """CBCC on one Tables II–III partition (:func:`generate`, seed ``seed``) and its scores against
    the planted truth (the first ``n_iid`` clients).

    ``k_search='authors'``: k from the silhouette curve averaged over ``repeats`` other partitions
    of the same generator (seeds :func:`repeat_seed` (seed, 1 … repeats)), k over ``k_range``
    capped at K − 1, K-means random_state 0; ``'paper_text'``: k over 2 … K − 1 on this partition,
    random_state ``seed`` (``repeats``/``k_range`` unused). See the module docstring.

    Returns (scores dict with k, acc, precision, recall, f1; the CBCC result, whose
    ``silhouettes`` is the curve k was chosen on; truth (K,) bool).
    """
    check_choice(k_search, "k_search", K_SEARCHES)
    k_total = check_int(n_iid, "n_iid", 0) + check_int(n_noniid, "n_noniid", 0)
    if k_search == "authors":  # its arguments checked before any work
        check_int(repeats, "repeats", 1)
        if isinstance(k_range, (str, bytes)) or not hasattr(k_range, "__len__") or len(k_range) != 2:
            fail("k_range", "a pair (k_min, k_max) of cluster counts", k_range)
        lo = check_int(k_range[0], "k_range[0]", 2)
        hi = min(check_int(k_range[1], "k_range[1]", lo), k_total - 1)
        if hi < lo:
            fail("n_iid + n_noniid", f"> k_range[0] = {lo} (silhouettes need k < K)", k_total)
    labels = np.asarray(labels)
    n_classes = int(labels.max()) + 1
    parts = generate(labels, generator, n_iid, n_noniid, seed, classes)
    counts = P.label_counts(labels, parts, n_classes)
    if k_search == "paper_text":
        res = cbcc(counts, random_state=check_seed(seed), n_init=n_init)
    else:
        vs = [class_distribution(P.label_counts(labels, generate(labels, generator, n_iid, n_noniid,
                                                                 repeat_seed(seed, r), classes), n_classes))
              for r in range(1, repeats + 1)]
        curve = mean_silhouette_curve(vs, range(lo, hi + 1), random_state=0, n_init=n_init)
        res = cbcc(counts, random_state=0, n_init=n_init, curve=curve)
    truth = np.arange(k_total) < n_iid
    return {"k": res.k, **identification_scores(res.iid_mask, truth)}, res, truth


def cbcc_table(labels, cases, seeds, generators=GENERATORS, **kwargs) -> pd.DataFrame:
    """Tables II–III computed here: one row per (generator, case) with the mean over ``seeds`` of
    k and the four scores.

    labels : label vector (N,); cases : list of (n_iid, n_noniid); seeds : list of ints;
    ``kwargs`` : :func:`cbcc_case`'s (k_search, repeats, k_range, classes, n_init).
    """
    rows = [{"generator": g, "n_iid": a, "n_noniid": b, "seed": s,
             **cbcc_case(labels, a, b, s, generator=g, **kwargs)[0]}
            for g in generators for a, b in cases for s in seeds]
    return _mean_rows(pd.DataFrame(rows))


def records_table(records) -> pd.DataFrame:
    """Tables II–III from run records (``benchmarks/cafa_cbcc.py``'s, ``status`` ok): one row per
    (generator, case) with the mean over the records' seeds of k and the four scores — the
    columns of :func:`cbcc_table`."""
    records = list(records)
    f = records_frame(records)
    ok = f[f.status == "ok"] if len(f) else f
    if ok.empty:
        fail("records", "at least one CBCC record with status 'ok'", f"{len(records)} records")
    case = {"spec.generator": "generator", "spec.n_iid": "n_iid", "spec.n_noniid": "n_noniid"}
    t = ok[[*case, "seed", "k", *METRICS]].rename(columns=case)  # ints: NaN of other records made them floats
    return _mean_rows(t.astype({"n_iid": int, "n_noniid": int, "k": int}).reset_index(drop=True))


def _mean_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds per (generator, n_iid, n_noniid); rows in :data:`GENERATORS` then the paper's
    case order (other cases after)."""
    keys = ["generator", "n_iid", "n_noniid"]
    g = df.groupby(keys, sort=False)
    out = g[["k", *METRICS]].mean().reset_index()
    out.insert(3, "n_seeds", g.seed.nunique().to_numpy())
    out.insert(1, "iid_share", out.n_iid / (out.n_iid + out.n_noniid))
    rank = [(GENERATORS.index(r.generator) if r.generator in GENERATORS else len(GENERATORS),
             PAPER_CASES.index((r.n_iid, r.n_noniid)) if (r.n_iid, r.n_noniid) in PAPER_CASES else len(PAPER_CASES),
             r.n_iid, r.n_noniid) for r in out.itertuples()]
    return out.iloc[sorted(range(len(out)), key=rank.__getitem__)].reset_index(drop=True)


def case_record(records, generator: str, n_iid: int, n_noniid: int, seed: int) -> dict | None:
    """The record of one Tables II–III cell and seed among ``records`` (None if absent)."""
    want = {"generator": generator, "n_iid": n_iid, "n_noniid": n_noniid, "seed": seed}
    return next((r for r in records if all(r["spec"].get(k) == v for k, v in want.items())), None)


def with_paper(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with the paper's k and scores beside (columns ``paper_*``; NaN where the paper has
    no such case)."""
    paper = {**PAPER_TABLE2, **PAPER_TABLE3}
    out = table.copy()
    for i, col in enumerate(["k", *METRICS]):
        out[f"paper_{col}"] = [paper.get((a, b), (np.nan,) * 5)[i] for a, b in zip(out.n_iid, out.n_noniid)]
    return out


def silhouette_frame(res) -> pd.DataFrame:
    """Fig. 4's data: k and s̄_k of a CBCC result (the averaged curve under the authors' search),
    with the chosen k (its argmax) flagged."""
    chosen = select_k(res.silhouettes)
    return pd.DataFrame({"k": list(res.silhouettes), "silhouette": list(res.silhouettes.values()),
                         "chosen": [k == chosen for k in res.silhouettes]})


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


PAPER_CODE_METHODS = ("cafa",)
"""The methods of the training grid that get a ``paper_code`` run (the authors' fixed-k clustering)."""


def training_specs(dataset: str, n_train, iid_fractions, n_clients: int, seeds, methods,
                   hyper: dict | None, fl: dict, val_fraction: float, n_global_test: int | None = None,
                   arch: str | None = None, reproductions=("paper_text",)):
    """The RunSpecs of Tables IV–V: every method on the same CAFA partitions with a validation
    split (the paper's 20 %, for every method so that all train on the same data), scored on the
    data set's official test set every round (``global_test=True``; ``n_global_test``: its
    stratified subset, None = all of it).

    ``iid_fractions``: the training partitions' IID shares (:func:`fedlib.partition.iid_fraction_classes`
    levels), a list (one setting per entry) or one number (one setting); each setting runs every
    method and seed. ``arch``: the model (a key of :data:`fedlib.models.ARCHITECTURES`, e.g.
    ``'vgg19'``, the paper's VGG-19 with BatchNorm, randomly initialised: no pretrained weights
    offline); None = the data set's workbook model (:data:`fedlib.models.ARCH_FOR_DATASET`).
    ``arch=None`` and ``n_global_test=None`` leave the RunSpecs (and their record keys) as they
    were before these options existed. ``reproductions``: ``'paper_text'`` (every method) and/or
    ``'paper_code'`` (a second run of the methods of :data:`PAPER_CODE_METHODS` only: CAFA with the
    authors' fixed-k clustering)."""
    check_number(val_fraction, "val_fraction", 0, 1, low_open=True, high_open=True)
    if arch is not None:
        check_choice(arch, "arch", tuple(ARCHITECTURES))
    levels = list(iid_fractions) if isinstance(iid_fractions, (list, tuple)) else [iid_fractions]
    if not levels:
        fail("iid_fractions", "a non-empty list of IID shares in [0, 1], e.g. [0.0, 0.5]", iid_fractions)
    for f in levels:
        check_number(f, "iid_fractions entries", 0, 1)
    if isinstance(reproductions, str) or not list(reproductions):
        fail("reproductions", "a non-empty list of 'paper_text' / 'paper_code'", reproductions)
    specs = grid_specs([dataset], {"iid_fraction_classes": levels}, [n_clients], seeds, methods,
                       hyper=hyper, fl=fl, n_train=n_train, reproductions=list(reproductions))
    return [dataclasses.replace(s, val_fraction=float(val_fraction), global_test=True, n_global_test=n_global_test,
                                arch=arch)
            for s in specs if s.reproduction == "paper_text" or s.method in PAPER_CODE_METHODS]


GRID_PARAMS = ("dataset", "n_train", "iid_fractions", "n_clients", "seeds", "methods", "hyper", "fl", "val_fraction",
               "n_global_test", "arch", "reproductions")
"""The parameters of notebook 08 (``params/*/08_cafa.yaml``) that its training grid depends on:
:func:`notebook_grid`'s keywords."""


def notebook_grid(*, dataset: str, n_train, iid_fractions, n_clients: int, seeds, methods, hyper, fl: dict,
                  val_fraction: float, n_global_test: int | None, arch: str | None,
                  reproductions=("paper_text",)) -> dict[str, list]:
    """Notebook 08's training grid from its parameters (:data:`GRID_PARAMS`), by table:
    ``'table4'`` — Tables IV–V and Fig. 6 (:func:`training_specs`), every IID share of
    ``iid_fractions`` (and CAFA's ``paper_code`` run where ``reproductions`` asks for it)."""
    return {"table4": training_specs(dataset, n_train, iid_fractions, n_clients, seeds, methods, hyper, fl,
                                     val_fraction, n_global_test=n_global_test, arch=arch,
                                     reproductions=reproductions)}


def grid_label(spec) -> str:
    """A run's row as the grid command's progress lines print it (``python -m fedlib.grid cafa-table4``):
    its method (FedAvg, FedProx or CAFA)."""
    return spec.method


def shared_seeds(records, methods=None) -> list[int]:
    """The seeds every method of a table ran to the end: for each method of ``methods`` (default:
    every method among ``records``, failed runs included), the seeds of its ``ok`` records;
    their intersection, ascending. A method without an ok record leaves none."""
    records = list(records)
    methods = list(dict.fromkeys(r["spec"]["method"] for r in records)) if methods is None else list(methods)
    if not methods:
        return []
    ok = {m: {int(r["spec"]["seed"]) for r in records if r["spec"]["method"] == m and r["status"] == "ok"}
          for m in methods}
    return sorted(set.intersection(*ok.values()))


def shared_seed_records(records, methods=None) -> list:
    """The ok records of :func:`shared_seeds` (the seeds every method of the table ran to the end):
    what Tables IV–V are read from, so every row rests on the same seeds."""
    records = list(records)
    keep = set(shared_seeds(records, methods))
    return [r for r in records if r["status"] == "ok" and int(r["spec"]["seed"]) in keep]


def by_iid_fraction(records) -> dict[float, list]:
    """The records split by their training partition's IID share (the spec's level), in
    ascending order: one Tables IV–V per setting (:func:`history_frame` refuses a mix)."""
    out: dict[float, list] = {}
    for r in records:
        out.setdefault(float(r["spec"]["level"]), []).append(r)
    return dict(sorted(out.items()))


def _records_with(records, status: str) -> list[dict]:
    """The records of ``status`` among ``records``, in their order (the ``record`` column of
    :func:`fedlib.frame.records_frame`'s rows of that status)."""
    f = records_frame(records)
    return f[f.status == status].record.tolist() if len(f) else []


def history_frame(records) -> pd.DataFrame:
    """One row per (method, seed, round) from run records (status ok): ``accuracy``, CAFA's
    number — the global model on the official test set (:data:`OFFICIAL_TEST`, history
    ``global_test_accuracy``) — and ``pooled_split_accuracy``, the same model on the clients'
    pooled test splits (:data:`POOLED_SPLIT`, history ``global_accuracy``), after that round
    (1-based). Records without the official-test accuracy (not made by :func:`training_specs`),
    or of several IID shares (:func:`by_iid_fraction` splits them), are refused."""
    ok = _records_with(records, "ok")
    lacking = [r["key"] for r in ok if any("global_test_accuracy" not in h for h in r["history"])]
    if lacking:
        fail("records", "runs of training_specs (global_test=True), whose every round holds the official-test "
                        "accuracy (global_test_accuracy); rerun them", f"{len(lacking)} without it, e.g. {lacking[0]}")
    shares = sorted({float(r["spec"]["level"]) for r in ok if "level" in r["spec"]})
    if len(shares) > 1:
        fail("records", "runs of one IID share (split them with by_iid_fraction: one table per setting)",
             f"IID shares {shares}")
    readings = sorted({r["spec"].get("reproduction") or "paper_text" for r in ok})
    if len(readings) > 1:
        fail("records", "runs of one reproduction (paper_text or paper_code: one table per reading)",
             f"reproductions {readings}")
    rows = [{"method": r["spec"]["method"], "seed": r["spec"]["seed"], "round": h["round"],
             "accuracy": h["global_test_accuracy"], "pooled_split_accuracy": h["global_accuracy"]}
            for r in ok for h in r["history"]]
    return pd.DataFrame(rows, columns=["method", "seed", "round", "accuracy", "pooled_split_accuracy"])


def diverged_round(record) -> int | None:
    """The 1-based round in which a failed (diverged) record's training became non-finite, as its
    message says it; None for any other record or one that does not know its round."""
    div = record.get("divergence") or {}
    idx = div.get("round_idx") if record.get("status") == "failed" else None
    return None if idx is None else int(idx) + 1


def run_status(specs, records) -> pd.DataFrame:
    """Where each run of ``specs`` stands in ``records``: one row per spec, in the specs' order,
    columns iid_fraction, method, seed, status (``ok``, ``failed``, ``infeasible`` or ``not run
    yet``), diverged_round (1-based, failed runs only; else NaN), rounds_before (the evaluations a
    failed record kept, ``history_before_divergence``) and detail (a failed or infeasible
    record's ``error``). A spec's record is the one of its key, else of its fields
    (:func:`fedlib.lookup.spec_fields`): a record written under another fedlib version counts."""
    from fedlib.lookup import spec_fields

    by_key, by_run = {r.get("key"): r for r in records}, [(spec_fields(r["spec"]), r) for r in records]
    rows = []
    for s in specs:
        want = spec_fields(s)
        r = by_key.get(s.key()) or next((r for fields, r in by_run if fields == want), None)
        status = "not run yet" if r is None else r["status"]
        rnd = None if r is None else diverged_round(r)
        rows.append({"iid_fraction": float(s.level), "method": s.method, "seed": s.seed, "status": status,
                     "diverged_round": np.nan if rnd is None else rnd,
                     "rounds_before": len(r.get("history_before_divergence") or []) if r is not None else 0,
                     "detail": "" if r is None or status == "ok" else str(r.get("error", ""))})
    return pd.DataFrame(rows)


def diverged_history_frame(records) -> pd.DataFrame:
    """:func:`history_frame`'s rows for the failed (diverged) records that kept the evaluations
    of their rounds before the divergence (``history_before_divergence``), with the column
    ``diverged_round``: a curve that ends where the run broke, never a Tables IV–V number."""
    rows = [{"method": r["spec"]["method"], "seed": r["spec"]["seed"], "round": h["round"],
             "accuracy": h["global_test_accuracy"], "pooled_split_accuracy": h["global_accuracy"],
             "diverged_round": diverged_round(r)}
            for r in _records_with(records, "failed")
            for h in r.get("history_before_divergence") or [] if "global_test_accuracy" in h]
    return pd.DataFrame(rows, columns=["method", "seed", "round", "accuracy", "pooled_split_accuracy",
                                       "diverged_round"])


def _ran_paper_protocol(ok) -> bool:
    """Whether every record of ``ok`` (status ok) ran :data:`AUTHORS_FL` (their effective ``fl``) on
    the full training set, scored on the whole official test set (seeds aside)."""
    fl_ok = all(r["fl"].get(k) == v for r in ok for k, v in AUTHORS_FL.items())
    return fl_ok and all(r["spec"].get("global_test") and r["spec"].get("n_global_test") is None
                         and r["spec"].get("n_train") is None for r in ok)


def _seeds_per_method(ok) -> list[int]:
    """How many seeds each method of ``ok`` ran."""
    seeds = {}
    for r in ok:
        seeds.setdefault(r["spec"]["method"], set()).add(r["spec"]["seed"])
    return [len(v) for v in seeds.values()]


def is_paper_protocol(records) -> bool:
    """Whether every ok record ran Tables IV–V's paper protocol: :data:`AUTHORS_FL` (the records'
    effective ``fl``), the official test set whole, the full training set, at least
    :data:`PAPER_SEEDS` seeds per method."""
    ok = [r for r in records if r["status"] == "ok"]
    return bool(ok) and _ran_paper_protocol(ok) and min(_seeds_per_method(ok)) >= PAPER_SEEDS


def run_label(records) -> str:
    """What protocol the ok records ran, from their effective ``fl`` and specs (never typed):
    "paper protocol (150 rounds, 3 seeds)" when :func:`is_paper_protocol`; "paper protocol, fewer
    seeds than the paper grid's 3 (150 rounds, 1 seed)" when only seeds are missing; else e.g.
    "smoke grid (6 rounds, 1 seed; not the paper protocol: adam lr 0.001, q = 0.5, E = 1, batch 32,
    4000 training samples, a stratified 1000 of the official test set)"."""
    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        fail("records", "at least one run record with status 'ok'", f"{len(list(records))} records")
    rounds = sorted({int(r["fl"]["rounds"]) for r in ok})
    counts = _seeds_per_method(ok)
    lo, hi = min(counts), max(counts)
    seeds_txt = f"{hi} seed{'s' if hi != 1 else ''}" if lo == hi else f"{lo}–{hi} seeds per method"
    r_txt = f"{'/'.join(map(str, rounds))} round{'s' if rounds != [1] else ''}, {seeds_txt}"
    if is_paper_protocol(ok):
        return f"paper protocol ({r_txt})"
    if _ran_paper_protocol(ok):  # the paper's protocol, its seeds not all run (yet)
        return f"paper protocol, fewer seeds than the paper grid's {PAPER_SEEDS} ({r_txt})"
    fls = sorted({(r["fl"]["optimizer"], r["fl"]["lr"], r["fl"]["fraction"], r["fl"]["local_epochs"],
                   r["fl"]["batch_size"]) for r in ok})
    how = "; ".join(f"{o} lr {lr:g}, q = {q:g}, E = {e}, batch {b}" for o, lr, q, e, b in fls)
    n_train = sorted({r["spec"].get("n_train") for r in ok}, key=lambda v: (v is None, v))
    data = ", ".join("all training samples" if v is None else f"{v} training samples" for v in n_train)
    subsets = sorted({r["spec"].get("n_global_test") for r in ok} - {None})
    if subsets:
        data += f", a stratified {'/'.join(map(str, subsets))} of the official test set"
    return f"smoke grid ({r_txt}; not the paper protocol: {how}, {data})"


def verdicts(records, windows_df: pd.DataFrame, best_df: pd.DataFrame) -> list[str]:
    """The paper's claims about Tables IV–V computed from ``records`` (:func:`ordering_holds`, and
    CAFA's best-accuracy gain over FedAvg and FedProx beside the paper's), each line prefixed
    with ``from <run_label(records)>:`` so that a smoke grid's verdict reads as one."""
    src = f"from {run_label(records)}:"
    lines = [f"{src} {claim} ({OFFICIAL_TEST}): {holds}" for claim, holds in ordering_holds(windows_df, best_df).items()]
    b = best_df.set_index("method")
    for m in ("fedavg", "fedprox"):
        if m in b.index and "cafa" in b.index:
            lines.append(f"{src} CAFA best - {display_name(m)} best ({OFFICIAL_TEST}): "
                         f"{100 * b.loc[m, 'cafa_improvement']:+.2f} pp "
                         f"(paper: {PAPER_TABLE5['cafa'] - PAPER_TABLE5[m]:+.2f} pp)")
    return lines


def gain_by_iid_fraction(records) -> pd.DataFrame:
    """CAFA's best-accuracy gain (official test set, mean over the seeds every method ran to the
    end, :func:`shared_seed_records`; ``paper_text`` runs) over each other method, per
    IID share of the training partition (a share without a shared seed gives no row): columns iid_fraction, n_noniid (the non-IID clients
    of K, :func:`true_iid_mask`), method, gain. §V-C's claim — "the improvement accumulates more
    when there are more non-IID clients" — reads as the gain falling as the IID share grows."""
    rows = []
    text = [r for r in records if (r["spec"].get("reproduction") or "paper_text") == "paper_text"]
    for f, recs in by_iid_fraction(text).items():
        recs = shared_seed_records(recs)  # every method of the share (failed runs too) on the same seeds
        if not recs:
            continue
        best = best_table(history_frame(recs)).set_index("method")
        k = int(recs[0]["spec"]["n_clients"])
        for m in best.index:
            if m != "cafa" and "cafa" in best.index:
                rows.append({"iid_fraction": f, "n_noniid": int(k - true_iid_mask(k, f).sum()), "method": m,
                             "gain": float(best.loc[m, "cafa_improvement"])})
    return pd.DataFrame(rows, columns=["iid_fraction", "n_noniid", "method", "gain"])


def noniid_verdicts(records) -> list[str]:
    """§V-C's claim computed from ``records`` of at least two IID shares (else no line): per
    method, CAFA's gain (:func:`gain_by_iid_fraction`) at each share and whether it grows with
    the number of non-IID clients (strictly, share by share); each line prefixed with
    ``from <run_label(records)>:``."""
    gains = gain_by_iid_fraction(records)
    if gains.iid_fraction.nunique() < 2:
        return []
    src = f"from {run_label(records)}:"
    lines = []
    for m, g in gains.groupby("method", sort=False):
        g = g.sort_values("n_noniid")
        steps = ", ".join(f"{n} non-IID of K: {100 * v:+.2f} pp" for n, v in zip(g.n_noniid, g.gain))
        lines.append(f"{src} §V-C, CAFA best - {display_name(m)} best grows with the number of non-IID "
                     f"clients ({steps}): {bool(np.all(np.diff(g.gain.to_numpy()) > 0))}")
    return lines


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
    """Table V: best (max over rounds) ``accuracy`` (the official-test accuracy) per method, mean
    and std over seeds, and CAFA's improvement over each method (mean best of CAFA − mean best of
    the method); with :func:`history_frame`'s ``pooled_split_accuracy`` also
    ``pooled_split_mean``, the best pooled-split accuracy (an extra column, not CAFA's number)."""
    by = hist.groupby(["method", "seed"], sort=False)
    per_seed = by.accuracy.max().groupby(level=0, sort=False)
    best = pd.DataFrame({"mean": per_seed.mean(), "std": per_seed.std(ddof=0)})
    best["cafa_improvement"] = best.loc["cafa", "mean"] - best["mean"] if "cafa" in best.index else np.nan
    if "pooled_split_accuracy" in hist:
        best["pooled_split_mean"] = by.pooled_split_accuracy.max().groupby(level=0, sort=False).mean()
    return best.reset_index()


def ordering_holds(windows_df: pd.DataFrame, best_df: pd.DataFrame) -> dict:
    """The paper's claims, computed: CAFA's best accuracy above FedAvg's and FedProx's (Table V),
    and CAFA's window mean above both in every window (Table IV). dict claim -> bool."""
    best = best_df.set_index("method")["mean"]
    win = windows_df.pivot(index="window", columns="method", values="mean")
    out = {}
    for other in ("fedavg", "fedprox"):
        if "cafa" in best and other in best:
            out[f"best: CAFA > {display_name(other)}"] = bool(best["cafa"] > best[other])
            out[f"every window: CAFA > {display_name(other)}"] = bool((win["cafa"] > win[other]).all())
    return out


def table_markdown(windows_df: pd.DataFrame, best_df: pd.DataFrame) -> str:
    """Tables IV–V as one Markdown table, cells "x.xx ± y.yy" in % (mean ± std over seeds) of the
    official-test accuracy; with ``best_df``'s ``pooled_split_mean`` a last column "best,
    pooled-split accuracy" (the extra reading)."""
    order = [w for w in dict.fromkeys(windows_df.window)]
    pooled = "pooled_split_mean" in best_df
    header = ("| Method | " + " | ".join(f"rounds {w}, {OFFICIAL_TEST}" for w in order) + f" | best, {OFFICIAL_TEST} |"
              + (f" best, {POOLED_SPLIT} (extra) |" if pooled else ""))
    lines = [header, "|---" * (len(order) + 2 + pooled) + "|"]
    for m in dict.fromkeys(windows_df.method):
        w = windows_df[windows_df.method == m].set_index("window")
        b = best_df.set_index("method").loc[m]
        cells = [f"{100 * w.loc[x, 'mean']:.2f} ± {100 * w.loc[x, 'std']:.2f}" for x in order]
        lines.append(f"| {display_name(m)} | " + " | ".join(cells)
                     + f" | {100 * b['mean']:.2f} ± {100 * b['std']:.2f} |"
                     + (f" {100 * b['pooled_split_mean']:.2f} |" if pooled else ""))
    return "\n".join(lines)


def fig_curves(hist: pd.DataFrame, title: str, diverged: pd.DataFrame | None = None):
    """Fig. 6: official-test accuracy (%) per round, mean over seeds, one line per method; with
    ``diverged`` (:func:`diverged_history_frame`) also each diverged run's curve until its
    divergence, dashed and ending in a cross, one per (method, seed)."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for m, g in hist.groupby("method", sort=False):
        mean = 100.0 * g.groupby("round").accuracy.mean()
        ax.plot(mean.index, mean.values, label=display_name(m))
    for (m, seed), g in ([] if diverged is None else diverged.groupby(["method", "seed"], sort=False)):
        line, = ax.plot(g["round"], 100.0 * g.accuracy, ls="--", lw=1,
                        label=f"{display_name(m)}, seed {seed}: diverged in round {int(g.diverged_round.iloc[0])}")
        ax.plot(g["round"].iloc[-1], 100.0 * g.accuracy.iloc[-1], "x", color=line.get_color())
    ax.set(xlabel="round", ylabel=f"{OFFICIAL_TEST} (%)", title=title)
    ax.legend()
    fig.tight_layout()
    return fig
