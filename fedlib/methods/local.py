"""Local-only training: every client trains its own model on its own data, no
communication. Each client runs ``epochs`` epochs (default T·E = the protocol's
rounds × local epochs) in one engine call, all clients at once, with the protocol's
optimiser (``FLConfig.optimizer``: Adam by default, or SGD), whose state runs on across
all those epochs (one call: never reset between the T rounds); its history holds the last round only.

``per_round=True`` (issue 70: a history a convergence rule can read) trains the same T·E epochs as
T calls of E epochs, each client's optimiser state carried from one round to the next (as in the
one call), and logs every evaluated round like the other methods. Its mini-batch order is the
per-round one ((seed, round, client) streams, as every federated method draws), so its numbers
differ from the one-call reading's by the data order only; the default keeps the one call, which
the records before issue 70 ran."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import dataclasses

from ..validation import check_choice, check_int, fail
from .base import Context, Outcome
from ..engine import broadcast
from .contract import MethodInfo

NAME = "local"


@dataclass(frozen=True)
class Hyper:
    epochs: int | None = None  # None: rounds × local_epochs
    per_round: bool = False  # True: E epochs a round, every evaluated round logged (module docstring)

    def __post_init__(self):
        check_int(self.epochs, "epochs", 1, optional=True)
        check_choice(self.per_round, "per_round", (False, True))
        if self.per_round and self.epochs is not None:
            fail("epochs", "None with per_round=True (each round trains the protocol's E epochs)", self.epochs)


def run(ctx: Context, hp: Hyper) -> Outcome:
    epochs = ctx.cfg.rounds * ctx.cfg.local_epochs if hp.epochs is None else hp.epochs
    k = ctx.n_clients
    if hp.per_round:
        cfg, assignment = ctx.cfg, np.arange(k)
        ctx.cfg = dataclasses.replace(cfg, keep_optimizer_state=True)  # each client's optimiser runs on
        try:
            params = broadcast(ctx.init_state(), k, copy=False)
            for t in range(cfg.rounds):
                params = ctx.train(params, np.arange(k), t).params
                ctx.log_round(t, params, assignment)
        finally:
            ctx.cfg = cfg
        return Outcome(params, assignment, {"epochs": int(epochs)})
    res = ctx.train(broadcast(ctx.init_state(), k, copy=False), np.arange(k), 0, epochs=epochs)
    assignment = np.arange(k)
    ctx.log_round(ctx.cfg.rounds - 1, res.params, assignment)
    return Outcome(res.params, assignment, {"epochs": int(epochs)})


INFO = MethodInfo(NAME, "Local", Hyper, run)
