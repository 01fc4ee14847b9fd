"""Serengeti (Snapshot Serengeti camera-trap metadata, 13 classes): no public
loader is known, so the user supplies one CSV, ``<data>/serengeti/serengeti.csv``,
with a ``label`` column and feature columns (numeric columns are scaled,
text/categorical columns one-hot; drop identifiers before). No official test
split: seeded stratified 80/20. Offline stand-ins: ``letter``, ``satellite``, ``shuttle``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd

from ._core import SPLIT_NOTE, DatasetSpec, Dataset, DataUnavailableError, encode_labels, \
    how_to_fix, split_80_20
from ._tabular import encode_tabular

FILE = "serengeti.csv"
LABEL = "label"
N_CLASSES = 13
HOW_TO_GET = (f"put the Serengeti table at <data>/serengeti/{FILE} (CSV with a '{LABEL}' "
              "column, 13 classes, and feature columns); offline stand-in: load('letter')")


def path(root: Path) -> Path:
    """``<root>/serengeti/serengeti.csv``."""
    return Path(root) / "serengeti" / FILE


def is_local(root: Path) -> bool:
    """True when the CSV exists."""
    return path(root).is_file()


def load(root: Path) -> Dataset:
    """Load the user's Serengeti CSV with a seeded stratified 80/20 split.

    Returns
    -------
    Dataset
        x: float32 (N, F) encoded features; y: int64 (N,) (labels sorted).
    """
    p = path(root)
    if not p.is_file():
        raise DataUnavailableError(f"serengeti: {p} not found (no public source is known). "
                                   f"Fix: {how_to_fix(root, HOW_TO_GET)}")
    df = pd.read_csv(p)
    if LABEL not in df.columns:
        raise ValueError(f"serengeti: {p} has no '{LABEL}' column (columns: {list(df.columns)})")
    y, classes = encode_labels(df[LABEL])
    if len(classes) != N_CLASSES:
        warnings.warn(f"serengeti: {p} has {len(classes)} classes, the paper's has {N_CLASSES}",
                      stacklevel=2)
    feats = df.drop(columns=[LABEL])
    numeric = [c for c in feats.columns if pd.api.types.is_numeric_dtype(feats[c])]
    categorical = [c for c in feats.columns if c not in numeric]
    tr, te = split_80_20(y)
    x_tr, x_te, names = encode_tabular(feats.iloc[tr], feats.iloc[te], categorical, numeric)
    return Dataset(name="serengeti", paper_name="Serengeti", modality="tabular",
                   source=f"user-supplied {p}; {SPLIT_NOTE}",
                   x_train=x_tr, y_train=y[tr], x_test=x_te, y_test=y[te],
                   class_names=classes, feature_names=names)


SPEC = DatasetSpec(name="serengeti", paper_name="Serengeti", modality="tabular",
                   n_classes=N_CLASSES, loader=load, how_to_get=HOW_TO_GET, is_local=is_local)
