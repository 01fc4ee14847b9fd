"""Tests of fedlib.engine: the two training paths agree, masking is exact, runs repeat."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from torch import nn

from fedlib.engine import (Federation, broadcast, choose_path, evaluate, flatten_params, local_train,
                           predict_logits, stack_params, unflatten_params, unstack, weighted_average,
                           RunningAverage)
from fedlib.engine.dense import dense_stack, relu_backward_
from fedlib.engine.schedule import batch_plan, batch_plans, shuffle_states
from fedlib.models import KerasBatchNorm1d, build_model, init_params

from fl_fixtures import DEVICES, assert_states_close, assert_states_equal, ragged_federation, start_states

pytestmark = pytest.mark.cross_cpu  # the engine's kernels: numbers from the CPU's instruction set (make test-other-cpu)

CPU = torch.device("cpu")
RAGGED = [45, 70, 3, 32, 1, 97]  # exact multiple of 32, single-sample and partial-batch clients


@pytest.fixture(scope="module")
def digits():
    """load_digits scaled to [0, 1]: x (1797, 1, 8, 8) float32, y (1797,) int64."""
    d = load_digits()
    return (d.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8), d.target.astype(np.int64)


@pytest.fixture(scope="module")
def ragged_fed():
    """Six clients with the train sizes of RAGGED and equally sized test splits."""
    return ragged_federation(RAGGED)


@pytest.fixture(scope="module")
def digits_fed(digits):
    """Ten IID clients, each split 80/20 into train and test."""
    x, y = digits
    parts = np.array_split(np.random.default_rng(1).permutation(len(y)), 10)
    train = [p[: int(0.8 * len(p))] for p in parts]
    test = [p[int(0.8 * len(p)):] for p in parts]
    return Federation.from_arrays(x, y, train, test, CPU)


SMALL_MODELS = {
    "logistic": lambda: build_model("logistic", 10, (1, 8, 8)),
    "mlp": lambda: build_model("mlp", 10, (1, 8, 8), hidden=32),
    "cnn": lambda: build_model("cnn", 10, (1, 8, 8)),
}


# ----------------------------------------------------------------------------- pure functions
def test_weighted_average_of_three_hand_written_vectors():
    stacked = {"w": torch.tensor([[1.0, 0.0, 4.0], [0.0, 1.0, 0.0], [2.0, 2.0, 8.0]]),
               "b": torch.tensor([[1.0], [3.0], [5.0]])}
    avg = weighted_average(stacked, [1, 2, 1])
    torch.testing.assert_close(avg["w"], torch.tensor([0.75, 1.0, 3.0]))
    torch.testing.assert_close(avg["b"], torch.tensor([3.0]))
    torch.testing.assert_close(weighted_average(stacked, torch.tensor([0.0, 0.0, 7.0]))["w"],
                               torch.tensor([2.0, 2.0, 8.0]))
    with pytest.raises(ValueError, match="weights"):
        weighted_average(stacked, [0, 0, 0])
    with pytest.raises(ValueError, match="shape"):
        weighted_average(stacked, [1, 2])


def test_copy_rows_writes_the_rows_by_index_for_small_and_large_rows():
    from fedlib.engine.params import _ROW_BY_ROW_FROM, copy_rows_
    for row_shape in ((3,), (2, _ROW_BY_ROW_FROM // 2)):  # one indexed assignment / one copy_ per row
        dst = torch.zeros(5, *row_shape)
        src = torch.arange(3 * int(np.prod(row_shape)), dtype=torch.float32).view(3, *row_shape) + 1
        expected = dst.clone()
        expected[torch.tensor([4, 0, 2])] = src
        for rows in ([4, 0, 2], np.array([4, 0, 2]), torch.tensor([4, 0, 2])):
            dst.zero_()
            assert copy_rows_(dst, rows, src) is dst
            assert torch.equal(dst, expected)
        assert torch.equal(dst[[1, 3]], torch.zeros(2, *row_shape))  # other rows untouched


def test_stack_unstack_broadcast_flatten_round_trip():
    a = {"w": torch.arange(6.0).view(2, 3), "b": torch.tensor([7.0])}
    b = {"w": -torch.arange(6.0).view(2, 3), "b": torch.tensor([8.0])}
    stacked = stack_params([a, b])
    assert stacked["w"].shape == (2, 2, 3)
    assert_states_equal(unstack(stacked)[1], b)
    flat = flatten_params(stacked)
    assert flat.shape == (2, 7)
    assert flat[1].tolist() == [-0.0, -1, -2, -3, -4, -5, 8]
    assert_states_equal(unflatten_params(flat, stacked), stacked)
    copies = broadcast(a, 3)
    copies["w"][0, 0, 0] = 100.0  # rows are independent copies
    assert copies["w"][1, 0, 0] == 0.0 and a["w"][0, 0] == 0.0
    assert flatten_params(stacked, names=["b"]).tolist() == [[7.0], [8.0]]


@pytest.mark.parametrize("arch", ["mlp", "cnn"])
def test_clients_start_from_a_read_only_view_with_the_bits_of_copies(ragged_fed, arch):
    """``broadcast(state, m, copy=False)`` is an expanded view (no memory per row) that trains
    to the same bits as m copies: ``local_train`` copies each chunk's start rows itself."""
    model = SMALL_MODELS[arch]()
    state = init_params(model, seed=5)
    view = broadcast(state, 6, copy=False)
    assert all(v.stride(0) == 0 and torch.equal(v[3], state[k]) for k, v in view.items())
    kw = dict(epochs=2, seed=1, path="vectorised", max_clients_per_chunk=4)
    from_view = local_train(model, view, ragged_fed, range(6), **kw)
    from_copies = local_train(model, broadcast(state, 6), ragged_fed, range(6), **kw)
    assert_states_equal(from_view.params, from_copies.params)
    copies = broadcast(state, 2)
    assert_states_equal(broadcast(state, 2, copy=False), copies)
    assert all(v.stride(0) == v[0].numel() for v in copies.values())  # rows of their own
    with pytest.raises(ValueError, match="copy must be a bool, got 'no'"):
        broadcast(state, 2, copy="no")


def test_step_runs_and_prefix_views_by_hand():
    """The padded step table is cut into runs of equal active-client counts (sorted by decreasing
    length), and step s sees the first active[s] clients."""
    from fedlib.engine.train import _prefixes, _runs
    assert _runs(np.array([3, 3, 1])) == [(0, 2), (2, 3)]
    assert _runs(np.array([5])) == [(0, 1)]
    assert _runs(np.array([4, 2, 2, 2, 0])) == [(0, 1), (1, 4), (4, 5)]
    assert _runs(np.array([], dtype=int)) == []
    t = torch.arange(4 * 3).reshape(4, 3)
    views = _prefixes(t, [3, 2, 2, 1])
    assert [v.tolist() for v in views] == [[0, 1, 2], [3, 4], [6, 7], [9]]
    assert all(v.is_contiguous() for v in views)
    assert _prefixes(t, []) == []


def test_federation_sizes_and_train_rows_are_the_parts_read_only(ragged_fed):
    """n_train / n_test are the parts' lengths, computed once and read-only; train_rows_of(c)
    is the concatenation of the clients' train parts in the order given (repeats, empty
    clients and no clients included)."""
    assert ragged_fed.n_train.tolist() == RAGGED and ragged_fed.n_test.tolist() == RAGGED
    assert ragged_fed.n_train is ragged_fed.n_train
    with pytest.raises(ValueError):
        ragged_fed.n_train[0] = 1
    for clients in ([5, 0, 2], [4, 4, 1, 3], [2], [], list(range(6))[::-1]):
        expected = np.concatenate([np.zeros(0, dtype=np.int64)] + [ragged_fed.train_parts[c] for c in clients])
        got = ragged_fed.train_rows_of(np.array(clients, dtype=np.int64))
        assert got.dtype == np.int64 and np.array_equal(got, expected), clients


def test_batch_plan_keeps_the_partial_batch_and_reshuffles_each_epoch():
    part = np.arange(100, 170)  # 70 samples: batches of 32, 32, 6
    plan = batch_plan(part, epochs=2, batch_size=32, seed=3, round_idx=1, client_id=4)
    assert plan.count.tolist() == [32, 32, 6, 32, 32, 6]
    assert plan.last_epoch.tolist() == [False] * 3 + [True] * 3
    epochs = [np.concatenate([plan.index[s, :c] for s, c in zip(range(e, e + 3), plan.count[e:e + 3])])
              for e in (0, 3)]
    for visited in epochs:
        assert sorted(visited.tolist()) == part.tolist()
    assert not np.array_equal(epochs[0], epochs[1])
    again = batch_plan(part, epochs=2, batch_size=32, seed=3, round_idx=1, client_id=4)
    assert np.array_equal(plan.index, again.index)
    other = batch_plan(part, epochs=2, batch_size=32, seed=3, round_idx=2, client_id=4)
    assert not np.array_equal(plan.index, other.index)
    longer = batch_plan(part, epochs=3, batch_size=32, seed=3, round_idx=1, client_id=4)
    assert np.array_equal(longer.index[:6], plan.index)  # epoch e's order does not depend on E
    assert batch_plan(part[:0], 3, 32, 0, 0, 0).n_steps == 0


def test_batch_plan_streams_are_the_documented_ones():
    """Every recorded number depends on these streams: epoch e of client k in round t is the
    (e+1)-th ``permutation(n)`` of ``default_rng(SeedSequence([seed, t, k], spawn_key=(0,)))``,
    cut into batches of 32, the last one partial and padded with the epoch's first index."""
    rng = np.random.default_rng(0)
    for n, epochs, client in ((0, 3, 0), (1, 1, 2), (31, 2, 5), (32, 1, 1), (33, 5, 9), (257, 3, 4)):
        part = rng.choice(10_000, n, replace=False)
        plan = batch_plan(part, epochs, 32, 7, 3, client)
        gen = np.random.default_rng(np.random.SeedSequence([7, 3, client], spawn_key=(0,)))
        per_epoch = -(-n // 32)
        for e in range(epochs):
            order = part[gen.permutation(n)]
            rows = plan.index[e * per_epoch:(e + 1) * per_epoch].reshape(-1)
            assert np.array_equal(rows[:n], order) and np.all(rows[n:] == order[:1])
        assert plan.count.tolist() == (([32] * (per_epoch - 1) + [n - 32 * (per_epoch - 1)]) * epochs if n else [])
        assert plan.last_epoch.tolist() == [False] * (epochs - 1) * per_epoch + [True] * per_epoch


def test_shuffle_states_are_numpys_seed_sequence():
    """The vectorised seeding is NumPy's SeedSequence word for word: seeds and rounds of one
    and of several 32-bit words, client ids from 0 to 2**32 − 1."""
    rng = np.random.default_rng(1)
    clients = np.concatenate([np.arange(40), rng.integers(0, 2 ** 32, 40), [2 ** 32 - 1]])
    for seed, round_idx in ((0, 0), (7, 3), (12345, 39), (2 ** 32 + 5, 1), (2 ** 70 + 3, 2 ** 33)):
        expected = np.stack([np.random.SeedSequence([seed, round_idx, int(k)], spawn_key=(0,)).generate_state(4, np.uint64)
                             for k in clients])
        assert np.array_equal(shuffle_states(seed, round_idx, clients), expected), (seed, round_idx)
    assert shuffle_states(0, 0, []).shape == (0, 4)
    with pytest.raises(ValueError, match="client ids"):
        shuffle_states(0, 0, [2 ** 32])


def test_batch_plans_for_many_clients_are_the_documented_streams():
    """batch_plans over clients of equal, different and zero sizes, given as index arrays or
    as sizes (positions), equals each client's documented stream; the arrays shared between
    clients of one size cannot be written through a plan."""
    rng = np.random.default_rng(2)
    sizes = [26, 26, 0, 70, 26, 1, 33]
    clients = [5, 9, 3, 0, 700, 11, 12]
    parts = [rng.choice(10_000, n, replace=False) for n in sizes]
    for given in (parts, sizes):
        plans = batch_plans(given, 2, 32, 7, 4, clients)
        for part, n, k, plan in zip(parts, sizes, clients, plans):
            base = part if given is parts else np.arange(n)
            gen = np.random.default_rng(np.random.SeedSequence([7, 4, k], spawn_key=(0,)))
            per_epoch = -(-n // 32)
            for e in range(2):
                order = base[gen.permutation(n)]
                rows = plan.index[e * per_epoch:(e + 1) * per_epoch].reshape(-1)
                assert np.array_equal(rows[:n], order) and np.all(rows[n:] == order[:1])
    assert plans[0].count is plans[1].count and not plans[0].count.flags.writeable
    # many clients (vectorised seeding, one re-seeded generator, one-epoch shuffles): sizes as an
    # array, odd ones leaving a buffered half-word that must not reach the next client
    many = np.resize(np.array([25, 26, 0, 3, 70, 1, 33], dtype=np.int64), 40)
    ids = rng.permutation(1000)[:40]
    for epochs in (1, 2, 3):
        for n, k, plan in zip(many, ids, batch_plans(many, epochs, 32, 7, 4, ids)):
            gen = np.random.default_rng(np.random.SeedSequence([7, 4, int(k)], spawn_key=(0,)))
            per_epoch = -(-n // 32)
            for e in range(epochs):
                rows = plan.index[e * per_epoch:(e + 1) * per_epoch].reshape(-1)
                assert np.array_equal(rows[:n], gen.permutation(n)), (epochs, n, k, e)
    with pytest.raises(ValueError):
        plans[0].last_epoch[0] = True
    mixed = [part if i % 2 else n for i, (part, n) in enumerate(zip(parts, sizes))]  # arrays and sizes in one call
    for i, (plan, alone) in enumerate(zip(batch_plans(mixed, 2, 32, 7, 4, clients),
                                          batch_plans(parts, 2, 32, 7, 4, clients))):
        expected = alone.index if i % 2 else batch_plans([sizes[i]], 2, 32, 7, 4, [clients[i]])[0].index
        assert np.array_equal(plan.index, expected)
    unshuffled = batch_plans(sizes, 1, 32, 7, 4, clients, shuffle=False)
    assert np.array_equal(unshuffled[3].index.reshape(-1)[:70], np.arange(70))


def test_batch_plans_fall_back_to_a_new_generator_per_client_with_the_same_streams(monkeypatch):
    """The pinned NumPy re-seeds one PCG64 in place (checked once per process); where that check
    fails (another NumPy's layout) each client gets a new generator: the same plans."""
    from fedlib.engine import schedule
    assert schedule._reseeding_is_fresh()  # the fast path is the one the stream tests exercise
    sizes = np.resize(np.array([25, 26, 1, 33, 70], dtype=np.int64), 30)
    clients = np.arange(100, 130)
    for epochs in (1, 2):
        fast = schedule.batch_plans(sizes, epochs, 32, 3, 1, clients)
        monkeypatch.setattr(schedule, "_reseeding_is_fresh", lambda: False)
        slow = schedule.batch_plans(sizes, epochs, 32, 3, 1, clients)
        monkeypatch.undo()
        assert all(np.array_equal(a.index, b.index) for a, b in zip(fast, slow))


def test_batch_plan_without_shuffling_walks_the_stored_order_every_epoch():
    part = np.arange(100, 170)[::-1].copy()  # a stored order that is not sorted
    plan = batch_plan(part, epochs=2, batch_size=32, seed=3, round_idx=1, client_id=4, shuffle=False)
    assert plan.count.tolist() == [32, 32, 6, 32, 32, 6]
    for e in (0, 3):
        visited = np.concatenate([plan.index[s, :c] for s, c in zip(range(e, e + 3), plan.count[e:e + 3])])
        assert visited.tolist() == part.tolist()
    assert np.array_equal(plan.index, batch_plan(part, 2, 32, 9, 5, 0, shuffle=False).index)  # no seed enters


@pytest.mark.parametrize("arch", ["logistic", "cnn"])
def test_paths_agree_without_shuffling_and_differ_from_shuffled(ragged_fed, arch):
    model = SMALL_MODELS[arch]()
    start = broadcast(init_params(model, seed=1), 6)
    kwargs = dict(epochs=2, seed=7, round_idx=2, shuffle=False)
    seq = local_train(model, start, ragged_fed, range(6), path="sequential", **kwargs)
    vec = local_train(model, start, ragged_fed, range(6), path="vectorised", max_clients_per_chunk=4, **kwargs)
    assert_states_close(seq.params, vec.params)
    shuffled = local_train(model, start, ragged_fed, range(6), path="sequential", epochs=2, seed=7, round_idx=2)
    assert not torch.equal(flatten_params(seq.params), flatten_params(shuffled.params))
    other_seed = local_train(model, start, ragged_fed, range(6), path="sequential", **{**kwargs, "seed": 8})
    assert_states_equal(seq.params, other_seed.params)  # the batch order no longer depends on the seed


# ----------------------------------------------------------------------------- path equality
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", sorted(SMALL_MODELS))
def test_sequential_and_vectorised_paths_agree_on_ragged_clients(arch, device):
    ragged_fed = ragged_federation(RAGGED, device)
    model = SMALL_MODELS[arch]()
    start = start_states(model, 1, 6, device)
    clients = [0, 1, 2, 3, 4, 5]
    kwargs = dict(epochs=3, seed=7, round_idx=2)
    seq = local_train(model, start, ragged_fed, clients, path="sequential", **kwargs)
    vec = local_train(model, start, ragged_fed, clients, path="vectorised", max_clients_per_chunk=4, **kwargs)
    assert (seq.path, vec.path) == ("sequential", "vectorised")
    assert_states_close(seq.params, vec.params)
    torch.testing.assert_close(seq.mean_loss, vec.mean_loss, atol=1e-5, rtol=1e-5)
    assert seq.n_samples.tolist() == RAGGED
    moved = flatten_params(seq.params) - flatten_params(start)
    assert (moved.abs().amax(1) > 1e-3).all()  # every client trained


def test_embedding_model_paths_agree():
    """embed_dnn takes the vmap + autograd variant of the vectorised path."""
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 50, (300, 6)), rng.integers(0, 2, 300)
    parts = [np.arange(0, 70), np.arange(70, 101), np.arange(101, 300)]
    fed = Federation.from_arrays(x, y, parts, parts, CPU)
    model = build_model("embed_dnn", 2, (6,), vocab_size=50)
    assert dense_stack(model) is None
    start = broadcast(init_params(model, seed=0), 3)
    seq = local_train(model, start, fed, [0, 1, 2], epochs=2, seed=0, path="sequential")
    vec = local_train(model, start, fed, [0, 1, 2], epochs=2, seed=0, path="vectorised")
    assert_states_close(seq.params, vec.params)


def test_dense_stack_recognises_linear_relu_stacks_only():
    assert dense_stack(SMALL_MODELS["logistic"]()).relu == (False,)
    assert dense_stack(SMALL_MODELS["mlp"]()).relu == (True, True, True, False)
    assert dense_stack(SMALL_MODELS["cnn"]()) is None
    assert dense_stack(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))) is None
    assert dense_stack(nn.Sequential(nn.Linear(3, 4), nn.ReLU())) is None


def test_paths_agree_with_a_per_client_proximal_term(ragged_fed):
    model = SMALL_MODELS["mlp"]()
    start = broadcast(init_params(model, seed=2), 6)
    center = broadcast(init_params(model, seed=3), 6)
    mu = torch.tensor([0.0, 0.5, 1.0, 2.0, 0.1, 3.0])
    kwargs = dict(epochs=2, seed=1, prox_center=center, prox_mu=mu)
    seq = local_train(model, start, ragged_fed, range(6), path="sequential", **kwargs)
    vec = local_train(model, start, ragged_fed, range(6), path="vectorised", **kwargs)
    assert_states_close(seq.params, vec.params)
    plain = local_train(model, start, ragged_fed, range(6), path="vectorised", epochs=2, seed=1)
    dist = lambda res: (flatten_params(res.params) - flatten_params(center)).norm(dim=1)  # noqa: E731
    assert torch.allclose(dist(vec)[0], dist(plain)[0])  # μ = 0: no pull
    assert (dist(vec)[1:] < dist(plain)[1:]).all()  # μ > 0: pulled toward the center


def test_relu_backward_masks_the_gradient_in_place_where_the_output_is_not_positive():
    """By hand, and against autograd's ReLU backward on a channels-last tensor: the gradient
    passes where the ReLU's output is > 0 and is +0.0 elsewhere (a negative gradient too)."""
    grad = torch.tensor([[1.5, -2.0, 3.0, -4.0]])
    out = torch.tensor([[0.5, 0.0, 0.0, 2.0]])
    same = relu_backward_(grad, out)
    assert same is grad
    assert torch.equal(grad, torch.tensor([[1.5, 0.0, 0.0, -4.0]]))
    assert torch.equal(torch.signbit(grad), torch.tensor([[False, False, False, True]]))  # +0.0, not -0.0
    torch.manual_seed(0)
    z = torch.randn(2, 6, 5, 5).contiguous(memory_format=torch.channels_last).requires_grad_()
    upstream = torch.randn(2, 6, 5, 5).contiguous(memory_format=torch.channels_last)
    torch.relu(z).backward(upstream)
    assert torch.equal(relu_backward_(upstream.clone(), torch.relu(z.detach())), z.grad)


def test_proximal_gradient_matches_autograd_of_the_squared_term(ragged_fed):
    """The hook equals torch.optim.Adam on loss + (μ/2)‖w − c‖², written out with autograd."""
    model = SMALL_MODELS["logistic"]()
    start = broadcast(init_params(model, seed=4), 1)
    center = broadcast({k: v + 0.3 for k, v in init_params(model, seed=4).items()}, 1)
    res = local_train(model, start, ragged_fed, [3], epochs=1, seed=0, prox_center=center, prox_mu=0.7)
    net = build_model("logistic", 10, (1, 8, 8))
    net.load_state_dict(unstack(start)[0])
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, eps=1e-7)
    plan = batch_plan(ragged_fed.train_parts[3], 1, 32, 0, 0, 3)
    for s, count in enumerate(plan.count):
        idx = torch.as_tensor(plan.index[s, :count])
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(ragged_fed.x[idx]), ragged_fed.y[idx])
        loss = loss + 0.35 * sum(((p - center[n][0]) ** 2).sum() for n, p in net.named_parameters())
        loss.backward()
        opt.step()
    assert_states_close(unstack(res.params)[0], dict(net.named_parameters()))


# ----------------------------------------------------------------------------- masking, seeds
def test_masking_is_exact_a_client_alone_equals_the_client_among_others(ragged_fed):
    model = SMALL_MODELS["mlp"]()
    start = broadcast(init_params(model, seed=5), 6)
    together = local_train(model, start, ragged_fed, range(6), epochs=2, seed=3, path="vectorised")
    for row in (2, 4):  # short clients: padded for most of the schedule
        alone = local_train(model, {n: t[row:row + 1] for n, t in start.items()}, ragged_fed, [row],
                            epochs=2, seed=3, path="vectorised")
        assert_states_close({n: t[row:row + 1] for n, t in together.params.items()}, alone.params, atol=1e-7)
        torch.testing.assert_close(together.mean_loss[row:row + 1], alone.mean_loss)


def test_a_client_with_no_samples_is_returned_unchanged(digits):
    x, y = digits
    fed = Federation.from_arrays(x, y, [np.arange(40), np.arange(0)], [np.arange(40, 50)] * 2, CPU)
    model = SMALL_MODELS["logistic"]()
    start = broadcast(init_params(model, seed=0), 2)
    for path in ("sequential", "vectorised"):
        res = local_train(model, start, fed, [0, 1], epochs=2, seed=0, path=path)
        assert_states_equal({n: t[1] for n, t in res.params.items()}, {n: t[1] for n, t in start.items()})
        assert res.n_samples.tolist() == [40, 0] and torch.isnan(res.mean_loss[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path", ["sequential", "vectorised"])
@pytest.mark.parametrize("arch", ["mlp", "cnn"])
def test_same_seed_gives_bit_identical_results(arch, path, device):
    """On CUDA too: cuDNN's algorithms are the deterministic ones inside the engine."""
    ragged_fed = ragged_federation(RAGGED, device)
    model = SMALL_MODELS[arch]()
    start = start_states(model, 6, 6, device)
    runs = [local_train(model, start, ragged_fed, range(6), epochs=2, seed=s, path=path)
            for s in (11, 11, 12)]
    assert_states_equal(runs[0].params, runs[1].params)
    assert torch.equal(runs[0].mean_loss, runs[1].mean_loss)
    assert not torch.equal(flatten_params(runs[0].params), flatten_params(runs[2].params))


@pytest.mark.parametrize("path,arch", [("sequential", "mlp"), ("vectorised", "mlp"), ("vectorised", "cnn")])
def test_training_into_given_tensors_is_bit_identical(ragged_fed, path, arch):
    """``out=``: the trained rows are written into the given tensors (an earlier result),
    with the same values as into new ones; the start state is left as it was."""
    model = SMALL_MODELS[arch]()
    start = broadcast(init_params(model, seed=6), 6)
    before = {k: v.clone() for k, v in start.items()}
    fresh = local_train(model, start, ragged_fed, range(6), epochs=2, seed=3, path=path, max_clients_per_chunk=4)
    spare = {k: torch.full_like(v, float("nan")) for k, v in fresh.params.items()}
    into = local_train(model, start, ragged_fed, range(6), epochs=2, seed=3, path=path, max_clients_per_chunk=4,
                       out=spare)
    assert all(into.params[k] is spare[k] for k in spare)
    assert_states_equal(into.params, fresh.params)
    assert torch.equal(into.mean_loss, fresh.mean_loss)
    assert_states_equal(start, before)


def test_training_into_given_tensors_refuses_what_cannot_hold_the_result(ragged_fed):
    model = SMALL_MODELS["logistic"]()
    start = broadcast(init_params(model, seed=0), 2)
    good = {k: torch.empty_like(v) for k, v in start.items()}
    name = next(iter(start))
    cases = [
        ({**good, "extra": good[name]}, "out must be a dict with the keys of params"),
        ({**good, name: good[name][:1]}, rf"out\['{name}'\] must be a contiguous float32 tensor of shape"),
        ({**good, name: good[name].double()}, "float32"),
        ({**good, name: good[name].transpose(-1, -2).contiguous().transpose(-1, -2)}, "not contiguous"),
        ({**good, name: start[name]}, "shares memory with params"),
    ]
    for out, message in cases:
        with pytest.raises(ValueError, match=message):
            local_train(model, start, ragged_fed, [0, 1], epochs=1, seed=0, out=out)


@pytest.mark.parametrize("path,arch", [("sequential", "mlp"), ("vectorised", "mlp"), ("vectorised", "cnn")])
def test_sink_gets_every_trained_row_once_with_the_values_of_the_result(ragged_fed, path, arch):
    """``sink=``: each chunk's rows are handed over as they train (positions in ``clients``),
    every row exactly once and with the bits the stacked result holds; no result is stacked."""
    model = SMALL_MODELS[arch]()
    start = broadcast(init_params(model, seed=6), 6)
    fresh = local_train(model, start, ragged_fed, range(6), epochs=2, seed=3, path=path, max_clients_per_chunk=4)
    seen, calls = {}, []

    def sink(rows, trained):
        calls.append(rows.tolist())
        for j, row in enumerate(rows.tolist()):
            assert row not in seen
            seen[row] = {k: v[j].clone() for k, v in trained.items()}  # the memory is reused: copy now

    res = local_train(model, start, ragged_fed, range(6), epochs=2, seed=3, path=path, max_clients_per_chunk=4,
                      sink=sink)
    assert res.params is None and sorted(seen) == list(range(6))
    assert len(calls) == (6 if path == "sequential" else 2)  # per client, or per chunk of at most 4
    assert_states_equal(stack_params([seen[i] for i in range(6)]), fresh.params)
    assert torch.equal(res.mean_loss, fresh.mean_loss)


@pytest.mark.parametrize("arch", ["mlp", "cnn"])
def test_chunks_of_consecutive_rows_train_in_the_result_with_the_same_bits(arch):
    """A chunk whose rows are consecutive trains in the result's own rows (no copy back); one
    whose rows are not trains in the workspace and is copied. Sizes [70, 70, 10, 40, 10, 40]
    (3, 3, 1, 2, 1, 2 steps an epoch) in chunks of 2 sort into rows (0, 1), (3, 5), (2, 4):
    both kinds in one call. The result
    (new tensors, or ``out``) holds the bits each row has when handed to a ``sink``, which
    always trains in the workspace."""
    fed = ragged_federation([70, 70, 10, 40, 10, 40])
    model = SMALL_MODELS[arch]()
    start = broadcast(init_params(model, seed=2), 6)
    kw = dict(epochs=2, seed=4, path="vectorised", max_clients_per_chunk=2)
    seen = {}

    def sink(rows, trained):
        for j, row in enumerate(rows.tolist()):
            seen[row] = {k: v[j].clone() for k, v in trained.items()}

    local_train(model, start, fed, range(6), sink=sink, **kw)
    streamed = stack_params([seen[i] for i in range(6)])
    fresh = local_train(model, start, fed, range(6), **kw)
    out = {k: torch.full_like(v, float("nan")) for k, v in start.items()}
    given = local_train(model, start, fed, range(6), out=out, **kw)
    assert all(given.params[k] is out[k] for k in out)
    assert_states_equal(fresh.params, streamed)
    assert_states_equal(given.params, streamed)


def test_batches_index_the_planned_samples_with_or_without_a_staging_copy():
    """A chunk of several steps copies its samples into one block; a chunk whose clients all
    take one step indexes the pooled samples themselves. Either way step s, client i, column j
    holds the sample the client's plan names (padding repeats one of its samples, label too)."""
    from fedlib.engine.train import _Batches
    fed = ragged_federation([20, 31, 7, 45, 12])
    for clients, epochs in (([0, 1, 2, 4], 1), ([3, 0, 2], 2)):  # one step each; up to 4 steps
        plans = batch_plans([len(fed.train_parts[c]) for c in clients], epochs, 32, 0, 0, clients)
        steps = np.array([p.n_steps for p in plans])
        order = np.argsort(-steps, kind="stable")
        chunk = np.array(clients)[order]
        batches = _Batches.stack(fed, chunk, [plans[i] for i in order], steps[order])
        assert (batches.x is fed.x) == (steps.max() == 1)
        for s, active in enumerate(batches.active):
            for i in range(active):
                plan = plans[order[i]]
                want = fed.train_parts[chunk[i]][plan.index[s]]  # pooled rows, padding included
                assert torch.equal(batches.x[batches.index[s][i]], fed.x[want])
                assert torch.equal(batches.target[s][i, 0], fed.y[want])


def test_sink_refuses_out_and_what_cannot_be_called(ragged_fed):
    model = SMALL_MODELS["logistic"]()
    start = broadcast(init_params(model, seed=0), 2)
    out = {k: torch.empty_like(v) for k, v in start.items()}
    for kw in ({"sink": lambda rows, trained: None, "out": out}, {"sink": "fold"}):
        with pytest.raises(ValueError, match="sink must be a callable"):
            local_train(model, start, ragged_fed, [0, 1], epochs=1, seed=0, **kw)


def test_running_average_is_the_weighted_average_of_its_chunks():
    """Rows folded in chunks of any size give :func:`weighted_average` of all of them, up to the
    last float32 bit (float64 sums, one rounding); both ways of adding (row by row for large
    tensors, one product for small) are covered."""
    g = torch.Generator().manual_seed(0)
    stacked = {"big": torch.randn(7, 300, 256, generator=g), "small": torch.randn(7, 3, generator=g)}
    n = np.array([5, 0, 12, 3, 9, 1, 30], dtype=np.float64)
    exact = {k: (torch.tensordot(torch.as_tensor(n), v.double(), dims=1) / n.sum()) for k, v in stacked.items()}
    for bounds in ([0, 7], [0, 1, 2, 3, 4, 5, 6, 7], [0, 3, 4, 7]):
        avg = RunningAverage({k: v[0] for k, v in stacked.items()})
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            avg.add({k: v[lo:hi] for k, v in stacked.items()}, n[lo:hi])
        mean = avg.mean()
        for k in stacked:
            assert mean[k].dtype == torch.float32 and mean[k].shape == stacked[k].shape[1:]
            torch.testing.assert_close(mean[k], exact[k].float(), rtol=2 ** -23, atol=0)
            torch.testing.assert_close(mean[k], weighted_average(stacked, n)[k], rtol=1e-6, atol=1e-7)
    empty = RunningAverage({"w": torch.zeros(2)})
    with pytest.raises(ValueError, match="positive sum"):
        empty.mean()
    with pytest.raises(ValueError, match="weights must be finite and non-negative"):
        empty.add({"w": torch.ones(1, 2)}, [-1.0])
    with pytest.raises(ValueError, match=r"weights of shape \(1,\)"):
        empty.add({"w": torch.ones(1, 2)}, [1.0, 2.0])


class _StochasticNet(nn.Module):
    """Dense net with BatchNorm and dropout: sequential path only."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), KerasBatchNorm1d(16), nn.ReLU(),
                                 nn.Dropout(0.5), nn.Linear(16, 10))

    def forward(self, x):
        return self.net(x)


def test_dropout_and_batchnorm_models_train_sequentially_and_reproducibly(ragged_fed):
    model = _StochasticNet()
    assert choose_path(model, CPU, training=True) == "sequential"
    assert choose_path(model, CPU, training=False) == "sequential"  # unmeasured (engine.paths); vectorises on request
    start = broadcast(init_params(model, seed=0), 6)
    with pytest.raises(ValueError, match="vectorised"):
        local_train(model, start, ragged_fed, range(6), epochs=1, seed=0, path="vectorised")
    rng_before = torch.random.get_rng_state()
    res = local_train(model, start, ragged_fed, range(6), epochs=2, seed=9)
    assert torch.equal(rng_before, torch.random.get_rng_state())  # the global RNG is untouched
    assert res.path == "sequential"
    assert not torch.equal(res.params["net.2.running_mean"], start["net.2.running_mean"])
    alone = local_train(model, {n: t[3:4] for n, t in start.items()}, ragged_fed, [3], epochs=2, seed=9)
    assert_states_equal({n: t[3:4] for n, t in res.params.items()}, alone.params)
    ev_seq = evaluate(model, res.params, ragged_fed, range(6), path="sequential")
    ev_vec = evaluate(model, res.params, ragged_fed, range(6), path="vectorised", batch_size=16)
    assert torch.equal(ev_seq.correct, ev_vec.correct)
    torch.testing.assert_close(ev_seq.loss_sum, ev_vec.loss_sum, rtol=1e-5, atol=1e-4)


def test_auto_path_rule():
    cuda = torch.device("cuda")
    assert choose_path(SMALL_MODELS["logistic"](), CPU, training=True) == "vectorised"
    assert choose_path(build_model("mlp", 26, (16,)), CPU, training=True) == "vectorised"  # dense kernel
    small_embed = build_model("embed_dnn", 2, (20,), vocab_size=2_000)
    large_embed = build_model("embed_dnn", 2, (20,), vocab_size=20_000)
    assert choose_path(small_embed, CPU, training=True) == "vectorised"
    assert choose_path(large_embed, CPU, training=True) == "sequential"
    assert choose_path(large_embed, cuda, training=True) == "vectorised"
    assert choose_path(SMALL_MODELS["cnn"](), CPU, training=True) == "vectorised"  # conv kernel
    assert choose_path(SMALL_MODELS["cnn"](), CPU, training=False) == "sequential"  # no kernel for evaluation
    assert choose_path(build_model("fmnist_cnn", 10, (1, 28, 28)), CPU, training=True) == "vectorised"
    strided = nn.Sequential(nn.Conv2d(1, 4, 3, stride=2), nn.ReLU(), nn.Flatten(), nn.Linear(36, 10))
    assert choose_path(strided, CPU, training=True) == "sequential"  # a convolution the kernel does not take
    assert choose_path(strided, cuda, training=True) == "vectorised"
    assert choose_path(SMALL_MODELS["cnn"](), cuda, training=True) == "vectorised"
    lstm = build_model("lstm", 2, (12,), vocab_size=50)
    assert choose_path(lstm, cuda, training=False) == "sequential"


def test_chunk_estimate_counts_the_state_copies_each_kernel_holds(monkeypatch):
    """Clients a chunk = ⌊budget / (4 bytes · (copies · state + 3 · B · activations))⌋, by hand:
    a conv stack on its kernel holds 4 copies of its state (weights, gradients, two Adam
    moments), through autograd 6; the dense kernel is counted with 6 (measured faster)."""
    import fedlib.engine.paths as paths
    monkeypatch.setattr(paths, "_free_bytes", lambda device: 2_000_000)  # budget: half, 1e6 bytes
    conv = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32, 3))
    state = 2 * 9 + 2 + 32 * 3 + 3  # 119
    activations = 128 + 128 + 32 + 32 + 3  # conv, ReLU, pool, flatten, linear outputs of one 8×8 input
    sample = torch.zeros(1, 1, 8, 8)
    assert paths.clients_per_chunk(conv, sample, 4, True) == 1_000_000 // (4 * (4 * state + 3 * 4 * activations))
    assert paths.clients_per_chunk(conv, sample, 4, True, autograd=True) == \
        1_000_000 // (4 * (6 * state + 3 * 4 * activations))
    assert paths.clients_per_chunk(conv, sample, 4, False) == 1_000_000 // (4 * (state + 4 * activations))
    dense = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # the dense kernel's chunk is a multiple of the threads (next test)
        assert paths.clients_per_chunk(dense, sample, 4, True) == 1_000_000 // (4 * (6 * 650 + 3 * 4 * (64 + 10)))
    finally:
        torch.set_num_threads(before)


def test_dense_training_chunks_fit_a_smaller_budget_in_multiples_of_the_threads(monkeypatch):
    """The dense kernel trains in chunks of ⌊32 MiB / bytes a client⌋ rounded down to a multiple of
    torch's threads (above one); evaluation and the autograd kernel keep the 64 MiB budget."""
    import fedlib.engine.paths as paths
    monkeypatch.setattr(paths, "_free_bytes", lambda device: 10 ** 12)
    dense, sample = nn.Sequential(nn.Flatten(), nn.Linear(64, 10)), torch.zeros(1, 1, 8, 8)
    per_client = 4 * (6 * 650 + 3 * 4 * (64 + 10))
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 5):
            torch.set_num_threads(threads)
            fits = 32 * 1024 ** 2 // per_client  # 1,752
            assert paths.clients_per_chunk(dense, sample, 4, True) == fits - fits % threads
        assert paths.clients_per_chunk(dense, sample, 4, True, autograd=True) == 64 * 1024 ** 2 // per_client
        assert paths.clients_per_chunk(dense, sample, 4, False) == 64 * 1024 ** 2 // (4 * (650 + 4 * 74))
        monkeypatch.setattr(paths, "_CPU_DENSE_CHUNK_BYTES", 3 * per_client)  # 3 clients fit: 2 on 2 threads
        torch.set_num_threads(2)
        assert paths.clients_per_chunk(dense, sample, 4, True) == 2
        torch.set_num_threads(4)
        assert paths.clients_per_chunk(dense, sample, 4, True) == 3  # fewer than the threads: as estimated
    finally:
        torch.set_num_threads(before)


def test_conv_chunks_grow_with_many_clients_on_workers(monkeypatch):
    """A conv stack on its kernel, trained on ≥ 2 workers, takes chunks of ⌈M / (12 W)⌉ clients
    between the 64 MiB estimate and the 256 MiB one (here scaled down to 10 and 40 clients);
    with one worker, through autograd, without M or for the dense kernel the estimate stays."""
    import fedlib.engine.paths as paths
    from fedlib.engine import max_workers
    monkeypatch.setattr(paths, "_free_bytes", lambda device: 2_000_000)
    conv = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32, 3))
    per_client = 4 * (4 * 119 + 3 * 4 * 323)  # as in the test above
    monkeypatch.setattr(paths, "_CPU_CHUNK_BYTES", 10 * per_client)
    monkeypatch.setattr(paths, "_CPU_WIDE_CHUNK_BYTES", 40 * per_client)
    sample = torch.zeros(1, 1, 8, 8)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        chunk = lambda m, **kw: paths.clients_per_chunk(conv, sample, 4, True, clients=m, **kw)  # noqa: E731
        assert [chunk(m) for m in (None, 50, 240, 480, 1000, 5000)] == [10, 10, 10, 20, 40, 40]
        assert chunk(1000, autograd=True) == 10 * per_client // (4 * (6 * 119 + 3 * 4 * 323))  # 6 copies: not widened
        assert paths.clients_per_chunk(conv, sample, 4, False, clients=1000) == 10 * per_client // (4 * (119 + 4 * 323))
        with max_workers(1):
            assert chunk(1000) == 10
        dense = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
        monkeypatch.setattr(paths, "_CPU_CHUNK_BYTES", 64 * 1024 ** 2)
        assert paths.clients_per_chunk(dense, sample, 4, True, clients=100_000) == \
            1_000_000 // (4 * (6 * 650 + 3 * 4 * (64 + 10)))
        torch.set_num_threads(1)
        monkeypatch.setattr(paths, "_CPU_CHUNK_BYTES", 10 * per_client)
        assert chunk(1000) == 10
    finally:
        torch.set_num_threads(before)


def test_a_call_reuses_the_last_calls_workspaces_and_never_reads_what_they_held(ragged_fed):
    """The kernels' workspaces outlive a call and the next call of the same shapes trains in
    them: poisoned with NaN in between, they give the bits of new ones; a call of other shapes
    lets them go."""
    from fedlib.engine import train
    model = build_model("cnn", 10, (1, 8, 8))
    start = broadcast(init_params(model, seed=1), len(RAGGED))

    def run():
        return local_train(model, start, ragged_fed, range(len(RAGGED)), epochs=2, seed=3, path="vectorised",
                           max_clients_per_chunk=2, return_opt_state=True)

    train._KEPT.clear()
    fresh = run()
    kept = list(train._KEPT)
    assert kept and all(w.key == kept[0].key for w in kept)
    for w in kept:
        for t in [*w.params.values(), *w.grads, *w.opt.exp_avg.values(), *w.opt.exp_avg_sq.values()]:
            t.fill_(float("nan"))
    again = run()
    assert all(any(w is k for k in kept) for w in train._KEPT)  # the same workspaces, kept again
    assert_states_equal(again.params, fresh.params)
    assert torch.equal(again.mean_loss, fresh.mean_loss)
    assert_states_equal(again.opt_state.exp_avg, fresh.opt_state.exp_avg)
    other = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(48, 10))
    local_train(other, broadcast(init_params(other, seed=0), 2), ragged_fed, [0, 1], epochs=1, seed=0,
                path="vectorised")
    assert train._KEPT and all(w is not k for w in train._KEPT for k in kept)


# ----------------------------------------------------------------------------- evaluation
def test_evaluate_counts_match_a_direct_computation_and_allow_repeated_clients(ragged_fed):
    model = SMALL_MODELS["cnn"]()
    params = stack_params([init_params(model, seed=s) for s in range(3)])
    clients = [5, 0, 5]
    for path in ("sequential", "vectorised"):
        ev = evaluate(model, params, ragged_fed, clients, split="train", batch_size=20, path=path)
        for row, (client, state) in enumerate(zip(clients, unstack(params))):
            model.load_state_dict(state)
            idx = torch.as_tensor(ragged_fed.train_parts[client])
            with torch.no_grad():
                logits = model.eval()(ragged_fed.x[idx])
            assert ev.correct[row] == (logits.argmax(1) == ragged_fed.y[idx]).sum()
            assert ev.n[row] == len(idx)
            torch.testing.assert_close(ev.loss_sum[row].float(), nn.functional.cross_entropy(
                logits, ragged_fed.y[idx], reduction="sum"), rtol=1e-5, atol=1e-4)
    logits = predict_logits(model, params, ragged_fed.x[:7], batch_size=3)
    assert logits.shape == (3, 7, 10)
    torch.testing.assert_close(logits, predict_logits(model, params, ragged_fed.x[:7], path="sequential"))
    # the sequential path ran the CNN channels-last on a copy; the caller's model is untouched
    from fedlib.engine.evaluate import _channels_last
    assert _channels_last(model, ragged_fed.x) and not _channels_last(model, ragged_fed.x.flatten(1))
    assert not _channels_last(SMALL_MODELS["mlp"](), ragged_fed.x)
    assert all(p.is_contiguous() for p in model.parameters())


@pytest.mark.parametrize("arch", ["cnn", "mlp"])
def test_evaluate_with_model_of_gives_the_counts_of_the_copied_rows_bit_for_bit(ragged_fed, arch):
    """G cluster models scored through ``model_of`` = the same G models copied out one row per
    client (what Context.evaluate did before), on both paths, whatever the order of the rows."""
    model = SMALL_MODELS[arch]()
    models = stack_params([init_params(model, seed=s) for s in range(3)])
    clients, model_of = [4, 0, 5, 2, 1, 3, 0], np.array([2, 0, 2, 1, 0, 2, 1])
    copied = {k: v[torch.as_tensor(model_of)] for k, v in models.items()}
    for path in ("sequential", "vectorised"):
        for split in ("train", "test"):
            ref = evaluate(model, copied, ragged_fed, clients, split=split, batch_size=20, path=path)
            got = evaluate(model, models, ragged_fed, clients, split=split, batch_size=20, path=path,
                           model_of=model_of)
            assert torch.equal(got.correct, ref.correct) and torch.equal(got.n, ref.n)
            assert torch.equal(got.loss_sum, ref.loss_sum), (path, split)
    assert len(set(ref.loss_sum.tolist())) > 3  # the rows differ: a wrong model would show
    for bad, said in (([0, 1], "7 integer rows"), (model_of + 1, "in 0..2"), (model_of - 1, "in 0..2"),
                      (model_of.astype(float), "integer rows")):
        with pytest.raises(ValueError, match=f"model_of must be .*{said}"):
            evaluate(model, models, ragged_fed, clients, model_of=bad)
    with pytest.raises(ValueError, match=r"has shape \(3, .*expected \(7, .*one row per selected client"):
        evaluate(model, models, ragged_fed, clients)  # without model_of: one row per client


# ----------------------------------------------------------------------------- it learns
@pytest.mark.parametrize("arch", ["logistic", "mlp"])
def test_fedavg_on_ten_digits_clients_learns(digits_fed, arch):
    model = SMALL_MODELS[arch]()
    global_ = init_params(model, seed=0)
    rng = np.random.default_rng(0)
    for t in range(5):
        chosen = np.sort(rng.choice(10, 5, replace=False))
        res = local_train(model, broadcast(global_, 5), digits_fed, chosen, epochs=2, seed=0, round_idx=t,
                          lr=1e-2)
        global_ = weighted_average(res.params, res.n_samples)
    ev = evaluate(model, broadcast(global_, 10), digits_fed, range(10))
    accuracy = ev.correct.sum().item() / ev.n.sum().item()
    assert accuracy > 0.8, accuracy  # chance is 0.1


# ----------------------------------------------------------------------------- validation
def test_bad_inputs_fail_fast_with_the_parameter_named(ragged_fed, digits):
    model = SMALL_MODELS["logistic"]()
    start = broadcast(init_params(model, seed=0), 2)
    with pytest.raises(ValueError, match="client ids"):
        local_train(model, start, ragged_fed, [0, 6], epochs=1, seed=0)
    with pytest.raises(ValueError, match="shape"):
        local_train(model, start, ragged_fed, [0, 1, 2], epochs=1, seed=0)
    with pytest.raises(ValueError, match="epochs"):
        local_train(model, start, ragged_fed, [0, 1], epochs=0, seed=0)
    with pytest.raises(ValueError, match="prox_center"):
        local_train(model, start, ragged_fed, [0, 1], epochs=1, seed=0, prox_mu=0.1)
    with pytest.raises(ValueError, match="path"):
        local_train(model, start, ragged_fed, [0, 1], epochs=1, seed=0, path="gpu")
    with pytest.raises(ValueError, match="missing"):
        local_train(model, {"1.weight": start["1.weight"]}, ragged_fed, [0, 1], epochs=1, seed=0)
    x, y = digits
    with pytest.raises(ValueError, match="indices outside"):
        Federation.from_arrays(x, y, [np.array([0, len(y)])], [np.array([1])], CPU)
    with pytest.raises(ValueError, match="same K"):
        Federation.from_arrays(x, y, [np.array([0])], [], CPU)


@pytest.mark.parametrize("arch", ["logistic", "cnn"])
def test_empty_clients_beside_several_trained_ones_in_one_chunk(digits, arch):
    """Clients without samples sort last in a chunk; the others' results and losses are
    those they get alone (dense kernel and vmap variant)."""
    x, y = digits
    parts = [np.arange(0, 40), np.arange(0), np.arange(40, 75), np.arange(0)]
    fed = Federation.from_arrays(x, y, parts, [np.arange(100, 110)] * 4, CPU)
    model = SMALL_MODELS[arch]()
    start = broadcast(init_params(model, seed=0), 4)
    res = local_train(model, start, fed, range(4), epochs=2, seed=0, path="vectorised")
    assert res.n_samples.tolist() == [40, 0, 35, 0]
    assert torch.isnan(res.mean_loss[[1, 3]]).all() and torch.isfinite(res.mean_loss[[0, 2]]).all()
    for row in (0, 2):
        alone = local_train(model, {n: t[row:row + 1] for n, t in start.items()}, fed, [row], epochs=2,
                            seed=0, path="vectorised")
        assert_states_close({n: t[row:row + 1] for n, t in res.params.items()}, alone.params, atol=1e-6)
        torch.testing.assert_close(res.mean_loss[row:row + 1], alone.mean_loss)
    for row in (1, 3):
        assert_states_equal({n: t[row] for n, t in res.params.items()}, {n: t[row] for n, t in start.items()})

