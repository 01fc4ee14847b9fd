"""FedAvg (McMahan et al., 2017): sample q·K clients per round, average their weights
weighted by their number of training samples. No hyperparameters beyond the protocol."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import Context, Outcome, federated_averaging
from .contract import MethodInfo

NAME = "fedavg"


@dataclass(frozen=True)
class Hyper:
    """FedAvg has no hyperparameters of its own."""


def run(ctx: Context, hp: Hyper) -> Outcome:
    return federated_averaging(ctx, [np.arange(ctx.n_clients)])


# all its training goes through federated_averaging (FLConfig.stream_average)
INFO = MethodInfo(NAME, "FedAvg", Hyper, run, streams_average=True, resumable=True)
