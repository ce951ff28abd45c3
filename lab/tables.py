"""
Tables over seeds: runs that differ only in their seeds (run_key: the config minus bookkeeping and other schedules'
and tasks' knobs) form one row, labelled by its schedule, its depth knobs and what differs between the rows of its
task. A row holds means over runs, the Std over runs of the Oracle OOD [chi-square 95%, stats.std_interval],
Front@90 off the seed-mean oracle curve, the median settle K; rows of one task are compared by lab/compare.py.
"""

import dataclasses
import math
import os
import statistics

from config import NTP_KNOBS, NTP_SETTINGS, Config
from halting import SCHEDULES, settings
import metrics
from tasks import TASKS
from lab import compare, stats
from lab.files import atomic_write, read_json
from metrics import fmt

# A seed's runs nudged by a rounding-sized --perturb EPS --perturb_seed J are replicates in its row (the row's tests
# count the seed once); a larger EPS is another experiment, another row.
REPLICATE_EPS = 1e-5  # under a hundred float32 roundings (2^-23 each): a replicate; above it, part of the key
BOOKKEEPING = {"perturb_seed", "seed", "seeds", "out_dir", "resume", "overwrite", "device", "threads", "log_interval",
               "eval_interval", "ckpt_interval", "eval_batch_size", "compile", "amp", "preset", "stack", "static",
               "tf32"}
SCHEDULE_KNOBS = ({k for s in SCHEDULES for k in settings(s)} | {k for ks in NTP_KNOBS.values() for k in ks}) - {
    "T_max", "d_model", "pad_id", "active_set"}
TASK_KNOBS = {k for t in TASKS.values() for k in t.knobs}
DEFAULTS = dataclasses.asdict(Config())
PRIMARY = {"fixed": ("c",), "fixed_window": ("c", "w"), "window": ("w",), "multidepth": ("w",),
           "ntp": ("c",), "ntp_pause": ("c", "n_pause"), "ntp_loop": ("c",)}


def run_key(e: dict) -> tuple:
    """The settings that define a run's experiment, a sorted tuple of (name, value); one it lacks is its default."""
    c, s, t = {**dataclasses.asdict(Config()), **e["config"]}, e["schedule"], e["task"]
    c["c"] = Config(c=c["c"], T_max=c["T_max"]).depth_c  # c = 0 and c = T_max: one experiment, labelled by its depth
    c["perturb"] = c["perturb"] if c["perturb"] > REPLICATE_EPS else 0.0  # a rounding-sized nudge: a replicate
    own = set(settings(s)) if s in SCHEDULES else set(NTP_SETTINGS.get(s, ()))
    drop = BOOKKEEPING | (SCHEDULE_KNOBS - own) | (TASK_KNOBS - set(TASKS[t].knobs if t in TASKS else ()))
    return tuple(sorted((k, v) for k, v in {**c, "task": t, "schedule": s}.items() if k not in drop))


def replicate(e: dict) -> tuple:
    """A run's identity within its row: its seed and its --perturb replicate ((0.0, 0) when unperturbed)."""
    c = e.get("config", {})
    return (e["seed"], float(c.get("perturb", 0.0)), int(c.get("perturb_seed", 0)))


def value(v) -> str:
    return format(v, "g") if isinstance(v, float) else str(v)


def edits(e: dict) -> tuple:
    """The distinct dirty marks (env.git_dirty) of a run's segments, sorted; () for committed or unknown code."""
    envs = [s.get("env") for s in e.get("segments") or [] if isinstance(s, dict)] + [e.get("env")]
    return tuple(sorted({v["git_dirty"] for v in envs if isinstance(v, dict) and isinstance(v.get("git_dirty"), str)}))


def group_runs(evals: list) -> dict:
    """{(task, label): [eval dicts]}: the seeds of each row; a row with one seed twice or two test grids is refused.
    Runs of one experiment that ran different code (edits) are a row per edit, labelled `uncommitted=MARK`."""
    keyed = [(run_key(e), edits(e), e) for e in evals]
    code = {}
    for k, edit, _ in keyed:
        code.setdefault(k, set()).add(edit)
    by_key = {}
    for k, edit, e in keyed:
        by_key.setdefault((k, edit if len(code[k]) > 1 else ()), []).append(e)
    groups = {}
    for (key, edit), runs in by_key.items():
        k = dict(key)
        # the settings that differ between the rows of this task (one a row does not read: its default)
        others = [dict(o) for o, _ in by_key if dict(o)["task"] == k["task"]]
        at = lambda row, f: row[f] if f in row else DEFAULTS.get(f)
        varying = sorted({f for o in others for f in set(o) | set(k) if at(o, f) != at(k, f)} - {"schedule", "task"})
        # the schedule's primary knobs, then what differs between rows, then any own knob away from its default
        primary = PRIMARY.get(k["schedule"], ())
        changed = [f for f in sorted(SCHEDULE_KNOBS & set(k)) if k[f] != DEFAULTS.get(f)]
        shown = list(dict.fromkeys([*primary, *varying, *changed]))
        label = " ".join([k["schedule"]] + [f"{f}={value(k[f])}" for f in shown if f in k]
                         + ([f"uncommitted={'+'.join(edit)}"] if edit else []))
        seen = {}
        for r in runs:  # one seed twice: a copy (cp -r run run.bak), a run inside a sweep, a sweep below a run
            seen.setdefault(replicate(r), []).append(r.get("run_dir", "?"))
        twice = {k: v for k, v in seen.items() if len(v) > 1}
        if twice:
            (k0, eps, j), dirs = min(twice.items())
            rep = f" (--perturb {eps:g} --perturb_seed {j})" if eps else ""
            raise ValueError(f"row {k['task']} {label}: seed {k0}{rep} appears {len(dirs)} times ({', '.join(dirs)}): "
                             f"one run would count as several seeds; remove or move the copies")
        grid = {(tuple(r["lengths"]), r["n_max"]) for r in runs}
        if len(grid) > 1:
            raise ValueError(f"row {k['task']} {label}: its runs were evaluated on different grids "
                             f"(lengths/n_max: {' vs '.join(str(g) for g in sorted(grid))}): "
                             f"{', '.join(r['run_dir'] for r in runs)}")
        groups[(k["task"], label)] = sorted(runs, key=replicate)
    return groups


def table_row(evals: list[dict]) -> dict:
    """One row over the seeds of one experiment (see the module docstring)."""
    ms = [e["metrics"] for e in evals]
    lengths, n_max = evals[0]["lengths"], evals[0]["n_max"]
    ood = [i for i, n in enumerate(lengths) if n > n_max]
    have = lambda key: [m[key] for m in ms if m.get(key) is not None]
    mean = lambda key: statistics.fmean(v) if (v := have(key)) else None  # None where no run has the value
    per_seed = have("oracle_ood")
    by_seed = {}
    for e in evals:
        if e["metrics"]["oracle_ood"] is not None:
            by_seed.setdefault(e["seed"], []).append(e["metrics"]["oracle_ood"])
    # --perturb replicates: the pooled within-seed Std, sqrt(sum_s sum_r (y_sr - ybar_s)^2 / sum_s (R_s - 1))
    dof = sum(len(v) - 1 for v in by_seed.values())
    spread = stats.std_interval(list(by_seed.values()) if dof else per_seed)
    within = {"replicates": True, "n_seeds": len(by_seed), "within_seed_std": math.sqrt(sum(
        (y - statistics.fmean(v)) ** 2 for v in by_seed.values() for y in v) / dof)} if dof else {}
    means = lambda *keys: {k: mean(k) for k in keys}
    return {**within, "task": evals[0]["task"], "schedule": evals[0]["schedule"], "seeds": len(evals),
            "seed_list": [e["seed"] for e in evals], "per_seed_oracle_ood": per_seed,
            "per_seed_val_k_ood": have("val_k_ood"), **means("oracle_ood", "val_k_ood", "id_k_ood"),
            "front90": metrics.front90([lengths[i] for i in ood],
                                       [statistics.fmean(m["oracle"][i] for m in ms) for i in ood]),
            "std": spread["std"], "std_lo": spread["lo"], "std_hi": spread["hi"],
            **means("gap", "policy_ood", "policy_id"), "exit_depth": mean("policy_depth_ood"),
            **means("flip_rate", "shortcut_ood"), "shortcut_name": ms[0].get("shortcut_ood_name"),
            **means("oracle_hard_ood", "val_k_hard_ood", "policy_hard_ood", "full_depth_ood"),
            "train_minutes": statistics.fmean(e.get("train_time_s", 0) / 60 for e in evals),
            # depth use (metrics.depth_use): does the row use its loop?
            **means("k1_ood", "loop_gain_ood", "k1_hard_ood", "loop_gain_hard_ood"),
            **{k: statistics.median(v) if (v := have(k)) else None for k in ("settle_k_ood", "settle_k_hard_ood")}}


HEADER = ["task", "setting", "seeds", "ID", "Oracle OOD", "val-K OOD", "Front@90", "Std [95% CI]", "Gap",
          "Policy OOD", "exit depth", "flip rate", "shortcut"]
# depth use (format_row(depth=True): evaluate.py's tables; the studies' committed tables stay as they were)
DEPTH_HEADER = ["K=1 OOD", "loop gain", "settle K"]
HARD_DEPTH_HEADER = ["hard: K=1 / gain / settle K"]


def format_row(r: dict, hard: bool, depth: bool = False) -> str:
    std = "-" if r["std"] is None else f"{r['std']:.1f}" + (
        f" [{r['std_lo']:.1f}, {r['std_hi']:.1f}]" if r.get("std_lo") is not None else "")
    below = r["oracle_ood"] is not None and r.get("shortcut_ood") is not None and r["oracle_ood"] <= r["shortcut_ood"]
    runs = (f"{r['seeds']} ({r['n_seeds']} seeds; within-seed Std {fmt(r['within_seed_std'], '.1f')})"
            if r.get("replicates") else fmt(r["seeds"], ""))
    # trm_halt: the policy's early exit, then TRM's full-depth protocol
    full = f" (full depth {fmt(r['full_depth_ood'])})" if r.get("full_depth_ood") is not None else ""
    oracle = fmt(r["oracle_ood"]) + (" (<= shortcut)" if below else "")
    cells = [r["task"], r["setting"], runs, fmt(r.get("policy_id")), oracle, fmt(r.get("val_k_ood")),
             fmt(r["front90"], ""), std, fmt(r["gap"]), fmt(r.get("policy_ood")) + full, fmt(r.get("exit_depth")),
             fmt(r.get("flip_rate"), ".3f"), fmt(r.get("shortcut_ood"))]
    if hard:
        cells.append(" / ".join(fmt(r.get(k)) for k in ("oracle_hard_ood", "val_k_hard_ood", "policy_hard_ood")))
    if depth:  # what one loop step answers, what the loop adds, where answers settle (DEPTH_HEADER)
        cells += [fmt(r.get("k1_ood")), fmt(r.get("loop_gain_ood")), fmt(r.get("settle_k_ood"), "g")]
        if hard:
            cells.append(" / ".join([fmt(r.get("k1_hard_ood")), fmt(r.get("loop_gain_hard_ood")),
                                     fmt(r.get("settle_k_hard_ood"), "g")]))
    return "| " + " | ".join(cells) + " |"


def paper_rows() -> list[dict]:
    """The published rows (results/paper.json), shaped like ours."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = read_json(os.path.join(root, "results", "paper.json"))["rows"]
    return [{**r, "setting": f"{r['setting']} (paper)"} for r in rows]


def comparisons(rows: list[dict], groups: list[list[dict]]) -> list[str]:
    """compare.pair_lines of every pair of rows of one task with two seeds each: Oracle OOD, and the hard subset's
    where the task has one."""
    lines = []
    for i, (a, ga) in enumerate(zip(rows, groups)):
        for b, gb in zip(rows[i + 1:], groups[i + 1:]):
            if a["task"] != b["task"] or min(len({e["seed"] for e in ga}), len({e["seed"] for e in gb})) < 2:
                continue
            keys = [("oracle_ood", "Oracle OOD")] + ([("oracle_hard_ood", "hard-subset Oracle OOD")]
                                                       if a.get("oracle_hard_ood") is not None else [])
            lines += compare.pair_lines(f"{a['task']} {a['setting']}", ga, b["setting"], gb, keys)
    return lines


def table(groups: dict, paper: bool = False):
    """(markdown, JSON rows) of grouped runs, the comparisons below the table. With paper, the published row of the
    same (task, setting) follows ours, and the other published rows of our tasks come last."""
    # a model scored at one fixed depth (the NTP baselines) has no K axis: its oracle, val-K and policy coincide
    one_depth = lambda g: len(g[0].get("K", ())) == 1
    rows = [{**table_row(g), "setting": label + (" (one depth: oracle = policy)" if one_depth(g) else "")}
            for (task, label), g in groups.items()]
    published = paper_rows() if paper else []
    hard = any(r["oracle_hard_ood"] is not None for r in rows)
    head = HEADER + (["hard: Oracle / val-K / policy"] if hard else []) + DEPTH_HEADER + (
        HARD_DEPTH_HEADER if hard else [])
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    row = lambda r: format_row(r, hard, depth=True)
    for r in rows:
        lines.append(row(r))
        lines += [row(p) for p in published if (p["task"], p["setting"]) == (r["task"], r["setting"] + " (paper)")]
    ours, tasks = {(r["task"], r["setting"] + " (paper)") for r in rows}, {r["task"] for r in rows}
    lines += [row(p) for p in published if p["task"] in tasks and (p["task"], p["setting"]) not in ours]
    lines += [""] + comparisons(rows, list(groups.values())) if len(rows) > 1 else []
    return "\n".join(lines), rows


def spliced(path: str, tag: str, lines: list[str], text: str = None) -> str:
    """The text of the Markdown file at path (or `text`, as another splice left it) with the lines between
    `<!-- tag:begin -->` and `<!-- tag:end -->` replaced by lines; nothing written. Missing markers: ValueError."""
    if text is None:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    begin, end = f"<!-- {tag}:begin -->", f"<!-- {tag}:end -->"
    if begin not in text or end not in text:
        raise ValueError(f"{path}: markers {begin} / {end} not found")
    head, rest = text.split(begin, 1)
    return head + begin + "\n" + "\n".join(lines) + "\n" + end + rest.split(end, 1)[1]


def splice(path: str, tag: str, lines: list[str]) -> None:
    """spliced, written atomically (files.atomic_write)."""
    new = spliced(path, tag, lines)
    atomic_write(path, lambda f: f.write(new.encode("utf-8")))
