"""
Train a looped transformer on one task with one stop schedule, then evaluate it.

    python train.py                                       # dyck, window w=5, one thread: about 4 min on a CPU core
    python train.py --task copy --schedule rl             # a task's CPU recipe (config.RECIPES), or the defaults
    python train.py --task addition --preset paper        # the papers' scale, for a GPU
    python train.py --seeds 4 --out_dir out/dyck          # seeds 0..3 into out/dyck/seed{k}/, and a table row
    torchrun --nproc_per_node 2 train.py --seeds 8                # the same, seeds split over 2 processes
    python train.py --preset paper --seeds 32 --stack 16 --static # a GPU: 16 seeds at a time as one program (lab/chunks.py)

A run directory holds ckpt.pt (model, schedule, optimizer, step, RNG states; loadable with
weights_only=True), config.json, metrics.jsonl (one JSON line per log interval) and eval.json (every
metric of metrics.py). `--resume` continues from ckpt.pt exactly: same batches, same depths, same weights.
"""

from lab.cli import ctrl_c_at_start  # run machinery: a Ctrl-C while torch loads is one line, exit 130
ctrl_c_at_start(__name__, "train.py")

import contextlib
import dataclasses
import os
import sys
import time

import torch

from config import EMA, Config, RECIPES, build, check_unread, lr_at, paper_preset, recipes_text, seeds_of, stream, trained_depth
import metrics
from tasks import curriculum_n_max, eval_set, train_batch
from lab import checks, rundir
from lab.cli import given, parse, run
from lab.files import write_json


def parse_args(argv=None) -> Config:
    """Flags over the preset over the defaults: a preset sets defaults, so an explicit flag always wins. A flag
    that the schedule or task does not read is refused (config.check_unread)."""
    cfg = parse(Config, argv, prog="train.py", doc=__doc__, epilog=recipes_text(),
                presets=lambda a: paper_preset(a.schedule, a.r_bar) if a.preset == "paper" else RECIPES.get(a.task, {}))
    check_unread(cfg, given(argv))
    return cfg


# --- one run ------------------------------------------------------------------------------------------

def train_step(model, schedule, optimizer, batch, gen: torch.Generator, grad_clip: float,
               autocast=contextlib.nullcontext()) -> dict:
    """One step: the schedule's loss, backward, gradient clip, AdamW. Returns the stats to log.
    A non-finite loss raises FloatingPointError before the weights are touched.

    Which loop runs: training goes through halting.py, which drives the model by its embed / step / readout
    (model.py's LoopedTransformer has no init_state, so H_0 = E(x) there as in model.forward, the loop the
    evaluation runs: the same loop). With the defaults (active_set on, bptt_k 0) a single-depth schedule's
    Schedule.logits_at takes active_logits_at, i.e. model.forward_depths: each sample runs only its own depth."""
    x, y, Tn = batch
    with autocast:
        loss, stats = schedule.loss(model, x, y, Tn, gen)
    if not torch.isfinite(loss):
        raise FloatingPointError(f"non-finite loss {loss.item()}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    params = [p for g in optimizer.param_groups for p in g["params"]]
    # clip the global gradient norm: one batch of unlucky depth draws early in training cannot throw the weights far
    # (the norm is returned either way, for the log; inf: measure, do not clip)
    gnorm = torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip > 0 else float("inf"))
    optimizer.step()
    return {**stats, "grad_norm": gnorm.item()}


def train_run(cfg: Config, run: rundir.Run, device: str) -> dict:
    """Train one seed, then evaluate it (finish_run: eval.json). `run` is its run directory (lab/rundir.py): where it
    resumes from, where it logs and saves."""
    task, model, schedule = build(cfg)  # one seed -> the same initial transformer and batches under every schedule
    model.to(device)
    schedule.to(device)
    if cfg.compile:  # in place: the state_dict keeps its keys (no `_orig_mod.` prefix)
        for block in model.blocks:
            block.compile(dynamic=True)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if cfg.amp and device.startswith("cuda")
                else contextlib.nullcontext())
    optimizer = torch.optim.AdamW(list(model.parameters()) + list(schedule.parameters()), lr=cfg.lr,
                                  betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
    # the data order and the depth draws have their own generators: the same seed gives the same batches under
    # every schedule, however many random numbers a schedule draws for its depths
    s = seeds_of(cfg)
    gens = {k: torch.Generator().manual_seed(stream(s[k], k)) for k in ("data", "depth")}
    T_eval = cfg.T_test if cfg.looped else min(cfg.T_test, trained_depth(cfg))  # the vanilla model has no more blocks
    id_sets = eval_set(task, [n for n in metrics.test_lengths(cfg) if n <= cfg.n_max] or [cfg.n_max], 64, cfg.eval_seed)
    # a weight average is a smoother estimate of the weights than the last step's (Fan et al. evaluate it); off by default
    ema = EMA(cfg, model, schedule)
    step = run.restore(model, schedule, optimizer, gens, ema)  # 0 for a fresh run; --resume: exactly where it stopped
    if step == 0:
        ema.after(0)  # --ema_start 0: the EMA starts from the initial weights

    def eager():  # with --compile, evaluation runs the uncompiled module
        return torch.compiler.set_stance("force_eager") if cfg.compile else contextlib.nullcontext()

    model.train()
    with run.training():  # Ctrl-C or a non-finite loss: one line naming the last good checkpoint
        for it in range(step, cfg.max_iters):  # `step` steps are done already: 0, or the checkpoint's on --resume
            # linear warm-up: Adam's moment estimates are noisy over the first steps, and a full learning rate then
            # can throw the weights far; then cosine decay to min_lr at max_iters
            lr = lr_at(cfg, it)
            for group in optimizer.param_groups:
                group["lr"] = lr
            n_hi = curriculum_n_max(it, cfg.curriculum_start, cfg.n_max, cfg.curriculum_every) if cfg.curriculum else cfg.n_max
            # x, y (B, P), n (B,) each sample's length (unused: a schedule reads its depth), Tn (B,) = T(n)
            x, y, _, Tn = train_batch(task, cfg.batch_size, cfg.n_min, n_hi, gens["data"])
            stats = train_step(model, schedule, optimizer, (x.to(device), y.to(device), Tn.to(device)),
                               gens["depth"], cfg.grad_clip, autocast)
            run.add(stats)
            ema.after(it + 1)
            done = it + 1  # steps finished; the last step always logs, evaluates and checkpoints
            last = done == cfg.max_iters
            if done % cfg.log_interval == 0 or last:  # a line of the mean stats since the previous one
                rec = run.line(lr, n_hi)
                # the policy's ID exact match: a cheap sign that training converges (the full scoring runs once, at
                # the end), so it runs every eval_interval steps only
                if done % cfg.eval_interval == 0 or last:
                    with eager():
                        rec["id_acc"] = metrics.policy_id_acc(model, schedule, id_sets, T_eval, cfg.eval_batch_size, device)
                    model.train()
                run.write(rec)
            if done % cfg.ckpt_interval == 0 or last:  # --resume continues from here; Ctrl-C loses at most this many
                run.save(model, schedule, optimizer, gens, ema)
    with eager():
        return finish_run(cfg, run.dir, model, schedule, task, T_eval, run.elapsed, run.env, run.segments, device,
                          ema.weights)


def finish_run(cfg: Config, run_dir: str, model, schedule, task, T_eval: int, elapsed: float, env: dict, segments: list,
               device: str, ema: dict = None) -> dict:
    """Evaluate a trained run on the fixed test and validation sets (on its EMA weights, when it keeps them) and
    write its eval.json (train_run; each seed of a --stack chunk, lab/chunks.py). An EMA run also scores its raw
    weights first (`raw_metrics`): the same run without the average, its own control on the same machine."""
    t_eval = time.time()
    lengths = metrics.test_lengths(cfg)
    sets = (eval_set(task, lengths, cfg.eval_samples, cfg.eval_seed), eval_set(task, lengths, cfg.eval_samples, cfg.eval_seed + 1))
    score = lambda: metrics.evaluate(model, schedule, task, *sets, T_eval, cfg.n_max, cfg.eval_batch_size, device)
    raw = None
    if ema is not None:  # then the EMA weights (the checkpoint keeps both: "model" raw, "ema" averaged)
        raw = score()["metrics"]
        EMA.apply(model, schedule, ema)
    e = score()
    log_path = os.path.join(run_dir, "metrics.jsonl")
    e = {"task": cfg.task, "schedule": cfg.schedule, "seed": cfg.seed, "n_max": cfg.n_max, **e,
         "weights": "ema" if ema is not None else "raw", **({"raw_metrics": raw} if raw is not None else {}),
         "train_time_s": elapsed, "eval_time_s": time.time() - t_eval, "steps": cfg.max_iters,
         "diverged": rundir.diverged(log_path, len(task.vocab)), "config": dataclasses.asdict(cfg), "env": env,
         "segments": segments}
    if e["diverged"]:
        print(f"train.py: warning: {run_dir}: the loss diverged ({e['diverged']}): the run finished but learned "
              f"nothing; try a smaller --lr", file=sys.stderr)
    write_json(os.path.join(run_dir, "eval.json"), e)
    return e


def main(argv=None) -> None:
    cfg = parse_args(argv)
    checks.validate(cfg)  # every setting, before anything is written: one line naming a bad value
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = checks.pick_device(cfg.device)
    if cfg.tf32 and device.startswith("cuda"):  # TF32 inputs for the fp32 matmuls and convolutions
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    if cfg.seeds > 1 or cfg.stack or "WORLD_SIZE" in os.environ:
        # many seeds, torchrun's ranks or stacked seeds: the lab's driver, imported only here, so that a single run
        # loads neither it nor the tables and stacked-seed machinery it brings (lab/sweep.py)
        from lab.sweep import sweep
        return sweep(cfg, train_run, finish_run)
    with rundir.single(cfg) as (run_dir, action, start):  # checked, planned, locked, claimed (--overwrite: emptied)
        if action == "skip":
            print(f"{run_dir}: finished earlier (eval.json); `python evaluate.py {run_dir}` prints its report")
            return
        how = {"resume": f", resumed at step {start and start['step']}", "restart": ", no checkpoint: started from scratch"}
        print(f"run {run_dir}: task {cfg.task}, schedule {cfg.schedule}, seed {cfg.seed}, device {device}" + how.get(action, ""))
        cfg = dataclasses.replace(cfg, out_dir=run_dir)
        e = train_run(cfg, rundir.Run(cfg, run_dir, start), device)
    print(metrics.format_run({**e, "run_dir": run_dir}))


def cli(argv=None) -> int:
    """main() as a command: one line and exit code 2 for bad input (cli.run)."""
    return run(main, "train.py", argv)


if __name__ == "__main__":
    sys.exit(cli())
