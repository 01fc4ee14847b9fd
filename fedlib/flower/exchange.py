"""Server-side message exchanges that are not training: waiting for the nodes, the label
counts query, the final evaluation.

What the server learns from the counts query, per client: its id (the simulation's
partition id), its label histogram — exact, or ε-DP noisy with ``dp_epsilon`` — and the
sizes of its train, validation and test splits (the FedAvg weight n_k, which fedlib's
server also uses, and whether a validation split exists).
"""
from __future__ import annotations

import time

import numpy as np

from ..validation import check_int, check_number, check_seed
from ._compat import require_flwr
from .fedavg_group import replies_by_client
from .records import record_to_counts, state_to_record

__all__ = ["wait_for_nodes", "exchange_counts", "evaluate_clients"]


def wait_for_nodes(grid, n_clients: int, timeout: float = 600.0) -> list:
    """The node ids once ``n_clients`` nodes are connected (RuntimeError after ``timeout`` s)."""
    check_int(n_clients, "n_clients", 1)
    deadline = time.monotonic() + timeout
    while len(nodes := list(grid.get_node_ids())) < n_clients:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(nodes)} of {n_clients} Flower nodes connected within {timeout:g} s")
        time.sleep(0.2)
    return nodes


def exchange_counts(grid, nodes, dp_epsilon: float | None = None, dp_seed: int = 0,
                    timeout: float = 3600.0) -> tuple[dict, np.ndarray, dict]:
    """Ask every node for its label histogram.

    Returns (node_of: client id -> node id; counts (K, C) float64: row i as client i sent it, ε-DP
    noisy with dp_epsilon; sizes: 'train' | 'val' | 'test' -> int (K,), the clients' split sizes).
    """
    app = require_flwr("flwr.app")
    check_number(dp_epsilon, "dp_epsilon", 0, low_open=True, optional=True)
    config = app.ConfigRecord({"dp-seed": check_seed(dp_seed, "dp_seed")})
    if dp_epsilon is not None:
        config["dp-epsilon"] = float(dp_epsilon)
    messages = [app.Message(app.RecordDict({"config": config}), dst_node_id=node, message_type=app.MessageType.QUERY)
                for node in nodes]
    replies = list(grid.send_and_receive(messages, timeout=timeout))
    by_node = {msg.metadata.src_node_id: msg for msg in replies}
    by_client = replies_by_client(replies)
    k = len(by_client)
    if sorted(by_client) != list(range(k)) or k != len(nodes):
        raise RuntimeError(f"expected client ids 0..{len(nodes) - 1}, got {sorted(by_client)}")
    node_of = {int(next(iter(m.content.metric_records.values()))["partition-id"]): node for node, m in by_node.items()}
    counts = np.stack([record_to_counts(by_client[c]["counts"]) for c in range(k)])
    sizes = {s: np.array([int(by_client[c]["meta"][f"num-{s}"]) for c in range(k)]) for s in ("train", "val", "test")}
    return node_of, counts, sizes


def evaluate_clients(grid, node_of: dict, states: list, assignment, split: str = "test",
                     timeout: float = 3600.0) -> tuple[np.ndarray, np.ndarray]:
    """Every client evaluates the model ``states[assignment[i]]`` on its ``split``.

    Returns correct counts and split sizes, int64 arrays of shape (K,) in client-id order."""
    app = require_flwr("flwr.app")
    assignment = np.asarray(assignment, dtype=np.int64)
    records = [state_to_record(s) for s in states]
    messages = [app.Message(app.RecordDict({"arrays": records[g], "config": app.ConfigRecord({"split": split})}),
                            dst_node_id=node_of[i], message_type=app.MessageType.EVALUATE)
                for i, g in enumerate(assignment.tolist())]
    by_client = replies_by_client(grid.send_and_receive(messages, timeout=timeout), range(len(assignment)))
    correct = np.array([int(by_client[i]["metrics"]["correct"]) for i in range(len(assignment))], dtype=np.int64)
    n = np.array([int(by_client[i]["metrics"]["num-examples"]) for i in range(len(assignment))], dtype=np.int64)
    return correct, n
