"""FedProto (fedlib.methods.fedproto) and its engine piece fedlib.engine.prototypes: the server's
prototype rules by hand, class embeddings against a plain per-client loop, the pull, the
prediction wiring, one round rebuilt from the rules, learning, determinism and bad inputs."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from fedlib.engine import EmbeddingPull, NearestPrototype, broadcast
from fedlib.engine.prototypes import class_embeddings
from fedlib.methods import fedproto, make_hyper
from fedlib.methods.base import sample_clients, take
from fedlib.models import body, init_params
from fl_fixtures import digits, make_context

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)

META = torch.device("meta")


def states_equal(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ----------------------------------------------------------------------------- server rules
def test_aggregate_prototypes_plain_mean_over_clients_by_hand():
    means = torch.tensor([[[1.0, 2.0], [math.nan, math.nan], [0.0, 0.0]],   # client 0 lacks class 1
                          [[3.0, 6.0], [4.0, 0.0], [0.0, 0.0]],
                          [[5.0, 1.0], [8.0, 2.0], [0.0, 0.0]]])           # nobody holds class 2
    counts = torch.tensor([[1, 0, 0], [3, 2, 0], [6, 2, 0]])
    glob, mask = fedproto.aggregate_prototypes(means, counts)
    expected = torch.tensor([[(1 + 3 + 5) / 3, (2 + 6 + 1) / 3], [6.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(glob, expected)
    assert mask.tolist() == [True, True, False]
    # weighted by samples: class 0 = (1·[1,2] + 3·[3,6] + 6·[5,1]) / 10
    glob_s, mask_s = fedproto.aggregate_prototypes(means, counts, weighting="samples")
    torch.testing.assert_close(glob_s[0], torch.tensor([4.0, 2.6], dtype=torch.float64))
    torch.testing.assert_close(glob_s[1], torch.tensor([6.0, 1.0], dtype=torch.float64))
    assert mask_s.tolist() == [True, True, False]
    # numpy inputs work too
    g, _ = fedproto.aggregate_prototypes(np.ones((2, 1, 3), dtype=np.float32), np.array([[1], [0]]))
    assert g.tolist() == [[1.0, 1.0, 1.0]]


def test_aggregate_prototypes_rejects_bad_inputs():
    with pytest.raises(ValueError, match=r"means must be a float \(M, C, D\)"):
        fedproto.aggregate_prototypes(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"counts must be an integer array of shape \(2, 3\)"):
        fedproto.aggregate_prototypes(torch.zeros(2, 3, 4), torch.zeros(3, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="counts must be an integer array"):
        fedproto.aggregate_prototypes(torch.zeros(2, 3, 4), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="counts must be non-negative"):
        fedproto.aggregate_prototypes(torch.zeros(1, 2, 4), torch.tensor([[1, -1]]))
    with pytest.raises(ValueError, match=r"weighting must be one of \['clients', 'samples'\], got 'mean'"):
        fedproto.aggregate_prototypes(torch.zeros(1, 2, 4), torch.tensor([[1, 1]]), weighting="mean")


def test_merge_prototypes_keep_and_drop_by_hand():
    old = torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]], dtype=torch.float64)
    new = torch.tensor([[9.0, 9.0], [0.0, 0.0], [7.0, 7.0]], dtype=torch.float64)
    old_mask, new_mask = torch.tensor([True, True, False]), torch.tensor([True, False, False])
    kept, kmask = fedproto.merge_prototypes(old, old_mask, new, new_mask, "keep")
    assert kept.tolist() == [[9.0, 9.0], [2.0, 2.0], [0.0, 0.0]] and kmask.tolist() == [True, True, False]
    dropped, dmask = fedproto.merge_prototypes(old, old_mask, new, new_mask, "drop")
    assert dropped.tolist() == [[9.0, 9.0], [0.0, 0.0], [0.0, 0.0]] and dmask.tolist() == [True, False, False]
    with pytest.raises(ValueError, match="unseen must be one of"):
        fedproto.merge_prototypes(old, old_mask, new, new_mask, "stale")
    with pytest.raises(ValueError, match="new_mask must be a bool array of shape"):
        fedproto.merge_prototypes(old, old_mask, new, torch.tensor([1, 0, 0]))
    with pytest.raises(ValueError, match=r"new must be a \(C, D\) array"):
        fedproto.merge_prototypes(old, old_mask, new[:2], new_mask)


def test_server_rules_stay_on_the_prototypes_device():
    glob, mask = fedproto.aggregate_prototypes(torch.zeros(3, 4, 5, device=META),
                                               torch.zeros(3, 4, dtype=torch.int64, device=META))
    assert glob.device == META and mask.device == META and glob.shape == (4, 5)
    merged, m = fedproto.merge_prototypes(glob, mask, glob, mask)
    assert merged.device == META and m.device == META


def test_pull_weight_is_lambda_over_d_for_mse():
    assert fedproto.pull_weight(1.0, 500) == 1.0 / 500
    assert fedproto.pull_weight(0.5, 4, "sum") == 0.5
    with pytest.raises(ValueError, match="lam must be a finite number ≥ 0, got -1"):
        fedproto.pull_weight(-1, 4)
    with pytest.raises(ValueError, match="dim must be an integer ≥ 1, got 0"):
        fedproto.pull_weight(1.0, 0)
    with pytest.raises(ValueError, match="scale must be one of"):
        fedproto.pull_weight(1.0, 4, "l1")


# ----------------------------------------------------------------------------- class embeddings
def _loop_means(model, params, fed, clients, split="train"):
    """The plain reference: body() on each client's samples, one client at a time, mean per class."""
    x, y, parts = fed.split(split)
    net = body(model).eval()
    sums = np.zeros((len(clients), fed.n_classes, model[-1].in_features))
    counts = np.zeros((len(clients), fed.n_classes), dtype=np.int64)
    for i, c in enumerate(clients):
        model.load_state_dict({k: v[i] for k, v in params.items()}, strict=False)
        with torch.no_grad():
            emb = net(x[torch.as_tensor(parts[c])]).double()
        for j, label in enumerate(y[torch.as_tensor(parts[c])].tolist()):
            sums[i, label] += emb[j].tolist()
            counts[i, label] += 1
    return sums, counts


def test_class_embeddings_equal_a_plain_per_client_loop():
    ctx = make_context(protocol="pathological_clusters", level=5, n_clients=10, arch="mlp")
    params = ctx.init_states(4, "test/protos")
    clients = np.array([3, 0, 3, 7])  # a repeat: two models on client 3
    sums, counts = _loop_means(ctx.model, params, ctx.fed, clients)
    for path in ("sequential", "vectorised"):
        res = class_embeddings(ctx.model, params, ctx.fed, clients, path=path)
        assert res.path == path and res.sums.dtype == torch.float64 and res.counts.dtype == torch.int64
        assert res.counts.tolist() == counts.tolist()
        np.testing.assert_allclose(res.sums.tolist(), sums, rtol=1e-5, atol=1e-5)
        means, mask = res.means()
        assert mask.tolist() == (counts > 0).tolist()
        expected = np.where(counts[..., None] > 0, sums / np.maximum(counts, 1)[..., None], 0.0)
        np.testing.assert_allclose(means.tolist(), expected, rtol=1e-5, atol=1e-5)
    # pathological clusters: each client holds exactly its cluster's two labels
    assert ((counts > 0).sum(1) == 2).all()
    # the test split too
    ts, tc = _loop_means(ctx.model, params, ctx.fed, clients, "test")
    res = class_embeddings(ctx.model, params, ctx.fed, clients, split="test", batch_size=7)
    assert res.counts.tolist() == tc.tolist()
    np.testing.assert_allclose(res.sums.tolist(), ts, rtol=1e-5, atol=1e-5)


def test_class_embeddings_paths_agree_exactly_on_dense_and_closely_on_convolutions():
    ctx = make_context(protocol="pathological_clusters", level=5, n_clients=10, arch="mlp")
    params = ctx.init_states(10, "test/protos")
    seq = class_embeddings(ctx.model, params, ctx.fed, range(10), path="sequential", batch_size=32)
    vec = class_embeddings(ctx.model, params, ctx.fed, range(10), path="vectorised", batch_size=32,
                           max_clients_per_chunk=3)
    assert torch.equal(seq.sums, vec.sums) and torch.equal(seq.counts, vec.counts)
    x, y = digits()
    img = make_context(protocol="pathological_clusters", level=5, n_clients=10, arch="lenet5",
                       x=x.reshape(len(x), 1, 8, 8), y=y)
    params = img.init_states(10, "test/protos")
    seq = class_embeddings(img.model, params, img.fed, range(10), path="sequential")
    vec = class_embeddings(img.model, params, img.fed, range(10), path="vectorised", max_clients_per_chunk=4)
    assert seq.path == "sequential" and torch.equal(seq.counts, vec.counts)
    torch.testing.assert_close(seq.sums, vec.sums, rtol=1e-6, atol=1e-5)  # vmap'ed conv: last bits differ
    assert class_embeddings(img.model, params, img.fed, range(10)).path == "sequential"  # CPU, convolutions


def test_class_embeddings_rejects_bad_inputs():
    ctx = make_context(n_clients=4)
    params = broadcast(ctx.init_state(), 2)
    with pytest.raises(ValueError, match="batch_size must be an integer ≥ 1, got 0"):
        class_embeddings(ctx.model, params, ctx.fed, [0, 1], batch_size=0)
    with pytest.raises(ValueError, match="max_clients_per_chunk must be an integer ≥ 1"):
        class_embeddings(ctx.model, params, ctx.fed, [0, 1], max_clients_per_chunk=0)
    with pytest.raises(ValueError, match="split must be one of"):
        class_embeddings(ctx.model, params, ctx.fed, [0, 1], split="dev")
    with pytest.raises(ValueError, match="one row per selected client"):
        class_embeddings(ctx.model, params, ctx.fed, [0, 1, 2])
    with pytest.raises(ValueError, match="model must be an nn.Sequential"):
        class_embeddings(torch.nn.Linear(64, 10), {}, ctx.fed, [0])


# ----------------------------------------------------------------------------- the pull
def test_the_pull_changes_training_and_pulls_embeddings_toward_the_prototypes():
    ctx = make_context(protocol="pathological_clusters", level=5, n_clients=10, arch="mlp", local_epochs=2)
    clients = np.array([0, 1])
    start = broadcast(ctx.init_state(), 2)
    before = class_embeddings(ctx.model, start, ctx.fed, clients)
    target = torch.zeros(2, 10, 500)  # pull every class toward the origin
    mask = torch.ones(2, 10, dtype=torch.bool)

    def distance(params):  # mean squared distance of the train embeddings to their prototype (0)
        x, y, parts = ctx.fed.split("train")
        out = []
        for i, c in enumerate(clients):
            ctx.model.load_state_dict({k: v[i] for k, v in params.items()})
            with torch.no_grad():
                out.append(body(ctx.model)(x[torch.as_tensor(parts[c])]).pow(2).sum(1).mean().item())
        return np.array(out)

    plain = ctx.train(start, clients, 0)
    zero = ctx.train(start, clients, 0, embedding_pull=EmbeddingPull(torch.zeros(2), target, mask))
    pulled = ctx.train(start, clients, 0, embedding_pull=EmbeddingPull(torch.full((2,), 0.1), target, mask))
    assert states_equal(plain.params, zero.params)          # λ = 0 is no pull
    assert not states_equal(plain.params, pulled.params)    # λ > 0 changes training
    d_plain, d_pulled = distance(plain.params), distance(pulled.params)
    assert (d_pulled < 0.5 * d_plain).all(), (d_plain, d_pulled)
    assert (d_pulled < distance(start)).all()
    assert before.counts.sum() > 0


# ----------------------------------------------------------------------------- one round from the rules
@pytest.mark.parametrize("predict", ["head", "prototype"])
def test_two_rounds_rebuilt_from_the_rules(predict):
    ctx = make_context(protocol="pathological_clusters", level=5, n_clients=10, rounds=2, fraction=0.3)
    hp = fedproto.Hyper(predict=predict, lam=2.0)
    out = fedproto.run(ctx, hp)

    ref = make_context(protocol="pathological_clusters", level=5, n_clients=10, rounds=2, fraction=0.3)
    rng = ref.rng("selection/group0")
    models = broadcast(ref.init_state(), 10)
    glob, gmask = torch.zeros(10, 64, dtype=torch.float64), torch.zeros(10, dtype=torch.bool)
    for t in range(2):
        clients = sample_clients(rng, np.arange(10), 0.3)
        assert out.info["selected"][t] == clients.tolist()
        start = take(models, clients)
        if t == 0:  # no prototypes yet: plain local training
            res = ref.train(start, clients, t)
        else:  # λ / D with D = 64 (logistic: the body is the flattened input)
            pull = EmbeddingPull(torch.full((len(clients),), 2.0 / 64), glob.float().expand(len(clients), 10, 64),
                                 gmask.expand(len(clients), 10))
            res = ref.train(start, clients, t, embedding_pull=pull)
        for k in models:
            models[k] = models[k].clone()
            models[k][torch.as_tensor(clients)] = res.params[k]
        sums, counts = _loop_means(ref.model, res.params, ref.fed, clients)
        means = torch.as_tensor(sums / np.maximum(counts, 1)[..., None])
        present = torch.as_tensor(counts > 0)
        new = torch.stack([means[present[:, c], c].mean(0) if present[:, c].any() else torch.zeros(64)
                           for c in range(10)])
        glob = torch.where(present.any(0)[:, None], new, glob)
        gmask = gmask | present.any(0)
        assert out.info["prototype_classes"][t] == torch.nonzero(gmask).flatten().tolist()
    assert states_equal(out.models, models)
    assert out.assignment.tolist() == list(range(10))
    if predict == "head":
        assert out.predictor is None
    else:
        assert isinstance(out.predictor, NearestPrototype)
        torch.testing.assert_close(out.predictor.prototypes, glob.float().expand(10, 10, 64), rtol=1e-5, atol=1e-5)
        assert torch.equal(out.predictor.mask, gmask.expand(10, 10))


def test_prediction_wiring_head_and_nearest_prototype():
    ctx = make_context(protocol="pathological_clusters", level=5, n_clients=10, rounds=3)
    proto = fedproto.run(ctx, fedproto.Hyper(predict="prototype"))
    # the history's last accuracy is the outcome's predictor through ctx.evaluate
    correct, n = ctx.evaluate(proto.models, proto.assignment, predictor=proto.predictor)
    assert ctx.history[-1]["global_accuracy"] == pytest.approx(correct.sum() / n.sum())
    # nearest global prototype by hand (logistic: the embedding is the flattened input)
    x, y, parts = ctx.fed.split("test")
    p, m = proto.predictor.prototypes[0].double(), proto.predictor.mask[0]
    by_hand = []
    for c in range(10):
        e = x[torch.as_tensor(parts[c])].flatten(1).double()
        d = torch.cdist(e, p).pow(2).masked_fill(~m, math.inf)
        by_hand.append(int((d.argmin(1) == y[torch.as_tensor(parts[c])]).sum()))
    assert correct.tolist() == by_hand
    head_correct, _ = ctx.evaluate(proto.models, proto.assignment)
    assert head_correct.tolist() != correct.tolist()  # the two predictors differ
    # 'head': the clients' own classifiers, the same models for the same seed
    ctx2 = make_context(protocol="pathological_clusters", level=5, n_clients=10, rounds=3)
    head = fedproto.run(ctx2, fedproto.Hyper())
    assert head.predictor is None and states_equal(head.models, proto.models)
    assert ctx2.history[-1]["global_accuracy"] == pytest.approx(head_correct.sum() / n.sum())


def test_unseen_drop_forgets_classes_of_unsampled_clients():
    kw = dict(protocol="pathological_clusters", level=5, n_clients=10, rounds=3, fraction=0.1)
    keep = fedproto.run(make_context(**kw), fedproto.Hyper())
    drop = fedproto.run(make_context(**kw), fedproto.Hyper(unseen="drop"))
    assert keep.info["selected"] == drop.info["selected"]
    seen = set()
    for t, (ks, ds) in enumerate(zip(keep.info["prototype_classes"], drop.info["prototype_classes"])):
        assert len(ds) == 2  # one client per round holds its cluster's two labels
        seen |= set(ds)
        assert ks == sorted(seen)


# ----------------------------------------------------------------------------- learning, determinism
def test_learns_on_planted_clusters():
    for predict in ("head", "prototype"):
        ctx = make_context(protocol="pathological_clusters", level=5, n_clients=10, rounds=5)
        out = fedproto.run(ctx, fedproto.Hyper(predict=predict))
        assert ctx.history[-1]["global_accuracy"] > 0.7, predict  # chance: 0.1
        assert out.info["final_prototype_classes"] == list(range(10))
        assert out.info["pull_weight"] == 1 / 64 and out.info["predict"] == predict


def test_same_seed_same_numbers_other_seed_other():
    def go(seed):
        ctx = make_context(protocol="pathological_clusters", level=5, n_clients=10, rounds=2, seed=seed)
        out = fedproto.run(ctx, fedproto.Hyper(predict="prototype"))
        return out, ctx.history
    a, ha = go(0)
    b, hb = go(0)
    c, _ = go(1)
    assert states_equal(a.models, b.models) and ha == hb and a.info == b.info
    assert torch.equal(a.predictor.prototypes, b.predictor.prototypes)
    assert not states_equal(a.models, c.models)


def test_runs_without_direct_tensor_to_numpy(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise AssertionError("a tensor was converted to numpy directly")
    monkeypatch.setattr(torch.Tensor, "__array__", refuse)
    monkeypatch.setattr(torch.Tensor, "numpy", refuse)
    ctx = make_context(protocol="pathological_clusters", level=5, n_clients=6, rounds=2)
    out = fedproto.run(ctx, fedproto.Hyper(predict="prototype"))
    assert len(out.info["selected"]) == 2


# ----------------------------------------------------------------------------- hyperparameters
def test_defaults_and_bad_hyper_rejected():
    hp = make_hyper("fedproto", {})
    assert (hp.lam, hp.predict, hp.scale, hp.unseen, hp.weighting) == (1.0, "head", "mse", "keep", "clients")
    assert dataclasses.is_dataclass(hp) and fedproto.GRID == {}
    bad = [({"lam": -0.1}, "lam must be a finite number ≥ 0"), ({"lam": "1"}, "lam must be"),
           ({"lam": math.nan}, "lam must be"), ({"predict": "nearest"}, "predict must be one of"),
           ({"scale": "mean"}, "scale must be one of"), ({"unseen": "stale"}, "unseen must be one of"),
           ({"weighting": "n"}, "weighting must be one of")]
    for values, msg in bad:
        with pytest.raises(ValueError, match=msg):
            fedproto.Hyper(**values)
    with pytest.raises(ValueError, match="no hyperparameter"):
        make_hyper("fedproto", {"mu": 1})
