"""``DivergenceError``: training produced non-finite weights or losses.

Raised by :func:`fedlib.engine.local_train` (clients whose weights or last-epoch loss became
NaN/±inf) and by the shared server loops of :mod:`fedlib.methods.base` (a server model that
became non-finite after aggregation or a server optimiser step). It carries method-agnostic
facts; callers that know more (the round, the method's name) add them with
:meth:`DivergenceError.with_context`, and :func:`fedlib.experiment.run` turns it into a
record with status ``"failed"`` and no metrics.
"""
from __future__ import annotations

__all__ = ["DivergenceError"]


def _rebuild(fields: dict) -> "DivergenceError":
    return DivergenceError(**fields)


class DivergenceError(ValueError):
    """Training diverged: some weights or losses are NaN or ±inf.

    Attributes
    ----------
    clients : list of int
        Client ids whose weights or loss became non-finite in local training (empty when a
        server model diverged).
    models : list of int
        Rows of the stacked server models that became non-finite (empty for local training).
    round_idx : int or None
        0-based round index (the message says ``round round_idx + 1``, as the records'
        ``history[*].round``); None when unknown.
    what : str
        What became non-finite, e.g. ``"weights"``, ``"loss"``, ``"weights and loss"``.
    state : str
        How it diverged: ``"non-finite"`` (default) or a description such as ``"exploded"``
        (a finite training loss far above that of a random guess, see
        :attr:`fedlib.methods.FLConfig.max_loss`).
    stage : str
        When, e.g. ``"after local training"``, ``"after the server update"``.
    lr : float or None, optimizer : str or None
        The client optimiser's learning rate and name (``"adam"``, ``"sgd"``): the likely cause.
    method : str or None
        The FL method (added by :func:`fedlib.experiment.run`).
    hint : str or None
        What to try; default: lower lr (clients) or lower the server step size / lr (server).
    """

    def __init__(self, clients=(), round_idx: int | None = None, *, models=(), what: str = "weights",
                 stage: str = "after local training", lr: float | None = None, optimizer: str | None = None,
                 method: str | None = None, hint: str | None = None, state: str = "non-finite"):
        self.clients = [int(c) for c in clients]
        self.models = [int(m) for m in models]
        self.round_idx = None if round_idx is None else int(round_idx)
        self.what, self.stage = what, stage
        self.lr = None if lr is None else float(lr)
        self.optimizer, self.method, self.hint = optimizer, method, hint
        self.state = state
        super().__init__(self.message())

    def fields(self) -> dict:
        """The facts, as keyword arguments of the constructor."""
        return {"clients": self.clients, "round_idx": self.round_idx, "models": self.models, "what": self.what,
                "stage": self.stage, "lr": self.lr, "optimizer": self.optimizer, "method": self.method,
                "state": self.state,
                "hint": self.hint}

    def with_context(self, **known) -> "DivergenceError":
        """A copy with the fields of ``known`` filled in where this error left them None
        (facts already recorded closer to the cause win)."""
        merged = self.fields()
        merged.update({k: v for k, v in known.items() if merged.get(k) is None})
        return DivergenceError(**merged)

    def message(self) -> str:
        """E.g. ``fedavg diverged in round 3: clients [1, 4] have non-finite weights after local
        training (lr=1e+06 with adam); lower lr``."""
        head = f"{self.method or 'training'} diverged"
        if self.round_idx is not None:
            head += f" in round {self.round_idx + 1}"
        if self.clients or not self.models:
            noun = "client" if len(self.clients) == 1 else "clients"
            verb = "has" if len(self.clients) == 1 else "have"
            subject = f"{noun} {self.clients} {verb} {self.state} {self.what} {self.stage}"
        else:
            noun = "model" if len(self.models) == 1 else "models"
            subject = f"server {noun} {self.models} became {self.state} ({self.what}) {self.stage}"
        cause = ""
        if self.lr is not None:
            who = "lr" if self.clients or not self.models else "clients' lr"
            cause = f" ({who}={self.lr:g}" + (f" with {self.optimizer})" if self.optimizer else ")")
        hint = self.hint or ("lower lr" if self.clients or not self.models
                             else "lower the server step size (e.g. FedAdam/FedYogi's eta) or the clients' lr")
        return f"{head}: {subject}{cause}; {hint}"

    def __str__(self) -> str:
        return self.message()

    def __reduce__(self):
        return _rebuild, (self.fields(),)
