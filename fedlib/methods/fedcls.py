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

The grouping procedure (greedy leaders), the first group and the farthest-first order are
this module's precise reading of "group by Hamming distance, prefer complementary labels".
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..validation import check_choice, check_number
from .base import Context, Outcome, global_model_rounds, round_robin, round_size

NAME = "fedcls"
GRID = {"tau": (0.1, 0.5, 0.95)}  # Clust-PSI-PFL Table II
VARIANTS = ("psi", "original")


@dataclass(frozen=True)
class Hyper:
    tau: float = 0.1        # grouping threshold as a fraction of C (Table II)
    variant: str = "psi"    # "psi" (frequency vectors, the papers' code) or "original" (binary)

    def __post_init__(self):
        check_number(self.tau, "tau", 0)
        check_choice(self.variant, "variant", VARIANTS)


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

    Parameters
    ----------
    dist : array-like, shape (K, K)
    threshold : float

    Returns
    -------
    labels : ndarray, shape (K,), int64 — group ids 0..G−1 in order of foundation.
    leaders : ndarray, shape (G,), int64 — each group's first member.
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

    Parameters
    ----------
    dist : array-like, shape (G, G) — symmetric group distances.
    start : int

    Returns
    -------
    ndarray, shape (G,), int64 — a permutation of 0..G−1 beginning with ``start``.
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


def run(ctx: Context, hp: Hyper) -> Outcome:
    dist = hamming_matrix(label_vectors(ctx.counts_train, hp.variant))
    labels, leaders = leader_groups(dist, hp.tau * ctx.counts_train.shape[1])
    group_dist = dist[np.ix_(leaders, leaders)]
    m = round_size(ctx.n_clients, ctx.cfg.fraction)
    rng = ctx.rng("selection/fedcls")
    out = global_model_rounds(ctx, choose=lambda t, w: select(rng, labels, group_dist, m))
    out.info.update({"variant": hp.variant, "groups": labels.tolist(),
                     "n_groups": int(leaders.size), "m": m})
    return out
