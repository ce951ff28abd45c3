"""
The run directory of train.py: every check made before a file is touched, and what keeps a run safe.

    validate(cfg)          every setting, before anything is written: one line naming the bad value
    plan(cfg, dir)         what to do with a run directory: train fresh, resume from ckpt.pt, skip a
                           finished run, or restart one killed before its first checkpoint. Refuses to
                           replace a run (unless --overwrite) or to resume one with other settings.
    Lock(dir)              an exclusive OS lock (fcntl.flock): a second process on the same run directory
                           stops (exit 2); the lock dies with its process, however it dies
    environment()          versions, hardware and git commit, recorded in config.json and eval.json
    log_lines(path, step)  metrics.jsonl up to a checkpoint's step; a torn last line is dropped

A user error raises ValueError with one line (cli.run turns it into exit code 2).
"""

import dataclasses
import fcntl
import json
import math
import os
import platform
import re
import socket
import subprocess

import torch

import metrics
import ntp
from tasks import get_task, task_kwargs
from lab import stack
from lab.cli import atomic_write, write_json

RUN_FILES = ("config.json", "ckpt.pt", "metrics.jsonl", "eval.json", "readouts.json")
OWN_FILES = RUN_FILES + ("summary.json",)  # every file the project writes into a run or sweep folder
# the temp file of an interrupted atomic write of one of them (cli.atomic_write: NAME.tmpPID)
OWN_TEMP = re.compile(r"^(" + "|".join(re.escape(f) for f in OWN_FILES) + r")\.tmp(\d+)$")
# settings that may differ when a run is resumed: they change how it is computed (device, threads, bf16
# autocast on CUDA, compile: the rounding, as a reduction order does), or nothing, but not what is trained
HARMLESS = {"threads", "device", "amp", "compile", "eval_batch_size", "log_interval", "eval_interval",
            "ckpt_interval", "resume", "overwrite", "seeds", "out_dir", "preset", "stack", "static", "tf32"}
MAX_SEED = 2 ** 32 - 1


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
        (cfg.seeds >= 1, f"--seeds {cfg.seeds}: must be >= 1"),
        (0 <= cfg.seed and cfg.seed + cfg.seeds - 1 <= MAX_SEED, f"--seed {cfg.seed}: seeds must lie in 0..{MAX_SEED}"),
        (-1 <= cfg.init_seed <= MAX_SEED, f"--init_seed {cfg.init_seed}: must be -1 (= --seed) or in 0..{MAX_SEED}"),
        (-1 <= cfg.data_seed <= MAX_SEED, f"--data_seed {cfg.data_seed}: must be -1 (= --seed) or in 0..{MAX_SEED}"),
        (finite(cfg.perturb) and 0 <= cfg.perturb <= 1, f"--perturb {cfg.perturb}: must be a finite number in [0, 1] (0: off)"),
        (0 <= cfg.perturb_seed < 1024, f"--perturb_seed {cfg.perturb_seed}: must be in 1..1023 (0 without --perturb)"),
        (cfg.perturb > 0 or cfg.perturb_seed == 0, f"--perturb_seed {cfg.perturb_seed}: needs --perturb EPS > 0 (without it the run is not perturbed)"),
        (cfg.perturb == 0 or cfg.perturb_seed >= 1, f"--perturb {cfg.perturb}: needs --perturb_seed J in 1..1023 (the replicate)"),
        (0 <= cfg.eval_seed <= MAX_SEED - 2, f"--eval_seed {cfg.eval_seed}: must be in 0..{MAX_SEED - 2}"),
        (cfg.threads >= 0, f"--threads {cfg.threads}: must be >= 0"),
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
    for n in ns + [cfg.n_min, cfg.n_max]:
        task.check_length(n)
    device = pick_device(cfg.device)
    ok = device == "cpu" or (device.startswith("cuda") and torch.cuda.is_available()) or (
        device == "mps" and torch.backends.mps.is_available())
    if not ok:
        raise ValueError(f"--device {cfg.device}: not available here; use auto or cpu" + (", cuda" if torch.cuda.is_available() else ""))
    check_memory(cfg, task, max(ns + [cfg.n_max]), device, len(ns))


def check_memory(cfg, task, n_longest: int, device: str, n_lengths: int = 1) -> None:
    """Refuse settings whose step cannot fit in memory, before training. A rough upper estimate, 4 bytes a
    float: training keeps ~20 D-sized activations and the attention scores per token, layer and step with
    gradient (at most bptt_k steps; c for the NTP baselines) on sequences up to n_max; evaluation keeps the
    trajectory's hidden states and logits of the longest test sequence."""
    pause = cfg.n_pause if cfg.schedule == "ntp_pause" else 0  # the pause tokens of ntp_pause
    S = len(task.sample(n_longest, torch.Generator().manual_seed(0), test=True)[0]) + pause  # longest sequence
    S_train = max(len(task.sample(cfg.n_max, torch.Generator().manual_seed(0), test=t)[0]) for t in (False, True)) + pause
    steps = cfg.depth_c if cfg.schedule in ntp.SCHEDULES else min(cfg.T_max, cfg.bptt_k or cfg.T_max)
    V, D = len(task.vocab), cfg.d_model
    train = 4 * cfg.batch_size * S_train * steps * cfg.n_layer * (20 * D + 2 * cfg.n_head * S_train)
    evaluation = 4 * cfg.eval_batch_size * S * (cfg.T_test * (D + V) + 20 * D + 2 * cfg.n_head * S)
    if device.startswith("cuda"):
        have = torch.cuda.get_device_properties(torch.device(device)).total_memory
    else:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    need = max(train, evaluation)
    if need > 0.8 * have:
        raise ValueError(f"--batch_size {cfg.batch_size} --eval_batch_size {cfg.eval_batch_size} --T_test {cfg.T_test} "
                         f"(sequences up to {S} tokens): a step needs about {need / 2**30:.3g} GiB, more than this "
                         f"machine's {have / 2**30:.3g} GiB allow")
    # the final evaluation holds the test and validation sets, ~100 bytes a token as tensors and the Python
    # lists of the shortcut predictors (host memory whatever the device)
    sets = 2 * n_lengths * cfg.eval_samples * S * 100
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if sets > 0.8 * host:
        raise ValueError(f"--eval_samples {cfg.eval_samples}: the evaluation sets ({n_lengths} lengths x 2 splits, "
                         f"up to {S} tokens a sample) need about {sets / 2**30:.3g} GiB, more than this machine's "
                         f"{host / 2**30:.3g} GiB allow")


# --- the state of a run directory ---------------------------------------------------------------------

def read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: unreadable ({err})") from None


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
    diff = differences(ck["config"], cfg)
    if diff:
        raise ValueError(f"--resume: {path} belongs to another run: " + ", ".join(diff))
    if bad := non_finite(ck):
        raise ValueError(f"--resume: {path} holds non-finite values ({bad}): nothing good to continue from; "
                         f"start again with --overwrite")
    return ck


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
        saved = read_json(os.path.join(sub, held[0]))
        saved = saved.get("config", saved) if isinstance(saved, dict) else {}
        diff = [x for x in differences(saved, cfg) if not x.startswith("seed=")]
        if diff:
            raise ValueError(f"--out_dir {out_dir} holds {sub}, a run of another experiment ({', '.join(diff)}): a "
                             f"sweep folder holds one experiment; choose another --out_dir")


def non_finite(ck: dict):
    """The first non-finite tensor of a checkpoint's model, schedule or optimizer state, by name; None if all finite."""
    parts = {"model": ck.get("model", {}), "schedule": ck.get("schedule", {}),
             "optimizer": {f"state {i} {k}": v for i, st in ck.get("optimizer", {}).get("state", {}).items()
                           for k, v in st.items()}}
    for part, tensors in parts.items():
        for k, v in tensors.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point() and not torch.isfinite(v).all():
                return f"{part} {k}"
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
            saved = read_json(paths[f])
            saved = saved.get("config", saved) if isinstance(saved, dict) else {}
            diff = differences(saved, cfg)
            if diff:
                raise ValueError(f"--resume: {paths[f]} belongs to another run: " + ", ".join(diff))
    if "eval.json" in held:
        return "skip", None
    if "ckpt.pt" in held:
        return "resume", load_checkpoint(paths["ckpt.pt"], cfg)
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


SEGMENT = ("threads", "device", "amp", "compile")  # the settings a resume may change, kept per segment


def segments(cfg_path: str) -> list:
    """The segments [{step, threads, device, amp, compile, env}] recorded in a run's config.json (a run from
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
    with open(path) as f:
        lines = f.read().split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    kept = []
    for i, line in enumerate(lines):
        try:
            rec = json.loads(line)
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
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
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
    segs = (segments(cfg_path) if resumed else []) + [{"step": step, **{k: getattr(cfg, k) for k in SEGMENT}, "env": env}]
    write_json(cfg_path, {**dataclasses.asdict(cfg), "env": env, "segments": segs})
    kept = log_lines(log_path, step)  # metrics.jsonl holds exactly the lines up to the checkpoint's step
    atomic_write(log_path, lambda f: f.write("".join(kept).encode()))
    return env, segs


def restore(start: dict, run_dir: str, model, schedule, optimizer, gens: dict):
    """Continue from the checkpoint `start` (plan/claim loaded and checked it): weights, optimizer, the data and
    depth generators and torch's RNG, exactly where they were. Returns (step, elapsed, acc_stats, ema)."""
    weights = {"model": dict(model.named_parameters()), "schedule": dict(schedule.named_parameters())}
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


def diverged(log_path: str, V: int):
    """A final training loss above 2 ln V, twice that of guessing uniformly (where training starts), means the
    run diverged: the last and the first logged loss, in words; None otherwise."""
    lines = [json.loads(line) for line in open(log_path)] if os.path.isfile(log_path) else []
    losses = [(r["step"], r["loss"]) for r in lines if isinstance(r.get("loss"), (int, float))]
    if not losses or not losses[-1][1] > 2 * math.log(V):
        return None
    return f"loss {losses[0][1]:.3g} at step {losses[0][0]}, {losses[-1][1]:.3g} at step {losses[-1][0]}"


def check_ema(cfg, run_dir: str, step: int, ema) -> None:
    """A resumed --ema run past the EMA's start must have brought its EMA weights along."""
    if cfg.ema and step > ema.start and ema.weights is None:
        raise ValueError(f"--resume: {run_dir}/ckpt.pt holds no EMA weights past --ema_start ({ema.start})")
