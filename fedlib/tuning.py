"""Table II's hyperparameter search, made real: choose on the clients' validation split.

Each method module declares ``GRID`` — the search grid the paper's Table II lists (empty for
methods with none). :func:`tune` runs every point of the grid on one experiment spec whose
clients hold out ``val_fraction`` of their data as a validation split, scores each run by its
sample-weighted validation accuracy (every client predicting with its own model, as the method
evaluates), and chooses the best point (ties: the first in grid order). The test split is the
same at every ``val_fraction`` (see :func:`fedlib.partition.train_val_test_split`), and the test
numbers are never looked at while choosing.

Every trial is an ordinary run record in ``results_dir`` (so an interrupted search resumes, and
the chosen trial's record *is* the tuned run); the returned summary names the grid, the scores
and the choice, for the notebook or a table caption.

The paper tuned its baselines without saying on which data; its published numbers used the
defaults of each ``Hyper`` (Table II's best values), which stay the default everywhere.
"""
from __future__ import annotations

import dataclasses
import itertools

from .grid import run_grid
from .lookup import find
from .spec import RunSpec
from .methods import method_info
from .validation import check_number, fail

__all__ = ["method_grid", "grid_points", "best_point", "tune"]


def method_grid(method: str) -> dict:
    """The search grid a method declares (Table II), ``name -> tuple of values``; {} if none."""
    return {k: tuple(v) for k, v in dict(method_info(method).grid).items()}


def grid_points(grid: dict) -> list[dict]:
    """Every combination of ``grid``'s values, in key order then value order.

    >>> grid_points({"a": (1, 2), "b": ("x",)})
    [{'a': 1, 'b': 'x'}, {'a': 2, 'b': 'x'}]
    """
    for name, values in grid.items():
        if isinstance(values, (str, bytes)) or len(tuple(values)) == 0:
            fail(f"grid[{name!r}]", "a non-empty sequence of values", values)
    names = list(grid)
    return [dict(zip(names, combo)) for combo in itertools.product(*(tuple(grid[n]) for n in names))]


def best_point(scores) -> int:
    """Index of the highest score (the first one on ties); NaN scores never win.

    Raises ValueError if no score is a number.
    """
    scores = list(scores)
    valid = [i for i, s in enumerate(scores) if s is not None and s == s]
    if not valid:
        fail("scores", "at least one finite validation accuracy", scores)
    return max(valid, key=lambda i: (scores[i], -i))


def tune(spec: RunSpec, results_dir, *, grid: dict | None = None, val_fraction: float = 0.1,
         device="auto", progress=False) -> dict:
    """Choose ``spec.method``'s hyperparameters on the validation split.

    Parameters
    ----------
    spec : RunSpec
        The experiment; its ``hyper`` holds values kept fixed (the grid's entries override them).
    results_dir : path
        Where the trials' records go (reused if present).
    grid : dict, optional
        ``name -> values`` (default: the method's ``GRID``, Table II).
    val_fraction : float in (0, 1)
        Validation share of each client's data (taken from its train part).

    Returns
    -------
    dict with ``method``, ``grid``, ``val_fraction``, ``trials`` (one ``{"hyper", "key",
    "val_accuracy"}`` per point, in grid order), ``chosen`` (the winning hyper dict) and
    ``record`` (the chosen trial's run record: its test metrics are the tuned result).
    """
    check_number(val_fraction, "val_fraction", 0, 1, low_open=True, high_open=True)
    grid = method_grid(spec.method) if grid is None else dict(grid)
    if not grid:
        fail("grid", f"a non-empty search grid (method {spec.method!r} declares none; pass grid=)", grid)
    points = grid_points(grid)
    trials = [dataclasses.replace(spec, hyper={**spec.hyper, **p}, val_fraction=float(val_fraction))
              for p in points]
    for t in trials:
        t.validate()  # every point is a valid Hyper before anything trains
    run_grid(trials, results_dir, device=device, progress=progress)
    records = find(trials, results_dir, restore_nonfinite=False)[0]  # by the fields: one a trial, in order
    rows = [{"hyper": p, "key": t.key(), "val_accuracy": rec.get("val_accuracy") if rec.get("status") == "ok" else None}
            for p, t, rec in zip(points, trials, records)]
    best = best_point([r["val_accuracy"] for r in rows])
    return {"method": spec.method, "grid": {k: list(v) for k, v in grid.items()},
            "val_fraction": float(val_fraction), "trials": rows, "chosen": points[best], "record": records[best]}
