"""Which non-IID metric best predicts the non-IID level? (Fig. 4 of Clust-PSI-PFL)

The paper trains LightGBM, an SVM, an MLP and a regression tree on the metrics
(WPSI, HD, JSD, EMD) of many partitions to predict the protocol's level (Dirichlet α,
Similarity S) and compares the models' feature importances.

Choices made here (the paper does not state them)
-------------------------------------------------
Three of them come in presets (:data:`PRESETS`, the ``preset`` argument):

=====================  =================================  =================================
choice                 ``workbook`` (default)             ``paper_like`` (libraries' defaults)
=====================  =================================  =================================
LightGBM's importance  total split **gain**               split **count** (``importance_type
                                                          ='split'``, LightGBM's default)
SVM and MLP inputs     standardised features and target   unscaled features, unscaled target
Dirichlet target       log(α) (α spans 0.05..50, three    raw α
                       decades; every metric varies
                       with log α, not α)
=====================  =================================  =================================

``workbook_split``, ``workbook_unscaled`` and ``workbook_raw_alpha`` change one choice of
``workbook`` to paper_like's (:func:`one_change_presets`), so that a comparison can tell which
choice moves the ranking (:func:`compare_presets`, :func:`choice_effects`). Why they can
decide the outcome: WPSI is unbounded while HD, JSD and EMD lie in [0, 1]. Unscaled, WPSI
dominates the distances of the SVM's RBF kernel (``gamma='scale'`` uses the variance of all
features pooled) and the MLP's first layer; split counts credit every split, small
refinements too, where gain credits what each split explains; a raw α target weighs the
largest α (5, 50) most, log α every decade alike. Each choice reaches only some models: the
importance type only LightGBM's own importance, the scaling only SVM and MLP, the target all
four. The regression tree (measured by its impurity decrease in every preset) changes its
ranking only through the target, so the paper's "every model ranks WPSI first" needs a tree
that ranks WPSI first, which among these choices only the target transform can bring about.
Notebook 03 fits each preset on the same grid and prints which choice moves the count of
WPSI-first fits.

Common to every preset:

* S as is for Similarity; ``log_target`` overrides the preset's target transform.
* One seeded train/held-out split per protocol (``test_size``); R² on the held-out part.
* Importances, each normalised to sum to 1 per model:
  - ``own``, the model's own importance (Fig. 4's wording; the tables' ``own``
    columns): LightGBM's importance (gain or split count, by preset), the tree's
    **impurity** (MSE) decrease, and for SVM and MLP (which have none) **permutation**
    importance on the held-out split;
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
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from fedlib.validation import check_choice, check_number, fail

__all__ = ["DEFAULT_FEATURES", "MODELS", "KIND_COLUMNS", "KIND_LABELS", "PRESETS", "make_models",
           "metric_importance", "ranking",
           "single_metric_scores", "findings", "one_change_presets", "compare_presets",
           "choice_effects"]

DEFAULT_FEATURES = ("wpsi", "hellinger", "jensen_shannon", "emd")
"""The paper's features: WPSI, HD, JSD and (FedArtML's) EMD."""

MODELS = ("lightgbm", "svm", "mlp", "tree")
#: What a reader sees for each ``kind`` of importance: its word in :func:`ranking`'s column
#: names and its name in the printed findings (figure 4's wording, ``plots.KIND_TITLES``).
KIND_COLUMNS = {"own": "own", "permutation": "permutation"}
KIND_LABELS = {"own": "model's own importance", "permutation": "permutation importance"}
"""Model names, in the paper's order (LightGBM, SVM, MLP, regression tree)."""

PRESETS = {
    "workbook": {"lightgbm_importance": "gain", "scale_svm_mlp": True, "log_alpha": True},
    "paper_like": {"lightgbm_importance": "split", "scale_svm_mlp": False, "log_alpha": False},
    "workbook_split": {"lightgbm_importance": "split", "scale_svm_mlp": True, "log_alpha": True},
    "workbook_unscaled": {"lightgbm_importance": "gain", "scale_svm_mlp": False, "log_alpha": True},
    "workbook_raw_alpha": {"lightgbm_importance": "gain", "scale_svm_mlp": True, "log_alpha": False},
}
"""The choices the paper leaves open, per preset name:

* ``lightgbm_importance``: LightGBM's native importance, ``'gain'`` (total split gain) or
  ``'split'`` (number of splits on the feature, LightGBM's default);
* ``scale_svm_mlp``: SVR and MLP see standardised features and a standardised target (True)
  or the raw ones (False);
* ``log_alpha``: the Dirichlet target is log(α) (True) or α (False).

``workbook`` is this workbook's choice (the default), ``paper_like`` the libraries' defaults the
paper likely used; the ``workbook_*`` presets change one choice of ``workbook`` to paper_like's.
Every preset uses the regression tree's impurity decrease and permutation importance for
SVM and MLP."""

CHOICE_LABELS = {"lightgbm_importance": "LightGBM importance",
                 "scale_svm_mlp": "standardised SVM/MLP inputs",
                 "log_alpha": "log α target"}
"""How :func:`choice_effects` names each choice of :data:`PRESETS`."""


def _preset(preset: str) -> dict:
    """The choices of a :data:`PRESETS` name (ValueError naming ``preset`` otherwise)."""
    return PRESETS[check_choice(preset, "preset", PRESETS)]


def _native_methods(preset: str) -> dict:
    """Model name → what its ``own`` importance is under ``preset``."""
    return {"lightgbm": _preset(preset)["lightgbm_importance"], "svm": "permutation",
            "mlp": "permutation", "tree": "impurity"}


def _log_target(preset: str, group, log_target: bool | None) -> bool:
    """Whether ``group``'s target is log-transformed: ``log_target`` if given, else the preset's
    choice for the 'dirichlet' group (False for any other group)."""
    if log_target is not None:
        return bool(log_target)
    return group == "dirichlet" and _preset(preset)["log_alpha"]


def make_models(seed: int = 0, preset: str = "workbook") -> dict:
    """The four regressors, seeded and single-threaded (reproducible).

    Parameters
    ----------
    seed : int
        Seeds LightGBM, the MLP and the tree.
    preset : str, default 'workbook'
        A :data:`PRESETS` name. With ``scale_svm_mlp`` SVR and MLP see standardised features
        and a standardised target (``TransformedTargetRegressor``), without it the raw ones;
        LightGBM and the tree always see raw values. LightGBM's ``importance_type`` (what its
        ``feature_importances_`` reports) is the preset's ``lightgbm_importance``.

    Returns
    -------
    dict name → unfitted scikit-learn compatible estimator, keys :data:`MODELS`.
    """
    choices = _preset(preset)
    from lightgbm import LGBMRegressor
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVR
    from sklearn.tree import DecisionTreeRegressor

    def scaled(reg):
        if not choices["scale_svm_mlp"]:
            return reg
        return TransformedTargetRegressor(regressor=make_pipeline(StandardScaler(), reg),
                                          transformer=StandardScaler())

    return {
        "lightgbm": LGBMRegressor(n_estimators=200, learning_rate=0.05, num_leaves=15,
                                  min_child_samples=5, random_state=seed, deterministic=True,
                                  force_row_wise=True, n_jobs=1, verbose=-1,
                                  importance_type=choices["lightgbm_importance"]),
        "svm": scaled(SVR(kernel="rbf", C=10.0, epsilon=0.05)),
        "mlp": scaled(MLPRegressor(hidden_layer_sizes=(32, 16), alpha=1e-3, max_iter=3000,
                                   random_state=seed)),
        "tree": DecisionTreeRegressor(min_samples_leaf=2, random_state=seed),
    }


def _native(name: str, model, x_test: np.ndarray, y_test: np.ndarray, seed: int,
            n_repeats: int) -> np.ndarray:
    """Raw native importances, shape (F,): LightGBM's (its ``importance_type``), the tree's
    impurity decrease, else permutation."""
    if name in ("lightgbm", "tree"):
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
               seed: int, test_size: float, n_repeats: int,
               preset: str) -> tuple[list[dict], list[dict]]:
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
    methods = _native_methods(preset)
    for name, model in make_models(seed, preset).items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # MLP ConvergenceWarning, LightGBM feature-name notes
            model.fit(x_tr, y_tr)
            r2 = float(r2_score(y_te, model.predict(x_te)))
            r2_train = float(r2_score(y_tr, model.predict(x_tr)))
            native = _native(name, model, x_te, y_te, seed, n_repeats)
            perm = native if methods[name] == "permutation" else _permutation(
                model, x_te, y_te, seed, n_repeats)
        scores.append({"model": name, "r2": r2, "r2_train": r2_train,
                       "n_train": len(y_tr), "n_test": len(y_te),
                       "target": f"log({target})" if log_target else target})
        for kind, raw in (("own", native), ("permutation", perm)):
            method = methods[name] if kind == "own" else "permutation"
            for f, r, v in zip(features, raw, _normalise(raw)):
                imps.append({"model": name, "kind": kind, "method": method, "feature": f,
                             "raw": float(r), "importance": float(v)})
    return imps, scores


def metric_importance(df: pd.DataFrame, target: str = "level",
                      features: Sequence[str] = DEFAULT_FEATURES, seed: int = 0,
                      test_size: float = 0.3, *, log_target: bool | None = None,
                      n_repeats: int = 10, by: str = "protocol",
                      preset: str = "workbook") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fit LightGBM, SVM, MLP and a regression tree to predict the level from the metrics.

    Parameters
    ----------
    df : DataFrame
        A metric grid (:func:`workbook.metric_study.metric_grid`); rows with
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
        Predict log(target). Default: the preset's ``log_alpha`` for the 'dirichlet' group
        (α spans 0.05..50), False otherwise.
    n_repeats : int
        Shuffles per feature in permutation importance.
    by : str
        Column whose groups get separate fits (the paper: one per protocol).
    preset : str, default 'workbook'
        The unstated choices, a :data:`PRESETS` name ('workbook', 'paper_like', ...).

    Returns
    -------
    importances : DataFrame
        ``<by>, model, kind ('own'|'permutation'), method ('gain'|'split'|'impurity'|
        'permutation'), feature, raw, importance`` — ``importance`` sums to 1 per
        (group, model, kind).
    scores : DataFrame
        ``<by>, model, r2 (held-out), r2_train, n_train, n_test, target``.
    """
    features = list(features)
    _preset(preset)
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
        log = _log_target(preset, key, log_target)
        i, s = _fit_group(g, target, features, log, int(seed), test_size, n_repeats, preset)
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
    DataFrame ``<by>, model, first_own, share_own, first_permutation,
    share_permutation[, r2]``, in :data:`MODELS` order per group (``own``: the model's own
    importance, kind ``own``; see :data:`KIND_COLUMNS`).
    """
    keys = [by] if by in importances.columns else []
    top = (importances.dropna(subset=["importance"])
           .sort_values("importance", ascending=False, kind="stable")
           .groupby([*keys, "model", "kind"], sort=False).head(1))
    wide = top.pivot_table(index=[*keys, "model"], columns="kind",
                           values=["feature", "importance"], aggfunc="first")
    out = pd.DataFrame(index=wide.index)
    for kind, word in KIND_COLUMNS.items():
        out[f"first_{word}"] = wide[("feature", kind)]
        out[f"share_{word}"] = wide[("importance", kind)].astype(float)
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
                         by: str = "protocol", preset: str = "workbook") -> pd.DataFrame:
    """Held-out R² of each model when it sees one metric only.

    A yardstick that correlated features cannot blur: how well does each metric
    alone predict the level? Same split, models (of ``preset``) and target transform as
    :func:`metric_importance`.

    Returns
    -------
    DataFrame ``<by>, model, feature, r2`` (one row per group × model × feature).
    """
    from sklearn.metrics import r2_score
    from sklearn.model_selection import train_test_split

    features = list(features)
    _preset(preset)
    _check_frame(df, target, features)
    data = df[df["feasible"].astype(bool)] if "feasible" in df.columns else df
    data = data.dropna(subset=[target, *features])
    groups = data.groupby(by, sort=False) if by in data.columns else [("all", data)]
    rows = []
    for key, g in groups:
        key = key[0] if isinstance(key, tuple) else key
        log = _log_target(preset, key, log_target)
        y = np.log(g[target].to_numpy(dtype=float)) if log else g[target].to_numpy(dtype=float)
        for f in features:
            x = g[[f]].to_numpy(dtype=float)
            x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_size, random_state=int(seed))
            for name, model in make_models(int(seed), preset).items():
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
    for kind, word in KIND_COLUMNS.items():
        first = rank[f"first_{word}"]
        k = int((first == metric).sum())
        others = ", ".join(f"{f} {c}" for f, c in first[first != metric].value_counts().sort_index().items())
        verdict = "confirmed" if k == n else ("partly confirmed" if k else "not confirmed")
        lines.append(f"{KIND_LABELS[kind]} ranks {metric} first for {k}/{n} (protocol, model) fits"
                     f"{' (others: ' + others + ')' if others else ''}: {verdict}.")
    if single is not None and len(single):
        best = (single.sort_values("r2", ascending=False, kind="stable")
                .groupby([by, "model"], sort=False).head(1))
        k = int((best["feature"] == metric).sum())
        counts = ", ".join(f"{f} {c}" for f, c in best["feature"].value_counts().sort_index().items())
        lines.append(f"best single metric (held-out R² of a model given one metric): {metric} in "
                     f"{k}/{len(best)} fits (counts: {counts}).")
    return lines


def one_change_presets(base: str = "workbook", other: str = "paper_like") -> dict[str, str]:
    """The presets that change one choice of ``base`` to ``other``'s.

    Parameters
    ----------
    base, other : str
        :data:`PRESETS` names.

    Returns
    -------
    dict choice → preset name, for each choice where the two differ and :data:`PRESETS` holds
    ``base`` with that one choice changed (in :data:`PRESETS`' choice order).
    """
    start = PRESETS[check_choice(base, "base", PRESETS)]
    goal = PRESETS[check_choice(other, "other", PRESETS)]
    out = {}
    for choice, value in goal.items():
        wanted = {**start, choice: value}
        name = next((n for n, c in PRESETS.items() if c == wanted), None)
        if start[choice] != value and name is not None:
            out[choice] = name
    return out


def compare_presets(rank_by_preset, metric: str = "wpsi", by: str = "protocol",
                    r2_floor: float = 0.5) -> tuple[pd.DataFrame, list[str]]:
    """How many models rank ``metric`` first, per preset, group and importance kind.

    Parameters
    ----------
    rank_by_preset : mapping preset name → DataFrame from :func:`ranking`
        (with ``r2`` when it was given the scores).
    metric : str
        The metric whose rank is counted (the paper: WPSI ranks first for every model).
    by : str
        The grouping column of the rankings.
    r2_floor : float
        Fits ranking ``metric`` first with a held-out R² below this are named in the lines
        (a model that barely predicts the level says little about its features).

    Returns
    -------
    table : DataFrame
        ``preset, <by>, kind ('own'|'permutation'), metric, first (models ranking metric
        first), models[, min_r2]``, one row per preset × group × kind.
    lines : list of str
        One per preset and kind (the counts per group); whether every model ranks ``metric``
        first under any preset and kind, and whether most fits do; the (group, model) fits that
        rank it first under no preset and neither kind; the fits ranking it first with a
        held-out R² below ``r2_floor`` (when the rankings carry ``r2`` and there are any).
    """
    if not isinstance(rank_by_preset, Mapping) or not rank_by_preset:
        fail("rank_by_preset", "a non-empty mapping preset name → ranking DataFrame",
             type(rank_by_preset).__name__)
    check_number(r2_floor, "r2_floor")
    long = _first_ranked(rank_by_preset, metric, by)
    stats = {"first": ("is_first", "sum"), "models": ("model", "size")}
    if "r2" in long.columns:
        stats["min_r2"] = ("r2", "min")
    table = (long.groupby(["preset", "kind", by], sort=False).agg(**stats).reset_index()
             .assign(metric=metric)[["preset", by, "kind", "metric", *stats]].astype({"first": int}))
    kinds = KIND_LABELS
    lines, every, most = [], [], []
    for (preset, kind), t in table.groupby(["preset", "kind"], sort=False):
        counts = ", ".join(f"{f}/{m} under {g}" for g, f, m in zip(t[by], t["first"], t["models"]))
        lines.append(f"{preset}, {kinds[kind]}: {metric} ranked first by {counts}.")
        k, n = int(t["first"].sum()), int(t["models"].sum())
        every += [f"{preset} ({kinds[kind]})"] if k == n else []
        most += [f"{preset} ({kinds[kind]}, {k}/{n})"] if 2 * k > n else []
    none = _none_of([f"'{p}'" for p in rank_by_preset])
    lines.append(f"Every model ranks {metric} first in every {by} (the paper's Fig. 4) under "
                 f"{', '.join(every) or none}.")
    lines.append(f"{metric} ranks first in most ({by}, model) fits under {', '.join(most) or none}.")
    ever = long.groupby([by, "model"], sort=False)["is_first"].any()
    never = [f"{m} ({g})" for (g, m), f in ever.items() if not f]
    lines.append(f"Models ranking {metric} first under no preset, by either importance: "
                 f"{', '.join(never) or 'none'}.")
    if "r2" in long.columns:
        weak = (long[long["is_first"] & (long["r2"] < r2_floor)]
                .groupby(["preset", by, "model", "r2"], sort=False)["kind"].agg(", ".join))
        named = [f"{p} {g} {m} (R² {r:.2f}; {k})" for (p, g, m, r), k in weak.items()]
        if named:
            lines.append(f"Fits ranking {metric} first with held-out R² < {r2_floor:g}: {'; '.join(named)}.")
    return table, lines


def _first_ranked(rank_by_preset: Mapping, metric: str, by: str) -> pd.DataFrame:
    """Long form of rankings: ``preset, kind, <by>, model, is_first[, r2]``, one row per
    preset × kind × (group, model), in that nesting order."""
    frames = []
    for preset, rank in rank_by_preset.items():
        rank = rank if by in rank.columns else rank.assign(**{by: "all"})
        keep = [by, "model", *(["r2"] if "r2" in rank.columns else [])]
        for kind, word in KIND_COLUMNS.items():
            frames.append(rank[keep].assign(preset=preset, kind=kind,
                                            is_first=rank[f"first_{word}"] == metric))
    return pd.concat(frames, ignore_index=True)


def _none_of(names: list[str]) -> str:
    """'neither a nor b', 'none of a, b, c' or 'not a'."""
    if len(names) == 2:
        return f"neither {names[0]} nor {names[1]}"
    return f"none of {', '.join(names)}" if len(names) > 2 else f"not {names[0]}"


def _value_text(value) -> str:
    """A choice's value as text: yes/no for a flag."""
    return ("yes" if value else "no") if isinstance(value, bool) else str(value)


def choice_effects(table: pd.DataFrame, base: str = "workbook", other: str = "paper_like") -> list[str]:
    """Which of the choices between two presets moves the count of first-ranked fits, computed.

    Parameters
    ----------
    table : DataFrame from :func:`compare_presets`, holding ``base``, ``other`` and the
        presets of :func:`one_change_presets` (base, other).
    base, other : str
        :data:`PRESETS` names.

    Returns
    -------
    list of str: one line per choice (its preset's count against base's, for the model's own
    and for permutation importance, summed over groups), one for ``other`` (every choice at
    once), and one naming the choice(s) with the largest effect and whether the single
    effects add up to the joint one.
    """
    steps = one_change_presets(base, other)
    needed = [base, *steps.values(), other]
    if not isinstance(table, pd.DataFrame) or not set(needed) <= set(table.get("preset", ())):
        fail("table", f"a compare_presets table holding the presets {needed}",
             sorted(set(table["preset"])) if isinstance(table, pd.DataFrame) and "preset" in table
             else type(table).__name__)
    totals = table.groupby(["preset", "kind"])[["first", "models"]].sum()
    metric = table["metric"].iloc[0]

    def delta(preset: str) -> dict:
        return {k: int(totals.loc[(preset, k), "first"] - totals.loc[(base, k), "first"])
                for k in ("own", "permutation")}

    def moved(preset: str) -> str:
        before, after = totals.loc[base], totals.loc[preset]
        return f"{metric} first in " + ", ".join(
            f"{before.loc[k, 'first']} → {after.loc[k, 'first']} of {after.loc[k, 'models']} "
            f"({KIND_COLUMNS[k]})" for k in ("own", "permutation"))

    lines, effects = [], {}
    for choice, preset in steps.items():
        change = f"{_value_text(PRESETS[base][choice])} → {_value_text(PRESETS[other][choice])}"
        lines.append(f"{CHOICE_LABELS[choice]} {change} alone ('{preset}'): {moved(preset)}.")
        effects[choice] = delta(preset)
    joint = delta(other)
    lines.append(f"all {len(steps)} choices at once ('{other}'): {moved(other)}.")
    size = {c: sum(abs(v) for v in d.values()) for c, d in effects.items()}
    top = [CHOICE_LABELS[c] for c, n in size.items() if n == max(size.values(), default=0) and n > 0]
    summed = {k: sum(d[k] for d in effects.values()) for k in joint}
    lines.append(f"largest single effect: {', '.join(top) or 'none (no single choice moves the count)'}; "
                 f"the single effects add up to {summed['own']:+d} ({KIND_COLUMNS['own']}), "
                 f"{summed['permutation']:+d} (permutation) against {joint['own']:+d}, "
                 f"{joint['permutation']:+d} for all at once"
                 f"{'' if summed == joint else ' (the choices interact)'}.")
    return lines
