"""
The run directory of train.py: every check made before a file is touched, and what keeps a run safe.

    validate(cfg)          every setting, before anything is written: one line naming the bad value
    plan(cfg, dir)         what to do with a run directory: train fresh, resume from ckpt.pt, skip a
                           finished run, or restart one killed before its first checkpoint. Refuses to
                           replace a run (unless --overwrite) or to resume one with other settings.
    Lock(dir)              an exclusive OS lock (fcntl.flock): a second process on the same run directory
                           stops (exit 2); the lock dies with its process, however it dies; a linked .lock
                           is refused
    check_output(flag, p)  an output flag's file (--out, --json, --plot): never a run's own file, in a folder
                           where a file can really be created
    environment()          versions, hardware and git commit, recorded in config.json and eval.json
    log_lines(path, step)  metrics.jsonl up to a checkpoint's step; a torn last line is dropped
    load_checkpoint, restore, check_ema   ckpt.pt checked before it is used: this run's settings, dtypes, shapes,
                           optimizer settings, stat sums, RNG states and EMA (one line naming the file)
    forgotten_if_unsaved   a run stopped by a non-finite loss before its first checkpoint leaves no files behind
    forget_unsaved         the same for one seed of a stacked chunk (lab/chunks.py)

A user error raises ValueError with one line (cli.run turns it into exit code 2).
"""

import contextlib
import dataclasses
import fcntl
import math
import os
import platform
import re
import shutil
import socket
import stat
import subprocess

import torch

from config import ema_start_step
from halting import settings
import metrics
import ntp
from tasks import get_task, task_kwargs
from lab import stack
from lab.cli import atomic_write, parse_json, read_json, temp_file, write_json

RUN_FILES = ("config.json", "ckpt.pt", "metrics.jsonl", "eval.json", "readouts.json")
OWN_FILES = RUN_FILES + ("summary.json",)  # every file the project writes into a run or sweep folder
# the temp file of an interrupted atomic write of one of them (cli.temp_file: NAME.tmpPID or NAME.tmpPID.N)
OWN_TEMP = re.compile(r"^(" + "|".join(re.escape(f) for f in OWN_FILES) + r")\.tmp(\d+)(\.\d+)?$")
# settings that may differ when a run is resumed: they change how it is computed (device, threads, bf16
# autocast on CUDA, compile: the rounding, as a reduction order does), or nothing, but not what is trained
HARMLESS = {"threads", "device", "amp", "compile", "eval_batch_size", "log_interval", "eval_interval",
            "ckpt_interval", "resume", "overwrite", "seeds", "out_dir", "preset", "stack", "static", "tf32"}
MAX_SEED = 2 ** 32 - 1
# the loss weights of the schedules: above this, the task loss is swamped and float32 overflows (--tau_act 1e308
# made the loss inf at step 1); the papers use 1e-3 .. 1
LOSS_WEIGHTS, MAX_WEIGHT = ("lambda_ent", "beta", "tau_act", "trm_bce"), 1e6
# --perturb multiplies each float32 weight by fl(1 + EPS * N): 1 + x rounds to 1 when |x| <= 2^-24 (half the spacing
# of float32 just above 1, 2^-23), so below EPS = 2^-24 a weight changes only where |N| > 1 / (2^24 EPS): at 1e-9 none
MIN_PERTURB = 2.0 ** -24
MAX_THREADS = 1024  # torch.set_num_threads takes a C int; more threads than this is a typo


def cpu_model() -> str:
    """The CPU's model (Linux: /proc/cpuinfo's model name, family, model, stepping and widest vector ISA, since a
    virtual machine's name can be as vague as "AMD EPYC"; elsewhere platform.processor()): on another CPU model
    the same seed and thread count can round differently, so every run records it."""
    try:
        info = {}
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                key, _, val = line.partition(":")
                info[key.strip()] = val.strip()
        if "model name" in info:
            isa = next((x for x in ("avx512f", "avx2", "avx", "neon", "asimd") if x in info.get("flags", info.get("Features", "")).split()), None)
            detail = [f"{k} {info[k]}" for k in ("cpu family", "model", "stepping") if k in info] + ([isa] if isa else [])
            return info["model name"] + (f" ({', '.join(detail)})" if detail else "")
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict:
    """Versions, hardware and the git commit of the code, recorded in config.json and eval.json."""
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or platform.machine()
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=os.path.dirname(os.path.abspath(__file__)),
                                capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"torch": torch.__version__, "python": platform.python_version(), "hardware": dev, "cpu": cpu_model(),
            "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(), "git_commit": commit}


def pick_device(name: str) -> str:
    if name != "auto":
        return name
    if torch.cuda.is_available():
        return "cuda"
    return "mps" if torch.backends.mps.is_available() else "cpu"


def validate(cfg) -> None:
    """Reject bad settings with one line naming the value and what is allowed."""
    finite = lambda v: isinstance(v, (int, float)) and math.isfinite(v)
    checks = [
        (cfg.w >= 0, f"--w {cfg.w}: must be >= 0"),
        (cfg.T_max >= 1, f"--T_max {cfg.T_max}: must be >= 1"),
        (0 <= cfg.c <= cfg.T_max, f"--c {cfg.c}: must be in 1..T_max ({cfg.T_max}), or 0 for T_max"),
        (cfg.T_test >= cfg.T_max, f"--T_test {cfg.T_test}: must be >= T_max ({cfg.T_max})"),
        (1 <= cfg.n_min <= cfg.n_max, f"--n_min {cfg.n_min} --n_max {cfg.n_max}: need 1 <= n_min <= n_max"),
        (cfg.max_iters >= 1, f"--max_iters {cfg.max_iters}: must be >= 1"),
        (cfg.batch_size >= 1, f"--batch_size {cfg.batch_size}: must be >= 1"),
        (finite(cfg.lr) and cfg.lr > 0, f"--lr {cfg.lr}: must be a finite number > 0"),
        (finite(cfg.min_lr) and 0 <= cfg.min_lr <= cfg.lr, f"--min_lr {cfg.min_lr}: must be a finite number in 0..lr"),
        (cfg.warmup_iters >= 0, f"--warmup_iters {cfg.warmup_iters}: must be >= 0"),
        (finite(cfg.weight_decay) and cfg.weight_decay >= 0, f"--weight_decay {cfg.weight_decay}: must be a finite number >= 0"),
        (finite(cfg.beta1) and 0 <= cfg.beta1 < 1, f"--beta1 {cfg.beta1}: must be in [0, 1)"),
        (finite(cfg.beta2) and 0 <= cfg.beta2 < 1, f"--beta2 {cfg.beta2}: must be in [0, 1)"),
        (finite(cfg.dropout) and 0 <= cfg.dropout < 1, f"--dropout {cfg.dropout}: must be in [0, 1)"),
        (finite(cfg.grad_clip) and cfg.grad_clip >= 0, f"--grad_clip {cfg.grad_clip}: must be a finite number >= 0 (0: off)"),
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
        (finite(cfg.perturb) and 0 <= cfg.perturb <= 1, f"--perturb {cfg.perturb}: must be a finite number in [0, 1] (0: off)"),
        (cfg.perturb == 0 or cfg.perturb >= MIN_PERTURB,
         f"--perturb {cfg.perturb:g}: below float32's resolution, 1 + EPS * N(0, 1) rounds to 1 for |N| <= 1 (most "
         f"weights would not change); use EPS >= 2^-24 = {MIN_PERTURB:.3g}, or 0 for off"),
        (0 <= cfg.perturb_seed < 1024, f"--perturb_seed {cfg.perturb_seed}: must be in 1..1023 (0 without --perturb)"),
        (cfg.perturb > 0 or cfg.perturb_seed == 0, f"--perturb_seed {cfg.perturb_seed}: needs --perturb EPS > 0 (without it the run is not perturbed)"),
        (cfg.perturb == 0 or cfg.perturb_seed >= 1, f"--perturb {cfg.perturb}: needs --perturb_seed J in 1..1023 (the replicate)"),
        (0 <= cfg.eval_seed <= MAX_SEED - 2, f"--eval_seed {cfg.eval_seed}: must be in 0..{MAX_SEED - 2}"),
        (0 <= cfg.threads <= MAX_THREADS, f"--threads {cfg.threads}: must be in 0..{MAX_THREADS} (0: torch's default)"),
        (cfg.eval_samples >= 1, f"--eval_samples {cfg.eval_samples}: must be >= 1"),
        (cfg.eval_batch_size >= 1, f"--eval_batch_size {cfg.eval_batch_size}: must be >= 1"),
        (min(cfg.log_interval, cfg.eval_interval, cfg.ckpt_interval) >= 1,
         f"--log_interval {cfg.log_interval} --eval_interval {cfg.eval_interval} --ckpt_interval {cfg.ckpt_interval}: must be >= 1"),
        (not (cfg.resume and cfg.overwrite), "--resume --overwrite: choose one"),
        (cfg.stack >= 0, f"--stack {cfg.stack}: must be >= 0 (0: one seed at a time)"),
        (cfg.stack or not cfg.static, "--static: needs --stack (the static step is the stacked one)"),
        (not cfg.stack or stack.refusal(cfg) is None, stack.refusal(cfg) if cfg.stack else ""),
        (not cfg.curriculum or (cfg.curriculum_every >= 1 and cfg.n_min <= cfg.curriculum_start <= cfg.n_max),
         f"--curriculum_every {cfg.curriculum_every} --curriculum_start {cfg.curriculum_start}: "
         f"need curriculum_every >= 1 and n_min <= curriculum_start <= n_max"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ValueError(msg)
    try:
        ns = metrics.test_lengths(cfg)
    except ValueError:
        ns = []
    if not ns:
        raise ValueError(f"--test_lengths {cfg.test_lengths!r}: must be comma-separated integers")
    task = get_task(cfg.task, **task_kwargs(cfg.task, dataclasses.asdict(cfg)))
    if cfg.schedule in ntp.SCHEDULES:  # the NTP baselines (ntp.py): their messages name the flags
        ntp.make(cfg.schedule, dataclasses.asdict(cfg), task)
    else:
        try:  # the schedule checks its own knobs; its messages name them as name=value
            cfg.stop_schedule()
        except ValueError as err:
            raise ValueError(f"--{err}") from None
        for k in LOSS_WEIGHTS:  # what the schedule's own checks let through: finite, >= 0
            v = getattr(cfg, k)
            if k in settings(cfg.schedule) and not (finite(v) and 0 <= v <= MAX_WEIGHT):
                raise ValueError(f"--{k} {v}: must be a loss weight in 0..{MAX_WEIGHT:g} (larger ones swamp the task "
                                 f"loss and overflow float32)")
    for n in ns + [cfg.n_min, cfg.n_max]:
        task.check_length(n)
    device = pick_device(cfg.device)
    ok = device == "cpu" or (device.startswith("cuda") and torch.cuda.is_available()) or (
        device == "mps" and torch.backends.mps.is_available())
    if not ok:
        raise ValueError(f"--device {cfg.device}: not available here; use auto or cpu" + (", cuda" if torch.cuda.is_available() else ""))
    if cfg.compile and device == "cpu" and cxx_compiler() is None:
        raise ValueError(f"--compile: torch.compile on the CPU needs a working C++ compiler (torch._inductor tries "
                         f"{', '.join(inductor_compilers()) or 'none'}; set CXX to another), and none works here; "
                         f"install one or drop --compile")
    check_memory(cfg, task, max(ns + [cfg.n_max]), device, len(ns))


def ema_too_late(cfg) -> str:
    """The line refusing an EMA that would start after the last step (and so average nothing)."""
    start = ema_start_step(cfg)
    why = (f"--ema_start {cfg.ema_start}" if cfg.ema_start >= 0 else
           f"--ema_start -1: the curriculum's end, (n_max - curriculum_start) * curriculum_every = "
           f"({cfg.n_max} - {cfg.curriculum_start}) * {cfg.curriculum_every}")
    return (f"--ema {cfg.ema}: the EMA would start after step {start} ({why}), past the last step (--max_iters "
            f"{cfg.max_iters}), and never average anything; set --ema_start in 0..{cfg.max_iters} or train longer")


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
    """The C++ compiler torch.compile would use on the CPU, if one answers `--version` (torch._inductor's own
    test), else None."""
    if os.getenv("TORCH_INDUCTOR_INSTALL_GXX"):  # torch._inductor downloads g++ from conda-forge if it must
        return "g++ from conda-forge (TORCH_INDUCTOR_INSTALL_GXX)"
    for cxx in inductor_compilers():
        path = shutil.which(cxx)
        if path is None:
            continue
        try:
            subprocess.run([path, "--version"], capture_output=True, timeout=30, check=True)
            return path
        except (OSError, subprocess.SubprocessError):
            continue
    return None


def total_memory(device: str) -> int:
    """Bytes of memory on `device`: the GPU's, or the host's for the CPU (and for what the host holds)."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_properties(torch.device(device)).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(cfg, task, n_longest: int, device: str, n_lengths: int = 1) -> None:
    """Refuse settings whose step cannot fit in memory, before training. A rough upper estimate, 4 bytes a
    float: training keeps ~20 D-sized activations and the attention scores per token, layer and step with
    gradient (at most bptt_k steps; c for the NTP baselines) on sequences up to n_max, for each of the
    min(stack, seeds) seeds a --stack step trains at once; evaluation keeps the trajectory's hidden states and
    logits of the longest test sequence, in batches of at most eval_batch_size samples of one length (the final
    evaluation's eval_samples, the in-distribution check's 64 at lengths up to n_max)."""
    pause = cfg.n_pause if cfg.schedule == "ntp_pause" else 0  # the pause tokens of ntp_pause
    S = len(task.sample(n_longest, torch.Generator().manual_seed(0), test=True)[0]) + pause  # longest sequence
    S_train = max(len(task.sample(cfg.n_max, torch.Generator().manual_seed(0), test=t)[0]) for t in (False, True)) + pause
    steps = cfg.depth_c if cfg.schedule in ntp.SCHEDULES else min(cfg.T_max, cfg.bptt_k or cfg.T_max)
    V, D = len(task.vocab), cfg.d_model
    seeds = min(cfg.stack, cfg.seeds) if cfg.stack else 1  # a stacked step trains this many seeds at once
    train = 4 * seeds * cfg.batch_size * S_train * steps * cfg.n_layer * (20 * D + 2 * cfg.n_head * S_train)
    evaluate = lambda B, P: 4 * B * P * (cfg.T_test * (D + V) + 20 * D + 2 * cfg.n_head * P)
    evaluation = max(evaluate(min(cfg.eval_batch_size, cfg.eval_samples), S), evaluate(min(cfg.eval_batch_size, 64), S_train))
    have = total_memory(device)
    need = max(train, evaluation)
    if need > 0.8 * have:
        raise ValueError(f"--batch_size {cfg.batch_size} --eval_batch_size {cfg.eval_batch_size} --T_test {cfg.T_test} "
                         + (f"--stack {cfg.stack} ({seeds} seeds a step) " if seeds > 1 else "")
                         + f"(sequences up to {S} tokens): a step needs about {need / 2**30:.3g} GiB, more than this "
                         f"machine's {have / 2**30:.3g} GiB allow")
    # the final evaluation holds the test and validation sets, ~100 bytes a token as tensors and the Python
    # lists of the shortcut predictors (host memory whatever the device)
    sets = 2 * n_lengths * cfg.eval_samples * S * 100
    host = total_memory("cpu")
    if sets > 0.8 * host:
        raise ValueError(f"--eval_samples {cfg.eval_samples}: the evaluation sets ({n_lengths} lengths x 2 splits, "
                         f"up to {S} tokens a sample) need about {sets / 2**30:.3g} GiB, more than this machine's "
                         f"{host / 2**30:.3g} GiB allow")


# --- the state of a run directory ---------------------------------------------------------------------

def saved_settings(path: str, saved) -> dict:
    """The settings a run file records (config.json itself, eval.json's "config"): one line naming the file if it
    records none (`{}`, a list, a file cut short), instead of comparing every default with the command."""
    saved = saved.get("config", saved) if isinstance(saved, dict) else saved
    if not isinstance(saved, dict) or not all(isinstance(saved.get(k), str) for k in ("task", "schedule")):
        raise ValueError(f"{path} is empty or damaged (it records no run's settings: task, schedule): remove it, or "
                         f"replace the run with --overwrite")
    return saved


def differences(saved: dict, cfg) -> list[str]:
    """The settings of a saved run that differ from cfg, except the harmless ones. A setting the saved
    run does not know (added later, off by default) counts as its default."""
    now = dataclasses.asdict(cfg)
    saved = {**dataclasses.asdict(type(cfg)()), **saved}
    return [f"{k}={saved.get(k)!r} (now {v!r})" for k, v in now.items() if k not in HARMLESS and saved.get(k) != v]


def load_checkpoint(path: str, cfg) -> dict:
    """ckpt.pt, checked: one line for an unreadable file, a foreign or damaged dict, or another run's settings."""
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise ValueError(f"--resume: {path} is not a readable checkpoint ({type(err).__name__})") from None
    need = {"model": dict, "schedule": dict, "optimizer": dict, "step": int, "elapsed": (int, float),
            "acc_stats": dict, "config": dict, "rng": dict}
    bad = [k for k, t in need.items() if not isinstance(ck, dict) or not isinstance(ck.get(k), t) or isinstance(ck.get(k), bool)]
    if bad:
        raise ValueError(f"--resume: {path} is not a train.py checkpoint (missing or malformed: {', '.join(bad)})")
    if set(ck["rng"]) != {"data", "depth", "torch"} or not all(isinstance(v, torch.Tensor) for v in ck["rng"].values()):
        raise ValueError(f"--resume: {path} is not a train.py checkpoint (malformed: rng)")
    if not 0 <= ck["step"] <= cfg.max_iters:
        raise ValueError(f"--resume: {path} is at step {ck['step']}, outside 0..max_iters ({cfg.max_iters})")
    if not all(isinstance(ck["config"].get(k), str) for k in ("task", "schedule")):
        raise ValueError(f"--resume: {path} is not a train.py checkpoint (malformed: config, it records no settings)")
    diff = differences(ck["config"], cfg)
    if diff:
        raise ValueError(f"--resume: {path} belongs to another run: " + ", ".join(diff))
    if bad := malformed(ck, cfg):
        raise ValueError(f"--resume: {path} is damaged or not this run's checkpoint ({bad})")
    if bad := ema_problem(cfg, ck["step"], ck.get("ema")):
        raise ValueError(f"--resume: {path} {bad}")
    if bad := non_finite(ck):
        raise ValueError(f"--resume: {path} holds non-finite values ({bad}): nothing good to continue from; "
                         f"start again with --overwrite")
    return ck


def malformed(ck: dict, cfg):
    """What in a checkpoint (config already checked) train.py could not have written, in words; None if nothing.
    train.py trains in float32 (autocast keeps float32 weights), so every tensor of the weights, the EMA and the
    optimizer's moments is float32: another dtype would be cast silently on loading. The optimizer's settings
    must be this run's (betas, weight decay: a resume takes them from the checkpoint); the stat sums are numbers;
    the RNG states are generator states."""
    parts = {"model": ck["model"], "schedule": ck["schedule"]}
    ema = ck.get("ema")
    if ema is not None:
        if not (isinstance(ema, dict) and set(ema) == {"model", "schedule"} and all(isinstance(v, dict) for v in ema.values())):
            return "malformed: ema, not {model: {...}, schedule: {...}}"
        parts.update({f"ema {k}": v for k, v in ema.items()})
    opt = ck["optimizer"]
    if not (isinstance(opt.get("state"), dict) and isinstance(opt.get("param_groups"), list)
            and len(opt["param_groups"]) == 1 and isinstance(opt["param_groups"][0], dict)
            and all(isinstance(st, dict) for st in opt["state"].values())):
        return "malformed: optimizer, not one AdamW parameter group and its state"
    parts["optimizer state"] = {f"{i} {k}": v for i, st in opt["state"].items() for k, v in st.items()
                                if not (k == "step" and isinstance(v, (int, float)))}
    for part, tensors in parts.items():
        for k, v in tensors.items():
            if not isinstance(v, torch.Tensor):
                return f"{part} {k}: not a tensor ({type(v).__name__})"
            if v.dtype != torch.float32:
                return f"{part} {k}: {str(v.dtype).replace('torch.', '')}, where train.py writes float32"
    group, ref = opt["param_groups"][0], torch.optim.AdamW(
        [torch.zeros(1)], lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay).param_groups[0]
    norm = lambda v: tuple(v) if isinstance(v, (list, tuple)) else v
    for k, want in ref.items():  # a key this torch does not know, or an older torch did not write, is left alone
        if k not in ("params", "lr") and k in group and norm(group[k]) != norm(want):
            return f"optimizer {k}={group[k]!r}, where this run has {want!r}"
    if not (isinstance(group.get("lr"), (int, float)) and not isinstance(group["lr"], bool) and math.isfinite(group["lr"])):
        return f"optimizer lr={group.get('lr')!r}: not a finite number"
    sums = ck["acc_stats"]
    if sums and not all(isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in sums.items()):
        return f"acc_stats {sums!r}: the stat sums must be numbers"
    if sums and not (isinstance(sums.get("steps"), (int, float)) and sums["steps"] >= 1):
        return f"acc_stats {sums!r}: the stat sums need their step count ('steps' >= 1)"
    for k, v in ck["rng"].items():
        try:
            torch.Generator().set_state(v)
        except (RuntimeError, TypeError, ValueError):
            return f"rng {k}: not a generator state"
    return None


def ema_problem(cfg, step: int, ema):
    """Why a checkpoint at `step` with EMA weights `ema` (None: none) cannot continue this run's EMA, in words;
    None if it can. The EMA is a copy of the weights after step ema_start_step(cfg) (train.EMA), so a checkpoint
    at that step or later holds it, an earlier one does not, and a run without --ema never does."""
    if not cfg.ema:
        return None if ema is None else "holds EMA weights, but its run has no --ema (it would evaluate them)"
    start = ema_start_step(cfg)
    if step >= start and ema is None:
        return f"holds no EMA weights at step {step}, though the EMA starts after step {start} (--ema {cfg.ema})"
    if step < start and ema is not None:
        return f"holds EMA weights at step {step}, before the EMA starts (after step {start})"
    return None


def check_out_dir(d: str) -> None:
    """d, or the nearest of its parents that exists, must be a writable directory (not a file, not a dangling link)."""
    p = d
    while not os.path.lexists(p) and os.path.dirname(p) not in ("", p):
        p = os.path.dirname(p)
    if os.path.islink(p) and not os.path.exists(p):
        raise ValueError(f"--out_dir {d}: cannot write there ({p} is a symlink to a missing path, {os.readlink(p)})")
    if os.path.lexists(p) and not os.path.isdir(p):
        raise ValueError(f"--out_dir {d}: cannot write there ({p} is a file, not a directory)")
    if os.path.lexists(p) and not os.access(p, os.W_OK):
        raise ValueError(f"--out_dir {d}: cannot write there ({p} is not writable)")


def creatable(folder: str) -> bool:
    """Whether a file can really be created in folder: a test file, created and removed (os.access answers yes
    to root on a read-only file system or in /proc)."""
    try:
        f, tmp = temp_file(os.path.join(folder, ".write-test"))
        f.close()
        os.remove(tmp)
        return True
    except OSError:
        return False


def check_output(flag: str, path: str, folder: bool = False) -> None:
    """An output a command writes when asked (evaluate.py --out and --plot, bench.py --json, theory_checks.py
    --json), checked before any work: never a run's own file (OWN_FILES: a finished run's record would be
    replaced), a file (a folder with folder=True, created if missing) where one can really be created."""
    if not folder and os.path.basename(path) in OWN_FILES:
        raise ValueError(f"{flag} {path!r}: {os.path.basename(path)} is the name of a run's own file "
                         f"({', '.join(OWN_FILES)}), which it would replace; choose another name")
    if not folder and os.path.isdir(path):
        raise ValueError(f"{flag} {path!r}: is a folder; name a file")
    p = os.path.abspath(path) if folder else os.path.dirname(os.path.abspath(path))
    while folder and not os.path.lexists(p):  # a folder is created if missing: its nearest existing parent
        p = os.path.dirname(p)
    if not os.path.isdir(p):
        raise ValueError(f"{flag} {path!r}: {p} is not a writable folder ({'not a folder' if os.path.lexists(p) else 'missing'})")
    if not creatable(p):
        raise ValueError(f"{flag} {path!r}: {p} is not a writable folder (a file cannot be created there)")


def check_folder(cfg, out_dir: str, ours: set) -> None:
    """A folder holds one run, or the seeds of one experiment: refuse what would mix them. A sweep refuses a
    run at its top (eval.json beside seed*/), a seed folder of another experiment, and under --overwrite any run
    it would not replace (left beside the new seeds); a single run refuses a folder that holds runs below it."""
    if not os.path.isdir(out_dir):
        return
    if cfg.seeds > 1 and any(os.path.exists(os.path.join(out_dir, f)) for f in ("config.json", "eval.json")):
        raise ValueError(f"--out_dir {out_dir} holds a single run (config.json / eval.json): a sweep's seeds would "
                         f"sit below it and count twice; choose another --out_dir")
    for name in sorted(os.listdir(out_dir)):
        sub = os.path.join(out_dir, name)
        held = [f for f in ("config.json", "eval.json") if os.path.isfile(os.path.join(sub, f))]
        if sub in ours or not held:
            continue
        if cfg.seeds == 1:
            raise ValueError(f"--out_dir {out_dir} holds runs below it ({sub}): a single run there would count "
                             f"them twice; choose another --out_dir")
        if cfg.overwrite:
            raise ValueError(f"--out_dir {out_dir}: --overwrite would leave {sub} (a run this sweep does not "
                             f"replace) beside the new seeds; remove it or choose another --out_dir")
        saved = saved_settings(f"--out_dir {out_dir}: {os.path.join(sub, held[0])}", read_json(os.path.join(sub, held[0])))
        diff = [x for x in differences(saved, cfg) if not x.startswith("seed=")]
        if diff:
            raise ValueError(f"--out_dir {out_dir} holds {sub}, a run of another experiment ({', '.join(diff)}): a "
                             f"sweep folder holds one experiment; choose another --out_dir")


def non_finite(ck, name: str = ""):
    """The first non-finite floating tensor anywhere in a checkpoint (model, schedule, optimizer state, EMA: every
    tensor it holds), by its path of keys; None if all are finite."""
    if isinstance(ck, torch.Tensor):
        return name.strip() if ck.is_floating_point() and not torch.isfinite(ck).all() else None
    items = ck.items() if isinstance(ck, dict) else enumerate(ck) if isinstance(ck, (list, tuple)) else ()
    for k, v in items:
        if (bad := non_finite(v, f"{name} {k}")) is not None:
            return bad
    return None


def plan(cfg, d: str, single: bool = True):
    """(action, checkpoint) for run directory d: ("fresh" | "overwrite" | "resume" | "restart" | "skip", ckpt or None)."""
    check_out_dir(d)
    paths = {f: os.path.join(d, f) for f in RUN_FILES}
    for p in paths.values():
        if os.path.lexists(p) and not os.path.isfile(p):
            raise ValueError(f"{p}: exists and is not a regular file")
    held = [f for f, p in paths.items() if os.path.exists(p)]
    if not cfg.resume:
        if held and not cfg.overwrite:
            raise ValueError(f"--out_dir {d} holds a run ({', '.join(held)}): continue it with --resume, "
                             f"choose another --out_dir, or replace it with --overwrite")
        return ("overwrite" if held else "fresh"), None
    for f in ("config.json", "eval.json"):  # every file of the run must belong to this experiment
        if f in held:
            saved = saved_settings(f"--resume: {paths[f]}", read_json(paths[f]))
            diff = differences(saved, cfg)
            if diff:
                raise ValueError(f"--resume: {paths[f]} belongs to another run: " + ", ".join(diff))
    if "eval.json" in held:
        return "skip", None
    if "ckpt.pt" in held:
        ck = load_checkpoint(paths["ckpt.pt"], cfg)
        log_lines(paths["metrics.jsonl"], ck["step"])  # readable, before open_run rewrites anything
        return "resume", ck
    if held:  # killed before its first checkpoint: nothing to continue from
        return "restart", None
    if single:
        raise ValueError(f"--resume: no checkpoint at {paths['ckpt.pt']} (nothing to resume)")
    return "fresh", None


def claim(cfg, run_dir: str, single: bool) -> tuple:
    """plan(), made again under the run's Lock (another process may have filled run_dir since the first
    check); on --overwrite the old run's files go here, before the new run writes any."""
    action, start = plan(cfg, run_dir, single)
    if action == "overwrite":
        for f in RUN_FILES:
            if os.path.exists(os.path.join(run_dir, f)):
                os.remove(os.path.join(run_dir, f))
    return action, start


# the settings a resume may change, kept per segment (stack, static: a stacked chunk rounds differently)
SEGMENT = ("threads", "device", "amp", "compile", "stack", "static")


def segments(cfg_path: str) -> list:
    """The segments [{step, threads, device, amp, compile, stack, static, env}] recorded in a run's config.json (a run from
    before segments were recorded: one, from its env)."""
    saved = read_json(cfg_path) if os.path.isfile(cfg_path) else {}
    saved = saved if isinstance(saved, dict) else {}
    if isinstance(saved.get("segments"), list):
        return saved["segments"]
    return [{"step": 0, **{k: saved.get(k) for k in SEGMENT}, "env": saved.get("env")}] if saved else []


def log_lines(path: str, step: int) -> list[str]:
    """metrics.jsonl's lines with step <= `step` (a resumed run writes the rest again). A torn or blank last
    line (a write cut by a crash or a full disk) is dropped; any other unreadable line is an error."""
    if not step or not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()
    kept = []
    for i, line in enumerate(lines):
        try:
            try:
                line = line.decode()
            except UnicodeDecodeError:
                raise ValueError("not UTF-8 text") from None
            rec = parse_json(line)
            if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
                raise ValueError("no integer 'step'")
        except ValueError as err:
            if i == len(lines) - 1:
                break  # torn by an interrupted write
            raise ValueError(f"{path}, line {i + 1}: not a log line ({err})") from None
        if rec["step"] <= step:
            kept.append(line + "\n")
    return kept


def last_good(ckpt_path: str) -> str:
    """Where a failed run can be continued from, in words."""
    if not os.path.isfile(ckpt_path):
        return "no checkpoint was written yet"
    ck = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    if bad := non_finite(ck):
        return f"the checkpoint at step {ck['step']} ({ckpt_path}) holds non-finite values ({bad}): none is good"
    return f"last good checkpoint: step {ck['step']} at {ckpt_path}"


class Lock:
    """An exclusive lock on a run directory (created if needed): an OS lock (fcntl.flock) on the file .lock, which
    names its holder (pid and host). The OS releases the lock when its process ends, however it ends (SIGKILL
    too), so the .lock of a dead process is simply locked again: no check-then-act. The lock is on the file
    that .lock names when it is taken (a holder that removed it meanwhile means: open it again), and a holder
    removes only its own. On entry, temp files of the project's killed writers (NAME.tmpPID) are removed."""

    def __init__(self, d: str):
        self.d, self.path, self.fd = d, os.path.join(d, ".lock"), None

    def __enter__(self):
        try:
            os.makedirs(self.d, exist_ok=True)
            while self.fd is None:
                fd = self.open()
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
                    os.close(fd)
                    raise ValueError(f"--out_dir {self.d} is in use by {holder} (lock {self.path}); wait for it "
                                     f"to finish") from None
                if same_file(self.path, fd):
                    self.fd = fd
                else:  # its last holder removed .lock between our open and our lock: lock the new one
                    os.close(fd)
            os.ftruncate(self.fd, 0)
            os.write(self.fd, f"process {os.getpid()} on {socket.gethostname()}".encode())
        except OSError as err:
            raise ValueError(f"--out_dir {self.d!r}: cannot write there ({err.strerror})") from None
        for f in os.listdir(self.d):  # temp files of the project's writers killed mid-write
            m = OWN_TEMP.match(f)
            if m and not (int(m.group(2)) != os.getpid() and alive(int(m.group(2)))):
                os.remove(os.path.join(self.d, f))
        return self

    def open(self) -> int:
        """.lock, opened (created if missing) without following a symlink: a .lock that is a link, or a file with
        other names (a hard link), could be anyone's file, and writing our name into it would destroy it."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError:
            if os.path.islink(self.path):
                raise ValueError(f"--out_dir {self.d}: its lock {self.path} is a symlink (to {os.readlink(self.path)}); "
                                 f"a run's lock is its own file: remove the link") from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.close(fd)
            raise ValueError(f"--out_dir {self.d}: its lock {self.path} is not a file of its own (a hard link, or not a "
                             f"regular file); remove it")
        return fd

    def __exit__(self, *exc):
        try:
            if same_file(self.path, self.fd):  # still ours: remove it while holding the lock
                os.remove(self.path)
        finally:
            os.close(self.fd)
            self.fd = None


def same_file(path: str, fd: int) -> bool:
    """Whether path names the file open as fd."""
    try:
        a, b = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- a run's files while it trains: config.json, metrics.jsonl, ckpt.pt --------------------------------------

def open_run(cfg, run_dir: str, step: int, resumed: bool):
    """Before the first step (of a fresh run, or of a resumed one at `step`): config.json with this segment's
    (step, machine settings, environment) appended to the earlier ones (a resume may change them), and
    metrics.jsonl cut back to the checkpoint's step. Returns (env, segments)."""
    env, cfg_path, log_path = environment(), os.path.join(run_dir, "config.json"), os.path.join(run_dir, "metrics.jsonl")
    kept = log_lines(log_path, step)  # metrics.jsonl holds exactly the lines up to the checkpoint's step: read first
    segs = (segments(cfg_path) if resumed else []) + [{"step": step, **{k: getattr(cfg, k) for k in SEGMENT}, "env": env}]
    write_json(cfg_path, {**dataclasses.asdict(cfg), "env": env, "segments": segs})
    atomic_write(log_path, lambda f: f.write("".join(kept).encode()))
    return env, segs


def restore(start: dict, run_dir: str, model, schedule, optimizer, gens: dict):
    """Continue from the checkpoint `start` (plan/claim loaded and checked it): weights, optimizer, the data and
    depth generators and torch's RNG, exactly where they were. Returns (step, elapsed, acc_stats, ema)."""
    weights = {"model": dict(model.named_parameters()), "schedule": dict(schedule.named_parameters())}
    where = f"--resume: {run_dir}/ckpt.pt does not fit this run"
    # load_state_dict casts a tensor of another dtype silently, and the EMA is only read here: each must be
    # exactly what this run's model and schedule hold
    expect = {"model": model.state_dict(), "schedule": schedule.state_dict()}
    if start.get("ema") is not None:
        expect.update({f"ema {part}": ps for part, ps in weights.items()})
    for part, want in expect.items():
        saved = start["ema"][part[4:]] if part.startswith("ema ") else start[part]
        if set(saved) != set(want):
            odd = sorted(set(saved) ^ set(want))
            raise ValueError(f"{where} ({part}: {len(odd)} keys differ, e.g. {odd[0]})")
        for k, v in want.items():
            if (saved[k].dtype, saved[k].shape) != (v.dtype, v.shape):
                raise ValueError(f"{where} ({part} {k}: {str(saved[k].dtype).replace('torch.', '')} "
                                 f"{tuple(saved[k].shape)}, where this run has {str(v.dtype).replace('torch.', '')} "
                                 f"{tuple(v.shape)})")
    params, ids = optimizer.param_groups[0]["params"], start["optimizer"]["param_groups"][0].get("params")
    ids = dict(zip(ids, params)) if isinstance(ids, list) and len(ids) == len(params) and all(
        isinstance(i, int) for i in ids) else {}  # the checkpoint's parameter ids, in the optimizer's order
    for i, st in start["optimizer"]["state"].items():  # the moments of a parameter have its shape
        p = ids.get(i) if isinstance(i, int) else None
        bad = [k for k, v in st.items() if k != "step" and (p is None or v.shape != p.shape)]
        if bad:
            raise ValueError(f"{where} (optimizer state {i} {bad[0]}: "
                             + ("no such parameter" if p is None else f"{tuple(st[bad[0]].shape)}, where the parameter is {tuple(p.shape)}") + ")")
    try:
        model.load_state_dict(start["model"])
        schedule.load_state_dict(start["schedule"])
        optimizer.load_state_dict(start["optimizer"])
        for k, g in gens.items():
            g.set_state(start["rng"][k])
        torch.set_rng_state(start["rng"]["torch"])
        ema = start.get("ema")
        if ema is not None:  # the checkpoint is read onto the CPU: the EMA lives beside the weights
            ema = {part: {k: ema[part][k].to(p.device) for k, p in ps.items()} for part, ps in weights.items()}
    except (RuntimeError, KeyError, ValueError, TypeError, AttributeError) as err:
        msg = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        raise ValueError(f"--resume: {run_dir}/ckpt.pt does not fit this run ({msg})") from None
    return start["step"], start["elapsed"], start["acc_stats"], ema


def save_checkpoint(path: str, ck: dict) -> None:
    """ckpt.pt, written atomically; refused (one line naming the last good checkpoint) if a weight is not finite."""
    if bad := non_finite(ck):
        raise FloatingPointError(f"non-finite weights at step {ck['step']} ({bad}); " + last_good(path))
    atomic_write(path, lambda f: torch.save(ck, f))


def forget_unsaved(run_dir: str) -> str:
    """A run stopped before its first checkpoint has nothing to continue from, and its config.json and
    metrics.jsonl would only block the corrected command (which would need --overwrite): they are removed.
    Returns the words that say so ("" where a checkpoint exists, and nothing is removed)."""
    if os.path.exists(os.path.join(run_dir, "ckpt.pt")):
        return ""
    for f in ("config.json", "metrics.jsonl"):
        if os.path.isfile(os.path.join(run_dir, f)):
            os.remove(os.path.join(run_dir, f))
    return "its config.json and metrics.jsonl were removed (nothing to resume): run it again with other settings"


@contextlib.contextmanager
def forgotten_if_unsaved(run_dir: str):
    """Around a run's training loop: a run stopped by a non-finite loss (or weights) before its first checkpoint
    leaves no files behind (forget_unsaved), and the message says so."""
    try:
        yield
    except FloatingPointError as err:
        if gone := forget_unsaved(run_dir):
            raise FloatingPointError(f"{err}; {gone}") from None
        raise


def diverged(log_path: str, V: int):
    """A final training loss above 2 ln V, twice that of guessing uniformly (where training starts), means the
    run diverged: the last and the first logged loss, in words; None otherwise."""
    lines = [parse_json(line) for line in open(log_path)] if os.path.isfile(log_path) else []
    losses = [(r["step"], r["loss"]) for r in lines if isinstance(r, dict) and isinstance(r.get("loss"), (int, float))]
    if not losses or not losses[-1][1] > 2 * math.log(V):
        return None
    return f"loss {losses[0][1]:.3g} at step {losses[0][0]}, {losses[-1][1]:.3g} at step {losses[-1][0]}"


def check_ema(cfg, run_dir: str, step: int, ema) -> None:
    """A resumed run's EMA (train.EMA) must be what its checkpoint at `step` should hold: its EMA weights from the
    EMA's start on (the step of the start included: the copy is taken after that step), none before it, and none
    without --ema (ema_problem)."""
    if bad := ema_problem(cfg, step, ema.weights):
        raise ValueError(f"--resume: {run_dir}/ckpt.pt {bad}")
