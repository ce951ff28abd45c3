"""
The reproduction study's tables, verdicts and strip plots, regenerated from the committed JSON under
results/study/ (written by study/study.sh): the first round's section of results/history.md between the markers
`<!-- study:begin -->` and `<!-- study:end -->`, round two's in results/README.md between `<!-- round2:begin -->`
and `<!-- round2:end -->`, and results/study/TASK.png (README.md's results lines: study/exclusions.py).

    python study/study.py        # deterministic: the same JSON gives the same bytes

The protocol, declared in this file before the runs it judges:
- A run has *converged* when it solved its training lengths: in-distribution exact match at its own test
  rule (the tables' ID column, `policy_id`) >= 99%. Every row reports converged / total.
- Seed k of every row starts from the same weights and sees the same batches, so two rows are compared
  on *pairs*: the seeds k of the declared count that converged in both rows. Spreads: the paired
  permutation test of Std(a) - Std(b) (stats.paired_spread; the robust MAD variant beside it); means:
  the paired t-test (Wilcoxon beside it). The unpaired tests (Brown-Forsythe, Welch) on the same seeds
  and the paired test on every declared pair, converged or not, are secondary.
- Each task's claims form one declared *family* (declared_claims); a verdict's p is Holm-adjusted
  within it, over the claims whose rows ran. "reproduced" / "contradicted" need an adjusted p < 0.05 at the declared seed count; otherwise
  "not significant at N pairs", with the 95% interval of the difference. No verdict reads as equality.
- The primary metric is PRIMARY[task]: dyck's is its hard subset (prefixes that go below zero), where
  the counting shortcut fails; Oracle OOD on all samples is secondary there.
- A row is judged at its DECLARED seed count: 16 in the main rows, 8 in the others. Seeds beyond it were
  added after a look at the data (the first round grew some rows from 16 to 24 and copy's fixed_window
  from 8 to 16) and enter only the all-seeds, secondary analysis: no group-sequential rule was declared.
"""

import os
import statistics
import sys
from typing import NamedTuple

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):  # run as `python study/study.py`: the repository is the import root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from lab import records, tables  # noqa: E402
from lab.cli import no_arguments, run  # noqa: E402
from lab.files import write_set  # noqa: E402
from lab.files import atomic_write
from study import choice, stats  # noqa: E402

STUDY = os.path.join(ROOT, "results", "study")
ROUND2 = os.path.join(ROOT, "results", "round2")  # part C: the main rows again at the ladder's rung (round_two)
README = os.path.join(ROOT, "results", "README.md")
HISTORY = os.path.join(ROOT, "results", "history.md")  # the first round's block (study), beside the notebook
# row directory -> (label, the published row's setting in results/paper.json)
ROWS = {"fixed": ("fixed c=T_max", "fixed c=20"), "matched": ("matched", "matched"),
        "window": ("window w=5", "window w=5"), "rl": ("rl", "rl"),
        "fixed_window": ("fixed_window c=T_max w=5", "fixed_window c=20 w=5"), "multidepth": ("multidepth w=5", "multidepth w=5"),
        "ponder": ("ponder", "ponder"), "lognormal_poisson": ("lognormal_poisson, untruncated", None),
        "trm_halt": ("trm_halt trm_steps=3", None), "trm_halt_m1": ("trm_halt trm_steps=1", None),
        "rl_ent0": ("rl lambda_ent=0", "rl lambda_ent=0"), "rl_ent0.1": ("rl lambda_ent=0.1", "rl lambda_ent=0.1"),
        "rl_tmax5": ("rl T_max=5", "rl T_max=5"), "rl_tmax10": ("rl T_max=10", "rl T_max=10"),
        "rl_tmax20": ("rl T_max=20", None),
        "window_fixed_init": ("window, init_seed 0 (data and depth seeds vary)", None),
        "window_fixed_data": ("window, data_seed 0 (init and depth seeds vary)", None),
        "window_bptt3": ("window w=5, bptt_k 3", None), "ntp": ("ntp (one depth)", None),
        "ntp_pause": ("ntp_pause (one depth)", None), "ntp_loop": ("ntp_loop (one depth)", None)}
MAIN = ("fixed", "matched", "window", "rl")  # declared at 16 seeds a row (study.sh stage 5); every other row at 8
CONVERGED = 99.0  # policy_id >= this: the run solved its training lengths
# the primary metric per task (key in eval.json's metrics, label), then its val-K twin; others: Oracle OOD
PRIMARY = {"dyck": ("oracle_hard_ood", "hard-subset Oracle OOD", "val_k_hard_ood", "hard-subset val-K OOD")}
DEFAULT_PRIMARY = ("oracle_ood", "Oracle OOD", "val_k_ood", "val-K OOD")
# rows grown after a look at the data (study.sh stage 7): their seeds past DECLARED are secondary only
GROWN = {("copy", "fixed_window"): 16, ("dyck", "matched"): 24, ("dyck", "rl"): 24, ("copy", "matched"): 24,
         ("copy", "window"): 24}
PAIRS = [("window", "matched"), ("window", "fixed"), ("rl", "matched"), ("rl", "window"),
         ("lognormal_poisson", "window"), ("trm_halt", "window"),  # today's rules against the window
         ("window_fixed_init", "window_fixed_data"),  # init fixed vs data order fixed (each also varies depth draws)
         ("rl_tmax20", "rl")]  # the paper's T_max = 20 against the copy recipe's 15


def declared(name: str, first: int = 0) -> range:
    """The seeds a row is judged at, declared before its first run (first: the round's first seed; round two's
    is results/round2/TASK/choice.json's); fewer is an interim look."""
    return range(first, first + (16 if name in MAIN else 8))


def trained(task: str, name: str) -> int:
    """The seeds study/study.sh trains for a row (the declared count, or more where GROWN)."""
    return GROWN.get((task, name), len(declared(name)))


def primary(task: str) -> tuple:
    return PRIMARY.get(task, DEFAULT_PRIMARY)


def load_row(dirs: list[str], seeds: range = None) -> list:
    """The finished runs under dirs (only those of `seeds`, if given), by seed; they must share their settings
    and hold each seed once."""
    runs = sorted((e for d in dirs if os.path.isdir(d) for e in map(records.load_eval, records.find_runs([d]))
                   if seeds is None or e["seed"] in seeds), key=lambda e: e["seed"])
    if runs and len(groups := tables.group_runs(runs)) != 1:
        raise ValueError(f"{', '.join(dirs)}: runs with different settings: {sorted(label for _, label in groups)}")
    return runs


def load(task: str) -> dict:
    """{row: [eval dicts, by seed]} of one task's first round."""
    return {name: runs for name in ROWS if (runs := load_row([os.path.join(STUDY, task, name)]))}


def round_two(task: str):
    """(choice, rows) of a task's round two (part C), or None before its rung is chosen. choice.json, written
    once by study/ladder.py when its rule first picks a rung, holds the rung, its flags, the first of the
    16 declared seeds a row, and per row the directory whose runs are the same command (the ladder's rung,
    or the first round at r1): a declared seed trained there is read from there, not trained again."""
    choice = read_choice(task)
    if choice is None:
        return None
    dirs = lambda n: [os.path.join(ROUND2, task, n)] + ([os.path.join(ROOT, choice["reuse"][n])] if n in choice["reuse"] else [])
    rows = {n: runs for n in MAIN if (runs := load_row(dirs(n), declared(n, choice["first"])))}
    rung = {(e["config"]["max_iters"], e["config"]["d_model"], e["config"].get("ema", 0.0)) for runs in rows.values() for e in runs}
    if len(rung) > 1:  # a reused directory that is not the rung's command
        raise ValueError(f"round two of {task}: runs at different (steps, d_model, ema): {sorted(rung)}")
    return choice, rows


def read_choice(task: str, need=("first", "seeds", "flags", "reuse", "rung", "why")):
    """results/round2/TASK/choice.json, checked by study/choice.py's rules, or None while there is none; a
    damaged or hand-edited one is a ValueError naming the file (one line)."""
    return choice.read(os.path.join(ROUND2, task, "choice.json"), task, ROOT, need)


def round_two_claims(task: str) -> list:
    """Round two's family: the declared claims between its rows (the main rows), Holm within it."""
    return [c for c in declared_claims(task) if set(c.rows) <= set(MAIN)]


def per_seed(runs: list, key: str) -> list:
    vals = [e["metrics"][key] for e in runs]
    if key == "front90":  # no OOD length at 90%: the front is the longest training length
        vals = [e["n_max"] if v is None else v for v, e in zip(vals, runs)]
    return vals


def converged(e: dict) -> bool:
    return e["metrics"]["policy_id"] is not None and e["metrics"]["policy_id"] >= CONVERGED


def fmtp(p) -> str:
    if p is None:
        return "-"
    if 0.0445 <= p < 0.0555:  # two digits would print 0.05 on either side of the threshold
        return f"{p:.4f}"
    return f"{p:.2g}" if p >= 0.001 else f"{p:.1e}"


def ms(v: list) -> str:
    """mean ± Std of a list of per-seed values."""
    return "-" if not v else f"{statistics.fmean(v):.1f}" + (f" ± {statistics.stdev(v):.1f}" if len(v) > 1 else "")


# --- the comparison of two rows ---------------------------------------------------------------------------

def compare(ra: list, rb: list, key: str, spread: bool, seeds_a: range = None, seeds_b: range = None) -> dict:
    """Row a against row b on metric `key`: the pairs (seed k in both, k among each row's seeds), the
    converged pairs, the primary paired test on them, the tests beside it and the interval of the
    difference (a - b: of Std for spreads, of the mean for means)."""
    by_a = {e["seed"]: e for e in ra if seeds_a is None or e["seed"] in seeds_a}
    by_b = {e["seed"]: e for e in rb if seeds_b is None or e["seed"] in seeds_b}
    pairs = sorted(set(by_a) & set(by_b))
    conv = [k for k in pairs if converged(by_a[k]) and converged(by_b[k])]
    value = lambda rows, ks: np.array([rows[k]["metrics"][key] for k in ks], float)
    a, b = value(by_a, conv), value(by_b, conv)
    out = {"pairs": len(pairs), "n": len(conv), "a": a, "b": b}
    if len(conv) < (3 if spread else 2):
        return {**out, "p": None}
    aa, bb = value(by_a, pairs), value(by_b, pairs)  # every declared pair, converged or not (secondary)
    if spread:
        ci = stats.paired_interval(a, b, lambda x, y: stats.spread_stat(x, y, False))
        out.update(p=stats.paired_spread(a, b)["p"], p_robust=stats.paired_spread(a, b, robust=True)["p"],
                   p_unpaired=stats.brown_forsythe(a, b)["p"], p_all=stats.paired_spread(aa, bb)["p"],
                   da=float(a.std(ddof=1)), db=float(b.std(ddof=1)), lo=ci["lo"], hi=ci["hi"])
    else:
        t = stats.paired_t(a, b)
        out.update(p=t["p"], p_robust=stats.wilcoxon(a, b)["p"], p_unpaired=stats.welch(a, b)["p"],
                   p_all=stats.paired_t(aa, bb)["p"], da=float(a.mean()), db=float(b.mean()), lo=t["lo"], hi=t["hi"])
    return out


def word(c: dict, higher, spread: bool, p_adj, interim: bool) -> str:
    """The verdict: the paper's direction (higher: a above b; False: below; None: no direction) against
    the Holm-adjusted p."""
    if c["p"] is None:
        return f"too few converged pairs ({c['n']} of {c['pairs']})"
    what = "Std" if spread else "mean"
    diff = f"{what} {c['da']:.1f} vs {c['db']:.1f}; difference {c['da'] - c['db']:+.1f}, 95% interval [{c['lo']:+.1f}, {c['hi']:+.1f}]"
    if p_adj >= 0.05:
        return f"not significant at {c['n']} pairs ({diff})"
    if higher is None:
        return f"they differ ({diff})"
    if interim:
        return f"interim look, not a verdict ({diff})"
    return ("reproduced" if (c["da"] > c["db"]) == higher else "contradicted") + f" ({diff})"


def undecidable(r: dict, ps: list) -> str:
    """For a spread test in a Holm family with raw p-values ps (its own among them): a note when even the
    smallest p its pair count allows could not give Holm p < 0.05, given the family's other p-values."""
    if r is None or r["p"] is None:
        return ""
    floor = stats.spread_floor(r["n"])
    others = [p for p in ps if p is not None]
    others.remove(r["p"])
    bound = min(1.0, (1 + len(others) - sum(p < floor for p in others)) * floor)
    return (f"; undecidable here: at {r['n']} pairs the test cannot go below p = {floor:.2g}, Holm p >= {bound:.2g}"
            if bound >= 0.05 else "")


class Claim(NamedTuple):
    text: str
    headline: bool  # one of the four spread claims, the paper's headline
    rows: tuple[str, str]  # the two rows compared
    higher: bool | None  # the paper says a is higher (True) / lower (False) than b; None: no direction
    key: str  # the metric compared
    spread: bool  # a test of spread, else of means


def declared_claims(task: str) -> list[Claim]:
    """The primary paper's claims tested on a task: one family, the headline spread claims first
    (declared here before the runs that judge them; the first round's were declared after its runs)."""
    key, name = primary(task)[:2]
    out = [Claim(f"{s} has a smaller spread of {name} than {d}", True, (s, d), False, key, True)
           for s in ("window", "rl") for d in ("fixed", "matched")]
    out += [Claim(f"{s} has a smaller Gap than {d}", False, (s, d), False, "gap", False)
            for s in ("window", "rl") for d in ("fixed", "matched")]
    out.append(Claim(f"fixed_window (c +- w) has a smaller spread of {name} than fixed", False,
                     ("fixed_window", "fixed"), False, key, True))
    out.append(Claim(f"rl raises {name} over window", False, ("rl", "window"), True, key, False))
    out.append(Claim(f"lambda_ent = 0 collapses (lower {name} than 0.001)", False, ("rl_ent0", "rl"), False, key, False))
    out.append(Claim(f"lambda_ent = 0.1 is too uniform (lower {name} than 0.001)", False, ("rl_ent0.1", "rl"), False, key, False))
    out.append(Claim(f"T_max = 5 is too short (lower {name} than the recipe's T_max)", False, ("rl_tmax5", "rl"), False, key, False))
    out.append(Claim(f"multidepth ~ window ({name}; a test of difference)", False, ("multidepth", "window"), None, key, False))
    out.append(Claim(f"ponder is unstable (larger spread of {name} than window)", False, ("ponder", "window"), True, key, True))
    return out


class Verdict(NamedTuple):
    claim: Claim
    result: dict | None  # compare()'s output; None when a row has no seeds
    p_holm: float | None
    verdict: str


def verdicts(task: str, rows: dict, claims: list[Claim] = None, first: int = 0) -> list[Verdict]:
    """Every declared claim of a task with its test, its Holm-adjusted p (over the task's claims that
    could be tested) and its verdict; the rows' declared seeds start at `first`."""
    claims = claims or declared_claims(task)
    results = []
    for c in claims:
        a, b = c.rows
        results.append(None if a not in rows or b not in rows else
                       compare(rows[a], rows[b], c.key, c.spread, declared(a, first), declared(b, first)))
    adj = [None] * len(claims)
    idx = [i for i, r in enumerate(results) if r is not None]
    ps = [results[i]["p"] for i in idx]
    for i, p in zip(idx, stats.holm(ps)):
        adj[i] = p
    out = []
    for c, r, p in zip(claims, results, adj):
        if r is None:
            missing = ", ".join(n for n in c.rows if n not in rows)
            out.append(Verdict(c, None, None, f"not run (no seeds of {missing})"))
            continue
        have = {n: sum(e["seed"] in declared(n, first) for e in rows[n]) for n in c.rows}
        short = [f"{n} {have[n]} of {len(declared(n))}" for n in c.rows if have[n] < len(declared(n))]
        v = word(r, c.higher, c.spread, p, bool(short)) + (undecidable(r, ps) if c.spread and p is not None and p >= 0.05 else "")
        out.append(Verdict(c, r, p, v + (f"; interim look, declared seeds: {', '.join(short)}" if short else "")))
    return out


def verdict_table(vs: list[Verdict]) -> list[str]:
    lines = ["| claim of the primary paper | converged pairs | paired p | Holm p | robust p | unpaired p | "
             "all pairs, paired p | verdict |", "|---|---|---|---|---|---|---|---|"]
    for v in vs:
        r = v.result or {}
        cells = [v.claim.text, f"{r['n']} of {r['pairs']}" if r else "-", fmtp(r.get("p")),
                 fmtp(v.p_holm), fmtp(r.get("p_robust")), fmtp(r.get("p_unpaired")), fmtp(r.get("p_all")), v.verdict]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + ["", "Paired p: the permutation test of Std (spreads) or the paired t-test (means) on the pairs that "
                    "converged in both rows; robust p: its MAD variant / the Wilcoxon signed-rank test; unpaired p: "
                    "Brown-Forsythe / Welch on the same seeds; all pairs: the paired test on every declared pair, "
                    "converged or not. Holm adjusts the paired p over the claims of this task (one family). "
                    "\"Undecidable here\": at its pair count the exact permutation test cannot go below p = 2 / 2^n "
                    "(stats.spread_floor), and even that p would not pass Holm in this family.", ""]


def pyplot():
    """matplotlib's pyplot, or None (it is optional: the tables regenerate without it, the plots are skipped)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def strip_plot(plt, path: str, title: str, rows: dict, key: str, label: str, shortcut) -> str:
    """The metric per seed per row (filled: converged, hollow: not), mean and Std of the converged seeds
    (bar), the best shortcut (dashed)."""
    fig, ax = plt.subplots(figsize=(1.2 * len(rows) + 2, 3.4))
    for i, (name, runs) in enumerate(rows.items()):
        for k, e in enumerate(runs):
            ok = converged(e)
            ax.scatter(i + 0.08 * ((k % 5) - 2), e["metrics"][key], s=14, alpha=0.8, color="tab:blue",
                       facecolors="tab:blue" if ok else "none", label=None)
        v = [e["metrics"][key] for e in runs if converged(e)]
        if len(v) > 1:
            ax.errorbar(i + 0.3, statistics.fmean(v), yerr=statistics.stdev(v), fmt="o", color="black", capsize=3)
    if shortcut is not None:
        ax.axhline(shortcut, ls="--", color="gray", lw=1, label=f"best shortcut {shortcut:.1f}%")
        ax.legend(loc="lower left", fontsize=8)
    ax.set_xticks(range(len(rows)), list(rows), rotation=30, ha="right", fontsize=8)
    ax.set(ylabel=f"{label} (%) per seed", title=title + " (hollow: not converged)", ylim=(-2, 102))
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=110, metadata={"Software": None}))
    plt.close(fig)
    return path


def shortcut_of(runs: list, key: str):
    """The best shortcut's score on the metric's samples (the hard subset's for a hard metric)."""
    m = runs[0]["metrics"]
    return m.get("shortcut_hard_ood") if "hard" in key else m.get("shortcut_ood")


def per_length(rows: dict, names: list[str]) -> list[str]:
    """Seed 0 of each row: accuracy per test length at the row's own test rule (the NTP baselines: greedy
    decoding at their one depth; the looped schedules: their policy depth), and the wall time."""
    runs = {n: next(e for e in rows[n] if e["seed"] == 0) for n in names if n in rows and any(e["seed"] == 0 for e in rows[n])}
    if len(runs) < 2:
        return []
    e0 = next(iter(runs.values()))
    head = "| seed 0 | " + " | ".join(f"n={n}" + (" (ID)" if n <= e0["n_max"] else "") for n in e0["lengths"]) + " | ID | OOD | minutes |"
    lines = ["Accuracy per length at each row's own test rule (seed 0; looped rows: K = T(n) or the learned rule; "
             "the NTP rows: greedy decoding at their one depth, c = T_max, so no K axis). Rerun: `STAGE=3 bash "
             "study/study.sh` (each row is `python train.py --task TASK --schedule ROW`); minutes = training time:", "",
             head, "|---" * (len(e0["lengths"]) + 4) + "|"]
    for name, e in runs.items():
        m = e["metrics"]
        lines.append(f"| {ROWS[name][0]} | " + " | ".join(f"{100 * a:.0f}" for a in m["policy"]) +
                     f" | {m['policy_id']:.1f} | {m['policy_ood']:.1f} | {e['train_time_s'] / 60:.1f} |")
    return lines + [""]


def machine(e: dict) -> str:
    hw = e["env"]["hardware"] or "CPU"
    return f"{hw} (CUDA)" if "NVIDIA" in hw else f"{e['env']['cpu_count']}-core {hw} CPU"


def seed_ranges(seeds: list[int]) -> str:
    out, run = [], [seeds[0]]
    for k in seeds[1:]:
        if k == run[-1] + 1:
            run.append(k)
        else:
            out.append(run)
            run = [k]
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in out + [run])


def minutes(runs: list) -> str:
    lo, hi = (f(e["train_time_s"] for e in runs) / 60 for f in (min, max))
    return f"{lo:.1f}" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}-{hi:.1f}"


def hardware_lines(rows: dict) -> list[str]:
    """Where each row's seeds ran, their training minutes, and, in a row with seeds on two machines, a
    Welch test of Oracle OOD between them (the machines change the rounding, not the experiment)."""
    lines = ["Where the seeds ran (eval.json's env; CPU runs shared the 2 cores two to four at a time, CUDA runs 14 at "
             "a time on one GPU, study/cuda/run.sh):", ""]
    for name, runs in rows.items():
        by = {}
        for e in runs:
            by.setdefault(machine(e), []).append(e)
        parts = [f"{hw} seed{'s' * (len(es) > 1)} {seed_ranges([e['seed'] for e in es])} ({minutes(es)} min)"
                 for hw, es in by.items()]
        if len(by) == 2 and min(len(es) for es in by.values()) >= 2:
            a, b = (per_seed(es, "oracle_ood") for es in by.values())
            parts.append(f"Oracle OOD between the machines: Welch p = {fmtp(stats.welch(a, b)['p'])}")
        lines.append(f"- {ROWS[name][0]}: " + "; ".join(parts))
    return lines + [""]


def counts(name: str, runs: list, first: int = 0) -> str:
    """'converged / finished declared seeds', a main row's declared count while some are missing (an interim
    look: '7 / 8 of 16 declared'), and the seeds trained after a look, if any: '11 / 16 (+6 / 8 later)'."""
    seeds = declared(name, first)
    early = [e for e in runs if e["seed"] in seeds]
    late = [e for e in runs if e["seed"] not in seeds]
    interim = name in MAIN and len(early) < len(seeds)
    return (f"{sum(map(converged, early))} / {len(early)}" + (f" of {len(seeds)} declared" if interim else "")
            + (f" (+{sum(map(converged, late))} / {len(late)} later)" if late else ""))


def converged_table(task: str, rows: dict, first: int = 0) -> list[str]:
    """Per row: converged / total (all seeds), and the primary metric over the converged declared seeds."""
    key, name, vkey, vname = primary(task)
    extra = task in PRIMARY  # a task whose primary metric is not Oracle OOD shows Oracle OOD beside it
    lines = [f"| row | converged / seeds | {name} | {vname} | " + ("Oracle OOD, all samples | " if extra else "")
             + "shortcut |", "|---|---|---|---|" + ("---|" if extra else "") + "---|"]
    for n, runs in rows.items():
        conv = [e for e in runs if converged(e) and e["seed"] in declared(n, first)]
        v = lambda k: ms([e["metrics"][k] for e in conv if e["metrics"].get(k) is not None])
        cut = shortcut_of(runs, key)
        lines.append(f"| {ROWS[n][0]} | {counts(n, runs, first)} | {v(key)} | {v(vkey)} | "
                     + (f"{v('oracle_ood')} | " if extra else "") + ("-" if cut is None else f"{cut:.1f}") + " |")
    return lines + ["", f"Converged: >= {CONVERGED:.0f}% in-distribution exact match at the row's own test rule, "
                    "counted over the row's declared seeds (and, after '+', over the seeds trained after a look, "
                    "which only the secondary analysis uses). Means ± Std over the converged declared seeds; the "
                    "shortcut is the best trivial predictor's score on the same samples.", ""]


def pair_lines(task: str, rows: dict, first: int = 0) -> list[str]:
    """Descriptive tests between rows (no claim): paired on the converged pairs, the unpaired tests beside."""
    key, name = primary(task)[:2]
    lines = []
    for a, b in PAIRS:
        if a in rows and b in rows:
            m, s = (compare(rows[a], rows[b], key, sp, declared(a, first), declared(b, first)) for sp in (False, True))
            if m["p"] is None:
                continue
            lines.append(f"- {a} vs {b} ({m['n']} converged pairs of {m['pairs']}): {name} mean {m['da']:.1f} vs "
                         f"{m['db']:.1f}, paired t p = {fmtp(m['p'])} (Welch {fmtp(m['p_unpaired'])}); "
                         + (f"Std {s['da']:.1f} vs {s['db']:.1f}, paired permutation p = {fmtp(s['p'])} "
                            f"(Brown-Forsythe {fmtp(s['p_unpaired'])})" if s["p"] is not None else "spread: too few pairs"))
    return (["Tests between rows (descriptive, no claim, not corrected):", ""] + lines + [""]) if lines else []


def section(task: str, rows: dict, plt, first: int = 0, claims: list = None, png: str = None, flags: str = "") -> list[str]:
    """A task's tables, plot and verdicts: the first round's, or (first, claims, png, flags) round two's."""
    png = png or os.path.join(STUDY, f"{task}.png")
    published = {r["setting"].removesuffix(" (paper)"): r for r in tables.paper_rows() if r["task"] == task}
    hard = any(e["metrics"].get("oracle_hard_ood") is not None for runs in rows.values() for e in runs)
    key, name = primary(task)[:2]
    lines = [f"### {task}", "", f"Primary metric: {name}. Converged seeds (the primary analysis):", ""]
    lines += converged_table(task, rows, first)
    lines += ["Every seed, converged or not, and the published rows (secondary):", "",
              "| " + " | ".join(tables.HEADER + (["hard: Oracle / val-K / policy"] if hard else [])) + " |",
              "|---" * (len(tables.HEADER) + hard) + "|"]
    for n, runs in rows.items():
        label, paper = ROWS[n]
        lines.append(tables.format_row({**tables.table_row(runs), "setting": label}, hard))
        if paper in published:
            lines.append(tables.format_row(published[paper], hard))
    cfg = rows[next(iter(rows))][0]["config"]
    lines += ["", f"Recipe: `python train.py --task {task}{' ' + flags if flags else ''}` (d_model {cfg['d_model']}, {cfg['max_iters']} steps, "
              f"n {cfg['n_min']}..{cfg['n_max']}, T_max {cfg['T_max']}, fixed c = T_max = {cfg['T_max']} (the paper's "
              f"fixed row: c = 20), T_test {cfg['T_test']}, test lengths {cfg['test_lengths']}, {cfg['eval_samples']} "
              "test samples per length)" + (f", weight EMA {cfg['ema']:g}" if cfg.get("ema") else "")
              + ", fp32, one thread per run. Paper rows: paper scale, 18 or 32 seeds.", ""]
    lines += hardware_lines(rows)
    if plt:
        strip_plot(plt, png, f"{task}: one dot per seed", {ROWS[n][0]: r for n, r in rows.items()},
                   key, name, shortcut_of(rows[next(iter(rows))], key))
    lines += [f"![{task}: {name} per seed]({os.path.relpath(png, os.path.dirname(README))})", ""]
    if any(n in rows for n in ("ntp", "ntp_pause", "ntp_loop")):
        lines += per_length(rows, ["window", "matched", "ntp", "ntp_pause", "ntp_loop"])
    lines += pair_lines(task, rows, first)
    return lines + verdict_table(verdicts(task, rows, claims, first))


def main() -> None:
    tasks = sorted(t for t in os.listdir(STUDY) if os.path.isdir(os.path.join(STUDY, t)) and t != "logs") if os.path.isdir(STUDY) else []
    # every run and every choice.json is read (and checked) before anything is written: a damaged file stops
    # the script with one line, the tables and plots as they were
    data = []
    for task in tasks:
        two = round_two(task)
        data.append((task, load(task), two))
    body, plt = [], pyplot()
    if plt is None:
        print("study/study.py: matplotlib is not installed; tables only, the plots are skipped", file=sys.stderr)
    two_body = []
    for task, rows, two in data:
        if rows:
            body += section(task, rows, plt)
        if two is None or not two[1]:
            two_body += [f"- {task}: " + ("rung not chosen yet (study/ladder.py, part C)." if two is None else
                                          f"rung {two[0]['rung']} chosen ({two[0]['why']}); no finished run yet."), ""]
            continue
        choice, rows2 = two
        sec = section(task, rows2, plt, choice["first"], round_two_claims(task), os.path.join(ROUND2, f"{task}.png"),
                      choice["flags"])
        rejudged = (" At r1 round two reuses the first round's runs (seeds 0-15): it is the first round re-judged in "
                    "round two's family, no new evidence." if choice["rung"] == "r1" else "")
        two_body += sec[:2] + [f"Rung {choice['rung']} ({choice['why']}), recorded in results/round2/{task}/choice.json; "
                               "the Recipe line below gives its command (add each row's schedule flags)." + rejudged, ""] + sec[2:]
    write_set({HISTORY: tables.spliced(HISTORY, "study", body or ["(no study runs yet)"]),
               README: tables.spliced(README, "round2", two_body + [""])})  # both blocks, or neither
    print(f"wrote the study sections of {HISTORY} and {README} ({len(tasks)} tasks)")


if __name__ == "__main__":  # a damaged or inconsistent input (ValueError): one line naming it, exit 2
    no_arguments("study/study.py")
    sys.exit(run(lambda argv: main(), "study/study.py"))
