"""Why Algorithm 1 picks many clusters when clients share label histograms
(:func:`workbook.cluster_study.tau_reading`), on a hand-made 7-client case."""
import numpy as np
import pytest

from workbook import cluster_study as CS
from fedlib.clustering import psi_features, select_n_clusters

# three pairs of identical histograms and one client alone: 4 distinct histograms, 4 class supports
COUNTS = np.array([[10, 0, 5], [10, 0, 5], [0, 8, 8], [0, 8, 8], [3, 3, 3], [3, 3, 3], [9, 1, 0]])


def _info(counts):
    sel = select_n_clusters(psi_features(counts), seed=42)
    return {"tau": sel.tau, "assignment": sel.labels.tolist(), "silhouette_candidates": sel.candidates.tolist(),
            "silhouettes": [float(s) for s in sel.silhouettes]}


def test_one_cluster_per_histogram_reaches_one_minus_singletons_share():
    info = _info(COUNTS)
    r = CS.tau_reading(info, COUNTS, planted=np.array([0, 0, 1, 1, 0, 0, 1]))
    assert r["tau"] == 4 and r["distinct_histograms"] == 4 and r["class_supports"] == 4
    assert r["singletons"] == 1 and r["identical_clusters"]
    # pairs score a(i) = 0 → s(i) = 1, the singleton 0: s(4) = 6/7, by hand
    assert r["one_per_histogram"] == pytest.approx(6 / 7)
    assert r["silhouette_tau"] == pytest.approx(6 / 7)
    assert r["planted"] == 2 and r["silhouette_planted"] == pytest.approx(info["silhouettes"][0])
    assert r["silhouette_planted"] < r["silhouette_tau"]
    assert r["share_in_le2"] == 1.0 and r["median_size"] == 2.0


def test_mixed_clusters_have_no_bound():
    info = {"tau": 2, "assignment": [0, 0, 0, 0, 1, 1, 1], "silhouette_candidates": [2], "silhouettes": [0.1]}
    r = CS.tau_reading(info, COUNTS)
    assert not r["identical_clusters"] and r["one_per_histogram"] is None and r["planted"] is None
    assert r["singletons"] == 0 and r["share_in_le2"] == 0.0


def test_assignment_of_the_wrong_length_is_named():
    with pytest.raises(ValueError, match="assignment"):
        CS.tau_reading({"tau": 1, "assignment": [0, 0]}, COUNTS)


def test_readings_keep_only_clust_psi_pfl_runs_that_chose_tau():
    info = _info(COUNTS)
    spec = {"method": "clust_psi_pfl", "protocol": "dirichlet", "level": 0.3, "n_clients": 7, "seed": 3}
    records = [{"spec": spec, "status": "ok", "info": info},
               {"spec": {**spec, "method": "fedavg"}, "status": "ok", "info": {}},
               {"spec": spec, "status": "ok", "info": {**info, "tau_fixed": True}},
               {"spec": spec, "status": "diverged", "info": info}]
    t = CS.tau_readings(records, lambda r: COUNTS)
    assert len(t) == 1 and t.seed.tolist() == [3] and t.tau.tolist() == [4] and t.planted.isna().all()


def test_explanations_state_the_bound_the_planted_silhouette_and_the_gap():
    info = _info(COUNTS)
    spec = {"method": "clust_psi_pfl", "protocol": "pathological_clusters", "level": 5.0, "n_clients": 7, "seed": 0}
    t = CS.tau_readings([{"spec": spec, "status": "ok", "info": info}], lambda r: COUNTS, label_of=lambda r: "patho")
    (line,) = CS.tau_explanations(t, {"patho": -0.5}, label=str.upper)
    assert line.startswith("PATHO (K = 7, seed 0): τ = 4: one cluster per distinct label histogram")
    assert "1 − 1/7 = 0.857 exactly" in line and "-0.50 pp" in line and "100 % of the clients in clusters of ≤ 2" in line
