"""Block evaluations per sample, mean training depth and time per step of every schedule
(dyck, batch 64, train.py's default model), with and without the shrinking active set.

    python results/schedule_table.py --threads 1     # writes results/schedules.json, prints the table
"""

import argparse
import dataclasses
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import evaluate  # noqa: E402
import train  # noqa: E402
from halting import SCHEDULES  # noqa: E402
from tasks import train_batch  # noqa: E402

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--steps", type=int, default=10, help="timed steps per schedule (after 3 warm-up steps)")
p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
args = p.parse_args()
if args.threads:
    torch.set_num_threads(args.threads)

rows = []
print("| schedule | active set | block evals / sample | grad block evals / sample | mean depth | ms / step |")
print("|---|---|---|---|---|---|")
for name in SCHEDULES:
    for active in (True, False):
        cfg = train.parse_args(["--schedule", name] + ([] if active else ["--no-active_set"]))
        torch.manual_seed(0)
        task, model, sched = evaluate.build(dataclasses.asdict(cfg))
        opt = torch.optim.AdamW(list(model.parameters()) + list(sched.parameters()), lr=cfg.lr)
        data, depth = train.generators(0).values()
        stats, times = {}, []
        for it in range(3 + args.steps):
            x, y, _, Tn = train_batch(task, cfg.batch_size, cfg.n_min, cfg.n_max, data)
            t0 = time.perf_counter()
            _, _, s = train.train_step(model, sched, opt, (x, y, Tn), depth, cfg.grad_clip)
            if it >= 3:
                times.append(time.perf_counter() - t0)
                for k, v in s.items():
                    stats[k] = stats.get(k, 0.0) + v / args.steps
        r = {"schedule": name, "active_set": active, "block_evals": stats["block_evals"],
             "block_evals_grad": stats.get("block_evals_grad", stats["block_evals"]), "depth": stats["depth"],
             "ms_per_step": 1000 * sorted(times)[len(times) // 2]}
        rows.append(r)
        print(f"| {name} | {active} | {r['block_evals']:.2f} | {r['block_evals_grad']:.2f} | {r['depth']:.2f} "
              f"| {r['ms_per_step']:.0f} |", flush=True)
out = {"rows": rows, "steps": args.steps, "batch_size": 64, "task": "dyck", "env": train.environment()}
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "schedules.json"), "w") as f:
    json.dump(out, f, indent=1)
