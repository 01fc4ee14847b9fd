"""fedlib.analysis.importance: the four models of Fig. 4, their importances and rankings."""
import numpy as np
import pandas as pd
import pytest

from fedlib.analysis import importance as imp

FEATURES = ["wpsi", "hellinger", "jensen_shannon", "emd"]


def synthetic(n=240, signal="wpsi", protocol="similarity", seed=0):
    """One feature is (a monotone function of) the target, the others pure noise."""
    rng = np.random.default_rng(seed)
    level = rng.uniform(0.0, 1.0, n) if protocol == "similarity" else np.exp(rng.uniform(-3, 4, n))
    target = np.log(level) if protocol == "dirichlet" else level
    df = pd.DataFrame({f: rng.normal(size=n) for f in FEATURES})
    df[signal] = 3.0 * target + 1.0
    return df.assign(protocol=protocol, level=level, feasible=True)


@pytest.fixture(scope="module")
def fitted():
    df = pd.concat([synthetic(signal="wpsi"), synthetic(signal="hellinger", protocol="dirichlet", seed=1)])
    return imp.metric_importance(df, seed=0)


def test_signal_feature_ranks_first_for_all_models(fitted):
    imps, scores = fitted
    rank = imp.ranking(imps, scores)
    assert rank["model"].tolist() == list(imp.MODELS) * 2
    expected = {"similarity": "wpsi", "dirichlet": "hellinger"}
    for _, r in rank.iterrows():
        assert r["first_native"] == expected[r["protocol"]], r
        assert r["first_permutation"] == expected[r["protocol"]], r
    assert (scores["r2"] > 0.8).all(), scores


def test_importances_sum_to_one_and_methods(fitted):
    imps, _ = fitted
    sums = imps.groupby(["protocol", "model", "kind"])["importance"].sum()
    assert np.allclose(sums, 1.0)
    assert (imps["importance"] >= 0).all()
    native = imps[imps["kind"] == "native"].drop_duplicates("model").set_index("model")["method"]
    assert native.to_dict() == {"lightgbm": "gain", "svm": "permutation", "mlp": "permutation",
                                "tree": "impurity"}


def test_log_target_for_dirichlet_only(fitted):
    _, scores = fitted
    targets = scores.drop_duplicates("protocol").set_index("protocol")["target"]
    assert targets.to_dict() == {"similarity": "level", "dirichlet": "log(level)"}
    assert set(scores["n_test"]) == {72} and set(scores["n_train"]) == {168}


def test_deterministic():
    df = synthetic(n=120)
    a = imp.metric_importance(df, seed=3, n_repeats=3)
    b = imp.metric_importance(df, seed=3, n_repeats=3)
    pd.testing.assert_frame_equal(a[0], b[0])
    pd.testing.assert_frame_equal(a[1], b[1])


def test_infeasible_rows_dropped_and_optional_feature():
    df = synthetic(n=120)
    df["emd_corrected"] = np.random.default_rng(5).normal(size=len(df))
    df.loc[:9, "feasible"] = False
    df.loc[:9, FEATURES] = np.nan
    imps, scores = imp.metric_importance(df, features=FEATURES + ["emd_corrected"], n_repeats=3)
    assert set(imps["feature"]) == set(FEATURES) | {"emd_corrected"}
    assert scores["n_train"].iloc[0] + scores["n_test"].iloc[0] == 110


def test_without_protocol_column_one_group():
    df = synthetic(n=100).drop(columns=["protocol", "feasible"])
    imps, scores = imp.metric_importance(df, n_repeats=3)
    assert set(scores["protocol"]) == {"all"} and len(scores) == 4
    assert (imp.ranking(imps)["first_native"] == "wpsi").all()


def test_single_metric_scores_and_findings(fitted):
    df = synthetic(n=150)
    single = imp.single_metric_scores(df)
    best = single.loc[single.groupby("model")["r2"].idxmax(), "feature"]
    assert (best == "wpsi").all()
    assert (single[single["feature"] != "wpsi"]["r2"] < 0.2).all()
    rank = imp.ranking(*imp.metric_importance(df, n_repeats=3))
    lines = imp.findings(rank, single)
    assert lines[0].startswith("native importance ranks wpsi first for 4/4") and "confirmed" in lines[0]
    assert "wpsi in 4/4" in lines[2]


@pytest.mark.parametrize("kwargs, match", [
    (dict(features=["nope"]), "lacks columns"),
    (dict(test_size=1.5), "test_size"),
    (dict(seed=-1), "seed"),
])
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        imp.metric_importance(synthetic(n=50), **kwargs)


def test_too_few_rows():
    with pytest.raises(ValueError, match="feasible rows"):
        imp.metric_importance(synthetic(n=6))
