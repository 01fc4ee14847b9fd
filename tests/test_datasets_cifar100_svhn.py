"""Tests of the CIFAR-100 and SVHN loaders without the real data: small fake files in
torchvision's layout, with the pinned md5s swapped for the fake files' own (as the
CIFAR-10 tests do), the md5 check before any parsing, the restricted unpickler, SVHN's
label 10 -> digit 0, and the errors that say how to get the data."""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.io

from fedlib.datasets import (DATASETS, DataChecksumError, DataUnavailableError, available,
                             cifar100, load, svhn)
from fedlib.models import ARCH_FOR_DATASET

from test_datasets import py2_pickle

SET_DOWNLOAD = "set FEDLIB_ALLOW_DOWNLOAD=1"


@pytest.fixture(autouse=True)
def _no_download(monkeypatch):
    monkeypatch.delenv("FEDLIB_ALLOW_DOWNLOAD", raising=False)


# ---------------------------------------------------------------- fake trees
FINE = [f"fine_{i:02d}".encode() for i in range(100)]
COARSE = [f"coarse_{i:02d}".encode() for i in range(20)]


def _fake_cifar100(root: Path, n_train=8, n_test=5, files=None):
    """A tiny ``cifar-100-python`` tree pickled like the official release (Python 2
    cPickle, protocol 0). Returns the folder and the (N, 3072) uint8 data per file."""
    folder = root / cifar100.FOLDER
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    data = {}
    for name, n in (("train", n_train), ("test", n_test)):
        data[name] = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        fine = [int(v) for v in (np.arange(n) * 13 + 99) % 100]  # 99, 12, 25, ...
        (folder / name).write_bytes(py2_pickle({
            b"filenames": [f"img_{i}.png".encode() for i in range(n)],
            b"batch_label": f"{name}ing batch 1 of 1".encode(),
            b"fine_labels": fine, b"coarse_labels": [v // 5 for v in fine],
            b"data": data[name]}) + b".")
    (folder / "meta").write_bytes(py2_pickle({b"fine_label_names": FINE,
                                              b"coarse_label_names": COARSE}) + b".")
    for name, content in (files or {}).items():
        (folder / name).write_bytes(content)
    return folder, data


def _fake_svhn(root: Path, n_train=7, n_test=4, files=None):
    """Tiny ``svhn/{train,test}_32x32.mat`` files as MATLAB v5 (like the official ones):
    X uint8 (32, 32, 3, N), y uint8 (N, 1) in 1..10. Returns the folder and (X, y) per file."""
    folder = root / svhn.FOLDER
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    arrays = {}
    for name, n in ((svhn.TRAIN_FILE, n_train), (svhn.TEST_FILE, n_test)):
        x = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
        y = (np.arange(n, dtype=np.uint8) % 10 + 1).reshape(n, 1)  # 1..10, 10 = digit 0
        scipy.io.savemat(folder / name, {"X": x, "y": y})
        arrays[name] = (x, y)
    for name, content in (files or {}).items():
        (folder / name).write_bytes(content)
    return folder, arrays


def _accept_fake_md5s(monkeypatch, module, folder):
    """Pin the md5s of the fake tree's files, as if they were the official ones."""
    monkeypatch.setattr(module, "MD5", {f: hashlib.md5((folder / f).read_bytes()).hexdigest()
                                        for f in module.MD5})


class _CreatesFile:
    """Unpickling this opens (creates) ``path``: the stand-in for arbitrary code."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


# ---------------------------------------------------------------- registry
def test_registry_entries():
    c, s = DATASETS["cifar100"], DATASETS["svhn"]
    assert (c.name, c.paper_name, c.modality, c.n_classes) == ("cifar100", "CIFAR-100", "image", 100)
    assert (s.name, s.paper_name, s.modality, s.n_classes) == ("svhn", "SVHN", "image", 10)
    assert c.can_download and s.can_download and c.download and s.download
    assert ARCH_FOR_DATASET["cifar100"] == ARCH_FOR_DATASET["svhn"] == "lenet5"  # FedPrism
    assert ARCH_FOR_DATASET["cifar10"] == "cifar_cnn"  # unchanged


def test_pinned_md5s_are_torchvision_s():
    import torchvision.datasets as tvd

    assert cifar100.MD5 == {f: m for f, m in tvd.CIFAR100.train_list + tvd.CIFAR100.test_list} | \
        {tvd.CIFAR100.meta["filename"]: tvd.CIFAR100.meta["md5"]}
    assert cifar100.FOLDER == tvd.CIFAR100.base_folder and cifar100.ARCHIVE_MD5 == tvd.CIFAR100.tgz_md5
    assert svhn.MD5 == {tvd.SVHN.split_list[s][1]: tvd.SVHN.split_list[s][2] for s in ("train", "test")}


# ---------------------------------------------------------------- CIFAR-100
def test_cifar100_fake_tree(tmp_path, monkeypatch):
    folder, data = _fake_cifar100(tmp_path)
    assert available(tmp_path)["cifar100"] is True
    _accept_fake_md5s(monkeypatch, cifar100, folder)
    ds = load("cifar100", tmp_path)
    assert ds.name == "cifar100" and ds.paper_name == "CIFAR-100" and ds.modality == "image"
    assert ds.x_train.shape == (8, 3, 32, 32) and ds.x_test.shape == (5, 3, 32, 32)
    assert ds.x_train.dtype == ds.x_test.dtype == np.float32
    assert 0 <= ds.x_train.min() <= ds.x_train.max() <= 1
    assert np.allclose(ds.x_train[3], data["train"][3].reshape(3, 32, 32) / 255.0)  # channel-first
    assert np.allclose(ds.x_test[4], data["test"][4].reshape(3, 32, 32) / 255.0)
    assert ds.y_train.dtype == ds.y_test.dtype == np.int64
    assert ds.y_test.tolist() == [99, 12, 25, 38, 51]  # the fine labels
    assert ds.n_classes == 100 and ds.class_names[12] == "fine_12"
    assert "md5 verified" in ds.source and "100 fine classes" in ds.source


def test_cifar100_coarse_labels(tmp_path, monkeypatch):
    folder, _ = _fake_cifar100(tmp_path)
    _accept_fake_md5s(monkeypatch, cifar100, folder)
    ds = load("cifar100", tmp_path, labels="coarse")
    assert ds.y_test.tolist() == [19, 2, 5, 7, 10] and ds.y_test.dtype == np.int64
    assert ds.n_classes == 20 and ds.class_names[19] == "coarse_19"
    assert "20 coarse superclasses" in ds.source
    with pytest.raises(ValueError, match="labels must be 'fine'.*or 'coarse'"):
        load("cifar100", tmp_path, labels="superclass")


def test_cifar100_wrong_md5_is_refused_before_unpickling(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    crafted = pickle.dumps({b"data": _CreatesFile(marker), b"fine_labels": [0]}, protocol=4)
    folder, _ = _fake_cifar100(tmp_path / "data", files={"train": crafted})
    calls = []
    monkeypatch.setattr(cifar100, "unpickle", lambda data: calls.append(data))
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(pickle, "load", lambda *a, **k: calls.append(a))
    with pytest.raises(DataChecksumError) as info:  # the real pinned md5s
        load("cifar100", tmp_path / "data")
    assert calls == [] and not marker.exists()
    msg = str(info.value)
    got = hashlib.md5((folder / "train").read_bytes()).hexdigest()
    assert f"{folder / 'train'}: md5 {got} differs from the pinned {cifar100.MD5['train']}" in msg
    assert "can run code" in msg and "cifar-100-python.tar.gz" in msg
    assert f"delete {folder}" in msg and SET_DOWNLOAD in msg and "<data>" not in msg


def test_cifar100_every_md5_is_checked_before_anything_is_unpickled(tmp_path, monkeypatch):
    folder, _ = _fake_cifar100(tmp_path)
    _accept_fake_md5s(monkeypatch, cifar100, folder)
    (folder / "meta").write_bytes(b"tampered")  # the last file checked
    opened = []
    monkeypatch.setattr(cifar100, "unpickle", lambda data: opened.append(data))
    with pytest.raises(DataChecksumError, match="meta: md5"):
        load("cifar100", tmp_path)
    assert opened == []  # not even the valid train and test files


def test_cifar100_crafted_pickle_with_accepted_md5_is_refused_by_the_unpickler(tmp_path,
                                                                               monkeypatch):
    marker = tmp_path / "pwned"
    crafted = pickle.dumps({b"data": _CreatesFile(marker), b"fine_labels": [0]}, protocol=4)
    folder, _ = _fake_cifar100(tmp_path / "data", files={"train": crafted})
    _accept_fake_md5s(monkeypatch, cifar100, folder)
    with pytest.raises(DataUnavailableError, match="refused to unpickle .*train") as info:
        load("cifar100", tmp_path / "data")
    assert not marker.exists()
    assert isinstance(info.value.__cause__, pickle.UnpicklingError)
    assert f"global {open.__module__}.open is not allowed in a CIFAR-100 pickle" in str(info.value)


def test_cifar100_restricted_unpickler():
    marker = Path("/nonexistent-dir/pwned")
    payload = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    with pytest.raises(pickle.UnpicklingError, match="global os.system is not allowed"):
        cifar100.unpickle(payload)
    x = np.arange(2 * 3072).reshape(2, 3072).astype(np.uint8)
    for blob in (py2_pickle({b"data": x, b"fine_labels": [3, 7]}) + b".",
                 pickle.dumps({b"data": x, b"fine_labels": [3, 7]}, protocol=4)):
        got = cifar100.unpickle(blob)
        assert got["fine_labels"] == [3, 7] and np.array_equal(got["data"], x)


# ---------------------------------------------------------------- SVHN
def test_svhn_fake_mat_files(tmp_path, monkeypatch):
    folder, arrays = _fake_svhn(tmp_path)
    assert available(tmp_path)["svhn"] is True
    _accept_fake_md5s(monkeypatch, svhn, folder)
    ds = load("svhn", tmp_path)
    assert ds.name == "svhn" and ds.paper_name == "SVHN" and ds.modality == "image"
    assert ds.x_train.shape == (7, 3, 32, 32) and ds.x_test.shape == (4, 3, 32, 32)
    assert ds.x_train.dtype == ds.x_test.dtype == np.float32
    assert ds.x_train.flags.c_contiguous and 0 <= ds.x_train.min() <= ds.x_train.max() <= 1
    x, _ = arrays[svhn.TRAIN_FILE]
    n, c, h, w = 5, 2, 3, 17  # x_train[n, c, h, w] == X[h, w, c, n] / 255
    assert ds.x_train[n, c, h, w] == np.float32(x[h, w, c, n]) / np.float32(255)
    assert np.allclose(ds.x_train[n], np.transpose(x[..., n], (2, 0, 1)) / 255.0)
    assert ds.y_train.dtype == ds.y_test.dtype == np.int64
    assert ds.y_train.tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert ds.y_test.tolist() == [1, 2, 3, 4]
    assert ds.class_names == tuple("0123456789") and ds.n_classes == 10


def test_svhn_label_10_is_digit_0(tmp_path, monkeypatch):
    folder, _ = _fake_svhn(tmp_path, n_train=10, n_test=12)  # labels 1..10, 1..10, 1, 2
    _accept_fake_md5s(monkeypatch, svhn, folder)
    ds = load("svhn", tmp_path)
    assert ds.y_train.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 0]
    assert ds.y_test.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2]
    assert set(ds.y_train.tolist()) == set(range(10)) and "label 10 -> 0" in ds.source


def test_svhn_wrong_md5_is_refused_before_reading(tmp_path, monkeypatch):
    folder, _ = _fake_svhn(tmp_path)
    calls = []
    monkeypatch.setattr(scipy.io, "loadmat", lambda *a, **k: calls.append(a))
    with pytest.raises(DataChecksumError) as info:  # the real pinned md5s
        load("svhn", tmp_path)
    assert calls == []  # scipy never saw the bytes
    msg = str(info.value)
    f = folder / svhn.TRAIN_FILE
    got = hashlib.md5(f.read_bytes()).hexdigest()
    assert f"{f}: md5 {got} differs from the pinned {svhn.MD5[svhn.TRAIN_FILE]}" in msg
    assert f"delete {folder}" in msg and "ufldl.stanford.edu" in msg and SET_DOWNLOAD in msg


def test_svhn_both_md5s_are_checked_before_either_is_read(tmp_path, monkeypatch):
    folder, _ = _fake_svhn(tmp_path)
    _accept_fake_md5s(monkeypatch, svhn, folder)
    (folder / svhn.TEST_FILE).write_bytes(b"tampered")
    calls = []
    monkeypatch.setattr(scipy.io, "loadmat", lambda *a, **k: calls.append(a))
    with pytest.raises(DataChecksumError, match="test_32x32.mat: md5"):
        load("svhn", tmp_path)
    assert calls == []  # not even the valid training file


@pytest.mark.parametrize("content", ["not a mat file", "wrong layout", "label 11"])
def test_svhn_bad_file_with_accepted_md5_is_one_clear_error(tmp_path, monkeypatch, content):
    folder, _ = _fake_svhn(tmp_path)
    f = folder / svhn.TRAIN_FILE
    if content == "not a mat file":
        f.write_bytes(b"\x00" * 200)
    elif content == "wrong layout":
        scipy.io.savemat(f, {"X": np.zeros((4, 3, 32, 32), np.uint8), "y": np.ones((4, 1))})
    else:
        scipy.io.savemat(f, {"X": np.zeros((32, 32, 3, 2), np.uint8), "y": np.array([[1], [11]])})
    _accept_fake_md5s(monkeypatch, svhn, folder)
    with pytest.raises(DataUnavailableError, match=f"svhn: .*{f.name}") as info:
        load("svhn", tmp_path)
    assert not isinstance(info.value, DataChecksumError) and info.value.__cause__ is None
    assert "Fix: " in str(info.value)


# ---------------------------------------------------------------- missing data / downloads
@pytest.mark.parametrize("name,fix", [
    ("cifar100", ["cifar-100-python.tar.gz", "cifar-100-python/", "eb9058c3a382ffc7106e4002c42a8d85",
                  "cs.toronto.edu"]),
    ("svhn", ["train_32x32.mat", "test_32x32.mat", "/svhn/", "ufldl.stanford.edu/housenumbers"]),
])
def test_missing_data_says_how_to_get_it(tmp_path, name, fix):
    root = tmp_path / "data"
    root.mkdir()
    with pytest.raises(DataUnavailableError) as info:
        load(name, root)
    msg = str(info.value)
    assert msg.startswith(f"{name}: ") and "not found" in msg and "Fix: " in msg
    assert all(part in msg for part in fix), msg
    assert str(root.resolve()) in msg and "<data>" not in msg and SET_DOWNLOAD in msg
    assert info.value.__cause__ is None
    assert available(root)[name] is False and list(root.iterdir()) == []  # nothing written


@pytest.mark.parametrize("name,cls", [("cifar100", "CIFAR100"), ("svhn", "SVHN")])
def test_no_download_unless_allowed(tmp_path, monkeypatch, name, cls):
    import torchvision

    calls = []
    monkeypatch.setattr(torchvision.datasets, cls, lambda *a, **k: calls.append(k))
    with pytest.raises(DataUnavailableError, match="FEDLIB_ALLOW_DOWNLOAD is not 1"):
        load(name, tmp_path)
    assert calls == []


@pytest.mark.parametrize("name,cls", [("cifar100", "CIFAR100"), ("svhn", "SVHN")])
def test_download_failure_is_one_clear_error(tmp_path, monkeypatch, name, cls):
    import torchvision

    def offline(*args, **kwargs):
        raise RuntimeError("Error downloading: network unreachable")

    monkeypatch.setenv("FEDLIB_ALLOW_DOWNLOAD", "1")
    monkeypatch.setattr(torchvision.datasets, cls, offline)
    assert available(tmp_path)[name] == "download"
    with pytest.raises(DataUnavailableError, match="network unreachable") as info:
        load(name, tmp_path)
    msg = str(info.value)
    assert "FEDLIB_ALLOW_DOWNLOAD=1 is set, so torchvision tried to download" in msg
    assert SET_DOWNLOAD not in msg and "<data>" not in msg
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_svhn_download_lands_in_the_layout_the_loader_reads(tmp_path, monkeypatch):
    """torchvision's SVHN writes <its root>/<split>_32x32.mat: its root must be <data>/svhn."""
    import torchvision

    src, _ = _fake_svhn(tmp_path / "src")
    _accept_fake_md5s(monkeypatch, svhn, src)
    splits = []

    def fake_svhn(root, split, download):
        assert download and Path(root) == tmp_path / "data" / "svhn"
        Path(root).mkdir(parents=True, exist_ok=True)
        name = f"{split}_32x32.mat"
        (Path(root) / name).write_bytes((src / name).read_bytes())
        splits.append(split)

    monkeypatch.setenv("FEDLIB_ALLOW_DOWNLOAD", "1")
    monkeypatch.setattr(torchvision.datasets, "SVHN", fake_svhn)
    ds = load("svhn", tmp_path / "data")
    assert splits == ["train", "test"] and len(ds.y_train) == 7 and len(ds.y_test) == 4


def test_cifar100_download_lands_in_the_layout_the_loader_reads(tmp_path, monkeypatch):
    import torchvision

    src, _ = _fake_cifar100(tmp_path / "src")
    _accept_fake_md5s(monkeypatch, cifar100, src)

    def fake_cifar100(root, train, download):
        assert download and Path(root) == tmp_path / "data"
        dst = Path(root) / "cifar-100-python"  # torchvision's base_folder
        dst.mkdir(parents=True)
        for f in ("train", "test", "meta"):
            (dst / f).write_bytes((src / f).read_bytes())

    monkeypatch.setenv("FEDLIB_ALLOW_DOWNLOAD", "1")
    monkeypatch.setattr(torchvision.datasets, "CIFAR100", fake_cifar100)
    ds = load("cifar100", tmp_path / "data")
    assert ds.x_train.shape == (8, 3, 32, 32)


def test_svhn_takes_no_options(tmp_path):
    with pytest.raises(ValueError, match="options must be keyword options of the 'svhn' loader"):
        load("svhn", tmp_path, labels="coarse")


# ---------------------------------------------------------------- CLI
def test_cli_lists_them(tmp_path, monkeypatch, capsys):
    from fedlib.datasets.__main__ import main

    folder, _ = _fake_svhn(tmp_path)
    assert main(["--data-dir", str(tmp_path), "list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert lines["svhn"].split()[:4] == ["svhn", "yes", "image", "SVHN"]
    assert lines["cifar100"].split()[:4] == ["cifar100", "no", "image", "CIFAR-100"]
    assert "cifar-100-python.tar.gz" in lines["cifar100"] and SET_DOWNLOAD in lines["cifar100"]
    _accept_fake_md5s(monkeypatch, svhn, folder)
    assert main(["--data-dir", str(tmp_path), "prepare", "svhn", "cifar100"]) == 1
    out = capsys.readouterr()
    assert out.out.startswith("svhn: train (7, 3, 32, 32) test (4, 3, 32, 32) float32, 10 classes")
    assert "(SVHN)" in out.out and "cifar100: FAILED: cifar100: CIFAR-100 not found" in out.err
