"""FMNIST (Fashion-MNIST), 60,000 + 10,000 grey 28x28 images, 10 classes.

Sources, in order: ``<data>/FashionMNIST/raw/`` (torchvision's layout);
the Debian package ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist``,
copied and gunzipped into the data directory); torchvision's download when
``FEDLIB_ALLOW_DOWNLOAD=1``. The four raw idx files are checked against pinned sha256
before they are parsed (a Debian copy is checked before it is put in place), and parsed
here (:func:`read_idx`): importing torchvision only to read them took 2.1 s of a process's
start (it imports ``torch._dynamo``).
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np

from ._core import (DatasetSpec, Dataset, DataUnavailableError, check_sha256, download_allowed,
                    download_failed, how_to_fix, system_dir, write_verified)

#: Debian ``dataset-fashion-mnist`` install location (module-level so tests can patch it).
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
#: sha256 of the uncompressed idx files (the original Zalando release, as shipped by
#: Debian dataset-fashion-mnist 0.0~git20200523.55506a9-1).
RAW_SHA256 = {
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}
CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
               "Sneaker", "Bag", "Ankle boot")
HOW_TO_GET = ("apt-get install -y dataset-fashion-mnist (then `python -m fedlib.datasets "
              "prepare fmnist`), or put the uncompressed idx files "
              f"{', '.join(RAW_SHA256)} at <data>/FashionMNIST/raw/")
DOWNLOAD = "torchvision downloads 30 MB of gzipped idx files from the Fashion-MNIST site"


def raw_dir(root: Path) -> Path:
    """``<root>/FashionMNIST/raw``, where torchvision looks."""
    return Path(root) / "FashionMNIST" / "raw"


def is_local(root: Path) -> bool:
    """True when the idx files are in ``root`` or the Debian package is installed."""
    return (all((raw_dir(root) / f).is_file() for f in RAW_SHA256)
            or all((system_dir(root, DEBIAN_DIR) / f"{f}.gz").is_file() for f in RAW_SHA256))


def prepare(root: Path) -> None:
    """Put the 4 verified idx files into ``<root>/FashionMNIST/raw/``.

    Copies and gunzips them from the Debian package if they are missing; downloads
    with torchvision only when ``FEDLIB_ALLOW_DOWNLOAD=1``.
    """
    raw = raw_dir(root)
    missing = [f for f in RAW_SHA256 if not (raw / f).is_file()]
    debian = system_dir(root, DEBIAN_DIR)
    fix = how_to_fix(root, HOW_TO_GET, DOWNLOAD)
    if missing and all((debian / f"{f}.gz").is_file() for f in missing):
        raw.mkdir(parents=True, exist_ok=True)
        for f in missing:
            _gunzip_verified(debian / f"{f}.gz", raw / f, RAW_SHA256[f])
        missing = []
    if missing and download_allowed():
        try:
            import torchvision

            torchvision.datasets.FashionMNIST(root=str(root), train=True, download=True)
        except Exception as e:  # noqa: BLE001 - one clear error instead of a deep trace
            raise DataUnavailableError(f"fmnist: {download_failed('torchvision', raw, e)}. "
                                       f"Fix: {fix}") from None
        missing = [f for f in RAW_SHA256 if not (raw / f).is_file()]
        if missing:
            raise DataUnavailableError(f"fmnist: torchvision's download into {raw} finished but "
                                       f"{', '.join(missing)} are missing. Fix: {fix}")
    if missing:
        raise DataUnavailableError(
            f"fmnist: Fashion-MNIST not found. Tried {raw}/ ({', '.join(missing)} missing), "
            f"the Debian package files {DEBIAN_DIR}/*-ubyte.gz (absent), and download "
            f"(off: FEDLIB_ALLOW_DOWNLOAD is not 1). Fix: {fix}")
    for f, digest in RAW_SHA256.items():  # before `load` parses them
        check_sha256(raw / f, digest, f"delete {raw}, then {fix}")


def _gunzip_verified(src: Path, dst: Path, expected: str) -> None:
    """Gunzip ``src`` to ``dst`` (atomically) if the result's sha256 is ``expected``;
    on a mismatch nothing is left at ``dst``. Safe to run from several processes at once
    (each writes a temporary of its own: ``fedlib.datasets._core.write_verified``)."""
    def fill(fout):
        with gzip.open(src, "rb") as fin:
            shutil.copyfileobj(fin, fout, 1 << 20)

    write_verified(dst, expected, fill, f"{dst.name} gunzipped from {src}",
                   "reinstall dataset-fashion-mnist 0.0~git20200523.55506a9-1 "
                   "(or run scripts/get_data.sh again)")


def load(root: Path) -> Dataset:
    """Load Fashion-MNIST with its official 60,000/10,000 split.

    Returns
    -------
    Dataset
        x: float32 (N, 1, 28, 28) in [0, 1]; y: int64 (N,) in 0..9.
    """
    prepare(root)
    raw = raw_dir(root)
    arrays = []
    for prefix in ("train", "t10k"):
        images = read_idx(raw / f"{prefix}-images-idx3-ubyte", 3)
        arrays += [images[:, None].astype(np.float32) / np.float32(255.0),
                   read_idx(raw / f"{prefix}-labels-idx1-ubyte", 1).astype(np.int64)]
    return Dataset(name="fmnist", paper_name="FMNIST", modality="image",
                   source=f"Fashion-MNIST idx files in {raw} (sha256 verified; "
                          "official 60,000/10,000 split)",
                   x_train=arrays[0], y_train=arrays[1], x_test=arrays[2], y_test=arrays[3],
                   class_names=CLASS_NAMES)


def read_idx(path: Path, ndim: int) -> np.ndarray:
    """An idx file of unsigned bytes (LeCun's MNIST format, as Fashion-MNIST ships it).

    Layout: two zero bytes, the type code 0x08 (unsigned byte), the number of dimensions,
    one big-endian int32 per dimension, then the values in C order.

    Parameters
    ----------
    path : Path
    ndim : int
        The number of dimensions the file must have (3 for images, 1 for labels).

    Returns
    -------
    ndarray of uint8, shape as the header says (e.g. (60000, 28, 28))

    Raises
    ------
    DataUnavailableError
        The header is not that of a uint8 idx file of ``ndim`` dimensions, or the file's
        length differs from what the header says.
    """
    data = Path(path).read_bytes()
    head = 4 + 4 * ndim
    if len(data) < head or data[:4] != bytes([0, 0, 0x08, ndim]):
        raise DataUnavailableError(f"fmnist: {path} does not start with the header of an idx file of "
                                   f"unsigned bytes in {ndim} dimensions (00 00 08 {ndim:02x}), got "
                                   f"{data[:4].hex(' ')}. Fix: delete {Path(path).parent}, then "
                                   f"{HOW_TO_GET}")
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">i4", count=ndim, offset=4))
    if len(data) != head + int(np.prod(shape)):
        raise DataUnavailableError(f"fmnist: {path} holds {len(data) - head} values after its header, "
                                   f"which says {shape} ({int(np.prod(shape))} values). Fix: delete "
                                   f"{Path(path).parent}, then {HOW_TO_GET}")
    return np.frombuffer(data, dtype=np.uint8, offset=head).reshape(shape)


SPEC = DatasetSpec(name="fmnist", paper_name="FMNIST", modality="image", n_classes=10,
                   loader=load, how_to_get=HOW_TO_GET, is_local=is_local, can_download=True,
                   prepare=prepare, download=DOWNLOAD)
