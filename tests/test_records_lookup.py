"""fedlib.records: a spec's record is found by the spec's fields, never by its key (a hash that
includes fedlib's version), so the report's sections that read committed records survive a
version bump. Nothing is trained here."""
import json

import pytest
import yaml

import fedlib.lookup
import fedlib.spec
import fedlib
from fedlib import experiment, records
from workbook import beyond_label as B, cross_paper as X, report
from fedlib.records import RECORD_VERSION
from fedlib.spec import RunSpec
from fedlib.paths import ROOT

import record_fakes

RECORDS = ROOT / "benchmarks" / "records"


def _grid(module, params, table):
    p = yaml.safe_load(params.read_text())
    return module.notebook_grid(**{k: p[k] for k in module.GRID_PARAMS})[table]


def _cross():
    return _grid(X, report.CROSS_PAPER_PARAMS, "cross")


def _beyond():
    return _grid(B, report.BEYOND_LABEL_PARAMS, "study")


@pytest.mark.parametrize("grid, folder, n", [(_cross, "cross_paper", 169), (_beyond, "beyond_label", 121)])
def test_find_returns_the_committed_record_of_a_spec_rebuilt_from_params(grid, folder, n):
    specs = grid()
    found, missing = fedlib.lookup.find(specs, RECORDS / folder)
    assert (len(specs), len(found), missing) == (n, n, [])
    for spec, record in zip(specs, found):
        assert record["spec"] == spec.to_dict()  # a fresh spec's dict is the committed one, field for field
        assert record["status"] in records.FINISHED


def test_committed_specs_equal_their_rebuilt_runspec():
    """On the real committed records: a RunSpec rebuilt from a record's spec
    (``RunSpec.from_record``: a hyperparameter whose default moved since is set to the value the
    record ran) has that spec as its ``to_dict`` and the same spec fields;
    committed specs leave out the fields added later (at their defaults), and spelling them out
    at their defaults changes nothing."""
    n = 0
    for folder in ("cross_paper", "beyond_label", "psi_pfl/comparison"):
        for path in sorted((RECORDS / folder).glob("*.json")):
            rec = records.read(path)
            spec = RunSpec.from_record(rec["spec"])
            assert spec.to_dict() == rec["spec"], path
            fields = fedlib.lookup.spec_fields(rec["spec"])
            assert fedlib.lookup.spec_fields(spec) == fields, path
            explicit = {**rec["spec"], **{k: v for k, v in fedlib.spec._LATER_FIELDS.items()
                                          if k not in rec["spec"]}}
            assert fedlib.lookup.spec_fields(explicit) == fields, path
            n += 1
    assert n > 600
    old = next(p for p in sorted((RECORDS / "cross_paper").glob("*.json"))  # a FeSEM record from before `init`
               if records.read(p)["spec"]["method"] == "fesem" and "init" not in records.read(p)["spec"]["hyper"])
    spec = records.read(old)["spec"]
    assert RunSpec.from_record(spec).hyper["init"] == "clients" and RunSpec(**spec).to_dict()["hyper"]["init"] == "forgy"
    assert fedlib.lookup.spec_fields(spec) == fedlib.lookup.spec_fields(RunSpec.from_record(spec)) != fedlib.lookup.spec_fields(RunSpec(**spec))
    assert "reproduction" not in json.loads(next((RECORDS / "cross_paper").glob("*.json")).read_text())["spec"]


def test_spec_fields_normalises_numbers_and_defaults():
    spec = RunSpec("fmnist", "dirichlet", 0.3, 10, 0, "fedavg", fl={"rounds": 5})
    d = spec.to_dict()
    assert fedlib.lookup.spec_fields(spec) == fedlib.lookup.spec_fields({**d, "n_clients": 10.0, "fl": {"rounds": 5.0}})
    assert fedlib.lookup.spec_fields(spec)["reproduction"] == "paper_text"  # absent in to_dict, its default here
    assert "reproduction" not in d
    assert "fedlib" not in fedlib.lookup.spec_fields(spec) and "record_version" not in fedlib.lookup.spec_fields(spec)


def _bumped(monkeypatch):
    monkeypatch.setattr(fedlib, "__version__", "99.0.0")
    monkeypatch.setattr(fedlib.spec, "__version__", "99.0.0")


def _present() -> list:
    """The files (their JSON) present_records finds for both grids, and the specs it misses
    (records hold NaN, which equals nothing, so records are compared as JSON)."""
    out = []
    for specs, folder in ((_cross(), "cross_paper"), (_beyond(), "beyond_label")):
        found, missing = experiment.present_records(specs, RECORDS / folder)
        out.append(([json.dumps(r, sort_keys=True) for r in found], missing))
    return out


def test_a_version_bump_changes_no_report_section(monkeypatch):
    specs = _cross() + _beyond()
    keys = [s.key() for s in specs]
    before = (report.cross_paper_markdown(), report.beyond_label_markdown())
    found_before = _present()
    _bumped(monkeypatch)
    assert all(s.key() != k for s, k in zip(specs, keys))  # a lookup by key would find nothing now
    assert not any(experiment.record_path(RECORDS / "cross_paper", s).is_file() for s in _cross())
    assert (report.cross_paper_markdown(), report.beyond_label_markdown()) == before
    assert "169 of 169 runs recorded" in "\n".join(before[0])
    assert "121 of 121 runs recorded" in "\n".join(before[1])
    assert _present() == found_before


def _record(spec: RunSpec, **extra) -> dict:
    assert RECORD_VERSION == record_fakes.records.RECORD_VERSION
    return record_fakes.record(spec, **extra)


SPEC = RunSpec("fmnist", "dirichlet", 0.3, 10, 0, "fedavg")


def test_two_records_of_one_spec_fail_naming_both(tmp_path):
    names = []
    for version in ("0.0.9", fedlib.__version__):  # one run, written under two fedlib versions
        rec = {**_record(SPEC), "versions": {"fedlib": version}, "key": records.key_of(SPEC.to_dict(), version)}
        names.append(f"{rec['key']}.json")
        (tmp_path / names[-1]).write_text(json.dumps(rec))
    a, b = sorted(names)
    with pytest.raises(ValueError, match=rf"{a} and {b} both match") as err:
        fedlib.lookup.find([SPEC], tmp_path)
    assert str(tmp_path) in str(err.value)
    with pytest.raises(ValueError, match=b):
        experiment.present_records([SPEC], tmp_path)


def test_truncated_records_and_other_seeds_are_missing(tmp_path):
    other = RunSpec("fmnist", "dirichlet", 0.3, 10, 1, "fedavg")
    text = json.dumps(_record(other))
    (tmp_path / "cccc.json").write_text(text[: len(text) // 2])  # a half-written file: no record
    (tmp_path / f"{SPEC.key()}.json").write_text(json.dumps(_record(SPEC)))
    assert records.read(tmp_path / "cccc.json") is None
    found, missing = fedlib.lookup.find([other, SPEC, RunSpec("fmnist", "dirichlet", 0.3, 10, 7, "fedavg")], tmp_path)
    assert [r["spec"]["seed"] for r in found] == [0]
    assert [s.seed for s in missing] == [1, 7]
    unfinished = {**_record(other), "status": "running"}
    (tmp_path / "eeee.json").write_text(json.dumps(unfinished))
    assert fedlib.lookup.find([other], tmp_path) == ([], [other])
    assert fedlib.lookup.find([SPEC], tmp_path / "absent") == ([], [SPEC])


def test_a_seed_no_record_has_is_missing():
    specs = _cross()
    spec = RunSpec(**{**specs[0].to_dict(), "seed": 10_000})
    found, missing = fedlib.lookup.find([specs[0], spec], RECORDS / "cross_paper")
    assert len(found) == 1 and missing == [spec]


def test_a_version_bump_leaves_the_whole_findings_page_and_readme_block_unchanged(monkeypatch, committed_report):
    df, page = committed_report
    before = (page, report.readme_block(df))
    _bumped(monkeypatch)
    df = report.frame()
    assert (report.findings_markdown(df), report.readme_block(df)) == before


def test_a_moved_default_keeps_old_records_meaning(tmp_path):
    """FedAMP's default attention moved (softmax → HeurFedAMP): a record whose spec has no
    ``attention`` ran the softmax, so it answers a spec that asks for the softmax, never one at
    today's default; a new spec states its attention, so its record is told apart."""
    old = {**_record(RunSpec("fmnist", "dirichlet", 0.3, 10, 0, "fedamp"))}
    old["spec"] = {**old["spec"], "hyper": {}}  # as written before the key existed
    old["key"] = records.key_of(old["spec"], fedlib.__version__)
    (tmp_path / f"{old['key']}.json").write_text(json.dumps(old))
    today, softmax = (RunSpec("fmnist", "dirichlet", 0.3, 10, 0, "fedamp"),
                      RunSpec("fmnist", "dirichlet", 0.3, 10, 0, "fedamp", hyper={"attention": "softmax", "sigma": 1.0}))
    assert today.to_dict()["hyper"] == {"attention": "heurfedamp", "sigma": "median"}  # the defaults are stated
    assert records.with_recorded_defaults(old["spec"])["hyper"] == {"attention": "softmax", "sigma": 1.0}
    assert softmax.to_dict()["hyper"] == {}  # the recorded value: left out, as the old records have it
    assert softmax.to_dict() == old["spec"] and softmax.key() != today.key()  # the old record's spec and file name
    assert fedlib.lookup.find([today, softmax], tmp_path) == ([records.read(tmp_path / f"{old['key']}.json")], [today])
    assert RunSpec.from_record(old["spec"]).hyper == {"attention": "softmax", "sigma": 1.0}
    new = _record(today)
    (tmp_path / f"{today.key()}.json").write_text(json.dumps(new))
    found, missing = fedlib.lookup.find([today, softmax], tmp_path)
    assert [r["spec"]["hyper"] for r in found] == [{"attention": "heurfedamp", "sigma": "median"}, {}] and missing == []
    # the report's readings match a record as the configuration it ran
    assert report.matches(old["spec"], (("hyper.attention", "softmax"),))
    assert report.matches(old["spec"], (("hyper.sigma", 1.0),)) and not report.matches(old["spec"], (("hyper.sigma", "median"),))
    assert not report.matches(old["spec"], (("hyper.attention", "heurfedamp"),))
    assert report.matches(new["spec"], (("hyper.attention", "heurfedamp"),))
    # a method whose defaults never moved is left as it is
    plain = SPEC.to_dict()
    assert records.with_recorded_defaults(plain) is plain and SPEC.to_dict()["hyper"] == {}
