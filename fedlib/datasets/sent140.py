"""Sent140 (Sentiment140 tweets, Go et al. 2009): 1.6 M tweets labelled by
emoticons, target 0 = negative, 4 = positive (mapped to 0 / 1).

The paper says it "must be downloaded manually": put
``training.1600000.processed.noemoticon.csv`` (latin-1, no header; columns
target, id, date, flag, user, text) at ``<data>/sent140/``. As the authors did,
a seeded 20 % sample is used (``DataFrame.sample(frac=0.2, random_state=0)``),
tweets are regex-cleaned (URLs, @users, non-letters) and cut/padded to 25 tokens.
Test split: if ``testdata.manual.2009.06.14.csv`` is also there, its positive and
negative tweets (the 139 neutral ones, class 2, are dropped to keep 2 classes) are
the official test set and the whole sample is training data; otherwise a seeded
stratified 80/20 split of the sample. Tweets with no token left after cleaning
are dropped. Offline stand-in: ``fine_foods``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from . import _text
from ..validation import check_number, check_seed
from ._core import SPLIT_NOTE, DatasetSpec, Dataset, DataUnavailableError, how_to_fix, \
    split_80_20

TRAIN_FILE = "training.1600000.processed.noemoticon.csv"
TEST_FILE = "testdata.manual.2009.06.14.csv"
COLUMNS = ["target", "id", "date", "flag", "user", "text"]
FRACTION, SAMPLE_SEED = 0.2, 0
CLASS_NAMES = ("negative", "positive")
HOW_TO_GET = (f"download trainingandtestdata.zip of Sentiment140 (Kaggle: kazanova/sentiment140)"
              f" and put {TRAIN_FILE} (optionally also {TEST_FILE}) at <data>/sent140/; "
              "offline stand-in: load('fine_foods')")


def folder(root: Path) -> Path:
    """``<root>/sent140``."""
    return Path(root) / "sent140"


def is_local(root: Path) -> bool:
    """True when the training CSV exists."""
    return (folder(root) / TRAIN_FILE).is_file()


def _read(p: Path) -> pd.DataFrame:
    """Columns target (0/4 → 0/1) and text; rows of other targets (neutral 2) dropped."""
    df = pd.read_csv(p, encoding="latin-1", header=None, names=COLUMNS, usecols=[0, 5])
    df = df[df["target"].isin([0, 4])].copy()
    df["target"] = (df["target"] // 4).astype(np.int64)
    df["text"] = df["text"].astype(str)
    return df


def load(root: Path, fraction: float = FRACTION, seed: int = SAMPLE_SEED,
         seq_len: int = _text.SEQ_LEN, min_count: int = _text.MIN_COUNT,
         max_vocab: int | None = _text.MAX_VOCAB) -> Dataset:
    """Load Sent140 as the authors prepared it.

    Parameters
    ----------
    root : Path
    fraction : float
        Share of the 1.6 M tweets sampled (the authors: 0.2).
    seed : int
        Seed of that sample.
    seq_len, min_count, max_vocab : int
        Text encoding (see `fedlib.datasets._text.encode_text`).

    Returns
    -------
    Dataset
        x: int64 (N, seq_len) token ids; y: int64 (N,), 1 = positive.
    """
    check_number(fraction, "fraction", 0, 1, low_open=True)
    check_seed(seed)
    _text.check_options(seq_len, min_count, max_vocab)
    train_path, test_path = folder(root) / TRAIN_FILE, folder(root) / TEST_FILE
    if not train_path.is_file():
        raise DataUnavailableError(
            f"sent140: {train_path} not found (the paper: must be downloaded manually). "
            f"Fix: {how_to_fix(root, HOW_TO_GET)}")
    df = _read(train_path).sample(frac=fraction, random_state=seed)
    texts, y = df["text"].tolist(), df["target"].to_numpy()
    sample = f"{len(y)} tweets, a seeded {fraction:.0%} sample (random_state={seed})"
    if test_path.is_file():
        tr_texts, y_tr = texts, y
        test = _read(test_path)
        te_texts, y_te = test["text"].tolist(), test["target"].to_numpy()
        split = f"official test set {TEST_FILE} (neutral class 2 dropped)"
    else:
        tr, te = split_80_20(y)
        tr_texts, y_tr = [texts[i] for i in tr], y[tr]
        te_texts, y_te = [texts[i] for i in te], y[te]
        split = SPLIT_NOTE + " of the sample"
    x_tr, x_te, vocab, keep_tr, keep_te = _text.encode_nonempty(tr_texts, te_texts, seq_len,
                                                                min_count, max_vocab)
    dropped = int((~keep_tr).sum() + (~keep_te).sum())
    return Dataset(name="sent140", paper_name="Sent140", modality="text",
                   source=f"user-supplied {train_path}: {sample}; {split}; {dropped} tweets with "
                          f"no token dropped; {_text.describe(seq_len, min_count, max_vocab)}",
                   x_train=x_tr, y_train=y_tr[keep_tr], x_test=x_te, y_test=y_te[keep_te],
                   class_names=CLASS_NAMES, vocab=vocab)


SPEC = DatasetSpec(name="sent140", paper_name="Sent140", modality="text", n_classes=2,
                   loader=load, how_to_get=HOW_TO_GET, is_local=is_local)
