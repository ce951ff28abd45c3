"""
A run directory while train.py trains it: Run (restore, add / line / write the log, save, training), which the
loop calls in one line each, and before it plan (fresh, resume, skip or restart; never replace a run without
--overwrite nor resume one with other settings), claim under its Lock, and single, the run of `python train.py`.
A user error raises ValueError with one line (cli.run turns it into exit code 2).
"""

import contextlib
import dataclasses
import hashlib
import itertools
import json
import math
import os
import platform
import subprocess
import sys
import time

import torch
from tqdm import tqdm

from config import differences
from lab import checkpoint
from lab.cli import interrupted, log_line
from lab.files import RUN_FILES, Lock, parse_json, read_json, write_json, atomic_write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the project: lab/'s parent
# the settings a resume may change, kept per segment (stack, static: a stacked chunk rounds differently)
SEGMENT = ("threads", "device", "amp", "compile", "stack", "static")


def cpu_model() -> str:
    """The CPU's model (Linux: the first processor of /proc/cpuinfo, with its family, model, stepping and widest
    vector ISA; elsewhere platform.processor()): another CPU model can round the same run differently."""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            first = itertools.takewhile(str.strip, f)  # the first processor is enough: up to the first blank line
            info = {key.strip(): val.strip() for key, _, val in (line.partition(":") for line in first)}
        if "model name" in info:
            flags = info.get("flags", info.get("Features", "")).split()
            isa = [x for x in ("avx512f", "avx2", "avx", "neon", "asimd") if x in flags][:1]
            detail = [f"{k} {info[k]}" for k in ("cpu family", "model", "stepping") if k in info] + isa
            return info["model name"] + (f" ({', '.join(detail)})" if detail else "")
    return platform.processor() or platform.machine()


def code_version(root: str = ROOT) -> tuple:
    """(commit, dirty) of the code under root (its tracked .py files outside tests/): HEAD's commit, and dirty
    False when they are HEAD's, else the first 12 hex digits of the sha256 of their `git diff HEAD`. (None, None)
    where git or the repository is absent; a reader never takes the index lock (--no-optional-locks)."""
    def git(*args):
        return subprocess.run(["git", "--no-optional-locks", *args], cwd=root, capture_output=True, timeout=10)
    try:
        head = git("rev-parse", "--verify", "-q", "HEAD")
        commit = head.stdout.decode().strip() if head.returncode == 0 else ""
        if not commit:
            return None, None
        diff = git("diff", "HEAD", "--no-ext-diff", "--no-textconv", "--no-color", "--", "*.py", ":(exclude)tests/")
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return None, None
    if diff.returncode != 0:
        return commit, None
    return commit, hashlib.sha256(diff.stdout).hexdigest()[:12] if diff.stdout else False


def environment() -> dict:
    """Versions, hardware, and the code's git commit and dirty mark, as config.json and eval.json record them."""
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or platform.machine()
    commit, dirty = code_version()
    return {"torch": torch.__version__, "python": platform.python_version(), "hardware": dev, "cpu": cpu_model(),
            "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(), "git_commit": commit, "git_dirty": dirty}


def code_of(env) -> str:
    """A segment's code in words: its commit, and its uncommitted edits' mark."""
    env = env if isinstance(env, dict) else {}
    c, d = env.get("git_commit"), env.get("git_dirty")
    return f"commit {str(c)[:12] if c else '(unknown)'}" + (f" with uncommitted edits {d}" if isinstance(d, str) else
                                                             " (clean)" if d is False else "")


def code_changed(prev, env) -> bool:
    """Whether two segments ran other code: their commits, or their dirty marks, differ where both are known."""
    prev = prev if isinstance(prev, dict) else {}
    return any(prev.get(k) is not None and env.get(k) is not None and prev.get(k) != env.get(k)
               for k in ("git_commit", "git_dirty"))


def differences_from(cfg, where: str, path: str) -> list:
    """cfg's differences from a run file's settings (config.json, eval.json's "config"); refused if it has none."""
    saved = read_json(path)
    saved = saved.get("config", saved) if isinstance(saved, dict) else saved
    if not isinstance(saved, dict) or not all(isinstance(saved.get(k), str) for k in ("task", "schedule")):
        raise ValueError(f"{where}: {path} is empty or damaged (it records no run's settings: task, schedule): remove "
                         f"it, or replace the run with --overwrite")
    return differences(saved, cfg)


def check_out_dir(d: str) -> None:
    """d, or the nearest of its parents that exists, must be a writable directory (not a file, not a dangling link)."""
    p = d
    while not os.path.lexists(p) and os.path.dirname(p) not in ("", p):
        p = os.path.dirname(p)
    why = (f"is a symlink to a missing path, {os.readlink(p)}" if os.path.islink(p) and not os.path.exists(p) else
           "is a file, not a directory" if os.path.lexists(p) and not os.path.isdir(p) else
           "is not writable" if os.path.lexists(p) and not os.access(p, os.W_OK) else None)
    if why:
        raise ValueError(f"--out_dir {d}: cannot write there ({p} {why})")


def check_folder(cfg, out_dir: str, ours: set) -> None:
    """A folder holds one run, or the seeds of one experiment. A sweep refuses a run at its top, a seed folder of
    another experiment, and under --overwrite a run it would not replace; a single run refuses runs below it."""
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
        if diff := [x for x in differences_from(cfg, f"--out_dir {out_dir}", os.path.join(sub, held[0]))
                    if not x.startswith("seed=")]:
            raise ValueError(f"--out_dir {out_dir} holds {sub}, a run of another experiment ({', '.join(diff)}): a "
                             f"sweep folder holds one experiment; choose another --out_dir")


def plan(cfg, d: str, single: bool = True):
    """(action, checkpoint) for run directory d: action is fresh, overwrite, resume, restart or skip."""
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
            if diff := differences_from(cfg, "--resume", paths[f]):
                raise ValueError(f"--resume: {paths[f]} belongs to another run: " + ", ".join(diff))
    if "eval.json" in held:
        return "skip", None
    if "ckpt.pt" in held:
        if "config.json" not in held:  # the one record of the earlier segments: a resume would drop them silently
            raise ValueError(f"--resume: {paths['config.json']} is missing, and it alone records the run's earlier "
                             f"segments (their machines, environment and commit): restore it, or start again with "
                             f"--overwrite")
        ck = checkpoint.load_checkpoint(paths["ckpt.pt"], cfg)
        log_lines(paths["metrics.jsonl"], ck["step"])  # readable, before open_run rewrites anything
        return "resume", ck
    if held:  # killed before its first checkpoint: nothing to continue from
        return "restart", None
    if single:
        raise ValueError(f"--resume: no checkpoint at {paths['ckpt.pt']} (nothing to resume)")
    return "fresh", None


def claim(cfg, run_dir: str, single: bool) -> tuple:
    """plan(), again under the run's Lock (another process may have filled run_dir since); on --overwrite the old
    run's files go here, before the new run writes any."""
    action, start = plan(cfg, run_dir, single)
    if action == "overwrite":
        for f in RUN_FILES:
            if os.path.exists(os.path.join(run_dir, f)):
                os.remove(os.path.join(run_dir, f))
    return action, start


def segments(cfg_path: str) -> list:
    """The segments [{step, *SEGMENT, env}] of a run's config.json (a run from before segments: one, from its env)."""
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
            line = line.decode()
            rec = parse_json(line)
            if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
                raise ValueError("no integer 'step'")
        except ValueError as err:  # UnicodeDecodeError included
            if i == len(lines) - 1:
                break  # torn by an interrupted write
            why = "not UTF-8 text" if isinstance(err, UnicodeDecodeError) else err
            raise ValueError(f"{path}, line {i + 1}: not a log line ({why})") from None
        if rec["step"] <= step:
            kept.append(line + "\n")
    return kept


def open_run(cfg, run_dir: str, step: int, resumed: bool):
    """Before the first step at `step`: config.json gets this segment (step, SEGMENT settings, environment) after
    the earlier ones that trained something the checkpoint kept (those starting before `step`), and metrics.jsonl
    is cut back to `step`. A resume on other code than the previous segment's says so. Returns (env, segments)."""
    env, cfg_path = environment(), os.path.join(run_dir, "config.json")
    log_path = os.path.join(run_dir, "metrics.jsonl")
    kept = log_lines(log_path, step)  # metrics.jsonl holds exactly the lines up to the checkpoint's step: read first
    earlier = [s for s in segments(cfg_path) if not (isinstance(s, dict) and isinstance(s.get("step"), int)
                                                     and s["step"] >= step)] if resumed else []
    segs = earlier + [{"step": step, **{k: getattr(cfg, k) for k in SEGMENT}, "env": env}]
    if earlier and isinstance(earlier[-1], dict) and code_changed(earlier[-1].get("env"), env):
        print(f"train.py: note: {run_dir}: resumed at step {step} on {code_of(env)}; its previous segment ran on "
              f"{code_of(earlier[-1].get('env'))} (config.json's segments record both)", file=sys.stderr)
    write_json(cfg_path, {**dataclasses.asdict(cfg), "env": env, "segments": segs})
    atomic_write(log_path, lambda f: f.write("".join(kept).encode()))
    return env, segs


def forget_unsaved(run_dir: str) -> str:
    """A run stopped before its first checkpoint loses its config.json and metrics.jsonl, which would only make
    the corrected command need --overwrite. Returns the words that say so ("" where a checkpoint exists)."""
    if os.path.exists(os.path.join(run_dir, "ckpt.pt")):
        return ""
    for f in ("config.json", "metrics.jsonl"):
        if os.path.isfile(os.path.join(run_dir, f)):
            os.remove(os.path.join(run_dir, f))
    return "its config.json and metrics.jsonl were removed (nothing to resume): run it again with other settings"


def diverged(log_path: str, V: int):
    """The first and last logged loss in words if the last is above 2 ln V (twice guessing's): diverged; else None."""
    lines = [parse_json(line) for line in open(log_path)] if os.path.isfile(log_path) else []
    losses = [(r["step"], r["loss"]) for r in lines if isinstance(r, dict) and isinstance(r.get("loss"), (int, float))]
    if not losses or not losses[-1][1] > 2 * math.log(V):
        return None
    return f"loss {losses[0][1]:.3g} at step {losses[0][0]}, {losses[-1][1]:.3g} at step {losses[-1][0]}"


def out_dir_of(cfg) -> str:
    return cfg.out_dir or os.path.join("out", f"{cfg.task}-{cfg.schedule}")


@contextlib.contextmanager
def single(cfg):
    """The run directory of `python train.py`: checked and planned before anything is written, then locked while
    the run lasts and claimed under the lock. Yields (run_dir, action, checkpoint): see plan."""
    d = out_dir_of(cfg)
    check_out_dir(d)
    check_folder(cfg, d, {d})
    plan(cfg, d)
    with Lock(d):
        yield (d, *claim(cfg, d, single=True))


def log_record(step: int, lr: float, n_max: int, means: dict, ms_per_step: float, elapsed: float) -> dict:
    """One line of metrics.jsonl (train.py's and lab/chunks.py's): the wall clock last, the fields a rerun changes."""
    return {"step": step, "lr": lr, "n_max": n_max, **means, "ms_per_step": ms_per_step, "elapsed_s": elapsed}


def append_log(path: str, rec: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


class Run:
    """The run directory while a run trains: where it resumes from, logs and saves. start: the checkpoint plan or
    claim loaded and checked (--resume), or None for a fresh run."""

    def __init__(self, cfg, run_dir: str, start: dict = None):
        self.cfg, self.dir, self.start = cfg, run_dir, start
        self.ckpt, self.log = os.path.join(run_dir, "ckpt.pt"), os.path.join(run_dir, "metrics.jsonl")
        self.done, self.elapsed, self.sums = 0, 0.0, {}  # steps done, training seconds, stat sums since the last line
        self.env = self.segments = self.bar = None

    def restore(self, model, schedule, optimizer, gens: dict, ema) -> int:
        """Before the first step: a resumed run's weights, optimizer, generators, EMA and log sums exactly as its
        checkpoint left them; then open_run. Returns the steps already done: 0 for a fresh run."""
        if self.start:
            self.done, self.elapsed, self.sums, ema.weights = checkpoint.restore(self.start, self.dir, model, schedule,
                                                                                 optimizer, gens)
            self.sums = dict(self.sums)
        self.env, self.segments = open_run(self.cfg, self.dir, self.done, resumed=bool(self.start))
        self.t0, self.t0_step = time.time(), self.done  # the wall clock since the last line (or the start)
        self.bar = tqdm(initial=self.done, total=self.cfg.max_iters, desc=os.path.basename(self.dir) or self.dir,
                        disable=not sys.stderr.isatty(), leave=False)
        return self.done

    def add(self, stats: dict) -> None:
        """One finished step's stats (and the progress bar moves on)."""
        for k, v in {"steps": 1, **stats}.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
        self.done += 1
        self.bar.update(1)

    def line(self, lr: float, n_max: int) -> dict:
        """The log record of the steps since the last line: their mean stats, ms per step and the elapsed time."""
        n, now = self.sums.pop("steps"), time.time()
        self.elapsed += now - self.t0
        rec = log_record(self.done, lr, n_max, {k: v / n for k, v in self.sums.items()},
                         1000 * (now - self.t0) / (self.done - self.t0_step), self.elapsed)
        self.t0, self.t0_step, self.sums = now, self.done, {}
        return rec

    def write(self, rec: dict) -> None:
        """The record into metrics.jsonl and as one `|` line on stdout."""
        append_log(self.log, rec)
        (self.bar.write if not self.bar.disable else print)(log_line(rec))
        self.t0 = time.time()  # evaluation and printing are not training time

    def save(self, model, schedule, optimizer, gens: dict, ema) -> None:
        """ckpt.pt at this step (checkpoint.state); its writing is not training time."""
        t = time.time()
        checkpoint.save_checkpoint(self.ckpt, checkpoint.state(
            self.cfg, self.done, self.elapsed, self.sums, model.state_dict(), schedule.state_dict(),
            optimizer.state_dict(), {**{k: g.get_state() for k, g in gens.items()}, "torch": torch.get_rng_state()},
            ema.weights))
        self.t0 += time.time() - t

    @contextlib.contextmanager
    def training(self):
        """Around the training loop. Ctrl-C: one line naming the last good checkpoint (exit 130). A non-finite loss:
        its step and the last good checkpoint; a run stopped before its first checkpoint leaves no files."""
        try:
            yield
        except KeyboardInterrupt:
            raise interrupted(self.done, lambda: checkpoint.last_good(self.ckpt)) from None
        except FloatingPointError as err:  # train_step's does not know its step
            msg = str(err)
            if "at step" not in msg:
                msg = f"{err} at step {self.done + 1}; {checkpoint.last_good(self.ckpt)}"
            if gone := forget_unsaved(self.dir):
                msg += f"; {gone}"
            raise FloatingPointError(msg) from None
        finally:
            self.bar.close()
