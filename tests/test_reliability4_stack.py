"""Round four, --seeds / --stack / torchrun / bench.py: each test failed on the code before its fix.

    1  a locked seed stops a sweep before any run is deleted (a chunk deleted seed0's finished run, then stopped)
    2  a chunk's checkpoints commit together: a Ctrl-C or a failed write between two seeds' writes left them at
       two steps, and the resume (as sub-chunks) no longer gave the uninterrupted run
    3  a chunk's Ctrl-C before its first checkpoint says so (it said "the last checkpoints are at step 0")
    4  under torchrun a rank that waits for the others never times out (the default 30 minutes crashed it)
    5  bench.py --stacks too large for the machine is refused in one line
"""

import datetime
import json
import os
import signal
import subprocess
import sys

import pytest
import torch

import bench
import train
from lab import chunks, cli, sweep
from conftest import snapshot  # every file under a folder with its bytes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--threads", "1", "--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8", "--T_max", "6",
        "--T_test", "8", "--n_max", "6", "--w", "2", "--eval_samples", "8", "--test_lengths", "3,6,8",
        "--log_interval", "5", "--eval_interval", "10", "--lr", "3e-3", "--warmup_iters", "0", "--grad_clip", "0.1"]


def ckpt(path):
    return torch.load(path, weights_only=True)


def one_line(capsys, rc, want):
    err = capsys.readouterr().err
    assert rc == want and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (rc, err[-2000:])
    return err


@pytest.fixture
def sigint():
    """Ctrl-C as a terminal delivers it (a suite started in the background inherits SIGINT ignored)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


# --- 1: every lock before anything is deleted ---------------------------------------------------------------

def hold(d):
    """Another process holding run directory d's lock."""
    p = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom lab import files\nwith files.Lock(sys.argv[1]):\n"
                          "    print('held', flush=True); time.sleep(120)", str(d)], cwd=ROOT, stdout=subprocess.PIPE,
                         text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.stdout.readline().strip() == "held"
    return p


@pytest.mark.parametrize("stack", [["--stack", "2"], []], ids=["stacked", "one-by-one"])
def test_1_a_locked_seed_stops_the_overwrite_before_any_run_is_deleted(tmp_path, capsys, stack):
    d = tmp_path / "sweep"
    argv = TINY + ["--max_iters", "5", "--ckpt_interval", "5", "--seeds", "2", "--out_dir", str(d), *stack]
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
def test_1_under_torchrun_a_seed_locked_on_another_rank_stops_every_rank_first(tmp_path, capsys, monkeypatch, stack):
    """Rank 0 of two: its own seeds are free, rank 1 cannot lock its seed. Every rank takes its locks and they
    agree before any deletes or trains: rank 0 stops too, with rank 1's line, and deletes nothing."""
    d = tmp_path / "sweep"
    argv = TINY + ["--max_iters", "5", "--ckpt_interval", "5", "--seeds", "2", "--out_dir", str(d), *stack]
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


# --- 2, 3: a chunk's checkpoints, and its Ctrl-C line ------------------------------------------------------------

STACK = TINY + ["--max_iters", "30", "--ckpt_interval", "7", "--seeds", "3", "--stack", "3"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    d = tmp_path_factory.mktemp("stack") / "a"
    assert train.cli(STACK + ["--out_dir", str(d)]) == 0
    return d


def strip_clock(path):
    return [{k: v for k, v in json.loads(l).items() if k not in ("ms_per_step", "elapsed_s")} for l in open(path)]


def same_as(a, b):
    """Seeds 0..2 of sweeps a and b: bitwise the same weights, optimizer state and log."""
    for k in range(3):
        x, y = ckpt(a / f"seed{k}" / "ckpt.pt"), ckpt(b / f"seed{k}" / "ckpt.pt")
        assert x["step"] == y["step"] == 30
        for part in ("model", "schedule"):
            assert x[part].keys() == y[part].keys() and all(torch.equal(x[part][n], y[part][n]) for n in x[part]), (k, part)
        sx, sy = x["optimizer"]["state"], y["optimizer"]["state"]
        assert all(torch.equal(sx[i][n], sy[i][n]) for i in sx for n in sx[i]), k
        assert strip_clock(a / f"seed{k}" / "metrics.jsonl") == strip_clock(b / f"seed{k}" / "metrics.jsonl"), k


@pytest.mark.parametrize("fault", ["ctrl-c", "full disk"])
def test_2_a_chunks_checkpoints_commit_together(tmp_path, monkeypatch, capsys, sigint, uninterrupted, fault):
    """The checkpoints of step 14: a Ctrl-C right after seed 0's write lands after every seed's (all at 14); a
    write that fails at seed 1 (a full disk) leaves every seed at step 7. Either way the resume is one chunk
    again and gives the uninterrupted run bitwise."""
    real, calls = torch.save, []

    def save(obj, f, *a, **k):
        if isinstance(obj, dict) and obj.get("step") == 14:
            calls.append(obj["config"]["seed"])
            if fault == "full disk" and len(calls) == 2:
                raise OSError(28, "No space left on device")
        real(obj, f, *a, **k)
        if isinstance(obj, dict) and obj.get("step") == 14 and fault == "ctrl-c" and len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # between seed 0's write and seed 1's
            sum(range(10_000))  # bytecodes for the handler to run on

    monkeypatch.setattr(torch, "save", save)
    b = tmp_path / "b"
    rc = train.cli(STACK + ["--out_dir", str(b)])
    monkeypatch.setattr(torch, "save", real)
    err = capsys.readouterr().err
    at = 14 if fault == "ctrl-c" else 7
    assert [ckpt(b / f"seed{k}" / "ckpt.pt")["step"] for k in range(3)] == [at] * 3, err  # the old code: 14, 7, 7
    if fault == "ctrl-c":
        assert rc == 130 and "interrupted after step 14; the last checkpoints are at step 14;" in err, err
    else:
        assert rc == 1 and "No space left" in err, err
    assert not [f for k in range(3) for f in os.listdir(b / f"seed{k}") if ".tmp" in f]
    assert train.cli(STACK + ["--out_dir", str(b), "--resume"]) == 0
    out = capsys.readouterr().out
    assert [l for l in out.splitlines() if l.startswith("chunk of seeds 0, 1, 2:") and f"resumed at step {at}" in l], out
    same_as(uninterrupted, b)


def test_3_a_chunks_ctrl_c_before_its_first_checkpoint_says_none_was_written(tmp_path, monkeypatch, capsys):
    real, calls = chunks.train_batch, {"n": 0}

    def interrupted(*a, **k):  # the 4th step's batches (3 seeds a step)
        calls["n"] += 1
        if calls["n"] == 3 * 3 + 1:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(chunks, "train_batch", interrupted)
    err = one_line(capsys, train.cli(STACK + ["--out_dir", str(tmp_path / "c")]), 130)
    assert "interrupted after step 3; no checkpoint was written yet; continue with --resume" in err, err


# --- 4: torchrun ---------------------------------------------------------------------------------------------

def test_4_a_rank_waiting_for_the_others_does_not_time_out(monkeypatch):
    """The gloo group's timeout bounds how long a rank with nothing left waits for the slowest (the default, 30
    minutes, crashed it and torchrun then killed the rank still training): it must outlast any sweep."""
    got = {}
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(sweep.dist, "init_process_group", lambda backend, **kw: got.update(backend=backend, **kw))
    monkeypatch.setattr(sweep.dist, "get_rank", lambda: 1)
    assert sweep.init_distributed("cpu") == (1, 2, "cpu")
    assert got["backend"] == "gloo" and got.get("timeout", datetime.timedelta(0)) >= datetime.timedelta(days=100), got


# --- 5: bench.py --stacks -------------------------------------------------------------------------------------

def test_5_bench_refuses_stacks_that_cannot_fit_in_one_line(capsys):
    argv = ["--quick", "--only_stack", "--no-compile", "--stacks", "1,100000000"]
    with pytest.raises(ValueError, match="--stacks"):  # before any work (the old code went on to build 10^8 models)
        bench.parse_args(argv)
    err = one_line(capsys, cli.run(bench.main, "bench.py", argv), 2)
    assert "--stacks" in err and "100000000" in err and "GiB" in err, err
    assert bench.parse_args(["--quick", "--stacks", "1,2"]).stacks == "1,2"  # a small row (h) still runs
    assert bench.parse_args([]).stacks == "1,4,16"
