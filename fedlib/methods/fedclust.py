"""FedClust — clients grouped by their classifier weights (Islam et al., 2024), as FedPrism
(Sec. 4.4) runs it: K-Means into C clusters with Hungarian matching of cluster identities.

Each round t, with S_t the m = max(1, ⌊q·K⌋) clients drawn uniformly from the stream
``"selection/group0"`` (the same clients as FedAvg):

1. each i ∈ S_t trains from its cluster's model, or from the global model g if it has no
   cluster yet (one engine call);
2. features: the trained classifier layer (head weight and bias, flattened) of each i,
   L2-normalised, so that K-Means on them ≈ clustering by cosine similarity
   (:func:`classifier_features`);
3. ``recluster='every_round'`` (FedPrism's description, the default): K-Means (k-means++,
   ``n_init`` restarts, random_state drawn from the stream ``"fedclust/kmeans"``) into
   C' = min(C, |S_t|) clusters; each new cluster's centroid (the mean of its members'
   features) is matched to the existing cluster identities by the Hungarian algorithm on
   the cost 1 − cos(new centroid, previous centroid) (:func:`match_clusters`; the first
   clustering keeps K-Means's labels; new clusters beyond the existing ones get fresh ids);
   each selected client takes its matched id. ``'once'`` (the original FedClust: cluster
   once, then fixed): K-Means only after round 0; a client first selected later joins the
   cluster whose centroid is most cosine-similar to its trained classifier;
4. each cluster with members in S_t: θ_c ← sample-weighted average of their trained models,
   and its centroid is refreshed; a cluster without members this round keeps both;
   g ← sample-weighted average of all the round's trained models (FedAvg).

Evaluation: a clustered client uses its cluster's model; a client never selected (no
cluster) uses g. ``models`` stacks the C cluster models and g last (row C); a cluster id that
never formed keeps the initial model and serves nobody.

Departures: the FedClust paper clusters once, by agglomerative clustering of the classifier
weights of all clients after a short warm-up; FedPrism's description (K-Means, C clusters,
Hungarian matching every round) is followed by default. C = ``n_clusters`` = 5 is FedPrism's
K (the paper gives none for FedClust). The global model for clients without a cluster is the
workbook's choice (FedPrism does not say).

``info``: ``cluster_of_client`` (K,) final cluster id, −1 for a client never clustered (for
:func:`fedlib.evaluation.cluster_recovery`), ``cluster_sizes`` (C,), ``selected`` and
``clusters`` (their ids after the round) per round.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from ..engine import weighted_average
from ..engine.host import to_host
from ..models import head_prefix
from ..validation import check_choice, check_int, fail
from .base import Context, Outcome, State, check_finite_models, run_rounds, sample_clients, take
from .contract import MethodInfo

NAME = "fedclust"
GRID = {}  # FedPrism tunes nothing for its baselines

__all__ = ["NAME", "GRID", "Hyper", "classifier_features", "match_clusters", "cosine_matrix", "run"]


@dataclass(frozen=True)
class Hyper:
    n_clusters: int = 5             # C: FedPrism's K (Sec. 4.5); the paper gives none
    recluster: str = "every_round"  # 'every_round' (FedPrism) or 'once' (original FedClust)
    n_init: int = 10                # K-Means restarts

    def __post_init__(self):
        check_int(self.n_clusters, "n_clusters", 1)
        check_choice(self.recluster, "recluster", ("every_round", "once"))
        check_int(self.n_init, "n_init", 1)


def classifier_features(head: State) -> np.ndarray:
    """The clients' classifier layers flattened and L2-normalised, (M, D) float64.

    ``head``: the classifier's tensors only (e.g. ``"4.weight"`` (M, C, D'), ``"4.bias"`` (M, C)),
    concatenated in the dict's order. A zero row stays zero.
    """
    if not isinstance(head, dict) or not head:
        fail("head", "a non-empty stacked state of the classifier's tensors", head)
    flat = torch.cat([v.reshape(len(v), -1).double() for v in head.values()], dim=1)
    return to_host(flat / flat.norm(dim=1, keepdim=True).clamp_min(1e-12))


def cosine_matrix(a, b) -> np.ndarray:
    """Cosine similarities (len(a), len(b)) of the rows of two feature matrices (zero rows: 0)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return a @ b.T


def match_clusters(new_centroids, old_centroids) -> np.ndarray:
    """Identity of each new cluster: the Hungarian matching on 1 − cos(new, old).

    ``new_centroids`` (C', D); ``old_centroids`` (C_old, D), or None / 0 rows before the first
    clustering. Returns (C',) int64: new row r takes old id ``mapping[r]``; with C' > C_old the
    unmatched new rows get fresh ids C_old, C_old + 1, … in row order (the first clustering:
    0 … C'−1, K-Means's own labels).
    """
    new = np.asarray(new_centroids, dtype=np.float64)
    if new.ndim != 2 or len(new) == 0:
        fail("new_centroids", "a (C', D) matrix with C' ≥ 1", new_centroids)
    old = np.zeros((0, new.shape[1])) if old_centroids is None else np.asarray(old_centroids, dtype=np.float64)
    if old.ndim != 2 or old.shape[1] != new.shape[1]:
        fail("old_centroids", f"a (C, {new.shape[1]}) matrix like new_centroids", old_centroids)
    mapping = np.full(len(new), -1, dtype=np.int64)
    if len(old):
        from scipy.optimize import linear_sum_assignment  # imported here: importing the registry stays light

        rows, cols = linear_sum_assignment(1.0 - cosine_matrix(new, old))
        mapping[rows] = cols
    free = np.flatnonzero(mapping < 0)
    mapping[free] = len(old) + np.arange(free.size)
    return mapping


def _kmeans(features: np.ndarray, c: int, rng: np.random.Generator, n_init: int) -> np.ndarray:
    """Labels (M,) of K-Means into min(c, M) clusters, renumbered 0 … (non-empty ones only)."""
    c = min(c, len(features))
    if c == 1:
        return np.zeros(len(features), dtype=np.int64)
    from sklearn.cluster import KMeans  # imported here: importing the registry stays light
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():  # identical rows: fewer distinct clusters than c, kept as found
        warnings.simplefilter("ignore", ConvergenceWarning)
        km = KMeans(n_clusters=c, n_init=n_init, random_state=int(rng.integers(0, 2**31 - 1))).fit(features)
    return np.unique(km.labels_, return_inverse=True)[1].astype(np.int64)


def run(ctx: Context, hp: Hyper) -> Outcome:
    """FedClust over ``ctx.cfg.rounds`` rounds; C cluster models and the global one (row C)."""
    c = hp.n_clusters
    everyone = np.arange(ctx.n_clients)
    prefix = head_prefix(ctx.model)
    init = ctx.init_state()
    models = {k: v.unsqueeze(0).expand(c + 1, *v.shape).clone() for k, v in init.items()}

    def step(t: int, state: dict) -> dict:  # one round; everything FedClust carries is in `state`
        models, centroids, cluster = state["models"], state["centroids"], state["cluster"]
        clients = sample_clients(state["sel_rng"], everyone, ctx.cfg.fraction)
        res = ctx.train(take(models, np.where(cluster[clients] >= 0, cluster[clients], c)), clients, t)
        n = to_host(res.n_samples, np.float64)
        feats = classifier_features({k: v for k, v in res.params.items() if k.startswith(prefix)})
        if hp.recluster == "every_round" or t == 0:
            labels = _kmeans(feats, c, state["km_rng"], hp.n_init)
            group_centroids = np.stack([feats[labels == g].mean(0) for g in range(labels.max() + 1)])
            ids = match_clusters(group_centroids, centroids if len(centroids) else None)[labels]
        else:  # 'once': fixed clusters; a newcomer joins the most similar centroid
            ids = cluster[clients].copy()
            new = ids < 0
            if new.any():
                ids[new] = np.argmax(cosine_matrix(feats[new], centroids), axis=1)
        cluster[clients] = ids
        formed = max(len(centroids), int(ids.max()) + 1)
        centroids = np.vstack([centroids.reshape(-1, feats.shape[1]),
                               np.zeros((formed - len(centroids), feats.shape[1]))])
        for g in np.unique(ids):
            rows = np.flatnonzero(ids == g)
            centroids[g] = feats[rows].mean(0)
            avg = weighted_average(take(res.params, rows), n[rows])
            for k in models:
                models[k][int(g)] = avg[k]
        glob = weighted_average(res.params, n)
        for k in models:
            models[k][c] = glob[k]
        check_finite_models(models, t, "after aggregation", ctx.cfg)
        ctx.log_round(t, models, np.where(cluster >= 0, cluster, c))
        return {**state, "models": models, "centroids": centroids, "cluster": cluster,
                "selected": [*state["selected"], clients.tolist()], "per_round": [*state["per_round"], ids.tolist()]}

    state = {"models": models, "centroids": np.zeros((0, 0)),  # (C_formed, D): each formed cluster's latest centroid
             "cluster": np.full(ctx.n_clients, -1, dtype=np.int64),
             "sel_rng": ctx.rng("selection/group0"), "km_rng": ctx.rng("fedclust/kmeans"),
             "selected": [], "per_round": []}
    state = run_rounds(ctx, range(ctx.cfg.rounds), state, step)
    models, cluster, selected, per_round = state["models"], state["cluster"], state["selected"], state["per_round"]
    assignment = np.where(cluster >= 0, cluster, c)
    info = {"n_clusters": c, "recluster": hp.recluster, "cluster_of_client": cluster.tolist(),
            "cluster_sizes": np.bincount(cluster[cluster >= 0], minlength=c).tolist(),
            "n_unclustered": int((cluster < 0).sum()), "selected": selected, "clusters": per_round}
    return Outcome(models, assignment, info)


INFO = MethodInfo(NAME, "FedClust", Hyper, run, grid=GRID,
                  resumable=True)
