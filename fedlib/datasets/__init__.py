"""Datasets of the Clust-PSI-PFL workbook, by name, as numpy arrays.

>>> from fedlib.datasets import load, subsample
>>> ds = load("adult")                      # doctest: +SKIP
>>> small = subsample(ds, 2000, 500, seed=0)  # doctest: +SKIP

Paper datasets (real loaders): fmnist, cifar10, acs_income, serengeti, sent140,
amazon_reviews; FedPrism's cifar100 (``labels="coarse"`` for its 20 superclasses) and
svhn. Offline real stand-ins (shipped by pinned packages): adult
(for ACSIncome), letter / satellite / shuttle (for Serengeti), fine_foods (for
the text sets). See `DATASETS` for each one's source and how to get it, and
``python -m fedlib.datasets list``.
"""

from ._core import (DataChecksumError, Dataset, DatasetSpec, DataUnavailableError, data_dir)
from ._registry import DATASETS, available, load
from ._subsample import subsample

__all__ = ["load", "available", "DATASETS", "data_dir", "subsample", "Dataset", "DatasetSpec",
           "DataUnavailableError", "DataChecksumError"]
