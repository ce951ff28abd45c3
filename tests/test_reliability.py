"""Reliability: bad input gets one line and exit 2, a killed run resumes bitwise, same seed same numbers."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

import evaluate
import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8", "--eval_samples", "8",
        "--test_lengths", "5,19,20,25", "--log_interval", "5", "--eval_interval", "10", "--ckpt_interval", "5"]


def snapshot(d):
    """Every file under d with its bytes: 'existing files untouched' means this does not change."""
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            out[os.path.join(root, f)] = open(os.path.join(root, f), "rb").read()
    return out


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    assert train.cli(["--max_iters", "5", "--out_dir", str(d), *TINY]) == 0
    return d


def bad_inputs(run, tmp):
    """(name, argv for train.py or evaluate.py, a word the message must contain)."""
    trunc, other = tmp / "trunc", tmp / "other"
    for d in (trunc, other):
        d.mkdir(exist_ok=True)
    data = open(run / "ckpt.pt", "rb").read()
    open(trunc / "ckpt.pt", "wb").write(data[: len(data) // 2])
    notckpt = tmp / "notckpt"
    notckpt.mkdir(exist_ok=True)
    torch.save({"weights": torch.zeros(2)}, notckpt / "ckpt.pt")
    text = tmp / "text"
    text.mkdir(exist_ok=True)
    open(text / "ckpt.pt", "w").write("not a checkpoint\n")
    bad_eval = tmp / "badeval"
    bad_eval.mkdir(exist_ok=True)
    open(bad_eval / "eval.json", "w").write('{"task": "dyck"')
    empty = tmp / "empty"
    empty.mkdir(exist_ok=True)
    afile = tmp / "afile"
    afile.write_text("x")
    r = ["--resume", "--out_dir"]
    T = ("train", TINY)
    return [
        ("unknown task", T, ["--task", "dyk"], "dyk"),
        ("unknown schedule", T, ["--schedule", "windw"], "windw"),
        ("unknown preset", T, ["--preset", "huge"], "huge"),
        ("unknown device", T, ["--device", "tpu"], "tpu"),
        ("w < 0", T, ["--w", "-1"], "--w -1"),
        ("c < 0", T, ["--c", "-1"], "--c -1"),
        ("T_max < 1", T, ["--T_max", "0"], "--T_max 0"),
        ("T_test < T_max", T, ["--T_test", "10"], "--T_test 10"),
        ("length a task cannot produce", T, ["--test_lengths", "0,20"], "n=0"),
        ("test_lengths not integers", T, ["--test_lengths", "a,b"], "a,b"),
        ("lr <= 0", T, ["--lr", "0"], "--lr 0"),
        ("lr NaN", T, ["--lr", "nan"], "--lr nan"),
        ("lr inf", T, ["--lr", "inf"], "--lr inf"),
        ("batch_size 0", T, ["--batch_size", "0"], "--batch_size 0"),
        ("max_iters 0", T, ["--max_iters", "0"], "--max_iters 0"),
        ("n_min > n_max", T, ["--n_min", "9", "--n_max", "3"], "n_min"),
        ("seeds 0", T, ["--seeds", "0"], "--seeds 0"),
        ("eval_samples 0", T, ["--eval_samples", "0"], "--eval_samples 0"),
        ("not a number", T, ["--w", "five"], "five"),
        ("d_model % n_head", T, ["--d_model", "30", "--n_head", "4"], "--d_model 30"),
        ("resume: missing ckpt.pt", T, r + [str(empty)], "no checkpoint"),
        ("resume: truncated ckpt.pt", T, r + [str(trunc)], "not a readable checkpoint"),
        ("resume: text file as ckpt.pt", T, r + [str(text)], "not a readable checkpoint"),
        ("resume: not a train.py checkpoint", T, r + [str(notckpt)], "not a train.py checkpoint"),
        ("resume: other task", T, r + [str(run), "--task", "parity_prefix"], "task='dyck'"),
        ("resume: other model size", T, r + [str(run), "--d_model", "32"], "d_model=16"),
        ("out_dir cannot be written", T, ["--out_dir", str(afile / "sub")], "cannot write"),
        ("evaluate: no runs", ("evaluate", []), [str(empty)], "no runs"),
        ("evaluate: malformed eval.json", ("evaluate", []), [str(bad_eval)], "malformed eval.json"),
        ("evaluate: not a directory", ("evaluate", []), [str(tmp / "nowhere")], "nowhere"),
    ]


def test_bad_inputs_one_line_exit_2_files_untouched(finished_run, tmp_path, capsys):
    cases = bad_inputs(finished_run, tmp_path)
    assert len(cases) >= 20
    for name, (prog, base), argv, word in cases:
        before = snapshot(tmp_path), snapshot(finished_run)
        cli = train.cli if prog == "train" else evaluate.cli
        full = (["--max_iters", "5", "--out_dir", str(tmp_path / "fresh")] + base if prog == "train" else []) + argv
        try:
            code = cli(full)
        except SystemExit as e:  # argparse's own errors (unknown choice, not a number)
            code = e.code
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert code == 2, (name, code, err)
        assert len(lines) == 1 and "Traceback" not in err, (name, err)
        assert word in lines[0], (name, lines[0])
        assert (snapshot(tmp_path), snapshot(finished_run)) == before, name


def test_bad_input_from_the_shell():
    r = subprocess.run([sys.executable, "train.py", "--lr", "-1"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--lr -1" in r.stderr


def strip_clock(path):
    return [{k: v for k, v in json.loads(l).items() if k not in ("ms_per_step", "elapsed_s")} for l in open(path)]


def eval_numbers(path):
    e = json.load(open(path))
    return {k: e[k] for k in ("lengths", "acc", "metrics")}


KILL_IN_SAVE = """
import os, signal, sys, train
real = train.atomic_write
def dying(path, write):  # SIGKILL in the middle of the 2nd checkpoint write, temp file half written
    if path.endswith("ckpt.pt") and os.environ.get("SAVES", "0") == "1":
        tmp = path + ".tmp" + str(os.getpid())
        open(tmp, "wb").write(b"half")
        os.kill(os.getpid(), signal.SIGKILL)
    if path.endswith("ckpt.pt"):
        os.environ["SAVES"] = str(int(os.environ.get("SAVES", "0")) + 1)
    return real(path, write)
train.atomic_write = dying
sys.exit(train.cli(sys.argv[1:]))
"""


def test_sigkill_then_resume_is_bitwise_identical(tmp_path):
    args = ["--max_iters", "30", *TINY]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = lambda *a, script=("train.py",): subprocess.run([sys.executable, *script, *args, *a], cwd=ROOT, env=env,
                                                          capture_output=True, text=True, timeout=600)
    ref = tmp_path / "ref"
    assert run("--out_dir", str(ref)).returncode == 0
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
        assert train.cli(["--max_iters", "10", "--out_dir", str(tmp_path / d), *TINY]) == 0
    assert strip_clock(tmp_path / "a" / "metrics.jsonl") == strip_clock(tmp_path / "b" / "metrics.jsonl")
    assert eval_numbers(tmp_path / "a" / "eval.json") == eval_numbers(tmp_path / "b" / "eval.json")
    cfg = json.load(open(tmp_path / "a" / "config.json"))
    assert {"torch", "python", "git_commit"} <= set(cfg["env"])
    # the batches a seed sees do not depend on the schedule (data and depth generators are independent)
    seen = {}
    real = train.train_batch
    for sched in ("window", "fixed"):
        seen[sched] = []
        monkeypatch.setattr(train, "train_batch", lambda *a, s=sched: _record(seen[s], real, *a))
        assert train.cli(["--max_iters", "4", "--schedule", sched, "--out_dir", str(tmp_path / sched), *TINY]) == 0
    assert all(torch.equal(u, v) for u, v in zip(seen["window"], seen["fixed"])) and len(seen["fixed"]) == 4


def _record(store, real, *a):
    out = real(*a)
    store.append(out[0])
    return out


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
    assert train.cli(["--max_iters", "20", "--out_dir", str(d), *TINY]) == 1
    err = capsys.readouterr().err
    assert "non-finite loss" in err and "step 8" in err and len(err.strip().splitlines()) == 1
    assert torch.load(d / "ckpt.pt", weights_only=True)["step"] == 5
    assert all(l["grad_norm"] > 0 for l in map(json.loads, open(d / "metrics.jsonl")))


def test_sweep_restart_skips_finished_and_resumes(tmp_path, capsys):
    base = ["--max_iters", "10", "--seeds", "2", "--out_dir", str(tmp_path), *TINY]
    assert train.cli(base) == 0
    ref = torch.load(tmp_path / "seed1" / "ckpt.pt", weights_only=True)["model"]
    os.remove(tmp_path / "seed1" / "eval.json")  # as if seed 1 had been killed before its end
    assert train.cli(base + ["--resume"]) == 0
    out = capsys.readouterr().out
    assert "seed 0: finished earlier, skipped" in out
    got = torch.load(tmp_path / "seed1" / "ckpt.pt", weights_only=True)["model"]
    assert all(torch.equal(ref[k], got[k]) for k in ref)
    assert json.load(open(tmp_path / "summary.json"))["seeds"] == 2
