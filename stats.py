"""
Statistics over seeds: is one schedule's mean or spread of out-of-distribution accuracy different from
another's? numpy only (no scipy), each test checked against textbook values in tests/test_stats.py.

    welch(a, b)            Welch's t-test of the means (unequal variances), two-sided p
    brown_forsythe(a, b)   Brown-Forsythe test of the spreads: one-way ANOVA on |x - median of its group|
                           (Levene's test with medians), p of the F statistic
    bootstrap_std(a)       sample standard deviation (ddof 1) with a percentile bootstrap 95% interval
    power(a, b, n)         how often Brown-Forsythe gives p < 0.05 with n seeds per group, by resampling
                           pilot seeds (with replacement)

The p-values come from the Student t and F distributions, both via the regularised incomplete beta
function I_x(a, b), evaluated by its continued fraction (Numerical Recipes, section 6.4).
"""

import math

import numpy as np


def front90(lengths: list[int], curve: list[float]):
    """Largest grid length n with curve >= 0.9 at n and at every smaller grid length; None if the first
    fails. lengths: the OOD grid, ascending."""
    best = None
    for n, a in zip(lengths, curve):
        if a < 0.9:
            break
        best = n
    return best


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) = B(x; a, b) / B(a, b), for a, b > 0 and 0 <= x <= 1."""
    if x <= 0 or x >= 1:
        return float(x >= 1)
    # front = x^a (1 - x)^b / (a B(a, b)); the continued fraction converges fast for x < (a + 1) / (a + b + 2)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x > (a + 1) / (a + b + 2):
        return 1.0 - betainc(b, a, 1.0 - x)  # I_x(a, b) = 1 - I_{1-x}(b, a)
    # modified Lentz evaluation of 1 / (1 + d_1 / (1 + d_2 / (1 + ...)))
    tiny, f, c, d = 1e-300, 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:  # d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m))
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:  # d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1))
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(1.0 - c * d) < 1e-15:
            break
    return math.exp(log_front) * (f - 1.0) / a


def t_two_sided_p(t: float, df: float) -> float:
    """Pr(|T| >= |t|) for Student's T with df degrees of freedom: I_{df/(df+t^2)}(df/2, 1/2)."""
    return betainc(df / 2, 0.5, df / (df + t * t))


def f_upper_p(F: float, d1: float, d2: float) -> float:
    """Pr(F' >= F) for an F distribution with (d1, d2) degrees of freedom: I_{d2/(d2+d1 F)}(d2/2, d1/2)."""
    return betainc(d2 / 2, d1 / 2, d2 / (d2 + d1 * F)) if F > 0 else 1.0


def welch(a, b) -> dict:
    """Welch's t-test. t = (mean_a - mean_b) / sqrt(s_a^2/n_a + s_b^2/n_b), with the Welch-Satterthwaite
    degrees of freedom df = (v_a + v_b)^2 / (v_a^2/(n_a-1) + v_b^2/(n_b-1)), v = s^2/n."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    diff = a.mean() - b.mean()
    if va + vb == 0:  # no spread at all: the means are equal or certainly different
        return {"t": math.copysign(math.inf, diff) if diff else 0.0, "df": math.nan, "p": float(diff == 0)}
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return {"t": t, "df": df, "p": t_two_sided_p(t, df)}


def brown_forsythe(*groups) -> dict:
    """Brown-Forsythe test of equal spread: z_ij = |x_ij - median_i|, then the one-way ANOVA
    F = [(N - k) / (k - 1)] sum_i n_i (zbar_i - zbar)^2 / sum_ij (z_ij - zbar_i)^2, p = Pr(F' >= F).
    Needs three values per group: two lie equally far from their median, so such a group has no spread of
    z and F is infinite whatever the data (p None then)."""
    if min(len(g) for g in groups) < 3:
        return {"F": None, "p": None}
    z = [np.abs(np.asarray(g, float) - np.median(g)) for g in groups]
    k, N = len(z), sum(len(g) for g in z)
    zbar = np.concatenate(z).mean()
    between = sum(len(g) * (g.mean() - zbar) ** 2 for g in z)
    within = sum(((g - g.mean()) ** 2).sum() for g in z)
    if within == 0:  # every deviation equal within each group
        return {"F": math.inf if between > 0 else 0.0, "p": float(between == 0)}
    F = (N - k) / (k - 1) * between / within
    return {"F": F, "p": f_upper_p(F, k - 1, N - k)}


def bootstrap_std(a, n_boot: int = 10_000, seed: int = 0) -> dict:
    """Sample standard deviation (ddof 1) and its percentile bootstrap 95% interval (resampling seeds with
    replacement, a fixed generator: the same numbers every time)."""
    a = np.asarray(a, float)
    if len(a) < 2:
        return {"std": None, "lo": None, "hi": None}
    idx = np.random.default_rng(seed).integers(0, len(a), (n_boot, len(a)))
    boots = a[idx].std(axis=1, ddof=1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"std": float(a.std(ddof=1)), "lo": float(lo), "hi": float(hi)}


def power(a, b, n: int, test=brown_forsythe, alpha: float = 0.05, reps: int = 2000, seed: int = 0) -> float:
    """Estimated power of `test` with n seeds per group: the fraction of `reps` resampled experiments
    (n draws with replacement from each pilot group) with p < alpha."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    rng = np.random.default_rng(seed)
    hits = sum(test(rng.choice(a, n), rng.choice(b, n))["p"] < alpha for _ in range(reps))
    return hits / reps


def compare(a, b) -> dict:
    """Everything a table prints for two groups of per-seed values: Welch p (means), Brown-Forsythe p
    (spread)."""
    if len(a) < 2 or len(b) < 2:
        return {"welch_p": None, "bf_p": None}
    return {"welch_p": welch(a, b)["p"], "bf_p": brown_forsythe(a, b)["p"]}
