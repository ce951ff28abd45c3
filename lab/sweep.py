"""
Many seeds at once (train.py --seeds N, torchrun's ranks, --stack S): train.py imports this only then. sweep trains
seeds seed..seed+N-1, every seed of a rank locked and planned again first, then each claimed, trained or skipped;
then the table. A seed whose loss turns non-finite stops alone: the others train, then the sweep exits 1 naming it.
"""

import contextlib
import dataclasses
import datetime
import os
import sys

import torch
import torch.distributed as dist

import metrics
from lab import checks, chunks, records, rundir, stack, tables
from lab.files import Lock, write_json

# How long a rank waits for the others (a rank whose seeds are done waits for the slowest: torch's default 30 minutes
# crashed it). A rank that dies leaves no one waiting: torchrun then stops every rank.
WAIT = datetime.timedelta(days=365)


def init_distributed(device: str):
    """Under torchrun: (rank, world, device). Seeds are split over the ranks; each rank trains its own."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, device
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        device = f"cuda:{local % torch.cuda.device_count()}"  # more ranks than GPUs: they share
        torch.cuda.set_device(device)
    dist.init_process_group("gloo", timeout=WAIT)  # to agree on the locks and gather the evals: CPU and shared GPUs
    return dist.get_rank(), world, device


def take_locks(cfg, mine: list, locks: contextlib.ExitStack, world: int) -> None:
    """Every lock of this rank's seeds `mine` [(seed, run dir)] into `locks`, each seed planned again under it before
    any run is deleted or trained: a seed held elsewhere or filled since stops the sweep with nothing changed. Under
    torchrun the ranks agree: all go on, or all stop with the first rank's line."""
    err = None
    try:
        for k, d in mine:
            locks.enter_context(Lock(d))
            rundir.plan(dataclasses.replace(cfg, seed=k, out_dir=d), d, single=cfg.seeds == 1)
    except ValueError as e:
        err = str(e)
    if world > 1:
        told = [None] * world
        dist.all_gather_object(told, err)
        err = next((e for e in told if e), None)
    if err:
        raise ValueError(err)


def split(cfg, runs: list, rank: int, world: int) -> list[list]:
    """The chunks of cfg.stack seeds of `runs` [(seed, run dir)] that rank `rank` trains: chunk i on rank i % world."""
    return [runs[i:i + cfg.stack] for i in range(0, len(runs), cfg.stack)][rank::world]


def claim(cfg, k: int, d: str):
    """Seed k's config, rundir.claim's (action, start) (on --overwrite its old files go now), a skipped seed's line."""
    run_cfg = dataclasses.replace(cfg, seed=k, out_dir=d)
    action, start = rundir.claim(run_cfg, d, single=cfg.seeds == 1)
    if action == "skip":
        print(f"seed {k}: finished earlier, skipped ({d}/eval.json)")
    return run_cfg, action, start


def train_chunks(cfg, parts: list, rank: int, world: int, device: str, finish) -> tuple[list, list]:
    """The chunks `parts` (split: this rank's), each seed claimed right before its chunk trains (the caller holds
    and has planned every seed's lock). Finished seeds are skipped; seeds resumed at different steps train as
    sub-chunks. finish: see chunks.train_chunk."""
    evals, failures = [], []
    on_rank = f", rank {rank}/{world}" if world > 1 else ""
    for part in parts:
        todo = {}
        for k, d in part:
            run_cfg, action, start = claim(cfg, k, d)
            if action == "skip":
                evals.append({**records.load_eval(d), "run_dir": d})
            else:
                todo.setdefault(start["step"] if start else 0, []).append((run_cfg, d, start))
        for at, group in sorted(todo.items()):
            print(f"chunk of seeds {', '.join(str(c.seed) for c, _, _ in group)}: task {cfg.task}, schedule "
                  f"{cfg.schedule}, device {device}" + on_rank
                  + (f", resumed at step {at}" if at else "") + (", static" if cfg.static else ""))
            e, f = chunks.train_chunk([c for c, _, _ in group], [d for _, d, _ in group], device,
                                      [s for _, _, s in group] if at else None, finish)
            evals += e
            failures += f
    for e in sorted(evals, key=lambda e: e["seed"]):
        print(metrics.format_run(e))
    return evals, failures


def sweep(cfg, train_run, finish_run) -> None:
    """Train seeds cfg.seed .. cfg.seed + cfg.seeds - 1 (one: into cfg.out_dir; several: into out_dir/seed{k}/), every
    seed's plan checked before anything is written; rank r of P trains seeds r, r+P, ... (--stack: chunks). Prints
    each run and the table over seeds (summary.json)."""
    if cfg.stack and (why := stack.refusal(cfg)):  # before anything is written
        raise ValueError(why)
    rank, world, device = init_distributed(checks.pick_device(cfg.device))
    out_dir = rundir.out_dir_of(cfg)
    runs = [(k, out_dir if cfg.seeds == 1 else os.path.join(out_dir, f"seed{k}")) for k in range(cfg.seed, cfg.seed + cfg.seeds)]
    rundir.check_out_dir(out_dir)
    rundir.check_folder(cfg, out_dir, {d for _, d in runs})
    for k, d in runs:  # every seed's plan is checked before anything is written
        rundir.plan(dataclasses.replace(cfg, seed=k, out_dir=d), d, single=cfg.seeds == 1)
    parts = split(cfg, runs, rank, world) if cfg.stack else [[r] for r in runs[rank::world]]  # rank r: r, r+P, ...
    evals, failures = [], []
    with contextlib.ExitStack() as locks:  # every seed of this rank locked and planned before any is touched
        take_locks(cfg, [r for part in parts for r in part], locks, world)
        if cfg.stack:
            evals, failures = train_chunks(cfg, parts, rank, world, device, finish_run)
        else:  # one seed at a time
            for k, d in [part[0] for part in parts]:
                run_cfg, action, start = claim(cfg, k, d)
                if action == "skip":
                    e = records.load_eval(d)
                else:
                    how = {"resume": f", resumed at step {start and start['step']}",
                           "restart": ", no checkpoint: started from scratch"}.get(action, "")
                    print(f"run {d}: task {cfg.task}, schedule {cfg.schedule}, seed {k}, device {device}"
                          + (f", rank {rank}/{world}" if world > 1 else "") + how)
                    try:
                        e = train_run(run_cfg, rundir.Run(run_cfg, d, start), device)
                    except FloatingPointError as err:  # a diverged seed stops alone; the others still train
                        if cfg.seeds == 1:
                            raise
                        print(f"train.py: seed {k}: {err}", file=sys.stderr)
                        failures.append((k, f"seed {k} ({err})"))
                        continue
                e["run_dir"] = d
                print(metrics.format_run(e))
                evals.append(e)
    if world > 1:  # rank 0 gathers every rank's results and writes the summary
        gathered = [None] * world
        dist.all_gather_object(gathered, (evals, failures))
        evals = sorted((e for part, _ in gathered for e in part), key=lambda e: e["seed"])
        failures = [f for _, part in gathered for f in part]
        dist.destroy_process_group()
        if rank != 0:
            return
    if evals:
        md, rows = tables.table(tables.group_runs(evals))
        print("\n" + md)
        if cfg.seeds > 1:
            write_json(os.path.join(out_dir, "summary.json"), {**rows[0], "runs": [e["run_dir"] for e in evals]})
    if failures:  # a seed with a non-finite loss stopped alone; the others finished
        raise FloatingPointError(f"{len(failures)} of {cfg.seeds} seeds stopped: " + "; ".join(m for _, m in failures))
