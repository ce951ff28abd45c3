"""Statistics over seeds, numpy only (tests/test_stats.py checks each against textbook values): the t, F and
chi-square distributions (incomplete beta and gamma, Numerical Recipes 6.2, 6.4), Welch's t-test, the sign-flip
test and its interval, the Std over runs with its interval, and two sets of runs by seed (lab/compare.py).
The study's other tests: study/stats.py."""

import functools
import math

import numpy as np


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


def gammainc(a: float, x: float) -> float:
    """Regularised lower incomplete gamma P(a, x) = gamma(a, x) / Gamma(a), for a > 0, x >= 0: its series below
    x = a + 1, else 1 - its continued fraction (Numerical Recipes, section 6.2)."""
    if x <= 0:
        return 0.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:  # P = front / a * sum_n x^n / ((a + 1) ... (a + n))
        term = total = 1.0 / a
        for n in range(1, 1000):
            term *= x / (a + n)
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return math.exp(log_front) * total
    tiny, b = 1e-300, x + 1 - a  # Q = front / (x + 1 - a - 1 (1 - a) / (x + 3 - a - ...)), modified Lentz
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 1000):
        an, b = -i * (i - a), b + 2
        d = an * d + b
        d = 1 / (d if abs(d) > tiny else tiny)
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return 1.0 - math.exp(log_front) * h


def chi2_quantile(q: float, df: float) -> float:
    """The q-quantile of the chi-square distribution with df degrees of freedom: P(df/2, x/2) = q, by bisection."""
    lo, hi = 0.0, max(1.0, 2 * df)
    while gammainc(df / 2, hi / 2) < q:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gammainc(df / 2, mid / 2) < q else (lo, mid)
    return (lo + hi) / 2


def std_interval(a, alpha: float = 0.05) -> dict:
    """Sample Std (ddof 1) over runs and its chi-square (1 - alpha) interval [s sqrt(f / chi2_{1-alpha/2}(f)),
    s sqrt(f / chi2_{alpha/2}(f))], f = n - 1. a: one value a seed, or one list a seed (its --perturb replicates):
    then f = N_eff - 1, N_eff the runs' effective count (effective_runs)."""
    if len(a) and isinstance(a[0], (list, tuple, np.ndarray)):
        cl = [np.asarray(c, float) for c in a if len(c)]
        y, n = np.concatenate(cl) if cl else np.array([]), effective_runs(cl) if cl else 0.0
    else:
        y = np.asarray(a, float)
        n = float(len(y))
    if len(y) < 2 or n < 2:
        return {"std": None, "lo": None, "hi": None}
    s, f = float(y.std(ddof=1)), n - 1
    return {"std": s, "lo": s * math.sqrt(f / chi2_quantile(1 - alpha / 2, f)),
            "hi": s * math.sqrt(f / chi2_quantile(alpha / 2, f)), "dof": f}


def t_quantile(q: float, df: float) -> float:
    """The t with Pr(|T| >= t) = q for Student's T with df degrees of freedom (bisection on t_two_sided_p)."""
    lo, hi = 0.0, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_two_sided_p(mid, df) > q else (lo, mid)
    return (lo + hi) / 2


@functools.lru_cache(maxsize=32)
def sign_patterns(k: int, n_perm: int = 1 << 16, seed: int = 0) -> np.ndarray:
    """+-1 sign patterns (rows) over k pairs: all 2^k when 2^k <= n_perm, else n_perm random ones with the
    identity first (a fixed generator: the same p every time)."""
    if 2 ** k <= n_perm:
        return 1 - 2 * ((np.arange(2 ** k)[:, None] >> np.arange(k)) & 1)
    rng = np.random.default_rng(seed)
    return np.vstack([np.ones(k, int), 1 - 2 * rng.integers(0, 2, (n_perm - 1, k))])


def sign_flip(d, alternative: str = "two-sided", shift: float = 0.0) -> float:
    """The paired sign-flip permutation test of H0: the differences d_k - shift are symmetric about 0 (mean shift).
    Statistic mean(d - shift); p = the share of sign patterns (sign_patterns: exact below 2^16) whose mean is as
    extreme, in the direction of `alternative`: "greater" (mean > shift), "less", or "two-sided" (|mean|)."""
    d = np.asarray(d, float) - shift
    if len(d) == 0:
        return None
    t = (sign_patterns(len(d)) * d).mean(axis=1)
    obs, tol = d.mean(), 1e-12 * (1 + np.abs(d).max())
    if alternative == "greater":
        return float((t >= obs - tol).mean())
    if alternative == "less":
        return float((t <= obs + tol).mean())
    if alternative != "two-sided":
        raise ValueError(f"alternative={alternative!r}: choose from two-sided, greater, less")
    return float((np.abs(t) >= abs(obs) - tol).mean())


def sign_flip_interval(d, alpha: float = 0.05, iters: int = 30) -> tuple:
    """The (1 - alpha) interval of the mean difference that inverts the two-sided sign-flip test: every shift
    delta at which sign_flip(d, shift=delta) >= alpha, by bisection on each side of mean(d); the whole line
    where the test's smallest p, 2 / 2^k at k pairs, is not below alpha (k <= 5)."""
    d = np.asarray(d, float)
    if len(d) < 2 or 2 / 2 ** len(d) >= alpha:
        return (-math.inf, math.inf)
    est, span = float(d.mean()), float(np.abs(d - d.mean()).max()) or 1.0

    def edge(direction: float) -> float:
        inside, outside = est, est + direction * span
        while sign_flip(d, shift=outside) >= alpha:  # the data's range bounds it: a shift past every d_k rejects
            inside, outside = outside, outside + direction * span
        for _ in range(iters):
            mid = (inside + outside) / 2
            inside, outside = (mid, outside) if sign_flip(d, shift=mid) >= alpha else (inside, mid)
        return inside
    return edge(-1.0), edge(1.0)


def f_quantile(q: float, d1: float, d2: float) -> float:
    """The q-quantile of the F(d1, d2) distribution: the F with Pr(F' <= F) = q, by bisection on f_upper_p."""
    lo, hi = 0.0, 1.0
    while 1 - f_upper_p(hi, d1, d2) < q:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1 - f_upper_p(mid, d1, d2) < q else (lo, mid)
    return (lo + hi) / 2


def anova_icc(groups, interval: bool = True) -> dict:
    """One-way random-effects ANOVA of y_sr = mu + a_s + e_sr (groups: per seed, its replicates) and the ICC(1)
    (MSB - MSW) / (MSB + (n0 - 1) MSW), the seed's share of the variance, with its F-based 95% interval (Shrout &
    Fleiss 1979). Seeds with no run are left out; None where k < 2 seeds or N - k < 1."""
    groups = [np.asarray(g, float) for g in groups if len(g)]
    k, N = len(groups), sum(len(g) for g in groups)
    if k < 2 or N - k < 1:
        return {"k": k, "N": N, "icc": None, "lo": None, "hi": None, "msb": None, "msw": None, "n0": None}
    grand = np.concatenate(groups).mean()
    msb = sum(len(g) * (g.mean() - grand) ** 2 for g in groups) / (k - 1)
    msw = sum(((g - g.mean()) ** 2).sum() for g in groups) / (N - k)
    n0 = (N - sum(len(g) ** 2 for g in groups) / N) / (k - 1)
    out = {"k": k, "N": N, "n0": n0, "msb": float(msb), "msw": float(msw),
           "var_seed": float((msb - msw) / n0), "var_chaos": float(msw)}
    if msw == 0:  # no chaos at all: every seed's replicates agree exactly
        one = 1.0 if msb > 0 else None
        return {**out, "F": math.inf, "icc": one, "lo": one, "hi": one}
    F = msb / msw
    out.update(F=float(F), icc=float((msb - msw) / (msb + (n0 - 1) * msw)))
    if not interval:  # the point estimate alone (effective_runs: no F quantiles)
        return {**out, "lo": None, "hi": None}
    fl, fu = F / f_quantile(0.975, k - 1, N - k), F * f_quantile(0.975, N - k, k - 1)
    return {**out, "lo": float((fl - 1) / (fl + n0 - 1)), "hi": float((fu - 1) / (fu + n0 - 1))}


# --- two sets of runs, the seed as the unit: a set is a list of clusters, per seed the values of its runs (one, or
# several --perturb replicates); a seed's runs are not independent draws, so every test counts them as one unit

def cluster_means(clusters) -> np.ndarray:
    return np.array([np.mean(c) for c in clusters if len(c)], float)


def cluster_welch(a, b) -> dict:
    """Welch's t-test on the seeds' means: their difference with its 95% interval diff +- t_{.975, df} se, two-sided
    p, and what 80% power detects at these counts, (t_{.975, df} + t_{.80, df}) se (normal approx. of noncentral t)."""
    ma, mb = cluster_means(a), cluster_means(b)
    if len(ma) < 2 or len(mb) < 2:
        return {"diff": None, "lo": None, "hi": None, "p": None, "detectable": None}
    w, means = welch(ma, mb), {"mean_a": float(ma.mean()), "mean_b": float(mb.mean())}
    diff, se = float(ma.mean() - mb.mean()), math.sqrt(ma.var(ddof=1) / len(ma) + mb.var(ddof=1) / len(mb))
    if se == 0:
        return {**means, "diff": diff, "lo": diff, "hi": diff, "p": w["p"], "detectable": 0.0}
    t975, t80 = t_quantile(0.05, w["df"]), t_quantile(0.40, w["df"])  # two-sided 5%; one-sided 20%
    return {**means, "diff": diff, "lo": diff - t975 * se, "hi": diff + t975 * se, "p": w["p"], "df": w["df"],
            "detectable": (t975 + t80) * se}


def run_var(clusters) -> float:
    """The variance (ddof 1) of every run of the clusters: the spread a user sees from run to run."""
    y = np.concatenate([np.asarray(c, float) for c in clusters])
    return float(y.var(ddof=1)) if len(y) > 1 else math.nan


def _assignments(c: int, ca: int, n_perm: int, seed: int) -> np.ndarray:
    """Which ca of c clusters go to the first set: every choice when there are at most n_perm, else n_perm
    random ones (a fixed generator) with the observed one first."""
    if math.comb(c, ca) <= n_perm:
        rows = [m for m in range(2 ** c) if bin(m).count("1") == ca] if c <= 20 else []
        if rows:
            return ((np.array(rows)[:, None] >> np.arange(c)) & 1).astype(bool)
    rng = np.random.default_rng(seed)
    keys = rng.random((n_perm, c)).argsort(axis=1) < ca
    return np.vstack([np.arange(c) < ca, keys])


def invert(p_at, est: float, step: float, alpha: float = 0.05, iters: int = 30) -> tuple:
    """A test's inversion into an interval of Std ratios: (lo, hi), the ratios exp(x) furthest from exp(est) on
    each side that p_at(x) (the test's p of H0: log ratio = x) does not reject at alpha, found by stepping out
    from est by step, then bisecting iters times; 0 or inf where the test rejects nothing within e^20."""
    def edge(step: float) -> float:  # the last log ratio on one side of est that the test does not reject
        inside, outside = est, est + step
        while p_at(outside) > alpha:
            inside, outside = outside, outside + step
            if abs(outside - est) > 20:
                return math.copysign(math.inf, step)
        for _ in range(iters):
            mid = (inside + outside) / 2
            inside, outside = (mid, outside) if p_at(mid) > alpha else (inside, mid)
        return inside
    return math.exp(edge(-step)), math.exp(edge(step))


def cluster_spread(a, b, n_perm: int = 4999, seed: int = 0, alpha: float = 0.05) -> dict:
    """Is the run-to-run spread of set a different from b's? T = log(run_var(a) / run_var(b)); two-sided p of a
    permutation test moving whole seeds between the sets (each set centred at its own mean first); the interval
    of sd(a) / sd(b): every ratio r that test does not reject once a's deviations are divided by r (invert)."""
    A = [np.asarray(c, float) for c in a if len(c)]
    B = [np.asarray(c, float) for c in b if len(c)]
    if len(A) < 2 or len(B) < 2 or sum(map(len, A)) < 3 or sum(map(len, B)) < 3:
        return {"ratio": None, "lo": None, "hi": None, "p": None}
    ma, mb = np.concatenate(A).mean(), np.concatenate(B).mean()
    A, B = [c - ma for c in A], [c - mb for c in B]
    sizes = np.array([len(c) for c in A + B], float)
    M = _assignments(len(A) + len(B), len(A), n_perm, seed).astype(float)

    def p_at(log_r: float) -> float:  # the permutation p of H0: sd(a) = r sd(b), with r = exp(log_r)
        cl = [c / math.exp(log_r) for c in A] + B
        s1, s2 = np.array([c.sum() for c in cl]), np.array([(c ** 2).sum() for c in cl])
        def var(m):  # per assignment row: the runs' variance of the clusters it selects
            n, s, q = m @ sizes, m @ s1, m @ s2
            return (q - s ** 2 / n) / (n - 1)
        va, vb = var(M), var(1 - M)
        if not (va[0] > 0 and vb[0] > 0):
            return 1.0
        t = np.log(np.maximum(va, 1e-300) / np.maximum(vb, 1e-300))
        return float(min(1.0, 2 * min((t >= t[0] - 1e-12).mean(), (t <= t[0] + 1e-12).mean())))

    va, vb = run_var(A), run_var(B)
    if not (va > 0 and vb > 0):
        return {"ratio": None, "lo": None, "hi": None, "p": None}
    est = 0.5 * math.log(va / vb)
    lo, hi = invert(p_at, est, 0.5, alpha)
    return {"ratio": math.exp(est), "lo": lo, "hi": hi, "p": p_at(0.0),
            "exact": math.comb(len(A) + len(B), len(A)) <= n_perm}


def effective_runs(clusters) -> float:
    """How many independent runs the clusters are worth: N / (1 + (m - 1) ICC), m the mean runs a seed, ICC
    the seed's share of the variance (stats.anova_icc, at least 0); N where every seed has one run."""
    N, k = sum(len(c) for c in clusters), sum(1 for c in clusters if len(c))
    if N == k:
        return float(N)
    icc = anova_icc(clusters, interval=False)["icc"]
    return N / (1 + (N / k - 1) * max(0.0, icc if icc is not None else 1.0))


def detectable_ratio(na: float, nb: float, power: float = 0.8, alpha: float = 0.05) -> float | None:
    """The Std ratio an F test of two normal samples of na and nb runs finds with the given power (two-sided
    alpha): sd ratio r with Pr(F(na-1, nb-1) > F_{1-alpha/2} / r^2) = power, r = sqrt(F_{1-alpha/2} / F_{1-power})."""
    if na < 2 or nb < 2:
        return None
    return math.sqrt(f_quantile(1 - alpha / 2, na - 1, nb - 1) / f_quantile(1 - power, na - 1, nb - 1))
