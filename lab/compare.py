"""
Two sets of runs compared as distributions of runs, the seed as the unit (evaluate.py).

One training run is one draw: at this scale two runs of one seed under other rounding differ about as much as two
seeds (results/README.md, "Seed or chaos?"). So a set of runs is a list of clusters, one per seed, each holding
that seed's runs (one, or several --perturb replicates); a seed counts once in every test, however many
replicates it has.

    pair_lines(a, b)     evaluate.py's comparison of two rows: per metric both means, the difference [95%], p;
                         the Std ratio [95%], p; what these counts detect at 80% power (stats.py's cluster tests)
    against(new, ref)    --against: does a set of new runs (a port, another machine, a refactor) come from the
                         reference ensemble's distribution? one verdict over a small family of metrics, its
                         false-alarm rate calibrated on the reference's own runs, held out
"""

import json
import math
import os
import statistics

import numpy as np

from lab import stats
from metrics import fmt

# (metric key, name, transform): the family --against holds new runs to; location and spread of each
FAMILY = (("oracle_ood", "OOD", None), ("oracle_hard_ood", "hard-subset OOD", None), ("policy_id", "ID", None),
          ("final_loss", "final training loss (log10)", math.log10), ("flip_rate", "flip rate", None),
          ("policy_depth_ood", "exit depth", None))
SPLITS = 400  # held-out splits of the reference that calibrate --against


def final_loss(e: dict):
    """The last logged training loss of a run (metrics.jsonl), None where it has none."""
    path = os.path.join(e.get("run_dir", ""), "metrics.jsonl")
    try:
        with open(path) as f:
            lines = [ln for ln in f if ln.strip()]
        v = json.loads(lines[-1]).get("loss") if lines else None
    except (OSError, ValueError, RecursionError):
        return None
    return v if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else None


def value(e: dict, key: str, transform=None):
    v = final_loss(e) if key == "final_loss" else e["metrics"].get(key)
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
    """The comparison of two sets of runs (eval dicts), per (key, name) in keys."""
    out = []
    for key, name in keys:
        ca, cb = clusters(a, key), clusters(b, key)
        if len(ca) < 2 or len(cb) < 2:
            continue
        A, B = list(ca.values()), list(cb.values())
        m, s = stats.cluster_welch(A, B), stats.cluster_spread(A, B)
        det = stats.detectable_ratio(stats.effective_runs(A), stats.effective_runs(B))
        sa, sb = math.sqrt(stats.run_var(A)), math.sqrt(stats.run_var(B))
        out.append(
            f"{name}: {name_a} {m['mean_a']:.1f} vs {name_b} {m['mean_b']:.1f} ({counts(ca)} vs {counts(cb)}), difference "
            f"{m['diff']:+.1f} [{m['lo']:+.1f}, {m['hi']:+.1f}], Welch p {m['p']:.2g} on the seeds' means; "
            f"Std over runs {sa:.1f} vs {sb:.1f}, ratio {fmt(s['ratio'], '.2f')} [{fmt(s['lo'], '.2f')}, "
            f"{fmt(s['hi'], '.2f')}], permutation p {fmt(s['p'], '.2g')}; 80% power at these counts: a difference "
            f"of {m['detectable']:.1f}, a Std ratio of {fmt(det, '.1f')} (or 1/{fmt(det, '.1f')})")
    return out


# --- --against: did my change keep the method? ---------------------------------------------------------------

def family_ps(new: dict, ref: dict, names: list) -> dict:
    """{test: p} of the family (location: Welch on the seeds' means; spread: the F test of the runs' variances at
    the seeds' effective counts, stats.effective_runs). Each p is a yardstick only: against() calibrates them on
    the reference itself, so their approximations do not set the false-alarm rate."""
    out = {}
    for name in names:
        A, B = new.get(name, []), ref.get(name, [])
        if len(A) < 2 or len(B) < 2:
            continue
        ma, mb = stats.cluster_means(A), stats.cluster_means(B)
        scale = 1e-9 * (1 + abs(float(ma.mean())) + abs(float(mb.mean())))  # below this, rounding: the same value
        if ma.std() + mb.std() > scale:
            out[f"{name}: location"] = stats.welch(ma, mb)["p"]
        else:  # both sets constant (an exit depth fixed by the schedule)
            out[f"{name}: location"] = float(abs(ma.mean() - mb.mean()) <= scale)
        sa, sb = (math.sqrt(v) if v > scale ** 2 else 0.0 for v in (stats.run_var(A), stats.run_var(B)))
        if sa == sb == 0:
            p = 1.0
        elif sa == 0 or sb == 0:
            p = 0.0
        else:
            up = stats.f_upper_p(sa ** 2 / sb ** 2, stats.effective_runs(A) - 1, stats.effective_runs(B) - 1)
            p = min(1.0, 2 * min(up, 1 - up))
        out[f"{name}: spread"] = p
    return out


def as_lists(cl: dict) -> list:
    return [list(v) for v in cl.values()]


def held_out(ref: dict, new_seeds: list, sizes: list, rng, k_max: int, shared: bool) -> tuple:
    """One calibration split of the reference: (pseudo-new, rest), mirroring the new set's design. shared (the new
    set's seeds are the reference's, each with more runs there): those seeds' pseudo-new runs are drawn from the
    reference's runs of the same seeds. Else k_max whole seeds of the reference are held out (subsampled to the
    new set's runs a seed)."""
    any_metric = next(iter(ref.values()))
    seeds = list(any_metric)
    if shared:
        take = {s: set(rng.choice(len(any_metric[s]), n, replace=False).tolist()) for s, n in zip(new_seeds, sizes)}
        pick = lambda s, i: s in take and i in take[s]
        return ({m: [[v for i, v in enumerate(cl[s]) if pick(s, i)] for s in new_seeds if s in cl] for m, cl in ref.items()},
                {m: [[v for i, v in enumerate(cl[s]) if not pick(s, i)] for s in cl] for m, cl in ref.items()})
    out_seeds = [seeds[i] for i in rng.choice(len(seeds), k_max, replace=False)]
    take = {s: set(rng.choice(len(any_metric[s]), min(n, len(any_metric[s])), replace=False).tolist())
            for s, n in zip(out_seeds, sizes)}
    return ({m: [[v for i, v in enumerate(cl[s]) if i in take[s]] for s in out_seeds if s in cl] for m, cl in ref.items()},
            {m: [cl[s] for s in cl if s not in take] for m, cl in ref.items()})


def against(new: list, ref: list, splits: int = SPLITS, seed: int = 0) -> dict:
    """The verdict on new runs against a reference ensemble (eval dicts). Westfall and Young's min-P method with
    the reference as the null: each split of the reference against itself (held_out) gives every test a p; a
    test's p is first made a rank among the splits' p of the same test (so a test whose p is often 0 on the
    reference, e.g. an ID accuracy of 100 in nearly every run, weighs no more than any other), and a test of the
    new runs differs where fewer than 5% of the splits have a smallest rank at or below its own. So at most 5% of
    the reference's own splits are called different: the false-alarm rate, printed."""
    metrics = [(k, n, t) for k, n, t in FAMILY if clusters(new, k, t) and clusters(ref, k, t)]
    cn = {n: clusters(new, k, t) for k, n, t in metrics}
    cr = {n: clusters(ref, k, t) for k, n, t in metrics}
    names = [n for n in cn if len(cn[n]) >= 2 and len(cr[n]) >= 2]
    if not names:
        raise ValueError("--against: fewer than two seeds with a metric on one side; nothing to compare")
    ps = family_ps({n: as_lists(cn[n]) for n in names}, {n: as_lists(cr[n]) for n in names}, names)
    base = cn[names[0]]
    new_seeds, sizes = list(base), [len(v) for v in base.values()]
    shared = set(new_seeds) <= set(cr[names[0]]) and all(len(cr[names[0]][s]) > n for s, n in zip(new_seeds, sizes))
    k_max = len(new_seeds) if shared else min(len(new_seeds), len(cr[names[0]]) // 2)
    rng = np.random.default_rng(seed)
    tests = list(ps)
    null = np.ones((splits, len(tests)))
    for i in range(splits):
        q = family_ps(*held_out({n: cr[n] for n in names}, new_seeds, sizes, rng, k_max, shared), names)
        null[i] = [q.get(t, 1.0) for t in tests]
    rank = lambda t, p: (1 + (null[:, t] <= p + 1e-15).sum()) / (1 + splits)  # the test's own null rank of p
    null_min = np.array([min(rank(t, null[i, t]) for t in range(len(tests))) for i in range(splits)])
    adjusted = {name: float((1 + (null_min <= rank(t, ps[name]) + 1e-15).sum()) / (1 + splits)) for t, name in enumerate(tests)}
    own = np.array([(null_min <= m + 1e-15).sum() / (1 + splits) for m in null_min])  # each split judged as new runs are
    differ = sorted((adjusted[n], n) for n in tests if adjusted[n] < 0.05)
    return {"verdict": "differs" if differ else "consistent", "differ": [n for _, n in differ], "ps": ps,
            "adjusted": adjusted, "false_alarm": float((own < 0.05).mean()), "splits": splits,
            "held_out_seeds": k_max, "shared_seeds": shared, "tests": len(ps),
            "new": counts(cn[names[0]]), "ref": counts(cr[names[0]]),
            "means": {n: (statistics.fmean(stats.cluster_means(as_lists(cn[n]))),
                          statistics.fmean(stats.cluster_means(as_lists(cr[n])))) for n in names}}


def power(new: list, ref: list, n: int, draws: int = 40, splits: int = 200, seed: int = 0, replace: bool = False) -> float:
    """How often n seeds' runs drawn from the new set (without replacement, or with it: a seed drawn twice counts as
    two, which flatters the estimate) are found to differ from the reference."""
    by_seed = {}
    for e in new:
        by_seed.setdefault(e["seed"], []).append(e)
    seeds = sorted(by_seed)
    rng = np.random.default_rng(seed)
    hits = 0
    for d in range(draws):
        pick = rng.choice(len(seeds), n, replace=replace)
        runs = [{**e, "seed": (j, e["seed"])} for j, i in enumerate(pick) for e in by_seed[seeds[i]]]
        hits += against(runs, ref, splits, seed + d)["verdict"] == "differs"
    return hits / draws


def against_lines(r: dict) -> list[str]:
    how = ("the same seeds' runs held out, as many a seed as the new set has" if r["shared_seeds"]
           else f"{r['held_out_seeds']} of its seeds held out at a time")
    lines = [f"--against: {r['verdict'].upper()}" + (f" ({', '.join(r['differ'])})" if r["differ"] else "")
             + f": new {r['new']} against the reference's {r['ref']}",
             f"  {r['tests']} tests (location: Welch on the seeds' means; spread: F test of the runs' variances), each p "
             f"calibrated on {r['splits']} splits of the reference against itself ({how}); family-wise p < 0.05 differs, "
             f"a false alarm in {r['false_alarm']:.1%} of those splits"]
    for name, (a, b) in r["means"].items():
        cells = [f"{part} p {fmt(r['ps'].get(f'{name}: {part}'), '.2g')} (family-wise {fmt(r['adjusted'].get(f'{name}: {part}'), '.2g')})"
                 for part in ("location", "spread")]
        lines.append(f"  {name}: new {a:.4g} vs reference {b:.4g}; " + ", ".join(cells))
    return lines
