"""
`evaluate.py NEW --against REF` measured on the committed runs (results/README.md, "Did my change keep the method?";
results/against/against.json): how often it says "differs" when nothing changed, how often it finds a change that
was made, and its verdict on six sets of new runs. Every verdict is compare.against's, the function evaluate.py
--against runs, with its defaults.

    bash study/against.sh             # trains the 10 runs of the changed method (window w = 2), then this
    python study/against.py           # the measurement from the committed runs (deterministic, about a minute)
    python study/against.py --before  # once: the same null splits judged by the calibration before issue 68
                                        # (git show 0407f9f:lab/compare.py), into results/against/before.json

1. False alarms: null splits of the perturbation study's ensembles (results/chaos/dyck/{fixed,window,rl}, 10 seeds x
   5 runs), PER_ROW a row and design, no split twice, each new set of the same method as its reference:
   (a) held-out runs of the same seeds: one run of each of 5 seeds as new, the row's other 45 runs the reference;
   (b) fresh seeds, one run each: 5 of round two's 16 seeds of the same recipe (results/study/dyck/ROW, seeds 0-15,
       one plain run each; 6-7 a row trained on an H200 GPU) as new, the row's 50 runs the reference;
   (c) whole clusters: 5 seeds with all their runs as new, the other 5 seeds' 25 runs the reference.
   The rate of "differs" with its Clopper-Pearson 95% interval (stats.binomial_interval). The splits reuse the same
   runs, so they are not independent draws: the interval is that of independent splits, a lower bound on the
   uncertainty.
2. Power, by fresh draws of a changed method (never by resampling the set under test): the window against the fixed
   ensemble, 5 or 10 window runs drawn from round two's 16 fresh seeds (one run each) and from the window ensemble
   (one run of each of 5 or 10 seeds: the reference's seeds); window w = 2 against the w = 5 ensemble, 5 of the 10
   w = 2 runs. DRAWS draws each (fewer where fewer distinct sets exist), and how often each test fired.
3. Six sets of new runs, as before: each row's 5 two-thread runs against its 50 one-thread runs (expected
   consistent); layer r 0 (10 plain runs) against layers r 1-4 of the window row (expected consistent); the window
   ensemble against the fixed one (differs); the 10 w = 2 runs against the w = 5 ensemble (differs).
"""

import importlib.util
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):
    sys.path[0] = ROOT

from lab import compare, records, tables  # noqa: E402
from lab.cli import run  # noqa: E402
from lab.files import read_json, write_json, write_set  # noqa: E402
from study import stats  # noqa: E402
from study import chaos as perturbation  # noqa: E402  (the perturbation study's slots and their check)
from study import study as protocol  # noqa: E402  (the reproduction study's declared seeds)

CHAOS = os.path.join(ROOT, "results", "chaos", "dyck")
STUDY = os.path.join(ROOT, "results", "study", "dyck")
CHANGED = os.path.join(ROOT, "results", "against", "dyck", "window-w2")
OUT = os.path.join(ROOT, "results", "against")
BEFORE_COMMIT = "0407f9f"  # the last commit with the calibration on the reference alone (issue 68)
ROWS = ("fixed", "window", "rl")
DESIGNS = {"a": "held-out runs of the same seeds (1 run of each of 5 seeds vs the row's other 45)",
           "b": "fresh seeds, one run each (5 of round two's 16 vs the row's 50)",
           "c": "whole clusters (5 seeds x 5 runs vs the other 5 seeds' 25)"}
PER_ROW, DRAWS = 70, 100
FRESH = protocol.declared("window")  # round two's dyck seeds a row (results/study/dyck/ROW/seedK, one run each)
CHANGED_SEEDS, CHANGED_FLAGS = range(300, 310), "--schedule window --w 2"  # study/against.sh's 10 runs


def load(path: str) -> list:
    return [records.load_eval(d) for d in records.find_runs([path])]


def checked(path: str, slots: dict, extra_ok: bool = False) -> list:
    """The runs under path (in find_runs order), each the declared run of its slot, as study/chaos.py checks its
    own (perturbation.declared_run): slots {run folder: (seed, FLAGS, threads; None: not checked)}. A missing slot
    refuses (one line naming it), and so does a run outside the slots unless extra_ok; nothing is written."""
    runs = load(path) if os.path.isdir(path) else []
    have = {os.path.normpath(e["run_dir"]): e for e in runs}
    if missing := [d for d in slots if os.path.normpath(d) not in have]:
        raise ValueError(f"{os.path.relpath(path, ROOT)}: {len(missing)} of its {len(slots)} declared runs missing ("
                         + ", ".join(os.path.relpath(d, path) for d in missing) + "); study/against.py reads every one: "
                         "train them first")
    if not extra_ok and (extra := sorted(set(have) - {os.path.normpath(d) for d in slots})):
        raise ValueError(f"{os.path.relpath(path, ROOT)}: runs outside its declared slots ("
                         + ", ".join(os.path.relpath(d, path) for d in extra) + "); move them away")
    for d, (k, fl, threads) in slots.items():
        perturbation.declared_run(have[os.path.normpath(d)], d, k, fl, threads)
    return runs


def declared_runs() -> tuple:
    """(chaos, study, threads, changed): every run study/against.py reads, each slot checked (checked) before any
    work: the perturbation study's 50 runs a row, round two's seeds 0-15 a row, the 15 two-thread twins, the 10
    runs of window w = 2."""
    chaos = {row: checked(os.path.join(CHAOS, row), {os.path.join(CHAOS, row, f"seed{k}", f"r{r}"): (k, perturbation.flags(row, r), 1)
                                                    for k in perturbation.SEEDS for r in perturbation.REPS}) for row in ROWS}
    study = {row: checked(os.path.join(STUDY, row), {os.path.join(STUDY, row, f"seed{k}"): (k, perturbation.ROWS[row], None)
                                                    for k in FRESH}, extra_ok=True) for row in ROWS}
    threads = {row: checked(os.path.join(CHAOS, "threads2", row), {os.path.join(CHAOS, "threads2", row, f"seed{k}"):
                                                                   (k, perturbation.flags(row, 0), 2) for k in perturbation.SECONDARY})
               for row in ROWS}
    changed = checked(CHANGED, {os.path.join(CHANGED, f"seed{k}"): (k, CHANGED_FLAGS, 1) for k in CHANGED_SEEDS})
    return chaos, study, threads, changed


def rel(e: dict) -> str:
    return os.path.relpath(e["run_dir"], ROOT)


def by_seed(runs: list) -> dict:
    out = {}
    for e in sorted(runs, key=rel):
        out.setdefault(e["seed"], []).append(e)
    return out


def distinct_draws(rng, n: int, draw) -> list:
    """n draws (each a tuple of runs), no draw twice (fewer where fewer exist: 50 tries at a new one)."""
    out, seen = [], set()
    while len(out) < n:
        for _ in range(50):
            d = draw(rng)
            key = tuple(sorted(rel(e) for e in d[0]))
            if key not in seen:
                break
        else:
            return out
        seen.add(key)
        out.append(d)
    return out


def null_splits(chaos: dict, study: dict) -> list:
    """[(design, row, new, ref)]: the null splits of item 1, drawn from a fixed generator."""
    out = []
    for row in ROWS:
        cl, fresh = by_seed(chaos[row]), by_seed([e for e in study[row] if 0 <= e["seed"] < 16])
        seeds = sorted(cl)

        def same(rng):
            pick = {int(s): cl[s][int(rng.integers(len(cl[s])))] for s in rng.choice(seeds, 5, replace=False)}
            new = list(pick.values())
            return new, [e for e in chaos[row] if all(e is not x for x in new)]

        def fresh_seeds(rng):
            return [fresh[s][0] for s in rng.choice(sorted(fresh), 5, replace=False)], chaos[row]

        def whole(rng):
            out_seeds = set(rng.choice(seeds, 5, replace=False).tolist())
            return [e for e in chaos[row] if e["seed"] in out_seeds], [e for e in chaos[row] if e["seed"] not in out_seeds]

        for design, draw in (("a", same), ("b", fresh_seeds), ("c", whole)):
            rng = np.random.default_rng([ROWS.index(row), ord(design)])
            out += [(design, row, new, ref) for new, ref in distinct_draws(rng, PER_ROW, draw)]
    return out


def key_of(split: tuple) -> list:
    design, row, new, _ = split
    return [design, row, sorted(rel(e) for e in new)]


def rate(k: int, n: int) -> dict:
    lo, hi = stats.binomial_interval(k, n)
    return {"differs": k, "splits": n, "rate": k / n, "lo": lo, "hi": hi}


def fmt_rate(r: dict) -> str:
    return f"{r['differs']} of {r['splits']}: {100 * r['rate']:.1f}% [{100 * r['lo']:.1f}, {100 * r['hi']:.1f}]"


def old_compare():
    """lab/compare.py as it was at BEFORE_COMMIT (git show), loaded as a module of its own."""
    try:
        src = subprocess.run(["git", "-C", ROOT, "show", f"{BEFORE_COMMIT}:lab/compare.py"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise ValueError(f"--before needs the git history (git show {BEFORE_COMMIT}:lab/compare.py): {err}") from None
    spec = importlib.util.spec_from_loader("compare_before", loader=None)
    mod = importlib.util.module_from_spec(spec)
    exec(compile(src, f"{BEFORE_COMMIT}:lab/compare.py", "exec"), mod.__dict__)
    return mod


def judged(splits: list, against) -> list:
    out = []
    for s in splits:
        r = against(s[2], s[3])
        out.append({"split": key_of(s), "verdict": r["verdict"], "differ": r["differ"]})
    return out


def summary(verdicts: list) -> dict:
    out = {}
    for d in DESIGNS:
        vs = [v for v in verdicts if v["split"][0] == d]
        out[d] = {**rate(sum(v["verdict"] == "differs" for v in vs), len(vs)),
                  "rows": {row: rate(sum(v["verdict"] == "differs" for v in vs if v["split"][1] == row),
                                     sum(v["split"][1] == row for v in vs)) for row in ROWS}}
    k, n = sum(o["differs"] for o in out.values()), sum(o["splits"] for o in out.values())
    return {"designs": out, "all": rate(k, n)}


def fired(results: list) -> dict:
    out = {}
    for r in results:
        for t in r["differ"]:
            out[t] = out.get(t, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def power(chaos: dict, study: dict, changed: list) -> list:
    """Item 2: [{change, runs, design, draws, ...rate, fired}]."""
    fresh, win = by_seed([e for e in study["window"] if 0 <= e["seed"] < 16]), by_seed(chaos["window"])
    w2 = by_seed(changed)
    cases = []
    for k in (5, 10):
        cases.append(("window against fixed", k, "fresh seeds (round two's 16, one run each)", chaos["fixed"],
                      lambda rng, k=k: ([fresh[s][0] for s in rng.choice(sorted(fresh), k, replace=False)], None)))
        cases.append(("window against fixed", k, "the reference's seeds (one window run of each)", chaos["fixed"],
                      lambda rng, k=k: ([win[s][int(rng.integers(len(win[s])))] for s in rng.choice(sorted(win), k, replace=False)], None)))
    if len(w2) >= 10:
        cases.append(("window w = 2 against w = 5", 5, "fresh seeds (5 of the 10 w = 2 runs)", chaos["window"],
                      lambda rng: ([w2[s][0] for s in rng.choice(sorted(w2), 5, replace=False)], None)))
    out = []
    for i, (change, k, design, ref, draw) in enumerate(cases):
        draws = distinct_draws(np.random.default_rng([7, i]), DRAWS, draw)
        results = [compare.against(new, ref) for new, _ in draws]
        out.append({"change": change, "runs": k, "design": design, "fired": fired(results),
                    **rate(sum(r["verdict"] == "differs" for r in results), len(results))})
    return out


def flip_split(chaos: dict) -> list:
    """Item 4 of issue 68: per row, seed by seed, the plain run's flip rate (r 0) minus the mean of its four nudged
    runs (r 1-4, --perturb 1e-6), the exact within-seed sign-flip p (uncorrected) and how many seeds lean each way."""
    out = []
    for row in ROWS:
        cl = by_seed(chaos[row])
        d = np.array([[e["metrics"]["flip_rate"] for e in cl[s] if rel(e).endswith("r0")][0]
                      - np.mean([e["metrics"]["flip_rate"] for e in cl[s] if not rel(e).endswith("r0")]) for s in sorted(cl)])
        plain = np.mean([e["metrics"]["flip_rate"] for e in chaos[row] if rel(e).endswith("r0")])
        nudged = np.mean([e["metrics"]["flip_rate"] for e in chaos[row] if not rel(e).endswith("r0")])
        out.append({"row": row, "seeds": len(d), "plain": float(plain), "nudged": float(nudged),
                    "lower": int((d < 0).sum()), "p": stats.sign_flip(d)})
    return out


def six(chaos: dict, threads: dict, changed: list) -> list:
    window = chaos["window"]
    cases = [(f"{row}: 5 two-thread runs against the row's 50 one-thread runs", threads[row], chaos[row], "consistent")
             for row in ROWS]
    cases.append(("window: layer r 0 (plain) against layers r 1-4 (nudged)", [e for e in window if e["run_dir"].endswith("r0")],
                  [e for e in window if not e["run_dir"].endswith("r0")], "consistent"))
    cases.append(("the window ensemble against the fixed one", window, chaos["fixed"], "differs"))
    if len({e["seed"] for e in changed}) >= 2:
        cases.append((f"window w = 2 ({len(changed)} fresh runs) against the w = 5 ensemble", changed, window, "differs"))
    out = []
    for name, new, ref, expected in cases:
        r = compare.against(new, ref)
        out.append({"case": name, "expected": expected, "verdict": r["verdict"], "differ": r["differ"],
                    "new": r["new"], "ref": r["ref"], "p": r["p"], "adjusted": r["adjusted"]})
    return out


def main(argv) -> None:
    if argv not in ([], ["--before"]):
        raise ValueError(f"unknown arguments {' '.join(argv)} (study/against.py takes none, or --before)")
    chaos, study, threads, changed = declared_runs()  # every slot checked before any work or write
    splits = null_splits(chaos, study)
    before_path = os.path.join(OUT, "before.json")
    if argv == ["--before"]:
        old = old_compare()
        t0 = time.time()
        verdicts = judged(splits, old.against)
        write_json(before_path, {"command": "python study/against.py --before",
                                 "calibration": f"git show {BEFORE_COMMIT}:lab/compare.py (against(), its defaults)",
                                 "seconds_per_call": (time.time() - t0) / len(splits), "verdicts": verdicts,
                                 **summary(verdicts)})
        print(f"wrote {before_path}: " + "; ".join(f"({d}) {fmt_rate(o)}" for d, o in summary(verdicts)["designs"].items()))
        return
    before = read_json(before_path) if os.path.exists(before_path) else None
    if before is not None and [v["split"] for v in before["verdicts"]] != [key_of(s) for s in splits]:
        raise ValueError(f"{before_path} judged other null splits than these: run python study/against.py --before")
    t0 = time.time()
    verdicts = judged(splits, compare.against)
    per_call = (time.time() - t0) / len(splits)
    after = summary(verdicts)
    pw, rows, flips = power(chaos, study, changed), six(chaos, threads, changed), flip_split(chaos)
    lines = ["False alarms: null splits of the committed ensembles, the same method on both sides (fixed, window and rl "
             f"alike, {PER_ROW} splits of each), each judged as `evaluate.py NEW --against REF` judges it:", "",
             "| design | null splits | differs before (old calibration) | differs now | now, by row: fixed / window / rl |",
             "|---|---|---|---|---|"]
    for d, text in DESIGNS.items():
        b = fmt_rate(before["designs"][d]) if before else "(not recorded)"
        a = after["designs"][d]
        lines.append(f"| ({d}) {text} | {a['splits']} | {b} | {fmt_rate(a)} | "
                     + " / ".join(f"{r['differs']}" for r in a["rows"].values()) + f" of {PER_ROW} each |")
    lines.append(f"| all three | {after['all']['splits']} | {fmt_rate(before['all']) if before else '-'} | "
                 f"{fmt_rate(after['all'])} | |")
    lines += ["", f"Rates with their Clopper-Pearson 95% intervals. The splits reuse the same runs ({sum(map(len, chaos.values()))} and "
              f"{sum(sum(e['seed'] in FRESH for e in v) for v in study.values())}), so they "
              "are not independent draws: these intervals understate the uncertainty. Before: the calibration on the "
              f"reference alone (`python study/against.py --before`, git show {BEFORE_COMMIT}:lab/compare.py; results/"
              "against/before.json)." if before else "", "",
              "Power: fresh draws of a changed method (never the set under test resampled), each judged by the command:", "",
              "| change | new runs | drawn from | draws | differs | tests that fired (how often) |", "|---|---|---|---|---|---|"]
    for p in pw:
        lines.append(f"| {p['change']} | {p['runs']} | {p['design']} | {p['splits']} | {fmt_rate(p)} | "
                     + (", ".join(f"{t} {n}" for t, n in p["fired"].items()) or "-") + " |")
    lines += ["", f"With only {len(changed)} runs of w = 2 there is one set of {len(changed)} (the last row below): one verdict, not a power; "
              "the power at 10 runs for that change would need more w = 2 runs.", "",
              "Six sets of new runs:", "",
              "| new runs against the reference | expected | verdict | tests that differ |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} ({r['new']} vs {r['ref']}) | {r['expected']} | **{r['verdict']}** | "
                     f"{', '.join(r['differ']) or '-'} |")
    lines += ["", "The plain run against its nudged replicates, flip rate (item 4 of issue 68; the test chosen after the look at "
              "rl, so exploratory): per seed, r 0's flip rate minus the mean of r 1-4's, exact sign-flip p over the 10 "
              "seeds, uncorrected:", "", "| row | plain r 0 (mean) | nudged r 1-4 (mean) | seeds where r 0 flips less | p |",
              "|---|---|---|---|---|"]
    lines += [f"| {f['row']} | {f['plain']:.5f} | {f['nudged']:.5f} | {f['lower']} of {f['seeds']} | {f['p']:.2g} |"
              for f in flips]
    lines += ["", "What `--perturb` touches (config.perturb_): every parameter of the transformer and, for rl, of the "
              "hazard head, multiplied by (1 + 1e-6 N(0, 1)) from a generator of its own; parameters initialised to zero "
              "(the Linear and LayerNorm biases) stay zero, and no data, depth or torch stream moves "
              "(tests/test_perturb.py). So r 0 and r 1-4 differ only in their initial "
              "weights, and no code path treats r 0 differently: the lean is unexplained. Every row leans the same way, "
              "rl the most; until more seeds settle it, a nudged replicate stands in for a plain run on the accuracies "
              "(no difference found) but not for certain on flip rate."]
    lines += ["", f"Regenerated by `python study/against.py` (results/against/against.json; {per_call * 1000:.0f} ms a "
              "verdict here, one core)."]
    notebook = os.path.join(ROOT, "results", "README.md")
    write_set({os.path.join(OUT, "against.json"): {"false_alarms": after, "seconds_per_call": per_call, "verdicts": verdicts,
                                                   "power": pw, "cases": rows, "flip_split": flips},
               notebook: tables.spliced(notebook, "against", lines)})  # the record and its prose together, or neither
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(run(main, "study/against.py", sys.argv[1:]))
