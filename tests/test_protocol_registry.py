"""Issue 60, item 3: a partition protocol is one entry of fedlib.partition.PROTOCOLS; validation,
build_federation, the tables', plots' and report's names read it."""
import numpy as np
import pytest

from fedlib import experiment as X
from fedlib import partition as P
from workbook import metric_study, plots, tables, training_plots


def test_the_derived_display_dicts_equal_the_old_literal_ones():
    """The notebooks print these strings: byte for byte as the four dicts had them."""
    old_symbols = {"dirichlet": "α", "similarity": "S"}
    assert {p: e.symbol for p, e in P.PROTOCOLS.items() if e.symbol} == old_symbols
    assert metric_study.LEVEL_LABELS == old_symbols
    assert plots.LEVEL_AXIS == {"dirichlet": "Dirichlet α (log scale)", "similarity": "Similarity S"}
    for protocol in P.PROTOCOLS:  # tables / training_plots: the symbol, else the protocol's name
        assert tables.setting_name(protocol, 0.3) == f"{old_symbols.get(protocol, protocol)}=0.3"
        assert training_plots._label(protocol, 0.3) == f"{old_symbols.get(protocol, protocol)}=0.3"
        assert P.level_symbol(protocol, "level") == old_symbols.get(protocol, "level")
        assert P.level_axis(protocol) == {"dirichlet": "Dirichlet α (log scale)",
                                          "similarity": "Similarity S"}.get(protocol, "level")
    assert tables.setting_name("similarity", 1, " = ") == "S = 1"
    assert tables.setting_name("nonsense", 2) == "nonsense=2"


def test_the_old_sets_are_derived_from_the_entries():
    assert P.CLUSTERED_PROTOCOLS == ("pathological_clusters", "noisy_clusters")
    integer = {p for p, e in P.PROTOCOLS.items() if e.integer}
    assert {P.PROTOCOLS[p].level_name for p in integer} == {"shards_per_client", "n_classes_per_client",
                                                             "n_clusters", "n_groups"}
    plants = {p for p, e in P.PROTOCOLS.items() if e.plants_groups}
    assert plants == set(P.CLUSTERED_PROTOCOLS) | set(P.BEYOND_LABEL_PROTOCOLS)
    assert {p for p, e in P.PROTOCOLS.items() if e.needs_features} == {"attribute_skew"}
    assert P.PROTOCOLS["dirichlet"].inputs == ("dataset_name",)
    assert [p for p in P.PROTOCOLS if P.level_log_scale(p)] == ["dirichlet"]  # the plots' old special case
    assert P.partition_inputs("dirichlet", dataset_name="adult", features=1) == {"dataset_name": "adult"}
    assert P.partition_inputs("dirichlet", dataset_name=None) == {} == P.partition_inputs("similarity", dataset_name="a")
    assert P.partition_inputs("attribute_skew", dataset_name="adult", features=1, feature_names=["age"]) == \
        {"features": 1, "feature_names": ["age"]}
    for p in P.PROTOCOLS:
        level = 2 if P.PROTOCOLS[p].integer else 0.5
        assert (P.planted_clusters(p, 8, level) is not None) == (p in plants)


@pytest.mark.parametrize("protocol, level, match", [
    ("dirichlet", 0.0, r"^level must be a number > 0 for the dirichlet protocol \(its alpha\), got 0\.0$"),
    ("dirichlet_client", -1.0, r"^level must be a number > 0 for the dirichlet_client protocol \(its alpha\), got -1\.0$"),
    ("similarity", 1.5, r"^level must be a number in \[0, 1\] for the similarity protocol \(its s\), got 1\.5$"),
    ("shards", 0.0, r"^level must be a whole number ≥ 1 for the shards protocol \(its shards_per_client\), got 0\.0$"),
    ("shards", 1.5, r"^level must be a whole number ≥ 1 .*, got 1\.5$"),
    ("rotated_groups", 5.0, r"^level must be a whole number in \[1, 4\] for the rotated_groups protocol"),
    ("small_clients", 1.0, r"^level must be a number in \[0, 1\) for the small_clients protocol"),
    ("iid_fraction_classes", 1.2, r"^level must be a number in \[0, 1\] for the iid_fraction_classes protocol"),
])
def test_validate_reads_the_level_range_of_the_entry(protocol, level, match):
    with pytest.raises(ValueError, match=match):
        X.RunSpec("adult", protocol, level, 4, 0, "fedavg").validate()


def _toy(labels, n_clients, halves, seed):
    """A toy protocol: clients i < K/2 hold the even samples, the others the odd ones."""
    idx = np.arange(len(labels))
    return [np.sort(part).astype(np.int64) for part in
            np.array_split(idx[idx % 2 == 0], n_clients // 2) + np.array_split(idx[idx % 2 == 1], n_clients - n_clients // 2)]


def test_a_toy_protocol_added_in_one_place_validates_and_displays(monkeypatch):
    """One registry entry, nothing else edited: validation, partition, planted groups and every
    display read it."""
    entry = P.Protocol(_toy, "halves", low=1, high=2, integer=True, symbol="H", axis="toy halves H", log_scale=True,
                       planted=lambda k, level, **kw: (np.arange(k) >= k // 2).astype(np.int64))
    monkeypatch.setitem(P.PROTOCOLS, "toy_halves", entry)
    X.RunSpec("adult", "toy_halves", 2.0, 4, 0, "fedavg").validate()
    with pytest.raises(ValueError, match=r"^level must be a whole number in \[1, 2\] for the toy_halves protocol "
                                         r"\(its halves\), got 3\.0$"):
        X.RunSpec("adult", "toy_halves", 3.0, 4, 0, "fedavg").validate()
    (spec,) = X.grid_specs(["adult"], {"toy_halves": [2]}, [4], [0], ["fedavg"])
    assert spec.protocol == "toy_halves"
    parts = P.partition(np.zeros(10, dtype=np.int64), "toy_halves", 4, 2.0, 0)
    assert [p.tolist() for p in parts] == [[0, 2, 4], [6, 8], [1, 3, 5], [7, 9]]
    assert P.planted_clusters("toy_halves", 4, 2.0).tolist() == [0, 0, 1, 1]
    assert tables.setting_name("toy_halves", 2.0) == "H=2" == training_plots._label("toy_halves", 2.0)
    assert metric_study.level_symbol("toy_halves", "level") == "H"
    assert P.level_axis("toy_halves") == "toy halves H" and P.level_log_scale("toy_halves")
    assert P.partition_inputs("toy_halves", dataset_name="adult") == {}
