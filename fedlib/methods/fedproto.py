"""FedProto — federated prototype learning (Tan, Long, Liu, Zhou, Lu, Jiang & Zhang, AAAI 2022).

Clients share no weights: each keeps a personal model (all K start from the seeded initial
model, ``ctx.init_state()``) and exchanges only class prototypes, the mean embedding of
each class, f = :func:`fedlib.models.body` (every layer but the classifier). Each round t,
with S_t the m = max(1, ⌊q·K⌋) clients drawn uniformly from the stream
``"selection/group0"`` (the same clients as FedAvg):

1. every i ∈ S_t trains its own model for E epochs on

       L_i = CE(h(f(x)), y) + λ · dist(f(x), C̄_y)        (the paper's Eq. 8)

   pulled toward the current global prototypes C̄ (engine:
   :class:`fedlib.engine.optim.EmbeddingPull`; no pull in round 0, when none exist, and
   none for samples whose class has no global prototype);
2. it computes its local prototypes C_i^c = mean of f_i(x) over its train samples of
   class c with its trained model (:func:`fedlib.engine.prototypes.class_embeddings`);
3. the server averages them per class (:func:`aggregate_prototypes`):
   C̄_c = (1/|N_c|) Σ_{i ∈ N_c} C_i^c, N_c = the round's clients holding class c — a
   plain mean over clients, as the paper's Eq. 6 is implemented in the authors' code
   (``proto_aggregation``) and in FL-bench (``FedProtoServer.aggregate_prototypes``);
   ``weighting='samples'`` weights by |D_{i,c}| instead (the paper's Eq. 6 writes
   |D_{i,c}|/N_c, which its code does not apply);
4. classes no client of the round holds keep their previous global prototype
   (``unseen='keep'``, the default here; :func:`merge_prototypes`). FL-bench rebuilds the
   prototype dictionary from the round's clients only, dropping such classes
   (``unseen='drop'``). With partial participation (q = 0.1) and label skew, dropping
   leaves clients of unsampled clusters without a pull and, under nearest-prototype
   prediction, without their own classes.

Prediction (``predict``): ``'head'`` — each client's own model with its classifier, the
default because it is what FL-bench evaluates (``FedProtoClient`` keeps ``FedAvgClient``'s
``evaluate``: the personal model's logits), and pFedLIA ran FedProto through FL-bench;
``'prototype'`` — FedProto's inference, argmin_c ‖f_i(x) − C̄_c‖² over the classes with a
global prototype (:class:`fedlib.engine.predict.NearestPrototype`; the authors' code
reports it beside the local head).

Defaults and their source
-------------------------
``lam`` λ = 1: the authors' code (``--ld``, default 1, "weight of proto loss") and
FL-bench (``--lamda``, default 1); the paper leaves it open.
``scale='mse'``: both codes take dist = ``MSELoss`` (mean over the batch and the D
embedding dimensions); the engine's pull is λ_e · mean over the batch's samples with a
prototype of the *summed* squared distance, so the engine weight is λ_e = λ / D
(:func:`pull_weight`). ``'sum'``: λ_e = λ (the squared L2 distance itself).

Departures
----------
* Local prototypes are computed after training, in eval mode, over the whole train split
  (the rule as written in the paper, step 2). The authors' code averages the embeddings
  seen during the last local epoch (train mode, weights still moving); FL-bench averages
  those of all E epochs.
* MSE normalisation: the codes' ``MSELoss`` divides by B·D with B the whole batch (samples
  without a prototype contribute a zero error but count in B); the engine divides by the
  number of samples *with* a prototype. They agree whenever every class of the batch has a
  global prototype (always, with ``unseen='keep'``, once each class has been seen).
* FL-bench applies ``F.relu`` to the embeddings; every body here whose output feeds the
  classifier through a ReLU already ends in it (MLP, CNNs, LeNet-5), logistic's body is
  the identity on the flattened input (no ReLU, as the math has none). FL-bench also skips
  one-sample batches; here they train, as for every method.
* The protocol's optimiser (``FLConfig``) replaces the authors' SGD.

``info``: ``selected`` (per round, the trained clients), ``prototype_classes`` (per round,
the classes with a global prototype after it), ``final_prototype_classes``, ``pull_weight``
(λ_e), ``predict``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..engine.host import to_host
from ..engine.optim import EmbeddingPull
from ..engine.predict import NearestPrototype
from ..engine.prototypes import class_embeddings
from ..models import head
from ..validation import check_choice, check_int, check_number, fail
from .base import Context, Outcome, State, run_rounds, sample_clients, take
from .contract import MethodInfo

NAME = "fedproto"
GRID = {}  # pFedLIA ran FL-bench's defaults (λ = 1)

__all__ = ["NAME", "GRID", "Hyper", "aggregate_prototypes", "merge_prototypes", "pull_weight", "run"]


@dataclass(frozen=True)
class Hyper:
    lam: float = 1.0           # λ: the authors' --ld and FL-bench's --lamda default
    predict: str = "head"      # FL-bench's evaluation: the personal model's classifier
    scale: str = "mse"         # dist = MSELoss (both codes): engine weight λ / D
    unseen: str = "keep"       # classes no client of the round holds keep their prototype
    weighting: str = "clients"  # plain mean over the round's clients (both codes)

    def __post_init__(self):
        check_number(self.lam, "lam", 0)
        check_choice(self.predict, "predict", ("head", "prototype"))
        check_choice(self.scale, "scale", ("mse", "sum"))
        check_choice(self.unseen, "unseen", ("keep", "drop"))
        check_choice(self.weighting, "weighting", ("clients", "samples"))


def aggregate_prototypes(means, counts, weighting: str = "clients") -> tuple[torch.Tensor, torch.Tensor]:
    """The server's global prototypes from the round's local ones (Eq. 6 as implemented).

    ``means`` (M, C, D): client i's prototype of class c (its mean embedding), ignored where
    counts[i, c] = 0; ``counts`` (M, C): client i's train samples of class c (≥ 0). ``weighting``
    ``'clients'``: C̄_c = mean of the C_i^c over the clients with counts[i, c] > 0 (the authors'
    code, FL-bench); ``'samples'``: weighted by counts[i, c] (= the mean embedding of all their
    samples of class c). Returns (Tensor (C, D) float64: the global prototypes, 0 where no client
    holds the class; Tensor (C,) bool: which classes have one), on ``means``'s device.
    """
    check_choice(weighting, "weighting", ("clients", "samples"))
    p = torch.as_tensor(means)
    n = torch.as_tensor(counts, device=p.device)
    if p.dim() != 3 or not p.is_floating_point():
        fail("means", "a float (M, C, D) array of prototypes", tuple(p.shape))
    if tuple(n.shape) != tuple(p.shape[:2]) or n.is_floating_point() or n.dtype == torch.bool:
        fail("counts", f"an integer array of shape {tuple(p.shape[:2])} (M, C)", tuple(n.shape))
    if p.device.type != "meta" and bool((n < 0).any()):  # meta tensors hold no values
        fail("counts", "non-negative sample counts", "a negative count")
    present = n > 0
    w = (present if weighting == "clients" else n).to(torch.float64)   # (M, C)
    p = torch.where(present.unsqueeze(-1), p.to(torch.float64), 0.0)  # absent rows may hold NaN
    total = w.sum(0)                                                   # (C,)
    glob = (w.unsqueeze(-1) * p).sum(0) / total.clamp(min=1).unsqueeze(-1)
    return glob, total > 0


def merge_prototypes(old, old_mask, new, new_mask, unseen: str = "keep") -> tuple[torch.Tensor, torch.Tensor]:
    """Next round's global prototypes: this round's where it has one, else the old (``'keep'``)
    or none (``'drop'``, FL-bench).

    ``old``, ``new`` (C, D); masks (C,) bool. Returns ((C, D), (C,) bool), zeros where the mask is False.
    """
    check_choice(unseen, "unseen", ("keep", "drop"))
    old, new = torch.as_tensor(old), torch.as_tensor(new)
    old_mask, new_mask = torch.as_tensor(old_mask), torch.as_tensor(new_mask)
    if old.dim() != 2 or old.shape != new.shape:
        fail("new", f"a (C, D) array of the shape of old, {tuple(old.shape)}", tuple(new.shape))
    for name, mask in (("old_mask", old_mask), ("new_mask", new_mask)):
        if mask.dtype != torch.bool or tuple(mask.shape) != (old.shape[0],):
            fail(name, f"a bool array of shape ({old.shape[0]},)", f"{mask.dtype} {tuple(mask.shape)}")
    mask = new_mask | old_mask if unseen == "keep" else new_mask
    merged = torch.where(new_mask.unsqueeze(-1), new, torch.where(old_mask.unsqueeze(-1), old.to(new.dtype), 0.0))
    return torch.where(mask.unsqueeze(-1), merged, 0.0), mask


def pull_weight(lam: float, dim: int, scale: str = "mse") -> float:
    """The engine's pull weight λ_e for FedProto's λ: λ / D (``'mse'``: dist = MSELoss, the mean
    over the D embedding dimensions, as in both codes) or λ (``'sum'``: squared L2)."""
    lam = check_number(lam, "lam", 0)
    dim = check_int(dim, "dim", 1)
    check_choice(scale, "scale", ("mse", "sum"))
    return lam / dim if scale == "mse" else lam


def _put(models: State, rows, new: State) -> State:
    idx = torch.as_tensor(np.asarray(rows, dtype=np.int64))
    return {k: v.index_copy(0, idx.to(v.device), new[k].to(v.dtype)) for k, v in models.items()}


def _predictor(hp: Hyper, glob: torch.Tensor, mask: torch.Tensor, k: int):
    if hp.predict == "head":
        return None
    if not bool(mask.any()):
        fail("predict", "'head' when no client holds train samples ('prototype' needs at least one "
             "global prototype)", hp.predict)
    return NearestPrototype(glob.to(torch.float32).expand(k, *glob.shape), mask.expand(k, *mask.shape))


def run(ctx: Context, hp: Hyper) -> Outcome:
    k, n_classes, device = ctx.n_clients, ctx.fed.n_classes, ctx.fed.device
    dim = head(ctx.model).in_features
    weight = pull_weight(hp.lam, dim, hp.scale)
    models = {name: t.unsqueeze(0).expand(k, *t.shape).clone() for name, t in ctx.init_state().items()}
    everyone = np.arange(k, dtype=np.int64)

    def step(t: int, state: tuple) -> tuple:  # one round; everything it carries is in `state`
        models, glob, mask, rng, selected, classes = state
        clients = sample_clients(rng, everyone, ctx.cfg.fraction)
        m = len(clients)
        pull = EmbeddingPull(torch.full((m,), weight if bool(mask.any()) else 0.0, device=device),
                             glob.to(torch.float32).expand(m, n_classes, dim), mask.expand(m, n_classes))
        res = ctx.train(take(models, clients), clients, t, embedding_pull=pull)
        models = _put(models, clients, res.params)
        local = class_embeddings(ctx.model, res.params, ctx.fed, clients, split="train")
        means, _ = local.means()
        new, new_mask = aggregate_prototypes(means, local.counts, hp.weighting)
        glob, mask = merge_prototypes(glob, mask, new, new_mask, hp.unseen)
        ctx.log_round(t, models, everyone, _predictor(hp, glob, mask, k))
        return (models, glob, mask, rng, [*selected, clients.tolist()],
                [*classes, np.flatnonzero(to_host(mask, np.bool_)).tolist()])

    state = (models, torch.zeros(n_classes, dim, dtype=torch.float64, device=device),
             torch.zeros(n_classes, dtype=torch.bool, device=device), ctx.rng("selection/group0"), [], [])
    models, glob, mask, _, selected, classes = run_rounds(ctx, range(ctx.cfg.rounds), state, step)
    predictor = _predictor(hp, glob, mask, k) if ctx.cfg.rounds else None
    info = {"selected": selected, "prototype_classes": classes,
            "final_prototype_classes": classes[-1] if classes else [],
            "pull_weight": float(weight), "predict": hp.predict}
    return Outcome(models, everyone.copy(), info, predictor)


INFO = MethodInfo(NAME, "FedProto", Hyper, run, grid=GRID, resumable=True)
