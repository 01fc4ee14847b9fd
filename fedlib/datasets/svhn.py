"""SVHN (Street View House Numbers, cropped digits), 73,257 + 26,032 colour 32x32
images, 10 classes (digits 0..9).

Read from torchvision's layout ``<data>/svhn/`` (``train_32x32.mat``,
``test_32x32.mat``; the ``extra`` split is not used). The files are MATLAB v5 files,
read by ``scipy.io.loadmat`` (no pickle). As for every data file of the package, the
official md5 of BOTH files (as pinned by torchvision) is checked before either is
parsed, and the parser reads those very bytes; a mismatch raises `DataChecksumError`
and nothing is read.

The official files label the digit 0 as ``10``; it is mapped to ``0``, so label ``k``
is the digit ``k``.

torchvision downloads the files only when ``FEDLIB_ALLOW_DOWNLOAD=1`` (it checks their
md5). No package ships SVHN offline.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from ._core import DatasetSpec, Dataset, DataUnavailableError, read_verified, torchvision_files

FOLDER = "svhn"
TRAIN_FILE = "train_32x32.mat"
TEST_FILE = "test_32x32.mat"
#: Official md5s of the release (as pinned by torchvision.datasets.SVHN).
MD5 = {
    TRAIN_FILE: "e26dedcc434d2e4c54c9b2d4a06d8373",
    TEST_FILE: "eb5a983be6a315427106f1b164d9cef3",
}
URL = "http://ufldl.stanford.edu/housenumbers/"
HOW_TO_GET = (f"download {TRAIN_FILE} (md5 {MD5[TRAIN_FILE]}) and {TEST_FILE} "
              f"(md5 {MD5[TEST_FILE]}) from {URL} (Format 2: cropped digits) into <data>/{FOLDER}/")
DOWNLOAD = "torchvision downloads 246 MB from ufldl.stanford.edu"
CLASS_NAMES = tuple(str(d) for d in range(10))


def is_local(root: Path) -> bool:
    """True when both .mat files are under ``<root>/svhn``."""
    return all((Path(root) / FOLDER / f).is_file() for f in MD5)


def parse_mat(data: bytes, where: Path, fix: str) -> tuple[np.ndarray, np.ndarray]:
    """x float32 (N, 3, 32, 32) in [0, 1] and y int64 (N,) in 0..9 from the (already
    md5-verified) bytes of one SVHN .mat file.

    ``X`` is uint8 (32, 32, 3, N) and ``y`` is (N, 1) with 1..10, 10 meaning the digit 0.

    Raises
    ------
    DataUnavailableError
        The bytes are not a MATLAB v5 file holding ``X`` and ``y`` of those layouts.
    """
    import scipy.io

    try:
        mat = scipy.io.loadmat(io.BytesIO(data))
    except Exception as e:  # noqa: BLE001 - scipy raises several types for a bad file
        raise DataUnavailableError(f"svhn: could not read {where} as a MATLAB file "
                                   f"({type(e).__name__}: {e}). Fix: {fix}") from None
    x, y = mat.get("X"), mat.get("y")
    if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.dtype == np.uint8
            and x.ndim == 4 and x.shape[:3] == (32, 32, 3) and y.size == x.shape[3]
            and y.ndim <= 2 and y.size > 0 and y.min() >= 1 and y.max() <= 10):
        got = {k: (getattr(v, "shape", None), str(getattr(v, "dtype", type(v).__name__)))
               for k, v in mat.items() if not k.startswith("__")}
        raise DataUnavailableError(
            f"svhn: {where} does not hold X uint8 (32, 32, 3, N) and y (N, 1) in 1..10 "
            f"(got {got}). Fix: {fix}")
    x = np.transpose(x, (3, 2, 0, 1)).astype(np.float32, order="C")  # (N, C, H, W), one copy
    x /= np.float32(255.0)
    y = y.reshape(-1).astype(np.int64) % 10  # 10 -> digit 0
    return x, y


def _fetch_svhn(tvd, folder: Path) -> None:
    """Both splits through ``tvd`` (``torchvision.datasets``), rooted at ``folder``."""
    for split in ("train", "test"):
        tvd.SVHN(root=str(folder), split=split, download=True)


def load(root: Path) -> Dataset:
    """Load SVHN (cropped digits) with its official 73,257/26,032 train/test split.

    Returns
    -------
    Dataset
        x: float32 (N, 3, 32, 32) in [0, 1]; y: int64 (N,) in 0..9 (the digit).

    Raises
    ------
    DataUnavailableError
        Files missing (and download off or failed), or a file that is not the
        expected MATLAB layout.
    DataChecksumError
        A file's md5 is not the official one (checked for both files before either is read).
    """
    root = Path(root)
    folder = root / FOLDER
    fix = torchvision_files("svhn", "SVHN", root, folder, is_local,
                            lambda tvd: _fetch_svhn(tvd, folder), HOW_TO_GET, DOWNLOAD,
                            missing="a file is missing")
    verified = {f: read_verified(folder / f, md5, fix, algorithm="md5")
                for f, md5 in MD5.items()}  # both files, before either is parsed
    x_tr, y_tr = parse_mat(verified[TRAIN_FILE], folder / TRAIN_FILE, fix)
    x_te, y_te = parse_mat(verified[TEST_FILE], folder / TEST_FILE, fix)
    return Dataset(name="svhn", paper_name="SVHN", modality="image",
                   source=f"SVHN cropped digits {TRAIN_FILE} / {TEST_FILE} in {folder} (md5 "
                          "verified; official train/test split, extra not used; label 10 -> 0)",
                   x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te,
                   class_names=CLASS_NAMES)


SPEC = DatasetSpec(name="svhn", paper_name="SVHN", modality="image", n_classes=10,
                   loader=load, how_to_get=HOW_TO_GET, is_local=is_local, can_download=True,
                   download=DOWNLOAD)
