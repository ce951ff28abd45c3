"""
The H200 check of issue 32: what stacking seeds (train.py --stack S, stack.py) buys on a GPU. One command,
at most --budget seconds (default 480: a 9-minute lease with room for the start), rows in priority order,
the JSON rewritten after every row so a cut run keeps what it measured:

    today     the unstacked step (train.py's train_step) at --preset paper, dyck and addition, window:
              IEEE fp32, TF32, bf16 autocast
    stacked   chunks.Chunk steps at --preset paper (bf16 autocast, TF32: the preset's defaults), S = 1, 8, 32:
              eager (the active set padded over the seeds), --static, --static + CUDA graphs
              (torch.compile mode="reduce-overhead"); window first, then fixed and rl; dyck and addition
    estimate  the primary table (4 schedules x 4 tasks x 24 seeds x 100k steps) in GPU-hours at the best
              measured seed-steps/s per task, against today's rate

Each row: ms per step, seed-steps per second, peak GPU memory of the step; a failed row (out of memory,
a compile error) records its error and the rest goes on. Nothing is asserted.

    python study/cuda/stack_check.py --json $OUT/stack.json            # on the H200
    python study/cuda/stack_check.py --smoke --json /tmp/stack.json    # a CPU smoke run at a tiny size, seconds

A graphs row starts only with 150 s of the budget left (compiling takes a minute or more); --smoke skips
them (on a 2-core CPU the compile of the static step took ~6 minutes; it then ran, at 0.8x the eager
time of the same step: compiling works there, CUDA graphs are the GPU's part).
"""

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import time

if __package__ in (None, ""):  # run as `python study/cuda/stack_check.py`: the repository is the import root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

import bench  # noqa: E402
import config  # noqa: E402
import train  # noqa: E402
from lab import chunks  # noqa: E402

# --smoke: the paper preset shrunk to seconds on a CPU
SMOKE = ["--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "4", "--n_max", "4", "--T_max", "5",
         "--T_test", "6", "--eval_samples", "4", "--test_lengths", "3,5"]  # fixed: c = T_max = 5
TABLE = {"schedules": 4, "tasks": 4, "seeds": 24, "steps": 100_000}  # the primary table, today's estimate ~300 h


def parse(argv=None):
    p = argparse.ArgumentParser(prog="stack_check.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", required=True, help="where the rows go (rewritten after each row)")
    p.add_argument("--budget", type=float, default=480.0, help="seconds; the rows left when it is spent are skipped")
    p.add_argument("--smoke", action="store_true", help="CPU, a tiny size, S = 1, 2, few steps: does the script run")
    p.add_argument("--steps", type=int, default=8, help="timed steps per row (median), after 3 untimed")
    return p.parse_args(argv)


def paper_cfg(task: str, schedule: str, smoke: bool, **over) -> config.Config:
    cfg = train.parse_args(["--preset", "paper", "--task", task, "--schedule", schedule] + (SMOKE if smoke else []))
    return dataclasses.replace(cfg, **over)


@contextlib.contextmanager
def tf32(on: bool):
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def measure(step, steps: int, device: str, warm: int = 3) -> dict:
    """ms per step (median of `steps` after `warm`) and the peak memory of the timed steps."""
    for it in range(warm):
        step(it)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = [bench.timed(lambda: step(warm + i), device)[0] for i in range(steps)]
    peak = torch.cuda.max_memory_allocated() / 2 ** 30 if cuda else None
    return {"ms": 1e3 * statistics.median(times), "peak_gib": peak}


def today_step(cfg: config.Config, device: str, precision: str):
    """train.py's unstacked step (one seed) in fp32 (IEEE), tf32 or bf16 (autocast) as a function it -> stats."""
    one = bench.separate_run(dataclasses.replace(cfg, amp=False), device)
    if precision != "bf16":
        return one
    task, model, schedule = config.build(cfg)
    model.to(device), schedule.to(device)
    opt = torch.optim.AdamW(list(model.parameters()) + list(schedule.parameters()), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                            weight_decay=cfg.weight_decay)
    gens = {k: torch.Generator().manual_seed(config.stream(config.seeds_of(cfg)[k], k)) for k in ("data", "depth")}
    amp = torch.autocast(torch.device(device).type, dtype=torch.bfloat16)

    def bf16(it):
        x, y, _, Tn = train.train_batch(task, cfg.batch_size, cfg.n_min, cfg.n_max, gens["data"])
        return train.train_step(model, schedule, opt, tuple(t.to(device) for t in (x, y, Tn)), gens["depth"], cfg.grad_clip, amp)
    return bf16


def rows_plan(smoke: bool) -> list[tuple]:
    """(kind, task, schedule, S or precision, mode) in priority order."""
    Ss = (1, 2) if smoke else (1, 8, 32)
    plan = [("today", t, "window", p, "") for t in ("dyck", "addition") for p in ("fp32", "tf32", "bf16")]
    for schedules in (("window",), ("fixed", "rl")):
        for modes in (("eager", "static"), ("graphs",)):
            plan += [("stacked", t, s, S, m) for s in schedules for t in ("dyck", "addition") for m in modes for S in Ss
                     if not (m == "graphs" and S == 1)]
    return plan


def main(argv=None) -> dict:
    a = parse(argv)
    device = "cpu" if a.smoke else "cuda"
    t_start = time.time()
    out = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke)", "torch": torch.__version__,
           "budget_s": a.budget, "rows": []}
    for kind, task, schedule, size, mode in rows_plan(a.smoke):
        row = {"kind": kind, "task": task, "schedule": schedule, "S" if kind == "stacked" else "precision": size}
        if mode:
            row["mode"] = mode
        left = a.budget - (time.time() - t_start)
        if left < (150 if mode == "graphs" else 10) or (a.smoke and mode == "graphs"):  # compiling takes minutes
            row["error"] = "skipped: " + ("--smoke (compiling takes minutes on a CPU)" if a.smoke else f"{left:.0f} s of the budget left")
            out["rows"].append(row)
            continue
        t_row = time.time()
        try:
            if kind == "today":
                cfg = paper_cfg(task, schedule, a.smoke)
                with tf32(size == "tf32"):
                    m = measure(today_step(cfg, device, size), a.steps, device)
                m["seed_steps_per_s"] = 1e3 / m["ms"]
            else:
                cfg = paper_cfg(task, schedule, a.smoke, stack=size, static=mode != "eager", compile=mode == "graphs")
                ch = chunks.Chunk([dataclasses.replace(cfg, seed=k) for k in range(size)], device)
                with tf32(cfg.tf32):
                    m = measure(ch.step, a.steps, device)
                m["seed_steps_per_s"] = size * 1e3 / m["ms"]
                del ch
            row.update(m)
        except Exception as err:  # out of memory, a compile failure: recorded, the next row goes on
            row["error"] = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:200]}"
        row["wall_s"] = time.time() - t_row
        if device == "cuda":
            torch.cuda.empty_cache()
        out["rows"].append(row)
        print(json.dumps(row), flush=True)
        out["estimate"] = estimate(out["rows"])
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    return out


def estimate(rows: list) -> dict:
    """GPU-hours of the primary table at today's bf16 window rate and at the best stacked window rate, per task."""
    n = TABLE["schedules"] * TABLE["seeds"] * TABLE["steps"] / 3600  # seed-steps of one task's rows, in hours x rate
    est = {}
    for task in ("dyck", "addition"):
        today = [r["seed_steps_per_s"] for r in rows if r["kind"] == "today" and r["task"] == task and "ms" in r]
        best = [r["seed_steps_per_s"] for r in rows if r["kind"] == "stacked" and r["task"] == task
                and r["schedule"] == "window" and "ms" in r]
        est[task] = {"today_best_seed_steps_per_s": max(today, default=None), "stacked_best_seed_steps_per_s": max(best, default=None),
                     "table_gpu_hours_today": TABLE["tasks"] * n / max(today) if today else None,
                     "table_gpu_hours_stacked": TABLE["tasks"] * n / max(best) if best else None,
                     "speedup": max(best) / max(today) if best and today else None}
    return est


if __name__ == "__main__":
    main()
