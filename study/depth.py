"""
Does the model use its loop? The depth-use study (results/README.md, "Does the model use its loop?";
results/depth/depth.json), from the committed runs of study/depth.sh.

    python study/depth.py           # the exploratory table and the declared verdicts from the committed runs
    python study/depth.py --queue   # the declared queue, one run a line: OUT_DIR TASK SEED FLAGS (depth.sh)

DECLARATION, 2026-12-07, committed before the first run (not edited after it; amendments are appended below,
dated, with their reason).

Hypothesis (exploratory until now: issue 70, read from the committed dyck runs). A model trained at depths that
reach K = 1 (the window clips T(n) + D at 1) learns to answer within one or two loop steps: its loop adds a few
points and it extrapolates worse than fixed depth, which computes through its loop (0% on the hard subset at K =
1). If that is the mechanism, random depth that never reaches shallow steps keeps the loop and the accuracy:
(1) the window with a depth floor, K = clip(T(n) + D, 10, T_max), scores higher than the plain window on dyck's
hard subset; (2) fixed_window (K = clip(20 + D, 1, T_max)) scores higher than the plain window; and whether
randomness itself costs anything is (3) fixed against fixed_window, two-sided.

Command. The dyck CPU recipe: `python train.py --task dyck --seed k --seeds 1 --threads 1 --out_dir DIR FLAGS`
(800 steps, d_model 64, T_max 20, T_test 30, the defaults), every run from one commit (a frozen worktree at this
declaration), one lane (study/lanes.sh, one thread; a second lane may join, which changes no run).

Rows (FLAGS), in results/depth/dyck/ROW/seedK:
    window        --schedule window --w 5                  K = clip(T(n) + D, 1, 20): the paper's window
    window_floor  --schedule window --w 5 --k_min 10       K = clip(T(n) + D, 10, 20); test K = clip(T(n), 10, 30)
    fixed_window  --schedule fixed_window --c 20 --w 5     K = clip(20 + D, 1, 20); test K = 20
    fixed         --schedule fixed --c 20                  K = 20
Seeds 400-415 (fresh: no earlier run used them), one run a seed and row; seed k starts every row from the same
initial transformer and batches, so the rows are paired by seed. Queued seed-major (seed 400's four rows first),
so a stop leaves complete seeds. 64 runs of about 4 CPU-minutes.

Outcomes, per run, from its eval.json (metrics.py's depth use, computed from the run's acc and hard_acc):
    primary     hard-subset Oracle OOD (metrics.oracle_hard_ood), hard-subset val-K OOD beside it, and the hard
                subset's best shortcut
    secondary   settle K: the shallowest single depth K whose accuracy, averaged over the OOD lengths (all
                samples), is within 1 point of the best single depth's; and, described only, the loop's gain
                (Oracle OOD minus the OOD accuracy at K = 1) and the accuracy at K = 1, on all and hard samples.
                The gain is not tested: a depth never supervised (K < 10 under the floor) scores low by
                construction, so a floor raises the gain almost mechanically.
A run counts if it converged, metrics.policy_id >= 99; a claim uses the seeds whose two runs both converged.

Claims, the family (Holm over 3, alpha 0.05), on the primary outcome; statistic the mean paired difference over
seeds; p from the exact sign-flip permutation test (all 2^k sign patterns of the k seed differences); a 95%
interval of the mean difference by inverting the two-sided sign-flip test:
    C1  window_floor > window          one-sided
    C2  fixed_window > window          one-sided
    C3  fixed != fixed_window          two-sided
"Reproduced" / "confirmed" only at Holm p < 0.05; otherwise "not significant at k seeds" with the interval and
what it excludes. Secondary, a family of one (alpha 0.05): S1 window_floor settles deeper than window (settle K,
one-sided, the same sign-flip test). Everything else printed (the K = 1 accuracies, the gains, the other row
pairs) is descriptive.

Power, stated before the runs from the committed pilots: the paired difference of two dyck rows' hard-subset
Oracle OOD over seeds has an SD of 11.6 (fixed_window - window, results/study/dyck seeds 0-7) to 16.9 (fixed -
window, results/study/dyck, 16 seeds; 16.6 on results/chaos r 0). At 16 seeds and 80% power (normal theory,
paired t), a one-sided claim at Holm's first level (alpha 0.05 / 3) detects a difference of 9.3-13.6 points, at
alpha 0.05 of 7.6-11.1; the two-sided C3 at 0.05 / 3 detects 10.3-15.0. The exploratory fixed - window difference
is 11.2 points (results/chaos): C2 has roughly even to good power for an effect that size; C3 detects only a large
cost of randomness; a small one would go unseen.

Budget and fallback. One lane: about 4.5 hours. If the runs outlast the session, every finished run is committed
(never ckpt.pt) and the study continues later from the same commit; the analysis then uses the complete seeds
(all four rows finished), in queue order, and says how many; a verdict needs at least 8 seed pairs.
"""


# What this file does, below the declaration (which stays as committed): `python study/depth.py` writes the
# declared analysis (report: the slots checked, complete seeds, C1-C3 and S1, the table per row) into results/README.md's
# `depth` block and results/depth/depth.json, and the exploratory table of every committed run (explore: depth
# use per task, folder and row, seeds as the unit) into its `depth-explore` block and results/depth/explore.json.

import math
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):  # run as `python study/depth.py`: the repository is the import root
    sys.path[0] = ROOT

import train  # noqa: E402  (its parse_args: the declared command of a slot, recipe included)
import config  # noqa: E402  (differences: a slot's recorded settings against its declared command)
from lab import records, tables  # noqa: E402
from lab.cli import run  # noqa: E402
from lab.files import write_json  # noqa: E402
from metrics import fmt  # noqa: E402
from study import stats  # noqa: E402

TASK = "dyck"
ROWS = {"window": "--schedule window --w 5", "window_floor": "--schedule window --w 5 --k_min 10",
        "fixed_window": "--schedule fixed_window --c 20 --w 5", "fixed": "--schedule fixed --c 20"}
SEEDS = range(400, 416)
CONVERGED = 99.0  # a run counts if metrics.policy_id >= 99
MIN_PAIRS = 8  # a verdict needs at least 8 seed pairs
KEY, VKEY, NAME = "oracle_hard_ood", "val_k_hard_ood", "hard-subset Oracle OOD"
SETTLE = "settle_k_ood"
# the family (Holm over 3, alpha 0.05), on KEY: (name, a, b, alternative): the mean of a - b over seed pairs
CLAIMS = (("C1", "window_floor", "window", "greater"), ("C2", "fixed_window", "window", "greater"),
          ("C3", "fixed", "fixed_window", "two-sided"))
SECONDARY = ("S1", "window_floor", "window", "greater")  # on SETTLE, a family of one
ALPHA = 0.05


def run_dir(row: str, k: int, rel: bool = False) -> str:
    d = os.path.join("results", "depth", TASK, row, f"seed{k}")
    return d if rel else os.path.join(ROOT, d)


def queue() -> list[str]:
    """The declared queue, seed-major: seed 400's four rows, then seed 401's, ..."""
    return [f"{run_dir(row, k, rel=True)} {TASK} {k} {fl}" for k in SEEDS for row, fl in ROWS.items()]


# --- the declared analysis -------------------------------------------------------------------------------

def slot(d: str, k: int, fl: str):
    """The run in a slot of the design (None while empty), checked: its recorded settings must be the declared
    command's (train.py's dyck recipe, seed k, the row's FLAGS, one thread), or the study would count a run of
    another command; one line naming the slot and the differing settings otherwise (study/chaos.py's check)."""
    if not os.path.lexists(os.path.join(d, "eval.json")):
        return None
    e = records.load_eval(d)
    want = train.parse_args(["--task", TASK, "--seed", str(k), "--seeds", "1", "--threads", "1", "--out_dir", d] + fl.split())
    diff = config.differences(e["config"], want)
    if e["config"].get("threads") != 1:
        diff.append(f"threads={e['config'].get('threads')!r} (declared 1)")
    if diff:
        raise ValueError(f"{os.path.relpath(d, ROOT)}: not the declared run of its slot (seed {k}, {fl}): "
                         + ", ".join(x.replace("(now", "(declared") for x in diff) + "; move it away, or train the slot again")
    return e


def checked(lines: list[str]) -> list[str]:
    """The queue, once every finished slot in it holds its declared run (slot): study/lanes.sh skips a slot with
    an eval.json without reading it, so a foreign run there stops depth.sh before it trains anything."""
    for line in lines:
        out, _, k, fl = line.split(maxsplit=3)
        slot(os.path.join(ROOT, out), int(k), fl)
    return lines


def runs() -> dict:
    """{(row, seed): eval dict} of the finished runs of the declared design, each checked (slot)."""
    return {(row, k): e for k in SEEDS for row, fl in ROWS.items() if (e := slot(run_dir(row, k), k, fl))}


def converged(e: dict) -> bool:
    return e["metrics"]["policy_id"] is not None and e["metrics"]["policy_id"] >= CONVERGED


def complete_seeds(done: dict) -> list[int]:
    """The seeds whose four rows all finished, in queue order (the declared fallback analyses these)."""
    return [k for k in SEEDS if all((row, k) in done for row in ROWS)]


def paired(done: dict, seeds: list, a: str, b: str, key: str) -> list[float]:
    """Per seed whose two runs both converged (and have the value), y_a - y_b."""
    return [done[a, k]["metrics"][key] - done[b, k]["metrics"][key] for k in seeds
            if converged(done[a, k]) and converged(done[b, k])
            and done[a, k]["metrics"].get(key) is not None and done[b, k]["metrics"].get(key) is not None]


def declared_test(d: list[float], alternative: str) -> dict:
    """The declared test of one claim on its seed differences d: mean, exact sign-flip p in the claim's direction,
    the 95% interval that inverts the two-sided test. None below MIN_PAIRS (no verdict)."""
    if len(d) < MIN_PAIRS:
        return {"pairs": len(d), "diff": statistics.fmean(d) if d else None, "p": None, "lo": None, "hi": None}
    lo, hi = stats.sign_flip_interval(d)
    return {"pairs": len(d), "diff": statistics.fmean(d), "p": stats.sign_flip(d, alternative), "lo": lo, "hi": hi}


def verdict(t: dict, a: str, b: str, alternative: str, p_key: str, what: str) -> str:
    """The declared words: "confirmed" only at (Holm) p < 0.05; otherwise "not significant at k seeds" with the
    interval and what it excludes; no verdict below MIN_PAIRS."""
    if t["p"] is None:
        return f"no verdict: {t['pairs']} seed pairs, the declaration needs at least {MIN_PAIRS}"
    iv = f"{t['diff']:+.1f} [{t['lo']:+.1f}, {t['hi']:+.1f}]"
    if t[p_key] < ALPHA:
        if alternative == "greater":
            return f"confirmed: {a} {what} than {b} ({iv})"
        return f"confirmed: {a} and {b} differ, {a} {'higher' if t['diff'] > 0 else 'lower'} ({iv})"
    return (f"not significant at {t['pairs']} seeds: {iv}; the interval excludes differences below {t['lo']:+.1f} "
            f"and above {t['hi']:+.1f}" + (" (it does not show them equal)" if t["lo"] < 0 < t["hi"] else ""))


def row_summary(done: dict, seeds: list, row: str) -> dict:
    """The descriptive row over the complete seeds' converged runs: means (settle K: the median)."""
    es = [done[row, k] for k in seeds]
    ok = [e["metrics"] for e in es if converged(e)]

    def mean(key):
        v = [m[key] for m in ok if m.get(key) is not None]
        return statistics.fmean(v) if v else None
    settle = [m[SETTLE] for m in ok if m.get(SETTLE) is not None]
    settle_h = [m["settle_k_hard_ood"] for m in ok if m.get("settle_k_hard_ood") is not None]
    return {"converged": len(ok), "runs": len(es), **{k: mean(k) for k in (
        KEY, VKEY, "shortcut_hard_ood", "k1_ood", "k1_hard_ood", "loop_gain_ood", "loop_gain_hard_ood", "oracle_ood")},
        "settle_k_ood": statistics.median(settle) if settle else None,
        "settle_k_hard_ood": statistics.median(settle_h) if settle_h else None}


def report(done: dict) -> tuple[list[str], dict]:
    """The declared analysis of the finished runs: (lines for results/README.md, the JSON record)."""
    seeds = complete_seeds(done)
    n_runs = len(ROWS) * len(SEEDS)
    out = {"declared_runs": n_runs, "finished": len(done), "complete_seeds": seeds,
           "cpus": sorted({e.get("env", {}).get("cpu") or "not recorded" for e in done.values()})}
    interim = len(seeds) < len(SEEDS)
    rest = " (the rest: `bash study/depth.sh`, which resumes)" if len(done) < n_runs else ""
    lines = [f"{len(done)} of {n_runs} declared runs finished{rest}; {len(seeds)} of {len(SEEDS)} seeds complete (all four "
             "rows" + (f": {seeds[0]}-{seeds[-1]} in queue order)" if seeds else ")")
             + (". The verdicts below are interim until all 16 seeds finish." if interim and len(seeds) >= MIN_PAIRS else
                f". No verdict before {MIN_PAIRS} complete seed pairs (the declaration)." if interim else ".")]
    if out["cpus"]:
        lines[0] += f" CPU: {'; '.join(out['cpus'])}."
    if not seeds:
        return lines, out
    rows = {row: row_summary(done, seeds, row) for row in ROWS}
    out["rows"] = rows
    lines += ["", f"Per row, the converged runs of the complete seeds (descriptive; accuracies in %, OOD; the hard subset's "
              f"best shortcut scores {fmt(rows['window']['shortcut_hard_ood'])}):", "",
              "| row | converged / runs | hard: Oracle | hard: val-K | hard: shortcut | K=1 all / hard | loop gain all / hard | settle K (median) all / hard |",
              "|---|---|---|---|---|---|---|---|"]
    for row, r in rows.items():
        lines.append(f"| {row} | {r['converged']} / {r['runs']} | {fmt(r[KEY])} | {fmt(r[VKEY])} | {fmt(r['shortcut_hard_ood'])} | "
                     f"{fmt(r['k1_ood'])} / {fmt(r['k1_hard_ood'])} | {fmt(r['loop_gain_ood'])} / {fmt(r['loop_gain_hard_ood'])} | "
                     f"{fmt(r['settle_k_ood'], 'g')} / {fmt(r['settle_k_hard_ood'], 'g')} |")
    fam = []
    for name, a, b, alt in CLAIMS:
        fam.append({"claim": name, "a": a, "b": b, "alternative": alt, **declared_test(paired(done, seeds, a, b, KEY), alt)})
    # Holm over the declared 3: a claim without a test (below MIN_PAIRS) enters at p = 1, never rejected, so the
    # others keep the family's multipliers
    for t, adj in zip(fam, stats.holm([1.0 if t["p"] is None else t["p"] for t in fam])):
        t["holm_p"] = None if t["p"] is None else adj
        t["verdict"] = verdict(t, t["a"], t["b"], t["alternative"], "holm_p", "scores higher")
    name, a, b, alt = SECONDARY
    sec = {"claim": name, "a": a, "b": b, "alternative": alt, **declared_test(paired(done, seeds, a, b, SETTLE), alt)}
    sec["verdict"] = verdict(sec, a, b, alt, "p", "settles deeper")
    out["family"], out["secondary"] = fam, sec
    sides = {"greater": "one-sided", "two-sided": "two-sided"}
    lines += ["", f"The family, on {NAME} (Holm over 3; exact sign-flip p over the seed pairs whose two runs converged; "
              "the mean difference with the 95% interval that inverts the two-sided test):", "",
              "| claim | pairs | difference [95%] | p | Holm p | verdict |", "|---|---|---|---|---|---|"]
    for t in fam + [sec]:
        what = f"{t['claim']} {t['a']} {'!=' if t['alternative'] == 'two-sided' else '>'} {t['b']} ({sides[t['alternative']]}" + (
            ", settle K, a family of one)" if t is sec else ")")
        cell = "-" if t["p"] is None else f"{t['diff']:+.1f} [{t['lo']:+.1f}, {t['hi']:+.1f}]"
        lines.append(f"| {what} | {t['pairs']} | {cell} | {fmt(t['p'], '.3g')} | {fmt(t.get('holm_p'), '.3g') if t is not sec else '-'} | {t['verdict']} |")
    lines += ["", "Regenerated by `python study/depth.py` (results/depth/depth.json); the declaration is in its docstring."]
    return lines, out


# --- the exploratory table: depth use in every committed run (issue 70, part B) ---------------------------

# folders below results/ left out of the exploratory table, and why
EXCLUDE = {"depth": "the declared study, analysed on its own above",
           "chaos/dyck/control": "determinism twins: the same runs as results/chaos's r 0, trained again",
           "recipes/exploration": "recipe searches, several of an older eval.json schema that records.load_eval refuses"}
ORDER = ("dyck", "copy")  # the study tasks first, then the others alphabetically
# per subset (hard, all OOD): the accuracy at K = 1, at the best K (Oracle OOD) and the loop's gain
MEASURES = (("k1_hard_ood", "oracle_hard_ood", "loop_gain_hard_ood"), ("k1_ood", "oracle_ood", "loop_gain_ood"))
# issue 70's figures, read from the committed runs by a session (means over runs; median settle K): the reading
# this table recomputes. (hard K = 1, hard best, all K = 1, all best, median settle K)
ISSUE_70 = {"chaos/dyck/fixed": (0.0, 86.0, 72.6, 96.6, 6), "chaos/dyck/window": (70.2, 74.8, 83.0, 86.9, 2),
            "chaos/dyck/rl": (78.0, 80.6, 91.8, 93.5, 1)}
ISSUE_70_STUDY = {"fixed": (77.0, 95.9), "fixed_window": (72.3, 96.1), "matched": (46.0, 86.8), "window": (75.0, 79.3),
                  "multidepth": (81.2, 89.8), "lognormal_poisson": (91.8, 95.1), "ponder": (92.7, 92.8), "rl": (91.1, 92.3)}
# the ladder's dyck rungs r2, r3, rE: the range of the all-samples gain, window 1.4-7.6 and fixed 15-20 points;
# copy: K = 1 scores about 0 everywhere
ISSUE_70_LADDER = {"window": (1.4, 7.6), "fixed": (15, 20)}


def row_path(run: str) -> str:
    """A run's row: its folder below results/ without the seed and replicate parts (seedK, rR)."""
    parts = os.path.relpath(run, os.path.join(ROOT, "results")).split(os.sep)
    while len(parts) > 1 and re.fullmatch(r"seed\d+|r\d+", parts[-1]):
        parts.pop()
    return "/".join(parts)


def t_interval(v: list[float]) -> tuple:
    """The 95% t interval of the mean of v (seed means): mean +- t_{0.975, k-1} s / sqrt(k), cut to 0..100 (every
    measure here is an accuracy in % or a gain in points: a mean outside cannot be covered); None below 2 values."""
    if len(v) < 2:
        return None, None
    half = stats.t_quantile(0.05, len(v) - 1) * statistics.stdev(v) / math.sqrt(len(v))
    return max(0.0, statistics.fmean(v) - half), min(100.0, statistics.fmean(v) + half)


def explore_row(path: str, evals: list[dict]) -> dict:
    """One row: per measure the mean over seed means (a seed's --perturb replicates averaged first) with its 95%
    t interval over the seeds; settle K the median over runs; the shortcuts (the same for every run of a row)."""
    keys = {tuple(kv for kv in tables.run_key(e) if kv[0] != "perturb") for e in evals}
    if len(keys) > 1:  # a folder holding two experiments would mix them in one row
        raise ValueError(f"results/{path}: its runs differ in settings beyond seed and --perturb; one row a folder")
    seen = {}
    for e in evals:
        seen.setdefault(tables.replicate(e), []).append(e["run_dir"])
    if twice := [v for v in seen.values() if len(v) > 1]:
        raise ValueError(f"results/{path}: one seed and replicate appears twice ({', '.join(twice[0])})")
    by_seed = {}
    for e in evals:
        by_seed.setdefault(e["seed"], []).append(e["metrics"])
    row = {"task": evals[0]["task"], "folder": path, "schedule": evals[0]["schedule"], "runs": len(evals),
           "seeds": len(by_seed), "converged": sum((e["metrics"]["policy_id"] or 0) >= CONVERGED for e in evals)}
    for key in [k for ks in MEASURES for k in ks] + ["shortcut_ood", "shortcut_hard_ood", SETTLE, "settle_k_hard_ood"]:
        means = [statistics.fmean(v) for ms in by_seed.values() if (v := [m[key] for m in ms if m.get(key) is not None])]
        lo, hi = t_interval(means)
        row[key] = {"mean": statistics.fmean(means) if means else None, "lo": lo, "hi": hi, "n": len(means)}
    for key in (SETTLE, "settle_k_hard_ood"):
        v = [e["metrics"][key] for e in evals if e["metrics"].get(key) is not None]
        row[key]["median_runs"] = statistics.median(v) if v else None
    return row


def explore() -> dict:
    """Every committed run below results/ (but EXCLUDE) with a K axis, one row a folder: the exploratory table."""
    results = os.path.join(ROOT, "results")
    skip = [os.path.join(results, d) for d in EXCLUDE]
    by_row, one_depth = {}, 0
    for d in records.find_runs([results]):
        if any(d == s or d.startswith(s + os.sep) for s in skip):
            continue
        e = records.load_eval(d)
        if len(e["K"]) == 1:  # an NTP baseline, scored at one fixed depth: no loop to measure
            one_depth += 1
            continue
        by_row.setdefault(row_path(d), []).append(e)
    rows = [explore_row(p, es) for p, es in by_row.items()]
    rank = lambda t: (ORDER.index(t) if t in ORDER else len(ORDER), t)
    rows.sort(key=lambda r: (rank(r["task"]), r["folder"]))
    return {"rows": rows, "excluded": EXCLUDE, "one_depth_runs": one_depth,
            "issue_70": {"chaos": ISSUE_70, "study_dyck_all_samples": ISSUE_70_STUDY, "ladder_dyck_gain": ISSUE_70_LADDER}}


def cell(v: dict) -> str:
    if v["mean"] is None:
        return "-"
    return fmt(v["mean"]) + (f" [{fmt(v['lo'])}, {fmt(v['hi'])}]" if v["lo"] is not None else "")


def against_issue(out: dict) -> list[str]:
    """Issue 70's figures beside this table's (rounded as the issue printed them), and where they differ."""
    rows = {r["folder"]: r for r in out["rows"]}
    lines, differ = [], []
    for path, fig in ISSUE_70.items():
        r = rows.get(path)
        if r is None:
            continue
        ours = tuple(round(r[k]["mean"], 1) for k in ("k1_hard_ood", "oracle_hard_ood", "k1_ood", "oracle_ood")) + (r[SETTLE]["median_runs"],)
        show = lambda v: " / ".join([fmt(x) for x in v[:4]] + [fmt(v[4], "g")])
        lines.append(f"{path.split('/')[-1]} {show(fig)} (here {show(ours)})")
        differ += [path] if ours != tuple(fig) else []
    study, other = [], []
    for row, (k1, best) in ISSUE_70_STUDY.items():
        r = rows.get(f"study/dyck/{row}")
        if r is not None:
            ours = (round(r["k1_ood"]["mean"], 1), round(r["oracle_ood"]["mean"], 1))
            study.append(f"{row} {k1} -> {best}" + ("" if ours == (k1, best) else f" (here {ours[0]} -> {ours[1]})"))
            differ += [f"study/dyck/{row}"] if ours != (k1, best) else []
    for row, (lo, hi) in ISSUE_70_LADDER.items():
        g = [rows[p]["loop_gain_ood"]["mean"] for p in (f"ladder/dyck/{r}/{row}" for r in ("r2", "r3", "rE")) if p in rows]
        if g:
            # the issue's range, rounded as it printed it (to a tenth for the window, to a point for fixed)
            digits = 1 if isinstance(lo, float) else 0
            ours = (round(min(g), digits), round(max(g), digits))
            other.append(f"{row} {lo:g}-{hi:g} (here {min(g):.1f}-{max(g):.1f})")
            differ += [f"ladder/dyck {row}"] if ours != (lo, hi) else []
    copy = [r["k1_ood"]["mean"] for r in out["rows"] if r["task"] == "copy" and r["k1_ood"]["mean"] is not None]
    if copy:
        copy = f"Copy: K = 1 scores about 0 everywhere (here at most {max(copy):.1f}% over its {len(copy)} rows)"
    return lines, study, other, copy or None, differ


def explore_lines(out: dict) -> list[str]:
    """The exploratory block of results/README.md, from explore()'s record alone."""
    multi = [r for r in out["rows"] if r["seeds"] > 1]
    single = [r for r in out["rows"] if r["seeds"] == 1]
    lines = ["**Exploratory** (issue 70's reading, recomputed; no claim: the declared test is the study above). Every "
             f"committed run with a K axis ({sum(r['runs'] for r in out['rows'])} runs; {out['one_depth_runs']} NTP runs scored at "
             "one fixed depth left out; left out too: " + "; ".join(f"results/{k} ({v})" for k, v in out["excluded"].items())
             + "), one row a folder, every run counted, converged or not. Accuracies in % on the OOD lengths: at K = 1, "
             "at the best K per length (Oracle OOD), and the loop's gain (the difference, points); each the mean over seeds "
             "(a seed's --perturb replicates averaged first) with its 95% t interval over the seed means; settle K, the "
             "shallowest depth within a point of the best single depth (metrics.py), is the median over runs. The shortcut "
             "is the best trivial predictor's score on the same samples.", "",
             "| task | folder | runs (seeds) | converged | hard: K=1 | hard: best K | hard: gain | hard: shortcut | all: K=1 | all: best K | all: gain | all: shortcut | settle K, median all / hard |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in multi:
        lines.append(f"| {r['task']} | {r['folder']} | {r['runs']} ({r['seeds']}) | {r['converged']} | "
                     + " | ".join(cell(r[k]) for k in MEASURES[0]) + f" | {fmt(r['shortcut_hard_ood']['mean'])} | "
                     + " | ".join(cell(r[k]) for k in MEASURES[1]) + f" | {fmt(r['shortcut_ood']['mean'])} | "
                     f"{fmt(r[SETTLE]['median_runs'], 'g')} / {fmt(r['settle_k_hard_ood']['median_runs'], 'g')} |")
    if single:
        lines += ["", "Single runs (one seed: no interval), the same columns:", "",
                  "| task | folder | converged | hard: K=1 / best K / gain / shortcut | all: K=1 / best K / gain / shortcut | settle K all / hard |",
                  "|---|---|---|---|---|---|"]
        for r in single:
            lines.append(f"| {r['task']} | {r['folder']} | {'yes' if r['converged'] else 'no'} | " + " / ".join(fmt(r[k]["mean"]) for k in MEASURES[0] + ("shortcut_hard_ood",))
                         + " | " + " / ".join(fmt(r[k]["mean"]) for k in MEASURES[1] + ("shortcut_ood",))
                         + f" | {fmt(r[SETTLE]['median_runs'], 'g')} / {fmt(r['settle_k_hard_ood']['median_runs'], 'g')} |")
    chaos, study, other, copy, differ = against_issue(out)
    if chaos or study or other:
        lines += ["", "Issue 70's figures beside this table's. results/chaos/dyck (hard K=1 / best K, all K=1 / best K, "
                  "median settle K): " + "; ".join(chaos)
                  + (". results/study/dyck, all samples, K=1 -> best K: " + "; ".join(study) if study else "")
                  + (". The ladder's dyck rungs r2, r3, rE, the all-samples gain: " + "; ".join(other) if other else "")
                  + (f". {copy}" if copy else "") + ". "
                  + ("They agree to the issue's rounding: the issue averaged over runs, this table over seed means, and "
                     "with the same number of runs a seed (five in results/chaos, one elsewhere) the two means are one number."
                     if not differ else f"They differ in {', '.join(differ)}, printed as 'here'.")]
    lines += ["", "Regenerated by `python study/depth.py` (results/depth/explore.json)."]
    return lines


def main(argv: list[str]) -> None:
    if argv == ["--queue"]:
        print("\n".join(checked(queue())))
        return
    if argv:
        raise ValueError(f"unknown arguments {' '.join(argv)} (allowed: none, --queue)")
    lines, out = report(runs())  # every slot and every committed run checked before anything is written
    ex = explore()
    ex_lines = explore_lines(ex)
    readme = os.path.join(ROOT, "results", "README.md")
    tables.splice(readme, "depth", lines)
    tables.splice(readme, "depth-explore", ex_lines)
    os.makedirs(os.path.join(ROOT, "results", "depth"), exist_ok=True)
    write_json(os.path.join(ROOT, "results", "depth", "depth.json"), out)
    write_json(os.path.join(ROOT, "results", "depth", "explore.json"), ex)
    print("\n".join(lines + [""] + ex_lines))


if __name__ == "__main__":  # a damaged or foreign run, a full disk: one line naming it (exit 2 / 1), no traceback
    sys.exit(run(main, "study/depth.py", sys.argv[1:]))
