"""FedCLS (Li & Wu, 2022): client selection from grouped label information.

Once, before training, from the clients' train label counts n_kc (K, C):

1. each client's label vector v_k (:func:`label_vectors`);
2. Hamming distances d(i, j) = #{c : v_ic ≠ v_jc} (:func:`hamming_matrix`);
3. greedy leader grouping with threshold τ·C (:func:`leader_groups`): clients in index order
   join the first group whose leader (first member) is within d ≤ τ·C, else found a new
   group; a group's label vector is its leader's.

Each round, with m = max(1, ⌊q·K⌋) (:func:`select`): a uniformly random client's group comes
first; the other groups follow in farthest-first order over the groups' Hamming distances
(each next group maximises its minimum distance to the groups already ordered, ties at
random — :func:`farthest_first`), so that the round prefers groups with complementary labels;
the round is filled pass after pass over that order, one random not-yet-chosen member per
group per pass (:func:`fedlib.methods.base.round_robin`), until m distinct clients are
chosen. The server takes the sample-weighted FedAvg of their weights.

Variants (``Hyper.variant``):

* ``"psi"`` (default; what the PSI papers' code ran for Table III): v_k is the label-frequency
  vector n_kc / n_k and the element-wise comparison is exact, so two clients differ in class
  c unless both have exactly the same share of it (in practice: unless both lack it).
  τ = 0.1 (Table II), threshold 0.1·C.
* ``"original"`` (Li & Wu): v_k is the binary label-presence vector 1[n_kc > 0] (the paper's
  one-hot label information); same threshold τ·C.

* ``"psi_code"``: what the PSI papers' public code ran (reference-notes "What produced
  Table III"; the ``paper_code`` reproduction). The grouping is ``"psi"``'s; when it forms no
  group of two or more, clients 0 … ⌊0.2·K⌋−1 become one group (their fallback). Each round
  (:func:`select_code`): every client gets a *random* "loss" U(0, 100) (no model is
  evaluated); the ``clusters_per_round`` groups (their w = d/2 = 5) with the highest mean
  loss are taken, each contributing its z = ⌊d/w⌋ highest-loss members, topped up to d
  candidates from the other groups (drawn ∝ loss, spread over the taken groups); the
  highest-loss candidate of each taken group trains, and the round is filled to
  max(1, ⌊q·K⌋) clients by data share without replacement. The paper_code reproduction adds
  their plain mean aggregation and plain SGD (lr 0.001, batch 64, no shuffling).

The grouping procedure (greedy leaders), the first group and the farthest-first order are
this module's precise reading of "group by Hamming distance, prefer complementary labels".
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..validation import check_choice, check_int, check_number
from .base import AGGREGATIONS, Context, Outcome, cluster_means, global_model_rounds, round_robin, round_size
from .contract import MethodInfo

NAME = "fedcls"
GRID = {"tau": (0.1, 0.5, 0.95)}  # Clust-PSI-PFL Table II
VARIANTS = ("psi", "original", "psi_code")
FALLBACK_GROUP = 0.2  # "psi_code": with no group of ≥ 2, clients 0..⌊0.2·K⌋−1 form one


@dataclass(frozen=True)
class Hyper:
    tau: float = 0.1        # grouping threshold as a fraction of C (Table II)
    variant: str = "psi"    # "psi" (frequency vectors), "original" (binary), "psi_code" (the papers' code)
    aggregation: str = "samples"  # "samples" (n_k-weighted) or "uniform" (plain mean; the authors' code)
    d: int = 10                   # "psi_code": candidates per round (their d)
    clusters_per_round: int = 5   # "psi_code": groups taken per round (their w = d/2)

    def __post_init__(self):
        check_number(self.tau, "tau", 0)
        check_choice(self.variant, "variant", VARIANTS)
        check_choice(self.aggregation, "aggregation", AGGREGATIONS)
        check_int(self.d, "d", 1)
        check_int(self.clusters_per_round, "clusters_per_round", 1, self.d)


def label_vectors(counts, variant: str = "psi") -> np.ndarray:
    """Label vectors (K, C) from label counts (K, C): shares n_kc / n_k ("psi") or
    presence 1[n_kc > 0] ("original")."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 2 or np.any(counts < 0) or np.any(counts.sum(1) <= 0):
        raise ValueError("counts must be a (K, C) array of non-negative counts with positive row sums")
    if variant == "psi":
        return counts / counts.sum(1, keepdims=True)
    if variant == "original":
        return (counts > 0).astype(np.float64)
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


def hamming_matrix(v) -> np.ndarray:
    """d(i, j) = number of positions where rows i and j of ``v`` (K, C) differ → (K, K) int64."""
    v = np.asarray(v)
    return (v[:, None, :] != v[None, :, :]).sum(-1).astype(np.int64)


def leader_groups(dist, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Greedy leader grouping: client k (in index order) joins the first group whose leader
    is within ``dist[k, leader] ≤ threshold``, else leads a new group.

    ``dist`` (K, K). Returns (labels (K,) int64: group ids 0..G−1 in order of foundation, leaders
    (G,) int64: each group's first member).
    """
    dist = np.asarray(dist)
    labels = np.empty(len(dist), dtype=np.int64)
    leaders: list[int] = []
    for k in range(len(dist)):
        near = [g for g, lead in enumerate(leaders) if dist[k, lead] <= threshold]
        if near:
            labels[k] = near[0]
        else:
            labels[k] = len(leaders)
            leaders.append(k)
    return labels, np.asarray(leaders, dtype=np.int64)


def farthest_first(rng: np.random.Generator, dist, start: int) -> np.ndarray:
    """Order all G groups from ``start``: each next one maximises its minimum distance to
    those already ordered (ties broken uniformly at random).

    ``dist`` (G, G): symmetric group distances. Returns a permutation (G,) int64 beginning with ``start``.
    """
    dist = np.asarray(dist, dtype=np.float64)
    order = [int(start)]
    score = dist[start].copy()  # min distance to the ordered groups
    left = np.ones(len(dist), dtype=bool)
    left[start] = False
    while left.any():
        best = np.flatnonzero(left & (score == score[left].max()))
        g = int(rng.choice(best))
        order.append(g)
        left[g] = False
        score = np.minimum(score, dist[g])
    return np.asarray(order, dtype=np.int64)


def select(rng: np.random.Generator, labels, group_dist, m: int) -> np.ndarray:
    """One round's FedCLS selection: m distinct clients (m,) from groups ``labels`` (K,)
    and the groups' Hamming distances (G, G)."""
    labels = np.asarray(labels, dtype=np.int64)
    start = labels[rng.integers(labels.size)]
    order = farthest_first(rng, group_dist, start)
    shuffled = rng.permutation(labels.size)
    ranked = [shuffled[labels[shuffled] == g] for g in range(len(group_dist))]
    return round_robin(order, ranked, m)


# ----------------------------------------------------------------------------- the PSI papers' code
def code_groups(labels) -> np.ndarray:
    """The PSI papers' code's groups (K,) from leader groups ``labels`` (K,): unchanged when some
    group has ≥ 2 members; else clients 0..⌊0.2·K⌋−1 form group 0 and every other client is a
    singleton (ids 1, 2, … in client order)."""
    labels = np.asarray(labels, dtype=np.int64)
    k = labels.size
    if np.bincount(labels).max(initial=0) >= 2 or int(FALLBACK_GROUP * k) < 2:
        return labels
    first = int(FALLBACK_GROUP * k)
    return np.concatenate([np.zeros(first, np.int64), np.arange(1, k - first + 1)])


def select_code(rng: np.random.Generator, labels, n_train, d: int, w: int, m: int) -> np.ndarray:
    """One round of the PSI papers' FedCLS (module docstring, ``"psi_code"``).

    ``labels`` (K,): group ids 0..G−1; ``n_train`` (K,): train samples (the data-share fill); d, w,
    m: candidates, groups taken, clients per round. Returns (max(m, groups taken),) int64 distinct
    clients in selection order.
    """
    labels = np.asarray(labels, dtype=np.int64)
    k = labels.size
    loss = rng.uniform(0.0, 100.0, size=k)
    top = np.argsort(-cluster_means(loss, labels), kind="stable")[:min(w, labels.max() + 1)]
    z = d // len(top)
    lists = [list(np.flatnonzero(labels == g)[np.argsort(-loss[labels == g], kind="stable")][:z]) for g in top]
    others = np.flatnonzero(~np.isin(labels, top))
    missing = min(d - sum(map(len, lists)), others.size)
    if missing > 0:
        extra = rng.choice(others, size=missing, replace=False, p=loss[others] / loss[others].sum())
        for members, share in zip(lists, np.array_split(extra, len(lists))):
            members += list(share)
    chosen = [int(max(members, key=lambda c: loss[c])) for members in lists if members]
    rest = np.setdiff1d(np.arange(k), chosen)
    if len(chosen) < m and rest.size:
        share = np.asarray(n_train, dtype=np.float64)[rest]
        chosen += [int(c) for c in rng.choice(rest, size=min(m - len(chosen), rest.size), replace=False,
                                              p=share / share.sum())]
    return np.asarray(chosen, dtype=np.int64)


def run(ctx: Context, hp: Hyper) -> Outcome:
    variant = "psi" if hp.variant == "psi_code" else hp.variant
    dist = hamming_matrix(label_vectors(ctx.counts_train, variant))
    labels, leaders = leader_groups(dist, hp.tau * ctx.counts_train.shape[1])
    m = round_size(ctx.n_clients, ctx.cfg.fraction)
    if hp.variant == "psi_code":
        labels = code_groups(labels)
        choose = lambda t, w, rng, memo: select_code(rng, labels, ctx.fed.n_train, hp.d,  # noqa: E731
                                                     hp.clusters_per_round, m)
    else:
        group_dist = dist[np.ix_(leaders, leaders)]
        choose = lambda t, w, rng, memo: select(rng, labels, group_dist, m)  # noqa: E731
    out = global_model_rounds(ctx, choose=choose, selection_stream="selection/fedcls", weights=hp.aggregation)
    out.info.update({"variant": hp.variant, "groups": labels.tolist(),
                     "n_groups": int(labels.max() + 1), "m": m})
    return out


# all its training goes through global_model_rounds (FLConfig.stream_average)
INFO = MethodInfo(NAME, "FedCLS", Hyper, run, grid=GRID, streams_average=True, resumable=True)
