"""
Evaluation: one forward pass to T_test per test batch gives every sample's prediction at every depth
K = 1..T_test; every metric of SPEC section 4 is computed from that trajectory.

    acc[n][K]        exact-match accuracy at length n with K loops (lengths x T_test)
    Oracle(n)        max_K acc[n][K]               (best K per length, chosen with labels)
    T(n) accuracy    acc[n][min(T(n), T_test)]     (Fan et al.'s "oracle", named distinctly)
    per-sample orc.  Pr_x[some K is correct]
    Policy(n)        accuracy at the schedule's own test-time depth
    Gap              Oracle OOD - Policy OOD, in percentage points
    Front@90         largest OOD grid length n with accuracy >= 90% at n and every smaller grid length
    flip rate at K   Pr_x[yhat_{K+1}(x) != yhat_K(x)]
    stable interval  per length, how many K give accuracy >= 90%

Usage: python evaluate.py RUN_DIR [RUN_DIR ...]   (each a run of train.py, or a folder of seed runs)

Shape legend: B batch, T sequence length, K loop steps, V vocabulary, N test lengths.
"""

import argparse
import json
import os
import statistics
import sys

import torch

from halting import IGNORE, make_schedule
from model import LoopedTransformer, ModelConfig
from tasks import PAD, get_task


# --- building a run's objects from its config -----------------------------------------------------

def build(cfg: dict):
    """(task, model, schedule) from a run's config dict (train.py's Config as a dict)."""
    task = get_task(cfg["task"])
    mcfg = ModelConfig(vocab_size=len(task.vocab), d_model=cfg["d_model"], n_head=cfg["n_head"],
                       n_layer=cfg["n_layer"], dropout=cfg["dropout"], inject=cfg["inject"],
                       looped=cfg["looped"], n_loops=cfg["T_test"])
    schedule = make_schedule(cfg["schedule"], **cfg)
    return task, LoopedTransformer(mcfg), schedule


# --- the one-pass evaluation ----------------------------------------------------------------------

@torch.no_grad()
def trajectory_correct(model, schedule, x, y, Tn, T_test):
    """One pass to T_test. Returns exact (K, B) bool: sample correct at depth K; preds (K, B, T);
    policy depth (B,) of the schedule's test rule."""
    need_hidden = schedule.needs_hidden
    out = model(x, T_test, keep_hidden=need_hidden)
    logits, hidden = out if need_hidden else (out, None)  # (K, B, T, V), (K+1, B, T, D)
    preds = logits.argmax(-1)  # (K, B, T)
    scored = y != IGNORE  # (B, T); exact match counts only scored positions
    exact = ((preds == y) | ~scored).all(-1)  # (K, B)
    mask = x != PAD  # (B, T) real tokens
    depth = schedule.policy(Tn, T_test, logits=logits, hidden=hidden, mask=mask).clamp(1, T_test)
    return exact, preds.masked_fill(~scored, -1), depth


@torch.no_grad()
def evaluate(model, schedule, task, sets: dict, T_test: int, batch_size: int = 256,
             device: str = "cpu", n_max: int = 19) -> dict:
    """Score a model on fixed test sets {n: (x, y, n, Tn)}; return eval.json's `lengths, acc, metrics`."""
    was_training = model.training
    model.eval()
    lengths, acc, rows = sorted(sets), [], []
    for n in lengths:
        x, y, _, Tn = sets[n]
        exact, flips, policy_ok, depth = [], [], [], []
        for i in range(0, len(x), batch_size):
            xb, yb, tb = (t[i:i + batch_size].to(device) for t in (x, y, Tn))
            e, preds, d = trajectory_correct(model, schedule, xb, yb, tb, T_test)
            exact.append(e.cpu())
            flips.append((preds[1:] != preds[:-1]).any(-1).cpu())  # (K-1, B)
            policy_ok.append(e[d - 1, torch.arange(len(d), device=d.device)].cpu())
            depth.append(d.cpu())
        exact, flips = torch.cat(exact, 1).float(), torch.cat(flips, 1).float()  # (K, B), (K-1, B)
        acc.append(exact.mean(1).tolist())
        Tn_clip = min(task.T(n), T_test)
        rows.append({"n": n, "tn_acc": exact[Tn_clip - 1].mean().item(),
                     "per_sample_oracle": exact.max(0).values.mean().item(),
                     "policy_acc": torch.cat(policy_ok).float().mean().item(),
                     "policy_depth": torch.cat(depth).float().mean().item(),
                     "flip": flips.mean(1).tolist()})
    model.train(was_training)
    return {"lengths": lengths, "K": list(range(1, T_test + 1)), "acc": acc,
            "metrics": metrics(lengths, acc, rows, n_max)}


def front90(lengths: list[int], curve: list[float]):
    """Largest grid length n with curve >= 0.9 at n and at every smaller grid length; None if the first
    fails. lengths: the OOD grid, ascending."""
    best = None
    for n, a in zip(lengths, curve):
        if a < 0.9:
            break
        best = n
    return best


def metrics(lengths, acc, rows, n_max: int) -> dict:
    """All SPEC section 4 metrics from acc[n][K] and the per-length rows. Accuracies in %, Gap in pp."""
    ood = [i for i, n in enumerate(lengths) if n > n_max]
    ind = [i for i, n in enumerate(lengths) if n <= n_max]
    oracle = [max(a) for a in acc]  # Oracle(n) = max_K acc[n][K]

    def mean_at(vals, idx):
        return statistics.fmean(vals[i] for i in idx) if idx else None

    def mean_pct(vals, idx):
        return None if not idx else 100 * mean_at(vals, idx)

    policy = [r["policy_acc"] for r in rows]
    # flip-rate curve over the OOD lengths: Pr_x[yhat_{K+1} != yhat_K], K = 1..T_test-1
    flip_idx = ood or ind
    flip_curve = [statistics.fmean(rows[i]["flip"][k] for i in flip_idx) for k in range(len(acc[0]) - 1)]
    m = {
        "oracle": oracle, "policy": policy,
        "tn_acc": [r["tn_acc"] for r in rows],
        "per_sample_oracle": [r["per_sample_oracle"] for r in rows],
        "policy_depth": [r["policy_depth"] for r in rows],
        "stable_interval": [sum(a >= 0.9 for a in accs) for accs in acc],
        "oracle_ood": mean_pct(oracle, ood), "policy_ood": mean_pct(policy, ood),
        "oracle_id": mean_pct(oracle, ind), "policy_id": mean_pct(policy, ind),
        "tn_ood": mean_pct([r["tn_acc"] for r in rows], ood),
        "per_sample_oracle_ood": mean_pct([r["per_sample_oracle"] for r in rows], ood),
        "front90": front90([lengths[i] for i in ood], [oracle[i] for i in ood]),
        "flip_curve": flip_curve,
        "flip_rate": statistics.fmean(flip_curve) if flip_curve else 0.0,
        "policy_depth_ood": mean_at([r["policy_depth"] for r in rows], ood),
    }
    m["gap"] = None if m["oracle_ood"] is None else m["oracle_ood"] - m["policy_ood"]
    return m


# --- tables over seeds ------------------------------------------------------------------------------

def table_row(evals: list[dict]) -> dict:
    """The SPEC table row of one (task, schedule) over seeds: Oracle OOD (%) | Front@90 | Std (pp) | Gap
    (pp), plus Policy OOD, mean exit depth and flip rate. Front@90 is read off the seed-mean oracle curve;
    Std is the sample standard deviation (ddof = 1) of the per-seed Oracle OOD."""
    ms = [e["metrics"] for e in evals]
    lengths = evals[0]["lengths"]
    ood = [i for i, n in enumerate(lengths) if n > evals[0]["n_max"]]
    mean_curve = [statistics.fmean(m["oracle"][i] for m in ms) for i in ood]
    oracle_ood = [m["oracle_ood"] for m in ms]
    return {"task": evals[0]["task"], "schedule": evals[0]["schedule"], "seeds": len(evals),
            "oracle_ood": statistics.fmean(oracle_ood),
            "front90": front90([lengths[i] for i in ood], mean_curve),
            "std": statistics.stdev(oracle_ood) if len(ms) > 1 else None,
            "gap": statistics.fmean(m["gap"] for m in ms),
            "policy_ood": statistics.fmean(m["policy_ood"] for m in ms),
            "policy_id": statistics.fmean(m["policy_id"] for m in ms if m["policy_id"] is not None)
            if any(m["policy_id"] is not None for m in ms) else None,
            "exit_depth": statistics.fmean(m["policy_depth_ood"] for m in ms),
            "flip_rate": statistics.fmean(m["flip_rate"] for m in ms)}


def fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


ROW_HEADER = "| task | schedule | seeds | Oracle OOD | Front@90 | Std | Gap | Policy OOD | exit depth | flip rate |"


def format_row(r: dict) -> str:
    return (f"| {r['task']} | {r['schedule']} | {r['seeds']} | {fmt(r['oracle_ood'])} | {fmt(r['front90'], '')} "
            f"| {fmt(r['std'])} | {fmt(r['gap'])} | {fmt(r['policy_ood'])} | {fmt(r['exit_depth'])} "
            f"| {fmt(r['flip_rate'], '.3f')} |")


def format_run(e: dict) -> str:
    m = e["metrics"]
    lines = [f"{e.get('run_dir', '')}  task={e['task']} schedule={e['schedule']} seed={e['seed']}",
             f"  in-distribution: policy {fmt(m['policy_id'])}%  oracle {fmt(m['oracle_id'])}%",
             f"  OOD: oracle {fmt(m['oracle_ood'])}%  policy {fmt(m['policy_ood'])}%  gap {fmt(m['gap'])} pp  "
             f"T(n) {fmt(m['tn_ood'])}%  per-sample oracle {fmt(m['per_sample_oracle_ood'])}%  "
             f"front@90 {fmt(m['front90'], '')}  flip rate {m['flip_rate']:.3f}  exit depth {fmt(m['policy_depth_ood'])}",
             "  n:         " + " ".join(f"{n:>5}" for n in e["lengths"]),
             "  oracle:    " + " ".join(f"{a:5.2f}" for a in m["oracle"]),
             "  policy:    " + " ".join(f"{a:5.2f}" for a in m["policy"]),
             "  stable K:  " + " ".join(f"{s:>5}" for s in m["stable_interval"])]
    return "\n".join(lines)


# --- command line -----------------------------------------------------------------------------------

def find_runs(paths: list[str]) -> list[str]:
    """Every directory at or below the given paths that holds an eval.json."""
    runs = []
    for p in paths:
        if not os.path.isdir(p):
            raise ValueError(f"not a directory: {p!r}")
        for root, dirs, files in os.walk(p):
            dirs.sort()
            if "eval.json" in files:
                runs.append(root)
    return runs


def load_eval(run_dir: str) -> dict:
    path = os.path.join(run_dir, "eval.json")
    try:
        with open(path) as f:
            e = json.load(f)
        for key in ("task", "schedule", "seed", "lengths", "acc", "metrics", "n_max"):
            if key not in e:
                raise ValueError(f"missing key {key!r}")
    except (OSError, ValueError) as err:
        raise ValueError(f"malformed eval.json at {path}: {err}") from None
    e["run_dir"] = run_dir
    return e


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="Print the metrics of train.py runs and the table row over seeds.")
    p.add_argument("run_dirs", nargs="+", help="run directories, or folders holding several runs")
    args = p.parse_args(argv)
    runs = find_runs(args.run_dirs)
    if not runs:
        raise ValueError(f"no runs (no eval.json) under {' '.join(args.run_dirs)}")
    evals = [load_eval(r) for r in runs]
    groups = {}
    for e in evals:
        print(format_run(e))
        groups.setdefault((e["task"], e["schedule"]), []).append(e)
    print("\n" + ROW_HEADER + "\n" + "|---" * 10 + "|")
    for g in groups.values():
        print(format_row(table_row(g)))


if __name__ == "__main__":
    try:
        main()
    except ValueError as err:
        print(f"evaluate.py: error: {err}", file=sys.stderr)
        sys.exit(2)
