"""Block applications per sample, mean training depth and time per step of every schedule (dyck, batch 64,
train.py's default model), with and without the shrinking active set.

    python study/schedule_table.py --threads 2     # writes results/schedules.json, prints the table
"""

import os
import sys
import time
from dataclasses import dataclass

import torch

if __package__ in (None, ""):  # run as `python study/schedule_table.py`: the repository is the import root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
import config  # noqa: E402
from halting import SCHEDULES  # noqa: E402
import train  # noqa: E402
from lab import rundir  # noqa: E402
from config import opt  # noqa: E402
from lab.cli import parse, run  # noqa: E402
from lab.files import write_json


@dataclass
class Args:
    steps: int = opt(10, "timed steps per schedule (after 3 warm-up steps)")
    threads: int = opt(0, "torch threads (0: torch's default)")


def main(argv=None) -> None:
    args = parse(Args, argv, prog="schedule_table.py", doc=__doc__)
    if args.steps < 1 or args.threads < 0:
        raise ValueError(f"--steps {args.steps} --threads {args.threads}: need steps >= 1, threads >= 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    print("| schedule | active set | block evals / sample | grad block evals / sample | mean depth | ms / step |")
    print("|---|---|---|---|---|---|")
    for name in SCHEDULES:
        for active in (True, False) if "active_set" in config.knobs_of(name) else (True,):  # read, or refused
            cfg = train.parse_args(["--schedule", name] + ([] if active else ["--no-active_set"]))
            task, model, sched = config.build(cfg)
            opt_ = torch.optim.AdamW(list(model.parameters()) + list(sched.parameters()), lr=cfg.lr)
            data, depth = (torch.Generator().manual_seed(config.stream(0, k)) for k in ("data", "depth"))
            stats, times = {}, []
            for it in range(3 + args.steps):
                x, y, _, Tn = train.train_batch(task, cfg.batch_size, cfg.n_min, cfg.n_max, data)
                t0 = time.perf_counter()
                s = train.train_step(model, sched, opt_, (x, y, Tn), depth, cfg.grad_clip)
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
    write_json(os.path.join(os.path.dirname(os.path.abspath(__file__)), "schedules.json"),
               {"rows": rows, "steps": args.steps, "batch_size": 64, "task": "dyck", "env": rundir.environment()})


if __name__ == "__main__":
    sys.exit(run(main, "schedule_table.py"))
