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
    checks.validate(train.parse_args(TINY + ["--ema", "0.9", "--ema_start", "10"]))  # the last step
    # (--ema_start 11 without --ema, once accepted as "no EMA at all", is an unread flag since issue 71's S34:
    # test_a_flag_the_run_does_not_read_is_refused)


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


# --- a flag the run does not read (config.check_unread; issue 71's H) ------------------------------------------
TINY_UNREAD = ["--d_model", "16", "--n_head", "2", "--n_layer", "1", "--max_iters", "2"]

# (flags, the words of the refusal): each flag is accepted by argparse and read by no part of this run
UNREAD = {
    "S33 ponder --no-active_set": (["--schedule", "ponder", "--no-active_set"], "--active_set False: schedule ponder does not read it"),
    "S33 act --no-active_set": (["--schedule", "act", "--no-active_set"], "--active_set False: schedule act does not read it"),
    "S33 trm_halt --no-active_set": (["--schedule", "trm_halt", "--no-active_set"], "schedule trm_halt does not read it"),
    "S34 --curriculum_every": (["--curriculum_every", "10"], "--curriculum_every 10: read only with --curriculum, which is off"),
    "S34 --curriculum_start": (["--curriculum_start", "4"], "--curriculum_start 4: read only with --curriculum"),
    "S34 --ema_start": (["--ema_start", "5"], "--ema_start 5: read only with --ema DECAY (> 0), which is off"),
    "S35 ntp --no-inject": (["--task", "copy", "--schedule", "ntp", "--no-inject"], "--no-inject: the NTP baseline ntp does not read it"),
    "S35 ntp_pause --no-looped": (["--task", "copy", "--schedule", "ntp_pause", "--no-looped"], "--no-looped: the NTP baseline ntp_pause"),
    "S35 ntp_loop --T_test": (["--task", "copy", "--schedule", "ntp_loop", "--T_test", "40"], "--T_test 40: the NTP baseline ntp_loop"),
}


@pytest.mark.parametrize("case", list(UNREAD))
def test_a_flag_the_run_does_not_read_is_refused(tmp_path, capsys, case):
    """H / S33-S35 (issue 71): "read" meant "in the constructor's keyword list": ponder, act and trm_halt accepted
    --no-active_set, --curriculum_every / --curriculum_start were taken without --curriculum and --ema_start without
    --ema, and the NTP baselines took --no-inject, --no-looped and --T_test, each training what the flag did not
    say. "Read" is now what the loss, the task and the switches read: one line, exit 2, nothing on disk.
    Failed before its fix: assert 0 == 2 (train.py trained the run as if the flag were not there)."""
    flags, words = UNREAD[case]
    out = tmp_path / "run"
    code = train.cli([*TINY_UNREAD, *flags, "--out_dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and words in err, (code, err)
    assert not out.exists()


@pytest.mark.parametrize("flags", [
    ["--curriculum", "--curriculum_every", "10", "--curriculum_start", "3"], ["--ema", "0.9", "--ema_start", "5"],
    ["--schedule", "rl", "--no-active_set"], ["--schedule", "window", "--no-active_set"],
    ["--schedule", "ponder", "--curriculum", "--curriculum_every", "5"], ["--task", "copy", "--schedule", "ntp_loop", "--no-inject"],
    ["--schedule", "window", "--no-looped", "--no-inject", "--T_test", "40"], ["--task", "addition", "--schedule", "ntp"],
    ["--task", "copy", "--schedule", "ntp", "--T_max", "35"],  # its depth c = T_max, above the T_test it does not read
])
def test_every_flag_a_run_reads_stays_accepted(flags):
    """H (issue 71): the refusals above refuse nothing a run reads (the red team's probe of 11 schedules x 47 flags
    found no legitimate combination refused; study/layout_check.py's cases run as they did). An NTP baseline's depth
    may now exceed T_test, which it does not read (before: "--T_test 30: must be >= T_max (35)", and --T_test was
    the flag to refuse).
    Failed before its fix: ValueError: --T_test 30: must be >= T_max (35) (the last case; the others held)."""
    checks.validate(train.parse_args(flags))


def test_the_study_scripts_name_no_unread_flag():
    """H (issue 71): the declared commands of the layout check parse under the new rule (an NTP case without
    --T_test); schedule_table.py times --no-active_set only where the schedule reads it.
    Failed under the new rule before layout_check.command dropped --T_test for the NTP cases: AttributeError:
    module 'layout_check' has no attribute 'command' (its train() passed --T_test 8: "the NTP baseline ntp does
    not read it")."""
    import importlib.util
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("layout_check", os.path.join(root, "study", "layout_check.py"))
    lc = importlib.util.module_from_spec(spec)
    sys.modules["layout_check"] = lc
    spec.loader.exec_module(lc)
    for flags in lc.CASES.values():
        train.parse_args(lc.command(flags))
    assert "--T_test" not in lc.command(["--schedule", "ntp"]) and "--T_test" in lc.command(["--schedule", "window"])


@pytest.mark.smoke
def test_the_ntp_flag_tables_name_ntp_pys_baselines_and_configs_fields():
    """config.py holds the NTP baselines' flag rules, so that a run of a stop schedule does not load ntp.py (the
    layout's budget); ntp.py holds the baselines: the two must name the same three schedules and real flags."""
    import ntp
    assert list(config.NTP_KNOBS) == list(config.NTP_UNREAD) == list(config.NTP_SETTINGS) == list(ntp.SCHEDULES)
    fields = {f.name for f in dataclasses.fields(config.Config)}
    for table in (config.NTP_KNOBS, config.NTP_UNREAD, config.NTP_SETTINGS):
        assert {k for ks in table.values() for k in ks} <= fields
