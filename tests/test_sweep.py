"""Seed sweeps under torchrun: seeds split over ranks, rank 0 writes the summary, same numbers as alone."""

import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--max_iters", "6", "--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8",
        "--eval_samples", "8", "--test_lengths", "5,20", "--log_interval", "3", "--ckpt_interval", "3",
        "--eval_interval", "6", "--threads", "1"]


@pytest.mark.slow  # ~15 s of process start-up; the reproduction study runs every row through torchrun
def test_torchrun_two_ranks_matches_single_process(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    sweep = tmp_path / "sweep"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        "train.py", "--seeds", "3", "--out_dir", str(sweep), *TINY],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.load(open(sweep / "summary.json"))
    assert summary["seeds"] == 3 and len(summary["runs"]) == 3
    assert r.stdout.count("| dyck | window w=5 | 3 |") == 1  # only rank 0 prints the table row
    # seed 1 trained by rank 1 in the sweep == seed 1 trained alone
    alone = tmp_path / "alone"
    r = subprocess.run([sys.executable, "train.py", "--seed", "1", "--out_dir", str(alone), *TINY],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    a = torch.load(alone / "ckpt.pt", weights_only=True)["model"]
    b = torch.load(sweep / "seed1" / "ckpt.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    ea, eb = json.load(open(alone / "eval.json")), json.load(open(sweep / "seed1" / "eval.json"))
    assert ea["acc"] == eb["acc"] and ea["metrics"] == eb["metrics"]


def test_a_seed_finished_elsewhere_joins_a_resumed_sweep(tmp_path):
    """The study trains some seeds on a GPU with --no-amp and the rest here: a resumed sweep skips the finished
    seed (amp, device and threads change how a run is computed, not what) but refuses another experiment."""
    import train
    out = tmp_path / "row"
    train.main(TINY + ["--seeds", "1", "--no-amp", "--out_dir", str(out / "seed0")])
    train.main(TINY + ["--seeds", "2", "--resume", "--out_dir", str(out)])
    summary = json.load(open(out / "summary.json"))
    assert [os.path.basename(r) for r in summary["runs"]] == ["seed0", "seed1"]
    with pytest.raises(ValueError, match="lr="):
        train.main(TINY + ["--seeds", "2", "--resume", "--lr", "0.5", "--out_dir", str(out)])
