"""Tests of the data layer's user-facing errors and of its safety: every "Fix:" names the
real data folder (never the ``<data>`` placeholder) and tells the truth about downloads;
no data file is parsed before its pinned checksum is verified; CIFAR-10's pickles can
neither run code through a wrong file nor through one whose md5 was accepted."""

from __future__ import annotations

import hashlib
import pickle
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from fedlib.datasets import (DATASETS, DataChecksumError, DataUnavailableError, adult, cifar10,
                             cifar100, fine_foods, fmnist, load, mlbench, svhn)
from fedlib.datasets import _core
from fedlib.datasets._core import how_to_fix

from test_datasets import _fake_cifar, accept_fake_md5s, nothing_installed, py2_pickle  # noqa: F401

SET_DOWNLOAD = "set FEDLIB_ALLOW_DOWNLOAD=1"


@pytest.fixture(autouse=True)
def _no_download(monkeypatch):
    monkeypatch.delenv("FEDLIB_ALLOW_DOWNLOAD", raising=False)


def _downloads_fail(monkeypatch):
    """Turn downloads on, with every downloader failing offline (nothing reaches the network):
    torchvision's CIFAR10 / CIFAR100 / SVHN / FashionMNIST and a stand-in folktables package."""
    import torchvision

    def offline(*args, **kwargs):
        raise RuntimeError("Error downloading: network unreachable")

    monkeypatch.setenv("FEDLIB_ALLOW_DOWNLOAD", "1")
    monkeypatch.setattr(torchvision.datasets, "CIFAR10", offline)
    monkeypatch.setattr(torchvision.datasets, "CIFAR100", offline)
    monkeypatch.setattr(torchvision.datasets, "SVHN", offline)
    monkeypatch.setattr(torchvision.datasets, "FashionMNIST", offline)
    fake = types.ModuleType("folktables")
    fake.ACSDataSource = offline
    monkeypatch.setitem(sys.modules, "folktables", fake)


# ---------------------------------------------------------------- messages
def test_how_to_fix_resolves_the_data_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = "put x.csv at <data>/x/ (or <data>/y/)"
    assert how_to_fix("rel", text) == f"put x.csv at {tmp_path}/rel/x/ (or {tmp_path}/rel/y/)"
    off = how_to_fix("rel", text, download="tool fetches it", allowed=False)
    assert off == f"{SET_DOWNLOAD} (tool fetches it), or put x.csv at {tmp_path}/rel/x/ " \
                  f"(or {tmp_path}/rel/y/)"
    assert how_to_fix("rel", text, download="tool fetches it", allowed=True) == \
        how_to_fix("rel", text)  # download already on: only the manual fix
    monkeypatch.setenv("FEDLIB_ALLOW_DOWNLOAD", "1")  # allowed=None reads the variable
    assert SET_DOWNLOAD not in how_to_fix("rel", text, download="tool fetches it")


@pytest.mark.parametrize("allowed", [False, True], ids=["download-off", "download-fails"])
@pytest.mark.parametrize("name", list(DATASETS))
def test_error_names_the_real_folder_and_the_truth_about_downloads(nothing_installed,
                                                                    monkeypatch, name, allowed):
    if allowed:
        _downloads_fail(monkeypatch)
    with pytest.raises(DataUnavailableError) as info:
        load(name, nothing_installed)
    msg = str(info.value)
    assert "<data>" not in msg and str(nothing_installed.resolve()) in msg
    assert "Fix: " in msg and msg.startswith(f"{name}: ")
    spec = DATASETS[name]
    if allowed:
        assert SET_DOWNLOAD not in msg
        if spec.download is not None:  # the download was tried: say so, and why it failed
            assert "FEDLIB_ALLOW_DOWNLOAD=1 is set" in msg and "tried to download" in msg
            assert "network unreachable" in msg
    else:
        assert (SET_DOWNLOAD in msg) == (spec.download is not None)


def test_acs_income_without_folktables_and_downloads_on(nothing_installed, monkeypatch):
    monkeypatch.setenv("FEDLIB_ALLOW_DOWNLOAD", "1")
    monkeypatch.setitem(sys.modules, "folktables", None)  # import folktables -> ImportError
    with pytest.raises(DataUnavailableError, match="folktables.*not installed") as info:
        load("acs_income", nothing_installed)
    msg = str(info.value)
    assert SET_DOWNLOAD not in msg and "<data>" not in msg
    assert f"{nothing_installed}/folktables/2018/1-Year/" in msg


@pytest.mark.parametrize("allowed", [False, True], ids=["download-off", "download-fails"])
def test_cli_list_and_prepare_show_the_real_folder(nothing_installed, monkeypatch, capsys,
                                                    allowed):
    from fedlib.datasets.__main__ import main

    if allowed:
        _downloads_fail(monkeypatch)
    root = str(nothing_installed)
    assert main(["--data-dir", root, "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"data directory: {root}" and len(lines) == 1 + len(DATASETS)
    assert all(root in line and "<data>" not in line for line in lines[1:])  # each one's fix
    assert any(SET_DOWNLOAD in line for line in lines) is not allowed
    assert main(["--data-dir", root, "prepare", *DATASETS]) == 1
    err = capsys.readouterr().err
    assert err.count("FAILED") == len(DATASETS) and "<data>" not in err
    assert (SET_DOWNLOAD in err) is not allowed


# ---------------------------------------------------------------- checksums before parsing
def _tamper(root: Path, name: str) -> list[Path]:
    """Write wrong bytes where ``name``'s loader looks first; return those paths."""
    files = {"adult": [root / "adult" / f for f in adult.FILES],
             "letter": [root / "mlbench" / "LetterRecognition.rda"],
             "fine_foods": [root / "fine_foods" / f for f in fine_foods.FILES],
             "fmnist": [root / "FashionMNIST" / "raw" / f for f in fmnist.RAW_SHA256],
             "cifar10": [root / cifar10.FOLDER / f for f in cifar10.MD5]}[name]
    for p in files:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"tampered " + p.name.encode())
    return files


def _parsers(name):
    """(object, attribute) of every parser that ``name``'s loader could hand the bytes to."""
    import pandas
    import rdata
    import torchvision

    return {"adult": [(pandas, "read_csv")],
            "letter": [(rdata, "read_rda"), (rdata.parser, "parse_file")],
            "fine_foods": [(rdata, "read_rds"), (rdata.parser, "parse_data")],
            "fmnist": [(torchvision.datasets, "FashionMNIST"), (fmnist, "read_idx")],
            "cifar10": [(_core.RestrictedUnpickler, "load"), (pickle, "load"),
                        (pickle, "loads")]}[name]


@pytest.mark.parametrize("name", ["adult", "letter", "fine_foods", "fmnist", "cifar10"])
def test_tampered_file_is_refused_before_it_is_parsed(nothing_installed, monkeypatch, name):
    calls = []
    for obj, attr in _parsers(name):
        monkeypatch.setattr(obj, attr, lambda *a, _attr=attr, **k: calls.append(_attr))
    tampered = _tamper(nothing_installed, name)
    with pytest.raises(DataChecksumError) as info:
        load(name, nothing_installed)
    assert calls == []  # no parser saw the bytes
    msg = str(info.value)
    assert str(tampered[0]) in msg and "differs from the pinned" in msg
    assert "Fix: " in msg and "<data>" not in msg
    got = hashlib.new("md5" if name == "cifar10" else "sha256", tampered[0].read_bytes())
    assert got.hexdigest() in msg


def test_copy_verified_leaves_nothing_on_a_mismatch(tmp_path):
    from fedlib.datasets._core import copy_verified

    src = tmp_path / "src.rda"
    src.write_bytes(b"not the pinned bytes")
    dst = tmp_path / "out" / "LetterRecognition.rda"
    with pytest.raises(DataChecksumError, match=f"{src}: sha256"):
        copy_verified(src, dst, mlbench.TABLES["letter"][2])
    assert list(dst.parent.iterdir()) == []  # neither the file nor its .part


def test_fmnist_debian_copy_is_checked_before_it_is_put_in_place(nothing_installed,
                                                                  monkeypatch, tmp_path):
    import gzip

    debian = tmp_path / "debian_fmnist"
    debian.mkdir()
    for f in fmnist.RAW_SHA256:
        (debian / f"{f}.gz").write_bytes(gzip.compress(b"not an idx file"))
    monkeypatch.setattr(fmnist, "DEBIAN_DIR", debian)
    with pytest.raises(DataChecksumError, match="train-images-idx3-ubyte gunzipped from"):
        load("fmnist", nothing_installed)
    assert list(fmnist.raw_dir(nothing_installed).iterdir()) == []


# Several processes preparing one fresh data folder at once (a GPU machine's 16 workers did):
# each gunzips / copies into a temporary of its own, verifies it and renames it into place.
_PREPARE_AT_ONCE = r"""
import sys, time
from pathlib import Path
from fedlib.datasets._core import copy_verified
from fedlib.datasets.fmnist import _gunzip_verified
gz, plain, out, sha, go, ready, times = sys.argv[1:8]
Path(ready).touch()
while not Path(go).exists():
    time.sleep(0.001)
for _ in range(int(times)):
    _gunzip_verified(Path(gz), Path(out) / "train-images-idx3-ubyte", sha)
    copy_verified(Path(plain), Path(out) / "LetterRecognition.rda", sha)
"""


def test_processes_preparing_one_folder_at_once_all_succeed(tmp_path):
    import gzip
    import os
    import random
    import subprocess
    import time

    payload = random.Random(0).randbytes(1 << 20)
    sha = hashlib.sha256(payload).hexdigest()
    src = tmp_path / "debian"
    src.mkdir()
    (src / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(payload, compresslevel=1))
    (src / "LetterRecognition.rda").write_bytes(payload)
    out, go = tmp_path / "raw", tmp_path / "go"
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    n = 6
    children = [subprocess.Popen([sys.executable, "-c", _PREPARE_AT_ONCE, str(src / "train-images-idx3-ubyte.gz"),
                                  str(src / "LetterRecognition.rda"), str(out), sha, str(go),
                                  str(tmp_path / f"ready{i}"), "15"],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(n)]
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready{i}").exists() for i in range(n)):  # every child has imported
            assert time.monotonic() < deadline and all(c.poll() is None for c in children), "a child did not start"
            time.sleep(0.01)
        go.touch()  # then all of them at once
        results = [(c.wait(timeout=120), c.stderr.read()) for c in children]
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
    assert [rc for rc, _ in results] == [0] * n, "\n".join(err for _, err in results if err)
    assert sorted(p.name for p in out.iterdir()) == ["LetterRecognition.rda", "train-images-idx3-ubyte"]
    assert all((out / f).read_bytes() == payload for f in ("LetterRecognition.rda", "train-images-idx3-ubyte"))


def test_a_failed_gunzip_leaves_no_temporary(tmp_path):
    src = tmp_path / "train-images-idx3-ubyte.gz"
    src.write_bytes(b"not gzip")
    out = tmp_path / "raw"
    out.mkdir()
    with pytest.raises(OSError):  # gzip.BadGzipFile
        fmnist._gunzip_verified(src, out / "train-images-idx3-ubyte", fmnist.RAW_SHA256["train-images-idx3-ubyte"])
    assert list(out.iterdir()) == []


# ---------------------------------------------------------------- CIFAR-10 pickles
class _CreatesFile:
    """Unpickling this opens (creates) ``path``: the stand-in for arbitrary code."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def _crafted_batch(marker: Path) -> bytes:
    return pickle.dumps({b"data": _CreatesFile(marker), b"labels": [0]}, protocol=4)


def test_crafted_pickle_runs_code_when_unpickled_plainly(tmp_path):
    """The control: the crafted file below really would create the marker."""
    marker = tmp_path / "control"
    pickle.loads(_crafted_batch(marker))
    assert marker.exists()


def test_cifar10_crafted_pickle_is_refused_by_its_md5(tmp_path):
    marker = tmp_path / "pwned"
    folder, _ = _fake_cifar(tmp_path / "data", files={"data_batch_1": _crafted_batch(marker)})
    with pytest.raises(DataChecksumError) as info:
        load("cifar10", tmp_path / "data")
    assert not marker.exists()
    msg = str(info.value)
    got = hashlib.md5((folder / "data_batch_1").read_bytes()).hexdigest()
    assert f"{folder / 'data_batch_1'}: md5 {got} differs from the pinned " \
           f"{cifar10.MD5['data_batch_1']}" in msg
    assert "can run code" in msg and "cifar-10-python.tar.gz" in msg
    assert f"delete {folder}" in msg and SET_DOWNLOAD in msg  # downloads are off here


def test_cifar10_every_md5_is_checked_before_anything_is_unpickled(tmp_path, monkeypatch):
    folder, _ = _fake_cifar(tmp_path)
    accept_fake_md5s(monkeypatch, folder)
    (folder / cifar10.META_FILE).write_bytes(b"tampered")  # the last file checked
    opened = []
    monkeypatch.setattr(cifar10, "unpickle", lambda data: opened.append(data))
    with pytest.raises(DataChecksumError, match=cifar10.META_FILE):
        load("cifar10", tmp_path)
    assert opened == []  # not even the five valid training batches


def test_cifar10_crafted_pickle_with_accepted_md5_is_refused_by_the_unpickler(tmp_path,
                                                                              monkeypatch):
    marker = tmp_path / "pwned"
    folder, _ = _fake_cifar(tmp_path / "data", files={"data_batch_1": _crafted_batch(marker)})
    accept_fake_md5s(monkeypatch, folder)
    with pytest.raises(DataUnavailableError, match="refused to unpickle .*data_batch_1") as info:
        load("cifar10", tmp_path / "data")
    assert not marker.exists()
    assert isinstance(info.value.__cause__, pickle.UnpicklingError)
    assert f"global {open.__module__}.open is not allowed" in str(info.value)


OS_SYSTEM = "cos\nsystem\n(S'touch {}'\ntR."  # hand-written protocol 0, as an attacker would


@pytest.mark.parametrize("unpickle", [lambda data: _core.restricted_unpickle(data, "CIFAR-10"),
                                      cifar10.unpickle, cifar100.unpickle],
                         ids=["shared", "cifar10", "cifar100"])
def test_restricted_unpickler_refuses_any_other_global(tmp_path, unpickle):
    marker = tmp_path / "pwned"
    payload = OS_SYSTEM.format(marker).encode()  # os.system("touch <marker>")
    with pytest.raises(pickle.UnpicklingError, match="global os.system is not allowed"):
        unpickle(payload)
    with pytest.raises(pickle.UnpicklingError, match=f"global {open.__module__}.open is not allowed"):
        unpickle(_crafted_batch(marker))
    assert not marker.exists()


def test_shared_unpickler_names_the_format_and_only_the_allowed_globals(tmp_path):
    payload = OS_SYSTEM.format(tmp_path / "pwned").encode()
    with pytest.raises(pickle.UnpicklingError) as info:
        _core.restricted_unpickle(payload, "CIFAR-100")
    allowed = ", ".join(f"{m}.{n}" for m, n in _core.PICKLE_ALLOWED_GLOBALS)
    assert str(info.value) == f"global os.system is not allowed in a CIFAR-100 pickle (allowed: {allowed})"
    # a narrower allow-list is honoured: without numpy.dtype a numpy batch is refused
    narrow = {k: v for k, v in _core.PICKLE_ALLOWED_GLOBALS.items() if k != ("numpy", "dtype")}
    blob = pickle.dumps({b"data": np.zeros((1, 4), np.uint8)}, protocol=4)
    with pytest.raises(pickle.UnpicklingError, match="global numpy.dtype is not allowed in a X pickle"):
        _core.restricted_unpickle(blob, "X", narrow)


def test_the_cifar_loaders_have_no_unpickler_or_download_step_of_their_own(monkeypatch):
    """One restricted unpickler and one torchvision download step, in fedlib.datasets._core:
    the CIFAR-10 and CIFAR-100 loaders unpickle through it (a global it refuses is refused for
    both), and no dataset module defines another `pickle.Unpickler`."""
    import inspect

    for module in (cifar10, cifar100, svhn):
        unpicklers = [n for n, v in vars(module).items()
                      if inspect.isclass(v) and issubclass(v, pickle.Unpickler)]
        assert unpicklers == [], f"{module.__name__} defines its own unpickler {unpicklers}"
        assert "download_allowed" not in vars(module)  # the download decision is torchvision_files'
    seen = []
    real = _core.RestrictedUnpickler.find_class

    def spy(self, module, name):
        seen.append((self.what, module, name))
        return real(self, module, name)

    monkeypatch.setattr(_core.RestrictedUnpickler, "find_class", spy)
    blob = pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [0]}, protocol=4)
    cifar10.unpickle(blob)
    cifar100.unpickle(blob)
    assert {w for w, _, _ in seen} == {"CIFAR-10", "CIFAR-100"}


@pytest.mark.parametrize("writer", ["python2-protocol0", "python3-protocol4"])
@pytest.mark.parametrize("unpickle", [lambda data: _core.restricted_unpickle(data, "CIFAR-10"),
                                      cifar10.unpickle], ids=["shared", "cifar10"])
def test_restricted_unpickler_reads_numpy_batches(writer, unpickle):
    x = np.arange(2 * 3072, dtype=np.int64).reshape(2, 3072).astype(np.uint8)
    batch = {b"data": x, b"labels": [3, 7]}
    blob = (py2_pickle(batch) + b"." if writer == "python2-protocol0"
            else pickle.dumps(batch, protocol=4))
    got = unpickle(blob)
    assert set(got) == {"data", "labels"} and got["labels"] == [3, 7]
    assert got["data"].dtype == np.uint8 and np.array_equal(got["data"], x)
