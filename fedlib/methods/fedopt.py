"""FedAvgM, FedAdagrad, FedYogi and FedAdam: FedAvg's clients, an optimiser on the server.

Every round the selected clients train from the global model ``w`` exactly as in FedAvg
(Adam, lr 0.001 — Table II's "All" row); the server takes their sample-weighted average
``a`` and treats it as one step of a server optimiser:

FedAvgM (Hsu et al., 2019; Flower's ``FedAvgM``)
    d = w − a (note the sign); buffer b = d in round 1, b = μ·b + d after; w ← w − η_s·b.
    With μ = 0 and η_s = 1 Flower skips the server step and returns ``a`` itself, and so
    does :func:`fedavgm_step`: FedAvgM(0) *is* FedAvg, bit for bit.
FedAdagrad / FedYogi / FedAdam (Reddi et al., 2021, "Adaptive federated optimization")
    Δ = a − w;  m ← β1·m + (1−β1)·Δ;  w ← w + η_t·m / (√v + τ), with
    v ← v + Δ² (Adagrad), v ← v − (1−β2)·Δ²·sign(v − Δ²) (Yogi), v ← β2·v + (1−β2)·Δ² (Adam).

The PSI papers ran Flower's strategies, which differ from Reddi et al.; ``variant`` picks:

===========================  ===============================  ==========================
                             ``'flower'`` (default)           ``'reddi'``
===========================  ===============================  ==========================
v₀                           0                                τ²
FedAdagrad's β1              0 (m = Δ, no first moment)       0.9
FedAdam's η_t                η·√(1−β2^(r+1)) / (1−β1^(r+1)),  η (no bias correction)
                             r = server round from 1
FedYogi's η_t                η                                η
===========================  ===============================  ==========================

Flower's FedAdam exponent is r + 1 with r starting at 1, i.e. one more than Kingma & Ba's
α_t (whose first step uses exponent 1); this module reproduces Flower's off-by-one.
Older Flower releases had no bias correction at all (plain η, as ``'reddi'``); the
paper does not say which release it ran.

Table II's η_l (client learning rate, best value 1) is kept in each ``Hyper`` for the
record only: Flower's strategies store ``eta_l`` without using it, and the clients train
with Adam at the protocol's lr 0.001 (``FLConfig.lr``), as the paper's "All" row says.

The server optimiser acts on the trainable parameters only (``model.named_parameters()``);
float buffers — BatchNorm's ``running_mean``/``running_var`` — take the FedAvg aggregate.
Flower with Keras applied it to every weight array, moving statistics included (at
η = 0.001 they then barely leave their initial values); averaging them is the sound choice.

Rules are pure functions over flat tensors (any shape, element-wise; the run flattens the
trainable parameters to one vector of P entries); each method's state is one small frozen
dataclass that every step returns anew.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import torch

from ..validation import check_choice, check_number
from .base import Context, Outcome, State, global_model_rounds
from .contract import MethodInfo

VARIANTS = ("flower", "reddi")
REDDI_ADAGRAD_BETA1 = 0.9  # Reddi et al.'s β1 for all three adaptive optimisers


# ----------------------------------------------------------------------------- hyperparameters
def _check(hp) -> None:
    """Validate a Hyper's fields (those it has) with messages naming the parameter."""
    for name in ("eta", "tau", "server_lr", "eta_l"):
        check_number(getattr(hp, name, 1.0), name, 0, low_open=True)
    for name in ("beta_1", "beta_2", "momentum"):
        check_number(getattr(hp, name, 0.0), name, 0, 1, high_open=True)
    check_choice(getattr(hp, "variant", "flower"), "variant", VARIANTS)


@dataclass(frozen=True)
class FedAvgMHyper:
    momentum: float = 0.7   # Table II (grid {0.7, 0.9, 0.99})
    server_lr: float = 1.0  # Flower's default server_learning_rate; not in Table II

    def __post_init__(self):
        _check(self)


@dataclass(frozen=True)
class FedAdagradHyper:
    eta: float = 0.3162     # Table II
    tau: float = 0.1        # Table II
    eta_l: float = 1.0      # Table II; recorded only (clients use FLConfig.lr)
    variant: str = "flower"

    def __post_init__(self):
        _check(self)


@dataclass(frozen=True)
class FedYogiHyper:
    eta: float = 0.001      # Table II
    tau: float = 0.01       # Table II
    beta_1: float = 0.9     # Table II
    beta_2: float = 0.99    # Table II
    eta_l: float = 1.0      # Table II; recorded only (clients use FLConfig.lr)
    variant: str = "flower"

    def __post_init__(self):
        _check(self)


@dataclass(frozen=True)
class FedAdamHyper:
    eta: float = 0.001      # Table II
    tau: float = 0.001      # Table II
    beta_1: float = 0.9     # Table II
    beta_2: float = 0.99    # Table II
    eta_l: float = 1.0      # Table II; recorded only (clients use FLConfig.lr)
    variant: str = "flower"

    def __post_init__(self):
        _check(self)


# ----------------------------------------------------------------------------- server state
@dataclass(frozen=True)
class MomentumState:
    """FedAvgM's server state: the momentum buffer b, shape (P,); None before round 1."""

    buffer: torch.Tensor | None = None


@dataclass(frozen=True)
class MomentsState:
    """FedAdagrad/FedYogi/FedAdam's server state.

    m, v : Tensor, shape (P,) — first and second moments of the pseudo-gradient.
    rounds : int — server steps taken so far (FedAdam's bias correction needs it).
    """

    m: torch.Tensor
    v: torch.Tensor
    rounds: int = 0


def init_momentum(w: torch.Tensor, hp: FedAvgMHyper) -> MomentumState:
    """FedAvgM's state before round 1 (no buffer yet)."""
    return MomentumState()


def init_moments(w: torch.Tensor, hp) -> MomentsState:
    """m₀ = 0; v₀ = 0 (Flower) or τ² (Reddi et al.); shapes of ``w`` (P,)."""
    v0 = hp.tau ** 2 if hp.variant == "reddi" else 0.0
    return MomentsState(torch.zeros_like(w), torch.full_like(w, v0))


# ----------------------------------------------------------------------------- pure rules
def first_moment(m: torch.Tensor, delta: torch.Tensor, beta_1: float) -> torch.Tensor:
    """m ← β1·m + (1−β1)·Δ (element-wise; (P,) in, (P,) out)."""
    return beta_1 * m + (1 - beta_1) * delta


def adagrad_second_moment(v: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """v ← v + Δ²."""
    return v + delta * delta


def yogi_second_moment(v: torch.Tensor, delta: torch.Tensor, beta_2: float) -> torch.Tensor:
    """v ← v − (1−β2)·Δ²·sign(v − Δ²): v moves towards Δ² by (1−β2)·Δ² (additively)."""
    d2 = delta * delta
    return v - (1.0 - beta_2) * d2 * torch.sign(v - d2)


def adam_second_moment(v: torch.Tensor, delta: torch.Tensor, beta_2: float) -> torch.Tensor:
    """v ← β2·v + (1−β2)·Δ²."""
    return beta_2 * v + (1 - beta_2) * delta * delta


def bias_corrected_lr(eta: float, beta_1: float, beta_2: float, k: int) -> float:
    """Kingma & Ba's α_k = η·√(1−β2^k) / (1−β1^k); Flower's FedAdam uses k = round + 1."""
    return eta * math.sqrt(1 - beta_2 ** k) / (1 - beta_1 ** k)


def adaptive_update(w: torch.Tensor, m: torch.Tensor, v: torch.Tensor, eta: float,
                    tau: float) -> torch.Tensor:
    """w + η·m / (√v + τ) (Flower's order of operations)."""
    return w + eta * m / (torch.sqrt(v) + tau)


def fedavgm_step(w: torch.Tensor, a: torch.Tensor, state: MomentumState,
                 hp: FedAvgMHyper) -> tuple[torch.Tensor, MomentumState]:
    """One FedAvgM server step (Flower's): d = w − a, b = d then μ·b + d, w − η_s·b.

    ``w``, ``a`` (P,): the global model and this round's weighted client average. Returns (the new
    global model (P,), ``a`` itself when μ = 0 and η_s = 1; the new MomentumState).
    """
    if hp.momentum == 0 and hp.server_lr == 1:
        return a, state
    d = w - a
    buffer = d if state.buffer is None else hp.momentum * state.buffer + d
    return w - hp.server_lr * buffer, MomentumState(buffer)


def fedadagrad_step(w: torch.Tensor, a: torch.Tensor, state: MomentsState,
                    hp: FedAdagradHyper) -> tuple[torch.Tensor, MomentsState]:
    """One FedAdagrad step: Δ = a − w, m (β1 = 0 for Flower, 0.9 for Reddi), v += Δ².

    Shapes as :func:`fedavgm_step`.
    """
    beta_1 = REDDI_ADAGRAD_BETA1 if hp.variant == "reddi" else 0.0
    delta = a - w
    m = first_moment(state.m, delta, beta_1)
    v = adagrad_second_moment(state.v, delta)
    return adaptive_update(w, m, v, hp.eta, hp.tau), MomentsState(m, v, state.rounds + 1)


def fedyogi_step(w: torch.Tensor, a: torch.Tensor, state: MomentsState,
                 hp: FedYogiHyper) -> tuple[torch.Tensor, MomentsState]:
    """One FedYogi step: Δ = a − w, m, Yogi's v, w + η·m/(√v + τ). Shapes as :func:`fedavgm_step`."""
    delta = a - w
    m = first_moment(state.m, delta, hp.beta_1)
    v = yogi_second_moment(state.v, delta, hp.beta_2)
    return adaptive_update(w, m, v, hp.eta, hp.tau), MomentsState(m, v, state.rounds + 1)


def fedadam_step(w: torch.Tensor, a: torch.Tensor, state: MomentsState,
                 hp: FedAdamHyper) -> tuple[torch.Tensor, MomentsState]:
    """One FedAdam step: Δ = a − w, m, Adam's v; η bias-corrected with k = r + 1 (Flower,
    r = this server round, from 1) or plain η (Reddi). Shapes as :func:`fedavgm_step`."""
    delta = a - w
    rounds = state.rounds + 1
    m = first_moment(state.m, delta, hp.beta_1)
    v = adam_second_moment(state.v, delta, hp.beta_2)
    eta = (bias_corrected_lr(hp.eta, hp.beta_1, hp.beta_2, rounds + 1) if hp.variant == "flower"
           else hp.eta)
    return adaptive_update(w, m, v, eta, hp.tau), MomentsState(m, v, rounds)


# ----------------------------------------------------------------------------- dict states
def flatten(state: State, names) -> torch.Tensor:
    """The tensors ``names`` of one (unstacked) state concatenated: shape (P,)."""
    return torch.cat([state[n].reshape(-1) for n in names])


def unflatten(vector: torch.Tensor, like: State, names) -> State:
    """Inverse of :func:`flatten`: (P,) back to ``name -> like[name].shape`` for ``names``."""
    parts = torch.split(vector, [like[n].numel() for n in names])
    return {n: p.view_as(like[n]) for n, p in zip(names, parts)}


def server_update(rule: Callable, current: State, aggregate: State, state, names) -> tuple[State, object]:
    """Apply a flat rule to the trainable tensors ``names``; every other tensor (BatchNorm
    statistics) takes the aggregate. States are unstacked ``name -> shape``."""
    w, state = rule(flatten(current, names), flatten(aggregate, names), state)
    return {**aggregate, **unflatten(w, aggregate, names)}, state


# ----------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class ServerOptimiser:
    """One method of this module: NAME, Hyper, GRID (Table II) and ``run(ctx, hp)``; ``INFO`` is
    its registry entry (:class:`fedlib.methods.contract.MethodInfo`)."""

    NAME: str
    Hyper: type
    GRID: dict = field(hash=False)
    init: Callable
    step: Callable
    display_name: str

    @property
    def INFO(self) -> MethodInfo:  # noqa: N802 (the module-level name of a one-method module)
        # streams_average: all its training goes through global_model_rounds (FLConfig.stream_average)
        return MethodInfo(self.NAME, self.display_name, self.Hyper, self.run, grid=self.GRID, streams_average=True,
                          resumable=True)

    def run(self, ctx: Context, hp) -> Outcome:
        names = [n for n, _ in ctx.model.named_parameters()]
        state = self.init(flatten(ctx.init_state(), names), hp)
        rule = partial(self.step, hp=hp)
        return global_model_rounds(ctx, server_step=partial(server_update, rule, names=names), state=state)


METHODS = {
    "fedavgm": ServerOptimiser("fedavgm", FedAvgMHyper, {"momentum": [0.7, 0.9, 0.99]},
                               init_momentum, fedavgm_step, "FedAvgM"),
    "fedadagrad": ServerOptimiser("fedadagrad", FedAdagradHyper,
                                  {"tau": [0.01, 0.1], "eta": [0.1, 0.3162], "eta_l": [0.01, 1.0]},
                                  init_moments, fedadagrad_step, "FedAdagrad"),
    "fedyogi": ServerOptimiser("fedyogi", FedYogiHyper,
                               {"tau": [0.001, 0.01, 0.1], "eta": [0.001, 0.01], "eta_l": [0.01, 1.0],
                                "beta_1": [0.9, 0.99], "beta_2": [0.9, 0.99]},
                               init_moments, fedyogi_step, "FedYogi"),
    "fedadam": ServerOptimiser("fedadam", FedAdamHyper,
                               {"tau": [0.001, 0.01, 0.1], "eta": [0.001, 0.01], "eta_l": [0.01, 1.0],
                                "beta_1": [0.9, 0.99], "beta_2": [0.9, 0.99]},
                               init_moments, fedadam_step, "FedAdam"),
}

GRID = {name: method.GRID for name, method in METHODS.items()}
INFO = tuple(method.INFO for method in METHODS.values())
"""This module's registry entries, one per method, in :data:`METHODS`' order."""
