"""FedAvg inside one group of clients, as a Flower strategy (``flwr.serverapp.strategy.FedAvg``).

Differences from Flower's FedAvg, each to reproduce :func:`fedlib.methods.base.federated_averaging`:

* sampling: each round draws max(min_clients, ⌊q·|group|⌋) of the group's clients with
  :func:`fedlib.methods.base.sample_clients` from fedlib's seeded stream (the same
  generator as ``Context.rng(stream)``), not Flower's unseeded ``random.sample`` over nodes;
* aggregation: the replies are put in client-id order and averaged with
  :func:`fedlib.engine.weighted_average` (float64 weights n_k / Σn, torch ``tensordot``),
  not Flower's numpy running sum — the very operation fedlib applies to the same replies;
* every reply must come back: a failed or missing client raises instead of being dropped;
* no per-round federated evaluation (fedlib's history is not reproduced; the strategies
  evaluate the final models).
"""
from __future__ import annotations

import functools
import hashlib
import time

import numpy as np
import torch

from ..engine import weighted_average
from ..methods.base import sample_clients
from ..validation import check_int, check_number, check_seed
from ._compat import require_flwr
from .records import record_to_state, state_to_record

__all__ = ["stream_rng", "group_fedavg", "replies_by_client"]


def stream_rng(seed: int, stream: str) -> np.random.Generator:
    """fedlib's named RNG stream: the generator ``Context(seed=seed).rng(stream)`` returns."""
    tag = int.from_bytes(hashlib.sha256(str(stream).encode()).digest()[:4], "little")
    return np.random.default_rng([check_seed(seed), tag])


def replies_by_client(replies, expected=None) -> dict:
    """``{partition id: reply content}`` of the replies (raises RuntimeError on an error
    reply, or when the ids differ from ``expected``)."""
    out = {}
    for msg in replies:
        if msg.has_error():
            raise RuntimeError(f"a Flower client failed: {msg.error.reason}")
        meta = next(iter(msg.content.metric_records.values()))
        out[int(meta["partition-id"])] = msg.content
    if expected is not None and sorted(out) != sorted(int(c) for c in expected):
        raise RuntimeError(f"replies came from clients {sorted(out)}, expected {sorted(int(c) for c in expected)}")
    return out


@functools.lru_cache(maxsize=1)
def _group_fedavg_class():
    strategy = require_flwr("flwr.serverapp.strategy")
    app = require_flwr("flwr.app")

    class GroupFedAvg(strategy.FedAvg):
        """FedAvg over ``group`` (client ids) with fedlib's seeded sampling and averaging."""

        def __init__(self, node_of: dict, group, rng: np.random.Generator, fraction: float,
                     min_clients: int = 1, round_offset: int = 0):
            super().__init__(fraction_train=fraction, fraction_evaluate=1.0, min_train_nodes=min_clients,
                             min_evaluate_nodes=0, min_available_nodes=1)
            self.node_of, self.group, self.rng = node_of, np.asarray(group, dtype=np.int64), rng
            self.round_offset = round_offset
            self.selected: list[list[int]] = []
            self.train_seconds = 0.0
            self._t0 = None

        def configure_train(self, server_round, arrays, config, grid):
            self._t0 = time.perf_counter()
            picks = sample_clients(self.rng, self.group, self.fraction_train, self.min_train_nodes)
            self.selected.append(picks.tolist())
            config["server-round"] = server_round
            config["round-offset"] = self.round_offset
            record = app.RecordDict({"arrays": arrays, "config": config})
            return [app.Message(record, dst_node_id=self.node_of[int(c)], message_type=app.MessageType.TRAIN)
                    for c in picks]

        def aggregate_train(self, server_round, replies):
            by_client = replies_by_client(replies, self.selected[-1])
            order = sorted(by_client)
            states = [record_to_state(by_client[c]["arrays"]) for c in order]
            n = torch.tensor([float(by_client[c]["metrics"]["num-examples"]) for c in order], dtype=torch.float64)
            stacked = {k: torch.stack([s[k] for s in states]) for k in states[0]}
            model = weighted_average(stacked, n)
            loss = sum(by_client[c]["metrics"]["train-loss"] * w for c, w in zip(order, (n / n.sum()).tolist()))
            self.train_seconds += time.perf_counter() - self._t0
            return state_to_record(model), app.MetricRecord({"train-loss": float(loss)})

        def configure_evaluate(self, server_round, arrays, config, grid):
            return []

    return GroupFedAvg


def group_fedavg(node_of: dict, group, *, seed: int, stream: str, fraction: float, min_clients: int = 1,
                 round_offset: int = 0):
    """A Flower strategy running FedAvg over ``group`` (client ids, (M,)) with fedlib's sampling
    stream ``stream`` of run ``seed``; ``node_of`` maps client id → Flower node id.
    Start it with ``.start(grid=..., initial_arrays=..., num_rounds=T)``."""
    check_number(fraction, "fraction (q)", 0, 1, low_open=True)
    check_int(min_clients, "min_clients", 1)
    check_int(round_offset, "round_offset", 0)
    group = np.asarray(group, dtype=np.int64)
    if group.ndim != 1 or group.size == 0 or any(int(c) not in node_of for c in group):
        raise ValueError(f"group must be a non-empty 1-D array of client ids known to node_of, got {group!r}")
    return _group_fedavg_class()(node_of, group, stream_rng(seed, stream), fraction, min_clients, round_offset)
