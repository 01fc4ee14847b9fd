"""Checkpoint files as a user meets them (fedlib.checkpoint, issue 68): a crafted pickle placed
where a checkpoint is expected runs nothing (``--list`` and a resume move it aside); flipped
bytes, a torn file, an out-of-range round, weights of other shapes or a payload that is not a
checkpoint's are moved aside with a message and the run starts again at round 1, ending with the
record of the run never interrupted; leftover ``.part`` files of dead writers are removed."""
from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time

import pytest
import torch

from fedlib import checkpoint as C
from fedlib import experiment as X, grid_cli
from fedlib.grid import run_grid

pytestmark = pytest.mark.cross_cpu  # the runs train (tests/conftest.py)
SPEC = X.RunSpec(dataset="adult", protocol="dirichlet", level=0.5, n_clients=10, seed=0, method="fedavg",
                 fl={"rounds": 6, "local_epochs": 1}, n_train=2000)
SAME = ("correct", "history", "n_train", "n_test", "global_accuracy", "info")


class StopAt(C.Checkpointer):
    stop_after, seen = 3, 0

    def _at_boundary(self, ctx, phase, next_round, state, round_seconds):
        self.seen += 1
        if self.seen == self.stop_after:
            raise C.RunStopped(self.key, next_round, self.path, self.write(phase, next_round, state, ctx))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A checkpoint of SPEC stopped before round 4 (its bytes), and the record of the run never stopped."""
    folder = tmp_path_factory.mktemp("ck")
    ck = StopAt(C.checkpoint_path(SPEC.key(), folder), SPEC.key(), every=1e9)
    with C.active(ck), pytest.raises(C.RunStopped):
        X.run(SPEC)
    return ck.path.read_bytes(), X.run(SPEC)


def split(data: bytes) -> tuple[dict, bytes]:
    head, payload = data.split(b"\n", 1)
    return json.loads(head), payload


def join(header: dict, payload: bytes) -> bytes:
    """A file whose header matches its payload (a digest recomputed, as a crafter would)."""
    header = {**header, "payload": len(payload)}
    return json.dumps({**header, "sha256": C._digest(header, payload)}).encode() + b"\n" + payload


def reshaped(data: bytes) -> bytes:
    header, payload = split(data)
    blob = torch.load(io.BytesIO(payload), weights_only=True)
    model = blob["current"][0][0]
    name = next(iter(model))
    model[name] = torch.zeros(*model[name].shape[:-1], model[name].shape[-1] + 1)
    out = io.BytesIO()
    torch.save(blob, out)
    return join(header, out.getvalue())


def not_a_checkpoints_payload(data: bytes) -> bytes:
    out = io.BytesIO()
    torch.save({"finished": [], "current": ("no state",)}, out)
    return join(split(data)[0], out.getvalue())


def flipped(data: bytes) -> bytes:
    g = torch.Generator().manual_seed(0)
    start = data.index(b"\n") + 1
    where = torch.randint(start, len(data), (2000,), generator=g).tolist()
    out = bytearray(data)
    for i in where:
        out[i] ^= 0xFF
    return bytes(out)


CASES = {  # how a file goes wrong: (the change, the reason in its moved-aside name, what the message says)
    "flipped bytes": (flipped, "digest", "its SHA-256 digest does not match"),
    "torn": (lambda d: d[:len(d) // 2], "torn", "torn: "),
    "round 10^6": (lambda d: join({**split(d)[0], "round": 10**6}, split(d)[1]), "round",
                   "its next round 1000000 (0-based) is outside 1 … rounds - 1 (rounds: 6)"),
    "rounds 10^7": (lambda d: join({**split(d)[0], "rounds": 10**7}, split(d)[1]), "round",
                    "it is of a run of 10000000 rounds, this one has 6"),
    "wrong shapes": (reshaped, "shapes", "its weights do not fit the run's model"),
    "not a checkpoint's payload": (not_a_checkpoints_payload, "unreadable", "its payload is not a checkpoint's"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_bad_checkpoint_is_moved_aside_and_the_run_starts_again(case, saved, tmp_path, monkeypatch, capsys):
    good, whole = saved
    change, reason, says = CASES[case]
    monkeypatch.setenv(C.ENV_FOLDER, str(tmp_path / "ck"))
    path = C.checkpoint_path(SPEC.key())
    path.parent.mkdir()
    path.write_bytes(change(good))
    record = run_grid([SPEC], tmp_path / "out", progress="lines")[0]
    err = capsys.readouterr().err
    aside = path.with_name(f"{path.name}.refused-{reason}")
    assert says in err and f"checkpoint {path}: " in err and f"moved aside to {aside}" in err, err
    assert "the run starts again at round 1" in err and aside.exists() and not path.exists()
    assert all(record[k] == whole[k] for k in SAME)  # and no traceback: a retry never meets the file again


def test_the_good_checkpoint_resumes_with_the_record_never_interrupted(saved, tmp_path, monkeypatch, capsys):
    good, whole = saved
    monkeypatch.setenv(C.ENV_FOLDER, str(tmp_path))
    C.checkpoint_path(SPEC.key()).write_bytes(good)
    assert C.saved_round(SPEC.key()) == 3
    record = run_grid([SPEC], tmp_path / "out", progress="lines")[0]
    assert "resumes at round 4" in capsys.readouterr().err
    assert all(record[k] == whole[k] for k in SAME) and not C.checkpoint_path(SPEC.key()).exists()


class Boom:
    """Unpickled, it creates ``marker`` (as a crafted checkpoint could run any command)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


@pytest.mark.parametrize("kind", ["torch.save", "pickle"])
def test_a_crafted_pickle_runs_nothing_under_list_or_a_resume(kind, tmp_path, monkeypatch, capsys):
    import pickle

    marker = tmp_path / "marker"
    monkeypatch.setenv(C.ENV_FOLDER, str(tmp_path / "ck"))
    path = C.checkpoint_path(SPEC.key())
    path.parent.mkdir()

    def plant():
        if kind == "pickle":
            path.write_bytes(pickle.dumps({"checkpoint_version": 2, "boom": Boom(marker)}))
        else:
            torch.save({"checkpoint_version": 1, "key": SPEC.key(), "boom": Boom(marker)}, path)

    plant()
    torch.load(path, weights_only=False) if kind == "torch.save" else pickle.loads(path.read_bytes())
    assert marker.exists()  # the file is armed: unpickling it runs its code
    marker.unlink()
    lines = []
    grid_cli.list_runs([SPEC], tmp_path / "out", "cpu", echo=lines.append)
    err = capsys.readouterr().err
    aside = path.with_name(f"{path.name}.refused-foreign")
    assert not marker.exists() and aside.exists() and not path.exists()
    assert f"checkpoint {path}: not a version-2 fedlib checkpoint" in err and f"moved aside to {aside}" in err, err
    assert "checkpoint resumes" not in lines[0]
    plant()
    run_grid([SPEC], tmp_path / "out", progress="lines")
    err = capsys.readouterr().err
    assert not marker.exists() and not path.exists() and "never unpickled" in err and "round 1" in err, err


def test_leftover_part_files_of_dead_writers_are_removed(tmp_path):
    path = C.checkpoint_path("run", tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = socket.gethostname()
    killed = tmp_path / f"run.pt.{host}.{int(dead.stdout)}.part"  # a writer SIGKILLed mid-write
    live = tmp_path / f"run.pt.{host}.{os.getppid()}.part"  # a live writer (another process on this host)
    other = tmp_path / f"other.pt.{host}.{int(dead.stdout)}.part"  # another run's: its own run cleans it
    stale = tmp_path / ".tmp-x.part"  # older than the claim timeout
    for p in (killed, live, other, stale):
        p.write_bytes(b"x" * 100)
    day_ago = time.time() - 2 * 86400
    os.utime(stale, (day_ago, day_ago))
    C.Checkpointer.open("run", tmp_path)
    assert not killed.exists() and not stale.exists() and live.exists() and other.exists()
    assert not path.exists()
