"""Figure functions of workbook.plots (Fig. 4) and workbook.training_plots (Figs. 5-8), on small
synthetic frames: what each figure draws, labels and colours."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from workbook import plots, training_plots  # noqa: E402
from fedlib.methods import DISPLAY_NAMES  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _hexes(colours):
    return [to_hex(c) for c in colours]


# ----------------------------------------------------------------------------- Fig. 4
FEATURES = ("wpsi", "hellinger", "jensen_shannon", "emd")


def _importances(native_method):
    """Two protocols x {native, permutation} x models; importance = a known value per cell."""
    rows = []
    for p_i, protocol in enumerate(("dirichlet", "similarity")):
        for kind in ("own", "permutation"):
            for m_i, (model, method) in enumerate(native_method.items()):
                for f_i, f in enumerate(FEATURES):
                    rows.append({"protocol": protocol, "model": model, "kind": kind,
                                 "method": method if kind == "own" else "permutation",
                                 "feature": f, "raw": 1.0,
                                 "importance": 0.1 * (f_i + 1) + 0.01 * m_i + 0.001 * p_i
                                 + (0.0005 if kind == "own" else 0.0)})
    return pd.DataFrame(rows)


def _tick_texts(ax):
    return [t.get_text() for t in ax.get_xticklabels()]


def test_fig4_labels_each_models_own_method_from_the_frame():
    imps = _importances({"lightgbm": "gain", "svm": "permutation", "tree": "impurity"})
    fig = plots.fig4_importance(imps)
    axes = np.array(fig.axes).reshape(2, 2)
    for row, protocol in zip(axes, ("dirichlet", "similarity")):
        native, perm = row
        assert native.get_title() == f"{protocol} — model's own importance"
        assert "native" not in native.get_title()
        assert perm.get_title() == f"{protocol} — permutation importance (all models)"
        assert _tick_texts(native) == ["LightGBM\n(gain)", "SVM\n(permutation)", "tree\n(impurity)"]
        assert _tick_texts(perm) == ["LightGBM", "SVM", "tree"]
    # the labels come from the frame's method column, not from a fixed table
    other = _importances({"lightgbm": "split", "svm": "shap", "tree": "impurity"})
    native = plots.fig4_importance(other).axes[0]
    assert _tick_texts(native) == ["LightGBM\n(split)", "SVM\n(shap)", "tree\n(impurity)"]


def test_fig4_bars_are_the_frames_importances():
    imps = _importances({"lightgbm": "gain", "svm": "permutation", "mlp": "permutation", "tree": "impurity"})
    fig = plots.fig4_importance(imps)
    ax = fig.axes[0]  # dirichlet, native
    heights = np.array([p.get_height() for p in ax.patches]).reshape(len(FEATURES), 4)
    expected = (imps[(imps.protocol == "dirichlet") & (imps.kind == "own")]
                .pivot(index="feature", columns="model", values="importance")
                .loc[list(FEATURES), ["lightgbm", "svm", "mlp", "tree"]].to_numpy())
    np.testing.assert_allclose(heights, expected)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["WPSI", "HD", "JSD", "EMD (faithful)"]


# ----------------------------------------------------------------------------- Fig. 6
def _selections(datasets, ks=(10, 50, 100), levels=None, seeds=(0, 1)):
    levels = levels or {"dirichlet": (0.3, 50.0), "similarity": (0.0, 1.0)}
    rng = np.random.default_rng(0)
    rows = []
    for ds in datasets:
        for proto, lv in levels.items():
            for level in lv:
                for k in ks:
                    for seed in seeds:
                        rows.append({"dataset": ds, "protocol": proto, "level": level, "n_clients": k,
                                     "seed": seed, "feasible": True, "tau": float(rng.integers(2, 20)),
                                     "wpsi": float(rng.uniform(0, 10))})
    return pd.DataFrame(rows)


def _scatter_colours(ax):
    """label -> the single face colour of each scatter series."""
    out = {}
    for c in ax.collections:
        faces = {to_hex(f) for f in c.get_facecolors()}
        assert len(faces) == 1
        out[c.get_label()] = faces.pop()
    return out


def _errorbar_colours(ax):
    return {c.get_label(): to_hex(c.lines[0].get_color()) for c in ax.containers}


@pytest.mark.parametrize("datasets", [("adult", "fmnist"), ("adult", "cifar10", "fmnist")])
def test_fig6_every_series_has_its_own_colour(datasets):
    sel = _selections(datasets)
    fig = training_plots.fig6_tau(sel)
    left, right = fig.axes
    n_right = len(datasets) * 2 * 3  # dataset x protocol x K
    n_left = len(datasets) * 4  # dataset x (protocol, level)
    right_colours = _scatter_colours(right)
    left_colours = _errorbar_colours(left)
    assert len(right_colours) == n_right and len(set(right_colours.values())) == n_right
    assert len(left_colours) == n_left and len(set(left_colours.values())) == n_left
    # legends list every series
    assert len(right.get_legend().get_texts()) == n_right
    assert len(left.get_legend().get_texts()) == n_left
    # the dataset sets the marker: one marker per dataset on the right
    markers = {}
    for c in right.collections:
        markers.setdefault(c.get_label().split(",")[0], set()).add(
            tuple(map(tuple, c.get_paths()[0].vertices.round(6))))
    assert all(len(v) == 1 for v in markers.values())
    assert len({next(iter(v)) for v in markers.values()}) == len(datasets)


def test_fig6_colours_are_stable_and_infeasible_cells_are_left_out():
    sel = _selections(("adult", "fmnist"))
    base = _scatter_colours(training_plots.fig6_tau(sel).axes[1])
    shuffled = _scatter_colours(training_plots.fig6_tau(sel.sample(frac=1.0, random_state=3)).axes[1])
    assert shuffled == base
    drop = (sel.dataset == "adult") & (sel.protocol == "dirichlet") & (sel.n_clients == 10)
    sel.loc[drop, "feasible"] = False
    right = training_plots.fig6_tau(sel).axes[1]
    labels = [c.get_label() for c in right.collections]
    assert "adult, dirichlet, K=10" not in labels and len(labels) == 11
    # right panel: points are the feasible cells, nothing else
    assert sum(len(c.get_offsets()) for c in right.collections) == int(sel.feasible.sum())


# ----------------------------------------------------------------------------- Fig. 7
ALL_METHODS = list(DISPLAY_NAMES)


def _runs(settings, methods=ALL_METHODS, seeds=(0, 1), dataset="fmnist", k=20):
    """settings: [(protocol, level, wpsi)]; accuracy depends on method, level and seed."""
    rows = []
    for proto, level, wpsi in settings:
        for m_i, m in enumerate(methods):
            for seed in seeds:
                rows.append({"dataset": dataset, "protocol": proto, "level": level, "n_clients": k,
                             "seed": seed, "method": m, "status": "ok",
                             "global_accuracy": 0.2 + 0.04 * m_i + 0.1 * level / (1 + level) + 0.02 * seed,
                             "wpsi": wpsi + 0.1 * seed,
                             "local_accuracy": list(np.linspace(0.1, 0.9, 5) * (0.5 + 0.03 * m_i))})
    return pd.DataFrame(rows)


def test_fig7_single_level_panel_is_a_dot_chart_without_twin_axis():
    runs = _runs([("dirichlet", 0.3, 5.0)])
    runs = runs.iloc[::-1].reset_index(drop=True)  # record order must not set the method order
    fig = training_plots.fig7_accuracy(runs)
    assert len(fig.axes) == 1  # no (empty) twin axis
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [DISPLAY_NAMES[m] for m in ALL_METHODS]
    assert "Dirichlet α = 0.3" in ax.get_title() and "median WPSI = 5.05" in ax.get_title()  # partition_name
    assert "dirichlet," not in ax.get_title()  # never the protocol's id
    stats = 100 * runs.groupby("method").global_accuracy.agg(["mean", "min", "max"])  # percent
    assert ax.get_xlabel().startswith("global accuracy (%)") and ax.get_xlim() == (0, 102)
    assert len(ax.containers) == len(ALL_METHODS)
    for y, (m, c) in enumerate(zip(ALL_METHODS, ax.containers)):
        x_dot, y_dot = c.lines[0].get_data()
        assert y_dot[0] == y and x_dot[0] == pytest.approx(stats.loc[m, "mean"])
        assert to_hex(c.lines[0].get_color()) == to_hex(training_plots.method_color(m))
        (seg,) = c.lines[2][0].get_segments()  # horizontal error bar: min..max over seeds
        assert sorted(seg[:, 0]) == pytest.approx([stats.loc[m, "min"], stats.loc[m, "max"]])
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [DISPLAY_NAMES[m] for m in ALL_METHODS]  # no WPSI entry: nothing draws it


def test_fig7_two_levels_keep_lines_and_the_wpsi_axis():
    runs = pd.concat([_runs([("similarity", 0.0, 12.0), ("similarity", 1.0, 0.0)]),
                      _runs([("dirichlet", 0.3, 5.0)])], ignore_index=True)
    fig = training_plots.fig7_accuracy(runs)
    assert len(fig.axes) == 3  # similarity panel + its WPSI twin, dirichlet dot panel
    sim, dot, twin = fig.axes
    assert sim.get_title() == "fmnist, Similarity S, K=20"
    lines = {to_hex(l.get_color()): l for l in sim.get_lines()}
    assert len(sim.get_lines()) == len(ALL_METHODS) == len(lines)
    for m in ALL_METHODS:
        line = lines[to_hex(training_plots.method_color(m))]
        mine = runs[(runs.method == m) & (runs.protocol == "similarity")]
        expected = 100 * mine.groupby("level").global_accuracy.mean()  # the records' fractions, in percent
        np.testing.assert_allclose(line.get_xdata(), [0.0, 1.0])
        np.testing.assert_allclose(line.get_ydata(), expected.to_numpy())
    assert sim.get_ylabel() == "global accuracy (%)" and sim.get_ylim() == (0, 102)
    (wpsi,) = twin.get_lines()
    np.testing.assert_allclose(wpsi.get_ydata(), [12.05, 0.05])
    assert "WPSI" in twin.get_ylabel()
    assert len(dot.containers) == len(ALL_METHODS)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [DISPLAY_NAMES[m] for m in ALL_METHODS] + ["median WPSI"]


def test_method_colours_are_distinct_and_stable():
    colours = [to_hex(training_plots.method_color(m)) for m in ALL_METHODS]
    assert len(set(colours)) == len(ALL_METHODS) >= 14
    assert to_hex(training_plots.method_color("clust_psi_pfl")) == "#000000"
    assert training_plots.method_color("not_a_method") == training_plots.method_color("not_a_method")


def test_another_proposed_method_is_the_black_one():
    """Notebook 07 draws PSI-PFL as the proposed method: it alone is black, the others keep
    their colours and Clust-PSI-PFL gets one of its own."""
    assert to_hex(training_plots.method_color("psi_pfl", proposed="psi_pfl")) == "#000000"
    assert to_hex(training_plots.method_color("clust_psi_pfl", proposed="psi_pfl")) != "#000000"
    assert training_plots.method_color("fedavg", proposed="psi_pfl") == training_plots.method_color("fedavg")


# ----------------------------------------------------------------------------- Fig. 8
def test_fig8_one_ecdf_per_method_and_a_full_legend():
    runs = pd.concat([_runs([("dirichlet", 0.3, 5.0)], dataset=d) for d in ("adult", "fmnist")],
                     ignore_index=True)
    runs = pd.concat([runs, _runs([("dirichlet", 50.0, 1.0)])], ignore_index=True)  # other setting
    fig = training_plots.fig8_ecdf(runs, protocol="dirichlet", level=0.3, n_clients=20)
    assert len(fig.axes) == 2
    for ax, ds in zip(fig.axes, ("adult", "fmnist")):
        assert ax.get_title() == f"{ds}, Dirichlet α = 0.3, K=20"
        lines = ax.get_lines()
        assert [to_hex(l.get_color()) for l in lines] == _hexes(map(training_plots.method_color, ALL_METHODS))
        for m, line in zip(ALL_METHODS, lines):
            pooled = 100 * np.sort(np.concatenate(runs[(runs.dataset == ds) & (runs.level == 0.3)
                                                       & (runs.method == m)].local_accuracy.to_list()))
            x, y = line.get_data()
            assert y[-1] == pytest.approx(1.0) and y[0] == pytest.approx(0.0)
            assert set(np.round(x[np.isfinite(x)], 9)) == set(np.round(pooled, 9))  # percent
        assert ax.get_xlabel() == "local accuracy (%)" and ax.get_xlim() == (0, 101)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [DISPLAY_NAMES[m] for m in ALL_METHODS]


# ----------------------------------------------------------------------------- Fig. 5
def test_fig5_a_k_keeps_its_colour_across_panels():
    rows = []
    for ds, ks in (("adult", (10, 50, 100)), ("fmnist", (50, 100))):
        for k in ks:
            for seed in (0, 1):
                for j in range(2, 8):
                    rows.append({"dataset": ds, "protocol": "dirichlet", "level": 0.3, "n_clients": k,
                                 "seed": seed, "j": j, "silhouette": 0.1 * seed + 0.01 * j})
    fig = training_plots.fig5_silhouette(pd.DataFrame(rows))
    a, b = fig.axes
    col_a = {l.get_label(): to_hex(l.get_color()) for l in a.get_lines()}
    col_b = {l.get_label(): to_hex(l.get_color()) for l in b.get_lines()}
    assert set(col_b) == {"K=50", "K=100"}
    assert all(col_b[k] == col_a[k] for k in col_b) and len(set(col_a.values())) == 3
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["K=10", "K=50", "K=100"]
