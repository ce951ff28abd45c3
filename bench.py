"""
Benchmark of a training run's hot paths, side by side in one process, as one table:

    (a) a training step (forward + backward + AdamW) of the window schedule with the active set
        (sum_i tau_i block applications) vs unrolling everyone to max tau and gathering (B * max tau);
        same batches, same depths, so the losses must agree
    (b) the full acc[n][K] matrix at T_test from one pass vs one pass per K (K = 1..T_test, last step
        read); the matrices must be equal
    (c) achieved GFLOP/s of the training step (FLOPs counted analytically, see step_flops) against a
        large fp32 matmul on the same device, at each --flops_d_models width
    (d) memory: the state kept between steps (weights, AdamW moments) and the peak bytes a step allocates
        on top of it (activations, gradients); also for the unrolled step
    (e) tokens x loop steps per second: real (non-pad) tokens times their block applications, per second
    (f) what bf16 autocast and torch.compile (of the shared block) buy for the training step
    (g) truncated backpropagation (--bptt_k, Geiping et al. 2025) against full backpropagation: time and
        peak memory of the training step; step 1's losses must agree (the same forward), later ones drift
        (the gradients differ)
    (h) S seeds stacked into one batched program (train.py --stack S, lab/stack.py) against S separate runs:
        seed-steps per second and the peak memory of a step; the per-sample depths as the active set padded
        to the largest over the seeds (the CPU's choice) and as masked compute to the chunk's deepest step
    pad the share of the linear layers' token-steps spent on padding (computed, not timed)

    python bench.py --threads 2                # train.py's default size (dyck, window w=5, d_model 64)
    python bench.py --device cuda              # one GPU
    python bench.py --quick --no-compile       # a tiny smoke setting, seconds
    python bench.py --profile --json b.json    # also the top ops of a torch.profiler run; the table as JSON
    python bench.py --only_stack --stacks 1,4  # row (h) alone

Times are medians over --iters timed steps after --warmup steps; the compared variants run interleaved
(one step of each per batch) so a busy machine slows all of them alike. On CUDA the device is
synchronised before every clock read.

Shapes: B batch, P sequence positions (padded), D model width, K loop steps, V vocabulary.
"""

from lab.cli import ctrl_c_at_start  # run machinery: a Ctrl-C while torch loads is one line, exit 130
ctrl_c_at_start(__name__, "bench.py")

import contextlib
import dataclasses
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from itertools import accumulate

import torch
from torch.profiler import ProfilerActivity, profile

import config
import metrics
from tasks import PAD, TASKS, eval_set, get_task, task_kwargs, train_batch
import train
from lab import checks, chunks, cli, files, rundir
from config import opt

# the settings of --quick, a smoke run in seconds (they are defaults: an explicit flag still wins)
QUICK = dict(d_model=32, batch_size=8, n_max=8, T_max=8, T_test=10, iters=2, warmup=1, eval_iters=1,
             eval_samples=4, test_lengths="3,8,10", matmul_n=256, flops_d_models="32", stacks="1,2", stack_iters=1)


@dataclass
class Config:
    # the run's settings default to train.py's
    task: str = opt(config.Config.task, "task", choices=list(TASKS), section="the run that is measured")
    w: int = opt(config.Config.w, "window half-width of the window schedule")
    T_max: int = opt(config.Config.T_max, "training truncation")
    T_test: int = opt(config.Config.T_test, "test depth of row (b)")
    n_min: int = opt(config.Config.n_min, "shortest training length")
    n_max: int = opt(config.Config.n_max, "longest training length")
    d_model: int = opt(config.Config.d_model, "model width of rows (a), (b), (f)")
    n_head: int = opt(config.Config.n_head, "attention heads")
    n_layer: int = opt(config.Config.n_layer, "layers in the shared block")
    batch_size: int = opt(config.Config.batch_size, "training batch")
    seed: int = opt(config.Config.seed, "seed of the weights, batches and depths (train.py's streams)")
    flops_d_models: str = opt("64,128", "comma-separated widths of rows (c)-(e)", section="what is measured")
    iters: int = opt(10, "timed training steps per variant (median)")
    warmup: int = opt(3, "untimed training steps per variant first")
    eval_iters: int = opt(3, "timed repeats of each row (b) path")
    eval_samples: int = opt(32, "test samples per length in row (b)")
    test_lengths: str = opt(config.Config.test_lengths, "lengths n of the acc[n][K] matrix")
    matmul_n: int = opt(1024, "size of the reference fp32 matmul (n x n x n)")
    bf16: bool = opt(True, "measure bf16 autocast in row (f)")
    compile: bool = opt(True, "measure torch.compile in row (f)")
    bptt_k: int = opt(3, "row (g): backpropagate through the last k loop steps only (0: skip the row)")
    stacks: str = opt("1,4,16", "row (h): comma-separated chunk sizes S, each against S separate runs ('': skip)")
    stack_iters: int = opt(3, "row (h): timed steps per variant (median), after one untimed step")
    only_stack: bool = opt(False, "measure row (h) only")
    profile: bool = opt(False, "print the top ops of a short torch.profiler run of a step")
    quick: bool = opt(False, "tiny smoke setting: " + ", ".join(f"{k} {v}" for k, v in QUICK.items()),
                      section="how it runs")
    threads: int = opt(0, "torch.set_num_threads (0: torch's default)")
    device: str = opt("auto", "auto, cpu, cuda, cuda:N")
    json: str = opt("", "also write the table as JSON to this path")

    def widths(self) -> list[int]:
        try:
            return [int(s) for s in self.flops_d_models.split(",") if s.strip()]
        except ValueError:
            return []


# The training-step variants, as train.py settings over the fp32 eager active-set step ("active"). All
# run on the same batches and draw the same depths; compare_row (time per step, loss agreement) and
# memory_row (peak bytes per step) make rows of them: a new variant is an entry here and two rows in bench().
VARIANTS = {"active": {}, "unroll": {"active_set": False}, "bf16": {"amp": True}, "compile": {"compile": True},
            "bptt": {}}  # bptt: truncated backpropagation, bptt_k from the --bptt_k flag


def train_config(cfg: Config, d_model: int) -> config.Config:
    """train.py's Config of the measured run: the window schedule at width d_model, fp32, eager."""
    shared = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(config.Config) if hasattr(cfg, f.name)}
    return config.Config(**{**shared, "schedule": "window", "d_model": d_model, "amp": False, "compile": False,
                           "bptt_k": 0,  # full backpropagation; only the bptt variant of row (g) truncates
                           "eval_batch_size": cfg.eval_samples})  # row (b) scores each length in one batch


def parse_args(argv=None) -> Config:
    """Config, checked before any work: a bad value fails with one line naming it (exit 2)."""
    cfg = cli.parse(Config, argv, prog="bench.py", doc=__doc__, presets=lambda a: QUICK if a.quick else {})
    checks.validate(train_config(cfg, cfg.d_model))  # every setting shared with train.py
    try:
        bad = not all(int(v) >= 1 for v in cfg.stacks.split(",") if v.strip())
    except ValueError:
        bad = True
    if bad:
        raise ValueError(f"--stacks {cfg.stacks!r}: must be comma-separated integers >= 1 (or '' to skip row (h))")
    for name in ("iters", "eval_iters", "matmul_n", "stack_iters"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"--{name} {getattr(cfg, name)}: must be >= 1")
    if cfg.warmup < 0:
        raise ValueError(f"--warmup {cfg.warmup}: must be >= 0")
    if not cfg.widths() or any(d < 1 or d % cfg.n_head for d in cfg.widths()):
        raise ValueError(f"--flops_d_models {cfg.flops_d_models!r}: must be comma-separated integers, "
                         f"each a positive multiple of n_head ({cfg.n_head})")
    for d in cfg.widths():
        checks.validate(train_config(cfg, d))  # the memory check at each width
    stacks = [int(v) for v in cfg.stacks.split(",") if v.strip()]
    if cfg.only_stack and not stacks:
        raise ValueError(f"--only_stack --stacks {cfg.stacks!r}: row (h) alone needs at least one stack size S "
                         f"(e.g. --stacks 1,4); without it nothing would be measured")
    if stacks:
        check_stack_memory(cfg, max(stacks))
    if cfg.json:  # never a run's own file (eval.json, ckpt.pt, ...), and a file that can be created
        checks.check_output("--json", cfg.json)
    return cfg


def check_stack_memory(cfg: Config, S: int) -> None:
    """Refuse a row (h) at S seeds that cannot fit in memory, before any work. A rough upper estimate, 4 bytes a
    float: S separate runs and two chunks of S seeds (stacked, masked) live at once, each seed with its weights,
    gradients and two AdamW moments (a chunk also keeps an unstacked twin of every seed: 14 floats a parameter in
    all), and a step of a chunk keeps S runs' activations (checks.check_memory's count per token, layer and loop
    step, every loop step to T_max, on sequences as long as the chunk pads to at n_max)."""
    tcfg = train_config(cfg, cfg.d_model)
    task, model, schedule = config.build(tcfg)
    n = sum(p.numel() for p in list(model.parameters()) + list(schedule.parameters()))
    P = chunks.pad_length(task, tcfg)
    act = 4 * cfg.batch_size * P * cfg.T_max * cfg.n_layer * (20 * cfg.d_model + 2 * cfg.n_head * P)
    need = S * (4 * 14 * n + act)
    device = checks.pick_device(cfg.device)  # checks.validate found it available
    if device.startswith("cuda"):
        have = torch.cuda.get_device_properties(torch.device(device)).total_memory
    else:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > 0.8 * have:
        raise ValueError(f"--stacks {cfg.stacks!r}: row (h) at {S} seeds ({S} separate runs and two chunks of {S} seeds at "
                         f"once, d_model {cfg.d_model}, batch {cfg.batch_size}) needs about {need / 2**30:.3g} GiB, more than "
                         f"this machine's {have / 2**30:.3g} GiB allow; use smaller chunk sizes")


# --- clocks, FLOPs, memory ----------------------------------------------------------------------------

def timed(fn, device: str):
    """(seconds, fn()) with the device synchronised before both clock reads."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else (lambda: None)
    sync()
    t0 = time.perf_counter()
    out = fn()
    sync()
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


def matmul_gflops(n: int, device: str, warmup: int = 2, iters: int = 5) -> float:
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
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        timed(fn, device)
        return torch.cuda.max_memory_allocated(device) - base
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # silence the profiler's start/stop lines on stderr
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    mem = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                 key=lambda e: e.start_ns())
    return max(accumulate((e.nbytes() for e in mem), initial=0))


# --- the training-step variants ------------------------------------------------------------------------

@dataclass
class Variant:
    """One way of running the training step: its own model, optimizer and depth generator."""
    name: str
    cfg: config.Config
    model: torch.nn.Module
    schedule: torch.nn.Module
    optimizer: torch.optim.Optimizer
    gen: torch.Generator  # depth draws, seeded alike in every variant
    autocast: object
    depths: list = field(default_factory=list)  # (B,) depths drawn, one per batch (warm-up included)
    losses: list = field(default_factory=list)  # task loss of every step (warm-up included)
    # per timed step: seconds, FLOPs (step_flops), real tokens x their loop steps
    times: list = field(default_factory=list)
    flops: list = field(default_factory=list)
    work: list = field(default_factory=list)
    warm_s: float = 0.0
    error: str = ""  # torch.compile may fail: the variant is dropped and the rest goes on


def make_variant(name: str, cfg: Config, d_model: int, device: str) -> Variant:
    """VARIANTS[name] at width d_model, built by config.build: the same seed, the same initial weights."""
    tcfg = dataclasses.replace(train_config(cfg, d_model), **VARIANTS[name], **({"bptt_k": cfg.bptt_k} if name == "bptt" else {}))
    _, model, schedule = config.build(tcfg)
    model.to(device)
    schedule.to(device)
    if tcfg.compile:  # the shared block, in place, as train.py does (forward_depths calls it per loop step)
        for block in model.blocks:
            block.compile(dynamic=True)
    optimizer = torch.optim.AdamW(list(model.parameters()) + list(schedule.parameters()), lr=tcfg.lr,
                                  betas=(tcfg.beta1, tcfg.beta2), weight_decay=tcfg.weight_decay)
    amp = torch.autocast(torch.device(device).type, dtype=torch.bfloat16) if tcfg.amp else contextlib.nullcontext()
    gen = torch.Generator().manual_seed(config.stream(tcfg.seed, "depth"))
    return Variant(name, tcfg, model, schedule, optimizer, gen, amp)


def step(v: Variant, batch) -> dict:
    """train.py's training step: forward, backward, clip, AdamW."""
    return train.train_step(v.model, v.schedule, v.optimizer, batch, v.gen, v.cfg.grad_clip, v.autocast)


def peek_depth(v: Variant, Tn: torch.Tensor) -> torch.Tensor:
    """The depths the variant's next step will draw (its generator is left untouched)."""
    g = torch.Generator()
    g.set_state(v.gen.get_state())
    return v.schedule.train_depth(Tn.cpu(), g)


def make_batches(task, cfg: config.Config, count: int, device: str) -> list:
    gen = torch.Generator().manual_seed(config.stream(cfg.seed, "data"))
    return [tuple(t.to(device) for t in (x, y, Tn))
            for x, y, _, Tn in (train_batch(task, cfg.batch_size, cfg.n_min, cfg.n_max, gen) for _ in range(count))]


def run_variants(variants: list[Variant], batches: list, warmup: int, device: str) -> list[Variant]:
    """Every batch through every variant in turn; the first `warmup` steps are not timed."""
    for i, (x, y, Tn) in enumerate(batches):
        real = (x != PAD).sum(1).cpu()  # (B,) real tokens per sample
        for v in [v for v in variants if not v.error]:
            depth = peek_depth(v, Tn)
            try:
                dt, stats = timed(lambda: step(v, (x, y, Tn)), device)
            except Exception as err:  # only torch.compile is expected to fail; anything else is a bug
                if not v.cfg.compile:
                    raise
                v.error = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}"[:160]
                continue
            v.depths.append(depth)
            v.losses.append(stats["loss"])  # every step: step 1 is the only one with the same weights in all
            if i < warmup:
                v.warm_s += dt
                continue
            mc = v.model.cfg
            v.times.append(dt)
            v.work.append(int((real * depth).sum()))
            v.flops.append(step_flops(depth, x.shape[1], mc.d_model, mc.n_layer, mc.vocab_size))
    return variants


def per_second(v: Variant, amounts: list) -> float:
    """Median over steps of amount / time."""
    return statistics.median(a / t for a, t in zip(amounts, v.times))


def compare_row(row: str, what: str, v: Variant, ref: Variant, target: str = "", tol: float = math.inf) -> list[str]:
    """Two variants on the same batches and depths: median time per step, ratio ref / v, and how far their
    losses drift apart (step 1, warm-up included, must agree within tol: same weights, batch and depths)."""
    t, t_ref = statistics.median(v.times), statistics.median(ref.times)
    diffs = [abs(a - b) for a, b in zip(v.losses, ref.losses)]
    if diffs[0] > tol:
        raise AssertionError(f"{v.name} and {ref.name} losses differ at step 1 by {diffs[0]}")
    return [row, what, f"{1e3 * t:.1f} ms", f"{1e3 * t_ref:.1f} ms", f"{t_ref / t:.2f}x", target,
            f"max |loss diff| {diffs[0]:.1e} at step 1, {max(diffs):.1e} over {len(diffs)} steps"]


def memory_row(row: str, v: Variant, batch, device: str) -> list[str]:
    """Memory of v: the state held for the whole run (weights, AdamW moments) and the peak bytes one more
    step allocates on top of it (activations, gradients)."""
    v.optimizer.zero_grad(set_to_none=True)  # old gradients freed outside: the peak counts the new ones
    peak = peak_bytes(lambda: step(v, batch), device)
    held = list(v.model.parameters()) + [t for s in v.optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    state = sum(t.numel() * t.element_size() for t in held)
    return [row, f"memory of a train step d{v.cfg.d_model}, {v.name}", f"{peak / 2 ** 20:.1f} MiB peak in step",
            f"{state / 2 ** 20:.1f} MiB state", "", "", "peak: activations + gradients; state: weights + AdamW moments"]


# --- evaluation: one pass vs one pass per K ------------------------------------------------------------

def acc_one_pass(model, schedule, sets: dict, T_test: int) -> list:
    """Per length, (exact (K, B), preds (K, B, P)) from one forward pass to T_test: every depth is read
    from the trajectory."""
    return [metrics.trajectory_correct(model, schedule, x, y, Tn, T_test)[:2] for x, y, _, Tn in sets.values()]


def acc_per_K(model, schedule, sets: dict, T_test: int) -> list:
    """The same from a separate pass to each K = 1..T_test, reading only its last step."""
    out = []
    for x, y, _, Tn in sets.values():
        last = [[t[-1] for t in metrics.trajectory_correct(model, schedule, x, y, Tn, K)[:2]] for K in range(1, T_test + 1)]
        out.append(tuple(torch.stack(ts) for ts in zip(*last)))
    return out


def same_matrices(a: list, b: list) -> bool:
    """Equal exact-match matrices and equal predictions (an untrained model's exact matches are all
    False, so the predictions are what makes the comparison bite)."""
    return all(torch.equal(u, v) for pa, pb in zip(a, b) for u, v in zip(pa, pb))


def eval_row(cfg: Config, task, v: Variant, device: str) -> list[str]:
    """(b): the acc[n][K] matrix from one pass vs one pass per K, on the same fixed test sets."""
    model = v.model.eval()
    sets = {n: tuple(t.to(device) for t in b)
            for n, b in eval_set(task, metrics.test_lengths(v.cfg), cfg.eval_samples, v.cfg.eval_seed).items()}
    acc_one_pass(model, v.schedule, sets, cfg.T_test)  # warm-up
    one, per_k = [], []  # seconds of each repeat, interleaved
    for _ in range(cfg.eval_iters):
        dt, m_one = timed(lambda: acc_one_pass(model, v.schedule, sets, cfg.T_test), device)
        one.append(dt)
        dt, m_per = timed(lambda: acc_per_K(model, v.schedule, sets, cfg.T_test), device)
        per_k.append(dt)
    model.train()
    if not same_matrices(m_one, m_per):
        raise AssertionError("one-pass and per-K acc[n][K] matrices differ")
    acc = torch.stack([e.float().mean(-1) for e, _ in m_one])  # acc[n][K]
    t_one, t_per = statistics.median(one), statistics.median(per_k)
    return ["(b)", f"acc[n][K], {len(sets)} lengths x {cfg.eval_samples}, T_test {cfg.T_test}: one pass vs per K",
            f"{t_one:.3f} s", f"{t_per:.3f} s", f"{t_per / t_one:.1f}x", ">= 12x",
            f"matrices and predictions equal: yes (mean acc {acc.mean():.3f})"]


# --- (h): S seeds stacked against S separate runs ------------------------------------------------------

def separate_run(c: config.Config, device: str):
    """train.py's unstacked run of seed c.seed as a step function it -> stats (its own weights, AdamW,
    data and depth generators)."""
    task, model, schedule = config.build(c)
    model.to(device), schedule.to(device)
    opt = torch.optim.AdamW(list(model.parameters()) + list(schedule.parameters()), lr=c.lr, betas=(c.beta1, c.beta2),
                            weight_decay=c.weight_decay)
    gens = {k: torch.Generator().manual_seed(config.stream(config.seeds_of(c)[k], k)) for k in ("data", "depth")}

    def one(it: int) -> dict:
        opt.param_groups[0]["lr"] = config.lr_at(c, it)
        x, y, _, Tn = train_batch(task, c.batch_size, c.n_min, c.n_max, gens["data"])
        opt.zero_grad(set_to_none=True)  # the peak of a step counts its own gradients
        return train.train_step(model, schedule, opt, tuple(t.to(device) for t in (x, y, Tn)), gens["depth"], c.grad_clip)
    return one


def stack_rows(cfg: Config, device: str) -> list[list[str]]:
    """(h): for each S, one stacked chunk (chunks.Chunk: the active set padded to the largest over the seeds),
    the same chunk with masked compute (every row to the chunk's deepest step) and S separate runs, one
    step of each in turn on the seeds' own batches; seed-steps per second and the peak bytes of a step."""
    rows = []
    for S in [int(v) for v in cfg.stacks.split(",") if v.strip()]:
        cs = [dataclasses.replace(train_config(cfg, cfg.d_model), seed=cfg.seed + k, stack=S) for k in range(S)]
        seps = [separate_run(c, device) for c in cs]
        variants = {"stacked": chunks.Chunk(cs, device),
                    "masked": chunks.Chunk([dataclasses.replace(c, active_set=False) for c in cs], device)}
        steps = {"separate": lambda it: [one(it) for one in seps], **{k: ch.step for k, ch in variants.items()}}
        times = {k: [] for k in steps}
        for it in range(1 + cfg.stack_iters):
            for k, fn in steps.items():
                dt, _ = timed(lambda: fn(it), device)
                if it:
                    times[k].append(dt)
        rate = {k: S / statistics.median(v) for k, v in times.items()}
        it = 1 + cfg.stack_iters
        peak = {"stacked": peak_bytes(lambda: variants["stacked"].step(it), device),
                "masked": peak_bytes(lambda: variants["masked"].step(it), device),
                "separate": peak_bytes(lambda: seps[0](it), device)}  # one run's step: a process of its own
        mib = {k: v / 2 ** 20 for k, v in peak.items()}
        rows.append(["(h)", f"{S} seeds d{cfg.d_model} stacked vs {S} separate runs: seed-steps/s",
                     f"{rate['stacked']:.2f} /s", f"{rate['separate']:.2f} /s", f"{rate['stacked'] / rate['separate']:.2f}x", "",
                     f"masked to the chunk's deepest step {rate['masked']:.2f} /s ({rate['masked'] / rate['separate']:.2f}x); "
                     f"peak in step {mib['stacked']:.0f} MiB stacked, {mib['masked']:.0f} MiB masked, "
                     f"{mib['separate']:.0f} MiB one separate run ({S * mib['separate']:.0f} MiB for {S} at once)"])
    return rows


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

def bench(cfg: Config) -> list[list[str]]:
    """Run every measurement; return the table rows."""
    device, base = checks.pick_device(cfg.device), train_config(cfg, cfg.d_model)
    if cfg.only_stack:
        return stack_rows(cfg, device)
    task = get_task(base.task, **task_kwargs(base.task, dataclasses.asdict(base)))
    batches = make_batches(task, base, cfg.warmup + cfg.iters, device)

    # (a), (f): the training-step variants at d_model, interleaved on the same batches
    names = ["active", "unroll"] + ["bf16"] * cfg.bf16 + ["compile"] * cfg.compile + ["bptt"] * bool(cfg.bptt_k)
    variants = {n: make_variant(n, cfg, cfg.d_model, device) for n in names}
    run_variants(list(variants.values()), batches, cfg.warmup, device)
    act, unroll = variants["active"], variants["unroll"]
    # tol: the same arithmetic per row at step 1; later steps may differ in the order of float sums
    rows = [compare_row("(a)", f"train step d{cfg.d_model} B{cfg.batch_size}: active set vs unroll + gather",
                        act, unroll, ">= 1.6x", tol=1e-5),
            eval_row(cfg, task, act, device)]

    # (c), (d), (e) at each width, the active-set step
    mm = matmul_gflops(cfg.matmul_n, device)
    for d in cfg.widths():
        p = act if d == cfg.d_model else run_variants([make_variant("active", cfg, d, device)], batches,
                                                      cfg.warmup, device)[0]
        gf = per_second(p, p.flops) / 1e9
        rows += [["(c)", f"train step d{d}: counted GFLOP/s vs {cfg.matmul_n}^3 fp32 matmul", f"{gf:.1f} GFLOP/s",
                  f"{mm:.1f} GFLOP/s", f"{gf / mm:.2f}", ">= 0.4" if d == 128 else "",
                  f"{statistics.median(p.flops) / 1e9:.2f} GFLOP per step"],
                 memory_row("(d)", p, batches[0], device),
                 ["(e)", f"tokens x loop steps per second d{d}", f"{per_second(p, p.work):,.0f} /s", "", "", "",
                  f"{statistics.median(p.work):,.0f} real token-steps per step"]]
    rows.append(memory_row("(d)", unroll, batches[0], device))

    # (f): what bf16 autocast and torch.compile buy over the fp32 eager active-set step
    for p in [variants[n] for n in ("bf16", "compile") if n in variants]:
        what = f"{p.name} train step d{cfg.d_model} vs fp32 eager"
        if p.error or not p.times:
            rows.append(["(f)", what, "failed", "", "", "", p.error])
            continue
        rows.append(compare_row("(f)", what, p, act))
        if p.name == "compile":
            t = statistics.median(p.times)
            rows[-1][-1] += (f"; compile + warm-up {p.warm_s:.1f} s (~{p.warm_s - cfg.warmup * t:.1f} s compiling); "
                             f"slowest timed step {1e3 * max(p.times):.0f} ms (recompiles for new shapes show here)")

    # (g): truncated backpropagation through the last k steps against full backpropagation (same loss)
    if "bptt" in variants:
        rows += [compare_row("(g)", f"train step d{cfg.d_model}, backprop through the last {cfg.bptt_k} steps vs all",
                             variants["bptt"], act, tol=1e-5),
                 memory_row("(g)", variants["bptt"], batches[0], device)]

    wastes = [padding_waste(x.cpu(), d) for (x, _, _), d in zip(batches, act.depths)]
    waste = {k: statistics.fmean(w[k] for w in wastes) for k in wastes[0]}
    rows.append(["pad", f"share of linear-layer token-steps on pads (mean of {len(wastes)} batches, computed)",
                 f"{100 * waste['now']:.0f}% now", "", "", "",
                 f"trim per step {100 * waste['trim']:.0f}%, bucket x4 {100 * waste['bucket4']:.0f}%"])
    rows += stack_rows(cfg, device)
    if cfg.profile:
        with profile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * device.startswith("cuda")) as prof:
            for b in batches[:2]:
                step(act, b)
        key = "self_device_time_total" if device.startswith("cuda") else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=15))
    return rows


def header(cfg: Config) -> str:
    device = checks.pick_device(cfg.device)
    hw = torch.cuda.get_device_name(device) if device.startswith("cuda") else f"cpu, {torch.get_num_threads()} threads"
    return (f"bench.py | torch {torch.__version__} | {hw} | {cfg.task}, window w={cfg.w}, d_model {cfg.d_model}, "
            f"{cfg.n_head} heads, L={cfg.n_layer}, batch {cfg.batch_size}, n {cfg.n_min}..{cfg.n_max}, "
            f"T_max {cfg.T_max}, T_test {cfg.T_test}, median of {cfg.iters} steps after {cfg.warmup}")


COLUMNS = ["row", "measurement", "this", "against", "ratio", "target", "check"]


def main(argv=None) -> list[list[str]]:
    cfg = parse_args(argv)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    print(header(cfg), flush=True)
    rows = bench(cfg)
    print("| " + " | ".join(COLUMNS) + " |\n" + "|---" * len(COLUMNS) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if cfg.json:
        files.write_json(cfg.json, {"header": header(cfg), "columns": COLUMNS, "rows": rows, "env": rundir.environment()})
    return rows


if __name__ == "__main__":
    sys.exit(cli.run(main, "bench.py"))
