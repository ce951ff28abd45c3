"""
The scale ladder's tables, tests and plots (results/README.md, "The scale ladder"), regenerated from the
committed JSON: rung r1 is the first round of the study (results/study/TASK/ROW, seeds 0-7), the higher
rungs are results/ladder/TASK/RUNG/ROW (written by results/ladder.sh).

    python results/ladder.py        # deterministic: the same JSON gives the same bytes

Declared before the ladder's runs (the protocol of results/study.py): 8 seeds a row (the GPU rung: 16, of
which the first 8 enter the tests, as at every rung); a seed converged at >= 99% in-distribution exact
match; primary metric as the study's (dyck: the hard subset); per task one family of 2 x 5 paired spread
tests, window against fixed and against matched at every rung of RUNGS, Holm-adjusted within the family.
"""

import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "results"))

import evaluate  # noqa: E402
import stats  # noqa: E402
import study  # noqa: E402
import tables  # noqa: E402

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
         "rH": ("the paper's width (d_model 256) on an H200, 16 seeds stacked (results/cuda/rung.sh)", None, 256)}
RECIPE_STEPS = {"copy": 1500, "dyck": 800}  # config.RECIPES' max_iters (tests/test_results.py checks)
TESTS = (("window", "fixed"), ("window", "matched"))  # the paper: the window spreads less than each


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
            d = rung_dir(task, rung, row)
            runs = [e for e in (evaluate.load_eval(r) for r in evaluate.find_runs([d])) if e["seed"] < SEEDS] if os.path.isdir(d) else []
            if runs:
                if len(tables.group_runs(runs)) != 1:
                    raise ValueError(f"{d}: runs with different settings")
                rows[row] = study.with_hard_shortcut(sorted(runs, key=lambda e: e["seed"]))
        if rows:
            out[rung] = rows
    return out


def family(task: str, rungs: dict) -> list[dict]:
    """Every declared test of a task: (rung, a, b) with compare()'s result and the Holm-adjusted p."""
    key = study.primary(task)[0]
    tests = []
    for rung in RUNGS:
        for a, b in TESTS:
            rows = rungs.get(rung, {})
            r = study.compare(rows[a], rows[b], key, True) if a in rows and b in rows else None
            tests.append({"rung": rung, "a": a, "b": b, "result": r})
    ran = [t for t in tests if t["result"] is not None and t["result"]["p"] is not None]
    for t, p in zip(ran, stats.holm([t["result"]["p"] for t in ran])):
        t["p_holm"] = p
    return tests


def verdict(t: dict) -> str:
    r = t["result"]
    if r is None:
        return "not run yet"
    if r["p"] is None:
        return f"too few converged pairs ({r['n']} of {r['pairs']})"
    short = r["pairs"] < SEEDS
    return study.word(r, False, True, t["p_holm"], short) + (f"; interim look, {r['pairs']} of {SEEDS} pairs" if short else "")


def table(task: str, rungs: dict) -> list[str]:
    key, name, vkey, vname = study.primary(task)
    lines = [f"### {task}", "", f"Primary metric: {name} (mean ± Std over the converged seeds; min-max over them). "
             + "; ".join(f"{r}: {RUNGS[r][0]}" for r in RUNGS) + ".", "",
             f"| rung | compute | row | converged / seeds | {name} | min-max | {vname} | minutes a run |",
             "|---|---|---|---|---|---|---|---|"]
    for rung, rows in rungs.items():
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
    for t in family(task, rungs):
        r = t["result"] or {}
        lines.append(f"| {t['rung']} | {t['a']} vs {t['b']} | " + (f"{r['n']} of {r['pairs']}" if r else "-") +
                     f" | {study.fmtp(r.get('p'))} | {study.fmtp(t.get('p_holm'))} | {study.fmtp(r.get('p_unpaired'))} | {verdict(t)} |")
    return lines + ["", f"Holm adjusts over the {2 * len(RUNGS)} declared tests of this task (2 a rung); paired p: "
                    "the permutation test of Std on the seeds converged in both rows; unpaired: Brown-Forsythe.", "",
                    f"![{task}: the ladder, per seed](ladder/{task}.png)", ""]


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
        pts = [(cx[r], statistics.stdev(v)) for r, rows in rungs.items() if r != "rE"
               if len(v := [e["metrics"][key] for e in rows.get(row, []) if study.converged(e)]) > 1]
        if pts:
            bx.plot(*zip(*pts), "o-", color=colors[row], label=row)
    bx.set(xscale="log", xlabel="training compute (x rung r1)", ylabel="Std over converged seeds",
           title="spread vs compute (no EMA)")
    bx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(LADDER, f"{task}.png"), dpi=110, metadata={"Software": None})
    plt.close(fig)


def main() -> None:
    plt = study.pyplot()
    if plt is None:
        print("results/ladder.py: matplotlib is not installed; tables only, the plots are skipped", file=sys.stderr)
    body = []
    for task in TASKS:
        rungs = load(task)
        if rungs:
            body += table(task, rungs)
            if plt:
                os.makedirs(LADDER, exist_ok=True)
                plot(plt, task, rungs)
    tables.splice(study.README, "ladder", body or ["(no ladder runs yet)"])
    print(f"wrote the ladder section of {study.README}")


if __name__ == "__main__":
    main()
