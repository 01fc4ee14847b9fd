"""FedPrism's baselines IFCA, FedClust and FedAMP (fedlib.methods.ifca / fedclust / fedamp):
their rules on hand-checkable inputs, one round rebuilt from the rules, the planted groups
recovered, learning on a tiny real federation, determinism and bad hyperparameters."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fedlib.engine import broadcast, flatten_params, weighted_average
from fedlib.evaluation import cluster_recovery
from fedlib.methods import FLConfig, fedamp, fedclust, fedprox, ifca
from fedlib.methods.base import take
from fedlib.models import head_prefix
from fl_fixtures import assert_states_close, assert_states_equal, make_context, opposite_label_groups

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)

MODULES = {"ifca": ifca, "fedclust": fedclust, "fedamp": fedamp}


def final_accuracy(ctx):
    return ctx.history[-1]["global_accuracy"]


def states_equal(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ----------------------------------------------------------------------------- IFCA rules
def test_assign_clusters_argmin_ties_lowest_nan_last():
    loss = [[0.3, 0.2, np.nan, 0.5],
            [0.1, 0.2, 0.4, 0.5],
            [0.2, 0.9, np.nan, 0.4]]
    assert ifca.assign_clusters(loss).tolist() == [1, 0, 1, 2]
    assert ifca.assign_clusters([[np.nan, 0.1]]).tolist() == [0, 0]  # one model: everyone picks it
    with pytest.raises(ValueError, match=r"loss must be a \(k, M\) matrix"):
        ifca.assign_clusters([0.1, 0.2])


def test_aggregate_clusters_averages_each_models_pickers_by_samples():
    models = {"w": torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])}
    trained = {"w": torch.tensor([[10.0, 0.0], [20.0, 4.0], [30.0, 8.0]])}
    out = ifca.aggregate_clusters(models, trained, choice=[2, 0, 2], n_samples=[1, 2, 3])
    expected = torch.tensor([[20.0, 4.0], [2.0, 2.0], [(10 + 3 * 30) / 4, 24 / 4]])
    torch.testing.assert_close(out["w"], expected)
    assert models["w"][0].tolist() == [1.0, 1.0]  # the input is not modified


# ----------------------------------------------------------------------------- FedClust rules
def test_match_clusters_hungarian_by_hand():
    e = np.eye(3)
    assert fedclust.match_clusters(e[[2, 0, 1]], e).tolist() == [2, 0, 1]
    assert fedclust.match_clusters(np.array([[0, 2.0, 0], [0.5, 0, 0]]), e).tolist() == [1, 0]  # cosine, not scale
    assert fedclust.match_clusters(e[[1, 2, 0]], e[:2]).tolist() == [1, 2, 0]  # e3 is new: fresh id 2
    assert fedclust.match_clusters(e[[1, 2, 0]], None).tolist() == [0, 1, 2]  # first clustering: identity
    # the optimum of the assignment, not a greedy one: greedy gives row 0 → 0 (0.99), row 1 → 1 (0.0)
    old = np.array([[1.0, 0.0], [0.0, 1.0]])
    new = np.array([[0.99, 0.14], [1.0, 0.0]])
    assert fedclust.match_clusters(new, old).tolist() == [1, 0]
    with pytest.raises(ValueError, match="old_centroids must be"):
        fedclust.match_clusters(e, np.eye(2))


def test_classifier_features_flatten_and_normalise():
    head = {"4.weight": torch.tensor([[[3.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]]),
            "4.bias": torch.tensor([[0.0, 4.0], [0.0, 0.0]])}
    f = fedclust.classifier_features(head)
    np.testing.assert_allclose(f, [[0.6, 0, 0, 0, 0, 0.8], [0, 0, 0, 0, 0, 0]])
    assert f.dtype == np.float64
    np.testing.assert_allclose(fedclust.cosine_matrix([[1, 0], [1, 1]], [[2, 0]]), [[1], [1 / np.sqrt(2)]])


# ----------------------------------------------------------------------------- FedAMP rules
def test_heurfedamp_attention_by_hand_on_three_clients():
    """HeurFedAMP (Huang et al.'s rule for deep networks, the default): ξ_ii = ξ, the peers
    share 1 − ξ in proportion to exp(σ·cos(w_i, w_j))."""
    w = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])  # cos: (0,1) = 1/√2, (0,2) = 0, (1,2) = 1/√2
    sigma, s = 2.0, 0.4
    xi = fedamp.attention(w, sigma, s)  # the default rule
    e = np.exp(sigma / np.sqrt(2))  # exp(σ·cos) for the pairs at 45°; exp(0) = 1 for the orthogonal pair
    expected = np.array([[s, (1 - s) * e / (e + 1), (1 - s) * 1 / (e + 1)],
                         [(1 - s) / 2, s, (1 - s) / 2],  # both peers at 45°: an even split
                         [(1 - s) * 1 / (e + 1), (1 - s) * e / (e + 1), s]])
    np.testing.assert_allclose(xi, expected, rtol=1e-12)
    np.testing.assert_allclose(xi.sum(1), 1.0)
    # the same numbers: row 0 is [0.4, 0.6·4.1133/5.1133, 0.6/5.1133] = [0.4, 0.48266, 0.11734]
    np.testing.assert_allclose(xi[0], [0.4, 0.48266, 0.11734], atol=5e-6)
    # equal similarities: an even split of 1 − ξ
    np.testing.assert_allclose(fedamp.heur_attention(np.ones((3, 3)), sigma, s),
                               [[0.4, 0.3, 0.3], [0.3, 0.4, 0.3], [0.3, 0.3, 0.4]])
    # scale-free (cosine): scaling a model does not move the weights; σ sharpens them
    np.testing.assert_allclose(fedamp.attention(w * [[3.0], [1.0], [0.5]], sigma, s), xi, rtol=1e-12)
    sharp = fedamp.attention(w, 25.0, s)
    assert sharp[0, 1] > xi[0, 1] and sharp[0, 1] == pytest.approx(0.6, abs=1e-6)
    np.testing.assert_allclose(fedamp.attention([[5.0, 1.0]], 1.0, 0.3), [[1.0]])  # alone: itself
    with pytest.raises(ValueError, match=r"weights_flat must be models with nonzero weights"):
        fedamp.attention([[0.0, 0.0], [1.0, 0.0]], 1.0, 0.5)
    with pytest.raises(ValueError, match=r"cosines must be a finite \(M, M\) matrix"):
        fedamp.heur_attention([[1.0, np.nan], [0.0, 1.0]], 1.0, 0.5)
    assert fedamp.Hyper().attention == "heurfedamp"
    assert fedamp.INFO.recorded_defaults == {"attention": "softmax", "sigma": 1.0}  # what records without the keys ran


def _planted(rng, groups=(5, 5), dim=400, base_norm=23.6, step=0.54, noise=0.25):
    """Models w_i = w_0 + ΔW_i as after one round from a common start (‖w_0‖ = 23.6, ‖ΔW‖ ≈ 0.54,
    the FMNIST numbers of issue 69): ΔW_i = step·(d_g + noise·ε_i)/‖·‖ with d_g one direction per
    planted group g. Returns (W (M, dim), group (M,))."""
    w0 = rng.standard_normal(dim)
    w0 *= base_norm / np.linalg.norm(w0)
    dirs = rng.standard_normal((len(groups), dim))
    group = np.repeat(np.arange(len(groups)), groups)
    upd = dirs[group] / np.sqrt(dim) + noise * rng.standard_normal((len(group), dim)) / np.sqrt(dim)
    upd *= step / np.linalg.norm(upd, axis=1, keepdims=True)
    return w0 + upd, group


def _same_share(xi, group):
    """Mean over clients of the share of the peer weight on the client's own planted group."""
    out = []
    for i in range(len(group)):
        peers = np.arange(len(group)) != i
        p = xi[i, peers] / xi[i, peers].sum()
        out.append(p[group[peers] == group[i]].sum())
    return float(np.mean(out))


def test_heurfedamp_default_sigma_separates_planted_groups_sigma_1_is_a_plain_average():
    """Issue 69: after a round from a common start the cosines are all ≈ 1, so σ = 1 (PFLlib's,
    every record before issue 69) gives a plain average of the peers; the default σ =
    1/median(1 − cos) gives each client's own group measurably more than its uniform share."""
    w, group = _planted(np.random.default_rng(0))
    cos = (w @ w.T) / np.outer(np.linalg.norm(w, axis=1), np.linalg.norm(w, axis=1))
    assert cos[np.triu_indices(10, 1)].min() > 0.999  # near-parallel models
    uniform = 4 / 9  # 4 same-group peers among 9
    assert fedamp.Hyper().sigma == "median"
    xi, sigma = fedamp.attention(w, "median", 0.5, return_sigma=True)
    d = 1 - cos
    assert sigma == pytest.approx(1 / np.median(d[np.triu_indices(10, 1)]), rel=1e-9) and sigma > 100
    np.testing.assert_allclose(xi.sum(1), 1.0)
    assert _same_share(xi, group) > uniform + 0.15  # well above uniform (about 0.66 here)
    spread = fedamp.attention_spread(xi)
    assert spread["max_over_uniform_mean"] > 1.3 and spread["entropy_ratio_mean"] < 0.97
    # the σ = 1 reading (and FLGo's σ = 25) on the same models: nearly uniform, the defect as documented
    one = fedamp.attention(w, fedamp.READINGS["sigma_1"]["sigma"], 0.5)
    assert abs(_same_share(one, group) - uniform) < 1e-3
    np.testing.assert_allclose(one[~np.eye(10, dtype=bool)], 0.5 / 9, rtol=2e-3)
    s1 = fedamp.attention_spread(one)
    assert s1["max_over_uniform_max"] < 1.002 and s1["entropy_ratio_min"] > 0.99999
    flgo = fedamp.Hyper(**fedamp.READINGS["flgo"])
    x25 = fedamp.attention(w, flgo.sigma, flgo.self_weight)
    np.testing.assert_allclose(np.diag(x25), 1 / 10)  # ξ = 1/N over the round's M = 10 clients
    assert abs(_same_share(x25, group) - uniform) < 0.02


def test_median_sigma_is_scale_free_and_skips_untrained_pairs():
    rng = np.random.default_rng(1)
    d = rng.uniform(1e-5, 1e-3, (6, 6))
    d = (d + d.T) / 2
    np.fill_diagonal(d, 0.0)
    x1 = fedamp.heur_attention(1 - d, "median", 0.5)
    x2 = fedamp.heur_attention(1 - 7.0 * d, "median", 0.5)  # every (1 − cos) times 7: the same weights
    np.testing.assert_allclose(x1, x2, rtol=1e-6)
    assert fedamp.median_sigma(d) == pytest.approx(1 / np.median(d[np.triu_indices(6, 1)]))
    # clients still at the initial model (1 − cos = 0 between them) stay out of the median
    z = np.zeros((4, 4))
    z[0, 1:] = z[1:, 0] = [2.0, 4.0, 6.0]
    assert fedamp.median_sigma(z) == pytest.approx(1 / 4.0)
    assert fedamp.median_sigma(np.zeros((3, 3))) == 1.0  # all equal: σ = 1, weights uniform anyway
    np.testing.assert_allclose(fedamp.attention_spread(np.full((3, 3), 1 / 3))["entropy_ratio_mean"], 1.0)
    one_peer = fedamp.attention_spread([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.25, 0.25, 0.5]])
    assert one_peer["max_over_uniform_max"] == pytest.approx(2.0) and one_peer["entropy_ratio_min"] == 0.0
    assert fedamp.attention_spread(np.eye(2))["entropy_ratio_mean"] is None  # one peer: no spread to measure
    with pytest.raises(ValueError, match=r"sigma must be a number > 0 or 'median'"):
        fedamp.Hyper(sigma="auto")
    with pytest.raises(ValueError, match=r"self_weight must be a number in \[0, 1\] or '1/N'"):
        fedamp.Hyper(self_weight="1/M")
    with pytest.raises(ValueError, match="sigma must be"):
        fedamp.Hyper(sigma=0.0)


def test_softmax_attention_by_hand_rows_sum_to_one_closer_gets_more():
    """The workbook's earlier default (``attention='softmax'``), kept for its records."""
    w = np.array([[0.0], [1.0], [3.0]])
    sigma, s = 2.0, 0.4
    xi = fedamp.attention(w, sigma, s, "softmax")

    def row(d):  # the peers' weights from their squared distances
        e = np.exp(-np.asarray(d) / sigma)
        return (1 - s) * e / e.sum()

    expected = np.array([[s, *row([1, 9])],
                         [row([1, 4])[0], s, row([1, 4])[1]],
                         [*row([9, 4]), s]])
    np.testing.assert_allclose(xi, expected, rtol=1e-12)
    np.testing.assert_allclose(xi.sum(1), 1.0)
    assert xi[0, 1] > xi[0, 2] and xi[2, 1] > xi[2, 0]  # the closer peer gets more
    sym = fedamp.attention(torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, -1.0]]), 1.0, 0.2, "softmax")
    assert sym[0, 1] == pytest.approx(0.4) and sym[0, 2] == pytest.approx(0.4)  # equal distances
    np.testing.assert_allclose(fedamp.attention([[5.0, 1.0]], 1.0, 0.3, "softmax"), [[1.0]])  # alone: itself


def test_paper_attention_by_hand_is_huang_et_al_a_prime():
    # ξ_ij = α·e^{−d²/σ}/σ off the diagonal, ξ_ii = 1 − Σ_j ξ_ij (Huang et al.; PFLlib serveramp.py)
    w = np.array([[0.0], [1.0], [3.0]])
    sigma, alpha = 2.0, 0.3
    xi = fedamp.attention(w, sigma, 0.5, "paper", alpha)
    a = lambda d2: alpha * np.exp(-d2 / sigma) / sigma  # noqa: E731
    expected = np.array([[0, a(1), a(9)], [a(1), 0, a(4)], [a(9), a(4), 0]])
    np.fill_diagonal(expected, 1 - expected.sum(1))
    np.testing.assert_allclose(xi, expected, rtol=1e-12)
    np.testing.assert_allclose(xi.sum(1), 1.0)
    # 'median' keeps σ = 1 for A′ (not normalised: σ = the median d² would give weights α·e^{-1}/0.04 each)
    close = np.array([[0.0], [0.2], [0.4]])
    xi_m, s_m = fedamp.attention(close, "median", 0.5, "paper", alpha, return_sigma=True)
    assert s_m == 1.0
    np.testing.assert_allclose(xi_m, fedamp.attention(close, 1.0, 0.5, "paper", alpha), rtol=1e-12)
    assert (np.diag(xi_m) > 0).all()
    # far apart (d² ≫ σ): every off-diagonal weight underflows, each client alone
    np.testing.assert_array_equal(fedamp.attention(np.array([[0.0], [100.0]]), 1.0, 0.5, "paper"), np.eye(2))
    # close peers: their weights sum past 1 and ξ_ii turns negative, as the paper's rule has it
    close = fedamp.attention(np.zeros((3, 1)), 1.0, 0.5, "paper", 1.0)
    assert close[0, 0] == pytest.approx(-1.0) and close[0, 1] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="rule must be one of"):
        fedamp.attention(w, 1.0, 0.5, "cosine")
    with pytest.raises(ValueError, match="attention must be one of"):
        fedamp.Hyper(attention="cosine")


def test_attention_does_not_underflow_on_large_distances():
    xi = fedamp.attention(np.array([[0.0], [100.0], [1000.0]]), 1.0, 0.5, "softmax")
    assert np.isfinite(xi).all()
    np.testing.assert_allclose(xi.sum(1), 1.0)
    assert xi[0, 1] == pytest.approx(0.5) and xi[2, 1] == pytest.approx(0.5)  # nearest peer takes 1 − s


def test_cloud_models_by_hand():
    xi = np.array([[0.5, 0.5], [0.2, 0.8]])
    u = fedamp.cloud_models(xi, {"a": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "b": torch.tensor([[[2.0]], [[0.0]]])})
    torch.testing.assert_close(u["a"], torch.tensor([[2.0, 3.0], [2.6, 3.6]]))
    torch.testing.assert_close(u["b"], torch.tensor([[[1.0]], [[0.4]]]))
    assert u["a"].dtype == torch.float32
    with pytest.raises(ValueError, match="xi must be"):
        fedamp.cloud_models(np.eye(3), {"a": torch.zeros(2, 1)})


def test_the_proximal_term_is_squared_with_its_gradient_on_fedamps_path():
    """FedAMP's call: start = centre = u. The first full-batch SGD step is the plain one (the
    pull is zero at the centre); the second differs from the plain one by −lr·μ·(w1 − u),
    the gradient of (μ/2)‖w − u‖² with μ = λ/α — towards the centre."""
    ctx = make_context(n_clients=4)
    ctx = dataclasses.replace(ctx, cfg=FLConfig(local_epochs=1, fraction=1.0, lr=0.1, batch_size=100_000,
                                                optimizer="sgd"))
    clients = np.array([0, 2])
    u = broadcast(ctx.init_state(), 2)
    u = {k: v + 0.05 * torch.randn(v.shape, generator=torch.Generator().manual_seed(1)) for k, v in u.items()}
    hp = fedamp.Hyper(lam=0.6, alpha=0.2)
    mu = hp.lam / hp.alpha
    w1 = ctx.train(u, clients, 0, epochs=1, prox_center=u, prox_mu=mu).params
    w1_plain = ctx.train(u, clients, 0, epochs=1).params
    assert_states_close(w1, w1_plain, atol=1e-7)
    w2 = ctx.train(u, clients, 0, epochs=2, prox_center=u, prox_mu=mu).params
    w2_plain = ctx.train(u, clients, 0, epochs=2).params
    for k in u:
        torch.testing.assert_close(w2[k] - w2_plain[k], -0.1 * mu * (w1[k] - u[k]), atol=1e-6, rtol=1e-3)
        assert float(((w2[k] - w2_plain[k]) * (u[k] - w1[k])).sum()) > 0


# ----------------------------------------------------------------------------- one round rebuilt
def test_ifca_round_is_argmin_train_and_average_of_pickers():
    ctx = make_context(rounds=1)
    out = ifca.run(ctx, ifca.Hyper(n_clusters=3))
    ref = make_context(rounds=1)
    models = ref.init_states(3, "ifca/init")
    clients = np.asarray(out.info["selected"][0])
    loss, _, _ = ref.loss_matrix(models, clients, split="train")
    choice = np.argmin(loss, axis=0)
    assert out.info["choices"][0] == choice.tolist()
    res = ref.train(take(models, choice), clients, 0)
    for g in range(3):
        rows = np.flatnonzero(choice == g)
        unchanged = {k: v[g] for k, v in models.items()}
        expected = weighted_average(take(res.params, rows), res.n_samples[rows]) if rows.size else unchanged
        assert_states_close({k: v[g] for k, v in out.models.items()}, expected)
    final, _, _ = ref.loss_matrix(out.models, np.arange(10), split="train")
    assert out.assignment.tolist() == np.argmin(final, axis=0).tolist() == out.info["cluster_of_client"]
    assert out.info["cluster_sizes"] == np.bincount(out.assignment, minlength=3).tolist()


def test_fedclust_round_clusters_average_members_and_global_for_the_rest():
    ctx = make_context(rounds=1, fraction=0.5)  # 5 of 10 clients: 5 never clustered
    c = 2
    out = fedclust.run(ctx, fedclust.Hyper(n_clusters=c))
    clients = np.asarray(out.info["selected"][0])
    ids = np.asarray(out.info["clusters"][0])
    ref = make_context(rounds=1, fraction=0.5)
    res = ref.train(broadcast(ref.init_state(), len(clients)), clients, 0)
    n = res.n_samples.double()
    for g in np.unique(ids):
        rows = np.flatnonzero(ids == g)
        assert_states_close({k: v[g] for k, v in out.models.items()}, weighted_average(take(res.params, rows), n[rows]))
    assert_states_close({k: v[c] for k, v in out.models.items()}, weighted_average(res.params, n))
    # the clusters are K-Means's: each member nearer (cosine) its own centroid than the other one
    prefix = head_prefix(ref.model)
    f = fedclust.classifier_features({k: v for k, v in res.params.items() if k.startswith(prefix)})
    assert set(ids.tolist()) == {0, 1}
    cent = np.stack([f[ids == g].mean(0) for g in range(c)])
    d = ((f[:, None, :] - cent[None]) ** 2).sum(-1)
    assert (d.argmin(1) == ids).all()
    coc = np.asarray(out.info["cluster_of_client"])
    others = np.setdiff1d(np.arange(10), clients)
    assert coc[clients].tolist() == ids.tolist() and (coc[others] == -1).all()
    assert (out.assignment[others] == c).all() and out.assignment[clients].tolist() == ids.tolist()
    assert out.info["n_unclustered"] == 5


@pytest.mark.parametrize("rule,sigma", [(r, 5.0) for r in fedamp.ATTENTIONS] + [("heurfedamp", "median")])
def test_fedamp_rounds_are_attention_cloud_and_proximal_training(rule, sigma):
    ctx = make_context(rounds=2, fraction=0.5)
    hp = fedamp.Hyper(sigma=sigma, self_weight=0.3, lam=0.5, alpha=2.0, attention=rule)
    out = fedamp.run(ctx, hp)
    ref = make_context(rounds=2, fraction=0.5)
    names = [n for n, _ in ref.model.named_parameters()]
    local = broadcast(ref.init_state(), 10)
    for t, clients in enumerate(out.info["selected"]):
        clients = np.asarray(clients)
        w = take(local, clients)
        xi, s = fedamp.attention(flatten_params(w, names), hp.sigma, hp.self_weight, rule, hp.alpha,
                                 return_sigma=True)
        assert out.info["attention_spread"][t] == {"round": t + 1, "sigma": s, **fedamp.attention_spread(xi)}
        u = {k: torch.tensordot(torch.as_tensor(xi), v.double(), dims=1).float() for k, v in w.items()}
        res = ref.train(u, clients, t, prox_center=u, prox_mu=0.25)
        for k in local:
            local[k][torch.as_tensor(clients)] = res.params[k]
    assert_states_close(out.models, local, atol=1e-6)
    never = np.setdiff1d(np.arange(10), np.concatenate(out.info["selected"]))
    assert out.info["never_selected"] == never.tolist()
    assert_states_equal(take(out.models, never), broadcast(ref.init_state(), len(never)))
    assert out.assignment.tolist() == list(range(10)) == out.info["cluster_of_client"]
    assert out.info["mu"] == 0.25


def test_fedamp_proximal_strength_reaches_training():
    a = fedamp.run(make_context(rounds=2), fedamp.Hyper(lam=0.0))
    b = fedamp.run(make_context(rounds=2), fedamp.Hyper(lam=1.0))
    assert not states_equal(a.models, b.models)


# ----------------------------------------------------------------------------- planted groups
@pytest.fixture(scope="module")
def fedavg_on_opposite_groups():
    ctx, _ = opposite_label_groups()
    fedprox.run(ctx, fedprox.Hyper(mu=0.0))
    return final_accuracy(ctx)


def test_ifca_recovers_planted_groups(fedavg_on_opposite_groups):
    ctx, group = opposite_label_groups()
    out = ifca.run(ctx, ifca.Hyper(n_clusters=2))
    assert cluster_recovery(out.assignment, group) == 1.0
    assert out.info["cluster_of_client"] == out.assignment.tolist()
    assert sorted(out.info["cluster_sizes"]) == [5, 5]
    assert fedavg_on_opposite_groups < 0.6 and final_accuracy(ctx) > 0.9


@pytest.mark.parametrize("recluster", ["every_round", "once"])
def test_fedclust_separates_planted_groups_with_stable_identities(recluster, fedavg_on_opposite_groups):
    ctx, group = opposite_label_groups()
    out = fedclust.run(ctx, fedclust.Hyper(n_clusters=2, recluster=recluster))
    coc = np.asarray(out.info["cluster_of_client"])
    assert (coc >= 0).all() and cluster_recovery(coc, group) == 1.0
    # Hungarian matching keeps every client's identity across the 10 reclusterings
    assert all(r == out.info["clusters"][0] for r in out.info["clusters"])
    assert final_accuracy(ctx) > fedavg_on_opposite_groups + 0.2


def test_fedclust_once_fixes_clusters_and_places_newcomers():
    ctx = make_context(rounds=4, fraction=0.3)
    out = fedclust.run(ctx, fedclust.Hyper(n_clusters=2, recluster="once"))
    seen = {}
    for clients, ids in zip(out.info["selected"], out.info["clusters"]):
        for k, g in zip(clients, ids):
            assert seen.setdefault(k, g) == g  # a client's cluster never changes
    assert set(seen.values()) <= {0, 1} and len(seen) > 3  # newcomers after round 0 got a cluster


# ----------------------------------------------------------------------------- all three
@pytest.mark.parametrize("name", list(MODULES))
def test_learns_on_a_tiny_federation(name):
    ctx = make_context(rounds=6)
    out = MODULES[name].run(ctx, MODULES[name].Hyper())
    assert final_accuracy(ctx) > 0.35  # chance is 0.1
    correct, n = ctx.evaluate(out.models, out.assignment, predictor=out.predictor)
    assert correct.sum() / n.sum() == pytest.approx(final_accuracy(ctx))  # the history ends on the outcome
    coc = out.info["cluster_of_client"]
    assert len(coc) == 10 and all(type(g) is int for g in coc)
    assert len(ctx.history) == 6


@pytest.mark.parametrize("name", list(MODULES))
def test_same_seed_same_numbers_other_seed_other_numbers(name):
    mod = MODULES[name]
    runs = []
    for seed in (0, 0, 1):
        ctx = make_context(rounds=3, seed=seed)
        runs.append((mod.run(ctx, mod.Hyper()), ctx.history))
    (a, ha), (b, hb), (c, _) = runs
    assert states_equal(a.models, b.models) and a.info == b.info and ha == hb
    assert a.assignment.tolist() == b.assignment.tolist()
    assert not states_equal(a.models, c.models)


@pytest.mark.parametrize("name", list(MODULES))
def test_they_select_fedavgs_clients(name):
    out = MODULES[name].run(make_context(rounds=3), MODULES[name].Hyper())
    assert out.info["selected"] == fedprox.run(make_context(rounds=3), fedprox.Hyper(mu=0.0)).info["selected"]


@pytest.mark.parametrize("mod, values, match", [
    (ifca, {"n_clusters": 0}, r"n_clusters must be an integer ≥ 1, got 0"),
    (ifca, {"n_clusters": 2.0}, r"n_clusters must be an integer ≥ 1, got 2\.0"),
    (fedclust, {"n_clusters": 0}, r"n_clusters must be an integer ≥ 1, got 0"),
    (fedclust, {"recluster": "never"}, r"recluster must be one of \['every_round', 'once'\], got 'never'"),
    (fedclust, {"n_init": 0}, r"n_init must be an integer ≥ 1, got 0"),
    (fedamp, {"sigma": 0.0}, r"sigma must be a finite number > 0, got 0\.0"),
    (fedamp, {"sigma": -1}, r"sigma must be a finite number > 0, got -1"),
    (fedamp, {"self_weight": 1.5}, r"self_weight must be a finite number in \[0, 1\], got 1\.5"),
    (fedamp, {"self_weight": -0.1}, r"self_weight must be a finite number in \[0, 1\], got -0\.1"),
    (fedamp, {"lam": -0.5}, r"lam must be a finite number ≥ 0, got -0\.5"),
    (fedamp, {"alpha": 0}, r"alpha must be a finite number > 0, got 0"),
    (fedamp, {"sigma": "1"}, r"sigma must be a number > 0 or 'median' .*, got '1'"),
])
def test_bad_hyper(mod, values, match):
    with pytest.raises(ValueError, match=match):
        mod.Hyper(**values)


def test_defaults_and_grids():
    assert ifca.Hyper().n_clusters == 5 and fedclust.Hyper().n_clusters == 5
    assert fedclust.Hyper().recluster == "every_round"
    assert (fedamp.Hyper().sigma, fedamp.Hyper().lam, fedamp.Hyper().alpha) == ("median", 1.0, 1.0)  # σ per round (issue 69); λ, α: PFLlib
    assert ifca.GRID == fedclust.GRID == fedamp.GRID == {}
    for mod in MODULES.values():
        assert all(callable(getattr(mod, n)) or n in ("NAME", "GRID", "ATTENTIONS", "SIGMA_MEDIAN", "SELF_WEIGHT_1_N", "READINGS") for n in mod.__all__)
