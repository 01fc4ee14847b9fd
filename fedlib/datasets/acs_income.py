"""ACSIncome (folktables): 2018 1-Year ACS person survey, all states; label
PINCP > 50,000. The real loader needs the optional ``folktables`` package and
the census CSVs under ``<data>/folktables`` (downloaded by folktables from
census.gov only when ``FEDLIB_ALLOW_DOWNLOAD=1``). No official test split:
seeded stratified 80/20. Offline stand-in: ``adult``.

Encoding: the ten ACSIncome features; nominal codes with few levels (COW, MAR,
RELP, SEX, RAC1P) one-hot, the rest (AGEP, WKHP, SCHL ordinal, and the
high-cardinality codes OCCP, POBP, kept as numbers so that 1.66 M rows stay
~48 float32 columns, ~320 MB) RobustScaler — all fitted on train.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

from ._core import (SPLIT_NOTE, DatasetSpec, Dataset, DataUnavailableError, download_allowed,
                    download_failed, how_to_fix, split_80_20)
from ._tabular import encode_tabular

YEAR, HORIZON, SURVEY = "2018", "1-Year", "person"
CATEGORICAL = ["COW", "MAR", "RELP", "SEX", "RAC1P"]
NUMERIC = ["AGEP", "WKHP", "SCHL", "OCCP", "POBP"]
HOW_TO_GET = (f"pip install folktables and put the {YEAR} {HORIZON} ACS {SURVEY} CSVs of all "
              f"states (psam_pNN.csv, NN = state FIPS code, ~1.7 GB unzipped, from census.gov) in "
              f"<data>/folktables/{YEAR}/{HORIZON}/ (offline stand-in: load('adult'))")
DOWNLOAD = ("after pip install folktables, folktables downloads the ~1.7 GB of ACS CSVs from "
            "census.gov once")


def folder(root: Path) -> Path:
    """``<root>/folktables``: folktables' ``root_dir``."""
    return Path(root) / "folktables"


def _expected_files(root: Path):
    from folktables.load_acs import _STATE_CODES, state_list

    base = folder(root) / YEAR / HORIZON
    return [base / f"psam_p{_STATE_CODES[s]}.csv" for s in state_list]


def is_local(root: Path) -> bool:
    """True when folktables is installed and every state's CSV is in the data dir."""
    try:
        return all(p.is_file() for p in _expected_files(root))
    except Exception:  # noqa: BLE001 - folktables absent or changed
        return False


def load(root: Path) -> Dataset:
    """Load ACSIncome (all states, 2018 1-Year) with a seeded 80/20 split.

    Returns
    -------
    Dataset
        x: float32 (N, F) encoded features; y: int64 (N,), 1 = income > 50K.
    """
    try:
        import folktables
    except ImportError:
        raise DataUnavailableError(
            "acs_income: the optional package folktables (it reads the ACS CSVs, and downloads "
            f"them) is not installed. Fix: {how_to_fix(root, HOW_TO_GET, DOWNLOAD)}") from None
    local = is_local(root)
    if not local and not download_allowed():
        raise DataUnavailableError(
            f"acs_income: ACS PUMS CSVs not found under {folder(root)}/{YEAR}/{HORIZON}/ and "
            f"download is off (FEDLIB_ALLOW_DOWNLOAD is not 1). "
            f"Fix: {how_to_fix(root, HOW_TO_GET, DOWNLOAD)}")
    try:
        source = folktables.ACSDataSource(survey_year=YEAR, horizon=HORIZON, survey=SURVEY,
                                          root_dir=str(folder(root)))
        acs = source.get_data(download=not local)
        features, label, _ = folktables.ACSIncome.df_to_numpy(acs)
    except Exception as e:  # noqa: BLE001 - one clear error instead of a deep trace
        what = (f"folktables failed to read {folder(root)} ({type(e).__name__}: {e})" if local
                else download_failed("folktables", folder(root), e))
        raise DataUnavailableError(f"acs_income: {what}. "
                                   f"Fix: {how_to_fix(root, HOW_TO_GET, DOWNLOAD)}") from None
    frame = pd.DataFrame(features, columns=list(folktables.ACSIncome.features))
    y = np.asarray(label).astype(np.int64).reshape(-1)
    tr, te = split_80_20(y)
    x_tr, x_te, names = encode_tabular(frame.iloc[tr], frame.iloc[te], CATEGORICAL, NUMERIC)
    return Dataset(name="acs_income", paper_name="ACSIncome", modality="tabular",
                   source=f"folktables ACSIncome, {YEAR} {HORIZON} ACS {SURVEY} survey, all "
                          f"states, from {folder(root)}; {SPLIT_NOTE}",
                   x_train=x_tr, y_train=y[tr], x_test=x_te, y_test=y[te],
                   class_names=("<=50K", ">50K"), feature_names=names)


SPEC = DatasetSpec(name="acs_income", paper_name="ACSIncome", modality="tabular", n_classes=2,
                   loader=load, how_to_get=HOW_TO_GET, is_local=is_local,
                   can_download=importlib.util.find_spec("folktables") is not None,
                   download=DOWNLOAD)
