"""fedlib.evaluation: local/global accuracy, AD/SDAD (both targets), client parity."""
import numpy as np
import pytest

from fedlib import evaluation as E


def test_local_and_global_accuracy_hand_computed():
    correct, n = [9, 1, 0], [10, 2, 8]
    np.testing.assert_allclose(E.local_accuracy(correct, n), [0.9, 0.5, 0.0])
    # sample-weighted: (9+1+0)/(10+2+8) — not the plain mean of local accuracies (0.4667)
    assert E.global_accuracy(correct, n) == pytest.approx(0.5)


def test_empty_test_split_gives_nan_and_is_skipped():
    acc = E.local_accuracy([3, 0], [4, 0])
    assert acc[0] == 0.75 and np.isnan(acc[1])
    assert E.average_distance(acc) == (pytest.approx(0.25), pytest.approx(0.0))


def test_ad_sdad_against_one_and_against_cl():
    acc = np.array([1.0, 0.8, 0.5])
    ad, sdad = E.average_distance(acc, 1.0)
    d = np.array([0.0, 0.2, 0.5])
    assert ad == pytest.approx(d.mean()) and sdad == pytest.approx(d.std(ddof=0))
    ad_cl, sdad_cl = E.average_distance(acc, 0.9)
    d = np.abs(acc - 0.9)
    assert ad_cl == pytest.approx(d.mean()) and sdad_cl == pytest.approx(d.std())


def test_client_parity():
    assert E.client_parity([0.9, 0.3, 0.6]) == pytest.approx((0.9 - 0.3) / 0.3)
    assert E.client_parity([0.7, 0.7]) == 0.0
    assert E.client_parity([0.0, 0.5]) == float("inf")


def test_client_parity_with_clients_at_zero_by_hand():
    """PSI-PFL is silent on A = 0: 'inf' keeps the limit, 'exclude' leaves those clients out."""
    acc = [0.0, 0.3, 0.9, float("nan")]  # NaN: a client without a test split, always left out
    assert E.client_parity(acc, zero="inf") == float("inf")
    assert E.client_parity(acc, zero="exclude") == pytest.approx((0.9 - 0.3) / 0.3)  # = 2.0
    assert E.client_parity([0.0, 0.5], zero="exclude") == 0.0  # one client left: nothing to differ from
    assert E.client_parity([0.0, 0.0], zero="exclude") == 0.0  # all at 0: equal accuracies
    assert E.client_parity([0.0, 0.0], zero="inf") == 0.0
    # without a zero the two rules agree: (0.8 − 0.25) / 0.25 = 2.2, the paper's HACCS/FedCLS value
    assert E.client_parity([0.25, 0.5, 0.8], zero="exclude") == E.client_parity([0.25, 0.5, 0.8]) == pytest.approx(2.2)
    with pytest.raises(ValueError, match=r"zero must be one of \['inf', 'exclude'\]"):
        E.client_parity([0.5], zero="skip")


def test_summarise_clients_keys_and_values():
    s = E.summarise_clients([8, 2], [10, 10], cl_accuracy=0.9)
    assert s["global_accuracy"] == pytest.approx(0.5)
    assert s["ad"] == pytest.approx(0.5) and s["sdad"] == pytest.approx(0.3)
    assert s["ad_cl"] == pytest.approx(0.4)
    assert s["local_accuracy"] == [0.8, 0.2]
    assert np.isnan(E.summarise_clients([1], [1])["ad_cl"])


def test_errors():
    with pytest.raises(ValueError, match="same shape"):
        E.local_accuracy([1, 2], [3])
    with pytest.raises(ValueError, match="no test samples"):
        E.global_accuracy([0, 0], [0, 0])
    with pytest.raises(ValueError, match="1-D"):
        E.average_distance([])
