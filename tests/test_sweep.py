"""Seed sweeps (train.py --seeds, lab/sweep.py), in one process and under torchrun: seeds split over ranks, rank 0
writes the summary, same numbers as alone; a restart skips the finished seeds and refuses another experiment; every
seed's lock is taken, and its plan made again under it, before anything is deleted or trained; a seed that stops
stops alone, named. A test of a reliability case names it (docs/reliability.md)."""

import datetime
import json
import os
import subprocess
import sys

import pytest
import torch

import train
from lab import sweep

from conftest import TINY, TINY_ANY_STEPS, TINY_STACK, call, copy_run, one_line, snapshot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# a 6-step run, a checkpoint every 3 steps
TINY6 = ["--max_iters", "6", "--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8",
         "--eval_samples", "8", "--test_lengths", "5,20", "--log_interval", "3", "--ckpt_interval", "3",
         "--eval_interval", "6", "--threads", "1"]


@pytest.mark.slow  # ~15 s of process start-up; the reproduction study runs every row through torchrun
def test_torchrun_two_ranks_matches_single_process(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    sweep = tmp_path / "sweep"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        "train.py", "--seeds", "3", "--out_dir", str(sweep), *TINY6],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.load(open(sweep / "summary.json"))
    assert summary["seeds"] == 3 and len(summary["runs"]) == 3
    assert r.stdout.count("| dyck | window w=5 | 3 |") == 1  # only rank 0 prints the table row
    # seed 1 trained by rank 1 in the sweep == seed 1 trained alone
    alone = tmp_path / "alone"
    r = subprocess.run([sys.executable, "train.py", "--seed", "1", "--out_dir", str(alone), *TINY6],
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
    train.main(TINY6 + ["--seeds", "1", "--no-amp", "--out_dir", str(out / "seed0")])
    train.main(TINY6 + ["--seeds", "2", "--resume", "--out_dir", str(out)])
    summary = json.load(open(out / "summary.json"))
    assert [os.path.basename(r) for r in summary["runs"]] == ["seed0", "seed1"]
    with pytest.raises(ValueError, match="lr="):
        train.main(TINY6 + ["--seeds", "2", "--resume", "--lr", "0.5", "--out_dir", str(out)])


# --- a sweep in one process: restart, locks, a seed that stops -----------------------------------------------------

def test_sweep_restart_skips_finished_and_resumes(tmp_path, capsys):
    base = ["--max_iters", "10", "--seeds", "2", "--out_dir", str(tmp_path), *TINY_ANY_STEPS]
    assert train.cli(base) == 0
    ref = torch.load(tmp_path / "seed1" / "ckpt.pt", weights_only=True)["model"]
    os.remove(tmp_path / "seed1" / "eval.json")  # as if seed 1 had been killed before its end
    assert train.cli(base + ["--resume"]) == 0
    out = capsys.readouterr().out
    assert "seed 0: finished earlier, skipped" in out
    got = torch.load(tmp_path / "seed1" / "ckpt.pt", weights_only=True)["model"]
    assert all(torch.equal(ref[k], got[k]) for k in ref)
    assert json.load(open(tmp_path / "summary.json"))["seeds"] == 2


def test_sweep_resume_with_another_task_is_refused(tmp_path):
    """2D4 (round two, issue 16): --seeds 3 --resume --task parity_prefix --schedule rl into a dyck/window sweep
    mixed tasks in summary.json."""
    d = tmp_path / "sweep"
    assert train.cli(TINY + ["--seeds", "2", "--max_iters", "5", "--out_dir", str(d)]) == 0
    before = snapshot(d)
    assert train.cli(TINY + ["--seeds", "3", "--max_iters", "5", "--out_dir", str(d), "--resume",
                             "--task", "parity_prefix", "--schedule", "rl"]) == 2
    assert snapshot(d) == before


def test_a_sweep_plans_each_seed_again_under_its_lock(base, tmp_path, monkeypatch, capsys):
    """3Db: a sweep trained over a seed that another process had filled after the sweep planned it. Failed before its
    fix."""
    d = tmp_path / "sweep"
    real = train.train_run

    filled = {}

    def meanwhile(cfg, run, device):  # while seed 0 trains, another process fills seed 1
        e = real(cfg, run, device)
        if not filled:
            filled.update(snapshot(copy_run(base, d / "seed1", seed=1)))
        return e

    monkeypatch.setattr(train, "train_run", meanwhile)
    code = train.cli(TINY + ["--seeds", "2", "--out_dir", str(d)])
    assert code == 2 and "holds a run" in capsys.readouterr().err
    # the intruder ignored seed 1's lock (held by the sweep from the start, its .lock file removed on exit)
    unlocked = lambda snap: {k: v for k, v in snap.items() if not str(k).endswith(".lock")}
    assert unlocked(snapshot(d / "seed1")) == unlocked(filled)


def hold(d):
    """Another process holding run directory d's lock."""
    p = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom lab import files\nwith files.Lock(sys.argv[1]):\n"
                          "    print('held', flush=True); time.sleep(120)", str(d)], cwd=ROOT, stdout=subprocess.PIPE,
                         text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.stdout.readline().strip() == "held"
    return p


@pytest.mark.parametrize("stack", [["--stack", "2"], []], ids=["stacked", "one-by-one"])
def test_a_locked_seed_stops_the_overwrite_before_any_run_is_deleted(tmp_path, capsys, stack):
    """4S1: --seeds 2 --stack 2 --overwrite with seed1 locked by another process deleted seed0's finished run first.
    Failed before its fix."""
    d = tmp_path / "sweep"
    argv = TINY_STACK + ["--max_iters", "5", "--ckpt_interval", "5", "--seeds", "2", "--out_dir", str(d), *stack]
    assert train.cli(argv) == 0
    holder = hold(d / "seed1")
    try:
        before = snapshot(d)
        err = one_line(capsys, train.cli(argv + ["--overwrite"]), 2)
        assert str(holder.pid) in err and "seed1" in err, err
        assert snapshot(d) == before  # seed0's finished run is still there, byte for byte
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("stack", [["--stack", "2"], []], ids=["stacked", "one-by-one"])
def test_under_torchrun_a_seed_locked_on_another_rank_stops_every_rank_first(tmp_path, capsys, monkeypatch, stack):
    """4S1, under torchrun. Failed before its fix.

    Rank 0 of two: its own seeds are free, rank 1 cannot lock its seed. Every rank takes its locks and they
    agree before any deletes or trains: rank 0 stops too, with rank 1's line, and deletes nothing."""
    d = tmp_path / "sweep"
    argv = TINY_STACK + ["--max_iters", "5", "--ckpt_interval", "5", "--seeds", "2", "--out_dir", str(d), *stack]
    assert train.cli(argv) == 0
    before = snapshot(d)
    other = f"--out_dir {d / 'seed1'} is in use by process 4242 on elsewhere (lock {d / 'seed1' / '.lock'})"

    def gather(out, obj):  # rank 1's part: its lock failed (the old code gathered only the results: none from rank 1)
        out[:] = [obj, other if obj is None or isinstance(obj, str) else ([], [])]

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(sweep.dist, "init_process_group", lambda *a, **k: None)
    monkeypatch.setattr(sweep.dist, "get_rank", lambda: 0)
    monkeypatch.setattr(sweep.dist, "all_gather_object", gather)
    monkeypatch.setattr(sweep.dist, "destroy_process_group", lambda: None)
    err = one_line(capsys, train.cli(argv + ["--overwrite"]), 2)
    assert "process 4242" in err, err
    assert snapshot(d) == before


@pytest.mark.smoke
def test_a_rank_waiting_for_the_others_does_not_time_out(monkeypatch):
    """4S4: under torchrun a rank with nothing left timed out after 30 minutes while another still trained. Failed
    before its fix.

    The gloo group's timeout bounds how long a rank with nothing left waits for the slowest (the default, 30
    minutes, crashed it and torchrun then killed the rank still training): it must outlast any sweep."""
    got = {}
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(sweep.dist, "init_process_group", lambda backend, **kw: got.update(backend=backend, **kw))
    monkeypatch.setattr(sweep.dist, "get_rank", lambda: 1)
    assert sweep.init_distributed("cpu") == (1, 2, "cpu")
    assert got["backend"] == "gloo" and got.get("timeout", datetime.timedelta(0)) >= datetime.timedelta(days=100), got


def test_a_diverged_seed_stops_alone_and_is_named(tmp_path, monkeypatch, capsys):
    """U18: a --seeds 3 sweep whose seed 1 diverged never trained seed 2, and named no seed. Failed before its fix."""
    real = train.train_run

    def diverging(cfg, run, device):
        if cfg.seed == 1:
            raise FloatingPointError("non-finite loss at step 3; no checkpoint was written yet")
        return real(cfg, run, device)
    monkeypatch.setattr(train, "train_run", diverging)
    code = call(train.cli, TINY + ["--seeds", "3", "--out_dir", str(tmp_path / "sweep2")])
    err = capsys.readouterr().err
    assert code == 1, (code, err)
    assert "1 of 3 seeds stopped: seed 1 (non-finite loss at step 3" in err.strip().splitlines()[-1]
    assert all((tmp_path / "sweep2" / f"seed{k}" / "eval.json").exists() for k in (0, 2))  # unfixed: seed 2 never ran
