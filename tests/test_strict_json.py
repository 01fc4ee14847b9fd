"""Every record run_grid writes is strict JSON; non-finite values are listed with their reason."""
import json
import math

import numpy as np
import pytest

from fedlib import experiment as X, records
from workbook.tables import records_frame
from fedlib.engine import Federation, broadcast, local_train
from fedlib.models import build_model, init_params
from fedlib.strict_json import dumps_strict, loads_strict, restore, sanitise

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)

FAST = {"rounds": 2, "local_epochs": 1}


def strict(text: str):
    return json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """Real tiny runs: plain, clients without test samples (classes_per_client, 30 samples),
    a clustered method, and a diverged one."""
    root = tmp_path_factory.mktemp("records")
    specs = {
        "plain": X.RunSpec("adult", "dirichlet", 0.5, 10, 0, "fedavg", fl=FAST, n_train=2000),
        "no_test": X.RunSpec("adult", "classes_per_client", 1, 10, 0, "fedavg", fl=FAST, n_train=30),
        "clustered": X.RunSpec("adult", "dirichlet", 0.5, 10, 0, "clust_psi_pfl", fl=FAST, n_train=2000),
        "failed": X.RunSpec("adult", "dirichlet", 0.5, 10, 0, "fedavg", fl={**FAST, "lr": 1e38}, n_train=2000),
    }
    X.run_grid(list(specs.values()), root, progress=False)
    return root, {name: X.record_path(root, s) for name, s in specs.items()}


def test_every_written_file_is_strict_json(grid):
    root, _ = grid
    files = sorted(root.glob("*.json"))
    assert len(files) == 4
    for p in files:
        text = p.read_text()
        strict(text)
        assert "NaN" not in text and "Infinity" not in text


def test_nonfinite_values_are_null_and_listed_with_their_reason(grid):
    _, paths = grid
    raw = X.run(X.RunSpec("adult", "classes_per_client", 1, 10, 0, "fedavg", fl=FAST, n_train=30))
    empty = [k for k, n in enumerate(raw["n_test"]) if n == 0]
    assert empty and all(math.isnan(raw["local_accuracy"][k]) for k in empty)  # the in-memory record

    rec = strict(paths["no_test"].read_text())
    listed = {e["path"]: e for e in rec["nonfinite"]}
    for k in empty:
        assert rec["local_accuracy"][k] is None
        assert listed[f"$.local_accuracy[{k}]"] == {
            "path": f"$.local_accuracy[{k}]", "value": "nan",
            "reason": "local accuracy of a client with no test samples (n_test = 0)"}
    assert rec["ad_cl"] is None and "no CL accuracy given" in listed["$.ad_cl"]["reason"]
    assert rec["cp"] is None and listed["$.cp"]["value"] == "inf" and "A_min = 0" in listed["$.cp"]["reason"]
    assert set(listed) == {f"$.local_accuracy[{k}]" for k in empty} | {"$.ad_cl", "$.sdad_cl", "$.cp"}
    back = restore(rec)  # lossless: the floats come back, the list goes
    assert "nonfinite" not in back and back["cp"] == math.inf and math.isnan(back["ad_cl"])
    assert [a == b or (math.isnan(a) and math.isnan(b)) for a, b in
            zip(back["local_accuracy"], raw["local_accuracy"])] == [True] * 10


def test_failed_record_is_strict_and_tables_read_restored_values(grid):
    root, paths = grid
    failed = strict(paths["failed"].read_text())
    assert failed["status"] == "failed" and "nonfinite" not in failed
    df = records_frame(X.load_records(root)).set_index(["protocol", "method", "status"])
    assert df.loc[("classes_per_client", "fedavg", "ok"), "cp"] == math.inf  # restored from the list
    assert strict(paths["clustered"].read_text())["info"]["tau"] >= 1


def test_empty_client_mean_loss_is_written_as_null_with_its_reason(tmp_path):
    """mean_loss (NaN for a client with no training sample) is an engine output; if a record
    ever carries it, it is written strictly, with its reason."""
    x = np.random.default_rng(0).normal(size=(60, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    fed = Federation.from_arrays(x, y, [np.arange(30), np.arange(0)], [np.arange(30, 45), np.arange(45, 60)], "cpu")
    model = build_model("logistic", 2, (4,))
    res = local_train(model, broadcast(init_params(model, 0), 2), fed, [0, 1], epochs=1, seed=0)
    record = {"status": "ok", "info": {"mean_loss": res.mean_loss.tolist()}}
    records.write(tmp_path / "r.json", record)
    rec = strict((tmp_path / "r.json").read_text())
    assert rec["info"]["mean_loss"][1] is None and math.isfinite(rec["info"]["mean_loss"][0])
    assert rec["nonfinite"] == [{"path": "$.info.mean_loss[1]", "value": "nan",
                                 "reason": "mean_loss of a client with no training samples"}]


def test_sanitise_paths_unknown_fields_and_a_loud_failure(tmp_path):
    rec = {"a b": [1.0, float("-inf")], "x": {"y": (np.float32("nan"),)}, "ok": 2.5, "s": "NaN"}
    clean = sanitise(rec)
    assert clean["a b"] == [1.0, None] and clean["x"]["y"] == [None] and clean["ok"] == 2.5 and clean["s"] == "NaN"
    assert [(e["path"], e["value"]) for e in clean["nonfinite"]] == [('$["a b"][1]', "-inf"), ("$.x.y[0]", "nan")]
    assert clean["nonfinite"][0]["reason"].startswith("non-finite value")
    assert rec["a b"][1] == -math.inf  # the input is not changed
    assert restore(clean)["a b"][1] == -math.inf
    assert loads_strict(dumps_strict(rec)) == json.loads(json.dumps(clean))
    with pytest.raises(ValueError, match="NaN"):
        loads_strict('{"a": NaN}')
    assert sanitise({"a": 1}) == {"a": 1}  # nothing replaced: no "nonfinite" field

    class Opaque:  # something the sanitiser cannot walk: json.dumps still refuses it loudly
        pass

    with pytest.raises(TypeError):
        records.write(tmp_path / "bad.json", {"x": Opaque()})
    assert not list(tmp_path.iterdir())


def test_a_nan_the_sanitiser_cannot_reach_fails_loudly(tmp_path, monkeypatch):
    from fedlib import strict_json

    monkeypatch.setattr(strict_json, "sanitise", lambda r: r)  # the safety net removed
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        records.write(tmp_path / "r.json", {"x": float("nan")})
    assert not list(tmp_path.iterdir())
