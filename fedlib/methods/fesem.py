"""FeSEM — Federated Stochastic Expectation Maximization (Xie, Long, Liu, Jiang, Jiang & Zhang,
"Multi-center federated learning: clients clustering for better personalization", 2021 / WWW
2023); a baseline of pFedLIA ("we provided the correct k").

The server keeps K centre models c_1 … c_K, each client's cluster r(i) and each client's latest
trained model b_i. Each round t draws S_t, the m = max(1, ⌊q·N⌋) clients drawn uniformly from
the stream ``"selection/group0"`` (the same clients as FedAvg in every round).

Round 0 — the start, ``init``:

* ``"forgy"`` (the default; the paper's random centres as the authors' code draws them):
  1. the m clients of S_0 train from the seeded initial model w_0 = ``ctx.init_state()``,
     giving b_i (a client that has not trained yet keeps b_i = w_0);
  2. the K seeds are the first K of those m clients in a uniformly shuffled order
     (:func:`forgy_seeds`, stream ``"fesem/seeding"``; K ≤ m is required): the authors' code
     seeds its K-means with the first K entries of a shuffled client list;
  3. ``init_em_iterations`` (5) Lloyd iterations over the m models, each an E-step
     (:func:`assign_nearest`), the re-seeding of empty centres (:func:`reseed_empty`) and an
     M-step (:func:`update_centres`);
  4. each client outside S_0 gets a cluster drawn uniformly from the K (stream
     ``"fesem/unassigned"``): the authors' code holds a random vector for a client that has
     not trained, so its first cluster is arbitrary; the E-step after its first training
     moves it to its nearest centre.
* ``"clients"`` (the workbook's earlier start, a labelled option; every FeSEM record committed
  before ``init`` existed ran it — :attr:`INFO.recorded_defaults`):
  1. every client i = 1 … N trains from w_0 (one round of full participation, about 1/q
     rounds of compute; S_0 is still drawn, so that later rounds select FedAvg's clients);
  2. K-means on the N models: K seeds by k-means++ (:func:`kmeans_pp`, stream
     ``"fesem/seeding"``), then ``init_em_iterations`` (5) Lloyd iterations as above over all
     N models. This recovers planted clusters nearly exactly from round 0 on: a stronger start
     than the paper's or the authors' code's (the suspected cause of FeSEM's 99.15 % against
     the paper's 97.97 % on pFedLIA's pathological FMNIST; issue 57).

Rounds t ≥ 1:

1. every i ∈ S_t trains locally from its centre c_{r(i)} (one engine call); b_i ← the result;
2. E-step: r(i) = argmin_k ‖b_i − c_k‖₂ over every centre k = 1 … K, for i ∈ S_t (trainable
   weights flattened, float64 distances, ties to the lowest index). This is the paper's
   E-step: the distance of the client's local model W_i — the model its last local training
   produced — to every centre (Algorithm 1: E-step, M-step, then local updates from the
   centres; under the paper's full participation, "E-step on the models of the previous
   local update" and "E-step right after the local update" are the same sequence). A client
   that trained from c_{r(i)} is compared with all K centres and moves when another is
   nearer (tests/test_fesem.py); it tends to stay, because it started from c_{r(i)};
3. M-step: c_k ← Σ_{i ∈ S_t: r(i)=k} a_i b_i / Σ a_i over the round's clients, a_i = 1
   (``weighting="plain"``: the paper's W̃^(k) = Σ_i r_i^(k) W_i / Σ_i r_i^(k), the authors'
   ``KmeanModel`` — segment sum / count — and FlexCFL's FeSEM, aggregation ``'avg'``) or
   a_i = n_i (``"samples"``: FedAvg's); a centre with no member this round keeps its weights;
4. steps 2–3 are repeated ``em_iterations`` (1) times on the round's models;
5. re-clustering, after rounds t with (t + 1) mod ``recluster_every`` = 0 except the last
   (:func:`reclusters`; the authors' ``update-center-every`` = 10 and their test
   ``(k + 1) % update_head_every == 0 and k != num_rounds − 1``), of the clients F trained since
   the previous re-clustering (round 0 excluded): one K-means iteration on their latest models,
   the centroid of cluster k the plain mean of its members' b_i in F (a cluster without one:
   c_k), r(i) = argmin_k ‖b_i − centroid_k‖₂ for i ∈ F, then empty centres re-seeded
   (:func:`reseed_empty`: the centre becomes the model b_i of the client of F farthest from its
   centroid, among clusters of ≥ 2 members; members outside F count). The centre models stay as
   trained.

The grouping keeps its start (issue 69; faithful to the published rule, and the authors' code
has the same property): a client trains from its own centre, so its distance to that centre is
only its update, while its distance to any other centre adds the gap between the centres. In the
committed pFedLIA Table I records with the paper's start (seeds 0–2, pathological) the clients
kept their cluster in nearly every re-assignment, and the final grouping is the random start's
(the report and notebook 10 render the stay rates from the records). ``info['stay']`` counts it
in every run, [kept, re-assigned]: ``e_step`` — every E-step of rounds t ≥ 1 against the cluster
the client trained from; ``window`` — those whose previous E-step (round ≥ 1) lies in the same
re-clustering window (what a record's ``selected``/``choices``/``reclustered`` replay, so older
records have it too); ``recluster`` — the re-clusterings' clients against their cluster before.
``info['stay_rate']`` is ``window``'s share (None when empty).

``estep='update_cosine'`` (a labelled variant, not the paper's rule; issue 69): the E-step
clusters update directions instead of distances. In rounds t ≥ 1, ΔW_i = b_i − c_{r(i)} (the
client's trained model minus the centre it started from; kept per client, its latest);
r(i) = argmax_k cos(ΔW_i, m_k) for i ∈ S_t, m_k the mean latest update of cluster k's members
(every client with an update; ``em_iterations`` spherical K-means steps, :func:`assign_by_update`),
then the paper's M-step. Its re-clustering is spherical K-means from scratch on every client's
latest update (farthest-first seeds, 10 iterations, :func:`recluster_by_update`), each group
named after the current cluster it overlaps most (a one-to-one matching), so that a start that
merged two planted clusters is repaired; the centre models stay as trained. On 20 digits
clients in 5 planted clusters (tests/test_fesem.py) it recovers them (ARI 1.0) where the
paper's E-step keeps its start (ARI < 0.6).

A centre is empty when no client is nearest to it. Two identical centres are duplicates: the
tie rule sends every client to the lower index, so the other is empty and re-seeded too.

What the start changes: Forgy from the ~q·N clients trained in round 0 can leave a planted
cluster without a centre (with 5 planted clusters of 10 among m = 50 clients, 5 uniform draws
hit every cluster with probability 10⁵ / C(50, 5) ≈ 5 %), and the clients then train from
another cluster's centre; the Lloyd iterations and the re-seeding of empty centres repair part
of that. The ``"clients"`` start (k-means++, D² sampling, on all N models) picks seeds far from
the chosen ones and so finds every planted cluster: it was the workbook's default until issue 57
and is kept, labelled, for the records that ran it.

Departures from the paper and the authors' code (their ``fedsem.py`` / ``KmeanModel``):

- Start. The paper initialises the centres randomly. The authors' code keeps one point per
  client for its K-means, uniform random vectors until the client has trained, sets every
  centre model to the same initial model, and seeds its K-means with the first K points of a
  shuffled client list (Forgy), 5 iterations on the first clustering. Here (``"forgy"``): the
  first K of a shuffled list of round 0's trained clients, 5 Lloyd iterations on their models,
  and a uniformly drawn cluster for each client not trained yet (its random vector's arbitrary
  cluster). ``"clients"`` (labelled option): round 0 trains all N clients and seeds by
  k-means++.
- Empty clusters. The authors' code re-initialises its whole K-means (Forgy, 5 iterations) at
  the next re-clustering when a cluster came out empty, which also scrambles the labels against
  the centre models; here only the empty centre is re-seeded, by the farthest-point rule
  scikit-learn's K-means also uses.
- Re-clustering. The authors' K-means runs on one layer of every client's latest model (a
  random vector for a client that never trained), with its own centroids apart from the centre
  models, one Lloyd iteration per re-clustering from the previous centroids. Here it uses all
  trainable weights (BatchNorm statistics stay out of the E-step but are averaged in the
  M-step), centroids recomputed from the members' latest models, and only the clients trained
  since the previous re-clustering (the others keep their cluster): a model trained many rounds
  ago is compared with centroids that have moved on since. On a digits federation with 5
  planted clusters that round 0 had recovered exactly, re-clustering every client misassigned
  such stale clients on most seeds, the window on fewer; neither repairs an exact start.
- Between re-clusterings the authors' code only aggregates each cluster's clients (the M-step);
  here, as in the paper's Algorithm 1 and FlexCFL, the E-step and M-step also run on the round's
  models every round (a client trained from its centre stays nearest it, so this E-step rarely
  moves anyone: memberships change at the re-clusterings).
- The protocol's optimiser replaces plain SGD; the paper's optional distance regulariser in the
  local objective is not used (its experiments and the authors' trainer train from the centre
  without it). FL-bench (pFedLIA's code base) has no FeSEM.

Which committed records ran which start (:attr:`INFO` ``recorded_defaults``: a spec without
``init`` ran ``'clients'`` and is read so by :func:`fedlib.records.with_recorded_defaults`):
``benchmarks/records/pfedlia/table1`` (FeSEM's GPU runs, pFedLIA Table I) and the seed-0 FeSEM
records of ``benchmarks/records/cross_paper`` written before issue 57 ran ``'clients'``, as do
that folder's pathological seeds 1–2 with ``init: clients`` in their spec; the cross-paper
records with ``init: forgy`` (seven partitions, seed 0; pathological seeds 1–2) ran the paper's
start. The report reads the pFedLIA rows as "FeSEM's all-clients start" until GPU runs with
the paper's start exist.

Memory: the latest model of every client is kept (N models, as FedFomo keeps its personal
models); distances are computed in float64 a block of rows at a time.

Evaluation: every client predicts with its cluster's centre (every client has a cluster from
round 0 on). ``assignment`` is r at the end.

Defaults and their sources: ``n_clusters`` 5 (pFedLIA's planted clusters; pFedLIA gives FeSEM
the correct k); ``em_iterations`` 1 (the authors' ``KmeanModel.num_iter = 1``);
``init_em_iterations`` 5 (its first clustering); ``recluster_every`` 10 (the authors'
``update-center-every``; 0 never re-clusters); ``weighting="plain"`` (paper, authors' code,
FlexCFL); ``estep="distance"`` (the paper's).

``info``: ``selected`` and ``choices`` per round (the clients that trained — S_0, or all N in
round 0 under ``"clients"`` — and their E-step clusters), ``init``, ``seeds`` (the clients whose
round-0 models seeded the centres, in the order drawn),
``reclustered`` (the rounds after which a re-clustering ran, counted from 1 like the history's
``round``), ``reseeded`` ([round, centre, client] per re-seeding; round 1 is round 0's K-means),
``cluster_of_client`` / ``assignment`` (the final cluster of every client, for
:func:`fedlib.evaluation.cluster_recovery`), ``cluster_sizes`` (K,), ``estep``, ``stay`` and
``stay_rate`` (above).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..engine import broadcast, flatten_params
from ..engine.host import to_host
from ..validation import check_choice, check_int, fail
from .base import Context, Outcome, State, check_finite_models, per_cluster_average, sample_clients, take
from .contract import MethodInfo

NAME = "fesem"
GRID = {}  # pFedLIA gives FeSEM the planted number of clusters; no search

INITS = ("forgy", "clients")  # the paper's random start (the authors' Forgy) and the workbook's earlier one
ESTEPS = ("distance", "update_cosine")  # the paper's E-step and the labelled update-direction variant (issue 69)

__all__ = ["NAME", "GRID", "INITS", "Hyper", "squared_distances", "assign_nearest", "update_centres", "kmeans_pp",
           "forgy_seeds",
           "reseed_empty", "reclusters", "ESTEPS", "assign_by_update", "recluster_by_update",
           "stay_rate", "run"]

_ROWS = 16  # rows of the (M, P) weights converted to float64 at a time


@dataclass(frozen=True)
class Hyper:
    n_clusters: int = 5  # K: pFedLIA's planted clusters ("we provided the correct k")
    em_iterations: int = 1  # E/M iterations per round: the authors' KmeanModel.num_iter
    init_em_iterations: int = 5  # Lloyd iterations of round 0's K-means (authors' code: 5)
    init: str = "forgy"  # 'forgy' (paper: random centres, the authors' shuffled first K) or 'clients' (old start)
    recluster_every: int = 10  # E-step over every client's latest model every this many rounds (0: never)
    weighting: str = "plain"  # M-step: "plain" mean (paper, authors' code) or "samples" (FedAvg)
    estep: str = "distance"  # 'distance' (paper: ‖b_i − c_k‖) or 'update_cosine' (labelled variant, issue 69)

    def __post_init__(self):
        check_int(self.n_clusters, "n_clusters", 1)
        check_int(self.em_iterations, "em_iterations", 1)
        check_int(self.init_em_iterations, "init_em_iterations", 1)
        check_choice(self.init, "init", INITS)
        check_int(self.recluster_every, "recluster_every", 0)
        check_choice(self.weighting, "weighting", ("plain", "samples"))
        check_choice(self.estep, "estep", ESTEPS)


def _matrix(x, name: str) -> torch.Tensor:
    """A finite 2-D tensor (numpy input: float64; a torch input keeps its dtype and device)."""
    if torch.is_tensor(x):
        t = x.detach()
        if not t.is_floating_point():
            t = t.to(torch.float64)
    else:
        try:
            t = torch.as_tensor(np.asarray(x, dtype=np.float64))
        except (TypeError, ValueError):
            fail(name, "a 2-D array of finite numbers", x)
    if t.ndim != 2 or not bool(torch.isfinite(t).all()):
        fail(name, "a 2-D array of finite numbers", x)
    return t


def squared_distances(weights, centres) -> np.ndarray:
    """‖w_i − c_k‖₂² for every model and centre.

    Parameters
    ----------
    weights : array-like or Tensor, shape (M, P)
        The clients' flattened models.
    centres : array-like or Tensor, shape (K, P)
        The flattened centres, K ≥ 1.

    Returns
    -------
    ndarray, shape (M, K), float64 — computed in float64, a block of rows at a time (memory
    about 16·P·8 bytes beyond the inputs).
    """
    w = _matrix(weights, "weights")
    c = _matrix(centres, "centres")
    if c.shape[0] == 0 or c.shape[1] != w.shape[1]:
        fail("centres", f"a (K, {w.shape[1]}) array with K ≥ 1 (as many columns as weights)", centres)
    c = c.to(w.device, torch.float64)
    out = torch.empty(w.shape[0], c.shape[0], dtype=torch.float64, device=w.device)
    for lo in range(0, w.shape[0], _ROWS):
        block = w[lo:lo + _ROWS].to(torch.float64)
        for k in range(c.shape[0]):
            out[lo:lo + _ROWS, k] = ((block - c[k]) ** 2).sum(1)
    return to_host(out, np.float64)


def assign_nearest(weights, centres) -> np.ndarray:
    """FeSEM's E-step: r_i = argmin_k ‖w_i − c_k‖₂.

    Parameters
    ----------
    weights : array-like or Tensor, shape (M, P)
    centres : array-like or Tensor, shape (K, P), K ≥ 1

    Returns
    -------
    ndarray, shape (M,), int64 — ties go to the lowest centre index (float64 distances,
    :func:`squared_distances`).
    """
    return np.argmin(squared_distances(weights, centres), axis=1).astype(np.int64)


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / torch.linalg.vector_norm(x, dim=1, keepdim=True).clamp_min(1e-300)


def assign_by_update(updates, assignment, k: int, iterations: int = 1) -> np.ndarray:
    """The ``'update_cosine'`` E-step: spherical K-means of update directions from the current
    clusters. Each iteration: m_k = the plain mean of the updates ΔW_i of the rows in cluster k (a
    cluster without a row is no candidate), then r_i = argmax_k cos(ΔW_i, m_k) (ties to the lowest
    index; a zero update or mean has cosine 0).

    Parameters
    ----------
    updates : array-like or Tensor, shape (M, P) — ΔW_i = b_i − the centre client i trained from.
    assignment : int array (M,) — the rows' current clusters, in [0, k).
    k : int ≥ 1 — the number of clusters.
    iterations : int ≥ 1

    Returns
    -------
    ndarray, shape (M,), int64 — labels keep their centres: a cluster keeps its index.
    """
    u = _matrix(updates, "updates").to(torch.float64)
    check_int(k, "k", 1)
    check_int(iterations, "iterations", 1)
    r = np.asarray(assignment)
    m = u.shape[0]
    if r.shape != (m,) or not np.issubdtype(r.dtype, np.integer) or (m and (r.min() < 0 or r.max() >= k)):
        fail("assignment", f"an integer array of shape ({m},) with values in [0, {k})", assignment)
    r = r.astype(np.int64)
    unit = _unit(u)
    for _ in range(iterations):
        means = _means(u, r, k, torch.zeros(k, u.shape[1], dtype=torch.float64, device=u.device))
        cos = to_host(unit @ _unit(means).T, np.float64)
        cos[:, np.bincount(r, minlength=k) == 0] = -np.inf
        r = np.argmax(cos, axis=1).astype(np.int64)
    return r


def recluster_by_update(updates, assignment, k: int, iterations: int = 10) -> np.ndarray:
    """The ``'update_cosine'`` re-clustering: spherical K-means of the update directions from
    scratch, its groups then given the current clusters' labels. Seeds: row 0, then each next
    the row of the largest 1 − cos to its nearest seed (farthest first; min(k, M) seeds, ties to
    the lowest row); ``iterations`` Lloyd steps (:func:`assign_by_update`); each group takes the
    label of the current cluster it shares most rows with (a one-to-one matching maximising the
    total overlap, ``scipy.optimize.linear_sum_assignment``), so a centre keeps the clients it
    trained.

    Parameters
    ----------
    updates : array-like or Tensor, shape (M, P), M ≥ 1
    assignment : int array (M,) — the rows' current clusters, in [0, k).
    k : int ≥ 1
    iterations : int ≥ 1

    Returns
    -------
    ndarray, shape (M,), int64, values in [0, k).
    """
    from scipy.optimize import linear_sum_assignment  # imported here: importing the registry stays light

    u = _matrix(updates, "updates").to(torch.float64)
    r = np.asarray(assignment)
    if u.shape[0] == 0 or r.shape != (u.shape[0],):
        fail("updates", f"an (M, P) array with M ≥ 1 rows, one per entry of assignment {r.shape}", updates)
    unit = _unit(u)
    cos = to_host(unit @ unit.T, np.float64)
    seeds = [0]
    for _ in range(1, min(k, len(cos))):
        seeds.append(int(np.argmax(1.0 - cos[:, seeds].max(1))))
    groups = assign_by_update(u, np.argmax(cos[:, seeds], axis=1).astype(np.int64), k, iterations)
    overlap = np.zeros((k, k))
    np.add.at(overlap, (groups, np.asarray(r, dtype=np.int64)), 1.0)
    rows, cols = linear_sum_assignment(-overlap)
    label = np.empty(k, dtype=np.int64)
    label[rows] = cols
    return label[groups]


def update_centres(centres: State, models: State, assignment, weights=None) -> State:
    """FeSEM's M-step: c_k ← Σ_{i: r_i = k} a_i w_i / Σ_{i: r_i = k} a_i.

    Parameters
    ----------
    centres : State (K, ...) — the current centres.
    models : State (M, ...) — the clients' models.
    assignment : int array (M,) — each model's centre, in [0, K).
    weights : array-like (M,), optional — a_i ≥ 0 (None: 1 each, the paper's plain mean).

    Returns
    -------
    State (K, ...), new tensors: a centre with no member (or whose members weigh 0) is unchanged.
    """
    k = len(next(iter(centres.values())))
    m = len(next(iter(models.values())))
    r = np.asarray(assignment)
    if r.shape != (m,) or not np.issubdtype(r.dtype, np.integer) or (r.size and (r.min() < 0 or r.max() >= k)):
        fail("assignment", f"an integer array of shape ({m},) with values in [0, {k})", assignment)
    a = np.ones(m) if weights is None else np.asarray(weights, dtype=np.float64)
    if a.shape != (m,) or not np.isfinite(a).all() or (a < 0).any():
        fail("weights", f"{m} finite non-negative numbers", weights)
    return per_cluster_average(centres, models, r, a)


def kmeans_pp(weights, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding (Arthur & Vassilvitskii, 2007): the first seed uniform over the M
    rows, each next one drawn with probability D(i)² / Σ_j D(j)², D(i) the distance of row i to
    its nearest seed so far (uniform over the rows not chosen yet when every D is 0).

    Parameters
    ----------
    weights : array-like or Tensor, shape (M, P)
    k : int, 1 ≤ k ≤ M
    rng : numpy Generator — every draw comes from it.

    Returns
    -------
    ndarray, shape (k,), int64 — the seed rows in the order drawn (distinct).
    """
    w = _matrix(weights, "weights")
    m = w.shape[0]
    check_int(k, "k", 1, m)
    seeds = [int(rng.integers(m))]
    d2 = squared_distances(w, w[seeds])[:, 0]
    for _ in range(1, k):
        d2[seeds] = 0.0
        total = d2.sum()
        if total > 0:
            nxt = int(rng.choice(m, p=d2 / total))
        else:
            nxt = int(rng.choice(np.setdiff1d(np.arange(m), seeds)))
        seeds.append(nxt)
        d2 = np.minimum(d2, squared_distances(w, w[[nxt]])[:, 0])
    return np.asarray(seeds, dtype=np.int64)


def forgy_seeds(candidates, k: int, rng: np.random.Generator) -> np.ndarray:
    """Forgy seeding as the authors' FeSEM code does it: the first ``k`` entries of a uniformly
    shuffled copy of ``candidates`` (``rng.permutation``).

    Parameters
    ----------
    candidates : int array (M,) — the rows (or clients) the seeds are drawn from, distinct.
    k : int, 1 ≤ k ≤ M
    rng : numpy Generator — the one draw (a permutation of M) comes from it.

    Returns
    -------
    ndarray, shape (k,), int64 — the seeds in the shuffled order.
    """
    c = np.asarray(candidates)
    if c.ndim != 1 or not np.issubdtype(c.dtype, np.integer) or len(np.unique(c)) != len(c):
        fail("candidates", "a 1-D array of distinct integers", candidates)
    if len(c) == 0:
        fail("candidates", "at least one candidate", candidates)
    check_int(k, "k", 1, len(c))
    return rng.permutation(c)[:k].astype(np.int64)


def reseed_empty(sq_dist, assignment, outside=None) -> tuple[np.ndarray, list]:
    """Re-seed the empty centres: for each centre k with no member, in increasing k, the row i
    farthest from its own centre (largest D(i, r_i) > 0, ties to the lowest row) among rows
    whose centre has ≥ 2 members moves to k (it will be centre k's model). A centre stays empty
    when no such row is left (fewer distinct models than centres).

    Parameters
    ----------
    sq_dist : array-like, shape (M, K) — squared distances of the rows to the centres
        (:func:`squared_distances`).
    assignment : int array (M,) — each row's centre, in [0, K).
    outside : int array (K,), optional — members each centre has besides these rows (clients
        not re-clustered now); they count towards both "empty" and "≥ 2 members" (None: 0).

    Returns
    -------
    (assignment (M,) int64 — a new array with the moves applied, moves — [(k, i), …] in order).
    """
    d = np.asarray(sq_dist, dtype=np.float64)
    if d.ndim != 2 or d.shape[1] == 0 or not np.isfinite(d).all() or (d < 0).any():
        fail("sq_dist", "an (M, K) array of finite non-negative squared distances, K ≥ 1", sq_dist)
    m, k = d.shape
    r = np.array(assignment, dtype=np.int64, copy=True)
    if r.shape != (m,) or (m and (r.min() < 0 or r.max() >= k)):
        fail("assignment", f"an integer array of shape ({m},) with values in [0, {k})", assignment)
    extra = np.zeros(k, dtype=np.int64) if outside is None else np.asarray(outside)
    if extra.shape != (k,) or not np.issubdtype(extra.dtype, np.integer) or (extra < 0).any():
        fail("outside", f"{k} non-negative member counts (one per centre)", outside)
    own = d[np.arange(m), r].copy()
    counts = np.bincount(r, minlength=k) + extra
    moves = []
    for j in np.flatnonzero(counts == 0):
        donor = (counts[r] >= 2) & (own > 0)
        if not donor.any():
            break
        i = int(np.flatnonzero(donor)[np.argmax(own[donor])])
        counts[r[i]] -= 1
        counts[j] += 1
        r[i], own[i] = j, 0.0
        moves.append((int(j), i))
    return r, moves


def reclusters(t: int, rounds: int, every: int) -> bool:
    """Whether the re-clustering runs after round t (0-based) of ``rounds``: (t + 1) a multiple
    of ``every`` (0: never), and t not the last round (no training would use it)."""
    return every > 0 and (t + 1) % every == 0 and t != rounds - 1


def _set_rows(dst: State, rows, src: State) -> None:
    """dst[name][rows] ← src[name] (in place), rows (M,) and src (M, ...)."""
    idx = torch.as_tensor(np.asarray(rows), dtype=torch.long)
    for name, value in dst.items():
        value[idx.to(value.device)] = src[name].to(value.dtype)


def _reseeded(centres: State, models: State, sq_dist: np.ndarray):
    """(centres, choice, moves): the E-step of ``models`` (``sq_dist`` (M, K) to ``centres``)
    after re-seeding the empty centres; a re-seeded centre becomes its new member's model."""
    choice, moves = reseed_empty(sq_dist, np.argmin(sq_dist, axis=1).astype(np.int64))
    if moves:
        centres = {n: v.clone() for n, v in centres.items()}
        _set_rows(centres, [j for j, _ in moves], take(models, [i for _, i in moves]))
    return centres, choice, moves


def _em(centres: State, trained: State, flat: torch.Tensor, names, weights, iterations: int):
    """``iterations`` E/M steps on the round's trained models; (centres, last E-step)."""
    for _ in range(iterations):
        choice = assign_nearest(flat, flatten_params(centres, names))
        centres = update_centres(centres, trained, choice, weights)
    return centres, choice


def _initial_kmeans(seeds: np.ndarray, bank: State, flat: torch.Tensor, names, weights, hp: Hyper):
    """Round 0's K-means on the round's models ``bank`` (M, ...) from the seed rows ``seeds``:
    (centres, choice (M,), moves [(centre, row)])."""
    centres = take(bank, seeds)
    moves = []
    for _ in range(hp.init_em_iterations):
        centres, choice, moved = _reseeded(centres, bank, squared_distances(flat, flatten_params(centres, names)))
        moves += moved
        centres = update_centres(centres, bank, choice, weights)
    return centres, choice, moves


def _means(flat: torch.Tensor, labels: np.ndarray, k: int, empty: torch.Tensor) -> torch.Tensor:
    """(K, P) float64: the plain mean of the rows of ``flat`` with each label; ``empty``'s row
    (K, P) where a label has no row. Summed a block of rows at a time."""
    total = torch.zeros(k, flat.shape[1], dtype=torch.float64, device=flat.device)
    idx = torch.as_tensor(labels, dtype=torch.long, device=flat.device)
    for lo in range(0, flat.shape[0], _ROWS):
        total.index_add_(0, idx[lo:lo + _ROWS], flat[lo:lo + _ROWS].to(torch.float64))
    count = np.bincount(labels, minlength=k)
    out = total / torch.as_tensor(np.maximum(count, 1), dtype=torch.float64, device=flat.device)[:, None]
    none = torch.as_tensor(count == 0, device=flat.device)
    return torch.where(none[:, None], empty.to(torch.float64), out)


def _recluster(centres: State, bank: State, names, cluster: np.ndarray, fresh: np.ndarray):
    """The re-clustering of the clients ``fresh`` (those trained since the last one): K-means
    on their latest models, the centroids the means of each cluster's fresh models (a cluster
    without one: its centre), one E-step with the empty centres re-seeded (the other clients'
    memberships count). (centres, cluster, moves [(centre, client)]): a re-seeded centre
    becomes its new member's model; ``cluster`` is a new array."""
    k = len(next(iter(centres.values())))
    models = take(bank, fresh)
    flat = flatten_params(models, names)
    centroids = _means(flat, cluster[fresh], k, flatten_params(centres, names))
    d = squared_distances(flat, centroids)
    outside = np.bincount(np.delete(cluster, fresh), minlength=k)
    choice, moves = reseed_empty(d, np.argmin(d, axis=1).astype(np.int64), outside)
    if moves:
        centres = {n: v.clone() for n, v in centres.items()}
        _set_rows(centres, [j for j, _ in moves], take(models, [i for _, i in moves]))
    cluster = cluster.copy()
    cluster[fresh] = choice
    return centres, cluster, [(j, int(fresh[i])) for j, i in moves]


def _count(stay: dict, key: str, kept) -> None:
    kept = np.asarray(kept, dtype=bool)
    stay[key] = [stay[key][0] + int(kept.sum()), stay[key][1] + int(kept.size)]


def stay_rate(counts) -> float | None:
    """kept / re-assigned of a [kept, re-assigned] pair (``info['stay']``); None when nothing was."""
    kept, total = counts
    return kept / total if total else None


def _logged(ctx: Context, t: int) -> bool:
    return (t + 1) % ctx.cfg.eval_every == 0 or t == ctx.cfg.rounds - 1


def run(ctx: Context, hp: Hyper) -> Outcome:
    """FeSEM over ``ctx.cfg.rounds`` rounds; the K centres, each client on its cluster's one."""
    k, n = hp.n_clusters, ctx.n_clients
    if k > n:
        fail("n_clusters", f"at most the number of clients ({n}): the centres are seeded from their models", k)
    everyone = np.arange(n)
    names = [name for name, _ in ctx.model.named_parameters()]
    rng = ctx.rng("selection/group0")
    selected, choices, reclustered, reseeded = [], [], [], []
    last = np.zeros(n, dtype=np.int64)  # the round each client last trained
    last_e = np.full(n, -1, dtype=np.int64)  # the round (≥ 1) of each client's last E-step
    stay = {"e_step": [0, 0], "window": [0, 0], "recluster": [0, 0]}  # [kept, re-assigned]
    updates = None  # 'update_cosine': each client's latest update ΔW_i (N, P), float64
    for t in range(ctx.cfg.rounds):
        clients = sample_clients(rng, everyone, ctx.cfg.fraction)  # round 0 too: FedAvg's stream
        if t == 0 and hp.init == "clients":  # every client from w_0, then K-means++ on all N models
            clients = everyone
            res = ctx.train(broadcast(ctx.init_state(), n, copy=False), clients, t)
            bank = res.params  # b_i: every client's latest model, (N, ...)
            weights = None if hp.weighting == "plain" else to_host(res.n_samples, np.float64)
            flat = flatten_params(bank, names)
            seeds = kmeans_pp(flat, k, ctx.rng("fesem/seeding"))
            centres, choice, moves = _initial_kmeans(seeds, bank, flat, names, weights, hp)
            cluster = choice.copy()
        elif t == 0:  # the paper's start: S_0 from w_0, Forgy seeds among them, K-means on their models
            if k > len(clients):
                fail("n_clusters", f"at most the {len(clients)} clients of round 0 for init='forgy' (the centres "
                                   "are seeded from their models); raise fraction or use init='clients'", k)
            res = ctx.train(broadcast(ctx.init_state(), len(clients), copy=False), clients, t)
            bank = broadcast(ctx.init_state(), n)  # b_i = w_0 until client i trains
            _set_rows(bank, clients, res.params)
            weights = None if hp.weighting == "plain" else to_host(res.n_samples, np.float64)
            rows = forgy_seeds(np.arange(len(clients)), k, ctx.rng("fesem/seeding"))
            seeds = clients[rows]
            centres, choice, moved = _initial_kmeans(rows, res.params, flatten_params(res.params, names), names,
                                                     weights, hp)
            moves = [(j, int(clients[i])) for j, i in moved]  # rows of the round -> client ids
            cluster = ctx.rng("fesem/unassigned").integers(k, size=n).astype(np.int64)
            cluster[clients] = choice
        else:
            start = take(centres, cluster[clients])
            res = ctx.train(start, clients, t)
            _set_rows(bank, clients, res.params)
            last[clients] = t
            weights = None if hp.weighting == "plain" else to_host(res.n_samples, np.float64)
            before = cluster[clients].copy()
            if hp.estep == "update_cosine":  # cosine of ΔW_i to the clusters' mean updates, then the M-step
                delta = flatten_params(res.params, names).to(torch.float64) - flatten_params(start, names).to(
                    torch.float64)
                if updates is None:
                    updates = torch.zeros(n, delta.shape[1], dtype=delta.dtype, device=delta.device)
                updates[torch.as_tensor(clients, device=delta.device)] = delta
                known_u = np.union1d(np.flatnonzero(last_e >= 1), clients)  # every client with an update
                choice = assign_by_update(updates[torch.as_tensor(known_u, device=delta.device)], cluster[known_u], k,
                                          hp.em_iterations)[np.searchsorted(known_u, clients)]
                centres = update_centres(centres, res.params, choice, weights)
            else:
                centres, choice = _em(centres, res.params, flatten_params(res.params, names), names, weights,
                                      hp.em_iterations)
            known = (last_e[clients] >= 1) & (last_e[clients] >= (reclustered[-1] if reclustered else 0))
            _count(stay, "e_step", choice == before)
            _count(stay, "window", (choice == before)[known])
            last_e[clients] = t
            cluster[clients] = choice
            moves = []
        check_finite_models(centres, t, "after the M-step", ctx.cfg)
        selected.append(clients.tolist())
        choices.append(choice.tolist())
        if reclusters(t, ctx.cfg.rounds, hp.recluster_every):
            fresh = np.flatnonzero(last > (reclustered[-1] - 1 if reclustered else 0))
            if fresh.size and hp.estep == "update_cosine":  # spherical K-means from scratch on every latest update
                fresh = np.flatnonzero(last_e >= 1)
                before = cluster[fresh].copy()
                cluster[fresh] = recluster_by_update(updates[torch.as_tensor(fresh, device=updates.device)], before, k)
                _count(stay, "recluster", cluster[fresh] == before)
            elif fresh.size:
                before = cluster[fresh].copy()
                centres, cluster, moved = _recluster(centres, bank, names, cluster, fresh)
                _count(stay, "recluster", cluster[fresh] == before)
                moves += moved
            reclustered.append(t + 1)
        reseeded += [[t + 1, j, i] for j, i in moves]  # (centre, client id)
        if _logged(ctx, t):
            ctx.log_round(t, centres, cluster)
    info = {"n_clusters": k, "init": hp.init, "selected": selected, "choices": choices,
            "seeds": seeds.tolist(), "reclustered": reclustered, "reseeded": reseeded,
            "assignment": cluster.tolist(), "cluster_of_client": cluster.tolist(),
            "cluster_sizes": np.bincount(cluster, minlength=k).tolist(), "estep": hp.estep, "stay": stay,
            "stay_rate": stay_rate(stay["window"])}
    return Outcome(centres, cluster, info)


INFO = MethodInfo(NAME, "FeSEM", Hyper, run, grid=GRID,
                  recorded_defaults={"init": "clients",  # every FeSEM record before issue 57 ran the old start
                                     "estep": "distance"})  # and the paper's E-step (the key added in issue 69)
