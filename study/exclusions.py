"""
What the committed runs already say, beyond the declared verdicts (results/README.md, between
`<!-- exclusions:begin -->` and `<!-- exclusions:end -->`; results/exclusions.json). Every number in README.md's
results lines comes from here.

    python study/exclusions.py        # deterministic: the same JSON gives the same bytes

1. Twins. The ladder's rE rung is r2's command again with a weight EMA; the EMA draws no random number and
   touches no weight, so rE's raw weights (eval.json raw_metrics) are an r2 run trained again. A twin pair rerun
   on the same CPU model is bitwise identical (its logged training losses agree everywhere) and says nothing
   about chaos; the pairs whose losses differ were rerun under other rounding (another CPU model). Per task,
   those pairs, both converged, form groups of two after each row's mean is removed; a one-way ANOVA gives the
   within-pair (rerun) and between-seed spread and the ICC (stats.anova_icc): the variance share of the seed.
2. Pairing. The correlation of two rows' per-seed values over the seeds both converged on, for every pair of
   rows of a task within one round (first round, round two); the pooled Fisher z with its nominal 95% interval
   (the row pairs share rows, so the interval is too narrow if anything).
3. The spread ratio rl / fixed at round two (Std over converged pairs) with a paired bootstrap 95% interval,
   against the paper's ratio (results/paper.json), and the power a 16-run row had to see the paper's ratio.
4. dyck's all-sample Oracle OOD (the paper's dyck metric; ours is the hard subset): window against fixed at
   round two, the paired permutation test of the Std difference and Brown-Forsythe beside it.
5. The Gap on copy at round two (window and rl against fixed), beside the paper's.
6. Power. The Brown-Forsythe test at alpha 0.05 on normal samples (4,000 simulated pairs of rows a setting):
   the Std ratio a 16-run row detects with 80% power, and the runs a row needs for the ratios seen.
7. All runs, unpaired. The declared spread claims of round two are judged on converged *pairs* (the protocol);
   since two rows of one seed barely correlate (item 2), a pair broken by one run below the 99% bar throws away
   a run that carries nearly all its information. Beside them: Brown-Forsythe over every converged run of each row.
8. EMA against the raw weights of the same runs (the ladder's rE, both converged): the paired t-test of the mean
   of the primary metric, per task and row.
"""

import json
import math
import os
import statistics
import sys

import numpy as np

if __package__ in (None, ""):  # run as `python study/exclusions.py`: the repository is the import root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from lab import tables  # noqa: E402
from lab.cli import no_arguments, run  # noqa: E402
from lab.files import parse_json, read_json, write_json
from study import ladder, stats, study  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "results", "exclusions.json")
README = os.path.join(ROOT, "results", "README.md")
CHAOS = os.path.join(ROOT, "results", "chaos", "chaos.json")
REPS = 4000


def chi2_quantile(q: float, df: int) -> float:
    """Wilson-Hilferty: chi2_q(df) ~ df (1 - 2/(9 df) + z_q sqrt(2/(9 df)))^3 (z_.975 = 1.95996; good to ~1% at df >= 10)."""
    z = {0.975: 1.959964, 0.025: -1.959964}[q]
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def twins(task: str) -> dict:
    rungs = ladder.load(task)
    r2, rE = rungs.get("r2", {}), ladder.raw(rungs.get("rE", {}))
    key = study.primary(task)[0]
    groups, identical = [], 0
    for row in ladder.ROWS:
        a = {e["seed"]: e for e in r2.get(row, []) if study.converged(e)}
        b = {e["seed"]: e for e in rE.get(row, []) if study.converged(e)}
        both = [k for k in sorted(set(a) & set(b))]
        differ = [k for k in both if losses(a[k]) != losses(b[k])]  # a rerun under other rounding
        identical += len(both) - len(differ)
        pairs = [(a[k]["metrics"][key], b[k]["metrics"][key]) for k in differ]
        if pairs:
            mu = statistics.fmean(v for p in pairs for v in p)
            groups += [[x - mu, y - mu] for x, y in pairs]
    r = stats.anova_icc(groups)
    df, ss = r["N"] - r["k"], r["msw"] * (r["N"] - r["k"])
    return {"task": task, "metric": key, "pairs": r["k"], "identical_pairs": identical,
            "icc": r["icc"], "icc_lo": r["lo"], "icc_hi": r["hi"],
            "sd_within": math.sqrt(r["msw"]), "sd_within_lo": math.sqrt(ss / chi2_quantile(0.975, df)),
            "sd_within_hi": math.sqrt(ss / chi2_quantile(0.025, df)), "sd_between": math.sqrt(max(0.0, r["var_seed"])),
            "within_share": r["msw"] / (r["msw"] + max(0.0, r["var_seed"]))}


def losses(e: dict) -> list:
    """A run's logged training losses (metrics.jsonl): twins whose losses agree everywhere reran bitwise."""
    path = os.path.join(e["run_dir"], "metrics.jsonl")
    with open(path, encoding="utf-8") as f:
        try:
            recs = [parse_json(line) for line in f if line.strip()]
        except ValueError as err:
            raise ValueError(f"{path}: not a log ({err})") from None
    if not all(isinstance(r, dict) for r in recs):
        raise ValueError(f"{path}: not a log (a line that is not a JSON object)")
    return [r.get("loss") for r in recs]


def rounds(task: str) -> dict:
    """{round: {row: [eval dicts]}}: the first round (results/study) and round two."""
    out = {"first round": study.load(task)}
    if (r2 := study.round_two(task)) is not None:
        out["round two"] = r2[1]
    return out


def correlations() -> dict:
    zs, ws, pairs = [], [], []
    for task in ("copy", "dyck"):
        key = study.primary(task)[0]
        for name, rows in rounds(task).items():
            names = sorted(rows)
            for i, ra in enumerate(names):
                for rb in names[i + 1:]:
                    a = {e["seed"]: e["metrics"][key] for e in rows[ra] if study.converged(e)}
                    b = {e["seed"]: e["metrics"][key] for e in rows[rb] if study.converged(e)}
                    ks = sorted(set(a) & set(b))
                    if len(ks) < 4 or np.std([a[k] for k in ks]) == 0 or np.std([b[k] for k in ks]) == 0:
                        continue
                    r = float(np.corrcoef([a[k] for k in ks], [b[k] for k in ks])[0, 1])
                    zs.append(math.atanh(max(min(r, 0.999999), -0.999999)) * (len(ks) - 3))
                    ws.append(len(ks) - 3)
                    pairs.append({"task": task, "round": name, "rows": [ra, rb], "n": len(ks), "r": r})
    z, se = sum(zs) / sum(ws), 1 / math.sqrt(sum(ws))
    return {"row_pairs": len(pairs), "r": math.tanh(z), "lo": math.tanh(z - 1.959964 * se), "hi": math.tanh(z + 1.959964 * se),
            "share_of_variance": math.tanh(z) ** 2, "pairs": pairs}


def bf_power(ratio: float, n: int, reps: int = REPS, seed: int = 0) -> float:
    """How often Brown-Forsythe (2 groups of n normal values, Std ratio `ratio`) gives p < 0.05."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(0, ratio, (reps, n)), rng.normal(0, 1, (reps, n))
    za, zb = np.abs(a - np.median(a, 1, keepdims=True)), np.abs(b - np.median(b, 1, keepdims=True))
    ma, mb = za.mean(1), zb.mean(1)
    m = (ma + mb) / 2
    F = (2 * n - 2) * n * ((ma - m) ** 2 + (mb - m) ** 2) / (((za - ma[:, None]) ** 2).sum(1) + ((zb - mb[:, None]) ** 2).sum(1))
    return float((F > stats.f_quantile(0.95, 1, 2 * n - 2)).mean())


def runs_for(ratio: float, power: float = 0.8) -> int:
    """The smallest n per row (a step of 2 below 100, of 10 above) at which bf_power reaches `power`."""
    n = 4
    while bf_power(ratio, n) < power:
        n += 2 if n < 100 else 10
        if n > 2000:
            return None
    return n


def ratio_at(n: int, power: float = 0.8) -> float:
    """The smallest Std ratio (a step of 0.05) that n runs a row detect with `power`."""
    r = 1.0
    while bf_power(r, n) < power:
        r = round(r + 0.05, 2)
    return r


def ratio_ci(a: np.ndarray, b: np.ndarray) -> dict:
    ci = stats.paired_interval(a, b, lambda x, y: x.std(axis=-1, ddof=1) / y.std(axis=-1, ddof=1))
    return {"ratio": float(a.std(ddof=1) / b.std(ddof=1)), "lo": ci["lo"], "hi": ci["hi"]}


def paper_row(task: str, schedule: str) -> dict:
    return next(r for r in tables.paper_rows() if r["task"] == task and r["setting"].split()[0] == schedule)


def spreads() -> dict:
    out = {}
    for task in ("dyck", "copy"):
        rows = study.round_two(task)[1]
        key = study.primary(task)[0]
        c = study.compare(rows["rl"], rows["fixed"], key, spread=True)
        r = ratio_ci(c["a"], c["b"])
        paper = paper_row(task, "rl")["std"] / paper_row(task, "fixed")["std"]
        out[task] = {"metric": key, "pairs": c["n"], "std_rl": c["da"], "std_fixed": c["db"], **r, "paper": paper,
                     "excluded": paper < r["lo"], "power_for_paper": bf_power(1 / paper, c["n"])}
    rows = study.round_two("dyck")[1]
    c = study.compare(rows["window"], rows["fixed"], "oracle_ood", spread=True)
    out["dyck_all_samples"] = {"pairs": c["n"], "std_window": c["da"], "std_fixed": c["db"], "p_paired": c["p"],
                               "p_bf": c["p_unpaired"], "lo": c["lo"], "hi": c["hi"]}
    rows = study.round_two("copy")[1]
    gap = {n: study.compare(rows[n], rows["fixed"], "gap", spread=False) for n in ("window", "rl")}
    out["copy_gap"] = {n: {"pairs": g["n"], "gap": g["da"], "gap_fixed": g["db"], "p": g["p"]} for n, g in gap.items()}
    out["copy_gap"]["paper"] = {n: paper_row("copy", n)["gap"] for n in ("fixed", "window", "rl")}
    return out


def power(sp: dict) -> dict:
    copy_rows = study.round_two("copy")[1]
    key = study.primary("copy")[0]
    seen = {}
    for a, b in (("fixed", "window"), ("matched", "window"), ("fixed", "rl"), ("matched", "rl")):
        c = study.compare(copy_rows[a], copy_rows[b], key, spread=True)
        seen[f"{a}/{b}"] = {"ratio": c["da"] / c["db"], "runs": runs_for(c["da"] / c["db"])}
    paper_dyck = paper_row("dyck", "fixed")["std"] / paper_row("dyck", "window")["std"]
    return {"ratio_80_at_16": ratio_at(16), "paper_dyck_fixed_window": paper_dyck, "runs_paper_dyck": runs_for(paper_dyck),
            "copy_seen": seen}


def unpaired() -> list[dict]:
    out = []
    for task in ("copy", "dyck"):
        rows = study.round_two(task)[1]
        key = study.primary(task)[0]
        for c in study.round_two_claims(task):
            if not c.spread:
                continue
            a, b = ([e["metrics"][key] for e in rows[r] if study.converged(e)] for r in c.rows)
            paired = study.compare(rows[c.rows[0]], rows[c.rows[1]], key, spread=True)
            out.append({"task": task, "claim": c.text, "runs": [len(a), len(b)], "std": [statistics.stdev(a), statistics.stdev(b)],
                        "p_bf_all_runs": stats.brown_forsythe(a, b)["p"], "pairs": paired["n"], "p_paired": paired["p"]})
    return out


def ema() -> list[dict]:
    out = []
    for task in ("copy", "dyck"):
        key = study.primary(task)[0]
        rE = ladder.load(task).get("rE", {})
        for row, runs in rE.items():
            both = [e for e in runs if "raw_metrics" in e and study.converged(e) and
                    e["raw_metrics"]["policy_id"] is not None and e["raw_metrics"]["policy_id"] >= study.CONVERGED]
            if len(both) < 2:
                continue
            a, b = np.array([e["metrics"][key] for e in both]), np.array([e["raw_metrics"][key] for e in both])
            t = stats.paired_t(a, b)
            out.append({"task": task, "row": row, "runs": len(both), "ema": float(a.mean()), "raw": float(b.mean()),
                        "diff": float((a - b).mean()), "p": t["p"], "lo": t["lo"], "hi": t["hi"]})
    return out


def declared() -> dict:
    """Round two's declared verdicts that the front door quotes: the Gap claims on copy, the spread claims' Holm p."""
    out = {"spread_holm": []}
    for task in ("copy", "dyck"):
        choice, rows = study.round_two(task)
        for v in study.verdicts(task, rows, study.round_two_claims(task), choice["first"]):
            if v.claim.spread and v.claim.headline:
                out["spread_holm"].append(v.p_holm)
            if task == "copy" and not v.claim.spread and v.claim.rows[1] == "fixed" and v.claim.key == "gap":
                out[f"gap_{v.claim.rows[0]}_holm"] = v.p_holm
    return out


def upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


def chaos_record() -> dict:
    """results/chaos/chaos.json, with every value chaos_line reads checked: one line naming the file and the key
    otherwise (a damaged file, or a row without an ICC)."""
    c = read_json(CHAOS)
    words = {"number": "a number", dict: "an object", list: "a list", int: "an integer", str: "a string"}

    def need(where, v, kind):
        ok = (isinstance(v, (int, float)) if kind == "number" else isinstance(v, kind)) and not isinstance(v, bool)
        if not ok:
            raise ValueError(f"{CHAOS}: {where} must be {words[kind]}, got {json.dumps(v)[:40]}; regenerate it with "
                             f"python study/chaos.py")
        return v
    need("the file", c, dict)
    need("'finished'", c.get("finished", 0), int)
    if not need("'rows'", c.get("rows", {}), dict):
        return c
    need("'complete_layers'", c.get("complete_layers"), int)
    for row, v in c["rows"].items():
        need(f"'rows'[{row!r}]", v, dict)
        for k in ("icc", "icc_lo", "icc_hi", "std_within", "std_between"):
            need(f"'rows'[{row!r}][{k!r}]", v.get(k), "number")
        need(f"'rows'[{row!r}]['verdict']", v.get("verdict"), str)
    for i, t in enumerate(need("'family'", c.get("family"), list)):
        need(f"'family'[{i}]", t, dict)
        for k, kind in (("holm_p", "number"), ("verdict", str), ("row", str), ("variance", str)):
            need(f"'family'[{i}][{k!r}]", t.get(k), kind)
    return c


def chaos_line(where: str = "in results/README.md") -> str:
    """The perturbation study's state (study/chaos.py), from results/chaos/chaos.json when it exists."""
    c = chaos_record() if os.path.lexists(CHAOS) else {}
    if not c.get("rows"):
        done = c.get("finished", 0)
        return (f"a preregistered perturbation study measures seed against chaos directly (`study/chaos.py`; "
                f"{done} of {c.get('declared_runs', 150)} runs so far).")
    rows = c["rows"]
    icc = ", ".join(f"{r} {v['icc']:+.2f} [{v['icc_lo']:+.2f}, {v['icc_hi']:+.2f}]" for r, v in rows.items())
    verdicts = {v["verdict"] for v in rows.values()}
    reading = (f"all {verdicts.pop()}" if len(verdicts) == 1 else "; ".join(f"{r} {v['verdict']}" for r, v in rows.items()))
    within = ", ".join(f"{v['std_within']:.1f}" for v in rows.values())
    between = ", ".join(f"{v['std_between']:.1f}" for v in rows.values())
    negative = [r for r, v in rows.items() if v.get("between_negative")]  # ANOVA's seed variance < 0, shown as 0
    if negative:
        between += f"; {' and '.join(negative)}'s ANOVA estimate of the seed variance is below zero, shown as 0"
    part = "" if c["complete_layers"] == 5 else f", {c['complete_layers']} of 5 replicate layers so far"
    fam = c.get("family", [])
    changed = [t for t in fam if t["verdict"] != "not detected"]
    effect = ("; ".join(f"{t['row']} {t['verdict']} the {t['variance']} variance (Holm p {study.fmtp(t['holm_p'])})" for t in changed)
              if changed else "a schedule's effect on either part is not detected (smallest Holm p "
              f"{study.fmtp(min(t['holm_p'] for t in fam))}; the intervals {where})")
    return (f"in the preregistered perturbation study (the default recipe, 1e-6 weight nudges on one CPU model; "
            f"`study/chaos.py`{part}) the seed's share is {icc} ({reading}; within-seed Std {within} points "
            f"against between-seed {between}), and {effect}.")


def lines(out: dict) -> list[str]:
    t = {x["task"]: x for x in out["twins"]}
    c, sp, pw = out["correlations"], out["spreads"], out["power"]
    d, cg = sp["dyck_all_samples"], sp["copy_gap"]
    seen = [v["runs"] for v in pw["copy_seen"].values()]
    f = lambda v, s=".1f": format(v, s)
    return ([
        f"1. **Much of a run's OOD accuracy is not its seed's at this scale.** dyck: {t['dyck']['pairs']} twin pairs (r2 and "
        f"rE's raw weights: the same command rerun under other rounding); within-pair SD of the hard-subset Oracle OOD "
        f"{f(t['dyck']['sd_within'])} [{f(t['dyck']['sd_within_lo'])}, {f(t['dyck']['sd_within_hi'])}], between-seed SD "
        f"{f(t['dyck']['sd_between'])}{' (its ANOVA estimate is below zero)' if t['dyck']['sd_between'] == 0 else ''}: the seed explains ICC {f(t['dyck']['icc'], '+.2f')} "
        f"[{f(t['dyck']['icc_lo'], '+.2f')}, {f(t['dyck']['icc_hi'], '+.2f')}] of the variance. copy: {t['copy']['pairs']} "
        f"pairs rerun on another CPU model ({t['copy']['identical_pairs']} more reran on the same one, bitwise identical), ICC {f(t['copy']['icc'], '+.2f')} [{f(t['copy']['icc_lo'], '+.2f')}, {f(t['copy']['icc_hi'], '+.2f')}], "
        f"within-pair variance {f(t['copy']['within_share'], '.2f')} of the total. Two rows trained from the same seeds "
        f"correlate at r = {f(c['r'], '+.2f')} [{f(c['lo'], '+.2f')}, {f(c['hi'], '+.2f')}] over {c['row_pairs']} row "
        f"pairs: pairing by seed explains r^2 = {f(c['share_of_variance'], '.3f')} of a row's variance. "
        + upper_first(chaos_line(where="below")),
        f"2. **Excluded at this scale:** the paper's RL-Halting spread ratio. rl / fixed Std at round two: dyck "
        f"{f(sp['dyck']['ratio'], '.2f')} [{f(sp['dyck']['lo'], '.2f')}, {f(sp['dyck']['hi'], '.2f')}] ({sp['dyck']['pairs']} "
        f"pairs), copy {f(sp['copy']['ratio'], '.2f')} [{f(sp['copy']['lo'], '.2f')}, {f(sp['copy']['hi'], '.2f')}] "
        f"({sp['copy']['pairs']} pairs), against the paper's {f(sp['dyck']['paper'], '.2f')} and {f(sp['copy']['paper'], '.2f')}; "
        f"a Brown-Forsythe test at these counts finds the paper's ratio {100 * sp['dyck']['power_for_paper']:.0f}% / "
        f"{100 * sp['copy']['power_for_paper']:.0f}% of the time.",
        f"3. **Contradicted on the paper's own dyck metric** (all-sample Oracle OOD, secondary here): the window spreads "
        f"more than fixed, Std {f(d['std_window'])} vs {f(d['std_fixed'])} ({d['pairs']} pairs; difference 95% interval "
        f"[{f(d['lo'], '+.1f')}, {f(d['hi'], '+.1f')}]), paired permutation p {study.fmtp(d['p_paired'])} (Brown-Forsythe "
        f"{study.fmtp(d['p_bf'])}). Not in the declared family (dyck is judged on its hard subset), so a description, not a verdict.",
        f"4. **Reproduced in direction only:** copy's smaller Gap, window {f(cg['window']['gap'])} and rl {f(cg['rl']['gap'])} "
        f"against fixed {f(cg['window']['gap_fixed'])} points (the paper: {f(cg['paper']['window'])} and {f(cg['paper']['rl'])} "
        f"against {f(cg['paper']['fixed'])}; our fixed row uses c = T_max = 15, theirs 20).",
        f"5. **Power.** At 16 runs a row a spread test (Brown-Forsythe, normal data) has 80% power only for Std ratios >= "
        f"{pw['ratio_80_at_16']:.2f}. The paper's dyck fixed / window ratio ({f(pw['paper_dyck_fixed_window'], '.2f')}) needs "
        f"~{pw['runs_paper_dyck']} runs a row; the ratios seen here on copy "
        f"({', '.join(f(v['ratio'], '.2f') for v in pw['copy_seen'].values())}) need ~{min(seen)}-{max(seen)}.",
        "",
        "All runs, unpaired, beside the declared paired tests of round two's spread claims (a pair breaks when either run "
        "misses the 99% bar; two rows of one seed barely correlate, so a broken pair throws away an informative run):",
        "", "| task | claim | converged runs | Std | Brown-Forsythe p, all runs | pairs | paired p |", "|---|---|---|---|---|---|---|"]
    + [f"| {u['task']} | {u['claim']} | {u['runs'][0]} / {u['runs'][1]} | {f(u['std'][0])} vs {f(u['std'][1])} | "
       f"{study.fmtp(u['p_bf_all_runs'])} | {u['pairs']} | {study.fmtp(u['p_paired'])} |" for u in out["unpaired"]]
    + ["", "EMA (decay 0.999) against the raw weights of the same runs (the ladder's rE, runs converged both ways; paired "
       "t-test of the mean, two-sided, not in a declared family):", "",
       "| task | row | runs | EMA | raw | difference [95%] | paired p |", "|---|---|---|---|---|---|---|"]
    + [f"| {m['task']} | {m['row']} | {m['runs']} | {f(m['ema'])} | {f(m['raw'])} | {f(m['diff'], '+.1f')} "
       f"[{f(m['lo'], '+.1f')}, {f(m['hi'], '+.1f')}] | {study.fmtp(m['p'])} |" for m in out["ema"]]
    + ["", "Regenerated by `python study/exclusions.py` (results/exclusions.json)."])


def main() -> None:
    sp = spreads()
    out = {"twins": [twins("dyck"), twins("copy")], "correlations": correlations(), "spreads": sp, "power": power(sp),
           "unpaired": unpaired(), "ema": ema(), "declared": declared()}
    write_json(OUT, out)
    text = lines(out)
    tables.splice(README, "exclusions", text)
    print("\n".join(text))


if __name__ == "__main__":  # a damaged or inconsistent input (ValueError): one line naming it, exit 2
    no_arguments("study/exclusions.py")
    sys.exit(run(lambda argv: main(), "study/exclusions.py"))
