"""fedlib.records: one record module. Records are written atomically with the path in every
error, and read strictly: a NaN record, another run's record under this run's file name and a
truncated record are each named and never reach a table; grids recompute them."""
import errno
import json
import os

import pytest

import fedlib.lookup
import fedlib.run
from fedlib import experiment as X
from fedlib import records
from workbook import report
from workbook.tables import records_frame

FAST = {"rounds": 2, "local_epochs": 1}


def spec(seed=0, method="fedavg"):
    return X.RunSpec("adult", "dirichlet", 0.5, 10, seed, method, fl=FAST, n_train=2000)


def fake_record(s, accuracy=0.75, **extra):
    """A record as run() writes it for ``s`` (metrics made up, consistent)."""
    n = [10] * 10
    correct = [round(accuracy * 10)] * 10
    return {"record_version": records.RECORD_VERSION, "key": s.key(), "spec": s.to_dict(), "versions": {},
            "host": {}, "status": "ok", "fl": {"rounds": 2, "local_epochs": 1}, "device": "cpu",
            "n_train": [40] * 10, "n_test": n, "correct": correct, "global_accuracy": sum(correct) / sum(n),
            "ad": 0.0, "sdad": 0.0, "ad_cl": float("nan"), "sdad_cl": float("nan"), "cp": 0.0,
            "local_accuracy": [c / 10 for c in correct], "history": [], "info": {}, "seconds": 1.0,
            "cpu_seconds": 1.0, **extra}


def test_a_written_record_reads_back_strictly_with_its_nonfinite_values(tmp_path):
    s = spec()
    rec = fake_record(s)
    rec["local_accuracy"][3] = float("nan")  # a client without test samples
    path = X.record_path(tmp_path, s)
    records.write(path, rec)
    assert "NaN" not in path.read_text()  # strict JSON on disk
    back = records.read_strict(path, s)
    assert back["global_accuracy"] == rec["global_accuracy"] and back["status"] == "ok"
    assert back["local_accuracy"][3] != back["local_accuracy"][3]  # restored NaN
    assert not list(tmp_path.glob(".tmp-*"))


def test_a_nan_record_is_named_and_never_reaches_a_table(tmp_path, capsys):
    s = spec()
    path = X.record_path(tmp_path, s)
    rec = fake_record(s)
    path.write_text(json.dumps(rec).replace(f'"global_accuracy": {rec["global_accuracy"]}', '"global_accuracy": NaN'))
    with pytest.raises(records.RecordError, match=f"record {path}.*not valid strict JSON.*NaN"):
        records.read_strict(path, s)
    assert X.load_records(tmp_path) == []
    assert path.name in capsys.readouterr().err
    assert report._load(str(tmp_path)) == ()
    assert path.name in capsys.readouterr().err
    assert records_frame(X.load_records(tmp_path)).empty


def test_a_nan_metric_written_as_null_is_refused_too(tmp_path):
    """A NaN accuracy written through sanitise (null + nonfinite) is read back as NaN: refused."""
    s = spec()
    path = X.record_path(tmp_path, s)
    records.write(path, fake_record(s, global_accuracy=float("nan")))
    with pytest.raises(records.RecordError, match=f"{path}: global_accuracy is nan, not a finite number"):
        records.read_strict(path, s)


@pytest.mark.parametrize("field, value, why", [
    ("clusters", [0, 1, None], r"clusters\[2\] is null and not listed"),
    ("n_train", [40, None, 40], r"n_train holds None, not a finite number"),
    ("history", [{"round": 1, "local_accuracy": [0.5, None]}], r"history\[0\]\.local_accuracy\[1\] is null"),
    ("history", [{"round": 1, "local_accuracy": [0.5, float("inf")]}], r"history\[0\]\.local_accuracy is \[0\.5, inf\]"),
    ("history", [{"round": 1, "local_accuracy": [0.5, 1.5]}], r"history\[0\]\.local_accuracy is \[0\.5, 1\.5\]"),
    ("history", [{"round": 1, "local_accuracy": [0.5, True]}], r"history\[0\]\.local_accuracy is \[0\.5, True\]"),
    ("local_accuracy", [0.7] * 9 + [float("inf")], r"local_accuracy holds inf, not a finite number"),
    ("local_accuracy", [0.7] * 9 + [-0.25], r"local_accuracy holds -0\.25, not an accuracy in \[0, 1\]"),
    ("local_accuracy", [0.7] * 9 + [1], None),  # an int 1 (and 0) is an accuracy
    ("history", [{"round": 1, "local_accuracy": [0.5, float("nan"), 0]}], None),  # NaN: a client with no sample
])
def test_a_value_inside_a_per_client_list_is_checked_item_by_item(tmp_path, field, value, why):
    """The checks of per-client lists (scanned at C speed where they hold plain numbers) name
    the item a run cannot write, by its index where it is a null."""
    s = spec()
    path = X.record_path(tmp_path, s)
    records.write(path, fake_record(s, **{field: value}))
    if why is None:
        assert records.read_strict(path, s)[field] is not None
    else:
        with pytest.raises(records.RecordError, match=why):
            records.read_strict(path, s)


def test_another_runs_record_under_this_runs_file_name_is_named_and_recomputed(tmp_path, capsys):
    two, three = spec(seed=2), spec(seed=3)
    path = X.record_path(tmp_path, two)
    records.write(path, fake_record(three))  # seed 3's record saved as seed 2's
    with pytest.raises(records.RecordError, match=rf"{path}: holds another run's record: seed=3 \(expected 2\)"):
        records.read_strict(path, two)
    calls = []
    (rec,) = _grid([two], tmp_path, calls)
    assert calls == [2] and rec["spec"]["seed"] == 2  # recomputed, never returned as seed 2's
    assert records.read_strict(path, two)["spec"]["seed"] == 2  # overwritten with its own
    assert path.name in capsys.readouterr().err


def test_a_record_under_another_file_name_is_refused(tmp_path):
    s = spec()
    path = tmp_path / "0123456789abcdef.json"
    records.write(path, fake_record(s))
    with pytest.raises(records.RecordError, match=r"the file name is not the spec's key"):
        records.read_strict(path, s)
    with pytest.raises(records.RecordError, match=r"0123456789abcdef\.json: the file name is not the spec's key"):
        records.read_strict(path)  # without a spec too: a record is named by its key (issue 68)


@pytest.mark.parametrize("damage", ["truncated", "empty", "null", "no metrics", "unknown status", "bad version"])
def test_a_damaged_record_is_named_recomputed_by_the_grid_and_skipped_by_readers(tmp_path, capsys, damage):
    s = spec()
    path = X.record_path(tmp_path, s)
    rec = fake_record(s)
    text = {"truncated": json.dumps(rec)[:200], "empty": "", "null": "null",
            "no metrics": json.dumps({k: v for k, v in rec.items() if k not in ("correct", "global_accuracy")}),
            "unknown status": json.dumps({**rec, "status": "done"}),
            "bad version": json.dumps({**rec, "record_version": 7})}[damage]
    path.write_text(text)
    with pytest.raises(records.RecordError, match=f"^record {path}: "):
        records.read_strict(path, s)
    assert X.load_records(tmp_path) == [] and report._load(str(tmp_path)) == ()
    capsys.readouterr()
    calls = []
    (got,) = _grid([s], tmp_path, calls)
    assert calls == [0] and got["status"] == "ok"
    assert path.name in capsys.readouterr().err  # named, then recomputed
    assert records.read_strict(path, s)["global_accuracy"] == got["global_accuracy"]


def _grid(specs, folder, calls):
    def fake_run(s, device="auto"):
        calls.append(s.seed)
        return fake_record(s)

    old = fedlib.run.run
    fedlib.run.run = fake_run
    try:
        return X.run_grid(specs, folder, progress=False)
    finally:
        fedlib.run.run = old


def test_find_skips_a_damaged_record_naming_it(tmp_path, capsys):
    s, t = spec(seed=0), spec(seed=1)
    records.write(X.record_path(tmp_path, s), fake_record(s))
    bad = X.record_path(tmp_path, t)
    bad.write_text(json.dumps(fake_record(t)).replace('"ad": 0.0', '"ad": NaN'))
    found, missing = fedlib.lookup.find([s, t], tmp_path)
    assert [r["spec"]["seed"] for r in found] == [0] and missing == [t]
    assert bad.name in capsys.readouterr().err


def test_a_full_disk_names_the_path_and_keeps_the_record(tmp_path, monkeypatch):
    s = spec()
    path = X.record_path(tmp_path, s)
    rec = fake_record(s)

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(records.os, "fsync", full)
    with pytest.raises(records.RecordWriteError, match=f"cannot write the record {path}: No space left") as info:
        records.write(path, rec)
    assert info.value.errno == errno.ENOSPC and info.value.record is rec  # nothing trained is lost
    assert list(tmp_path.iterdir()) == []  # no temporary left
    monkeypatch.undo()
    records.write(tmp_path / "elsewhere.json", info.value.record)  # saved: a record only under its key's name
    assert records.read(tmp_path / "elsewhere.json")["global_accuracy"] == rec["global_accuracy"]


def test_write_fsyncs_the_file_and_the_folder(tmp_path, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(records.os, "fsync", lambda fd: synced.append(os.path.isdir(f"/proc/self/fd/{fd}")) or real(fd))
    records.write(tmp_path / "r.json", {"a": 1})
    assert synced == [False, True]  # the file, then the folder


def test_every_committed_run_record_reads_strictly():
    """The committed records stay readable (CBCC's records have their own format and reader;
    cross_cpu/, speed/, commands/ and throughput/ hold measurements, not run records)."""
    from fedlib.paths import ROOT

    root = ROOT / "benchmarks" / "records"
    n = 0
    for path in sorted(root.rglob("*.json")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("cafa/cbcc/", "cross_cpu/", "speed/", "commands/", "throughput/")):
            continue
        records.read_strict(path)
        n += 1
    assert n > 1000
