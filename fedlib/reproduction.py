"""Two readings of Table III: the paper's text, and the paper's code.

``paper_text`` (the default) runs every method as Clust-PSI-PFL's Table II and the methods' own
papers define it: Adam lr 0.001, batch 32, shuffled batches, q·K clients per round (at least
one), each client evaluated with its model on its own test split after the last round.

``paper_code`` runs each Table III method as the authors' public PSI-PFL code did
(`Sapienza-University-Rome/psi_pfl` ``main.py``, the ancestor of the Clust-PSI-PFL code, which is
not public; ``../shared/reference-notes.md``, "What produced Table III"). Strong evidence, not
proof, of what produced the published numbers:

* the Flower methods (FedAvg, FedProx, FedAvgM, FedAdagrad, FedYogi, FedAdam, PSI-PFL,
  Clust-PSI-PFL) train Keras Adam, batch 32 — the workbook's protocol — but Flower samples
  max(⌊q·n⌋, 2) clients (``FLConfig.min_clients = 2``); Clust-PSI-PFL falls back to τ = 1 when
  every silhouette is ≤ 0;
* FedProx's client never read μ, so it ran as FedAvg (μ = 0); PSI-PFL chose ζ on the test set,
  one percentile per setting by the best mean over the seeds
  (:func:`workbook.psi_pfl_study.authors_zeta_choice`);
* the FedLab baselines (PoC, HACCS, FedCLS, CFL, FedSoft) train **plain SGD, lr 0.001, batch
  64, no shuffling** (:data:`FEDLAB_FL`; FedSoft shuffled) and the server takes the plain mean
  of the clients' models (FedSoft: importance-weighted); each method's own rules as that code
  had them — PoC trains only its
  d candidates, ranked by FedLab's summed batch losses; HACCS, FedCLS and FedSoft run their
  ``variant='psi_code'``; CFL tests the mean of the clients' deviation norms, with no warm-up;
* reporting: the Flower methods and PoC/HACCS/FedCLS report the last round (the code scored
  the global model on the pooled test set, which for one model is the sample-weighted accuracy
  over the clients' test splits that ``paper_text`` reports); **CFL and FedSoft report the best round's
  mean over their cluster models of each model's accuracy on the pooled test set**
  (``'best_round_pooled_cluster_mean'``, from the per-round ``pooled_model_accuracy`` that
  :meth:`fedlib.methods.Context.log_round` records for them).

The same two readings serve CAFA's training (notebook 08, Tables IV–V), whose authors' code is
another repository (Gengsheng-Li/Non-IID-Robust-Federated-Learning-Algorithms): ``paper_code``
runs CAFA with that code's clustering, K-means with a fixed k and random_state 0 instead of the
paper text's silhouette search (``Hyper(clustering='fixed')``, :mod:`fedlib.methods.cafa`). The
grids apply it to CAFA only there (:func:`workbook.cafa_study.training_specs`): the CAFA
code's FedAvg and FedProx are not the PSI code's.

What each method changes is :data:`PAPER_CODE` (training settings ``fl`` and hyperparameters
``hyper`` that override a spec's own for the fields they name, and the reporting rule); a
method not listed runs as ``paper_text``, and so does one whose changes do nothing at the run's
K and q (:func:`runs_differently`): grids then make one run that serves both readings. A record
carries ``reproduction``, the settings that were applied, and ``reported_accuracy`` with its
``reported_rule``, so Table III is rebuilt for either reading without retraining
(:func:`workbook.tables.table3`).

Quirks of the authors' code that this module does not copy (reference-notes, "Training
protocol"): Keras ``validation_split=0.2`` dropping the last 20 % of each client's train data,
identical initial weights for every seed, unseeded client sampling, the ×4 replication of
clusters of ≤ 2 clients, hyperparameters chosen on the test set (other than PSI-PFL's ζ),
CFL's bipartition bug and its dropping of unsampled clients at a split (never reached at
Table II's thresholds), swapped precision/recall arguments.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .validation import check_choice, check_int, check_number, fail

__all__ = ["REPRODUCTIONS", "REPORT_RULES", "FEDLAB_FL", "FLOWER_FL", "PAPER_CODE", "Settings", "settings_for",
           "reported_accuracy", "runs_differently", "describe"]

REPRODUCTIONS = ("paper_text", "paper_code")
REPORT_RULES = ("last_round", "best_round_pooled_cluster_mean")

FEDLAB_FL = {"optimizer": "sgd", "lr": 0.001, "batch_size": 64, "shuffle": False}
"""The FedLab baselines' client training in the authors' code: plain SGD, lr 0.001, batch 64, no shuffling."""

FLOWER_FL = {"min_clients": 2}
"""Flower's FedAvg family: Keras Adam, batch 32 (the workbook's protocol) and ``min_fit_clients = 2``."""


@dataclass(frozen=True)
class Settings:
    """How one method runs under a reproduction: FLConfig fields, Hyper fields, reporting rule."""

    fl: dict = field(default_factory=dict)
    hyper: dict = field(default_factory=dict)
    report: str = "last_round"
    note: str = ""


_FLOWER = Settings(fl=FLOWER_FL, note="Flower: Keras Adam, batch 32, max(⌊q·n⌋, 2) clients, last round")
_FEDLAB = "FedLab: SGD 0.001, batch 64, no shuffling, plain mean of the models"

PAPER_CODE = {
    "fedavg": _FLOWER, "fedavgm": _FLOWER, "fedadagrad": _FLOWER, "fedyogi": _FLOWER, "fedadam": _FLOWER,
    "psi_pfl": Settings(fl=FLOWER_FL, hyper={"select_on": "test"},
                        note="Flower FedAvg on the selected clients; ζ chosen on the test set"),
    "fedprox": Settings(fl=FLOWER_FL, hyper={"mu": 0.0},
                        note="Flower; the client never read μ, so FedProx ran as FedAvg"),
    "clust_psi_pfl": Settings(fl=FLOWER_FL, hyper={"nonpositive_silhouette": "fedavg"},
                              note="Flower per cluster: max(⌊q·n⌋, 2) clients; τ = 1 when every silhouette ≤ 0"),
    "poc": Settings(fl=FEDLAB_FL, hyper={"d_policy": "min", "aggregation": "uniform", "loss": "fedlab"},
                    note=_FEDLAB + "; only the d candidates train, ranked by summed batch losses"),
    "haccs": Settings(fl=FEDLAB_FL, hyper={"variant": "psi_code", "aggregation": "uniform"},
                      note=_FEDLAB + "; OPTICS by silhouette, device-mixture latencies, d/2 clusters, "
                                     "filled by data share"),
    "fedcls": Settings(fl=FEDLAB_FL, hyper={"variant": "psi_code", "aggregation": "uniform"},
                       note=_FEDLAB + "; random losses, fallback group, filled by data share"),
    "cfl": Settings(fl=FEDLAB_FL, hyper={"split_test": "mean_of_norms", "aggregation": "uniform", "warmup_rounds": 0},
                    report="best_round_pooled_cluster_mean",
                    note=_FEDLAB + "; mean-of-norms split test, no warm-up; best round, cluster models on the "
                                   "pooled test set"),
    # CAFA's authors' train.py (not the PSI code): k fixed (cafa.AUTHORS_TRAIN_K = 6), random_state 0
    "cafa": Settings(hyper={"clustering": "fixed", "k_fixed": 6},
                     note="CAFA's authors' train.py: KMeans(n_clusters=6, random_state=0) on the label histograms, "
                          "no silhouette search"),
    "fedsoft": Settings(fl={**FEDLAB_FL, "shuffle": True}, hyper={"variant": "psi_code", "estimation_interval": 2},
                        report="best_round_pooled_cluster_mean",
                        note="FedLab: SGD 0.001, batch 64, shuffled; uniform sampling, λ not λ/2, importance "
                             "every 2 rounds; best round, cluster models on the pooled test set"),
}
"""Per method, what ``paper_code`` changes (methods not listed run as ``paper_text``)."""


def _check_method(method) -> None:
    from .methods import METHODS

    check_choice(method, "method", METHODS)


def settings_for(method: str, reproduction: str) -> Settings:
    """The settings ``reproduction`` applies to ``method`` (empty for ``paper_text``)."""
    check_choice(reproduction, "reproduction", REPRODUCTIONS)
    _check_method(method)
    if reproduction == "paper_text":
        return Settings(note="Table II as written")
    return PAPER_CODE.get(method, Settings(note="not in the authors' code's Table III baselines: as paper_text"))


def runs_differently(method: str, n_clients: int, fraction: float) -> bool:
    """Whether ``paper_code`` trains or reports ``method`` differently from ``paper_text`` at K =
    ``n_clients`` and q = ``fraction``. False for a method the code ran as Table II says, and for
    the Flower methods whose only change, at least two clients per round, changes nothing when
    ⌊q·K⌋ ≥ 2: their ``paper_text`` run is their ``paper_code`` run, so grids do not repeat it."""
    _check_method(method)
    check_int(n_clients, "n_clients", 1)
    check_number(fraction, "fraction (q)", 0, 1, low_open=True)
    s = PAPER_CODE.get(method)
    if s is None:
        return False
    if s.hyper or s.report != "last_round" or set(s.fl) - {"min_clients"}:
        return True
    return int(fraction * n_clients) < s.fl.get("min_clients", 1)


def reported_accuracy(rule: str, final_accuracy: float, history: list) -> float:
    """The accuracy a reporting rule gives.

    Parameters
    ----------
    rule : one of :data:`REPORT_RULES`
    final_accuracy : float
        Every client's model on its own test split after the last round (the record's
        ``global_accuracy``).
    history : list of dict
        The record's per-round entries; ``'best_round_pooled_cluster_mean'`` reads their
        ``mean_pooled_model_accuracy``.

    Returns
    -------
    float
    """
    check_choice(rule, "rule", REPORT_RULES)
    if rule == "last_round":
        return float(final_accuracy)
    values = [h["mean_pooled_model_accuracy"] for h in history if "mean_pooled_model_accuracy" in h]
    if not values:
        raise ValueError("rule 'best_round_pooled_cluster_mean' needs per-round pooled_model_accuracy in the "
                         "history (Context.pooled_models_eval=True); the run did not record it")
    return float(max(values))


def describe(methods, n_clients: int, fraction: float) -> list[dict]:
    """Per method, what ``paper_code`` changes and whether that makes another run at K =
    ``n_clients``, q = ``fraction`` — which reading the paper's number corresponds to.

    Returns
    -------
    list of dict with ``method``, ``paper_code`` (what the code did differently, or "as Table II")
    and ``separate_run`` (True: the two readings are two runs; False: one run serves both).
    """
    if isinstance(methods, str):
        fail("methods", "a list of method names", methods)
    out = []
    for m in methods:
        _check_method(m)
        s = PAPER_CODE.get(m)
        out.append({"method": m, "paper_code": s.note if s is not None else "as Table II (not in the code's baselines)",
                    "separate_run": runs_differently(m, n_clients, fraction)})
    return out
