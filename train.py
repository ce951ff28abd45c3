"""
Train a looped transformer on one task with one stop schedule, then evaluate it (SPEC sections 1-4).

    python train.py                                          # dyck, window w=5, CPU scale, ~5 min
    python train.py --task dyck --schedule window --w 5
    python train.py --task addition --schedule fixed --K 20 --preset paper   # paper scale, for a GPU
    python train.py --seeds 4 --out_dir out/dyck-window      # 4 seeds into out_dir/seed{k}/ + table row

A run directory holds ckpt.pt (model, schedule, optimizer, step, RNG states; loadable with
weights_only=True), config.json, metrics.jsonl (one JSON line per log interval) and eval.json.
`--resume` continues from ckpt.pt exactly: same batches, same depths, same weights.
"""

import argparse
import contextlib
import dataclasses
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

import evaluate
from halting import SCHEDULES, make_schedule
from tasks import TASKS, curriculum_n_max, eval_set, get_task, task_kwargs, train_batch


def opt(default, help: str, **kw):
    """A Config field: its default and its --help text."""
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class Config:
    # what to train
    task: str = opt("dyck", "task name", choices=list(TASKS))
    schedule: str = opt("window", "stop schedule", choices=list(SCHEDULES))
    w: int = opt(5, "window half-width: D ~ Unif{-w..w} (window, fixed_window, multidepth)")
    K: int = opt(20, "the constant depth c of fixed and fixed_window")
    T_max: int = opt(20, "training truncation: no training depth exceeds T_max")
    T_test: int = opt(30, "test-time maximum depth; every test depth is clipped to 1..T_test")
    n_min: int = opt(1, "shortest training length")
    n_max: int = opt(19, "longest training length (SPEC: n < 20); longer test lengths are OOD")
    # learned and weighted schedules (halting.py)
    lambda_ent: float = opt(0.001, "rl: weight of the entropy bonus H(pi(.|x)) in L_halt")
    beta: float = opt(0.01, "ponder: weight of KL(q || truncated geometric(lambda_p))")
    lambda_p: float = opt(0.2, "ponder: parameter of the truncated geometric prior, in (0, 1)")
    alpha: float = opt(0.5, "ponder: exit at the first t with cumulative q >= alpha")
    ponder_rule: str = opt("alpha", "ponder test rule: alpha (cumulative q >= alpha) or argmax (argmax_t q_t)",
                           choices=["alpha", "argmax"])
    prior: str = opt("geometric", "fixed_prior: input-independent depth prior", choices=["uniform", "geometric"])
    lam: float = opt(0.3, "fixed_prior: parameter of the truncated geometric prior, in (0, 1)")
    tau_act: float = opt(0.01, "act: ponder-cost weight tau")
    act_eps: float = opt(0.01, "act: halt once the cumulative halting probability reaches 1 - act_eps")
    curriculum: bool = opt(False, "length curriculum (Fan et al.): the longest training length starts at "
                                  "curriculum_start and grows by 1 every curriculum_every steps up to n_max")
    curriculum_start: int = opt(2, "first longest training length under --curriculum")
    curriculum_every: int = opt(50, "steps between +1 increases of the longest training length")
    # task knobs
    V: int = opt(16, "unique_set: values lie in {0..V-1} (paper scale: 50)")
    p: int = opt(23, "mano: the modulus p of Z_p")
    m_train: str = opt("1,2", "multiplication: comma-separated widths m of b, one drawn per training sample")
    m_test: int = opt(2, "multiplication: width m of b in every evaluation set")
    active_set: bool = opt(True, "shrink the batch as samples reach their depth (sum tau, not B*max tau)")
    compile: bool = opt(False, "torch.compile the shared block for training (checkpoints stay clean, eval eager)")
    amp: bool = opt(True, "bf16 autocast for training on CUDA (ignored on CPU, where it is slower)")
    # model
    d_model: int = opt(64, "model width D")
    n_head: int = opt(4, "attention heads")
    n_layer: int = opt(3, "GPT layers in the shared block (L)")
    dropout: float = opt(0.0, "dropout")
    inject: bool = opt(True, "input injection H_t = Block(H_{t-1} + H_0)")
    looped: bool = opt(True, "looped model; --no-looped: vanilla baseline with distinct layers per step")
    # optimisation
    max_iters: int = opt(800, "training steps")
    batch_size: int = opt(64, "samples per step")
    lr: float = opt(3e-4, "peak learning rate (AdamW), cosine decay to min_lr")
    min_lr: float = opt(0.0, "learning rate at the end of the cosine decay")
    warmup_iters: int = opt(100, "linear warm-up steps")
    weight_decay: float = opt(0.01, "AdamW weight decay")
    beta1: float = opt(0.9, "AdamW beta1")
    beta2: float = opt(0.98, "AdamW beta2")
    grad_clip: float = opt(1.0, "clip the gradient norm to this (0: off)")
    # runs
    seed: int = opt(0, "first seed")
    seeds: int = opt(1, "number of seeds: runs seed..seed+seeds-1 into out_dir/seed{k}/")
    out_dir: str = opt("", "run directory (default out/{task}-{schedule})")
    resume: bool = opt(False, "continue from out_dir's ckpt.pt")
    device: str = opt("auto", "auto, cpu, cuda, cuda:N or mps")
    threads: int = opt(0, "CPU threads for torch (0: torch's default); use 1 per process when sharing cores")
    preset: str = opt("cpu", "cpu (defaults above) or paper (SPEC paper scale, for a GPU)", choices=["cpu", "paper"])
    # logging and evaluation
    log_interval: int = opt(50, "steps between log lines")
    eval_interval: int = opt(250, "steps between in-distribution checks")
    ckpt_interval: int = opt(250, "steps between checkpoints")
    eval_samples: int = opt(128, "test samples per length")
    eval_batch_size: int = opt(256, "batch size of evaluation")
    eval_seed: int = opt(1234, "seed of the fixed evaluation sets (independent of --seed)")
    test_lengths: str = opt("5,10,15,19,20,25,30,35,40,45,50,55,60", "comma-separated test lengths")


# SPEC section 3, paper scale: d_model 256, 8 heads, L=3, AdamW, batch 64, 100k steps, lr 1e-4, wd 0.01
PRESETS = {"cpu": {},
           "paper": dict(V=50, d_model=256, n_head=8, n_layer=3, max_iters=100_000, batch_size=64, lr=1e-4,
                         beta2=0.999, warmup_iters=1000, eval_samples=512, log_interval=200,
                         eval_interval=5000, ckpt_interval=2000)}


# --- command line -----------------------------------------------------------------------------------

class HelpFormat(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """--help shows every default and keeps the examples' line breaks."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv=None) -> Config:
    """Config from the command line: --name value and --name=value both work; booleans get
    --name/--no-name; a preset fills what was not given explicitly."""
    p = Parser(prog="train.py", description=__doc__.split("\n\n")[1].strip(), formatter_class=HelpFormat)
    for f in dataclasses.fields(Config):
        kw = dict(help=f.metadata["help"], default=f.default)
        if f.type is bool or isinstance(f.default, bool):
            p.add_argument(f"--{f.name}", action=argparse.BooleanOptionalAction, **kw)
        else:
            p.add_argument(f"--{f.name}", type=type(f.default), choices=f.metadata.get("choices"), **kw)
    args = p.parse_args(argv)
    given = {a.split("=")[0][2:].removeprefix("no-") for a in (argv if argv is not None else sys.argv[1:])
             if a.startswith("--")}
    values = vars(args)
    for k, v in PRESETS[args.preset].items():
        if k not in given:
            values[k] = v
    cfg = Config(**values)
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    """Reject bad settings with one line naming the value and what is allowed."""
    checks = [
        (cfg.w >= 0, f"--w {cfg.w}: must be >= 0"),
        (cfg.K >= 1, f"--K {cfg.K}: must be >= 1"),
        (cfg.T_max >= 1, f"--T_max {cfg.T_max}: must be >= 1"),
        (cfg.T_test >= cfg.T_max, f"--T_test {cfg.T_test}: must be >= T_max ({cfg.T_max})"),
        (1 <= cfg.n_min <= cfg.n_max, f"--n_min {cfg.n_min} --n_max {cfg.n_max}: need 1 <= n_min <= n_max"),
        (cfg.max_iters >= 1, f"--max_iters {cfg.max_iters}: must be >= 1"),
        (cfg.batch_size >= 1, f"--batch_size {cfg.batch_size}: must be >= 1"),
        (math.isfinite(cfg.lr) and cfg.lr > 0, f"--lr {cfg.lr}: must be a finite number > 0"),
        (cfg.d_model >= 1 and cfg.n_head >= 1 and cfg.d_model % cfg.n_head == 0,
         f"--d_model {cfg.d_model} --n_head {cfg.n_head}: d_model must be a positive multiple of n_head"),
        (cfg.n_layer >= 1, f"--n_layer {cfg.n_layer}: must be >= 1"),
        (cfg.seeds >= 1, f"--seeds {cfg.seeds}: must be >= 1"),
        (cfg.threads >= 0, f"--threads {cfg.threads}: must be >= 0"),
        (cfg.eval_samples >= 1, f"--eval_samples {cfg.eval_samples}: must be >= 1"),
        (min(cfg.log_interval, cfg.eval_interval, cfg.ckpt_interval) >= 1, "--log/eval/ckpt_interval: must be >= 1"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ValueError(msg)
    try:
        lengths = test_lengths(cfg)
    except ValueError:
        raise ValueError(f"--test_lengths {cfg.test_lengths!r}: must be comma-separated integers") from None
    if cfg.curriculum and not (cfg.curriculum_every >= 1 and cfg.n_min <= cfg.curriculum_start <= cfg.n_max):
        raise ValueError(f"--curriculum_every {cfg.curriculum_every} --curriculum_start {cfg.curriculum_start}: "
                         f"need curriculum_every >= 1 and n_min <= curriculum_start <= n_max")
    task = get_task(cfg.task, **task_kwargs(cfg.task, dataclasses.asdict(cfg)))
    make_schedule(cfg.schedule, **dataclasses.asdict(cfg))  # the schedule checks its own knobs
    for n in lengths + [cfg.n_min, cfg.n_max]:
        task.check_length(n)
    if cfg.device != "auto":
        ok = cfg.device == "cpu" or (cfg.device.startswith("cuda") and torch.cuda.is_available()) or (
            cfg.device == "mps" and torch.backends.mps.is_available())
        if not ok:
            raise ValueError(f"--device {cfg.device}: not available here; use auto or cpu"
                             + (", cuda" if torch.cuda.is_available() else ""))


def test_lengths(cfg: Config) -> list[int]:
    return sorted({int(s) for s in cfg.test_lengths.split(",") if s.strip()})


def pick_device(name: str) -> str:
    if name != "auto":
        return name
    if torch.cuda.is_available():
        return "cuda"
    return "mps" if torch.backends.mps.is_available() else "cpu"


# --- one run ------------------------------------------------------------------------------------------

def lr_at(cfg: Config, it: int) -> float:
    """Linear warm-up, then cosine decay from lr to min_lr at max_iters."""
    if it < cfg.warmup_iters:
        return cfg.lr * (it + 1) / cfg.warmup_iters
    t = (it - cfg.warmup_iters) / max(1, cfg.max_iters - cfg.warmup_iters)
    return cfg.min_lr + 0.5 * (1 + math.cos(math.pi * min(t, 1.0))) * (cfg.lr - cfg.min_lr)


def atomic_write(path: str, write) -> None:
    """Write via a temp file, fsync, rename: a crash leaves the old file or the new one, never half."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path: str, obj) -> None:
    atomic_write(path, lambda f: f.write((json.dumps(obj, indent=1) + "\n").encode()))


def environment() -> dict:
    """Versions, hardware and the git commit of the code, recorded in config.json and eval.json."""
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or platform.machine()
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=os.path.dirname(os.path.abspath(__file__)),
                                capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"torch": torch.__version__, "python": platform.python_version(), "hardware": dev,
            "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(), "git_commit": commit}


def generators(seed: int) -> dict:
    """Independent generators: the data a seed sees never depends on the schedule's depth draws."""
    return {"data": torch.Generator().manual_seed(2 * seed), "depth": torch.Generator().manual_seed(2 * seed + 1)}


def load_checkpoint(path: str, cfg: Config) -> dict:
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ValueError(f"--resume: no checkpoint at {path}") from None
    except Exception as err:
        raise ValueError(f"--resume: {path} is not a readable checkpoint ({type(err).__name__})") from None
    if not isinstance(ck, dict) or not {"model", "optimizer", "step", "config"} <= set(ck):
        raise ValueError(f"--resume: {path} is not a train.py checkpoint")
    keys = ("task", "schedule", "d_model", "n_head", "n_layer", "looped", "inject", "T_test", "seed", "V", "p")
    diff = [f"{k}={ck['config'][k]!r} (now {getattr(cfg, k)!r})" for k in keys if ck["config"].get(k) != getattr(cfg, k)]
    if diff:
        raise ValueError(f"--resume: {path} belongs to another run: " + ", ".join(diff))
    return ck


def train_step(model, schedule, optimizer, batch, gen: torch.Generator, grad_clip: float,
               autocast=contextlib.nullcontext()):
    """One step: the schedule's loss, backward, gradient clip, AdamW. Returns (loss, grad_norm, stats).
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
    return loss.item(), gnorm.item(), stats


def train_run(cfg: Config, run_dir: str, device: str) -> dict:
    """Train one seed in run_dir, evaluate, write eval.json; return the eval dict."""
    os.makedirs(run_dir, exist_ok=True)
    ckpt_path = os.path.join(run_dir, "ckpt.pt")
    torch.manual_seed(cfg.seed)  # parameter init only; data and depths use their own generators
    task, model, schedule = evaluate.build(dataclasses.asdict(cfg))
    model.to(device), schedule.to(device)
    if cfg.compile:  # in place: the state_dict keeps its keys (no `_orig_mod.` prefix)
        for block in model.blocks:
            block.compile(dynamic=True)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if cfg.amp and device.startswith("cuda")
                else contextlib.nullcontext())
    optimizer = torch.optim.AdamW(list(model.parameters()) + list(schedule.parameters()), lr=cfg.lr,
                                  betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
    gens = generators(cfg.seed)
    step, elapsed, acc_stats = 0, 0.0, {}  # acc_stats: sums over the steps since the last log line
    if cfg.resume and os.path.exists(ckpt_path):
        ck = load_checkpoint(ckpt_path, cfg)
        model.load_state_dict(ck["model"]), schedule.load_state_dict(ck["schedule"])
        optimizer.load_state_dict(ck["optimizer"])
        for k, g in gens.items():
            g.set_state(ck["rng"][k])
        torch.set_rng_state(ck["rng"]["torch"])
        step, elapsed, acc_stats = ck["step"], ck["elapsed"], ck.get("acc_stats", {})
    elif cfg.resume and cfg.seeds == 1:
        raise ValueError(f"--resume: no checkpoint at {ckpt_path}")
    write_json(os.path.join(run_dir, "config.json"), {**dataclasses.asdict(cfg), "env": environment()})
    log_path = os.path.join(run_dir, "metrics.jsonl")
    keep = []  # metrics.jsonl holds exactly the lines up to the checkpoint's step
    if step and os.path.exists(log_path):
        keep = [l for l in open(log_path) if json.loads(l)["step"] <= step]
    atomic_write(log_path, lambda f: f.write("".join(keep).encode()))

    id_sets = eval_set(task, [n for n in test_lengths(cfg) if n <= cfg.n_max] or [cfg.n_max], 64, cfg.eval_seed)

    def run_eval(sets):  # the eager module: with --compile, evaluation switches compilation off
        eager = (torch.compiler.set_stance("force_eager") if cfg.compile and hasattr(torch.compiler, "set_stance")
                 else contextlib.nullcontext())
        with eager:
            return evaluate.evaluate(model, schedule, task, sets, cfg.T_test, cfg.eval_batch_size, device, cfg.n_max)

    def save(step):
        ck = {"model": model.state_dict(), "schedule": schedule.state_dict(), "optimizer": optimizer.state_dict(),
              "step": step, "elapsed": elapsed, "acc_stats": acc_stats, "config": dataclasses.asdict(cfg),
              "rng": {**{k: g.get_state() for k, g in gens.items()}, "torch": torch.get_rng_state()}}
        atomic_write(ckpt_path, lambda f: torch.save(ck, f))

    model.train()
    t0, t0_step = time.time(), step  # wall clock since the last log line (or the start / resume)
    bar = tqdm(range(step, cfg.max_iters), initial=step, total=cfg.max_iters, desc=os.path.basename(run_dir) or run_dir,
               disable=not sys.stderr.isatty(), leave=False)
    for it in bar:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(cfg, it)
        n_hi = curriculum_n_max(it, cfg.curriculum_start, cfg.n_max, cfg.curriculum_every) if cfg.curriculum else cfg.n_max
        x, y, _, Tn = train_batch(task, cfg.batch_size, cfg.n_min, n_hi, gens["data"])
        try:
            loss, gnorm, stats = train_step(model, schedule, optimizer, (x.to(device), y.to(device), Tn.to(device)),
                                            gens["depth"], cfg.grad_clip, autocast)
        except FloatingPointError as err:
            raise FloatingPointError(f"{err} at step {it + 1}; last good checkpoint kept at {ckpt_path}") from None
        for k, v in {"steps": 1, "loss": loss, "grad_norm": gnorm, **stats}.items():
            acc_stats[k] = acc_stats.get(k, 0.0) + v
        done = it + 1
        if done % cfg.log_interval == 0 or done == cfg.max_iters:
            n_acc = acc_stats.pop("steps")
            now = time.time()
            elapsed += now - t0
            rec = {"step": done, "lr": lr_at(cfg, it), "n_max": n_hi, **{k: v / n_acc for k, v in acc_stats.items()},
                   "ms_per_step": 1000 * (now - t0) / (done - t0_step), "elapsed_s": elapsed}
            t0, t0_step, acc_stats = now, done, {}
            if done % cfg.eval_interval == 0 or done == cfg.max_iters:
                e = run_eval(id_sets)
                rec["id_acc"] = e["metrics"]["policy_id"]
            with open(log_path, "a") as f:
                f.write(json.dumps(rec) + "\n")
            msg = " | ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in rec.items())
            (bar.write if not bar.disable else print)(msg)
            t0 = time.time()
        if done % cfg.ckpt_interval == 0 or done == cfg.max_iters:
            t_save = time.time()
            save(done)
            t0 += time.time() - t_save  # checkpoint writes are not training time
    bar.close()
    t_eval = time.time()
    sets = eval_set(task, test_lengths(cfg), cfg.eval_samples, cfg.eval_seed)
    e = run_eval(sets)
    e = {"task": cfg.task, "schedule": cfg.schedule, "seed": cfg.seed, "n_max": cfg.n_max, **e,
         "train_time_s": elapsed, "eval_time_s": time.time() - t_eval, "steps": cfg.max_iters,
         "config": dataclasses.asdict(cfg), "env": environment()}
    write_json(os.path.join(run_dir, "eval.json"), e)
    return e


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
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    rank, world, device = init_distributed(pick_device(cfg.device))
    out_dir = cfg.out_dir or os.path.join("out", f"{cfg.task}-{cfg.schedule}")
    try:
        os.makedirs(out_dir, exist_ok=True)
        probe = os.path.join(out_dir, f".write_test{os.getpid()}")
        open(probe, "w").close(), os.remove(probe)
    except OSError as err:
        raise ValueError(f"--out_dir {out_dir!r}: cannot write there ({err.strerror})") from None
    evals = []
    for k in range(cfg.seed + rank, cfg.seed + cfg.seeds, world):  # rank r trains seeds r, r+P, ...
        run_dir = out_dir if cfg.seeds == 1 else os.path.join(out_dir, f"seed{k}")
        run_cfg = dataclasses.replace(cfg, seed=k, out_dir=run_dir)
        done = os.path.join(run_dir, "eval.json")
        if cfg.resume and cfg.seeds > 1 and os.path.exists(done):
            print(f"seed {k}: finished earlier, skipped ({done})")
            e = evaluate.load_eval(run_dir)
        else:
            print(f"run {run_dir}: task {cfg.task}, schedule {cfg.schedule}, seed {k}, device {device}"
                  + (f", rank {rank}/{world}" if world > 1 else ""))
            e = train_run(run_cfg, run_dir, device)
            e["run_dir"] = run_dir
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
    row = evaluate.table_row(evals)
    print("\n" + evaluate.ROW_HEADER + "\n" + "|---" * 10 + "|\n" + evaluate.format_row(row))
    if cfg.seeds > 1:
        write_json(os.path.join(out_dir, "summary.json"), {**row, "runs": [e["run_dir"] for e in evals]})


def cli(argv=None) -> int:
    """main() as a command: exit 2 and one line for bad input, 1 for a numerical fault."""
    return evaluate.run_cli(main, "train.py", argv)


if __name__ == "__main__":
    sys.exit(cli())
