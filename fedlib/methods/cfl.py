"""CFL — Clustered Federated Learning (Sattler, Müller & Samek, 2020).

Clusters start as one (all clients). Every round each cluster samples max(1, ⌊q·|c|⌋) of
its members, which train from the cluster's model; dW_i = W_i^after − W_c (trainable
weights, flattened). A cluster c is bipartitioned when

* it is past the warm-up (``t ≥ warmup_rounds``, t counted from 0) and more than 2 of its
  members sent an update this round,
* ``split_criterion``: ‖Σ_i n_i dW_i / Σ_i n_i‖ < ε1 (the federation sits near a stationary
  point of the cluster's joint objective) and max_i ‖dW_i‖ > ε2 (some client is still far
  from its own stationary point),
* ``bipartition``: complete-linkage agglomerative clustering (2 clusters) of the updates
  under the pairwise cosine similarity α_ij, and
* Sattler's robustness check (paper, Algorithm 3): γ_max = √((1 − α_cross^max)/2) > γ, with
  α_cross^max the largest cosine similarity across the two sides. γ = 0.5 therefore
  demands α_cross^max < 1 − 2γ² = 0.5.

Every (new) cluster model is its sampled members' sample-weighted average weights — the
cluster model plus its members' weighted mean update (Sattler's code adds the unweighted
mean; the workbook weights by n_i as FedAvg does). A split takes effect in the round it is
found: each side averages its own members' updates, as in Sattler's code.

Partial participation (Sattler's experiments had every client train every round): the
criterion and the bipartition see the sampled members' updates only. The members that
were not sampled join the side whose new model has the lower mean training loss on their
data — to first order in the step, the side whose mean update is most aligned with their
own (unobserved) descent direction; no stale update is stored, and a member that never
trained is placed as well. Ties go to the first side.

Client sampling: one stream, ``selection/group0`` — FedAvg's (:func:`fedlib.methods.base.federated_averaging`
draws its single group from it) — from which every cluster draws in turn, in cluster order,
min(|c|, max(``FLConfig.min_clients``, ⌊q·|c|⌋)) of its members (:func:`~fedlib.methods.base.sample_clients`,
FedAvg's rule). While CFL has not split it therefore trains exactly FedAvg's clients each round, so
CFL vs FedAvg differs by the split alone; after a split the later clusters' draws follow the
earlier ones' on the same stream (a run is still fixed by its seed).

Warm-up: Sattler's experiments allowed splits after 20 of 80 rounds; the workbook keeps that
quarter of the run, ``warmup_rounds=None`` → ⌊T/4⌋ (:func:`warmup_for`): 10 of the paper's
T = 40, 1 of the smoke protocol's T = 4. An integer fixes it.

The faithful rule (:data:`SATTLER`: ``{eps1: 0.4, eps2: 1.6, warmup_rounds: 20}``). Sattler et al.'s
public notebook (github.com/felisat/clustered-federated-learning, ``clustered_federated_learning.ipynb``)
sets ``EPS_1 = 0.4``, ``EPS_2 = 1.6`` and splits a cluster only when ``mean_norm < EPS_1 and
max_norm > EPS_2 and len(idc) > 2 and c_round > 20`` (``mean_norm`` the norm of the mean update,
``max_norm`` the largest update norm, 1-based rounds, every client every round); FL-bench's
``src/server/cfl.py`` (KarhouTam/FL-bench) has the same defaults, ``--eps_1 0.4 --eps_2 1.6
--min_cluster_size 2 --start_clustering_round 20``, tested as ``len(indices) > min_cluster_size and
current_epoch >= start_clustering_round`` (0-based), and no γ check. Here: ``warmup_rounds=20`` is
"no split before the 0-based round 20" = Sattler's ``c_round > 20``; "more than 2 members" is read
on the members that trained this round (the same at full participation, and never fewer than 3 of
the cluster's members). Where the protocol has R ≤ 20 rounds the warm-up covers the whole run: no
cluster ever splits and CFL trains FedAvg's clients, bit for bit (its ``split_log`` reads
"warm-up" every round). Past round 20, ‖mean ΔW‖ < 0.4 is rare under Adam (a fresh Adam moves every
weight by ≈ lr per step): at these values pFedLIA's Table I runs (notebook 10) never split. The
dataclass default stays Table II's (ε1 = 1e-5, ε2 = 0.1): the PSI papers' tables run CFL at the
values they state, and the committed records without ``eps1`` ran them.

The scale-free reading (``split_rule='ratio'``, :func:`ratio_test`), for tables where no protocol
gives CFL thresholds (notebooks 11 and 12): a cluster's round passes when ‖Σ_i w_i ΔW_i‖ <
ρ · max_i ‖ΔW_i‖, ρ = 0.25 = Sattler's ε1/ε2, both norms of the same cluster in the same round —
a necessary condition of Sattler's test at his values that no longer depends on the optimiser's
step size. Nothing is carried between rounds, so every cluster (a new one after a split too) is
tested on its own members' updates only. One client, or any set of parallel updates, has mean =
max and never passes; congruent updates (an IID federation early on) have mean close to max.
Incongruent groups cancel in the mean while each client's update stays large. The γ check, the
"more than 2 trained members" and the warm-up apply as above. What it does not claim: with M
updates that are pure noise around a vanished common direction, ‖mean‖ ≈ max/√M, so at M > 16
such a cluster passes it; the γ check is then what must refuse (tested on a small IID federation,
measured on the records of notebooks 11 and 12 in their split logs).

``eps1='auto'`` — :data:`AUTO_LABEL`: defective, superseded by the scale-free reading, kept only
so that the records that ran it can be read and labelled. ε1 := ``auto_scale`` · mean_i ‖ΔW_i‖ of
the last warm-up round (:func:`auto_eps1`) is compared with ‖mean ΔW‖, which is never larger than
the mean of the norms (‖Σ w_i ΔW_i‖ ≤ Σ w_i ‖ΔW_i‖): at scale 0.7 nearly every cluster passes it
(368 of 391 cluster-rounds after warm-up in the 18 records of notebooks 11 and 12; ε1 even exceeds
single clients' own update norms), ε2 = 0.1 is always exceeded under Adam, and what is left is the γ
check: those runs split an IID federation (S = 1) into 17 clusters (issue 69). A record's spec
shows ``eps1: auto`` and its ``info['eps1_rule']`` the label; a spec without ``eps1`` ran Table
II's 1e-5 (:func:`calibrated`). Whether a run split at all is :func:`never_split` of its record
(:func:`split_rounds`, from ``info['split_log']``).

The authors' code (reference-notes: "What produced Table III") tested the *mean of the norms* of
the clients' deviations from the new aggregate against ε1 instead (``split_test='mean_of_norms'``:
mean_i ‖θ_i − θ̄‖ < ε1 and max_i ‖θ_i − θ̄‖ > ε2, θ̄ the new cluster model); since max ≤ M·mean,
at ε2/ε1 = 10⁴ it needs ≥ 10⁴ clients per round to ever fire: their CFL never split, and the
paper's CFL column is FedAvg with small SGD steps reported at its best round. Their server
averaged the members' models without weights (``aggregation='uniform'``) and had no warm-up.
When such a test fires, their code dropped the members not sampled in the split round; this
module still places them by loss (they need a model to be evaluated).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..engine import broadcast, evaluate, flatten_params, weighted_average
from ..engine.host import to_host
from ..validation import check_choice, check_int, check_number, fail
from .base import (AGGREGATIONS, Context, FLConfig, Outcome, State, aggregation_weights, run_rounds, sample_clients,
                   take)
from .contract import MethodInfo

NAME = "cfl"


SPLIT_TESTS = ("sattler", "mean_of_norms")
SPLIT_RULES = ("absolute", "ratio")

#: Sattler et al.'s and FL-bench's thresholds and start (module docstring: "The faithful rule").
SATTLER = {"eps1": 0.4, "eps2": 1.6, "warmup_rounds": 20}

#: The label of ``eps1='auto'``, kept for the records that ran it (module docstring).
AUTO_LABEL = "auto (defective, superseded)"


@dataclass(frozen=True)
class Hyper:
    """CFL's thresholds (Table II) and warm-up; :data:`SATTLER` the authors' thresholds and start."""

    eps1: float | str = 1e-5   # ε1: mean-update norm below which the cluster is stationary; 'auto': auto_eps1 (defective)
    eps2: float = 0.1          # ε2: max client-update norm above which a client is not
    gamma: float = 0.5         # γ: split only if √((1 − α_cross^max)/2) > γ
    warmup_rounds: int | None = None  # no split before round index t = warmup_rounds (0-based); None: ⌊T/4⌋
    auto_scale: float = 0.5    # eps1='auto': ε1 = auto_scale · mean client-update norm at the end of warm-up
    split_rule: str = "absolute"  # "absolute" (‖mean‖ < ε1, max > ε2) or "ratio" (‖mean‖ < rho · max, scale-free)
    rho: float = 0.25          # split_rule='ratio': ρ, Sattler's ε1/ε2 = 0.4/1.6
    split_test: str = "sattler"   # "sattler" (‖mean ΔW‖, max‖ΔW_i‖) or "mean_of_norms" (the authors' code)
    aggregation: str = "samples"  # cluster model: "samples" (n_i-weighted) or "uniform" (the authors' code)

    def __post_init__(self):
        check_choice(self.split_test, "split_test", SPLIT_TESTS)
        check_choice(self.aggregation, "aggregation", AGGREGATIONS)
        check_choice(self.split_rule, "split_rule", SPLIT_RULES)
        check_number(self.rho, "rho", 0, 1, low_open=True, high_open=True)
        if self.split_rule == "ratio" and self.eps1 == "auto":
            fail("eps1", "a number with split_rule='ratio' (the scale-free test reads rho, never ε1; 'auto' is "
                 "defective and superseded by it: drop eps1)", self.eps1)
        if not (isinstance(self.eps1, str) and self.eps1 == "auto"):
            try:
                check_number(self.eps1, "eps1", 0)
            except ValueError:
                fail("eps1", "a finite number ≥ 0 or 'auto'", self.eps1)
        check_number(self.eps2, "eps2", 0)
        check_number(self.gamma, "gamma", 0, 1, high_open=True)
        check_int(self.warmup_rounds, "warmup_rounds", 0, optional=True)
        check_number(self.auto_scale, "auto_scale", 0, low_open=True)


def warmup_for(hp: Hyper, rounds: int) -> int:
    """Rounds before a split may happen: ``hp.warmup_rounds``, or ⌊rounds/4⌋ when it is None."""
    return rounds // 4 if hp.warmup_rounds is None else hp.warmup_rounds


def check_protocol(hp: Hyper, cfg: FLConfig) -> None:
    """``eps1='auto'`` calibrates on the last warm-up round, so it needs a warm-up of ≥ 1 round
    that ends before the run does."""
    if hp.eps1 == "auto" and not 1 <= warmup_for(hp, cfg.rounds) < cfg.rounds:
        fail("warmup_rounds", f"in [1, rounds = {cfg.rounds}) with eps1='auto' (ε1 is calibrated on the last "
             "warm-up round; set warmup_rounds, raise rounds or give eps1 a number)",
             warmup_for(hp, cfg.rounds))


def update_norms(dw: torch.Tensor, weights=None) -> dict:
    """The norms CFL's split test reads, for one cluster's round.

    Parameters
    ----------
    dw : Tensor, shape (M, P)
    weights : array-like, shape (M,), optional
        Weights of the mean (sample counts); uniform by default.

    Returns
    -------
    dict
        ``mean_norm`` ‖Σ_i w_i dW_i / Σ_i w_i‖, ``max_norm`` max_i ‖dW_i‖, ``mean_of_norms``
        mean_i ‖dW_i‖ (plain mean), ``ratio`` max_norm / mean_norm (inf for a zero mean), and
        the authors' statistics on the deviations from the new (weighted) aggregate,
        ``mean_deviation_norm`` mean_i ‖dW_i − Σ_j w_j dW_j‖ and ``max_deviation_norm``.
    """
    d = dw.double()
    w = torch.ones(len(d), dtype=torch.float64) if weights is None else torch.as_tensor(
        np.asarray(weights, dtype=np.float64))
    w = (w / w.sum()).to(d.device)
    mean = w @ d
    norms = d.norm(dim=1)
    deviations = (d - mean).norm(dim=1)
    mean_norm = float(mean.norm())
    max_norm = float(norms.max())
    return {"mean_norm": mean_norm, "max_norm": max_norm, "mean_of_norms": float(norms.mean()),
            "ratio": max_norm / mean_norm if mean_norm > 0 else math.inf,
            "mean_deviation_norm": float(deviations.mean()), "max_deviation_norm": float(deviations.max())}


def auto_eps1(mean_of_norms: float, scale: float) -> float:
    """``eps1='auto'``: ε1 = scale · mean_i ‖dW_i‖ of the last warm-up round."""
    return scale * mean_of_norms


def ratio_test(mean: float, max_: float, rho: float) -> bool:
    """The scale-free split test (``split_rule='ratio'``): ‖mean_i ΔW_i‖ < ρ · max_i ‖ΔW_i‖, both of
    one cluster's one round. Sattler's test implies it at ρ = ε1/ε2 (mean < ε1 and max > ε2 give
    mean/max < ε1/ε2 = 0.25 at his values); one client (mean = max) or congruent clients
    (mean ≈ max) never pass it."""
    return mean < rho * max_


def thresholds(values: dict | None = None) -> tuple:
    """(ε1, ε2, γ) of a run's CFL hyperparameter overrides ``values`` (a spec's ``hyper``), Table
    II's defaults filled in; ``eps1='auto'`` reads ('auto', auto_scale), ``split_rule='ratio'``
    (('ratio', rho), None, γ). Other keys are ignored."""
    keys = ("eps1", "eps2", "gamma", "auto_scale", "split_rule", "rho")
    hp = Hyper(**{k: v for k, v in (values or {}).items() if k in keys})
    if hp.split_rule == "ratio":
        return ("ratio", float(hp.rho)), None, float(hp.gamma)
    eps1 = ("auto", float(hp.auto_scale)) if hp.eps1 == "auto" else float(hp.eps1)
    return eps1, float(hp.eps2), float(hp.gamma)


def thresholds_label(values: dict | None = None) -> str:
    """:func:`thresholds` in words, for a table row: ``'ε1 = 1e-05, ε2 = 0.1, γ = 0.5'``;
    ``eps1='auto'`` reads ``'ε1 = auto (defective, superseded; 0.5 × warm-up update), …'``
    (:func:`auto_eps1`, :data:`AUTO_LABEL`), ``split_rule='ratio'`` ``'‖mean ΔW‖ < 0.25 · max ‖ΔW_i‖
    (scale-free), γ = 0.5'``."""
    eps1, eps2, gamma = thresholds(values)
    if isinstance(eps1, tuple) and eps1[0] == "ratio":
        return f"‖mean ΔW‖ < {eps1[1]:g} · max ‖ΔW_i‖ (scale-free), γ = {gamma:g}"
    first = (f"{AUTO_LABEL[:-1]}; {eps1[1]:g} × warm-up update)" if isinstance(eps1, tuple) else f"{eps1:g}")
    return f"ε1 = {first}, ε2 = {eps2:g}, γ = {gamma:g}"


GRID = {"eps1": (1e-5, 1e-4, 1e-3), "eps2": (0.001, 0.01, 0.1), "gamma": (0.1, 0.5, 0.9)}

NEVER_SPLIT = "CFL never split"
"""What a table row says of a CFL run whose clusters never split (it trained as FedAvg)."""


def split_rounds(info: dict | None) -> list[int] | None:
    """The rounds (1-based) in which a CFL run bipartitioned a cluster, read from its record's
    ``info``: the ``split_log`` entries with ``split`` true, or, for a record without a log, the
    ``splits`` list; None when ``info`` holds neither (not a finished CFL run)."""
    info = info or {}
    if "split_log" in info:
        return [int(r["round"]) for r in info["split_log"] if r.get("split")]
    if "splits" in info:
        return [int(s["round"]) for s in info["splits"]]
    return None


def never_split(info: dict | None) -> bool | None:
    """Whether a CFL run kept one cluster to the end (:func:`split_rounds` empty): True, False,
    or None when ``info`` is not a finished CFL run's."""
    rounds = split_rounds(info)
    return None if rounds is None else not rounds


def split_note(flags) -> str:
    """What a table row or cell adds for the CFL runs behind it, given each run's
    :func:`never_split` (``flags``; None, NaN: not a finished CFL run, skipped): :data:`NEVER_SPLIT`
    when none of them split, ``"CFL split in n of m runs"`` when only some did, ``""`` when all
    did or none is a finished CFL run."""
    flags = [bool(f) for f in flags if f is not None and f == f]  # f == f: not NaN
    if not flags or not any(flags):
        return ""
    return NEVER_SPLIT if all(flags) else f"CFL split in {flags.count(False)} of {len(flags)} runs"


def calibrated(values: dict | None) -> bool:
    """Whether a run's CFL hyperparameters ``values`` (a spec's ``hyper``) calibrate ε1
    (``eps1='auto'``: :data:`AUTO_LABEL`, superseded by :func:`scale_free`). A spec without
    ``eps1`` ran Table II's 1e-5 (the default): records made before a table switched to the
    calibrated threshold keep that meaning."""
    return (values or {}).get("eps1") == "auto"


def scale_free(values: dict | None) -> bool:
    """Whether a run's CFL hyperparameters ``values`` (a spec's ``hyper``) run the scale-free
    test (``split_rule='ratio'``, :func:`ratio_test`)."""
    return (values or {}).get("split_rule") == "ratio"


def cosine_similarity_matrix(dw: torch.Tensor) -> torch.Tensor:
    """Pairwise cosine similarities α_ij = ⟨dW_i, dW_j⟩ / (‖dW_i‖‖dW_j‖).

    Parameters
    ----------
    dw : Tensor, shape (M, P)

    Returns
    -------
    Tensor, shape (M, M), float64
        A zero update has similarity 0 with every update (itself included).
    """
    d = dw.double()
    unit = d / d.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return unit @ unit.T


def split_criterion(dw: torch.Tensor, eps1: float, eps2: float, weights=None) -> bool:
    """Sattler's stationarity test: ‖mean_i dW_i‖ < ε1 and max_i ‖dW_i‖ > ε2.

    Parameters
    ----------
    dw : Tensor, shape (M, P)
    eps1, eps2 : float
    weights : array-like, shape (M,), optional
        Weights of the mean (the workbook passes the clients' sample counts); uniform by default.
    """
    norms = update_norms(dw, weights)
    return norms["mean_norm"] < eps1 and norms["max_norm"] > eps2


def authors_split_criterion(dw: torch.Tensor, eps1: float, eps2: float, weights=None) -> bool:
    """The PSI papers' code's test: mean_i ‖g_i‖ < ε1 and max_i ‖g_i‖ > ε2 with g_i = θ_i − θ̄ the
    deviation from the new aggregate (= dW_i − mean dW, means weighted by ``weights``)."""
    norms = update_norms(dw, weights)
    return norms["mean_deviation_norm"] < eps1 and norms["max_deviation_norm"] > eps2


#: The two statistics each ``split_test`` compares with ε1 and ε2 (keys of :func:`update_norms`).
SPLIT_STATISTICS = {"sattler": ("mean_norm", "max_norm"),
                    "mean_of_norms": ("mean_deviation_norm", "max_deviation_norm")}


def split_reasons(mean: float, max_: float, eps1: float | None, eps2: float | None, trained: int,
                  warm_up: bool, rho: float | None = None) -> list[str]:
    """Why one cluster's round fails CFL's split test; ``[]`` when the test passes (the
    bipartition and its γ check come next).

    In this order: ``"warm-up"`` (the round is before ``warmup_rounds``), ``"too few clients"``
    (``trained`` ≤ 2 members sent an update), ``"mean ≥ ε1"`` (not ``mean`` < ε1: the cluster
    is not near a stationary point of its joint objective), ``"max ≤ ε2"`` (not ``max_`` > ε2:
    no client is far from its own). ``mean`` and ``max_`` are the statistics the split test
    compares (:data:`SPLIT_STATISTICS`); ``eps1`` None (``eps1='auto'`` before its calibration,
    inside the warm-up) leaves the mean uncompared. With ``rho`` (``split_rule='ratio'``) the
    threshold test is :func:`ratio_test` instead, ``"mean ≥ ρ·max"`` when it fails; ε1 and ε2 are
    not read.
    """
    reasons = ["warm-up"] if warm_up else []
    if trained <= 2:
        reasons.append("too few clients")
    if rho is not None:
        return reasons + ([] if ratio_test(mean, max_, rho) else ["mean ≥ ρ·max"])
    if eps1 is not None and not mean < eps1:
        reasons.append("mean ≥ ε1")
    if not max_ > eps2:
        reasons.append("max ≤ ε2")
    return reasons


def bipartition(dw: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Two groups of updates by complete-linkage clustering on their cosine similarity.

    Complete linkage depends only on the order of the distances, so the distance 1 − α_ij
    gives the same tree as Sattler's −α_ij.

    Parameters
    ----------
    dw : Tensor, shape (M, P), M ≥ 2

    Returns
    -------
    (ndarray, ndarray)
        Sorted row indices of the two sides; the first holds row 0.
    """
    if len(dw) < 2:
        raise ValueError(f"bipartition needs at least 2 updates, got {len(dw)}")
    from scipy.cluster.hierarchy import cut_tree, linkage  # imported here: importing the registry stays light
    from scipy.spatial.distance import squareform

    dist = to_host((1.0 - cosine_similarity_matrix(dw)).clamp_min(0))
    np.fill_diagonal(dist, 0.0)
    labels = cut_tree(linkage(squareform(dist, checks=False), method="complete"), n_clusters=2).ravel()
    first = labels == labels[0]
    return np.flatnonzero(first), np.flatnonzero(~first)


def gamma_max(similarity: torch.Tensor, side1, side2) -> float:
    """Sattler's γ_max = √((1 − α_cross^max)/2), α_cross^max = max_{i∈side1, j∈side2} α_ij.

    Parameters
    ----------
    similarity : Tensor, shape (M, M)
    side1, side2 : int arrays
        Disjoint row indices.
    """
    cross = similarity[np.asarray(side1)][:, np.asarray(side2)]
    return float(np.sqrt(max(0.0, (1.0 - float(cross.max())) / 2.0)))


def assign_by_loss(losses) -> np.ndarray:
    """Index of the lowest-loss model per client; NaN (no data) counts as +∞, ties go first.

    Parameters
    ----------
    losses : array-like, shape (U, G)

    Returns
    -------
    ndarray, shape (U,), int64
    """
    return np.argmin(np.nan_to_num(np.asarray(losses, dtype=np.float64), nan=np.inf), axis=1)


def _train_losses(ctx: Context, models: State, clients: np.ndarray) -> np.ndarray:
    """(U, G) mean training loss of each of the G stacked ``models`` on each client."""
    g = len(next(iter(models.values())))
    rows = np.tile(np.arange(g), len(clients))
    res = evaluate(ctx.model, take(models, rows), ctx.fed, np.repeat(clients, g), split="train")
    return to_host(res.mean_loss).reshape(len(clients), g)


def _update_cluster(ctx: Context, hp: Hyper, warm_up: bool, eps1: float | None, members: np.ndarray,
                    picked: np.ndarray, dw: torch.Tensor, params: State, n: np.ndarray,
                    norms: dict) -> tuple[list[np.ndarray], list[State], dict]:
    """One cluster after a round: its (one or two) member arrays, their new models, and the
    round's split decision (the :func:`run` docstring's ``split_log`` entry, less round and
    cluster).

    ``picked``, ``dw`` (m, P), ``params`` (m, ...) and ``n`` (m,) describe the m members that
    trained this round, in the same order; ``norms`` is :func:`update_norms` of ``dw`` under
    the aggregation weights; ``warm_up`` is True before ``warmup_rounds``.
    """
    sides = [np.arange(len(picked))]
    w = to_host(aggregation_weights(n, hp.aggregation), np.float64)
    mean_key, max_key = SPLIT_STATISTICS[hp.split_test]
    rho = hp.rho if hp.split_rule == "ratio" else None
    eps1, eps2 = (None, None) if rho is not None else (eps1, hp.eps2)
    reasons = split_reasons(norms[mean_key], norms[max_key], eps1, eps2, len(picked), warm_up, rho=rho)
    g_max = None
    if not reasons:
        a, b = bipartition(dw)
        g_max = gamma_max(cosine_similarity_matrix(dw), a, b)
        if g_max > hp.gamma:
            sides = [a, b]
        else:
            reasons = ["γ_max ≤ γ"]
    decision = {"members": len(members), "trained": len(picked), "mean": norms[mean_key], "max": norms[max_key],
                "eps1": eps1, "eps2": eps2, "rho": rho, "gamma_max": g_max, "split": len(sides) == 2,
                "reason": "; ".join(reasons) or "split"}
    models = [weighted_average(take(params, s), w[s]) for s in sides]
    if len(sides) == 1:
        return [members], models, decision
    groups = [list(picked[s]) for s in sides]
    rest = np.setdiff1d(members, picked)
    if rest.size:
        stacked = {k: torch.stack([m[k] for m in models]) for k in models[0]}
        for client, side in zip(rest, assign_by_loss(_train_losses(ctx, stacked, rest))):
            groups[side].append(client)
    return [np.sort(np.asarray(g, dtype=np.int64)) for g in groups], models, decision


def run(ctx: Context, hp: Hyper) -> Outcome:
    """CFL over ``ctx.cfg.rounds`` rounds; one model per final cluster, clients use their cluster's.

    ``info``: ``norms`` (per round and cluster that trained: round (1-based), cluster, size,
    mean_norm, max_norm, mean_of_norms, ratio), ``split_log`` (per round and cluster: round,
    cluster, members, trained, ``mean`` and ``max`` — the statistics the split test compares,
    named in ``split_statistics`` —, eps1 (None before an 'auto' calibration or with
    ``split_rule='ratio'``), eps2 (None with 'ratio'), rho (None unless 'ratio'),
    gamma_max (None unless the bipartition was tried), split, reason: :func:`split_reasons`,
    ``"γ_max ≤ γ"`` or ``"split"``), ``split_rule``, ``eps1`` (the value used, None with
    'ratio', then ``rho``; with 'auto' also ``eps1_auto_from`` = the warm-up's last mean
    client-update norm and ``eps1_rule`` = :data:`AUTO_LABEL`), ``warmup_rounds``,
    ``splits``, the final clusters.
    """
    check_protocol(hp, ctx.cfg)
    warmup = warmup_for(hp, ctx.cfg.rounds)
    names = [name for name, _ in ctx.model.named_parameters()]

    def step(t: int, state: dict) -> dict:  # one round; everything CFL carries between rounds is in `state`
        clusters, models, rng, eps1 = state["clusters"], state["models"], state["rng"], state["eps1"]
        picks = [sample_clients(rng, c, ctx.cfg.fraction, ctx.cfg.min_clients) for c in clusters]
        owner = np.concatenate([np.full(len(p), g) for g, p in enumerate(picks)])
        start = take(models, owner)
        res = ctx.train(start, np.concatenate(picks), t)
        dw = flatten_params(res.params, names) - flatten_params(start, names)
        n = to_host(res.n_samples, np.float64)
        new_clusters, new_models = [], []
        for g, (members, picked) in enumerate(zip(clusters, picks)):
            rows = np.flatnonzero(owner == g)
            norms = update_norms(dw[rows], to_host(aggregation_weights(n[rows], hp.aggregation), np.float64))
            state["norm_log"].append({"round": t + 1, "cluster": g, "size": len(picked), **norms})
            if eps1 is None and t == warmup - 1:  # eps1='auto': calibrate on the last warm-up round
                state["auto_from"] = norms["mean_of_norms"]
                eps1 = auto_eps1(state["auto_from"], hp.auto_scale)
            groups, cluster_models, decision = _update_cluster(ctx, hp, t < warmup, eps1, members, picked, dw[rows],
                                                               take(res.params, rows), n[rows], norms)
            state["split_log"].append({"round": t + 1, "cluster": g, **decision})
            if len(groups) == 2:
                state["splits"].append({"round": t + 1, "sizes": [len(x) for x in groups]})
            new_clusters += groups
            new_models += cluster_models
        models = {k: torch.stack([m[k] for m in new_models]) for k in new_models[0]}
        assignment = _assignment(new_clusters, ctx.n_clients)
        ctx.log_round(t, models, assignment)
        return {**state, "clusters": new_clusters, "models": models, "eps1": eps1, "assignment": assignment}

    state = {"clusters": [np.arange(ctx.n_clients)], "models": broadcast(ctx.init_state(), 1),
             "rng": ctx.rng("selection/group0"),  # FedAvg's stream (module docstring: Client sampling)
             "eps1": None if hp.eps1 == "auto" else float(hp.eps1), "assignment": None,
             "splits": [], "norm_log": [], "split_log": [], "auto_from": None}
    state = run_rounds(ctx, range(ctx.cfg.rounds), state, step)
    clusters, assignment = state["clusters"], state["assignment"]
    info = {"n_clusters": len(clusters), "cluster_sizes": [len(c) for c in clusters], "splits": state["splits"],
            "assignment": assignment.tolist(), "warmup_rounds": warmup, "eps1": state["eps1"],
            "norms": state["norm_log"], "split_log": state["split_log"],
            "split_statistics": list(SPLIT_STATISTICS[hp.split_test]), "split_rule": hp.split_rule}
    if hp.split_rule == "ratio":
        info.update({"rho": hp.rho, "eps1": None})
    if hp.eps1 == "auto":
        info.update({"eps1_auto_from": state["auto_from"], "eps1_rule": AUTO_LABEL})
    return Outcome(state["models"], assignment, info)


def _assignment(clusters: list[np.ndarray], k: int) -> np.ndarray:
    """(K,) cluster index of every client."""
    out = np.empty(k, dtype=np.int64)
    for g, c in enumerate(clusters):
        out[c] = g
    return out


INFO = MethodInfo(NAME, "CFL", Hyper, run, grid=GRID,
                  check_protocol=check_protocol, resumable=True)
