"""IFCA — the Iterative Federated Clustering Algorithm (Ghosh, Chung, Yin & Ramchandran, 2020).

The server keeps k cluster models θ_1 … θ_k, initialised differently (seeds from the stream
``"ifca/init"``). Each round t, with S_t the m = max(1, ⌊q·K⌋) clients drawn uniformly from
the stream ``"selection/group0"`` (the same clients as FedAvg):

1. every i ∈ S_t evaluates all k models on its own train split — one batched
   ``ctx.loss_matrix`` call, F (k, m) — and picks ĵ_i = argmin_j F_ji
   (:func:`assign_clusters`; ties to the lowest index, an empty split counts as +∞);
2. every i ∈ S_t trains θ_{ĵ_i} locally (one engine call for the whole round);
3. θ_j ← Σ_{i: ĵ_i = j} n_i θ_i^trained / Σ n_i, the sample-weighted average of its pickers
   (IFCA's model-averaging variant); a model nobody picked stays unchanged.

Evaluation: after the last round every client (all K, selected or not) picks its
argmin-loss final model on its train split; ``assignment`` is that choice.

Logging (``ctx.log_round``) uses the last known choice of each client: one loss matrix over
all K clients on the initial models before round 0, then each selected client's choice of
the round (made on the models it started from); no extra evaluation per round. The last
round logs with the final assignment, so the history ends on the outcome's accuracy.

Departures: k = ``n_clusters`` defaults to 5, FedPrism's K (the IFCA paper sets k to the
number of planted groups); weights are averaged, not gradients (IFCA's "model averaging"
option), each picker weighted by its train samples as in FedAvg (IFCA's average is
unweighted); the protocol's optimiser replaces plain SGD steps.

``info``: ``selected`` and ``choices`` per round (the selected clients and their picks),
``assignment`` / ``cluster_of_client`` (the final choice of every client, for
:func:`fedlib.evaluation.cluster_recovery`), ``cluster_sizes`` (k,).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.host import to_host
from ..validation import check_int, fail
from .base import (Context, Outcome, State, check_finite_models, per_cluster_average, run_rounds, sample_clients,
                   take)
from .contract import MethodInfo

NAME = "ifca"
GRID = {}  # the workbook uses FedPrism's K; IFCA's paper sets k to the planted groups

__all__ = ["NAME", "GRID", "Hyper", "assign_clusters", "aggregate_clusters", "run"]


@dataclass(frozen=True)
class Hyper:
    n_clusters: int = 5  # k: FedPrism's K (Sec. 4.5), the number of cluster models

    def __post_init__(self):
        check_int(self.n_clusters, "n_clusters", 1)


def assign_clusters(loss) -> np.ndarray:
    """Each client's argmin-loss model: ĵ_i = argmin_j F_ji.

    ``loss`` (k, M): mean train loss of model j on client i; NaN (an empty split) counts as +∞.
    Returns (M,) int64; ties go to the lowest model index.
    """
    f = np.asarray(loss, dtype=np.float64)
    if f.ndim != 2 or f.shape[0] == 0:
        fail("loss", "a (k, M) matrix of losses with k ≥ 1", loss)
    return np.argmin(np.nan_to_num(f, nan=np.inf), axis=0).astype(np.int64)


def aggregate_clusters(models: State, trained: State, choice, n_samples) -> State:
    """θ_j ← sample-weighted average of the trained models of the clients that picked j.

    ``models`` (k, ...): the round's start cluster models; ``trained`` (M, ...): the selected clients'
    trained models; ``choice`` (M,): the model each picked; ``n_samples`` (M,): their train counts.
    Returns State (k, ...): a model nobody picked (or whose pickers hold no sample) is unchanged.
    """
    return per_cluster_average(models, trained, choice, n_samples)


def _choose(ctx: Context, models: State, clients) -> np.ndarray:
    """(M,) argmin-loss model of each of ``clients`` on its train split (one batched call)."""
    loss, _, _ = ctx.loss_matrix(models, clients, split="train")
    return assign_clusters(loss)


def run(ctx: Context, hp: Hyper) -> Outcome:
    """IFCA over ``ctx.cfg.rounds`` rounds; the k cluster models, clients on their argmin-loss one."""
    everyone = np.arange(ctx.n_clients)
    models = ctx.init_states(hp.n_clusters, "ifca/init")
    known = _choose(ctx, models, everyone)  # for logging only: the last known choice

    def step(t: int, state: tuple) -> tuple:  # one round; everything it carries is in `state`
        models, known, rng, selected, choices = state
        clients = sample_clients(rng, everyone, ctx.cfg.fraction)
        choice = _choose(ctx, models, clients)
        res = ctx.train(take(models, choice), clients, t)
        models = aggregate_clusters(models, res.params, choice, to_host(res.n_samples, np.float64))
        check_finite_models(models, t, "after aggregation", ctx.cfg)
        known[clients] = choice
        if t == ctx.cfg.rounds - 1:  # the last logged accuracy is the outcome's
            known = _choose(ctx, models, everyone)
        ctx.log_round(t, models, known)
        return models, known, rng, [*selected, clients.tolist()], [*choices, choice.tolist()]

    state = (models, known, ctx.rng("selection/group0"), [], [])
    models, known, _, selected, choices = run_rounds(ctx, range(ctx.cfg.rounds), state, step)
    assignment = known
    info = {"n_clusters": hp.n_clusters, "selected": selected, "choices": choices,
            "assignment": assignment.tolist(), "cluster_of_client": assignment.tolist(),
            "cluster_sizes": np.bincount(assignment, minlength=hp.n_clusters).tolist()}
    return Outcome(models, assignment, info)


INFO = MethodInfo(NAME, "IFCA", Hyper, run, grid=GRID, resumable=True)
