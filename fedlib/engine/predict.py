"""Prediction modes: how a method turns its client's model(s) into a class prediction.

A *predictor* is a small frozen dataclass chosen by the method; :func:`evaluate_with`
evaluates any of them on clients' data and returns the usual :class:`EvalResult`.

=====================  =====================================================================
``OneModel()``         arg-max of the row's own model (every method's default; routed to the
                       fast :func:`fedlib.engine.evaluate`, so results are identical to it)
``GatedMixture(...)``  FedPrism's dual-stream inference: the client's local expert's
                       confidence routes between expert and backbone
``NearestPrototype``   FedProto: the class whose prototype is nearest to the embedding
=====================  =====================================================================

Row i of ``params`` is client ``clients[i]``'s model (as in :func:`evaluate`); what a
predictor keeps per client (the expert, the prototypes) has one row per client of the
federation (K rows) and is indexed by client id.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from ..models import body, head_prefix
from ._validation import check_state
from .evaluate import EvalResult, _prepare, evaluate
from .federation import Federation
from .paths import clients_per_chunk, resolve_path
from .precision import exact
from .ragged import score_ragged

__all__ = ["OneModel", "GatedMixture", "NearestPrototype", "evaluate_with"]

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class OneModel:
    """Predict ``argmax_c model_i(x)_c`` with the row's own model (today's evaluation)."""


@dataclass(frozen=True, eq=False)
class GatedMixture:
    r"""FedPrism's confidence-aware dual-stream routing (Section 3.3.1 and Algorithm 1).

    The paper's rule, with ``Expert`` the client's local expert L_i and ``Backbone`` its
    collaborative model W_Backbone:

    .. math::

        \lambda(x) = \max\Big(\mathrm{Softmax}\big(\tfrac{\mathrm{Expert}(x)}{T}\big)\Big)
        \qquad (2)

        y_{pred} = \lambda(x)\cdot\mathrm{Expert}(x) + (1-\lambda(x))\cdot\mathrm{Backbone}(x)
        \qquad (3)

    and Algorithm 1, ``Inference(x)``: z_L ← L_i(x); p_L ← Softmax(z_L/T); c ← max(p_L);
    z_G ← W_Backbone(x); z_final ← c·z_L + (1−c)·z_G; return argmax(z_final).

    Where the paper is vague (choices made here, all exposed):

    * ``space='logits'`` (default) mixes the raw logits as Algorithm 1 does (Eq. (3)'s
      "Expert(x)" is the same quantity Eq. (2) divides by T, i.e. logits);
      ``space='probs'`` mixes the probabilities ``λ·Softmax(z_L) + (1−λ)·Softmax(z_G)``
      instead (a proper mixture of the two predictive distributions).
    * The temperature T only sharpens/softens the gate; the mixed streams are not divided
      by T. The paper gives no value for T: default 1.
    * ``weight``: a fixed λ in [0, 1] instead of the confidence, as in the paper's
      "inference weight" ablation (Tables 4 and 10: 0 = backbone only, 1 = expert only).
    * ``threshold``: hard routing, λ = 1[c ≥ threshold] (not in the paper; the T → 0
      limit of a sharp decision). ``weight`` and ``threshold`` exclude each other.

    The per-sample loss (``EvalResult.loss_sum``) is the cross-entropy of the mixed logits
    (``'logits'``) or −log of the mixed probability of the label (``'probs'``).

    Attributes
    ----------
    expert : dict of str to Tensor
        The local experts' stacked state, ``name -> (K, *shape)``: row k is client k's.
    temperature : float > 0
    space : {'logits', 'probs'}
    weight : float in [0, 1] or None
    threshold : float in [0, 1] or None
    expert_model : nn.Module or None
        The experts' architecture (default: the same as the backbone's).
    """

    expert: State
    temperature: float = 1.0
    space: str = "logits"
    weight: float | None = None
    threshold: float | None = None
    expert_model: nn.Module | None = None

    def __post_init__(self):
        if not isinstance(self.expert, dict) or not self.expert:
            raise ValueError(f"expert must be a non-empty dict name -> (K, *shape) Tensor, "
                             f"got {type(self.expert).__name__}")
        if not _is_real(self.temperature) or not (0 < self.temperature < math.inf):
            raise ValueError(f"temperature must be a finite number > 0, got {self.temperature!r}")
        if self.space not in ("logits", "probs"):
            raise ValueError(f"space must be 'logits' or 'probs', got {self.space!r}")
        for name in ("weight", "threshold"):
            value = getattr(self, name)
            if value is not None and (not _is_real(value) or not 0.0 <= value <= 1.0):
                raise ValueError(f"{name} must be a number in [0, 1] or None, got {value!r}")
        if self.weight is not None and self.threshold is not None:
            raise ValueError(f"give weight (a fixed λ) or threshold (a hard gate), not both, "
                             f"got weight={self.weight!r} and threshold={self.threshold!r}")

    def gate(self, z_expert: torch.Tensor) -> torch.Tensor:
        """λ(x) of Eq. (2) (or the fixed / hard variant): logits (..., C) → (..., 1)."""
        if self.weight is not None:
            return torch.full_like(z_expert[..., :1], float(self.weight))
        c = torch.softmax(z_expert / self.temperature, dim=-1).amax(dim=-1, keepdim=True)
        if self.threshold is not None:
            return (c >= self.threshold).to(z_expert.dtype)
        return c

    def mix(self, z_expert: torch.Tensor, z_backbone: torch.Tensor, labels: torch.Tensor):
        """Prediction and per-sample loss of the mixture: (..., C), (..., C), (...) → (...), (...)."""
        lam = self.gate(z_expert)
        if self.space == "logits":
            z = lam * z_expert + (1 - lam) * z_backbone
            nll = F.cross_entropy(z.flatten(0, -2), labels.flatten(), reduction="none").view_as(labels)
            return z.argmax(-1), nll
        p = lam * torch.softmax(z_expert, -1) + (1 - lam) * torch.softmax(z_backbone, -1)
        p_label = p.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        return p.argmax(-1), -p_label.clamp_min(torch.finfo(p.dtype).tiny).log()


@dataclass(frozen=True, eq=False)
class NearestPrototype:
    """FedProto's inference: ``argmin_{c : mask[k, c]} ‖body(x) − prototypes[k, c]‖²``.

    The embedding is ``fedlib.models.body(model)`` (every layer but the classifier) run
    with the row's weights; classes whose mask is False (no prototype) are never
    predicted. There is no probabilistic output, so ``EvalResult.loss_sum`` is NaN.

    Attributes
    ----------
    prototypes : Tensor, shape (K, C, D)
        Client k's prototype of class c (its own, or the global one FedProto sends back).
    mask : Tensor, shape (K, C), bool, optional
        Which prototypes exist (default: all).
    """

    prototypes: torch.Tensor
    mask: torch.Tensor | None = None

    def __post_init__(self):
        p = self.prototypes
        if not isinstance(p, torch.Tensor) or p.dim() != 3 or not p.is_floating_point():
            raise ValueError(f"prototypes must be a float Tensor of shape (K, C, D), got "
                             f"{getattr(p, 'dtype', type(p).__name__)} {tuple(getattr(p, 'shape', ()))}")
        mask = torch.ones(p.shape[:2], dtype=torch.bool) if self.mask is None else self.mask
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != tuple(p.shape[:2]):
            raise ValueError(f"mask must be a bool Tensor of shape {tuple(p.shape[:2])} (K, C), got "
                             f"{getattr(mask, 'dtype', type(mask).__name__)} {tuple(getattr(mask, 'shape', ()))}")
        object.__setattr__(self, "mask", mask)


Predictor = OneModel | GatedMixture | NearestPrototype


@torch.no_grad()
@exact
def evaluate_with(predictor: Predictor, model: nn.Module, params: State, fed: Federation, clients,
                  split: str = "test", batch_size: int = 256, path: str = "auto",
                  max_clients_per_chunk: int | None = None) -> EvalResult:
    """Accuracy counts of ``predictor`` (OneModel, GatedMixture or NearestPrototype) for row
    i = client ``clients[i]`` (M,) on its split, ``params`` ``name -> (M, *shape)`` of ``model``
    (GatedMixture: the backbone); the other arguments as in :func:`fedlib.engine.evaluate`.
    EvalResult: ``correct`` and ``n`` per row, ``loss_sum`` as the predictor documents.
    """

    if isinstance(predictor, OneModel):
        return evaluate(model, params, fed, clients, split, batch_size, path, max_clients_per_chunk)
    if not isinstance(predictor, (GatedMixture, NearestPrototype)):
        raise ValueError(f"predictor must be OneModel, GatedMixture or NearestPrototype, "
                         f"got {type(predictor).__name__}")
    clients, x, y, parts, template, state, chosen = _prepare(model, params, fed, clients, split, batch_size, path)
    clients_t = torch.as_tensor(clients, device=fed.device)
    if isinstance(predictor, GatedMixture):
        expert_template = copy.deepcopy(predictor.expert_model or model).to(fed.device).eval()
        expert = check_state(predictor.expert, expert_template, fed.n_clients, fed.device)
        expert = {n: t.index_select(0, clients_t) for n, t in expert.items()}
        chosen_e = resolve_path(path, expert_template, fed.device, training=False)
        prepare = _gated_scorer(predictor, _stacked_forward(template, chosen), state,
                                _stacked_forward(expert_template, chosen_e), expert)
        chunk = clients_per_chunk(template, x[:1], batch_size, False, max_clients_per_chunk)
        if max_clients_per_chunk is None:
            chunk = max(1, chunk // 2)  # two models per row
    else:
        prepare = _prototype_scorer(predictor, template, chosen, state, clients, fed)
        chunk = clients_per_chunk(template, x[:1], batch_size, False, max_clients_per_chunk)
    index = [parts[c] for c in clients]
    correct, loss_sum = score_ragged(prepare, x, y, index, batch_size, chunk)
    if isinstance(predictor, NearestPrototype):
        loss_sum = torch.full_like(loss_sum, math.nan)
    n = torch.as_tensor([len(i) for i in index], dtype=torch.int64, device=fed.device)
    return EvalResult(correct, n, loss_sum, chosen)


# ----------------------------------------------------------------------------- internals
def _stacked_forward(module: nn.Module, chosen: str):
    """``f(state (k, ...), xb (k, B, ...)) -> (k, B, out)``: row j's weights on row j's inputs."""
    if chosen == "vectorised":
        return vmap(lambda p, xb: functional_call(module, p, (xb,)))

    def loop(p, xb):
        return torch.stack([functional_call(module, {n: t[j] for n, t in p.items()}, (xb[j],))
                            for j in range(xb.shape[0])])
    return loop


def _gated_scorer(predictor: GatedMixture, forward_g, backbone: State, forward_e, expert: State):
    def prepare(rows_t):
        sub_g = {n: t.index_select(0, rows_t) for n, t in backbone.items()}
        sub_e = {n: t.index_select(0, rows_t) for n, t in expert.items()}

        def score(k, xb, labels):
            z_g = forward_g({n: t[:k] for n, t in sub_g.items()}, xb)
            z_e = forward_e({n: t[:k] for n, t in sub_e.items()}, xb)
            if z_g.shape != z_e.shape:
                raise ValueError(f"expert logits have shape {tuple(z_e.shape[2:])}, the backbone's "
                                 f"{tuple(z_g.shape[2:])}: both must output the same classes")
            return predictor.mix(z_e, z_g, labels)
        return score
    return prepare


def _prototype_scorer(predictor: NearestPrototype, template: nn.Module, chosen: str, state: State,
                      clients: np.ndarray, fed: Federation):
    protos, mask = predictor.prototypes, predictor.mask
    if protos.shape[0] != fed.n_clients:
        raise ValueError(f"prototypes must have one row per client, K={fed.n_clients}, got {protos.shape[0]}")
    bad = [int(c) for c in np.unique(clients) if not bool(mask[c].any())]
    if bad:
        raise ValueError(f"mask must allow at least one class for every evaluated client, "
                         f"got none for clients {bad}")
    clients_t = torch.as_tensor(clients, device=fed.device)
    protos = protos.to(fed.device, torch.float64).index_select(0, clients_t)  # (M, C, D)
    mask = mask.to(fed.device).index_select(0, clients_t)                    # (M, C)
    prefix = head_prefix(template)
    features = body(template)
    body_state = {n: t for n, t in state.items() if not n.startswith(prefix)}
    forward = _stacked_forward(features, chosen)

    def prepare(rows_t):
        sub = {n: t.index_select(0, rows_t) for n, t in body_state.items()}
        p, ok = protos.index_select(0, rows_t), mask.index_select(0, rows_t)

        def score(k, xb, labels):
            emb = forward({n: t[:k] for n, t in sub.items()}, xb).double()  # (k, B, D)
            if emb.shape[-1] != p.shape[-1]:
                raise ValueError(f"prototypes have dimension D={p.shape[-1]} but the body's "
                                 f"embeddings have {emb.shape[-1]}")
            dist = squared_distances(emb, p[:k])                           # (k, B, C)
            dist = dist.masked_fill(~ok[:k, None, :], math.inf)
            return dist.argmin(-1), torch.zeros_like(dist[..., 0])
        return score
    return prepare


def squared_distances(emb: torch.Tensor, prototypes: torch.Tensor) -> torch.Tensor:
    """‖e_b − p_c‖² for every embedding and prototype: (k, B, D), (k, C, D) → (k, B, C).

    Expanded as ‖e‖² − 2 e·p + ‖p‖² (no (k, B, C, D) intermediate); clamped at 0.
    """
    cross = torch.einsum("kbd,kcd->kbc", emb, prototypes)
    return (emb.pow(2).sum(-1, keepdim=True) - 2 * cross + prototypes.pow(2).sum(-1)[:, None, :]).clamp_min(0)


def _is_real(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
