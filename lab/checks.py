"""
Every check a command makes before a file is touched: the settings of a train.py run (validate), what this
machine can run (a device, a C++ compiler for --compile, the memory a step needs), and an output flag's file
(check_output). A bad value raises ValueError with one line naming it and what is allowed (cli.run: exit 2).
"""

import contextlib
import dataclasses
import math
import os
import shutil
import subprocess

import torch

from config import NTP_KNOBS, ema_start_step
from halting import settings
import metrics
from tasks import get_task, task_kwargs
from lab.files import creatable, guarded, names_folder

MAX_SEED = 2 ** 32 - 1
MAX_THREADS = 1024  # torch.set_num_threads takes a C int; more threads than this is a typo
# the schedules' loss weights: above MAX_WEIGHT the task loss is swamped and float32 overflows (the papers: 1e-3 .. 1)
LOSS_WEIGHTS, MAX_WEIGHT = ("lambda_ent", "beta", "tau_act", "trm_bce"), 1e6
# --perturb multiplies a weight by fl(1 + EPS * N(0, 1)), which is 1 where |EPS * N| <= 2^-24: below it most stay
MIN_PERTURB = 2.0 ** -24


def pick_device(name: str) -> str:
    if name != "auto":
        return name
    return "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"


def validate(cfg) -> None:
    """Reject bad settings with one line naming the value and what is allowed."""
    finite = lambda v: isinstance(v, (int, float)) and math.isfinite(v)
    checks = [
        (cfg.T_max >= 1, f"--T_max {cfg.T_max}: must be >= 1"),
        (0 <= cfg.c <= cfg.T_max, f"--c {cfg.c}: must be in 1..T_max ({cfg.T_max}), or 0 for T_max"),
        # (an NTP baseline scores itself at its one depth c: it reads no T_test, config.check_unread)
        (cfg.T_test >= cfg.T_max or cfg.schedule in NTP_KNOBS,
         f"--T_test {cfg.T_test}: must be >= T_max ({cfg.T_max})"),
        (1 <= cfg.n_min <= cfg.n_max, f"--n_min {cfg.n_min} --n_max {cfg.n_max}: need 1 <= n_min <= n_max"),
        (cfg.max_iters >= 1, f"--max_iters {cfg.max_iters}: must be >= 1"),
        (cfg.batch_size >= 1, f"--batch_size {cfg.batch_size}: must be >= 1"),
        (finite(cfg.lr) and cfg.lr > 0, f"--lr {cfg.lr}: must be a finite number > 0"),
        (finite(cfg.min_lr) and 0 <= cfg.min_lr <= cfg.lr, f"--min_lr {cfg.min_lr}: must be a finite number in 0..lr"),
        (cfg.warmup_iters >= 0, f"--warmup_iters {cfg.warmup_iters}: must be >= 0"),
        (finite(cfg.weight_decay) and cfg.weight_decay >= 0,
         f"--weight_decay {cfg.weight_decay}: must be a finite number >= 0"),
        (finite(cfg.beta1) and 0 <= cfg.beta1 < 1, f"--beta1 {cfg.beta1}: must be in [0, 1)"),
        (finite(cfg.beta2) and 0 <= cfg.beta2 < 1, f"--beta2 {cfg.beta2}: must be in [0, 1)"),
        (finite(cfg.dropout) and 0 <= cfg.dropout < 1, f"--dropout {cfg.dropout}: must be in [0, 1)"),
        (finite(cfg.grad_clip) and cfg.grad_clip >= 0,
         f"--grad_clip {cfg.grad_clip}: must be a finite number >= 0 (0: off)"),
        (cfg.d_model >= 1 and cfg.n_head >= 1 and cfg.d_model % cfg.n_head == 0,
         f"--d_model {cfg.d_model} --n_head {cfg.n_head}: d_model must be a positive multiple of n_head"),
        (cfg.n_layer >= 1, f"--n_layer {cfg.n_layer}: must be >= 1"),
        (finite(cfg.ema) and 0 <= cfg.ema < 1, f"--ema {cfg.ema}: must be a decay in [0, 1) (0: off)"),
        # the test depth r_bar must be a depth that training reaches (Huginn does not clip r; we clip to T_max)
        (cfg.schedule != "lognormal_poisson" or cfg.r_bar <= cfg.T_max,
         f"--r_bar {cfg.r_bar}: lognormal_poisson's mean depth, also its test depth, must be <= T_max ({cfg.T_max})"),
        (cfg.ema_start >= -1, f"--ema_start {cfg.ema_start}: must be a step >= 0, or -1 for the curriculum's end"),
        (not cfg.ema or cfg.ema_start < -1 or ema_start_step(cfg) <= cfg.max_iters, ema_too_late(cfg)),
        (cfg.seeds >= 1, f"--seeds {cfg.seeds}: must be >= 1"),
        (0 <= cfg.seed and cfg.seed + cfg.seeds - 1 <= MAX_SEED, f"--seed {cfg.seed}: seeds must lie in 0..{MAX_SEED}"),
        (-1 <= cfg.init_seed <= MAX_SEED, f"--init_seed {cfg.init_seed}: must be -1 (= --seed) or in 0..{MAX_SEED}"),
        (-1 <= cfg.data_seed <= MAX_SEED, f"--data_seed {cfg.data_seed}: must be -1 (= --seed) or in 0..{MAX_SEED}"),
        (finite(cfg.perturb) and 0 <= cfg.perturb <= 1,
         f"--perturb {cfg.perturb}: must be a finite number in [0, 1] (0: off)"),
        (cfg.perturb == 0 or cfg.perturb >= MIN_PERTURB,
         f"--perturb {cfg.perturb:g}: below float32's resolution, 1 + EPS * N(0, 1) rounds to 1 for |N| <= 1 (most "
         f"weights would not change); use EPS >= 2^-24 = {MIN_PERTURB:.3g}, or 0 for off"),
        (0 <= cfg.perturb_seed < 1024, f"--perturb_seed {cfg.perturb_seed}: must be in 1..1023 (0 without --perturb)"),
        (cfg.perturb > 0 or cfg.perturb_seed == 0,
         f"--perturb_seed {cfg.perturb_seed}: needs --perturb EPS > 0 (without it the run is not perturbed)"),
        (cfg.perturb == 0 or cfg.perturb_seed >= 1,
         f"--perturb {cfg.perturb}: needs --perturb_seed J in 1..1023 (the replicate)"),
        (0 <= cfg.eval_seed <= MAX_SEED - 2, f"--eval_seed {cfg.eval_seed}: must be in 0..{MAX_SEED - 2}"),
        (0 <= cfg.threads <= MAX_THREADS, f"--threads {cfg.threads}: must be in 0..{MAX_THREADS} (0: torch's default)"),
        (cfg.eval_samples >= 1, f"--eval_samples {cfg.eval_samples}: must be >= 1"),
        (cfg.eval_batch_size >= 1, f"--eval_batch_size {cfg.eval_batch_size}: must be >= 1"),
        (min(cfg.log_interval, cfg.eval_interval, cfg.ckpt_interval) >= 1,
         f"--log_interval {cfg.log_interval} --eval_interval {cfg.eval_interval} --ckpt_interval "
         f"{cfg.ckpt_interval}: must be >= 1"),
        (not (cfg.resume and cfg.overwrite), "--resume --overwrite: choose one"),
        (cfg.stack >= 0, f"--stack {cfg.stack}: must be >= 0 (0: one seed at a time)"),
        (cfg.stack or not cfg.static, "--static: needs --stack (the static step is the stacked one)"),
        (not cfg.curriculum or (cfg.curriculum_every >= 1 and cfg.n_min <= cfg.curriculum_start <= cfg.n_max),
         f"--curriculum_every {cfg.curriculum_every} --curriculum_start {cfg.curriculum_start}: "
         f"need curriculum_every >= 1 and n_min <= curriculum_start <= n_max"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ValueError(msg)
    ns = []
    with contextlib.suppress(ValueError):
        ns = metrics.test_lengths(cfg)
    if not ns:
        raise ValueError(f"--test_lengths {cfg.test_lengths!r}: must be comma-separated integers")
    task = get_task(cfg.task, **task_kwargs(cfg.task, dataclasses.asdict(cfg)))
    if cfg.schedule in NTP_KNOBS:  # the NTP baselines: their messages name the flags
        import ntp  # here: a run of a stop schedule does not load the baselines
        ntp.make(cfg.schedule, dataclasses.asdict(cfg), task)
    else:
        try:  # the schedule checks its own knobs (halting.py's tables); its messages name them as name=value
            cfg.stop_schedule()
        except ValueError as err:
            raise ValueError("--" + str(err).replace("=", " ", 1)) from None
        for k in LOSS_WEIGHTS:  # what the schedule's own checks let through: finite, >= 0
            v = getattr(cfg, k)
            if k in settings(cfg.schedule) and not (finite(v) and 0 <= v <= MAX_WEIGHT):
                raise ValueError(f"--{k} {v}: must be a loss weight in 0..{MAX_WEIGHT:g} (larger ones swamp the task "
                                 f"loss and overflow float32)")
    for n in ns + [cfg.n_min, cfg.n_max]:
        task.check_length(n)
    device = pick_device(cfg.device)
    if not (device == "cpu" or (device.startswith("cuda") and torch.cuda.is_available())
            or (device == "mps" and torch.backends.mps.is_available())):
        raise ValueError(f"--device {cfg.device}: not available here; use auto or cpu"
                         + (", cuda" if torch.cuda.is_available() else ""))
    if cfg.compile and device == "cpu" and cxx_compiler() is None:
        raise ValueError(f"--compile: torch.compile on the CPU needs a working C++ compiler (torch._inductor tries "
                         f"{', '.join(inductor_compilers()) or 'none'}; set CXX to another), and none works here; "
                         f"install one or drop --compile")
    check_memory(cfg, task, max(ns + [cfg.n_max]), device, len(ns))


def ema_too_late(cfg) -> str:
    """The line refusing an EMA that would start after the last step (and so average nothing)."""
    why = (f"--ema_start {cfg.ema_start}" if cfg.ema_start >= 0 else
           f"--ema_start -1: the curriculum's end, (n_max - curriculum_start) * curriculum_every = "
           f"({cfg.n_max} - {cfg.curriculum_start}) * {cfg.curriculum_every}")
    return (f"--ema {cfg.ema}: the EMA would start after step {ema_start_step(cfg)} ({why}), past the last step "
            f"(--max_iters {cfg.max_iters}), and never average anything; set --ema_start in 0..{cfg.max_iters} or "
            f"train longer")


def inductor_compilers() -> list[str]:
    """The C++ compilers torch._inductor tries on the CPU, in order (its config.cpp.cxx: $CXX or g++; None is a
    conda download, only with TORCH_INDUCTOR_INSTALL_GXX)."""
    try:
        from torch._inductor import config as inductor
        cxx = inductor.cpp.cxx
    except Exception:  # no inductor at all: torch.compile cannot build CPU kernels
        return []
    return [c for c in (cxx if isinstance(cxx, (list, tuple)) else (cxx,)) if c]


def cxx_compiler():
    """The C++ compiler torch.compile would use on the CPU, if one answers `--version` (inductor's own test)."""
    if os.getenv("TORCH_INDUCTOR_INSTALL_GXX"):  # torch._inductor downloads g++ from conda-forge if it must
        return "g++ from conda-forge (TORCH_INDUCTOR_INSTALL_GXX)"
    for path in filter(None, map(shutil.which, inductor_compilers())):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([path, "--version"], capture_output=True, timeout=30, check=True)
            return path
    return None


def total_memory(device: str) -> int:
    """Bytes of memory on `device`: the GPU's, or the host's for the CPU."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_properties(torch.device(device)).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(cfg, task, n_longest: int, device: str, n_lengths: int = 1) -> None:
    """Refuse settings whose step cannot fit in memory, a rough upper estimate at 4 bytes a float: training keeps
    ~20 D-sized activations and the attention scores per token, layer, step with gradient and stacked seed;
    evaluation the trajectory's hidden states and logits of its longest sequences, eval_batch_size at a time."""
    pause = cfg.n_pause if cfg.schedule == "ntp_pause" else 0  # the pause tokens of ntp_pause
    sample = lambda n, test: len(task.sample(n, torch.Generator().manual_seed(0), test=test)[0]) + pause
    S, S_train = sample(n_longest, True), max(sample(cfg.n_max, False), sample(cfg.n_max, True))
    steps = cfg.depth_c if cfg.schedule in NTP_KNOBS else min(cfg.T_max, cfg.bptt_k or cfg.T_max)
    V, D = len(task.vocab), cfg.d_model
    seeds = min(cfg.stack, cfg.seeds) if cfg.stack else 1  # a stacked step trains this many seeds at once
    train = 4 * seeds * cfg.batch_size * S_train * steps * cfg.n_layer * (20 * D + 2 * cfg.n_head * S_train)
    evaluate = lambda B, P: 4 * B * P * (cfg.T_test * (D + V) + 20 * D + 2 * cfg.n_head * P)
    # the final evaluation's eval_samples at the longest test length, the in-distribution check's 64 up to n_max
    evaluation = max(evaluate(min(cfg.eval_batch_size, cfg.eval_samples), S),
                     evaluate(min(cfg.eval_batch_size, 64), S_train))
    have = total_memory(device)
    need = max(train, evaluation)
    if need > 0.8 * have:
        raise ValueError(f"--batch_size {cfg.batch_size} --eval_batch_size {cfg.eval_batch_size} --T_test {cfg.T_test} "
                         + (f"--stack {cfg.stack} ({seeds} seeds a step) " if seeds > 1 else "")
                         + f"(sequences up to {S} tokens): a step needs about {need / 2**30:.3g} GiB, more than this "
                         f"machine's {have / 2**30:.3g} GiB allow")
    # the final evaluation's test and validation sets, in host memory: ~100 bytes a token (tensors, Python lists)
    sets = 2 * n_lengths * cfg.eval_samples * S * 100
    host = total_memory("cpu")
    if sets > 0.8 * host:
        raise ValueError(f"--eval_samples {cfg.eval_samples}: the evaluation sets ({n_lengths} lengths x 2 splits, "
                         f"up to {S} tokens a sample) need about {sets / 2**30:.3g} GiB, more than this machine's "
                         f"{host / 2**30:.3g} GiB allow")


def file_target(flag: str, path: str) -> tuple:
    """(folder, name) of an output file as the OS resolves `path` when it is written. A path whose form names a
    folder (empty, ending in a separator, '.' or '..') is refused, whatever is on disk."""
    folder, name = os.path.split(path)
    if names_folder(path):
        raise ValueError(f"{flag} {path!r}: names a folder (a path ending in '{os.sep}', '.' or '..'), not a file; "
                         f"name the file, e.g. {os.path.join(path, 'out')!r}")
    return folder or os.curdir, name


def check_output(flag: str, path: str, folder: bool = False) -> None:
    """An output file a command writes when asked (--out, --json, --plot; a folder with folder=True, created if
    missing): never a run's own file (files.guarded), and where a file can really be created."""
    if not folder:
        parent, name = file_target(flag, path)
        if guarded(name):
            raise ValueError(f"{flag} {path!r}: {guarded(name)}; choose another name")
        if os.path.isdir(path):
            raise ValueError(f"{flag} {path!r}: is a folder; name a file")
    p = os.path.abspath(path) if folder else parent
    while folder and not os.path.lexists(p):  # a folder is created if missing: its nearest existing parent
        p = os.path.dirname(p)
    if not os.path.isdir(p):
        why = "not a folder" if os.path.lexists(p) else "missing"
        raise ValueError(f"{flag} {path!r}: {p} is not a writable folder ({why})")
    if not creatable(p):
        raise ValueError(f"{flag} {path!r}: {p} is not a writable folder (a file cannot be created there)")
