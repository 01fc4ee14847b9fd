"""Which non-IID metric best predicts the non-IID level? (Fig. 4 of Clust-PSI-PFL)

The paper trains LightGBM, an SVM, an MLP and a regression tree on the metrics
(WPSI, HD, JSD, EMD) of many partitions to predict the protocol's level (Dirichlet α,
Similarity S) and compares the models' feature importances.

Choices made here (the paper does not state them)
-------------------------------------------------
* Target: log(α) for Dirichlet (α spans 0.05..50, three decades, and every metric
  varies with log α, not α), S as is for Similarity. ``log_target`` overrides.
* One seeded train/held-out split per protocol (``test_size``); R² on the held-out part.
* Importances, each normalised to sum to 1 per model:
  - ``native``: LightGBM total split **gain**, the tree's **impurity** (MSE) decrease,
    and for SVM and MLP (which have none) **permutation** importance on the held-out split;
  - ``permutation``: permutation importance on the held-out split for all four models
    (``sklearn.inspection.permutation_importance``, seeded, R² drop), a common yardstick.
  Negative permutation importances (a feature whose shuffling helps, i.e. noise) are
  clipped at 0 before normalising.
* Features: the paper's four (wpsi, hellinger, jensen_shannon, emd — EMD as FedArtML
  computes it). ``emd_corrected`` can be added through ``features``.

The metrics are strongly correlated with each other (all track the level), so
importances split between correlated features depend on the model: read the
ranking together with the held-out R², and with :func:`single_metric_scores` (the
held-out R² of each model given one metric alone), which correlation cannot blur.
"""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
import pandas as pd

__all__ = ["DEFAULT_FEATURES", "MODELS", "make_models", "metric_importance", "ranking",
           "single_metric_scores", "findings"]

DEFAULT_FEATURES = ("wpsi", "hellinger", "jensen_shannon", "emd")
"""The paper's features: WPSI, HD, JSD and (FedArtML's) EMD."""

MODELS = ("lightgbm", "svm", "mlp", "tree")
"""Model names, in the paper's order (LightGBM, SVM, MLP, regression tree)."""

NATIVE_METHOD = {"lightgbm": "gain", "svm": "permutation", "mlp": "permutation", "tree": "impurity"}
"""What the ``native`` importance of each model is."""


def make_models(seed: int = 0) -> dict:
    """The four regressors, seeded and single-threaded (reproducible).

    SVR and MLP see standardised features and a standardised target
    (``TransformedTargetRegressor``); LightGBM and the tree see raw values.

    Returns
    -------
    dict name → unfitted scikit-learn compatible estimator, keys :data:`MODELS`.
    """
    from lightgbm import LGBMRegressor
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVR
    from sklearn.tree import DecisionTreeRegressor

    def scaled(reg):
        return TransformedTargetRegressor(regressor=make_pipeline(StandardScaler(), reg),
                                          transformer=StandardScaler())

    return {
        "lightgbm": LGBMRegressor(n_estimators=200, learning_rate=0.05, num_leaves=15,
                                  min_child_samples=5, random_state=seed, deterministic=True,
                                  force_row_wise=True, n_jobs=1, verbose=-1),
        "svm": scaled(SVR(kernel="rbf", C=10.0, epsilon=0.05)),
        "mlp": scaled(MLPRegressor(hidden_layer_sizes=(32, 16), alpha=1e-3, max_iter=3000,
                                   random_state=seed)),
        "tree": DecisionTreeRegressor(min_samples_leaf=2, random_state=seed),
    }


def _native(name: str, model, x_test: np.ndarray, y_test: np.ndarray, seed: int,
            n_repeats: int) -> np.ndarray:
    """Raw native importances, shape (F,)."""
    if name == "lightgbm":
        return model.booster_.feature_importance(importance_type="gain").astype(float)
    if name == "tree":
        return model.feature_importances_.astype(float)
    return _permutation(model, x_test, y_test, seed, n_repeats)


def _permutation(model, x_test: np.ndarray, y_test: np.ndarray, seed: int, n_repeats: int) -> np.ndarray:
    """Mean drop of held-out R² when one feature is shuffled, shape (F,)."""
    from sklearn.inspection import permutation_importance

    r = permutation_importance(model, x_test, y_test, scoring="r2", n_repeats=n_repeats,
                               random_state=seed, n_jobs=1)
    return r.importances_mean.astype(float)


def _normalise(raw: np.ndarray) -> np.ndarray:
    """Clip at 0 and scale to sum 1 (all-zero → NaN)."""
    v = np.clip(np.nan_to_num(raw, nan=0.0), 0.0, None)
    total = v.sum()
    return v / total if total > 0 else np.full_like(v, np.nan)


def _check_frame(df: pd.DataFrame, target: str, features: Sequence[str]) -> None:
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"df must be a pandas DataFrame (a metric grid), got {type(df).__name__}")
    missing = [c for c in (target, *features) if c not in df.columns]
    if missing:
        raise ValueError(f"df lacks columns {missing}; it has {list(df.columns)}")
    if len(features) < 1:
        raise ValueError("features is empty: give at least one metric column")


def _fit_group(g: pd.DataFrame, target: str, features: list[str], log_target: bool,
               seed: int, test_size: float, n_repeats: int) -> tuple[list[dict], list[dict]]:
    """Fit the four models on one protocol's rows; importance and score records."""
    from sklearn.metrics import r2_score
    from sklearn.model_selection import train_test_split

    x = g[features].to_numpy(dtype=float)
    y = g[target].to_numpy(dtype=float)
    if log_target:
        if np.any(y <= 0):
            raise ValueError(f"log_target needs a positive {target!r}; found {y.min()}")
        y = np.log(y)
    if len(y) < 10:
        raise ValueError(f"only {len(y)} feasible rows: need ≥ 10 to fit and hold out; "
                         "add seeds or levels to the grid")
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_size, random_state=seed)
    imps, scores = [], []
    for name, model in make_models(seed).items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # MLP ConvergenceWarning, LightGBM feature-name notes
            model.fit(x_tr, y_tr)
            r2 = float(r2_score(y_te, model.predict(x_te)))
            r2_train = float(r2_score(y_tr, model.predict(x_tr)))
            native = _native(name, model, x_te, y_te, seed, n_repeats)
            perm = native if NATIVE_METHOD[name] == "permutation" else _permutation(
                model, x_te, y_te, seed, n_repeats)
        scores.append({"model": name, "r2": r2, "r2_train": r2_train,
                       "n_train": len(y_tr), "n_test": len(y_te),
                       "target": f"log({target})" if log_target else target})
        for kind, raw in (("native", native), ("permutation", perm)):
            method = NATIVE_METHOD[name] if kind == "native" else "permutation"
            for f, r, v in zip(features, raw, _normalise(raw)):
                imps.append({"model": name, "kind": kind, "method": method, "feature": f,
                             "raw": float(r), "importance": float(v)})
    return imps, scores


def metric_importance(df: pd.DataFrame, target: str = "level",
                      features: Sequence[str] = DEFAULT_FEATURES, seed: int = 0,
                      test_size: float = 0.3, *, log_target: bool | None = None,
                      n_repeats: int = 10, by: str = "protocol") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fit LightGBM, SVM, MLP and a regression tree to predict the level from the metrics.

    Parameters
    ----------
    df : DataFrame
        A metric grid (:func:`fedlib.analysis.metric_study.metric_grid`); rows with
        ``feasible == False`` or NaN features are dropped. One fit per value of ``by``
        (all rows together when ``df`` lacks that column).
    target : str, default 'level'
        Column to predict.
    features : sequence of str, default the paper's four
        Metric columns used as features (add 'emd_corrected' to include it).
    seed : int
        Seeds the split, the models and the permutations.
    test_size : float in (0, 1)
        Held-out share of the rows.
    log_target : bool, optional
        Predict log(target). Default: True for the 'dirichlet' group (α spans
        0.05..50), False otherwise.
    n_repeats : int
        Shuffles per feature in permutation importance.
    by : str
        Column whose groups get separate fits (the paper: one per protocol).

    Returns
    -------
    importances : DataFrame
        ``<by>, model, kind ('native'|'permutation'), method ('gain'|'impurity'|
        'permutation'), feature, raw, importance`` — ``importance`` sums to 1 per
        (group, model, kind).
    scores : DataFrame
        ``<by>, model, r2 (held-out), r2_train, n_train, n_test, target``.
    """
    features = list(features)
    _check_frame(df, target, features)
    if not 0.0 < test_size < 1.0:
        raise ValueError(f"test_size must be in (0, 1), got {test_size!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    data = df[df["feasible"].astype(bool)] if "feasible" in df.columns else df
    data = data.dropna(subset=[target, *features])
    groups = data.groupby(by, sort=False) if by in data.columns else [("all", data)]
    imps, scores = [], []
    for key, g in groups:
        key = key[0] if isinstance(key, tuple) else key
        log = (key == "dirichlet") if log_target is None else bool(log_target)
        i, s = _fit_group(g, target, features, log, int(seed), test_size, n_repeats)
        imps += [{by: key, **r} for r in i]
        scores += [{by: key, **r} for r in s]
    return pd.DataFrame(imps), pd.DataFrame(scores)


def ranking(importances: pd.DataFrame, scores: pd.DataFrame | None = None,
            by: str = "protocol") -> pd.DataFrame:
    """The metric ranked first by each model, per group and importance kind.

    Parameters
    ----------
    importances : DataFrame from :func:`metric_importance`.
    scores : DataFrame from :func:`metric_importance`, optional
        If given, the held-out R² is joined as column ``r2``.
    by : str
        The grouping column used in :func:`metric_importance`.

    Returns
    -------
    DataFrame ``<by>, model, first_native, share_native, first_permutation,
    share_permutation[, r2]``, in :data:`MODELS` order per group.
    """
    keys = [by] if by in importances.columns else []
    top = (importances.dropna(subset=["importance"])
           .sort_values("importance", ascending=False, kind="stable")
           .groupby([*keys, "model", "kind"], sort=False).head(1))
    wide = top.pivot_table(index=[*keys, "model"], columns="kind",
                           values=["feature", "importance"], aggfunc="first")
    out = pd.DataFrame(index=wide.index)
    for kind in ("native", "permutation"):
        out[f"first_{kind}"] = wide[("feature", kind)]
        out[f"share_{kind}"] = wide[("importance", kind)].astype(float)
    out = out.reset_index()
    if scores is not None:
        out = out.merge(scores[[*keys, "model", "r2"]], on=[*keys, "model"], how="left")
    order = {m: i for i, m in enumerate(MODELS)}
    group_order = {g: i for i, g in enumerate(importances[by].unique())} if keys else {}
    sort_cols = (["_g"] if keys else []) + ["_m"]
    out = out.assign(_m=out["model"].map(order),
                     **({"_g": out[by].map(group_order)} if keys else {}))
    return out.sort_values(sort_cols).drop(columns=sort_cols).reset_index(drop=True)


def single_metric_scores(df: pd.DataFrame, target: str = "level",
                         features: Sequence[str] = DEFAULT_FEATURES, seed: int = 0,
                         test_size: float = 0.3, *, log_target: bool | None = None,
                         by: str = "protocol") -> pd.DataFrame:
    """Held-out R² of each model when it sees one metric only.

    A yardstick that correlated features cannot blur: how well does each metric
    alone predict the level? Same split, models and target transform as
    :func:`metric_importance`.

    Returns
    -------
    DataFrame ``<by>, model, feature, r2`` (one row per group × model × feature).
    """
    from sklearn.metrics import r2_score
    from sklearn.model_selection import train_test_split

    features = list(features)
    _check_frame(df, target, features)
    data = df[df["feasible"].astype(bool)] if "feasible" in df.columns else df
    data = data.dropna(subset=[target, *features])
    groups = data.groupby(by, sort=False) if by in data.columns else [("all", data)]
    rows = []
    for key, g in groups:
        key = key[0] if isinstance(key, tuple) else key
        log = (key == "dirichlet") if log_target is None else bool(log_target)
        y = np.log(g[target].to_numpy(dtype=float)) if log else g[target].to_numpy(dtype=float)
        for f in features:
            x = g[[f]].to_numpy(dtype=float)
            x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_size, random_state=int(seed))
            for name, model in make_models(int(seed)).items():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model.fit(x_tr, y_tr)
                    r2 = float(r2_score(y_te, model.predict(x_te)))
                rows.append({by: key, "model": name, "feature": f, "r2": r2})
    return pd.DataFrame(rows)


def findings(rank: pd.DataFrame, single: pd.DataFrame | None = None, metric: str = "wpsi",
             by: str = "protocol") -> list[str]:
    """Verdicts on the paper's Fig. 4 claim ("every model ranks WPSI first"), computed.

    Parameters
    ----------
    rank : DataFrame from :func:`ranking`.
    single : DataFrame from :func:`single_metric_scores`, optional.
    metric : the metric whose claim is checked.
    by : grouping column.

    Returns
    -------
    list of str.
    """
    lines = []
    n = len(rank)
    for kind in ("native", "permutation"):
        first = rank[f"first_{kind}"]
        k = int((first == metric).sum())
        others = ", ".join(f"{f} {c}" for f, c in first[first != metric].value_counts().sort_index().items())
        verdict = "confirmed" if k == n else ("partly confirmed" if k else "not confirmed")
        lines.append(f"{kind} importance ranks {metric} first for {k}/{n} (protocol, model) fits"
                     f"{' (others: ' + others + ')' if others else ''}: {verdict}.")
    if single is not None and len(single):
        best = (single.sort_values("r2", ascending=False, kind="stable")
                .groupby([by, "model"], sort=False).head(1))
        k = int((best["feature"] == metric).sum())
        counts = ", ".join(f"{f} {c}" for f, c in best["feature"].value_counts().sort_index().items())
        lines.append(f"best single metric (held-out R² of a model given one metric): {metric} in "
                     f"{k}/{len(best)} fits (counts: {counts}).")
    return lines
