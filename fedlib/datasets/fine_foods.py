"""Amazon fine-food reviews (offline stand-in for Sent140 / Amazon reviews):
R modeldata's ``small_fine_foods`` (Debian ``r-cran-modeldata`` 1.1.0, MIT),
``training_data`` 4,000 + ``testing_data`` 1,000 reviews, score great / other.

Bytes: the R lazy-load database ``Rdata.rdb`` + ``Rdata.rdx`` in ``<data>/fine_foods/``
(``python -m fedlib.datasets prepare fine_foods``) or
``/usr/lib/R/site-library/modeldata/data/``; sha256 pinned and checked before
`_rlazyload` parses the very bytes that were verified.
Labels: 0 = other, 1 = great (positive = 1 as in sent140). Text: see `_text`.
"""

from __future__ import annotations

from pathlib import Path

from . import _text
from ._core import (DatasetSpec, Dataset, DataUnavailableError, copy_verified, encode_labels,
                    how_to_fix, read_verified, system_dir)
from ._rlazyload import parse_object

#: Debian r-cran-modeldata install location (module-level so tests can patch it).
R_LIBRARY_DIR = Path("/usr/lib/R/site-library/modeldata/data")
FILES = {"Rdata.rdb": "2ecef5e8da0f782ae4e3f65d928fe769702accffd8981cc358a3097f6736f58f",
         "Rdata.rdx": "c23e1be60f2730fb526ce158a307e154c91a953169fcb8e73350c4e032e14538"}
CLASS_NAMES = ("other", "great")
HOW_TO_GET = ("apt-get install -y r-cran-modeldata (then `python -m fedlib.datasets prepare "
              "fine_foods`), or put modeldata's data/Rdata.rdb and Rdata.rdx at <data>/fine_foods/")


def _dir(root: Path) -> Path | None:
    for d in (Path(root) / "fine_foods", system_dir(root, R_LIBRARY_DIR)):
        if all((d / f).is_file() for f in FILES):
            return d
    return None


def is_local(root: Path) -> bool:
    """True when the lazy-load files are in ``<root>/fine_foods`` or the R library."""
    return _dir(root) is not None


def prepare(root: Path) -> None:
    """Copy the verified ``Rdata.rdb``/``.rdx`` into ``<root>/fine_foods/``."""
    dst = Path(root) / "fine_foods"
    if all((dst / f).is_file() for f in FILES):
        return
    src = system_dir(root, R_LIBRARY_DIR)
    if not all((src / f).is_file() for f in FILES):
        raise _missing(root)
    for f, digest in FILES.items():
        copy_verified(src / f, dst / f, digest)


def _missing(root: Path) -> DataUnavailableError:
    return DataUnavailableError(
        f"fine_foods: modeldata small_fine_foods not found. Tried {Path(root) / 'fine_foods'}/ "
        f"and {R_LIBRARY_DIR}/ (Rdata.rdb + Rdata.rdx). Fix: {how_to_fix(root, HOW_TO_GET)}")


def load(root: Path, seq_len: int = _text.SEQ_LEN, min_count: int = _text.MIN_COUNT,
         max_vocab: int | None = _text.MAX_VOCAB) -> Dataset:
    """Load the fine-food reviews with modeldata's own training/testing split.

    Parameters
    ----------
    root : Path
    seq_len, min_count, max_vocab : int
        Text encoding (see `fedlib.datasets._text.encode_text`).

    Returns
    -------
    Dataset
        x: int64 (N, seq_len) token ids; y: int64 (N,), 1 = great; 4,000 train, 1,000 test.
    """
    _text.check_options(seq_len, min_count, max_vocab)
    d = _dir(root)
    if d is None:
        raise _missing(root)
    fix = f"{how_to_fix(root, HOW_TO_GET)} (Debian version 1.1.0-1)"
    data = {f: read_verified(d / f, digest, fix) for f, digest in FILES.items()}
    train, test = (parse_object(data["Rdata.rdb"], data["Rdata.rdx"], obj, where=str(d))
                   for obj in ("training_data", "testing_data"))
    x_tr, x_te, vocab = _text.encode_text(train["review"].tolist(), test["review"].tolist(),
                                          seq_len, min_count, max_vocab)
    y_tr, _ = encode_labels(train["score"].astype(str), CLASS_NAMES)
    y_te, _ = encode_labels(test["score"].astype(str), CLASS_NAMES)
    return Dataset(name="fine_foods",
                   paper_name="Sent140 / Amazon reviews (stand-in: Amazon fine-food reviews)",
                   modality="text",
                   source=f"R modeldata small_fine_foods from {d} (sha256 verified; modeldata's "
                          f"training/testing split); {_text.describe(seq_len, min_count, max_vocab)}",
                   x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te,
                   class_names=CLASS_NAMES, vocab=vocab)


SPEC = DatasetSpec(name="fine_foods",
                   paper_name="Sent140 / Amazon reviews (stand-in: Amazon fine-food reviews)",
                   modality="text", n_classes=2, loader=load, how_to_get=HOW_TO_GET,
                   is_local=is_local, prepare=prepare)
