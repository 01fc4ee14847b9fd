"""RunSpec.pool_test: FL-bench's generator (pFedLIA's code base) pools the official test set into
the training pool before the partition; notebook 10's data_split='fl_bench' selects it."""
import pytest

from fedlib import experiment as X
from fedlib.analysis import pfedlia_study as S


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
    n_official_test = len(X._load("adult", None).y_test)
    assert len(pds.y_train) == len(ds.y_train) + n_official_test and pds.x_test is None
    assert "pooled (FL-bench)" in pds.source
    total = int(pooled.n_train.sum() + pooled.n_test.sum())
    assert total == len(pds.y_train)  # every pooled sample went to some client's train or test split
    assert pooled.n_test.sum() / total == pytest.approx(0.25, abs=0.01)


def test_fl_bench_split_of_notebook_10():
    fl = {"rounds": 2, "local_epochs": 1}
    base = S.training_specs(["noisy_clusters"], 10, [0], fl, methods=["fedavg"], recovery_extra=())
    fl_bench = S.training_specs(["noisy_clusters"], 10, [0], fl, methods=["fedavg"], recovery_extra=(),
                                data_split="fl_bench")
    assert [(s.pool_test, s.test_fraction) for s in base] == [(False, 0.2)]
    assert [(s.pool_test, s.test_fraction, s.val_fraction) for s in fl_bench] == [(True, 0.25, 0.2)]
    with pytest.raises(ValueError, match="data_split must be one of"):
        S.training_specs(["noisy_clusters"], 10, [0], fl, data_split="flbench")
