"""FedPrism (Kumbhakar et al. 2026): Prism decomposition, prototype soft clustering and
dual-stream inference (Sections 3.1–3.3, Algorithms 1–2, Section 4.5).

Each client i holds a **private component** P_i and an independent **local expert** L_i (both
trained only on its data, never sent). The server holds a **global model** G and K **cluster
models** C_k, and per client the soft cluster weights π_ik and the global weight α_i. A
selected client (Algorithm 1):

1. trains L_i and P_i on its data (E local epochs each, the protocol's optimiser);
2. builds the Prism backbone (Eq. 1)  W_i = α_i·G + β·Σ_k π_ik C_k + γ_i·P_i,  γ_i = 1 − α_i − β,
   trains it (E epochs) to W'_i and sends W'_i and its prototype h_i (the classifier layer of W'_i).

The server (Algorithm 2): G ← Σ n_i W'_i / Σ n_i; C_k ← C_k + η_cluster (W̄_k − C_k) with
W̄_k = Σ_i π_ik W'_i / Σ_i π_ik (Z_k > 0); K-Means on the received prototypes; π_ik ∝
exp(cos(h_i, μ_k)/τ); α_i ← clip(α_i + η_α (‖W'_i − C̄_i‖ − ‖W'_i − G‖)).

Inference (Algorithm 1, ``Inference``): the client's backbone W_Backbone and expert L_i mixed
by the expert's confidence λ(x) = max softmax(L_i(x)/T) (Eqs. 2–3;
:class:`fedlib.engine.predict.GatedMixture`).

The ablations of Tables 3–5 and 9–11 are parameters of this one method: ``components``
('full', 'global' = pure global α=1, 'cluster' = pure cluster β=1, 'private' = pure private
γ=1, 'global_cluster' = γ=0 with α = 1 − β), ``expert_weight`` (a fixed λ: 0 = backbone only,
1 = expert only) and ``alpha`` (the initial α with β fixed).

Choices where the paper is silent (all exposed as Hyper fields)
---------------------------------------------------------------
* η_cluster = 0.5, η_α = 0.01, τ = 0.1, T = 1, warm-up 10 rounds: the paper names these
  constants without values. K-Means runs every ``recluster_every`` = 10 rounds once the
  warm-up is over (Section 4.5 "every 10 rounds"; Algorithm 2 writes "if t > Warmup"); between
  reclusterings the round's clients take their soft weights from the latest centroids. Before
  the first clustering every π_ik = 1/K.
* K-Means (k-means++, ``n_init`` restarts, seeded) runs on the L2-normalised prototypes, so
  that its geometry matches the cosine similarity the weights use; fewer clients than K in a
  round gives min(K, m) centroids. The prototype is the classifier's weight matrix (C × D),
  flattened (the paper: "the weights of this layer").
* The paper does not say which centroid belongs to which cluster model C_k (K-Means labels
  are arbitrary at each run). New centroids are matched to the cluster models by the
  Hungarian algorithm (scipy) on the cosine similarity between each centroid and each C_k's
  own prototype; a cluster model without a new centroid keeps its old one.
* The α update's "C_k" is read as the client's cluster component C̄_i = Σ_k π_ik C_k (the
  update compares the client's two shared parts). Distances are Euclidean over all weights.
* α is clipped to [0, 1 − β] (``alpha_clip='simplex'``, default) so that γ_i ≥ 0 and the
  backbone stays a convex combination; ``alpha_clip='paper'`` clips to [0, 1] as printed
  (γ_i may then be negative). The paper is inconsistent here: α₀ = 0.9, β = 0.1 and
  γ_i ← 1 − α_i − β start γ at 0, and Δ = ‖W′ − C̄_i‖ − ‖W′ − G‖ is usually ≥ 0, so under
  'simplex' α sits at its cap and γ stays 0 (P_i is trained but never enters the backbone:
  the 'full' ablation row then equals 'global_cluster'), and under 'paper' α rises past 0.9
  and γ turns negative. ``info['alpha_trace']`` records, every round, α's and γ's mean, min,
  max and the share of clients at the cap (:func:`alpha_gamma_summary`) to show which.
* Initial state: G⁽⁰⁾ is the run's seeded initial model, every C_k⁽⁰⁾ = G⁽⁰⁾ (they separate
  once the soft weights differ), P_i⁽⁰⁾ and L_i⁽⁰⁾ differently seeded models (streams
  ``fedprism/private``, ``fedprism/expert``).
* Evaluation uses each client's backbone as Algorithm 1's ``Inference`` writes it —
  W_Backbone built from the final G, C, π_i, α_i and P_i (the model the client would train
  from next), not its last trained W'_i — with its expert. ``info['global_model_accuracy']``
  is G's accuracy on the official test set where the federation has one.
* Tables 4 and 10 (a fixed expert weight λ) need no retraining: ``weight_sweep`` lists the
  fixed weights whose per-client correct counts on the test split are recorded
  (``info['expert_weight_sweep']``) after training with the confidence gate. Their "global"
  column is the backbone's official-test accuracy, which no λ changes (the paper's Table 10
  global column moves by only 39.1–40.5 across λ = 0…1, consistent with that reading).
* P_i is trained only when it enters the backbone (``components`` 'full' or 'private'); the
  other ablations never use it, so skipping it changes no number.
* Models: the prototype is "the last layer of its model (the classifier)", a summary of
  what the layers before it learned (Section 3.2; the paper's models are CNNs). A model with
  no layer before its classifier (``arch='logistic'``, the default of adult and acs_income)
  has no such split: its prototype would be the whole model. :func:`check_arch` refuses it
  at :meth:`fedlib.experiment.RunSpec.validate`, before any data is loaded; pass a model
  with a feature extractor, e.g. ``arch='mlp'``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..engine import broadcast, weighted_average
from ..engine.host import to_host
from ..engine.predict import GatedMixture
from ..models import head_prefix
from ..validation import check_choice, check_int, check_number, fail
from .base import Context, Outcome, State, check_finite_models, sample_clients, take
from .contract import MethodInfo

NAME = "fedprism"
GRID: dict = {}

COMPONENTS = ("full", "global", "cluster", "private", "global_cluster")

__all__ = ["alpha_gamma_summary", "Hyper", "run", "prism_backbone", "soft_weights", "cluster_step", "alpha_step",
           "match_centroids", "coefficients", "check_arch", "NO_FEATURE_EXTRACTOR"]

#: Architectures of :mod:`fedlib.models` whose body (:func:`fedlib.models.body`, every layer
#: before the classifier) has no weights: the classifier is the whole model.
NO_FEATURE_EXTRACTOR = ("logistic",)


def check_arch(arch: str) -> None:
    """Refuse a model without a body/head split (checked by ``RunSpec.validate``)."""
    if arch in NO_FEATURE_EXTRACTOR:
        fail("arch", "a model with layers before its classifier for method 'fedprism' (its prototype is "
             f"the classifier layer, a summary of what those layers learned; {arch!r} is a classifier "
             "alone, so its prototype would be the whole model), e.g. arch='mlp'", arch)


@dataclass(frozen=True)
class Hyper:
    """FedPrism's constants (Section 4.5: K = 5, β = 0.1, α ≈ 0.9; the rest see the module)."""

    n_clusters: int = 5
    alpha: float = 0.9
    beta: float = 0.1
    eta_cluster: float = 0.5
    eta_alpha: float = 0.01
    tau: float = 0.1
    temperature: float = 1.0
    warmup: int = 10
    recluster_every: int = 10
    n_init: int = 10
    components: str = "full"
    expert_weight: float | None = None
    alpha_clip: str = "simplex"
    weight_sweep: tuple = (0.0, 0.2, 0.5, 0.8, 1.0)

    def __post_init__(self):
        check_int(self.n_clusters, "n_clusters (K)", 1)
        check_number(self.alpha, "alpha", 0, 1)
        check_number(self.beta, "beta", 0, 1)
        if self.components == "full" and self.alpha + self.beta > 1:
            fail("alpha + beta", "≤ 1 (γ = 1 − α − β is the private component's weight)",
                 self.alpha + self.beta)
        check_number(self.eta_cluster, "eta_cluster", 0, 1)
        check_number(self.eta_alpha, "eta_alpha", 0)
        check_number(self.tau, "tau", 0, low_open=True)
        check_number(self.temperature, "temperature (T)", 0, low_open=True)
        check_int(self.warmup, "warmup", 0)
        check_int(self.recluster_every, "recluster_every", 1)
        check_int(self.n_init, "n_init", 1)
        check_choice(self.components, "components", COMPONENTS)
        check_number(self.expert_weight, "expert_weight", 0, 1, optional=True)
        check_choice(self.alpha_clip, "alpha_clip", ("simplex", "paper"))
        w = self.weight_sweep
        if not isinstance(w, (list, tuple)):
            fail("weight_sweep", "a list of fixed expert weights in [0, 1] (may be empty)", w)
        for value in w:
            check_number(value, "weight_sweep", 0, 1)
        object.__setattr__(self, "weight_sweep", tuple(float(v) for v in w))  # a list from a params file


def coefficients(hp: Hyper) -> tuple[float, float, bool]:
    """(initial α, β, whether α adapts) of ``hp.components`` (the ablations of Tables 3 and 9)."""
    return {"full": (hp.alpha, hp.beta, True), "global": (1.0, 0.0, False), "cluster": (0.0, 1.0, False),
            "private": (0.0, 0.0, False), "global_cluster": (1.0 - hp.beta, hp.beta, False)}[hp.components]


# ----------------------------------------------------------------------------- pure rules
def prism_backbone(g: State, clusters: State, private: State | None, alpha, beta: float, weights) -> State:
    """Eq. (1): W_i = α_i G + β Σ_k π_ik C_k + γ_i P_i, γ_i = 1 − α_i − β.

    ``g``: one model (unstacked); ``clusters`` (K, ...); ``private`` (M, ...), or None when every γ_i
    is 0; ``alpha`` (M,); β; ``weights`` (M, K) soft cluster weights (rows sum to 1). Returns a
    stacked State (M, ...); non-float tensors (counters) are G's.
    """
    a = torch.as_tensor(np.asarray(alpha, dtype=np.float64))
    w = torch.as_tensor(np.asarray(weights, dtype=np.float64))
    gamma = 1.0 - a - beta
    if private is None and bool((gamma.abs() > 1e-12).any()):
        raise ValueError("private must be given when some γ_i = 1 − α_i − β is not 0")
    out = {}
    for name, gt in g.items():
        if not gt.is_floating_point():
            out[name] = gt.unsqueeze(0).expand(len(a), *gt.shape).clone()
            continue
        shape = (len(a),) + (1,) * gt.dim()
        mixed = a.to(gt).view(shape) * gt + beta * torch.einsum("mk,k...->m...", w.to(gt), clusters[name])
        if private is not None:
            mixed = mixed + gamma.to(gt).view(shape) * private[name]
        out[name] = mixed
    return out


def soft_weights(prototypes, centroids, tau: float) -> np.ndarray:
    """π_ik ∝ exp(cos(h_i, μ_k)/τ) (Algorithm 2, line 24): (M, D), (K, D) → (M, K), rows sum to 1."""
    h = _unit(np.asarray(prototypes, dtype=np.float64))
    mu = _unit(np.asarray(centroids, dtype=np.float64))
    z = h @ mu.T / tau
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def cluster_step(clusters: State, trained: State, weights, eta: float) -> State:
    """Algorithm 2, lines 12–19: C_k ← C_k + η (W̄_k − C_k), W̄_k = Σ_i π_ik W'_i / Z_k, for Z_k > 0.

    clusters (K, ...), trained (M, ...), weights (M, K) → new clusters (K, ...)."""
    w = torch.as_tensor(np.asarray(weights, dtype=np.float64))
    z = w.sum(0)                                                   # (K,)
    keep = z > 0
    out = {}
    for name, c in clusters.items():
        if not c.is_floating_point():
            out[name] = c.clone()
            continue
        mean = torch.einsum("mk,m...->k...", w.to(c), trained[name]) / z.clamp_min(1e-12).to(c).view(
            (-1,) + (1,) * (c.dim() - 1))
        step = torch.where(keep.to(c.device).view((-1,) + (1,) * (c.dim() - 1)), eta * (mean - c),
                           torch.zeros_like(c))
        out[name] = c + step
    return out


def alpha_step(alpha, dist_cluster, dist_global, eta: float, high: float) -> np.ndarray:
    """Algorithm 2, lines 28–31, (M,) each:
    α_i ← clip(α_i + η_α (‖W'_i − C̄_i‖ − ‖W'_i − G‖), 0, high)."""
    a = np.asarray(alpha, dtype=np.float64)
    delta = np.asarray(dist_cluster, dtype=np.float64) - np.asarray(dist_global, dtype=np.float64)
    return np.clip(a + eta * delta, 0.0, high)


def alpha_gamma_summary(alpha, beta: float, high: float) -> dict:
    """One round's mixing weights over the clients: α_i (M,), β, and the clip's upper end →
    mean/min/max of α and of γ_i = 1 − α_i − β (the private part's weight), and the share of
    clients whose α sits at ``high`` (``info['alpha_trace']``'s rows)."""
    a = np.asarray(alpha, dtype=np.float64)
    g = 1.0 - a - beta
    return {"alpha_mean": float(a.mean()), "alpha_min": float(a.min()), "alpha_max": float(a.max()),
            "gamma_mean": float(g.mean()), "gamma_min": float(g.min()), "gamma_max": float(g.max()),
            "at_cap": float(np.mean(np.isclose(a, high)))}


def match_centroids(centroids, references) -> np.ndarray:
    """Which cluster model each new centroid belongs to: the Hungarian assignment (scipy's
    ``linear_sum_assignment``) maximising the total cosine similarity between the new
    centroids (k', D) and the cluster models' prototypes (K, D), k' ≤ K. Returns (k',) ids."""
    from scipy.optimize import linear_sum_assignment  # imported here: importing the registry stays light

    sim = _unit(np.asarray(centroids, dtype=np.float64)) @ _unit(np.asarray(references, dtype=np.float64)).T
    rows, cols = linear_sum_assignment(-sim)
    out = np.empty(len(rows), dtype=np.int64)
    out[rows] = cols
    return out


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _flat(state: State) -> torch.Tensor:
    """Stacked float tensors as one (M, P) float64 matrix."""
    return torch.cat([t.reshape(len(t), -1).double() for t in state.values() if t.is_floating_point()], 1)


def _prototypes(state: State, prefix: str) -> np.ndarray:
    """The classifier weight (M, C, D) of each row, flattened to (M, C·D)."""
    w = state[prefix + "weight"]
    return to_host(w.reshape(len(w), -1), np.float64)


# ----------------------------------------------------------------------------- the method
def run(ctx: Context, hp: Hyper) -> Outcome:
    if ctx.cfg.keep_optimizer_state:
        fail("keep_optimizer_state", "False for fedprism (each client trains three models; their "
             "optimiser states cannot share the client's one slot)", ctx.cfg.keep_optimizer_state)
    k_clients, n_k = ctx.n_clients, hp.n_clusters
    alpha0, beta, adapt = coefficients(hp)
    high = 1.0 - beta if hp.alpha_clip == "simplex" else 1.0
    uses_private = hp.components in ("full", "private")
    prefix = head_prefix(ctx.model)

    g = ctx.init_state()
    clusters = broadcast(g, n_k)
    private = ctx.init_states(k_clients, "fedprism/private") if uses_private else None
    expert = ctx.init_states(k_clients, "fedprism/expert")
    alpha = np.full(k_clients, alpha0)
    weights = np.full((k_clients, n_k), 1.0 / n_k)
    centroids = None
    rng_sel, rng_km = ctx.rng("selection/group0"), ctx.rng("fedprism/kmeans")
    reclusterings, trace = [], []
    predictor = lambda: GatedMixture(expert, temperature=hp.temperature, weight=hp.expert_weight)  # noqa: E731
    backbones = lambda: prism_backbone(g, clusters, private, alpha, beta, weights)  # noqa: E731

    for t in range(ctx.cfg.rounds):
        s = sample_clients(rng_sel, np.arange(k_clients), ctx.cfg.fraction)
        m, rows = len(s), torch.as_tensor(s, device=g[next(iter(g))].device)
        # Algorithm 1, path A (expert) and step 1 (private component): one engine call
        if uses_private:
            both = {n: torch.cat([expert[n][rows], private[n][rows]]) for n in expert}
            res = ctx.train(both, np.concatenate([s, s]), t)
            for n in expert:
                expert[n][rows] = res.params[n][:m]
                private[n][rows] = res.params[n][m:]
        else:
            res = ctx.train(take(expert, s), s, t)
            for n in expert:
                expert[n][rows] = res.params[n]
        # step 2: the Prism backbone, trained
        start = prism_backbone(g, clusters, take(private, s) if uses_private else None, alpha[s], beta, weights[s])
        res = ctx.train(start, s, t)
        trained = res.params
        check_finite_models(trained, t, "after local training", ctx.cfg)
        # Algorithm 2: A. global, B. clusters (with the round's weights), C. assignments, D. α
        g_old, c_bar_old = g, prism_backbone(g, clusters, None, np.zeros(m), 1.0, weights[s])
        g = weighted_average(trained, res.n_samples)
        clusters = cluster_step(clusters, trained, weights[s], hp.eta_cluster)
        check_finite_models({n: torch.cat([g[n][None], clusters[n]]) for n in g}, t, "after aggregation", ctx.cfg)
        h = _prototypes(trained, prefix)
        if t >= hp.warmup:
            if centroids is None or (t - hp.warmup) % hp.recluster_every == 0:
                centroids = _recluster(h, clusters, centroids, prefix, n_k, hp.n_init, rng_km)
                reclusterings.append(t + 1)
            weights[s] = soft_weights(h, centroids, hp.tau)
        if adapt:
            flat = _flat(trained)
            d_c = to_host((flat - _flat(c_bar_old)).norm(dim=1), np.float64)
            d_g = to_host((flat - _flat(broadcast(g_old, 1))).norm(dim=1), np.float64)
            alpha[s] = alpha_step(alpha[s], d_c, d_g, hp.eta_alpha, high)
        trace.append({"round": t + 1, **alpha_gamma_summary(alpha, beta, high)})
        if (t + 1) % ctx.cfg.eval_every == 0 or t == ctx.cfg.rounds - 1:
            ctx.log_round(t, backbones(), np.arange(k_clients), predictor())

    info = {"alpha": alpha.tolist(), "beta": beta, "cluster_weights": weights.round(6).tolist(),
            "cluster_of_client": weights.argmax(1).tolist(), "reclustered_after_rounds": reclusterings,
            "components": hp.components, "alpha_trace": trace}
    final = backbones()
    info["expert_weight_sweep"] = {  # Tables 4/10 from this one run: each fixed λ's correct counts (K,)
        f"{w:g}": ctx.evaluate(final, np.arange(k_clients), predictor=GatedMixture(expert, weight=w))[0].tolist()
        for w in hp.weight_sweep}
    if ctx.fed.has_global_test:
        correct, n = ctx.evaluate_global(broadcast(g, 1), np.zeros(1, dtype=np.int64))
        info["global_model_accuracy"] = float(correct[0] / n)
    return Outcome(final, np.arange(k_clients), info, predictor())


def _recluster(h: np.ndarray, clusters: State, old, prefix: str, n_k: int, n_init: int, rng) -> np.ndarray:
    """K-Means on the round's unit prototypes; the centroids matched to the cluster models
    (Hungarian on cosine similarity with each C_k's own prototype). Returns (K, D) centroids."""
    from sklearn.cluster import KMeans  # imported here: importing the registry stays light

    refs = _prototypes(clusters, prefix)
    cent = refs.copy() if old is None else old.copy()
    k = min(n_k, len(h))
    km = KMeans(n_clusters=k, n_init=n_init, random_state=int(rng.integers(2**31 - 1))).fit(_unit(h))
    cent[match_centroids(km.cluster_centers_, refs)] = km.cluster_centers_
    return cent


INFO = MethodInfo(NAME, "FedPrism", Hyper, run, grid=GRID, check_arch=check_arch)
