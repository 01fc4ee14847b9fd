"""fedlib.together: runs of the FedAvg family trained side by side, one engine call per round,
give the records fedlib.experiment.run gives each run alone."""
import json

import numpy as np
import pytest
import torch

from fedlib import experiment as X, together as T
from fedlib.engine import Federation, local_train
from fedlib.engine.schedule import batch_plans
from fedlib.models import build_model, init_params
from fedlib.engine import broadcast

FL = {"rounds": 3, "local_epochs": 1}
TIMING = ("seconds", "cpu_seconds", "host")  # measured, not computed: the rest must be equal


def spec(method="fedavg", seed=0, level=0.5, **kw):
    kw = {"fl": FL, "n_train": 2000, **kw}
    return X.RunSpec("adult", "dirichlet", level, 10, seed, method, **kw)


def computed(record: dict) -> str:
    """A record without its timing and host, as JSON (NaN as NaN: equal bit for bit, or not)."""
    return json.dumps({k: v for k, v in record.items() if k not in TIMING}, sort_keys=True)


def assert_same_run(a, b, where="record"):
    """Records of one run: equal but for timing and host, up to the engine's kernel rounding —
    a run trained beside others sits in chunks of other sizes, whose batched kernels may round a
    client's sums differently in the last bit (docs/performance.md), so an accuracy may move by
    a test sample. Strings, ints (the clients, sizes, rounds) and structure are exact."""
    if isinstance(a, dict):
        keys = set(a) - set(TIMING) if where == "record" else set(a)
        assert keys == (set(b) - set(TIMING) if where == "record" else set(b)), where
        for k in keys:
            assert_same_run(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        if where.endswith((".correct", ".local_accuracy")):  # one test sample per client at most
            np.testing.assert_allclose(a, b, atol=1 if where.endswith("correct") else 0.05, err_msg=where)
            return
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_run(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert a == b or (np.isnan(a) and np.isnan(b)) or abs(a - b) <= 0.02, (where, a, b)
    else:
        assert a == b, (where, a, b)


MIX = [spec(m, seed, level) for seed in (0, 1) for level in (0.1, 10.0) for m in ("fedavg", "fedprox", "fedadam")]


@pytest.mark.cross_cpu
def test_records_of_runs_trained_together_are_those_of_each_run_alone():
    """2 seeds × 2 Dirichlet levels × FedAvg/FedProx/FedAdam in one call per round: every
    record equals experiment.run's, in any order of the specs: the same clients every round and
    the same batches, the weights up to kernel rounding (bit for bit on this project's CPU)."""
    together = T.run_together(MIX)
    alone = [X.run(s) for s in MIX]
    backwards = T.run_together(MIX[::-1])[::-1]
    for a, b, c in zip(together, alone, backwards):
        assert_same_run(a, b)
        assert_same_run(c, b)
        assert a["info"] == b["info"]  # the selected clients, exactly
    for rec in together:
        assert rec["status"] == "ok" and rec["host"]["together"] == len(MIX) and rec["seconds"] > 0
    assert len({r["global_accuracy"] for r in together}) > 3  # the runs differ


@pytest.mark.cross_cpu
def test_kept_optimiser_states_and_the_sequential_path_train_together_too():
    for fl in ({**FL, "keep_optimizer_state": True, "optimizer": "sgd", "lr": 0.05, "momentum": 0.9},
               {**FL, "rounds": 2, "path": "sequential"}):
        specs = [spec(m, seed, fl=fl) for seed in (0, 3) for m in ("fedavg", "fedavgm", "fedyogi")]
        for a, b in zip(T.run_together(specs), [X.run(s) for s in specs]):
            assert_same_run(a, b)


@pytest.mark.cross_cpu
def test_a_run_that_diverges_is_run_alone_and_the_others_carry_on():
    """FedAdam with a huge server step diverges after its first server update: its record is
    experiment.run's "failed" one; the runs beside it are unchanged."""
    specs = [spec("fedavg", 0), spec("fedadam", 0, hyper={"eta": 1e30, "tau": 1e-30}), spec("fedprox", 1)]
    got = T.run_together(specs)
    alone = [X.run(s) for s in specs]
    assert [r["status"] for r in alone] == ["ok", "failed", "ok"]
    assert computed(got[1]) == computed(alone[1])  # run alone: experiment.run's record itself
    for a, b in zip(got, alone):
        assert_same_run(a, b)


def test_specs_that_may_not_train_together_are_refused_before_any_data_is_loaded():
    cases = [
        ([spec(), X.RunSpec("adult", "dirichlet", 0.5, 20, 0, "fedavg", fl=FL, n_train=2000)], "n_clients"),
        ([spec(), spec(fl={**FL, "lr": 0.01})], "fl lr"),
        ([spec(), spec(n_train=None)], "n_train"),
        ([spec(), spec(seed=1, fl={**FL, "local_epochs": 2})], "fl local_epochs"),
        ([spec(), spec("clust_psi_pfl")], "method"),
        ([spec(fl={**FL, "stream_average": True})], "stream_average"),
        ([spec(), spec()], "listed twice"),
        ([], "specs"),
    ]
    for specs, field in cases:
        with pytest.raises(ValueError, match=field):
            T.run_together(specs)
    with pytest.raises(ValueError, match="group_specs"):
        T.run_together([spec(), spec(fl={**FL, "batch_size": 64})])
    with pytest.raises(ValueError, match="unknown method"):
        T.run_together([spec(), spec("nope")])


def test_group_specs_splits_a_grid_into_groups_that_may_train_together():
    a = [spec(m, s) for s in (0, 1) for m in ("fedavg", "fedprox", "fedyogi")]
    lr = [spec("fedavg", s, fl={**FL, "lr": 0.01}) for s in (0, 1)]
    other = [spec("clust_psi_pfl", 0), spec("ifca", 1)]
    fm = [X.RunSpec("fmnist", "dirichlet", 0.5, 10, s, "fedavg", fl=FL, n_train=500) for s in (0, 1)]
    streamed = [spec("fedavg", s, fl={**FL, "stream_average": True}) for s in (0, 1)]
    grid = [a[0], other[0], lr[0], fm[0], *a[1:], lr[1], other[1], fm[1], *streamed, a[2]]  # a[2] twice
    groups = T.group_specs(grid)
    assert groups == [a, [other[0]], lr, fm, [other[1]], [streamed[0]], [streamed[1]]]
    assert sum(len(g) for g in groups) == len(set(s.key() for s in grid))
    assert T.group_specs(a, max_group=4) == [a[:4], a[4:]]
    for g in groups:
        if len(g) > 1:
            T.check_together(g)  # every group of several passes the check
    with pytest.raises(ValueError, match="max_group"):
        T.group_specs(a, max_group=0)


@pytest.mark.cross_cpu
def test_per_row_seeds_in_one_call_give_each_row_its_own_runs_training():
    """local_train with a seed and a seed id per row over a merged federation: each row as the
    call of its own run on its own federation."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(300, 6)).astype(np.float32), rng.integers(0, 3, 300)
    parts = [np.sort(rng.choice(300, size=n, replace=False)) for n in (40, 25, 60, 33)]
    fed_a = Federation.from_arrays(x, y, parts[:2], [p[:5] for p in parts[:2]], "cpu", n_classes=3)
    fed_b = Federation.from_arrays(x, y, parts[2:], [p[:5] for p in parts[2:]], "cpu", n_classes=3)
    merged, offsets = Federation.concat([fed_a, fed_b])
    assert offsets.tolist() == [0, 2] and merged.n_clients == 4 and merged.x is fed_a.x  # one pool
    model = build_model("mlp", 3, (6,))
    start = broadcast(init_params(model, 0), 2)
    kw = dict(epochs=2, batch_size=8, round_idx=3)
    a = local_train(model, start, fed_a, [0, 1], seed=5, **kw)
    b = local_train(model, start, fed_b, [0, 1], seed=9, **kw)
    both = local_train(model, broadcast(init_params(model, 0), 4), merged, [0, 1, 2, 3], seed=[5, 5, 9, 9],
                       seed_clients=[0, 1, 0, 1], **kw)
    for name in both.params:  # up to the rounding of a chunk of 4 rows instead of 2
        torch.testing.assert_close(both.params[name], torch.cat([a.params[name], b.params[name]]),
                                   rtol=1e-5, atol=1e-6)
    plans = batch_plans([40, 25, 60], 2, 8, np.array([5, 9, 5]), 3, [0, 0, 1])
    for plan, (s, k, n) in zip(plans, [(5, 0, 40), (9, 0, 25), (5, 1, 60)]):
        assert np.array_equal(plan.index, batch_plans([n], 2, 8, s, 3, [k])[0].index)
    with pytest.raises(ValueError, match="seed"):
        local_train(model, start, fed_a, [0, 1], seed=[5], **kw)
    with pytest.raises(ValueError, match="seed_clients"):
        local_train(model, start, fed_a, [0, 1], seed=5, seed_clients=[0], **kw)


@pytest.mark.cross_cpu
def test_run_grid_together_writes_the_records_of_runs_alone(tmp_path):
    specs = [spec(m, s) for s in (0, 1) for m in ("fedavg", "fedadam")] + [spec("clust_psi_pfl", 0)]
    got = X.run_grid(specs, tmp_path / "together", progress=False, together=True)
    alone = X.run_grid(specs, tmp_path / "alone", progress=False)
    for a, b in zip(got, alone):
        assert_same_run(a, b)
    assert [r["host"].get("together") for r in got] == [4, 4, 4, 4, None]
    again = X.run_grid(specs, tmp_path / "together", progress=False, together=True)  # all recorded: nothing trains
    assert [r["seconds"] for r in again] == [r["seconds"] for r in got]
    with pytest.raises(ValueError, match="together"):
        X.run_grid(specs, tmp_path / "b", progress=False, together=True, backend="ray")


@pytest.mark.cross_cpu
def test_a_group_stopped_at_a_round_boundary_resumes_with_the_records_of_runs_alone(tmp_path, monkeypatch):
    """A group trained together checkpoints as one run: stopped after its 2nd round, then resumed
    from the checkpoint (a fresh process would do the same), its records are those of each run
    alone, and the checkpoint is gone."""
    from fedlib import checkpoint as C
    from fedlib import together as T

    monkeypatch.setenv(C.ENV_FOLDER, str(tmp_path / "ck"))
    specs = [spec(m, s) for s in (0, 1) for m in ("fedavg", "fedadam")]

    class StopAfter(C.Checkpointer):
        def _at_boundary(self, ctx, phase, next_round, state, round_seconds):
            if next_round == 2:
                raise C.RunStopped(self.key, next_round, self.path, self.write(phase, next_round, state, ctx))

    ck = StopAfter(C.checkpoint_path(T.group_key(specs)), T.group_key(specs), every=1e9)
    with pytest.raises(C.RunStopped):
        T.run_together(specs, checkpointer=ck)
    resumed = C.Checkpointer.open(T.group_key(specs), every=1e9)
    assert resumed.resumed_at == (0, 2)
    got = T.run_together(specs, checkpointer=resumed)
    for a, s in zip(got, specs):
        assert_same_run(a, X.run(s))
    resumed.delete()  # as run_grid does once the records are written
    # run_grid under a budget too short for the group: stopped with its checkpoint, then resumed
    calls = []
    real = C.Checkpointer._at_boundary

    def stop_once(self, ctx, phase, next_round, state, round_seconds):
        calls.append(next_round)
        if len(calls) == 1:
            raise C.RunStopped(self.key, next_round, self.path, self.write(phase, next_round, state, ctx))
        return real(self, ctx, phase, next_round, state, round_seconds)

    monkeypatch.setattr(C.Checkpointer, "_at_boundary", stop_once)
    assert X.run_grid(specs, tmp_path / "grid", progress=False, together=True, budget=600) == []
    assert C.checkpoint_path(T.group_key(specs)).exists()
    done = X.run_grid(specs, tmp_path / "grid", progress=False, together=True, budget=600)
    for a, b in zip(done, X.run_grid(specs, tmp_path / "alone", progress=False)):
        assert_same_run(a, b)
    assert not C.checkpoint_path(T.group_key(specs)).exists()


@pytest.mark.cross_cpu
def test_the_throughput_benchmark_times_a_pool_and_one_process_and_compares_their_records(capsys):
    """benchmarks/grid_throughput.py at its smallest: one worker process, three one-round runs."""
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
    import grid_throughput

    row = grid_throughput.main(["--runs", "3", "--processes", "1", "--rounds", "1", "--n-train", "500"])
    assert row["pool_seconds"] > 0 and row["together_seconds"] > 0 and 0 <= row["bitwise_equal"] <= 3
    assert row["together_over_pool_per_cpu"] == pytest.approx(row["pool_cpu_seconds"] / row["together_cpu_seconds"])
    assert row["pool_cpu_seconds"] > 0 and row["together_cpu_seconds"] > 0
    assert row["max_delta_accuracy"] <= 0.05
    assert "together/pool=" in capsys.readouterr().out
