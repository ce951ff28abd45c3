"""
Seed or chaos? The perturbation study (results/README.md, "Seed or chaos?"; results/chaos/chaos.json), from the
committed runs of study/chaos.sh.

    python study/chaos.py           # the tables, verdicts and picture from the committed runs (deterministic)
    python study/chaos.py --queue   # the declared queue, one run a line: OUT_DIR TASK SEED FLAGS (chaos.sh)

DECLARATION, 2026-12-04, committed before the first run (not edited after it; amendments are appended below,
dated, with their reason).

Question. At laptop scale, how much of the spread of a row's OOD accuracy is the seed's (initial weights and
batches) and how much is numerical chaos (the same seed, nudged by rounding-sized noise)? And does the
window or RL-Halting schedule change either part against fixed depth?

Command. The dyck CPU recipe: `python train.py --task dyck --seed k --seeds 1 --threads 1 --out_dir DIR FLAGS`
(800 steps, d_model 64, T_max 20, the defaults), one commit for every run (a frozen worktree), two lanes
(study/lanes.sh, one thread each). Every run records its CPU model (env.cpu). If the runs span CPU models,
they continue (a CPU model is one more numerical perturbation), the table shows the CPU per run, and the
determinism control is repeated on each CPU model used.

Rows (FLAGS): fixed `--schedule fixed` (c = T_max = 20); window `--schedule window --w 5`; rl `--schedule rl
--lambda_ent 0.001`. Seeds 100-109 (fresh: no earlier run used them). Replicates: r = 0 unperturbed, r = 1..4
with `--perturb 1e-6 --perturb_seed r`. 150 runs in results/chaos/dyck/ROW/seedK/rR, queued replicate first,
then seed, then row, so a stop leaves complete replicate layers.

Controls. On each CPU model used, (fixed, 100, r 0) and (window, 100, r 0) are run twice more, in
results/chaos/dyck/control/CPU/ROW/{1,2} (CPU: the model name, lower case, non-alphanumerics as -), queued
after the first replicate layer. Deterministic means: their metrics.jsonl identical line by line once the two
wall-clock fields (ms_per_step, elapsed_s) are removed, and their eval.json metrics identical. If not, r = 0
counts as one more perturbation, and the results say so.

Secondary (last, dropped if time runs out): seeds 100-104 x the 3 rows unperturbed with `--threads 2`, one
process with nothing else running (`bash study/chaos.sh --threads2`), in results/chaos/dyck/threads2/ROW/seedK.
Descriptive only: the mean |y(2 threads) - y(r 0)| beside the mean |y(r) - y(r 0)|, r = 1..4, on the same seeds
and rows (is weight noise the same chaos as a thread count?).

Metric. Hard-subset Oracle OOD (eval.json metrics.oracle_hard_ood; dyck's prefixes that go below zero), with
hard-subset val-K OOD (metrics.val_k_hard_ood) beside it and the hard subset's best shortcut. A run counts if
it converged: metrics.policy_id >= 99; an unconverged run is excluded (per run, not per seed). Nothing is added
after a look.

Analysis per row (stats.anova_icc): y(s, r) = mu + a_s + e_sr, a one-way random-effects ANOVA over the seeds'
converged replicates; seed variance (MSB - MSW) / n0 and chaos variance MSW; ICC(1) with its F-based 95%
interval. A row is "chaos-driven" if the ICC's upper bound < 0.5, "seed-driven" if its lower bound > 0.5, else
"undecided".

Family (Holm, alpha 0.05, two-sided), 4 tests: chaos variance (MSW) window vs fixed, rl vs fixed; total variance
over all converged runs window vs fixed, rl vs fixed. Statistic: the log variance ratio; p exact from a seed-level
permutation (stats.block_permutation: swap the two rows' replicate blocks within a seed, 2^10 patterns).
"Reduces" / "increases" only at Holm p < 0.05; otherwise "not detected", with the 95% interval of the Std ratio
(stats.block_interval: a percentile bootstrap over seeds, 10,000 resamples, each seed's two blocks together).

Budget and fallback. About 3-5 minutes a run on one thread (rl longer), ~10 lane-hours. If the runs outlast the
time, every finished run is committed (never ckpt.pt) and the study continues later from the same commit; the
declared fallback is to analyse the complete replicate layers only (r = 0..R, every row and seed present).

Output: per row, runs converged, mean, total Std, within-seed Std, between-seed Std, ICC [95%]; the family's
verdicts; a picture (results/chaos/chaos.png): per seed its five replicates side by side, one panel per row.
"""

import math
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):  # run as `python study/chaos.py`: the repository is the import root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import train  # noqa: E402  (its parse_args: the declared command of a slot, recipe included)
import config
from lab import records, rundir, tables  # noqa: E402
from study import stats  # noqa: E402
from lab.cli import run  # noqa: E402
from lab.files import atomic_write, parse_json, write_json
from metrics import fmt  # noqa: E402

CHAOS = os.path.join(ROOT, "results", "chaos")
TASK = "dyck"
ROWS = {"fixed": "--schedule fixed", "window": "--schedule window --w 5", "rl": "--schedule rl --lambda_ent 0.001"}
SEEDS = range(100, 110)
REPS = range(5)  # r = 0 unperturbed, r = 1..4 perturbed
EPS = 1e-6
CONTROL = (("fixed", 100), ("window", 100))
SECONDARY = range(100, 105)
CONVERGED = 99.0
KEY, VKEY, NAME = "oracle_hard_ood", "val_k_hard_ood", "hard-subset Oracle OOD"
FAMILY = (("chaos", "window"), ("chaos", "rl"), ("total", "window"), ("total", "rl"))  # each against fixed
TIMING = ("ms_per_step", "elapsed_s")  # wall-clock fields of metrics.jsonl: the only ones a twin may change


def cpu_slug(cpu: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", cpu.lower()).strip("-") or "unknown"


def flags(row: str, r: int) -> str:
    return ROWS[row] + (f" --perturb {EPS:g} --perturb_seed {r}" if r else "")


def run_dir(row: str, k: int, r: int, rel: bool = False) -> str:
    d = os.path.join("results", "chaos", TASK, row, f"seed{k}", f"r{r}")
    return d if rel else os.path.join(ROOT, d)


def queue(cpu: str) -> list[str]:
    """The declared queue: replicate layer, then seed, then row; the controls of this CPU model after layer 0."""
    lines = []
    for r in REPS:
        for k in SEEDS:
            for row in ROWS:
                lines.append(f"{run_dir(row, k, r, rel=True)} {TASK} {k} {flags(row, r)}")
        if r == 0:
            for i in (1, 2):
                for row, k in CONTROL:
                    lines.append(f"results/chaos/{TASK}/control/{cpu_slug(cpu)}/{row}/{i} {TASK} {k} {flags(row, 0)}")
    return lines


def queue_threads2() -> list[str]:
    return [f"results/chaos/{TASK}/threads2/{row}/seed{k} {TASK} {k} {flags(row, 0)}" for k in SECONDARY for row in ROWS]


# --- analysis --------------------------------------------------------------------------------------------

def load(d: str):
    return records.load_eval(d) if os.path.lexists(os.path.join(d, "eval.json")) else None


def slot(d: str, k: int, fl: str, threads: int = 1):
    """The run in a slot of the design (None while empty), checked: its recorded settings must be the declared
    command's (train.py's recipe for dyck, seed k, the slot's FLAGS, --threads), or the study would count a run
    of another command; one line naming the slot and the differing settings otherwise."""
    e = load(d)
    return None if e is None else declared_run(e, d, k, fl, threads)


def declared_run(e: dict, d: str, k: int, fl: str, threads: int = 1) -> dict:
    """e, the run read from slot d, if its recorded settings are the declared command's (train.py's recipe for
    dyck, seed k, FLAGS fl, --threads unless threads is None); one line naming the slot and the differing settings
    otherwise. The check of every slot a study script reads (slot; study/against.py)."""
    want = train.parse_args(["--task", TASK, "--seed", str(k), "--seeds", "1", "--out_dir", d] + fl.split()
                            + (["--threads", str(threads)] if threads is not None else []))
    diff = config.differences(e["config"], want)
    if threads is not None and e["config"].get("threads") != threads:
        diff.append(f"threads={e['config'].get('threads')!r} (declared {threads})")
    if diff:
        raise ValueError(f"{os.path.relpath(d, ROOT)}: not the declared run of its slot (seed {k}, {fl}): "
                         + ", ".join(x.replace("(now", "(declared") for x in diff) + "; move it away, or train the slot again")
    return e


def converged(e: dict) -> bool:
    return e["metrics"]["policy_id"] is not None and e["metrics"]["policy_id"] >= CONVERGED


def runs() -> dict:
    """{(row, seed, r): eval dict} of the finished runs of the declared design."""
    return {(row, k, r): e for row in ROWS for k in SEEDS for r in REPS if (e := slot(run_dir(row, k, r), k, flags(row, r)))}


def complete_layers(done: dict) -> int:
    """R + 1, where r = 0..R are complete in every row and seed (the declared fallback analyses these only)."""
    R = 0
    while R < len(REPS) and all((row, k, R) in done for row in ROWS for k in SEEDS):
        R += 1
    return R


def blocks(done: dict, row: str, layers: int, key: str = KEY) -> list[list[float]]:
    """Per seed, the converged replicates' metric (r < layers)."""
    return [[done[row, k, r]["metrics"][key] for r in range(layers) if (row, k, r) in done and converged(done[row, k, r])
             and done[row, k, r]["metrics"].get(key) is not None] for k in SEEDS]


def row_stats(bl: list[list[float]]) -> dict:
    y = [v for b in bl for v in b]
    a = stats.anova_icc(bl)
    icc = a["icc"]
    verdict = None if icc is None else ("chaos-driven" if a["hi"] < 0.5 else "seed-driven" if a["lo"] > 0.5 else "undecided")
    return {"runs": len(y), "mean": statistics.fmean(y) if y else None,
            "std_total": statistics.stdev(y) if len(y) > 1 else None,
            "std_within": math.sqrt(a["msw"]) if a["msw"] is not None else None,
            "std_between": math.sqrt(max(0.0, a["var_seed"])) if a.get("var_seed") is not None else None,
            "between_negative": a.get("var_seed") is not None and a["var_seed"] < 0,  # printed 0: seeds differ less than chance
            "icc": icc, "icc_lo": a["lo"], "icc_hi": a["hi"], "verdict": verdict, "anova": a}


def family(done: dict, layers: int) -> list[dict]:
    out = []
    for part, row in FAMILY:
        var = stats.within_var if part == "chaos" else stats.total_var
        a, b = blocks(done, row, layers), blocks(done, "fixed", layers)
        t = stats.block_permutation(a, b, var)
        out.append({"variance": part, "row": row, "against": "fixed", **t, **{f"ci_{k}": v for k, v in stats.block_interval(a, b, var).items()}})
    for t, adj in zip(out, stats.holm([t["p"] for t in out])):
        t["holm_p"] = adj
        t["verdict"] = ("reduces" if t["stat"] < 0 else "increases") if adj < 0.05 else "not detected"
    return out


def same_run(d1: str, d2: str) -> bool:
    """Two runs are the same: metrics.jsonl equal line by line without the wall-clock fields, eval metrics equal."""
    def lines(d):
        path = os.path.join(d, "metrics.jsonl")
        with open(path, encoding="utf-8") as f:
            try:
                recs = [parse_json(line) for line in f]
            except ValueError as err:
                raise ValueError(f"{path}: not a log ({err})") from None
        if not all(isinstance(r, dict) for r in recs):
            raise ValueError(f"{path}: not a log (a line that is not a JSON object)")
        return [{k: v for k, v in r.items() if k not in TIMING} for r in recs]
    return lines(d1) == lines(d2) and load(d1)["metrics"] == load(d2)["metrics"]


def controls() -> list[dict]:
    base = os.path.join(CHAOS, TASK, "control")
    out = []
    for slug in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        for row, k in CONTROL:
            d = [os.path.join(base, slug, row, str(i)) for i in (1, 2)]
            if not all(slot(x, k, flags(row, 0)) for x in d):
                continue
            main = run_dir(row, k, 0)
            same_cpu = slot(main, k, flags(row, 0)) is not None and cpu_slug(load(main)["env"].get("cpu", "")) == slug
            out.append({"cpu": load(d[0])["env"].get("cpu"), "row": row, "seed": k, "identical": same_run(*d),
                        "main_identical": same_run(d[0], main) if same_cpu else None})
    return out


def secondary(done: dict) -> dict:
    """The --threads 2 twins (r 0 at 2 threads) beside the perturbation replicates, on the same seeds and rows."""
    two, pert, found = [], [], 0  # |OOD difference| from the same seed's r 0 run; converged runs only, as the metric says
    for row in ROWS:
        for k in SECONDARY:
            e2, e0 = slot(os.path.join(CHAOS, TASK, "threads2", row, f"seed{k}"), k, flags(row, 0), threads=2), done.get((row, k, 0))
            found += e2 is not None
            if not (e2 and e0 and converged(e2) and converged(e0)):
                continue
            two.append(abs(e2["metrics"][KEY] - e0["metrics"][KEY]))
            pert += [abs(done[row, k, r]["metrics"][KEY] - e0["metrics"][KEY]) for r in REPS[1:]
                     if (row, k, r) in done and converged(done[row, k, r])]
    return {"runs": found, "pairs": len(two), "mean_abs_threads2": statistics.fmean(two) if two else None,
            "pert_pairs": len(pert), "mean_abs_perturb": statistics.fmean(pert) if pert else None}


def icc_sentence(rows: dict, layers: int) -> str:
    """The seed's share of each row's variance in words, with what its interval excludes."""
    def one(row, v):
        if v["icc"] is None:
            return f"{row}: too few converged replicates for an ICC"
        return (f"{row} {v['icc']:+.2f} [{v['icc_lo']:+.2f}, {v['icc_hi']:+.2f}], {v['verdict']}"
                + (" (the interval excludes a seed share of one half or more)" if v["verdict"] == "chaos-driven" else
                   " (the interval excludes a seed share of one half or less)" if v["verdict"] == "seed-driven" else
                   " (the interval holds one half, and excludes a seed share of zero)" if v["icc_lo"] > 0 else
                   " (the interval holds both zero and one half: neither reading is excluded)"))
    return (f"The seed's share of the variance (ICC, {layers} replicates a seed): "
            + "; ".join(one(row, v) for row, v in rows.items()) + ".")


def family_sentence(fam: list) -> str:
    """The four verdicts in words: a change only at Holm p < 0.05, else what the interval excludes."""
    def one(t):
        what = f"{t['variance']} variance, {t['row']} against fixed"
        if t["verdict"] != "not detected":
            return f"{what}: {t['verdict']} (Std ratio {t['ratio_std']:.2f}, Holm p {t['holm_p']:.3g})"
        lo, hi = t.get("ci_lo"), t.get("ci_hi")
        return (f"{what}: not detected (Holm p {t['holm_p']:.3g}); the interval excludes Std ratios below "
                f"{fmt(lo, '.2f')} and above {fmt(hi, '.2f')}")
    return ("Verdicts: " + "; ".join(one(t) for t in fam) + ". (These intervals are the declared seed bootstrap, which "
            "covers about 0.9 of the time at 10 seeds; the wider intervals that invert the declared test are in \"What the "
            "runs taught\", item 5, with the family's power, item 4.)")


def report(done: dict) -> tuple[list[str], dict]:
    layers = complete_layers(done)
    cpus = sorted({e["env"].get("cpu", "not recorded") for e in done.values()})
    out = {"declared_runs": len(ROWS) * len(SEEDS) * len(REPS), "finished": len(done), "complete_layers": layers,
           "cpus": {c: sum(e["env"].get("cpu", "not recorded") == c for e in done.values()) for c in cpus}}
    lines = [f"{len(done)} of {out['declared_runs']} declared runs finished; complete replicate layers r = 0.."
             f"{layers - 1} " + ("(all five: the full design)" if layers == len(REPS) else "(the declared fallback analyses these only)")
             if layers else f"{len(done)} of {out['declared_runs']} declared runs finished; no replicate layer complete yet."]
    if cpus:
        lines.append("CPU models: " + "; ".join(f"{c} ({n} runs)" for c, n in out["cpus"].items()) + ".")
    ctl = controls()
    out["controls"] = ctl
    if ctl:
        lines.append("Determinism controls (metrics.jsonl without its two wall-clock fields, and eval metrics): "
                     + "; ".join(f"{c['row']} seed {c['seed']} on {c['cpu']}: twice {'identical' if c['identical'] else 'DIFFERENT'}"
                                 + ("" if c["main_identical"] is None else f", and {'identical to' if c['main_identical'] else 'DIFFERENT from'} the study's r 0 run")
                                 for c in ctl) + ".")
    if layers < 2:
        return lines, out
    shortcut = next(iter(done.values()))["metrics"].get("shortcut_hard_ood")
    lines += ["", f"Per row, converged runs of r = 0..{layers - 1} ({NAME}; the hard subset's best shortcut scores "
              f"{fmt(shortcut)}):", "",
              "| row | converged / runs | mean | total Std | within-seed Std (chaos) | between-seed Std (seed) | ICC [95%] | reading | val-K: mean, total Std, ICC |",
              "|---|---|---|---|---|---|---|---|---|"]
    out["rows"] = {}
    for row in ROWS:
        s, v = row_stats(blocks(done, row, layers)), row_stats(blocks(done, row, layers, VKEY))
        if s["std_within"] is None:  # the declared ANOVA and the family need replicates within seeds
            raise ValueError(f"row {row}: {s['runs']} converged runs (policy_id >= {CONVERGED:g}) in r = 0..{layers - 1}, "
                             f"too few for the declared analysis (two seeds, and a seed with two converged replicates)")
        total = sum((row, k, r) in done for k in SEEDS for r in range(layers))
        out["rows"][row] = {**{k: s[k] for k in s if k != "anova"}, "val_k": {k: v[k] for k in v if k != "anova"}, "of": total}
        lines.append(f"| {row} | {s['runs']} / {total} | {fmt(s['mean'])} | {fmt(s['std_total'])} | {fmt(s['std_within'])} | "
                     f"{fmt(s['std_between'])}{' (estimate < 0)' if s['between_negative'] else ''} | {fmt(s['icc'], '+.2f')} [{fmt(s['icc_lo'], '+.2f')}, {fmt(s['icc_hi'], '+.2f')}] | "
                     f"{s['verdict'] or '-'} | {fmt(v['mean'])}, {fmt(v['std_total'])}, {fmt(v['icc'], '+.2f')} |")
    lines += ["", icc_sentence(out["rows"], layers)]
    fam = family(done, layers)
    out["family"] = fam
    lines += ["", "The family (Holm over 4 tests, two-sided; exact seed-level block permutation, 2^10 patterns; "
              "Std ratio with a seed-bootstrap 95% interval):", "",
              "| variance | rows | Std ratio [95%] | p | Holm p | verdict |", "|---|---|---|---|---|---|"]
    for t in fam:
        lines.append(f"| {t['variance']} | {t['row']} / fixed | {t['ratio_std']:.2f} [{fmt(t['ci_lo'], '.2f')}, "
                     f"{fmt(t['ci_hi'], '.2f')}] | {t['p']:.3g} | {t['holm_p']:.3g} | {t['verdict']} |")
    lines += ["", family_sentence(fam)]
    sec = secondary(done)
    out["secondary"] = sec
    if sec["pairs"]:  # (the secondary runs after every layer, so every row has its within-seed Std by then)
        sigma = math.sqrt(statistics.fmean(v["std_within"] ** 2 for v in out["rows"].values()))  # pooled chaos Std, equal sizes
        sec["pooled_within_std"] = sigma
        lines += ["", f"Secondary (descriptive, seeds {SECONDARY[0]}-{SECONDARY[-1]} x 3 rows; {sec['runs']} runs at `--threads 2`, "
                  f"{sec['pairs']} converged twins of an r 0 run): 2 threads against 1 moves a run's hard-subset Oracle OOD by "
                  f"{fmt(sec['mean_abs_threads2'])} points on average; a 1e-6 weight nudge of the same seeds (r 1..4 against "
                  f"r 0) by {fmt(sec['mean_abs_perturb'])} ({sec['pert_pairs']} twins); two independent draws at the rows' pooled "
                  f"within-seed Std ({fmt(sigma)}) differ by 2 Std / sqrt(pi) = {fmt(2 * sigma / math.sqrt(math.pi))} on average. In "
                  f"words: a second thread is one more chaos draw, exchangeable with a 1e-6 nudge (\"What the runs taught\", item 7)."]
    lines += ["", "Regenerated by `python study/chaos.py` (results/chaos/chaos.json); the declaration is in its docstring."]
    return lines, out


def plot(done: dict, layers: int, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(ROWS), figsize=(4.2 * len(ROWS), 3.4), sharey=True)
    for ax, row in zip(axes, ROWS):
        for i, k in enumerate(SEEDS):
            for r in range(layers):
                e = done.get((row, k, r))
                if e is None:
                    continue
                x, y = i + (r - 2) * 0.13, e["metrics"][KEY]
                ax.plot(x, y, "o" if r else "s", ms=4.5, color="tab:blue" if converged(e) else "tab:red",
                        mfc=("tab:blue" if converged(e) else "none") if r else "black")
        ax.set_xticks(range(len(SEEDS)), [str(k) for k in SEEDS], fontsize=7)
        ax.set_title(f"{row}")
        ax.set_xlabel(f"seed ({layers} replicates each: black square r 0, circles 1e-6 nudges)", fontsize=7)
    axes[0].set_ylabel(f"{NAME} (%)")
    cut = next(iter(done.values()))["metrics"].get("shortcut_hard_ood")
    fig.suptitle(f"dyck: one seed, {layers} replicates (r = 0..{layers - 1}) (red hollow: not converged, excluded; the best shortcut "
                 f"scores {cut:.1f}% on the hard subset)", fontsize=9)
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=110))
    plt.close(fig)


def checked(lines: list[str], threads: int) -> list[str]:
    """The queue, once every finished slot in it holds its declared run (slot): study/lanes.sh skips a slot with
    an eval.json without reading it, so a foreign run there stops chaos.sh before it trains anything."""
    for line in lines:
        out, _, k, fl = line.split(maxsplit=3)
        slot(os.path.join(ROOT, out), int(k), fl, threads)
    return lines


def main(argv: list[str]) -> None:
    if argv == ["--queue"]:
        print("\n".join(checked(queue(rundir.cpu_model()), threads=1)))
        return
    if argv == ["--queue-threads2"]:
        print("\n".join(checked(queue_threads2(), threads=2)))
        return
    if argv:
        raise ValueError(f"unknown arguments {' '.join(argv)} (allowed: none, --queue, --queue-threads2)")
    done = runs()
    lines, out = report(done)
    os.makedirs(CHAOS, exist_ok=True)
    tables.splice(os.path.join(ROOT, "results", "README.md"), "chaos", lines)
    write_json(os.path.join(CHAOS, "chaos.json"), out)
    if complete_layers(done) >= 1:
        try:
            plot(done, complete_layers(done), os.path.join(CHAOS, "chaos.png"))
        except ImportError:
            print("study/chaos.py: matplotlib is not installed; tables only, the picture is skipped", file=sys.stderr)
    print("\n".join(lines))


if __name__ == "__main__":  # a damaged or foreign run, a full disk: one line naming it (exit 2 / 1), no traceback
    sys.exit(run(main, "study/chaos.py", sys.argv[1:]))
