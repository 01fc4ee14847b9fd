"""FedSoft — soft clustered federated learning with proximal local updating (Ruan & Joe-Wong, 2022).

The server keeps S cluster models c_s (distinct seeded initialisations); every client k
keeps its own personalised model w_k across rounds (all start from the run's initial model).

1. Importance estimation (every ``estimation_interval`` rounds, and before round 0): each
   cluster model scores every training sample of every client; u_{ks} = share of client
   k's train samples whose loss is lowest under c_s (ties to the lower s). A zero share is
   floored at σ and the row renormalised (FedSoft's code floors at σ = 1e-4 without
   renormalising; the difference is O(σ) and keeps u_k on the simplex).
2. Selection: for each cluster s the server draws m = max(1, ⌊q·K/S⌋) clients *with
   replacement*, P(k) = v_{sk} = u_{ks} n_k / Σ_j u_{js} n_j. At most S·m distinct clients
   train per round: the protocol's q·K, or S when S > q·K (one draw per cluster).
3. Local update of every drawn client, from its own w_k, on its loss + (λ/2) Σ_s u_{ks}
   ‖w − c_s‖². Since Σ_s u_s‖w − c_s‖² = (Σ_s u_s)‖w − c̄‖² + const with c̄ = Σ_s u_s c_s /
   Σ_s u_s, this is the engine's single proximal term with centre c̄_k and μ_k = λ Σ_s u_{ks}
   — the same gradient (:func:`proximal_terms`).
4. Aggregation, the paper's rule: c_s = (1/m) Σ over the m draws of w_k (a client drawn
   twice counts twice). With draws ∝ v_{sk} this is an unbiased estimate of Σ_k v_{sk} w_k;
   weighting the drawn models by u_{ks} n_k once more would count the importance twice.
   (FedSoft's code draws without replacement, which biases the 1/m rule towards uniform
   weights once m approaches the number of clients a cluster really serves.)

Evaluation: client k uses the cluster model of its largest u_{ks} (``assignment`` =
argmax_s u_{ks}, from the latest estimate, recorded as ``info['cluster_of_client']``; ``n_clusters``
is S, of which ``cluster_sizes`` says how many serve a client), each client on its own test split
like every other method here; FedSoft's paper also reports the personalised w_k, whose global test
accuracy is returned as ``info['personalised_global_accuracy']``.

``variant='psi_code'``: what the PSI papers ran (their public PSI-PFL code, the ancestor of the
Clust-PSI-PFL code; reference-notes "What produced Table III"; the ``paper_code`` reproduction):
the S cluster models start identical; m = max(1, ⌊q·K⌋) clients sampled uniformly, not ∝
u_{ks} n_k; each personal model re-initialised every round as Σ_s u_{ks} c_s with the current
u; the proximal term λ Σ_s u_{ks}‖w − c_s‖² (λ, not λ/2); importance estimated in round 1 and
every ``estimation_interval``-th round (theirs: 2) from the *pre-aggregation* cluster models,
for the round's clients only (the others keep theirs, initially 1/S); c_s = Σ_i u_{is} w_i over
the round's clients with u_{is} normalised over them (no n_k); plain SGD (lr 0.001, batch 64,
shuffled); and Table III's number is the *best* round's mean over the cluster models of each
model's accuracy on the pooled test set, the round before training included (the history
gets a round-0 entry) — not each client on its own cluster's model (:mod:`fedlib.reproduction`).
The default variant (``'paper'``) implements Ruan & Joe-Wong's rules and the workbook's
evaluation.

Fresh Adam state per local update (the engine's protocol); FedSoft's code kept each
client's optimiser across rounds. λ = 0.1 and σ = 1e-4 are FedSoft's code defaults for its
(E)MNIST experiments (0.01 for CIFAR-10).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..engine import broadcast, predict_logits, weighted_average
from ..evaluation import global_accuracy
from ..engine.host import to_host
from ..validation import check_choice, check_int, check_number
from .base import Context, Outcome, State, run_rounds, take
from .contract import MethodInfo

NAME = "fedsoft"


@dataclass(frozen=True)
class Hyper:
    """FedSoft's number of clusters (Table II) and its code's defaults."""

    n_clusters: int = 5           # S
    lam: float = 0.1              # λ, proximal coefficient
    sigma: float = 1e-4           # σ, floor of a zero importance share
    estimation_interval: int = 1  # τ, rounds between importance estimates
    variant: str = "paper"        # "paper" (Ruan & Joe-Wong) or "psi_code" (the PSI papers' code)

    def __post_init__(self):
        check_int(self.n_clusters, "n_clusters", 1)
        check_choice(self.variant, "variant", ("paper", "psi_code"))
        check_int(self.estimation_interval, "estimation_interval", 1)
        check_number(self.lam, "lam", 0)
        check_number(self.sigma, "sigma", 0, 1, low_open=True, high_open=True)


GRID = {"n_clusters": (5, 10, 50)}


def importance_weights(losses, owner, n_clients: int, sigma: float) -> np.ndarray:
    """u_{ks}: share of client k's samples whose loss is lowest under cluster model s; (K, S) float64.

    ``losses`` (S, N): per-sample loss of each cluster model; ``owner`` (N,): each sample's client in
    0..K−1 (K = ``n_clients``). A zero share becomes σ before each row is renormalised to sum 1 (a
    client without samples gets the uniform row).
    """
    loss = np.asarray(losses, dtype=np.float64)
    owner = np.asarray(owner, dtype=np.int64)
    s = loss.shape[0]
    counts = np.zeros((n_clients, s))
    np.add.at(counts, (owner, np.argmin(loss, axis=0)), 1.0)
    share = counts / np.maximum(counts.sum(1, keepdims=True), 1.0)
    share[share == 0] = sigma
    return share / share.sum(1, keepdims=True)


def selection_probabilities(u, n_samples) -> np.ndarray:
    """v_{sk} = u_{ks} n_k / Σ_j u_{js} n_j: per cluster, the probability of drawing client k.

    ``u`` (K, S), ``n_samples`` (K,); returns (S, K), each row summing to 1.
    """
    v = (np.asarray(u, dtype=np.float64) * np.asarray(n_samples, dtype=np.float64)[:, None]).T
    return v / v.sum(1, keepdims=True)


def proximal_terms(u, clusters: State, lam: float) -> tuple[State, torch.Tensor]:
    """The single proximal term equal (up to a constant) to (λ/2) Σ_s u_{ks} ‖w − c_s‖².

    ``u`` (M, S): importance rows of the M clients to train; ``clusters``: stacked cluster models
    ``name -> (S, *shape)``. Returns (center ``name -> (M, *shape)``: c̄_k = Σ_s u_{ks} c_s / Σ_s u_{ks},
    mu (M,) float64: μ_k = λ Σ_s u_{ks}).
    """
    u_t = torch.as_tensor(np.asarray(u, dtype=np.float64))
    total = u_t.sum(1)
    mix = u_t / total[:, None]
    center = {k: torch.tensordot(mix.to(c.device, c.dtype), c, dims=1) for k, c in clusters.items()}
    return center, lam * total


def draw_clients(rng: np.random.Generator, probabilities, m: int) -> np.ndarray:
    """m draws with replacement per cluster, client k with probability v_{sk} ((S, K)); returns (S, m) int64."""
    p = np.asarray(probabilities, dtype=np.float64)
    return np.stack([rng.choice(p.shape[1], size=m, replace=True, p=row) for row in p]).astype(np.int64)


def _estimate(ctx: Context, clusters: State, sigma: float, clients=None) -> np.ndarray:
    """(K', S) importance from the cluster models' losses on the train samples of ``clients``
    (K',; default every client), rows in that order."""
    x, y, parts = ctx.fed.split("train")
    clients = np.arange(ctx.n_clients) if clients is None else np.asarray(clients, dtype=np.int64)
    parts = [parts[c] for c in clients]
    owner = np.repeat(np.arange(len(clients)), [len(p) for p in parts])
    index = torch.as_tensor(np.concatenate(parts).astype(np.int64), device=x.device)
    logits = predict_logits(ctx.model, clusters, x[index])
    target = y[index].expand(len(logits), -1)
    losses = F.cross_entropy(logits.flatten(0, 1), target.flatten(), reduction="none").view(target.shape)
    return importance_weights(to_host(losses), owner, len(clients), sigma)


def code_aggregation_weights(u_round) -> np.ndarray:
    """The PSI papers' code's aggregation: per cluster s, the round's clients weighted by
    u_{is} / Σ_j u_{js} (no n_k). (M, S) importance rows → (S, M), each row summing to 1."""
    u = np.asarray(u_round, dtype=np.float64).T
    return u / (u.sum(1, keepdims=True) + 1e-10)


def code_estimation_round(r: int, interval: int) -> bool:
    """Whether the PSI papers' code re-estimates importance after round r (1-based): in round 1
    and every ``interval``-th round."""
    return r == 1 or r % interval == 0


def _run_code(ctx: Context, hp: Hyper) -> Outcome:
    """The ``psi_code`` variant (module docstring)."""
    k, s = ctx.n_clients, hp.n_clusters
    m = max(1, int(ctx.cfg.fraction * k))
    clusters = broadcast(ctx.init_state(), s)
    u = np.full((k, s), 1.0 / s)
    rng = ctx.rng("fedsoft/selection")
    ctx.log_round(-1, clusters, u.argmax(1))  # the code's evaluation before training (round 0)

    def step(t: int, state: tuple) -> tuple:  # one round; everything it carries is in `state`
        clusters, u, rng = state
        chosen = np.sort(rng.choice(k, size=m, replace=False))
        start = {name: torch.tensordot(torch.as_tensor(u[chosen]).to(c.device, c.dtype), c, dims=1)
                 for name, c in clusters.items()}
        center, mu = proximal_terms(u[chosen], clusters, 2 * hp.lam)  # λ Σ u‖w − c‖² = (μ/2)‖·‖², μ = 2λΣu
        res = ctx.train(start, chosen, t, prox_center=center, prox_mu=mu)
        if code_estimation_round(t + 1, hp.estimation_interval):
            u[chosen] = _estimate(ctx, clusters, hp.sigma, chosen)  # the pre-aggregation cluster models
        weights = code_aggregation_weights(u[chosen])
        new = [weighted_average(res.params, torch.as_tensor(row)) for row in weights]
        clusters = {name: torch.stack([c[name] for c in new]) for name in new[0]}
        ctx.log_round(t, clusters, u.argmax(1))
        return clusters, u, rng

    clusters, u, _ = run_rounds(ctx, range(ctx.cfg.rounds), (clusters, u, rng), step)
    assignment = u.argmax(1)
    info = {"n_clusters": s, "clients_per_round": m, "variant": hp.variant,
            "cluster_sizes": np.bincount(assignment, minlength=s).tolist(),
            "cluster_of_client": assignment.tolist()}
    return Outcome(clusters, assignment, info)


def run(ctx: Context, hp: Hyper) -> Outcome:
    """FedSoft over ``ctx.cfg.rounds`` rounds; the S cluster models, clients on their argmax-u one."""
    if hp.variant == "psi_code":
        return _run_code(ctx, hp)
    k, s = ctx.n_clients, hp.n_clusters
    m = max(1, int(ctx.cfg.fraction * k / s))
    n = ctx.fed.n_train
    clusters = ctx.init_states(s, "fedsoft/cluster-init")
    local = broadcast(ctx.init_state(), k)
    rng = ctx.rng("fedsoft/selection")
    u = _estimate(ctx, clusters, hp.sigma)

    def step(t: int, state: tuple) -> tuple:  # one round; everything it carries is in `state`
        clusters, local, u, rng = state
        draws = draw_clients(rng, selection_probabilities(u, n), m)
        chosen = np.unique(draws)
        center, mu = proximal_terms(u[chosen], clusters, hp.lam)
        res = ctx.train(take(local, chosen), chosen, t, prox_center=center, prox_mu=mu)
        for name, value in res.params.items():
            local[name][torch.as_tensor(chosen, device=value.device)] = value
        new = [weighted_average(take(local, row), np.ones(m)) for row in draws]
        clusters = {name: torch.stack([c[name] for c in new]) for name in new[0]}
        if (t + 1) % hp.estimation_interval == 0:
            u = _estimate(ctx, clusters, hp.sigma)
        ctx.log_round(t, clusters, u.argmax(1))
        return clusters, local, u, rng

    clusters, local, u, _ = run_rounds(ctx, range(ctx.cfg.rounds), (clusters, local, u, rng), step)
    assignment = u.argmax(1)
    personal = global_accuracy(*ctx.evaluate(local, np.arange(k)))
    info = {"n_clusters": s, "draws_per_cluster": m,
            "cluster_sizes": np.bincount(assignment, minlength=s).tolist(),
            "cluster_of_client": assignment.tolist(),
            "personalised_global_accuracy": personal}
    return Outcome(clusters, assignment, info)


INFO = MethodInfo(NAME, "FedSoft", Hyper, run, grid=GRID, resumable=True)
