"""
Two sets of runs compared as distributions of runs, the seed as the unit (evaluate.py).

One training run is one draw: at this scale two runs of one seed under other rounding differ about as much as two
seeds (results/README.md, "Seed or chaos?"). So a set of runs is a list of clusters, one per seed, each holding
that seed's runs (one, or several --perturb replicates); a seed counts once in every test, however many
replicates it has.

    pair_lines(a, b)     evaluate.py's comparison of two rows: per metric both means, the difference [95%], p;
                         the Std ratio [95%], p; what these counts detect at 80% power (stats.py's cluster tests)
    against(new, ref)    --against: does a set of new runs (a port, another machine, a refactor) come from the
                         reference ensemble's distribution? one verdict over a small family of metrics: a
                         permutation test of the new and reference runs pooled, re-split as the new set was built
"""

import math
import os
import statistics

import numpy as np

from lab import stats
from lab.files import parse_json, read_text
from metrics import fmt

# (metric key, name, transform): the family --against holds new runs to; location and spread of each
FAMILY = (("oracle_ood", "OOD", None), ("oracle_hard_ood", "hard-subset OOD", None), ("policy_id", "ID", None),
          ("final_loss", "final training loss (log10)", math.log10), ("flip_rate", "flip rate", None),
          ("policy_depth_ood", "exit depth", None))
SPLITS = 999  # re-splits of the pooled runs behind --against's verdict (with the observed split: 1000)
ALPHA = 0.05  # a test differs where its family-wise p is at most this


def final_loss(e: dict) -> float:
    """The last logged training loss of a run: the last line of its metrics.jsonl, read by the one bounded reader
    (cli.read_text: a FIFO is refused, not waited on). A ValueError naming the file and the reason where the log
    cannot be read or ends without a positive, finite loss."""
    path = os.path.join(e.get("run_dir", ""), "metrics.jsonl")
    try:
        lines = [ln for ln in read_text(path).splitlines() if ln.strip()]
        rec = parse_json(lines[-1]) if lines else None
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: {getattr(err, 'strerror', None) or err}") from None
    v = rec.get("loss") if isinstance(rec, dict) else None
    if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0):
        raise ValueError(f"{path}: {'empty' if rec is None else 'its last line holds no positive, finite loss'}")
    return v


def value(e: dict, key: str, transform=None):
    """A run's metric (final_loss from its log), None where it has none (or its log cannot be read)."""
    try:
        v = final_loss(e) if key == "final_loss" else e["metrics"].get(key)
    except ValueError:
        return None
    if v is None or not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return None
    return float(f"{transform(v) if transform else v:.9g}")  # 9 digits: a mean of equal depths is one value


def clusters(evals: list, key: str, transform=None) -> dict:
    """{seed: [the metric of each of its runs]}, runs without the metric left out."""
    out = {}
    for e in evals:
        v = value(e, key, transform)
        if v is not None:
            out.setdefault(e["seed"], []).append(v)
    return out


def counts(cl: dict) -> str:
    runs = sum(map(len, cl.values()))
    return f"{runs} runs" if runs == len(cl) else f"{runs} runs of {len(cl)} seeds"


def pair_lines(name_a: str, a: list, name_b: str, b: list, keys) -> list[str]:
    """The comparison of two sets of runs (eval dicts), per (key, name) in keys. Sets that share at least two seeds
    (controlled seeds: seed k of every row starts from the same weights and sees the same batches) are compared on
    those seeds only, paired: the mean of the seeds' differences with the exact sign-flip p and the interval that
    inverts it (stats.sign_flip, stats.sign_flip_interval). Else unpaired: Welch on the seeds' means with its t
    interval. Then the Std over runs, its ratio with the interval that inverts a permutation test moving whole seeds
    (stats.cluster_spread), and what these counts detect at 80% power. Every p is uncorrected: one of many."""
    out = []
    for key, name in keys:
        ca, cb = clusters(a, key), clusters(b, key)
        shared = [s for s in ca if s in cb]
        paired = len(shared) >= 2
        if paired:
            ca, cb = {s: ca[s] for s in shared}, {s: cb[s] for s in shared}
        if len(ca) < 2 or len(cb) < 2:
            continue
        A, B = list(ca.values()), list(cb.values())
        s = stats.cluster_spread(A, B)
        det = stats.detectable_ratio(stats.effective_runs(A), stats.effective_runs(B))
        sa, sb = math.sqrt(stats.run_var(A)), math.sqrt(stats.run_var(B))
        ma, mb = stats.cluster_means(A), stats.cluster_means(B)
        if paired:
            d = ma - mb
            lo, hi = stats.sign_flip_interval(d)
            left = [f"{n}'s {k} other{'s' * (k != 1)}" for n, k in ((name_a, len(clusters(a, key)) - len(shared)),
                                                                   (name_b, len(clusters(b, key)) - len(shared))) if k]
            # 80% power of the paired t at these pairs: (t_.975 + t_.80) sd(d) / sqrt(k)
            k = len(d)
            detect = (stats.t_quantile(0.05, k - 1) + stats.t_quantile(0.40, k - 1)) * float(d.std(ddof=1)) / math.sqrt(k)
            span = (f"[{lo:+.1f}, {hi:+.1f}]" if math.isfinite(lo) and math.isfinite(hi) else
                    f"(no 95% interval at {k} pairs: the test's smallest p is {2 / 2 ** k:.2g})")
            mean = (f"{name}: {name_a} {ma.mean():.1f} vs {name_b} {mb.mean():.1f}, paired on the {k} seeds both have "
                    f"({counts(ca)} vs {counts(cb)}" + (f"; {' and '.join(left)} left out" if left else "") + "), difference "
                    f"{d.mean():+.1f} {span} (the seeds' differences: sign-flip p {stats.sign_flip(d):.2g}, "
                    f"uncorrected; the interval inverts it)")
        else:
            m = stats.cluster_welch(A, B)
            detect = m["detectable"]
            mean = (f"{name}: {name_a} {m['mean_a']:.1f} vs {name_b} {m['mean_b']:.1f} ({counts(ca)} vs {counts(cb)}, no "
                    f"seed in common), difference {m['diff']:+.1f} [{m['lo']:+.1f}, {m['hi']:+.1f}] (Welch's t on the seeds' "
                    f"means: p {m['p']:.2g}, uncorrected)")
        out.append(
            f"{mean}; Std over runs {sa:.1f} vs {sb:.1f}, ratio {fmt(s['ratio'], '.2f')} [{fmt(s['lo'], '.2f')}, "
            f"{fmt(s['hi'], '.2f')}] (seeds moved between the sets: permutation p {fmt(s['p'], '.2g')}, uncorrected); 80% "
            f"power at these counts: a difference of {detect:.1f}, a Std ratio of {fmt(det, '.1f')} (or 1/{fmt(det, '.1f')})")
    return out


# --- --against: did my change keep the method? ---------------------------------------------------------------
# The null hypothesis: the new runs are more runs of the reference's method, drawn as the reference's were. Then
# the runs of both sets are exchangeable (within a seed, where the new runs are replicates of the reference's
# seeds; whole seeds, where they are fresh seeds), so splitting the pooled runs again and again as the new set was
# built gives each test's distribution under the null: the observed split is one of those splits (an exact
# permutation test up to the cut of a drawn seed to the new set's runs). A metric the reference holds constant (ID
# accuracy 100 in every run) needs no special case: a new run off that value is, under the null, as likely to land
# on either side, so one such run weighs only as the share of re-splits that put it among the new runs.

def family_values(evals: list) -> tuple:
    """(Y, unread): Y[i, j] the FAMILY metric j of run i (NaN where the run has none), to 9 significant digits (a
    mean of equal depths is one value); unread: the runs whose training log could not be read (final_loss's
    reason each)."""
    Y, unread = np.full((len(evals), len(FAMILY)), np.nan), []
    for i, e in enumerate(evals):
        for j, (key, _, transform) in enumerate(FAMILY):
            try:
                v = final_loss(e) if key == "final_loss" else e["metrics"].get(key)
            except ValueError as err:
                unread.append(str(err))
                continue
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                Y[i, j] = float(f"{transform(v) if transform else v:.9g}")
    return Y, unread


def resplits(seeds: list, is_new: np.ndarray, splits: int, rng) -> tuple:
    """(A, B, within, arrangements): boolean (1 + splits, runs) masks of the runs on the new and on the reference
    side, row 0 the observed split. within (the new runs share the reference's seeds): each shared seed's runs of
    both sets pooled and as many of them as the new set has drawn as new; the reference's other seeds stay on its
    side. Else whole seeds: of all seeds of both sets, as many as the new set has drawn as new, each cut at random
    to the runs a new seed has (the rest of a drawn seed left out), the others the reference. arrangements: how many
    distinct splits there are (within; whole: of the seeds alone), the test's resolution."""
    seeds, n = np.asarray(seeds, dtype=object), len(seeds)
    new_seeds = list(dict.fromkeys(seeds[is_new]))
    ref_seeds = list(dict.fromkeys(seeds[~is_new]))
    within = bool(set(new_seeds) & set(ref_seeds))
    A, B = np.zeros((1 + splits, n), bool), np.zeros((1 + splits, n), bool)
    A[0], B[0] = is_new, ~is_new
    rank = lambda m: rng.random((splits, m)).argsort(1).argsort(1)  # a random order of m runs, per re-split
    if within:
        arrangements = 1
        for s in ref_seeds:
            idx = np.flatnonzero(seeds == s)
            k = int(is_new[idx].sum())
            if k == 0:
                B[1:, idx] = True
                continue
            arrangements *= math.comb(len(idx), k)
            A[1:, idx] = rank(len(idx)) < k
            B[1:, idx] = ~A[1:, idx]
        return A, B, within, arrangements
    clusters = [np.flatnonzero((seeds == s) & is_new) for s in new_seeds] + [np.flatnonzero(seeds == s) for s in ref_seeds]
    k, K = len(new_seeds), len(clusters)
    order = rng.random((splits, K)).argsort(1)  # the first k seeds of each row are drawn as new, sized as the new ones
    size = np.zeros((splits, K), int)
    for j in range(k):
        size[np.arange(splits), order[:, j]] = len(clusters[j])
    for c, idx in enumerate(clusters):
        drawn = size[:, c:c + 1] > 0
        A[1:, idx] = drawn & (rank(len(idx)) < size[:, c:c + 1])
        B[1:, idx] = ~drawn
    return A, B, within, math.comb(K, k)


def side(y: np.ndarray, C: np.ndarray, X: np.ndarray, tiny: float) -> tuple:
    """Per split (row of X, the runs on one side; y one metric, NaN-free): (the mean of the seeds' means, their
    variance (ddof 1), the number of seeds, the variance over runs (ddof 1), the number of runs). A variance below
    tiny^2 is rounding: 0."""
    Xf = X.astype(float)
    n, s1 = Xf @ C, (Xf * y) @ C  # (splits, seeds): each seed's runs on this side, and their sum
    present = n > 0
    k = present.sum(1)
    seed_mean = np.where(present, s1 / np.maximum(n, 1), 0.0)
    mean = seed_mean.sum(1) / np.maximum(k, 1)
    var_seeds = (np.where(present, seed_mean - mean[:, None], 0.0) ** 2).sum(1) / np.maximum(k - 1, 1)
    runs = Xf.sum(1)
    run_mean = (Xf * y).sum(1) / np.maximum(runs, 1)
    var_runs = (Xf * (y - run_mean[:, None]) ** 2).sum(1) / np.maximum(runs - 1, 1)
    zero = lambda v: np.where(v > tiny ** 2, v, 0.0)
    return mean, zero(var_seeds), k, zero(var_runs), runs


def statistics_of(y: np.ndarray, seeds: list, A: np.ndarray, B: np.ndarray) -> tuple:
    """(location, spread) of one metric per split: Welch's t on the seeds' means, new minus reference; and the log
    ratio of the runs' variances, new over reference. Where a side has too few seeds or runs, 0 (no evidence);
    where a side does not vary at all, the other's difference is infinite."""
    ok = ~np.isnan(y)
    y0 = np.where(ok, y, 0.0)
    index = {s: i for i, s in enumerate(dict.fromkeys(seeds))}
    C = np.zeros((len(y), len(index)))
    C[np.arange(len(y)), [index[s] for s in seeds]] = 1.0
    tiny = 1e-9 * (1 + float(np.abs(y0).max()))  # below this, rounding: the same value
    ma, va, ka, ra, na = side(y0, C, A & ok, tiny)
    mb, vb, kb, rb, nb = side(y0, C, B & ok, tiny)
    diff = np.where(np.abs(ma - mb) > tiny, ma - mb, 0.0)
    se2 = va / np.maximum(ka, 1) + vb / np.maximum(kb, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se2 > 0, diff / np.sqrt(se2), np.sign(diff) * np.inf)
        t = np.where((diff == 0) & (se2 == 0), 0.0, t)
        log_ratio = np.where((ra > 0) & (rb > 0), np.log(ra) - np.log(rb), np.where(ra > 0, np.inf, np.where(rb > 0, -np.inf, 0.0)))
    t = np.where((ka >= 2) & (kb >= 2), t, 0.0)
    return t, np.where((na >= 2) & (nb >= 2), log_ratio, 0.0)


def tail_counts(T: np.ndarray) -> np.ndarray:
    """Per split and test (T: (splits, tests)), how many splits are at least as extreme in the nearer tail,
    min(#{T* >= T}, #{T* <= T}) (ties within 1e-9 relative counted on both sides): the two-sided permutation p is
    min(1, 2 count / splits)."""
    out = np.empty(T.shape, int)
    for j in range(T.shape[1]):
        t = T[:, j]
        tol = 1e-9 * (1 + np.abs(np.where(np.isfinite(t), t, 0.0)))
        srt = np.sort(t)
        ge = len(t) - np.searchsorted(srt, t - tol, side="left")
        le = np.searchsorted(srt, t + tol, side="right")
        out[:, j] = np.minimum(ge, le)
    return out


def against(new: list, ref: list, splits: int = SPLITS, seed: int = 0) -> dict:
    """The verdict on new runs against a reference ensemble (eval dicts, each set one experiment; evaluate.py
    checks that). Per FAMILY metric two tests, location and spread (statistics_of); each test's p is its two-sided
    permutation p over the splits of the pooled runs (resplits; the observed split among them), and the family is
    judged by Westfall and Young's min-P: a test's family-wise p is the share of splits whose smallest p over all
    tests is at or below its own, and it differs where that is at most ALPHA. Under the null (the runs exchangeable
    as resplits exchanges them) the chance that any test differs is at most ALPHA; study/against.py measures it
    on the committed ensembles, where that holds only approximately."""
    if len({e["seed"] for e in new}) < 2 or len({e["seed"] for e in ref}) < 2:
        raise ValueError("--against: fewer than two seeds on one side; nothing to compare")
    new_seeds, ref_seeds = {e["seed"] for e in new}, {e["seed"] for e in ref}
    if new_seeds & ref_seeds and not new_seeds <= ref_seeds:
        raise ValueError(f"--against: the new runs share seeds {sorted(new_seeds & ref_seeds)} with the reference but not "
                         f"seeds {sorted(new_seeds - ref_seeds)}: use seeds all in the reference (more runs of its seeds) "
                         f"or none of its seeds (fresh seeds)")
    Yn, unread_new = family_values(new)
    Yr, unread_ref = family_values(ref)
    # a run without a metric (None: nothing tested there) is named and counted, never dropped from its test unsaid
    # (a non-finite or out-of-range number never gets here: records.load_eval refuses the run)
    missing = {name: {side: [e["run_dir"] for e, v in zip(runs, Ys[:, j]) if np.isnan(v)]
                      for side, runs, Ys in (("new", new, Yn), ("reference", ref, Yr))}
               for j, (key, name, _) in enumerate(FAMILY) if key != "final_loss"}
    missing = {k: v for k, v in missing.items() if 0 < len(v["new"]) + len(v["reference"]) < len(new) + len(ref)}
    Y, seeds, is_new = np.vstack([Yn, Yr]), [e["seed"] for e in new + ref], np.arange(len(new) + len(ref)) < len(new)
    A, B, within, arrangements = resplits(seeds, is_new, splits, np.random.default_rng(seed))
    tests, T, means, left_out, constant = [], [], {}, [], []
    for j, (key, name, _) in enumerate(FAMILY):
        y, ok = Y[:, j], ~np.isnan(Y[:, j])
        if min(len({s for s, o, a in zip(seeds, ok, is_new) if o and a == side_new}) for side_new in (True, False)) < 2:
            left_out.append(name)
            continue
        loc, spread = statistics_of(y, seeds, A, B)
        tests += [f"{name}: location", f"{name}: spread"]
        T += [loc, spread]
        yn, yr = y[is_new & ok], y[~is_new & ok]
        means[name] = {"new": stats_of(yn, [s for s, o, a in zip(seeds, ok, is_new) if o and a]),
                       "ref": stats_of(yr, [s for s, o, a in zip(seeds, ok, is_new) if o and not a])}
        if len(set(yr.tolist())) == 1:
            constant.append(f"{name} is {yr[0]:g} in every reference run")
    if not tests:
        raise ValueError("--against: no metric of the family has two seeds on each side; nothing to compare")
    c = tail_counts(np.column_stack(T))
    M, smallest = len(c), c.min(1)
    hits = {t: int((smallest <= c[0, j]).sum()) for j, t in enumerate(tests)}
    differ = sorted((hits[t], t) for t in tests if hits[t] <= math.floor(ALPHA * M + 1e-9))
    return {"verdict": "differs" if differ else "consistent", "differ": [t for _, t in differ], "tests": tests,
            "p": {t: min(1.0, 2 * int(c[0, j]) / M) for j, t in enumerate(tests)},
            "adjusted": {t: hits[t] / M for t in tests}, "splits": splits, "within_seeds": within,
            "arrangements": arrangements, "left_out": left_out, "constant": constant,
            "unread_new": unread_new, "unread_ref": unread_ref, "missing": missing, "runs_new": len(new),
            "new": counts(clusters_of(new)), "ref": counts(clusters_of(ref)), "means": means}


def clusters_of(evals: list) -> dict:
    out = {}
    for e in evals:
        out.setdefault(e["seed"], []).append(e)
    return out


def stats_of(y: np.ndarray, seeds: list) -> dict:
    """The mean of the seeds' means and the Std over runs of one metric on one side."""
    by = {}
    for s, v in zip(seeds, y.tolist()):
        by.setdefault(s, []).append(v)
    return {"mean": statistics.fmean(statistics.fmean(v) for v in by.values()),
            "std": statistics.stdev(y.tolist()) if len(y) > 1 else None}


def against_lines(r: dict) -> list[str]:
    """--against's output: the verdict, how it was reached, then per metric both sets and each test's p."""
    how = ("the new runs share the reference's seeds: within each such seed, its runs of both sets pooled and as many "
           "drawn as new" if r["within_seeds"] else
           "fresh seeds: of all seeds of both sets, as many as the new set has drawn as new, each cut to a new seed's runs")
    lines = [f"--against: {r['verdict'].upper()}" + (f" ({', '.join(r['differ'])})" if r["differ"] else "")
             + f": new {r['new']} against the reference's {r['ref']}",
             f"  {len(r['tests'])} tests (location: Welch's t on the seeds' means; spread: the ratio of the runs' variances), "
             f"each a permutation test over {r['splits']} re-splits of the two sets' runs pooled ({how}); a test differs "
             f"where its family-wise p (Westfall and Young's min-P over the {len(r['tests'])}) is at most {ALPHA:g}. Its "
             f"false-alarm rate, measured on the committed ensembles: results/README.md, \"Did my change keep the method?\""]
    if r["arrangements"] < 1 / ALPHA:
        lines.append(f"  only {r['arrangements']} distinct splits exist at these counts: no test can reach {ALPHA:g}, "
                     f"so this cannot say \"differs\"; add runs")
    for name, m in r["means"].items():
        p = [f"{part} p {fmt(r['p'][f'{name}: {part}'], '.2g')}" for part in ("location", "spread")]
        fw = [fmt(r["adjusted"][f"{name}: {part}"], ".2g") for part in ("location", "spread")]
        lines.append(f"  {name}: new {m['new']['mean']:.4g} vs reference {m['ref']['mean']:.4g} (Std over runs "
                     f"{fmt(m['new']['std'], '.3g')} vs {fmt(m['ref']['std'], '.3g')}); {', '.join(p)} (uncorrected); "
                     f"family-wise {fw[0]}, {fw[1]}")
    for which, unread in (("new", r["unread_new"]), ("reference", r["unread_ref"])):
        if unread:
            lines.append(f"  final training loss: {len(unread)} {which} run(s) without a readable log (e.g. {unread[0]})"
                         + ("; the test is left out" if "final training loss (log10)" in r["left_out"] else
                            "; tested on the other runs"))
    for name, sides in r.get("missing", {}).items():
        lines.append(f"  {name}: " + "; ".join(f"{len(d)} {side} run(s) without a value (e.g. {d[0]})"
                                               for side, d in sides.items() if d)
                     + ("; the test is left out" if name in r["left_out"] else "; tested on the other runs"))
    others = [n for n in r["left_out"] if n != "final training loss (log10)" or not (r["unread_new"] or r["unread_ref"])]
    if others:
        lines.append(f"  left out (fewer than two seeds with the metric on a side): {', '.join(others)}")
    if r["constant"]:
        lines.append(f"  {'; '.join(r['constant'])}: a new run off that value counts only as often as the re-splits "
                     f"put such a run among the new ones")
    return lines
