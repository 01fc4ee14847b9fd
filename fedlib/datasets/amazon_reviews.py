"""Amazon reviews, 6 product categories (the paper's Zhang et al. subset): the
user supplies ``<data>/amazon_reviews/train.csv`` and ``test.csv``, each with a
header and the columns ``label,text``. Labels are sorted (numerically when they
are numbers) to ids 0..C-1. Without ``test.csv`` a seeded stratified 80/20 split
of ``train.csv`` is made. Reviews with no token left after cleaning are dropped.
Offline stand-in: ``fine_foods``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from . import _text
from ._core import SPLIT_NOTE, DatasetSpec, Dataset, DataUnavailableError, encode_labels, \
    how_to_fix, split_80_20

N_CLASSES = 6
HOW_TO_GET = ("put train.csv and test.csv (header 'label,text', 6 product categories) at "
              "<data>/amazon_reviews/; offline stand-in: load('fine_foods')")


def folder(root: Path) -> Path:
    """``<root>/amazon_reviews``."""
    return Path(root) / "amazon_reviews"


def is_local(root: Path) -> bool:
    """True when ``train.csv`` exists."""
    return (folder(root) / "train.csv").is_file()


def _read(p: Path) -> pd.DataFrame:
    df = pd.read_csv(p)
    if not {"label", "text"} <= set(df.columns):
        raise ValueError(f"amazon_reviews: {p} needs the header columns 'label,text' "
                         f"(found {list(df.columns)})")
    return df


def load(root: Path, seq_len: int = _text.SEQ_LEN, min_count: int = _text.MIN_COUNT,
         max_vocab: int | None = _text.MAX_VOCAB) -> Dataset:
    """Load the user's Amazon-reviews CSVs.

    Returns
    -------
    Dataset
        x: int64 (N, seq_len) token ids; y: int64 (N,) product category.
    """
    _text.check_options(seq_len, min_count, max_vocab)
    train_path, test_path = folder(root) / "train.csv", folder(root) / "test.csv"
    if not train_path.is_file():
        raise DataUnavailableError(f"amazon_reviews: {train_path} not found. "
                                   f"Fix: {how_to_fix(root, HOW_TO_GET)}")
    train = _read(train_path)
    if test_path.is_file():
        test = _read(test_path)
        split = f"official test file {test_path.name}"
    else:
        y_all, _ = encode_labels(train["label"])
        tr, te = split_80_20(y_all)
        train, test = train.iloc[tr], train.iloc[te]
        split = SPLIT_NOTE
    _, classes = encode_labels(pd.concat([train["label"], test["label"]]))
    if len(classes) != N_CLASSES:
        warnings.warn(f"amazon_reviews: {len(classes)} classes, the paper's has {N_CLASSES}",
                      stacklevel=2)
    y_tr, _ = encode_labels(train["label"], classes)
    y_te, _ = encode_labels(test["label"], classes)
    x_tr, x_te, vocab, keep_tr, keep_te = _text.encode_nonempty(
        train["text"].astype(str).tolist(), test["text"].astype(str).tolist(), seq_len,
        min_count, max_vocab)
    dropped = int((~keep_tr).sum() + (~keep_te).sum())
    return Dataset(name="amazon_reviews", paper_name="Amazon reviews", modality="text",
                   source=f"user-supplied {folder(root)}; {split}; {dropped} reviews with no "
                          f"token dropped; {_text.describe(seq_len, min_count, max_vocab)}",
                   x_train=x_tr, y_train=np.asarray(y_tr)[keep_tr], x_test=x_te,
                   y_test=np.asarray(y_te)[keep_te], class_names=classes, vocab=vocab)


SPEC = DatasetSpec(name="amazon_reviews", paper_name="Amazon reviews", modality="text",
                   n_classes=N_CLASSES, loader=load, how_to_get=HOW_TO_GET, is_local=is_local)
