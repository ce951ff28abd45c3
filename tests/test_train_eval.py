"""train.py and evaluate.py: flags, errors, one-pass evaluation, resume, a tiny run that learns."""

import json
import os
import subprocess
import sys

import pytest
import torch

import config
from halting import make_schedule
import metrics
from model import LoopedTransformer, ModelConfig
from tasks import IGNORE, eval_set, get_task
import train
from lab import tables

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


class Oracle(torch.nn.Module):
    """A fake model: at depth K sample b predicts every scored position right iff K is in good[b], and
    predicts a constant at unscored positions (which exact match must ignore)."""

    def __init__(self, y, good, V):
        super().__init__()
        self.y, self.good, self.V = y, good, V

    def forward(self, x, n_steps, keep_hidden=False):
        scored = self.y != IGNORE
        right = torch.where(scored, self.y, 1)  # (B, T)
        wrong = torch.where(scored, right % (self.V - 1) + 1, 1)  # another token at scored positions
        tok = torch.stack([torch.stack([right[b] if k + 1 in g else wrong[b] for b, g in enumerate(self.good)])
                           for k in range(n_steps)])  # (K, B, T)
        return torch.nn.functional.one_hot(tok, self.V).float(), None


def test_exact_match_counts_only_scored_positions_and_metrics():
    task = get_task("copy")
    sets = eval_set(task, [3, 20], 4, seed=0)
    # sample b of each length is correct at depths good[b]
    good = [{1}, {2, 3}, {3}, set()]
    fixed = make_schedule("fixed", c=3)
    out = {}
    for n, (x, y, _, Tn) in sets.items():
        m = Oracle(y, good, len(task.vocab))
        exact, _, depth = metrics.trajectory_correct(m, fixed, x, y, Tn, 4)
        assert exact.tolist() == [[k + 1 in g for g in good] for k in range(4)]
        out[n] = exact
    e = metrics.evaluate(Oracle(sets[20][1], good, len(task.vocab)), fixed, task, {20: sets[20]}, {20: sets[20]}, 4,
                          n_max=19)
    assert e["acc"] == [[0.25, 0.25, 0.5, 0.0]]
    m = e["metrics"]
    assert m["oracle_ood"] == 50.0 and m["policy_ood"] == 50.0 and m["gap"] == 0.0  # K=3 is the best
    assert m["per_sample_oracle_ood"] == 75.0 and m["front90"] is None


def test_one_pass_matrix_equals_one_pass_per_K():
    task = get_task("dyck")
    torch.manual_seed(0)
    model = LoopedTransformer(ModelConfig(vocab_size=len(task.vocab), d_model=16, n_head=2, n_layer=1))
    sets = eval_set(task, [4, 9], 16, seed=3)
    sched = make_schedule("window", w=2)
    e = metrics.evaluate(model, sched, task, sets, sets, 6, n_max=5)
    for i, n in enumerate(e["lengths"]):
        x, y, _, _ = sets[n]
        for K in range(1, 7):
            pred = model(x, K)[-1].argmax(-1)
            exact = ((pred == y) | (y == IGNORE)).all(-1).float().mean().item()
            assert e["acc"][i][K - 1] == pytest.approx(exact)


def test_front90_and_table_row():
    assert metrics.front90([20, 25, 30], [0.95, 0.91, 0.5]) == 25
    assert metrics.front90([20, 25, 30], [0.8, 0.95, 0.95]) is None
    lengths = [10, 20, 25]
    mk = lambda seed, orc, pol: {"task": "t", "schedule": "s", "seed": seed, "n_max": 19, "lengths": lengths,
                                 "metrics": {"oracle": orc, "oracle_ood": 100 * sum(orc[1:]) / 2,
                                             "policy_ood": pol, "policy_id": 100.0, "gap": 100 * sum(orc[1:]) / 2 - pol,
                                             "policy_depth_ood": 20.0, "flip_rate": 0.1}}
    r = tables.table_row([mk(0, [1, 1.0, 0.8], 80.0), mk(1, [1, 0.9, 0.7], 70.0)])
    # per-seed Oracle OOD 90 and 80: mean 85, sample std sqrt(50) = 7.07 pp
    assert r["oracle_ood"] == pytest.approx(85.0) and r["std"] == pytest.approx(50 ** 0.5)
    assert r["gap"] == pytest.approx(10.0) and r["seeds"] == 2
    assert r["front90"] == 20  # seed-mean oracle curve: 0.95 at 20, 0.75 at 25


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
