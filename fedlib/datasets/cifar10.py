"""CIFAR-10, 50,000 + 10,000 colour 32x32 images, 10 classes.

Read from torchvision's layout ``<data>/cifar-10-batches-py/`` (``data_batch_1..5``,
``test_batch``, ``batches.meta``). Those files are Python pickles, and unpickling an
untrusted pickle can run arbitrary code, so:

1. the official md5 of EVERY file (as pinned by torchvision) is checked before any of
   them is unpickled; a mismatch raises `DataChecksumError` and nothing is read;
2. the verified bytes are then read by the package's one restricted unpickler
   (`fedlib.datasets._core.restricted_unpickle`), which resolves only the few numpy
   globals the official files reference (`fedlib.datasets._core.PICKLE_ALLOWED_GLOBALS`)
   and raises ``pickle.UnpicklingError`` for anything else.

torchvision downloads the tree only when ``FEDLIB_ALLOW_DOWNLOAD=1`` (it checks the
archive's md5 before extracting). No package ships CIFAR-10 offline.
"""

from __future__ import annotations

from pathlib import Path

from ._core import (DatasetSpec, Dataset, cifar_arrays, read_pickles, restricted_unpickle,
                    torchvision_files)

FOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILES = ("test_batch",)
META_FILE = "batches.meta"
#: Official md5s of the release (as pinned by torchvision.datasets.CIFAR10).
MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
    "batches.meta": "5ff9c542aee3614f3951f8cda6e48888",
}
ARCHIVE, ARCHIVE_MD5 = "cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a"
HOW_TO_GET = (f"extract the official {ARCHIVE} (md5 {ARCHIVE_MD5}, from "
              f"https://www.cs.toronto.edu/~kriz/cifar.html) in <data>/ so that <data>/{FOLDER}/ "
              f"holds {', '.join(TRAIN_FILES + TEST_FILES)} and {META_FILE}")
DOWNLOAD = "torchvision downloads 163 MB from cs.toronto.edu"


def is_local(root: Path) -> bool:
    """True when all batch files are under ``<root>/cifar-10-batches-py``."""
    return all((Path(root) / FOLDER / f).is_file() for f in (*TRAIN_FILES, *TEST_FILES, META_FILE))


def unpickle(data: bytes) -> dict:
    """One CIFAR-10 batch (already md5-verified bytes) read by the restricted unpickler
    (`fedlib.datasets._core.restricted_unpickle`).

    Returns
    -------
    dict
        str keys (``"data"``: uint8 (N, 3072), ``"labels"``: N ints; or ``"label_names"``).

    Raises
    ------
    pickle.UnpicklingError
        The pickle names a global outside `fedlib.datasets._core.PICKLE_ALLOWED_GLOBALS`.
    """
    return restricted_unpickle(data, "CIFAR-10")


def load(root: Path) -> Dataset:
    """Load CIFAR-10 with its official 50,000/10,000 split.

    Returns
    -------
    Dataset
        x: float32 (N, 3, 32, 32) in [0, 1]; y: int64 (N,) in 0..9.

    Raises
    ------
    DataUnavailableError
        Files missing (and download off or failed), or a file the restricted
        unpickler refuses.
    DataChecksumError
        A file's md5 is not the official one (checked for all files before any is read).
    """
    root = Path(root)
    folder = root / FOLDER
    fix = torchvision_files(
        "cifar10", "CIFAR-10", root, folder, is_local,
        lambda tvd: tvd.CIFAR10(root=str(root), train=True, download=True),
        HOW_TO_GET, DOWNLOAD, missing="some batch files are missing")
    batches = read_pickles("cifar10", folder, MD5, fix, unpickle)
    x_tr, y_tr = cifar_arrays([batches[f] for f in TRAIN_FILES], "labels")
    x_te, y_te = cifar_arrays([batches[f] for f in TEST_FILES], "labels")
    names = tuple(n.decode() if isinstance(n, bytes) else str(n)
                  for n in batches[META_FILE]["label_names"])
    return Dataset(name="cifar10", paper_name="CIFAR10", modality="image",
                   source=f"CIFAR-10 python batches in {folder} (md5 verified; official "
                          "train/test split)",
                   x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te, class_names=names)


SPEC = DatasetSpec(name="cifar10", paper_name="CIFAR10", modality="image", n_classes=10,
                   loader=load, how_to_get=HOW_TO_GET, is_local=is_local, can_download=True,
                   download=DOWNLOAD)
