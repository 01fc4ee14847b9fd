"""Many runs in one process, their clients trained in one engine call per round.

Runs of the FedAvg family (:data:`FAMILY`: FedAvg, FedProx and the FedOpt family — FedAvgM,
FedAdagrad, FedYogi, FedAdam) whose models have the same shapes and whose clients train under
the same protocol differ only in their data's partition, their seed and their server: each
round every run picks its own clients from its own selection stream, and all runs' picked
clients train side by side in **one** :func:`fedlib.engine.local_train` call (on a GPU one
chunk of Σ m_r rows instead of R calls of m_r rows). The federations are merged
(:meth:`fedlib.engine.Federation.concat`: run r's client k is client ``offset_r + k``), and
each row is seeded as its own run seeds it — batch order and dropout masks from (its run's
seed, the round, k) — so it trains as it would alone. Then each run's rows are averaged into
its own model and its own server step (FedProx's μ, a FedOpt optimiser state) applies; method
state, selection streams, evaluations and records stay per run. The per-round evaluations are
batched too where a run's entry is its weighted test accuracy alone: one
:func:`fedlib.engine.evaluate` call on the merged federation, each client scored with its own
run's model (``model_of``).

:func:`run_together` returns the record :func:`fedlib.experiment.run` gives each spec: the same
fields, the same clients every round (each run's own selection stream), the same batch orders
and dropout masks, the same server steps. The weights agree **up to kernel rounding, not bit
for bit by guarantee**: a run's rows sit in chunks of other sizes beside other runs' rows, and
the engine's batched kernels may round a client's sums differently in the last bit at another
chunk size or row count (docs/performance.md: "another chunk size sums in another order, so it
moves the last bits") — the tolerance of :func:`fedlib.methods.base.global_model_runs_together`,
PSI-PFL's "together" schedule. So an accuracy may move by a test sample; ``tests/test_together.py``
allows that rounding and nothing else.

What must match, checked by :func:`check_together` before any data is loaded (:data:`SHARED`
and the effective training protocol): the data set, architecture, K, ``n_train``, the splits'
fractions, the global test set and pooling, and every :class:`~fedlib.methods.FLConfig` field.
The protocol, level, seed, method and hyperparameters may differ. ``stream_average`` is
refused (its chunk-by-chunk float64 sums would be folded in another order). :func:`group_specs`
splits any list of specs into groups that may train together.

``seconds`` and ``cpu_seconds`` of a batched record are the group's wall and CPU time divided
by the number of runs trained together, kept in ``host['together']``. A run whose training
diverges is dropped from the group at that round (the others continue: their rows do not
depend on it) and run alone afterwards with :func:`fedlib.experiment.run`, so its ``"failed"``
record is exactly that function's. A group checkpoints and resumes as one run does
(:mod:`fedlib.checkpoint`, key :func:`group_key`), so a budget can stop it at a round boundary.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from functools import partial

import numpy as np
import torch

from . import partition as P, run as X
from .spec import RunSpec
from .engine import Federation, broadcast, evaluate, resolve_device, weighted_average
from .engine.host import to_host
from .evaluation import global_accuracy
from .engine.errors import DivergenceError
from .methods import Context, FLConfig, make_hyper
from .methods.base import Outcome, check_finite_models, run_rounds, sample_clients, take_rows
from .methods.fedopt import METHODS as FEDOPT, flatten, server_update
from .validation import fail

__all__ = ["FAMILY", "SHARED", "run_together", "check_together", "group_specs", "together_key"]

FAMILY = ("fedavg", "fedprox", *FEDOPT)
"""The methods that may train together: one global model, FedAvg's clients, a server step."""

SHARED = ("dataset", "arch", "n_clients", "n_train", "test_fraction", "val_fraction", "global_test",
          "n_global_test", "pool_test")
"""The RunSpec fields every run of a group shares (with the effective FLConfig)."""


def _arch(spec: RunSpec) -> str:
    from .models import ARCH_FOR_DATASET

    return spec.arch or ARCH_FOR_DATASET[spec.dataset]


def _shared(spec: RunSpec) -> dict:
    """What must be equal across a group: :data:`SHARED` and the effective protocol (``fl``)."""
    _, fl, _ = spec.effective()
    values = {name: getattr(spec, name) for name in SHARED}
    values["arch"] = _arch(spec)
    values["fl"] = asdict(FLConfig.from_dict(fl))
    return values


def together_key(spec: RunSpec) -> str | None:
    """A string equal for specs that may train together; None for a method outside :data:`FAMILY`
    or a protocol with ``stream_average`` (such a run trains alone)."""
    if spec.method not in FAMILY:
        return None
    values = _shared(spec)
    if values["fl"]["stream_average"]:
        return None
    return json.dumps(values, sort_keys=True, default=str)


def check_together(specs) -> list[RunSpec]:
    """Validate ``specs`` as one group (each :meth:`RunSpec.validate`, then what they must share);
    ValueError naming the field, the two values and the fix, before any data is loaded."""
    specs = list(specs)
    if not specs or not all(isinstance(s, RunSpec) for s in specs):
        fail("specs", "a non-empty list of RunSpecs", specs)
    for s in specs:
        s.validate()
        if s.method not in FAMILY:
            fail("method", f"one of {', '.join(FAMILY)} to train together (other methods run alone: "
                           "fedlib.experiment.run, or group_specs to split a list)", s.method)
        if s.effective()[1].get("stream_average"):
            fail("fl stream_average", "False for runs trained together (its float64 sums would fold in "
                                      "another order); train such runs alone with fedlib.experiment.run", True)
    first = _shared(specs[0])
    for s in specs[1:]:
        mine = _shared(s)
        for name, value in first.items():
            if name == "fl":
                for key, v in value.items():
                    if mine["fl"][key] != v:
                        fail(f"fl {key}", f"{v!r} as in the group's first spec (runs that train together share the "
                             f"training protocol); use fedlib.together.group_specs to split the specs into "
                             f"groups that may", mine["fl"][key])
            elif mine[name] != value:
                fail(name, f"{value!r} as in the group's first spec (runs that train together share {', '.join(SHARED)} "
                     "and the training protocol); use fedlib.together.group_specs to split the specs into groups "
                     "that may", mine[name])
    keys = [s.key() for s in specs]
    if len(set(keys)) != len(keys):
        dup = next(s for s, k in zip(specs, keys) if keys.count(k) > 1)
        fail("specs", f"distinct runs, each listed once ({dup.method} seed={dup.seed} {dup.protocol}={dup.level:g} "
                      "is listed twice)", len(specs))
    return specs


def group_specs(specs, max_group: int | None = None) -> list[list[RunSpec]]:
    """Split ``specs`` into groups that may train together (:func:`together_key`), in order of
    first appearance; a spec of another method (or with ``stream_average``) is a group of its
    own. ``max_group``: at most this many runs a group (memory: the merged federation's
    clients, each run's model and server state). Duplicate specs are kept once."""
    from .validation import check_int

    check_int(max_group, "max_group", 1, optional=True)
    groups: dict[object, list] = {}
    seen = set()
    for i, s in enumerate(specs):
        if not isinstance(s, RunSpec):
            fail("specs", "a list of RunSpecs", s)
        s.validate()
        if s.key() in seen:
            continue
        seen.add(s.key())
        key = together_key(s)
        groups.setdefault(("alone", i) if key is None else key, []).append(s)
    out = []
    for members in groups.values():
        size = max_group or len(members)
        out.extend(members[i:i + size] for i in range(0, len(members), size))
    return out


@dataclass
class _Run:
    """One run of a group: its spec, context, method state and what it has done so far."""

    spec: RunSpec
    base: dict
    ctx: Context
    ds: object
    hp: object
    model: dict
    rng: np.random.Generator
    mu: float = 0.0
    server: object = None   # a fedlib.methods.fedopt.ServerOptimiser, or None
    state: object = None    # its server state
    names: list = field(default_factory=list)
    selected: list = field(default_factory=list)
    offset: int = 0
    failed: bool = False


def _share_pools(first: _Run, r: _Run) -> None:
    """Runs of one data set hold equal pools: let ``r`` hold ``first``'s tensors (one copy on the
    device instead of one per run; called as each run is built, so the copies never pile up)."""
    first = first.ctx.fed
    fed = r.ctx.fed
    swap = {}
    for name in ("x", "y", "x_test", "y_test", "x_global", "y_global"):
        mine, theirs = getattr(fed, name), getattr(first, name)
        if mine is not None and theirs is not None and mine is not theirs and \
                mine.shape == theirs.shape and mine.dtype == theirs.dtype and torch.equal(mine, theirs):
            swap[name] = theirs
    if swap:
        r.ctx.fed = dataclasses.replace(fed, **swap)


def _start(spec: RunSpec, device, dev: torch.device):
    """(the spec's _Run, None), or (None, its infeasible record)."""
    base = {"record_version": X.RECORD_VERSION, "key": spec.key(), "spec": spec.to_dict(),
            "versions": X.library_versions(), "host": X.host_of(dev)}
    try:
        ctx, ds = X.build_context(spec, device)
    except P.InfeasiblePartitionError as err:
        return None, {**base, "status": "infeasible", "error": str(err)}
    hyper, _, _ = spec.effective()
    hp = make_hyper(spec.method, hyper)
    model = ctx.init_state()
    run = _Run(spec, base, ctx, ds, hp, model, ctx.rng("selection/group0"))
    if spec.method == "fedprox":
        run.mu = float(hp.mu)
    elif spec.method in FEDOPT:
        run.server = FEDOPT[spec.method]
        run.names = [n for n, _ in ctx.model.named_parameters()]
        run.state = run.server.init(flatten(model, run.names), hp)
    return run, None


def group_key(specs) -> str:
    """The checkpoint key of a group of runs trained together (:mod:`fedlib.checkpoint`): the
    same runs in the same order resume the same group."""
    digest = hashlib.sha256("\n".join(s.key() for s in specs).encode()).hexdigest()[:16]
    return f"together-{digest}"


def run_together(specs, device="auto", *, checkpointer=None) -> list[dict]:
    """Train ``specs`` side by side (one engine call per round) and return their records, in
    order: what :func:`fedlib.experiment.run` returns for each (see the module's docstring for
    the equivalence and ``seconds``). Refuses, before any data is loaded, specs that may not
    train together (:func:`check_together`); use :func:`group_specs` to split a list.

    ``checkpointer``: a :class:`fedlib.checkpoint.Checkpointer` for the group (key
    :func:`group_key`): the group resumes from it and checkpoints at round boundaries like one
    run, and its deadline stops the group (:class:`fedlib.checkpoint.RunStopped`)."""
    specs = check_together(specs)
    dev = resolve_device(device)
    t0, c0 = time.perf_counter(), time.process_time()
    if checkpointer is not None:  # a resumed group's seconds include its earlier executions'
        t0, c0 = t0 - checkpointer.elapsed, c0 - checkpointer.cpu_elapsed
    records: list[dict | None] = [None] * len(specs)
    runs: list[_Run] = []
    where: list[int] = []
    for i, spec in enumerate(specs):
        run, record = _start(spec, device, dev)
        if run is None:
            records[i] = record
        else:
            if runs:
                _share_pools(runs[0], run)
            runs.append(run)
            where.append(i)
    if runs:
        _train(runs, checkpointer)
        n = len(runs)
        for i, r in zip(where, runs):
            if not r.failed:
                records[i] = _record(r, t0, c0, n)
        for i, r in zip(where, runs):  # a diverged run alone: its "failed" record is run()'s
            if r.failed:
                records[i] = X.run(r.spec, device)
    return records


def _carried(runs: list[_Run]) -> list[tuple]:
    """What each run carries from one round to the next (a checkpoint's state of the group)."""
    return [(r.model, r.state, r.rng, r.selected, r.failed, r.ctx.history) for r in runs]


def _adopt(runs: list[_Run], carried: list[tuple]) -> None:
    for r, (model, state, rng, selected, failed, history) in zip(runs, carried):
        r.model, r.state, r.rng, r.selected, r.failed, r.ctx.history = model, state, rng, selected, failed, history


def _train(runs: list[_Run], checkpointer=None) -> None:
    """Every round: each live run picks its clients, all train in one call, each run aggregates
    and steps its server and logs its round. Runs that diverge are marked ``failed``. The rounds
    are one :func:`fedlib.methods.base.run_rounds` phase of the merged context, so a
    ``checkpointer`` resumes and saves the whole group (each run's model, server state,
    selection stream, picks, history; the merged clients' kept optimiser states)."""
    cfg = runs[0].ctx.cfg
    merged_fed, offsets = Federation.concat([r.ctx.fed for r in runs])
    for r, off in zip(runs, offsets.tolist()):
        r.offset = off
    merged = Context(fed=merged_fed, model=runs[0].ctx.model, cfg=cfg, seed=0,
                     counts_train=np.zeros((merged_fed.n_clients, merged_fed.n_classes), dtype=np.int64),
                     checkpoints=checkpointer)
    k = runs[0].ctx.n_clients
    pool = np.arange(k)
    assignment = np.zeros(k, dtype=np.int64)
    spare = None

    def step(t: int, carried: list) -> list:
        nonlocal spare
        _adopt(runs, carried)
        live = [r for r in runs if not r.failed]
        if not live:
            return _carried(runs)
        picks = {id(r): sample_clients(r.rng, pool, cfg.fraction, cfg.min_clients) for r in live}
        while live:
            res, owner = _round(merged, live, picks, t, spare)
            if res is not None:
                break
            live = [r for r in live if not r.failed]
        else:
            return _carried(runs)
        spare = res.params
        n = res.n_samples
        for i, r in enumerate(live):
            rows = np.flatnonzero(owner == i)
            aggregate = weighted_average(take_rows(res.params, rows), n[rows])
            if r.server is not None:
                rule = partial(r.server.step, hp=r.hp)
                model, r.state = server_update(rule, r.model, aggregate, r.state, r.names)
            else:
                model = aggregate
            try:
                check_finite_models(broadcast(model, 1), t, "after the server update" if r.server is not None
                                    else "after aggregation", cfg)
            except DivergenceError:
                r.failed = True
                continue
            r.model = model
            if r.spec.method != "fedavg":
                r.selected = [*r.selected, picks[id(r)].tolist()]
        _log_round(merged, [r for r in live if not r.failed], t, assignment)
        return _carried(runs)

    _adopt(runs, run_rounds(merged, range(cfg.rounds), _carried(runs), step))


def _log_round(merged: Context, runs: list[_Run], t: int, assignment: np.ndarray) -> None:
    """Each run's :meth:`Context.log_round` for round ``t``. Runs whose entry is the weighted
    test accuracy alone (no official test set, no pooled evaluation) are evaluated in **one**
    call on the merged federation, each client with its own run's model (``model_of``): the
    correct counts, and so the entries, of R calls (a per-run call when only one run logs)."""
    cfg = merged.cfg
    if not runs or ((t + 1) % cfg.eval_every and t != cfg.rounds - 1):
        return
    plain = [r for r in runs if not r.ctx.fed.has_global_test and not r.ctx.pooled_models_eval]
    if len(plain) > 1:
        k = plain[0].ctx.n_clients
        clients = np.concatenate([r.offset + np.arange(k) for r in plain])
        models = {name: torch.stack([r.model[name] for r in plain]) for name in plain[0].model}
        res = evaluate(merged.model, models, merged.fed, clients, split="test", model_of=np.repeat(np.arange(len(plain)), k))
        correct, n = to_host(res.correct, np.int64), to_host(res.n, np.int64)
        for i, r in enumerate(plain):
            rows = slice(i * k, (i + 1) * k)
            r.ctx.history.append({"round": t + 1, "global_accuracy": global_accuracy(correct[rows], n[rows])})
    else:
        plain = []
    for r in runs:
        if not any(r is p for p in plain):
            r.ctx.log_round(t, broadcast(r.model, 1), assignment)


def _round(merged: Context, live: list[_Run], picks: dict, t: int, spare):
    """One call training every live run's picks: (TrainResult, owner (M,) run positions in
    ``live``), or (None, None) after marking the runs whose clients diverged as failed."""
    clients = np.concatenate([r.offset + picks[id(r)] for r in live])
    ids = np.concatenate([picks[id(r)] for r in live])
    owner = np.repeat(np.arange(len(live)), [len(picks[id(r)]) for r in live])
    seeds = np.repeat([int(r.spec.seed) for r in live], [len(picks[id(r)]) for r in live])
    models = {name: torch.stack([r.model[name] for r in live]) for name in live[0].model}
    start = take_rows(models, owner)
    mu = np.array([live[i].mu for i in owner], dtype=np.float64)
    try:
        res = merged.train(start, clients, t, prox_center=start if mu.any() else None, prox_mu=mu,
                           out=spare, seed=seeds, seed_clients=ids)
    except DivergenceError as err:
        bad = {int(np.searchsorted([r.offset for r in live], c, side="right")) - 1 for c in err.clients}
        if not bad:  # no client named: nothing to drop, so nothing to retry
            raise
        for i in bad:
            live[i].failed = True
        return None, None
    return res, owner


def _record(r: _Run, t0: float, c0: float, share: int) -> dict:
    """The run's record as :func:`fedlib.experiment.run` writes it (its final check included)."""
    cfg = r.ctx.cfg
    models = broadcast(r.model, 1)
    assignment = np.zeros(r.ctx.n_clients, dtype=np.int64)
    info = {} if r.spec.method == "fedavg" else {"selected": r.selected}
    outcome = Outcome(models, assignment, info)
    try:
        check_finite_models(outcome.models, None, f"in the final models (after {cfg.rounds} rounds)", cfg)
    except DivergenceError:
        r.failed = True
        return None
    base = {**r.base, "host": {**r.base["host"], "together": share}}
    return X.outcome_record(r.spec, base, r.ctx, r.ds, outcome, t0, c0, share)
