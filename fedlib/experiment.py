"""Run one federated experiment from a spec, and grids of them with a cache of finished runs.

``RunSpec`` names everything a result depends on (dataset, protocol, level, K, seed,
method, hyperparameters, training protocol, data subset). ``run(spec)`` returns a record
(a JSON-able dict carrying the full configuration, library versions, the host — CPU model,
instruction set and threads, on which training's last bits depend — per-client and
global metrics, per-round history, and the method's info such as τ). ``run_grid`` writes
one JSON file per record, atomically (temporary file + rename: a crash never leaves a
half-written record), skips specs whose record already exists (an interrupted grid
resumes where it stopped), and validates every spec before any training starts. With a
``budget`` it starts only the runs estimated (:func:`estimate_seconds`, from the records of
comparable runs) to end before the budget does, and leaves the others for a later call.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from . import __version__, claims, partition as P, records
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

RECORD_VERSION = 1
_LATER_FIELDS = {"val_fraction": 0.0, "global_test": False, "n_global_test": None,  # added in interface v2
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

    def to_dict(self) -> dict:
        d = asdict(self)
        d["level"] = float(self.level)
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


def _versions() -> dict:
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


def _host(device: torch.device) -> dict:
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
            "versions": _versions(), "host": _host(dev)}
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        ctx, ds = build_context(spec, device)
    except P.InfeasiblePartitionError as err:
        return {**base, "status": "infeasible", "error": str(err)}
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
        "seconds": time.perf_counter() - t0,  # wall time of the run (data, training, evaluation)
        "cpu_seconds": time.process_time() - c0,  # CPU time of this process, every thread summed
    }


# ----------------------------------------------------------------------------- grids
def record_path(results_dir, spec: RunSpec) -> Path:
    return Path(results_dir) / f"{spec.key()}.json"


def _write_atomic(path: Path, record: dict) -> None:
    """Write ``record`` as strict JSON (:mod:`fedlib.strict_json`: NaN/±inf become null and are
    listed in ``"nonfinite"`` with their reason), atomically (temporary file + rename).

    The temporary file is ``.tmp-*.json.part``: a process killed while writing leaves it
    behind, and a name ending in ``.json`` would be taken for a record by any ``*.json``
    pattern (``pathlib`` matches names that start with a dot)."""
    from .strict_json import sanitise

    record = sanitise(record)
    json.dumps(record, allow_nan=False)  # anything non-finite left fails here, before any file exists
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json.part")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _is_complete(path: Path) -> bool:
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return rec.get("record_version") == RECORD_VERSION and rec.get("status") in FINISHED


FINISHED = ("ok", "infeasible", "failed")  # a failed (diverged) run fails again: delete it to retry


def _check_writable(results_dir: Path) -> None:
    """Fail before any training if records cannot be written to ``results_dir``."""
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=results_dir, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ValueError(f"results_dir {str(results_dir)!r} is not writable ({err.strerror or err}); "
                         "choose another folder (results_dir= or $FEDLIB_RESULTS)") from None


PROGRESS_MODES = ("bar", "lines", "off")


def _progress_mode(progress) -> str:
    """'bar', 'lines' or 'off' from run_grid's ``progress`` argument and ``$FEDLIB_PROGRESS``."""
    if progress is False or progress is None:
        return "off"
    if progress is True or progress == "auto":
        progress = os.environ.get("FEDLIB_PROGRESS", "").strip().lower() or "bar"
    if progress not in PROGRESS_MODES:
        raise ValueError(f"progress={progress!r} (or $FEDLIB_PROGRESS) is not one of "
                         f"{PROGRESS_MODES}: use 'bar' for a progress bar, 'lines' for one line per "
                         "run (headless/papermill logs), 'off' for silence")
    return progress


def _describe(s: RunSpec) -> str:
    tag = "" if s.reproduction == "paper_text" else f" ({s.reproduction})"
    return f"{s.dataset} {s.protocol}={s.level:g} K={s.n_clients} {s.method}{tag} seed={s.seed}"


# ----------------------------------------------------------------------------- budgets
#: A run starts under a budget only if ``SAFETY_FACTOR`` × its estimated seconds fit in the time
#: left: the median of comparable runs is a typical run, and one run in two takes longer.
SAFETY_FACTOR = 1.15

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


def device_kind_of(device) -> str | None:
    """``'cpu'`` or ``'cuda'`` (``'cuda:0'`` included) of a record's ``device`` field or a
    ``torch.device``; another backend's own name; None for no device."""
    if device is None:
        return None
    kind = device.type if isinstance(device, torch.device) else str(device).split(":")[0]
    return kind or None


def _sharing_rank(recorded, current) -> int | None:
    """0: the record was measured under the current sharing (both unknown counts as the same);
    1: one of the two is unknown; None: a different known count (not comparable)."""
    if recorded == current:
        return 0
    return 1 if recorded is None or current is None else None


def estimate_seconds(spec: RunSpec, records, device_kind: str, processes: int | None = None) -> float | None:
    """The seconds ``spec``'s run is expected to take: the median wall time (``seconds``) of
    comparable finished runs among ``records`` (record dicts, or what :func:`timing_records`
    keeps of them); None when no record is comparable.

    Comparable: status ``ok``, the same data set, ``n_train``, rounds and local epochs (the
    effective training protocol, :meth:`RunSpec.effective`) and the same ``device_kind``
    (``'cpu'`` or ``'cuda'``: a record's ``device`` field, see :func:`device_kind_of`); CPU and GPU
    times never mix. Among them, in this order, the first group that has any:

    1. the same method and number of clients K;
    2. any method and K on that data set.

    Within the group, the records measured under the same sharing (``host['processes']`` equal
    to ``processes``; both unknown counts as equal) are used if there are any, else those whose
    sharing is unknown; records of a different known sharing never are (16 processes on one GPU
    take several times as long per run as one). The thread count (``host['threads']``) is not
    matched. The estimate is the median itself; :data:`SAFETY_FACTOR` is applied by
    :func:`fits_budget`.
    """
    check_choice(device_kind, "device_kind", ("cpu", "cuda"))
    check_int(processes, "processes", 1, optional=True)
    _, fl, _ = spec.effective()
    cfg = FLConfig.from_dict(fl)
    pool = []
    for r in records:
        s, rfl = r.get("spec") or {}, r.get("fl") or {}
        seconds = r.get("seconds")
        if (r.get("status") != "ok" or not isinstance(seconds, (int, float)) or not np.isfinite(seconds)
                or s.get("dataset") != spec.dataset or s.get("n_train") != spec.n_train
                or rfl.get("rounds") != cfg.rounds or rfl.get("local_epochs") != cfg.local_epochs
                or device_kind_of(r.get("device")) != device_kind):
            continue
        rank = _sharing_rank((r.get("host") or {}).get("processes"), processes)
        if rank is not None:
            pool.append((rank, float(seconds), s.get("method") == spec.method and s.get("n_clients") == spec.n_clients))
    for group in ([(k, t) for k, t, same in pool if same], [(k, t) for k, t, _ in pool]):
        if group:
            best = min(k for k, _ in group)
            return float(statistics.median(t for k, t in group if k == best))
    return None


_TIMINGS: dict[str, tuple[tuple[int, int], dict | None]] = {}  # path -> ((mtime_ns, size), fields or None)


def _timing_fields(path: Path) -> dict | None:
    """The fields :func:`estimate_seconds` reads of the record at ``path``; None for anything else."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("status") != "ok" or not isinstance(rec.get("spec"), dict):
        return None
    spec, fl = rec["spec"], rec.get("fl") or {}
    return {"status": "ok", "seconds": rec.get("seconds"), "device": rec.get("device"),
            "spec": {k: spec.get(k) for k in ("dataset", "method", "n_clients", "n_train")},
            "fl": {k: fl.get(k) for k in ("rounds", "local_epochs")},
            "host": {"processes": (rec.get("host") or {}).get("processes")}}


def timing_records(*folders) -> list[dict]:
    """What :func:`estimate_seconds` reads of every finished record in ``folders`` (each read
    recursively; a folder that does not exist gives none; a file found twice counts once). Each
    file is parsed once per process and version (its mtime and size), so calling this before
    every run of a grid costs a directory walk."""
    out, seen = [], set()
    for folder in folders:
        folder = Path(folder)
        if not folder.is_dir():
            continue
        for path in folder.rglob("*.json"):
            try:
                st = path.stat()
                name = str(path.resolve())
            except OSError:
                continue
            if name in seen:
                continue
            seen.add(name)
            stamp = (st.st_mtime_ns, st.st_size)
            hit = _TIMINGS.get(name)
            if hit is None or hit[0] != stamp:
                hit = _TIMINGS[name] = (stamp, _timing_fields(path))
            if hit[1] is not None:
                out.append(hit[1])
    return out


def fits_budget(estimate: float | None, deadline: float, now: float | None = None) -> bool:
    """Whether a run estimated at ``estimate`` seconds may start now (``time.time()``) and end
    before ``deadline`` (a ``time.time()`` value): ``now + SAFETY_FACTOR · estimate ≤ deadline``.
    Nothing starts once the deadline has passed; a run with no estimate (None) starts before it
    — the budget cannot protect it."""
    now = time.time() if now is None else now
    return now < deadline and (estimate is None or now + SAFETY_FACTOR * estimate <= deadline)


class _Budget:
    """run_grid's budget: the deadline, where the estimates come from, the runs it left."""

    def __init__(self, seconds: float, folders, kind: str, say):
        self.deadline = time.time() + seconds
        self.folders, self.kind, self.say = list(folders), kind, say
        self.processes = sharing()
        self.skipped: list[tuple[RunSpec, float | None]] = []

    def estimate(self, s: RunSpec) -> float | None:
        return estimate_seconds(s, timing_records(*self.folders), self.kind, self.processes)

    def admit(self, s: RunSpec) -> bool:
        """Whether ``s`` may start now; if not, it is left for a later call (``skipped``)."""
        est = self.estimate(s)
        if fits_budget(est, self.deadline):
            if est is None:
                self.say(f"run_grid: no comparable record estimates {_describe(s)} on {self.kind}: started; "
                         "the budget cannot protect it")
            return True
        self.skipped.append((s, est))
        return False


_POLL_SECONDS = 0.5


def _claimed_live(path: Path) -> bool:
    """Whether another live process holds the claim on the run of ``path``."""
    return claims.claim_path(path).exists() and not claims.is_stale(path)


def _run_claimed(specs, results_dir: Path, device, bar, report, budget: _Budget | None = None) -> list:
    """Compute each spec this process can claim; return those other live processes hold. Under
    a ``budget``, a run that would not end before its deadline is not claimed (it is left in
    ``budget.skipped``)."""
    held = []
    for s in specs:
        path = record_path(results_dir, s)
        if (budget is not None and not _is_complete(path) and not _claimed_live(path)
                and not budget.admit(s)):
            continue
        if not (claims.try_claim(path) or (claims.is_stale(path) and claims.take_over(path))):
            held.append(s)
            continue
        try:
            if _is_complete(path):  # finished by another process since we looked
                report(s, None)
                continue
            if bar is not None:
                bar.set_postfix_str(_describe(s))
            record = run(s, device)
            _write_atomic(path, record)
            report(s, record)
        finally:
            claims.release(path)
    return held


#: run_grid's backends other than 'local': name -> the module that runs a grid there. Such a
#: module depends on this one (it runs `RunSpec`s with `run`), never the reverse: it is imported
#: only when run_grid dispatches to it (`_backend`), so ``import fedlib.experiment`` does not
#: import it. It provides ``check_options(ray_address, num_cpus, num_gpus, max_retries)`` and
#: ``run_on_ray(specs, device=, on_record=, ray_address=, num_cpus=, num_gpus=, max_retries=)``.
BACKEND_MODULES = {"ray": "fedlib.ray_grid"}
BACKENDS = ("local", *BACKEND_MODULES)


def _backend(name: str):
    """The module of backend ``name`` (one of `BACKEND_MODULES`), imported on first use."""
    import importlib

    return importlib.import_module(BACKEND_MODULES[name])


def run_grid(specs, results_dir, *, device="auto", progress=True, backend: str = "local",
             ray_address: str | None = None, num_cpus: float = 1, num_gpus: float = 0,
             max_retries: int = 3, budget: float | None = None, estimate_from=()) -> list[dict]:
    """Run every spec not already recorded in ``results_dir``; return the records of the specs
    that have one (all of them, unless a ``budget`` left some for a later call).

    Every spec is validated first, so a typo fails before any training starts; finished
    records are reused, never recomputed or overwritten. A diverged run is recorded with
    status ``failed`` and, like an infeasible one, not retried (delete its record to retry).
    A results folder that cannot be written fails before any training.

    Where the runs are computed (``backend``):

    - ``'local'`` (default): in this process, one after another. Several processes (or
      machines) may run the same grid on one **shared** results folder: each run is claimed
      before it is computed (:mod:`fedlib.claims`), so every run is computed once and recorded
      once; a process waits for the runs others hold and takes over those whose process died.
      Use it on one machine, or on machines that share a folder but no Ray (e.g. SLURM array
      jobs on one network filesystem).
    - ``'ray'``: every run one Ray task (:mod:`fedlib.ray_grid`) needing ``num_cpus`` CPUs and
      ``num_gpus`` GPUs; this process writes each finished record, so the workers share no
      folder with it. ``ray_address`` (or ``$RAY_ADDRESS``) joins a running cluster; neither
      starts a local Ray instance. A worker that dies mid-run is retried (``max_retries``
      times); a run that raises is reported after the others finished (its record is not
      written; the records already written stay). Use it for a cluster, or for several runs at
      once on one machine (``num_cpus=1``: one run per core).

    ``progress``: True (default) follows ``$FEDLIB_PROGRESS`` and else draws a tqdm bar over
    the finished runs (a widget in JupyterLab); ``'lines'`` prints one line per finished run
    to stderr (what ``make workbook`` shows through papermill's log); ``'bar'``; False or
    ``'off'``.

    ``budget`` (seconds from this call; local backend only): before claiming each run, its
    seconds are estimated (:func:`estimate_seconds`: the median wall time of comparable finished
    runs in ``results_dir`` and the folders ``estimate_from``, on the same kind of device and,
    where records say so, under the same sharing, ``$FEDLIB_SHARING``), and a run is started
    only if :data:`SAFETY_FACTOR` × that estimate ends before the budget does; the others are
    left, unclaimed, for a later call (``'lines'`` prints how many and their estimated seconds),
    and the runs after them are still tried (a shorter one may fit). A run is never stopped once
    started: the budget decides only what starts. Without any comparable record a run has no
    estimate and is started (said so in ``'lines'`` mode): the budget cannot protect it. Once
    the budget has ended nothing starts, and runs that other processes hold are no longer waited
    for. The records returned are then only those that exist.
    """
    mode = _progress_mode(progress)
    check_choice(backend, "backend", BACKENDS)
    check_number(budget, "budget", 0, low_open=True, optional=True)
    if budget is not None and backend != "local":
        fail("budget", f"None with backend={backend!r} (only the local backend keeps a budget): "
                       "use backend='local', or leave budget out", budget)
    estimate_from = [estimate_from] if isinstance(estimate_from, (str, os.PathLike)) else list(estimate_from)
    if estimate_from and budget is None:
        fail("estimate_from", "left out unless budget is given (its records estimate runs for the budget)",
             [str(f) for f in estimate_from])
    for folder in estimate_from:
        if not Path(folder).is_dir():
            fail("estimate_from", "existing folders of records", str(folder))
    sharing()  # a bad $FEDLIB_SHARING fails here, before any training
    if backend != "local":
        _backend(backend).check_options(ray_address, num_cpus, num_gpus, max_retries)
    if ray_address is not None and backend != "ray":
        fail("ray_address", "None unless backend='ray'", ray_address)
    specs = list(specs)
    for s in specs:  # before anything else (the key itself needs valid fields)
        s.validate()
    specs = list({s.key(): s for s in specs}.values())  # drop duplicates, keep order
    results_dir = Path(results_dir)
    _check_writable(results_dir)
    kind = resolve_device(device).type  # a bad device fails here, not in every task
    todo = [s for s in specs if not _is_complete(record_path(results_dir, s))]
    if mode == "lines":
        print(f"run_grid: {len(specs)} runs, {len(specs) - len(todo)} already recorded, "
              f"{len(todo)} to train{' on Ray' if backend == 'ray' and todo else ''}", file=sys.stderr, flush=True)
    bar = None
    if mode == "bar" and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc="runs", unit="run")
    done = 0

    def say(line: str) -> None:
        if bar is not None:
            bar.write(line, file=sys.stderr)
        elif mode == "lines":
            print(line, file=sys.stderr, flush=True)

    plan = None
    if budget is not None:
        plan = _Budget(budget, [results_dir, *estimate_from], kind, say)
        if todo:
            say(f"run_grid: budget {budget:g} s: a run starts only if {SAFETY_FACTOR} × its estimated "
                "seconds end before it")

    def report(s: RunSpec, record: dict | None) -> None:
        nonlocal done
        done += 1
        if bar is not None:
            bar.update(1)
        elif mode == "lines" and record is not None:
            result = (f"weighted local accuracy {record['global_accuracy']:.3f} in {record['seconds']:.1f} s"
                      if record["status"] == "ok" else record["status"])
            print(f"run_grid [{done}/{len(todo)}] {_describe(s)}: {result}", file=sys.stderr, flush=True)

    try:
        if backend == "ray":
            _run_ray(todo, results_dir, device, report, ray_address, num_cpus, num_gpus, max_retries)
        else:
            _run_local(todo, results_dir, device, bar, report, mode, plan)
    finally:
        if bar is not None:
            bar.close()
    if plan is not None and plan.skipped:
        known = [e for _, e in plan.skipped if e is not None]
        unknown = len(plan.skipped) - len(known)
        say(f"run_grid: budget: {len(plan.skipped)} runs left for a later call, estimated {sum(known):.0f} s "
            f"of runs{f' ({unknown} without an estimate: the budget had ended)' if unknown else ''}")
    return [r for r in (_read_complete(record_path(results_dir, s)) for s in specs) if r is not None]


def _read_complete(path: Path) -> dict | None:
    """The finished record at ``path``, or None (no record: a run a budget left for later)."""
    try:
        rec = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return rec if rec.get("record_version") == RECORD_VERSION and rec.get("status") in FINISHED else None


def _run_ray(todo, results_dir, device, report, address, num_cpus, num_gpus, max_retries) -> None:
    """The runs as Ray tasks; every finished record written here, atomically, once."""
    def on_record(s: RunSpec, record: dict) -> None:
        path = record_path(results_dir, s)
        if not _is_complete(path):  # another process may have recorded it meanwhile
            _write_atomic(path, record)
        report(s, record)

    failed = _backend("ray").run_on_ray(todo, device=device, on_record=on_record, ray_address=address,
                                        num_cpus=num_cpus, num_gpus=num_gpus, max_retries=max_retries)
    if failed:
        lines = "\n".join(f"  {_describe(s)}: {why}" for s, why in failed)
        raise RuntimeError(f"{len(failed)} of {len(todo)} runs failed on Ray (their records were not written; "
                           f"the other {len(todo) - len(failed)} were):\n{lines}")


def _run_local(todo, results_dir, device, bar, report, mode, budget: _Budget | None = None) -> None:
    """The runs in this process, sharing the folder with other processes through claims; under
    a ``budget``, only those that fit, and no waiting for other processes' runs past its end."""
    waiting = _run_claimed(todo, results_dir, device, bar, report, budget)
    if waiting and mode == "lines":
        print(f"run_grid: waiting for {len(waiting)} runs that other processes are computing",
              file=sys.stderr, flush=True)
    while waiting:  # runs other processes claimed: wait for their records, take over if they die
        if budget is not None and time.time() >= budget.deadline:
            budget.say(f"run_grid: the budget has ended: not waiting for the {len(waiting)} runs other "
                       "processes are computing (their records are theirs to write)")
            return
        time.sleep(_POLL_SECONDS)
        finished = [s for s in waiting if _is_complete(record_path(results_dir, s))]
        for s in finished:
            report(s, None)
        waiting = [s for s in waiting if s not in finished]
        orphans = [s for s in waiting if not claims.claim_path(record_path(results_dir, s)).exists()
                   or claims.is_stale(record_path(results_dir, s))]
        if orphans:
            left = _run_claimed(orphans, results_dir, device, bar, report, budget)
            waiting = [s for s in waiting if s not in orphans or s in left]


def load_records(results_dir) -> list[dict]:
    """Every complete record in ``results_dir`` (half-written temporaries are ignored)."""
    out = []
    for p in sorted(Path(results_dir).glob("*.json")):
        if _is_complete(p):
            out.append(json.loads(p.read_text()))
    return out


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


def write_manifest(results_dir, specs, name: str = "manifest.json") -> Path:
    """Record which runs make up a grid (their keys), so tables use exactly those records."""
    path = Path(results_dir) / name
    _write_atomic(path, {"keys": [s.key() for s in specs]})  # a unique temporary per writer
    return path


def present_records(specs, folder) -> tuple[list[dict], list[RunSpec]]:
    """The finished records of ``specs`` in ``folder`` (the committed paper-grid records: read,
    never trained) and the specs that have none there yet, in the order of ``specs``. Found by
    the specs' fields (:func:`fedlib.records.find`), not by file name: a record stays found when
    fedlib's version (part of :meth:`RunSpec.key`) changes."""
    return records.find(specs, folder)


def load_grid(results_dir, name: str = "manifest.json") -> list[dict]:
    """The records of the grid named by the manifest (missing runs are reported, not invented)."""
    results_dir = Path(results_dir)
    manifest = results_dir / name
    if not manifest.is_file():
        raise FileNotFoundError(f"no {name} in {results_dir}: run notebook 05 (the training grid) first")
    keys = json.loads(manifest.read_text())["keys"]
    missing = [k for k in keys if not _is_complete(results_dir / f"{k}.json")]
    if missing:
        raise FileNotFoundError(f"{len(missing)} of {len(keys)} runs of the grid have no record in "
                                f"{results_dir}: re-run notebook 05 to finish them")
    return [json.loads((results_dir / f"{k}.json").read_text()) for k in keys]
