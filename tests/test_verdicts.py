"""The verdict rule as a test (workbook.verdicts): by hand on small cells, and its error rates
simulated on cells with known true gaps."""
import math

import numpy as np
import pytest
from scipy import stats

from workbook import verdicts as V


def test_the_standard_error_of_the_gap_by_hand():
    # paper: sd 2 over 4 runs -> 1; ours: sd 3 over 9 seeds -> 1; se = sqrt(2)
    se, df = V.delta_se(2.0, 4, 3.0, 9, 8)
    assert se == pytest.approx(math.sqrt(2))
    assert df == pytest.approx(4 / (1 / 3 + 1 / 8))  # Welch: (a+b)^2 / (a^2/3 + b^2/8), a = b = 1
    assert V.delta_se(0.0, 5, 3.0, 9, 8) == (pytest.approx(1.0), 8)  # no printed spread: ours alone


def test_the_margin_is_the_tolerance_or_the_papers_own_sd():
    assert V.margin_of(1.0, 0.4) == 1.0 and V.margin_of(1.0, 7.0) == 14.0 and V.margin_of(1.0, None) == 1.0


def test_a_close_precise_row_is_reproduced_a_far_one_differs_a_noisy_one_is_undecided():
    close = V.verdict(80.0, 1.0, 5, [80.2, 80.5, 79.9, 80.1, 80.4], 1.0)
    assert close.outcome == "reproduced" and -2 < close.low < close.high < 2
    far = V.verdict(80.0, 1.0, 5, [70.2, 70.5, 69.9], 1.0)
    assert far.outcome == "differs" and far.high < -2
    # FedProx at S = 0 (paper_text): 35.64 ± 16.17 over 3 seeds against 15 ± 7: the old rule said reproduced
    noisy = V.verdict(15.0, 7.0, 5, [35.64 - 16.17, 35.64, 35.64 + 16.17], 1.0)
    assert noisy.outcome == "undecided" and noisy.margin == 14.0
    assert noisy.seeds_to_decide is None  # the paper's own se (3.1 pp) leaves it open at any n ≤ 50
    spread = V.verdict(80.0, 1.0, 5, [76.0, 80.0, 84.0], 1.0)  # our seeds' sd 4 against a margin of 2
    assert spread.outcome == "undecided" and 3 < spread.seeds_to_decide <= V.MAX_SEEDS
    more = V.verdict(80.0, 1.0, 5, np.resize([76.0, 80.0, 84.0], spread.seeds_to_decide), 1.0)
    assert more.outcome == "reproduced"  # with that many seeds at today's mean and sd it decides


def test_one_seed_borrows_the_pooled_sd_and_never_counts_as_exact():
    pooled = V.pooled_sd([[1.0, 3.0], [10.0, 12.0, 14.0], [5.0]])  # (2 + 8) / (1 + 2)
    assert pooled == (pytest.approx(math.sqrt(10 / 3)), 3)
    one = V.verdict(80.0, 1.0, 5, [80.3], 1.0, pooled=pooled)
    assert one.pooled and one.our_sd == pytest.approx(math.sqrt(10 / 3)) and one.se > one.our_sd * 0.99
    with pytest.raises(ValueError, match="pooled"):
        V.verdict(80.0, 1.0, 5, [80.3], 1.0)  # no sd of its own, none pooled
    assert V.pooled_sd([[1.0], [2.0]]) == (pytest.approx(float("nan"), nan_ok=True), 0)


def test_seed_sd_pools_by_scope_narrowest_first_and_never_0():
    """The pools the report's and the plan's one-seed rows borrow from: rows of two seeds or more,
    grouped per scope of pool_keys (method, data set, protocol; every method; the folder)."""
    from types import SimpleNamespace as NS

    def rd(method, protocol, name="r"):
        return NS(records="f", metric="acc", name=name, match={"method": method, "dataset": "d", "protocol": protocol})

    a, b, c = rd("m", "p"), rd("n", "p"), rd("m", "q")
    pools = V.seed_sd_pools([(a, [1.0, 3.0]), (b, [10.0, 12.0, 14.0]), (c, [5.0, 5.0]), (rd("m", "p"), [7.0])])
    narrow, method_wide, folder = V.pool_keys(a)
    assert narrow == ("f", "acc", "r", "m", "d", "p") and folder == ("f", "acc", "d")
    assert pools[narrow] == (pytest.approx(math.sqrt(2)), 1, 1, V.POOL_SCOPES[0])
    assert pools[method_wide] == (pytest.approx(math.sqrt(10 / 3)), 3, 2, V.POOL_SCOPES[1])
    assert pools[folder] == (pytest.approx(math.sqrt(10 / 4)), 4, 3, V.POOL_SCOPES[2])
    assert V.pool_keys(c)[0] not in pools  # its seeds agree exactly: a pooled sd of 0 is none


def test_no_number_of_our_seeds_decides_a_row_the_papers_own_spread_leaves_open():
    # paper sd 10 over 2 runs: its se alone (7.1, t(1) = 6.3) exceeds the gap to the margin of 20
    v = V.verdict(50.0, 10.0, 2, [50.0 + 22.0, 50.0 + 21.0, 50.0 + 23.0], 1.0)
    assert v.outcome == "undecided" and v.seeds_to_decide is None


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="values"):
        V.verdict(80.0, 1.0, 5, [float("nan")], 1.0)
    with pytest.raises(ValueError, match="paper_n"):
        V.verdict(80.0, 1.0, 0, [80.0, 81.0], 1.0)
    with pytest.raises(ValueError, match="tolerance"):
        V.margin_of(0.0, 1.0)


def test_t_quantile_is_scipys_t_ppf_value_for_value():
    p = np.array([0.9, 0.95, 0.975, 0.99, 0.5, 0.2])
    for df in (1, 2, 3.7, 29.5, 1e6, math.inf):
        assert np.array_equal(V.t_quantile(p, df), stats.t.ppf(p, df)), df
    df = np.array([1.0, 4.2, math.inf])
    assert np.array_equal(V.t_quantile(0.95, df), stats.t.ppf(0.95, df))
    assert V.t_quantile(0.95, math.inf) == pytest.approx(1.6448536, abs=1e-7)  # the normal's


def _simulate(true_gap: float, n: int, paper_n: int = 5, sd: float = 2.0, tolerance: float = 1.0,
              trials: int = 4000, seed: int = 0) -> dict:
    """How often each outcome comes out for cells whose paper and ours share one seed sd and
    whose true gap is ``true_gap``; a one-seed cell pools the sd over 10 rows of 3 seeds."""
    rng = np.random.default_rng(seed)
    counts = dict.fromkeys(V.OUTCOMES, 0)
    for _ in range(trials):
        paper = rng.normal(0.0, sd, paper_n)
        ours = rng.normal(true_gap, sd, n)
        pooled = V.pooled_sd(rng.normal(0.0, sd, (10, 3))) if n == 1 else None
        v = V.verdict(paper.mean(), paper.std(ddof=1), paper_n, ours, tolerance, pooled=pooled)
        counts[v.outcome] += 1
    return {k: c / trials for k, c in counts.items()}


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_simulated_error_rates_stay_within_alpha(n):
    # the margin is max(tolerance, the paper's printed sd): simulate at the margin the rule uses
    sd = 2.0
    at_zero = _simulate(0.0, n, sd=sd)
    assert at_zero["differs"] <= V.ALPHA  # no true difference: rarely "differs"
    margin = V.MARGIN_SDS * sd  # two of the paper's sd (≈ 2) dominate the 1 pp tolerance
    at_twice = _simulate(2 * margin, n, sd=sd, seed=1)
    assert at_twice["reproduced"] <= V.ALPHA  # a true gap of twice the margin: rarely "reproduced"


def test_the_old_rule_would_fail_the_simulation():
    """|Δ| ≤ max(tolerance, paper sd + our sd), the rule before, reads "reproduced" far more than α
    of the time when the truth is a gap of twice the margin."""
    rng = np.random.default_rng(2)
    sd, hits, trials = 2.0, 0, 4000
    for _ in range(trials):
        paper, ours = rng.normal(0.0, sd, 5), rng.normal(2 * sd, sd, 3)
        hits += abs(ours.mean() - paper.mean()) <= max(1.0, paper.std(ddof=1) + ours.std(ddof=1))
    assert hits / trials > 5 * V.ALPHA


def test_the_interval_is_a_t_interval():
    v = V.verdict(0.0, 0.0, 5, [1.0, 2.0, 3.0], 1.0)
    half = stats.t.ppf(1 - V.ALPHA, 2) * 1.0 / math.sqrt(3)
    assert (v.low, v.high) == (pytest.approx(2 - half), pytest.approx(2 + half))
