"""CIFAR-100, 50,000 + 10,000 colour 32x32 images, 100 classes (20 superclasses).

Read from torchvision's layout ``<data>/cifar-100-python/`` (``train``, ``test``,
``meta``). Those files are Python pickles, and unpickling an untrusted pickle can run
arbitrary code, so, as for CIFAR-10 (:mod:`fedlib.datasets.cifar10`):

1. the official md5 of EVERY file (as pinned by torchvision) is checked before any of
   them is unpickled; a mismatch raises `DataChecksumError` and nothing is read;
2. the verified bytes are then read by the package's one restricted unpickler
   (`fedlib.datasets._core.restricted_unpickle`, CIFAR-10's), which resolves only the few
   numpy globals the official files reference (same writer, same format:
   `fedlib.datasets._core.PICKLE_ALLOWED_GLOBALS`) and raises ``pickle.UnpicklingError``
   for anything else.

Labels are the 100 fine classes (``fine_labels``); ``load(root, labels="coarse")``
gives the 20 superclasses (``coarse_labels``) instead, e.g. for pFedLIA.

torchvision downloads the tree only when ``FEDLIB_ALLOW_DOWNLOAD=1`` (it checks the
archive's md5 before extracting). No package ships CIFAR-100 offline.
"""

from __future__ import annotations

from pathlib import Path

from ._core import (DatasetSpec, Dataset, cifar_arrays, read_pickles, restricted_unpickle,
                    torchvision_files)

FOLDER = "cifar-100-python"
TRAIN_FILES = ("train",)
TEST_FILES = ("test",)
META_FILE = "meta"
#: Official md5s of the release (as pinned by torchvision.datasets.CIFAR100).
MD5 = {
    "train": "16019d7e3df5f24257cddd939b257f8d",
    "test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
    "meta": "7973b15100ade9c7d40fb424638fde48",
}
ARCHIVE, ARCHIVE_MD5 = "cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85"
#: ``labels=`` option -> (key of the label list in train/test, key of the names in meta).
LABELS = {"fine": ("fine_labels", "fine_label_names"),
          "coarse": ("coarse_labels", "coarse_label_names")}
HOW_TO_GET = (f"extract the official {ARCHIVE} (md5 {ARCHIVE_MD5}, from "
              f"https://www.cs.toronto.edu/~kriz/cifar.html) in <data>/ so that <data>/{FOLDER}/ "
              f"holds {', '.join(TRAIN_FILES + TEST_FILES)} and {META_FILE}")
DOWNLOAD = "torchvision downloads 161 MB from cs.toronto.edu"


def is_local(root: Path) -> bool:
    """True when ``train``, ``test`` and ``meta`` are under ``<root>/cifar-100-python``."""
    return all((Path(root) / FOLDER / f).is_file() for f in (*TRAIN_FILES, *TEST_FILES, META_FILE))


def unpickle(data: bytes) -> dict:
    """One CIFAR-100 file (already md5-verified bytes) read by the restricted unpickler
    (`fedlib.datasets._core.restricted_unpickle`).

    Returns
    -------
    dict
        str keys (``"data"``: uint8 (N, 3072), ``"fine_labels"`` / ``"coarse_labels"``:
        N ints; or, for ``meta``, ``"fine_label_names"`` / ``"coarse_label_names"``).

    Raises
    ------
    pickle.UnpicklingError
        The pickle names a global outside `fedlib.datasets._core.PICKLE_ALLOWED_GLOBALS`.
    """
    return restricted_unpickle(data, "CIFAR-100")


def load(root: Path, labels: str = "fine") -> Dataset:
    """Load CIFAR-100 with its official 50,000/10,000 split.

    Parameters
    ----------
    root : Path
        The data directory.
    labels : {"fine", "coarse"}
        ``"fine"``: the 100 classes (default); ``"coarse"``: the 20 superclasses.

    Returns
    -------
    Dataset
        x: float32 (N, 3, 32, 32) in [0, 1]; y: int64 (N,) in 0..99 (coarse: 0..19).

    Raises
    ------
    ValueError
        ``labels`` is neither ``"fine"`` nor ``"coarse"``.
    DataUnavailableError
        Files missing (and download off or failed), or a file the restricted
        unpickler refuses.
    DataChecksumError
        A file's md5 is not the official one (checked for all files before any is read).
    """
    if not isinstance(labels, str) or labels not in LABELS:
        raise ValueError(f"labels must be 'fine' (100 classes) or 'coarse' (20 superclasses), "
                         f"got {labels!r}")
    label_key, names_key = LABELS[labels]
    root = Path(root)
    folder = root / FOLDER
    fix = torchvision_files(
        "cifar100", "CIFAR-100", root, folder, is_local,
        lambda tvd: tvd.CIFAR100(root=str(root), train=True, download=True),
        HOW_TO_GET, DOWNLOAD, missing="some files are missing")
    files = read_pickles("cifar100", folder, MD5, fix, unpickle)
    x_tr, y_tr = cifar_arrays([files[f] for f in TRAIN_FILES], label_key)
    x_te, y_te = cifar_arrays([files[f] for f in TEST_FILES], label_key)
    names = tuple(n.decode() if isinstance(n, bytes) else str(n)
                  for n in files[META_FILE][names_key])
    which = "100 fine classes" if labels == "fine" else "20 coarse superclasses"
    return Dataset(name="cifar100", paper_name="CIFAR-100", modality="image",
                   source=f"CIFAR-100 python files in {folder} (md5 verified; official "
                          f"train/test split; {which})",
                   x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te, class_names=names)


SPEC = DatasetSpec(name="cifar100", paper_name="CIFAR-100", modality="image", n_classes=100,
                   loader=load, how_to_get=HOW_TO_GET, is_local=is_local, can_download=True,
                   download=DOWNLOAD)
