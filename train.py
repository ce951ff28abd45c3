"""
Train a looped transformer on one task with one stop schedule, then evaluate it.

    python train.py                                       # dyck, window w=5: ~5 min on 2 CPU cores
    python train.py --task copy --schedule rl             # every task has a CPU recipe (config.py's RECIPES)
    python train.py --task addition --preset paper        # the papers' scale, for a GPU
    python train.py --seeds 4 --out_dir out/dyck          # seeds 0..3 into out/dyck/seed{k}/, and a table row
    torchrun --nproc_per_node 2 train.py --seeds 8 --threads 1    # the same, seeds split over 2 processes
    python train.py --preset paper --seeds 32 --stack 16 --static # a GPU: 16 seeds at a time as one program (chunks.py)

A run directory holds ckpt.pt (model, schedule, optimizer, step, RNG states; loadable with
weights_only=True), config.json, metrics.jsonl (one JSON line per log interval) and eval.json (every
metric of evaluate.py). `--resume` continues from ckpt.pt exactly: same batches, same depths, same weights.
"""

import contextlib
import dataclasses
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
from tqdm import tqdm

from lab import chunks
import metrics
from lab import records
from lab import rundir
from lab import tables
from lab.cli import atomic_write, interrupted, log_line, parse, run, write_json
from config import RECIPES, Config, build, ema_start_step, lr_at, paper_preset, recipes_text, seeds_of, stream, trained_depth
from tasks import curriculum_n_max, eval_set, train_batch


def parse_args(argv=None) -> Config:
    """Flags over the preset over the defaults: a preset sets defaults, so an explicit flag always wins."""
    return parse(Config, argv, prog="train.py", doc=__doc__, epilog=recipes_text(),
                 presets=lambda a: paper_preset(a.schedule, a.r_bar) if a.preset == "paper" else RECIPES.get(a.task, {}))


# --- one run ------------------------------------------------------------------------------------------

def train_step(model, schedule, optimizer, batch, gen: torch.Generator, grad_clip: float,
               autocast=contextlib.nullcontext()) -> dict:
    """One step: the schedule's loss, backward, gradient clip, AdamW. Returns the stats to log.
    A non-finite loss raises FloatingPointError before the weights are touched."""
    x, y, Tn = batch
    with autocast:
        loss, stats = schedule.loss(model, x, y, Tn, gen)
    if not torch.isfinite(loss):
        raise FloatingPointError(f"non-finite loss {loss.item()}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    params = [p for g in optimizer.param_groups for p in g["params"]]
    gnorm = torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip > 0 else float("inf"))
    optimizer.step()
    return {**stats, "grad_norm": gnorm.item()}


def ema_update(ema: dict, weights: dict, decay: float) -> None:
    """One EMA step over {part: {name: tensor}}, in place, without bias correction (as Fan et al.'s torch_ema with
    use_num_updates=False and TRM's EMAHelper)."""
    with torch.no_grad():
        for part, params in weights.items():
            for name, p in params.items():
                # theta_ema <- decay * theta_ema + (1 - decay) * theta
                ema[part][name].mul_(decay).add_(p.detach(), alpha=1 - decay)


def train_run(cfg: Config, run_dir: str, device: str, start: dict = None) -> dict:
    """Train one seed in run_dir (from the checkpoint `start` when resuming), evaluate, write eval.json."""
    task, model, schedule = build(cfg)
    model.to(device)
    schedule.to(device)
    if cfg.compile:  # in place: the state_dict keeps its keys (no `_orig_mod.` prefix)
        for block in model.blocks:
            block.compile(dynamic=True)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if cfg.amp and device.startswith("cuda")
                else contextlib.nullcontext())
    optimizer = torch.optim.AdamW(list(model.parameters()) + list(schedule.parameters()), lr=cfg.lr,
                                  betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
    s = seeds_of(cfg)  # the data order and the depth draws have their own generators
    gens = {k: torch.Generator().manual_seed(stream(s[k], k)) for k in ("data", "depth")}
    step, elapsed, acc_stats = 0, 0.0, {}  # acc_stats: sums over the steps since the last log line
    # weight EMA: starts from the weights after step ema_from, then follows every step; evaluated at the end
    ema, ema_from = None, ema_start_step(cfg)
    weights = lambda: {"model": dict(model.named_parameters()), "schedule": dict(schedule.named_parameters())}

    def ema_step(done):
        nonlocal ema
        if cfg.ema and done == ema_from:
            ema = {part: {k: p.detach().clone() for k, p in ps.items()} for part, ps in weights().items()}
        elif cfg.ema and done > ema_from:
            ema_update(ema, weights(), cfg.ema)

    if start:
        try:
            model.load_state_dict(start["model"])
            schedule.load_state_dict(start["schedule"])
            optimizer.load_state_dict(start["optimizer"])
            for k, g in gens.items():
                g.set_state(start["rng"][k])
            torch.set_rng_state(start["rng"]["torch"])
            ema = start.get("ema")
            if ema is not None:  # the checkpoint is read onto the CPU: the EMA lives beside the weights
                ema = {part: {k: ema[part][k].to(p.device) for k, p in ps.items()} for part, ps in weights().items()}
        except (RuntimeError, KeyError, ValueError, TypeError, AttributeError) as err:
            msg = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
            raise ValueError(f"--resume: {run_dir}/ckpt.pt does not fit this run ({msg})") from None
        step, elapsed, acc_stats = start["step"], start["elapsed"], start["acc_stats"]
        if cfg.ema and step > ema_from and ema is None:
            raise ValueError(f"--resume: {run_dir}/ckpt.pt holds no EMA weights past --ema_start ({ema_from})")
    elif cfg.ema:
        ema_step(0)  # --ema_start 0: the EMA starts from the initial weights
    ckpt_path, log_path = os.path.join(run_dir, "ckpt.pt"), os.path.join(run_dir, "metrics.jsonl")
    env, cfg_path = rundir.environment(), os.path.join(run_dir, "config.json")
    # every segment of a resumed run keeps its (step, machine settings, env): a resume may change them
    segments = rundir.segments(cfg_path) if start else []
    segments.append({"step": step, **{k: getattr(cfg, k) for k in rundir.SEGMENT}, "env": env})
    write_json(cfg_path, {**dataclasses.asdict(cfg), "env": env, "segments": segments})
    kept = rundir.log_lines(log_path, step)  # metrics.jsonl holds exactly the lines up to the checkpoint's step
    atomic_write(log_path, lambda f: f.write("".join(kept).encode()))
    T_eval = cfg.T_test if cfg.looped else min(cfg.T_test, trained_depth(cfg))
    id_sets = eval_set(task, [n for n in metrics.test_lengths(cfg) if n <= cfg.n_max] or [cfg.n_max], 64, cfg.eval_seed)

    def eager():  # with --compile, evaluation runs the uncompiled module
        return torch.compiler.set_stance("force_eager") if cfg.compile else contextlib.nullcontext()

    def save(step):
        ck = {"model": model.state_dict(), "schedule": schedule.state_dict(), "optimizer": optimizer.state_dict(),
              "step": step, "elapsed": elapsed, "acc_stats": acc_stats, "config": dataclasses.asdict(cfg), "ema": ema,
              "rng": {**{k: g.get_state() for k, g in gens.items()}, "torch": torch.get_rng_state()}}
        if bad := rundir.non_finite(ck):
            raise FloatingPointError(f"non-finite weights at step {step} ({bad}); " + rundir.last_good(ckpt_path))
        atomic_write(ckpt_path, lambda f: torch.save(ck, f))

    model.train()
    t0, t0_step = time.time(), step  # wall clock since the last log line (or the start / resume)
    bar = tqdm(range(step, cfg.max_iters), initial=step, total=cfg.max_iters, desc=os.path.basename(run_dir) or run_dir,
               disable=not sys.stderr.isatty(), leave=False)
    done = step
    try:
        for it in bar:
            for group in optimizer.param_groups:
                group["lr"] = lr_at(cfg, it)
            n_hi = curriculum_n_max(it, cfg.curriculum_start, cfg.n_max, cfg.curriculum_every) if cfg.curriculum else cfg.n_max
            x, y, _, Tn = train_batch(task, cfg.batch_size, cfg.n_min, n_hi, gens["data"])
            try:
                stats = train_step(model, schedule, optimizer, (x.to(device), y.to(device), Tn.to(device)),
                                   gens["depth"], cfg.grad_clip, autocast)
            except FloatingPointError as err:
                raise FloatingPointError(f"{err} at step {it + 1}; " + rundir.last_good(ckpt_path)) from None
            for k, v in {"steps": 1, **stats}.items():
                acc_stats[k] = acc_stats.get(k, 0.0) + v
            done = it + 1
            ema_step(done)
            if done % cfg.log_interval == 0 or done == cfg.max_iters:
                n_acc, now = acc_stats.pop("steps"), time.time()
                elapsed += now - t0
                rec = {"step": done, "lr": lr_at(cfg, it), "n_max": n_hi, **{k: v / n_acc for k, v in acc_stats.items()},
                       "ms_per_step": 1000 * (now - t0) / (done - t0_step), "elapsed_s": elapsed}
                t0, t0_step, acc_stats = now, done, {}
                if done % cfg.eval_interval == 0 or done == cfg.max_iters:  # the policy's ID exact match
                    with eager():
                        rec["id_acc"] = metrics.policy_id_acc(model, schedule, id_sets, T_eval, cfg.eval_batch_size, device)
                    model.train()
                with open(log_path, "a") as f:
                    f.write(json.dumps(rec) + "\n")
                (bar.write if not bar.disable else print)(log_line(rec))
                t0 = time.time()
            if done % cfg.ckpt_interval == 0 or done == cfg.max_iters:
                t_save = time.time()
                save(done)
                step = done
                t0 += time.time() - t_save  # checkpoint writes are not training time
    except KeyboardInterrupt:  # Ctrl-C: one line, exit 130 (cli.run)
        raise interrupted(done, lambda: rundir.last_good(ckpt_path)) from None
    bar.close()
    with eager():
        return finish_run(cfg, run_dir, model, schedule, task, T_eval, elapsed, env, segments, device, ema)


def finish_run(cfg: Config, run_dir: str, model, schedule, task, T_eval: int, elapsed: float, env: dict, segments: list,
               device: str, ema: dict = None) -> dict:
    """Evaluate a trained run on the fixed test and validation sets (on its EMA weights, when it keeps them) and
    write its eval.json (train_run; each seed of a --stack chunk, chunks.py). An EMA run also scores its raw
    weights first (`raw_metrics`): the same run without the average, its own control on the same machine."""
    t_eval = time.time()
    lengths = metrics.test_lengths(cfg)
    sets = (eval_set(task, lengths, cfg.eval_samples, cfg.eval_seed), eval_set(task, lengths, cfg.eval_samples, cfg.eval_seed + 1))
    score = lambda: metrics.evaluate(model, schedule, task, *sets, T_eval, cfg.n_max, cfg.eval_batch_size, device)
    raw = None
    if ema is not None:  # then the EMA weights (the checkpoint keeps both: "model" raw, "ema" averaged)
        raw = score()["metrics"]
        records.apply_ema(model, schedule, ema)
    e = score()
    log_path = os.path.join(run_dir, "metrics.jsonl")
    e = {"task": cfg.task, "schedule": cfg.schedule, "seed": cfg.seed, "n_max": cfg.n_max, **e,
         "weights": "ema" if ema is not None else "raw", **({"raw_metrics": raw} if raw is not None else {}),
         "train_time_s": elapsed, "eval_time_s": time.time() - t_eval, "steps": cfg.max_iters,
         "diverged": diverged(log_path, len(task.vocab)), "config": dataclasses.asdict(cfg), "env": env,
         "segments": segments}
    if e["diverged"]:
        print(f"train.py: warning: {run_dir}: the loss diverged ({e['diverged']}): the run finished but learned "
              f"nothing; try a smaller --lr", file=sys.stderr)
    write_json(os.path.join(run_dir, "eval.json"), e)
    return e


def diverged(log_path: str, V: int):
    """A final training loss above 2 ln V, twice that of guessing uniformly (where training starts), means the
    run diverged: the last and the first logged loss, in words; None otherwise."""
    lines = [json.loads(line) for line in open(log_path)] if os.path.isfile(log_path) else []
    losses = [(r["step"], r["loss"]) for r in lines if isinstance(r.get("loss"), (int, float))]
    if not losses or not losses[-1][1] > 2 * math.log(V):
        return None
    return f"loss {losses[0][1]:.3g} at step {losses[0][0]}, {losses[-1][1]:.3g} at step {losses[-1][0]}"


# --- seeds: one process, or split over torchrun's ranks -----------------------------------------------

def init_distributed(device: str):
    """Under torchrun: (rank, world, device). Seeds are split over the ranks; each rank trains its own."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, device
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        device = f"cuda:{local % torch.cuda.device_count()}"  # more ranks than GPUs: they share
        torch.cuda.set_device(device)
    dist.init_process_group("gloo")  # only to gather the evals once: gloo works for CPU and shared GPUs
    return dist.get_rank(), world, device


def main(argv=None) -> None:
    cfg = parse_args(argv)
    rundir.validate(cfg)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    rank, world, device = init_distributed(rundir.pick_device(cfg.device))
    out_dir = cfg.out_dir or os.path.join("out", f"{cfg.task}-{cfg.schedule}")
    runs = [(k, out_dir if cfg.seeds == 1 else os.path.join(out_dir, f"seed{k}")) for k in range(cfg.seed, cfg.seed + cfg.seeds)]
    rundir.check_out_dir(out_dir)
    rundir.check_folder(cfg, out_dir, {d for _, d in runs})
    for k, d in runs:  # every seed's plan is checked before anything is written
        rundir.plan(dataclasses.replace(cfg, seed=k, out_dir=d), d, single=cfg.seeds == 1)
    if cfg.tf32 and device.startswith("cuda"):  # TF32 inputs for the fp32 matmuls and convolutions
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    evals, failures = chunks.train_chunks(cfg, runs, rank, world, device, finish_run) if cfg.stack else ([], [])
    for k, d in runs[rank::world] if not cfg.stack else []:  # rank r trains seeds r, r+P, ...
        run_cfg = dataclasses.replace(cfg, seed=k, out_dir=d)
        with rundir.Lock(d):
            action, start = rundir.claim(run_cfg, d, single=cfg.seeds == 1)  # planned again, under the lock
            if action == "skip":
                print(f"seed {k}: finished earlier, skipped ({d}/eval.json)")
                e = records.load_eval(d)
            else:
                print(f"run {d}: task {cfg.task}, schedule {cfg.schedule}, seed {k}, device {device}"
                      + (f", rank {rank}/{world}" if world > 1 else "") + {"resume": f", resumed at step {start and start['step']}",
                                                                           "restart": ", no checkpoint: started from scratch"}.get(action, ""))
                e = train_run(run_cfg, d, device, start)
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
    if failures:  # --stack: a seed with a non-finite loss stopped alone; the others finished
        raise FloatingPointError(f"{len(failures)} of {cfg.seeds} seeds stopped: " + "; ".join(m for _, m in failures))

def cli(argv=None) -> int:
    """main() as a command: one line and exit code 2 for bad input (cli.run)."""
    return run(main, "train.py", argv)


if __name__ == "__main__":
    sys.exit(cli())
