"""workbook.importance: the four models of Fig. 4, their importances and rankings."""
import numpy as np
import pandas as pd
import pytest

from workbook import importance as imp

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
        assert r["first_own"] == expected[r["protocol"]], r
        assert r["first_permutation"] == expected[r["protocol"]], r
    assert (scores["r2"] > 0.8).all(), scores


def test_importances_sum_to_one_and_methods(fitted):
    imps, _ = fitted
    sums = imps.groupby(["protocol", "model", "kind"])["importance"].sum()
    assert np.allclose(sums, 1.0)
    assert (imps["importance"] >= 0).all()
    native = imps[imps["kind"] == "own"].drop_duplicates("model").set_index("model")["method"]
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
    assert (imp.ranking(imps)["first_own"] == "wpsi").all()


def test_single_metric_scores_and_findings(fitted):
    df = synthetic(n=150)
    single = imp.single_metric_scores(df)
    best = single.loc[single.groupby("model")["r2"].idxmax(), "feature"]
    assert (best == "wpsi").all()
    assert (single[single["feature"] != "wpsi"]["r2"] < 0.2).all()
    rank = imp.ranking(*imp.metric_importance(df, n_repeats=3))
    lines = imp.findings(rank, single)
    assert lines[0].startswith("model's own importance ranks wpsi first for 4/4") and "confirmed" in lines[0]
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


# ----------------------------------------------------------------------------- presets (issue 13)
def test_workbook_is_the_default_preset_bit_for_bit(fitted):
    df = pd.concat([synthetic(signal="wpsi"), synthetic(signal="hellinger", protocol="dirichlet", seed=1)])
    imps, scores = imp.metric_importance(df, seed=0, preset="workbook")
    pd.testing.assert_frame_equal(imps, fitted[0])
    pd.testing.assert_frame_equal(scores, fitted[1])
    # LightGBM's native importance is still its booster's total gain
    lgbm = imp.make_models(0)["lightgbm"].fit(df[FEATURES].to_numpy(), df["level"].to_numpy())
    assert np.array_equal(lgbm.feature_importances_, lgbm.booster_.feature_importance(importance_type="gain"))


def test_workbook_models_are_scaled_paper_like_models_are_not():
    from lightgbm import LGBMRegressor
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.neural_network import MLPRegressor
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVR

    work, paper = imp.make_models(0, "workbook"), imp.make_models(0, "paper_like")
    assert work["lightgbm"].importance_type == "gain" and paper["lightgbm"].importance_type == "split"
    for name, cls in (("svm", SVR), ("mlp", MLPRegressor)):
        assert isinstance(work[name], TransformedTargetRegressor)
        assert isinstance(work[name].transformer, StandardScaler)
        assert isinstance(work[name].regressor.steps[0][1], StandardScaler)
        assert type(paper[name]) is cls  # raw features, raw target
        assert paper[name].get_params() == work[name].regressor.steps[1][1].get_params()
    assert isinstance(paper["lightgbm"], LGBMRegressor)
    assert paper["tree"].get_params() == work["tree"].get_params()


def test_paper_like_fits_raw_alpha_and_counts_splits():
    df = pd.concat([synthetic(signal="wpsi"), synthetic(signal="wpsi", protocol="dirichlet", seed=1)])
    imps, scores = imp.metric_importance(df, seed=0, n_repeats=3, preset="paper_like")
    assert scores.drop_duplicates("protocol").set_index("protocol")["target"].to_dict() == \
        {"similarity": "level", "dirichlet": "level"}
    native = imps[imps["kind"] == "own"].drop_duplicates("model").set_index("model")["method"]
    assert native.to_dict() == {"lightgbm": "split", "svm": "permutation", "mlp": "permutation",
                                "tree": "impurity"}
    raw = imps[(imps["model"] == "lightgbm") & (imps["kind"] == "own")]["raw"]
    assert (raw == raw.round()).all() and raw.sum() > 0  # split counts are whole numbers
    # log_target still overrides the preset
    _, logged = imp.metric_importance(df, seed=0, n_repeats=3, preset="paper_like", log_target=True)
    assert set(logged["target"]) == {"log(level)"}


def test_single_metric_scores_follow_the_preset():
    df = synthetic(n=150, protocol="dirichlet")
    work = imp.single_metric_scores(df, features=["wpsi"])
    raw = imp.single_metric_scores(df, features=["wpsi"], preset="workbook_raw_alpha")
    again = imp.single_metric_scores(df, features=["wpsi"], log_target=False)
    pd.testing.assert_frame_equal(raw, again)  # the preset's only change is the target
    assert not np.allclose(work["r2"], raw["r2"])


def test_presets_hold_the_same_choices_and_one_change_presets():
    assert {frozenset(c) for c in imp.PRESETS.values()} == {frozenset(imp.CHOICE_LABELS)}
    assert imp.one_change_presets() == {"lightgbm_importance": "workbook_split",
                                        "scale_svm_mlp": "workbook_unscaled",
                                        "log_alpha": "workbook_raw_alpha"}
    # split + unscaled is no registered preset: only the step back to workbook is listed
    assert imp.one_change_presets("workbook_split", "workbook_unscaled") == \
        {"lightgbm_importance": "workbook"}
    assert imp.one_change_presets("paper_like", "paper_like") == {}


@pytest.mark.parametrize("call", [
    lambda: imp.metric_importance(synthetic(n=50), preset="paper"),
    lambda: imp.single_metric_scores(synthetic(n=50), preset="paper"),
    lambda: imp.make_models(0, preset="paper"),
])
def test_bad_preset(call):
    with pytest.raises(ValueError,
                       match=r"^preset must be one of \['workbook', 'paper_like', .*\], got 'paper'$"):
        call()


def _rank(firsts: dict, r2=0.9) -> pd.DataFrame:
    """A hand-made ranking: protocol → the four models' first metric (same for both kinds)."""
    return pd.DataFrame([{"protocol": p, "model": m, "first_own": f, "first_permutation": f,
                          "share_own": 0.5, "share_permutation": 0.5, "r2": r2}
                         for p, fs in firsts.items() for m, f in zip(imp.MODELS, fs)])


def test_compare_presets_counts_and_verdicts():
    ranks = {
        "workbook": _rank({"dirichlet": ["wpsi", "hellinger", "emd", "hellinger"],
                           "similarity": ["hellinger"] * 4}),
        "paper_like": _rank({"dirichlet": ["wpsi"] * 4, "similarity": ["wpsi", "wpsi", "wpsi", "emd"]}),
    }
    ranks["paper_like"].loc[1, "r2"] = 0.2  # dirichlet svm ranks wpsi first with a poor fit
    table, lines = imp.compare_presets(ranks)
    assert table.columns.tolist() == ["preset", "protocol", "kind", "metric", "first", "models", "min_r2"]
    got = table.set_index(["preset", "protocol", "kind"])["first"].to_dict()
    assert got[("workbook", "dirichlet", "own")] == 1 and got[("workbook", "similarity", "own")] == 0
    assert got[("paper_like", "dirichlet", "permutation")] == 4
    assert got[("paper_like", "similarity", "own")] == 3
    assert lines[0] == ("workbook, model's own importance: wpsi ranked first by 1/4 under dirichlet, "
                        "0/4 under similarity.")
    assert lines[4] == ("Every model ranks wpsi first in every protocol (the paper's Fig. 4) under "
                        "neither 'workbook' nor 'paper_like'.")
    assert lines[5] == ("wpsi ranks first in most (protocol, model) fits under paper_like "
                        "(model's own importance, 7/8), paper_like (permutation importance, 7/8).")
    assert lines[6] == "Models ranking wpsi first under no preset, by either importance: tree (similarity)."
    assert lines[7] == ("Fits ranking wpsi first with held-out R² < 0.5: "
                        "paper_like dirichlet svm (R² 0.20; own, permutation).")
    # every model ranks it first under one preset: named
    all_first = {"paper_like": _rank({"dirichlet": ["wpsi"] * 4, "similarity": ["wpsi"] * 4})}
    _, lines = imp.compare_presets({"workbook": ranks["workbook"], **all_first})
    assert lines[4].endswith("under paper_like (model's own importance), "
                             "paper_like (permutation importance).")


def test_choice_effects_on_hand_made_rankings():
    w = ["hellinger"] * 4
    ranks = {"workbook": _rank({"dirichlet": w, "similarity": w}),
             "workbook_split": _rank({"dirichlet": ["wpsi", *w[1:]], "similarity": w}),
             "workbook_unscaled": _rank({"dirichlet": ["hellinger", "wpsi", "wpsi", "hellinger"],
                                         "similarity": ["hellinger", "wpsi", "wpsi", "hellinger"]}),
             "workbook_raw_alpha": _rank({"dirichlet": w, "similarity": w}),
             "paper_like": _rank({"dirichlet": ["wpsi", "wpsi", "wpsi", "hellinger"],
                                  "similarity": ["wpsi", "wpsi", "wpsi", "hellinger"]})}
    table, _ = imp.compare_presets(ranks)
    lines = imp.choice_effects(table)
    assert lines[0] == ("LightGBM importance gain → split alone ('workbook_split'): "
                        "wpsi first in 0 → 1 of 8 (own), 0 → 1 of 8 (permutation).")
    assert lines[1].startswith("standardised SVM/MLP inputs yes → no alone ('workbook_unscaled'): "
                               "wpsi first in 0 → 4")
    assert lines[2].startswith("log α target yes → no alone ('workbook_raw_alpha'): wpsi first in 0 → 0")
    assert lines[3] == ("all 3 choices at once ('paper_like'): "
                        "wpsi first in 0 → 6 of 8 (own), 0 → 6 of 8 (permutation).")
    assert lines[4] == ("largest single effect: standardised SVM/MLP inputs; the single effects add up "
                        "to +5 (own), +5 (permutation) against +6, +6 for all at once "
                        "(the choices interact).")


@pytest.mark.parametrize("call, match", [
    (lambda: imp.compare_presets({}), r"^rank_by_preset must be a non-empty mapping"),
    (lambda: imp.compare_presets({"workbook": _rank({"dirichlet": ["wpsi"] * 4})}, r2_floor="0.5"),
     r"^r2_floor must be a finite number, got '0\.5'$"),
    (lambda: imp.choice_effects(imp.compare_presets({"workbook": _rank({"dirichlet": ["wpsi"] * 4})})[0]),
     r"^table must be a compare_presets table holding the presets \['workbook', 'workbook_split', "
     r"'workbook_unscaled', 'workbook_raw_alpha', 'paper_like'\], got \['workbook'\]$"),
    (lambda: imp.one_change_presets("paper"), r"^base must be one of \[.*\], got 'paper'$"),
    (lambda: imp.one_change_presets("workbook", "paper"), r"^other must be one of \[.*\], got 'paper'$"),
])
def test_bad_comparison_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_compare_presets_without_r2():
    rank = _rank({"dirichlet": ["wpsi"] * 4}).drop(columns="r2")
    table, lines = imp.compare_presets({"workbook": rank})
    assert "min_r2" not in table.columns and len(lines) == 5
    assert lines[2].endswith("under workbook (model's own importance), workbook (permutation importance).")
    assert lines[4].endswith("by either importance: none.")
