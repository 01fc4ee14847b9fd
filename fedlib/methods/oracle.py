"""Oracle — the true clusters in place of a clustering method's (pFedLIA, Sec. IV-C (ii)).

"This corresponds to perfect clustering. It can only be used for the Pathological Non-IID
setting, where we have clear-cut clusters. This baseline corresponds to the upper bound of
any clustering-based personalized FL technique." The groups are the partition's planted
clusters (:attr:`fedlib.methods.Context.planted_clusters`: client i → i mod n_clusters).

Schedule: pFedLIA's, with the clustering replaced by the truth — FedAvg over all clients for
``warmup_rounds`` rounds (20, pFedLIA's default), then FedAvg inside each true cluster from
that model for the remaining rounds, each cluster sampling max(1, ⌊q·|cluster|⌋) of its
clients per round on the same selection streams as pFedLIA's clusters. Every client is
evaluated with its cluster's model. When pFedLIA finds exactly the true clusters the two runs
are the same run, bit for bit — which is what Table I shows: its Oracle and pFedLIA columns
agree to two decimals on pathological CIFAR-10 and FMNIST (86.08 ± 1.67, 99.07 ± 0.21), so the
paper's Oracle ran pFedLIA's schedule. ``warmup_rounds=0`` is FedAvg per true cluster from
the seeded initial model.

``PROTOCOLS`` restricts it to ``'pathological_clusters'``: :meth:`RunSpec.validate` refuses
any other partition before training (the paper reports "–" for the noisy setting, where a
client's extra label breaks the clear-cut clusters).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..validation import check_int, fail
from .base import CLUSTER_STREAM, Context, FLConfig, Outcome, federated_averaging
from .contract import MethodInfo

NAME = "oracle"
GRID = {}
PROTOCOLS = ("pathological_clusters",)  # the only partition whose clusters are clear-cut

__all__ = ["NAME", "GRID", "PROTOCOLS", "Hyper", "check_protocol", "run"]


@dataclass(frozen=True)
class Hyper:
    warmup_rounds: int = 20  # FedAvg rounds before the true clusters train (pFedLIA's warm-up)

    def __post_init__(self):
        check_int(self.warmup_rounds, "warmup_rounds", 0)


def check_protocol(hp: Hyper, cfg: FLConfig) -> None:
    """The warm-up must leave rounds for the clusters to train."""
    if hp.warmup_rounds >= cfg.rounds:
        fail("warmup_rounds", f"< rounds = {cfg.rounds} (the Oracle trains its true clusters after the warm-up; "
             "lower warmup_rounds or raise rounds)", hp.warmup_rounds)


def run(ctx: Context, hp: Hyper) -> Outcome:
    """Warm-up FedAvg, then FedAvg per planted cluster; clients on their cluster's model."""
    check_protocol(hp, ctx.cfg)
    truth = ctx.planted_clusters
    groups = [np.flatnonzero(truth == c) for c in np.unique(truth)]
    start = None
    if hp.warmup_rounds:
        warm = federated_averaging(ctx, [np.arange(ctx.n_clients)], rounds=hp.warmup_rounds)
        start = {k: v[0] for k, v in warm.models.items()}
    out = federated_averaging(ctx, groups, start=start, first_round=hp.warmup_rounds,
                              rounds=ctx.cfg.rounds - hp.warmup_rounds, stream=CLUSTER_STREAM)
    out.info.update({"n_clusters": len(groups), "cluster_of_client": out.assignment.tolist(),
                     "cluster_sizes": [len(g) for g in groups], "warmup_rounds": hp.warmup_rounds})
    return out


# all its training goes through federated_averaging (FLConfig.stream_average)
INFO = MethodInfo(NAME, "Oracle", Hyper, run, grid=GRID, streams_average=True, resumable=True,
                  protocols=PROTOCOLS, check_protocol=check_protocol)
