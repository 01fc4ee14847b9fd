"""FedFomo — Personalized Federated Learning with First Order Model Optimization
(Zhang, Sapra, Fidler, Yeung & Alvarez, ICLR 2021).

Every client i keeps its own model θ_i (all K start from the run's initial model) and a row
P_i of the server's affinity matrix P (K × K, FL-bench's start: the identity). Each round t,
with S_t the m = max(1, ⌊q·K⌋) clients drawn uniformly from the stream ``"selection/group0"``
(the same clients as FedAvg):

1. candidates (:func:`choose_candidates`): client i ∈ S_t downloads the models of M other
   clients, chosen among the clients that uploaded a model in round t − 1 (S_{t−1}, itself
   left out): the M with the highest affinity P_i,n, ties broken at random; with the
   exploration ε_t = max(0, ε − t·ε_decay) each slot is instead filled, with probability ε_t,
   by the next client of a random shuffle of the pool (the original's ε-greedy rule). Round 0
   has no uploads: no client downloads anything then (both FL-bench and the original code).
2. weights (:func:`fomo_scores`, :func:`fomo_weights`), on client i's validation split:
       s_n = (L_i(θ_i) − L_i(θ_n)) / ‖θ_n − θ_i‖,      w_n = max(0, s_n) / Σ_n' max(0, s_n'),
   L_i the mean cross-entropy on i's validation split, ‖·‖ the L2 norm of the trainable
   weights. A candidate at distance 0 (the same weights as θ_i) gets s_n = 0 (it can move
   nothing), never NaN; an all-zero row gives w = 0. All (client, model) pairs of the round
   — each selected client's own model and its candidates — are scored in ONE batched
   engine evaluation (row r's model on client owner[r]).
3. affinity (:func:`update_affinity`): P_i,n ← P_i,n + s_n for every candidate n (the raw,
   signed score, FL-bench's ``self.P[client_id] += weight_vector``).
4. first-order update (:func:`fomo_update`): θ_i ← θ_i + Σ_n w_n (θ_n − θ_i) (weights
   normalised over the candidates; all zero ⇒ θ_i unchanged, bit for bit);
5. the selected clients train locally from these models (one engine call), θ_i ← trained.

Evaluation: each client its own θ_i (``assignment`` = 0 … K − 1); a client never selected
keeps the initial model.

Defaults and their sources:

* M = 5: FL-bench's ``--M 5`` (``get_fedfomo_argparser``), the framework the pFedLIA paper ran
  its baselines with. (The authors' code, NVlabs/FedFomo ``federated/configs.py``, has
  ``NUM_UPDATE_CLIENTS = 8``.)
* ε = 0: FL-bench downloads the top-M by affinity with no exploration. The authors' ε-greedy
  (``CLIENT_WEIGHT.EPSILON = 0.3``, ``EPSILON_DECAY = 0.05`` per round) is available through
  ``epsilon`` and ``epsilon_decay`` (default 0.05, the original's).
* The candidate pool (the previous round's uploaders) and P = I follow FL-bench; the
  original's client weights start at 0.1 for itself and 0 for the others and add signed
  scores normalised by |Σ_n s_n| — the ranking differs only in scale per round.

Departures:

* FL-bench ranks the previous round's uploaders including the client itself (with P_ii = 1 it
  usually takes one of the M slots with its own model, which gets weight 0); here, as in the
  original code (``possible_clients = [c ... if c.id != self.id]``), the client is left out
  of the pool, so M slots go to other clients.
* FL-bench divides by ‖θ_n − θ_i‖ + 1e-5; here by the exact distance, with s_n = 0 at
  distance 0. A candidate with no finite validation loss (NaN: empty split; inf) gets
  s_n = 0; a selected client with an empty validation split therefore keeps its own model.
* The ties of the top-M ranking are broken by a seeded shuffle (the original's
  ``np.lexsort((random_vals, client_weights))``; torch.topk's tie order is unspecified).
* The update is applied to every floating-point tensor of the state (BatchNorm statistics
  included, which the workbook's models do not have); integer buffers keep θ_i's values.
* The original compares against the model before the last local epochs (``baseline_model``
  'first_model'); here, as FL-bench, against the client's current model θ_i.
* The protocol's optimiser replaces the paper's local SGD.

``info``: ``selected`` and ``candidates`` per round (the selected clients and the models
each downloaded), ``affinity`` (the final K × K matrix P) and ``weight_mass`` (K × K: Σ over
rounds of the normalised weights w that client i gave to client n's model) when K ≤ 100,
``top_candidates`` (each client's top-M of P, others only), ``never_selected``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..engine import broadcast, evaluate, flatten_params
from ..engine.host import to_host
from ..validation import check_int, check_number, fail
from .base import Context, Outcome, State, check_finite_models, run_rounds, sample_clients, take
from .contract import MethodInfo

NAME = "fedfomo"
GRID = {}  # FL-bench's defaults; pFedLIA tunes nothing for its baselines

__all__ = ["NAME", "GRID", "Hyper", "choose_candidates", "fomo_scores", "fomo_weights", "update_affinity",
           "fomo_update", "needs_validation", "run"]

_FULL_MATRIX_MAX_K = 100  # info carries the K × K matrices up to this many clients


@dataclass(frozen=True)
class Hyper:
    m: int = 5                    # M, models downloaded per client per round (FL-bench --M 5)
    epsilon: float = 0.0          # ε, exploration at round 0 (FL-bench: none; the original 0.3)
    epsilon_decay: float = 0.05   # ε_t = max(0, ε − t·decay) (the original's EPSILON_DECAY)

    def __post_init__(self):
        check_int(self.m, "m", 1)
        check_number(self.epsilon, "epsilon", 0, 1)
        check_number(self.epsilon_decay, "epsilon_decay", 0)


def _float_matrix(value, name: str, shape=None) -> np.ndarray:
    """A 2-D float64 array (of ``shape`` where given); NaN allowed."""
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        a = None
    if a is None or a.ndim != 2 or (shape is not None and a.shape != tuple(shape)):
        want = "a 2-D array of numbers" if shape is None else f"an array of numbers of shape {tuple(shape)}"
        fail(name, want, value)
    return a


def fomo_scores(loss_old, loss_candidates, distances) -> np.ndarray:
    """FedFomo's signed first-order scores s_in = (L_i(θ_i) − L_i(θ_n)) / ‖θ_n − θ_i‖, (M, N) float64.

    ``loss_old`` (M,): L_i(θ_i), each client's validation loss of its own model; ``loss_candidates``
    (M, N): L_i(θ_n) of its n-th candidate; ``distances`` (M, N): ‖θ_n − θ_i‖ ≥ 0. A non-finite
    loss on either side (NaN: no data or a padded slot; ±inf: a diverged model) or a zero
    distance (the candidate is θ_i itself) gives s = 0.
    """
    old = np.asarray(loss_old, dtype=np.float64) if _numeric(loss_old) else None
    if old is None or old.ndim != 1:
        fail("loss_old", "a 1-D array of numbers (M,)", loss_old)
    cand = _float_matrix(loss_candidates, "loss_candidates")
    if cand.shape[0] != old.shape[0]:
        fail("loss_candidates", f"an (M, N) array with M = len(loss_old) = {old.shape[0]}", loss_candidates)
    dist = _float_matrix(distances, "distances", cand.shape)
    if np.isnan(dist).any() or (dist < 0).any():
        fail("distances", "non-negative numbers (no NaN)", distances)
    gain = old[:, None] - cand
    with np.errstate(divide="ignore", invalid="ignore"):
        s = gain / dist
    return np.where((dist > 0) & np.isfinite(gain), s, 0.0)


def fomo_weights(loss_old, loss_candidates, distances) -> np.ndarray:
    """FedFomo's weights w_in = max(0, s_in) / Σ_n' max(0, s_in'), s and arguments as in :func:`fomo_scores`.

    (M, N) float64: each row sums to 1, or is all zero where no candidate improves on the
    client's own model (then the client keeps θ_i).
    """
    pos = np.maximum(fomo_scores(loss_old, loss_candidates, distances), 0.0)
    total = pos.sum(axis=1, keepdims=True)
    return np.divide(pos, total, out=np.zeros_like(pos), where=total > 0)


def _numeric(value) -> bool:
    try:
        np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return True


def fomo_update(own: State, candidates: State, weights) -> State:
    """θ_i ← θ_i + Σ_n w_in (θ_n − θ_i) for every row i.

    ``own`` (name -> (M, ...)): the models θ_i; ``candidates`` (name -> (M, N, ...)): row i's N
    candidates θ_n; ``weights`` (M, N): finite w_in, a zero row leaves θ_i unchanged bit for bit.
    Returns a stacked State (M, ...) in each tensor's dtype and device, computed in float64;
    integer tensors (buffers) keep θ_i's values.
    """
    w = _float_matrix(weights, "weights")
    if not np.isfinite(w).all():
        fail("weights", "finite numbers", weights)
    if set(own) != set(candidates):
        fail("candidates", f"a state with the names of own {sorted(own)}", sorted(candidates))
    for name, v in own.items():
        c = candidates[name]
        if v.ndim < 1 or c.ndim != v.ndim + 1 or c.shape[0] != v.shape[0] or c.shape[2:] != v.shape[1:] \
                or tuple(c.shape[:2]) != w.shape:
            fail("candidates", f"tensors (M, N, ...) with (M, N) = the weights' shape {w.shape} and "
                 f"'{name}' rows of shape {tuple(v.shape[1:])}", tuple(c.shape))
    keep = ~(w != 0).any(axis=1)
    out = {}
    for name, v in own.items():
        if not v.is_floating_point():
            out[name] = v.clone()
            continue
        wt = torch.as_tensor(w, dtype=torch.float64, device=v.device)
        base = v.double()
        diff = candidates[name].double() - base.unsqueeze(1)
        new = (base + torch.einsum("mn,mn...->m...", wt, diff)).to(v.dtype)
        mask = torch.as_tensor(keep, device=v.device).reshape(-1, *([1] * (v.ndim - 1)))
        out[name] = torch.where(mask, v, new)
    return out


def choose_candidates(affinity, clients, pool, m: int, rng: np.random.Generator,
                      epsilon: float = 0.0) -> np.ndarray:
    """The M models each client downloads: the top-M of its affinity row among ``pool``
    (itself left out), ties broken at random, each slot explored with probability ε.

    For client i: the pool without i is ranked by P_i,n (descending; ties by a random key) and
    shuffled once; each of min(M, |pool \\ {i}|) slots draws u ~ U(0, 1) and takes the next
    not yet chosen client of the shuffle if u < ε, else of the ranking (the original's
    ``get_federating_clients``, method 'e_greedy'). The draws do not depend on ε.

    ``affinity`` (K, K): P; ``clients`` (S,): the distinct ids that download; ``pool``: the
    previous round's uploaders; m ≥ 1; ε in [0, 1]. Returns (S, m) int64 client ids, each row
    padded with −1 where the pool (without the client itself) has fewer than m clients.
    """
    p = _float_matrix(affinity, "affinity")
    k = p.shape[0]
    if p.shape != (k, k) or np.isnan(p).any():
        fail("affinity", "a square (K, K) array of numbers (no NaN)", affinity)
    clients = _ids(clients, "clients", k)
    pool = _ids(pool, "pool", k)
    m = check_int(m, "m", 1)
    epsilon = check_number(epsilon, "epsilon", 0, 1)
    if not isinstance(rng, np.random.Generator):
        fail("rng", "a numpy Generator (np.random.default_rng)", rng)
    out = np.full((len(clients), m), -1, dtype=np.int64)
    pool = np.unique(pool)
    for row, i in enumerate(clients):
        possible = pool[pool != i]
        if possible.size == 0:
            continue
        ranked = list(possible[np.lexsort((rng.random(possible.size), p[i, possible]))[::-1]])
        shuffled = list(rng.permutation(possible))
        chosen = []
        for slot in range(min(m, possible.size)):
            source = shuffled if rng.random() < epsilon else ranked
            while source[0] in chosen:
                source.pop(0)
            chosen.append(source.pop(0))
        out[row, :len(chosen)] = chosen
    return out


def _ids(value, name: str, k: int) -> np.ndarray:
    """A 1-D array of client ids in [0, k)."""
    a = np.asarray(value)
    if a.ndim != 1 or (a.size and (a.dtype.kind not in "iu" or a.min() < 0 or a.max() >= k)):
        fail(name, f"a 1-D array of client ids in [0, {k})", value)
    return a.astype(np.int64)


def update_affinity(affinity, clients, candidates, scores) -> np.ndarray:
    """P_i,n ← P_i,n + s_in for every client i of ``clients`` and its candidates n (FL-bench).

    ``affinity`` (K, K); ``clients`` (S,); ``candidates`` (S, N) ids, −1 for an empty slot
    (ignored); ``scores`` (S, N) from :func:`fomo_scores`. Returns a new (K, K) float64 matrix.
    """
    p = _float_matrix(affinity, "affinity").copy()
    k = p.shape[0]
    if p.shape != (k, k):
        fail("affinity", "a square (K, K) array of numbers", affinity)
    clients = _ids(clients, "clients", k)
    cand = np.asarray(candidates)
    if cand.ndim != 2 or cand.shape[0] != len(clients) or (cand.size and (
            cand.dtype.kind not in "iu" or cand.min() < -1 or cand.max() >= k)):
        fail("candidates", f"an (S, N) array of client ids in [0, {k}) or −1, S = len(clients)", candidates)
    s = _float_matrix(scores, "scores", cand.shape)
    used = cand >= 0
    if not np.isfinite(s[used]).all():
        fail("scores", "finite numbers wherever a candidate is given", scores)
    rows = np.broadcast_to(clients[:, None], cand.shape)
    np.add.at(p, (rows[used], cand[used]), s[used])
    return p


def needs_validation(hp: Hyper) -> bool:
    """Always: the weights w_n are measured on each client's validation split
    (:meth:`fedlib.experiment.RunSpec.validate` refuses val_fraction = 0 before any work)."""
    return True


def _round_scores(ctx: Context, local: State, clients: np.ndarray, cand: np.ndarray, names) -> tuple:
    """Validation losses and distances of one round, from one batched evaluation.

    Returns (loss_old (S,), loss_candidates (S, N) NaN on empty slots, distances (S, N)
    0 on empty slots) for the selected ``clients`` and their candidates ``cand`` (S, N).
    """
    s, n = cand.shape
    used = cand >= 0
    # rows: every client's own model, then all used candidate slots (row-major)
    models = np.concatenate([clients, cand[used]])
    owner = np.concatenate([clients, np.broadcast_to(clients[:, None], cand.shape)[used]])
    res = evaluate(ctx.model, take(local, models), ctx.fed, owner, split="val")
    loss = to_host(res.mean_loss, np.float64)
    loss_old = loss[:s]
    loss_cand = np.full((s, n), np.nan)
    loss_cand[used] = loss[s:]
    flat = flatten_params(take(local, models), names).double()
    dist_rows = (flat[s:] - flat[:s][torch.as_tensor(np.nonzero(used)[0], device=flat.device)]).norm(dim=1)
    dist = np.zeros((s, n))
    dist[used] = to_host(dist_rows, np.float64)
    return loss_old, loss_cand, dist


def run(ctx: Context, hp: Hyper) -> Outcome:
    """FedFomo over ``ctx.cfg.rounds`` rounds; K personalised models, each client its own."""
    if int(ctx.fed.n_val.sum()) == 0:
        fail("the federation's validation split", "non-empty for fedfomo (the weights w_n are measured on "
             "each client's validation data): use val_fraction > 0, e.g. RunSpec(val_fraction=0.2)",
             "0 validation samples")
    k = ctx.n_clients
    everyone = np.arange(k)
    names = [name for name, _ in ctx.model.named_parameters()]

    def step(t: int, state: dict) -> dict:  # one round; everything FedFomo carries is in `state`
        local, affinity, mass = state["local"], state["affinity"], state["mass"]
        clients = sample_clients(state["rng"], everyone, ctx.cfg.fraction)
        eps = max(0.0, hp.epsilon - t * hp.epsilon_decay)
        cand = choose_candidates(affinity, clients, state["prev"], hp.m, state["rng_cand"], eps)
        start = take(local, clients)
        if (cand >= 0).any():
            loss_old, loss_cand, dist = _round_scores(ctx, local, clients, cand, names)
            scores = fomo_scores(loss_old, loss_cand, dist)
            w = fomo_weights(loss_old, loss_cand, dist)
            affinity = update_affinity(affinity, clients, cand, scores)
            used = cand >= 0
            np.add.at(mass, (np.broadcast_to(clients[:, None], cand.shape)[used], cand[used]), w[used])
            rows = np.where(used, cand, clients[:, None])  # empty slots: the own model, weight 0
            stacked = take(local, rows.reshape(-1))
            stacked = {name: v.reshape(len(clients), cand.shape[1], *v.shape[1:]) for name, v in stacked.items()}
            start = fomo_update(start, stacked, w)
            check_finite_models(start, t, "after the FedFomo update", ctx.cfg)
        res = ctx.train(start, clients, t)
        for name, value in res.params.items():
            local[name][torch.as_tensor(clients, device=value.device)] = value
        ctx.log_round(t, local, everyone)
        return {**state, "local": local, "affinity": affinity, "mass": mass, "prev": clients,
                "selected": [*state["selected"], clients.tolist()],
                "downloaded": [*state["downloaded"], [[int(c) for c in row if c >= 0] for row in cand]]}

    state = {"local": broadcast(ctx.init_state(), k), "affinity": np.eye(k), "mass": np.zeros((k, k)),
             "rng": ctx.rng("selection/group0"), "rng_cand": ctx.rng("fedfomo/candidates"),
             "prev": np.zeros(0, dtype=np.int64), "selected": [], "downloaded": []}
    state = run_rounds(ctx, range(ctx.cfg.rounds), state, step)
    local, affinity, mass = state["local"], state["affinity"], state["mass"]
    selected, downloaded = state["selected"], state["downloaded"]
    trained = np.unique(np.concatenate([np.asarray(s, dtype=np.int64) for s in selected]))
    off = affinity.copy()
    np.fill_diagonal(off, -np.inf)
    top = np.argsort(-off, axis=1, kind="stable")[:, :min(hp.m, k - 1)]
    info = {"selected": selected, "candidates": downloaded, "top_candidates": top.tolist(),
            "never_selected": np.setdiff1d(everyone, trained).tolist()}
    if k <= _FULL_MATRIX_MAX_K:
        info["affinity"] = affinity.tolist()
        info["weight_mass"] = mass.tolist()
    return Outcome(local, everyone.copy(), info)


INFO = MethodInfo(NAME, "FedFomo", Hyper, run, grid=GRID, needs_validation=needs_validation, resumable=True)
