"""Local-only training: every client trains its own model on its own data, no
communication. Each client runs ``epochs`` epochs (default T·E = the protocol's
rounds × local epochs) in one engine call, all clients at once, with the protocol's
optimiser (``FLConfig.optimizer``: Adam by default, or SGD), whose state runs on across
all those epochs (one call: never reset between the T rounds)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..validation import check_int
from .base import Context, Outcome
from ..engine import broadcast
from .contract import MethodInfo

NAME = "local"


@dataclass(frozen=True)
class Hyper:
    epochs: int | None = None  # None: rounds × local_epochs

    def __post_init__(self):
        check_int(self.epochs, "epochs", 1, optional=True)


def run(ctx: Context, hp: Hyper) -> Outcome:
    epochs = ctx.cfg.rounds * ctx.cfg.local_epochs if hp.epochs is None else hp.epochs
    k = ctx.n_clients
    res = ctx.train(broadcast(ctx.init_state(), k, copy=False), np.arange(k), 0, epochs=epochs)
    assignment = np.arange(k)
    ctx.log_round(ctx.cfg.rounds - 1, res.params, assignment)
    return Outcome(res.params, assignment, {"epochs": int(epochs)})


INFO = MethodInfo(NAME, "Local", Hyper, run)
