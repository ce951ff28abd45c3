"""lab/stats.py and study/stats.py against textbook values: Welch's t-test on the example of Welch's t-test's
Wikipedia article, Brown-Forsythe against the same numbers computed by hand, the incomplete beta against closed
forms, and the bootstrap interval's behaviour."""

import math
import statistics

import numpy as np
import pytest

from lab import stats
from study import stats as study_stats

# Wikipedia, "Welch's t-test", example 1 (values quoted there: t = -2.46, df = 25.0, p = 0.021)
A1 = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
A2 = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]


@pytest.mark.smoke
def test_incomplete_beta_closed_forms():
    for x in (0.05, 0.3, 0.5, 0.9):
        assert stats.betainc(1, 1, x) == pytest.approx(x, abs=1e-12)  # uniform
        assert stats.betainc(2, 1, x) == pytest.approx(x ** 2, abs=1e-12)
        assert stats.betainc(0.5, 0.5, x) == pytest.approx(2 / math.pi * math.asin(math.sqrt(x)), abs=1e-10)
        assert stats.betainc(3, 2, x) + stats.betainc(2, 3, 1 - x) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.smoke
def test_student_t_quantiles():
    # two-sided 5% critical values of Student's t (any statistics table): df 1 -> 12.706, 10 -> 2.228
    assert stats.t_two_sided_p(12.706, 1) == pytest.approx(0.05, abs=1e-4)
    assert stats.t_two_sided_p(2.228, 10) == pytest.approx(0.05, abs=1e-4)
    assert stats.f_upper_p(4.965, 1, 10) == pytest.approx(0.05, abs=1e-4)  # F(1, 10) = t(10)^2


@pytest.mark.smoke
def test_welch_textbook_example():
    r = stats.welch(A1, A2)
    assert r["t"] == pytest.approx(-2.46, abs=0.005) and r["df"] == pytest.approx(25.0, abs=0.05)
    assert r["p"] == pytest.approx(0.021, abs=0.0005)
    assert stats.welch(A2, A1)["p"] == pytest.approx(r["p"])


@pytest.mark.smoke
def test_brown_forsythe_by_hand():
    a, b = [1.0, 2.0, 3.0, 10.0], [4.0, 4.5, 5.0, 5.5]
    # |x - median|: a -> 1.5, 0.5, 0.5, 7.5 (median 2.5), b -> 0.75, 0.25, 0.25, 0.75 (median 4.75)
    za, zb = np.array([1.5, 0.5, 0.5, 7.5]), np.array([0.75, 0.25, 0.25, 0.75])
    z = np.concatenate([za, zb])
    F = 6 * (4 * (za.mean() - z.mean()) ** 2 + 4 * (zb.mean() - z.mean()) ** 2) / (
        ((za - za.mean()) ** 2).sum() + ((zb - zb.mean()) ** 2).sum())
    r = study_stats.brown_forsythe(a, b)
    assert r["F"] == pytest.approx(F) and 0 < r["p"] < 1
    assert r["p"] == pytest.approx(stats.f_upper_p(F, 1, 6))
    assert study_stats.brown_forsythe(A1, A1)["p"] == pytest.approx(1.0)


def test_brown_forsythe_needs_three_values_a_group():
    # two values sit equally far from their median: F was infinite (p 0) for any data, e.g. two seeds a row
    assert study_stats.brown_forsythe([0.3, 0.31], [20.5, 9.6])["p"] is None
    assert 0 < study_stats.brown_forsythe([0.3, 0.31, 0.29], [20.5, 9.6, 15.0])["p"] < 1


def test_against_scipy_when_available():
    ss = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for _ in range(5):
        a, b = rng.normal(0, 1, 7), rng.normal(0.5, 3, 11)
        assert stats.welch(a, b)["p"] == pytest.approx(ss.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-8)
        assert study_stats.brown_forsythe(a, b)["p"] == pytest.approx(ss.levene(a, b, center="median").pvalue, rel=1e-8)


def test_power_grows_with_seeds_and_is_the_false_alarm_rate_at_equal_spreads():
    a = [96.8, 96.5, 95.2, 97.9, 99.2]
    fixed = [99.8, 99.3, 98.8, 97.7, 70.5]  # one failed seed in five
    p16, p32 = study_stats.power(a, fixed, 16, reps=400), study_stats.power(a, fixed, 32, reps=400)
    assert 0 < p16 < p32 <= 1  # more seeds, more power
    assert study_stats.power(a, a, 16, reps=400) < 0.15  # equal spreads: about the false-alarm rate


def test_gamma_and_chi_square_against_closed_forms_and_the_table():
    """P(1, x) = 1 - e^-x, P(1/2, x) = erf(sqrt x); chi-square quantiles of any table: chi2_.975(9) = 19.023,
    chi2_.025(9) = 2.700, chi2_.975(100) = 129.56. Mutation seen failing: the continued fraction's b stepping by 1."""
    for x in (0.1, 1.0, 3.0, 12.0):
        assert stats.gammainc(1, x) == pytest.approx(1 - math.exp(-x), abs=1e-12)
        assert stats.gammainc(0.5, x) == pytest.approx(math.erf(math.sqrt(x)), abs=1e-12)
    assert stats.chi2_quantile(0.975, 9) == pytest.approx(19.023, abs=1e-3)
    assert stats.chi2_quantile(0.025, 9) == pytest.approx(2.700, abs=1e-3)
    assert stats.chi2_quantile(0.975, 100) == pytest.approx(129.56, abs=1e-2)


def std_coverage(k: int, m: int, seed_sd: float, run_sd: float, sims: int = 400) -> float:
    rng, hits = np.random.default_rng(0), 0
    for _ in range(sims):
        cl = [list(rng.normal(rng.normal(0, seed_sd), run_sd, m)) for _ in range(k)]
        r = stats.std_interval(cl if m > 1 else [c[0] for c in cl])
        hits += r["lo"] <= math.hypot(seed_sd, run_sd) <= r["hi"]
    return hits / sims


def test_std_interval_by_hand_and_it_covers_with_and_without_replicates():
    """The chi-square interval of an SD, s sqrt(9 / chi2(9)) at 10 runs, covers 0.95 of the time at one run a seed and
    at least that with replicates (effective count). Seen failing on the percentile bootstrap it replaces (the old
    stats.bootstrap_std covered 0.79 at 10 runs, 0.82 at 10 seeds x 5 and 0.63 at 5 x 5 in this simulation)."""
    a = [96.8, 96.5, 95.2, 97.9, 99.2, 97.0, 94.1, 98.3, 96.6, 95.5]
    r, s = stats.std_interval(a), np.std(a, ddof=1)
    assert r["std"] == pytest.approx(s)
    assert r["lo"] == pytest.approx(s * math.sqrt(9 / 19.023), rel=1e-4)
    assert r["hi"] == pytest.approx(s * math.sqrt(9 / 2.700), rel=1e-4)
    assert stats.std_interval([1.0])["std"] is None
    assert 0.92 <= std_coverage(10, 1, 0.0, 5.0) <= 0.98
    assert 0.92 <= std_coverage(10, 5, 3.0, 8.0) <= 0.99
    assert 0.92 <= std_coverage(5, 5, 6.0, 5.0) <= 0.99


def test_binomial_interval_against_clopper_pearson_tables():
    """Clopper-Pearson: 0 of 10 -> [0, 0.3085], 5 of 10 -> [0.1871, 0.8129] (any table); 27 of 240 -> [0.075, 0.159].
    Mutation seen failing: the upper end's beta(k + 1, n - k) written beta(k, n - k + 1)."""
    assert study_stats.binomial_interval(0, 10) == pytest.approx((0.0, 0.3085), abs=1e-4)
    assert study_stats.binomial_interval(5, 10) == pytest.approx((0.1871, 0.8129), abs=1e-4)
    assert study_stats.binomial_interval(27, 240) == pytest.approx((0.0755, 0.1594), abs=1e-3)
    assert study_stats.binomial_interval(10, 10)[1] == 1.0
    with pytest.raises(ValueError, match="k = 11 of n = 10"):
        study_stats.binomial_interval(11, 10)


# --- the paired tests ---------------------------------------------------------------------------------

# Student's sleep data (Cushny and Peebles 1905; R's `sleep`): extra hours of sleep under two drugs, the
# same ten patients. R: t.test(extra ~ group, paired = TRUE) gives t = -4.0621, df = 9, p = 0.002833,
# 95% interval of the difference [-2.4598858, -0.7001142].
SLEEP1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]


def test_paired_t_textbook_example():
    r = study_stats.paired_t(SLEEP1, SLEEP2)
    assert r["t"] == pytest.approx(-4.0621, abs=5e-4) and r["df"] == 9
    assert r["p"] == pytest.approx(0.002833, abs=5e-6)
    assert (r["lo"], r["hi"]) == pytest.approx((-2.4598858, -0.7001142), abs=1e-6)
    # the unpaired test ignores the pairing and loses it: Welch p = 0.079 (R's t.test(extra ~ group))
    assert stats.welch(SLEEP1, SLEEP2)["p"] == pytest.approx(0.07939, abs=5e-5)


def test_wilcoxon_textbook_and_by_hand():
    # Hollander and Wolfe (1973), p. 29 (R's ?wilcox.test): depression scale before / after, V = 40, p = 0.03906
    x = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30]
    y = [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29]
    r = study_stats.wilcoxon(x, y)
    assert r["W"] == 40 and r["p"] == pytest.approx(0.0390625, abs=1e-9)  # 2 * 10 / 512
    # five positive differences: W+ = 15, the one extreme pattern of 32 in each tail, p = 2/32
    assert study_stats.wilcoxon([1, 2, 3, 4, 5], [0] * 5)["p"] == pytest.approx(0.0625)


def test_wilcoxon_with_ties_against_enumeration():
    import itertools
    a, b = [3.0, 5.0, 1.0, 4.0, 6.0, 2.0, 2.0], [1.0, 4.0, 2.0, 2.0, 5.0, 2.0, 4.0]  # |d| ties, one zero
    d = [x - y for x, y in zip(a, b) if x != y]
    order = sorted(abs(v) for v in d)
    rank = {v: statistics.fmean(i + 1 for i, u in enumerate(order) if u == v) for v in set(order)}
    r = [rank[abs(v)] for v in d]
    w = sum(rk for rk, v in zip(r, d) if v > 0)
    sums = [sum(rk for rk, s in zip(r, signs) if s) for signs in itertools.product([0, 1], repeat=len(d))]
    p = 2 * min(sum(s <= w for s in sums), sum(s >= w for s in sums)) / len(sums)
    got = study_stats.wilcoxon(a, b)
    assert got["n"] == len(d) == 6 and got["W"] == w and got["p"] == pytest.approx(min(1.0, p))


def test_paired_spread_against_enumeration():
    import itertools
    a, b = [10.0, 30.0, 52.0, 11.0, 40.0], [20.0, 24.0, 26.0, 21.0, 25.0]
    for robust in (False, True):
        spread = (lambda v: statistics.fmean(abs(x - statistics.median(v)) for x in v)) if robust else statistics.stdev
        t = spread(a) - spread(b)
        ts = []
        for swap in itertools.product([False, True], repeat=len(a)):
            u = [y if s else x for x, y, s in zip(a, b, swap)]
            v = [x if s else y for x, y, s in zip(a, b, swap)]
            ts.append(spread(u) - spread(v))
        p = sum(abs(x) >= abs(t) - 1e-12 for x in ts) / len(ts)
        r = study_stats.paired_spread(a, b, robust=robust)
        assert r["stat"] == pytest.approx(t) and r["p"] == pytest.approx(p)
        assert study_stats.paired_spread(b, a, robust=robust)["p"] == pytest.approx(p)  # symmetric
    assert 0 < p < 1


def test_paired_spread_finds_a_real_difference_and_not_a_fake_one():
    rng = np.random.default_rng(3)
    base = rng.normal(50, 2, 24)  # a shared seed effect
    wide, narrow = base + rng.normal(0, 12, 24), base + rng.normal(0, 1, 24)
    assert study_stats.paired_spread(wide, narrow)["p"] < 0.01  # Monte Carlo branch (n > 16)
    assert study_stats.paired_spread(wide, narrow, robust=True)["p"] < 0.01
    same = base + rng.normal(0, 5, 24)
    assert study_stats.paired_spread(same, base + rng.normal(0, 5, 24))["p"] > 0.05
    assert study_stats.paired_spread([1.0, 2.0], [3.0, 4.0])["p"] is None  # two seeds: no spread test


def test_sign_flip_by_hand_and_its_floor():
    """d = (1, 2, 3): of the 8 sign patterns, only (+, +, +) has mean >= 2 (one-sided 1/8); |mean| >= 2 twice."""
    assert stats.sign_flip([1, 2, 3], "greater") == pytest.approx(1 / 8)
    assert stats.sign_flip([1, 2, 3], "less") == pytest.approx(1)
    assert stats.sign_flip([1, 2, 3]) == pytest.approx(2 / 8)
    assert stats.sign_flip([1, 2, 3], "greater", shift=3) == pytest.approx(1)  # d - 3 = (-2, -1, 0): never > 0
    d = np.arange(1.0, 13.0)  # 12 positive differences: the exact floor 1 / 4096 one-sided
    assert stats.sign_flip(d, "greater") == pytest.approx(1 / 4096)
    with pytest.raises(ValueError, match="alternative"):
        stats.sign_flip(d, "bigger")


def test_sign_flip_interval_is_the_tests_inversion_and_covers():
    """Each end of the interval sits where the two-sided test crosses 0.05, and over 300 simulated sets of 12
    symmetric differences it covers the true mean at about its nominal 95% (a binomial interval's range)."""
    d = np.array([3.1, -1.2, 5.0, 7.7, 0.4, 2.2, -0.8, 4.4, 6.1, 1.9, 3.3, -2.5])
    lo, hi = stats.sign_flip_interval(d)
    assert lo < d.mean() < hi
    for edge, out in ((lo, -1e-3), (hi, 1e-3)):
        assert stats.sign_flip(d, shift=edge) >= 0.05 > stats.sign_flip(d, shift=edge + out)
    assert stats.sign_flip_interval(d[:5]) == (-math.inf, math.inf)  # 2 / 2^5 > 0.05: no interval is possible
    rng = np.random.default_rng(7)
    cover = sum(lo <= 1.5 <= hi for lo, hi in (stats.sign_flip_interval(1.5 + rng.standard_t(4, 12)) for _ in range(300)))
    assert 0.91 <= cover / 300 <= 0.99, cover


@pytest.mark.smoke
def test_holm_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4 x 0.005, 3 x 0.01, 2 x 0.03, max(0.06, 1 x 0.04): monotone
    assert study_stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert study_stats.holm([0.2, None, 0.6]) == [0.4, None, 0.6]
    assert study_stats.holm([0.5, 0.9]) == [1.0, 1.0]


def test_paired_interval_covers_the_difference():
    a, b = np.arange(20.0) * 2, np.arange(20.0)  # Std(a) - Std(b) = Std(b) ~ 5.9 exactly
    r = study_stats.paired_interval(a, b, lambda x, y: study_stats.spread_stat(x, y, False))
    assert r["lo"] < np.std(b, ddof=1) < r["hi"] and r["lo"] > 0
    x = np.random.default_rng(0).normal(0, 10, 12)  # a seed's pair kept together: a - b = 1 in every resample
    r = study_stats.paired_interval(x + 1, x, lambda u, v: (u - v).mean(-1))
    assert r["lo"] == pytest.approx(1) and r["hi"] == pytest.approx(1)


def test_spread_floor_is_the_smallest_p_the_permutation_test_returns():
    rng = np.random.default_rng(3)
    for n in range(3, 10):
        a, b = 50 + 100 * (-1.0) ** np.arange(n), 50 + rng.normal(0, 1e-3, n)  # every partial swap narrows |T|
        assert study_stats.paired_spread(a, b)["p"] == pytest.approx(study_stats.spread_floor(n))
        ps = [study_stats.paired_spread(rng.normal(0, 1, n), rng.normal(0, 3, n))["p"] for _ in range(30)]
        assert min(ps) >= study_stats.spread_floor(n) - 1e-12
    assert study_stats.spread_floor(5) > 0.05 > study_stats.spread_floor(6)


# --- seed or chaos (study/chaos.py): the one-way ANOVA / ICC, and the block permutation test ---------------

# Shrout & Fleiss (1979), "Intraclass correlations", Table 2: 6 targets rated by 4 judges. Their Table 4:
# BMS = 11.24, WMS = 6.26, ICC(1,1) = .17; the F table gives F.975(5, 18) = 3.38 and F.975(18, 5) = 6.36.
SF = [[9, 2, 5, 8], [6, 1, 3, 2], [8, 4, 6, 8], [7, 1, 2, 6], [10, 5, 6, 9], [6, 2, 4, 7]]


def test_f_quantiles_against_the_f_table():
    assert stats.f_quantile(0.975, 5, 18) == pytest.approx(3.38, abs=0.005)
    assert stats.f_quantile(0.975, 18, 5) == pytest.approx(6.36, abs=0.005)
    assert stats.f_quantile(0.95, 2, 10) == pytest.approx(4.10, abs=0.005)
    assert stats.f_quantile(0.95, 1, 10) == pytest.approx(2.228 ** 2, abs=0.005)  # F(1, df) = t(df)^2


def test_icc_against_shrout_and_fleiss():
    r = stats.anova_icc(SF)
    assert r["msb"] == pytest.approx(11.24, abs=0.005) and r["msw"] == pytest.approx(6.26, abs=0.005)
    assert r["icc"] == pytest.approx(0.17, abs=0.005) and r["n0"] == 4
    # the interval by hand from the table values: F = 11.24 / 6.26; F_L = F / 3.38, F_U = F * 6.36;
    # [(F_L - 1) / (F_L + 3), (F_U - 1) / (F_U + 3)] = [-0.13, 0.72]
    F = 11.2417 / 6.2639
    fl, fu = F / 3.382, F * 6.362
    assert r["lo"] == pytest.approx((fl - 1) / (fl + 3), abs=0.002) and r["lo"] == pytest.approx(-0.13, abs=0.005)
    assert r["hi"] == pytest.approx((fu - 1) / (fu + 3), abs=0.002) and r["hi"] == pytest.approx(0.72, abs=0.005)
    # seed (between-target) and chaos (within) variances: (MSB - MSW) / n0 and MSW
    assert r["var_seed"] == pytest.approx((11.2417 - 6.2639) / 4, abs=1e-3) and r["var_chaos"] == pytest.approx(6.2639, abs=1e-3)


def test_icc_unbalanced_uses_n0_and_extremes():
    # groups of 2, 3 and 4: N = 9, n0 = (9 - (4 + 9 + 16) / 9) / 2 = 2.889 (by hand)
    r = stats.anova_icc([[1, 2], [5, 6, 7], [10, 11, 12, 13]])
    assert r["n0"] == pytest.approx((9 - 29 / 9) / 2)
    assert r["icc"] > 0.9 and r["lo"] > 0.5  # the seeds far apart, replicates close: seed-driven
    noise = np.random.default_rng(1).normal(size=(10, 5))  # no seed effect at all
    c = stats.anova_icc(noise.tolist())
    assert c["lo"] < 0 < c["hi"] and c["hi"] < 0.5  # chaos-driven: the interval's top below 0.5
    assert stats.anova_icc([[1.0], [2.0]])["icc"] is None  # no replicate: no within-seed variance


def test_block_permutation_by_hand():
    # 3 seeds, blocks of 2: row A's within-seed variance is 4x row B's in every seed
    a, b = [[0, 2], [5, 7], [1, 3]], [[0, 1], [5, 6], [1, 2]]
    r = study_stats.block_permutation(a, b, study_stats.within_var)
    assert r["stat"] == pytest.approx(math.log(4)) and r["ratio_std"] == pytest.approx(2.0)
    # 8 patterns; |T*| = log 4 only for "no swap" and "all swapped" (any other mix has a smaller |T|): p = 2/8
    assert r["p"] == pytest.approx(2 / 8)
    # total variance: the exact enumeration, by brute force over all 2^3 swap patterns
    t = study_stats.block_permutation(a, b, study_stats.total_var)
    obs = abs(math.log(np.var(sum(a, []), ddof=1) / np.var(sum(b, []), ddof=1)))
    hits = 0
    for pattern in range(8):
        A = [y if pattern >> s & 1 else x for s, (x, y) in enumerate(zip(a, b))]
        B = [x if pattern >> s & 1 else y for s, (x, y) in enumerate(zip(a, b))]
        hits += abs(math.log(np.var(sum(A, []), ddof=1) / np.var(sum(B, []), ddof=1))) >= obs - 1e-12
    assert t["p"] == pytest.approx(hits / 8)
    same = study_stats.block_permutation(a, a, study_stats.within_var)
    assert same["stat"] == 0 and same["p"] == 1.0


def test_block_permutation_reaches_its_floor_and_interval_covers():
    rng = np.random.default_rng(1)
    a = [list(rng.normal(0, 5, 5)) for _ in range(10)]
    b = [list(rng.normal(0, 0.5, 5)) for _ in range(10)]
    r = study_stats.block_permutation(a, b, study_stats.within_var)
    assert r["p"] == pytest.approx(2 / 2 ** 10)  # every seed says the same: the floor of an exact test at 10 seeds
    ci = study_stats.block_interval(a, b, study_stats.within_var)
    assert ci["lo"] < r["ratio_std"] < ci["hi"] and ci["lo"] > 5  # true Std ratio 10
    same = study_stats.block_interval(a, a, study_stats.within_var)  # each resample keeps a seed's two blocks together
    assert same["lo"] == pytest.approx(1.0) and same["hi"] == pytest.approx(1.0)
