"""
Benchmark of one training run's hot paths (issue 7), side by side in one process, as one table:

    (a) a training step (forward + backward + AdamW) of the window schedule with the active set
        (sum_i tau_i block applications) vs unrolling everyone to max tau and gathering (B * max tau);
        same batches, same depths, so the losses must agree
    (b) the full acc[n][K] matrix at T_test from one pass vs one pass per K (K = 1..T_test, last step
        read); the matrices must be equal
    (c) achieved GFLOP/s of the training step (FLOPs counted analytically, see step_flops) against a
        large fp32 matmul on the same device, at each --flops_d_models width
    (d) memory: the state kept between steps (weights, AdamW moments) and the peak bytes a step allocates
        on top of it (activations, gradients)
    (e) tokens x loop steps per second: real (non-pad) tokens times their block applications, per second
    (f) what bf16 autocast and torch.compile (of the shared block) buy for the training step

    python bench.py                      # the default size: train.py's defaults (dyck, window w=5, d 64)
    python bench.py --quick --no-compile # a tiny smoke setting, seconds
    python bench.py --threads 2 --profile  # also print the top ops of a short torch.profiler run

Times are medians over --iters timed steps after --warmup steps; the compared paths run interleaved
(one step of each path per batch) so a busy machine slows all of them alike. On CUDA the device is
synchronised before every clock read.

Shape legend: B batch, T sequence length (padded), D model width, K loop steps, V vocabulary.
"""

import argparse
import copy
import dataclasses
import os
import statistics
import sys
import time
from dataclasses import dataclass, field

import torch
from torch.profiler import ProfilerActivity, profile

import evaluate
from halting import make_schedule
from tasks import PAD, TASKS, eval_set, train_batch
import train
from train import Config, Parser, pick_device, test_lengths, validate

# settings of --quick (a smoke run); a flag given explicitly still wins
QUICK = dict(d_model=32, batch_size=8, n_max=8, T_max=8, T_test=10, iters=2, warmup=1, eval_iters=1,
             eval_samples=4, test_lengths="3,8,10", matmul_n=256, flops_d_models="32")


def parse_args(argv=None) -> argparse.Namespace:
    c = Config()
    p = Parser(description="Benchmark the training step and the evaluation pass.",
                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny smoke setting (" + ", ".join(f"{k} {v}" for k, v in QUICK.items()) + ")")
    p.add_argument("--task", default=c.task, choices=list(TASKS), help="task")
    p.add_argument("--w", type=int, default=c.w, help="window half-width of the window schedule")
    p.add_argument("--T_max", type=int, default=c.T_max, help="training truncation")
    p.add_argument("--T_test", type=int, default=c.T_test, help="test depth of row (b)")
    p.add_argument("--n_min", type=int, default=c.n_min, help="shortest training length")
    p.add_argument("--n_max", type=int, default=c.n_max, help="longest training length")
    p.add_argument("--d_model", type=int, default=c.d_model, help="model width of rows (a), (b), (d), (e), (f)")
    p.add_argument("--n_head", type=int, default=c.n_head, help="attention heads")
    p.add_argument("--n_layer", type=int, default=c.n_layer, help="layers in the shared block")
    p.add_argument("--batch_size", type=int, default=c.batch_size, help="training batch")
    p.add_argument("--flops_d_models", default="64,128", help="comma-separated widths of rows (c)-(e)")
    p.add_argument("--iters", type=int, default=10, help="timed training steps per path (median)")
    p.add_argument("--warmup", type=int, default=3, help="untimed training steps per path first")
    p.add_argument("--eval_iters", type=int, default=3, help="timed repeats of each row (b) path")
    p.add_argument("--eval_samples", type=int, default=32, help="test samples per length in row (b)")
    p.add_argument("--test_lengths", default=c.test_lengths, help="lengths n of the acc[n][K] matrix")
    p.add_argument("--matmul_n", type=int, default=1024, help="size of the reference fp32 matmul (n x n x n)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True, help="measure torch.compile in row (f)")
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True, help="measure bf16 autocast in row (f)")
    p.add_argument("--profile", action="store_true", help="print the top ops of a short torch.profiler run of a step")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    p.add_argument("--seed", type=int, default=0, help="seed of weights, batches and depths")
    p.add_argument("--json", default="", help="also write the table as JSON to this path")
    args = p.parse_args(argv)
    if args.quick:  # re-parse with the quick settings as defaults, so explicit flags still win
        p.set_defaults(**QUICK)
        args = p.parse_args(argv)
    for name in ("iters", "eval_iters", "eval_samples", "matmul_n"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} {getattr(args, name)}: must be >= 1")
    if args.warmup < 0 or args.threads < 0:
        raise ValueError(f"--warmup {args.warmup} --threads {args.threads}: must be >= 0")
    try:
        args.widths = [int(s) for s in args.flops_d_models.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--flops_d_models {args.flops_d_models!r}: must be comma-separated integers") from None
    for d in [args.d_model] + args.widths:
        validate(run_config(args, d))
    return args


def run_config(args, d_model: int) -> Config:
    """train.py's Config with the window schedule and this run's sizes."""
    return Config(task=args.task, schedule="window", w=args.w, T_max=args.T_max, T_test=args.T_test,
                  n_min=args.n_min, n_max=args.n_max, d_model=d_model, n_head=args.n_head,
                  n_layer=args.n_layer, batch_size=args.batch_size, seed=args.seed,
                  test_lengths=args.test_lengths, device=args.device)


# --- clocks, FLOPs, memory ----------------------------------------------------------------------------

def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def timed(fn, device: str):
    """(seconds, fn()) with the device synchronised before both clock reads."""
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t0, out


def step_flops(depth: torch.Tensor, T: int, D: int, n_layer: int, V: int) -> int:
    """FLOPs of one active-set training step (forward_depths + backward), counted analytically.

    Per layer, a rows of T (padded) positions:
      qkv 2aT*D*3D + proj 2aT*D*D + mlp 2 * 2aT*D*4D = 24 a T D^2   (matmuls of the linear layers)
      attention QK^T 2aT*T*D + AV 2aT*T*D          =  4 a T^2 D   (full square, causal half not skipped)
    Loop step t runs n_layer layers on the a_t = #{i: depth_i >= t} rows still active; every sample is
    read out once: 2 B T D V. Backward costs twice the forward: x3 in all.
    """
    d = depth.tolist()
    active = [sum(1 for k in d if k >= t) for t in range(1, max(d) + 1)]  # a_t
    forward = sum(n_layer * (24 * a * T * D * D + 4 * a * T * T * D) for a in active) + 2 * len(d) * T * D * V
    return 3 * forward


def matmul_gflops(n: int, device: str, warmup: int, iters: int) -> float:
    """GFLOP/s of an fp32 (n x n) @ (n x n) matmul: 2 n^3 FLOPs, median of iters."""
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=gen).to(device) for _ in range(2))
    times = [timed(lambda: a @ b, device)[0] for _ in range(warmup + iters)][warmup:]
    return 2 * n ** 3 / statistics.median(times) / 1e9


def peak_bytes(fn, device: str) -> int:
    """Peak bytes allocated by fn() above what was allocated when it started.

    CUDA: the caching allocator's peak counter. CPU: torch.profiler records every allocation and free
    ("[memory]" events with signed sizes); the running sum of those, in time order, peaks at the answer.
    """
    if device.startswith("cuda"):
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        sync(device)
        return torch.cuda.max_memory_allocated(device) - base
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # silence the profiler's start/stop lines on stderr
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    mem = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                 key=lambda e: e.start_ns())
    run = peak = 0
    for e in mem:
        run += e.nbytes()
        peak = max(peak, run)
    return peak


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes held for the whole run: parameters and AdamW's moments (gradients count in the step's peak)."""
    ts = list(model.parameters()) + [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in ts)


# --- the training step and its variants --------------------------------------------------------------

@dataclass
class Path:
    """One way of running the training step, with its own copy of the weights and optimizer."""
    name: str
    model: torch.nn.Module
    schedule: torch.nn.Module
    optimizer: torch.optim.Optimizer
    gen: torch.Generator  # depth draws; every path's starts from the same seed
    amp: torch.dtype | None = None
    fragile: bool = False  # catch its errors (torch.compile), drop it, keep benchmarking the rest
    times: list = field(default_factory=list)
    losses: list = field(default_factory=list)
    flops: list = field(default_factory=list)
    work: list = field(default_factory=list)  # real tokens x block applications, per step
    warm_s: float = 0.0
    error: str = ""


def depth_gen(cfg: Config) -> torch.Generator:
    """The generator of depth draws: every path gets its own, all seeded alike, so all draw the same depths."""
    return torch.Generator().manual_seed(cfg.seed + 1)


def make_path(name: str, cfg: Config, model: torch.nn.Module, device: str, active_set: bool = True,
              amp: torch.dtype | None = None, compile: bool = False) -> Path:
    model = copy.deepcopy(model)
    if compile:
        # compile the shared block in place: forward_depths calls it once per loop step. (torch.compile of
        # the whole model would only wrap forward(); forward_depths would run uncompiled.)
        for block in model.blocks:
            block.compile(dynamic=True)
    schedule = make_schedule(cfg.schedule, **{**dataclasses.asdict(cfg), "active_set": active_set}).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
    return Path(name, model, schedule, opt, depth_gen(cfg), amp, fragile=compile)


def train_step(path: Path, batch, grad_clip: float = 1.0) -> float:
    """forward + backward + clip + AdamW step: train.py's own train_step; returns the loss."""
    x = batch[0]
    amp = torch.autocast(torch.device(x.device).type, dtype=path.amp or torch.bfloat16, enabled=path.amp is not None)
    return train.train_step(path.model, path.schedule, path.optimizer, batch, path.gen, grad_clip, amp)[0]


def peek_depth(path: Path, Tn: torch.Tensor) -> torch.Tensor:
    """The depths the path's next step will draw (its generator is left untouched)."""
    g = torch.Generator()
    g.set_state(path.gen.get_state())
    return path.schedule.train_depth(Tn.cpu(), g)


def make_batches(task, cfg: Config, count: int, device: str) -> list:
    gen = torch.Generator().manual_seed(cfg.seed)
    out = []
    for _ in range(count):
        x, y, _, Tn = train_batch(task, cfg.batch_size, cfg.n_min, cfg.n_max, gen)
        out.append((x.to(device), y.to(device), Tn.to(device)))
    return out


def run_paths(paths: list[Path], batches: list, warmup: int, device: str, V: int) -> list[Path]:
    """Every batch through every path in turn; the first `warmup` batches are not recorded."""
    for i, batch in enumerate(batches):
        x, _, Tn = batch
        real = (x != PAD).sum(1).cpu()  # (B,) real tokens per sample
        for p in [p for p in paths if not p.error]:
            depth = peek_depth(p, Tn)
            try:
                dt, loss = timed(lambda: train_step(p, batch), device)
            except Exception as err:  # only torch.compile is expected to fail; anything else is a bug
                if not p.fragile:
                    raise
                p.error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:160]
                continue
            if i < warmup:
                p.warm_s += dt
                continue
            cfg = p.model.cfg
            p.times.append(dt)
            p.losses.append(loss)
            p.flops.append(step_flops(depth, x.shape[1], cfg.d_model, cfg.n_layer, V))
            p.work.append(int((real * depth).sum()))
    return paths


def per_second(p: Path, amounts: list) -> float:
    """Median over steps of amount / time."""
    return statistics.median(a / t for a, t in zip(amounts, p.times))


def max_loss_diff(p: Path, ref: Path) -> float:
    return max(abs(a - b) for a, b in zip(p.losses, ref.losses))


# --- evaluation: one pass vs one pass per K ------------------------------------------------------------

def acc_one_pass(model, schedule, sets: dict, T_test: int) -> list:
    """Per length, (exact (K, B), preds (K, B, T)) from one forward pass to T_test: every depth is read
    from the trajectory."""
    return [evaluate.trajectory_correct(model, schedule, x, y, Tn, T_test)[:2] for x, y, _, Tn in sets.values()]


def acc_per_K(model, schedule, sets: dict, T_test: int) -> list:
    """The same from a separate pass to each K = 1..T_test, reading only its last step."""
    out = []
    for x, y, _, Tn in sets.values():
        last = [[t[-1] for t in evaluate.trajectory_correct(model, schedule, x, y, Tn, K)[:2]] for K in range(1, T_test + 1)]
        out.append(tuple(torch.stack(ts) for ts in zip(*last)))
    return out


def same_matrices(a: list, b: list) -> bool:
    """Equal exact-match matrices and equal predictions (an untrained model's exact matches are all
    False, so the predictions are what makes the comparison bite)."""
    return all(torch.equal(u, v) for pa, pb in zip(a, b) for u, v in zip(pa, pb))


# --- padding -------------------------------------------------------------------------------------------

def padding_waste(x: torch.Tensor, depth: torch.Tensor, chunks: int = 4) -> dict:
    """Share of the token x loop-step work of an active-set step spent on pads (linear layers), computed.

    real    sum_i len_i tau_i                    (the useful work)
    now     sum_i T tau_i                        (every row padded to the batch's longest, T)
    trim    sum_t a_t max{len_i: tau_i >= t}     (active rows cut to their longest real length per step)
    bucket  sum_i T_{c(i)} tau_i                 (batch sorted by length, split into `chunks` micro-batches,
                                                   each padded to its own longest)
    """
    lens = (x != PAD).sum(1)
    real = (lens * depth).sum().item()
    now = x.shape[1] * depth.sum().item()
    trim = sum(((depth >= t).sum() * lens[depth >= t].max()).item() for t in range(1, int(depth.max()) + 1))
    order = torch.argsort(lens)
    bucket = sum((lens[c].max() * depth[c].sum()).item() for c in order.chunk(chunks))
    return {k: 1 - real / v for k, v in (("now", now), ("trim", trim), (f"bucket{chunks}", bucket))}


# --- the whole benchmark --------------------------------------------------------------------------------

def fmt_bytes(n: float) -> str:
    return f"{n / 2 ** 20:.1f} MiB"


def bench(args) -> list[list[str]]:
    """Run every measurement; return the table rows."""
    device = pick_device(args.device)
    cfg = run_config(args, args.d_model)
    n_batches = args.warmup + args.iters
    rows = []

    def build(d_model):
        torch.manual_seed(args.seed)  # weights; data and depths have their own generators
        task, model, _ = evaluate.build(dataclasses.asdict(run_config(args, d_model)))
        return task, model.to(device)

    # (a), (f): the compared training steps at the default width, interleaved on the same batches
    task, model = build(args.d_model)
    V = len(task.vocab)
    batches = make_batches(task, cfg, n_batches, device)
    paths = [make_path("active", cfg, model, device), make_path("unroll", cfg, model, device, active_set=False)]
    if args.bf16:
        paths.append(make_path("bf16", cfg, model, device, amp=torch.bfloat16))
    if args.compile:
        paths.append(make_path("compile", cfg, model, device, compile=True))
    run_paths(paths, batches, args.warmup, device, V)
    act, unroll = paths[0], paths[1]
    t_act, t_unroll = statistics.median(act.times), statistics.median(unroll.times)
    first = abs(act.losses[0] - unroll.losses[0])
    rows.append(["(a)", f"train step d{args.d_model} B{args.batch_size}: active set vs unroll + gather",
                 f"{1e3 * t_act:.1f} ms", f"{1e3 * t_unroll:.1f} ms", f"{t_unroll / t_act:.2f}x", ">= 1.6x",
                 f"max |loss diff| {first:.1e} at step 1, {max_loss_diff(unroll, act):.1e} over {len(act.losses)} steps"])
    if first > 1e-5:  # same weights, batch and depths: only the order of float sums may differ
        raise AssertionError(f"active-set and unrolled losses differ at step 1 by {first}")

    # (b): the acc[n][K] matrix from one pass vs one pass per K, on the same fixed test sets
    model.eval()
    sets = {n: tuple(t.to(device) for t in b)
            for n, b in eval_set(task, test_lengths(cfg), args.eval_samples, cfg.eval_seed).items()}
    one, per_k = [], []
    acc_one_pass(model, act.schedule, sets, args.T_test)  # warm-up
    for _ in range(args.eval_iters):
        dt, m_one = timed(lambda: acc_one_pass(model, act.schedule, sets, args.T_test), device)
        one.append(dt)
        dt, m_per = timed(lambda: acc_per_K(model, act.schedule, sets, args.T_test), device)
        per_k.append(dt)
    same = same_matrices(m_one, m_per)
    acc = torch.stack([e.float().mean(-1) for e, _ in m_one])  # acc[n][K]
    t_one, t_per = statistics.median(one), statistics.median(per_k)
    rows.append(["(b)", f"acc[n][K], {len(sets)} lengths x {args.eval_samples}, T_test {args.T_test}: one pass vs per K",
                 f"{t_one:.3f} s", f"{t_per:.3f} s", f"{t_per / t_one:.1f}x", ">= 12x",
                 f"matrices and predictions equal: {'yes' if same else 'NO'} (mean acc {acc.mean():.3f})"])
    if not same:
        raise AssertionError("one-pass and per-K acc[n][K] matrices differ")

    # (c), (d), (e) at each width, the active-set step
    mm = matmul_gflops(args.matmul_n, device, 2, 5)
    for d in args.widths:
        if d == args.d_model:
            p = act
        else:
            p = run_paths([make_path("active", run_config(args, d), build(d)[1], device)],
                          batches, args.warmup, device, V)[0]
        gf = per_second(p, p.flops) / 1e9
        rows.append(["(c)", f"train step d{d}: counted GFLOP/s vs {args.matmul_n}^3 fp32 matmul",
                     f"{gf:.1f} GFLOP/s", f"{mm:.1f} GFLOP/s", f"{gf / mm:.2f}", ">= 0.4" if d == 128 else "",
                     f"{statistics.median(p.flops) / 1e9:.2f} GFLOP per step"])
        p.optimizer.zero_grad(set_to_none=True)  # old gradients freed outside: the peak counts the new ones
        peak = peak_bytes(lambda: train_step(p, batches[0]), device)
        rows.append(["(d)", f"memory of a train step d{d}", f"{fmt_bytes(peak)} peak in step",
                     f"{fmt_bytes(state_bytes(p.model, p.optimizer))} state", "", "",
                     "peak: activations + gradients; state: weights + AdamW moments"])
        rows.append(["(e)", f"tokens x loop steps per second d{d}", f"{per_second(p, p.work):,.0f} /s",
                     "", "", "", f"{statistics.median(p.work):,.0f} real token-steps per step"])
    unroll.optimizer.zero_grad(set_to_none=True)
    peak_u = peak_bytes(lambda: train_step(unroll, batches[0]), device)
    rows.append(["(d)", f"memory of a train step d{args.d_model}, unroll + gather", f"{fmt_bytes(peak_u)} peak in step",
                 "", "", "", "for comparison with the active set"])

    # (f): what bf16 autocast and torch.compile buy over the fp32 eager active-set step
    for p in paths[2:]:
        if p.error or not p.times:
            rows.append(["(f)", f"{p.name} train step d{args.d_model}", "failed", "", "", "", p.error])
            continue
        t = statistics.median(p.times)
        note = f"max |loss diff| vs fp32 eager {max_loss_diff(p, act):.1e}"
        if p.name == "compile":
            note += (f"; compile + warm-up {p.warm_s:.1f} s (~{p.warm_s - args.warmup * t:.1f} s compiling); slowest"
                     f" timed step {1e3 * max(p.times):.0f} ms (recompiles for new shapes show here)")
        rows.append(["(f)", f"{p.name} train step d{args.d_model} vs fp32 eager", f"{1e3 * t:.1f} ms",
                     f"{1e3 * t_act:.1f} ms", f"{t_act / t:.2f}x", "", note])

    g = depth_gen(cfg)  # replays the depths every path drew, batch by batch
    wastes = [padding_waste(x.cpu(), act.schedule.train_depth(Tn.cpu(), g)) for x, _, Tn in batches]
    waste = {k: statistics.fmean(w[k] for w in wastes) for k in wastes[0]}
    rows.append(["pad", f"share of linear-layer token-steps on pads (mean of {len(batches)} batches, computed)",
                 f"{100 * waste['now']:.0f}% now", "", "", "",
                 f"trim per step {100 * waste['trim']:.0f}%, bucket x4 {100 * waste['bucket4']:.0f}%"])
    if args.profile:
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])) as prof:
            for b in batches[:2]:
                train_step(act, b)
        key = "self_device_time_total" if device.startswith("cuda") else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=15))
    return rows


def header(args) -> str:
    device = pick_device(args.device)
    hw = torch.cuda.get_device_name(device) if device.startswith("cuda") else f"cpu, {torch.get_num_threads()} threads"
    return (f"bench.py | torch {torch.__version__} | {hw} | {args.task}, window w={args.w}, d_model {args.d_model}, "
            f"{args.n_head} heads, L={args.n_layer}, batch {args.batch_size}, n {args.n_min}..{args.n_max}, "
            f"T_max {args.T_max}, T_test {args.T_test}, median of {args.iters} steps after {args.warmup}")


def main(argv=None) -> list[list[str]]:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(header(args), flush=True)
    rows = bench(args)
    print("| row | measurement | this | against | ratio | target | check |\n" + "|---" * 7 + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if args.json:
        train.write_json(args.json, {"header": header(args), "columns": ["row", "measurement", "this", "against",
                                     "ratio", "target", "check"], "rows": rows, "env": train.environment()})
    return rows


if __name__ == "__main__":
    sys.exit(evaluate.run_cli(main, "bench.py"))
