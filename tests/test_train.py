"""A train.py run: its run directory, a resume that reaches the same weights (after a crash, a SIGKILL at a random
step and one during a checkpoint write), one seed giving the same numbers whatever the schedule, a NaN loss that
stops the run naming its step, a tiny run that learns."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

import train

from conftest import TINY_ANY_STEPS, run_cli, strip_clock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8", "--eval_samples", "8",
        "--test_lengths", "5,19,20,25", "--log_interval", "5", "--eval_interval", "10", "--ckpt_interval", "10"]


def tiny_cfg(tmp_path, *extra):
    return ["--max_iters", "20", "--out_dir", str(tmp_path), *TINY, *extra]


def test_resume_reaches_the_same_weights(tmp_path, monkeypatch):
    train.main(tiny_cfg(tmp_path / "a"))
    ref = torch.load(tmp_path / "a" / "ckpt.pt", weights_only=True)
    # crash after the checkpoint at step 10: the 16th batch raises
    calls = {"n": 0}  # checkpoints every 7 steps, logs every 5: the resumed log line mixes both runs
    real = train.train_batch

    def crashing(*a, **k):
        calls["n"] += 1
        if calls["n"] == 16:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(train, "train_batch", crashing)
    with pytest.raises(KeyboardInterrupt):
        train.main(tiny_cfg(tmp_path / "b", "--ckpt_interval", "7"))
    monkeypatch.setattr(train, "train_batch", real)
    assert torch.load(tmp_path / "b" / "ckpt.pt", weights_only=True)["step"] == 14
    train.main(tiny_cfg(tmp_path / "b", "--resume", "--ckpt_interval", "7"))
    got = torch.load(tmp_path / "b" / "ckpt.pt", weights_only=True)
    assert got["step"] == 20
    for k, v in ref["model"].items():
        assert torch.equal(v, got["model"][k]), k
    strip = lambda p: [{k: v for k, v in json.loads(l).items() if k not in ("ms_per_step", "elapsed_s")}
                       for l in open(p)]
    assert strip(tmp_path / "a" / "metrics.jsonl") == strip(tmp_path / "b" / "metrics.jsonl")


def test_run_directory_contents(tmp_path):
    train.main(tiny_cfg(tmp_path, "--max_iters", "10"))
    assert {"ckpt.pt", "config.json", "metrics.jsonl", "eval.json"} <= set(os.listdir(tmp_path))
    e = json.load(open(tmp_path / "eval.json"))
    assert {"task", "schedule", "seed", "lengths", "K", "acc", "metrics"} <= set(e)
    assert len(e["acc"]) == len(e["lengths"]) and len(e["acc"][0]) == len(e["K"]) == 30
    assert {"oracle_ood", "policy_ood", "gap", "front90", "flip_rate"} <= set(e["metrics"])
    r = run_cli("evaluate.py", str(tmp_path))
    assert r.returncode == 0 and "Oracle OOD" in r.stdout


def test_tiny_dyck_run_learns(tmp_path):
    train.main(["--max_iters", "250", "--out_dir", str(tmp_path), "--d_model", "32", "--n_layer", "2",
                "--batch_size", "32", "--lr", "1e-3", "--n_max", "10", "--T_max", "12", "--T_test", "12",
                "--test_lengths", "5,8,10,12", "--eval_samples", "64", "--log_interval", "50",
                "--eval_interval", "250", "--ckpt_interval", "250"])
    e = json.load(open(tmp_path / "eval.json"))
    assert e["metrics"]["policy_id"] >= 90.0


# --- a killed run resumes bitwise, one seed gives one run, a NaN loss stops it -------------------------------------

def eval_numbers(path):
    e = json.load(open(path))
    return {k: e[k] for k in ("lengths", "acc", "metrics")}


KILL_IN_SAVE = """
import os, signal, sys, train
from lab import checkpoint
real = checkpoint.atomic_write
def dying(path, write):  # SIGKILL in the middle of the 2nd checkpoint write, temp file half written
    if path.endswith("ckpt.pt") and os.environ.get("SAVES", "0") == "1":
        tmp = path + ".tmp" + str(os.getpid())
        open(tmp, "wb").write(b"half")
        os.kill(os.getpid(), signal.SIGKILL)
    if path.endswith("ckpt.pt"):
        os.environ["SAVES"] = str(int(os.environ.get("SAVES", "0")) + 1)
    return real(path, write)
checkpoint.atomic_write = dying
sys.exit(train.cli(sys.argv[1:]))
"""


def test_sigkill_then_resume_is_bitwise_identical(tmp_path):
    args = ["--max_iters", "30", *TINY_ANY_STEPS]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = lambda *a, script=("train.py",): subprocess.run([sys.executable, *script, *args, *a], cwd=ROOT, env=env,
                                                          capture_output=True, text=True, timeout=600)
    ref = tmp_path / "ref"  # the uninterrupted run, beside the killed ones (2 cores: the suite's wall time)
    ref_run = subprocess.Popen([sys.executable, "train.py", *args, "--out_dir", str(ref)], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # 1) killed at a random moment of training
    a = tmp_path / "a"
    p = subprocess.Popen([sys.executable, "train.py", *args, "--out_dir", str(a)], cwd=ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = random.Random().randint(1, 5)  # a random log line (every 5 steps), then a random delay
    log = a / "metrics.jsonl"
    while p.poll() is None and (not os.path.exists(log) or sum(1 for _ in open(log)) < target):
        time.sleep(0.01)
    time.sleep(random.uniform(0.0, 0.1))
    p.send_signal(signal.SIGKILL)
    assert p.wait() == -signal.SIGKILL, "the run ended before it could be killed"
    # 2) killed during a checkpoint write
    b = tmp_path / "b"
    r = run("--out_dir", str(b), script=("-c", KILL_IN_SAVE))
    assert r.returncode == -signal.SIGKILL
    assert torch.load(b / "ckpt.pt", weights_only=True)["step"] == 5  # the old checkpoint survived
    assert ref_run.wait(timeout=600) == 0
    for d in (a, b):
        r = run("--out_dir", str(d), "--resume")
        assert r.returncode == 0, r.stderr
        want, got = torch.load(ref / "ckpt.pt", weights_only=True), torch.load(d / "ckpt.pt", weights_only=True)
        for k in want["model"]:
            assert torch.equal(want["model"][k], got["model"][k]), (d, k)
        assert strip_clock(ref / "metrics.jsonl") == strip_clock(d / "metrics.jsonl")
        assert eval_numbers(ref / "eval.json") == eval_numbers(d / "eval.json")


def test_same_seed_same_numbers_and_schedule_does_not_change_data(tmp_path, monkeypatch):
    for d in ("a", "b"):
        assert train.cli(["--max_iters", "10", "--out_dir", str(tmp_path / d), *TINY_ANY_STEPS]) == 0
    assert strip_clock(tmp_path / "a" / "metrics.jsonl") == strip_clock(tmp_path / "b" / "metrics.jsonl")
    assert eval_numbers(tmp_path / "a" / "eval.json") == eval_numbers(tmp_path / "b" / "eval.json")
    cfg = json.load(open(tmp_path / "a" / "config.json"))
    assert {"torch", "python", "git_commit", "cpu"} <= set(cfg["env"])
    # the batches a seed sees do not depend on the schedule (data and depth generators are independent)
    seen = {}
    real = train.train_batch
    for sched in ("window", "fixed"):
        seen[sched] = []
        monkeypatch.setattr(train, "train_batch", lambda *a, s=sched: _record(seen[s], real, *a))
        assert train.cli(["--max_iters", "4", "--schedule", sched, "--out_dir", str(tmp_path / sched), *TINY_ANY_STEPS]) == 0
    assert all(torch.equal(u, v) for u, v in zip(seen["window"], seen["fixed"])) and len(seen["fixed"]) == 4


def _record(store, real, *a):
    out = real(*a)
    store.append(out[0])
    return out


@pytest.mark.smoke
def test_nan_loss_stops_with_step_and_keeps_checkpoint(tmp_path, monkeypatch, capsys):
    import halting
    d = tmp_path / "run"
    real = halting.Window.loss

    def poisoned(self, model, x, y, Tn, gen):
        loss, stats = real(self, model, x, y, Tn, gen)
        poisoned.calls += 1
        return (loss * float("nan") if poisoned.calls == 8 else loss), stats

    poisoned.calls = 0
    monkeypatch.setattr(halting.Window, "loss", poisoned)
    assert train.cli(["--max_iters", "20", "--out_dir", str(d), *TINY_ANY_STEPS]) == 1
    err = capsys.readouterr().err
    assert "non-finite loss" in err and "step 8" in err and len(err.strip().splitlines()) == 1
    assert torch.load(d / "ckpt.pt", weights_only=True)["step"] == 5
    assert all(l["grad_norm"] > 0 for l in map(json.loads, open(d / "metrics.jsonl")))
