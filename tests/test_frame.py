"""fedlib.frame.records_frame: the one reader of run records, on made-up records."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import record_fakes
from fedlib.frame import records_frame
from fedlib.spec import RunSpec
from fedlib.strict_json import sanitise
from workbook import tables


def spec(method="fedavg", seed=0, **kw):
    return RunSpec("fmnist", "dirichlet", 0.3, 2, seed, method, **kw)


def test_one_row_per_record_with_spec_status_metrics_and_the_record():
    ok = record_fakes.record(spec(hyper={"mu": 0.1, "layers": [1, 2]}, fl={"rounds": 5}), accuracy=0.6,
                             wpsi=0.2, info={"tau": 3, "selected_on": "val", "assignment": [0, 1]},
                             global_test_accuracy=0.7)
    df = records_frame([ok])
    assert df.shape[0] == 1
    row = df.iloc[0]
    assert (row.dataset, row.protocol, row.level, row.n_clients, row.seed, row.method) == (
        "fmnist", "dirichlet", 0.3, 2, 0, "fedavg")
    assert (row.status, row.reproduction, row.reported_rule) == ("ok", "paper_text", "last_round")
    assert row.global_accuracy == row.reported_accuracy == 0.6 and row.wpsi == 0.2 and row.cp == 0.0
    assert row.tau == 3 and row["info.tau"] == 3 and row["info.selected_on"] == "val"
    assert "info.assignment" not in df and "hyper.layers" not in df  # lists stay in the record
    assert row["hyper.mu"] == 0.1 and row["fl.rounds"] == 5 and row["spec.test_fraction"] == 0.2
    assert row.seconds == row.cpu_seconds == 1.0 and row.global_test_accuracy == 0.7
    assert row.local_accuracy == [0.6, 0.6] and row.record is ok
    assert math.isnan(row.ad_cl) and math.isnan(row.sdad_cl)  # no CL run of this setting and seed


def test_column_order_is_table_iii_then_sorted_groups_then_record():
    df = records_frame([record_fakes.record(spec(hyper={"mu": 0.1}), info={"b": 1, "a": "x"})])
    cols = list(df.columns)
    assert cols[:6] == ["dataset", "protocol", "level", "n_clients", "seed", "method"]
    assert cols.index("local_accuracy") < cols.index("ad_cl") < cols.index("seconds") < cols.index("cpu_seconds")
    assert [c for c in cols if c.startswith("info.")] == ["info.a", "info.b"]
    assert cols.index("hyper.mu") < cols.index("info.a") and cols[-1] == "record"


def test_failed_and_infeasible_records_have_no_metrics():
    failed = record_fakes.record(spec(seed=1), "failed")
    infeasible = record_fakes.record(spec(seed=2), "infeasible")
    df = records_frame([failed, infeasible])
    assert list(df.status) == ["failed", "infeasible"]
    assert df.error.iloc[0] == "fake" and pd.isna(df.error.iloc[1])  # Table III's frame: failed runs' error
    for col in ("global_accuracy", "ad", "sdad", "cp", "wpsi", "tau", "ad_cl", "sdad_cl", "seconds"):
        assert df[col].isna().all(), col
    assert "local_accuracy" not in df and not [c for c in df if c.startswith("info.")]
    assert list(df.record) == [failed, infeasible]


def test_records_without_info_or_times():
    r = record_fakes.record(spec())
    del r["info"], r["seconds"], r["cpu_seconds"], r["local_accuracy"]
    df = records_frame([r, record_fakes.record(spec(seed=1), info={"tau": 2})])
    assert pd.isna(df.tau.iloc[0]) and df.tau.iloc[1] == 2 and pd.isna(df["info.tau"].iloc[0])
    assert np.isnan(df.seconds.iloc[0]) and df.seconds.iloc[1] == 1.0
    assert df.local_accuracy.iloc[0] is None and np.isnan(df.ad_cl.iloc[0])


def test_ad_against_the_cl_run_of_the_same_setting_and_seed():
    cl = record_fakes.record(spec("cl"), accuracy=0.8)
    fedavg = record_fakes.record(spec(), local_accuracy=[0.5, 0.9])
    other_seed = record_fakes.record(spec(seed=1))
    df = records_frame([fedavg, cl, other_seed]).set_index(["method", "seed"])
    assert df.loc[("fedavg", 0), "ad_cl"] == pytest.approx(0.2) and df.loc[("fedavg", 0), "sdad_cl"] == pytest.approx(0.1)
    assert df.loc[("cl", 0), "ad_cl"] == 0.0 and np.isnan(df.loc[("fedavg", 1), "ad_cl"])


def test_two_cl_runs_of_one_setting_and_seed_give_no_target():
    cl = record_fakes.record(spec("cl"))
    other_split = record_fakes.record(RunSpec("fmnist", "dirichlet", 0.3, 2, 0, "cl", n_train=100))
    df = records_frame([record_fakes.record(spec()), cl, other_split])
    assert df.ad_cl.isna().all() and df.sdad_cl.isna().all()


def test_strict_json_records_are_restored():
    r = sanitise(record_fakes.record(spec(), cp=float("inf"), local_accuracy=[0.5, float("nan")]))
    df = records_frame([r])
    assert df.cp.iloc[0] == np.inf and np.isnan(df.local_accuracy.iloc[0][1])
    assert df.record.iloc[0]["cp"] == np.inf


def test_empty_and_bad_input():
    assert records_frame([]).empty
    with pytest.raises(ValueError, match="records entries must be run records"):
        records_frame([{"status": "ok"}])
    with pytest.raises(ValueError, match="records entries must be run records"):
        records_frame([{"spec": None, "status": "ok"}])
    partial = records_frame([{"spec": {"seed": 0, "method": "fedavg"}, "status": "infeasible"}])
    assert partial.dataset.iloc[0] is None and partial.seed.iloc[0] == 0  # a made-up spec: None for what it lacks


def test_workbook_tables_name_is_the_core_reader():
    assert tables.records_frame is records_frame
