"""Round four of the red team's cases on reading finished runs (evaluate.py, lab/records.py, lab/cli.py) and on
theory_checks.py's validation. Each test failed on the code before its fix.

    1  eval.json values of the wrong type (a list in config, a null in metrics.oracle, a string in lengths or
       metrics.oracle_ood, ...) passed load_eval's key checks and crashed later with a traceback
    2  a seed folder that cannot be read (chmod 000) was skipped without a word: 1 seed of 2 in the table
    3  a FIFO named eval.json blocked evaluate.py forever
    4  `evaluate.py --readouts --samples 100000000` had no memory check
    5  Ctrl-C while a command imports torch printed a traceback
    6  a stdout that cannot encode the run path (PYTHONIOENCODING=ascii) was reported as bad input
    7  `theory_checks.py --checks 3 --T_max 2` said "choose m <= -15"
"""

import copy
import dataclasses
import json
import os
import signal
import subprocess
import sys

import pytest

import config
import evaluate
import metrics
from lab import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENGTHS, N_MAX = [10, 20, 30], 19
TINY = ["--threads", "1", "--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8",
        "--eval_samples", "8", "--test_lengths", "5,19,20,25", "--log_interval", "5", "--eval_interval", "10",
        "--ckpt_interval", "5", "--max_iters", "10"]
SIGINT_DEFAULT = dict(preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal's foreground job


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


def one_line(capsys, code, expect=2) -> str:
    err = capsys.readouterr().err
    assert code == expect and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (code, err)
    return err


def snapshot(d):
    return {os.path.join(r, f): open(os.path.join(r, f), "rb").read() for r, _, fs in os.walk(d) for f in fs}


# --- 4: --readouts --samples past memory ---------------------------------------------------------------

def test_4_readouts_with_too_many_samples_are_refused_before_any_work(tmp_path, capsys):
    """No ckpt.pt here: the code before the fix went on to load_run and said "no checkpoint" (with a checkpoint
    it would have drawn 3 x 10^8 samples per length), the memory check comes first."""
    d = write_run(tmp_path / "run", synthetic_eval())
    before = snapshot(tmp_path)
    err = one_line(capsys, evaluate.cli([d, "--readouts", "--samples", "100000000"]))
    assert "--samples 100000000" in err and "GiB" in err and d in err, err
    assert snapshot(tmp_path) == before
    err = one_line(capsys, evaluate.cli([d, "--readouts", "--fit_gate", "linear", "--samples", "100"]))
    assert "no checkpoint" in err  # a sensible size passes the estimate


# --- 5: Ctrl-C while torch is imported -------------------------------------------------------------------

# Runs SCRIPT as the command (__main__) and sends itself SIGINT from inside `import torch` (when torch's
# __init__ imports its first submodule): the Ctrl-C of a user who gives up while the command starts.
CTRL_C_IN_IMPORT = """
import os, runpy, signal, sys
class CtrlC:
    sent = False
    def find_spec(self, name, path=None, target=None):
        if name.startswith("torch.") and not CtrlC.sent:
            CtrlC.sent = True
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, CtrlC())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
print("not interrupted", file=sys.stderr)
"""


# argv: bad input, so that a command the Ctrl-C missed would stop at once and write nothing
@pytest.mark.parametrize("script, argv, pending", [
    ("evaluate.py", ["/nonexistent/run"], False), ("theory_checks.py", ["--w", "-1"], False),
    # PENDING: train.py and bench.py are not this round's files; their cases run once their first line is
    # `from lab.cli import ctrl_c_at_start; ctrl_c_at_start(__name__, "train.py")` (bench.py likewise), skipped till then
    ("train.py", ["--lr", "-1"], True), ("bench.py", ["--quick", "--w", "-1"], True)])
def test_5_ctrl_c_while_torch_is_imported_is_one_line_and_exit_130(script, argv, pending):
    if pending and "ctrl_c_at_start(__name__" not in open(os.path.join(ROOT, script)).read():
        pytest.skip(f"PENDING: {script} does not call lab.cli.ctrl_c_at_start before importing torch yet")
    r = subprocess.run([sys.executable, "-c", CTRL_C_IN_IMPORT, script, *argv], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, **SIGINT_DEFAULT)
    assert r.returncode == 130 and r.stderr == f"{script}: interrupted\n" and not r.stdout, r


def test_5_the_start_handler_is_only_for_the_command_and_run_hands_ctrl_c_back(monkeypatch):
    """Imported (a test, bench.py importing train.py) nothing changes; run() restores Python's KeyboardInterrupt
    (what the training loop's Ctrl-C message and ctrl_c_after rely on)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        cli.ctrl_c_at_start("evaluate", "evaluate.py")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job: left ignored
        cli.ctrl_c_at_start("__main__", "evaluate.py")
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        signal.signal(signal.SIGINT, signal.default_int_handler)
        cli.ctrl_c_at_start("__main__", "evaluate.py")
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        seen = []
        assert cli.run(lambda argv: seen.append(signal.getsignal(signal.SIGINT)), "evaluate.py", []) == 0
        assert seen == [signal.default_int_handler]
    finally:
        signal.signal(signal.SIGINT, old)


# --- 6: a stdout that cannot encode the run path ---------------------------------------------------------

def test_6_a_run_path_stdout_cannot_encode_is_printed_escaped(tmp_path):
    d = write_run(tmp_path / "r\u00fcn-\u00f8", synthetic_eval())
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    r = subprocess.run([sys.executable, "evaluate.py", d], cwd=ROOT, capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0 and not r.stderr, r
    assert "r\\xfcn-\\xf8" in r.stdout and "| dyck | window w=5 | 1 |" in r.stdout
    # train.py prints the run path too (through the same lab.cli.run)
    out = tmp_path / "tr\u00e4in"
    r = subprocess.run([sys.executable, "train.py", *TINY, "--out_dir", str(out)], cwd=ROOT, capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "codec" not in r.stderr, r.stderr[-2000:]
    assert "tr\\xe4in" in r.stdout and (out / "eval.json").exists()
