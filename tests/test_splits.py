"""Validation splits, the global test set, evaluate_global and the M×K loss matrix."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from torch import nn

from fedlib import partition as P
from fedlib.engine import Federation, LossMatrix, evaluate, evaluate_global, loss_matrix, stack_params, unstack
from fedlib.models import build_model, init_params

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def digits():
    d = load_digits()
    return (d.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8), d.target.astype(np.int64)


@pytest.fixture(scope="module")
def split_fed(digits):
    """Five clients with train/val/test parts (client 3's val part empty), a 300-image global set."""
    x, y = digits
    pool_x, pool_y, gx, gy = x[:1497], y[:1497], x[1497:], y[1497:]
    parts = P.dirichlet(pool_y, 5, 1.0, 0)
    train, val, test = P.train_val_test_split(parts, 0, 0.2, 0.1)
    val[3] = np.zeros(0, dtype=np.int64)
    return Federation.from_arrays(pool_x, pool_y, train, test, CPU, val_parts=val, x_global=gx, y_global=gy,
                                  n_classes=10)


def _models(arch, m):
    model = build_model(arch, 10, (1, 8, 8))
    return model, stack_params([init_params(model, seed=s) for s in range(m)])


def _direct(model, state, x, y):
    """(correct, Σ cross-entropy) of one model on (x, y), computed without the engine."""
    model.load_state_dict(state, strict=False)
    with torch.no_grad():
        logits = model.eval()(x)
    return int((logits.argmax(1) == y).sum()), float(nn.functional.cross_entropy(logits, y, reduction="sum"))


# ----------------------------------------------------------------------------- train_val_test_split
@pytest.mark.parametrize("protocol,level", [("dirichlet", 0.3), ("shards", 2), ("similarity", 0.5)])
@pytest.mark.parametrize("seed", [0, 7])
def test_val_fraction_zero_is_exactly_train_test_split(digits, protocol, level, seed):
    _, y = digits
    parts = P.partition(y, protocol, 12, level, seed)
    for test_fraction in (0.2, 0.25, 0.0):
        train_a, test_a = P.train_test_split(parts, seed, test_fraction)
        train_b, val_b, test_b = P.train_val_test_split(parts, seed, test_fraction)
        assert len(train_b) == len(val_b) == len(test_b) == 12
        for k in range(12):
            assert np.array_equal(train_a[k], train_b[k]) and np.array_equal(test_a[k], test_b[k])
            assert val_b[k].dtype == np.int64 and val_b[k].size == 0


@pytest.mark.parametrize("seed", [0, 3])
def test_validation_is_taken_from_train_and_leaves_test_unchanged(digits, seed):
    _, y = digits
    parts = P.partition(y, "dirichlet", 10, 0.5, seed)
    _, test0 = P.train_test_split(parts, seed, 0.2)
    train, val, test = P.train_val_test_split(parts, seed, 0.2, 0.15)
    for k, part in enumerate(parts):
        assert np.array_equal(test[k], test0[k])
        assert len(val[k]) == max(1, round(0.15 * len(part)))  # every client here has ≥ 10 samples
        together = np.concatenate([train[k], val[k], test[k]])
        assert np.array_equal(np.sort(together), np.sort(part))  # disjoint, union = the client's data
        assert all(np.array_equal(a, np.sort(a)) and a.dtype == np.int64 for a in (train[k], val[k]))
    again = P.train_val_test_split(parts, seed, 0.2, 0.15)
    assert all(np.array_equal(a, b) for a, b in zip(val, again[1]))
    other = P.train_val_test_split(parts, seed + 1, 0.2, 0.15)
    assert not all(np.array_equal(a, b) for a, b in zip(val, other[1]))


def test_tiny_clients_keep_a_train_sample():
    parts = [np.array([5]), np.array([1, 2]), np.array([3, 4, 6]), np.arange(10, 30)]
    train, val, test = P.train_val_test_split(parts, 0, 0.2, 0.3)
    assert [len(a) for a in train] == [1, 1, 1, 20 - 4 - 6]
    assert [len(a) for a in val] == [0, 0, 1, 6]
    assert [len(a) for a in test] == [0, 1, 1, 4]


@pytest.mark.parametrize("kwargs,match", [
    ({"test_fraction": 0.6, "val_fraction": 0.4}, "test_fraction \\+ val_fraction must be < 1"),
    ({"val_fraction": -0.1}, "val_fraction must be a number in \\[0, 1\\), got -0.1"),
    ({"val_fraction": 1.0}, "val_fraction must be"),
    ({"test_fraction": True}, "test_fraction must be"),
    ({"val_fraction": "0.1"}, "val_fraction must be"),
])
def test_bad_fractions_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        P.train_val_test_split([np.arange(10)], 0, **kwargs)


# ----------------------------------------------------------------------------- Federation
def test_federation_defaults_keep_old_constructor_calls(digits):
    x, y = digits
    fed = Federation.from_arrays(x, y, [np.arange(10), np.arange(10, 30)], [np.arange(30, 35)] * 2, CPU)
    assert len(fed.val_parts) == 2 and fed.n_val.tolist() == [0, 0]
    assert not fed.has_global_test and fed.n_global == 0
    xs, ys, parts = fed.split("val")
    assert xs is fed.x and ys is fed.y and all(p.size == 0 for p in parts)
    with pytest.raises(ValueError, match="x_global="):
        fed.split("global")
    with pytest.raises(ValueError, match="split must be one of"):
        fed.split("validation")
    with pytest.raises(dataclasses.FrozenInstanceError):
        fed.val_parts = ()
    # positional construction (as from_arrays did before) and the pooled copy of methods.cl
    direct = Federation(fed.x, fed.y, fed.x_test, fed.y_test, fed.train_parts, fed.test_parts, 10)
    assert direct.n_val.tolist() == [0, 0] and direct.x_global is None
    pooled = dataclasses.replace(fed, train_parts=(np.arange(30),), test_parts=(np.arange(30, 35),))
    assert pooled.n_clients == 1 and pooled.n_val.tolist() == [0]


def test_federation_holds_validation_parts_and_a_global_test_set(split_fed, digits):
    x, y = digits
    fed = split_fed
    assert fed.n_val.tolist() == [len(p) for p in fed.val_parts] and fed.n_val[3] == 0 and fed.n_val.sum() > 0
    xs, ys, parts = fed.split("val")
    assert xs is fed.x and parts is fed.val_parts
    assert fed.has_global_test and fed.n_global == 300
    torch.testing.assert_close(fed.x_global, torch.as_tensor(x[1497:]))
    gx, gy, gparts = fed.split("global")
    assert gx is fed.x_global and gy is fed.y_global and len(gparts) == 5
    assert all(np.array_equal(p, np.arange(300)) for p in gparts)


def test_federation_refuses_bad_validation_and_global_inputs(digits):
    x, y = digits
    tr, te = [np.arange(10), np.arange(10, 20)], [np.arange(20, 25)] * 2
    with pytest.raises(ValueError, match="val_parts must list the same K=2"):
        Federation.from_arrays(x, y, tr, te, CPU, val_parts=[np.arange(3)])
    with pytest.raises(ValueError, match="val_parts\\[1\\] holds indices outside"):
        Federation.from_arrays(x, y, tr, te, CPU, val_parts=[np.arange(3), np.array([len(y)])])
    with pytest.raises(ValueError, match="val_parts\\[0\\] must be a 1-D integer"):
        Federation.from_arrays(x, y, tr, te, CPU, val_parts=[np.array([0.5]), np.arange(2)])
    with pytest.raises(ValueError, match="both x_global and y_global"):
        Federation.from_arrays(x, y, tr, te, CPU, x_global=x[:5])
    with pytest.raises(ValueError, match="x_global samples have shape"):
        Federation.from_arrays(x, y, tr, te, CPU, x_global=x[:5].reshape(5, 64), y_global=y[:5])
    with pytest.raises(ValueError, match="x_global has 5 samples but y_global has 4"):
        Federation.from_arrays(x, y, tr, te, CPU, x_global=x[:5], y_global=y[:4])
    with pytest.raises(ValueError, match="y_global must be a 1-D array of integer"):
        Federation.from_arrays(x, y, tr, te, CPU, x_global=x[:5], y_global=y[:5].astype(np.float32))
    with pytest.raises(ValueError, match="x_global must hold the same kind"):
        Federation.from_arrays(x, y, tr, te, CPU, x_global=np.ones((5, 1, 8, 8), dtype=np.int64), y_global=y[:5])
    with pytest.raises(ValueError, match="n_classes=3 but labels go up to 9"):
        Federation.from_arrays(x, y % 3, tr, te, CPU, x_global=x[:20], y_global=y[:20], n_classes=3)


# ----------------------------------------------------------------------------- evaluate_global
@pytest.mark.parametrize("arch,path", [("logistic", "vectorised"), ("cnn", "sequential"), ("cnn", "vectorised")])
def test_evaluate_global_scores_each_model_on_the_whole_official_test_set(split_fed, arch, path):
    model, params = _models(arch, 7)  # M = 7 models for K = 5 clients
    ev = evaluate_global(model, params, split_fed, batch_size=64, path=path, max_models_per_chunk=3)
    assert ev.n.tolist() == [300] * 7 and ev.path == path
    for row, state in enumerate(unstack(params)):
        correct, loss = _direct(model, state, split_fed.x_global, split_fed.y_global)
        assert ev.correct[row] == correct
        assert ev.loss_sum[row].item() == pytest.approx(loss, rel=1e-5)
    assert len(set(ev.correct.tolist())) > 1  # the rows are really different models


def test_evaluate_global_without_a_global_set_says_how_to_add_one(digits):
    x, y = digits
    fed = Federation.from_arrays(x, y, [np.arange(10)], [np.arange(10, 15)], CPU)
    model, params = _models("logistic", 1)
    with pytest.raises(ValueError, match="Federation.from_arrays\\(..., x_global=x_test, y_global=y_test\\)"):
        evaluate_global(model, params, fed)


def test_evaluate_accepts_the_new_splits(split_fed):
    model, params = _models("logistic", 2)
    ev = evaluate(model, params, split_fed, [0, 3], split="val")
    assert ev.n.tolist() == [split_fed.n_val[0], 0] and ev.correct[1] == 0
    ev = evaluate(model, params, split_fed, [4, 4], split="global")
    torch.testing.assert_close(ev.correct, evaluate_global(model, params, split_fed).correct)


# ----------------------------------------------------------------------------- loss_matrix
def _double_loop(model, params, fed, clients, split):
    m = next(iter(params.values())).shape[0]
    loss = torch.empty(m, len(clients), dtype=torch.float64)
    correct = torch.empty(m, len(clients), dtype=torch.int64)
    for i in range(m):
        row = {n: t[i:i + 1] for n, t in params.items()}
        for j, c in enumerate(clients):
            ev = evaluate(model, row, fed, [c], split=split)
            loss[i, j], correct[i, j] = ev.mean_loss[0], ev.correct[0]
    return loss, correct


@pytest.mark.parametrize("arch,path", [("logistic", "auto"), ("mlp", "vectorised"), ("cnn", "sequential")])
@pytest.mark.parametrize("split", ["val", "train"])
def test_loss_matrix_equals_a_double_loop_over_evaluate(split_fed, arch, path, split):
    model, params = _models(arch, 3)
    clients = [4, 3, 0, 4, 1]  # a repeat, and client 3 has an empty validation split
    want_loss, want_correct = _double_loop(model, params, split_fed, clients, split)
    for chunk in (None, 1, 4):
        got = loss_matrix(model, params, split_fed, clients, split=split, path=path, max_pairs_per_chunk=chunk)
        assert isinstance(got, LossMatrix)
        loss, correct, n = got
        assert loss.shape == (3, 5) and loss.dtype == torch.float64 and correct.dtype == torch.int64
        _, _, parts = split_fed.split(split)
        assert n.tolist() == [len(parts[c]) for c in clients]
        torch.testing.assert_close(loss, want_loss, rtol=1e-6, atol=1e-6, equal_nan=True)
        assert torch.equal(correct, want_correct)
    if split == "val":
        assert torch.isnan(loss[:, 1]).all() and (correct[:, 1] == 0).all()
        assert torch.isfinite(loss[:, [0, 2, 3, 4]]).all()


def test_loss_matrix_sum_reduction_and_validation(split_fed):
    model, params = _models("logistic", 2)
    mean = loss_matrix(model, params, split_fed, [0, 3, 2], split="test")
    total = loss_matrix(model, params, split_fed, [0, 3, 2], split="test", reduction="sum")
    torch.testing.assert_close(total.loss, mean.loss * mean.n.double())
    assert torch.equal(total.correct, mean.correct)
    val_sum = loss_matrix(model, params, split_fed, [3], reduction="sum")
    assert val_sum.loss.tolist() == [[0.0], [0.0]]
    with pytest.raises(ValueError, match=r"reduction must be one of \['mean', 'sum', 'batch_means'\], got 'max'"):
        loss_matrix(model, params, split_fed, [0], reduction="max")
    with pytest.raises(ValueError, match="split must be one of"):
        loss_matrix(model, params, split_fed, [0], split="dev")
    with pytest.raises(ValueError, match="client ids"):
        loss_matrix(model, params, split_fed, [5])
    with pytest.raises(ValueError, match="max_pairs_per_chunk"):
        loss_matrix(model, params, split_fed, [0], max_pairs_per_chunk=0)


def test_loss_matrix_argmin_finds_the_model_trained_for_each_client(digits):
    """IFCA's use: two clients whose labels are permuted; each client's own fitted model has the lower loss."""
    x, y = digits
    x2 = x.reshape(len(x), -1)
    parts = [np.arange(0, 800), np.arange(800, 1600)]
    y_perm = y.copy()
    y_perm[800:1600] = (y[800:1600] + 1) % 10
    val = [np.arange(1600, 1700), np.arange(1700, 1797)]
    y_perm[1700:] = (y[1700:] + 1) % 10
    fed = Federation.from_arrays(x2, y_perm, parts, val, CPU, val_parts=val)
    model = build_model("logistic", 10, (64,))
    states = []
    for k in range(2):  # ridge "training" of a linear classifier on each client (closed form)
        xs = torch.as_tensor(x2[parts[k]]).double()
        onehot = nn.functional.one_hot(torch.as_tensor(y_perm[parts[k]]), 10).double()
        a = torch.cat([xs, torch.ones(len(xs), 1, dtype=torch.float64)], 1)
        # a ridge, not lstsq: the digits' always-blank pixels make `a` rank-deficient, and LAPACK
        # builds differ on such a least-squares solution (on the lent H200 machine, torch 2.11,
        # its weights fit the other client better); the ridge is well posed everywhere
        eye = torch.eye(a.shape[1], dtype=torch.float64)
        w = torch.linalg.solve(a.T @ a + 1e-2 * eye, a.T @ onehot).float()
        states.append({"1.weight": 5 * w[:-1].T.contiguous(), "1.bias": 5 * w[-1]})
    loss, correct, n = loss_matrix(model, stack_params(states), fed, [1, 0], split="val")
    assert loss.argmin(0).tolist() == [1, 0]
    assert correct[1, 0] > 0.7 * n[0] and correct[0, 1] > 0.7 * n[1]
