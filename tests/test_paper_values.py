"""The papers' values and claims as data (workbook/papers/*.yaml, :mod:`workbook.paper_values`):
every file loads and is checked, a bad file is refused with a message naming the file, the key,
the fix and the value, the studies' constants equal values written here by hand from the papers,
and every value says where in its paper it comes from."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import yaml

from workbook import paper_values as PV

GOOD = PV.PAPERS_DIR / "cafa.yaml"


def _write(tmp_path, data, name="cafa.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False))
    return path


def _good():
    return yaml.safe_load(GOOD.read_text())


# ----------------------------------------------------------------------------- every file
@pytest.mark.parametrize("paper", PV.PAPER_FILES)
def test_every_paper_file_loads_and_is_checked(paper):
    data = PV.load(paper)
    assert data["paper"] == paper
    assert data["tables"] and data["claims"]
    assert PV.path_of(paper).name == f"{paper}.yaml"


def test_the_files_are_the_registry_names():
    assert sorted(p.name for p in PV.PAPERS_DIR.glob("*.yaml")) == sorted(f"{p}.yaml" for p in PV.PAPER_FILES)
    assert PV.PAPER_FILES == ("clust_psi_pfl", "psi_pfl", "cafa", "fedprism", "pfedlia")


def test_the_files_ship_as_package_data():
    import tomllib

    from fedlib.paths import ROOT

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["package-data"]["workbook"] == ["papers/*.yaml"]


def test_a_file_is_read_once_and_callers_get_a_copy():
    a = PV.load("cafa")
    a["tables"].clear()
    assert PV.load("cafa")["tables"]
    assert PV._load.cache_info().currsize >= 1


# ----------------------------------------------------------------------------- bad files
def test_a_missing_key_is_refused(tmp_path):
    data = _good()
    del data["tables"]["table2"]["source"]
    with pytest.raises(ValueError, match=r"cafa\.yaml: tables\.table2\.source must be present \(a required key\) "
                                         r"\(fix it in .*cafa\.yaml\), got None"):
        PV.load(_write(tmp_path, data))
    data = _good()
    del data["claims"]
    with pytest.raises(ValueError, match=r"cafa\.yaml: claims must be present"):
        PV.load(_write(tmp_path, data))


def test_nan_is_refused(tmp_path):
    text = GOOD.read_text().replace("values: [82.1]", "values: [.nan]", 1)
    path = tmp_path / "cafa.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"cafa\.yaml: tables\.table5\.rows\[0\]\.values\[0\] must be a finite "
                                         r"number.*fix it in .*cafa\.yaml\), got nan"):
        PV.load(path)


@pytest.mark.parametrize("bad", ['"82.1"', "1e-5", "true"])
def test_a_string_or_bool_where_a_number_belongs_is_refused(tmp_path, bad):
    path = tmp_path / "cafa.yaml"
    path.write_text(GOOD.read_text().replace("values: [82.1]", f"values: [{bad}]", 1))
    with pytest.raises(ValueError, match=r"tables\.table5\.rows\[0\]\.values\[0\] must be a finite number.*"
                                         r"write 1\.0e-05"):
        PV.load(path)


def test_a_python_tag_is_refused_and_never_executed(tmp_path):
    marker = tmp_path / "executed"
    path = tmp_path / "cafa.yaml"
    path.write_text(GOOD.read_text().replace(
        "paper: cafa", f"paper: !!python/object/apply:os.system ['touch {marker}']", 1))
    with pytest.raises(ValueError, match=r"cafa\.yaml must be plain YAML data \(no tags such as "
                                         r"!!python/object.*python/object/apply:os\.system"):
        PV.load(path)
    assert not marker.exists()


def test_an_unknown_key_a_wrong_row_length_and_a_guessed_page_are_refused(tmp_path):
    data = _good()
    data["tables"]["table5"]["colour"] = "red"
    with pytest.raises(ValueError, match=r"tables\.table5\.colour must be one of the known keys"):
        PV.load(_write(tmp_path, data))
    data = _good()
    data["tables"]["table5"]["rows"][0]["values"] = [82.1, 1.35]
    with pytest.raises(ValueError, match=r"rows\[0\]\.values must be a list of 1 cells, one per column"):
        PV.load(_write(tmp_path, data))
    data = _good()
    data["tables"]["table5"]["source"]["page"] = "7?"
    with pytest.raises(ValueError, match=r"source\.page must be an integer ≥ 1 \(the PDF page\) or null"):
        PV.load(_write(tmp_path, data))
    data = _good()
    data["paper"] = "fedprism"
    assert PV.check(data, "cafa.yaml") is data  # a file outside workbook/papers: its key is not tied to its name
    with pytest.raises(ValueError, match=r"cafa\.yaml: paper must be the file's own key 'cafa'"):
        PV.check(data, "cafa.yaml", "cafa")


def test_a_shipped_file_is_named_by_its_place_in_the_package(monkeypatch, tmp_path):
    (tmp_path / "cafa.yaml").write_text(GOOD.read_text().replace("values: [82.1]", "values: [x]", 1))
    monkeypatch.setattr(PV, "PAPERS_DIR", tmp_path)
    with pytest.raises(ValueError, match=r"^workbook/papers/cafa\.yaml: tables\.table5\.rows\[0\]\.values\[0\] .*"
                                         r"\(fix it in workbook/papers/cafa\.yaml\), got 'x'$"):
        PV.load("cafa")
    with pytest.raises(ValueError, match=r"paper must be one of \['clust_psi_pfl'"):
        PV.load("fedavg")


def test_a_claim_of_an_unknown_kind_is_refused(monkeypatch):
    from workbook import paper_claims as pc

    claims = PV.claims("cafa")
    claims[0]["kind"] = "better"
    monkeypatch.setattr(pc.paper_values, "claims", lambda paper: claims)
    with pytest.raises(ValueError, match=r"cafa\.yaml: claims\[0\]\.kind must be one of \['gain', 'lower', "
                                         r"'matches'\], got 'better'"):
        pc._claims_of("cafa")


# ----------------------------------------------------------------------------- the values, by hand
def test_the_constants_equal_the_papers_values_written_by_hand():
    from workbook import cafa_study as C, fedprism_study as F, paper_table3 as T3, pfedlia_study as L
    from workbook import psi_pfl_study as S

    # Clust-PSI-PFL Table III, FMNIST, FedAvg at Dirichlet α = 0.3: 0.82 ± 0.01; ACSIncome has no α = 0.2
    assert T3.TABLE3["fmnist"]["fedavg"][("dirichlet", 0.3)] == 0.82
    assert T3.TABLE3_SD["fmnist"]["fedavg"][("dirichlet", 0.3)] == 0.01
    assert T3.TABLE3["acs_income"]["clust_psi_pfl"][("similarity", 0.0)] == 0.98
    assert ("dirichlet", 0.2) not in T3.TABLE3["acs_income"]["fedavg"]
    assert T3.TABLE3["fmnist"]["cl"][("dirichlet", 50.0)] == 0.90 and T3.TABLE3["acs_income"]["cl"][("similarity", 1.0)] == 0.76
    assert T3.SETTINGS[0] == ("dirichlet", 50.0) and T3.SETTINGS[-1] == ("similarity", 0.0)
    # CAFA: Table II Case 1 (k = 9 an int), Table IV's windows, Table V
    assert C.PAPER_TABLE2[(5, 15)] == (9, 0.95, 0.83, 1.00, 0.91) and isinstance(C.PAPER_TABLE2[(5, 15)][0], int)
    assert C.PAPER_WINDOWS[-1] == (120, 149)
    assert C.PAPER_TABLE4["fedprox"][3] == 77.2
    assert C.PAPER_TABLE5 == {"fedavg": 82.1, "fedprox": 80.42, "cafa": 83.45}
    assert C.AUTHORS_FL == {"rounds": 150, "local_epochs": 5, "fraction": 0.3, "optimizer": "sgd", "lr": 0.1,
                            "batch_size": 32}
    # FedPrism: Table 1 FMNIST FedPrism (Glob, Loc), Table 7 CIFAR-100 Local, Tables 9–11
    assert F.PAPER_MAIN["fmnist"][0.1]["fedprism"] == (81.93, 95.66)
    assert F.PAPER_MAIN["cifar100"][0.5]["local"] == (5.05, 15.45)
    assert F.PAPER_TABLE9["private"] == (19.98, 95.15)
    assert F.PAPER_TABLE10[0.0] == (39.54, 43.07) and F.PAPER_TABLE11[0.9] == (84.83, 95.55)
    assert F.CFL_PAPER == {"eps1": 0.00001, "eps2": 0.1, "gamma": 0.5}  # Clust-PSI-PFL's Table II
    # pFedLIA Table I: FMNIST pathological, ours (99.07 ± 0.21); the Oracle has no noisy value ("–")
    assert L.PAPER_TABLE1["pathological_clusters"]["fmnist"]["pfedlia"] == (99.07, 0.21)
    assert L.PAPER_TABLE1["noisy_clusters"]["cifar10"]["oracle"] is None
    assert L.CFL_PAPER == {"eps1": 0.4, "eps2": 1.6, "gamma": 0.0}
    # PSI-PFL §4.3: "an AD of 3% from the CL (target), with an SDAD of 6%", CP 3.7 for FedYogi
    assert S.PAPER_EQ3[(S.PAPER_VARIANT, "ad_cl")] == 0.03 and S.PAPER_EQ3[(S.PAPER_VARIANT, "sdad_cl")] == 0.06
    assert S.PAPER_EQ3[("fedyogi", "cp")] == 3.7
    assert S.PAPER_MOST_HETEROGENEOUS == {"level": 0.05, "n_clients": 100}
    assert isinstance(S.PAPER_MOST_HETEROGENEOUS["n_clients"], int)


def test_authors_protocol_is_written_once_in_the_paper_params():
    from fedlib.paths import params_file
    from workbook import cafa_study as C

    assert yaml.safe_load(params_file("08_cafa", "paper").read_text())["fl"] == C.AUTHORS_FL
    assert "lr" not in GOOD.read_text().split("claims:")[0]  # not repeated in the paper file


def test_the_claims_are_built_from_the_files():
    from workbook import paper_claims as pc
    from workbook.report_cells import PAPERS

    assert len(pc.CLAIMS) == sum(len(PV.claims(p)) for p in PV.PAPER_FILES) == 17
    assert [c.paper for c in pc.CLAIMS] == sorted((c.paper for c in pc.CLAIMS), key=list(PAPERS).index)
    first = PV.claims("clust_psi_pfl")[0]
    assert (pc.CLAIMS[0].quote, pc.CLAIMS[0].where, pc.CLAIMS[0].short) == (
        first["quote"], first["source"]["ref"], first["short"])
    # a list of baselines and of cases: one comparison per case × baseline
    assert len(pc.CLAIMS[0].comparisons) == len(first["b"]) * len(first["cases"])


def test_block_spread_and_runs_are_checked():
    data = PV.load("fedprism")
    assert PV.spread_of("fedprism", "table1") == 0.9 and PV.runs_of("pfedlia", "table1") == 4
    data["tables"]["table1"]["spread"]["sd"] = 0
    with pytest.raises(ValueError, match=r"tables\.table1\.spread\.sd must be a finite number > 0"):
        PV.check(data, "fedprism.yaml")
    data = PV.load("clust_psi_pfl")
    data["claims"][0]["b"] = []
    with pytest.raises(ValueError, match=r"claims\[0\]\.b must be null, one reading or a non-empty list"):
        PV.check(data, "clust_psi_pfl.yaml")


# ----------------------------------------------------------------------------- every value has a source
def _renderings(v: float) -> set[str]:
    out = {f"{v:.2f}", f"{v:g}", f"{v:.1f}", np.format_float_positional(v, trim="-")}
    if isinstance(v, float) and v < 1:
        out.add(f"{round(v * 100, 6):g}%")
    return out


def _numbers(cells):
    for c in cells:
        for v in (c if isinstance(c, list) else [c]):
            if v is not None:
                yield v


@pytest.mark.parametrize("paper", PV.PAPER_FILES)
def test_every_value_has_a_source(paper):
    data = PV.load(paper)
    for name, block in data["tables"].items():
        src = block["source"]
        assert src["ref"].strip() and "page" in src and "line" in src, name
        assert src["page"] is None or src["page"] >= 1
        if src["line"] is None:  # a value from outside the paper's text: the ref says where it comes from
            assert "paper" in src["ref"], name
        assert all(isinstance(row["key"], (str, int, float, list)) for row in block["rows"]), name  # each value
        # is a cell of a keyed row of a block with a source: the row's own line, else the block's
    for i, c in enumerate(data["claims"]):
        assert c["source"]["ref"].strip() and "page" in c["source"] and c["source"]["line"], (paper, i)


@pytest.mark.parametrize("paper", PV.PAPER_FILES)
def test_every_source_line_of_the_seed_text_shows_its_values(paper):
    from workbook import paper_claims as pc

    data = PV.load(paper)
    path = pc.seeds_dir() / data["text"]
    assert path.is_file(), f"no seed text {path}: the papers' texts sit in ../shared/seeds (or set $FEDLIB_SEEDS)"
    lines = path.read_text().splitlines()
    for name, block in data["tables"].items():
        src = block["source"]
        if src["line"] is not None:
            label = src["ref"].split(":")[0]
            if label.lower().startswith("table"):
                assert label.lower() in lines[src["line"] - 1].lower(), (name, label, src["line"])
        for row in block["rows"]:
            if row.get("line") is None:
                continue
            text = lines[row["line"] - 1]
            if "row" in row:
                assert row["row"] in text, (name, row["row"], row["line"])
            for v in _numbers(row["values"]):
                assert any(r in text for r in _renderings(v)), (name, row["key"], v, row["line"])
    for i, c in enumerate(data["claims"]):
        assert c["quote"] in pc.clean(lines[c["source"]["line"] - 1]), (paper, i, c["source"]["line"])


def test_no_value_is_a_non_finite_number():
    for paper in PV.PAPER_FILES:
        for block in PV.load(paper)["tables"].values():
            for row in block["rows"]:
                assert all(math.isfinite(v) for v in _numbers(row["values"]))
