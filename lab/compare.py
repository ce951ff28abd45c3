"""
Two sets of runs compared as distributions of runs, the seed as the unit (a seed's --perturb replicates are one
cluster and count once: results/README.md, "Seed or chaos?"). pair_lines: evaluate.py's comparison of two rows.
against: --against, whether new runs come from a reference ensemble's distribution (one permutation verdict).
"""

import math
import os
import statistics

import numpy as np

from lab import stats
from lab.files import parse_json, read_text
from metrics import fmt

LOSS = "final training loss (log10)"
# (metric key, name, transform): the family --against holds new runs to; location and spread of each
FAMILY = (("oracle_ood", "OOD", None), ("oracle_hard_ood", "hard-subset OOD", None), ("policy_id", "ID", None),
          ("final_loss", LOSS, math.log10), ("flip_rate", "flip rate", None), ("policy_depth_ood", "exit depth", None))
SPLITS = 999  # re-splits of the pooled runs behind --against's verdict (with the observed split: 1000)
ALPHA = 0.05  # a test differs where its family-wise p is at most this


def final_loss(e: dict) -> float:
    """The last logged training loss of a run (the last line of its metrics.jsonl); a ValueError naming the file
    where the log cannot be read or ends without a positive, finite loss."""
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
    return rounded(v, transform)


def rounded(v, transform=None):
    """A finite number (transformed) to 9 significant digits, so that a mean of equal depths is one value; None
    for anything else."""
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return None
    return float(f"{transform(v) if transform else v:.9g}")


def clusters(evals: list, key: str, transform=None) -> dict:
    """{seed: [the metric of each of its runs]}, runs without the metric left out."""
    return by_seed((e["seed"], v) for e in evals if (v := value(e, key, transform)) is not None)


def by_seed(pairs) -> dict:
    """{seed: [its items]} of (seed, item) pairs."""
    out = {}
    for s, v in pairs:
        out.setdefault(s, []).append(v)
    return out


def counts(cl: dict) -> str:
    runs = sum(map(len, cl.values()))
    return f"{runs} runs" if runs == len(cl) else f"{runs} runs of {len(cl)} seeds"


def pair_lines(name_a: str, a: list, name_b: str, b: list, keys) -> list[str]:
    """The comparison of two sets of runs (eval dicts), per (key, name) in keys: paired on their shared seeds where
    they share two (stats.sign_flip), else Welch on the seeds' means; then the Std ratio (stats.cluster_spread) and
    what these counts detect at 80% power. Every p is uncorrected."""
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
            others = ((name_a, len(clusters(a, key)) - len(shared)), (name_b, len(clusters(b, key)) - len(shared)))
            left = [f"{n}'s {k} other{'s' * (k != 1)}" for n, k in others if k]
            # 80% power of the paired t at these pairs: (t_.975 + t_.80) sd(d) / sqrt(k)
            k = len(d)
            t = stats.t_quantile(0.05, k - 1) + stats.t_quantile(0.40, k - 1)
            detect = t * float(d.std(ddof=1)) / math.sqrt(k)
            span = (f"[{lo:+.1f}, {hi:+.1f}]" if math.isfinite(lo) and math.isfinite(hi) else
                    f"(no 95% interval at {k} pairs: the test's smallest p is {2 / 2 ** k:.2g})")
            mean = (f"{name}: {name_a} {ma.mean():.1f} vs {name_b} {mb.mean():.1f}, paired on the {k} seeds both "
                    f"have ({counts(ca)} vs {counts(cb)}" + (f"; {' and '.join(left)} left out" if left else "")
                    + f"), difference {d.mean():+.1f} {span} (the seeds' differences: sign-flip p "
                    f"{stats.sign_flip(d):.2g}, uncorrected; the interval inverts it)")
        else:
            m = stats.cluster_welch(A, B)
            detect = m["detectable"]
            mean = (f"{name}: {name_a} {m['mean_a']:.1f} vs {name_b} {m['mean_b']:.1f} ({counts(ca)} vs "
                    f"{counts(cb)}, no seed in common), difference {m['diff']:+.1f} [{m['lo']:+.1f}, {m['hi']:+.1f}] "
                    f"(Welch's t on the seeds' means: p {m['p']:.2g}, uncorrected)")
        out.append(
            f"{mean}; Std over runs {sa:.1f} vs {sb:.1f}, ratio {fmt(s['ratio'], '.2f')} [{fmt(s['lo'], '.2f')}, "
            f"{fmt(s['hi'], '.2f')}] (seeds moved between the sets: permutation p {fmt(s['p'], '.2g')}, uncorrected); "
            f"80% power at these counts: a difference of {detect:.1f}, a Std ratio of {fmt(det, '.1f')} "
            f"(or 1/{fmt(det, '.1f')})")
    return out


# --- --against: did my change keep the method? ---------------------------------------------------------------
# The null: the new runs are more runs of the reference's method, so the pooled runs are exchangeable (within a
# seed, or whole seeds) and re-splitting them as the new set was built gives each test's null distribution.

def family_values(evals: list) -> tuple:
    """(Y, unread): Y[i, j] the FAMILY metric j of run i (rounded; NaN where the run has none); unread: final_loss's
    reason for each run whose training log could not be read."""
    Y, unread = np.full((len(evals), len(FAMILY)), np.nan), []
    for i, e in enumerate(evals):
        for j, (key, _, transform) in enumerate(FAMILY):
            try:
                v = final_loss(e) if key == "final_loss" else e["metrics"].get(key)
            except ValueError as err:
                unread.append(str(err))
                continue
            if (v := rounded(v, transform)) is not None:
                Y[i, j] = v
    return Y, unread


def resplits(seeds: list, is_new: np.ndarray, splits: int, rng) -> tuple:
    """(A, B, within, arrangements): boolean (1 + splits, runs) masks of the runs on the new and the reference side,
    row 0 the observed split. within (shared seeds): each shared seed's runs re-drawn as new; else whole seeds drawn
    as new, each cut at random to a new seed's runs. arrangements: how many distinct splits exist."""
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
    clusters = ([np.flatnonzero((seeds == s) & is_new) for s in new_seeds]
                + [np.flatnonzero(seeds == s) for s in ref_seeds])
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
    variance, the number of seeds, the variance over runs, the number of runs); a variance below tiny^2 is 0."""
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
    """(location, spread) of one metric per split: Welch's t on the seeds' means, new minus reference, and the log
    ratio of the runs' variances; 0 where a side has too few seeds or runs, infinite where a side does not vary."""
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
        log_ratio = np.where((ra > 0) & (rb > 0), np.log(ra) - np.log(rb),
                             np.where(ra > 0, np.inf, np.where(rb > 0, -np.inf, 0.0)))
    t = np.where((ka >= 2) & (kb >= 2), t, 0.0)
    return t, np.where((na >= 2) & (nb >= 2), log_ratio, 0.0)


def tail_counts(T: np.ndarray) -> np.ndarray:
    """Per split and test (T: (splits, tests)), min(#{T* >= T}, #{T* <= T}) (ties within 1e-9 relative on both
    sides): the two-sided permutation p is min(1, 2 count / splits)."""
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
    """The verdict on new runs against a reference ensemble (eval dicts, each set one experiment): per FAMILY metric
    a location and a spread test (statistics_of), each a permutation test over resplits, judged as a family by
    Westfall and Young's min-P (a test differs where its family-wise p is at most ALPHA)."""
    new_seeds, ref_seeds = {e["seed"] for e in new}, {e["seed"] for e in ref}
    if len(new_seeds) < 2 or len(ref_seeds) < 2:
        raise ValueError("--against: fewer than two seeds on one side; nothing to compare")
    if new_seeds & ref_seeds and not new_seeds <= ref_seeds:
        raise ValueError(f"--against: the new runs share seeds {sorted(new_seeds & ref_seeds)} with the reference but "
                         f"not seeds {sorted(new_seeds - ref_seeds)}: use seeds all in the reference (more runs of its "
                         f"seeds) or none of its seeds (fresh seeds)")
    Yn, unread_new = family_values(new)
    Yr, unread_ref = family_values(ref)
    # a run without a metric (None: nothing tested there) is named and counted, never dropped from its test unsaid
    missing = {name: {side: [e["run_dir"] for e, v in zip(runs, Ys[:, j]) if np.isnan(v)]
                      for side, runs, Ys in (("new", new, Yn), ("reference", ref, Yr))}
               for j, (key, name, _) in enumerate(FAMILY) if key != "final_loss"}
    missing = {k: v for k, v in missing.items() if 0 < len(v["new"]) + len(v["reference"]) < len(new) + len(ref)}
    Y, seeds, is_new = np.vstack([Yn, Yr]), [e["seed"] for e in new + ref], np.arange(len(new) + len(ref)) < len(new)
    A, B, within, arrangements = resplits(seeds, is_new, splits, np.random.default_rng(seed))
    tests, T, means, left_out, constant = [], [], {}, [], []
    for j, (key, name, _) in enumerate(FAMILY):
        y, ok = Y[:, j], ~np.isnan(Y[:, j])
        sn, sr = ([s for s, o, a in zip(seeds, ok, is_new) if o and a == on_new] for on_new in (True, False))
        if len(set(sn)) < 2 or len(set(sr)) < 2:
            left_out.append(name)
            continue
        loc, spread = statistics_of(y, seeds, A, B)
        tests += [f"{name}: location", f"{name}: spread"]
        T += [loc, spread]
        yn, yr = y[is_new & ok], y[~is_new & ok]
        means[name] = {"new": stats_of(yn, sn), "ref": stats_of(yr, sr)}
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
            "new": counts(by_seed((e["seed"], e) for e in new)), "ref": counts(by_seed((e["seed"], e) for e in ref)),
            "means": means}


def stats_of(y: np.ndarray, seeds: list) -> dict:
    """The mean of the seeds' means and the Std over runs of one metric on one side."""
    by = by_seed(zip(seeds, y.tolist()))
    return {"mean": statistics.fmean(statistics.fmean(v) for v in by.values()),
            "std": statistics.stdev(y.tolist()) if len(y) > 1 else None}


def against_lines(r: dict) -> list[str]:
    """--against's output: the verdict, how it was reached, then per metric both sets and each test's p."""
    how = ("the new runs share the reference's seeds: within each such seed, its runs of both sets pooled and as many "
           "drawn as new" if r["within_seeds"] else "fresh seeds: of all seeds of both sets, as many as the new set "
           "has drawn as new, each cut to a new seed's runs")
    n = len(r["tests"])
    lines = [f"--against: {r['verdict'].upper()}" + (f" ({', '.join(r['differ'])})" if r["differ"] else "")
             + f": new {r['new']} against the reference's {r['ref']}",
             f"  {n} tests (location: Welch's t on the seeds' means; spread: the ratio of the runs' variances), each a "
             f"permutation test over {r['splits']} re-splits of the two sets' runs pooled ({how}); a test differs "
             f"where its family-wise p (Westfall and Young's min-P over the {n}) is at most {ALPHA:g}. Its false-alarm "
             f"rate, measured on the committed ensembles: results/README.md, \"Did my change keep the method?\""]
    if r["arrangements"] < 1 / ALPHA:
        lines.append(f"  only {r['arrangements']} distinct splits exist at these counts: no test can reach {ALPHA:g}, "
                     f"so this cannot say \"differs\"; add runs")
    for name, m in r["means"].items():
        p = [f"{part} p {fmt(r['p'][f'{name}: {part}'], '.2g')}" for part in ("location", "spread")]
        fw = [fmt(r["adjusted"][f"{name}: {part}"], ".2g") for part in ("location", "spread")]
        lines.append(f"  {name}: new {m['new']['mean']:.4g} vs reference {m['ref']['mean']:.4g} (Std over runs "
                     f"{fmt(m['new']['std'], '.3g')} vs {fmt(m['ref']['std'], '.3g')}); {', '.join(p)} (uncorrected); "
                     f"family-wise {fw[0]}, {fw[1]}")
    fate = lambda name: "; the test is left out" if name in r["left_out"] else "; tested on the other runs"
    for which, unread in (("new", r["unread_new"]), ("reference", r["unread_ref"])):
        if unread:
            lines.append(f"  final training loss: {len(unread)} {which} run(s) without a readable log "
                         f"(e.g. {unread[0]})" + fate(LOSS))
    for name, sides in r.get("missing", {}).items():
        lines.append(f"  {name}: " + "; ".join(f"{len(d)} {side} run(s) without a value (e.g. {d[0]})"
                                               for side, d in sides.items() if d) + fate(name))
    others = [name for name in r["left_out"] if name != LOSS or not (r["unread_new"] or r["unread_ref"])]
    if others:
        lines.append(f"  left out (fewer than two seeds with the metric on a side): {', '.join(others)}")
    if r["constant"]:
        lines.append(f"  {'; '.join(r['constant'])}: a new run off that value counts only as often as the re-splits "
                     f"put such a run among the new ones")
    return lines
