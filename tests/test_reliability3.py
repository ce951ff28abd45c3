"""Reliability, round three: the red team's cases (issue 34), one or more tests per class, each of which failed
on the code before the fix. Classes: data loss (a-d), silent wrong results (a-h), tracebacks, unclear messages.
docs/reliability.md lists every case with its test."""

import json
import os
import shutil
import signal

import pytest
import torch

import train
from lab import checkpoint, checks

from conftest import TINY


def one_line(capsys, code, want_code=2):
    err = capsys.readouterr().err
    assert code == want_code and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (code, err)
    return err


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


# --- silent wrong results -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    d = tmp_path_factory.mktemp("sweep") / "sweep"
    assert train.cli(TINY + ["--seeds", "3", "--max_iters", "5", "--out_dir", str(d)]) == 0
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


# --- tracebacks -----------------------------------------------------------------------------------------


def test_tracebacks_ctrl_c_during_start_up_and_pressed_twice(tmp_path, monkeypatch, capsys):
    real_validate = checks.validate
    monkeypatch.setattr(checks, "validate", lambda cfg: (_ for _ in ()).throw(KeyboardInterrupt))
    err = one_line(capsys, train.cli(TINY + ["--out_dir", str(tmp_path / "a")]), 130)
    assert err.strip() == "train.py: interrupted"
    monkeypatch.setattr(checks, "validate", real_validate)
    real_batch, real_good, calls = train.train_batch, checkpoint.last_good, {"n": 0}

    def interrupted(*a):
        calls["n"] += 1
        if calls["n"] == 8:
            raise KeyboardInterrupt
        return real_batch(*a)

    def second_ctrl_c(path):  # the second Ctrl-C arrives while the first is being reported
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(10_000))  # bytecodes for a handler to run on
        return real_good(path)

    monkeypatch.setattr(train, "train_batch", interrupted)
    monkeypatch.setattr(checkpoint, "last_good", second_ctrl_c)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        err = one_line(capsys, train.cli(TINY + ["--out_dir", str(tmp_path / "b")]), 130)
    finally:
        signal.signal(signal.SIGINT, old)
    assert "interrupted after step 7" in err and "--resume" in err


def test_tracebacks_under_torchrun_bad_input_is_printed_once(monkeypatch, capsys):
    for rank, lines in (("1", 0), ("0", 1)):
        monkeypatch.setenv("RANK", rank)
        assert train.cli(["--lr", "-1"]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == lines, rank
