"""
The run machinery around train.py's loop: what it calls in one line each, so that the loop reads as the lesson.

    Log(cfg, run_dir, step, ...)   the loop's log: stat sums since the last line, the wall clock (evaluation and
                                   checkpoint writes excluded), a tqdm bar on a terminal, one `|` line on stdout
                                   and one JSON line in metrics.jsonl per interval
    guard(ckpt_path, done)         Ctrl-C and a non-finite loss end the loop with one line that names the last
                                   good checkpoint (cli.run prints it: exit 130 / 1)
    sweep(cfg, train_run, finish)  --seeds N: seed..seed+N-1, in one process or split over torchrun's ranks:
                                   every seed of a rank locked and planned again first (take_locks), then each
                                   claimed (rundir), trained or skipped; then the table. A seed whose
                                   loss turns non-finite stops alone: the others train, then the sweep
                                   exits 1 naming it
"""

import contextlib
import dataclasses
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from tqdm import tqdm

import metrics
from lab import chunks, records, rundir, tables
from lab.cli import interrupted, log_line, write_json


class Log:
    def __init__(self, cfg, run_dir: str, step: int, elapsed: float = 0.0, sums: dict = None):
        self.cfg, self.path = cfg, os.path.join(run_dir, "metrics.jsonl")
        self.elapsed, self.sums = elapsed, dict(sums or {})  # sums: of each stat since the last log line
        self.t0, self.t0_step, self.done = time.time(), step, step  # wall clock since the last line (or the start)
        self.bar = tqdm(initial=step, total=cfg.max_iters, desc=os.path.basename(run_dir) or run_dir,
                        disable=not sys.stderr.isatty(), leave=False)

    def add(self, done: int, stats: dict) -> None:
        """One finished step's stats (and the progress bar moves on)."""
        for k, v in {"steps": 1, **stats}.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
        self.done = done
        self.bar.update(1)

    def record(self, lr: float, n_hi: int) -> dict:
        """The log line of the steps since the last one: their mean stats, ms per step and the elapsed time."""
        n_acc, now = self.sums.pop("steps"), time.time()
        self.elapsed += now - self.t0
        rec = {"step": self.done, "lr": lr, "n_max": n_hi, **{k: v / n_acc for k, v in self.sums.items()},
               "ms_per_step": 1000 * (now - self.t0) / (self.done - self.t0_step), "elapsed_s": self.elapsed}
        self.t0, self.t0_step, self.sums = now, self.done, {}
        return rec

    def write(self, rec: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(rec) + "\n")
        (self.bar.write if not self.bar.disable else print)(log_line(rec))
        self.t0 = time.time()  # evaluation and printing are not training time

    @contextlib.contextmanager
    def paused(self):
        """Time spent inside (a checkpoint write) is not training time."""
        t = time.time()
        yield
        self.t0 += time.time() - t

    def close(self) -> None:
        self.bar.close()


@contextlib.contextmanager
def guard(ckpt_path: str, done):
    """Around the training loop: Ctrl-C becomes one line (exit 130), and a non-finite loss (train_step's
    FloatingPointError, which does not know its step) gets its step and the last good checkpoint. done(): the
    steps finished so far."""
    try:
        yield
    except KeyboardInterrupt:
        raise interrupted(done(), lambda: rundir.last_good(ckpt_path)) from None
    except FloatingPointError as err:
        if "at step" in str(err):  # a checkpoint's non-finite weights: the message is complete
            raise
        raise FloatingPointError(f"{err} at step {done() + 1}; " + rundir.last_good(ckpt_path)) from None


# --- seeds: one process, or split over torchrun's ranks -----------------------------------------------

# How long a rank waits for the others in the process group (at its start, after the locks, and for the results at
# the end). A rank whose seeds are done waits there for the slowest rank, however long its seeds take: the default
# 30 minutes crashed it, and torchrun then killed the ranks still training. A rank that dies does not leave the
# others waiting a year: torchrun stops every rank once one has failed.
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
    """Every lock of this rank's seeds `mine` [(seed, run dir)], into `locks`, each seed planned again under its
    lock, before any run is deleted (--overwrite) or trained: a seed that another process holds, or filled since
    the first plan, stops the sweep with nothing changed. Under torchrun the ranks then agree: all go on, or all
    stop with the first rank's line (rank 0 prints it, cli.run)."""
    err = None
    try:
        for k, d in mine:
            locks.enter_context(rundir.Lock(d))
            rundir.plan(dataclasses.replace(cfg, seed=k, out_dir=d), d, single=cfg.seeds == 1)
    except ValueError as e:
        err = str(e)
    if world > 1:
        told = [None] * world
        dist.all_gather_object(told, err)
        err = next((e for e in told if e), None)
    if err:
        raise ValueError(err)


def sweep(cfg, train_run, finish_run) -> None:
    """Train seeds cfg.seed .. cfg.seed + cfg.seeds - 1 (one: into cfg.out_dir; several: into out_dir/seed{k}/),
    every seed's plan checked before anything is written; rank r of torchrun's P trains seeds r, r+P, ...
    (--stack: chunks of seeds, lab/chunks.py). Prints each run and the table over seeds (summary.json)."""
    rank, world, device = init_distributed(rundir.pick_device(cfg.device))
    out_dir = cfg.out_dir or os.path.join("out", f"{cfg.task}-{cfg.schedule}")
    runs = [(k, out_dir if cfg.seeds == 1 else os.path.join(out_dir, f"seed{k}")) for k in range(cfg.seed, cfg.seed + cfg.seeds)]
    rundir.check_out_dir(out_dir)
    rundir.check_folder(cfg, out_dir, {d for _, d in runs})
    for k, d in runs:  # every seed's plan is checked before anything is written
        rundir.plan(dataclasses.replace(cfg, seed=k, out_dir=d), d, single=cfg.seeds == 1)
    if cfg.tf32 and device.startswith("cuda"):  # TF32 inputs for the fp32 matmuls and convolutions
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    parts = chunks.split(cfg, runs, rank, world) if cfg.stack else [[r] for r in runs[rank::world]]  # rank r: r, r+P, ...
    evals, failures = [], []
    with contextlib.ExitStack() as locks:  # every seed of this rank locked and planned before any is touched
        take_locks(cfg, [r for part in parts for r in part], locks, world)
        if cfg.stack:
            evals, failures = chunks.train_chunks(cfg, parts, rank, world, device, finish_run)
        else:  # one seed at a time
            for k, d in [part[0] for part in parts]:
                run_cfg = dataclasses.replace(cfg, seed=k, out_dir=d)
                action, start = rundir.claim(run_cfg, d, single=cfg.seeds == 1)  # --overwrite: the old files go now
                if action == "skip":
                    print(f"seed {k}: finished earlier, skipped ({d}/eval.json)")
                    e = records.load_eval(d)
                else:
                    how = {"resume": f", resumed at step {start and start['step']}",
                           "restart": ", no checkpoint: started from scratch"}.get(action, "")
                    print(f"run {d}: task {cfg.task}, schedule {cfg.schedule}, seed {k}, device {device}"
                          + (f", rank {rank}/{world}" if world > 1 else "") + how)
                    try:
                        e = train_run(run_cfg, d, device, start)
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
