"""
Evaluation: one forward pass to T_test per test batch gives every sample's prediction at every depth
K = 1..T_test; every metric below is computed from that trajectory. "OOD" means the test lengths
n > n_max (longer than any training input), "ID" the others.

    acc[n][K]      exact-match accuracy at length n with K loops (lengths x T_test)
    Oracle(n)      max_K acc[n][K]: the best K per length, chosen with the test labels. An upper bound,
                   biased upward on a finite set (a chance-level parity model scores ~58% with 30 K)
    val-K(n)       acc[n][K*(n)] with K*(n) = argmax_K of the same matrix on a *validation* draw of
                   length n (its own seed): the best depth per length, chosen without the test labels
    ID-K           acc[n][K_id] with one K_id per run, chosen on the validation draws of the ID lengths:
                   what a user without any OOD labels would get
    T(n) acc.      acc[n][min(T(n), T_test)]  (Fan et al.'s "oracle", named distinctly here)
    per-sample     Pr_x[some K is correct]
    Policy(n)      accuracy at the schedule's own test-time depth;  Gap = Oracle OOD - Policy OOD (pp)
    Front@90       the largest OOD length n with Oracle >= 90% at n and at every smaller OOD length
    flip rate      Pr_x[yhat_{K+1}(x) != yhat_K(x)] over the OOD samples, per K and its mean
    stable K       per length, how many K give accuracy >= 90%
    shortcut       exact match of trivial predictors on the same test sets: the task's rules (tasks.py:
                   dyck's counting rule, multiplication's b <= 2 answers), the most frequent answer and
                   the best constant per position (both fitted on the test set itself: upper bounds).
                   An accuracy at or below its shortcut is not evidence of learning.
    hard           the same accuracies on the task's hard subset (dyck: the prefix goes below zero;
                   multiplication: b >= 3), for tasks that define one

    python evaluate.py out/dyck-window                  # one run, or every run below a folder
    python evaluate.py results/dyck-window results/dyck-rl --paper    # the table over seeds, p-values
    python evaluate.py out/dyck-window --readouts --fit_gate linear   # post-hoc readouts (readouts.py)

Tables go to stdout (and to --out PREFIX.md / PREFIX.json when asked); --readouts writes readouts.json
into the run. Shapes: B batch, T sequence length, K loop steps, V vocabulary.
"""

import json
import math
import os
import statistics
import sys
from collections import Counter
from dataclasses import dataclass

import torch

from lab import plots
import readouts
from lab import rundir
from lab import tables
from lab.cli import atomic_write, fmt, opt, parse, run, write_json
from config import Config, build
from lab.stats import front90
from tasks import IGNORE, PAD, eval_set


# --- the one-pass evaluation ----------------------------------------------------------------------

def exact_match(preds: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(K, B, T) predicted tokens, (B, T) targets -> (K, B) bool: every scored position (y != IGNORE) right."""
    return ((preds == y) | (y == IGNORE)).all(-1)


@torch.no_grad()
def trajectory_correct(model, schedule, x, y, Tn, T_test):
    """One pass to T_test. Returns exact (K, B) bool: sample correct at depth K; preds (K, B, T) with -1 at
    unscored positions; the policy depth (B,) of the schedule's test rule."""
    logits, hidden = model(x, T_test, keep_hidden=True)  # (K, B, T, V), (K+1, B, T, D)
    preds = logits.argmax(-1)  # (K, B, T)
    depth = schedule.policy(Tn, T_test, hidden=hidden, mask=x != PAD).clamp(1, T_test)
    return exact_match(preds, y), preds.masked_fill(y == IGNORE, -1), depth


@torch.no_grad()
def score_sets(model, schedule, sets: dict, T_test: int, batch_size: int, device: str) -> dict:
    """{n: {"exact": (K, B) bool, "flip": (K-1, B) bool, "depth": (B,)}} on the CPU, for sets {n: (x, y, n, Tn)}."""
    if hasattr(schedule, "score_set"):  # the NTP baselines (ntp.py): greedy decoding at one fixed depth, K = 1 row
        return {n: schedule.score_set(model, x, y, batch_size, device) for n, (x, y, _, _) in sets.items()}
    out = {}
    for n, (x, y, _, Tn) in sets.items():
        parts = []
        for i in range(0, len(x), batch_size):
            xb, yb, tb = (t[i:i + batch_size].to(device) for t in (x, y, Tn))
            e, preds, d = trajectory_correct(model, schedule, xb, yb, tb, T_test)
            parts.append((e.cpu(), (preds[1:] != preds[:-1]).any(-1).cpu(), d.cpu()))
        out[n] = {k: torch.cat([p[i] for p in parts], -1) for i, k in enumerate(("exact", "flip", "depth"))}
    return out



def policy_id_acc(model, schedule, id_sets: dict, T_test: int, batch_size: int, device: str) -> float:
    """Exact match in % at the schedule's own test depth over the ID sets: the training loops' id_acc."""
    scores = score_sets(model.eval(), schedule, id_sets, T_test, batch_size, device)
    return 100 * torch.cat([v["exact"][v["depth"] - 1, torch.arange(len(v["depth"]))]
                            for v in scores.values()]).float().mean().item()

def samples(sets: dict):
    """(n, prompt, answer) of every sample of {n: (x, y, n, Tn)}: the tokens without padding and the
    targets at the scored positions."""
    for n, (x, y, _, _) in sets.items():
        for xi, yi in zip(x.tolist(), y.tolist()):
            yield n, [t for t in xi if t != PAD], [t for t in yi if t != IGNORE]


def shortcut_scores(task, sets: dict, keep=None) -> dict:
    """{predictor: [exact match per length]} of the trivial predictors on the sets (see the docstring);
    keep(x) -> bool: score only those samples (task.hard: the hard subset; None where a length has none)."""
    by_n = {n: [] for n in sorted(sets)}
    for n, x, ans in samples(sets):
        if keep is None or keep(x):
            by_n[n].append((x, tuple(ans)))
    out = {}
    for i, n in enumerate(by_n):
        answers = [a for _, a in by_n[n]]
        if not answers:
            continue
        preds = {"most frequent answer": [Counter(answers).most_common(1)[0][0]] * len(answers),
                 # the best constant answer per position: the most frequent token at each answer slot
                 "best constant per position": [tuple(Counter(col).most_common(1)[0][0] for col in zip(*answers))]
                 * len(answers)}
        for x, _ in by_n[n]:
            for name, p in task.shortcuts(x).items():
                preds.setdefault(name, []).append(tuple(p))
        for name, p in preds.items():
            out.setdefault(name, [None] * len(by_n))[i] = statistics.fmean(a == b for a, b in zip(p, answers))
    return out


@torch.no_grad()
def evaluate(model, schedule, task, test_sets: dict, val_sets: dict, T_test: int, n_max: int,
             batch_size: int = 256, device: str = "cpu") -> dict:
    """Score a model on fixed test sets and validation sets {n: (x, y, n, Tn)} (the same lengths); return
    eval.json's `lengths, K, acc, val_acc, hard, shortcuts, metrics`."""
    was_training = model.training
    model.eval()
    test = score_sets(model, schedule, test_sets, T_test, batch_size, device)
    val = score_sets(model, schedule, val_sets, T_test, batch_size, device)
    model.train(was_training)
    lengths = sorted(test_sets)
    # the depths of the K axis: 1..T_test from one looped pass; one fixed depth c for the NTP baselines, whose
    # oracle, val-K, ID-K and policy all collapse to the accuracy at c (and T(n) accuracy does not apply)
    fixed = hasattr(schedule, "score_set")
    K = [schedule.depth] if fixed else list(range(1, T_test + 1))
    # trm_halt: TRM's test protocol runs every supervision step, one depth N_sup * trm_steps (beside its early exit)
    full = getattr(schedule, "full_depth", None)
    hard = {n: [task.hard(x) for _, x, _ in samples({n: test_sets[n]})] for n in lengths}
    has_hard = any(h is not None for hs in hard.values() for h in hs)
    rows = []
    for n in lengths:
        exact, d = test[n]["exact"].float(), test[n]["depth"]
        policy_ok = exact[d - 1, torch.arange(len(d))]  # (B,)
        row = {"acc": exact.mean(1).tolist(), "val_acc": val[n]["exact"].float().mean(1).tolist(),
               "tn_acc": exact[min(task.T(n), T_test) - 1].mean().item() if not fixed else None,
               "per_sample_oracle": exact.max(0).values.mean().item(), "policy_acc": policy_ok.mean().item(),
               "policy_depth": torch.tensor(K)[d - 1].float().mean().item(),  # K[d-1]: the depth itself
               "flip": test[n]["flip"].float().mean(1).tolist()}
        if full:
            row["full_depth_acc"] = exact[min(full, T_test) - 1].mean().item()
        if has_hard:
            h = torch.tensor(hard[n], dtype=torch.bool)
            row["hard_frac"] = h.float().mean().item()
            row["hard_acc"] = exact[:, h].mean(1).tolist() if h.any() else None
            row["policy_hard_acc"] = policy_ok[h].mean().item() if h.any() else None
        rows.append(row)
    shortcuts = shortcut_scores(task, test_sets)
    m = metrics(lengths, rows, shortcuts, n_max, K)
    if has_hard:  # the shortcuts on the hard subset: what an accuracy there must beat
        m.update(hard_shortcut(lengths, shortcut_scores(task, test_sets, keep=task.hard), n_max))
    return {"lengths": lengths, "K": K, "acc": [r["acc"] for r in rows],
            "val_acc": [r["val_acc"] for r in rows], "hard_acc": [r.get("hard_acc") for r in rows] if has_hard else None,
            "shortcuts": shortcuts, "metrics": m, **({"full_depth": min(full, T_test)} if full else {})}


def hard_shortcut(lengths: list[int], scores: dict, n_max: int) -> dict:
    """The best shortcut's OOD exact match on the hard subset (mean over the OOD lengths that have hard
    samples), in %, and its name: `shortcut_hard_ood`, `shortcut_hard_ood_name`."""
    ood = [i for i, n in enumerate(lengths) if n > n_max]
    vals = {k: 100 * statistics.fmean(v[i] for i in ood if v[i] is not None) for k, v in scores.items()
            if any(v[i] is not None for i in ood)}
    best = max(vals, key=vals.get) if vals else None
    return {"shortcut_hard_ood": vals.get(best), "shortcut_hard_ood_name": best}


# --- metrics --------------------------------------------------------------------------------------

def argmax_first(v: list[float]) -> int:
    """Index of the largest value, the first (smallest K) among ties."""
    return max(range(len(v)), key=lambda k: (v[k], -k))


def metrics(lengths: list[int], rows: list[dict], shortcuts: dict, n_max: int, K: list[int] = None) -> dict:
    """Every summary of the per-length rows. Accuracies in %, Gap in pp; None where nothing was tested.
    K: the depth of each column of acc (default 1, 2, ..); one column for a fixed-depth model."""
    K = K or list(range(1, len(rows[0]["acc"]) + 1))
    ood = [i for i, n in enumerate(lengths) if n > n_max]
    ind = [i for i, n in enumerate(lengths) if n <= n_max]

    def pct(vals, idx):  # mean in %, over the lengths that have a value
        vals = [vals[i] for i in idx if vals[i] is not None]
        return 100 * statistics.fmean(vals) if vals else None

    acc = [r["acc"] for r in rows]
    oracle = [max(a) for a in acc]  # Oracle(n) = max_K acc[n][K]
    # val-K: K*(n) = argmax_K val_acc[n][K], reported on test
    val_k = [argmax_first(r["val_acc"]) for r in rows]
    val_k_acc = [a[k] for a, k in zip(acc, val_k)]
    # ID-K: one K for the run, the best mean validation accuracy over the ID lengths
    id_k = argmax_first([statistics.fmean(rows[i]["val_acc"][k] for i in ind) for k in range(len(acc[0]))]) if ind else None
    id_k_acc = [a[id_k] for a in acc] if id_k is not None else [None] * len(acc)
    policy = [r["policy_acc"] for r in rows]
    flip_idx = ood or ind
    flip_curve = [statistics.fmean(rows[i]["flip"][k] for i in flip_idx) for k in range(len(acc[0]) - 1)]
    m = {"oracle": oracle, "policy": policy, "val_k": [K[k] for k in val_k], "val_k_acc": val_k_acc,
         "id_k": None if id_k is None else K[id_k], "id_k_acc": id_k_acc,
         "tn_acc": [r["tn_acc"] for r in rows], "per_sample_oracle": [r["per_sample_oracle"] for r in rows],
         "policy_depth": [r["policy_depth"] for r in rows], "stable_interval": [sum(a >= 0.9 for a in x) for x in acc],
         "oracle_ood": pct(oracle, ood), "oracle_id": pct(oracle, ind), "val_k_ood": pct(val_k_acc, ood),
         "id_k_ood": pct(id_k_acc, ood), "policy_ood": pct(policy, ood), "policy_id": pct(policy, ind),
         "tn_ood": pct([r["tn_acc"] for r in rows], ood),
         "per_sample_oracle_ood": pct([r["per_sample_oracle"] for r in rows], ood),
         "front90": front90([lengths[i] for i in ood], [oracle[i] for i in ood]),
         "flip_curve": flip_curve, "flip_rate": statistics.fmean(flip_curve) if flip_curve else None,
         "policy_depth_ood": None if not ood else statistics.fmean(rows[i]["policy_depth"] for i in ood)}
    m["gap"] = None if m["oracle_ood"] is None else m["oracle_ood"] - m["policy_ood"]
    # shortcuts: each predictor's ID / OOD exact match, and the best of them
    m["shortcuts"] = {k: {"id": pct(v, ind), "ood": pct(v, ood)} for k, v in shortcuts.items()}
    for split in ("id", "ood"):
        vals = {k: v[split] for k, v in m["shortcuts"].items() if v[split] is not None}
        best = max(vals, key=vals.get) if vals else None
        m[f"shortcut_{split}"], m[f"shortcut_{split}_name"] = (vals[best] if best else None), best
    if "full_depth_acc" in rows[0]:  # trm_halt: TRM's full-depth protocol beside the policy's early exit
        m["full_depth_acc"] = [r["full_depth_acc"] for r in rows]
        m["full_depth_ood"], m["full_depth_id"] = pct(m["full_depth_acc"], ood), pct(m["full_depth_acc"], ind)
    if "hard_acc" in rows[0]:
        hard = [r["hard_acc"] for r in rows]
        m["hard_frac"] = [r["hard_frac"] for r in rows]
        m["oracle_hard"] = [None if h is None else max(h) for h in hard]
        m["oracle_hard_ood"] = pct(m["oracle_hard"], ood)
        m["val_k_hard_ood"] = pct([None if h is None else h[k] for h, k in zip(hard, val_k)], ood)
        m["id_k_hard_ood"] = None if id_k is None else pct([None if h is None else h[id_k] for h in hard], ood)
        m["policy_hard_ood"] = pct([r["policy_hard_acc"] for r in rows], ood)
    return m


def vs_shortcut(v, shortcut) -> str:
    """An accuracy in %, flagged when it does not beat the best shortcut."""
    return fmt(v) + "%" + (" (<= shortcut)" if v is not None and shortcut is not None and v <= shortcut else "")


def format_run(e: dict) -> str:
    m = e["metrics"]
    cuts = ", ".join(f"{k} {fmt(v['ood'])}%" for k, v in m["shortcuts"].items())
    lines = [f"{e.get('run_dir', '')}  task={e['task']} schedule={e['schedule']} seed={e['seed']}",
             f"  in-distribution: policy {fmt(m['policy_id'])}%  oracle {fmt(m['oracle_id'])}%"]
    if "oracle_hard_ood" in m:  # first the samples that test the rule: most others a shortcut also gets right
        cut = m.get("shortcut_hard_ood")
        lines.append(f"  hard subset ({fmt(100 * statistics.fmean(m['hard_frac']))}% of samples, those that test the "
                     f"rule), OOD: oracle {vs_shortcut(m['oracle_hard_ood'], cut)}  val-K {fmt(m['val_k_hard_ood'])}%  "
                     f"policy {fmt(m['policy_hard_ood'])}%  shortcut " + (f"{fmt(cut)}% ({m['shortcut_hard_ood_name']})"
                                                                          if cut is not None else "-"))
    lines += [f"  OOD, all samples: oracle {vs_shortcut(m['oracle_ood'], m['shortcut_ood'])}  val-K {fmt(m['val_k_ood'])}%  "
             f"ID-K {fmt(m['id_k_ood'])}% (K={m['id_k']})  policy {fmt(m['policy_ood'])}%  gap {fmt(m['gap'])} pp  "
             f"T(n) {fmt(m['tn_ood'])}%  per-sample oracle {fmt(m['per_sample_oracle_ood'])}%",
             f"       front@90 {fmt(m['front90'], '')}  flip rate {fmt(m['flip_rate'], '.3f')}  exit depth {fmt(m['policy_depth_ood'])}",
             f"  shortcut (OOD): {cuts}"]
    if e.get("diverged"):  # train.py: the final training loss above 2 ln V
        lines.append(f"  DIVERGED in training ({e['diverged']}): these numbers measure a broken run")
    if "full_depth_ood" in m:
        lines.append(f"  TRM's full depth K={e.get('full_depth')}: ID {fmt(m['full_depth_id'])}%  OOD {fmt(m['full_depth_ood'])}%"
                     f"  (the policy above exits early)")
    lines += ["  n:         " + " ".join(f"{n:>5}" for n in e["lengths"]),
              "  oracle:    " + " ".join(f"{a:5.2f}" for a in m["oracle"]),
              "  val-K:     " + " ".join(f"{a:5.2f}" for a in m["val_k_acc"]),
              "  policy:    " + " ".join(f"{a:5.2f}" for a in m["policy"]),
              "  stable K:  " + " ".join(f"{s:>5}" for s in m["stable_interval"])]
    return "\n".join(lines)


# --- runs on disk -------------------------------------------------------------------------------------

def find_runs(paths: list[str]) -> list[str]:
    """Every directory at or below the given paths that holds an eval.json, each once (a folder given
    twice, a folder and its subfolder, or a symlink to a folder already seen, count once). Symlinked
    folders are followed (a seed linked into a sweep is one of its seeds)."""
    runs, seen = [], set()
    for p in paths:
        if not os.path.isdir(p):
            raise ValueError(f"not a directory: {p!r}")
        for root, dirs, files in os.walk(p, followlinks=True):
            real = os.path.realpath(root)
            if real in seen:  # reached twice (a link, or a folder given twice): pruned, counted once
                dirs.clear()
                continue
            seen.add(real)
            dirs.sort()
            if "eval.json" in files:
                runs.append(root)
    return runs


REQUIRED = {"task": str, "schedule": str, "seed": int, "n_max": int, "lengths": list, "acc": list,
            "metrics": dict, "config": dict, "K": list}
# every metric that format_run, tables.py and plots.py read (hard: when the task has a hard subset)
METRICS = {"oracle", "oracle_ood", "oracle_id", "policy", "policy_ood", "policy_id", "val_k_ood", "val_k_acc", "id_k",
           "id_k_ood", "gap", "tn_ood", "per_sample_oracle_ood", "front90", "flip_curve", "flip_rate",
           "policy_depth_ood", "stable_interval", "shortcuts", "shortcut_ood", "shortcut_ood_name"}
HARD_METRICS = {"oracle_hard_ood", "val_k_hard_ood", "policy_hard_ood", "hard_frac"}
PER_LENGTH = ("oracle", "policy", "val_k_acc", "stable_interval")


def load_eval(run_dir: str) -> dict:
    """A run's eval.json, checked: one line naming the file and the problem otherwise."""
    path = os.path.join(run_dir, "eval.json")
    try:
        with open(path) as f:
            e = json.load(f)
        if not isinstance(e, dict):
            raise ValueError(f"a JSON object expected, got {type(e).__name__}")
        for key, typ in REQUIRED.items():
            if not isinstance(e.get(key), typ):
                raise ValueError(f"key {key!r} missing or not a {typ.__name__}")
        if len(e["acc"]) != len(e["lengths"]) or not all(
                isinstance(row, list) and row and all(isinstance(a, (int, float)) for a in row) for row in e["acc"]):
            raise ValueError("'acc' must hold one list of numbers per test length")
        m = e["metrics"]
        missing = METRICS - set(m) | (HARD_METRICS - set(m) if "oracle_hard_ood" in m else set())
        if missing:
            raise ValueError(f"metrics lack {', '.join(sorted(missing))}")
        short = [k for k in PER_LENGTH if not (isinstance(m[k], list) and len(m[k]) == len(e["lengths"]))]
        if short:
            raise ValueError(f"metrics {', '.join(short)} must hold one value per test length")
        if not isinstance(m["shortcuts"], dict) or not all(isinstance(v, dict) and "ood" in v for v in m["shortcuts"].values()):
            raise ValueError("metrics 'shortcuts' must map each predictor to its {'id', 'ood'} accuracy")
    except (OSError, ValueError) as err:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"malformed eval.json at {path}: {err}") from None
    e["run_dir"] = run_dir
    return e


def apply_ema(model, schedule, ema: dict) -> None:
    """Copy the EMA weights of a checkpoint ({"model": {name: tensor}, "schedule": {...}}) into the parameters."""
    with torch.no_grad():
        for part, module in (("model", model), ("schedule", schedule)):
            for name, p in module.named_parameters():
                p.copy_(ema[part][name])


def load_run(run_dir: str, saved: dict = None):
    """(cfg, task, model, schedule) of a train.py run with its ckpt.pt weights (the EMA weights when the run kept
    them, as train.py evaluated), in eval mode; saved: the config of the run's eval.json, which the checkpoint's
    must match."""
    path = os.path.join(run_dir, "ckpt.pt")
    if not os.path.isfile(path):
        raise ValueError(f"no checkpoint at {path}: readouts need a trained run (train.py --out_dir {run_dir})")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
        cfg = ck["config"]
        task, model, schedule = build(Config(**cfg))
        model.load_state_dict(ck["model"])
        schedule.load_state_dict(ck["schedule"])
        if ck.get("ema") is not None:
            apply_ema(model, schedule, ck["ema"])
    except Exception as err:
        msg = str(err).strip().splitlines()[0][:120] if str(err).strip() else ""
        raise ValueError(f"{path} is not a usable train.py checkpoint ({type(err).__name__}: {msg})") from None
    if bad := rundir.non_finite(ck):
        raise ValueError(f"{path} holds non-finite values ({bad}): nothing to read out")
    if saved is not None and (diff := rundir.differences(saved, Config(**cfg))):
        raise ValueError(f"{path} belongs to another run than {run_dir}/eval.json (eval.json has "
                         f"{', '.join(diff).replace('(now', '(ckpt.pt')})")
    if ck.get("step") != cfg["max_iters"]:
        raise ValueError(f"{path} is at step {ck.get('step')} of {cfg['max_iters']}: not the weights eval.json measured")
    return cfg, task, model.eval(), schedule.eval()


# --- command line ---------------------------------------------------------------------------------

@dataclass
class Args:
    run_dirs: tuple = opt((), "run directories, or folders holding several runs", positional=True)
    paper: bool = opt(False, "show the published rows (results/paper.json) beside ours", section="tables")
    out: str = opt("", "also write the table to OUT.md and OUT.json")
    plot: str = opt("", "write PNG plots into this folder (needs matplotlib)")
    readouts: bool = opt(False, "every post-hoc readout of each run (needs ckpt.pt); writes RUN/readouts.json",
                         section="readouts")
    fit_gate: str = opt("", "comma-separated gates to fit on the frozen trajectory: linear, mlp (PonderNet objective), "
                            "ouro (Ouro's loss-improvement target) (implies --readouts)")
    time: bool = opt(False, "wall time of early exit vs fixed depth (implies --readouts)")
    samples: int = opt(0, "samples per length of each readout split (0: the run's eval_samples)")
    tol: float = opt(0.0, "operating point: the smallest val depth within tol of the best val accuracy")
    device: str = opt("cpu", "device of the readout passes")

    def gates(self) -> list[str]:
        return [g for g in self.fit_gate.split(",") if g]


def parse_args(argv=None) -> Args:
    """Args, checked before any work: one line naming the bad value otherwise."""
    args = parse(Args, argv, prog="evaluate.py", doc=__doc__)
    if not args.run_dirs:
        raise ValueError("no run directories given: python evaluate.py DIR [DIR ...]")
    if set(args.gates()) - {"linear", "mlp", "ouro"}:
        raise ValueError(f"--fit_gate {args.fit_gate!r}: choose from linear, mlp, ouro")
    if args.samples < 0 or not math.isfinite(args.tol) or args.tol < 0:
        raise ValueError(f"--samples {args.samples} --tol {args.tol}: need samples >= 0 and a finite tol >= 0")
    if args.device != "cpu" and not (args.device.startswith("cuda") and torch.cuda.is_available()):
        raise ValueError(f"--device {args.device}: not available here; use cpu" + (", cuda" if torch.cuda.is_available() else ""))
    if args.out and not (os.path.isdir(os.path.dirname(os.path.abspath(args.out))) and
                         os.access(os.path.dirname(os.path.abspath(args.out)), os.W_OK)):
        raise ValueError(f"--out {args.out!r}: its folder does not exist or is not writable")
    for target in (args.out and [f"{args.out}.md", f"{args.out}.json"]) or []:
        if os.path.basename(target) in rundir.OWN_FILES:
            raise ValueError(f"--out {args.out!r}: would write {target}, the name of a run's own file; choose another prefix")
    if args.plot:  # created if missing (when the plots are drawn): its nearest existing parent must be writable
        p = os.path.abspath(args.plot)
        while not os.path.lexists(p):
            p = os.path.dirname(p)
        if not (os.path.isdir(p) and os.access(p, os.W_OK)):
            raise ValueError(f"--plot {args.plot!r}: {p} is not a writable folder")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    evals = [load_eval(r) for r in find_runs(args.run_dirs)]
    if not evals:
        raise ValueError(f"no runs (no eval.json) under {' '.join(args.run_dirs)}")
    gates = args.gates()
    reps = {}
    for e in evals:
        print(format_run(e))
        if args.readouts or gates or args.time:
            if not os.access(e["run_dir"], os.W_OK):
                raise ValueError(f"{e['run_dir']}: not writable (readouts.json goes there)")
            cfg, task, model, schedule = load_run(e["run_dir"], e["config"])
            if hasattr(schedule, "score_set"):
                raise ValueError(f"{e['run_dir']}: readouts stop a looped trajectory of one-shot predictions; "
                                 f"{cfg['schedule']} (ntp.py) generates its answer at one fixed depth")
            model.to(args.device)
            schedule.to(args.device)
            lengths, n = e["lengths"], args.samples or cfg["eval_samples"]
            # three disjoint draws of the test grid: test (the sets of eval.json), val (thresholds), fit (gates)
            seeds = {"test": cfg["eval_seed"], "val": cfg["eval_seed"] + 1, "fit": cfg["eval_seed"] + 2}
            splits = {s: eval_set(task, lengths, n, seed) for s, seed in seeds.items()}
            rep, fitted = readouts.readout_report(model, schedule, splits, cfg["T_test"], cfg["n_max"], PAD,
                                          gates, args.device, cfg["seed"], args.tol,
                                          meta={k: cfg[k] for k in ("task", "schedule", "seed")} | {"split_seeds": seeds})
            if args.time:
                rep["timing"] = readouts.time_exits(model, rep, fitted, splits["test"], cfg["T_test"], PAD, args.device)
            write_json(os.path.join(e["run_dir"], "readouts.json"), rep)
            print(readouts.format_readouts(rep) + ("\n" + readouts.format_timing(rep["timing"]) if args.time else ""))
        path = os.path.join(e["run_dir"], "readouts.json")
        if os.path.isfile(path):
            with open(path) as f:
                reps[e["run_dir"]] = json.load(f)
    groups = tables.group_runs(evals)
    md, rows = tables.table(groups, args.paper)
    print("\n" + md)
    if args.out:
        atomic_write(f"{args.out}.md", lambda f: f.write((md + "\n").encode()))
        write_json(f"{args.out}.json", {"rows": rows})
    if args.plot:
        try:
            os.makedirs(args.plot, exist_ok=True)
            for path in plots.plot_all(groups, reps, args.plot):
                print(f"plot: {path}")
        except ImportError as err:
            print(f"evaluate.py: --plot skipped: {err}", file=sys.stderr)


def cli(argv=None) -> int:
    """main() as a command: one line and exit code 2 for bad input (cli.run)."""
    return run(main, "evaluate.py", argv)


if __name__ == "__main__":
    sys.exit(cli())
