"""A diverged run is a failed record (never a number in a table); the engine names the clients."""
import json
import pickle

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from fedlib import experiment as X
from fedlib import records
from workbook.tables import records_frame, table3, table4, to_markdown
from fedlib.engine import Federation, broadcast, local_train
from fedlib.engine.errors import DivergenceError
from fedlib.engine.train import _nonfinite_rows
from fedlib.methods import FLConfig
from fedlib.methods.base import check_finite_models
from fedlib.models import build_model, init_params

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)

FAST = {"rounds": 2, "local_epochs": 1}
METRIC_KEYS = {"global_accuracy", "local_accuracy", "correct", "n_test", "ad", "sdad", "ad_cl", "sdad_cl", "cp",
               "param_average_accuracy",
               "history", "info", "val_accuracy", "global_test_accuracy", "wpsi"}


def spec(method="fedavg", lr=1e-3, seed=0, level=0.5, **kw):
    return X.RunSpec("adult", "dirichlet", level, 10, seed, method, fl={**FAST, "lr": lr}, n_train=2000, **kw)


@pytest.mark.parametrize("lr", [float("inf"), float("nan")])
def test_flconfig_refuses_non_finite_lr(lr):
    with pytest.raises(ValueError, match=r"lr must be a finite number > 0, got (inf|nan)"):
        FLConfig(lr=lr)
    with pytest.raises(ValueError, match="lr must be a finite number"):
        spec(lr=lr).validate()


@pytest.mark.parametrize("method", ["fedavg", "poc", "cfl", "fedsoft", "fedadam"])
def test_huge_lr_gives_a_failed_record_without_metrics(method):
    rec = X.run(spec(method, lr=1e38))
    assert rec["status"] == "failed"
    assert not METRIC_KEYS & set(rec), "a failed record must carry no metric"
    msg = rec["error"]
    assert msg.startswith(f"{method} diverged in round 1: client")
    assert "non-finite" in msg and "(lr=1e+38 with adam); lower lr" in msg
    div = rec["divergence"]
    assert div["method"] == method and div["round_idx"] == 0 and div["lr"] == 1e38 and div["optimizer"] == "adam"
    assert div["clients"] and set(div["clients"]) <= set(range(10)) and div["clients"] == sorted(div["clients"])
    assert str(div["clients"]) in msg


@pytest.mark.parametrize("method", ["fedavg", "poc", "cfl", "fedsoft", "fedadam", "clust_psi_pfl", "local"])
@pytest.mark.parametrize("dataset", ["adult", "letter"])
def test_lr_1e6_with_finite_weights_fails_by_its_exploded_loss(method, dataset):
    """Adam moves a weight by at most ~lr per step: lr = 1e6 leaves huge *finite* weights at
    chance accuracy. The training loss gives it away (far above ln C, a uniform guess)."""
    rec = X.run(X.RunSpec(dataset, "dirichlet", 0.5, 10, 0, method, fl={**FAST, "lr": 1e6}, n_train=2000))
    assert rec["status"] == "failed" and not METRIC_KEYS & set(rec)
    assert f"{method} diverged in round" in rec["error"]
    assert "exploded training loss" in rec["error"] and "max_loss·ln C" in rec["error"]
    assert "(lr=1e+06 with adam); lower lr" in rec["error"]


def test_max_loss_is_validated_and_configurable():
    with pytest.raises(ValueError, match="max_loss must be a finite number > 1, got 0.5"):
        FLConfig(max_loss=0.5)
    loose = X.run(X.RunSpec("adult", "dirichlet", 0.5, 10, 0, "fedavg",
                            fl={**FAST, "lr": 1e6, "max_loss": 1e300}, n_train=2000))
    assert loose["status"] == "ok"  # the rule, not something else, failed the runs above


def test_fmnist_cnn_at_lr_1e6_fails():
    rec = X.run(X.RunSpec("fmnist", "dirichlet", 0.5, 10, 0, "fedavg", fl={**FAST, "lr": 1e6}, n_train=1000))
    assert rec["status"] == "failed" and "lr=1e+06 with adam" in rec["error"]
    assert "global_accuracy" not in rec


@pytest.mark.parametrize("method, hyper", [("fedadam", {"eta": 1e300}), ("fedyogi", {"eta": 1e300}),
                                           ("fedavgm", {"server_lr": 1e300})])
def test_server_step_divergence_names_the_server_model_and_round(method, hyper):
    rec = X.run(spec(method, hyper=hyper))
    assert rec["status"] == "failed" and "global_accuracy" not in rec
    assert rec["error"].startswith(f"{method} diverged in round 1: server model [0] became non-finite")
    assert "after the server update" in rec["error"] and "server step size" in rec["error"]
    assert rec["divergence"]["models"] == [0] and rec["divergence"]["clients"] == []


def test_run_grid_writes_the_failed_record(tmp_path):
    (rec,) = X.run_grid([spec(lr=1e38)], tmp_path, progress=False)
    assert rec["status"] == "failed" and "fedavg diverged" in rec["error"]
    on_disk = json.loads(X.record_path(tmp_path, spec(lr=1e38)).read_text())
    assert on_disk["status"] == "failed" and not METRIC_KEYS & set(on_disk)


def test_final_models_are_checked_for_methods_with_their_own_loop(monkeypatch):
    from fedlib.methods import cfl

    real = cfl.run

    def poisoned(ctx, hp):  # a method whose own loop ends with a non-finite model
        out = real(ctx, hp)
        out.models = {k: v.clone() for k, v in out.models.items()}
        next(iter(out.models.values()))[0].view(-1)[0] = float("nan")
        return out

    monkeypatch.setattr(cfl, "run", poisoned)
    rec = X.run(spec("cfl"))
    assert rec["status"] == "failed" and "global_accuracy" not in rec
    assert rec["error"].startswith("cfl diverged: server model [0] became non-finite (weights) in the final models")


def test_a_failed_record_keeps_the_rounds_before_the_divergence(monkeypatch):
    """A 150-round run that diverges in round 101 keeps its first 100 evaluations, under a key
    no table reads as a result."""
    from fedlib.methods import fedavg

    real = fedavg.run

    def late(ctx, hp):  # trains its rounds, then diverges in the round after them
        real(ctx, hp)
        raise DivergenceError([1], round_idx=len(ctx.history), lr=ctx.cfg.lr, optimizer=ctx.cfg.optimizer)

    monkeypatch.setattr(fedavg, "run", late)
    rec = X.run(spec("fedavg"))
    assert rec["status"] == "failed" and not METRIC_KEYS & set(rec)
    before = rec["history_before_divergence"]
    assert [h["round"] for h in before] == [1, 2] and rec["divergence"]["round_idx"] == 2
    assert all(0 <= h["global_accuracy"] <= 1 for h in before)
    assert X.run(spec(lr=1e38))["history_before_divergence"] == []  # diverged in round 1


def test_a_failed_record_counts_the_compute_it_spent(monkeypatch, tmp_path):
    """A diverged run's CPU time is kept (``cpu_seconds``, as an ok record's), so compute spent on
    it is counted; the cost estimator still reads ok records only."""
    from fedlib import cost
    from fedlib.grid import timing_fields
    from fedlib.methods import fedavg

    real = fedavg.run

    def late(ctx, hp):
        real(ctx, hp)
        raise DivergenceError([1], round_idx=len(ctx.history), lr=ctx.cfg.lr, optimizer=ctx.cfg.optimizer)

    monkeypatch.setattr(fedavg, "run", late)
    rec = X.run(spec("fedavg"))
    assert rec["status"] == "failed" and 0 < rec["cpu_seconds"]
    assert cost.run_cost(rec) == (rec["cpu_seconds"], cost.CPU_SECONDS)
    path = tmp_path / f"{rec['key']}.json"
    records.write(path, rec)
    assert records.read_strict(path)["cpu_seconds"] == rec["cpu_seconds"]
    assert timing_fields(path) is None  # never a timing for an estimate


# ----------------------------------------------------------------------------- engine level
@pytest.fixture(scope="module")
def fed():
    """Four clients of digits: 40, 0, 30 and 50 train samples."""
    d = load_digits()
    x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    cuts = np.cumsum([40, 0, 30, 50])
    train = np.split(order[:cuts[-1]], cuts[:-1])
    test = np.split(order[cuts[-1]:cuts[-1] + 80], [20, 40, 60])
    return Federation.from_arrays(x, y, train, test, torch.device("cpu"))


ARCHS = {"logistic": lambda: build_model("logistic", 10, (64,)), "mlp": lambda: build_model("mlp", 10, (64,), hidden=16)}


@pytest.mark.parametrize("path", ["sequential", "vectorised"])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_local_train_names_every_diverged_client(fed, path, arch):
    model = ARCHS[arch]()
    clients = [3, 1, 0, 2]  # not sorted: ids, not rows, are reported
    with pytest.raises(DivergenceError) as info:
        local_train(model, broadcast(init_params(model, 0), 4), fed, clients, epochs=2, seed=0, lr=1e38,
                    path=path, round_idx=4, max_clients_per_chunk=2 if path == "vectorised" else None)
    err = info.value
    assert err.clients == [0, 2, 3]  # client 1 has no training sample: it never moves
    assert err.round_idx == 4 and err.lr == 1e38 and err.optimizer == "adam"
    assert str(err).startswith("training diverged in round 5: clients [0, 2, 3] have non-finite")
    assert "(lr=1e+38 with adam); lower lr" in str(err)


@pytest.mark.parametrize("path", ["sequential", "vectorised"])
def test_only_the_client_with_a_non_finite_start_is_named(fed, path):
    model = ARCHS["mlp"]()
    start = broadcast(init_params(model, 0), 4)
    start["1.weight"][2, 0, 0] = float("inf")  # row 2 = client 0
    with pytest.raises(DivergenceError) as info:
        local_train(model, start, fed, [3, 2, 0, 1], epochs=1, seed=0, path=path, max_clients_per_chunk=3)
    assert info.value.clients == [0] and "client [0] has non-finite" in str(info.value)


def test_normal_training_is_unaffected(fed):
    model = ARCHS["mlp"]()
    start = broadcast(init_params(model, 0), 4)
    a = local_train(model, start, fed, [0, 1, 2, 3], epochs=2, seed=0, path="sequential")
    b = local_train(model, start, fed, [0, 1, 2, 3], epochs=2, seed=0, path="vectorised")
    for k in a.params:
        assert torch.isfinite(a.params[k]).all()
        torch.testing.assert_close(a.params[k], b.params[k], atol=1e-5, rtol=1e-4)
    assert torch.isnan(a.mean_loss[1])  # the empty client's NaN loss is not a divergence


def test_overflowing_sum_of_finite_weights_is_not_a_divergence():
    big = [torch.full((2, 100), 1e37)]  # every entry finite, the screening sum overflows
    assert _nonfinite_rows(big, torch.zeros(2, dtype=torch.float64)) == {}
    big[0][1, 5] = float("nan")
    assert _nonfinite_rows(big, torch.tensor([0.0, float("inf")], dtype=torch.float64)) == {1: "weights and loss"}
    check_finite_models({"w": torch.full((3, 100), 1e37)}, 0, "after aggregation")  # no error
    with pytest.raises(DivergenceError, match=r"in round 3: server models \[0, 2\] became non-finite"):
        check_finite_models({"w": torch.tensor([[float("-inf")], [1.0], [float("nan")]])}, 2, "after aggregation")


def test_divergence_error_context_and_pickling():
    err = DivergenceError([4, 1], 2, lr=1e6, optimizer="sgd")
    assert isinstance(err, ValueError)
    full = err.with_context(method="poc", round_idx=9, lr=5.0)  # facts found first are kept
    assert str(full) == ("poc diverged in round 3: clients [4, 1] have non-finite weights after local training "
                         "(lr=1e+06 with sgd); lower lr")
    again = pickle.loads(pickle.dumps(full))
    assert str(again) == str(full) and again.clients == [4, 1]


# ----------------------------------------------------------------------------- tables
def test_failed_cells_show_failed_never_a_number(tmp_path):
    specs = [spec(seed=0), spec(seed=1, lr=1e38),  # level 0.5: one of two seeds failed
             spec(seed=0, level=1.0, lr=1e38),      # level 1.0: every seed failed
             spec("cl", seed=0), spec("cl", seed=1)]
    X.run_grid(specs, tmp_path, progress=False)
    df = records_frame(X.load_records(tmp_path))
    failed = df[df.status == "failed"]
    assert len(failed) == 2 and failed.error.str.contains("fedavg diverged").all()
    assert failed.global_accuracy.isna().all()
    for t, value, spread in ((table3(df), "mean", "std"), (table4(df), "ad", "ad_std")):
        fed = t[t.method == "fedavg"].set_index("level")
        assert fed.loc[0.5, "n_failed"] == 1 and fed.loc[0.5, "n_seeds"] == 1
        assert fed.loc[1.0, "n_failed"] == 1 and fed.loc[1.0, "n_seeds"] == 0
        assert fed[[value, spread]].isna().all().all()  # no surviving seed's number
        md = to_markdown(t, value=value, spread=spread)
        row = next(line for line in md.splitlines() if line.startswith("| FedAvg |"))
        assert row.count("failed (1/2 seeds)") == 1 and "| failed |" in row
        assert not any(ch.isdigit() for ch in row.replace("1/2", ""))
    t4 = table4(df)
    assert t4[t4.method == "fedavg"][["sdad", "ad_cl", "sdad_cl"]].isna().all().all()
    assert "failed" not in to_markdown(table3(df[df.method == "cl"]))
