"""One display name per partition (issue 71): fedlib.partition.partition_name, and the tables,
figures and grid-command lines that show it."""
import pytest

from fedlib import grid_cli
from fedlib import partition as P
from fedlib.grid import _describe
from fedlib.spec import RunSpec
from workbook import cross_paper


@pytest.mark.parametrize("protocol, level, name", [
    ("dirichlet", 0.3, "Dirichlet α = 0.3"), ("dirichlet_client", 0.1, "per-client Dir(0.1)"),
    ("similarity", 0, "Similarity S = 0"), ("iid_fraction_classes_1_2", 0.25, "25 % IID, others 1–2 classes"),
    ("iid_fraction_classes", 0.5, "50 % IID, others 2–4 classes"), ("pathological_clusters", 5, "pathological, 5 clusters"),
    ("noisy_clusters", 5, "noisy, 5 clusters"), ("small_clients", 0.3, "30 % small clients (5–20 samples)"),
    # the transform groups spell out their steps (BRIGHTNESS_STEP, NOISE_STEP), as notebook 12 names them
    ("rotated_groups", 4, "rotated 0/90/180/270°"), ("brightness_groups", 4, "brightness ×1/.75/.5/.25"),
    ("noise_groups", 4, "Gaussian noise s.d. 0/.1/.2/.3"), ("rotated_groups", 2, "rotated 0/90°")])
def test_partition_name_writes_each_protocol_as_the_tables_do(protocol, level, name):
    assert P.partition_name(protocol, level) == name


def test_every_protocol_has_a_name_and_two_partitions_never_share_one():
    names = {}
    for p, entry in P.PROTOCOLS.items():  # levels valid for the protocol: counts 1–4, else shares and α
        for lv in ((1, 2, 3, 4) if entry.integer else (0.1, 0.25, 0.5)):
            names[(p, lv)] = P.partition_name(p, lv)
    assert all(f"{p}=" not in n and "_" not in n for (p, _), n in names.items())  # never the raw id
    # one name per partition: a name maps back to one (protocol, level)
    assert len(set(names.values())) == len(names)


@pytest.mark.parametrize("protocol, level, match", [("nope", 0.3, "protocol"), ("dirichlet", "0.3", "level"),
                                                    ("dirichlet", True, "level"), (None, 0.3, "protocol")])
def test_partition_name_refuses_bad_input_naming_the_parameter(protocol, level, match):
    with pytest.raises(ValueError, match=match):
        P.partition_name(protocol, level)


def test_cross_paper_partitions_take_their_label_from_the_one_function():
    for p in cross_paper.PARTITIONS.values():
        assert p.label == P.partition_name(p.protocol, p.level)
    # issue 71's example: the CAFA partition and FedPrism's per-client Dirichlet read as the tables read
    assert cross_paper.PARTITIONS["cafa_iid_0.25"].label == "25 % IID, others 1–2 classes"
    assert cross_paper.PARTITIONS["client_dirichlet_0.1"].label == "per-client Dir(0.1)"


def test_grid_lines_name_the_partition_as_the_tables_do():
    spec = RunSpec(dataset="fmnist", protocol="dirichlet_client", level=0.1, n_clients=20, seed=0, method="fedavg")
    assert grid_cli.describe(spec) == "fmnist (per-client Dir(0.1)) K=20 fedavg seed=0"
    assert _describe(spec) == "fmnist (per-client Dir(0.1)) K=20 fedavg seed=0"
    cafa = RunSpec(dataset="fmnist", protocol="iid_fraction_classes_1_2", level=0.25, n_clients=20, seed=1,
                   method="cafa")
    assert "(25 % IID, others 1–2 classes)" in grid_cli.describe(cafa)
    assert "iid_fraction_classes_1_2" not in grid_cli.describe(cafa)
