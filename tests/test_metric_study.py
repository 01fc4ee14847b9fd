"""workbook.metric_study (the Fig. 3 grid) and workbook.plots.save_figure."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from workbook import metric_study as ms  # noqa: E402
from fedlib import noniid  # noqa: E402
from workbook import plots  # noqa: E402
from fedlib.partition import label_counts, partition, train_test_split  # noqa: E402

SEEDS = range(5)


def balanced_labels(n_per_class=300, n_classes=10, seed=0):
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(n_classes), n_per_class))


@pytest.fixture(scope="module")
def y():
    return balanced_labels()


@pytest.fixture(scope="module")
def grid(y):
    return pd.concat([
        ms.metric_grid(y, 10, "dirichlet", [0.1, 1.0, 100.0], [10], SEEDS, "synthetic"),
        ms.metric_grid(y, 10, "similarity", [0.0, 0.5, 1.0], [10], SEEDS, "synthetic"),
    ], ignore_index=True)


# ----------------------------------------------------------------------------- metric_grid
def test_grid_shape_columns_and_order(grid):
    assert list(grid.columns[:11]) == ["dataset", "protocol", "level", "n_clients", "seed", "feasible",
                                       "wpsi", "hellinger", "jensen_shannon", "emd", "emd_corrected"]
    assert len(grid) == 2 * 3 * 5
    assert grid["feasible"].all()
    d = grid[grid["protocol"] == "dirichlet"]
    assert d["level"].tolist() == [0.1] * 5 + [1.0] * 5 + [100.0] * 5
    assert d["seed"].tolist() == list(SEEDS) * 3


@pytest.mark.parametrize("protocol", ["dirichlet", "similarity"])
def test_median_wpsi_falls_strictly_as_level_rises(grid, protocol):
    med = grid[grid["protocol"] == protocol].groupby("level")["wpsi"].median().sort_index()
    assert np.all(np.diff(med.to_numpy()) < 0), med
    report = ms.monotone_report(grid)
    assert report.set_index("protocol").loc[protocol, "wpsi_falls"]


def test_metrics_are_those_of_the_train_split(y):
    row = ms.metric_grid(y, 10, "dirichlet", [0.5], [8], [3], "synthetic").iloc[0]
    parts = partition(y, "dirichlet", 8, 0.5, 3)
    train, test = train_test_split(parts, 3)
    expected = noniid.federation_metrics(label_counts(y, train, 10))
    for m, v in expected.items():
        assert row[m] == pytest.approx(v, rel=1e-12)
    # the full partition gives a different WPSI: the grid really used the train split
    assert row["wpsi"] != pytest.approx(noniid.wpsi(label_counts(y, parts, 10)), rel=1e-9)
    sizes = [p.size for p in parts]
    assert (row["n_min"], row["n_max"]) == (min(sizes), max(sizes))


def test_grid_is_reproducible(y):
    a = ms.metric_grid(y, 10, "dirichlet", [0.3], [10], [0, 1], "s")
    b = ms.metric_grid(y, 10, "dirichlet", [0.3], [10], [0, 1], "s")
    pd.testing.assert_frame_equal(a, b)


def test_infeasible_cell_is_a_row_not_a_crash(y):
    g = ms.metric_grid(y, 10, "dirichlet", [0.01, 10.0], [100], [0], "synthetic", max_draws=3)
    bad, good = g.iloc[0], g.iloc[1]
    assert not bad["feasible"] and good["feasible"]
    assert bad[list(ms.METRICS)].isna().all()
    assert np.isfinite(good[list(ms.METRICS)].astype(float)).all()
    table = ms.feasibility_table(g)
    assert table.loc[0, "WPSI"] == "—" and table.loc[0, "min size"] == "—"
    assert table.loc[0, "feasible"] == "no" and table.loc[1, "WPSI"] != "—"
    # infeasible rows are ignored by the summaries
    s = ms.summarise(g)
    assert s.loc[(s["level"] == 0.01) & (s["metric"] == "wpsi"), "n_feasible"].item() == 0


def test_options_of_other_protocols_are_ignored_unknown_ones_rejected(y):
    g = ms.metric_grid(y, 10, "similarity", [0.5], [10], [0], "s", max_draws=5)
    assert g["feasible"].all()
    with pytest.raises(ValueError, match="no partition protocol"):
        ms.metric_grid(y, 10, "similarity", [0.5], [10], [0], "s", max_drawz=5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(levels=[]), "levels"),
    (dict(n_clients_list=[0]), "n_clients_list"),
    (dict(seeds=[-1]), "seeds"),
    (dict(n_classes=5), "n_classes"),
    (dict(protocol="nope"), "unknown protocol"),
])
def test_bad_input_fails_fast(y, kwargs, match):
    args = dict(labels=y, n_classes=10, protocol="dirichlet", levels=[1.0], n_clients_list=[10],
                seeds=[0], dataset_name="s")
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ms.metric_grid(**args)


# ----------------------------------------------------------------------------- summaries
def test_summarise_statistics(grid):
    s = ms.summarise(grid)
    cell = s[(s["protocol"] == "similarity") & (s["level"] == 0.5) & (s["metric"] == "hellinger")]
    raw = grid[(grid["protocol"] == "similarity") & (grid["level"] == 0.5)]["hellinger"]
    assert cell["median"].item() == pytest.approx(raw.median())
    assert cell["std"].item() == pytest.approx(raw.std())
    assert cell["n_feasible"].item() == 5
    pooled = ms.summarise(grid, by=("dataset", "protocol", "level"))
    assert set(pooled["metric"]) == set(ms.METRICS) and len(pooled) == 6 * 5


def test_monotone_report_flags_a_turning_metric():
    rows = []
    for level, (w, h, e) in zip([0.1, 1.0, 10.0], [(3.0, 0.9, 0.2), (2.0, 0.5, 0.4), (1.0, 0.1, 0.2)]):
        rows.append(dict(dataset="d", protocol="dirichlet", level=level, n_clients=10, seed=0,
                         feasible=True, wpsi=w, hellinger=h, jensen_shannon=h, emd=e, emd_corrected=h))
    r = ms.monotone_report(pd.DataFrame(rows)).iloc[0]
    assert r["wpsi_falls"] and r["hellinger_monotone"] and not r["emd_monotone"]
    assert r["rho_wpsi"] == -1.0 and r["n_levels"] == 3
    text = "\n".join(ms.findings(ms.monotone_report(pd.DataFrame(rows))))
    assert "1/1" in text and "(iii) EMD (faithful) non-monotone in some settings: confirmed" in text


def test_faithful_emd_is_not_monotone_in_similarity(grid):
    # S=0 with K=C gives one-class clients: faithful EMD is 0 there although it is the most non-IID
    r = ms.monotone_report(grid).set_index("protocol")
    assert not r.loc["similarity", "emd_monotone"]
    assert r.loc["similarity", "emd_corrected_monotone"]


def test_linearity_report(grid):
    lin = ms.linearity_report(grid)
    assert set(lin.columns) >= {"r_hellinger", "r_jensen_shannon", "r_emd", "r_emd_corrected"}
    assert (lin["r_hellinger"] > 0.5).all()


# ----------------------------------------------------------------------------- CSV reuse
def test_load_or_compute_grid_reuses_a_csv(tmp_path, grid, monkeypatch):
    csv = tmp_path / "g.csv"
    grid.to_csv(csv, index=False)
    got, src = ms.load_or_compute_grid(csv, ["synthetic"], {"similarity": [0.0, 0.5, 1.0]}, [10], [1, 3])
    assert src == "csv" and len(got) == 6
    want = grid[(grid["protocol"] == "similarity") & grid["seed"].isin([1, 3])].reset_index(drop=True)
    pd.testing.assert_frame_equal(got[want.columns], want, check_dtype=False)
    calls = []
    monkeypatch.setattr(ms, "run_study", lambda *a, **k: calls.append(a) or "fresh")
    assert ms.load_or_compute_grid(csv, ["synthetic"], {"similarity": [0.25]}, [10], [0]) == ("fresh", "computed")
    assert ms.load_or_compute_grid(tmp_path / "none.csv", ["x"], {"dirichlet": [1]}, [10], [0])[1] == "computed"
    assert len(calls) == 2


# ----------------------------------------------------------------------------- plots
def test_plots_and_save_figure_write_png_and_csv(tmp_path, monkeypatch, y, grid):
    monkeypatch.setenv("FEDLIB_FIGURES", str(tmp_path))
    table = ms.client_label_table(y, 10, [("dirichlet", 0.5), ("similarity", 0.0)], 25, 0, "s")
    assert len(table) == 2 * 25 * 10 and table.groupby("setting")["count"].sum().max() <= y.size
    figs = {
        "ld": (plots.label_distribution(table, n_show=20), table),
        "cs": (plots.client_sizes(table), table),
        "f3": (plots.fig3_metrics(ms.summarise(grid, by=("dataset", "protocol", "level"))), grid),
    }
    for name, (fig, df) in figs.items():
        assert isinstance(fig, plt.Figure)
        png, csv = plots.save_figure(fig, df, name)
        assert png == tmp_path / f"{name}.png" and png.stat().st_size > 1000
        assert csv == tmp_path / f"{name}.csv" and len(pd.read_csv(csv)) == len(df)
        assert not plt.fignum_exists(fig.number)
    with pytest.raises(ValueError, match="file stem"):
        plots.save_figure(plt.figure(), grid, "figures/x.png")
    plt.close("all")


def test_infeasible_cells_summary(y):
    g = ms.metric_grid(y, 10, "dirichlet", [0.01, 10.0], [100], [0, 1], "synthetic", max_draws=3)
    out = ms.infeasible_cells(g)
    assert out.to_dict("records") == [dict(dataset="synthetic", protocol="dirichlet", level=0.01,
                                           n_clients=100, infeasible_seeds="2/2")]
