"""python -m fedlib.grid (fedlib.grid_cli; benchmarks/paper_grid.py its alias): a filtered part of notebook 09's / 10's grid, built by the notebooks'
own grid functions, run into a records folder and resumed; bad filters fail before any work."""
from __future__ import annotations

import importlib.util
import inspect
import json
from pathlib import Path

import pytest
import yaml

import fedlib.grid

from workbook import beyond_label, cafa_study, cross_paper, fedprism_study, pfedlia_study, psi_pfl_study
from fedlib.experiment import load_records

import record_fakes

ROOT = Path(__file__).resolve().parents[1]
SMOKE09 = ROOT / "params" / "smoke" / "09_fedprism.yaml"
SMOKE10 = ROOT / "params" / "smoke" / "10_pfedlia.yaml"


def _script():
    """The command's module (``python -m fedlib.grid``; ``benchmarks/paper_grid.py`` is its alias);
    its tables are the registry's (:mod:`workbook.paper_tables`)."""
    from fedlib import grid_cli

    return grid_cli


@pytest.mark.parametrize("study, name", [(psi_pfl_study, "07_psi_pfl"), (cafa_study, "08_cafa"), (fedprism_study, "09_fedprism"),
                                         (pfedlia_study, "10_pfedlia"), (cross_paper, "11_cross_paper"),
                                         (beyond_label, "12_beyond_label_skew")])
def test_grid_params_are_the_notebook_params_and_the_grid_functions_keywords(study, name):
    keywords = [p.name for p in inspect.signature(study.notebook_grid).parameters.values()
                if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert sorted(keywords) == sorted(study.GRID_PARAMS)
    for profile in ("smoke", "paper"):
        params = yaml.safe_load((ROOT / "params" / profile / f"{name}.yaml").read_text())
        assert set(study.GRID_PARAMS) <= set(params), profile


def test_fedprism_tables_are_notebook_09s_grid():
    """The three tables together are the grid notebook 09 builds (training runs, then the
    component ablations, then the global weights), spec for spec."""
    p = yaml.safe_load(SMOKE09.read_text())
    pg = _script()
    tables = [pg.select(t, p) for t in ("fedprism-table1", "fedprism-table9", "fedprism-table11")]
    common = dict(hyper=p["hyper"], n_train=p["n_train"], dataset=p["dataset"], n_global_test=p["n_global_test"],
                  partition=p["partition"])
    expected = fedprism_study.training_specs(p["alphas"], p["n_clients"], p["seeds"], p["fl"], methods=p["methods"],
                                             cfl_variants=p["cfl_variants"], fedamp_variants=p["fedamp_variants"], **common)
    assert tables[0] == expected
    assert {s.protocol for s in expected} == {"dirichlet_client"}
    args = (p["ablation_alpha"], p["n_clients"], p["seeds"], p["fl"])
    assert tables[1] == fedprism_study.ablation_specs(*args, components=p["components"], global_weights=[],
                                                      alpha_clips=p["alpha_clips"], **common)
    assert tables[2] == fedprism_study.ablation_specs(*args, components=[], global_weights=p["global_weights"],
                                                      **common)
    assert [fedprism_study.variant_of(s.to_dict()) for s in tables[1]] == (
        p["components"] + [f"clip={c}" for c in p["alpha_clips"]])


@pytest.mark.parametrize("profile", ["smoke", "paper"])
def test_cafa_table_is_notebook_08s_training_grid(profile):
    """cafa-table4 is notebook 08's Tables IV–V grid (the official test set scored, every IID
    share, the profile's model and official-test subset), filtered."""
    from workbook import cafa_study

    p = yaml.safe_load((ROOT / "params" / profile / "08_cafa.yaml").read_text())
    pg = _script()
    expected = cafa_study.training_specs(p["dataset"], p["n_train"], p["iid_fractions"], p["n_clients"], p["seeds"],
                                         p["methods"], p["hyper"], p["fl"], p["val_fraction"],
                                         n_global_test=p["n_global_test"], arch=p["arch"])
    assert pg.select("cafa-table4", p) == expected and all(s.global_test for s in expected)
    assert len(expected) == len(p["iid_fractions"]) * len(p["seeds"]) * len(p["methods"])
    assert {s.n_global_test for s in expected} == {p["n_global_test"]} and {s.arch for s in expected} == {p["arch"]}
    n_shares = len(p["iid_fractions"])
    assert [s.method for s in pg.select("cafa-table4", p, methods=["cafa"])] == ["cafa"] * len(p["seeds"]) * n_shares
    zero = pg.select("cafa-table4", p, iid_fractions=[0.0])
    assert zero == [s for s in expected if s.level == 0.0] and len(zero) == len(expected) // n_shares
    with pytest.raises(ValueError, match="--alphas must be left out for cafa-table4"):
        pg.select("cafa-table4", p, alphas=[0.1])
    with pytest.raises(ValueError, match=r"--iid-fractions must be one of \[0\.0.*\] .*got 0\.25"):
        pg.select("cafa-table4", p, iid_fractions=[0.25])
    with pytest.raises(ValueError, match=r"--iid-fractions must be left out for fedprism-table1"):
        pg.select("fedprism-table1", yaml.safe_load(SMOKE09.read_text()), iid_fractions=[0.0])


@pytest.mark.parametrize("profile", ["smoke", "paper"])
def test_psi_pfl_table_is_notebook_07s_grid(profile):
    """psi-pfl is the grid notebook 07 builds (psi_pfl and the baselines, both readings where the
    profile asks), spec for spec; --datasets and --n-clients keep what they name, alone or with
    --alphas/--seeds/--methods."""
    p = yaml.safe_load((ROOT / "params" / profile / "07_psi_pfl.yaml").read_text())
    pg = _script()
    expected = psi_pfl_study.grid_specs(p["datasets"], p["alphas"], p["n_clients"], p["seeds"], p["baselines"],
                                        hyper=p["hyper"], fl=p["fl"], n_train=p["n_train"],
                                        val_fraction=p["val_fraction"], reproductions=p["reproductions"])
    assert pg.select("psi-pfl", p) == expected
    assert {s.method for s in expected} == {*p["baselines"], "psi_pfl"}
    code = [s for s in expected if s.reproduction == "paper_code"]  # the paper profile's PoC/HACCS/FedCLS/FedProx
    assert all(pg.describe(s, "psi-pfl").endswith(f" {s.method} (paper_code) seed={s.seed}") for s in code)
    assert ("paper_code" in p["reproductions"]) == bool(code)
    k = max(p["n_clients"])
    part = pg.select("psi-pfl", p, datasets=["adult"], n_clients=[k], alphas=[min(p["alphas"])], seeds=[0])
    assert part == [s for s in expected if s.dataset == "adult" and s.n_clients == k
                    and s.level == min(p["alphas"]) and s.seed == 0]
    assert len(part) == len(expected) // (len(p["datasets"]) * len(p["n_clients"]) * len(p["alphas"])
                                          * len(p["seeds"]))
    assert {s.method for s in pg.select("psi-pfl", p, methods=["cl", "psi_pfl"], datasets=["fmnist"])} == {
        "cl", "psi_pfl"}
    with pytest.raises(ValueError, match=r"--n-clients must be one of \[.*\] .*got 7"):
        pg.select("psi-pfl", p, n_clients=[7])
    with pytest.raises(ValueError, match=r"--datasets must be one of \['adult', 'fmnist'\] .*got 'mnist'"):
        pg.select("psi-pfl", p, datasets=["mnist"])
    with pytest.raises(ValueError, match="--datasets must be left out for cafa-table4"):
        pg.select("cafa-table4", yaml.safe_load((ROOT / "params" / profile / "08_cafa.yaml").read_text()),
                  datasets=["fmnist"])


def test_cafa_paper_profile_keeps_the_specs_of_its_first_records():
    """The paper profile's IID share 0 runs are the RunSpecs (and record keys) the grid made
    before the IID-share, model and official-test-subset options existed: the records made
    with it still match (the report reads them)."""
    import dataclasses

    from workbook import cafa_study
    from fedlib.experiment import grid_specs

    p = yaml.safe_load((ROOT / "params" / "paper" / "08_cafa.yaml").read_text())
    assert p["iid_fractions"][0] == 0.0 and len(p["iid_fractions"]) > 1  # a setting with IID clients
    assert p["n_global_test"] is None and p["arch"] is None  # the whole official test set, the workbook model
    old = [dataclasses.replace(s, val_fraction=0.2, global_test=True)
           for s in grid_specs([p["dataset"]], {"iid_fraction_classes": [0.0]}, [p["n_clients"]], p["seeds"],
                               p["methods"], hyper=p["hyper"], fl=p["fl"], n_train=p["n_train"])]
    new = [s for s in cafa_study.notebook_grid(**{k: p[k] for k in cafa_study.GRID_PARAMS})["table4"]
           if s.level == 0.0]
    assert [s.key() for s in new] == [s.key() for s in old]
    assert {s.level for s in cafa_study.notebook_grid(**{k: p[k] for k in cafa_study.GRID_PARAMS})["table4"]} \
        == set(p["iid_fractions"])


def test_filters_keep_what_they_name():
    pg = _script()
    p = yaml.safe_load(SMOKE09.read_text())
    specs = pg.select("fedprism-table1", p, seeds=[0], methods=["cfl", "local"], alphas=[0.1, 0.5])
    assert {(s.method, s.level) for s in specs} == {(m, a) for m in ("cfl", "local") for a in (0.1, 0.5)}
    assert len(specs) == 2 * (1 + len(p["cfl_variants"]) + 1)  # cfl selects every CFL row
    q = yaml.safe_load(SMOKE10.read_text())
    lia = pg.select("pfedlia-table1", q, settings=["noisy_clusters"], methods=["pfedlia"])
    assert len(lia) == 2 and {s.protocol for s in lia} == {"noisy_clusters"}  # centralised and p2p


def test_cross_paper_table_is_notebook_11s_grid_filtered_by_protocol():
    """cross-paper is notebook 11's grid; --settings keeps the partition protocols it names
    (both Similarity levels for 'similarity'); the Oracle is only on the pathological partition."""
    p = yaml.safe_load((ROOT / "params" / "smoke" / "11_cross_paper.yaml").read_text())
    pg = _script()
    expected = cross_paper.notebook_grid(**{k: p[k] for k in cross_paper.GRID_PARAMS})["cross"]
    assert pg.select("cross-paper", p) == expected
    sim = pg.select("cross-paper", p, settings=["similarity"], methods=["fedavg"])
    assert sorted(s.level for s in sim) == [0.0, 1.0] and {s.method for s in sim} == {"fedavg"}
    assert {s.protocol for s in pg.select("cross-paper", p, methods=["oracle"])} == {"pathological_clusters"}
    with pytest.raises(ValueError, match=r"--settings must be one of .*got 'shards'"):
        pg.select("cross-paper", p, settings=["shards"])


def test_beyond_label_table_is_notebook_12s_grid_filtered_by_protocol_and_dataset():
    """beyond-label is notebook 12's grid; --settings keeps a partition protocol (every small-client
    share for 'small_clients'), --datasets adult keeps the age partition only, and progress lines
    name the study's variant."""
    p = yaml.safe_load((ROOT / "params" / "smoke" / "12_beyond_label_skew.yaml").read_text())
    pg = _script()
    expected = beyond_label.notebook_grid(**{k: p[k] for k in beyond_label.GRID_PARAMS})["study"]
    assert pg.select("beyond-label", p) == expected
    small = pg.select("beyond-label", p, settings=["small_clients"], methods=["fedavg"])
    assert sorted(s.level for s in small) == sorted(p["small_shares"]) and {s.method for s in small} == {"fedavg"}
    assert {s.protocol for s in pg.select("beyond-label", p, datasets=["adult"])} == {"attribute_skew"}
    rot = pg.select("beyond-label", p, settings=["rotated_groups"], methods=["clust_psi_pfl"])
    assert [pg.describe(s, "beyond-label").split(" K=20 ")[1].split()[0] for s in rot] == \
        [v for v in p["variants"] if v.startswith("psi_")]


@pytest.mark.parametrize("table, kwargs, match", [
    ("fedprism-table2", {}, r"table must be one of \['psi-pfl', 'cafa-table4', 'fedprism-table1', .*'clust-psi-pfl-table3'\], "
                            r"got 'fedprism-table2'"),
    ("fedprism-table9", dict(methods=["fedavg"]),
     r"--methods must be one of \['fedprism'\] \(the methods of fedprism-table9's grid\), got 'fedavg'"),
    ("fedprism-table1", dict(seeds=[0, 7]), r"--seeds must be one of \[0\] .*got 7"),
    ("fedprism-table1", dict(alphas=[0.2]), r"--alphas must be one of \[0\.1, 0\.3, 0\.5\] .*got 0\.2"),
    ("pfedlia-table1", dict(alphas=[0.1]), r"--alphas must be left out for pfedlia-table1 .*got \[0\.1\]"),
    ("fedprism-table1", dict(settings=["noisy_clusters"]), r"--settings must be left out for fedprism-table1"),
    ("pfedlia-table1", dict(params=str(SMOKE09)), r"params must be a params file of notebook 10_pfedlia \(it lacks"),
    ("fedprism-table1", dict(workers=0), r"--workers must be an integer ≥ 1, got 0"),
])
def test_bad_filters_fail_before_any_work(tmp_path, table, kwargs, match):
    out = tmp_path / "records"
    kwargs = {"params": str(SMOKE09) if table.startswith("fedprism") else str(SMOKE10), **kwargs}
    with pytest.raises(ValueError, match=match):
        _script().run_table(table, out, echo=lambda line: None, **kwargs)
    assert not out.exists()


def test_the_command_line_reports_a_bad_filter(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        _script().main(["fedprism-table9", "--out", str(tmp_path / "r"), "--methods", "fedavg"])
    assert exc.value.code == 2
    assert "--methods must be one of ['fedprism']" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.cross_cpu
def test_runs_are_recorded_and_a_second_call_computes_nothing(tmp_path):
    """One smoke-sized FedAvg run of Table 1 (α = 0.1, seed 0) through the command line's
    function: its record appears in the folder, and the same call again only reads it."""
    pg = _script()
    out = tmp_path / "table1"
    lines = []
    first = pg.run_table("fedprism-table1", out, params=str(SMOKE09), seeds=[0], methods=["fedavg"], alphas=[0.1],
                         device="cpu", echo=lines.append)
    assert first["recorded"] == 0 and len(first["computed"]) == 1
    record = first["computed"][0]
    assert record["status"] == "ok" and record["spec"]["protocol"] == "dirichlet_client"
    assert [r["spec"] for r in load_records(out)] == [record["spec"]]
    assert lines[0] == f"fedprism-table1: 1 runs, 0 already recorded in {out}, 1 to compute"
    assert lines[1].startswith(f"fmnist (per-client Dir(0.1)) K=20 fedavg seed=0: ok in {record['seconds']:.1f} s, ")
    assert lines[1].endswith(" %")  # the finished line carries its accuracy (issue 71)
    stored = json.loads(next(out.glob("*.json")).read_text())
    assert stored["seconds"] == record["seconds"]
    lines.clear()
    second = pg.run_table("fedprism-table1", out, params=str(SMOKE09), seeds=[0], methods=["fedavg"], alphas=[0.1],
                          device="cpu", echo=lines.append)
    assert second["recorded"] == 1 and second["computed"] == []
    assert lines == [f"fedprism-table1: 1 runs, 1 already recorded in {out}, 0 to compute"]


@pytest.mark.cross_cpu
def test_together_trains_the_fedavg_family_in_groups_and_the_rest_as_usual(tmp_path):
    """--together: Table 1's FedAvg at two α train side by side (one group), Local alone;
    every record is written, the batched ones marked host['together'] = 2."""
    pg = _script()
    out = tmp_path / "table1"
    lines = []
    result = pg.run_table("fedprism-table1", out, params=str(SMOKE09), seeds=[0], methods=["fedavg", "local"],
                          alphas=[0.1, 0.3], device="cpu", echo=lines.append, together=True)
    assert len(result["computed"]) == 4 and lines[1] == "fedprism-table1: 2 runs train together in groups (fedlib.together)"
    together = {(r["spec"]["method"], r["spec"]["level"]): r["host"].get("together") for r in load_records(out)}
    assert together == {("fedavg", 0.1): 2, ("fedavg", 0.3): 2, ("local", 0.1): None, ("local", 0.3): None}


def test_a_run_another_process_is_computing_is_taken_last(tmp_path, monkeypatch):
    """Two commands sharing a folder: the second skips ahead of the run the first has claimed
    (a claim of a live process: this test's own pid) instead of waiting behind it."""
    from fedlib import claims
    from fedlib.experiment import record_path

    pg = _script()
    out = tmp_path / "t1"
    out.mkdir()
    specs = pg.select("fedprism-table1", pg.load_params("fedprism-table1", str(SMOKE09)), seeds=[0],
                      methods=["fedavg", "local"], alphas=[0.1])
    assert len(specs) == 2
    assert claims.try_claim(record_path(out, specs[0]))  # "another process" is computing the first
    order = []

    def fake(spec, out_, device, mode, budget=None, estimate_from=(), wait=True):
        order.append(spec.key())
        if spec.key() == specs[0].key():  # by now its owner has finished it
            claims.release(record_path(out, spec))
        return {"status": "ok", "seconds": 0.0, "spec": spec.to_dict()}

    monkeypatch.setattr(fedlib.grid, "_compute_one", fake)  # the one run of run_grid's per-run scheduler
    lines = []
    result = pg.run_table("fedprism-table1", out, params=str(SMOKE09), seeds=[0], methods=["fedavg", "local"],
                          alphas=[0.1], device="cpu", echo=lines.append)
    assert order == [specs[1].key(), specs[0].key()]
    assert not pg._claimed_elsewhere(out, specs[0])  # released: nobody's
    # the run the other process held is its record, not this command's: said so, and not counted
    assert [r["spec"] for r in result["computed"]] == [specs[1].to_dict()]
    assert lines[-1].endswith("ok, recorded by another process") and "in 0.0 s" in lines[-2]


def test_a_run_another_process_recorded_meanwhile_is_skipped(tmp_path, monkeypatch):
    """A run whose record another process wrote after this command listed its runs is neither
    computed again nor echoed as computed here."""
    from fedlib.experiment import record_path

    pg = _script()
    out = tmp_path / "t1"
    out.mkdir()
    specs = pg.select("fedprism-table1", pg.load_params("fedprism-table1", str(SMOKE09)), seeds=[0],
                      methods=["fedavg", "local"], alphas=[0.1])
    order = []

    def fake(spec, out_, device, mode, budget=None, estimate_from=(), wait=True):
        order.append(spec.key())
        record_path(out, specs[1]).write_text(json.dumps(record_fakes.record(specs[1])))  # meanwhile, the other process records the second run
        return {"status": "ok", "seconds": 0.0, "spec": spec.to_dict()}

    monkeypatch.setattr(fedlib.grid, "_compute_one", fake)  # the one run of run_grid's per-run scheduler
    lines = []
    result = pg.run_table("fedprism-table1", out, params=str(SMOKE09), seeds=[0], methods=["fedavg", "local"],
                          alphas=[0.1], device="cpu", echo=lines.append)
    assert order == [specs[0].key()]
    assert len(result["computed"]) == 1 and len(lines) == 2  # the header and the one run computed here


def test_list_says_where_each_run_stands_in_the_folder(tmp_path, capsys):
    """``--list`` names each filtered run with its state in ``--out``: recorded (and how it ended),
    running in another live process, or still to compute; it computes nothing."""
    from fedlib import claims
    from fedlib.experiment import record_path

    pg = _script()
    out = tmp_path / "t1"
    out.mkdir()
    specs = pg.select("fedprism-table1", pg.load_params("fedprism-table1", str(SMOKE09)), seeds=[0],
                      methods=["fedavg", "local", "fedprism"], alphas=[0.1])[:3]
    record_path(out, specs[0]).write_text(json.dumps(record_fakes.record(specs[0], "failed")))
    assert claims.try_claim(record_path(out, specs[1]))  # a live process (this test) is computing it
    pg.main(["fedprism-table1", "--out", str(out), "--params", str(SMOKE09), "--seeds", "0", "--alphas", "0.1",
             "--methods", "fedavg", "local", "fedprism", "--list"])
    lines = capsys.readouterr().out.splitlines()
    states = {line.rsplit(": ", 1)[0]: line.rsplit(": ", 1)[1] for line in lines}
    assert states[pg.describe(specs[0], 'fedprism-table1')] == "recorded (failed)"
    assert states[pg.describe(specs[1], 'fedprism-table1')] == "running"
    assert states[pg.describe(specs[2], 'fedprism-table1')].startswith("to compute")
    assert lines[-1].startswith("totals: 3 runs, 1 recorded, 1 running elsewhere, 1 to compute")
    assert sorted(p.name for p in out.glob("*.json")) == [record_path(out, specs[0]).name]  # nothing computed


def _comparable(spec, seconds: float, device: str = "cpu") -> dict:
    """A finished record of another run like ``spec`` (same data set, K, method, training length)."""
    from fedlib.methods import FLConfig

    _, fl, _ = spec.effective()
    return {"status": "ok", "seconds": seconds, "device": device, "host": {"threads": 1},
            "spec": {**spec.to_dict(), "seed": 99}, "fl": {k: getattr(FLConfig.from_dict(fl), k)
                                                           for k in ("rounds", "local_epochs")}}


def test_list_estimates_each_run_to_compute_and_totals_them(tmp_path, capsys, monkeypatch):
    """``--list`` gives each run to compute its estimated seconds (the median of comparable
    records in --out and --estimate-from, on the --device's kind) and ends with the totals: CPU-hours
    from CPU records, GPU-minutes from GPU records (a GPU need not be here to plan a lease)."""
    from fedlib.experiment import record_path

    monkeypatch.delenv("FEDLIB_SHARING", raising=False)
    pg = _script()
    out, times = tmp_path / "t1", tmp_path / "times"
    out.mkdir()
    times.mkdir()
    specs = pg.select("fedprism-table1", pg.load_params("fedprism-table1", str(SMOKE09)), seeds=[0],
                      methods=["fedavg", "local", "fedprism"], alphas=[0.1])[:3]
    record_path(out, specs[0]).write_text(json.dumps(record_fakes.record(specs[0])))
    (times / "a.json").write_text(json.dumps(_comparable(specs[1], 1800.0)))
    (times / "b.json").write_text(json.dumps(_comparable(specs[1], 60.0, "cuda:0")))
    argv = ["fedprism-table1", "--out", str(out), "--params", str(SMOKE09), "--seeds", "0", "--alphas", "0.1",
            "--methods", "fedavg", "local", "fedprism", "--list", "--estimate-from", str(times)]
    pg.main(argv + ["--device", "cpu"])
    lines = capsys.readouterr().out.splitlines()
    assert f"{pg.describe(specs[1], 'fedprism-table1')}: to compute (≈ 1800 s on cpu)" in lines
    # fedprism has no record of its own: the data set's (any method) stands in
    assert f"{pg.describe(specs[2], 'fedprism-table1')}: to compute (≈ 1800 s on cpu)" in lines
    assert lines[-1] == "totals: 3 runs, 1 recorded, 0 running elsewhere, 2 to compute; to compute: ≈ 1.00 CPU-hours"
    pg.main(argv + ["--device", "cuda"])
    lines = capsys.readouterr().out.splitlines()
    assert f"{pg.describe(specs[1], 'fedprism-table1')}: to compute (≈ 60 s on cuda)" in lines
    assert lines[-1] == "totals: 3 runs, 1 recorded, 0 running elsewhere, 2 to compute; to compute: ≈ 2.0 GPU-minutes"
    # a run with a checkpoint (fedlib.checkpoint): where it resumes, and only what is left of it
    from types import SimpleNamespace

    from fedlib.checkpoint import Checkpointer, checkpoint_path
    from fedlib.methods import FLConfig

    monkeypatch.setenv("FEDLIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    rounds = FLConfig.from_dict(specs[1].effective()[1]).rounds
    key = specs[1].key()
    Checkpointer(checkpoint_path(key), key).write(0, rounds // 2, {}, SimpleNamespace(
        history=[], _opt_state=None, cfg=SimpleNamespace(rounds=rounds)))
    pg.main(argv + ["--device", "cpu"])
    lines = capsys.readouterr().out.splitlines()
    left = 1800 * (1 - (rounds // 2) / rounds)
    assert (f"{pg.describe(specs[1], 'fedprism-table1')}: to compute, checkpoint resumes it at round {rounds // 2 + 1} of {rounds} "
            f"(≈ {left:.0f} s left on cpu)") in lines
    checkpoint_path(key).unlink()
    monkeypatch.setenv("FEDLIB_SHARING", "2")  # planning a lease of 2 processes (the record does not say its sharing)
    pg.main(argv + ["--device", "cuda"])
    assert capsys.readouterr().out.splitlines()[-1].endswith(
        "≈ 2.0 GPU-minutes (the runs' seconds summed, measured with 2 processes sharing the device: ≈ 1.0 minutes of "
        "wall time with 2 at once)")
    monkeypatch.delenv("FEDLIB_SHARING")
    (times / "b.json").unlink()
    pg.main(argv + ["--device", "cuda"])
    lines = capsys.readouterr().out.splitlines()
    assert f"{pg.describe(specs[1], 'fedprism-table1')}: to compute (no comparable record on cuda)" in lines
    assert lines[-1].endswith("2 to compute; to compute: no comparable record on cuda to estimate them from")


def test_list_datasets_names_the_data_the_runs_need(capsys):
    _script().main(["fedprism-table1", "--out", "unused", "--params", str(SMOKE09), "--list-datasets"])
    assert capsys.readouterr().out.split() == ["fmnist"]


def test_a_budget_leaves_the_runs_that_would_not_fit_for_a_later_call(tmp_path, monkeypatch):
    """Under --budget a run estimated to end after the budget is not started (a line says what it
    needs), a run estimated to fit is, and the totals line sums what was left."""
    pg = _script()
    monkeypatch.delenv("FEDLIB_SHARING", raising=False)
    out, times = tmp_path / "t1", tmp_path / "times"
    times.mkdir()
    specs = pg.select("fedprism-table1", pg.load_params("fedprism-table1", str(SMOKE09)), seeds=[0],
                      methods=["fedavg", "local"], alphas=[0.1])
    (times / "slow.json").write_text(json.dumps(_comparable(specs[0], 1e5)))
    (times / "fast.json").write_text(json.dumps(_comparable(specs[1], 1.0)))
    started = []

    def fake(spec, out_, device, mode, budget=None, estimate_from=(), wait=True):
        started.append(spec.method)
        assert 0 < budget <= 600 and [str(f) for f in estimate_from] == [str(times)]
        return {"status": "ok", "seconds": 1.0, "spec": spec.to_dict()}

    monkeypatch.setattr(fedlib.grid, "_compute_one", fake)  # the one run of run_grid's per-run scheduler
    lines = []
    result = pg.run_table("fedprism-table1", out, params=str(SMOKE09), seeds=[0], methods=["fedavg", "local"],
                          alphas=[0.1], device="cpu", budget=600, estimate_from=[str(times)], echo=lines.append)
    assert started == ["local"] and result["skipped"] == [specs[0]] and len(result["computed"]) == 1
    assert lines[1] == ("fedprism-table1: budget 600 s: a run starts only if 1.15 × its estimated seconds, and "
                        "the longest comparable run, end before it (a resumable method's run: those of its first 2 rounds; it stops at a round boundary)")
    assert (f"{pg.describe(specs[0], 'fedprism-table1')}: left for a later call (it reserves 100000 s; it would not end before the "
            "budget does)") in lines
    assert lines[-1] == "fedprism-table1: budget: 1 runs left for a later call, reserving 100000 s of runs"
    with pytest.raises(ValueError, match=r"--budget must be a finite number > 0, got -5"):
        pg.run_table("fedprism-table1", tmp_path / "none", params=str(SMOKE09), budget=-5, echo=lines.append)
    with pytest.raises(ValueError, match=r"--estimate-from must be existing folders of records"):
        pg.run_table("fedprism-table1", tmp_path / "none", params=str(SMOKE09), budget=5,
                     estimate_from=[str(tmp_path / "nowhere")], echo=lines.append)
    assert not (tmp_path / "none").exists()


def test_a_run_the_budget_stopped_is_reported_with_its_checkpoint(tmp_path, monkeypatch):
    """A run that started and was stopped at a round boundary (its checkpoint is there) is not
    reported as "left for a later call" but as stopped, with where it resumes."""
    from types import SimpleNamespace

    from fedlib.checkpoint import Checkpointer, checkpoint_path

    monkeypatch.setenv("FEDLIB_CHECKPOINTS", str(tmp_path))
    pg = _script()
    spec = pg.select("fedprism-table1", pg.load_params("fedprism-table1", str(SMOKE09)), seeds=[0],
                     methods=["fedavg"], alphas=[0.1])[0]
    lines, computed, skipped = [], [], []
    pg._collect([(spec, None, False, 100.0)], computed, skipped, lines.append, True)
    assert lines == [f"{pg.describe(spec)}: left for a later call (it reserves 100 s; it would not end before the budget does)"]
    Checkpointer(checkpoint_path(spec.key()), spec.key()).write(0, 3, {}, SimpleNamespace(
        history=[], _opt_state=None, cfg=SimpleNamespace(rounds=10)))
    lines.clear()
    pg._collect([(spec, None, False, 100.0)], computed, skipped, lines.append, True)
    assert lines == [f"{pg.describe(spec)}: stopped by the budget before round 4; its checkpoint "
                     f"({checkpoint_path(spec.key())}) resumes it in a later call"]
    assert [s for s, _ in skipped] == [spec, spec] and computed == []
