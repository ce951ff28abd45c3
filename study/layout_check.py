"""
Did the textbook/lab redesign (issue 52) change any number? Every schedule, and the variants that take other
code paths (EMA, curriculum, truncated backpropagation, the reference unroll, stacked seeds, torchrun-free
sweeps), trained with tiny settings by an old checkout's train.py and by this one, on this machine, one thread
each; their checkpoints must be equal tensor by tensor (torch.equal), their eval.json metrics equal, and
their metrics.jsonl equal but for the wall clock.

    git worktree add /tmp/old 5f4ee36
    python study/layout_check.py /tmp/old --json results/checks/layout_check.json
    git worktree add /tmp/old 0407f9f   # this round (issues 68-71): results/checks/layout_check_0407f9f.json
    python study/layout_check.py /tmp/old --json results/checks/layout_check_0407f9f.json

A metric added since the old commit (eval.json's metrics and raw_metrics) is listed, not a difference: the metrics
both commits compute are compared.
"""

import os
import subprocess
import sys
import tempfile

if __package__ in (None, ""):  # run as `python study/layout_check.py`: the repository is the import root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from lab import checks, rundir  # noqa: E402
from lab.cli import run  # noqa: E402
from lab.files import parse_json, read_json, write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8", "--T_max", "6", "--T_test", "8",
        "--n_max", "6", "--max_iters", "20", "--log_interval", "5", "--eval_interval", "10", "--ckpt_interval", "10",
        "--eval_samples", "8", "--test_lengths", "3,8", "--threads", "1"]
NEW_KEYS = {"perturb": 0.0, "perturb_seed": 0}  # settings added since the old commit, at their defaults: not a change
CASES = {s: ["--schedule", s] + (["--r_bar", "3"] if s == "lognormal_poisson" else ["--task", "copy"] if "ntp" in s else []) for s in ("fixed", "matched", "window", "fixed_window", "lognormal_poisson", "multidepth",
                                        "fixed_prior", "rl", "ponder", "act", "trm_halt", "ntp", "ntp_pause", "ntp_loop")}
CASES.update({
    "window --no-active_set": ["--schedule", "window", "--no-active_set"],
    "rl --no-active_set": ["--schedule", "rl", "--no-active_set"],
    "window --bptt_k 2": ["--schedule", "window", "--bptt_k", "2"],
    "window --loss_weight token": ["--schedule", "window", "--loss_weight", "token"],
    "window --ema 0.9 --ema_start 5": ["--schedule", "window", "--ema", "0.9", "--ema_start", "5"],
    "rl --curriculum": ["--schedule", "rl", "--curriculum", "--curriculum_every", "2"],
    "window --no-looped": ["--schedule", "window", "--no-looped"],
    "trm_halt --halt_explore 0.5 --trm_steps 2": ["--schedule", "trm_halt", "--halt_explore", "0.5", "--trm_steps", "2"],
    "window --seeds 2 --stack 2": ["--schedule", "window", "--seeds", "2", "--stack", "2"],
    "rl --seeds 2 --stack 2": ["--schedule", "rl", "--seeds", "2", "--stack", "2"],
    "ponder --seeds 2": ["--schedule", "ponder", "--seeds", "2"],
})
CLOCK = ("ms_per_step", "elapsed_s")


def command(flags: list[str]) -> list[str]:
    """train.py's flags of a case: TINY and its own (an NTP baseline reads no --T_test: train.py refuses it)."""
    t = TINY.index("--T_test")
    return [*(TINY[:t] + TINY[t + 2:] if any(f.startswith("ntp") for f in flags) else TINY), *flags]


def train(tree: str, out: str, flags: list[str]) -> None:
    r = subprocess.run([sys.executable, "train.py", *command(flags), "--out_dir", out], cwd=tree, capture_output=True,
                       text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if r.returncode:
        raise SystemExit(f"{tree}: train.py {' '.join(flags)} failed:\n{r.stderr[-2000:]}")


def runs(out: str) -> dict:
    return {os.path.relpath(root, out): root for root, _, files in os.walk(out) if "eval.json" in files}


def same_tensors(a, b, path="") -> list[str]:
    """The paths where two checkpoint trees differ (tensors by torch.equal, the rest by ==)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        ok = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
        return [] if ok else [path]
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path} keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in same_tensors(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same_tensors(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]


def compare(old: str, new: str) -> dict:
    ro, rn = runs(old), runs(new)
    if set(ro) != set(rn) or not ro:
        return {"equal": False, "why": f"run directories differ: {sorted(ro)} vs {sorted(rn)}"}
    diffs, added = [], set()
    for k in ro:
        ck = [torch.load(os.path.join(d[k], "ckpt.pt"), map_location="cpu", weights_only=True) for d in (ro, rn)]
        for c in ck:
            c.pop("elapsed", None)  # the wall clock
            if c.get("ema", None) is None:  # no EMA: a stacked checkpoint of 0407f9f had no "ema" key, now None as unstacked
                c.pop("ema", None)
            c["config"].pop("out_dir", None)  # a temporary folder of each side
            for key, default in NEW_KEYS.items():
                if c["config"].get(key, default) == default:
                    c["config"].pop(key, None)
        diffs += [f"{k} ckpt{p}" for p in same_tensors(*ck)]
        ev = [read_json(os.path.join(d[k], "eval.json")) for d in (ro, rn)]
        for f in ("metrics", "acc", "val_acc", "hard_acc", "shortcuts", "K", "lengths", "raw_metrics", "full_depth"):
            a, b = ev[0].get(f), ev[1].get(f)
            if f in ("metrics", "raw_metrics") and isinstance(a, dict) and isinstance(b, dict):  # a metric added since
                added.update(set(b) - set(a))
                a, b = a, {m: v for m, v in b.items() if m in a}
            if a != b:
                diffs.append(f"{k} eval.json {f}")
        logs = [[{a: v for a, v in parse_json(line).items() if a not in CLOCK} for line in open(os.path.join(d[k], "metrics.jsonl"))]
                for d in (ro, rn)]
        if logs[0] != logs[1]:
            diffs.append(f"{k} metrics.jsonl")
    return {"equal": not diffs, "runs": len(ro), **({"differences": diffs} if diffs else {}),
            **({"metrics_added": sorted(added)} if added else {})}


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--json") or not os.path.isfile(os.path.join(argv[0], "train.py")):
        raise ValueError("usage: python study/layout_check.py OLD_CHECKOUT [--json PATH]")
    if len(argv) == 3:
        checks.check_output("--json", argv[2])
    old_tree = os.path.abspath(argv[0])
    old_commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=old_tree, capture_output=True, text=True).stdout.strip()
    out = {"what": "tiny runs of every schedule and code path, trained by the old checkout's train.py and by this one "
                   "(one thread each, same machine); checkpoints torch.equal, eval.json metrics and metrics.jsonl (wall "
                   "clock aside) equal", "old_commit": old_commit, "new_commit": rundir.environment()["git_commit"],
           "flags": TINY, "cases": {}, "env": rundir.environment()}
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in CASES.items():
            dirs = [os.path.join(tmp, side, name.replace(" ", "_")) for side in ("old", "new")]
            train(old_tree, dirs[0], flags)
            train(ROOT, dirs[1], flags)
            out["cases"][name] = compare(*dirs)
            print(f"{name}: {'equal' if out['cases'][name]['equal'] else out['cases'][name]}")
    out["all_equal"] = all(c["equal"] for c in out["cases"].values())
    if len(argv) == 3:
        write_json(argv[2], out)
    print("all equal" if out["all_equal"] else "DIFFERENT")
    return 0 if out["all_equal"] else 1


if __name__ == "__main__":
    sys.exit(run(main, "results/layout_check.py", sys.argv[1:]))
