"""fedlib's engine vs. Flower's Simulation Engine vs. a plain sequential loop: one FedAvg.

The same federation (``RunSpec(dataset, 'dirichlet', α, K, seed, 'fedavg')``: same data,
partition and splits), the same model (the dataset's paper architecture — ``logistic`` for
Adult), the same seeded initial weights and the same clients each round (fedlib's
``selection/group0`` stream, q = 0.5), trained three ways:

engine      :func:`fedlib.methods.base.federated_averaging` — all selected clients of a round
            in one vectorised ``local_train`` call, then ``weighted_average``;
sequential  ``plain_fedavg`` of ``benchmarks/engine_vs_sequential.py`` — per client a model
            copy, a shuffled DataLoader and a fresh ``torch.optim.Adam``, one after another;
flower      ``fedlib.flower.FedAvg`` under ``flwr.simulation.run_simulation`` (Ray, ``--cpus``
            CPUs, one per simulated client): per round the ServerApp sends the model to each
            selected node, each ClientApp trains its client and replies, the server averages.
            The ClientApp (``--flower-client``) is ``plain`` — what a Flower user writes (the
            tutorials' client: a model copy, a shuffled DataLoader, a fresh ``torch.optim.Adam``,
            the sequential loop's code for one client) — or ``engine``, fedlib's own ClientApp
            (:func:`fedlib.flower.make_client_app`: a one-client engine call).

Only the training rounds are timed: engine and sequential around their round loops (after a
one-round warm-up); Flower at the server, from each round's ``configure_train`` to its
``aggregate_train`` (message passing, serialisation, client compute), excluding Ray's
start-up, the clients' data loading (a ``#`` line gives the whole simulation's wall time)
and the final evaluation. Per K the script prints an accuracy line and exactly one line::

    engine_vs_flower clients=<K> rounds=<R> sequential=<s>s engine=<s>s flower=<s>s engine_vs_flower=<x>

with engine_vs_flower = flower / engine (rounds only; ``flower_wall`` in the ``#`` line is the whole
simulation). With ``--flower-client engine`` Engine and Flower train the same batches
(fedlib's seeded order) and agree in accuracy; the plain client and the sequential loop
shuffle with torch's own generator, so they agree within noise only.

The bound: Flower runs the clients' own loops, ``--cpus`` at a time, plus its message
passing; it cannot beat the sequential loop divided by its workers, so engine_vs_flower ≲
(sequential / cpus) / engine + Flower's overhead per client and round.

Usage: python benchmarks/engine_vs_flower.py [--clients 100 1000] [--rounds 2] [--epochs 5]
       [--dataset adult] [--alpha 0.5] [--n-train N] [--cpus 2] [--seed 0] [--record DIR]

``--record DIR`` also writes the run's figures as one JSON file in DIR (``benchmarks/_record.py``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _record  # noqa: E402
from engine_vs_sequential import plain_fedavg, test_accuracy  # noqa: E402  (the sequential reference)

from fedlib import flower as F  # noqa: E402
from fedlib.engine.host import to_host  # noqa: E402
from fedlib.evaluation import global_accuracy  # noqa: E402
from fedlib.experiment import RunSpec  # noqa: E402
from fedlib.flower.setup import spec_context  # noqa: E402
from fedlib.methods.base import federated_averaging, sample_clients  # noqa: E402


def make_spec(args, k: int, alpha: float) -> RunSpec:
    """The benchmark's FedAvg run with K clients, Dirichlet α."""
    return RunSpec(args.dataset, "dirichlet", alpha, k, args.seed, "fedavg", n_train=args.n_train,
                   fl={"rounds": args.rounds, "local_epochs": args.epochs})


def best_of(repeats: int, fn):
    """(fastest seconds, its result) of ``repeats`` calls of ``fn() -> (seconds, result)``
    (timeit's rule: the minimum is the run least disturbed by the rest of the machine)."""
    return min((fn() for _ in range(repeats)), key=lambda r: r[0])


def run_engine(ctx, repeats: int = 5):
    """(seconds of the timed rounds, accuracy) of fedlib's FedAvg on the engine: the fastest
    of ``repeats`` identical runs after one warm-up run (the first call pays one-off costs:
    allocator, kernel dispatch caches — ≈ 3× the steady time here)."""
    def once():
        t0 = time.perf_counter()
        out = federated_averaging(ctx, [np.arange(ctx.n_clients)], log=False)
        return time.perf_counter() - t0, out

    once()  # warm-up
    seconds, out = best_of(repeats, once)
    return seconds, global_accuracy(*ctx.evaluate(out.models, out.assignment))


def run_sequential(ctx, repeats: int = 2):
    """(seconds, accuracy) of the plain per-client loop on the same clients each round (the
    fastest of ``repeats`` runs after a one-round warm-up)."""
    rng = ctx.rng("selection/group0")
    schedule = [sample_clients(rng, np.arange(ctx.n_clients), ctx.cfg.fraction, ctx.cfg.min_clients)
                for _ in range(ctx.cfg.rounds)]
    x, y, parts = ctx.fed.split("train")
    x, y = to_host(x, np.float32), to_host(y, np.int64)
    model = ctx.model
    model.load_state_dict(ctx.init_state(), strict=False)
    plain_fedavg(model, x, y, parts, schedule[:1], 1, ctx.fed.device, ctx.seed)  # warm-up

    def once():
        model.load_state_dict(ctx.init_state(), strict=False)
        t0 = time.perf_counter()
        state = plain_fedavg(model, x, y, parts, schedule, ctx.cfg.local_epochs, ctx.fed.device, ctx.seed)
        return time.perf_counter() - t0, state

    seconds, state = best_of(repeats, once)
    return seconds, test_accuracy(model, state, ctx.fed)


def _plain_train(spec, message, context):
    """A Flower user's client: the sequential loop's code for this one client."""
    import torch
    from flwr.app import Message, MetricRecord, RecordDict

    from fedlib.flower.records import record_to_state, state_to_record

    ctx = spec_context(spec)
    client = int(context.node_config["partition-id"])
    t = int(message.content["config"]["server-round"]) - 1
    x, y, parts = _host_split(spec)
    model = ctx.model
    model.load_state_dict(record_to_state(message.content["arrays"], ctx.fed.device), strict=False)
    state = plain_fedavg(model, x, y, [parts[client]], [[0]], ctx.cfg.local_epochs, ctx.fed.device,
                         ctx.seed * 1_000_003 + t * 10_007 + client)  # its own shuffling seed
    n = int(len(parts[client]))
    state = {k: v.detach() for k, v in state.items() if isinstance(v, torch.Tensor)}
    metrics = MetricRecord({"partition-id": client, "num-examples": n, "train-loss": 0.0})
    return Message(RecordDict({"arrays": state_to_record(state), "metrics": metrics}), reply_to=message)


_HOST: dict = {}


def _host_split(spec):
    """The federation's train split on the host, as the sequential loop takes it (cached)."""
    key = spec.key()
    if key not in _HOST:
        x, y, parts = spec_context(spec).fed.split("train")
        _HOST[key] = (to_host(x, np.float32), to_host(y, np.int64), parts)
    return _HOST[key]


def plain_client_app(spec):
    """fedlib's ClientApp with its train handler replaced by the plain loop."""
    import functools

    from flwr.clientapp import ClientApp

    from fedlib.flower import client as C

    app = ClientApp()
    app.query()(functools.partial(C._query, spec, None))
    app.train()(functools.partial(_plain_train, spec))
    app.evaluate()(functools.partial(C._evaluate, spec))
    return app


def run_flower(spec, cpus: int, client: str):
    """(seconds of the rounds, accuracy, whole simulation's seconds, client trainings) under Flower."""
    app = plain_client_app(spec) if client == "plain" else None
    out = F.simulate(F.FedAvg.from_spec(spec), spec, num_cpus=cpus, client_app=app)
    trainings = sum(len(picks) for picks in out["selected"])
    return out["train_seconds"], out["global_accuracy"], out["wall_seconds"], trainings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=5, help="local epochs E (the paper's 5)")
    ap.add_argument("--dataset", default="adult")
    ap.add_argument("--alpha", type=float, nargs="+", default=[0.5, 5.0],
                    help="Dirichlet α, one per --clients value (or one for all); at K = 1,000 Adult's "
                         "32,561 examples admit no α ≤ 2 partition with ≥ 10 examples per client, hence 5")
    ap.add_argument("--n-train", type=int, default=None, help="training-pool subset (default: all)")
    ap.add_argument("--cpus", type=int, default=2, help="Ray CPUs for the Flower simulation")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--flower-client", choices=("plain", "engine"), nargs="+", default=["plain", "engine"],
                    help="Flower ClientApps to time: plain (a user's torch loop; the main line) and/or engine")
    _record.add_argument(ap)
    args = ap.parse_args()
    if len(args.alpha) not in (1, len(args.clients)):
        ap.error(f"--alpha takes one value, or one per --clients value ({len(args.clients)}), "
                 f"got {len(args.alpha)}")
    alphas = args.alpha * len(args.clients) if len(args.alpha) == 1 else args.alpha
    rows = []
    for k, alpha in zip(args.clients, alphas):
        spec = make_spec(args, k, alpha)
        ctx = spec_context(spec)
        t_eng, acc_eng = run_engine(ctx)
        t_seq, acc_seq = run_sequential(ctx)
        sizes = ctx.fed.n_train
        print(f"# {spec.dataset} K={k} α={alpha:g} E={args.epochs} train sizes {sizes.min()}..{sizes.max()} "
              f"(mean {sizes.mean():.0f}); bound (sequential / cpus) / engine = "
              f"{t_seq / args.cpus / t_eng:.1f}", flush=True)
        for client in args.flower_client:
            t_flw, acc_flw, wall, trainings = run_flower(spec, args.cpus, client)
            tag = "" if client == "plain" else " flower_client=engine"
            overhead = (t_flw - t_seq / args.cpus) * args.cpus / trainings  # worker-seconds per client message
            print(f"# flower_client={client}: flower_wall={wall:.1f}s (Ray start-up and the clients' data "
                  f"loading included) engine_vs_flower_wall={wall / t_eng:.1f}; {trainings} client trainings, "
                  f"Flower's cost beyond the sequential loop's compute ≈ {overhead * 1e3:.1f} ms per client "
                  f"and round (of {t_seq / trainings * 1e3:.1f} ms compute)")
            print(f"accuracy clients={k}{tag} sequential={acc_seq:.4f} engine={acc_eng:.4f} flower={acc_flw:.4f}")
            print(f"engine_vs_flower clients={k}{tag} rounds={args.rounds} sequential={t_seq:.3f}s "
                  f"engine={t_eng:.3f}s flower={t_flw:.3f}s engine_vs_flower={t_flw / t_eng:.1f}", flush=True)
            rows.append({"clients": k, "alpha": alpha, "flower_client": client, "rounds": args.rounds,
                         "sequential_s": t_seq, "engine_s": t_eng, "flower_s": t_flw, "flower_wall_s": wall,
                         "engine_vs_flower": t_flw / t_eng, "engine_vs_flower_wall": wall / t_eng,
                         "engine_vs_sequential": t_seq / t_eng, "bound": t_seq / args.cpus / t_eng,
                         "client_trainings": trainings, "flower_overhead_ms": overhead * 1e3,
                         "accuracy_sequential": acc_seq, "accuracy_engine": acc_eng, "accuracy_flower": acc_flw})
    _record.save(args.record, "engine_vs_flower", args, rows, device=ctx.fed.device)


if __name__ == "__main__":
    main()
