"""
Train a looped transformer on one task with one stop schedule, then evaluate it.

    python train.py                                       # dyck, window w=5: ~5 min on 2 CPU cores
    python train.py --task copy --schedule rl             # every task has a CPU recipe (RECIPES below)
    python train.py --task addition --preset paper        # the papers' scale, for a GPU
    python train.py --seeds 4 --out_dir out/dyck          # seeds 0..3 into out/dyck/seed{k}/, and a table row
    torchrun --nproc_per_node 2 train.py --seeds 8 --threads 1    # the same, seeds split over 2 processes

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
from dataclasses import dataclass

import torch
from tqdm import tqdm

import evaluate
import ntp
import rundir
import tables
from cli import atomic_write, opt, parse, run, write_json
from halting import SCHEDULES, make_schedule, settings
from model import LoopedTransformer, ModelConfig
from tasks import PAD, TASKS, curriculum_n_max, eval_set, get_task, task_kwargs, train_batch


@dataclass
class Config:
    task: str = opt("dyck", "task name", choices=list(TASKS), section="what to train")
    schedule: str = opt("window", "stop schedule, or an autoregressive baseline (ntp, ntp_pause, ntp_loop: ntp.py)",
                        choices=list(SCHEDULES) + list(ntp.SCHEDULES))
    c: int = opt(0, "the constant depth c of fixed and fixed_window (the papers' 'fixed K = c') and of the NTP "
                    "baselines (ntp, ntp_pause: c blocks of n_layer layers; ntp_loop: c loops); 0: T_max")
    w: int = opt(5, "window half-width: D ~ Unif{-w..w} (window, fixed_window, multidepth)")
    T_max: int = opt(20, "training truncation: no training depth exceeds T_max")
    T_test: int = opt(30, "test-time maximum depth; every test depth is clipped to 1..T_test")
    n_min: int = opt(1, "shortest training length")
    n_max: int = opt(19, "longest training length; longer test lengths are out of distribution (OOD)")
    curriculum: bool = opt(False, "length curriculum (Fan et al.): the longest training length starts at "
                                  "curriculum_start and grows by 1 every curriculum_every steps up to n_max")
    curriculum_start: int = opt(2, "first longest training length under --curriculum")
    curriculum_every: int = opt(50, "steps between +1 increases of the longest training length")
    lambda_ent: float = opt(0.001, "rl: weight of the entropy bonus H(pi(.|x)) in L_halt", section="schedule knobs")
    beta: float = opt(0.01, "ponder: weight of KL(q || truncated geometric(lambda_p))")
    lambda_p: float = opt(0.2, "ponder and fixed_prior: parameter of the truncated geometric prior, in (0, 1)")
    alpha: float = opt(0.5, "ponder: exit at the first t with cumulative q >= alpha")
    ponder_rule: str = opt("alpha", "ponder test rule: alpha (cumulative q >= alpha) or argmax", choices=["alpha", "argmax"])
    prior: str = opt("geometric", "fixed_prior: input-independent depth prior", choices=["uniform", "geometric"])
    tau_act: float = opt(0.01, "act: ponder-cost weight tau")
    act_eps: float = opt(0.01, "act: halt once the cumulative halting probability reaches 1 - act_eps")
    n_pause: int = opt(20, "ntp_pause: pause tokens between the prompt and the answer (our choice, = T_max: the "
                           "paper does not state its count)")
    ntp_greedy: bool = opt(False, "ntp*: score by literal greedy decoding (re-runs the prefix for every answer token) "
                                  "instead of one teacher-forced pass, which gives the same exact match")
    r_bar: int = opt(10, "lognormal_poisson: mean depth r_bar (test depth too)")
    sigma: float = opt(0.5, "lognormal_poisson: spread of the log-normal rate")
    r_per: str = opt("batch", "lognormal_poisson: one depth per batch (the paper) or per sample", choices=["batch", "sample"])
    trm_steps: int = opt(1, "trm_halt: loop steps per supervision step")
    bptt_k: int = opt(0, "backpropagate through only the last k loop steps (0: all; single-depth schedules)")
    active_set: bool = opt(True, "shrink the batch as samples reach their depth (sum tau, not B*max tau)")
    V: int = opt(16, "unique_set: values lie in {0..V-1} (paper: 50)", section="task knobs")
    p: int = opt(23, "mano: the modulus p of Z_p")
    m_train: str = opt("1,2", "multiplication: comma-separated widths m of b, one drawn per training sample")
    m_test: int = opt(2, "multiplication: width m of b in every evaluation set")
    d_model: int = opt(64, "model width D", section="model")
    n_head: int = opt(4, "attention heads")
    n_layer: int = opt(3, "GPT layers in the shared block (L)")
    dropout: float = opt(0.0, "dropout")
    inject: bool = opt(True, "input injection H_t = Block(H_{t-1} + H_0)")
    looped: bool = opt(True, "looped model; --no-looped: vanilla baseline, distinct layers for each trained step")
    max_iters: int = opt(800, "training steps", section="optimisation")
    batch_size: int = opt(64, "samples per step")
    lr: float = opt(3e-4, "peak learning rate (AdamW), cosine decay to min_lr")
    min_lr: float = opt(0.0, "learning rate at the end of the cosine decay")
    warmup_iters: int = opt(100, "linear warm-up steps")
    weight_decay: float = opt(0.01, "AdamW weight decay")
    beta1: float = opt(0.9, "AdamW beta1")
    beta2: float = opt(0.98, "AdamW beta2")
    grad_clip: float = opt(1.0, "clip the gradient norm to this (0: off)")
    seed: int = opt(0, "seed of the run: depth sampling, and initialisation / data order unless set below", section="runs")
    init_seed: int = opt(-1, "seed of the initial weights (-1: --seed)")
    data_seed: int = opt(-1, "seed of the training batches (-1: --seed)")
    seeds: int = opt(1, "number of seeds: runs seed..seed+seeds-1 into out_dir/seed{k}/")
    out_dir: str = opt("", "run directory (default out/{task}-{schedule})")
    resume: bool = opt(False, "continue the run in out_dir from its ckpt.pt")
    overwrite: bool = opt(False, "replace a run that out_dir already holds")
    device: str = opt("auto", "auto, cpu, cuda, cuda:N or mps")
    threads: int = opt(0, "CPU threads for torch (0: torch's default); use 1 per process when sharing cores")
    compile: bool = opt(False, "torch.compile the shared block for training (checkpoints stay clean, eval eager)")
    amp: bool = opt(True, "bf16 autocast for training on CUDA (ignored on CPU, where it is slower)")
    preset: str = opt("cpu", "cpu: the task's CPU recipe (RECIPES); paper: the papers' scale, for a GPU",
                      choices=["cpu", "paper"])
    log_interval: int = opt(50, "steps between log lines", section="evaluation and logging")
    eval_interval: int = opt(250, "steps between in-distribution checks")
    ckpt_interval: int = opt(250, "steps between checkpoints")
    eval_samples: int = opt(128, "test samples per length (and as many validation samples)")
    eval_batch_size: int = opt(256, "batch size of evaluation")
    eval_seed: int = opt(1234, "seed of the fixed evaluation sets (test: eval_seed, validation: eval_seed + 1)")
    test_lengths: str = opt("5,10,15,19,20,25,30,35,40,45,50,55,60", "comma-separated test lengths")

    @property
    def depth_c(self) -> int:
        """The constant depth c that --c names: 0 means c = T_max."""
        return self.c or self.T_max

    def stop_schedule(self):
        """The stop schedule --schedule names, built from the knobs it takes (halting.settings)."""
        knobs = {**dataclasses.asdict(self), "c": self.depth_c, "pad_id": PAD}
        return make_schedule(self.schedule, **{k: knobs[k] for k in settings(self.schedule)})


# Per-task CPU recipes: what `python train.py --task T` uses unless a flag says otherwise. dyck is the
# defaults above. The reasons behind each choice are in results/README.md.
GRID10 = "4,7,10,12,14,16,18,20,25,30"  # OOD to 3x n_max = 10
RECIPES = {
    "dyck": {},
    # n <= 10 and lr 1e-3: at n <= 19 and lr 3e-4 copy reached 14% in 500 steps; OOD grid to 3x n_max
    "copy": dict(n_max=10, T_max=15, T_test=30, test_lengths=GRID10, lr=1e-3, max_iters=1500),
    "parity_prefix": dict(n_max=10, T_max=15, T_test=30, test_lengths=GRID10, lr=1e-3, max_iters=2500),
    "parity": dict(n_max=10, T_max=15, T_test=30, test_lengths=GRID10, lr=1e-3, max_iters=2500),
    "binary_sum": dict(n_max=10, T_max=15, T_test=30, test_lengths=GRID10, lr=1e-3, max_iters=4000),
    # V = 32 > n_max: OOD answers (up to ~20 distinct values at n = 30) are longer than any training answer
    "unique_set": dict(V=32, n_max=10, T_max=15, T_test=30, test_lengths=GRID10, lr=1e-3, max_iters=4000),
    # n <= 4 bits per operand (the CPU's budget: n <= 8 reached 31% in 2500 steps, n <= 5 92% in 6000); OOD to 3x
    "addition": dict(n_max=4, T_max=10, T_test=20, test_lengths="2,3,4,5,6,8,10,12", lr=1e-3, max_iters=8000),
    # T(n) = n*m <= 12 fits T_max in training; T_test 36 = T(18) at the longest test length
    "multiplication": dict(n_max=6, T_max=12, T_test=36, test_lengths="2,4,6,8,10,12,14,16,18", lr=1e-3,
                           max_iters=4000),
    "mano": dict(n_max=8, T_max=13, T_test=24, test_lengths="2,4,6,8,10,12,14,16,20,24", lr=1e-3, max_iters=2000),
}

# The papers' scale (primary paper's protocol): d_model 256, 8 heads, L = 3, batch 64, 100k steps, lr 1e-4.
PAPER = dict(V=50, d_model=256, n_head=8, n_layer=3, max_iters=100_000, batch_size=64, lr=1e-4, beta2=0.999,
             warmup_iters=1000, eval_samples=512, log_interval=200, eval_interval=5000, ckpt_interval=2000)


def recipes_text() -> str:
    lines = ["CPU recipes (--preset cpu, the default): what --task T sets unless a flag says otherwise"]
    for task, r in RECIPES.items():
        lines.append(f"  {task:15} " + (" ".join(f"--{k} {v}" for k, v in r.items()) or "the defaults above"))
    return "\n".join(lines)


def parse_args(argv=None) -> Config:
    """Flags over the preset over the defaults: a preset sets defaults, so an explicit flag always wins."""
    return parse(Config, argv, prog="train.py", doc=__doc__, epilog=recipes_text(),
                 presets=lambda a: PAPER if a.preset == "paper" else RECIPES.get(a.task, {}))


# --- building a run: the task, the model and the schedule ---------------------------------------------

STREAMS = ("model", "head", "data", "depth", "torch")


def stream(seed: int, name: str) -> int:
    """The seed of one random stream: model init, head init, data order, depth sampling, torch's global RNG."""
    return len(STREAMS) * seed + STREAMS.index(name)


def seeds_of(cfg: Config) -> dict:
    init = cfg.init_seed if cfg.init_seed >= 0 else cfg.seed
    data = cfg.data_seed if cfg.data_seed >= 0 else cfg.seed
    return {"model": init, "head": init, "data": data, "depth": cfg.seed, "torch": cfg.seed}


def trained_depth(cfg: Config) -> int:
    """The deepest step training supervises: the vanilla baseline gets exactly that many blocks."""
    return cfg.depth_c if cfg.schedule == "fixed" else cfg.T_max


def build(cfg: Config):
    """(task, model, schedule). One seed gives the same initial transformer under every schedule: the
    transformer and the halting head draw from their own streams."""
    task = get_task(cfg.task, **task_kwargs(cfg.task, dataclasses.asdict(cfg)))
    s = seeds_of(cfg)
    torch.manual_seed(stream(s["model"], "model"))
    if cfg.schedule in ntp.SCHEDULES:  # the autoregressive baselines build their own model (ntp.py)
        model, schedule = ntp.build(dataclasses.asdict(cfg), task)
        torch.manual_seed(stream(s["torch"], "torch"))
        return task, model, schedule
    model = LoopedTransformer(ModelConfig(vocab_size=len(task.vocab), d_model=cfg.d_model, n_head=cfg.n_head,
                                          n_layer=cfg.n_layer, dropout=cfg.dropout, inject=cfg.inject,
                                          looped=cfg.looped, n_loops=trained_depth(cfg)))
    torch.manual_seed(stream(s["head"], "head"))
    schedule = cfg.stop_schedule()
    torch.manual_seed(stream(s["torch"], "torch"))  # dropout, if any
    return task, model, schedule


# --- one run ------------------------------------------------------------------------------------------

def lr_at(cfg: Config, it: int) -> float:
    """Linear warm-up, then cosine decay from lr to min_lr at max_iters."""
    if it < cfg.warmup_iters:
        return cfg.lr * (it + 1) / cfg.warmup_iters
    t = (it - cfg.warmup_iters) / max(1, cfg.max_iters - cfg.warmup_iters)
    return cfg.min_lr + 0.5 * (1 + math.cos(math.pi * min(t, 1.0))) * (cfg.lr - cfg.min_lr)


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
    if start:
        try:
            model.load_state_dict(start["model"])
            schedule.load_state_dict(start["schedule"])
            optimizer.load_state_dict(start["optimizer"])
            for k, g in gens.items():
                g.set_state(start["rng"][k])
            torch.set_rng_state(start["rng"]["torch"])
        except (RuntimeError, KeyError, ValueError, TypeError) as err:
            msg = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
            raise ValueError(f"--resume: {run_dir}/ckpt.pt does not fit this run ({msg})") from None
        step, elapsed, acc_stats = start["step"], start["elapsed"], start["acc_stats"]
    ckpt_path, log_path = os.path.join(run_dir, "ckpt.pt"), os.path.join(run_dir, "metrics.jsonl")
    write_json(os.path.join(run_dir, "config.json"), {**dataclasses.asdict(cfg), "env": rundir.environment()})
    kept = rundir.log_lines(log_path, step)  # metrics.jsonl holds exactly the lines up to the checkpoint's step
    atomic_write(log_path, lambda f: f.write("".join(kept).encode()))
    T_eval = cfg.T_test if cfg.looped else min(cfg.T_test, trained_depth(cfg))
    id_sets = eval_set(task, [n for n in rundir.lengths(cfg) if n <= cfg.n_max] or [cfg.n_max], 64, cfg.eval_seed)

    def eager():  # with --compile, evaluation runs the uncompiled module
        return torch.compiler.set_stance("force_eager") if cfg.compile else contextlib.nullcontext()

    def save(step):
        if not all(torch.isfinite(p).all() for p in model.parameters()):
            raise FloatingPointError(f"non-finite weights at step {step}; " + rundir.last_good(ckpt_path))
        ck = {"model": model.state_dict(), "schedule": schedule.state_dict(), "optimizer": optimizer.state_dict(),
              "step": step, "elapsed": elapsed, "acc_stats": acc_stats, "config": dataclasses.asdict(cfg),
              "rng": {**{k: g.get_state() for k, g in gens.items()}, "torch": torch.get_rng_state()}}
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
            if done % cfg.log_interval == 0 or done == cfg.max_iters:
                n_acc, now = acc_stats.pop("steps"), time.time()
                elapsed += now - t0
                rec = {"step": done, "lr": lr_at(cfg, it), "n_max": n_hi, **{k: v / n_acc for k, v in acc_stats.items()},
                       "ms_per_step": 1000 * (now - t0) / (done - t0_step), "elapsed_s": elapsed}
                t0, t0_step, acc_stats = now, done, {}
                if done % cfg.eval_interval == 0 or done == cfg.max_iters:  # the policy's ID exact match
                    with eager():
                        scores = evaluate.score_sets(model.eval(), schedule, id_sets, T_eval, cfg.eval_batch_size, device)
                    model.train()
                    rec["id_acc"] = 100 * torch.cat([v["exact"][v["depth"] - 1, torch.arange(len(v["depth"]))]
                                                     for v in scores.values()]).float().mean().item()
                with open(log_path, "a") as f:
                    f.write(json.dumps(rec) + "\n")
                msg = " | ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in rec.items())
                (bar.write if not bar.disable else print)(msg)
                t0 = time.time()
            if done % cfg.ckpt_interval == 0 or done == cfg.max_iters:
                t_save = time.time()
                save(done)
                step = done
                t0 += time.time() - t_save  # checkpoint writes are not training time
    except KeyboardInterrupt:  # Ctrl-C: one line, exit 130 (cli.run)
        raise KeyboardInterrupt(f"interrupted after step {done}; {rundir.last_good(ckpt_path)}; "
                                f"continue with --resume") from None
    bar.close()
    t_eval = time.time()
    lengths = rundir.lengths(cfg)
    with eager():
        e = evaluate.evaluate(model, schedule, task, eval_set(task, lengths, cfg.eval_samples, cfg.eval_seed),
                              eval_set(task, lengths, cfg.eval_samples, cfg.eval_seed + 1), T_eval, cfg.n_max,
                              cfg.eval_batch_size, device)
    e = {"task": cfg.task, "schedule": cfg.schedule, "seed": cfg.seed, "n_max": cfg.n_max, **e,
         "train_time_s": elapsed, "eval_time_s": time.time() - t_eval, "steps": cfg.max_iters,
         "config": dataclasses.asdict(cfg), "env": rundir.environment()}
    write_json(os.path.join(run_dir, "eval.json"), e)
    return e


# --- seeds: one process, or split over torchrun's ranks -----------------------------------------------

def init_distributed(device: str):
    """Under torchrun: (rank, world, device). Seeds are split over the ranks; each rank trains its own."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, device
    import torch.distributed as dist
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
    plans = {d: rundir.plan(dataclasses.replace(cfg, seed=k, out_dir=d), d, single=cfg.seeds == 1) for k, d in runs}
    evals = []
    for k, d in runs[rank::world]:  # rank r trains seeds r, r+P, ...
        run_cfg, (action, start) = dataclasses.replace(cfg, seed=k, out_dir=d), plans[d]
        with rundir.Lock(d):
            if action == "overwrite":  # --overwrite: the old run's files go before the new run writes any
                for f in rundir.RUN_FILES:
                    if os.path.exists(os.path.join(d, f)):
                        os.remove(os.path.join(d, f))
            if action == "skip":
                print(f"seed {k}: finished earlier, skipped ({d}/eval.json)")
                e = evaluate.load_eval(d)
            else:
                print(f"run {d}: task {cfg.task}, schedule {cfg.schedule}, seed {k}, device {device}"
                      + (f", rank {rank}/{world}" if world > 1 else "") + {"resume": f", resumed at step {start and start['step']}",
                                                                           "restart": ", no checkpoint: started from scratch"}.get(action, ""))
                e = train_run(run_cfg, d, device, start)
        e["run_dir"] = d
        print(evaluate.format_run(e))
        evals.append(e)
    if world > 1:  # rank 0 gathers every rank's results and writes the summary
        import torch.distributed as dist
        gathered = [None] * world
        dist.all_gather_object(gathered, evals)
        evals = sorted((e for part in gathered for e in part), key=lambda e: e["seed"])
        dist.destroy_process_group()
        if rank != 0:
            return
    md, rows = tables.table(tables.group_runs(evals))
    print("\n" + md)
    if cfg.seeds > 1:
        write_json(os.path.join(out_dir, "summary.json"), {**rows[0], "runs": [e["run_dir"] for e in evals]})

def cli(argv=None) -> int:
    """main() as a command: one line and exit code 2 for bad input (cli.run)."""
    return run(main, "train.py", argv)


if __name__ == "__main__":
    sys.exit(cli())
