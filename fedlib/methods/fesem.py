"""FeSEM — Federated Stochastic Expectation Maximization (Xie, Long, Liu, Jiang, Jiang & Zhang,
"Multi-center federated learning: clients clustering for better personalization", 2021 / WWW
2023); a baseline of pFedLIA ("we provided the correct k").

The server keeps K centre models c_1 … c_K and remembers each client's cluster r(i) (−1 while
the client has none). Each round t, with S_t the m = max(1, ⌊q·N⌋) clients drawn uniformly from
the stream ``"selection/group0"`` (the same clients as FedAvg):

1. every i ∈ S_t trains locally from its centre c_{r(i)} (one engine call); a client without a
   cluster starts from the centre with the lowest mean loss on its train split (one batched
   ``ctx.loss_matrix`` call; in round 0 there are no centres yet and every client starts
   from the seeded initial model w_0);
2. E-step: r(i) = argmin_k ‖w_i − c_k‖₂ for every trained model w_i, i ∈ S_t
   (:func:`assign_nearest`: trainable weights flattened, float64 distances, ties to the lowest
   index);
3. M-step: c_k ← Σ_{i: r(i)=k} a_i w_i / Σ_{i: r(i)=k} a_i over the round's clients
   (:func:`update_centres`), a_i = 1 (``weighting="plain"``: the paper's
   W̃^(k) = Σ_i r_i^(k) W_i / Σ_i r_i^(k), the authors' ``KmeanModel`` — segment sum / count —
   and FlexCFL's FeSEM, aggregation ``'avg'``) or a_i = n_i (``"samples"``: FedAvg's); a
   centre with no member keeps its weights;
4. steps 2–3 are repeated ``em_iterations`` times on the round's trained models (Lloyd
   iterations); the last E-step's r(i) is remembered.

Centre initialisation (``init``, only ``"clients"``, the authors' code): their
``KmeanModel`` sets the K centroids to the first K client models of a shuffled client list
(Forgy) and then runs 5 iterations on that first clustering (1 on every later one). Here: round 0's selected clients all train from w_0 =
``ctx.init_state()``; K of their trained models, drawn uniformly without replacement from the
stream ``"fesem/forgy"``, become the centres; the round's E/M runs ``init_em_iterations`` (5)
times. If fewer than K clients trained in round 0, the missing centres are rows of
``ctx.init_states(K, "fesem/init")`` (they keep no member until a client comes near).
FlexCFL's cold start from K random centres is not offered (``init='random'`` is refused).

Evaluation: every client predicts with its cluster's centre; a client never selected takes
the centre with the lowest mean loss on its train split (the rule of step 1; cheap: K × its
few clients, computed only at the rounds that are logged). ``assignment`` is that final choice.

Defaults and their sources: ``n_clusters`` 5 (pFedLIA's planted clusters; pFedLIA gives FeSEM
the correct k); ``em_iterations`` 1 (the authors' ``KmeanModel.num_iter = 1``) and
``init_em_iterations`` 5 (its first clustering); ``weighting="plain"`` (paper, authors' code,
FlexCFL); FL-bench has no FeSEM (pFedLIA's text says it used FL-bench "which has most of the
aforementioned baselines").

Departures: the authors' code re-clusters only every ``update-center-every`` = 10 rounds and
clusters client vectors in a separate K-means space; here, as in the paper's Algorithm 1 and
FlexCFL, the E-step and M-step act on the model weights every round. Distances use all
trainable weights (``model.named_parameters()``; BatchNorm statistics stay out of the E-step
but are averaged in the M-step). The protocol's optimiser replaces plain SGD; the paper's
optional distance regulariser in the local objective is not used (its experiments and the
authors' FeSEM trainer train from the centre without it).

``info``: ``selected`` and ``choices`` per round (the selected clients and their final E-step
clusters), ``cluster_of_client`` / ``assignment`` (the final cluster of every client, for
:func:`fedlib.evaluation.cluster_recovery`), ``cluster_sizes`` (K,), ``never_selected``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..engine import broadcast, flatten_params, weighted_average
from ..engine.host import to_host
from ..validation import check_choice, check_int, fail
from .base import Context, Outcome, State, check_finite_models, sample_clients, take

NAME = "fesem"
GRID = {}  # pFedLIA gives FeSEM the planted number of clusters; no search

__all__ = ["NAME", "GRID", "Hyper", "assign_nearest", "update_centres", "run"]


@dataclass(frozen=True)
class Hyper:
    n_clusters: int = 5  # K: pFedLIA's planted clusters ("we provided the correct k")
    em_iterations: int = 1  # E/M iterations per round: the authors' KmeanModel.num_iter
    init_em_iterations: int = 5  # on round 0's first clustering (authors' code: 5)
    init: str = "clients"  # Forgy from round 0's trained models (authors' code), the one choice
    weighting: str = "plain"  # M-step: "plain" mean (paper, authors' code) or "samples" (FedAvg)

    def __post_init__(self):
        check_int(self.n_clusters, "n_clusters", 1)
        check_int(self.em_iterations, "em_iterations", 1)
        check_int(self.init_em_iterations, "init_em_iterations", 1)
        check_choice(self.init, "init", ("clients",))
        check_choice(self.weighting, "weighting", ("plain", "samples"))


def _matrix(x, name: str) -> torch.Tensor:
    """A finite 2-D float64 tensor (numpy or torch input; a torch input stays on its device)."""
    if torch.is_tensor(x):
        t = x.detach().to(torch.float64)
    else:
        try:
            t = torch.as_tensor(np.asarray(x, dtype=np.float64))
        except (TypeError, ValueError):
            fail(name, "a 2-D array of finite numbers", x)
    if t.ndim != 2 or not bool(torch.isfinite(t).all()):
        fail(name, "a 2-D array of finite numbers", x)
    return t


def assign_nearest(weights, centres) -> np.ndarray:
    """FeSEM's E-step: r_i = argmin_k ‖w_i − c_k‖₂.

    Parameters
    ----------
    weights : array-like or Tensor, shape (M, P)
        The clients' flattened models.
    centres : array-like or Tensor, shape (K, P)
        The flattened centres, K ≥ 1.

    Returns
    -------
    ndarray, shape (M,), int64 — ties go to the lowest centre index. Distances are computed in
    float64, one centre at a time (memory M·P, not M·K·P).
    """
    w = _matrix(weights, "weights")
    c = _matrix(centres, "centres")
    if c.shape[0] == 0 or c.shape[1] != w.shape[1]:
        fail("centres", f"a (K, {w.shape[1]}) array with K ≥ 1 (as many columns as weights)", centres)
    c = c.to(w.device)
    d = torch.stack([((w - c[k]) ** 2).sum(1) for k in range(c.shape[0])], dim=1)  # (M, K) squared
    return to_host(torch.argmin(d, dim=1), np.int64) if d.shape[0] else np.zeros(0, dtype=np.int64)


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
    out = {name: value.clone() for name, value in centres.items()}
    for j in np.unique(r):
        rows = np.flatnonzero(r == j)
        if a[rows].sum() > 0:
            avg = weighted_average(take(models, rows), a[rows])
            for name in out:
                out[name][int(j)] = avg[name].to(out[name].dtype)
    return out


def _lowest_loss(ctx: Context, centres: State, clients) -> np.ndarray:
    """(M,) the centre with the lowest mean train loss for each of ``clients`` (NaN = +∞)."""
    loss, _, _ = ctx.loss_matrix(centres, clients, split="train")
    return np.argmin(np.nan_to_num(np.asarray(loss, dtype=np.float64), nan=np.inf), axis=0).astype(np.int64)


def _em(centres: State, trained: State, flat: torch.Tensor, names, weights, iterations: int):
    """``iterations`` E/M steps on the round's trained models; (centres, last E-step)."""
    for _ in range(iterations):
        choice = assign_nearest(flat, flatten_params(centres, names))
        centres = update_centres(centres, trained, choice, weights)
    return centres, choice


def _logged(ctx: Context, t: int) -> bool:
    return (t + 1) % ctx.cfg.eval_every == 0 or t == ctx.cfg.rounds - 1


def _evaluation_assignment(ctx: Context, centres: State, cluster: np.ndarray) -> np.ndarray:
    """Each client's cluster; clients without one take their lowest-train-loss centre."""
    out = cluster.copy()
    none = np.flatnonzero(out < 0)
    if none.size:
        out[none] = _lowest_loss(ctx, centres, none)
    return out


def run(ctx: Context, hp: Hyper) -> Outcome:
    """FeSEM over ``ctx.cfg.rounds`` rounds; the K centres, each client on its cluster's one."""
    k = hp.n_clusters
    everyone = np.arange(ctx.n_clients)
    names = [name for name, _ in ctx.model.named_parameters()]
    rng = ctx.rng("selection/group0")
    cluster = np.full(ctx.n_clients, -1, dtype=np.int64)  # r(i); −1: no cluster yet
    centres = None  # Forgy: the centres come from round 0's trained models
    selected, choices = [], []
    for t in range(ctx.cfg.rounds):
        clients = sample_clients(rng, everyone, ctx.cfg.fraction)
        if centres is None:  # round 0: everyone from w_0
            start = broadcast(ctx.init_state(), len(clients), copy=False)
        else:
            begin = cluster[clients].copy()
            new = np.flatnonzero(begin < 0)
            if new.size:
                begin[new] = _lowest_loss(ctx, centres, clients[new])
            start = take(centres, begin)
        res = ctx.train(start, clients, t)
        weights = None if hp.weighting == "plain" else to_host(res.n_samples, np.float64)
        flat = flatten_params(res.params, names).to(torch.float64)
        iterations = hp.em_iterations
        if centres is None:
            centres = _forgy(ctx, res.params, k)
            iterations = hp.init_em_iterations
        centres, choice = _em(centres, res.params, flat, names, weights, iterations)
        check_finite_models(centres, t, "after the M-step", ctx.cfg)
        cluster[clients] = choice
        selected.append(clients.tolist())
        choices.append(choice.tolist())
        if _logged(ctx, t):
            ctx.log_round(t, centres, _evaluation_assignment(ctx, centres, cluster))
    assignment = _evaluation_assignment(ctx, centres, cluster)
    never = np.setdiff1d(everyone, np.concatenate([np.asarray(s, dtype=np.int64) for s in selected]))
    info = {"n_clusters": k, "init": hp.init, "selected": selected, "choices": choices,
            "assignment": assignment.tolist(), "cluster_of_client": assignment.tolist(),
            "cluster_sizes": np.bincount(assignment, minlength=k).tolist(), "never_selected": never.tolist()}
    return Outcome(centres, assignment, info)


def _forgy(ctx: Context, trained: State, k: int) -> State:
    """K of the trained models (uniform, without replacement, stream ``"fesem/forgy"``) as the
    centres; rows of ``ctx.init_states(k, "fesem/init")`` where fewer than K trained."""
    m = len(next(iter(trained.values())))
    rows = np.sort(ctx.rng("fesem/forgy").choice(m, size=min(k, m), replace=False))
    centres = take(trained, rows)
    if m < k:
        extra = take(ctx.init_states(k, "fesem/init"), np.arange(m, k))
        centres = {n: torch.cat([centres[n], extra[n].to(centres[n].dtype)]) for n in centres}
    return {n: v.clone() for n, v in centres.items()}
