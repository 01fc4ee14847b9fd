"""Made-up run records shaped as :func:`fedlib.experiment.run` writes them, for tests of the
grid machinery (claims, budgets, lookups) that fake the training: they pass
:func:`fedlib.records.read_strict`, as every record a grid keeps must."""
from __future__ import annotations

import fedlib.spec
from fedlib import records


def record(spec, status: str = "ok", accuracy: float = 0.5, **extra) -> dict:
    """A ``status`` record of ``spec`` (a RunSpec); ``ok`` ones carry consistent metrics of
    ``spec.n_clients`` clients of 10 test samples each at ``accuracy``."""
    base = {"record_version": records.RECORD_VERSION, "key": spec.key(), "spec": spec.to_dict(),
            "versions": {"fedlib": fedlib.spec.__version__}, "host": {}, "status": status}
    if status != "ok":
        return {**base, "error": "fake", **extra}
    k = int(spec.n_clients)
    correct = [round(10 * accuracy)] * k
    return {**base, "device": "cpu", "n_train": [40] * k, "n_test": [10] * k, "correct": correct,
            "global_accuracy": sum(correct) / (10 * k), "ad": 0.0, "sdad": 0.0, "cp": 0.0,
            "local_accuracy": [c / 10 for c in correct], "history": [], "info": {}, "seconds": 1.0,
            "cpu_seconds": 1.0, **extra}
