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

Usage: python evaluate.py DIR [DIR ...]    every run (eval.json) under DIR: per-run metrics, and the table
                                           over seeds per (task, schedule) -> DIR/table.md, DIR/table.json
       --paper                             the published rows of SPEC section 4 beside ours
       --readouts [--fit-gate linear|mlp] [--time]    post-hoc readouts of each run (readouts.py), gates
                                           fitted on the frozen trajectory, early-exit wall time
       --plot                              PNG plots (plots.py; needs matplotlib)

Shape legend: B batch, T sequence length, K loop steps, V vocabulary, N test lengths.
"""

import argparse
import json
import os
import statistics
import sys

import torch

import readouts
from halting import IGNORE, make_schedule, per_sample_ce
from model import LoopedTransformer, ModelConfig
from tasks import PAD, eval_set, get_task, task_kwargs


# --- building a run's objects from its config -----------------------------------------------------

def build(cfg: dict):
    """(task, model, schedule) from a run's config dict (train.py's Config as a dict)."""
    task = get_task(cfg["task"], **task_kwargs(cfg["task"], cfg))
    mcfg = ModelConfig(vocab_size=len(task.vocab), d_model=cfg["d_model"], n_head=cfg["n_head"],
                       n_layer=cfg["n_layer"], dropout=cfg["dropout"], inject=cfg["inject"],
                       looped=cfg["looped"], n_loops=cfg["T_test"])
    schedule = make_schedule(cfg["schedule"], **cfg)
    return task, LoopedTransformer(mcfg), schedule


# --- the one-pass evaluation ----------------------------------------------------------------------

def exact_match(preds: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(K, B, T) predicted tokens, (B, T) targets -> (K, B) bool: every scored position (y != IGNORE) right."""
    return ((preds == y) | (y == IGNORE)).all(-1)


@torch.no_grad()
def trajectory_correct(model, schedule, x, y, Tn, T_test):
    """One pass to T_test. Returns exact (K, B) bool: sample correct at depth K; preds (K, B, T);
    policy depth (B,) of the schedule's test rule."""
    need_hidden = schedule.needs_hidden
    out = model(x, T_test, keep_hidden=need_hidden)
    logits, hidden = out if need_hidden else (out, None)  # (K, B, T, V), (K+1, B, T, D)
    preds = logits.argmax(-1)  # (K, B, T)
    scored, exact = y != IGNORE, exact_match(preds, y)  # (B, T), (K, B)
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
    oracle_ood = [m["oracle_ood"] for m in ms if m["oracle_ood"] is not None]

    def mean(key):  # None where no run has the value (e.g. no OOD length was tested)
        vals = [m[key] for m in ms if m.get(key) is not None]
        return statistics.fmean(vals) if vals else None

    return {"task": evals[0]["task"], "schedule": evals[0]["schedule"], "seeds": len(evals),
            "oracle_ood": mean("oracle_ood"), "front90": front90([lengths[i] for i in ood], mean_curve),
            "std": statistics.stdev(oracle_ood) if len(oracle_ood) > 1 else None,
            "gap": mean("gap"), "policy_ood": mean("policy_ood"), "policy_id": mean("policy_id"),
            "exit_depth": mean("policy_depth_ood"), "flip_rate": mean("flip_rate")}


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


# --- readouts of a trained run (readouts.py holds the math) --------------------------------------------

def load_run(run_dir: str):
    """(cfg, task, model, schedule) of a train.py run with its ckpt.pt weights, in eval mode."""
    path = os.path.join(run_dir, "ckpt.pt")
    if not os.path.isfile(path):
        raise ValueError(f"no checkpoint at {path}: readouts need a trained run (train.py --out_dir {run_dir})")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
        cfg = ck["config"]
        task, model, schedule = build(cfg)
        model.load_state_dict(ck["model"]), schedule.load_state_dict(ck["schedule"])
    except Exception as err:
        msg = str(err).strip().splitlines()[0][:120] if str(err).strip() else ""
        raise ValueError(f"{path} is not a usable train.py checkpoint ({type(err).__name__}: {msg})") from None
    return cfg, task, model.eval(), schedule.eval()


@torch.no_grad()
def collect(model, schedule, sets: dict, T_test: int, batch_size: int = 256, device: str = "cpu",
            pooled: bool = False) -> dict:
    """One pass to T_test per batch of the sets {n: (x, y, n, Tn)}: every readout signal {name: (K, B)},
    exact match (K, B), per-step CE (K, B) (what a gate is fitted to), the schedule's policy depth (B,),
    n (B,), T(n) (B,) and, with pooled, the states pooled over real tokens (K, B, D)."""
    parts = []
    for n in sorted(sets):
        x, y, ns, Tn = sets[n]
        for i in range(0, len(x), batch_size):
            xb, yb, tb = (t[i:i + batch_size].to(device) for t in (x, y, Tn))
            logits, hidden = model(xb, T_test, keep_hidden=True)  # (K, B, T, V), (K+1, B, T, D)
            mask = xb != PAD
            part = {"signals": readouts.trajectory_signals(logits, hidden, yb != IGNORE),
                    "correct": exact_match(logits.argmax(-1), yb), "ce": per_sample_ce(logits, yb),
                    "policy": schedule.policy(tb, T_test, logits=logits, hidden=hidden, mask=mask).clamp(1, T_test),
                    "n": ns[i:i + batch_size], "Tn": tb}
            if pooled:
                part["pooled"] = readouts.pool(hidden[1:], mask)
            parts.append(part)
    # per-step tensors (K, B, ...) join along the batch dim 1, per-sample ones (B,) along dim 0
    out = {k: torch.cat([p[k] for p in parts], 0 if k in ("policy", "n", "Tn") else 1).cpu()
           for k in parts[0] if k != "signals"}
    out["signals"] = {k: torch.cat([p["signals"][k] for p in parts], 1).cpu() for k in parts[0]["signals"]}
    return out


def readout_report(model, schedule, task, cfg: dict, gates=(), samples: int = None, device: str = "cpu",
                   batch_size: int = 256, tol: float = 0.0):
    """Every readout of a frozen model. Three disjoint draws of the test grid: test (eval_seed, the sets of
    eval.json), val (eval_seed+1: thresholds, alphas and D@X are chosen here) and fit (eval_seed+2: gates
    are trained here). Returns (readouts.json dict, data {split: collect(...)}, fitted gates)."""
    was_training = model.training
    model.eval()
    lengths = sorted({int(s) for s in cfg["test_lengths"].split(",") if s.strip()})
    samples = samples or cfg["eval_samples"]
    seeds = {"test": cfg["eval_seed"], "val": cfg["eval_seed"] + 1, "fit": cfg["eval_seed"] + 2}
    splits = ["test", "val"] + (["fit"] if gates else [])
    data = {s: collect(model, schedule, eval_set(task, lengths, samples, seeds[s]), cfg["T_test"], batch_size,
                       device, pooled=bool(gates)) for s in splits}
    model.train(was_training)
    fitted = {f"gate_{k}": readouts.fit_gate(k, data["fit"]["pooled"], data["fit"]["ce"], seed=cfg["seed"])
              for k in gates}
    rep = {"task": cfg["task"], "schedule": cfg["schedule"], "seed": cfg["seed"], "n_max": cfg["n_max"],
           "T_test": cfg["T_test"], "lengths": lengths, "samples": samples, "split_seeds": seeds,
           "readouts": readouts.all_readouts(data["val"], data["test"], fitted, tol=tol)}
    return rep, data, fitted


def format_readouts(rep: dict) -> str:
    """One line per readout: operating point (chosen on val) and D@X, all on test; accuracies in %."""
    ood = [i for i, n in enumerate(rep["lengths"]) if n > rep["n_max"]]
    lines = [f"readouts  task={rep['task']} schedule={rep['schedule']} seed={rep['seed']}  (val-chosen, test-reported)",
             "| readout | threshold | test acc | depth | OOD acc | OOD depth | D@90 | D@95 | D@99 |", "|---" * 9 + "|"]
    for name, r in rep["readouts"].items():
        c, g = r["chosen"], r["chosen"]["by_group"]
        ood_acc = 100 * statistics.fmean(g["test_acc"][i] for i in ood) if ood else None
        ood_d = statistics.fmean(g["test_depth"][i] for i in ood) if ood else None
        thr = c.get("threshold")
        dx = [f"{d['test_depth']:.1f} ({100 * d['test_acc']:.0f}%)" if d else "-" for d in r.get("d_at", {}).values()]
        lines.append(f"| {name} | {fmt(None if thr is None else r['sign'] * thr, '.3g')} | {100 * c['test_acc']:.1f} "
                     f"| {c['test_depth']:.2f} | {fmt(ood_acc)} | {fmt(ood_d, '.2f')} | " + " | ".join(dx or ["-"] * 3) + " |")
    return "\n".join(lines)


def time_exits(model, rep: dict, fitted: dict, task, cfg: dict, device: str = "cpu", batch_size: int = 256) -> list:
    """Wall time on the test split: fixed depth T_test and the val-chosen fixed depth against every online
    readout at its val-chosen threshold (readouts.time_inference)."""
    sets = eval_set(task, rep["lengths"], rep["samples"], rep["split_seeds"]["test"])
    batches = []
    for x, y, _, _ in sets.values():
        for i in range(0, len(x), batch_size):
            xb, yb = x[i:i + batch_size].to(device), y[i:i + batch_size].to(device)
            batches.append((xb, yb, yb != IGNORE, xb != PAD))
    T, R = cfg["T_test"], rep["readouts"]
    rules = [("fixed", T, None), ("fixed", int(R["fixed"]["chosen"]["threshold"]), None)]
    gates = {k: g.to(device) for k, g in fitted.items()}
    rules += [(k, R[k]["chosen"]["threshold"], gates.get(k)) for k in list(readouts.SIGNALS) + ["stable", *gates]]
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else None
    return readouts.time_inference(model, batches, rules, T, sync=sync)


# --- the multi-run table and the published rows -------------------------------------------------------

# SPEC section 4, seed 000 (paper scale; 32 seeds for addition, 18 otherwise):
# (task, setting, Oracle OOD %, Front@90, Std pp, Gap pp)
PAPER = [("addition", "fixed K=20", 34.2, 25, 7.4, 16.4), ("addition", "matched", 22.1, 20, 9.9, 7.8),
         ("addition", "window w=5", 30.9, 25, 5.9, 1.3), ("addition", "rl", 45.0, 30, 2.7, 5.8),
         ("dyck", "fixed K=20", 84.6, 30, 23.8, 32.8), ("dyck", "matched", 66.6, 25, 33.3, 32.4),
         ("dyck", "window w=5", 88.2, 35, 18.7, 2.8), ("dyck", "rl", 97.5, 60, 3.6, 4.3),
         ("unique_set", "fixed K=20", 66.1, 20, 34.0, 41.7), ("unique_set", "matched", 78.5, 35, 17.5, 14.0),
         ("unique_set", "window w=5", 73.2, 40, 9.3, 4.4), ("unique_set", "rl", 82.8, 40, 3.3, 5.3),
         ("copy", "fixed K=20", 62.3, 25, 27.7, 29.3), ("copy", "matched", 68.7, 35, 13.2, 24.9),
         ("copy", "window w=5", 55.9, 30, 8.5, 1.5), ("copy", "rl", 43.2, 25, 2.7, 1.9),
         # ablations (addition); Front@90 and Gap not published
         ("addition", "fixed_window K=20 w=5", 34.2, None, 4.7, None), ("addition", "ponder", 29.4, None, 15.1, None),
         ("addition", "multidepth w=5", 27.6, None, 3.9, 1.4)]  # multidepth: policy 26.2


def paper_row(task, setting, oracle, front, std, gap) -> dict:
    return {"task": task, "schedule": f"{setting} (paper)", "seeds": 32 if task == "addition" else 18,
            "oracle_ood": oracle, "front90": front, "std": std, "gap": gap, "policy_ood": None,
            "exit_depth": None, "flip_rate": None}


def setting(e: dict) -> str:
    """The schedule with the settings that tell its runs apart: 'fixed K=20', 'window w=5', 'rl'."""
    c, s = e.get("config", {}), e["schedule"]
    if s in ("fixed", "fixed_window") and "K" in c:
        s += f" K={c['K']}"
    if s in ("window", "fixed_window", "multidepth") and "w" in c:
        s += f" w={c['w']}"
    return s


def group_runs(evals: list) -> dict:
    """{(task, setting): [eval dicts]}: the seeds of one table row."""
    groups = {}
    for e in evals:
        groups.setdefault((e["task"], setting(e)), []).append(e)
    return groups


def runs_table(groups: dict, paper: bool = False):
    """The SPEC table of grouped runs: (markdown, JSON rows). With paper, the published row of the same
    (task, setting) follows ours, and the other published rows of our tasks come last."""
    rows, lines = [], [ROW_HEADER, "|---" * 10 + "|"]
    for (task, label), g in groups.items():
        row = {**table_row(g), "setting": label}
        rows.append(row)
        lines.append(format_row({**row, "schedule": label}))
        lines += [format_row(paper_row(*p)) for p in PAPER if paper and p[:2] == (task, label)]
    if paper:
        lines += [format_row(paper_row(*p)) for p in PAPER
                  if p[0] in {t for t, _ in groups} and p[:2] not in groups]
    return "\n".join(lines), rows


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
    p = argparse.ArgumentParser(description="Metrics of train.py runs, the table over seeds, readouts and plots.")
    p.add_argument("run_dirs", nargs="+", help="run directories, or folders holding several runs")
    p.add_argument("--paper", action="store_true", help="show the published rows (SPEC section 4) beside ours")
    p.add_argument("--plot", action="store_true", help="write PNG plots beside the runs (needs matplotlib)")
    p.add_argument("--readouts", action="store_true", help="every post-hoc readout of each run (needs ckpt.pt); "
                   "writes readouts.json in the run")
    p.add_argument("--fit-gate", dest="fit_gate", action="append", default=[], choices=["linear", "mlp"],
                   help="also fit this gate on the frozen trajectory (repeatable); implies --readouts")
    p.add_argument("--time", action="store_true", help="wall time of early exit vs fixed depth; implies --readouts")
    p.add_argument("--samples", type=int, default=None, help="samples per length of each readout split "
                   "(default: the run's eval_samples)")
    p.add_argument("--tol", type=float, default=0.0, help="operating point: smallest val depth within tol of the "
                   "best val accuracy")
    p.add_argument("--device", default="cpu", help="device of the readout passes")
    args = p.parse_args(argv)
    if args.samples is not None and args.samples < 1:
        raise ValueError(f"--samples {args.samples}: must be >= 1")
    runs = find_runs(args.run_dirs)
    if not runs:
        raise ValueError(f"no runs (no eval.json) under {' '.join(args.run_dirs)}")
    evals = [load_eval(r) for r in runs]
    reps = {}
    for e in evals:
        print(format_run(e))
        if args.readouts or args.fit_gate or args.time:
            cfg, task, model, schedule = load_run(e["run_dir"])
            model.to(args.device), schedule.to(args.device)
            rep, _, fitted = readout_report(model, schedule, task, cfg, args.fit_gate, args.samples, args.device,
                                            tol=args.tol)
            if args.time:
                rep["timing"] = time_exits(model, rep, fitted, task, cfg, args.device)
            with open(os.path.join(e["run_dir"], "readouts.json"), "w") as f:
                json.dump(rep, f, indent=1)
            print(format_readouts(rep) + ("\n" + readouts.format_timing(rep["timing"]) if args.time else ""))
        path = os.path.join(e["run_dir"], "readouts.json")
        if os.path.isfile(path):
            with open(path) as f:
                reps[e["run_dir"]] = json.load(f)
    groups = group_runs(evals)
    md, rows = runs_table(groups, args.paper)
    out = os.path.commonpath([os.path.abspath(d) for d in args.run_dirs])
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(out, "table.json"), "w") as f:
        json.dump({"rows": rows, "paper": [paper_row(*r) for r in PAPER] if args.paper else []}, f, indent=1)
    print("\n" + md + f"\n\nwrote {os.path.join(out, 'table.md')} and table.json")
    if args.plot:
        try:
            import plots
            for path in plots.plot_all(groups, reps, out):
                print(f"plot: {path}")
        except ImportError as err:
            print(f"evaluate.py: --plot skipped: {err}", file=sys.stderr)


def run_cli(main, prog: str, argv=None) -> int:
    """Run main(argv) as a command: a user error (ValueError) becomes one line on stderr and exit code 2,
    a numerical fault (FloatingPointError) one line and exit code 1; never a traceback for either."""
    try:
        main(argv)
    except (ValueError, FloatingPointError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2 if isinstance(err, ValueError) else 1
    return 0


def cli(argv=None) -> int:
    return run_cli(main, "evaluate.py", argv)


if __name__ == "__main__":
    sys.exit(cli())
