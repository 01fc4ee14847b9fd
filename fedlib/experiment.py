"""Run one federated experiment from a spec: the spec (``RunSpec``, ``grid_specs``), the data
(``build_federation``, ``build_context``) and the run (``run``). Grids of runs, with a cache of
finished runs, are :mod:`fedlib.grid`'s (``run_grid``, re-exported here on first use, as are
``load_records``, ``write_manifest``, ``load_grid``, ``present_records`` and the budget
helpers); the record's schema and its reading and writing are :mod:`fedlib.records`'s.

``RunSpec`` names everything a result depends on (dataset, protocol, level, K, seed,
method, hyperparameters, training protocol, data subset). ``run(spec)`` returns a record
(a JSON-able dict carrying the full configuration, library versions, the host — CPU model,
instruction set and threads, on which training's last bits depend — per-client and
global metrics, per-round history, and the method's info such as τ).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from . import __version__, checkpoint, partition as P
from .engine import Federation, resolve_device
from .engine.precision import gpu_policy
from .evaluation import global_accuracy, summarise_clients
from .methods import METHODS, STREAMING_METHODS, Context, FLConfig, get_method, make_hyper, method_info
from .models import ARCH_FOR_DATASET, ARCHITECTURES, build_model
from .noniid import wpsi
from .reproduction import REPRODUCTIONS, Settings, reported_accuracy, runs_differently, settings_for
from .validation import check_choice, check_int, check_number, check_seed, fail

__all__ = ["RunSpec", "run", "run_grid", "grid_specs", "load_records", "record_path", "present_records", "build_federation",
           "build_context", "write_manifest", "load_grid"]
# run_grid's budget helpers (estimate_seconds, timing_records, fits_budget, sharing, device_kind_of,
# SAFETY_FACTOR, ENV_SHARING) are public for benchmarks/paper_grid.py but stay out of __all__, the
# list of validated entry points (tests/test_bad_inputs.py); estimate_seconds checks its own inputs.

from .records import FINISHED, RECORD_VERSION, with_current_defaults, with_recorded_defaults  # noqa: E402  (the record's schema lives in fedlib.records)

_LATER_FIELDS = {"val_fraction": 0.0, "global_test": False, "n_global_test": None,  # added with the val and global test splits
                 "reproduction": "paper_text", "pool_test": False}  # added with fedlib.reproduction; defaults keep old keys


@dataclass(frozen=True)
class RunSpec:
    """Everything one run depends on.

    Attributes
    ----------
    dataset : registry name (fedlib.datasets), e.g. 'fmnist', 'adult'
    protocol : partition protocol (fedlib.partition.PROTOCOLS), e.g. 'dirichlet'
    level : the protocol's parameter (α, S, …)
    n_clients : K
    seed : partition, split, initial-weights and selection seed
    method : registry name (fedlib.methods.METHODS)
    hyper : the method's hyperparameters (over its paper defaults)
    fl : training protocol overrides (fedlib.methods.FLConfig fields)
    n_train : optional stratified subset of the training pool (CI-sized runs; seed 0, fixed
        across run seeds so that seeds vary only the partition and training)
    test_fraction : per-client test share (0.2: the papers' 80/20)
    arch : model architecture override (default: the dataset's paper architecture)
    val_fraction : per-client validation share, taken from the train part (0: none, the
        papers' protocol; the test split is the same for every val_fraction)
    global_test : also evaluate every client's model on the data set's official test set
        (FedPrism's "global accuracy"; recorded as ``global_test_*``)
    n_global_test : optional stratified subset (seed 0) of that official test set (CI-sized
        runs: every personalised model is evaluated on it); None = all of it
    reproduction : 'paper_text' (Table II as written, the default) or 'paper_code' (what the
        authors' code ran for this method: :mod:`fedlib.reproduction`; its settings override
        ``hyper`` and ``fl`` for the fields they name)
    pool_test : pool the data set's official test set into the training pool before the
        partition (FL-bench's generator, which pFedLIA's runs used: FMNIST's 60,000 + 10,000
        images partitioned together, each client then split by ``test_fraction``, 0.25 there);
        no official test set is left, so ``global_test`` must be False. ``n_train`` subsets the
        pooled set.

    Fields added after the first release enter the record key only when they differ from
    their defaults, so records computed before they existed are still found.
    """

    dataset: str
    protocol: str
    level: float
    n_clients: int
    seed: int
    method: str
    hyper: dict = field(default_factory=dict)
    fl: dict = field(default_factory=dict)
    n_train: int | None = None
    test_fraction: float = 0.2
    arch: str | None = None
    val_fraction: float = 0.0
    global_test: bool = False
    n_global_test: int | None = None
    reproduction: str = "paper_text"
    pool_test: bool = False

    def effective(self) -> tuple[dict, dict, Settings]:
        """(hyper, fl, settings): the spec's hyperparameters and training settings with its
        reproduction's settings applied (:func:`fedlib.reproduction.settings_for`)."""
        settings = settings_for(self.method, self.reproduction)
        return {**self.hyper, **settings.hyper}, {**self.fl, **settings.fl}, settings

    def validate(self) -> None:
        """Raise ValueError naming the bad field, before any data is loaded or trained."""
        from .datasets import DATASETS

        if not isinstance(self.dataset, str) or self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; available: {sorted(DATASETS)}")
        if not isinstance(self.protocol, str) or self.protocol not in P.PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}; available: {sorted(P.PROTOCOLS)}")
        if not isinstance(self.method, str) or self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; available: {', '.join(METHODS)}")
        proto = P.PROTOCOLS[self.protocol]  # its entry declares the level's range
        check_number(self.level, "level")  # never a string: YAML gives '0.5' and 0.5 alike
        proto.check_level(self.level, self.protocol)
        check_int(self.n_clients, "n_clients", 1)
        if proto.plants_groups:  # the groups' own options, before any data
            P.planted_clusters(self.protocol, int(self.n_clients), self.level)
        check_seed(self.seed)
        check_int(self.n_train, "n_train", 1, optional=True)
        if self.n_train is not None and int(self.n_train) < int(self.n_clients):
            raise ValueError(f"n_train={self.n_train} is smaller than n_clients={self.n_clients}")
        if self.arch is not None and (not isinstance(self.arch, str) or self.arch not in ARCHITECTURES):
            raise ValueError(f"arch={self.arch!r} is unknown; choose one of {sorted(ARCHITECTURES)}")
        if self.arch is None and self.dataset not in ARCH_FOR_DATASET:
            raise ValueError(f"dataset={self.dataset!r} has no default architecture; pass arch= "
                             f"(one of {sorted(ARCHITECTURES)}) or add it to "
                             "fedlib.models.ARCH_FOR_DATASET")
        check_number(self.test_fraction, "test_fraction", 0, 1, high_open=True)
        check_number(self.val_fraction, "val_fraction", 0, 1, high_open=True)
        if self.test_fraction + self.val_fraction >= 1:
            fail("test_fraction + val_fraction", "< 1 (some data must stay for training)",
                 self.test_fraction + self.val_fraction)
        check_choice(self.global_test, "global_test", (False, True))
        check_int(self.n_global_test, "n_global_test", 1, optional=True)
        check_choice(self.pool_test, "pool_test", (False, True))
        if self.pool_test and self.global_test:
            fail("global_test", "False when pool_test=True (the official test set is then part of the "
                                "training pool)", self.global_test)
        if self.n_global_test is not None and not self.global_test:
            fail("n_global_test", "None unless global_test=True (it subsets the official test set)",
                 self.n_global_test)
        if not isinstance(self.hyper, dict):
            fail("hyper", "a dict of the method's hyperparameters", self.hyper)
        if not isinstance(self.fl, dict):
            fail("fl", "a dict of training settings (fedlib.methods.FLConfig fields)", self.fl)
        check_choice(self.reproduction, "reproduction", REPRODUCTIONS)
        hyper, fl, _ = self.effective()
        hp = make_hyper(self.method, hyper)
        info = method_info(self.method)  # the method's own declarations (fedlib.methods.contract)
        if FLConfig.from_dict(fl).stream_average and not info.streams_average:
            fail("fl stream_average", f"False for method {self.method!r} (its training does not all go through "
                 f"federated_averaging; methods that stream: {', '.join(STREAMING_METHODS)})", True)
        if info.protocols is not None and self.protocol not in info.protocols:
            fail("protocol", f"one of {list(info.protocols)} for method {self.method!r} (it needs the partition's "
                 "true clusters)", self.protocol)
        if info.check_protocol is not None:  # a method's own constraint on the training protocol
            info.check_protocol(hp, FLConfig.from_dict(fl))
        if info.check_arch is not None:  # a method's own constraint on the model
            info.check_arch(self.arch or ARCH_FOR_DATASET[self.dataset])
        if info.needs_val(hp) and self.val_fraction == 0:
            fail("val_fraction", f"> 0 for method {self.method!r} with hyper {self.hyper or '{}'} (it selects or "
                 "weights on the clients' validation split), e.g. 0.1", self.val_fraction)

    @classmethod
    def from_record(cls, spec: dict) -> "RunSpec":
        """The RunSpec a committed record's ``spec`` dict ran: a hyperparameter whose default
        moved after the record was written, and that its spec therefore leaves out, is set to
        the value it ran (:func:`fedlib.records.with_recorded_defaults`); ``RunSpec(**spec)``
        would give it today's default instead."""
        if not isinstance(spec, dict):
            fail("spec", "a record's spec dict", spec)
        return cls(**with_recorded_defaults(spec))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["level"] = float(self.level)
        d["hyper"] = with_current_defaults(self.method, d["hyper"])  # a moved default: stated unless the recorded value
        for name, default in _LATER_FIELDS.items():  # keys of older records stay valid
            if d[name] == default:
                del d[name]
        return d

    def key(self) -> str:
        """Stable content hash of the spec and the fedlib version (the record's file name):
        a new fedlib release never reuses records computed by an older one."""
        blob = json.dumps({**self.to_dict(), "fedlib": __version__, "record_version": RECORD_VERSION},
                          sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- data
@lru_cache(maxsize=4)
def _load(dataset: str, n_train: int | None, n_test: int | None = None, pool_test: bool = False):
    from .datasets import load, subsample

    ds = load(dataset)
    if pool_test:  # FL-bench: the official train and test sets in one pool, nothing held out
        if ds.x_test is None:
            fail("pool_test", f"False for dataset {dataset!r} (it has no official test set to pool)", True)
        ds = dataclasses.replace(ds, x_train=np.concatenate([ds.x_train, ds.x_test]),
                                 y_train=np.concatenate([ds.y_train, ds.y_test]), x_test=None, y_test=None,
                                 source=f"{ds.source}; official train and test sets pooled (FL-bench)")
    if n_train is not None and n_train < len(ds.y_train):
        ds = subsample(ds, n_train, None, seed=0)
    if n_test is not None and ds.y_test is not None and n_test < len(ds.y_test):
        ds = subsample(ds, None, n_test, seed=0)
    return ds


def build_federation(spec: RunSpec, device="auto"):
    """Load, partition and split the data of ``spec``.

    Returns
    -------
    (Federation, counts_train (K, C), dataset)

    Raises
    ------
    fedlib.partition.InfeasiblePartitionError for an infeasible partition, or one whose
    clients' test splits are all empty.
    """
    spec.validate()
    ds = _load(spec.dataset, spec.n_train, spec.n_global_test, spec.pool_test)
    y = ds.y_train
    proto = P.PROTOCOLS[spec.protocol]
    available = {"dataset_name": spec.dataset, "features": ds.x_train, "feature_names": ds.feature_names}
    extra = {name: available[name] for name in proto.inputs}  # what its entry says it takes
    parts = P.partition(y, spec.protocol, int(spec.n_clients), spec.level, int(spec.seed), **extra)
    train, val, test = P.train_val_test_split(parts, int(spec.seed), spec.test_fraction, spec.val_fraction)
    _raise_if_no_test_samples(parts, test, spec)
    glob = {}
    if spec.global_test:
        if ds.x_test is None:
            raise ValueError(f"global_test=True but dataset {spec.dataset!r} has no official test set; "
                             "use global_test=False")
        glob = {"x_global": ds.x_test, "y_global": ds.y_test}
    x = ds.x_train
    if proto.transform is not None:  # covariate skew: each client's inputs under its group's transform
        x = P.transform_inputs(x, parts, P.transform_group_of_client(spec.protocol, int(spec.n_clients), spec.level),
                               proto.transform, int(spec.seed))
    fed = Federation.from_arrays(x, y, train, test, device, n_classes=ds.n_classes, val_parts=val,
                                 **glob)
    return fed, P.label_counts(y, train, ds.n_classes), ds


def _raise_if_no_test_samples(parts, test, spec: RunSpec) -> None:
    """InfeasiblePartitionError when every client's test split is empty: nothing to report an
    accuracy on. A client's test split is ``round(test_fraction · n_k)`` of its n_k samples, at
    least one once n_k ≥ 2 (:func:`fedlib.partition.train_test_split`), so this happens when
    every client holds at most one sample (e.g. shards, K = 20 of n_train = 30) or when
    ``test_fraction`` rounds to 0 for all of them."""
    if sum(len(t) for t in test):
        return
    lo, hi = min(len(p) for p in parts), max(len(p) for p in parts)
    held = f"{lo} sample{'s' if lo != 1 else ''}" if lo == hi else f"{lo}–{hi} samples"
    raise P.InfeasiblePartitionError(
        f"no test samples: every one of K={len(parts)} clients' test split is empty (each holds {held} under "
        f"{spec.protocol} at level {spec.level} of n_train={spec.n_train or 'all'}, "
        f"test_fraction={spec.test_fraction}). "
        "Use fewer clients, a larger n_train or a larger test_fraction.")


def build_context(spec: RunSpec, device="auto"):
    """The run's :class:`fedlib.methods.Context` as :func:`run` builds it: the federation of
    :func:`build_federation`, the dataset's model initialised under ``torch.manual_seed(seed)``,
    the spec's effective protocol (``FLConfig``), the planted clusters and the reporting rule.

    Returns
    -------
    (Context, dataset)

    Raises
    ------
    fedlib.partition.InfeasiblePartitionError for an infeasible partition.
    """
    fed, counts, ds = build_federation(spec, device)
    torch.manual_seed(int(spec.seed))
    model = build_model(spec.arch or ARCH_FOR_DATASET[spec.dataset], ds.n_classes, ds.input_shape,
                        vocab_size=getattr(ds, "vocab_size", None) if ds.modality == "text" else None)
    _, fl, settings = spec.effective()
    ctx = Context(fed=fed, model=model.to(fed.device), cfg=FLConfig.from_dict(fl), seed=int(spec.seed),
                  counts_train=counts, true_clusters=P.planted_clusters(spec.protocol, int(spec.n_clients), spec.level),
                  pooled_models_eval=settings.report == "best_round_pooled_cluster_mean")
    return ctx, ds


def library_versions() -> dict:
    """The versions a record keeps (``versions``): fedlib, torch, numpy, scikit-learn, Python."""
    import sklearn

    return {"fedlib": __version__, "torch": torch.__version__, "numpy": np.__version__,
            "sklearn": sklearn.__version__, "python": platform.python_version()}


def _cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def host_of(device: torch.device) -> dict:
    """Where a run trained: training's last bits depend on the CPU's instruction set (ATen's
    dispatch level, oneDNN's and MKL's kernels) and the thread count, so a record says which
    it had — two records of one spec that differ in the last digits on two machines are
    explained by this, not by the code."""
    host = {"cpu": _cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads()}
    processes = sharing()
    if processes is not None:  # how many processes shared the device: its `seconds` were measured so
        host["processes"] = processes
    if device.type == "cuda":  # and how its kernels computed (fedlib.engine.gpu_kernels)
        host["gpu"] = torch.cuda.get_device_name(device)
        host["gpu_kernels"] = gpu_policy()
    return host


def run(spec: RunSpec, device="auto") -> dict:
    """Run one experiment and return its record (nothing is written).

    ``status`` is ``"ok"`` (with metrics), ``"infeasible"`` (the partition cannot be made, or
    leaves no client a test sample; ``error`` says why) or
    ``"failed"``: training diverged (a :class:`~fedlib.engine.errors.DivergenceError` — some
    weights or losses became NaN/±inf, in local training, a server update or the final
    models). A failed record has ``error`` (naming the method, the clients or server models,
    the round and the likely cause, e.g. the lr), ``divergence`` (those facts as fields),
    ``history_before_divergence`` (the evaluations of the rounds completed before it, as
    ``history`` would have held them: what a run of hours learnt is kept) and no metrics at
    all, so that it can never enter a table as a number.
    """
    from .engine.errors import DivergenceError
    from .methods.base import check_finite_models

    spec.validate()
    dev = resolve_device(device)  # a bad device fails before the data is loaded
    base = {"record_version": RECORD_VERSION, "key": spec.key(), "spec": spec.to_dict(),
            "versions": library_versions(), "host": host_of(dev)}
    t0, c0 = time.perf_counter(), time.process_time()
    ck = checkpoint.current()  # set by a grid (fedlib.checkpoint.active): resume and save at round boundaries
    if ck is not None:  # a resumed run's seconds include those of its earlier executions
        t0, c0 = t0 - ck.elapsed, c0 - ck.cpu_elapsed
    try:
        ctx, ds = build_context(spec, device)
    except P.InfeasiblePartitionError as err:
        return {**base, "status": "infeasible", "error": str(err)}
    ctx.checkpoints = ck
    fed, cfg = ctx.fed, ctx.cfg
    hyper, _, settings = spec.effective()
    method = get_method(spec.method)
    try:
        outcome = method.run(ctx, make_hyper(spec.method, hyper))
        check_finite_models(outcome.models, None, f"in the final models (after {cfg.rounds} rounds)", cfg)
    except DivergenceError as err:
        err = err.with_context(method=spec.method)
        return {**base, "status": "failed", "error": str(err),
                "divergence": {k: v for k, v in err.fields().items() if k != "hint"},
                "history_before_divergence": ctx.history,
                "dataset_source": ds.source, "paper_name": ds.paper_name, "fl": asdict(cfg),
                "device": str(fed.device), "seconds": time.perf_counter() - t0}
    return outcome_record(spec, base, ctx, ds, outcome, t0, c0)


def outcome_record(spec: RunSpec, base: dict, ctx: Context, ds, outcome, t0: float, c0: float,
                   share: int = 1) -> dict:
    """The ``"ok"`` record of a finished run (:func:`run`'s): ``outcome`` evaluated on ``ctx``'s
    federation, ``base`` its first fields. ``seconds`` and ``cpu_seconds`` are measured from
    ``t0`` (``time.perf_counter``) and ``c0`` (``time.process_time``), divided by ``share``:
    the number of runs that trained together in that time (:mod:`fedlib.together`)."""
    fed, cfg = ctx.fed, ctx.cfg
    hyper, _, settings = spec.effective()
    correct, n = ctx.evaluate(outcome.models, outcome.assignment, predictor=outcome.predictor)
    metrics = summarise_clients(correct, n)
    extra = {}
    if spec.val_fraction > 0:  # what fedlib.tuning selects on
        val_correct, n_val = ctx.evaluate(outcome.models, outcome.assignment, "val", outcome.predictor)
        extra.update({"val_correct": val_correct.tolist(), "n_val": n_val.tolist(),
                      "val_accuracy": global_accuracy(val_correct, n_val)})
    if spec.global_test:  # FedPrism's "global accuracy": each client's model on the official test set
        g_correct, n_global = ctx.evaluate_global(outcome.models, outcome.assignment)
        extra.update({"global_test_correct": g_correct.tolist(), "n_global_test": n_global,
                      "global_test_accuracy": float(np.mean(g_correct / n_global))})
        if outcome.predictor is None:  # FedPrism Table 1's "global" of a clustered method (fedlib.evaluation)
            extra["param_average_accuracy"] = ctx.param_average_accuracy(outcome.models, outcome.assignment)
    if spec.reproduction != "paper_text":  # what the reproduction reports, and how it ran
        extra.update({"reproduction": spec.reproduction, "reported_rule": settings.report,
                      "reported_accuracy": reported_accuracy(settings.report, metrics["global_accuracy"],
                                                             ctx.history),
                      "reproduction_settings": {"fl": settings.fl, "hyper": settings.hyper, "note": settings.note}})
    return {
        **base,
        "status": "ok",
        "dataset_source": ds.source,
        "paper_name": ds.paper_name,
        "fl": asdict(cfg),
        "device": str(fed.device),
        "wpsi": wpsi(ctx.counts_train),
        "n_train": fed.n_train.tolist(),
        "n_test": n.tolist(),
        "correct": correct.tolist(),
        **metrics,
        **extra,
        "history": ctx.history,
        "info": outcome.info,
        "seconds": (time.perf_counter() - t0) / share,  # wall time of the run (data, training, evaluation)
        "cpu_seconds": (time.process_time() - c0) / share,  # CPU time of this process, every thread summed
    }


# ----------------------------------------------------------------------------- grids
def record_path(results_dir, spec: RunSpec) -> Path:
    return Path(results_dir) / f"{spec.key()}.json"



# ----------------------------------------------------------------------------- the host's sharing
#: The number of processes sharing the device (set by ``benchmarks/gpu_lease.sh``; unset: not
#: known). A run's record keeps it as ``host['processes']``: its ``seconds`` were measured so.
ENV_SHARING = "FEDLIB_SHARING"


def sharing() -> int | None:
    """The number of processes sharing this device, from ``$FEDLIB_SHARING``; None when unset.
    Anything but an integer ≥ 1 is refused (ValueError naming the variable)."""
    value = os.environ.get(ENV_SHARING, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        fail(f"${ENV_SHARING}", "an integer ≥ 1 (the number of processes sharing the device) or unset", value)
    return int(value)


def grid_specs(datasets, protocols: dict, n_clients, seeds, methods, *, hyper: dict | None = None,
               fl: dict | None = None, n_train: dict | int | None = None,
               val_fraction: dict | float = 0.0, reproductions=("paper_text",)) -> list[RunSpec]:
    """The cross product of a training grid as RunSpecs (what notebook 05's parameters name).

    Parameters
    ----------
    datasets : list of dataset names
    protocols : dict protocol -> list of levels, e.g. {'dirichlet': [50, 0.3], 'similarity': [1, 0]}
    n_clients, seeds, methods : lists
    hyper : dict method -> hyperparameter overrides
    fl : training protocol overrides (FLConfig fields), shared by every run
    n_train : training-pool subset size, one int for all datasets or a dict per dataset
    val_fraction : per-client validation share (RunSpec.val_fraction), one number for every
        method or a dict method -> share (methods not named get 0), e.g. {'psi_pfl': 0.1}
    reproductions : list of 'paper_text' / 'paper_code' (RunSpec.reproduction); 'paper_code'
        adds a run only where the code ran the method differently at that K and q
        (:func:`fedlib.reproduction.runs_differently`; elsewhere it would repeat the
        'paper_text' run)

    Levels, K and seeds must be numbers (a string such as '0.5' from a params file is refused,
    never converted); the rest of each spec is checked by :meth:`RunSpec.validate`.
    """
    for name, values in (("datasets", datasets), ("n_clients", n_clients), ("seeds", seeds),
                         ("methods", methods)):
        _check_list(values, name)
    if not isinstance(protocols, dict):
        fail("protocols", "a dict protocol -> list of levels, e.g. {'dirichlet': [0.3]}", protocols)
    for protocol, levels in protocols.items():
        _check_list(levels, f"protocols[{protocol!r}]")
        for level in levels:
            check_number(level, f"protocols[{protocol!r}] level")
    for k in n_clients:
        check_int(k, "n_clients", 1)
    for seed in seeds:
        check_seed(seed, "seeds")
    if len(methods) == 0:
        fail("methods", f"a non-empty list of methods (available: {', '.join(METHODS)})", list(methods))
    for name, value in (("hyper", hyper), ("fl", fl)):
        if value is not None and not isinstance(value, dict):
            fail(name, "a dict or None", value)
    from .datasets import DATASETS

    _check_keys(hyper, "hyper", METHODS, "method")
    _check_keys(val_fraction, "val_fraction", METHODS, "method")
    _check_keys(n_train, "n_train", sorted(DATASETS), "data set")
    if not isinstance(n_train, dict):
        check_int(n_train, "n_train", 1, optional=True)
    else:
        for ds, v in n_train.items():
            check_int(v, f"n_train[{ds!r}]", 1, optional=True)
    if isinstance(val_fraction, dict):
        for m, v in val_fraction.items():
            check_number(v, f"val_fraction[{m!r}]", 0, 1, high_open=True)
    else:
        check_number(val_fraction, "val_fraction", 0, 1, high_open=True)
    _check_list(reproductions, "reproductions")
    for r in reproductions:
        check_choice(r, "reproductions", REPRODUCTIONS)
    hyper = hyper or {}
    specs = []
    for ds in datasets:
        nt = n_train.get(ds) if isinstance(n_train, dict) else n_train
        for protocol, levels in protocols.items():
            for level in levels:
                for k in n_clients:
                    for seed in seeds:
                        for m in methods:
                            vf = val_fraction.get(m, 0.0) if isinstance(val_fraction, dict) else val_fraction
                            for r in reproductions:
                                q = (fl or {}).get("fraction", FLConfig.fraction)
                                if r != "paper_text" and not runs_differently(m, int(k), q):
                                    continue  # its paper_text run is its paper_code run
                                specs.append(RunSpec(ds, protocol, float(level), int(k), int(seed), m,
                                                     hyper=dict(hyper.get(m, {})), fl=dict(fl or {}),
                                                     n_train=nt, val_fraction=float(vf), reproduction=r))
    return specs


def _check_keys(values, name: str, known, what: str) -> None:
    """Every key of a per-method / per-data-set dict names a known ``what``: a typo (``'fedprx'``)
    is refused, never silently left at its default. Known, not "of this grid": the studies build
    one grid from several ``grid_specs`` calls sharing one ``hyper`` / ``n_train`` dict (e.g.
    pFedLIA's CFL rows), so a key for a method of another part of the same study is legitimate."""
    if not isinstance(values, dict):
        return
    for key in values:
        if not isinstance(key, str) or key not in known:
            fail(f"{name} key", f"a known {what} (one of {', '.join(known)})", key)


def _check_list(values, name: str) -> None:
    """A list (or tuple) of grid values: a bare string or number is refused, not iterated."""
    if not isinstance(values, (list, tuple, range, np.ndarray)) or np.ndim(values) != 1:
        fail(name, "a list", values)


# ----------------------------------------------------------------------------- grids
#: What fedlib.grid provides and this module re-exports, read on first use (PEP 562): grids
#: depend on this module (specs and runs), never the reverse at import time, and every
#: ``experiment.run_grid`` of the notebooks, benchmarks and docs keeps working.
_GRID_NAMES = frozenset({
    "run_grid", "load_records", "write_manifest", "load_grid", "present_records", "estimate_seconds",
    "timing_records", "fits_budget", "device_kind_of", "SAFETY_FACTOR", "BACKENDS", "PROGRESS_MODES",
    "_is_complete", "_read_complete", "_check_writable", "_progress_mode", "_describe", "_POLL_SECONDS",
    "_run_claimed", "_run_local", "_run_ray", "_claimed_live", "_Budget", "_sharing_rank", "_timing_fields",
    "_TIMINGS",
})


def __getattr__(name: str):
    if name in _GRID_NAMES:
        from . import grid

        return getattr(grid, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
