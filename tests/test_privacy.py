"""ε-DP Laplace noise on the label counts (fedlib.privacy) and what it does to the PSI methods.

The mechanism by hand (per-client reproducible noise, its scale 1/ε, clipping at zero, the
all-zero row), the two methods' ``dp_epsilon``/``dp_seed`` (None = today's results bit for bit;
the server's decisions come from the noisy counts; training still uses the real data), and
:func:`workbook.cluster_study.privacy_study` on tiny count matrices.
"""
import math

import numpy as np
import pandas as pd
import pytest

from fedlib import experiment
from workbook import cluster_study as CS
from fedlib.methods import clust_psi_pfl, make_hyper, psi_pfl
from fedlib.noniid import psi
from fedlib.privacy import SENSITIVITY, laplace_counts, noisy_label_counts, postprocess_counts, server_histograms

# Three well-separated groups of three clients (C = 3), each client a slight variation (no two
# clients with the same PSI, so a threshold at the median is not a tie that any noise breaks).
GROUPS = np.array([[90, 5, 5], [85, 9, 6], [93, 4, 3],
                   [6, 88, 6], [3, 91, 6], [10, 83, 7],
                   [5, 4, 91], [8, 7, 85], [2, 6, 92]])


# ----------------------------------------------------------------------------- the mechanism
def test_each_clients_noise_is_its_own_reproducible_stream():
    counts = GROUPS * 10
    noisy = noisy_label_counts(counts, 0.5, seed=7)
    for i in range(len(counts)):
        np.testing.assert_array_equal(noisy[i], laplace_counts(counts[i], 0.5, 7, i))
    # client 4's histogram depends only on (seed, its id, ε, its counts): other rows changing leaves it alone
    other = counts.copy()
    other[[0, 8]] = [[1, 2, 3], [0, 0, 7]]
    np.testing.assert_array_equal(noisy_label_counts(other, 0.5, 7)[4], noisy[4])
    # another seed or another client id draws other noise
    assert not np.array_equal(noisy_label_counts(counts, 0.5, 8)[4], noisy[4])
    assert not np.array_equal(laplace_counts(counts[4], 0.5, 7, 5), noisy[4])
    # the same call again: the same histograms
    np.testing.assert_array_equal(noisy_label_counts(counts, 0.5, 7), noisy)


def test_no_epsilon_returns_the_exact_counts():
    out = noisy_label_counts(GROUPS, None, 3)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, GROUPS)
    assert out is not GROUPS


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
def test_noise_scale_is_one_over_epsilon(epsilon):
    """Laplace(0, b): E|X| = b = SENSITIVITY/ε, E X = 0. Counts far from zero, so nothing is
    clipped: the noise is noisy - counts. 200 000 draws: the standard error of the mean
    |X| is b/√n ≈ 0.0022·b, so 2 % is ~9 standard errors."""
    counts = np.full((200, 1000), 1e6)
    noise = noisy_label_counts(counts, epsilon, seed=11) - counts
    b = SENSITIVITY / epsilon
    assert abs(np.abs(noise).mean() / b - 1) < 0.02
    assert abs(noise.mean()) < 0.02 * b
    # a wrong scale (ε instead of 1/ε, or 2/ε) would be far outside the tolerance
    assert not abs(np.abs(noise).mean() / (2 * b) - 1) < 0.02


def test_counts_are_clipped_at_zero():
    counts = np.zeros((50, 4))
    counts[:, 0] = 3
    noisy = noisy_label_counts(counts, 0.2, seed=1)  # scale 5: many draws below −3 and below 0
    assert noisy.min() == 0.0
    assert (noisy == 0).sum() > 0.25 * noisy.size
    raw = np.stack([np.random.default_rng([1, i]).laplace(0.0, 5.0, 4) for i in range(50)])
    expected = np.maximum(counts + raw, 0.0)
    rows = expected.sum(axis=1) > 0  # the all-clipped rows become uniform (next test)
    np.testing.assert_allclose(noisy[rows], expected[rows])


def test_a_row_clipped_to_all_zeros_becomes_uniform():
    """An empty client (zero counts, C = 2): about a quarter of the seeds draw two negative noises,
    so both counts clip to zero; the row sent is then uniform 1/C (PSI needs a non-empty row)."""
    zero = np.zeros(2)
    clipped, kept = [], []
    for seed in range(40):
        draw = np.random.default_rng([seed, 3]).laplace(0.0, 1.0, 2)
        (clipped if np.all(draw <= 0) else kept).append(seed)
    assert clipped and kept
    for seed in clipped:
        np.testing.assert_array_equal(laplace_counts(zero, 1.0, seed, 3), [0.5, 0.5])
    for seed in kept:
        out = laplace_counts(zero, 1.0, seed, 3)
        draw = np.random.default_rng([seed, 3]).laplace(0.0, 1.0, 2)
        np.testing.assert_allclose(out, np.maximum(draw, 0.0))
    # the noisy matrix has no empty row, so PSI is finite
    counts = np.zeros((40, 2))
    counts[:, 0] = 1
    noisy = noisy_label_counts(counts, 0.01, seed=0)
    assert np.all(noisy.sum(axis=1) > 0) and np.all(np.isfinite(psi(noisy)))


# ----------------------------------------------------------------------------- the server's post-processing
def test_postprocess_clip_keeps_and_round_rounds_with_an_empty_row_uniform():
    received = np.array([[0.3, 2.6, 0.0], [0.49, 0.2, 0.0], [1.5, 2.5, 7.2]])
    np.testing.assert_array_equal(postprocess_counts(received, "clip"), received)
    # np.rint: halves to even (1.5 → 2, 2.5 → 2); the row that rounds to all zeros becomes 1/C
    np.testing.assert_array_equal(postprocess_counts(received, "round"),
                                  [[0, 3, 0], [1 / 3, 1 / 3, 1 / 3], [2, 2, 7]])
    assert postprocess_counts(received, "round").dtype == np.float64


def test_server_histograms_are_the_post_processed_noisy_counts():
    counts = GROUPS * 10
    assert server_histograms(counts, None, 3, "round") is counts  # no noise: the exact counts as given
    noisy = noisy_label_counts(counts, 2.0, 3)
    np.testing.assert_array_equal(server_histograms(counts, 2.0, 3), noisy)
    np.testing.assert_array_equal(server_histograms(counts, 2.0, 3, "round"), np.rint(noisy))
    # with little noise (ε = 50: |Lap(0.02)| < 0.5 except with probability e^-25) rounding returns
    # every count exactly, zeros included, while the clipped counts differ from them
    sparse = counts.copy()
    sparse[sparse < 60] = 0
    np.testing.assert_array_equal(server_histograms(sparse, 50.0, 0, "round"), sparse)
    assert not np.array_equal(server_histograms(sparse, 50.0, 0, "clip"), sparse)


@pytest.mark.parametrize("method", ["clust_psi_pfl", "psi_pfl"])
def test_bad_dp_postprocess_is_refused(method):
    with pytest.raises(ValueError, match=r"^dp_postprocess must be one of \['clip', 'round'\], got 'rint'$"):
        make_hyper(method, {"dp_postprocess": "rint"})


def test_methods_use_the_rounded_counts_and_say_so():
    eps, seed = 0.2, 1
    labels, info = clust_psi_pfl.cluster_clients(GROUPS, clust_psi_pfl.Hyper(dp_epsilon=eps, dp_seed=seed,
                                                                             dp_postprocess="round"))
    by_hand, hand_info = clust_psi_pfl.cluster_clients(np.rint(noisy_label_counts(GROUPS, eps, seed)),
                                                       clust_psi_pfl.Hyper())
    np.testing.assert_array_equal(labels, by_hand)
    assert info == {"dp_epsilon": eps, "dp_postprocess": "round", **hand_info}
    hp = psi_pfl.Hyper(dp_epsilon=eps, dp_seed=seed, dp_postprocess="round")
    np.testing.assert_array_equal(psi_pfl.server_counts(GROUPS, hp), np.rint(noisy_label_counts(GROUPS, eps, seed)))
    # without noise the rule changes nothing (exact counts are integers already)
    exact, exact_info = clust_psi_pfl.cluster_clients(GROUPS, clust_psi_pfl.Hyper(dp_postprocess="round"))
    assert exact_info == clust_psi_pfl.cluster_clients(GROUPS, clust_psi_pfl.Hyper())[1]


# ----------------------------------------------------------------------------- the methods' hyperparameters
@pytest.mark.parametrize("method", ["clust_psi_pfl", "psi_pfl"])
@pytest.mark.parametrize("values, shown", [
    ({"dp_epsilon": 0}, "0"), ({"dp_epsilon": -1.0}, "-1.0"), ({"dp_epsilon": "1"}, "'1'"),
    ({"dp_epsilon": math.inf}, "inf"), ({"dp_epsilon": True}, "True"), ({"dp_seed": -1}, "-1"),
    ({"dp_seed": 1.5}, "1.5"),
])
def test_bad_dp_settings_are_refused_with_the_projects_message(method, values, shown):
    name = next(iter(values))
    with pytest.raises(ValueError, match=rf"^{name} must be .*, got {shown}$"):
        make_hyper(method, values)


@pytest.mark.parametrize("method", ["clust_psi_pfl", "psi_pfl"])
def test_good_dp_settings_are_accepted(method):
    hp = make_hyper(method, {"dp_epsilon": 0.5, "dp_seed": np.int64(3)})
    assert hp.dp_epsilon == 0.5 and hp.dp_seed == 3
    default = make_hyper(method)
    assert default.dp_epsilon is None and default.dp_seed == 0


def test_cluster_clients_uses_the_noisy_counts_the_server_receives():
    counts = GROUPS
    exact_labels, exact_info = clust_psi_pfl.cluster_clients(counts, clust_psi_pfl.Hyper())
    assert exact_info["tau"] == 3 and "dp_epsilon" not in exact_info
    same_labels, same_info = clust_psi_pfl.cluster_clients(counts, clust_psi_pfl.Hyper(dp_epsilon=None, dp_seed=5))
    np.testing.assert_array_equal(same_labels, exact_labels)
    assert same_info == exact_info
    for eps, seed in ((0.05, 0), (0.05, 1), (1e-3, 2)):
        labels, info = clust_psi_pfl.cluster_clients(counts, clust_psi_pfl.Hyper(dp_epsilon=eps, dp_seed=seed))
        by_hand, hand_info = clust_psi_pfl.cluster_clients(noisy_label_counts(counts, eps, seed), clust_psi_pfl.Hyper())
        np.testing.assert_array_equal(labels, by_hand)
        assert info == {"dp_epsilon": eps, **hand_info}
    # a fixed τ goes through the noisy counts too
    labels, info = clust_psi_pfl.cluster_clients(counts, clust_psi_pfl.Hyper(tau=2, dp_epsilon=1e-3))
    assert info == {"tau": 2, "tau_fixed": True, "dp_epsilon": 1e-3}


def test_server_counts_of_psi_pfl():
    hp = psi_pfl.Hyper()
    assert psi_pfl.server_counts(GROUPS, hp) is GROUPS
    noisy = psi_pfl.server_counts(GROUPS, psi_pfl.Hyper(dp_epsilon=0.3, dp_seed=4))
    np.testing.assert_array_equal(noisy, noisy_label_counts(GROUPS, 0.3, 4))


# ----------------------------------------------------------------------------- the methods' runs
def _spec(method, hyper=None, **kw):
    extra = {} if hyper is None else {"hyper": hyper}
    return experiment.RunSpec("adult", "dirichlet", 0.3, 10, 0, method, n_train=2000,
                              fl={"rounds": 1, "local_epochs": 1}, **extra, **kw)


def _results(record):
    return {k: record[k] for k in ("status", "n_train", "n_test", "correct", "global_accuracy", "history", "info")}


@pytest.fixture(scope="module")
def adult_counts():
    _, counts, _ = experiment.build_federation(_spec("clust_psi_pfl"), "cpu")
    return counts


@pytest.mark.cross_cpu
def test_clust_psi_pfl_run_without_noise_is_unchanged_and_with_tiny_epsilon_clusters_otherwise(adult_counts):
    plain = experiment.run(_spec("clust_psi_pfl"), "cpu")
    none = experiment.run(_spec("clust_psi_pfl", {"dp_epsilon": None}), "cpu")
    assert plain["status"] == "ok"
    assert _results(none) == _results(plain)
    assert "dp_epsilon" not in plain["info"]
    noisy = experiment.run(_spec("clust_psi_pfl", {"dp_epsilon": 0.01}), "cpu")
    assert noisy["info"]["dp_epsilon"] == 0.01
    assert noisy["info"]["assignment"] != plain["info"]["assignment"]
    labels, info = clust_psi_pfl.cluster_clients(noisy_label_counts(adult_counts, 0.01, 0), clust_psi_pfl.Hyper())
    assert noisy["info"]["assignment"] == labels.tolist() and noisy["info"]["tau"] == info["tau"]
    assert noisy["info"]["silhouettes"] == info["silhouettes"]  # what the server saw, not the exact counts'
    assert noisy["n_train"] == plain["n_train"]  # the clients' data is untouched
    # one cluster whatever the counts: the noise cannot change training, which uses the real data
    one = experiment.run(_spec("clust_psi_pfl", {"tau": 1}), "cpu")
    one_noisy = experiment.run(_spec("clust_psi_pfl", {"tau": 1, "dp_epsilon": 0.01, "dp_seed": 3}), "cpu")
    assert one_noisy["correct"] == one["correct"] and one_noisy["history"] == one["history"]


@pytest.mark.cross_cpu
def test_psi_pfl_run_without_noise_is_unchanged_and_selects_from_the_noisy_psi(adult_counts):
    hyper = {"percentiles": [50]}
    plain = experiment.run(_spec("psi_pfl", hyper), "cpu")
    none = experiment.run(_spec("psi_pfl", {**hyper, "dp_epsilon": None, "dp_seed": 0}), "cpu")
    assert plain["status"] == "ok"
    assert _results(none) == _results(plain)
    assert "dp_epsilon" not in plain["info"]
    noisy = experiment.run(_spec("psi_pfl", {**hyper, "dp_epsilon": 0.01, "dp_seed": 1}), "cpu")
    values = psi(noisy_label_counts(adult_counts, 0.01, 1))
    assert noisy["info"]["dp_epsilon"] == 0.01
    np.testing.assert_allclose(noisy["info"]["psi"], values, rtol=0, atol=0)
    chosen = np.flatnonzero(values <= np.percentile(values, 50)).tolist()
    assert noisy["info"]["candidates"][0]["clients"] == chosen
    assert chosen != plain["info"]["candidates"][0]["clients"]
    # the 100th percentile selects every client whatever the noise: training on the real data is unchanged
    everyone = experiment.run(_spec("psi_pfl", {"percentiles": [100]}), "cpu")
    everyone_noisy = experiment.run(_spec("psi_pfl", {"percentiles": [100], "dp_epsilon": 0.01}), "cpu")
    assert everyone_noisy["correct"] == everyone["correct"]
    assert everyone_noisy["history"] == everyone["history"]


# ----------------------------------------------------------------------------- the study
def test_privacy_study_huge_epsilon_keeps_everything_and_none_is_exact():
    df = CS.privacy_study(GROUPS, [None, 1e9], [0, 1])
    assert df[["epsilon", "noise_seed"]].values.tolist() == [[math.inf, 0], [math.inf, 1], [1e9, 0], [1e9, 1]]
    assert (df.tau == 3).all() and (df.tau_exact == 3).all()
    assert (df.ari == 1.0).all()
    assert (df.psi_kept == 1.0).all() and (df.psi_jaccard == 1.0).all()
    assert (df.zero_share == 0.0).all()
    with_zeros = GROUPS.copy()
    with_zeros[0, 1] = with_zeros[4, 2] = with_zeros[8, 0] = 0
    assert CS.privacy_study(with_zeros, [None], [0]).zero_share.iloc[0] == 3 / 27
    exact = CS.privacy_study(GROUPS, [None], [5])
    assert exact.max_silhouette.iloc[0] == df.max_silhouette.iloc[0]


def test_privacy_study_rows_are_what_the_server_computes_by_hand():
    eps, seed = 0.02, 3
    row = CS.privacy_study(GROUPS, [eps], [seed], percentile=50).iloc[0]
    noisy = noisy_label_counts(GROUPS, eps, seed)
    labels, info = clust_psi_pfl.cluster_clients(noisy, clust_psi_pfl.Hyper())
    exact_labels, _ = clust_psi_pfl.cluster_clients(GROUPS, clust_psi_pfl.Hyper())
    assert row.tau == info["tau"] and row.tau_exact == 3
    assert row.max_silhouette == max(s for s in info["silhouettes"] if s is not None)
    # ARI by hand from the contingency table (Hubert & Arabie)
    table = pd.crosstab(exact_labels, labels).values
    comb = lambda n: n * (n - 1) / 2  # noqa: E731
    index, a, b = comb(table).sum(), comb(table.sum(1)).sum(), comb(table.sum(0)).sum()
    expected_ari = (index - a * b / comb(9)) / ((a + b) / 2 - a * b / comb(9))
    assert row.ari == pytest.approx(expected_ari, abs=1e-12)
    s0 = set(np.flatnonzero(psi(GROUPS) <= np.median(psi(GROUPS))).tolist())
    s1 = set(np.flatnonzero(psi(noisy) <= np.median(psi(noisy))).tolist())
    assert row.n_selected == len(s1) and row.n_selected_exact == len(s0)
    assert row.psi_kept == len(s0 & s1) / len(s0)
    assert row.psi_jaccard == len(s0 & s1) / len(s0 | s1)


def test_privacy_study_with_rounding_recovers_the_exact_decisions_at_little_noise():
    sparse = GROUPS.copy()
    sparse[sparse < 8] = 0  # zero counts: where PSI's smoothing makes any noise matter
    clip = CS.privacy_study(sparse, [50.0], [0, 1, 2])
    rounded = CS.privacy_study(sparse, [50.0], [0, 1, 2], postprocess="round")
    assert (rounded.postprocess == "round").all() and (clip.postprocess == "clip").all()
    assert (rounded.ari == 1.0).all() and (rounded.tau == rounded.tau_exact).all()
    assert (rounded.psi_jaccard == 1.0).all()
    # the row by hand: the server's decisions on the rounded noisy counts
    row = CS.privacy_study(GROUPS, [0.05], [4], postprocess="round").iloc[0]
    _, info = clust_psi_pfl.cluster_clients(np.rint(noisy_label_counts(GROUPS, 0.05, 4)), clust_psi_pfl.Hyper())
    assert row.tau == info["tau"]


def test_privacy_summary_never_pools_two_rules():
    study = pd.concat([CS.privacy_study(GROUPS, [None, 0.01], [0, 1], postprocess=r) for r in ("clip", "round")])
    s = CS.privacy_summary(study, by=())
    assert s[["postprocess", "epsilon"]].values.tolist() == [["clip", math.inf], ["clip", 0.01],
                                                             ["round", math.inf], ["round", 0.01]]
    assert s.runs.tolist() == [2, 2, 2, 2]


def test_privacy_study_tiny_epsilon_changes_the_clusters():
    df = CS.privacy_study(GROUPS, [1e-3], [0, 1, 2])
    assert (df.ari < 1).any()
    assert (df.ari < 1).all() or (df.tau != 3).any()


def test_privacy_summary_by_hand():
    study = pd.DataFrame({"dataset": ["a"] * 4 + ["b"] * 2,
                          "epsilon": [math.inf, math.inf, 0.1, 0.1, math.inf, 1.0],
                          "tau": [3, 3, 3, 5, 2, 4], "tau_exact": [3, 3, 3, 3, 2, 2],
                          "ari": [1, 1, 0.5, 0.1, 1, 0.2], "psi_kept": [1, 1, 0.5, 1, 1, 0],
                          "psi_jaccard": [1, 1, 0.25, 0.5, 1, 0]})
    s = CS.privacy_summary(study)
    assert s[["dataset", "epsilon"]].values.tolist() == [["a", math.inf], ["a", 0.1], ["b", math.inf], ["b", 1.0]]
    assert s.runs.tolist() == [2, 2, 1, 1]
    assert s.tau_same.tolist() == [1.0, 0.5, 1.0, 0.0]
    assert s.median_tau.tolist() == [3.0, 4.0, 2.0, 4.0]
    np.testing.assert_allclose(s.mean_ari, [1.0, 0.3, 1.0, 0.2])
    np.testing.assert_allclose(s.mean_psi_kept, [1.0, 0.75, 1.0, 0.0])
    np.testing.assert_allclose(s.mean_psi_jaccard, [1.0, 0.375, 1.0, 0.0])
    assert [CS.epsilon_label(e) for e in s.epsilon] == ["∞", "0.1", "∞", "1"]
    overall = CS.privacy_summary(study.assign(zero_share=[0.5, 0.5, 0.5, 0.5, 0.2, 0.2]), by=())
    assert overall.epsilon.tolist() == [math.inf, 1.0, 0.1] and overall.runs.tolist() == [3, 1, 2]
    np.testing.assert_allclose(overall.zero_share, [0.4, 0.2, 0.5])
    np.testing.assert_allclose(overall.mean_ari, [1.0, 0.2, 0.3])


def test_privacy_grid_is_privacy_study_on_each_cell():
    from fedlib import partition as P

    labels = np.repeat(np.arange(4), 100)
    grid = CS.privacy_grid(labels, 4, {"similarity": [0.0]}, [6], [0, 1], [None, 0.1], [0], dataset_name="toy")
    assert len(grid) == 2 * 2
    assert set(grid.columns[:5]) == {"dataset", "protocol", "level", "n_clients", "seed"}
    for seed in (0, 1):
        parts = P.partition(labels, "similarity", 6, 0.0, seed)
        train, _ = P.train_test_split(parts, seed, 0.2)
        one = CS.privacy_study(P.label_counts(labels, train, 4), [None, 0.1], [0])
        got = grid[grid.seed == seed].drop(columns=["dataset", "protocol", "level", "n_clients", "seed"])
        pd.testing.assert_frame_equal(got.reset_index(drop=True), one)
    fig = CS.privacy_figure(CS.privacy_summary(grid))
    assert len(fig.axes) == 3
    import matplotlib.pyplot as plt
    plt.close(fig)


@pytest.mark.parametrize("call, name, shown", [
    (lambda: CS.privacy_study(GROUPS, [0], [0]), "epsilons", "0"),
    (lambda: CS.privacy_study(GROUPS, [], [0]), "epsilons", "[]"),
    (lambda: CS.privacy_study(GROUPS, "1", [0]), "epsilons", "'1'"),
    (lambda: CS.privacy_study(GROUPS, [None, math.inf], [0]), "epsilons", "[None, inf]"),
    (lambda: CS.privacy_study(GROUPS, [1.0], [-1]), "noise_seeds", "-1"),
    (lambda: CS.privacy_study(GROUPS, [1.0], [0, 0]), "noise_seeds", "[0, 0]"),
    (lambda: CS.privacy_study(GROUPS, [1.0], [0], percentile=101), "percentile", "101"),
    (lambda: CS.privacy_study(-GROUPS, [1.0], [0]), "counts", "array"),
    (lambda: CS.privacy_grid(np.arange(4), 4, ["similarity"], [4], [0], [1.0], [0]), "protocols", "['similarity']"),
    (lambda: CS.privacy_summary(pd.DataFrame({"x": [1]})), "study", "DataFrame"),
    (lambda: CS.privacy_study(GROUPS, [1.0], [0], postprocess="floor"), "postprocess", "'floor'"),
    (lambda: CS.privacy_grid(np.arange(4), 4, {"similarity": [0.0]}, [4], [0], [1.0], [0],
                             postprocess=["clip", "clip"]), "postprocess", "['clip', 'clip']"),
    (lambda: CS.privacy_figure(pd.DataFrame()), "summary", "DataFrame"),
])
def test_bad_study_inputs_give_the_projects_value_error(call, name, shown):
    with pytest.raises(ValueError) as info:
        call()
    msg = str(info.value)
    assert type(info.value) is ValueError and msg.startswith(f"{name} must be ") and shown in msg, msg
