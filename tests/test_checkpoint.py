"""Round-level checkpoints (fedlib.checkpoint): a run stopped at round r and resumed gives the
outcome of the run never stopped, bit for bit; methods that cannot resume are recomputed, never
wrong; a run killed for real (SIGKILL) resumes under run_grid and its checkpoint is deleted."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import fedlib.run
from fedlib import checkpoint as C
from fedlib import experiment as X, records
from fedlib.grid import run_grid
from fedlib.methods import METHODS, get_method, method_info
from fl_fixtures import method_context, method_hyper

pytestmark = pytest.mark.cross_cpu  # every case trains (tests/conftest.py)
ROUNDS = 4
RESUMABLE = [m for m in METHODS if method_info(m).resumable]


class StopAt(C.Checkpointer):
    """A checkpointer whose deadline falls after ``stop_after`` rounds of training (counted over
    every resumable phase, as a budget would fall)."""

    stop_after: int = 0
    seen: int = 0

    def _at_boundary(self, ctx, phase, next_round, state, round_seconds):
        self.seen += 1
        if self.seen == self.stop_after:
            size = self.write(phase, next_round, state, ctx)
            raise C.RunStopped(self.key, next_round, self.path, size)
        super()._at_boundary(ctx, phase, next_round, state, round_seconds)


def outcome(name: str, checkpointer=None, *, keep_optimizer_state=False, hyper=None) -> dict:
    ctx = method_context(name, rounds=ROUNDS, local_epochs=1, seed=3)
    if keep_optimizer_state:
        ctx = dataclasses.replace(ctx, cfg=dataclasses.replace(ctx.cfg, keep_optimizer_state=True))
    ctx.checkpoints = checkpointer
    hp = method_hyper(name) if hyper is None else dataclasses.replace(method_hyper(name), **hyper)
    out = get_method(name).run(ctx, hp)
    correct, n = ctx.evaluate(out.models, out.assignment, predictor=out.predictor)
    return {"correct": correct.tolist(), "n": n.tolist(), "history": json.dumps(ctx.history),
            "info": json.dumps(out.info, default=str), "assignment": np.asarray(out.assignment).tolist(),
            "models": {k: v.clone() for k, v in out.models.items()}}


def same(a: dict, b: dict) -> bool:
    return (all(a[k] == b[k] for k in a if k != "models")
            and a["models"].keys() == b["models"].keys()
            and all(torch.equal(a["models"][k], b["models"][k]) for k in a["models"]))


def stopped_then_resumed(name: str, folder: Path, stop_after: int, **kw) -> tuple[dict, int]:
    ck = StopAt(C.checkpoint_path("run", folder), "run", every=1e9)
    ck.stop_after = stop_after
    with pytest.raises(C.RunStopped) as stop:
        outcome(name, ck, **kw)
    assert ck.path.exists() and stop.value.size == ck.path.stat().st_size > 0
    again = C.Checkpointer.open("run", folder, every=1e9)
    assert again.resumed_at is not None
    return outcome(name, again, **kw), stop.value.round_idx


@pytest.mark.parametrize("name", RESUMABLE)
def test_a_resumable_method_stopped_and_resumed_equals_the_run_never_stopped(name, tmp_path):
    counter = StopAt(C.checkpoint_path("count", tmp_path), "count", every=1e9)
    whole = outcome(name, counter)  # stop_after 0: never stops; counts the round boundaries
    assert counter.seen >= 2 and same(whole, outcome(name))
    for stop_after in (1, counter.seen):  # after the first round, and at the last boundary
        resumed, _ = stopped_then_resumed(name, tmp_path / str(stop_after), stop_after)
        assert same(resumed, whole), f"{name} resumed after {stop_after} rounds differs from the run never stopped"


@pytest.mark.parametrize("name", ["fedsoft", "haccs", "fedcls"])
def test_the_paper_code_variants_resume_too(name, tmp_path):
    """The ``psi_code`` variants (how the PSI papers' code ran them) have their own loops."""
    whole = outcome(name, hyper={"variant": "psi_code"})
    resumed, _ = stopped_then_resumed(name, tmp_path, 2, hyper={"variant": "psi_code"})
    assert same(resumed, whole)


def test_kept_optimiser_states_are_part_of_the_checkpoint(tmp_path):
    whole = outcome("fedavg", keep_optimizer_state=True)
    resumed, _ = stopped_then_resumed("fedavg", tmp_path, 2, keep_optimizer_state=True)
    assert same(resumed, whole)
    # without them the resumed run would differ: the kept states change training
    assert not same(outcome("fedavg"), whole)


def test_a_finished_phase_is_not_retrained_on_resume(tmp_path):
    """pFedLIA: warm-up phase, influence, per-cluster phase. Stopped in the second phase, the
    resumed run trains only the rounds left (plus the influence step between the phases)."""
    ctx = method_context("pfedlia", rounds=ROUNDS, local_epochs=1, seed=3)
    hp = method_hyper("pfedlia")
    ck = StopAt(C.checkpoint_path("run", tmp_path), "run", every=1e9)
    ck.stop_after = 2  # the warm-up (1 round: no boundary inside) is done; rounds 1 and 2 of the second phase too
    ctx.checkpoints = ck
    with pytest.raises(C.RunStopped) as stop:
        get_method("pfedlia").run(ctx, hp)
    assert stop.value.round_idx == ROUNDS - 1
    resumed = C.Checkpointer.open("run", tmp_path, every=1e9)
    ctx2 = method_context("pfedlia", rounds=ROUNDS, local_epochs=1, seed=3)
    ctx2.checkpoints = resumed
    trained_rounds = []
    real_train = ctx2.train
    ctx2.train = lambda start, clients, t, **kw: trained_rounds.append(t) or real_train(start, clients, t, **kw)
    get_method("pfedlia").run(ctx2, hp)
    assert trained_rounds == [hp.warmup_rounds, ROUNDS - 1]  # the influence step, then the last round only


@pytest.mark.parametrize("name", [m for m in METHODS if not method_info(m).resumable])
def test_a_method_that_cannot_resume_never_stops_and_is_unchanged(name, tmp_path):
    """A stop asked at every boundary never interrupts an opaque phase or a method outside
    run_rounds: its run ends with the outcome it has without a checkpointer."""
    ck = StopAt(C.checkpoint_path("run", tmp_path), "run", every=1e9)
    ck.stop_after = 1
    assert same(outcome(name, ck), outcome(name))
    assert not ck.path.exists()


def test_a_checkpoint_of_another_run_or_version_is_not_used(tmp_path, capsys):
    """Its header says so: it is moved aside, never read further (tests/test_checkpoint_files.py: its contents)."""
    ck = StopAt(C.checkpoint_path("run", tmp_path), "run", every=1e9)
    ck.stop_after = 1
    with pytest.raises(C.RunStopped):
        outcome("fedavg", ck)
    good = ck.path.read_bytes()
    header, payload = json.loads(good.split(b"\n", 1)[0]), good.split(b"\n", 1)[1]
    other = tmp_path / "other.pt"
    for change, says, reason in [({}, "belongs to run 'run'", "other-run"),
                                 ({"key": "other", "fedlib": "0.0.0"}, "written by fedlib 0.0.0", "other-version"),
                                 ({"key": "other", "code": "0" * 16}, "written by other fedlib code (source "
                                  "fingerprint 0000000000000000", "other-code")]:
        other.write_bytes(json.dumps({**header, **change}).encode() + b"\n" + payload)
        assert C.Checkpointer.open("other", tmp_path).resumed_at is None
        err = capsys.readouterr().err
        assert says in err and f"moved aside to {other}.refused-{reason}; the run starts again at round 1" in err, err
        assert not other.exists()
    other.write_bytes(json.dumps({**header, "key": "other"}).encode() + b"\n" + payload)
    assert C.Checkpointer.open("other", tmp_path).resumed_at is None  # the digest covers the header
    assert "its SHA-256 digest does not match" in capsys.readouterr().err
    ck.path.rename(other)
    torch.save({"checkpoint_version": 1, "key": "other"}, other)  # the format before issue 68: never unpickled
    assert C.Checkpointer.open("other", tmp_path).resumed_at is None
    assert "not a version-2 fedlib checkpoint (an older format" in capsys.readouterr().err


def test_the_checkpoint_folder_and_interval_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(C.ENV_FOLDER, str(tmp_path / "ck"))
    assert C.checkpoint_path("abc") == tmp_path / "ck" / "abc.pt"
    monkeypatch.delenv(C.ENV_FOLDER)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert C.checkpoint_folder() == tmp_path / "cache" / "fedlib" / "checkpoints"
    monkeypatch.setenv(C.ENV_EVERY, "soon")
    with pytest.raises(ValueError, match=r"\$FEDLIB_CHECKPOINT_EVERY must be a number of seconds ≥ 0.*got 'soon'"):
        C.Checkpointer.open("abc")


SPEC = dict(dataset="adult", protocol="dirichlet", level=0.5, n_clients=10, seed=0, method="fedavg",
            fl={"rounds": 60, "local_epochs": 1}, n_train=2000)
CHILD = """
import sys
from fedlib.experiment import RunSpec
from fedlib.grid import run_grid
run_grid([RunSpec(**{spec!r})], {out!r}, progress=False)
"""


@pytest.mark.slow
def test_a_run_killed_mid_way_resumes_under_run_grid_with_the_same_record(tmp_path, monkeypatch):
    """SIGKILL a grid process once its run has checkpointed a few rounds; the next run_grid
    resumes it (said on stderr), writes the record the uninterrupted run writes, and deletes
    the checkpoint."""
    folder, out = tmp_path / "checkpoints", tmp_path / "records"
    env = {**os.environ, C.ENV_FOLDER: str(folder), C.ENV_EVERY: "0", "OMP_NUM_THREADS": "1"}
    spec = X.RunSpec(**SPEC)
    path = C.checkpoint_path(spec.key(), folder)
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(spec=SPEC, out=str(out))], env=env)
    try:
        deadline, resumable_from = time.monotonic() + 240, None
        while time.monotonic() < deadline and child.poll() is None:
            if path.exists():
                try:
                    resumable_from = json.loads(path.read_bytes().split(b"\n", 1)[0])["round"]
                except Exception:  # caught mid-rename: read again
                    resumable_from = None
                if resumable_from is not None and resumable_from >= 3:
                    break
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    assert resumable_from is not None and 3 <= resumable_from < SPEC["fl"]["rounds"], resumable_from
    assert not (out / f"{spec.key()}.json").exists()
    monkeypatch.setenv(C.ENV_FOLDER, str(folder))
    err = subprocess.run([sys.executable, "-c", CHILD.format(spec=SPEC, out=str(out)).replace(
        "progress=False", "progress='lines'")], env=env, capture_output=True, text=True, check=True).stderr
    assert "resumes at round" in err, err
    assert not path.exists()  # deleted once the record is written
    resumed = json.loads((out / f"{spec.key()}.json").read_text())
    whole = X.run(spec)
    for key in ("correct", "history", "n_train", "n_test", "global_accuracy", "info"):
        assert resumed[key] == whole[key], key
    assert resumed["seconds"] > 0


def test_run_grid_budget_stops_a_resumable_run_at_a_round_boundary(tmp_path, monkeypatch, capsys):
    """A budget shorter than the run: run_grid stops it with a checkpoint, writes no record;
    the next call resumes it and writes the record of the run never stopped."""
    monkeypatch.setenv(C.ENV_FOLDER, str(tmp_path / "ck"))
    spec = X.RunSpec(**{**SPEC, "fl": {"rounds": 40, "local_epochs": 1}})
    timing = tmp_path / "timing"  # a comparable record estimates the run (2 rounds fit in the budget)
    whole = run_grid([spec], timing, progress=False)[0]
    fake = {**whole, "seconds": 40.0}  # as if a round took 1 s: 2 rounds need 2 s, the budget is 3 s
    records.write(timing / f"{spec.key()}.json", fake)
    real_run = X.run

    def slow_run(s, device="auto"):  # each round takes ≥ 0.2 s, so 3 s cannot hold 40 rounds
        from fedlib.methods import base

        real_step = base.run_rounds

        def paced(ctx, window, state, step, **kw):
            return real_step(ctx, window, state, lambda t, st: (time.sleep(0.2), step(t, st))[1], **kw)

        monkeypatch.setattr(base, "run_rounds", paced)
        try:
            return real_run(s, device)
        finally:
            monkeypatch.setattr(base, "run_rounds", real_step)

    monkeypatch.setattr(fedlib.run, "run", slow_run)
    out = tmp_path / "records"
    assert run_grid([spec], out, progress="lines", budget=3.0, estimate_from=[timing]) == []
    err = capsys.readouterr().err
    assert "stopped before round" in err and "checkpoint" in err, err
    assert C.checkpoint_path(spec.key()).exists() and not any(out.glob("*.json"))
    monkeypatch.setattr(fedlib.run, "run", real_run)
    done = run_grid([spec], out, progress="lines")[0]
    assert "resumes at round" in capsys.readouterr().err
    assert done["correct"] == whole["correct"] and done["history"] == whole["history"]
    assert not C.checkpoint_path(spec.key()).exists()


def test_a_long_run_says_its_round_pace_and_eta(tmp_path):
    lines = []
    ck = C.Checkpointer.open("run", tmp_path, every=1e9, say=lines.append, label="adult fedavg seed=3")
    ck.progress_every = 0
    outcome("fedavg", ck)
    assert len(lines) == ROUNDS
    assert lines[0].startswith("  adult fedavg seed=3: round 1/4 (phase 1), accuracy ")
    assert "s/round, phase ends in ≈ " in lines[-1] and lines[-1].startswith("  adult fedavg seed=3: round 4/4")


def test_the_docs_name_the_methods_that_resume_and_those_that_do_not():
    import re

    from fedlib.methods import display_name

    text = " ".join((Path(__file__).parent.parent / "docs" / "scaling-out.md").read_text().split())
    others = re.search(r"outside `fedlib\.methods\.base:run_rounds` \(([^)]*)\)", text).group(1)
    named = {n.strip() for n in others.split(",")}
    assert named == {display_name(m) for m in METHODS if not method_info(m).resumable}
    resumable = re.search(r"\(`MethodInfo\.resumable`: ([^)]*)\)", text).group(1)
    fedopt = {"fedadam", "fedyogi", "fedadagrad", "fedavgm"}  # "the FedOpt family"
    for m in RESUMABLE:
        assert (m in fedopt and "the FedOpt family" in resumable) or display_name(m) in resumable, m


def test_a_phase_whose_selection_keeps_its_own_state_is_recomputed_not_stopped(tmp_path):
    """A ``choose`` closure holding its own generator (no ``selection_stream``): the loop cannot
    save that state, so it neither stops nor checkpoints inside the phase, and the outcome is the
    one without a checkpointer."""
    from fedlib.methods.base import global_model_rounds, sample_clients

    def trained(checkpointer):
        ctx = method_context("fedavg", rounds=ROUNDS, local_epochs=1, seed=3)
        ctx.checkpoints = checkpointer
        rng = ctx.rng("selection/mine")
        out = global_model_rounds(ctx, choose=lambda t, w: sample_clients(rng, np.arange(ctx.n_clients), 0.5))
        return out.info["selected"], out.models

    ck = StopAt(C.checkpoint_path("run", tmp_path), "run", every=0)
    ck.stop_after = 1
    (picked, models), (picked_alone, alone) = trained(ck), trained(None)
    assert picked == picked_alone and all(torch.equal(models[k], alone[k]) for k in models)
    assert ck.seen == 0 and not ck.path.exists()
