"""workbook.forest: the forest plot's rows and the claims' rows by hand on tiny inputs, and
that each figure draws one marker per row (no image comparison)."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from workbook import forest  # noqa: E402


def _cell(row, verdict, *, paper_value=80.0, mean=np.nan, sd=np.nan, n=0, spread=None, tolerance=1.0,
          column="FMNIST, S = 1", reading="both readings", table="Table III", unit="%", metric="global_accuracy",
          low=np.nan, high=np.nan, margin=np.nan):
    return dict(paper="clust_psi_pfl", table=table, row=row, column=column, reading=reading, unit=unit, metric=metric,
                paper_value=paper_value, spread=spread, tolerance=tolerance, n=n, mean=mean, sd=sd, verdict=verdict,
                low=low, high=high, margin=margin, id=f"id-{row}")


CELLS = [
    _cell("fedavg", "reproduced", mean=80.5, sd=0.3, n=3, spread=0.5, low=0.2, high=0.8, margin=1.0),  # paper ± 0.5
    _cell("cl", "differs", mean=75.0, n=1, margin=1.0),  # no interval in the frame: none drawn
    _cell("cfl", "not run"),  # no Δ: left out
    _cell("poc", "infeasible"),  # drawn, greyed, no Δ
    _cell("CBCC k", "undecided", paper_value=9.0, mean=11.0, sd=1.0, n=2, tolerance=0.5, unit="", metric="k",
          table="Table II", low=-4.3, high=8.3, margin=0.5),
]


def test_forest_rows_by_hand():
    rows = forest.forest_rows(CELLS).set_index("row")
    assert list(rows.index) == ["fedavg", "cl", "poc", "CBCC k"]  # the row not run is excluded
    a = rows.loc["fedavg"]
    assert a.delta == pytest.approx(0.5) and a.lo == pytest.approx(0.2) and a.hi == pytest.approx(0.8)
    assert a.spread == pytest.approx(0.5) and a.allowed == pytest.approx(1.0)  # the frame's margin
    assert a.colour == "tab:green" and a.label == "FedAvg · FMNIST, S = 1 · both readings"
    b = rows.loc["cl"]
    assert b.delta == pytest.approx(-5.0) and np.isnan(b.lo) and np.isnan(b.hi) and np.isnan(b.sd)  # n = 1
    assert np.isnan(b.spread) and b.colour == "tab:red"
    c = rows.loc["poc"]
    assert np.isnan(c.delta) and c.colour == forest.VERDICT_COLOURS["infeasible"]
    k = rows.loc["CBCC k"]
    assert k.delta == pytest.approx(2.0) and (k.lo, k.hi) == (pytest.approx(-4.3), pytest.approx(8.3))
    assert k.allowed == pytest.approx(0.5) and k.colour == "tab:orange"  # undecided
    assert k.panel == "Table II · k" and rows.loc["fedavg", "panel"] == "Table III"  # scores apart from pp


def test_a_table_with_many_rows_gets_one_panel_per_column():
    cells = [_cell("fedavg", "reproduced", mean=80.0, n=1, column=c) for c in ("FMNIST, S = 0", "FMNIST, S = 1")]
    rows = forest.forest_rows(cells, split_over=1)
    assert list(rows.panel) == ["Table III · FMNIST, S = 0", "Table III · FMNIST, S = 1"]
    assert list(rows.label) == ["FedAvg · both readings"] * 2  # the column is the panel's title


def test_verdict_colours_and_no_colour_for_a_row_not_run():
    assert forest.verdict_colour("reproduced") == "tab:green"
    assert forest.verdict_colour("differs") == "tab:red"
    assert forest.verdict_colour("undecided") == "tab:orange"
    assert forest.verdict_colour("infeasible") == forest.VERDICT_COLOURS["infeasible"]
    with pytest.raises(ValueError):
        forest.verdict_colour("not run")


def test_only_not_run_rows_give_an_empty_frame_and_a_figure():
    rows = forest.forest_rows([_cell("cfl", "not run")])
    assert rows.empty and list(rows.columns) == forest.FOREST_COLUMNS
    plt.close(forest.forest_plot(rows))


def _markers(fig) -> int:
    return sum(len(c.get_offsets()) for ax in fig.axes for c in ax.collections if c.get_gid() == forest.MARKER_GID)


def test_forest_plot_draws_one_marker_per_row():
    rows = forest.forest_rows(CELLS)
    fig = forest.forest_plot(rows)
    assert isinstance(fig, matplotlib.figure.Figure)
    assert _markers(fig) == len(rows) == 4
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 2  # Table III, Table II · k
    plt.close(fig)
    fig, ax = plt.subplots()
    assert forest.forest_plot(rows, ax=ax) is fig and _markers(fig) == 4
    plt.close(fig)


def _claim(kind, verdict, mean=np.nan, sd=np.nan, margin=np.nan, n=0, unit="%", paper_delta=np.nan):
    return dict(paper="fedprism", short=f"{kind} claim", kind=kind, unit=unit, verdict=verdict, n=n, mean=mean, sd=sd,
                margin=margin, paper_delta=paper_delta)


CLAIMS = [_claim("gain", "holds", mean=3.0, sd=1.0, margin=1.0, n=3, paper_delta=2.0),
          _claim("lower", "does not hold", mean=0.5, margin=1.0, n=1),
          _claim("matches", "holds", mean=-0.2, sd=0.4, margin=1.0, n=3),
          _claim("gain", "not run", paper_delta=4.0),
          _claim("matches", "holds", mean=0.01, sd=0.02, margin=0.05, n=3, unit="")]


def test_claims_rows_by_hand():
    rows = forest.claims_rows(CLAIMS)
    assert len(rows) == len(CLAIMS)  # one row per claim, not run included
    g, low, m, idle, score = rows.to_dict("records")
    assert g["label"] == "FedPrism: gain claim" and (g["lo"], g["hi"]) == (pytest.approx(2.0), pytest.approx(4.0))
    assert (g["need_lo"], g["need_hi"]) == (1.0, np.inf) and g["colour"] == "tab:green" and g["paper_delta"] == 2.0
    assert (low["need_lo"], low["need_hi"]) == (-np.inf, -1.0) and np.isnan(low["lo"]) and low["colour"] == "tab:red"
    assert (m["need_lo"], m["need_hi"]) == (-1.0, 1.0)
    assert np.isnan(idle["delta"]) and np.isnan(idle["need_lo"]) and idle["colour"] == forest.CLAIM_COLOURS["not run"]
    assert score["unit"] == "" and (score["need_lo"], score["need_hi"]) == (-0.05, 0.05)
    with pytest.raises(ValueError):
        forest.claims_rows([_claim("gain", "maybe")])


def test_claims_plot_draws_one_marker_per_claim():
    rows = forest.claims_rows(CLAIMS)
    fig = forest.claims_plot(rows)
    assert isinstance(fig, matplotlib.figure.Figure)
    assert _markers(fig) == len(rows) == 5
    assert len(fig.axes) == 2  # pp, then scores
    plt.close(fig)


def test_forest_figures_split_by_panel_and_keep_labels_legible_at_the_figure_width():
    """One figure per panel; each FIGURE_WIDTH inches wide (so shown near its natural width on the
    site), its row labels at LABEL_PT points and wrapped, so that a long label does not squeeze the
    panel (issue 71: labels at least 10 px tall where the site shows the figure)."""
    long_row = _cell("fedamp " + "word " * 30, "differs", mean=70.0, sd=0.5, n=3, margin=1.0)
    rows = forest.forest_rows([*CELLS, long_row])
    figs = forest.forest_figures(rows)
    assert list(figs) == list(dict.fromkeys(rows["panel"]))
    assert sum(_markers(f) for f in figs.values()) == len(rows)
    for fig in figs.values():
        assert fig.get_figwidth() == forest.FIGURE_WIDTH
        ax = fig.axes[0]
        labels = [t for t in ax.get_yticklabels() if t.get_text()]
        assert labels and all(t.get_fontsize() == forest.LABEL_PT for t in labels)
        assert max(len(line) for t in labels for line in t.get_text().split("\n")) <= forest.WRAP
        assert ax.get_position().width * forest.FIGURE_WIDTH > 0.35 * forest.FIGURE_WIDTH  # the labels leave room
        plt.close(fig)
    assert forest.wrap_label("A · b c · " + "d" * 10, width=12) == "A · b c\n" + "d" * 10
