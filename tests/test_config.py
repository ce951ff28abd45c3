"""config.py: what defines a run, and the one rule that refuses a flag the run does not read (check_unread)."""

import os

import pytest

import train
from lab import checks

TINY = ["--d_model", "16", "--n_head", "2", "--n_layer", "1", "--max_iters", "2"]

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
def test_s33_s34_s35_a_flag_the_run_does_not_read_is_refused(tmp_path, capsys, case):
    """H / S33-S35 (issue 71): "read" meant "in the constructor's keyword list": ponder, act and trm_halt accepted
    --no-active_set, --curriculum_every / --curriculum_start were taken without --curriculum and --ema_start without
    --ema, and the NTP baselines took --no-inject, --no-looped and --T_test, each training what the flag did not
    say. "Read" is now what the loss, the task and the switches read: one line, exit 2, nothing on disk.
    Failed before its fix: assert 0 == 2 (train.py trained the run as if the flag were not there)."""
    flags, words = UNREAD[case]
    out = tmp_path / "run"
    code = train.cli([*TINY, *flags, "--out_dir", str(out)])
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
def test_s33_s34_s35_every_flag_a_run_reads_stays_accepted(flags):
    """H (issue 71): the refusals above refuse nothing a run reads (the red team's probe of 11 schedules x 47 flags
    found no legitimate combination refused; study/layout_check.py's cases run as they did). An NTP baseline's depth
    may now exceed T_test, which it does not read (before: "--T_test 30: must be >= T_max (35)", and --T_test was
    the flag to refuse).
    Failed before its fix: ValueError: --T_test 30: must be >= T_max (35) (the last case; the others held)."""
    checks.validate(train.parse_args(flags))


def test_s33_the_study_scripts_name_no_unread_flag():
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
