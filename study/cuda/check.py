"""
The GPU check: what the CPU suite cannot show (tests/test_device.py simulates a second device).

    python study/cuda/check.py --part schedules   # every schedule: 3 training steps + an evaluation on
                                                    # CPU fp32, CUDA fp32 and CUDA bf16, from the same weights
    python study/cuda/check.py --part time        # ms per training step at --preset paper, fp32 vs bf16

Run by study/cuda/run.sh on the lent GPU machine; the output is committed as study/cuda/*.txt/json.
Nothing here is asserted: a difference between devices is printed, and read in results/README.md.
"""

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

if __package__ in (None, ""):  # run as `python study/cuda/check.py`: the repository is the import root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

import config  # noqa: E402
import metrics  # noqa: E402
from tasks import eval_set, train_batch  # noqa: E402
import train  # noqa: E402
from lab import rundir  # noqa: E402

DEV = "cuda"  # --device cpu: a smoke run of this script without a GPU


def bf16(amp):
    return torch.autocast(DEV.split(":")[0], dtype=torch.bfloat16) if amp else contextlib.nullcontext()


def setup(cfg, device):
    """(task, model, schedule, optimizer, data generator, depth generator): seed 0's run on `device`."""
    task, model, schedule = config.build(cfg)
    model.to(device), schedule.to(device)
    opt = torch.optim.AdamW(list(model.parameters()) + list(schedule.parameters()), lr=cfg.lr)
    return task, model, schedule, opt, torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)


def steps(cfg, device, amp, n_steps):
    """The losses of n_steps training steps and the evaluation after them, from seed 0's weights and batches."""
    task, model, schedule, opt, data, depth = setup(cfg, device)
    losses = []
    for _ in range(n_steps):
        x, y, _, Tn = train_batch(task, cfg.batch_size, cfg.n_min, cfg.n_max, data)
        s = train.train_step(model, schedule, opt, (x.to(device), y.to(device), Tn.to(device)), depth, 1.0, bf16(amp))
        losses.append(float(s["loss"]))
    sets = eval_set(task, [cfg.n_max, 2 * cfg.n_max], 32, seed=3)
    e = metrics.evaluate(model, schedule, task, sets, sets, cfg.T_test, cfg.n_max, device=device)
    return losses, e["acc"]


def part_schedules(names, n_steps=3):
    out = {}
    for name in names:  # dyck's recipe; the NTP baselines need an answer after a separator: copy's
        cfg = train.parse_args(["--task", "copy" if name.startswith("ntp") else "dyck", "--schedule", name])
        t = time.time()
        try:
            ref = steps(cfg, "cpu", False, n_steps)
            r = {"cpu_fp32": ref}
            for tag, amp in (("cuda_fp32", False), ("cuda_bf16", True)):
                losses, acc = steps(cfg, DEV, amp, n_steps)
                r[tag] = (losses, acc)
                r[tag + "_max_loss_diff"] = max(abs(a - b) for a, b in zip(losses, ref[0]))
                r[tag + "_max_acc_diff"] = max(abs(a - b) for ra, rb in zip(acc, ref[1]) for a, b in zip(ra, rb))
            r["ok"] = True
        except Exception as err:  # report and go on: one schedule's failure must not hide the others'
            r = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        r["seconds"] = round(time.time() - t, 1)
        out[name] = r
        print(f"{name:18} " + (f"loss cpu {r['cpu_fp32'][0][-1]:.4f}  |d| cuda fp32 {r['cuda_fp32_max_loss_diff']:.2e}"
              f"  bf16 {r['cuda_bf16_max_loss_diff']:.2e}  |d acc| fp32 {r['cuda_fp32_max_acc_diff']:.3f}"
              f"  bf16 {r['cuda_bf16_max_acc_diff']:.3f}" if r["ok"] else "FAILED " + r["error"]), flush=True)
    return out


def sync():
    if DEV != "cpu":
        torch.cuda.synchronize()


def part_time(tasks=("dyck", "addition"), schedules=("fixed", "window", "rl"), warmup=5, iters=20):
    out = []
    for task_name in tasks:
        for name in schedules:
            cfg = train.parse_args(["--preset", "paper", "--task", task_name, "--schedule", name])
            task, model, schedule, opt, data, depth = setup(cfg, DEV)
            batches = [train_batch(task, cfg.batch_size, cfg.n_min, cfg.n_max, data) for _ in range(warmup + iters)]
            row = {"task": task_name, "schedule": name, "d_model": cfg.d_model, "batch_size": cfg.batch_size,
                   "T_max": cfg.T_max, "max_iters": cfg.max_iters}
            for tag, amp in (("fp32", False), ("bf16", True)):
                times = []
                if DEV != "cpu":
                    torch.cuda.reset_peak_memory_stats()
                for i, (x, y, _, Tn) in enumerate(batches):
                    sync()
                    t = time.perf_counter()
                    train.train_step(model, schedule, opt, (x.to(DEV), y.to(DEV), Tn.to(DEV)), depth, 1.0,
                                     bf16(amp))
                    sync()
                    if i >= warmup:
                        times.append(time.perf_counter() - t)
                row[tag + "_ms"] = round(1000 * statistics.median(times), 2)
                row[tag + "_peak_MiB"] = round(torch.cuda.max_memory_allocated() / 2 ** 20, 1) if DEV != "cpu" else None
            row["bf16_speedup"] = round(row["fp32_ms"] / row["bf16_ms"], 2)
            row["paper_run_h_bf16"] = round(row["bf16_ms"] * cfg.max_iters / 3.6e6, 2)
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["schedules", "time"], required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--schedules", default=",".join(config.Config.__dataclass_fields__["schedule"].metadata["choices"]),
                    help="comma-separated schedules of --part schedules (default: all)")
    ap.add_argument("--quick", action="store_true", help="one task, one schedule, 2 steps: a smoke run")
    a = ap.parse_args()
    DEV = a.device
    torch.manual_seed(0)
    t = time.time()
    res = part_schedules(a.schedules.split(",")) if a.part == "schedules" else part_time(**(dict(tasks=("dyck",), schedules=("window",), warmup=1, iters=1) if a.quick else {}))
    with open(a.json, "w") as f:
        json.dump({"part": a.part, "results": res, "env": rundir.environment(), "wall_s": round(time.time() - t, 1)}, f, indent=1)
