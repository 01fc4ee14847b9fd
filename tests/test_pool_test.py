"""RunSpec.pool_test: FL-bench's generator (pFedLIA's code base) pools the official test set into
the training pool before the partition; notebook 10's data_split='fl_bench' selects it."""
import pytest

import fedlib.run
from fedlib import experiment as X
from workbook import pfedlia_study as S


def spec(**kw):
    return X.RunSpec("adult", "dirichlet", 0.5, 6, 0, "fedavg", **kw)


def test_pool_test_keeps_old_keys_and_refuses_an_official_test_evaluation():
    assert "pool_test" not in spec().to_dict() and spec(pool_test=True).key() != spec().key()
    with pytest.raises(ValueError, match="global_test must be False when pool_test=True"):
        spec(pool_test=True, global_test=True).validate()
    with pytest.raises(ValueError, match="pool_test must be one of"):
        spec(pool_test="yes").validate()


def test_pooled_federation_partitions_train_and_test_together():
    plain, _, ds = X.build_federation(spec(), "cpu")
    pooled, _, pds = X.build_federation(spec(pool_test=True, test_fraction=0.25), "cpu")
    n_official_test = len(fedlib.run._load("adult", None).y_test)
    assert len(pds.y_train) == len(ds.y_train) + n_official_test and pds.x_test is None
    assert "pooled (FL-bench)" in pds.source
    total = int(pooled.n_train.sum() + pooled.n_test.sum())
    assert total == len(pds.y_train)  # every pooled sample went to some client's train or test split
    assert pooled.n_test.sum() / total == pytest.approx(0.25, abs=0.01)


def test_fl_bench_split_of_notebook_10():
    """FL-bench's generate_data.py: --test_ratio 0.25, --val_ratio 0 (75/25, no validation split);
    FedFomo's --valset_ratio 0.2 of the train part is held out by the methods that need one
    (FedFomo, pFedLIA): 0.75 · 0.2 = 15 % of the client, the test split still 25 %."""
    fl = {"rounds": 2, "local_epochs": 1}
    base = S.training_specs(["noisy_clusters"], 10, [0], fl, methods=["fedavg"], recovery_extra=())
    fl_bench = S.training_specs(["noisy_clusters"], 10, [0], fl, methods=["fedavg", "fedfomo", "pfedlia"],
                                recovery_extra=(), p2p=False, data_split="fl_bench",
                                hyper={"pfedlia": {"warmup_rounds": 1}})
    assert [(s.pool_test, s.test_fraction, s.val_fraction) for s in base] == [(False, 0.2, 0.2)]
    assert [(s.method, s.pool_test, s.test_fraction, s.val_fraction) for s in fl_bench] == [
        ("fedavg", True, 0.25, 0.0), ("fedfomo", True, 0.25, 0.15), ("pfedlia", True, 0.25, 0.15)]
    for s in fl_bench:
        s.validate()
    assert S.split_of(fl_bench[0].to_dict()) == "fl_bench" and S.split_of(base[0].to_dict()) == "workbook"
    with pytest.raises(ValueError, match="data_split must be one of"):
        S.training_specs(["noisy_clusters"], 10, [0], fl, data_split="flbench")


def test_fl_bench_split_gives_fedavg_75_percent_of_each_client_and_no_validation():
    s = X.RunSpec("adult", "dirichlet", 0.5, 6, 0, "fedavg", pool_test=True, test_fraction=S.FL_BENCH_TEST,
                  val_fraction=S.fl_bench_val_fraction("fedavg"))
    fed, _, _ = X.build_federation(s, "cpu")
    n = fed.n_train + fed.n_test
    assert int(fed.n_val.sum()) == 0
    assert abs(fed.n_train.sum() / n.sum() - 0.75) < 0.01
    fomo = X.RunSpec("adult", "dirichlet", 0.5, 6, 0, "fedfomo", pool_test=True, test_fraction=S.FL_BENCH_TEST,
                     val_fraction=S.fl_bench_val_fraction("fedfomo"))
    f2, _, _ = X.build_federation(fomo, "cpu")
    assert (f2.n_test == fed.n_test).all()  # the same test split
    assert abs(f2.n_val.sum() / n.sum() - 0.15) < 0.01 and abs(f2.n_train.sum() / n.sum() - 0.60) < 0.01
