"""Shared by the test files: one thread per test process; the tiny runs' settings; `base`, a finished tiny run, and
`sweep`, a finished tiny sweep, each trained once per test file that asks for it (a test copies them, never changes
them); made-up and copied runs; the checks of a command's one-line error."""

import os

# One thread per test process (and its subprocesses): tiny models gain nothing from more, and on a
# shared 2-core machine oversubscribed OpenMP threads slow a step down by orders of magnitude.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import copy  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402  (after OMP_NUM_THREADS; pytest.ini's pythonpath makes the root importable)

import config  # noqa: E402
import metrics  # noqa: E402
import train  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # run the suite with OMP_NUM_THREADS=1 and =2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--threads", "1", "--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8",
        "--eval_samples", "8", "--test_lengths", "5,19,20,25", "--log_interval", "5", "--eval_interval", "10",
        "--ckpt_interval", "5", "--max_iters", "10"]

# TINY with a checkpoint every 5 steps, without --threads and --max_iters (each test gives its --max_iters)
TINY_ANY_STEPS = ["--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8", "--eval_samples", "8",
                  "--test_lengths", "5,19,20,25", "--log_interval", "5", "--eval_interval", "10", "--ckpt_interval", "5"]

# a tiny sweep to stack: T_max 6, a large step and a tight clip
TINY_STACK = ["--threads", "1", "--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8",
              "--T_max", "6", "--T_test", "8", "--n_max", "6", "--w", "2", "--eval_samples", "8", "--test_lengths", "3,6,8",
              "--log_interval", "5", "--eval_interval", "10", "--lr", "3e-3", "--warmup_iters", "0", "--grad_clip", "0.1"]


def run_cli(*args):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def snapshot(d):
    """Every file under d with its bytes: 'untouched' means this does not change."""
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            out[os.path.join(root, f)] = open(os.path.join(root, f), "rb").read()
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A finished tiny run (10 steps), shared by the cases; each case must leave it as it is."""
    d = tmp_path_factory.mktemp("base") / "run"
    assert train.cli(TINY + ["--out_dir", str(d)]) == 0
    return d


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A finished tiny sweep, seeds 0..2 of 5 steps; each test copies or links it."""
    d = tmp_path_factory.mktemp("sweep") / "sweep"
    assert train.cli(TINY + ["--seeds", "3", "--max_iters", "5", "--out_dir", str(d)]) == 0
    return d


def strip_clock(path):
    return [{k: v for k, v in json.loads(l).items() if k not in ("ms_per_step", "elapsed_s")} for l in open(path)]


def copy_run(base, d, seed=None):
    shutil.copytree(base, d, dirs_exist_ok=True)  # d may exist already: a sweep locks (creates) every seed first
    if seed is not None:  # relabel the copy as another seed of the same experiment
        for f in ("eval.json", "config.json"):
            e = json.load(open(d / f))
            (e.get("config", e) if f == "eval.json" else e)["seed"] = seed
            if f == "eval.json":
                e["seed"] = seed
            (d / f).write_text(json.dumps(e))
    return d


def nan_copy(base, d, where):
    copy_run(base, d)
    os.remove(d / "eval.json")
    ck = torch.load(d / "ckpt.pt", weights_only=True)
    ck["step"] = 5
    if where == "model":
        next(iter(ck["model"].values())).fill_(float("nan"))
    else:
        next(iter(ck["optimizer"]["state"].values()))["exp_avg"].fill_(float("nan"))
    torch.save(ck, d / "ckpt.pt")
    return d


# the run's files copied into a new folder d (copy_run copies the tree, and can relabel its seed)
def copy_files(base, d):
    d.mkdir(parents=True)
    for f in os.listdir(base):
        (d / f).write_bytes((base / f).read_bytes())
    return d


def one_line(capsys, code, want_code=2):
    err = capsys.readouterr().err
    assert code == want_code and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (code, err)
    return err


def call(fn, argv):
    """A command; a traceback (the bug) becomes the exception's name, so the assertions fail on it."""
    try:
        return fn(argv)
    except Exception as err:  # noqa: BLE001
        return f"raised {type(err).__name__}: {err}"


class Hung(Exception):
    """A command run in this process that was still running at its deadline (a subprocess would be killed)."""


def in_process(cap, fn, argv, timeout=None):
    """fn(argv), a command's cli.run(main, ...), run in this process instead of a fresh `python` (which costs
    seconds of imports): its exit code, stdout and stderr as subprocess.run reports them (.returncode, .stdout,
    .stderr). cap: pytest's capfd, read out first so only the command's output is kept. A traceback (the bug)
    becomes the exception's name (call), so the assertions fail on it; past timeout seconds a hang raises Hung
    and fails the same way, as subprocess.run's timeout would. Only where the property is the command's logic
    (message, exit code, files): signals, environment, encodings and resource limits need a real process."""
    cap.readouterr()

    def hung(signum, frame):
        raise Hung(f"still running after {timeout} s")
    old = signal.signal(signal.SIGALRM, hung) if timeout else None
    if timeout:
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        code = call(fn, argv)
    finally:
        if timeout:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    out, err = cap.readouterr()
    return types.SimpleNamespace(returncode=code, stdout=out, stderr=err)


def train_call(argv):
    """train.py as a command; a traceback (the bug) becomes the exception's name, so the assertions fail on it."""
    try:
        return train.cli(argv)
    except Exception as err:  # noqa: BLE001
        return f"raised {type(err).__name__}: {err}"


LENGTHS, N_MAX = [10, 20, 30], 19


def synthetic_eval(seed: int = 0) -> dict:
    """A valid eval.json of a run with a hard subset and a shortcut (K = 2), as train.py writes it."""
    acc = [[1.0, 0.5], [0.9, 0.45], [0.6, 0.3]]
    rows = [{"acc": a, "val_acc": [0.5, 0.5], "tn_acc": a[1], "per_sample_oracle": a[0], "policy_acc": a[1],
             "policy_depth": 2.0, "flip": [0.1], "hard_frac": 0.5, "hard_acc": a, "policy_hard_acc": a[1]} for a in acc]
    m = metrics.metrics(LENGTHS, rows, {"most frequent answer": [0.1, 0.0, 0.0]}, N_MAX, [1, 2])
    return copy.deepcopy({"task": "dyck", "schedule": "window", "seed": seed, "n_max": N_MAX, "lengths": LENGTHS,
                          "K": [1, 2], "acc": acc, "metrics": m, "raw_metrics": copy.deepcopy(m),
                          "config": {**dataclasses.asdict(config.Config()), "seed": seed}, "steps": 800,
                          "train_time_s": 60.0, "eval_time_s": 1.0,
                          "env": {"cpu": "some CPU", "hardware": None, "cpu_count": 2}})


def write_run(d, e: dict):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "eval.json"), "w") as f:
        json.dump(e, f)
    return str(d)
