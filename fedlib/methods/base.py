"""What every method shares: the training protocol, the run context, the outcome.

A method is one module exposing ``NAME``, a frozen dataclass ``Hyper`` (its
hyperparameters with the paper's defaults, Table II), ``GRID`` (Table II's search grid,
read by :func:`fedlib.tuning.tune`), ``run(ctx, hp) -> Outcome`` and ``INFO``, its registry
entry (:class:`fedlib.methods.contract.MethodInfo`). It sees the federation
only through :class:`Context`; the math of its rules lives in pure functions in its module.

The services of :class:`Context`
--------------------------------
train        local training of many clients: the protocol's optimiser (Adam, or SGD with
             momentum and weight decay — ``FLConfig.optimizer``), its state fresh each call
             or kept per client across rounds (``FLConfig.keep_optimizer_state``), a
             proximal pull on parameters (FedProx, FedAMP, FedSoft) and a pull on
             embeddings (FedProto's prototypes, :class:`fedlib.engine.EmbeddingPull`)
evaluate     correct counts per client through the method's predictor (one model per
             client; FedPrism's gated expert/backbone mixture; FedProto's nearest
             prototype — :mod:`fedlib.engine.predict`), on the 'test', 'val' or 'train' split
evaluate_global  each client's model on the data set's official test set (FedPrism's
             "global accuracy"), when the federation has one
loss_matrix  M models × K clients' losses in one batched call (IFCA, FedSoft, pFedLIA's
             influence scores, FedFomo, CAFA)
init_state, init_states, rng, log_round   the seeded initial model(s), named RNG streams,
             per-round history
planted_clusters   the partition's true cluster of each client (pFedLIA's protocols; the
             Oracle), set by :func:`fedlib.experiment.run`
restart      forget the history and kept optimiser states (PSI-PFL trains one candidate per
             threshold, each afresh)

Optional hooks and properties, fields of its ``INFO`` (:class:`fedlib.methods.contract.MethodInfo`),
checked by :meth:`fedlib.experiment.RunSpec.validate` before any work: ``needs_validation(hp)``
(the method reads the validation split), ``protocols`` (the partitions it is defined on),
``check_protocol(hp, cfg)`` (a constraint between its hyperparameters and the training
protocol), ``check_arch(arch)`` (a constraint on the model: FedPrism needs layers before the
classifier) and ``streams_average`` (all its training goes through :func:`federated_averaging`
or :func:`global_model_rounds`, so ``FLConfig.stream_average`` applies; other methods refuse it).

Shared loops: :func:`federated_averaging` (FedAvg inside each of several groups) and
:func:`global_model_rounds` (one global model, pluggable selection and server step); both
take a ``start`` model and a ``first_round``/``rounds`` window, so a method can run a
warm-up phase and then a second phase that continues the round count.
"""
from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, field, fields

import numpy as np
import torch
from torch import nn

from ..engine import Federation, RunningAverage, broadcast, evaluate, local_train, weighted_average
from ..engine.errors import DivergenceError
from ..engine.evaluate import evaluate_global, loss_matrix
from ..engine.host import to_host
from ..engine.optim import SGD, Adam, EmbeddingPull, fresh_state
from ..engine.predict import OneModel, evaluate_with
from ..evaluation import global_accuracy
from ..models import init_params
from ..validation import check_choice, check_int, check_number, fail

State = dict  # name -> Tensor; "stacked" when every tensor has a leading client/model axis
CLUSTER_STREAM = "clusters/selection"  # selection streams of the per-cluster phase after a warm-up

__all__ = ["FLConfig", "Context", "Outcome", "sample_clients", "take", "parameter_average", "federated_averaging", "CLUSTER_STREAM",
           "global_model_rounds", "round_size", "check_finite_models", "State", "local_losses", "round_robin",
           "pooled_accuracies", "fedlab_losses", "aggregation_weights", "AGGREGATIONS", "cluster_means",
           "per_cluster_average"]


@dataclass(frozen=True)
class FLConfig:
    """The training protocol (Clust-PSI-PFL Sec. IV-A and Table II's shared values).

    rounds T=40, local_epochs E=5, fraction q=0.5 of clients per round (uniform, without
    replacement, at least one), Adam lr 0.001, batch 32. ``eval_every`` sets how often the
    per-round global accuracy is recorded (the last round always is).

    The client optimiser: ``optimizer='adam'`` (the paper's; Keras's ε = 1e-7) or ``'sgd'``
    (FedPrism: lr 0.01, ``momentum`` 0.9; pFedLIA / FL-bench style with ``weight_decay``);
    ``weight_decay`` is torch's coupled L2 for either. ``keep_optimizer_state`` False (the
    paper's Keras clients: a fresh optimiser each round) or True (each client keeps its
    Adam moments / SGD momentum across the rounds it is selected in).

    ``shuffle`` False: clients walk their samples in stored order every epoch (the PSI papers'
    FedLab baselines). ``min_clients``: at least this many clients per round and group
    (Flower's ``min_fit_clients``, 2 in the PSI papers' code; capped at the group's size).

    ``max_loss``: a client whose last-epoch mean training loss exceeds ``max_loss · ln C``
    (ln C: the loss of a uniform guess over C classes) has diverged even if its weights are
    finite — Adam moves each weight by at most about lr per step, so lr = 1e6 leaves huge
    finite weights at chance accuracy; the run then fails like a non-finite one.

    ``stream_average`` True: FedAvg-style averaging (:func:`federated_averaging` and
    :func:`global_model_rounds`, so FedAvg, Clust-PSI-PFL, the Oracle, FedProx, the FedOpt
    family, PoC, HACCS, FedCLS and PSI-PFL) folds each chunk of trained clients into its
    group's average as soon as it has trained (:class:`~fedlib.engine.RunningAverage`,
    float64 sums), so no tensor holds every selected client's model: memory is the data,
    the models and one chunk (1.2 GB less for 500 FMNIST CNN clients). The averages equal
    the default's up to float32 rounding, not bit for bit (the default's float32 product
    rounds differently), so it is part of a run's spec; False (the default) keeps the
    published numbers.
    """

    rounds: int = 40
    local_epochs: int = 5
    fraction: float = 0.5
    batch_size: int = 32
    lr: float = 1e-3
    eval_every: int = 1
    path: str = "auto"
    optimizer: str = "adam"
    momentum: float = 0.0
    weight_decay: float = 0.0
    keep_optimizer_state: bool = False
    max_loss: float = 100.0
    shuffle: bool = True
    min_clients: int = 1
    stream_average: bool = False

    def __post_init__(self):
        for name in ("rounds", "local_epochs", "batch_size", "eval_every"):
            check_int(getattr(self, name), name, 1)
        check_number(self.fraction, "fraction (q)", 0, 1, low_open=True)
        check_number(self.lr, "lr", 0, low_open=True)
        check_choice(self.path, "path", ("auto", "vectorised", "sequential"))
        check_choice(self.optimizer, "optimizer", ("adam", "sgd"))
        check_number(self.momentum, "momentum", 0, 1, high_open=True)
        check_number(self.weight_decay, "weight_decay", 0)
        check_choice(self.keep_optimizer_state, "keep_optimizer_state", (False, True))
        check_number(self.max_loss, "max_loss", 1, low_open=True)
        check_choice(self.shuffle, "shuffle", (True, False))
        check_int(self.min_clients, "min_clients", 1)
        check_choice(self.stream_average, "stream_average", (False, True))
        if self.optimizer == "adam" and self.momentum:
            fail("momentum", "0 with optimizer='adam' (Adam's β1 plays that role; use optimizer='sgd')",
                 self.momentum)

    def client_optimizer(self) -> Adam | SGD:
        """The engine's optimiser for this protocol."""
        if self.optimizer == "sgd":
            return SGD(lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)
        return Adam(lr=self.lr, weight_decay=self.weight_decay)

    @classmethod
    def from_dict(cls, d: dict | None) -> "FLConfig":
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown training setting(s) {unknown}; valid: {sorted(known)}")
        return cls(**d)


@dataclass
class Outcome:
    """What a method leaves behind.

    models : stacked State (G, ...) — G models (1 for FedAvg, τ for Clust-PSI-PFL, K for
        personalised methods).
    assignment : int array (K,) — the model each client uses for evaluation.
    info : dict — JSON-serialisable extras (τ, silhouettes, cluster sizes, …).
    predictor : how a client predicts with its model (:mod:`fedlib.engine.predict`);
        None = ``OneModel()``, the argmax of models[assignment[k]].
    """

    models: State
    assignment: np.ndarray
    info: dict = field(default_factory=dict)
    predictor: object | None = None


def sample_clients(rng: np.random.Generator, pool, fraction: float, minimum: int = 1) -> np.ndarray:
    """Uniformly sample min(|pool|, max(minimum, ⌊q·|pool|⌋)) clients of ``pool`` without
    replacement (sorted).

    Flower's rule (``max(int(q · available), min_fit_clients)``); ``minimum`` 1 (default) so
    that a small cluster still trains every round, 2 for Flower's default ``min_fit_clients``.
    """
    pool = np.asarray(pool, dtype=np.int64)
    if pool.size == 0:
        raise ValueError("cannot sample from an empty client pool")
    m = min(pool.size, max(minimum, int(fraction * pool.size)))
    return np.sort(rng.choice(pool, size=m, replace=False))


def take(stacked: State, rows) -> State:
    """Rows ``rows`` of every tensor of a stacked state (indices or a bool mask)."""
    idx = torch.as_tensor(np.asarray(rows), dtype=torch.long)
    return {k: v[idx.to(v.device)] for k, v in stacked.items()}


def parameter_average(stacked: State, rows) -> State:
    """The uniform parameter average of rows ``rows`` (R,) of a stacked state, as a stacked
    state of one row: ``name -> (1, *shape)``; floating tensors are averaged, integer buffers
    (BatchNorm's batch counters) taken from the first row."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.ndim != 1 or rows.size == 0:
        fail("rows", "a non-empty 1-D array of row indices (the models to average)", rows.tolist())
    sub = take(stacked, rows)
    return {k: (v.mean(dim=0, keepdim=True) if v.is_floating_point() else v[:1]) for k, v in sub.items()}


def _fits(out: State | None, like: State) -> bool:
    """Whether ``out`` has ``like``'s names and shapes (a round of another size has not)."""
    return out is not None and out.keys() == like.keys() and all(out[k].shape == v.shape for k, v in like.items())


def take_rows(stacked: State, rows: np.ndarray) -> State:
    """:func:`take` without a copy where none is needed: every row once in order returns
    ``stacked`` itself; one row repeated (every client starting from the same model) a
    read-only expanded view, shape (len(rows), ...). The engine copies its start states
    before training, so the values it trains are the same; at K = 1,000 a copy of the
    selected clients' weights costs seconds and gigabytes for a CNN (benchmarks/scaling.py)."""
    rows = np.asarray(rows, dtype=np.int64)
    first = next(iter(stacked.values()))
    if rows.size == len(first) and np.array_equal(rows, np.arange(rows.size)):
        return stacked
    if rows.size and np.all(rows == rows[0]):
        return broadcast({k: v[int(rows[0])] for k, v in stacked.items()}, rows.size, copy=False)
    return take(stacked, rows)


@dataclass
class Context:
    """One run's federation, model, protocol and seed, and the services methods use."""

    fed: Federation
    model: nn.Module
    cfg: FLConfig
    seed: int
    counts_train: np.ndarray
    history: list = field(default_factory=list)
    _opt_state: object = field(default=None, repr=False)  # all K clients' optimiser state
    true_clusters: np.ndarray | None = None  # (K,) planted cluster of each client, where the partition has them
    pooled_models_eval: bool = False  # log_round also scores every model on the pooled test set (paper_code's CFL/FedSoft)
    checkpoints: object = field(default=None, repr=False)  # a fedlib.checkpoint.Checkpointer: run_rounds resumes and saves

    @property
    def planted_clusters(self) -> np.ndarray:
        """(K,) the partition's true cluster of every client (pFedLIA's pathological and noisy
        protocols: client i → i mod n_clusters); a clear error where the partition has none."""
        if self.true_clusters is None:
            fail("true_clusters", "the partition's planted cluster of every client (only the "
                 "'pathological_clusters' and 'noisy_clusters' protocols and the protocols beyond label skew, "
                 "fedlib.partition.BEYOND_LABEL_PROTOCOLS, plant clusters)", None)
        return np.asarray(self.true_clusters, dtype=np.int64)

    @property
    def n_clients(self) -> int:
        return self.fed.n_clients

    def rng(self, stream: str) -> np.random.Generator:
        """An independent generator per named stream, seeded from (seed, stream)."""
        tag = int.from_bytes(hashlib.sha256(stream.encode()).digest()[:4], "little")
        return np.random.default_rng([self.seed, tag])

    def init_state(self) -> State:
        """The initial global model (seeded by the run seed), one unstacked State."""
        return {k: v.to(self.fed.device) for k, v in init_params(self.model, self.seed).items()}

    def init_states(self, n: int, stream: str) -> State:
        """``n`` differently initialised models, stacked (n, ...): seeds drawn from the named
        RNG stream (cluster models of FedSoft, IFCA, FeSEM …)."""
        seeds = self.rng(stream).integers(0, 2**31 - 1, size=check_int(n, "n", 1))
        states = [init_params(self.model, int(seed)) for seed in seeds]
        return {k: torch.stack([st[k] for st in states]).to(self.fed.device) for k in states[0]}

    def train(self, start: State, clients, round_idx: int, *, epochs: int | None = None,
              prox_center: State | None = None, prox_mu=0.0, embedding_pull: EmbeddingPull | None = None,
              out: State | None = None, sink=None, seed=None, seed_clients=None):
        """Local training of ``clients`` (M,) from the rows of ``start`` (stacked, (M, ...)).

        ``out``: tensors the trained rows are written into (``local_train``'s ``out``: e.g. an
        earlier round's result that nothing reads any more; ignored when its shapes differ).
        ``sink``: ``local_train``'s — each chunk's trained rows are handed to it and the
        result's ``params`` is None.

        ``epochs`` None: the protocol's E. With ``cfg.keep_optimizer_state`` each client
        resumes its own optimiser state and leaves its new state behind (a client listed
        twice in one call keeps the state of its last row).

        ``seed``, ``seed_clients``: ``local_train``'s per-row seeds and seed ids (default: the
        run's seed and ``clients``), for a context whose federation merges several runs'
        clients (:mod:`fedlib.together`).

        Raises :class:`~fedlib.engine.errors.DivergenceError` (naming the clients, the round
        and the protocol's lr and optimiser) when local training leaves non-finite weights.
        """
        clients = np.asarray(clients, dtype=np.int64)
        optimizer = self.cfg.client_optimizer()
        keep = self.cfg.keep_optimizer_state
        try:
            res = local_train(
                self.model, start, self.fed, clients,
                epochs=self.cfg.local_epochs if epochs is None else epochs, batch_size=self.cfg.batch_size,
                seed=self.seed if seed is None else seed, seed_clients=seed_clients, round_idx=round_idx, prox_center=prox_center, prox_mu=prox_mu,
                path=self.cfg.path, optimizer=optimizer, embedding_pull=embedding_pull, shuffle=self.cfg.shuffle,
                opt_state=self._opt_state.take(clients) if keep and self._opt_state is not None else None,
                return_opt_state=keep, out=out if _fits(out, start) else None, sink=sink,
            )
        except DivergenceError as err:
            raise err.with_context(round_idx=round_idx, lr=self.cfg.lr, optimizer=self.cfg.optimizer) from None
        limit = self.cfg.max_loss * math.log(self.fed.n_classes)
        loss = to_host(res.mean_loss, np.float64)
        exploded = np.flatnonzero(np.isfinite(loss) & (loss > limit))
        if exploded.size:
            raise DivergenceError(sorted(set(clients[exploded].tolist())), round_idx, what="training loss",
                                  state="exploded", stage=f"(last-epoch mean up to {loss[exploded].max():.3g} > "
                                  f"max_loss·ln C = {limit:.3g})", lr=self.cfg.lr, optimizer=self.cfg.optimizer)
        if keep:
            if self._opt_state is None:
                self._opt_state = fresh_state(optimizer, broadcast({k: v[0] for k, v in start.items()}, self.n_clients), [
                    n for n, _ in self.model.named_parameters()])
            self._opt_state = self._opt_state.put(clients, res.opt_state)
        return res

    def evaluate(self, models: State, assignment, split: str = "test", predictor=None) -> tuple[np.ndarray, np.ndarray]:
        """Correct counts and sizes, shape (K,) each, every client predicting with
        models[assignment[k]] through ``predictor`` (None: one model, argmax)."""
        assignment = np.asarray(assignment, dtype=np.int64)
        clients = np.arange(self.n_clients)
        if predictor is None or isinstance(predictor, OneModel):  # each distinct model loaded once, not copied K times
            res = evaluate(self.model, models, self.fed, clients, split=split, model_of=assignment)
        else:
            res = evaluate_with(predictor, self.model, take(models, assignment), self.fed, clients, split=split)
        return to_host(res.correct, np.int64), to_host(res.n, np.int64)

    def evaluate_global(self, models: State, assignment) -> tuple[np.ndarray, int]:
        """Correct counts (K,) of every client's model on the official test set, and its size.

        Each distinct model is evaluated once (G models, not K)."""
        assignment = np.asarray(assignment, dtype=np.int64)
        used, row = np.unique(assignment, return_inverse=True)
        res = evaluate_global(self.model, take(models, used), self.fed)
        return to_host(res.correct, np.int64)[row], int(to_host(res.n)[0])

    def param_average_accuracy(self, models: State, assignment) -> float:
        """Official-test accuracy of :func:`parameter_average` of the distinct models the clients
        use (rows ``unique(assignment)``): FedPrism's Table 1 reading of a clustered method's
        "global accuracy" (:mod:`fedlib.evaluation`)."""
        avg = parameter_average(models, np.unique(np.asarray(assignment, dtype=np.int64)))
        correct, n = self.evaluate_global(avg, np.zeros(1, dtype=np.int64))
        return float(correct[0] / n)

    def loss_matrix(self, models: State, clients, split: str = "val"):
        """Mean loss (M, K') and correct counts (M, K') of every model on every client of
        ``clients`` (K',), and the split sizes (K',) — numpy, on the host."""
        res = loss_matrix(self.model, models, self.fed, np.asarray(clients, dtype=np.int64), split=split)
        return to_host(res.loss), to_host(res.correct), to_host(res.n)

    def restart(self) -> None:
        """Forget the per-round history and the clients' kept optimiser states: a method that
        trains several independent candidates (PSI-PFL's thresholds) starts each afresh."""
        self.history = []
        self._opt_state = None

    def log_round(self, round_idx: int, models: State, assignment, predictor=None) -> None:
        """Record the global test accuracy after round ``round_idx`` (every ``eval_every``).

        With ``pooled_models_eval`` the entry also holds ``pooled_model_accuracy`` (G,): each of
        the G stacked ``models`` on the pooled test set (every client's test split together),
        and their plain mean ``mean_pooled_model_accuracy`` — how the PSI papers' code scored
        CFL and FedSoft (:mod:`fedlib.reproduction`).

        When the federation has the official test set and every client uses one model (a global
        model: FedAvg, FedProx, CAFA), the entry also holds ``global_test_accuracy``, that model
        on the official test set (CAFA's per-round accuracy, §IV-A); personalised rounds skip it
        (K models on the whole test set every round)."""
        last = round_idx == self.cfg.rounds - 1
        if (round_idx + 1) % self.cfg.eval_every and not last:
            return
        correct, n = self.evaluate(models, assignment, predictor=predictor)
        entry = {"round": round_idx + 1, "global_accuracy": global_accuracy(correct, n)}
        if self.fed.has_global_test and np.unique(np.asarray(assignment)).size == 1:
            g_correct, n_global = self.evaluate_global(models, assignment)
            entry["global_test_accuracy"] = float(g_correct[0] / n_global)
        if self.pooled_models_eval:
            pooled = pooled_accuracies(*self.loss_matrix(models, np.arange(self.n_clients), "test")[1:])
            entry.update({"pooled_model_accuracy": pooled.tolist(),
                          "mean_pooled_model_accuracy": float(pooled.mean())})
        self.history.append(entry)


def pooled_accuracies(correct, n) -> np.ndarray:
    """Each model's accuracy (G,) float64 on the union of the clients' splits, from ``correct``
    (G, K) (model g on client k's split) and the split sizes ``n`` (K,) (positive sum)."""
    correct = np.asarray(correct, dtype=np.float64)
    total = float(np.sum(n))
    if not total > 0:
        fail("n", "split sizes with a positive sum", n)
    return correct.sum(axis=1) / total


def federated_averaging(ctx: Context, groups, *, start: State | None = None, log: bool = True,
                        first_round: int = 0, rounds: int | None = None, stream: str = "selection") -> Outcome:
    """FedAvg run independently inside each group of clients (one model per group).

    Each round every group samples max(min_clients, ⌊q·|group|⌋) of its clients (at most all
    of them; ``FLConfig.min_clients``, default 1); all selected clients of all groups train in
    one engine call (each from its group's model); each group's model becomes the
    sample-weighted average of its clients' weights.

    ``groups``: disjoint client groups (one for FedAvg, τ clusters for Clust-PSI-PFL); ``start``:
    the model shared by every group (default: the seeded initial model); ``first_round``,
    ``rounds``: the window [first_round, first_round + rounds) (default: the protocol's rounds
    from 0), so a second phase continues the round count, and so the batch orders, of a warm-up;
    ``stream``: prefix of the groups' selection streams (``f"{stream}/group{g}"``), a second
    phase names its own so that it does not replay the first phase's draws.
    """
    groups = [np.asarray(g, dtype=np.int64) for g in groups]
    assignment = np.full(ctx.n_clients, -1, dtype=np.int64)
    for gi, g in enumerate(groups):
        assignment[g] = gi
    if np.any(assignment < 0):
        raise ValueError("groups must cover every client")
    spare = None  # the last round's trained rows, dead once averaged: the next round writes into them

    def step(t: int, state: tuple) -> tuple:
        nonlocal spare
        models, rngs = state
        picks = [sample_clients(rng, g, ctx.cfg.fraction, ctx.cfg.min_clients) for rng, g in zip(rngs, groups)]
        clients = np.concatenate(picks)
        owner = assignment[clients]
        if ctx.cfg.stream_average:
            new = _streamed_averages(ctx, models, clients, owner, t)
        else:
            res = ctx.train(take_rows(models, owner), clients, t, out=spare)
            n = res.n_samples.to(torch.float64)
            new = []
            for gi in range(len(groups)):
                rows = np.flatnonzero(owner == gi)
                new.append(weighted_average(take_rows(res.params, rows), n[rows]))
            spare = res.params
        models = {k: torch.stack([m[k] for m in new]) for k in new[0]}
        check_finite_models(models, t, "after aggregation", ctx.cfg)
        if log:
            ctx.log_round(t, models, assignment)
        return models, rngs

    models = broadcast(start if start is not None else ctx.init_state(), len(groups))
    rngs = [ctx.rng(f"{stream}/group{gi}") for gi in range(len(groups))]
    models, _ = run_rounds(ctx, _window(ctx, first_round, rounds), (models, rngs), step)
    return Outcome(models, assignment)


def _streamed_averages(ctx: Context, models: State, clients: np.ndarray, owner: np.ndarray,
                       round_idx: int) -> list[State]:
    """Each group's sample-weighted average of its selected clients after training
    (``FLConfig.stream_average``): every chunk is folded into the group's
    :class:`~fedlib.engine.RunningAverage` as it trains. ``models`` (G, ...) the groups'
    models, ``clients`` (M,) and ``owner`` (M,) their groups. One engine call per group, from
    a read-only view of its model, so no tensor holds a row per client."""
    new = []
    for gi in range(len(next(iter(models.values())))):
        mine = clients[owner == gi]
        average = RunningAverage({k: v[gi] for k, v in models.items()})
        ctx.train(take_rows(models, np.full(len(mine), gi)), mine, round_idx,
                  sink=functools.partial(_fold, average, ctx.fed.n_train[mine].astype(np.float64)))
        new.append(average.mean())
    return new


def _fold(average: RunningAverage, n: np.ndarray, rows: np.ndarray, trained: State) -> None:
    """``local_train``'s sink: add the trained rows, weighted by their sample counts n[rows]."""
    average.add(trained, n[rows])


def check_finite_models(models: State, round_idx: int | None, stage: str, cfg: FLConfig | None = None) -> None:
    """Raise :class:`~fedlib.engine.errors.DivergenceError` naming the rows of the stacked
    ``models`` (name -> (G, ...)) that hold a NaN or ±inf; ``stage`` says when (e.g.
    ``"after the server update"``), ``round_idx`` (0-based) in which round, None if unknown;
    ``cfg`` adds the clients' lr and optimiser to the message.

    Costs one sum per tensor and one host sync (a finite sum clears a tensor); rows are
    searched exactly only when a sum is not finite.
    """
    tensors = [t for t in models.values() if t.is_floating_point()]
    if not tensors or bool(torch.isfinite(torch.stack([t.sum().double() for t in tensors])).all()):
        return
    bad = torch.zeros(len(tensors[0]), dtype=torch.bool, device=tensors[0].device)
    for t in tensors:
        bad |= ~torch.isfinite(t.reshape(len(t), -1)).all(1)
    if not bad.any():  # finite weights whose sum overflowed
        return
    raise DivergenceError(models=torch.nonzero(bad).flatten().tolist(), round_idx=round_idx, what="weights",
                          stage=stage, lr=None if cfg is None else cfg.lr,
                          optimizer=None if cfg is None else cfg.optimizer)


def round_size(n_clients: int, fraction: float) -> int:
    """m = max(1, ⌊q·K⌋): the number of clients trained per round (Flower's rule, at least one)."""
    return max(1, int(fraction * n_clients))


def run_rounds(ctx: Context, window: range, state, step, *, opaque: bool = False):
    """``state = step(t, state)`` for every round ``t`` of ``window``; the final state.

    A phase of training written so that ``state`` is everything it carries between rounds
    (tensors, arrays, numpy Generators, lists) resumes from a checkpoint when the context has a
    :class:`fedlib.checkpoint.Checkpointer`: it saves the state at round boundaries, stops the
    run before a deadline, and on resume returns a finished phase's final state at once.
    ``opaque``: the phase keeps state elsewhere (a ``choose``/``observe`` closure); it is
    recomputed on resume and never checkpointed."""
    if ctx.checkpoints is None:
        for t in window:
            state = step(t, state)
        return state
    return ctx.checkpoints.rounds(ctx, window, state, step, opaque=opaque)


def _window(ctx: Context, first_round: int, rounds: int | None) -> range:
    first = check_int(first_round, "first_round", 0)
    n = ctx.cfg.rounds if rounds is None else check_int(rounds, "rounds", 1)
    return range(first, first + n)


def global_model_rounds(ctx: Context, *, choose=None, server_step=None, state=None,
                        prox_mu: float = 0.0, observe=None, start: State | None = None,
                        first_round: int = 0, rounds: int | None = None, weights: str = "samples",
                        pool=None, selection_stream: str | None = None, memo=None) -> Outcome:
    """The one-global-model loop shared by FedAvg-like methods.

    Each round t: ``clients = choose(t, global_state)`` (default: FedAvg's uniform sample of
    ``pool`` — every client when None — from the ``selection/group0`` stream, so methods that
    only change the server see the same clients as FedAvg); they train from the global model, pulled towards it by
    (μ/2)‖w − w_global‖² when ``prox_mu`` > 0 (FedProx); ``server_step(current, aggregate,
    state) -> (new, state)`` turns their sample-weighted average into the next global model
    (default: the average itself); ``observe(clients, result)`` sees each round's training
    (it must copy what it keeps of ``result.params``: the next round writes its clients into
    that memory, as :func:`federated_averaging` does, instead of paging in new memory; with
    ``FLConfig.stream_average`` ``result.params`` is None and the aggregate is folded chunk by
    chunk, as in :func:`federated_averaging`).
    Every client starts from a read-only view of the global model, not a copy per client.
    ``start`` (default: the seeded initial model) and the round window ``first_round``,
    ``rounds`` (default: 0 and the protocol's T) let a phase continue another. ``weights``:
    ``'samples'`` (FedAvg's n_k-weighted average, default) or ``'uniform'`` (a plain mean of
    the clients' models, as FedLab's server aggregates — the PSI papers' code for PoC, HACCS,
    FedCLS and CFL).

    Resumable from a checkpoint (:func:`run_rounds`) when everything the selection carries
    between rounds is the loop's: with ``selection_stream`` the loop owns the generator
    ``rng = ctx.rng(selection_stream)`` and a ``memo`` (an array the method keeps, e.g. HACCS's
    last losses), and calls ``choose(t, global_state, rng, memo)`` and ``observe(clients, result,
    memo)`` (which may update ``memo`` in place). A ``choose`` or ``observe`` without
    ``selection_stream`` keeps state in its closure the loop cannot see: the phase is then
    recomputed on resume.

    Returns an Outcome with models stacked (1, ...), assignment zeros (K,), info["selected"] per round.
    """
    check_choice(weights, "weights", AGGREGATIONS)
    opaque = selection_stream is None and (choose is not None or observe is not None)
    if choose is None:
        if selection_stream is not None:
            fail("selection_stream", "None unless choose is given (FedAvg's sample uses selection/group0)",
                 selection_stream)
        pool = np.arange(ctx.n_clients) if pool is None else np.asarray(pool, dtype=np.int64)
        choose = lambda t, w, rng, memo: sample_clients(rng, pool, ctx.cfg.fraction, ctx.cfg.min_clients)  # noqa: E731
        rng = ctx.rng("selection/group0")
    else:
        if pool is not None:
            fail("pool", "None when choose is given (choose picks the clients)", pool)
        rng = None if selection_stream is None else ctx.rng(selection_stream)
        if selection_stream is None:
            picked, choose = choose, lambda t, w, rng, memo: picked(t, w)  # noqa: E731
    if observe is not None and selection_stream is None:
        seen, observe = observe, lambda clients, res, memo: seen(clients, res)  # noqa: E731
    assignment = np.zeros(ctx.n_clients, dtype=np.int64)
    spare = None  # the last round's trained rows, dead once aggregated: the next round writes into them

    def step(t: int, carried: tuple) -> tuple:
        nonlocal spare
        model, server_state, selected, rng, memo = carried
        clients = np.asarray(choose(t, model, rng, memo), dtype=np.int64)
        start = take_rows(broadcast(model, 1), np.zeros(len(clients), dtype=np.int64))  # a view, no copy per client
        prox_center = start if prox_mu else None
        if ctx.cfg.stream_average:
            average = RunningAverage(model)
            w = aggregation_weights(ctx.fed.n_train[clients].astype(np.float64), weights)
            res = ctx.train(start, clients, t, prox_center=prox_center, prox_mu=prox_mu,
                            sink=functools.partial(_fold, average, to_host(w, np.float64)))
            aggregate = average.mean()
        else:
            res = ctx.train(start, clients, t, prox_center=prox_center, prox_mu=prox_mu, out=spare)
            aggregate = weighted_average(res.params, aggregation_weights(res.n_samples, weights))
            spare = res.params
        model, server_state = server_step(model, aggregate, server_state) if server_step else (aggregate, server_state)
        check_finite_models(broadcast(model, 1), t, "after the server update" if server_step else "after aggregation",
                            ctx.cfg)
        if observe is not None:
            observe(clients, res, memo)
        ctx.log_round(t, broadcast(model, 1), assignment)
        return model, server_state, [*selected, clients.tolist()], rng, memo

    model = ctx.init_state() if start is None else start
    model, _, selected, _, _ = run_rounds(ctx, _window(ctx, first_round, rounds), (model, state, [], rng, memo), step,
                                          opaque=opaque)
    return Outcome(broadcast(model, 1), assignment, {"selected": selected})


def global_model_runs_together(ctx: Context, pools, rngs) -> tuple[list[Outcome], list[list]]:
    """C independent FedAvg runs, one per client pool, trained side by side.

    Run c is :func:`global_model_rounds` with ``choose`` = a uniform sample of ``pools[c]``
    (non-empty int arrays) from ``rngs[c]`` (its selection stream; :func:`sample_clients`), each
    from the seeded initial model. Pools may
    overlap (PSI-PFL's candidates are nested): a client picked by two runs trains twice in
    that round, once from each run's model, with the same per-(client, round) batch order.
    Every round all runs' clients train in **one** engine call (on a GPU one chunk of C·m
    rows instead of C calls of m rows), then each run's model becomes the sample-weighted
    average of its own rows. The clients, their batch orders and each run's evaluations are
    those of C separate :func:`global_model_rounds` calls; the weights agree up to the
    rounding of kernels that see a wider batch of clients.

    Needs ``cfg.keep_optimizer_state`` off (a client kept one optimiser state, not one per
    run). With ``cfg.stream_average`` each run trains in its own call (no row per client is
    held), as :func:`federated_averaging` does.

    Returns (outcomes, histories): per run an Outcome (models stacked (1, ...), assignment zeros
    (K,), info["selected"] per round) and the evaluations :meth:`Context.log_round` logged
    for it; ``ctx.history`` is left as the last run's.
    """
    if ctx.cfg.keep_optimizer_state:
        fail("keep_optimizer_state", "False for runs trained together (a client would share one optimiser "
                                     "state between the runs); train the runs one by one", True)
    pools = [np.asarray(p, dtype=np.int64) for p in pools]
    if len(pools) == 0 or len(rngs) != len(pools):
        fail("rngs", f"one generator per pool ({len(pools)} pools, at least one)", len(rngs))
    n_runs = len(pools)
    assignment = np.zeros(ctx.n_clients, dtype=np.int64)
    spare = None  # the last round's trained rows, dead once averaged: the next round writes into them

    def step(t: int, carried: tuple) -> tuple:
        nonlocal spare
        models, histories, selected, rngs = carried
        picks = [sample_clients(rng, pool, ctx.cfg.fraction, ctx.cfg.min_clients) for rng, pool in zip(rngs, pools)]
        clients = np.concatenate(picks)
        owner = np.repeat(np.arange(n_runs), [len(p) for p in picks])
        if ctx.cfg.stream_average:
            new = _streamed_averages(ctx, models, clients, owner, t)
        else:
            res = ctx.train(take_rows(models, owner), clients, t, out=spare)
            n = res.n_samples.to(torch.float64)
            rows = [np.flatnonzero(owner == c) for c in range(n_runs)]
            new = [weighted_average(take_rows(res.params, r), n[r]) for r in rows]
            spare = res.params
        models = {k: torch.stack([m[k] for m in new]) for k in new[0]}
        check_finite_models(models, t, "after aggregation", ctx.cfg)
        for c in range(n_runs):
            selected[c].append(picks[c].tolist())
            ctx.history = histories[c]
            ctx.log_round(t, {k: v[c:c + 1] for k, v in models.items()}, assignment)
        return models, histories, selected, rngs

    carried = (broadcast(ctx.init_state(), n_runs), [[] for _ in pools], [[] for _ in pools], list(rngs))
    models, histories, selected, _ = run_rounds(ctx, _window(ctx, 0, None), carried, step)
    ctx.history = histories[-1]  # the last run's, as when the runs train one by one
    outcomes = [Outcome({k: v[c:c + 1].clone() for k, v in models.items()}, assignment.copy(),
                        {"selected": selected[c]}) for c in range(n_runs)]
    return outcomes, histories


AGGREGATIONS = ("samples", "uniform")


def aggregation_weights(n_samples, rule: str = "samples"):
    """Server weights of the round's client models: their sample counts (FedAvg), or equal
    weights (``'uniform'``: FedLab's ``fedavg_aggregate`` without weights). Shape as ``n_samples``."""
    check_choice(rule, "aggregation", AGGREGATIONS)
    return n_samples if rule == "samples" else torch.ones_like(torch.as_tensor(n_samples), dtype=torch.float64)


# ----------------------------------------------------------------------------- selection helpers
def fedlab_losses(ctx: Context, global_state: State, clients, batch_size: int = 64) -> np.ndarray:
    """The client "loss" FedLab's ``evaluate`` returns, which the PSI papers' PoC and HACCS rank
    by: the sum over the client's train split in stored order, cut into batches of
    ``batch_size``, of each batch's mean cross-entropy — so a client with more batches
    looks lossier (⌈n_k / B⌉ batch means added up). Every client's batches are scored in one
    batched evaluation (:func:`fedlib.engine.loss_matrix`, ``reduction='batch_means'``), on the
    protocol's path.

    Returns (len(clients),) float64; 0 for a client without training samples.
    """
    check_int(batch_size, "batch_size", 1)
    clients = np.asarray(clients, dtype=np.int64)
    res = loss_matrix(ctx.model, broadcast(global_state, 1), ctx.fed, clients, split="train",
                      reduction="batch_means", mean_batch=batch_size, path=ctx.cfg.path)
    return to_host(res.loss[0], np.float64)


def local_losses(ctx: Context, global_state: State, clients) -> np.ndarray:
    """F_k(w): mean train-split cross-entropy of the global model on each of ``clients`` ((d,))."""
    clients = np.asarray(clients, dtype=np.int64)
    res = evaluate(ctx.model, broadcast(global_state, len(clients)), ctx.fed, clients,
                   split="train", path=ctx.cfg.path)
    return to_host(res.mean_loss)


def round_robin(order, ranked_members, m: int) -> np.ndarray:
    """Fill a round: pass after pass over the groups in ``order``, take each group's next
    member (in its own ranking) until m clients are chosen. ``order``: group ids, and
    ``ranked_members[g]``: group g's clients, most preferred first; 1 ≤ m ≤ their total.
    Returns (m,) int64, distinct clients in selection order.
    """
    total = sum(len(r) for r in ranked_members)
    if not 1 <= m <= total:
        raise ValueError(f"m must be in 1..{total}, got {m}")
    chosen = []
    depth = 0
    while len(chosen) < m:
        for g in order:
            if depth < len(ranked_members[g]) and len(chosen) < m:
                chosen.append(int(ranked_members[g][depth]))
        depth += 1
    return np.asarray(chosen, dtype=np.int64)


def cluster_means(values, labels) -> np.ndarray:
    """Mean of ``values`` (K,) over each group of ``labels`` (K,; ids 0..G−1) → (G,)."""
    labels = np.asarray(labels, dtype=np.int64)
    return np.bincount(labels, weights=values) / np.bincount(labels)


def per_cluster_average(models: State, members: State, cluster, weights) -> State:
    """Each cluster model j ← the weighted average of the member models assigned to it:
    θ_j ← Σ_{i: c_i = j} w_i θ_i / Σ_{i: c_i = j} w_i (IFCA's aggregation with w = sample
    counts; FeSEM's M-step with w = its a_i). ``models`` (k, ...), ``members`` (M, ...),
    ``cluster`` (M,) in [0, k), ``weights`` (M,) ≥ 0 → new State (k, ...) in ``models``'
    dtypes; a cluster with no member, or whose members all weigh 0, keeps its model.
    """

    cluster = np.asarray(cluster, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    out = {name: value.clone() for name, value in models.items()}
    for j in np.unique(cluster):
        rows = np.flatnonzero(cluster == j)
        if w[rows].sum() > 0:
            avg = weighted_average(take(members, rows), w[rows])
            for name in out:
                out[name][int(j)] = avg[name]
    return out
