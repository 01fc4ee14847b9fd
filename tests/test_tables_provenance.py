"""workbook.tables.provenance: where and how long records ran."""
import numpy as np
import pytest


def test_provenance_groups_runs_by_machine():
    from workbook.tables import provenance

    recs = [{"host": {"cpu": "cpu A"}, "versions": {"torch": "2.1"}, "seconds": 60.0, "cpu_seconds": 120.0},
            {"host": {"cpu": "cpu A", "gpu": "GPU B"}, "versions": {"torch": "2.2"}, "seconds": 120.0},
            {"host": {"cpu": "cpu A", "gpu": "GPU B"}, "versions": {"torch": "2.2"}, "seconds": 240.0}]
    out = provenance(recs).set_index("machine")
    assert out.loc["GPU B", "runs"] == 2 and out.loc["GPU B", "wall_min_mean"] == pytest.approx(3.0)
    assert out.loc["GPU B", "wall_min_total"] == pytest.approx(6.0)
    assert np.isnan(out.loc["GPU B", "cpu_min_total"])  # not recorded: not invented
    assert out.loc["cpu A", "cpu_min_total"] == pytest.approx(2.0)
