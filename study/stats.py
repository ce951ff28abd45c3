"""
The notebook's statistics: the tests only the study scripts (study/*.py) use, beside lab/stats.py's, which
they need and which this module re-exports so that a study script imports one `stats`. numpy only (no scipy),
each test checked against textbook values in tests/test_stats.py.

Seed k of every row starts from the same initial weights and sees the same batches (controlled seeds),
so two rows are *paired* samples: the paired tests are the primary ones (study/study.py), the
unpaired ones stay beside them.

    paired_t(a, b)         paired t-test of the mean difference a_k - b_k, two-sided p, 95% interval
    wilcoxon(a, b)         Wilcoxon signed-rank test of the same, exact p (ties: average ranks)
    paired_spread(a, b)    paired permutation test of a difference in spread: swap a_k and b_k within
                           seeds; statistic Std(a) - Std(b), or (robust) the difference of the mean
                           absolute deviations from each row's median; exact below 2^16 swaps
    paired_interval(a, b)  percentile bootstrap 95% interval of a paired statistic (seeds resampled jointly)
    holm(ps)               Holm's step-down adjustment of a family of p-values
    binomial_interval(k, n) Clopper-Pearson 95% interval of a rate seen k times in n (a false-alarm rate, a power)
    brown_forsythe(a, b)   Brown-Forsythe test of the spreads: one-way ANOVA on |x - median of its group|
                           (Levene's test with medians), p of the F statistic
    power(a, b, n)         how often Brown-Forsythe gives p < 0.05 with n seeds per group, by resampling
                           pilot seeds (with replacement)

    Seed or chaos? perturbation replicates of a seed (study/chaos.py, study/findings.py):
    within_var, total_var  the chaos (within-seed) variance and the variance of all runs of replicate blocks
    block_permutation(a, b, var)  exact permutation test of log(var(A) / var(B)), whole blocks swapped by seed
    block_interval(a, b, var)     its percentile bootstrap 95% interval of the Std ratio
"""

import math

import numpy as np

from lab.stats import betainc, f_upper_p, t_quantile, t_two_sided_p
# lab/stats.py's tests that the study scripts call too, re-exported: a study script imports one stats
from lab.stats import (anova_icc, effective_runs, f_quantile, invert, sign_flip,  # noqa: F401
                       sign_flip_interval, welch)


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


def power(a, b, n: int, test=brown_forsythe, alpha: float = 0.05, reps: int = 2000, seed: int = 0) -> float:
    """Estimated power of `test` with n seeds per group: the fraction of `reps` resampled experiments
    (n draws with replacement from each pilot group) with p < alpha."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    rng = np.random.default_rng(seed)
    hits = sum(test(rng.choice(a, n), rng.choice(b, n))["p"] < alpha for _ in range(reps))
    return hits / reps


def paired_t(a, b) -> dict:
    """Paired t-test. d_k = a_k - b_k, t = mean(d) / (s_d / sqrt(n)) with n - 1 degrees of freedom; the
    95% interval of the mean difference is mean(d) +- t_{0.975, n-1} s_d / sqrt(n)."""
    d = np.asarray(a, float) - np.asarray(b, float)
    n, mean = len(d), float(d.mean())
    se = d.std(ddof=1) / math.sqrt(n)
    if se == 0:  # every difference equal
        return {"t": math.copysign(math.inf, mean) if mean else 0.0, "df": n - 1, "p": float(mean == 0),
                "diff": mean, "lo": mean, "hi": mean}
    half = t_quantile(0.05, n - 1) * se
    return {"t": mean / se, "df": n - 1, "p": t_two_sided_p(mean / se, n - 1), "diff": mean,
            "lo": mean - half, "hi": mean + half}


def ranks(v: np.ndarray) -> np.ndarray:
    """Ranks 1..n of v, ties given the average of the ranks they span."""
    order = np.argsort(v, kind="stable")
    r = np.empty(len(v))
    i = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
            j += 1
        r[order[i:j + 1]] = (i + j) / 2 + 1  # the mean of ranks i+1 .. j+1
        i = j + 1
    return r


def wilcoxon(a, b) -> dict:
    """Wilcoxon signed-rank test. Zero differences are dropped; R_k = rank of |d_k| (ties averaged);
    W+ = sum of R_k over d_k > 0. Under the null each sign is + or - with probability 1/2 independently,
    so W+'s exact distribution is that of sum_k R_k B_k, B_k ~ Bernoulli(1/2): counted here by dynamic
    programming over the doubled ranks (integers). Two-sided p = 2 min(Pr(W+ <= w), Pr(W+ >= w)), at most 1."""
    d = np.asarray(a, float) - np.asarray(b, float)
    d = d[d != 0]
    if len(d) == 0:
        return {"W": 0.0, "n": 0, "p": 1.0}
    r2 = np.rint(2 * ranks(np.abs(d))).astype(int)  # doubled ranks: averages of two ranks are halves
    w2 = int(r2[d > 0].sum())
    counts = np.zeros(r2.sum() + 1)  # counts[s] = number of sign patterns with doubled W+ = s
    counts[0] = 1
    for r in r2:
        counts[r:] = counts[r:] + counts[:-r]  # a pattern with sign k + adds r to the sum
    prob = counts / counts.sum()
    p = 2 * min(prob[:w2 + 1].sum(), prob[w2:].sum())
    return {"W": w2 / 2, "n": len(d), "p": float(min(1.0, p))}


def mad(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Mean absolute deviation from the median: mean_k |x_k - median(x)|, the robust spread."""
    return np.abs(x - np.median(x, axis=axis, keepdims=True)).mean(axis=axis)


def spread_stat(a: np.ndarray, b: np.ndarray, robust: bool) -> np.ndarray:
    """Std(a) - Std(b) (ddof 1), or MAD(a) - MAD(b), along the last axis."""
    f = mad if robust else (lambda x: x.std(axis=-1, ddof=1))
    return f(a) - f(b)


def paired_spread(a, b, robust: bool = False, n_perm: int = 20_000, seed: int = 0) -> dict:
    """Paired permutation test of a difference in spread. Under the null the two values of seed k are
    exchangeable, so every pattern of swaps (a_k <-> b_k) is equally likely: p = Pr(|T*| >= |T|), T the
    spread statistic (spread_stat). All 2^n patterns when n <= 16, else n_perm random ones plus the
    observed (p = (1 + hits) / (1 + n_perm)); a fixed generator: the same p every time."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    n = len(a)
    if n < 3:
        return {"stat": None, "p": None}
    t = float(spread_stat(a, b, robust))
    if n <= 16:  # exact: every swap pattern, the identity included
        swap = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(bool)
    else:
        swap = np.random.default_rng(seed).integers(0, 2, (n_perm, n)).astype(bool)
    t_star = spread_stat(np.where(swap, b, a), np.where(swap, a, b), robust)
    hits = int((np.abs(t_star) >= abs(t) - 1e-12).sum())
    p = hits / len(swap) if n <= 16 else (1 + hits) / (1 + n_perm)
    return {"stat": t, "p": p}


def spread_floor(n: int, n_perm: int = 20_000) -> float:
    """The smallest p paired_spread can return at n pairs: the observed pattern and its mirror (all swapped)
    give the same |T|, so 2 / 2^n exactly (n <= 16), 1 / (1 + n_perm) when sampled. At 5 pairs it is 0.0625:
    no data could give p < 0.05."""
    return 2 / 2 ** n if n <= 16 else 1 / (1 + n_perm)


def paired_interval(a, b, stat, n_boot: int = 10_000, seed: int = 0) -> dict:
    """Percentile bootstrap 95% interval of stat(a, b) (e.g. spread_stat), resampling seeds with
    replacement and keeping each seed's pair together."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    idx = np.random.default_rng(seed).integers(0, len(a), (n_boot, len(a)))
    boots = stat(a[idx], b[idx])
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"lo": float(lo), "hi": float(hi)}


def beta_quantile(q: float, a: float, b: float) -> float:
    """The x with I_x(a, b) = q (bisection on betainc)."""
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if betainc(a, b, mid) < q else (lo, mid)
    return (lo + hi) / 2


def binomial_interval(k: int, n: int, alpha: float = 0.05) -> tuple:
    """Clopper and Pearson's exact (1 - alpha) interval of a rate observed k times in n: [B(alpha/2; k, n - k + 1),
    B(1 - alpha/2; k + 1, n - k)], B the beta quantile; 0 and 1 at the ends (k = 0, k = n)."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"binomial_interval: k = {k} of n = {n}; need 0 <= k <= n and n >= 1")
    lo = 0.0 if k == 0 else beta_quantile(alpha / 2, k, n - k + 1)
    hi = 1.0 if k == n else beta_quantile(1 - alpha / 2, k + 1, n - k)
    return lo, hi


def holm(ps: list) -> list:
    """Holm's step-down adjustment: with the m p-values sorted p_(1) <= .. <= p_(m), the adjusted
    p_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)). Rejecting where adjusted p < alpha keeps the chance of
    any false rejection in the family <= alpha. None (a test that could not run) stays None, outside the family."""
    idx = sorted((i for i, p in enumerate(ps) if p is not None), key=lambda i: ps[i])
    out, running = [None] * len(ps), 0.0
    for j, i in enumerate(idx):
        running = max(running, min(1.0, (len(idx) - j) * ps[i]))
        out[i] = running
    return out


def within_var(blocks) -> float:
    """The pooled within-seed (chaos) variance MSW of blocks (one array of replicates per seed)."""
    dof = sum(len(b) - 1 for b in blocks)
    return sum(((b - b.mean()) ** 2).sum() for b in blocks) / dof if dof > 0 else math.nan


def total_var(blocks) -> float:
    """The variance (ddof 1) of all runs of the blocks, seeds ignored."""
    y = np.concatenate(blocks)
    return float(y.var(ddof=1)) if len(y) > 1 else math.nan


def log_ratio(a, b, var) -> float:
    """log(var(a) / var(b)); +-inf where one variance is 0, 0 where both are (no evidence either way)."""
    va, vb = var(a), var(b)
    if va == vb:
        return 0.0
    return math.log(va / vb) if va > 0 and vb > 0 else (math.inf if vb == 0 else -math.inf)


def block_permutation(a, b, var) -> dict:
    """Exact permutation test of log(var(A) / var(B)) for two rows of replicate blocks paired by seed (a[s], b[s]:
    the runs of seed s in each row): under the null the two rows' blocks of a seed are exchangeable, so each of
    the 2^k patterns of block swaps is equally likely; two-sided p = Pr(|T*| >= |T|). A seed missing from
    either row is left out. var: within_var (chaos) or total_var (all runs)."""
    pairs = [(np.asarray(x, float), np.asarray(y, float)) for x, y in zip(a, b) if len(x) and len(y)]
    k = len(pairs)
    if k < 2 or k > 16:
        raise ValueError(f"block_permutation: {k} seeds; the exact test enumerates 2..16")
    t = log_ratio([x for x, _ in pairs], [y for _, y in pairs], var)
    hits = 0
    for pattern in range(2 ** k):
        swap = [(pattern >> s) & 1 for s in range(k)]
        ta = log_ratio([y if sw else x for (x, y), sw in zip(pairs, swap)],
                       [x if sw else y for (x, y), sw in zip(pairs, swap)], var)
        hits += abs(ta) >= abs(t) - 1e-12
    return {"stat": t, "ratio_std": math.exp(t / 2), "p": hits / 2 ** k, "seeds": k}


def block_interval(a, b, var, n_boot: int = 10_000, seed: int = 0) -> dict:
    """Percentile bootstrap 95% interval of the Std ratio sqrt(var(A) / var(B)), resampling seeds with
    replacement and keeping each seed's two blocks together (a fixed generator: the same interval every time)."""
    pairs = [(np.asarray(x, float), np.asarray(y, float)) for x, y in zip(a, b) if len(x) and len(y)]
    idx = np.random.default_rng(seed).integers(0, len(pairs), (n_boot, len(pairs)))
    boots = []
    for row in idx:
        va, vb = var([pairs[i][0] for i in row]), var([pairs[i][1] for i in row])
        if va > 0 and vb > 0:
            boots.append(math.sqrt(va / vb))
        elif va > 0:
            boots.append(math.inf)
        elif vb > 0:
            boots.append(0.0)
    if not boots:
        return {"lo": None, "hi": None}
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"lo": float(lo), "hi": float(hi)}
