"""
What the committed dyck runs say beyond the declared verdicts, in numbers a learner can check (results/README.md,
"What the runs taught"; results/findings.json; results/findings.png, the README's picture). EXPLORATORY: none of
these analyses was declared before its data; the declared ones (study/chaos.py, study.py, ladder.py) stand as
they were. The unit is the seed: a seed's five runs of the perturbation study (r 0 plain, r 1..4 nudged) are one
cluster.

    python study/findings.py      # the block, README's Results, the JSON and the picture (deterministic; after
                                    # study/exclusions.py, whose JSON it reads)

1. means: window and rl against fixed on the hard subset, on all samples (the paper's metric) and on the easy
   samples (the complement of the hard subset), from the study's 10 seeds x 5 runs: the difference of the seeds'
   means with a seed-bootstrap 95% interval and the exact paired sign-flip p over the 2^10 seed patterns; in how
   many seeds the window is below; Pr(a random window run < a random fixed run). The same on round two's
   independent seeds 0-15 (one run each), the two pooled, and the ladder's rungs (all samples)
2. the spread on all samples: the declared test (stats.block_permutation on the runs' total variance) applied to
   the paper's metric, with its test-inversion interval, and the window's seed share there (ICC)
3. the power of the declared family (Holm's first step, p < 0.05 / 4) for a Std ratio r: the committed runs with
   one row's blocks scaled about its mean by r, 200 draws of the seeds with replacement
4. the declared Std-ratio intervals (seed bootstrap) beside the test-inversion intervals of the declared test
5. layers r 0 and r 1: each pair of layers' agreement (the ICC of 30 (row, seed) pairs) against a permutation of
   the layer labels within each (row, seed); and what was checked for a mechanism
6. what a seed's five runs are worth: N / (1 + (m - 1) ICC) fresh seeds
"""

import io
import json
import math
import os
import statistics
import sys

import dataclasses

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):  # run as `python study/findings.py`: the repository is the import root
    sys.path[0] = ROOT

import config  # noqa: E402
from lab import records, tables  # noqa: E402
from lab.cli import run  # noqa: E402
from lab.files import read_json, write_set  # noqa: E402
from metrics import fmt  # noqa: E402
from study import chaos, stats, study  # noqa: E402

ROWS = ("fixed", "window", "rl")
HARD, ALL = "oracle_hard_ood", "oracle_ood"
ROUND_TWO = study.declared("window")  # round two's dyck seeds a row (results/study/dyck/ROW, one run each): all are read
# the keys of results/exclusions.json the README's Results read (study/exclusions.py writes them), checked first
EXCLUSION_KEYS = (("spreads", "copy_gap", "window", "gap"), ("spreads", "copy_gap", "window", "gap_fixed"),
                  ("spreads", "copy_gap", "paper", "window"), ("spreads", "copy_gap", "paper", "fixed"),
                  ("declared", "gap_window_holm"))


def easy_ood(e: dict) -> float:
    """Oracle OOD on the easy samples (not in the hard subset): per OOD length and depth, (acc - f hard) / (1 - f)."""
    m, out = e["metrics"], []
    for i, n in enumerate(e["lengths"]):
        f = m["hard_frac"][i]
        if n <= e["n_max"] or f is None or f >= 1:
            continue
        h = e["hard_acc"][i] if f > 0 else [0.0] * len(e["acc"][i])
        out.append(max((a - f * b) / (1 - f) for a, b in zip(e["acc"][i], h)))
    return 100 * statistics.fmean(out)


def value(e: dict, key: str) -> float:
    return easy_ood(e) if key == "easy" else e["metrics"][key]


def study_blocks(done: dict, row: str, key: str) -> list[np.ndarray]:
    return [np.array([value(done[row, k, r], key) for r in chaos.REPS if chaos.converged(done[row, k, r])])
            for k in chaos.SEEDS]


def seed_interval(d: np.ndarray) -> tuple:
    """The 95% interval of the mean of per-seed differences d that inverts the exact sign-flip test
    (stats.sign_flip_interval; a percentile bootstrap over 10-16 seeds is 10-20% too narrow)."""
    return stats.sign_flip_interval(np.asarray(d, float))


def means(done: dict, row: str, key: str) -> dict:
    a, b = study_blocks(done, row, key), study_blocks(done, "fixed", key)
    d = np.array([x.mean() - y.mean() for x, y in zip(a, b)])
    ya, yb = np.concatenate(a), np.concatenate(b)
    lo, hi = seed_interval(d)
    return {"mean": float(np.mean([x.mean() for x in a])), "fixed": float(np.mean([y.mean() for y in b])),
            "diff": float(d.mean()), "lo": lo, "hi": hi, "p": stats.sign_flip(d), "below": int((d < 0).sum()), "seeds": len(d),
            "p_run_below": float((ya[:, None] < yb[None, :]).mean()), "d": d.tolist()}


def round_two(row: str, key: str) -> dict:
    """Round two's dyck rows (results/study/dyck, seeds 0-15, one run each), paired by seed, converged pairs. A
    row with a seed of ROUND_TWO missing is refused (one line): the prose counts all of them."""
    def load(r):
        out, seen = {}, set()
        folder = os.path.join(ROOT, "results", "study", "dyck", r)
        for d in records.find_runs([folder]) if os.path.isdir(folder) else []:
            e = records.load_eval(d)
            if e["seed"] in ROUND_TWO:
                seen.add(e["seed"])
                if chaos.converged(e):
                    out[e["seed"]] = value(e, key)
        if missing := sorted(set(ROUND_TWO) - seen):
            raise ValueError(f"{os.path.relpath(folder, ROOT)}: round two's seeds {study.seed_ranges(missing)} missing; "
                             f"these findings read all {len(ROUND_TWO)} ({ROUND_TWO[0]}-{ROUND_TWO[-1]}) a row: train them "
                             f"(study/study.sh) before study/findings.py")
        return out
    a, b = load(row), load("fixed")
    d = np.array([a[s] - b[s] for s in sorted(set(a) & set(b))])
    lo, hi = seed_interval(d)
    return {"diff": float(d.mean()), "lo": lo, "hi": hi, "p": stats.sign_flip(d), "pairs": len(d), "d": d.tolist()}


def ladder(key: str) -> dict:
    """The ladder's dyck rungs, window against fixed, the mean over converged runs."""
    out = {}
    for rung in ("r2", "r3", "rE"):
        row = {}
        for r in ("window", "fixed"):
            vals = [records.load_eval(d) for d in records.find_runs([os.path.join(ROOT, "results", "ladder", "dyck", rung, r)])]
            vals = [value(e, key) for e in vals if chaos.converged(e)]
            row[r] = statistics.fmean(vals) if vals else None
        out[rung] = row
    return out


def centred(blocks: list, var) -> list:
    """Each seed's block about its own mean (the chaos variance), or every block about the row's mean (the total)."""
    if var is stats.within_var:
        return [x - x.mean() for x in blocks]
    return [x - np.concatenate(blocks).mean() for x in blocks]


def invert(a: list, b: list, var, alpha: float = 0.05) -> tuple:
    """The Std ratios r that stats.block_permutation does not reject once row a's centred blocks are divided by r:
    the test-inversion interval (stats.invert)."""
    ca, cb = centred(a, var), centred(b, var)
    p = lambda lr: stats.block_permutation([x / math.exp(lr) for x in ca], cb, var)["p"]
    return stats.invert(p, 0.5 * math.log(var(ca) / var(cb)), 0.25, alpha, iters=14)


def power(a: list, b: list, var, ratio: float, draws: int = 200) -> float:
    """Pr(block_permutation p < 0.05 / 4) when row a's centred blocks are scaled to a Std ratio of exactly `ratio`
    against b's, the seeds drawn with replacement (each seed's two blocks together)."""
    ca, cb = centred(a, var), centred(b, var)
    ca = [x * ratio * math.sqrt(var(cb) / var(ca)) for x in ca]
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(draws):
        idx = rng.integers(0, len(ca), len(ca))
        hits += stats.block_permutation([ca[i] for i in idx], [cb[i] for i in idx], var)["p"] < 0.05 / 4
    return hits / draws


def layer_icc(done: dict) -> dict:
    """Each pair of layers (i, j): the ICC of the 30 (row, seed) pairs (y_i, y_j) of the hard subset, and the
    permutation p of the largest pair ICC (layer labels shuffled within every (row, seed), 2000 draws)."""
    Y = np.array([[done[row, k, r]["metrics"][HARD] for r in chaos.REPS] for row in ROWS for k in chaos.SEEDS])

    def pair_icc(Y, i, j):
        return stats.anova_icc([[y[i], y[j]] for y in Y] , interval=False)["icc"]
    pairs = [(i, j) for i in chaos.REPS for j in chaos.REPS if i < j]
    obs = {f"r{i}-r{j}": pair_icc(Y, i, j) for i, j in pairs}
    rng, top = np.random.default_rng(0), max(obs.values())
    hits = 0
    for _ in range(2000):
        Z = np.array([rng.permutation(y) for y in Y])
        hits += max(pair_icc(Z, i, j) for i, j in pairs) >= top - 1e-12
    # mechanism checks: the recorded environment of each layer, the perturbation streams, the nudge's actual size
    envs = {f"r{r}": sorted({json.dumps({k: done[row, k2, r]["env"].get(k) for k in ("git_commit", "cpu", "torch", "threads")})
                             for row in ROWS for k2 in chaos.SEEDS}) for r in chaos.REPS}
    streams = [config.perturb_stream(k, r) for k in chaos.SEEDS for r in chaos.REPS[1:]]
    size = {}
    for r in chaos.REPS[1:]:  # the relative size of each layer's nudge of the initial weights (no training needed)
        rel = []
        for k in chaos.SEEDS:
            cfg = config.Config(**{**done["window", k, r]["config"]})
            _, m1, _ = config.build(dataclasses.replace(cfg, perturb=0.0, perturb_seed=0))
            _, m2, _ = config.build(cfg)
            a, b = (torch.cat([p.detach().flatten() for p in m.parameters()]) for m in (m1, m2))
            rel.append(float((b - a).norm() / a.norm()))
        size[f"r{r}"] = statistics.fmean(rel)
    return {"pairs": obs, "max_pair": max(obs, key=obs.get), "p_max": (1 + hits) / 2001,
            "one_environment": all(len(v) == 1 for v in envs.values()) and len({v[0] for v in envs.values()}) == 1,
            "streams_distinct": len(set(streams)) == len(streams) and min(streams) >= 2 ** 31, "nudge_size": size}


def threads_exchangeable(done: dict) -> dict:
    """Is a second thread one more chaos draw? Per (row, seed) of the secondary, the five deviations |y - y(r 0)|
    (the 2-thread twin and r 1..4); statistic: the twins' mean deviation minus the nudges'; p: which of the five
    is the thread twin, shuffled within each (row, seed), 20,000 draws, two-sided."""
    blocks = []
    for row in ROWS:
        for k in chaos.SECONDARY:
            e2 = chaos.load(os.path.join(chaos.CHAOS, chaos.TASK, "threads2", row, f"seed{k}"))
            y0 = done[row, k, 0]["metrics"][HARD]
            blocks.append([abs(e2["metrics"][HARD] - y0)] + [abs(done[row, k, r]["metrics"][HARD] - y0) for r in chaos.REPS[1:]])
    B = np.array(blocks)
    stat = lambda first: B[np.arange(len(B)), first].mean() - (B.sum(axis=1) - B[np.arange(len(B)), first]).mean() / 4
    t0 = stat(np.zeros(len(B), int))
    rng = np.random.default_rng(0)
    t = np.array([stat(rng.integers(0, 5, len(B))) for _ in range(20_000)])
    return {"twins": len(B), "diff": float(t0), "p": float((1 + (np.abs(t) >= abs(t0) - 1e-12).sum()) / 20_001)}


def analyse(done: dict) -> dict:
    if chaos.complete_layers(done) < len(chaos.REPS):
        raise ValueError(f"results/chaos: {len(done)} runs; these findings read the complete study (150 runs)")
    out = {"means": {}, "round_two": {}, "ladder": ladder(ALL)}
    for row in ("window", "rl"):
        for key in (HARD, ALL, "easy"):
            out["means"][f"{row} {key}"] = means(done, row, key)
        for key in (HARD, ALL):
            r2 = round_two(row, key)
            pooled = np.array(out["means"][f"{row} {key}"]["d"] + r2["d"])
            lo, hi = seed_interval(pooled)
            out["round_two"][f"{row} {key}"] = {**r2, "pooled": float(pooled.mean()), "pooled_lo": lo, "pooled_hi": hi,
                                                  "pooled_seeds": len(pooled)}
    counting = next(iter(done.values()))["metrics"]["shortcuts"]["counting"]["ood"]
    out["counting_ood"] = counting
    out["shortcut_hard_ood"] = next(iter(done.values()))["metrics"]["shortcut_hard_ood"]
    out["window_runs_below_counting"] = sum(done["window", k, r]["metrics"][ALL] < counting for k in chaos.SEEDS for r in chaos.REPS)
    out["spread_all"] = {}
    for row in ("window", "rl"):
        a, b = study_blocks(done, row, ALL), study_blocks(done, "fixed", ALL)
        t = stats.block_permutation(a, b, stats.total_var)
        lo, hi = invert(a, b, stats.total_var)
        out["spread_all"][row] = {"ratio": t["ratio_std"], "p": t["p"], "lo": lo, "hi": hi,
                                  "std": math.sqrt(stats.total_var(a)), "std_fixed": math.sqrt(stats.total_var(b)),
                                  "icc": stats.anova_icc(a)["icc"], "icc_lo": stats.anova_icc(a)["lo"], "icc_hi": stats.anova_icc(a)["hi"]}
    out["declared_intervals"] = []
    for part, row in chaos.FAMILY:
        var = stats.within_var if part == "chaos" else stats.total_var
        a, b = study_blocks(done, row, HARD), study_blocks(done, "fixed", HARD)
        boot = stats.block_interval(a, b, var)
        lo, hi = invert(a, b, var)
        out["declared_intervals"].append({"variance": part, "row": row, "ratio": stats.block_permutation(a, b, var)["ratio_std"],
                                          "boot_lo": boot["lo"], "boot_hi": boot["hi"], "inv_lo": lo, "inv_hi": hi})
    a, b = study_blocks(done, "window", HARD), study_blocks(done, "fixed", HARD)
    out["power"] = {f"{r:g}": power(a, b, stats.total_var, r) for r in (1.27, 1.5, 1.75, 2.0, 6.6)}
    out["layers"] = layer_icc(done)
    out["threads"] = threads_exchangeable(done)
    window = {key: [done["window", k, r]["metrics"][key] for k in chaos.SEEDS for r in chaos.REPS] for key in (HARD, ALL)}
    out["span"] = {"hard_min": min(window[HARD]), "hard_max": max(window[HARD]), "hard_median": statistics.median(window[HARD]),
                   "all_min": min(window[ALL]), "all_max": max(window[ALL])}
    out["effective_seeds"] = {row: stats.effective_runs(study_blocks(done, row, HARD)) / len(chaos.SEEDS) for row in ROWS}
    return out


def lines(o: dict) -> list[str]:
    m, r2 = o["means"], o["round_two"]
    w, wa, we, r = m[f"window {HARD}"], m[f"window {ALL}"], m["window easy"], m[f"rl {HARD}"]
    s, sr = o["spread_all"]["window"], o["spread_all"]["rl"]
    lay, th = o["layers"], o["threads"]
    others = [v for k, v in lay["pairs"].items() if k != lay["max_pair"]]
    out = [
        "Exploratory (none declared before its data); the unit is the seed, its five runs one cluster; the intervals of a mean difference invert the exact sign-flip test over seeds.",
        "",
        f"1. **At this scale the window scores lower than fixed depth on dyck, not higher.** Hard subset: window {w['mean']:.1f} vs fixed "
        f"{w['fixed']:.1f}, difference {w['diff']:+.1f} [{w['lo']:+.1f}, {w['hi']:+.1f}], exact paired p {w['p']:.3f} ({w['seeds']} seeds); rl "
        f"{r['mean']:.1f} ({r['diff']:+.1f} [{r['lo']:+.1f}, {r['hi']:+.1f}], p {r['p']:.3f}). All samples (the paper's metric): window "
        f"{wa['mean']:.1f} vs {wa['fixed']:.1f} ({wa['diff']:+.1f} [{wa['lo']:+.1f}, {wa['hi']:+.1f}], p {wa['p']:.3f}), where the paper "
        f"has the window 3.6 points above fixed. The window is below fixed on {wa['below']} of {wa['seeds']} seeds (hard subset: "
        f"{w['below']}); a random window run scores below a random fixed run with probability {wa['p_run_below']:.2f} (all samples; "
        f"{w['p_run_below']:.2f} hard). Round two's independent seeds {ROUND_TWO[0]}-{ROUND_TWO[-1]} agree: hard {r2[f'window {HARD}']['diff']:+.1f} "
        f"[{r2[f'window {HARD}']['lo']:+.1f}, {r2[f'window {HARD}']['hi']:+.1f}], all samples {r2[f'window {ALL}']['diff']:+.1f} "
        f"[{r2[f'window {ALL}']['lo']:+.1f}, {r2[f'window {ALL}']['hi']:+.1f}] ({r2[f'window {ALL}']['pairs']} pairs); pooled over "
        f"{r2[f'window {HARD}']['pooled_seeds']} seeds {r2[f'window {HARD}']['pooled']:+.1f} [{r2[f'window {HARD}']['pooled_lo']:+.1f}, "
        f"{r2[f'window {HARD}']['pooled_hi']:+.1f}] hard, {r2[f'window {ALL}']['pooled']:+.1f} [{r2[f'window {ALL}']['pooled_lo']:+.1f}, "
        f"{r2[f'window {ALL}']['pooled_hi']:+.1f}] all. The ladder's rungs agree in direction (all samples, window vs fixed: "
        + ", ".join(f"{k} {fmt(v['window'])} vs {fmt(v['fixed'])}" for k, v in o["ladder"].items()) + ").",
        f"2. **The window also loses on the easy samples** (the complement of the hard subset, which counting solves): {we['mean']:.1f} vs "
        f"{we['fixed']:.1f} ({we['diff']:+.1f} [{we['lo']:+.1f}, {we['hi']:+.1f}], p {we['p']:.3f}); {o['window_runs_below_counting']} of {len(chaos.SEEDS) * len(chaos.REPS)} "
        f"window runs score below counting's {o['counting_ood']:.1f} on all samples. The lower all-sample mean is not a statement about "
        f"the shortcut's ground alone.",
        f"3. **On the paper's metric the window spreads more than fixed**: Std over runs {s['std']:.1f} vs {s['std_fixed']:.1f}, ratio "
        f"{s['ratio']:.2f} [{s['lo']:.2f}, {s['hi']:.2f}] (the declared block permutation applied to all samples, p {s['p']:.3f}, its "
        f"interval by test inversion); rl {sr['ratio']:.2f} [{sr['lo']:.2f}, {sr['hi']:.2f}], p {sr['p']:.3f}; the paper has 0.79 and 0.15. "
        f"There the window's seed share is {s['icc']:+.2f} [{s['icc_lo']:+.2f}, {s['icc_hi']:+.2f}]: \"chaos-driven\" holds for the hard subset only.",
        "4. **What the declared family could detect** (Holm's first step, p < 0.0125; the window's blocks scaled about their mean, seeds "
        "resampled, the window's spread set to the ratio named): power " + ", ".join(f"{v:.2f} at a Std ratio of {k}" for k, v in o["power"].items())
        + ". The paper's window ratio (1.27) was not within reach; its rl ratio (6.6) was, so that one is excluded. (Resampling "
        "10 seeds with replacement flatters power; a referee's parametric estimate put 80% power at ratios of 1.9-2.0.)",
        "5. **The declared Std-ratio intervals** (seed bootstrap, as declared) beside the interval that inverts the declared permutation "
        "test (wider; a percentile bootstrap over 10 seeds covers about 0.9 of the time): "
        + "; ".join(f"{d['variance']} {d['row']}/fixed {d['ratio']:.2f}: bootstrap [{d['boot_lo']:.2f}, {d['boot_hi']:.2f}], inversion "
                    f"[{d['inv_lo']:.2f}, {d['inv_hi']:.2f}]" for d in o["declared_intervals"]) + ".",
        f"6. **Layers r 0 and r 1 agree more than the others** (post hoc): the ICC of the 30 (row, seed) pairs is "
        f"{lay['pairs'][lay['max_pair']]:+.2f} for {lay['max_pair']} against {min(others):+.2f} to {max(others):+.2f} for the nine other "
        f"pairs; a shuffle of the layer labels within each (row, seed) gives a pair this high with p {lay['p_max']:.3f}. Checked: "
        f"every run {'records one and the same' if lay['one_environment'] else 'does NOT record the same'} commit, CPU model, torch and "
        f"thread count; the 40 perturbation streams are {'distinct and apart from every other stream' if lay['streams_distinct'] else 'NOT distinct'}; "
        f"each layer nudges the initial weights by the same relative size ("
        + ", ".join(f"{k} {v:.2e}" for k, v in lay["nudge_size"].items()) + "), so r 1 is not a smaller nudge. No mechanism found "
        "(r 0 and r 1 were also the first two layers trained, on the same worktree); it biases the ICC upward, so the chaos "
        "readings above are conservative.",
        f"7. **A second thread is one more chaos draw**: against the same seed's r 0 run, the 2-thread twin moves "
        f"{abs(th['diff']):.1f} points {'less' if th['diff'] < 0 else 'more'} than a 1e-6 nudge does, on average ({th['twins']} "
        f"(row, seed) twins; exchangeable with the nudges, p {th['p']:.2f}: not significant, and 15 twins could not rule out a "
        f"difference of a few points).",
        "8. **The unit of replication is one run from a fresh seed.** A seed's five runs are worth "
        + ", ".join(f"{v:.1f} ({row})" for row, v in o["effective_seeds"].items())
        + " fresh seeds (the hard subset's ICC). Per-seed readings elsewhere (thread twins, bptt_k 3, single-seed rows) are one draw each.",
        "",
        "Regenerated by `python study/findings.py` (results/findings.json, results/findings.png).",
    ]
    return out


def paper_difference(task: str = "dyck") -> dict:
    """The paper's own window-minus-fixed Oracle OOD with its uncertainty: Welch's 95% interval from its published
    means and Stds (results/paper.json, one run a seed)."""
    rows = {r["setting"]: r for r in read_json(os.path.join(ROOT, "results", "paper.json"))["rows"] if r["task"] == task}
    w, f = rows["window w=5"], rows["fixed c=20"]
    va, vb = w["std"] ** 2 / w["seeds"], f["std"] ** 2 / f["seeds"]
    df = (va + vb) ** 2 / (va ** 2 / (w["seeds"] - 1) + vb ** 2 / (f["seeds"] - 1))
    half = stats.t_quantile(0.05, df) * math.sqrt(va + vb)  # two-sided: Pr(|T| >= t) = 0.05
    diff = w["oracle_ood"] - f["oracle_ood"]
    return {"diff": diff, "lo": diff - half, "hi": diff + half, "seeds": w["seeds"]}


def depth_lines() -> list[str]:
    """The bullet on depth use: the exploratory reading of the perturbation study's 150 runs (results/depth/
    explore.json) and the declared test on fresh seeds (results/depth/depth.json), both written by study/depth.py."""
    rows = {r["folder"]: r for r in read_json(os.path.join(ROOT, "results", "depth", "explore.json"))["rows"]}
    f, w, r = (rows[f"chaos/dyck/{k}"] for k in ("fixed", "window", "rl"))
    d = read_json(os.path.join(ROOT, "results", "depth", "depth.json"))
    fam = {t["claim"]: t for t in d["family"]}
    said = {"C1": "a depth floor (`--k_min 10`) raises the window's hard-subset accuracy",
            "C2": "fixed_window (random depth, never shallow) beats the window",
            "C3": "fixed and fixed_window differ"}
    def claim(c):
        t = fam[c]
        if t["p"] is None:
            return f"{said[c]}: no verdict yet ({t['pairs']} seeds)"
        return (f"{said[c]}: {t['diff']:+.1f} points [{t['lo']:+.1f}, {t['hi']:+.1f}], p {t['holm_p']:.3f} "
                f"adjusted for the three claims ({'shown' if t['holm_p'] < 0.05 else 'not significant'} at {t['pairs']} seeds)")
    rows_d = d["rows"]
    done = "" if d["finished"] == d["declared_runs"] else f", interim: {d['finished']} of {d['declared_runs']} runs"
    return [f"- **What the schedule does to the loop** (exploratory): a fixed-depth model computes through its loop (hard "
            f"subset {f['k1_hard_ood']['mean']:.1f}% at K = 1, {f['oracle_hard_ood']['mean']:.1f}% at its best K), while window "
            f"and RL-Halting models answer within a step or two ({w['k1_hard_ood']['mean']:.1f}% and {r['k1_hard_ood']['mean']:.1f}% "
            f"at K = 1; their loops add {w['loop_gain_hard_ood']['mean']:.1f} and {r['loop_gain_hard_ood']['mean']:.1f} points). "
            f"The test declared before its fresh seeds 400-415 (dyck, hard subset{done}): "
            + "; ".join(claim(c) for c in ("C1", "C2", "C3"))
            + f". The floor does make the window loop (K = 1: {rows_d['window_floor']['k1_hard_ood']:.1f}% against "
            f"{rows_d['window']['k1_hard_ood']:.1f}%) and scores {rows_d['window_floor']['oracle_hard_ood']:.1f}% against "
            f"{rows_d['window']['oracle_hard_ood']:.1f}% (shortcut {rows_d['window']['shortcut_hard_ood']:.1f}%)."]


def exclusions_record() -> dict:
    """results/exclusions.json, with every key the Results read (EXCLUSION_KEYS) checked to be a finite number:
    one line naming the file and the key otherwise (ValueError), before anything is written."""
    path = os.path.join(ROOT, "results", "exclusions.json")
    ex = read_json(path)
    for keys in EXCLUSION_KEYS:
        v = ex
        for i, k in enumerate(keys):
            if not isinstance(v, dict) or k not in v:
                raise ValueError(f"{path}: no key {'.'.join(keys[:i + 1])} (study/findings.py reads {'.'.join(keys)}); "
                                 f"run python study/exclusions.py again")
            v = v[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{path}: {'.'.join(keys)} is {v!r}, not a number; run python study/exclusions.py again")
    return ex


def front(o: dict, ex: dict = None) -> list[str]:
    """README.md's Results: each sentence names its metric and its data; every number from o and the committed
    JSON records (results/exclusions.json, results/chaos/chaos.json, results/paper.json, results/depth/), every
    count from the design the data was checked against (chaos.SEEDS x chaos.REPS a row, ROUND_TWO)."""
    ex = ex if ex is not None else exclusions_record()
    seeds, reps, fresh = len(chaos.SEEDS), len(chaos.REPS), len(ROUND_TWO)
    icc = read_json(os.path.join(ROOT, "results", "chaos", "chaos.json"))["rows"]
    m, r2 = o["means"], o["round_two"]
    w, wa, r, ra = m[f"window {HARD}"], m[f"window {ALL}"], m[f"rl {HARD}"], m[f"rl {ALL}"]
    r2a, r2h = r2[f"window {ALL}"], r2[f"window {HARD}"]
    s, sr, gap = o["spread_all"]["window"], o["spread_all"]["rl"], ex["spreads"]["copy_gap"]
    hard = {d["row"]: d for d in o["declared_intervals"] if d["variance"] == "total"}
    pd = paper_difference()
    return [
        f"What {len(ROWS) * seeds * reps} runs of the default recipe say (dyck at d_model 64 and 800 steps, against the paper's 256 and 100k: "
        f"{seeds} seeds x {reps} runs each of fixed depth, the window and RL-Halting; a seed's five runs count as one), with {fresh} other "
        "seeds a row (round two's rows, one run each, some trained on a GPU) beside them. Oracle accuracy on OOD lengths "
        "throughout; differences are over seeds, with 95% intervals:",
        "",
        f"- **The window scored lower than fixed depth, not higher**: on dyck's hard subset {w['mean']:.1f}% against "
        f"{w['fixed']:.1f}% (the best shortcut scores {o['shortcut_hard_ood']:.1f}%; difference {w['diff']:+.1f} points "
        f"[{w['lo']:+.1f}, {w['hi']:+.1f}]), and on all samples {wa['mean']:.1f}% against {wa['fixed']:.1f}% ({wa['diff']:+.1f} "
        f"[{wa['lo']:+.1f}, {wa['hi']:+.1f}]), where counting alone scores {o['counting_ood']:.1f}% and "
        f"{o['window_runs_below_counting']} of the {seeds * reps} window runs score below it. RL-Halting: {r['mean']:.1f}% hard subset, "
        f"{ra['mean']:.1f}% all samples. The paper has the window {pd['diff']:+.1f} points above fixed on all samples, but at "
        f"its {pd['seeds']} seeds that is [{pd['lo']:+.1f}, {pd['hi']:+.1f}], so ours does not contradict it. The {fresh} other seeds "
        f"agree in direction: {r2a['diff']:+.1f} [{r2a['lo']:+.1f}, {r2a['hi']:+.1f}] on all samples, {r2h['diff']:+.1f} "
        f"[{r2h['lo']:+.1f}, {r2h['hi']:+.1f}] (p {r2h['p']:.2f}) on the hard subset.",
        f"- **On all samples the window also spread more; on the hard subset it did not**: on all samples its runs' Std was "
        f"{s['std']:.1f} points against fixed's {s['std_fixed']:.1f} ({s['ratio']:.1f} times, [{s['lo']:.1f}, {s['hi']:.1f}]; "
        f"fixed's runs sit near the ceiling); on the hard subset the ratio is {hard['window']['ratio']:.2f} "
        f"[{hard['window']['inv_lo']:.2f}, {hard['window']['inv_hi']:.2f}]. The paper's much steadier RL-Halting (0.15 of "
        f"fixed's Std) is not seen: {sr['ratio']:.1f} [{sr['lo']:.1f}, {sr['hi']:.1f}] on all samples, {hard['rl']['ratio']:.2f} "
        f"[{hard['rl']['inv_lo']:.2f}, {hard['rl']['inv_hi']:.2f}] on the hard subset.",
        "- **One run is one draw**: on the hard subset, two runs of one seed that differ only by rounding-sized nudges differ "
        "about as much as runs of two seeds: the seed explains at most " + ", ".join(f"{icc[k]['icc_hi']:.2f} ({k})" for k in ROWS)
        + " of the spread (upper ends of 95% intervals; best estimates " + ", ".join(f"{max(0.0, icc[k]['icc']):.2f}" for k in ROWS)
        + f"). On all samples the seed matters more for the window ({s['icc']:.2f} [{max(0.0, s['icc_lo']):.2f}, "
        f"{s['icc_hi']:.2f}]). So compare many runs, counting each seed once.",
        f"- **Gap** (the best depth's accuracy minus the schedule's own): on copy the window's is smaller than fixed depth's, "
        f"{gap['window']['gap']:.1f} against {gap['window']['gap_fixed']:.1f} points (p {ex['declared']['gap_window_holm']:.3f} "
        f"adjusted for the claims tested with it), the paper's direction, but both are small next to the paper's "
        f"{gap['paper']['window']:.1f} against {gap['paper']['fixed']:.1f} (our copy trains on n <= 10 with fixed at c = 15; "
        f"the paper on n < 20 with c = 20). Nothing here ran at the paper's GPU scale.",
        *depth_lines(),
        "- Every figure with its test, interval and caveat: [results/README.md](results/README.md) (these lines: "
        "`python study/findings.py`).",
        "",
        "![every run of the perturbation study, per schedule: hard subset and all samples](results/findings.png)"]


def span(o: dict) -> list[str]:
    """The sentence under README.md's output block: what 50 runs of that very command span."""
    sp = o["span"]
    return [f"*Fifty runs of this command with seeds 100-109 (each plain and with four rounding-sized nudges; "
            f"results/chaos/dyck/window) span "
            f"{sp['hard_min']:.0f}-{sp['hard_max']:.0f}% on the hard subset (median {sp['hard_median']:.0f}%) and "
            f"{sp['all_min']:.0f}-{sp['all_max']:.0f}% on all samples; fixed depth (`--schedule fixed`) did better on average "
            f"here ({o['means'][f'window {HARD}']['fixed']:.0f}% and {o['means'][f'window {ALL}']['fixed']:.0f}%). One run is one draw.*"]


def picture(done: dict) -> bytes:
    """The README's picture (PNG): every run of the study, per schedule, on the hard subset and on all samples."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.3))
    counting = next(iter(done.values()))["metrics"]["shortcuts"]
    for ax, (key, title) in zip(axes, ((HARD, "hard subset (shortcut 11.6%)"), (ALL, "all samples (counting 82.7%)"))):
        for i, row in enumerate(ROWS):
            y = [done[row, k, r]["metrics"][key] for k in chaos.SEEDS for r in chaos.REPS]
            x = i + np.random.default_rng(i).uniform(-0.22, 0.22, len(y))
            ax.plot(x, y, "o", ms=3.2, alpha=0.55, color=("tab:gray", "tab:blue", "tab:orange")[i])
            ax.plot([i - 0.3, i + 0.3], [statistics.fmean(y)] * 2, "k-", lw=2)
        if key == ALL:
            ax.axhline(counting["counting"]["ood"], ls="--", color="tab:red", lw=1)
        ax.set_xticks(range(len(ROWS)), ["fixed depth", "window w=5", "RL-Halting"])
        ax.set_title(f"dyck OOD, {title}", fontsize=9)
        ax.set_ylabel("Oracle OOD accuracy (%)", fontsize=8)
    fig.suptitle("50 runs per schedule (10 seeds x 5 runs; black: the mean). One run is one draw.", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def main(argv) -> None:
    if argv:
        raise ValueError(f"unknown arguments {' '.join(argv)} (study/findings.py takes none)")
    ex = exclusions_record()  # the inputs checked before the work, the work done before the first write
    done = chaos.runs()  # the study's 150 runs, read once
    o = analyse(done)
    text = lines(o)
    notebook, readme = os.path.join(ROOT, "results", "README.md"), os.path.join(ROOT, "README.md")
    out = {notebook: tables.spliced(notebook, "findings", text),
           readme: tables.spliced(readme, "span", span(o), tables.spliced(readme, "results", front(o, ex))),
           os.path.join(ROOT, "results", "findings.json"): o}
    try:
        out[os.path.join(ROOT, "results", "findings.png")] = picture(done)
    except ImportError:
        print("study/findings.py: matplotlib is not installed; the picture is skipped", file=sys.stderr)
    write_set(out)  # the four files as one set: all or, should a rename fail, the ones replaced named
    print("\n".join(text))


if __name__ == "__main__":
    sys.exit(run(main, "study/findings.py", sys.argv[1:]))
