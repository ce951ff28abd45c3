"""train.py and evaluate.py: flags, errors, one-pass evaluation, resume, a tiny run that learns."""

import json
import os
import subprocess
import sys

import pytest
import torch

import config
import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8", "--eval_samples", "8",
        "--test_lengths", "5,19,20,25", "--log_interval", "5", "--eval_interval", "10", "--ckpt_interval", "10"]


def run_cli(*args):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_both_flag_forms_parse():
    a = train.parse_args(["--w", "3", "--lr", "1", "--task", "copy", "--no-inject"])
    b = train.parse_args(["--w=3", "--lr=1", "--task=copy", "--no-inject"])
    assert a == b and a.w == 3 and a.lr == 1.0 and isinstance(a.lr, float) and a.inject is False


def test_preset_paper_and_explicit_flags_win():
    c = train.parse_args(["--preset", "paper", "--lr", "5e-4"])
    assert (c.d_model, c.n_head, c.max_iters, c.lr) == (256, 8, 100_000, 5e-4)
    assert train.parse_args([]) == config.Config()  # bare `python train.py` is the default job


@pytest.mark.parametrize("flag,value", [("--task", "dyk"), ("--schedule", "windw")])
def test_unknown_name_is_one_line_error(flag, value):
    r = run_cli("train.py", flag, value)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and value in lines[0] and "Traceback" not in r.stderr
    assert ("dyck" if flag == "--task" else "window") in lines[0]  # lists the valid names


def test_validation_one_line():
    r = run_cli("train.py", "--d_model", "30", "--n_head", "4")
    assert r.returncode == 2 and "d_model" in r.stderr and len(r.stderr.strip().splitlines()) == 1


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
