"""Round four, the run directory of train.py (lab/rundir.py): each test failed on the code before its fix.

    1  an EMA that would start after the last step (--curriculum --ema on dyck: step 850 of 800) is refused
    2  a checkpoint of other dtypes (cast silently on resume), or with an EMA its run does not keep, is refused
    3  an EMA checkpoint at exactly --ema_start without its EMA, acc_stats {'loss': 'x'}, betas 'x': one line
       naming ckpt.pt, not a traceback
    4  loss weights that overflow float32 are refused up front, and a run stopped by a non-finite loss before its
       first checkpoint leaves nothing that blocks the corrected command
    5  an empty config.json is called damaged (not "another run: d_model=64 ..."); a non-UTF-8 metrics.jsonl is
       named, and found before config.json is rewritten
    6  the memory check: evaluation batches hold at most eval_samples samples; a --stack step trains S seeds
    7  every segment records --stack and --static
    8  --compile without a working C++ compiler is refused up front
"""

import shutil

import pytest

import train
from lab import checks

from conftest import TINY


def call(argv):
    """train.py as a command; a traceback (the bug) becomes the exception's name, so the assertions fail on it."""
    try:
        return train.cli(argv)
    except Exception as err:  # noqa: BLE001
        return f"raised {type(err).__name__}: {err}"


def one_line(capsys, code, want_code=2):
    err = capsys.readouterr().err
    assert code == want_code and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (code, err)
    return err


# --- 1 ----------------------------------------------------------------------------------------------------

def test_1_an_ema_that_would_start_after_the_last_step_is_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"start after step 850 .*--max_iters 800"):  # dyck's defaults
        checks.validate(train.parse_args(["--curriculum", "--ema", "0.999"]))
    for extra, word in ((["--curriculum", "--ema", "0.999"], "(19 - 2) * 50"), (["--ema", "0.9", "--ema_start", "11"],
                                                                                 "--ema_start 11")):
        d = tmp_path / "r"
        err = one_line(capsys, call(TINY + extra + ["--out_dir", str(d)]))
        assert "--ema" in err and word in err and "--max_iters 10" in err and not d.exists(), err
    for ok in (["--ema", "0.9", "--ema_start", "10"], ["--ema_start", "11"]):  # the last step; no EMA at all
        checks.validate(train.parse_args(TINY + ok))


# --- 4 ----------------------------------------------------------------------------------------------------

def test_4_loss_weights_that_overflow_are_refused_up_front(tmp_path, capsys):
    for schedule, flag, value, why in (("act", "tau_act", "1e308", "0..1e+06"), ("rl", "lambda_ent", "1e308", "0..1e+06"),
                                       ("ponder", "beta", "1e308", "0..1e+06"),
                                       ("trm_halt", "trm_bce", "inf", "expected a finite number")):  # make_schedule's
        d = tmp_path / flag
        err = one_line(capsys, call(TINY + ["--schedule", schedule, f"--{flag}", value, "--out_dir", str(d)]))
        said = f"--{flag} {float(value)}" in err or f"--{flag}={float(value)}" in err
        assert said and why in err and not d.exists(), err
    checks.validate(train.parse_args(TINY + ["--schedule", "act", "--tau_act", "1e6"]))  # the bound itself


# --- 6 ----------------------------------------------------------------------------------------------------

def test_6_the_memory_check_counts_eval_samples_and_stacked_seeds(monkeypatch):
    monkeypatch.setattr(checks, "total_memory", lambda device: 16 * 2 ** 30, raising=False)  # on any machine
    # no evaluation batch holds more than eval_samples samples (the in-distribution check: 64)
    checks.validate(train.parse_args(TINY + ["--eval_batch_size", "1000000"]))
    # a stacked step trains min(stack, seeds) seeds: 64 x 256 samples is refused as 16384 unstacked is
    with pytest.raises(ValueError, match="GiB"):
        checks.validate(train.parse_args(["--batch_size", str(64 * 256)]))
    with pytest.raises(ValueError, match=r"--stack 64 \(64 seeds a step\).*GiB"):
        checks.validate(train.parse_args(["--seeds", "64", "--stack", "64", "--batch_size", "256"]))
    checks.validate(train.parse_args(["--seeds", "2", "--stack", "64", "--batch_size", "256"]))  # 2 seeds a step


# --- 8 ----------------------------------------------------------------------------------------------------

def test_8_compile_without_a_working_cxx_compiler_is_refused_up_front(tmp_path, monkeypatch, capsys):
    from torch._inductor import config as inductor
    monkeypatch.setattr(inductor.cpp, "cxx", (None, "no-such-c++"))  # what $CXX=no-such-c++ sets at import
    for extra in (["--compile"], ["--stack", "1", "--static", "--compile"]):
        d = tmp_path / "r"
        err = one_line(capsys, call(TINY + ["--device", "cpu", *extra, "--out_dir", str(d)]))
        assert "--compile" in err and "C++ compiler" in err and "no-such-c++" in err and not d.exists(), err
    if shutil.which("g++"):  # a compiler that answers is found
        monkeypatch.setattr(inductor.cpp, "cxx", (None, "g++"))
        assert checks.cxx_compiler() == shutil.which("g++")
