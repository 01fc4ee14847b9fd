"""Stratified, seeded subsets of a `Dataset` (CI-sized runs)."""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from ..validation import check_seed
from ._core import Dataset


def stratified_indices(y: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted int64 indices (n,) of ``n`` ≤ N rows whose class shares match y (N,)'s.

    Each class gets ``floor(n * share)`` rows; the remaining rows go to the
    classes with the largest remainders (ties: lower class id first).
    """
    classes, counts = np.unique(y, return_counts=True)
    exact = n * counts / counts.sum()
    take = np.floor(exact).astype(np.int64)
    order = np.lexsort((classes, -(exact - take)))
    take[order[: n - take.sum()]] += 1
    picked = [rng.choice(np.flatnonzero(y == c), size=k, replace=False)
              for c, k in zip(classes, take)]
    return np.sort(np.concatenate(picked).astype(np.int64))


def _check(n, available: int, param: str) -> None:
    if n is None:
        return
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 1 <= n <= available:
        raise ValueError(f"{param} must be an int in [1, {available}] (the rows available) or None "
                         f"(keep the split whole), got {n!r}")


def subsample(ds: Dataset, n_train: int | None, n_test: int | None, seed: int) -> Dataset:
    """Stratified, seeded subset of a dataset: ``n_train``/``n_test`` rows of each split (None
    keeps it whole; train and test draw from independent streams). Same metadata, rows in
    their original order, ``source`` noting the subset."""

    if not isinstance(ds, Dataset):
        text = " ".join(repr(ds).split())
        raise ValueError(f"ds must be a fedlib.datasets.Dataset (from load), got "
                         f"{text if len(text) <= 80 else text[:77] + '...'}")
    check_seed(seed)
    _check(n_train, len(ds.y_train), "n_train")
    n_test_avail = 0 if ds.y_test is None else len(ds.y_test)
    _check(n_test, n_test_avail, "n_test")
    changes, note = {}, []
    if n_train is not None:
        idx = stratified_indices(ds.y_train, n_train, np.random.default_rng([seed, 0]))
        changes.update(x_train=ds.x_train[idx], y_train=ds.y_train[idx])
        note.append(f"{n_train} train")
    if n_test is not None:
        idx = stratified_indices(ds.y_test, n_test, np.random.default_rng([seed, 1]))
        changes.update(x_test=ds.x_test[idx], y_test=ds.y_test[idx])
        note.append(f"{n_test} test")
    if not changes:
        return ds
    return dataclasses.replace(ds, **changes, source=f"{ds.source}; stratified subsample "
                                                     f"({', '.join(note)}, seed={seed})")
