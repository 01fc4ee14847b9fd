"""The ClientApp: one fedlib client behind Flower's Message API.

A simulated client is the Flower node whose ``node_config['partition-id']`` is i; it holds
client i of the federation built from the RunSpec (:mod:`fedlib.flower.setup`) and answers
three messages:

query     ``{"config": {"dp-epsilon"?: ε, "dp-seed": s}}`` → ``{"counts": ArrayRecord (C,),
          "meta": {"partition-id": i, "num-examples": n_i, "num-train"/"num-val"/"num-test": split
          sizes}}``: its label histogram (train
          split), or with ε the ε-DP one, :func:`fedlib.privacy.laplace_counts` (counts, ε, s, i)
          — exactly row i of :func:`fedlib.privacy.noisy_label_counts`. A client built with
          ``dp_seed=`` uses its own seed instead of the server's: the server cannot strip
          noise it cannot regenerate (with the server's seed it could; that mode exists only
          to reproduce fedlib's runs).
train     ``{"arrays": model, "config": {"server-round": r, "round-offset"?: o}}`` → the model
          after fedlib's local training of client i in round t = r − 1 + o (one-client
          :meth:`fedlib.methods.Context.train`: the protocol's optimiser, E epochs, batch size,
          batch order seeded by (seed, t, i, epoch)); ``{"arrays", "metrics": {"partition-id",
          "num-examples": n_i, "train-loss"}}``.
evaluate  ``{"arrays": model, "config": {"split": "test" | "val"}}`` → ``{"metrics":
          {"partition-id", "correct", "num-examples"}}``: correct predictions on its split.
"""
from __future__ import annotations

import functools

import numpy as np

from ..engine import broadcast, evaluate
from ..engine.host import to_host
from ..privacy import laplace_counts
from ..validation import check_seed
from ._compat import require_flwr
from .records import counts_to_record, record_to_state, state_to_record
from .setup import check_spec, spec_context

__all__ = ["make_client_app", "client_counts"]


def make_client_app(spec, *, dp_seed: int | None = None):
    """A Flower ``ClientApp`` whose node i is client i of ``spec``'s federation (a RunSpec).

    ``dp_seed`` ≥ 0 or None: the clients' own noise seed for an ε-DP counts query (None: the seed
    the server sends, which reproduces fedlib's noisy histograms). The app holds only ``spec``
    (pickled to the simulation's workers with every message); each worker builds and caches the
    federation on first use.
    """
    flwr_clientapp = require_flwr("flwr.clientapp")
    spec = check_spec(spec)
    if dp_seed is not None:
        check_seed(dp_seed, "dp_seed")
    app = flwr_clientapp.ClientApp()
    app.query()(functools.partial(_query, spec, dp_seed))
    app.train()(functools.partial(_train, spec))
    app.evaluate()(functools.partial(_evaluate, spec))
    return app


def client_counts(spec, client: int, epsilon: float | None = None, seed: int = 0) -> np.ndarray:
    """What client ``client`` reports, shape (C,): its train-split label counts, Laplace-noised
    with (ε, seed, its id) when ``epsilon`` is given."""
    ctx = spec_context(spec)
    client = int(ctx.fed.check_clients([client])[0])
    counts = np.asarray(ctx.counts_train[client], dtype=np.float64)
    return counts if epsilon is None else laplace_counts(counts, epsilon, seed, client)


def _partition_id(context) -> int:
    return int(context.node_config["partition-id"])


def _meta(client: int, n: int, **extra):
    app = require_flwr("flwr.app")
    return app.MetricRecord({"partition-id": client, "num-examples": int(n), **extra})


def _query(spec, own_seed, message, context):
    """Reply with the label histogram (optionally ε-DP); see the module docstring."""
    app = require_flwr("flwr.app")
    client = _partition_id(context)
    config = message.content["config"]
    epsilon = config["dp-epsilon"] if "dp-epsilon" in config else None
    seed = int(config["dp-seed"]) if own_seed is None else own_seed
    counts = client_counts(spec, client, epsilon, seed)
    fed = spec_context(spec).fed
    meta = _meta(client, int(fed.n_train[client]), **{f"num-{s}": int(getattr(fed, f"n_{s}")[client])
                                                      for s in ("train", "val", "test")})
    content = app.RecordDict({"counts": counts_to_record(counts), "meta": meta})
    return app.Message(content, reply_to=message)


def _train(spec, message, context):
    """fedlib's local training of this client from the received model."""
    app = require_flwr("flwr.app")
    ctx = spec_context(spec)
    client = _partition_id(context)
    config = message.content["config"]
    round_idx = int(config["server-round"]) - 1 + int(config.get("round-offset", 0))
    start = broadcast(record_to_state(message.content["arrays"], ctx.fed.device), 1)
    res = ctx.train(start, [client], round_idx)
    state = {k: v[0] for k, v in res.params.items()}
    metrics = _meta(client, int(to_host(res.n_samples)[0]), **{"train-loss": float(to_host(res.mean_loss)[0])})
    return app.Message(app.RecordDict({"arrays": state_to_record(state), "metrics": metrics}), reply_to=message)


def _evaluate(spec, message, context):
    """Correct predictions of the received model on this client's split."""
    app = require_flwr("flwr.app")
    ctx = spec_context(spec)
    client = _partition_id(context)
    split = str(message.content["config"].get("split", "test"))
    params = broadcast(record_to_state(message.content["arrays"], ctx.fed.device), 1)
    res = evaluate(ctx.model, params, ctx.fed, [client], split=split)
    metrics = _meta(client, int(to_host(res.n)[0]), correct=int(to_host(res.correct)[0]))
    return app.Message(app.RecordDict({"metrics": metrics}), reply_to=message)
