"""One run: the data (``build_federation``, ``build_context``), the training and its record
(``run``, ``outcome_record``).

``run(spec)`` returns a record (a JSON-able dict carrying the full configuration, library
versions, the host — CPU model, instruction set and threads, on which training's last bits
depend — per-client and global metrics, per-round history, and the method's info such as τ).
The spec is :class:`fedlib.spec.RunSpec`; grids of runs are :mod:`fedlib.grid`'s; the record's
schema and its reading and writing are :mod:`fedlib.records`'s.
"""
from __future__ import annotations

import dataclasses
import platform
import time
from dataclasses import asdict
from functools import lru_cache

import numpy as np
import torch

from . import __version__, checkpoint, partition as P
from .engine import Federation, resolve_device
from .engine.precision import gpu_policy
from .evaluation import global_accuracy, summarise_clients
from .methods import Context, FLConfig, get_method, make_hyper
from .models import ARCH_FOR_DATASET, build_model
from .noniid import wpsi
from .records import RECORD_VERSION
from .reproduction import reported_accuracy
from .spec import RunSpec, sharing
from .validation import fail

__all__ = ["run", "build_federation", "build_context", "outcome_record", "host_of", "library_versions"]

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
    ``history`` would have held them: what a run of hours learnt is kept), ``seconds`` and
    ``cpu_seconds`` (what it cost until it diverged: compute spent is counted, though no estimate
    reads a failed run's time) and no metrics at all, so that it can never enter a table as a
    number.
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
    if ck is not None:
        ck.ctx = ctx  # its progress lines read the last evaluation
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
                "device": str(fed.device), "seconds": time.perf_counter() - t0,
                "cpu_seconds": time.process_time() - c0}  # what it cost until it diverged
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
