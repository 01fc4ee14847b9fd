"""CAFA (Zhang, Wang, Li, Cardiff & Ranaweera): Clustering and Accuracy-based Federated
Aggregation — CBCC clusters the clients once, ABFA weighs each round's client models.

Stage 1, CBCC (Sec. III-A, Eqs. 1–8), once before training, on the clients' train splits:

1. v_i = (n_i,1/N_i, …, n_i,C/N_i), the normalised label histogram (Eqs. 1–2,
   :func:`class_distribution`);
2. for k = k_min … k_max (default 2 … K−1) K-means on the v_i and the mean silhouette s̄_k
   (Eqs. 3–4, :func:`silhouette_curve`); k = argmax_k s̄_k (Eq. 5, :func:`select_k`);
3. K-means with that k (Eq. 6); the cluster with the most clients is the IID cluster (Eq. 7,
   :func:`iid_cluster`); client i's CBCC weight is w_i^K = |C(i)| / K (Eq. 8,
   :func:`cbcc_weights`).

Stage 2, ABFA (Sec. III-B, Eqs. 9–10), every round: the m = max(1, ⌊q·K⌋) selected clients
train from the global model; each trained model W_i is evaluated on the validation data of
the selected clients (model sharing); A_i = Σ_j a_ij·S_j / Σ_j S_j, the accuracy on their
pooled validation data (Eq. 9, :func:`pooled_accuracy`), and w_i^A = A_i / Σ_j A_j (Eq. 10,
:func:`abfa_weights`).

Stage 3 (Eq. 11, Algorithm 1 lines 16–19): W = Σ_i w_i^K·w_i^A·W_i / Σ_j w_j^K·w_j^A over the
selected clients (:func:`combine_weights`).

Choices where the paper is silent or ambiguous (each a field of :class:`Hyper`):

* ``combine='product'`` is Eq. 11 and Algorithm 1 (line 17 multiplies); ``'sum'`` takes
  (ŵ^K + ŵ^A)/2 of the weights normalised over the selection (line 16) — an additive reading
  of "combines CBCC and ABFA". With the product the per-selection normalisation of line 16
  cancels (Eq. 11 renormalises), so it matters only for ``'sum'``.
* ``abfa_pool='selected'``: every selected client's model, IID cluster or not, is scored on
  the pooled validation data of all selected clients (Sec. III-B, Algorithm 1 line 13); the
  IID cluster acts only through its larger w^K. ``'iid'`` scores on the validation data of the
  selected clients in the IID cluster only (all selected when none is in it) — a reading in
  which the IID cluster is the reference distribution.
* Silhouette range k_min … k_max (paper: "e.g. 2 … n−1"); k_max is capped at the number of
  distinct histograms; a federation with fewer than 3 clients or fewer than 2 distinct
  histograms gets k = 1 (one cluster, every w^K = 1) instead of an sklearn error. Ties of
  s̄_k: the smallest k. K-means: sklearn's k-means++ with ``n_init`` (10) restarts and a
  random_state drawn from the run seed (stream ``"cbcc"``); silhouettes Euclidean, as Eq. 3.
* The reported k is the number of clusters K-means actually filled (distinct labels): with
  duplicate histograms K-means can leave a cluster empty, so ``labels.max() + 1`` would
  overcount the clusters and its gaps misname them.
* Ties of Eq. 7 (two largest clusters): the cluster whose centroid is nearest (Euclidean)
  to the federation's pooled label distribution — the most IID-looking one —, then the
  lowest cluster id.
* If every selected model has accuracy 0 (or the pool holds no validation sample) Eq. 10 is
  undefined: w^A is uniform that round.
* Selection: the same uniform draw as FedAvg/FedProx (stream ``"selection/group0"``), so
  the three methods see the same clients each round. Client sample counts do not enter
  Eq. 11 (no FedAvg n_i factor), as written.

The clustering as the authors' training code ran it (their ``ultils.py`` ``get_data_loaders_val``, called
by ``train.py``): ``KMeans(n_clusters=k, random_state=0)`` on the clients' normalised label
histograms with a k fixed on the command line, no silhouette search during training. Here
``Hyper(clustering='fixed', k_fixed=k)`` (K-means random_state 0, :func:`cbcc` with ``k=``);
the ``paper_code`` reproduction (:mod:`fedlib.reproduction`) runs it with k = 6
(:data:`AUTHORS_TRAIN_K`). The default, ``clustering='silhouette'``, is §III-A.2 as written. The
authors' cluster weight |C(i)|/K and the product with the accuracy weights are this module's.

The k search as the authors ran it for Tables II–III (their ``cluster_vis.py``): k over
2 … 19, the silhouette curve s̄_k averaged over repeated fresh partitions of the same kind
(:func:`mean_silhouette_curve`), k = its argmax, then K-means with that k on the partition
being classified, every K-means with random_state 0 — :func:`cbcc` with ``curve=`` the
averaged curve. :mod:`workbook.cafa_study` runs it (``k_search='authors'``).

Departures from the authors' public code (their repository, see README): their code weighs
client i by (|cluster(i)|/K_total)·acc_i/Σacc over the round's selection — the product rule
here; it also carries a FedProx-style proximal term that is never applied (here: none, as
the paper's Eqs. have none) and a cache of evaluation results that can go stale across
rounds (here every round's models are evaluated afresh). CIFAR-10/VGG-19 are the paper's
setting; the workbook's notebook 08 runs FMNIST as a stand-in.

A validation split is required (``RunSpec(val_fraction=0.2)``, the paper's 20 %): a
federation without validation data fails before training.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..engine import broadcast, weighted_average
from ..validation import check_choice, check_int, fail
from .base import Context, Outcome, check_finite_models, run_rounds, sample_clients
from .contract import MethodInfo

NAME = "cafa"
GRID = {}  # the paper tunes nothing
CLUSTERINGS = ("silhouette", "fixed")
"""CBCC's choice of k during training: §III-A.2's silhouette search, or the authors' training code's
fixed k (K-means random_state 0)."""
AUTHORS_TRAIN_K = 6
"""The k of the authors' training K-means (``--num_clusters``): their ``train.py`` reads
``default=6`` at its latest commit (issue 69); it was 8 until May 2024 and 5 briefly after
(``train_w_clientselection.py`` has 5); ``Hyper.k_fixed`` runs any of them."""

__all__ = ["NAME", "GRID", "CLUSTERINGS", "AUTHORS_TRAIN_K", "Hyper", "CBCC", "class_distribution", "silhouette_curve", "mean_silhouette_curve",
           "select_k", "kmeans_labels", "n_clusters", "iid_cluster", "cbcc_weights", "cbcc", "pooled_accuracy", "abfa_weights",
           "combine_weights", "needs_validation", "run"]


@dataclass(frozen=True)
class Hyper:
    combine: str = "product"   # Eq. 11 ('sum': mean of the normalised weights)
    abfa_pool: str = "selected"  # whose validation data scores the models (Eq. 9)
    k_min: int = 2             # silhouette range (Sec. III-A.2)
    k_max: int | None = None   # None: K − 1
    n_init: int = 10           # K-means restarts
    clustering: str = "silhouette"  # 'fixed': the authors' train.py, K-means with k_fixed, random_state 0
    k_fixed: int = AUTHORS_TRAIN_K  # k of clustering='fixed' (unused by 'silhouette')

    def __post_init__(self):
        check_choice(self.combine, "combine", ("product", "sum"))
        check_choice(self.abfa_pool, "abfa_pool", ("selected", "iid"))
        check_choice(self.clustering, "clustering", CLUSTERINGS)
        check_int(self.k_fixed, "k_fixed", 1)
        check_int(self.k_min, "k_min", 2)
        check_int(self.k_max, "k_max", self.k_min, optional=True)
        check_int(self.n_init, "n_init", 1)


@dataclass(frozen=True)
class CBCC:
    """CBCC's result for K clients.

    v : (K, C) class distributions; silhouettes : dict k -> s̄_k; k : the number of clusters
    K-means filled (:func:`n_clusters`; the chosen k unless a cluster stayed empty);
    labels : (K,) cluster of each client; iid_cluster : its id; weights : (K,) w_i^K.
    """

    v: np.ndarray
    silhouettes: dict
    k: int
    labels: np.ndarray
    iid_cluster: int
    weights: np.ndarray

    @property
    def iid_mask(self) -> np.ndarray:
        """(K,) bool: the clients CBCC calls IID."""
        return self.labels == self.iid_cluster


def class_distribution(counts) -> np.ndarray:
    """v_i = n_i,j / N_i (Eqs. 1–2).

    Parameters
    ----------
    counts : (K, C) non-negative label counts, every row with N_i > 0

    Returns
    -------
    (K, C) float64, rows summing to 1.
    """
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim != 2 or c.size == 0 or np.any(c < 0) or not np.all(np.isfinite(c)):
        fail("counts", "a (K, C) matrix of non-negative label counts", counts)
    n = c.sum(axis=1)
    if np.any(n <= 0):
        fail("counts", "a matrix whose every client (row) holds at least one sample",
             f"empty clients {np.flatnonzero(n <= 0).tolist()}")
    return c / n[:, None]


def kmeans_labels(v, k: int, random_state: int, n_init: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """K-means (Eq. 6) of the rows of ``v`` (K, C) into k clusters: labels (K,), centroids (k, C).

    With fewer distinct rows than k some clusters stay empty (their ids never occur in the
    labels); sklearn's warning about it is silenced — :func:`n_clusters` counts the clusters
    filled."""
    from sklearn.cluster import KMeans  # imported here: importing the registry stays light
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        km = KMeans(n_clusters=k, n_init=n_init, random_state=random_state).fit(v)
    return km.labels_.astype(np.int64), km.cluster_centers_


def n_clusters(labels) -> int:
    """The number of clusters holding a client: distinct ids in ``labels`` (K,) — not
    ``labels.max() + 1``, which counts an empty cluster whose id lies below the largest."""
    return int(np.unique(np.asarray(labels)).size)


def silhouette_curve(v, ks, random_state: int, n_init: int = 10) -> dict:
    """s̄_k (Eqs. 3–4): the mean Euclidean silhouette of K-means with k clusters, for k in ``ks``.

    Returns
    -------
    dict int k -> float s̄_k (in ``ks``'s order).
    """
    from sklearn.metrics import silhouette_score  # imported here: importing the registry stays light

    return {int(k): float(silhouette_score(v, kmeans_labels(v, int(k), random_state, n_init)[0]))
            for k in ks}


def mean_silhouette_curve(vs, ks, random_state: int, n_init: int = 10) -> dict:
    """s̄_k averaged over several federations (the authors' Tables II–III search): the mean over
    ``vs`` (a sequence of (K, C) class distributions, one per partition, the same K) of
    :func:`silhouette_curve`.

    Returns
    -------
    dict int k -> float, the mean s̄_k (in ``ks``'s order).
    """
    vs = list(vs)
    if not vs:
        fail("vs", "a non-empty sequence of (K, C) class distributions", vs)
    curves = [silhouette_curve(v, ks, random_state, n_init) for v in vs]
    return {k: float(np.mean([c[k] for c in curves])) for k in curves[0]}


def select_k(silhouettes: dict) -> int:
    """k_optimal = argmax_k s̄_k (Eq. 5); ties: the smallest k."""
    best = max(silhouettes.values())
    return min(k for k, s in silhouettes.items() if s == best)


def iid_cluster(labels, centroids, reference) -> int:
    """C_IID = argmax_j |C_j| (Eq. 7); ties: the centroid nearest ``reference`` (the pooled
    label distribution, (C,)), then the lowest id.

    labels : (K,) cluster ids 0..k−1; centroids : (k, C); reference : (C,)
    """
    sizes = np.bincount(np.asarray(labels), minlength=len(centroids))
    tied = np.flatnonzero(sizes == sizes.max())
    dist = np.linalg.norm(np.asarray(centroids)[tied] - np.asarray(reference)[None, :], axis=1)
    return int(tied[np.argmin(dist)])


def cbcc_weights(labels) -> np.ndarray:
    """w_i^K = |C(i)| / Σ_j |C_j| (Eq. 8): (K,) float64 from cluster ids (K,)."""
    labels = np.asarray(labels, dtype=np.int64)
    return np.bincount(labels)[labels] / labels.size


def cbcc(counts, random_state: int, k_min: int = 2, k_max: int | None = None, n_init: int = 10,
         curve: dict | None = None, k: int | None = None) -> CBCC:
    """Stage 1 on label counts (K, C): features, silhouette choice of k, K-means, IID cluster,
    weights (Eqs. 1–8). ``k_max`` None: K − 1 (both capped at the distinct histograms).

    ``k`` (1 ≤ k ≤ K): K-means with exactly this k, no silhouette search (the authors' training
    code, ``KMeans(n_clusters=k, random_state=0)``); the result's ``silhouettes`` is empty, and
    its k counts the clusters filled (fewer than ``k`` where histograms repeat). ``k`` and
    ``curve`` exclude each other.

    ``curve`` (dict k -> s̄_k, e.g. :func:`mean_silhouette_curve` over other partitions): take
    k = argmax of it instead of searching on ``counts`` (the authors' Tables II–III search);
    ``k_min``/``k_max`` are then unused and k is not capped (a k above the distinct histograms
    leaves clusters empty: the result's k counts those filled).
    """
    v = class_distribution(counts)
    n_clients = len(v)
    check_int(k_min, "k_min", 2)
    check_int(k_max, "k_max", k_min, optional=True)
    if k is not None:
        check_int(k, "k", 1, n_clients)
        if curve is not None:
            fail("curve", "None when k is given (a fixed k has no silhouette curve)", curve)
        labels, centroids = kmeans_labels(v, int(k), random_state, n_init)
        curve = {}
    elif curve is not None:
        if not isinstance(curve, dict) or not curve or not all(
                isinstance(k, (int, np.integer)) and 1 <= k <= n_clients for k in curve):
            fail("curve", f"a non-empty dict k -> mean silhouette with every k in [1, K = {n_clients}]", curve)
        curve = {int(k): float(s) for k, s in curve.items()}
        labels, centroids = kmeans_labels(v, select_k(curve), random_state, n_init)
    else:
        top = min(n_clients - 1 if k_max is None else k_max, len(np.unique(v, axis=0)))
        if top < k_min:
            labels, centroids, curve = np.zeros(n_clients, np.int64), v.mean(axis=0, keepdims=True), {}
        else:
            curve = silhouette_curve(v, range(k_min, top + 1), random_state, n_init)
            labels, centroids = kmeans_labels(v, select_k(curve), random_state, n_init)
    reference = np.asarray(counts, dtype=np.float64).sum(axis=0)
    iid = iid_cluster(labels, centroids, reference / reference.sum())
    return CBCC(v, curve, n_clusters(labels), labels, iid, cbcc_weights(labels))


def pooled_accuracy(correct, n) -> np.ndarray:
    """A_i = Σ_j a_ij·S_j / Σ_j S_j = Σ_j correct_ij / Σ_j S_j (Eq. 9).

    correct : (M, K') correct counts of model i on client j's validation split; n : (K',) S_j.
    Returns (M,) float64 (zeros when Σ S_j = 0).
    """
    correct = np.asarray(correct, dtype=np.float64)
    total = float(np.sum(n))
    return correct.sum(axis=1) / total if total > 0 else np.zeros(len(correct))


def abfa_weights(accuracy) -> np.ndarray:
    """w_i^A = A_i / Σ_j A_j (Eq. 10), (M,); uniform when every A_i is 0."""
    a = np.asarray(accuracy, dtype=np.float64)
    return a / a.sum() if a.sum() > 0 else np.full(a.size, 1.0 / a.size)


def combine_weights(w_k, w_a, combine: str = "product") -> np.ndarray:
    """The aggregation weights of Eq. 11, (M,) summing to 1.

    'product': w_i^K·w_i^A / Σ_j w_j^K·w_j^A (Eq. 11); 'sum': (ŵ_i^K + ŵ_i^A) / 2 with ŵ the
    weights normalised over the selection (Algorithm 1 line 16).
    """
    check_choice(combine, "combine", ("product", "sum"))
    w_k, w_a = np.asarray(w_k, dtype=np.float64), np.asarray(w_a, dtype=np.float64)
    if combine == "sum":
        return (w_k / w_k.sum() + w_a / w_a.sum()) / 2
    w = w_k * w_a
    return w / w.sum() if w.sum() > 0 else w_k / w_k.sum()


def needs_validation(hp: Hyper) -> bool:
    """Always: ABFA (Eqs. 9–10) scores every round's models on validation data
    (:meth:`fedlib.experiment.RunSpec.validate` refuses val_fraction = 0 before any work)."""
    return True


def _check_federation(ctx: Context, hp: Hyper) -> None:
    """The errors CAFA raises before any training."""
    if int(ctx.fed.n_val.sum()) == 0:
        fail("the federation's validation split", "non-empty for cafa (ABFA, Eqs. 9–10, scores the models on "
             "the selected clients' validation data): use val_fraction > 0, e.g. RunSpec(val_fraction=0.2)",
             "0 validation samples")
    if hp.k_max is not None and hp.k_max > ctx.n_clients - 1:
        fail("k_max", f"≤ K − 1 = {ctx.n_clients - 1} (silhouettes need k < K)", hp.k_max)
    if hp.clustering == "fixed" and hp.k_fixed > ctx.n_clients:
        fail("k_fixed", f"≤ K = {ctx.n_clients} (K-means cannot form more clusters than clients)", hp.k_fixed)


def run(ctx: Context, hp: Hyper) -> Outcome:
    _check_federation(ctx, hp)
    random_state = int(ctx.rng("cbcc").integers(0, 2**31 - 1))
    if hp.clustering == "fixed":  # the authors' train.py: KMeans(n_clusters=k, random_state=0)
        random_state = 0
        stage1 = cbcc(ctx.counts_train, random_state, n_init=hp.n_init, k=hp.k_fixed)
    else:
        stage1 = cbcc(ctx.counts_train, random_state, hp.k_min, hp.k_max, hp.n_init)
    everyone = np.arange(ctx.n_clients)
    assignment = np.zeros(ctx.n_clients, dtype=np.int64)

    def step(t: int, carried: tuple) -> tuple:  # one round; everything it carries is in `carried`
        model, rng, selected, weights = carried
        clients = sample_clients(rng, everyone, ctx.cfg.fraction)
        res = ctx.train(broadcast(model, len(clients), copy=False), clients, t)
        pool = clients
        if hp.abfa_pool == "iid" and stage1.iid_mask[clients].any():
            pool = clients[stage1.iid_mask[clients]]
        _, correct, n = ctx.loss_matrix(res.params, pool, split="val")
        w = combine_weights(stage1.weights[clients], abfa_weights(pooled_accuracy(correct, n)), hp.combine)
        model = weighted_average(res.params, w)
        check_finite_models(broadcast(model, 1), t, "after aggregation", ctx.cfg)
        ctx.log_round(t, broadcast(model, 1), assignment)
        return model, rng, [*selected, clients.tolist()], [*weights, [round(float(x), 6) for x in w]]

    # FedAvg's draw (selection/group0): the same clients as FedAvg / FedProx
    carried = (ctx.init_state(), ctx.rng("selection/group0"), [], [])
    model, _, selected, weights = run_rounds(ctx, range(ctx.cfg.rounds), carried, step)
    info = {"k": stage1.k, "silhouettes": {str(k): s for k, s in stage1.silhouettes.items()},
            "clusters": stage1.labels.tolist(), "cluster_sizes": np.bincount(stage1.labels).tolist(),
            "iid_cluster": stage1.iid_cluster, "iid_clients": np.flatnonzero(stage1.iid_mask).tolist(),
            "cbcc_weights": stage1.weights.tolist(), "selected": selected, "weights": weights,
            "kmeans_random_state": random_state, "clustering": hp.clustering}
    return Outcome(broadcast(model, 1), assignment, info)


INFO = MethodInfo(NAME, "CAFA", Hyper, run, grid=GRID, needs_validation=needs_validation, resumable=True)
