"""
The scale ladder's tables, tests and plots (results/README.md, "The scale ladder"), regenerated from the
committed JSON: rung r1 is the first round of the study (results/study/TASK/ROW, seeds 0-7), the higher
rungs are results/ladder/TASK/RUNG/ROW (written by study/ladder.sh).

    python study/ladder.py        # deterministic: the same JSON gives the same bytes

Declared before the ladder's runs (the protocol of study/study.py): 8 seeds a row (the GPU rung: 16, of
which the first 8 enter the tests, as at every rung); a seed converged at >= 99% in-distribution exact
match; primary metric as the study's (dyck: the hard subset); at every rung of RUNGS the paired spread
tests of window against fixed and against matched.

Amended 2026-12-02, with 4 of the 144 CPU runs in (copy r2 seeds 0-1) and no dyck run beyond r1: with 8
pairs the exact permutation test cannot give p below 2 / 2^8 = 0.0078, so the family first declared (the
10 tests of a task, Holm) could never reach 0.05 (10 x 0.0078 = 0.078): a test that cannot fail. The ladder
is therefore a *screen*, and its verdicts are confirmed on fresh seeds in part C:
- screen: per rung one family, the 2 tests above, Holm-adjusted (attainable: 2 x 0.0078 = 0.016);
- growth: per rung other than r1 one family, each row's Std against its reference rung (r1; rE against r2:
  does EMA alone change it?), two-sided, the same paired test, Holm over its 3 tests (3 x 0.0078 = 0.023);
- across the 4-5 rungs a false "shows" somewhere has a chance up to 1 - 0.95^5 = 23%, hence part C: once r2,
  rE and r3 are complete, the main table is rerun (16 seeds a row) at the complete rung where the screen
  shows the failure mode with the largest deterministic Std, on seeds 8-23 (fresh: the rung was chosen on
  seeds 0-7's spreads); if no rung shows it, at the least-compute complete rung where every row converged on
  >= 90% of its seeds, on seeds 0-15 (the choice used convergence only).

Amendment 2, 2026-12-02, from run times only (copy's committed r2 runs: 94 / 43 / 29 minutes a run for
fixed / matched / window; dyck's r3 took 3.1x its r2 minutes; no copy run at r3 or rE yet): copy's r3 would
take about 70 lane-hours (35 hours of this machine) against the issue's 12 hours a task, so part C does not
wait for it on copy (GATE): copy's rung is chosen from r1, r2 and rE. Copy's r3 stays in the queue, last,
for spare CPU time or a GPU; copy's ladder on this CPU spans 3x in compute, dyck's 12x.

Amendment 3, 2026-12-02, from convergence only (copy's committed r2 runs: fixed seed 1 at 96.6% ID after
4500 steps, the other three >= 99%; no copy run at rE; no look at a spread): the rule above is silent when no
complete rung converges on >= 90% of every row (at 8 seeds that needs 8 of 8), and copy may be such a task.
Then part C runs at the complete rung whose worst row converged on the largest fraction of its seeds (of
equal fractions, the least compute), on seeds 0-15, and its choice says that the fraction is below the
protocol's 90%; the primary analysis stays on the pairs converged in both rows.

Amendment 4, 2026-12-02, from the machines only (4 of dyck's 24 rE runs in; no rE row complete, no rE test
read): "rE against r2" compares runs made on different CPU models (dyck's r2 on the earlier sittings' machine,
not recorded; rE on an AMD EPYC), and a CPU model alone moved one seed's result by ~34 points (rE fixed seed
0's raw weights: hard-subset Oracle 66.1 on the EPYC, its r2 twin 98.0), so it cannot tell the EMA's effect
from the machine's. An EMA run now also scores its raw weights (eval.json's raw_metrics; train.finish_run):
EMA training is the same run without the average (it touches no weight and draws no random number), so rE's
growth test is the EMA weights against the raw weights *of the same runs*: paired on one machine, by seed.
rE's raw rows are r2's command again on the machine rE ran on; the table shows them beside r2's. The four rE
runs committed before this (dyck fixed 0, matched 0, window 0 and 7) had no raw_metrics: they were resumed
(--resume) from their final checkpoints (step 2400, still on the machine that trained them), which evaluates
again, raw weights and then EMA; their EMA metrics came out identical to the first evaluation's (git history
keeps it), and config.json's segments record the resume.

Erratum, 2026-12-04 (a referee's recomputation from the committed eval.json; no decision changes): amendment 3's
"96.6% ID" is fixed seed 1's oracle_id; the convergence bar reads policy_id, 94.8% (also below 99%). Amendment
4's "98.0" is the r2 twin's hard-subset val-K OOD; its hard-subset Oracle OOD, the metric quoted beside it, is
100.0, so the ~34 points it quotes hold for the Oracle (100.0 against 66.1). The amendments stay as written.
"""

import collections
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):  # run as `python study/ladder.py`: the repository is the import root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from lab import tables  # noqa: E402
from lab.cli import no_arguments, run  # noqa: E402
from lab.files import atomic_write, write_json
from study import stats, study  # noqa: E402

LADDER = os.path.join(ROOT, "results", "ladder")
SEEDS = 8  # declared seeds a row
TASKS = ("copy", "dyck")
ROWS = ("fixed", "matched", "window")
# rung -> (what it trains, steps as a multiple of the recipe's, d_model); None: set by the run (the GPU rung's
# budget is chosen from its measured step rate). Compute is relative to r1: steps x width^2.
RUNGS = {"r1": ("the study's first round, seeds 0-7", 1, 64),
         "r2": ("3x the recipe's steps", 3, 64),
         "r3": ("twice the width, 3x the steps", 3, 128),
         "rE": ("r2 with a weight EMA (decay 0.999, TRM's), evaluated on the EMA weights", 3, 64),
         "rH": ("the paper's width (d_model 256) on an H200, 16 seeds stacked (study/cuda/rung.sh)", None, 256)}
RECIPE_STEPS = {"copy": 1500, "dyck": 800}  # config.RECIPES' max_iters (tests/test_study.py checks)
TESTS = (("window", "fixed"), ("window", "matched"))  # the paper: the window spreads less than each
# (rung, against), per row; "raw": the rung's own runs scored on their raw weights (amendment 4)
GROWTH = [(rung, "raw" if rung == "rE" else "r1") for rung in RUNGS if rung != "r1"]
CPU_RUNGS = ("r2", "rE", "r3")  # trained on this CPU (rH needs a GPU)
# part C's rung is chosen once these are complete; copy's r3 is out of the CPU's budget (amendment 2 below)
GATE = {"dyck": CPU_RUNGS, "copy": ("r2", "rE")}
OUTSIDE = {"r3": "beyond this CPU's budget (amendment 2)", "rH": "the H200's"}  # why a rung outside a gate may be missing
CONVERGE_FRACTION = 0.9
# the keys of results/round2/TASK/choice.json that part_c reads and round2.sh needs (study.read_choice checks them)
CHOICE_KEYS = ("rung", "first", "seeds", "why", "flags", "reuse", "chosen_from")


def rung_dir(task: str, rung: str, row: str) -> str:
    return os.path.join(ROOT, "results", "study", task, row) if rung == "r1" else os.path.join(LADDER, task, rung, row)


def compute(task: str, cfg: dict) -> float:
    """Training compute relative to the recipe's: steps x width^2."""
    return cfg["max_iters"] / RECIPE_STEPS[task] * (cfg["d_model"] / 64) ** 2


def load(task: str) -> dict:
    """{rung: {row: [eval dicts of seeds 0..SEEDS-1, by seed]}}; a row's runs must share their settings."""
    out = {}
    for rung in RUNGS:
        rows = {}
        for row in ROWS:
            if runs := study.load_row([rung_dir(task, rung, row)], range(SEEDS)):
                rows[row] = runs
        if rows:
            out[rung] = rows
    return out


def raw(rows: dict) -> dict:
    """An EMA rung's runs scored on their raw weights (eval.json's raw_metrics), {row: [eval dicts]}."""
    return {row: r for row, runs in rows.items() if (r := [{**e, "metrics": e["raw_metrics"]} for e in runs if "raw_metrics" in e])}


def adjust(tests: list) -> list:
    """Holm within each rung's family, over the tests that ran."""
    for rung in RUNGS:
        ran = [t for t in tests if t["rung"] == rung and t["result"] is not None and t["result"]["p"] is not None]
        ps = [t["result"]["p"] for t in ran]
        for t, p in zip(ran, stats.holm(ps)):
            t["p_holm"], t["family_ps"] = p, ps
    return tests


def family(task: str, rungs: dict) -> list[dict]:
    """The screen: (rung, a, b) with compare()'s result and the Holm-adjusted p within the rung."""
    key = study.primary(task)[0]
    tests = []
    for rung in RUNGS:
        for a, b in TESTS:
            rows = rungs.get(rung, {})
            r = study.compare(rows[a], rows[b], key, True) if a in rows and b in rows else None
            tests.append({"rung": rung, "a": a, "b": b, "result": r})
    return adjust(tests)


def growth(task: str, rungs: dict) -> list[dict]:
    """Growth: each row's Std at a rung against its reference rung (GROWTH), Holm-adjusted within the rung."""
    key = study.primary(task)[0]
    tests = []
    for row in ROWS:
        for rung, ref in GROWTH:
            a = rungs.get(rung, {}).get(row)
            b = (raw(rungs.get(rung, {})) if ref == "raw" else rungs.get(ref, {})).get(row)
            tests.append({"rung": rung, "a": rung, "b": ref, "row": row,
                          "result": study.compare(a, b, key, True) if a and b else None})
    return adjust(tests)


def complete(rows: dict) -> bool:
    return all(len(rows.get(row, [])) >= SEEDS for row in ROWS)


def steps_width(rows: dict) -> str:
    cfg = next(iter(rows.values()))[0]["config"]
    return f"{cfg['max_iters']} steps x d_model {cfg['d_model']}"


def screened(task: str, rungs: dict, tests: list) -> tuple:
    """(complete rungs by compute, the screen's tests that show the failure mode there, Std(rung, row))."""
    key = study.primary(task)[0]
    done = sorted((r for r in rungs if complete(rungs[r])), key=lambda r: compute(task, next(iter(rungs[r].values()))[0]["config"]))
    shows = [t for t in tests if t["rung"] in done and t.get("p_holm") is not None and t["p_holm"] < 0.05
             and t["result"]["da"] < t["result"]["db"]]
    std = lambda rung, row: statistics.stdev(v) if len(v := [e["metrics"][key] for e in rungs[rung][row] if study.converged(e)]) > 1 else float("nan")
    return done, shows, std


def answer(task: str, rungs: dict, tests: list, grown: list) -> list[str]:
    """The question's answer in words, from complete rungs only, and the rung part C runs at."""
    done, shows, std = screened(task, rungs, tests)
    runs = lambda r: sum(len(rungs.get(r, {}).get(row, [])) for row in ROWS)
    todo = [f"{r} ({runs(r)} of {len(ROWS) * SEEDS} runs)" for r in RUNGS
            if r not in done and r != "rH" and (r in GATE[task] or runs(r))]
    # the rungs the answer waits for are part C's gate; the others (copy's r3, rH) are named, not waited for
    skipped = [f"{r}, {why}, {'not complete' if runs(r) else 'not run'}"
               for r, why in OUTSIDE.items() if r not in done and r not in GATE[task]]
    head = ("**Answer so far:**" if any(r not in done for r in GATE[task]) else "**Answer:**" if not skipped
            else f"**Answer on the CPU rungs** ({'; '.join(skipped)}):")
    if shows:
        what = "; ".join(f"at {t['rung']} the window spreads less than {t['b']} (Std {t['result']['da']:.1f} vs "
                         f"{t['result']['db']:.1f}, Holm p {study.fmtp(t['p_holm'])})" for t in shows)
        lines = [f"{head} the screen shows the failure mode ({what}); part C confirms it on fresh seeds."]
    elif not done:
        lines = [f"{head} no rung is complete yet."]
    else:
        top = done[-1]
        lines = [f"{head} no complete rung up to {top} ({steps_width(rungs[top])}) shows it: no declared test "
                 "finds the window spreading less than a deterministic row at Holm p < 0.05 (8 seeds a row, per-rung family)."]
    for row in ("fixed", "matched"):
        path = " -> ".join(f"{std(r, row):.1f} ({r})" for r in done)
        g = [t for t in grown if t["row"] == row and t["a"] in done and t["b"] in done + ["raw"] and t.get("p_holm") is not None]
        sig = [f"{t['a']} vs {t['b']}: {'grows' if t['result']['da'] > t['result']['db'] else 'shrinks'} at Holm p {study.fmtp(t['p_holm'])}"
               for t in g if t["p_holm"] < 0.05]
        lines.append(f"{row}'s Std over converged seeds: {path}; " + ("; ".join(sig) if sig else
                     f"no change significant at Holm p < 0.05 ({len(g)} growth test{'s' * (len(g) != 1)} ran)") + ".")
    if todo:
        lines.append("Not complete yet: " + ", ".join(todo) + ".")
    lines.append(part_c(task, rungs, done, shows, std))
    return lines + [""]


def pick(task: str, rungs: dict, done: list, shows: list, std) -> tuple:
    """The declared rule for part C: (rung, first seed, why), or (None, None, why) while it cannot choose."""
    if any(r not in done for r in GATE[task]):
        return None, None, "not chosen until " + ", ".join(GATE[task]) + " are complete"
    if shows:
        rung = max({t["rung"] for t in shows}, key=lambda r: max(std(r, "fixed"), std(r, "matched")))
        return rung, SEEDS, "the screen shows the failure mode there, with the largest deterministic Std; seeds 8-23, fresh"
    worst = {r: min(sum(map(study.converged, rungs[r][row])) / len(rungs[r][row]) for row in ROWS) for r in done}
    ok = [r for r in done if worst[r] >= CONVERGE_FRACTION]
    if ok:
        return ok[0], 0, "no rung shows the failure mode; the least compute where every row converged on >= 90% of its seeds; seeds 0-15"
    best = max(done, key=worst.get)  # done is in order of compute: of equal rungs, the least compute (amendment 3)
    return best, 0, (f"no rung shows the failure mode and none converged on >= 90% of every row; the one whose worst row "
                     f"converged most ({worst[best]:.0%} of its seeds, below the protocol's 90%); seeds 0-15")


def part_c(task: str, rungs: dict, done: list, shows: list, std) -> str:
    """Part C's rung in words: the recorded choice once there is one (and today's pick if that differs)."""
    rung, _, why = pick(task, rungs, done, shows, std)
    now = f"Part C's rung: {rung} ({why})." if rung else f"Part C's rung (the main table again): {why}."
    c = study.read_choice(task, CHOICE_KEYS)
    if c is None:
        return now
    return (f"Part C's rung: {c['rung']} ({c['why']}; recorded in results/round2/{task}/choice.json, {c['chosen_from']})"
            + ("." if c["rung"] == rung else f"; the rule on today's data would pick {rung or 'none'}, the record stands."))


def record(task: str, rungs: dict, rung: str, first: int, why: str) -> str:
    """Write results/round2/TASK/choice.json once (the first time the rule picks a rung; never again):
    the rung, the flags its runs were trained with, the 16 declared seeds and the directories of the runs
    that are the same command (study/study.py reads a declared seed from there; round2.sh skips it)."""
    path = os.path.join(study.ROUND2, task, "choice.json")
    if os.path.lexists(path):
        return path
    cfg = rungs[rung]["fixed"][0]["config"]
    flags = f"--max_iters {cfg['max_iters']} --d_model {cfg['d_model']}" + (f" --ema {cfg['ema']:g}" if cfg.get("ema") else "")
    rows = study.MAIN if rung == "r1" else ROWS  # r1 is the first round, which has the rl row too
    reuse = {row: os.path.relpath(rung_dir(task, rung, row), ROOT) for row in rows}
    runs = sum(len(v) for rs in rungs.values() for v in rs.values())
    choice = {"task": task, "rung": rung, "first": first, "seeds": 16, "why": why, "flags": flags, "reuse": reuse,
              "chosen_from": f"{runs} committed ladder runs of rungs {', '.join(rungs)}"}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json(path, choice)  # atomically: a crash leaves no half-written record (which would then stand)
    return path


def budget(task: str, rungs: dict, others: dict = None) -> list[str]:
    """What the CPU rungs have left, in lane-hours (one run on one core): the median minutes of a row's
    committed runs (train + eval), or, for a row with none yet, r2's median times the rung's ratio to r2 as
    measured on another task's same row (others: {task: rungs}), else times the rung's compute."""
    def median_min(runs):
        return statistics.median((e["train_time_s"] + e["eval_time_s"]) / 60 for e in runs)
    rows, total = [], 0.0
    for rung in CPU_RUNGS:
        for row in ROWS:
            runs = rungs.get(rung, {}).get(row, [])
            base = rungs.get("r2", {}).get(row, [])
            seen = [(t, o[rung][row], o["r2"][row]) for t, o in (others or {}).items()
                    if o.get(rung, {}).get(row) and o.get("r2", {}).get(row)]
            if runs:
                m, how = median_min(runs), "measured"
            elif base and seen:
                t, a, b = seen[0]
                m, how = median_min(base) * median_min(a) / median_min(b), f"r2 x {t}'s {rung} / r2"
            elif base:
                m, how = median_min(base) * RUNGS[rung][1] / RUNGS["r2"][1] * (RUNGS[rung][2] / 64) ** 2, "r2 x compute"
            else:
                continue
            left = SEEDS - len(runs)
            total += left * m / 60
            rows.append(f"| {rung} | {row} | {len(runs)} / {SEEDS} | {m:.0f} ({how}) | {left * m / 60:.1f} |")
    return ["| rung | row | runs done | minutes a run | lane-hours left |", "|---|---|---|---|---|", *rows, "",
            f"Left on the CPU rungs of {task}: {total:.0f} lane-hours, about {total / 2:.0f} hours of this 2-core "
            "machine with two lanes. Minutes a run: the median of the committed runs' train + eval time, under "
            "whatever else ran beside them then; for a row with no run yet, r2's scaled by the rung's ratio to r2 "
            "measured on the other task's same row, or else by steps x width^2 (an estimate).", ""]


def machines(rungs: dict) -> list[str]:
    """The CPU models the ladder's runs finished on: lanes run in many sittings, not always on one model, and
    another model can round a seed's run differently (README, "Seeds and reproducibility")."""
    seen = collections.Counter(e["env"].get("cpu", "not recorded (runs before 2026-12-02)")
                               for rung, rows in rungs.items() if rung != "r1" for runs in rows.values() for e in runs)
    if not seen:
        return []
    cpus = lambda runs: {e["seed"]: c for e in runs if (c := e["env"].get("cpu"))}
    split = []  # a screen pair whose two runs both recorded their CPU model, and not the same one
    for rung, rows in rungs.items():
        for a, b in TESTS if rung != "r1" else ():
            ca, cb = cpus(rows.get(a, [])), cpus(rows.get(b, []))
            split += [f"{rung} {a}/{b} seed {k}" for k in sorted(ca.keys() & cb.keys()) if ca[k] != cb[k]]
    return ["CPU models the rungs' runs finished on (eval.json's env): "
            + ", ".join(f"{cpu}: {n}" for cpu, n in sorted(seen.items())) + ". Screen pairs whose two runs finished on "
            "different recorded CPU models (still paired by seed; the machine adds noise to their difference): "
            + (", ".join(split) if split else "none") + ".", ""]


def verdict(t: dict, higher=False) -> str:
    """A declared test's words (higher=False: the paper's direction, a spreads less; None: two-sided)."""
    r = t["result"]
    if r is None:
        return "not run yet"
    if r["p"] is None:
        return f"too few converged pairs ({r['n']} of {r['pairs']})"
    short = r["pairs"] < SEEDS
    floor = study.undecidable(r, t["family_ps"]) if t["p_holm"] >= 0.05 else ""
    return study.word(r, higher, True, t["p_holm"], short) + floor + (f"; interim look, {r['pairs']} of {SEEDS} pairs" if short else "")


def table(task: str, rungs: dict, others: dict = None) -> list[str]:
    key, name, vkey, vname = study.primary(task)
    lines = [f"### {task}", "", f"Primary metric: {name} (mean ± Std over the converged seeds; min-max over them). "
             + "; ".join(f"{r}: {RUNGS[r][0]}" for r in RUNGS) + ".", "",
             f"| rung | compute | row | converged / seeds | {name} | min-max | {vname} | minutes a run |",
             "|---|---|---|---|---|---|---|---|"]
    shown = []
    for rung, rows in rungs.items():  # and after an EMA rung, its runs' raw weights
        shown += [(rung, rows)] + ([(f"{rung} raw", r)] if (r := raw(rows)) else [])
    for rung, rows in shown:
        for row, runs in rows.items():
            conv = [e for e in runs if study.converged(e)]
            v = [e["metrics"][key] for e in conv]
            cfg = runs[0]["config"]
            lines.append(f"| {rung} (d_model {cfg['d_model']}, {cfg['max_iters']} steps) | "
                         f"{compute(task, cfg):g}x | {row} | {len(conv)} / {len(runs)} | {study.ms(v)} | "
                         + (f"{min(v):.1f}-{max(v):.1f}" if v else "-") + f" | {study.ms([e['metrics'][vkey] for e in conv])} | "
                         f"{study.minutes(runs)} |")
    cut = study.shortcut_of(next(iter(next(iter(rungs.values())).values())), key)
    lines += ["", f"The best shortcut scores {cut:.1f}% on the same samples.", "",
              "| rung | test (the paper: the first spreads less) | converged pairs | paired p | Holm p | unpaired p | verdict |",
              "|---|---|---|---|---|---|---|"]
    tests, grown = family(task, rungs), growth(task, rungs)
    for t in tests:
        lines.append(test_row(t, f"{t['a']} vs {t['b']}", verdict(t)))
    lines += ["", "The screen: Holm adjusts within each rung (2 tests); paired p: the permutation test of Std on the seeds "
              "converged in both rows; unpaired: Brown-Forsythe. Why per rung and what confirms it: study/ladder.py.", "",
              "Growth: a row's Std at a rung against its reference rung (r1; rE: against the raw weights of the same runs, "
              "amendment 4), two-sided, Holm within the rung (3 tests). \"rE raw\": rE's runs scored on their raw weights, "
              "r2's command again on the machine rE ran on.", "",
              "| rung | row: Std at this rung vs the reference | converged pairs | paired p | Holm p | unpaired p | verdict |",
              "|---|---|---|---|---|---|---|"]
    for t in grown:
        if t["result"] is not None:
            lines.append(test_row(t, f"{t['row']}: {t['a']} vs {t['b']}", verdict(t, None)))
    return (lines + [""] + answer(task, rungs, tests, grown) + [f"![{task}: the ladder, per seed](ladder/{task}.png)", ""]
            + budget(task, rungs, others) + machines(rungs))


def test_row(t: dict, name: str, word: str) -> str:
    r = t["result"] or {}
    return (f"| {t['rung']} | {name} | " + (f"{r['n']} of {r['pairs']}" if r else "-") +
            f" | {study.fmtp(r.get('p'))} | {study.fmtp(t.get('p_holm'))} | {study.fmtp(r.get('p_unpaired'))} | {word} |")


def plot(plt, task: str, rungs: dict) -> None:
    """Left: per-seed strip plot per rung and row (hollow: not converged). Right: Std against compute."""
    key, name = study.primary(task)[:2]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [2, 1]})
    colors = dict(zip(ROWS, ("tab:red", "tab:orange", "tab:blue")))
    for i, (rung, rows) in enumerate(rungs.items()):
        for j, row in enumerate(ROWS):
            for k, e in enumerate(rows.get(row, [])):
                ok = study.converged(e)
                ax.scatter(4 * i + j + 0.06 * (k - 3.5), e["metrics"][key], s=14, color=colors[row],
                           facecolors=colors[row] if ok else "none", label=row if i == 0 and k == 0 else None)
    cx = {r: compute(task, next(iter(rows.values()))[0]["config"]) for r, rows in rungs.items()}
    ax.set_xticks([4 * i + 1 for i in range(len(rungs))], [f"{r} ({cx[r]:g}x)" for r in rungs])
    ax.set(ylabel=f"{name} (%)", title=f"{task}: one dot per seed (hollow: not converged)", ylim=(-2, 102))
    ax.legend(fontsize=8, loc="lower left")
    for row in ROWS:
        pts = [(cx[r], statistics.stdev(v)) for r, rows in rungs.items() if r != "rE" and len(rows.get(row, [])) >= SEEDS
               if len(v := [e["metrics"][key] for e in rows[row] if study.converged(e)]) > 1]
        if pts:
            bx.plot(*zip(*pts), "o-", color=colors[row], label=row)
    bx.set(xscale="log", xlabel="training compute (x rung r1)", ylabel="Std over converged seeds",
           title=f"spread vs compute\n(rows with all {SEEDS} seeds; no EMA)")
    ticks = sorted(set(cx.values()))
    bx.set_xticks(ticks, [f"{c:g}x" for c in ticks])
    bx.minorticks_off()
    bx.legend(fontsize=8)
    fig.tight_layout()
    atomic_write(os.path.join(LADDER, f"{task}.png"), lambda f: fig.savefig(f, format="png", dpi=110, metadata={"Software": None}))
    plt.close(fig)


def main() -> None:
    # every run and every recorded choice is read (and checked) before anything is written: a damaged file
    # stops the script with one line, the tables, plots and records as they were
    every = {task: load(task) for task in TASKS}
    for task in TASKS:
        study.read_choice(task, CHOICE_KEYS)
    plt = study.pyplot()
    if plt is None:
        print("study/ladder.py: matplotlib is not installed; tables only, the plots are skipped", file=sys.stderr)
    body = []
    for task, rungs in every.items():
        if rungs:
            body += table(task, rungs, {t: r for t, r in every.items() if t != task})
            rung, first, why = pick(task, rungs, *screened(task, rungs, family(task, rungs)))
            if rung:
                print(f"part C's rung for {task}: {rung}, recorded in {record(task, rungs, rung, first, why)}")
            if plt:
                os.makedirs(LADDER, exist_ok=True)
                plot(plt, task, rungs)
    tables.splice(study.README, "ladder", body or ["(no ladder runs yet)"])
    print(f"wrote the ladder section of {study.README}")


if __name__ == "__main__":  # a damaged or inconsistent input (ValueError): one line naming it, exit 2
    no_arguments("study/ladder.py")
    sys.exit(run(lambda argv: main(), "study/ladder.py"))
