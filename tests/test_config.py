"""A run's settings (config.py, lab/checks.py's validate): every value is checked before a file is touched and refused
in one line naming the flag and what is allowed; the memory a step needs is estimated up front, neither refusing a
run of a few MB nor passing one that cannot fit; --compile needs a C++ compiler that answers; a --perturb that would
change no weight is refused. Each test names its case (docs/reliability.md)."""

import dataclasses
import os
import shutil

import pytest

import bench
import config
import theory_checks
import train
from lab import checks
from lab.cli import run

from conftest import TINY, call, copy_files, one_line, snapshot, train_call


# --- values: refused before anything is written -------------------------------------------------------------------

def test_a_flag_that_would_fail_late_is_refused_first(base, tmp_path):
    """2D2 (round two, issue 16): a flag that failed only after training had started (--eval_batch_size 0) overwrote
    the run's files."""
    d = copy_files(base, tmp_path / "run")
    before = snapshot(d)
    for bad in (["--eval_batch_size", "0"], ["--weight_decay", "-1"], ["--grad_clip", "nan"], ["--c", "1000"]):
        assert train.cli(TINY + ["--out_dir", str(d), "--overwrite", *bad]) == 2
        assert snapshot(d) == before, bad


def test_values_that_passed_validation_and_crashed_later_are_refused(tmp_path, capsys):
    """3T2: --sigma inf, --eval_samples 100000000 (which died in the final evaluation) and theory_checks.py --w 0
    passed validation and crashed later. Failed before its fix."""
    for argv, word in ((["--schedule", "lognormal_poisson", "--sigma", "inf"], "--sigma inf"),
                       (["--eval_samples", "100000000"], "--eval_samples 100000000")):
        cfg = train.parse_args(TINY + ["--out_dir", str(tmp_path / "r")] + argv)
        with pytest.raises(ValueError, match=word):
            checks.validate(cfg)  # refused before a step is trained, not in the final evaluation
    code = run(theory_checks.command, "theory_checks.py", ["--checks", "2b", "--w", "0", "--steps", "0", "--seeds", "1"])
    assert "--w 0" in one_line(capsys, code)
    assert not os.path.exists(tmp_path / "r")


def test_infinite_knobs_are_bad_input_and_leave_nothing(tmp_path, capsys):
    """3U2: --lambda_ent inf, --beta inf and --tau_act inf exited 1 and left a half-run. Failed before its fix."""
    for schedule, flag in (("rl", "lambda_ent"), ("ponder", "beta"), ("act", "tau_act")):
        d = tmp_path / flag
        err = one_line(capsys, train.cli(TINY + ["--schedule", schedule, f"--{flag}", "inf", "--out_dir", str(d)]))
        assert f"--{flag} inf" in err and not d.exists()


def test_loss_weights_that_overflow_are_refused_up_front(tmp_path, capsys):
    """4R4: --tau_act 1e308, --lambda_ent 1e308, --beta 1e308 and --trm_bce inf passed validation and failed at step
    1. Failed before its fix."""
    for schedule, flag, value, why in (("act", "tau_act", "1e308", "0..1e+06"), ("rl", "lambda_ent", "1e308", "0..1e+06"),
                                       ("ponder", "beta", "1e308", "0..1e+06"),
                                       ("trm_halt", "trm_bce", "inf", "expected a finite number")):  # make_schedule's
        d = tmp_path / flag
        err = one_line(capsys, train_call(TINY + ["--schedule", schedule, f"--{flag}", value, "--out_dir", str(d)]))
        said = f"--{flag} {float(value)}" in err or f"--{flag}={float(value)}" in err
        assert said and why in err and not d.exists(), err
    checks.validate(train.parse_args(TINY + ["--schedule", "act", "--tau_act", "1e6"]))  # the bound itself


@pytest.mark.smoke
def test_lambda_p_is_named_by_its_flag(tmp_path, capsys):
    """3U3: --lambda_p 1 was refused under the name of a flag that does not exist. Failed before its fix."""
    for schedule in ("ponder", "fixed_prior"):
        err = one_line(capsys, train.cli(TINY + ["--schedule", schedule, "--lambda_p", "1", "--out_dir", str(tmp_path / "r")]))
        assert "--lambda_p 1.0: must be in (0, 1)" in err


@pytest.mark.smoke
def test_an_ema_that_would_start_after_the_last_step_is_refused(tmp_path, capsys):
    """4R1: --curriculum --ema 0.999 on dyck's defaults put the EMA's start at step 850 of 800, so it never started,
    without a word (--ema_start past --max_iters too). Failed before its fix."""
    with pytest.raises(ValueError, match=r"start after step 850 .*--max_iters 800"):  # dyck's defaults
        checks.validate(train.parse_args(["--curriculum", "--ema", "0.999"]))
    for extra, word in ((["--curriculum", "--ema", "0.999"], "(19 - 2) * 50"), (["--ema", "0.9", "--ema_start", "11"],
                                                                                 "--ema_start 11")):
        d = tmp_path / "r"
        err = one_line(capsys, train_call(TINY + extra + ["--out_dir", str(d)]))
        assert "--ema" in err and word in err and "--max_iters 10" in err and not d.exists(), err
    for ok in (["--ema", "0.9", "--ema_start", "10"], ["--ema_start", "11"]):  # the last step; no EMA at all
        checks.validate(train.parse_args(TINY + ok))


@pytest.mark.smoke
def test_a_thread_count_out_of_range_names_the_flag(tmp_path, capsys):
    """U16: --threads 99999999999 said "Overflow when unpacking long", naming no flag. Failed before its fix."""
    err = one_line(capsys, call(train.cli, TINY + ["--threads", "99999999999", "--out_dir", str(tmp_path / "x")]))
    assert "--threads 99999999999" in err and not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="--threads"):
        bench.parse_args(["--threads", "99999999999"])


def test_a_perturbation_below_float32_resolution_is_refused(tmp_path, capsys):
    """S16: --perturb 1e-9 changed no weight and made a "replicate" equal to the plain run. Failed before its fix."""
    d = tmp_path / "x"
    err = one_line(capsys, call(train.cli, TINY + ["--perturb", "1e-9", "--perturb_seed", "1", "--out_dir", str(d)]))
    assert "--perturb 1e-09" in err and "5.96e-08" in err and not d.exists()
    assert checks.MIN_PERTURB == 2.0 ** -24
    cfg = train.parse_args(TINY + ["--perturb", "1e-9", "--perturb_seed", "1"])  # past validation: build refuses too
    with pytest.raises(ValueError, match="changed no weight"):
        config.build(cfg)
    config.build(dataclasses.replace(cfg, perturb=checks.MIN_PERTURB))  # the smallest allowed eps moves weights


# --- what this machine can run: memory, a compiler ---------------------------------------------------------------

def test_the_memory_check_does_not_refuse_a_run_of_a_few_mb(tmp_path):
    """3U4: the memory check refused a run of a few MB. Failed before its fix.

    Training was estimated at the longest *test* sequence and at T_max steps with gradient: a tiny run with
    one long test length (evaluated one sample at a time), or with --bptt_k 1, was refused for ~20-100 GiB."""
    small = ["--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8", "--eval_batch_size", "1",
             "--out_dir", str(tmp_path / "r")]
    for extra in (["--test_lengths", "5,19,3000", "--T_test", "30"],
                  ["--T_max", "100000", "--T_test", "100000", "--bptt_k", "1"]):
        checks.validate(train.parse_args(small + extra))  # no ValueError
    with pytest.raises(ValueError, match="GiB"):  # the check itself still refuses what cannot fit
        checks.validate(train.parse_args(small + ["--T_max", "100000", "--T_test", "100000", "--batch_size", "100000"]))


@pytest.mark.smoke
def test_the_memory_check_counts_eval_samples_and_stacked_seeds(monkeypatch):
    """4R6: the memory check ignored --stack (64 seeds x batch 256 died in the allocator) and refused
    --eval_batch_size 1000000 with 8 samples for 97.8 GiB. Failed before its fix."""
    monkeypatch.setattr(checks, "total_memory", lambda device: 16 * 2 ** 30, raising=False)  # on any machine
    # no evaluation batch holds more than eval_samples samples (the in-distribution check: 64)
    checks.validate(train.parse_args(TINY + ["--eval_batch_size", "1000000"]))
    # a stacked step trains min(stack, seeds) seeds: 64 x 256 samples is refused as 16384 unstacked is
    with pytest.raises(ValueError, match="GiB"):
        checks.validate(train.parse_args(["--batch_size", str(64 * 256)]))
    with pytest.raises(ValueError, match=r"--stack 64 \(64 seeds a step\).*GiB"):
        checks.validate(train.parse_args(["--seeds", "64", "--stack", "64", "--batch_size", "256"]))
    checks.validate(train.parse_args(["--seeds", "2", "--stack", "64", "--batch_size", "256"]))  # 2 seeds a step


def test_compile_without_a_working_cxx_compiler_is_refused_up_front(tmp_path, monkeypatch, capsys):
    """4R8: --static --compile without a working C++ compiler printed 91 lines and left a half-run. Failed before its
    fix."""
    from torch._inductor import config as inductor
    monkeypatch.setattr(inductor.cpp, "cxx", (None, "no-such-c++"))  # what $CXX=no-such-c++ sets at import
    for extra in (["--compile"], ["--stack", "1", "--static", "--compile"]):
        d = tmp_path / "r"
        err = one_line(capsys, train_call(TINY + ["--device", "cpu", *extra, "--out_dir", str(d)]))
        assert "--compile" in err and "C++ compiler" in err and "no-such-c++" in err and not d.exists(), err
    if shutil.which("g++"):  # a compiler that answers is found
        monkeypatch.setattr(inductor.cpp, "cxx", (None, "g++"))
        assert checks.cxx_compiler() == shutil.which("g++")
