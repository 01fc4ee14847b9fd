"""Core types and helpers of the data layer: the `Dataset` record, the errors,
the dataset spec, the data directory, the "Fix:" advice of error messages,
the torchvision download step, checksums (verified before any byte is parsed), the
restricted unpickler of the CIFAR pickles and the seeded 80/20 split."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import pickle
import secrets
import shutil
import warnings
from pathlib import Path
from typing import Callable, Literal

import numpy as np

try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import _reconstruct

Modality = Literal["image", "tabular", "text"]

#: Environment variable naming the data directory.
ENV_DATA = "FEDLIB_DATA"  # same as fedlib.paths.ENV_DATA
#: Environment variable that, set to ``1``, lets loaders download from the internet.
ENV_ALLOW_DOWNLOAD = "FEDLIB_ALLOW_DOWNLOAD"
#: Placeholder for the data directory in ``how_to_get`` texts; `how_to_fix` resolves it.
DATA_PLACEHOLDER = "<data>"
#: Seed and test fraction of the split made when a dataset has no official test split.
SPLIT_SEED = 0
TEST_FRACTION = 0.2


class DataUnavailableError(FileNotFoundError):
    """The data of a dataset cannot be found (or fetched) here.

    The message names the sources tried and the command or file path that fixes it.
    """


class DataChecksumError(DataUnavailableError):
    """A data file exists but its digest (sha256, or md5 for CIFAR-10) differs from the
    pinned value; it was not parsed."""


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
    """One dataset as arrays, with its official (or seeded 80/20) test split.

    ``name``: the registry name; ``paper_name``: the Clust-PSI-PFL dataset it is or stands in
    for; ``source``: where the bytes came from and how the test split was made. ``x_train``:
    images float32 (N, C, H, W) in [0, 1]; tabular float32 (N, F) (one-hot categoricals,
    RobustScaler numerics fitted on train); text int64 (N, L) token ids, 0 = padding, 1 = OOV.
    ``y_train``: int64 (N,) in ``0 .. n_classes - 1``; ``x_test``/``y_test`` alike (never None
    after `load`). ``vocab`` (text only, from the training split): token id i is ``vocab[i]``
    (``"<pad>"``, ``"<oov>"`` first); ``feature_names`` (tabular only): the columns' names.
    """

    name: str
    paper_name: str | None
    modality: Modality
    source: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    class_names: tuple[str, ...]
    vocab: tuple[str, ...] | None = None
    feature_names: tuple[str, ...] | None = None

    @property
    def n_classes(self) -> int:
        """Number of classes, ``len(class_names)``."""
        return len(self.class_names)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one example, ``x_train.shape[1:]``."""
        return tuple(self.x_train.shape[1:])

    @property
    def vocab_size(self) -> int | None:
        """Text only: number of token ids (padding and OOV included)."""
        return None if self.vocab is None else len(self.vocab)

    def __repr__(self) -> str:
        n_test = None if self.y_test is None else len(self.y_test)
        return (f"Dataset(name={self.name!r}, modality={self.modality!r}, "
                f"train={len(self.y_train)}, test={n_test}, "
                f"input_shape={self.input_shape}, n_classes={self.n_classes})")


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """Registry entry of one dataset.

    ``n_classes``: as the paper (or the stand-in's documentation) states; ``loader(root,
    **options) -> Dataset`` (raises `DataUnavailableError`); ``how_to_get``: one line for getting
    the data by hand, ``<data>`` standing for the data directory (resolved by `fix`);
    ``is_local(root)``: the files are here (cheap, no checksum); ``can_download``: under
    ``FEDLIB_ALLOW_DOWNLOAD=1``; ``prepare(root)`` copies an offline source into ``root``;
    ``download``: what a download fetches (None: never downloads).
    """

    name: str
    paper_name: str | None
    modality: Modality
    n_classes: int
    loader: Callable[..., Dataset]
    how_to_get: str
    is_local: Callable[[Path], bool]
    can_download: bool = False
    prepare: Callable[[Path], None] | None = None
    download: str | None = None

    def fix(self, root: str | os.PathLike) -> str:
        """The advice for getting this dataset into ``root`` (see `how_to_fix`)."""
        return how_to_fix(root, self.how_to_get, self.download)


def data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The one data directory: the argument, else ``$FEDLIB_DATA``, else ``<base>/data``
    (``<base>``: the project checkout fedlib runs from, else the current working directory;
    see :mod:`fedlib.paths`); an absolute path, not created here."""
    from ..paths import data_root

    if data_dir is not None and not isinstance(data_dir, (str, os.PathLike)):
        raise ValueError(f"data_dir must be a folder path (str or os.PathLike) or None, got {data_dir!r}")
    return data_root(data_dir)


def download_allowed() -> bool:
    """True when ``FEDLIB_ALLOW_DOWNLOAD=1`` is set."""
    return os.environ.get(ENV_ALLOW_DOWNLOAD, "").strip() == "1"


def how_to_fix(root: str | os.PathLike, how_to_get: str, download: str | None = None,
               allowed: bool | None = None) -> str:
    """The advice that follows ``Fix:`` in every data error (and in ``list``), ``<data>`` in
    ``how_to_get`` replaced by ``root``: with downloads off (``allowed``, default
    `download_allowed`) and a ``download`` text ``"set FEDLIB_ALLOW_DOWNLOAD=1 (<download>), or
    <how_to_get>"``, else ``how_to_get`` (a download, if any, was tried and the caller says how
    it failed)."""
    manual = how_to_get.replace(DATA_PLACEHOLDER, str(Path(root).expanduser().resolve()))
    if allowed is None:
        allowed = download_allowed()
    if download is None or allowed:
        return manual
    return f"set {ENV_ALLOW_DOWNLOAD}=1 ({download}), or {manual}"


def download_failed(tool: str, dest: str | os.PathLike, error: BaseException) -> str:
    """The sentence of an error message saying that a download was tried and failed.

    ``"FEDLIB_ALLOW_DOWNLOAD=1 is set, so <tool> tried to download into <dest>, but it
    failed (<ErrorType>: <error>)"``.
    """
    return (f"{ENV_ALLOW_DOWNLOAD}=1 is set, so {tool} tried to download into {dest}, but it "
            f"failed ({type(error).__name__}: {error})")


def download_with_torchvision(name: str, root: Path, folder: Path, fetch: Callable,
                              is_local: Callable[[Path], bool], how_to_get: str, download: str,
                              missing: str = "some files are missing") -> None:
    """Let torchvision fetch (and check the md5 of) a dataset's official files.

    The loaders call this only when the files are not local and ``FEDLIB_ALLOW_DOWNLOAD=1``
    is set; afterwards they verify every file's pinned digest themselves (`read_verified`).
    ``fetch(torchvision.datasets)`` makes the download calls into ``folder``; ``missing``: what
    the error says when ``is_local(root)`` is still False. DataUnavailableError (prefixed by
    ``name``) when torchvision is missing, its download failed or left files out.
    """
    try:
        import torchvision

        fetch(torchvision.datasets)
    except Exception as e:  # noqa: BLE001 - one clear error instead of a deep trace
        raise DataUnavailableError(f"{name}: {download_failed('torchvision', folder, e)}. "
                                   f"Fix: {how_to_fix(root, how_to_get, download)}") from None
    if not is_local(root):
        raise DataUnavailableError(f"{name}: torchvision's download into {folder} finished "
                                   f"but {missing}. "
                                   f"Fix: {how_to_fix(root, how_to_get, download)}")


def sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


#: What a checksum error says the mismatch means, unless the caller says more.
NOT_COMPARABLE = "the numbers would not be comparable, so it is not read"


def checksum_error(where: str | os.PathLike, algorithm: str, got: str, expected: str,
                   fix: str, why: str = NOT_COMPARABLE) -> DataChecksumError:
    """The one `DataChecksumError` message: file, its digest, the pinned digest, why, fix."""
    return DataChecksumError(f"{where}: {algorithm} {got} differs from the pinned {expected}; "
                             f"{why}. Fix: {fix}")


def check_bytes(data: bytes, expected: str, where: str | os.PathLike, fix: str,
                algorithm: str = "sha256", why: str = NOT_COMPARABLE) -> bytes:
    """Return ``data`` if its ``algorithm`` digest is ``expected``, else raise
    `DataChecksumError` (see `checksum_error`; ``where`` names the file in it)."""
    got = hashlib.new(algorithm, data).hexdigest()
    if got != expected:
        raise checksum_error(where, algorithm, got, expected, fix, why)
    return data


def read_verified(path: str | os.PathLike, expected: str, fix: str, algorithm: str = "sha256",
                  why: str = NOT_COMPARABLE) -> bytes:
    """The bytes of ``path``, returned only if their digest is the pinned ``expected``.

    Parsers read these very bytes (``io.BytesIO``), so what is parsed is what was verified;
    DataChecksumError (nothing parsed) when the digest differs.
    """
    return check_bytes(Path(path).read_bytes(), expected, path, fix, algorithm, why)


#: The only globals a pickle of CIFAR-10 / CIFAR-100 data may name. The official files
#: (Python 2 cPickle of a dict of str, int lists and a uint8 numpy array) reference numpy's
#: array reconstruction: ``numpy.core.multiarray._reconstruct`` (numpy 1 spelling; numpy
#: >= 2 writes ``numpy._core.multiarray``), ``numpy.ndarray`` and ``numpy.dtype``. dict,
#: list, str, int, tuple and bool are pickle opcodes, not globals.
PICKLE_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}
#: Why a pickle file with the wrong md5 is refused (the ``why`` of `read_verified`).
PICKLE_WHY = "it is a Python pickle, which can run code when read, so it is not opened"


class RestrictedUnpickler(pickle.Unpickler):
    """A `pickle.Unpickler` that resolves only the globals in ``allowed_globals``.

    Any other global (``builtins.open``, ``os.system``, ...) raises
    ``pickle.UnpicklingError`` before it can be called; the message names ``what``, the
    format being read (``"... is not allowed in a <what> pickle"``), and the allowed globals.
    ``allowed_globals``: ``(module, name) -> object``; ``kwargs`` go to `pickle.Unpickler`.
    """

    def __init__(self, file, *, what: str = "restricted",
                 allowed_globals: dict = PICKLE_ALLOWED_GLOBALS, **kwargs):
        super().__init__(file, **kwargs)
        self.what = what
        self.allowed_globals = allowed_globals

    def find_class(self, module: str, name: str):
        try:
            return self.allowed_globals[(module, name)]
        except KeyError:
            allowed = ", ".join(f"{m}.{n}" for m, n in self.allowed_globals)
            raise pickle.UnpicklingError(
                f"global {module}.{name} is not allowed in a {self.what} pickle "
                f"(allowed: {allowed})") from None


def restricted_unpickle(data: bytes, what: str,
                        allowed_globals: dict = PICKLE_ALLOWED_GLOBALS) -> dict:
    """A pickled dict (already verified bytes) read by `RestrictedUnpickler`.

    The one unpickler of the package (CIFAR-10 and CIFAR-100 use it). Python 2 strings are
    decoded as latin1, and bytes keys of the dict become str. ``pickle.UnpicklingError`` when
    the pickle names a global outside ``allowed_globals`` (nothing it names is called).
    """
    d = RestrictedUnpickler(io.BytesIO(data), what=what, allowed_globals=allowed_globals,
                            encoding="latin1").load()
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in d.items()}


def read_pickles(name: str, folder: Path, md5: dict[str, str], fix: str,
                 unpickle: Callable[[bytes], dict]) -> dict[str, dict]:
    """The pickle files ``md5`` names under ``folder``, each unpickled only after EVERY
    file's md5 was verified: file name -> its dict. DataChecksumError (nothing unpickled) for
    a wrong md5; DataUnavailableError when ``unpickle`` refused a file.
    """
    verified = {f: read_verified(folder / f, expected, fix, algorithm="md5", why=PICKLE_WHY)
                for f, expected in md5.items()}  # every file, before anything is unpickled
    files = {}
    for f, data in verified.items():
        try:
            files[f] = unpickle(data)
        except pickle.UnpicklingError as e:
            raise DataUnavailableError(f"{name}: refused to unpickle {folder / f}: {e}. "
                                       f"Fix: {fix}") from e
    return files


def cifar_arrays(files: list[dict], label_key: str) -> tuple[np.ndarray, np.ndarray]:
    """x float32 (N, 3, 32, 32) in [0, 1] and y int64 (N,) from unpickled CIFAR files
    (``"data"``: uint8 (n, 3072) each, the labels under ``label_key``), concatenated in order."""
    xs = [np.asarray(d["data"], dtype=np.uint8).reshape(-1, 3, 32, 32) for d in files]
    ys = [np.asarray(d[label_key], dtype=np.int64) for d in files]
    return np.concatenate(xs).astype(np.float32) / np.float32(255.0), np.concatenate(ys)


def torchvision_files(name: str, title: str, root: Path, folder: Path,
                      is_local: Callable[[Path], bool], fetch: Callable, how_to_get: str,
                      download: str, missing: str = "some files are missing") -> str:
    """Make sure a torchvision-layout dataset's files are in ``root``: download them if they
    are not and ``FEDLIB_ALLOW_DOWNLOAD=1`` (`download_with_torchvision`), else raise the one
    "not found" error. The one download step of the CIFAR-10, CIFAR-100 and SVHN loaders.
    Returns the "Fix:" advice for a file found bad afterwards (``"delete <folder>, then ..."``).
    """
    root = Path(root)
    if not is_local(root) and download_allowed():
        download_with_torchvision(name, root, folder, fetch, is_local, how_to_get, download,
                                  missing=missing)
    if not is_local(root):
        raise DataUnavailableError(
            f"{name}: {title} not found. Tried {folder}/ (torchvision layout) and download "
            f"(off: {ENV_ALLOW_DOWNLOAD} is not 1). Fix: {how_to_fix(root, how_to_get, download)}")
    return f"delete {folder}, then {how_to_fix(root, how_to_get, download)}"


def check_sha256(path: Path, expected: str, fix: str) -> None:
    """Raise `DataChecksumError` if ``path``'s sha256 is not ``expected`` (streamed; for
    files that a library then reads by path, e.g. torchvision's idx reader)."""
    got = sha256(path)
    if got != expected:
        raise checksum_error(path, "sha256", got, expected, fix)


def write_verified(dst: Path, expected: str, fill: Callable, where: str | os.PathLike, fix: str) -> None:
    """Put a file at ``dst`` whose sha256 is the pinned ``expected``: ``fill(f)`` writes its
    bytes into ``f``, a temporary file of this process's own next to ``dst``
    (``<name>.<pid>.<random>.part``), which is verified and then renamed onto ``dst``
    (``os.replace``, atomic). Processes preparing one data folder at once each write their own
    temporary, and the last rename leaves the same verified bytes. On a mismatch
    (`DataChecksumError` naming ``where`` and ``fix``) or any other error nothing of this call
    is left: neither ``dst`` nor the temporary."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f"{dst.name}.{os.getpid()}.{secrets.token_hex(4)}.part")
    try:
        with open(tmp, "xb") as f:  # created here, by this call only
            fill(f)
        got = sha256(tmp)
        if got != expected:
            raise checksum_error(where, "sha256", got, expected, fix)
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def copy_verified(src: Path, dst: Path, expected: str) -> None:
    """Copy ``src`` to ``dst`` (atomically) if its sha256 is the pinned ``expected``;
    on a mismatch nothing is left at ``dst`` (nor a ``.part`` file). Safe to run from several
    processes at once (:func:`write_verified`)."""
    def fill(f):
        with open(src, "rb") as fin:
            shutil.copyfileobj(fin, f, 1 << 20)

    write_verified(dst, expected, fill, src, f"reinstall the package that ships {src}")


def system_dir(root: Path, path: Path) -> Path:
    """A Debian package's install folder ``path``, or the same path under
    ``<root>/_debian/`` where ``scripts/get_data.sh`` unpacks the package (dpkg -x)
    without installing it system-wide."""
    path = Path(path)
    if path.is_dir():
        return path
    return Path(root) / "_debian" / path.relative_to(path.anchor)


def first_existing(paths) -> Path | None:
    """The first of ``paths`` that is a file, else None."""
    for p in paths:
        if p is not None and Path(p).is_file():
            return Path(p)
    return None


def encode_labels(labels, class_names=None) -> tuple[np.ndarray, tuple[str, ...]]:
    """Map labels (N,) to int64 ids ``0..C-1``: (y (N,), class_names), ``class_names`` a fixed
    order (default: the sorted unique values, as strings)."""
    arr = np.asarray(labels)
    if class_names is None:  # numeric labels sort numerically, strings alphabetically
        class_names = tuple(str(v) for v in np.unique(arr))
    labels = arr.astype(str)
    class_names = tuple(str(c) for c in class_names)
    index = {c: i for i, c in enumerate(class_names)}
    unknown = sorted(set(labels.tolist()) - index.keys())
    if unknown:
        raise ValueError(f"labels {unknown[:5]} not in class_names {class_names}")
    return np.array([index[v] for v in labels], dtype=np.int64), class_names


def split_80_20(y: np.ndarray, seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Seeded stratified 80/20 split of row indices by labels y (N,): sorted int64
    (train_idx, test_idx)."""

    from sklearn.model_selection import train_test_split

    y = np.asarray(y)
    idx = np.arange(len(y))
    counts = np.unique(y, return_counts=True)[1]
    stratify = y if counts.min() >= 2 else None
    if stratify is None:
        warnings.warn("a class has fewer than 2 examples: 80/20 split is not stratified",
                      stacklevel=2)
    tr, te = train_test_split(idx, test_size=TEST_FRACTION, random_state=seed,
                              stratify=stratify)
    return np.sort(tr), np.sort(te)


SPLIT_NOTE = f"no official test split: seeded (seed={SPLIT_SEED}) stratified 80/20 split"
