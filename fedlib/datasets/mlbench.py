"""Offline multi-class tabular stand-ins for Serengeti from R's mlbench (Debian
``r-cran-mlbench`` 2.1-3), read with the pure-Python ``rdata``:

- ``letter``: LetterRecognition, 20,000 x 16 integer features, 26 classes (A-Z);
  the traditional split of the UCI documentation: first 16,000 rows train, last 4,000 test.
- ``satellite``: Satellite (Landsat), 6,435 x 36, 6 classes; seeded stratified 80/20.
- ``shuttle``: Shuttle (Statlog), 58,000 x 9, 7 very unbalanced classes; seeded stratified 80/20.

Bytes: ``<data>/mlbench/<Name>.rda`` (``python -m fedlib.datasets prepare letter``)
or ``/usr/lib/R/site-library/mlbench/data/<Name>.rda``; sha256 pinned and checked
before ``rdata`` parses the very bytes that were verified.
Features: all numeric, RobustScaler fitted on train.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np

from ._core import (SPLIT_NOTE, DatasetSpec, Dataset, DataUnavailableError, copy_verified,
                    encode_labels, first_existing, how_to_fix, read_verified, split_80_20,
                    system_dir)
from ._tabular import encode_tabular

#: Debian r-cran-mlbench install location (module-level so tests can patch it).
R_LIBRARY_DIR = Path("/usr/lib/R/site-library/mlbench/data")
HOW_TO_GET = ("apt-get install -y r-cran-mlbench (then `python -m fedlib.datasets prepare "
              "{name}`), or put {file} at <data>/mlbench/")
#: name -> (R object / file name, label column, sha256 of the .rda, paper name, n_classes,
#:          number of leading training rows or None for the seeded 80/20 split)
TABLES = {
    "letter": ("LetterRecognition", "lettr",
               "967a1a3e10b548d7269cbe50182bcecd6365cc58ea07638bbc34c51f17f34f1d", 26, 16_000),
    "satellite": ("Satellite", "classes",
                  "29f8cf9bb1bc51b769d694c9caf740fd1c36ed6a7c87603edf5985962e330f64", 6, None),
    "shuttle": ("Shuttle", "Class",
                "5b1db218b76a47c83f575f1ff38d7a7d36e569b0e27d8bf4aa92eae6c0bcb826", 7, None),
}
PAPER_NAME = "Serengeti (stand-in: mlbench {obj})"


def _file(name: str) -> str:
    return f"{TABLES[name][0]}.rda"


def _find(root: Path, name: str) -> Path | None:
    return first_existing([Path(root) / "mlbench" / _file(name),
                           system_dir(root, R_LIBRARY_DIR) / _file(name)])


def _how(name: str) -> str:
    """The ``how_to_get`` text of ``name`` (``<data>`` unresolved)."""
    return HOW_TO_GET.format(name=name, file=_file(name))


def read_table(root: Path, name: str):
    """The verified mlbench data frame of ``name`` (pandas, label column categorical).

    Returns
    -------
    path : Path
        The ``.rda`` file read.
    frame : pandas.DataFrame
        Parsed by ``rdata`` from the bytes whose sha256 was checked.
    """
    import rdata

    path = _find(root, name)
    if path is None:
        raise DataUnavailableError(
            f"{name}: mlbench {_file(name)} not found. Tried {Path(root) / 'mlbench'}/ and "
            f"{R_LIBRARY_DIR}/ (Debian r-cran-mlbench). Fix: {how_to_fix(root, _how(name))}")
    data = read_verified(path, TABLES[name][2],
                         f"{how_to_fix(root, _how(name))} (Debian version 2.1-3)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Unknown encoding. Assumed ASCII."
        return path, rdata.read_rda(io.BytesIO(data))[TABLES[name][0]]


def load_table(root: Path, name: str) -> Dataset:
    """Load one mlbench table as a `Dataset`.

    Returns
    -------
    Dataset
        x: float32 (N, F) RobustScaler-ed features; y: int64 (N,) (factor level order).
    """
    obj, label, _, _, n_train = TABLES[name]
    path, df = read_table(root, name)
    y, classes = encode_labels(df[label].astype(str), [str(c) for c in df[label].cat.categories])
    feats = df.drop(columns=[label]).reset_index(drop=True)
    if n_train is not None:
        tr, te = np.arange(n_train), np.arange(n_train, len(df))
        split = f"traditional split: first {n_train} rows train, last {len(df) - n_train} test"
    else:
        tr, te = split_80_20(y)
        split = SPLIT_NOTE
    x_tr, x_te, names = encode_tabular(feats.iloc[tr], feats.iloc[te], [], list(feats.columns))
    return Dataset(name=name, paper_name=PAPER_NAME.format(obj=obj), modality="tabular",
                   source=f"R mlbench {obj} from {path} (sha256 verified); {split}",
                   x_train=x_tr, y_train=y[tr], x_test=x_te, y_test=y[te],
                   class_names=classes, feature_names=names)


def _spec(name: str) -> DatasetSpec:
    def load(root: Path) -> Dataset:
        return load_table(root, name)

    def is_local(root: Path) -> bool:
        return _find(root, name) is not None

    def prepare(root: Path) -> None:
        dst = Path(root) / "mlbench" / _file(name)
        if not dst.is_file():
            src = system_dir(root, R_LIBRARY_DIR) / _file(name)
            if not src.is_file():
                read_table(root, name)  # raises the DataUnavailableError
            copy_verified(src, dst, TABLES[name][2])

    load.__doc__ = f"Load mlbench {TABLES[name][0]} (see `load_table`)."
    return DatasetSpec(name=name, paper_name=PAPER_NAME.format(obj=TABLES[name][0]),
                       modality="tabular", n_classes=TABLES[name][3], loader=load,
                       how_to_get=_how(name), is_local=is_local, prepare=prepare)


LETTER, SATELLITE, SHUTTLE = (_spec(n) for n in TABLES)
