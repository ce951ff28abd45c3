"""
What defines a run: its settings (Config, one flag each in train.py), the per-task CPU recipes and the
papers' scale (RECIPES, PAPER), and how a run is built from them (build: the task, the model and the
stop schedule, each from its own seeded random stream). train.py trains what this builds; lab/records.py
rebuilds it from a checkpoint; lab/tables.py groups runs by these settings.
"""

import dataclasses
import math
from dataclasses import dataclass, field

import torch

from halting import SCHEDULES, make_schedule, settings
from model import LoopedTransformer, ModelConfig
from tasks import PAD, TASKS, get_task, task_kwargs


def opt(default, help: str, **meta):
    """A settings field: its default, its --help text, and optionally choices=[...] and section="..."
    (lab/cli.py's parse turns a dataclass of these into the command's flags)."""
    return field(default=default, metadata={"help": help, **meta})


# The NTP baselines' flags (the baselines themselves are ntp.py's, loaded only by a run of one: build). Each one's
# own flags (train.py refuses the others: check_unread); its names are ntp.SCHEDULES' (tests/test_config.py)
NTP_KNOBS = {"ntp": ("c", "ntp_greedy"), "ntp_pause": ("c", "n_pause", "ntp_greedy"), "ntp_loop": ("c", "ntp_greedy")}
# the looped model's flags a baseline does not read (train.py refuses them too): each scores itself at its one depth
# c (score_set: no T_test axis); ntp and ntp_pause build distinct blocks without injection (ntp.build), whatever the
# flags say; ntp_loop is looped with injection as --inject says (its --no-looped: ntp.make's own refusal)
NTP_UNREAD = {"ntp": ("T_test", "inject", "looped"), "ntp_pause": ("T_test", "inject", "looped"),
              "ntp_loop": ("T_test",)}
# the settings that define each one's experiment (lab/tables.py): its knobs but ntp_greedy (it changes how the exact
# match is computed, not its value), T_max (c = 0 means T_max) and ntp_loop's input injection (the model's: ntp.build)
NTP_SETTINGS = {s: tuple(k for k in ks if k != "ntp_greedy") + ("T_max",) + (("inject",) if s == "ntp_loop" else ())
                for s, ks in NTP_KNOBS.items()}


@dataclass
class Config:
    task: str = opt("dyck", "task name", choices=list(TASKS), section="what to train")
    schedule: str = opt("window", "stop schedule, or an autoregressive baseline (ntp, ntp_pause, ntp_loop: ntp.py)",
                        choices=list(SCHEDULES) + list(NTP_KNOBS))
    c: int = opt(0, "the constant depth c of fixed and fixed_window (the papers' 'fixed K = c') and of the NTP "
                    "baselines (ntp, ntp_pause: c blocks of n_layer layers; ntp_loop: c loops); 0: T_max")
    w: int = opt(5, "window half-width: D ~ Unif{-w..w} (window, fixed_window, multidepth)")
    k_min: int = opt(1, "window: depth floor, K = clip(T(n) + D, k_min, T_max) in training and clip(T(n), k_min, "
                        "T_test) at test (1: the paper's window; not in the paper)")
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
    prior: str = opt("geometric", "fixed_prior: input-independent depth prior; ponder: geometric (PonderNet's KL) or "
                                  "uniform (Ouro's expected loss minus beta entropy)", choices=["uniform", "geometric"])
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
    trm_sup: int = opt(0, "trm_halt: supervision steps N_sup (TRM: 16); N_sup * trm_steps <= T_max; 0: T_max // trm_steps")
    halt_explore: float = opt(0.0, "trm_halt: exploration probability (TRM: 0.1): no halting before m ~ Unif{2..N_sup}")
    trm_bce: float = opt(1.0, "trm_halt: weight of the halting BCE (TRM: 0.5)")
    trm_head: str = opt("mean", "trm_halt: the head reads the mean over real tokens, the first position (TRM's) or the "
                                "last real one", choices=["mean", "first", "last"])
    bptt_k: int = opt(0, "backpropagate through only the last k loop steps (0: all; single-depth schedules)")
    loss_weight: str = opt("sample", "single-depth schedules: mean CE per sample, then over samples (sample), or over "
                                     "all answer tokens of the batch (token: Fan et al.'s code)", choices=["sample", "token"])
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
    ema: float = opt(0.0, "decay of an exponential moving average of the weights, evaluated instead of them (0: off; "
                          "Fan et al. 0.9999, TRM 0.999)")
    ema_start: int = opt(-1, "step at which the EMA starts from the current weights (-1: when the curriculum ends, "
                             "0 without --curriculum)")
    seed: int = opt(0, "seed of the run: depth sampling, and initialisation / data order unless set below", section="runs")
    init_seed: int = opt(-1, "seed of the initial weights (-1: --seed)")
    data_seed: int = opt(-1, "seed of the training batches (-1: --seed)")
    perturb: float = opt(0.0, "multiply every initial weight by (1 + perturb * N(0, 1)) from a stream of its own "
                              "(--perturb_seed): a replicate of the seed nudged by rounding-sized noise, to measure how "
                              "much of a spread is numerical chaos (study/chaos.py); 0: off, bitwise the plain run")
    perturb_seed: int = opt(0, "the replicate J of --perturb: its noise is drawn from perturb_stream(seed, J)")
    seeds: int = opt(1, "number of seeds: runs seed..seed+seeds-1 into out_dir/seed{k}/")
    stack: int = opt(0, "train the seeds in chunks of this many as one batched program (lab/stack.py; 0: one at a "
                        "time); each seed's run directory, numbers and checkpoints are those of its unstacked run")
    static: bool = opt(False, "with --stack: the static, sync-free step for CUDA (fixed padding, masked loops to "
                              "T_max, stats read at log time, fused AdamW; with --compile: CUDA graphs)")
    tf32: bool = opt(False, "CUDA: TF32 matmuls and convolutions (10-bit mantissa inputs, fp32 accumulation) for "
                            "the fp32 ops; on by --preset paper; no effect on the CPU")
    out_dir: str = opt("", "run directory (default out/{task}-{schedule})")
    resume: bool = opt(False, "continue the run in out_dir from its ckpt.pt")
    overwrite: bool = opt(False, "replace a run that out_dir already holds")
    device: str = opt("auto", "auto, cpu, cuda, cuda:N or mps")
    threads: int = opt(1, "CPU threads for torch. 1 (default): the same numbers on every machine with this CPU model, "
                          "whatever its core count, and one per process when sharing cores; 0: torch's default, one "
                          "per core, whose rounding (and so a run's numbers) depends on the core count")
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


# --- a flag the run does not read is a mistake ------------------------------------------------------

SHARED = ("T_max", "d_model")  # read by the model and by every schedule (a learned one's head width): never unread


def knobs_of(schedule: str) -> list[str]:
    """The flags schedule `schedule` reads: halting.settings less what its loss and policy never read (its class's
    `unread`; pad_id, not a flag), or an NTP baseline's (NTP_KNOBS)."""
    if schedule in NTP_KNOBS:
        return list(NTP_KNOBS[schedule])
    return [k for k in settings(schedule) if k != "pad_id" and k not in SCHEDULES[schedule].unread]


# flags read only under a switch: named with the switch off, the run would not read them
NEEDS = {"curriculum_start": ("curriculum", "--curriculum"), "curriculum_every": ("curriculum", "--curriculum"),
         "ema_start": ("ema", "--ema DECAY (> 0)")}  # flag: (the switch's field, how to turn it on)


def check_unread(cfg: Config, given: set) -> None:
    """A flag named on the command line (`given`) with a value other than its default, which the run does not read,
    is refused in one line: `--schedule matched --w 3` would otherwise train matched and say nothing. "Read" is
    what the run's computation reads: the schedule's knobs (knobs_of: its loss and policy), the task's, the
    switches' (NEEDS: --curriculum_every without --curriculum), and the looped model's flags an NTP baseline
    ignores (NTP_UNREAD). Presets and recipes set defaults, not flags, so they are never refused."""
    schedule_knobs = {k for s in [*SCHEDULES, *NTP_KNOBS] for k in knobs_of(s)} - set(SHARED)
    task_knobs = {k for t in TASKS.values() for k in t.knobs}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if f.name not in given or v == f.default:
            continue
        flag = f"--no-{f.name}" if v is False else f"--{f.name} {v}"
        if f.name in NEEDS and not getattr(cfg, NEEDS[f.name][0]):
            switch = NEEDS[f.name][1]
            raise ValueError(f"{flag}: read only with {switch}, which is off; add it or drop {flag.split()[0]}")
        if f.name in NTP_UNREAD.get(cfg.schedule, ()):
            raise ValueError(f"{flag}: the NTP baseline {cfg.schedule} does not read it (it scores itself at its one "
                             f"depth c, its model is its own); its knobs: {', '.join(knobs_of(cfg.schedule))}")
        if f.name in schedule_knobs and f.name not in knobs_of(cfg.schedule):
            raise ValueError(f"--{f.name} {v}: schedule {cfg.schedule} does not read it; its knobs: "
                             f"{', '.join(knobs_of(cfg.schedule))}")
        if f.name in task_knobs and f.name not in TASKS[cfg.task].knobs:
            raise ValueError(f"--{f.name} {v}: task {cfg.task} does not read it; its knobs: "
                             f"{', '.join(TASKS[cfg.task].knobs) or 'none'}")


# settings that may differ when a run is resumed: they change how it is computed (device, threads, bf16
# autocast on CUDA, compile: the rounding, as a reduction order does), or nothing, but not what is trained
HARMLESS = {"threads", "device", "amp", "compile", "eval_batch_size", "log_interval", "eval_interval",
            "ckpt_interval", "resume", "overwrite", "seeds", "out_dir", "preset", "stack", "static", "tf32"}

def differences(saved: dict, cfg) -> list[str]:
    """The settings of a saved run that differ from cfg, except the harmless ones. A setting the saved
    run does not know (added later, off by default) counts as its default."""
    now = dataclasses.asdict(cfg)
    saved = {**dataclasses.asdict(type(cfg)()), **saved}
    return [f"{k}={saved.get(k)!r} (now {v!r})" for k, v in now.items() if k not in HARMLESS and saved.get(k) != v]


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
             warmup_iters=1000, eval_samples=512, log_interval=200, eval_interval=5000, ckpt_interval=2000, tf32=True)


def paper_preset(schedule: str, r_bar: int) -> dict:
    """PAPER, and for lognormal_poisson Huginn's truncation proportion: k = 8 backpropagated steps for a mean
    recurrence of 32 (seal-rg/recurrent-pretraining, raven_config_minimal.json), so k = ceil(r_bar / 4)."""
    return {**PAPER, **({"bptt_k": -(-r_bar // 4)} if schedule == "lognormal_poisson" else {})}


def ema_start_step(cfg) -> int:
    """The step after which the weight EMA starts: --ema_start, or the curriculum's end (Fan et al. start the EMA
    when the longest training length reaches n_max), 0 without a curriculum."""
    if cfg.ema_start >= 0:
        return cfg.ema_start
    return max(0, (cfg.n_max - cfg.curriculum_start) * cfg.curriculum_every) if cfg.curriculum else 0


class EMA:
    """A weight EMA (Fan et al. 0.9999, TRM 0.999; --ema DECAY), evaluated instead of the weights at the end: it starts
    as a copy of the weights after step ema_start_step(cfg) and then follows every step,
    theta_ema <- decay theta_ema + (1 - decay) theta, without bias correction (as Fan et al.'s torch_ema with
    use_num_updates=False and TRM's EMAHelper). It draws no random number and touches no weight: the run trains
    exactly as without it. weights: {"model": {name: tensor}, "schedule": {...}}, None until it starts (and
    without --ema). The checks of a checkpoint's EMA are lab/checkpoint.py's ema_problem."""

    def __init__(self, cfg, model, schedule):
        self.decay, self.start, self.weights = cfg.ema, ema_start_step(cfg), None
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

    @staticmethod
    def apply(model, schedule, weights: dict) -> None:
        """Copy EMA weights (a checkpoint's "ema") into the model's and the schedule's parameters."""
        with torch.no_grad():
            for part, module in (("model", model), ("schedule", schedule)):
                for name, p in module.named_parameters():
                    p.copy_(weights[part][name])


def recipes_text() -> str:
    lines = ["CPU recipes (--preset cpu, the default): what --task T sets unless a flag says otherwise"]
    for task, r in RECIPES.items():
        lines.append(f"  {task:15} " + (" ".join(f"--{k} {v}" for k, v in r.items()) or "the defaults above"))
    return "\n".join(lines)



def lr_at(cfg: Config, it: int) -> float:
    """Linear warm-up, then cosine decay from lr to min_lr at max_iters."""
    if it < cfg.warmup_iters:
        return cfg.lr * (it + 1) / cfg.warmup_iters
    t = (it - cfg.warmup_iters) / max(1, cfg.max_iters - cfg.warmup_iters)
    return cfg.min_lr + 0.5 * (1 + math.cos(math.pi * min(t, 1.0))) * (cfg.lr - cfg.min_lr)


# --- building a run: the task, the model and the schedule ---------------------------------------------

STREAMS = ("model", "head", "data", "depth", "torch")


def stream(seed: int, name: str) -> int:
    """The seed of one random stream: model init, head init, data order, depth sampling, torch's global RNG."""
    return len(STREAMS) * seed + STREAMS.index(name)


def seeds_of(cfg: Config) -> dict:
    init = cfg.init_seed if cfg.init_seed >= 0 else cfg.seed
    data = cfg.data_seed if cfg.data_seed >= 0 else cfg.seed
    return {"model": init, "head": init, "data": data, "depth": cfg.seed, "torch": cfg.seed}


def perturb_stream(init_seed: int, J: int) -> int:
    """The seed of --perturb's noise, replicate J (1..1023) of the initial weights of init_seed: 2**31 + 1024 * seed
    + J, mod 2**32 (torch's CPU generator keeps only a seed's low 32 bits). Distinct for every (seed, J) with
    seed < 2**21, and apart from the five streams above for seeds below 4e8 (those are < 2**31)."""
    return (2 ** 31 + (init_seed << 10) + J) % 2 ** 32


def perturb_(cfg: Config, *modules) -> None:
    """--perturb: theta <- theta * (1 + eps * N(0, 1)), elementwise, over every parameter of the modules in
    order, from its own generator: no other random stream moves, and eps = 0 touches nothing."""
    if not cfg.perturb:
        return
    gen = torch.Generator().manual_seed(perturb_stream(seeds_of(cfg)["model"], cfg.perturb_seed))
    moved = False
    with torch.no_grad():
        for module in modules:
            for p in module.parameters():
                before = p.clone()
                p.mul_(1 + cfg.perturb * torch.randn(p.shape, generator=gen, dtype=p.dtype))
                moved = moved or not torch.equal(p, before)
    if not moved:  # an eps below the weights' float resolution: the "replicate" would be the plain run again
        raise ValueError(f"--perturb {cfg.perturb:g}: changed no weight (below float resolution); use a larger eps")


def trained_depth(cfg: Config) -> int:
    """The deepest step training supervises: the vanilla baseline gets exactly that many blocks."""
    return cfg.depth_c if cfg.schedule == "fixed" else cfg.T_max


def build(cfg: Config):
    """(task, model, schedule). One seed gives the same initial transformer under every schedule: the
    transformer and the halting head draw from their own streams."""
    task = get_task(cfg.task, **task_kwargs(cfg.task, dataclasses.asdict(cfg)))
    s = seeds_of(cfg)
    torch.manual_seed(stream(s["model"], "model"))
    if cfg.schedule in NTP_KNOBS:  # the autoregressive baselines build their own model
        import ntp  # here: a run of a stop schedule does not load the baselines
        model, schedule = ntp.build(dataclasses.asdict(cfg), task)
        perturb_(cfg, model, schedule)
        torch.manual_seed(stream(s["torch"], "torch"))
        return task, model, schedule
    model = LoopedTransformer(ModelConfig(vocab_size=len(task.vocab), d_model=cfg.d_model, n_head=cfg.n_head,
                                          n_layer=cfg.n_layer, dropout=cfg.dropout, inject=cfg.inject,
                                          looped=cfg.looped, n_loops=trained_depth(cfg)))
    torch.manual_seed(stream(s["head"], "head"))
    schedule = cfg.stop_schedule()
    perturb_(cfg, model, schedule)
    torch.manual_seed(stream(s["torch"], "torch"))  # dropout, if any
    return task, model, schedule
