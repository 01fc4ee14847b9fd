"""pFedLIA — personalised FL by Lazy Influence Approximation (the fourth seed paper, Sec. III-D/F).

1. Warm-up: FedAvg for ``warmup_rounds`` rounds (20, Sec. IV-D) — the same clients, batches
   and models as FedAvg's first rounds; its model is θ0.
2. Lazy influence (Eq. 1): every client j trains k = ``influence_epochs`` local epochs from θ0
   (20, "in our simulations, we only performed 20 epochs") → θ̂_j, and client i scores

       I(i, j) = Σ_{z ∈ val_i} L(z, θ0) − L(z, θ̂_j)                                   (1)

   All K trainings are one engine call, and the K×K matrix (with θ0's own losses) one batched
   evaluation of K + 1 models on the K validation splits (:func:`influence_matrix`).
3. Clustering, once:
   * ``clustering='centralised'``: the centre runs OPTICS on the rows of I (client i's point
     is its view I(i, ·)); no cluster count is preset (:func:`optics_clusters`).
   * ``clustering='p2p'``: each client splits its own row in two with k-means (k = 2),
     the side with the higher mean being "beneficial" (:func:`beneficial_peers`).
     Individual views become training groups through mutual benefit: i and j are linked when
     each finds the other beneficial, and the groups are the connected components of these
     links (:func:`mutual_groups`) — a client nobody reciprocates trains alone.
4. FedAvg inside each group from θ0 for the remaining rounds (the round count continues, so
   the history shows the jump after round 20 of the paper's Fig. 4).

Choices where the paper is silent (documented, selectable):
* OPTICS: scikit-learn's defaults (``min_samples`` 5, ξ = 0.05, Euclidean metric) on the raw
  rows of Eq. (1) (sums, as printed); a client OPTICS leaves as noise joins the cluster of
  its nearest clustered client (``noise='nearest'``), or trains alone (``'singleton'``); when
  every client is noise there is one cluster (FedAvg). ``min_samples`` is clipped to K.
* p2p k-means is solved exactly: in one dimension the optimal 2-means partition is a
  threshold on the sorted values, so every split point is tried (Lloyd's iterations from a
  random start can stop at a worse one). Ties go to the lowest threshold.
* The influence training counts as round ``warmup_rounds`` (the clustering happens "within
  one communication round", footnote 1); the cluster phase starts in that round too, with
  its own selection streams (``clusters/selection/group<g>``, shared with the Oracle: with
  the true clusters found, pFedLIA and the Oracle are the same run).
* θ̂_j trains on client j's whole train split by default; §III-D says "a batch of their
  training data" without its size: ``influence_samples = n`` trains it on a seeded draw of n of
  j's samples (stream ``pfedlia/influence_samples``) instead.
* The paper's model is a pretrained ResNet-18; the workbook uses the data set's model from
  random initialisation (pretrained weights cannot be fetched here).

``info``: ``influence`` (K×K, rows i), ``cluster_of_client``, ``n_clusters``,
``cluster_sizes``, ``clustering``, and for p2p ``beneficial`` (each client's peers).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from ..engine import broadcast
from ..validation import check_choice, check_int, fail
from .base import CLUSTER_STREAM, Context, FLConfig, Outcome, federated_averaging
from .contract import MethodInfo

NAME = "pfedlia"
GRID = {}

__all__ = ["NAME", "GRID", "Hyper", "influence_parts", "influence_matrix", "optics_clusters", "beneficial_peers",
           "mutual_groups", "needs_validation", "check_protocol", "run"]


@dataclass(frozen=True)
class Hyper:
    warmup_rounds: int = 20            # FedAvg rounds before the clustering (Sec. IV-D)
    influence_epochs: int = 20         # k: local epochs of θ̂_j from θ0 (Sec. III-D)
    clustering: str = "centralised"    # 'centralised' (OPTICS) or 'p2p' (k-means per client)
    min_samples: int = 5               # OPTICS (scikit-learn's default)
    noise: str = "nearest"             # OPTICS noise points: 'nearest' cluster or 'singleton'
    influence_samples: int | None = None  # θ̂_j's training data: None = client j's whole train split;
    # n = a random n of its train samples ("a batch of their training data", Sec. III-D)

    def __post_init__(self):
        check_int(self.warmup_rounds, "warmup_rounds", 0)
        check_int(self.influence_epochs, "influence_epochs", 1)
        check_choice(self.clustering, "clustering", ("centralised", "p2p"))
        check_int(self.min_samples, "min_samples", 2)
        check_choice(self.noise, "noise", ("nearest", "singleton"))
        check_int(self.influence_samples, "influence_samples", 1, optional=True)


def needs_validation(hp: Hyper) -> bool:
    """Eq. (1) scores on each client's validation split."""
    return True


def check_protocol(hp: Hyper, cfg: FLConfig) -> None:
    """The warm-up must leave rounds for the clusters to train."""
    if hp.warmup_rounds >= cfg.rounds:
        fail("warmup_rounds", f"< rounds = {cfg.rounds} (pFedLIA clusters after the warm-up, then trains "
             "each cluster; lower warmup_rounds or raise rounds)", hp.warmup_rounds)


def influence_matrix(loss_before, loss_after) -> np.ndarray:
    """Eq. (1): I(i, j) = Σ_{z∈val_i} L(z, θ0) − L(z, θ̂_j).

    Parameters
    ----------
    loss_before : array-like, shape (K,)
        Summed loss of θ0 on client i's validation split.
    loss_after : array-like, shape (K, K)
        Summed loss of θ̂_j (row j) on client i's validation split (column i) — the layout
        of :meth:`Context.loss_matrix` (models × clients).

    Returns
    -------
    ndarray, shape (K, K), float64 — row i is client i's view of every client j.
    """
    before = np.asarray(loss_before, dtype=np.float64)
    after = np.asarray(loss_after, dtype=np.float64)
    if before.ndim != 1 or after.shape != (before.size, before.size):
        fail("loss_after", f"a ({before.size}, {before.size}) matrix (models j × clients i) for "
             f"{before.size} clients", after.shape)
    return before[:, None] - after.T


def optics_clusters(scores, min_samples: int = 5, noise: str = "nearest") -> np.ndarray:
    """Centralised clustering: OPTICS on the rows of the influence matrix.

    Parameters
    ----------
    scores : array-like, shape (K, K) — row i is client i's point.
    min_samples : int — OPTICS's (clipped to K).
    noise : {'nearest', 'singleton'} — what a noise point becomes (see the module docstring).

    Returns
    -------
    ndarray, shape (K,), int64 — cluster ids 0..G−1 in order of first appearance.
    """
    from sklearn.cluster import OPTICS

    x = np.asarray(scores, dtype=np.float64)
    if x.ndim != 2 or len(x) < 1 or not np.isfinite(x).all():
        fail("scores", "a finite (K, K) influence matrix", x.shape)
    check_int(min_samples, "min_samples", 2)
    check_choice(noise, "noise", ("nearest", "singleton"))
    if len(x) < 2:
        return np.zeros(len(x), dtype=np.int64)
    labels = OPTICS(min_samples=min(min_samples, len(x))).fit(x).labels_.astype(np.int64)
    lost = np.flatnonzero(labels < 0)
    kept = np.flatnonzero(labels >= 0)
    if kept.size == 0:
        labels[:] = 0
    elif noise == "nearest":
        dist = ((x[lost, None, :] - x[None, kept, :]) ** 2).sum(-1)
        labels[lost] = labels[kept[np.argmin(dist, axis=1)]]
    else:
        labels[lost] = labels.max() + 1 + np.arange(lost.size)
    return _relabel(labels)


def beneficial_peers(row) -> np.ndarray:
    """Peer-to-peer view of one client: 2-means on its influence row, solved exactly.

    Parameters
    ----------
    row : array-like, shape (K,) — I(i, ·).

    Returns
    -------
    bool ndarray, shape (K,) — True for the side with the higher mean (the "beneficial"
    clients); all True when the row is constant.
    """
    v = np.asarray(row, dtype=np.float64)
    if v.ndim != 1 or v.size == 0 or not np.isfinite(v).all():
        fail("row", "a finite 1-D influence row", v)
    s = np.sort(v)
    if s[0] == s[-1]:
        return np.ones(v.size, dtype=bool)
    c1, c2 = np.cumsum(s), np.cumsum(s ** 2)
    best, cut = np.inf, 1
    for m in range(1, v.size):  # low side s[:m], high side s[m:]
        if s[m - 1] == s[m]:
            continue  # a threshold separates distinct values only
        lo = c2[m - 1] - c1[m - 1] ** 2 / m
        hi = (c2[-1] - c2[m - 1]) - (c1[-1] - c1[m - 1]) ** 2 / (v.size - m)
        if not lo + hi >= best - 1e-12 * max(1.0, abs(best)):  # strictly better (first: best = inf)
            best, cut = lo + hi, m
    return v >= s[cut]


def mutual_groups(beneficial) -> np.ndarray:
    """Training groups from the clients' views: connected components of mutual benefit.

    Parameters
    ----------
    beneficial : bool array-like, shape (K, K) — row i: the peers client i finds beneficial.

    Returns
    -------
    ndarray, shape (K,), int64 — group ids 0..G−1 in order of first appearance.
    """
    b = np.asarray(beneficial, dtype=bool)
    if b.ndim != 2 or b.shape[0] != b.shape[1]:
        fail("beneficial", "a square (K, K) boolean matrix", b.shape)
    from scipy.sparse import csr_matrix  # imported here: importing the registry stays light
    from scipy.sparse.csgraph import connected_components

    _, labels = connected_components(csr_matrix(b & b.T), directed=False)
    return _relabel(labels.astype(np.int64))


def _relabel(labels: np.ndarray) -> np.ndarray:
    """Ids renumbered 0..G−1 in order of first appearance."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))
    return rank[inverse].astype(np.int64)


def influence_parts(train_parts, n: int | None, rng: np.random.Generator) -> tuple:
    """The train indices each θ̂_j trains on: every part whole (``n`` None), else a uniform
    draw of ``n`` of its indices without replacement (all of a part with ≤ n), kept in their
    order. ``train_parts``: K int64 arrays; returns K int64 arrays."""
    if n is None:
        return tuple(train_parts)
    return tuple(p if len(p) <= n else np.sort(rng.choice(p, n, replace=False)) for p in train_parts)


def _influence(ctx: Context, theta0, hp: Hyper, round_idx: int) -> np.ndarray:
    """(K, K) Eq. (1) for every pair: one training call, one batched evaluation."""
    everyone = np.arange(ctx.n_clients)
    if hp.influence_samples is not None:  # train θ̂_j on a batch of j's data; score on the full val splits
        parts = influence_parts(ctx.fed.train_parts, hp.influence_samples, ctx.rng("pfedlia/influence_samples"))
        ctx = dataclasses.replace(ctx, fed=dataclasses.replace(ctx.fed, train_parts=parts))
    res = ctx.train(broadcast(theta0, ctx.n_clients, copy=False), everyone, round_idx, epochs=hp.influence_epochs)
    models = {k: torch.cat([res.params[k], theta0[k].unsqueeze(0)]) for k in theta0}  # θ̂_0..θ̂_{K−1}, θ0
    loss, _, n = ctx.loss_matrix(models, everyone, split="val")
    sums = loss * n[None, :]
    return influence_matrix(sums[-1], sums[:-1])


def run(ctx: Context, hp: Hyper) -> Outcome:
    """Warm-up FedAvg, lazy influence, clustering once, FedAvg per cluster."""
    check_protocol(hp, ctx.cfg)
    if int(ctx.fed.n_val.sum()) == 0:
        fail("val_fraction", "> 0: pFedLIA scores Eq. (1) on the clients' validation splits "
             "(RunSpec(val_fraction=0.2) gives the paper's 3:1 train/validation)", 0)
    everyone = np.arange(ctx.n_clients)
    theta0 = ctx.init_state()
    if hp.warmup_rounds:
        warm = federated_averaging(ctx, [everyone], rounds=hp.warmup_rounds)
        theta0 = {k: v[0] for k, v in warm.models.items()}
    scores = _influence(ctx, theta0, hp, hp.warmup_rounds)
    info = {"clustering": hp.clustering, "influence": scores.tolist()}
    if hp.clustering == "centralised":
        labels = optics_clusters(scores, hp.min_samples, hp.noise)
    else:
        views = np.stack([beneficial_peers(row) for row in scores])
        labels = mutual_groups(views)
        info["beneficial"] = [np.flatnonzero(v).tolist() for v in views]
    groups = [np.flatnonzero(labels == g) for g in range(int(labels.max()) + 1)]
    out = federated_averaging(ctx, groups, start=theta0, first_round=hp.warmup_rounds,
                              rounds=ctx.cfg.rounds - hp.warmup_rounds, stream=CLUSTER_STREAM)
    info.update({"cluster_of_client": labels.tolist(), "n_clusters": len(groups),
                 "cluster_sizes": [len(g) for g in groups]})
    out.info.update(info)
    return out


INFO = MethodInfo(NAME, "pFedLIA", Hyper, run, grid=GRID, resumable=True,
                  needs_validation=needs_validation, check_protocol=check_protocol)
