"""
Train a looped transformer on one task with one stop schedule, then evaluate it.

    python train.py                                       # dyck, window w=5, one thread: 7-14 min on a CPU core
    python train.py --task copy --schedule rl             # each of the nine tasks has a CPU recipe (config.RECIPES)
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

from config import Config, RECIPES, build, check_unread, ema_start_step, lr_at, paper_preset, recipes_text, seeds_of, stream, trained_depth
import metrics
from tasks import curriculum_n_max, eval_set, train_batch
from lab import records, rundir, runs
from lab.cli import given, parse, run, write_json


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


class EMA:
    """A weight EMA (Fan et al. 0.9999, TRM 0.999), evaluated instead of the weights at the end: it starts as a copy
    of the weights after step `start` and then follows every step, theta_ema <- decay theta_ema + (1 - decay) theta,
    without bias correction (as Fan et al.'s torch_ema with use_num_updates=False and TRM's EMAHelper). It draws no
    random number and touches no weight: the run trains exactly as without it. weights: {part: {name: tensor}}."""

    def __init__(self, decay: float, start: int, model, schedule, weights: dict = None):
        self.decay, self.start, self.weights = decay, start, weights
        self.params = lambda: {"model": dict(model.named_parameters()), "schedule": dict(schedule.named_parameters())}

    def after(self, step: int) -> None:
        """Call after training step `step` (0: before the first, for an EMA that starts at the initial weights)."""
        if not self.decay:
            return
        if step == self.start:
            self.weights = {part: {k: p.detach().clone() for k, p in ps.items()} for part, ps in self.params().items()}
        elif step > self.start:
            with torch.no_grad():
                for part, params in self.params().items():
                    for name, p in params.items():
                        # theta_ema <- decay * theta_ema + (1 - decay) * theta
                        self.weights[part][name].mul_(self.decay).add_(p.detach(), alpha=1 - self.decay)


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
    # the data order and the depth draws have their own generators: the same seed gives the same batches under
    # every schedule, however many random numbers a schedule draws for its depths
    s = seeds_of(cfg)
    gens = {k: torch.Generator().manual_seed(stream(s[k], k)) for k in ("data", "depth")}
    T_eval = cfg.T_test if cfg.looped else min(cfg.T_test, trained_depth(cfg))  # the vanilla model has no more blocks
    id_sets = eval_set(task, [n for n in metrics.test_lengths(cfg) if n <= cfg.n_max] or [cfg.n_max], 64, cfg.eval_seed)

    # --- run machinery (lab/): resume, config.json and metrics.jsonl, the log, Ctrl-C ----------------------
    step, elapsed, sums, saved_ema = rundir.restore(start, run_dir, model, schedule, optimizer, gens) if start else (0, 0.0, {}, None)
    # a weight average is a smoother estimate of the weights than the last step's (Fan et al. evaluate it); off by default
    ema = EMA(cfg.ema, ema_start_step(cfg), model, schedule, saved_ema)
    if start:
        rundir.check_ema(cfg, run_dir, step, ema)  # the checkpoint's EMA weights are this run's
    else:
        ema.after(0)  # --ema_start 0: the EMA starts from the initial weights
    env, segments = rundir.open_run(cfg, run_dir, step, resumed=bool(start))
    ckpt_path = os.path.join(run_dir, "ckpt.pt")
    log = runs.Log(cfg, run_dir, step, elapsed, sums)

    def eager():  # with --compile, evaluation runs the uncompiled module
        return torch.compiler.set_stance("force_eager") if cfg.compile else contextlib.nullcontext()

    model.train()
    with rundir.forgotten_if_unsaved(run_dir), runs.guard(ckpt_path, lambda: log.done):
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
            done = it + 1  # steps finished; the last step always logs, evaluates and checkpoints
            last = done == cfg.max_iters
            log.add(done, stats)
            ema.after(done)
            if done % cfg.log_interval == 0 or last:  # a line of the mean stats since the previous one
                rec = log.record(lr, n_hi)
                # the policy's ID exact match: a cheap sign that training converges (the full scoring runs once, at
                # the end), so it runs every eval_interval steps only
                if done % cfg.eval_interval == 0 or last:
                    with eager():
                        rec["id_acc"] = metrics.policy_id_acc(model, schedule, id_sets, T_eval, cfg.eval_batch_size, device)
                    model.train()
                log.write(rec)
            if done % cfg.ckpt_interval == 0 or last:  # --resume continues from here; Ctrl-C loses at most this many
                with log.paused():  # checkpoint writes are not training time
                    rundir.save_checkpoint(ckpt_path, {
                        "model": model.state_dict(), "schedule": schedule.state_dict(), "optimizer": optimizer.state_dict(),
                        "step": log.done, "elapsed": log.elapsed, "acc_stats": log.sums, "config": dataclasses.asdict(cfg),
                        "ema": ema.weights, "rng": {**{k: g.get_state() for k, g in gens.items()}, "torch": torch.get_rng_state()}})
    log.close()
    with eager():
        return finish_run(cfg, run_dir, model, schedule, task, T_eval, log.elapsed, env, segments, device, ema.weights)


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
        records.apply_ema(model, schedule, ema)
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
    rundir.validate(cfg)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    runs.sweep(cfg, train_run, finish_run)  # --seeds, torchrun's ranks, --stack: lab/runs.py


def cli(argv=None) -> int:
    """main() as a command: one line and exit code 2 for bad input (cli.run)."""
    return run(main, "train.py", argv)


if __name__ == "__main__":
    sys.exit(cli())
