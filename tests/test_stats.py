"""stats.py against textbook values: Welch's t-test on the example of Welch's t-test's Wikipedia article,
Brown-Forsythe against the same numbers computed by hand, the incomplete beta against closed forms,
and the bootstrap interval's behaviour."""

import math

import numpy as np
import pytest

import stats

# Wikipedia, "Welch's t-test", example 1 (values quoted there: t = -2.46, df = 25.0, p = 0.021)
A1 = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
A2 = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]


def test_incomplete_beta_closed_forms():
    for x in (0.05, 0.3, 0.5, 0.9):
        assert stats.betainc(1, 1, x) == pytest.approx(x, abs=1e-12)  # uniform
        assert stats.betainc(2, 1, x) == pytest.approx(x ** 2, abs=1e-12)
        assert stats.betainc(0.5, 0.5, x) == pytest.approx(2 / math.pi * math.asin(math.sqrt(x)), abs=1e-10)
        assert stats.betainc(3, 2, x) + stats.betainc(2, 3, 1 - x) == pytest.approx(1.0, abs=1e-12)


def test_student_t_quantiles():
    # two-sided 5% critical values of Student's t (any statistics table): df 1 -> 12.706, 10 -> 2.228
    assert stats.t_two_sided_p(12.706, 1) == pytest.approx(0.05, abs=1e-4)
    assert stats.t_two_sided_p(2.228, 10) == pytest.approx(0.05, abs=1e-4)
    assert stats.f_upper_p(4.965, 1, 10) == pytest.approx(0.05, abs=1e-4)  # F(1, 10) = t(10)^2


def test_welch_textbook_example():
    r = stats.welch(A1, A2)
    assert r["t"] == pytest.approx(-2.46, abs=0.005) and r["df"] == pytest.approx(25.0, abs=0.05)
    assert r["p"] == pytest.approx(0.021, abs=0.0005)
    assert stats.welch(A2, A1)["p"] == pytest.approx(r["p"])


def test_brown_forsythe_by_hand():
    a, b = [1.0, 2.0, 3.0, 10.0], [4.0, 4.5, 5.0, 5.5]
    # |x - median|: a -> 1.5, 0.5, 0.5, 7.5 (median 2.5), b -> 0.75, 0.25, 0.25, 0.75 (median 4.75)
    za, zb = np.array([1.5, 0.5, 0.5, 7.5]), np.array([0.75, 0.25, 0.25, 0.75])
    z = np.concatenate([za, zb])
    F = 6 * (4 * (za.mean() - z.mean()) ** 2 + 4 * (zb.mean() - z.mean()) ** 2) / (
        ((za - za.mean()) ** 2).sum() + ((zb - zb.mean()) ** 2).sum())
    r = stats.brown_forsythe(a, b)
    assert r["F"] == pytest.approx(F) and 0 < r["p"] < 1
    assert r["p"] == pytest.approx(stats.f_upper_p(F, 1, 6))
    assert stats.brown_forsythe(A1, A1)["p"] == pytest.approx(1.0)


def test_brown_forsythe_needs_three_values_a_group():
    # two values sit equally far from their median: F was infinite (p 0) for any data, e.g. two seeds a row
    assert stats.brown_forsythe([0.3, 0.31], [20.5, 9.6])["p"] is None
    assert stats.compare([0.3, 0.31], [20.5, 9.6])["bf_p"] is None
    assert 0 < stats.brown_forsythe([0.3, 0.31, 0.29], [20.5, 9.6, 15.0])["p"] < 1


def test_against_scipy_when_available():
    ss = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for _ in range(5):
        a, b = rng.normal(0, 1, 7), rng.normal(0.5, 3, 11)
        assert stats.welch(a, b)["p"] == pytest.approx(ss.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-8)
        assert stats.brown_forsythe(a, b)["p"] == pytest.approx(ss.levene(a, b, center="median").pvalue, rel=1e-8)


def test_bootstrap_std_interval_and_power():
    a = [96.8, 96.5, 95.2, 97.9, 99.2]
    r = stats.bootstrap_std(a)
    assert r["std"] == pytest.approx(np.std(a, ddof=1)) and r["lo"] < r["std"] < r["hi"]
    assert stats.bootstrap_std(a) == r  # a fixed generator: the same interval every time
    assert stats.bootstrap_std([1.0])["std"] is None
    fixed = [99.8, 99.3, 98.8, 97.7, 70.5]  # one failed seed in five
    p16, p32 = stats.power(a, fixed, 16, reps=400), stats.power(a, fixed, 32, reps=400)
    assert 0 < p16 < p32 <= 1  # more seeds, more power
    assert stats.power(a, a, 16, reps=400) < 0.15  # equal spreads: about the false-alarm rate
