"""Centralised learning (CL): one model trained on the pooled training data of all
clients (same model, optimiser and batch size), evaluated on every client's test split.

The papers give CL's epoch budget nowhere; ``epochs`` defaults to E (5, the clients'
local epochs) — enough for the paper's CL accuracies on FMNIST (0.90) — and is
configurable.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..validation import check_int
from .base import Context, Outcome
from .contract import MethodInfo

NAME = "cl"


@dataclass(frozen=True)
class Hyper:
    epochs: int | None = None  # None: the protocol's local_epochs

    def __post_init__(self):
        check_int(self.epochs, "epochs", 1, optional=True)


def pooled(fed):
    """The federation seen as one client holding every client's train, validation and test data."""
    return dataclasses.replace(
        fed,
        train_parts=(np.sort(np.concatenate(fed.train_parts)),),
        test_parts=(np.sort(np.concatenate(fed.test_parts)),),
        val_parts=(np.sort(np.concatenate(fed.val_parts)),),
    )


def run(ctx: Context, hp: Hyper) -> Outcome:
    epochs = ctx.cfg.local_epochs if hp.epochs is None else hp.epochs
    one = dataclasses.replace(ctx, fed=pooled(ctx.fed), history=[])
    start = {k: v.unsqueeze(0) for k, v in ctx.init_state().items()}
    res = one.train(start, [0], 0, epochs=epochs)
    assignment = np.zeros(ctx.n_clients, dtype=np.int64)
    ctx.log_round(ctx.cfg.rounds - 1, res.params, assignment)
    return Outcome(res.params, assignment, {"epochs": int(epochs)})


INFO = MethodInfo(NAME, "CL", Hyper, run)
