"""Reading finished runs (lab/records.py, and lab/files.py's one JSON reader): eval.json's schema and the type of every
value a reader uses, the runs below a folder (a symlinked seed counted, an unreadable one refused, never skipped), a
run's checkpoint read back for readouts, and bounded JSON (a regular file only, no nesting past the recursion limit).
Every refusal is one line naming the file (and the key). Each test names its case (docs/reliability.md)."""

import glob
import json
import math
import os
import shutil

import pytest
import torch

import evaluate
import train
from lab import files, records
from lab.cli import run
from study import choice

from conftest import ROOT, TINY, call, copy_run, in_process, nan_copy, one_line, snapshot, synthetic_eval, write_run


@pytest.mark.smoke
def test_a_valid_eval_json_loads_and_tables(tmp_path, capsys):
    """4E1, the control: the schema takes what metrics.metrics writes (hard subset, shortcuts, raw_metrics, env)."""
    d = write_run(tmp_path / "run", synthetic_eval())
    assert evaluate.cli([d]) == 0
    assert "| dyck | window w=5 | 1 |" in capsys.readouterr().out


def setter(*path, value):
    """A change of one value of eval.json, at a path of keys and indices."""
    def change(e):
        for k in path[:-1]:
            e = e[k]
        e[path[-1]] = value
    return change


WRONG_TYPES = [  # (name, change, the words of the one line)
    ("a list in config", setter("config", "w", value=[1, 2]), "config 'w'"),
    ("a dict under an unknown config key", setter("config", "old_knob", value={"a": 1}), "config 'old_knob'"),
    ("a string for a float setting", setter("config", "perturb", value="x"), "config 'perturb'"),
    ("a string for an int setting", setter("config", "T_max", value="20"), "config 'T_max'"),
    ("a null in metrics.oracle", setter("metrics", "oracle", 0, value=None), "metrics 'oracle'[0]"),
    ("a null in metrics.stable_interval", setter("metrics", "stable_interval", 2, value=None), "'stable_interval'[2]"),
    ("a string in lengths", setter("lengths", 1, value="20"), "'lengths'[1]"),
    ("a string in K", setter("K", 0, value="1"), "'K'[0]"),
    ("a string in metrics.oracle_ood", setter("metrics", "oracle_ood", value="90"), "metrics 'oracle_ood'"),
    ("a list as metrics.gap", setter("metrics", "gap", value=[1]), "metrics 'gap'"),
    ("a string as a shortcut's accuracy", setter("metrics", "shortcuts", "most frequent answer", "ood", value="x"),
     "'shortcuts'"),
    ("a string as hard_frac", setter("metrics", "hard_frac", value="x"), "'hard_frac'"),
    ("strings in flip_curve", setter("metrics", "flip_curve", value=["a"]), "'flip_curve'[0]"),
    ("a string as front90", setter("metrics", "front90", value="x"), "'front90'"),
    ("a number as shortcut_ood_name", setter("metrics", "shortcut_ood_name", value=3), "'shortcut_ood_name'"),
    ("an acc row of another length than K", setter("acc", 0, value=[1.0]), "'acc'"),
    ("a string as train_time_s", setter("train_time_s", value="1 min"), "'train_time_s'"),
    ("a string as env", setter("env", value="x"), "'env'"),
    ("a string in raw_metrics.oracle_ood", setter("raw_metrics", "oracle_ood", value="x"), "raw_metrics 'oracle_ood'"),
]


@pytest.mark.smoke
@pytest.mark.parametrize("name, change, words", WRONG_TYPES, ids=[w[0] for w in WRONG_TYPES])
def test_a_value_of_the_wrong_type_is_one_line_naming_file_and_key(tmp_path, capsys, name, change, words):
    """4E1: eval.json values of the wrong type (a list in config, a null in metrics.oracle, a string in lengths or
    metrics.oracle_ood, ...) passed load_eval's key checks and crashed later with a traceback. Failed before its fix."""
    e = synthetic_eval()
    change(e)
    d = write_run(tmp_path / "run", e)
    before = snapshot(tmp_path)
    err = one_line(capsys, evaluate.cli([d]))
    assert "malformed eval.json" in err and os.path.join(d, "eval.json") in err and words in err, (name, err)
    assert snapshot(tmp_path) == before


def test_every_committed_eval_json_still_loads():
    """4E1 (the control).

    The schema refuses nothing train.py wrote: every results/**/eval.json loads, except the 10 exploration
    runs of results/recipes/exploration/, written before eval.json had val-K and the shortcuts (they lacked
    those keys before this schema, too)."""
    paths = sorted(glob.glob(os.path.join(ROOT, "results", "**", "eval.json"), recursive=True))
    assert len(paths) > 400
    legacy = []
    for p in paths:
        try:
            records.load_eval(os.path.dirname(p))
        except ValueError as err:
            assert "metrics lack" in str(err) and "/results/recipes/exploration/" in p, err
            legacy.append(p)
    assert len(legacy) <= 10


def test_a_malformed_readouts_json_names_the_file(tmp_path, capsys):
    """4E1: a torn readouts.json is one line naming it."""
    d = write_run(tmp_path / "run", synthetic_eval())
    (tmp_path / "run" / "readouts.json").write_text('{"task": "dyck"')  # torn
    err = one_line(capsys, evaluate.cli([d]))
    assert "malformed readouts.json" in err and os.path.join(d, "readouts.json") in err


def test_an_eval_json_missing_any_key_reading_needs_is_one_line(base, tmp_path, capsys):
    """3T3: an eval.json missing a key that reading needs ended in a traceback. Failed before its fix."""
    full = json.load(open(base / "eval.json"))
    for key in sorted(records.METRICS) + ["K", "lengths"]:
        d = tmp_path / key
        d.mkdir()
        e = json.loads(json.dumps(full))
        (e if key in ("K", "lengths") else e["metrics"]).pop(key)
        (d / "eval.json").write_text(json.dumps(e))
        err = one_line(capsys, run(evaluate.main, "evaluate.py", [str(d)]))
        assert "malformed eval.json" in err and key in err, (key, err)


def test_a_symlinked_seed_is_counted(sweep, tmp_path, capsys):
    """3Sc: a symlinked seed folder was skipped without a word. Failed before its fix."""
    d = tmp_path / "sweep"
    d.mkdir()
    os.symlink(sweep / "seed0", d / "seed0")
    shutil.copytree(sweep / "seed1", d / "seed1")
    os.symlink(d, d / "loop")  # a link back up does not loop or count twice
    assert evaluate.cli([str(d)]) == 0
    assert "| dyck | window w=5 | 2 |" in capsys.readouterr().out  # the old walk skipped the linked seed: 1


def test_an_unreadable_seed_folder_is_refused_not_skipped(tmp_path, monkeypatch, capsys):
    """4E2: a chmod 000 seed folder was skipped: evaluate.py reported 1 seed of 2. Failed before its fix.

    chmod 000 on one of two seeds. Root reads it anyway (the kernel does not check root's permissions), so
    there the kernel's refusal is simulated: os.walk lists folders with os.scandir, which then raises the
    PermissionError an ordinary user gets."""
    sweep = tmp_path / "sweep"
    write_run(sweep / "seed0", synthetic_eval(0))
    locked = write_run(sweep / "seed1", synthetic_eval(1))
    assert evaluate.cli([str(sweep)]) == 0 and "| dyck | window w=5 | 2 |" in capsys.readouterr().out
    os.chmod(locked, 0)
    try:
        if os.geteuid() == 0:
            real = os.scandir

            def scandir(path="."):
                if os.path.realpath(path) == os.path.realpath(locked):
                    raise PermissionError(13, "Permission denied", os.fspath(path))
                return real(path)
            monkeypatch.setattr(os, "scandir", scandir)
        else:
            assert not os.access(locked, os.R_OK)
        err = one_line(capsys, evaluate.cli([str(sweep)]))
        assert locked in err and "Permission denied" in err, err
    finally:
        os.chmod(locked, 0o755)


def test_readouts_refuse_a_non_finite_or_foreign_checkpoint(base, tmp_path, capsys):
    """3Se (and 3Sd): evaluate.py --readouts read a NaN ckpt.pt, or one of another experiment than its eval.json.
    Failed before its fix."""
    d = nan_copy(base, tmp_path / "nan", "model")
    shutil.copy(base / "eval.json", d / "eval.json")
    assert "non-finite" in one_line(capsys, evaluate.cli([str(d), "--readouts", "--samples", "2"]))
    d = copy_run(base, tmp_path / "other")  # eval.json of another experiment than its ckpt.pt
    e = json.load(open(d / "eval.json"))
    e["config"]["w"] = 3
    (d / "eval.json").write_text(json.dumps(e))
    before = snapshot(d)
    err = one_line(capsys, evaluate.cli([str(d), "--readouts", "--samples", "2"]))
    assert "belongs to another run" in err and "w=3" in err and snapshot(d) == before


def test_a_fifo_named_eval_json_is_refused_not_read(tmp_path, capfd, monkeypatch):
    """4E3: evaluate.py blocked forever on a FIFO named eval.json. Failed before its fix."""
    d = tmp_path / "run"
    d.mkdir()
    os.mkfifo(d / "eval.json")
    monkeypatch.chdir(ROOT)
    r = in_process(capfd, evaluate.cli, [str(d)], timeout=120)  # a hang fails at the deadline
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r
    assert str(d / "eval.json") in r.stderr and "not a regular file" in r.stderr


DEEP = "[" * 100000 + "]" * 100000  # nested far past the interpreter's recursion limit


def test_deeply_nested_eval_json_is_one_line(base, tmp_path, capsys):
    """T18: a deeply nested eval.json ended in a RecursionError traceback. Failed before its fix."""
    d = tmp_path / "run"
    shutil.copytree(base, d)
    (d / "eval.json").write_text(DEEP)
    err = one_line(capsys, call(evaluate.cli, [str(d)]))
    assert "eval.json" in err and "nested" in err


def test_deeply_nested_config_metrics_line_and_choice_are_one_line(base, tmp_path, capsys):
    """T19: a deeply nested config.json, metrics.jsonl line or choice.json ended in a RecursionError traceback.
    Failed before its fix."""
    d = tmp_path / "cfg"
    shutil.copytree(base, d)
    (d / "config.json").write_text(DEEP)
    before = snapshot(d)
    err = one_line(capsys, call(train.cli, TINY + ["--resume", "--out_dir", str(d)]))
    assert "config.json" in err and snapshot(d) == before
    d = tmp_path / "log"  # an unfinished run whose metrics.jsonl's first line is nested
    shutil.copytree(base, d)
    os.remove(d / "eval.json")
    ck = torch.load(d / "ckpt.pt", weights_only=True)
    ck["step"], ck["acc_stats"] = 5, {}
    torch.save(ck, d / "ckpt.pt")
    lines = (d / "metrics.jsonl").read_text().splitlines()
    (d / "metrics.jsonl").write_text("\n".join([DEEP] + lines[1:]) + "\n")
    before = snapshot(d)
    err = one_line(capsys, call(train.cli, TINY + ["--resume", "--out_dir", str(d)]))
    assert "metrics.jsonl" in err and "line 1" in err and snapshot(d) == before
    p = tmp_path / "choice.json"
    p.write_text(DEEP)
    with pytest.raises(ValueError, match="choice.json"):
        choice.read(str(p), "dyck")
    with pytest.raises(ValueError, match="too deeply"):
        files.parse_json(DEEP)


# --- the one number check (records.check_numbers; issue 71's C) ---------------------------------------------
RUN = os.path.join(ROOT, "results", "chaos", "dyck", "window", "seed100", "r0")




def setter(*path):
    def f(e, v):
        for k in path[:-1]:
            e = e[k]
        e[path[-1]] = v
    return f


# (what is changed, its value, the words of the refusal: the field and the value)
BAD = {
    "S27 oracle_ood NaN": (setter("metrics", "oracle_ood"), math.nan, "metrics 'oracle_ood' is NaN, not an accuracy in %"),
    "S28 oracle_ood 250": (setter("metrics", "oracle_ood"), 250, "metrics 'oracle_ood' is 250, not an accuracy in % (0..100)"),
    "S28 policy_id -40": (setter("metrics", "policy_id"), -40, "metrics 'policy_id' is -40, not an accuracy in %"),
    "S30 acc NaN": (setter("acc", 0, 0), math.nan, "'acc'[0][0] is NaN, not an accuracy or a share in [0, 1]"),
    "acc 1.5": (setter("acc", 3, 2), 1.5, "'acc'[3][2] is 1.5, not an accuracy or a share in [0, 1]"),
    "hard_acc inf": (setter("hard_acc", 9, 1), math.inf, "'hard_acc'[9][1] is Infinity, not an accuracy"),
    "a shortcut's OOD 120": (lambda e, v: e["metrics"]["shortcuts"]["counting"].__setitem__("ood", v), 120,
                             "metrics 'shortcuts'['counting']['ood'] is 120, not an accuracy in %"),
    "flip_rate 2": (setter("metrics", "flip_rate"), 2, "metrics 'flip_rate' is 2, not an accuracy or a share in [0, 1]"),
    "policy_depth -1": (setter("metrics", "policy_depth", 0), -1, "metrics 'policy_depth'[0] is -1, not a number >= 0"),
    "gap 300": (setter("metrics", "gap"), 300, "metrics 'gap' is 300, not a difference of accuracies in points"),
    "train_time_s NaN": (setter("train_time_s"), math.nan, "'train_time_s' is NaN, not a number >= 0"),
    # in range, but not what the run's own matrices give: the summary is not trusted over them
    "oracle_ood 50": (setter("metrics", "oracle_ood"), 50, "metrics 'oracle_ood' is 50 but the run's own acc gives 78.03"),
    "oracle[8] 1.0": (setter("metrics", "oracle", 8), 1.0, "metrics 'oracle'[8] is 1.0 but the run's own acc gives 0.71"),
    "oracle_hard_ood 99": (setter("metrics", "oracle_hard_ood"), 99, "metrics 'oracle_hard_ood' is 99 but the run's own hard_acc gives 79.17"),
    "gap 5": (setter("metrics", "gap"), 5, "metrics 'gap' is 5 but the run's own oracle_ood - policy_ood gives 0.0868"),
    # T24: the top-level shortcuts the page reads per length
    "T24 shortcuts short": (lambda e, v: e["shortcuts"].__setitem__("counting", v), [0.5], "'shortcuts' must map each "
                            "predictor to one accuracy per test length (13)"),
}


def bad_run(tmp_path, case) -> str:
    d = tmp_path / "runs" / "seed100"
    shutil.copytree(RUN, d)
    e = json.load(open(d / "eval.json"))
    change, value, _ = BAD[case]
    change(e, value)
    (d / "eval.json").write_text(json.dumps(e))  # json writes NaN / Infinity as Python's json reads them
    return str(d)


@pytest.mark.parametrize("case", list(BAD))
def test_a_number_off_its_scale_or_off_its_matrices_is_refused(tmp_path, capsys, case):
    """C / S27, S28, S30 (issue 71): "a number" was any float. oracle_ood NaN was dropped from --against's tests
    unsaid, oracle_ood 250 and policy_id -40 were printed and compared, acc[0][0] NaN made a page JSON.parse
    rejects; and a run's summary was trusted over its own acc / hard_acc. The one reader (load_eval) now checks
    every number: finite, within its scale (% for summaries, [0, 1] for the matrices and per-length accuracies,
    points for differences, >= 0 for depths and times), and the summaries those of the run's matrices; a run
    failing it is refused in one line naming the run, the field and the value, by the table and by --html.
    Failed before its fix: Failed: DID NOT RAISE <class 'ValueError'> (every case)."""
    d = bad_run(tmp_path, case)
    words = BAD[case][2]
    with pytest.raises(ValueError, match="^malformed eval.json at " + d) as err:
        records.load_eval(d)
    assert words in str(err.value), str(err.value)
    err = one_line(capsys, evaluate.cli([d]))
    assert d in err and words in err
    page = tmp_path / "page.html"
    err = one_line(capsys, evaluate.cli([d, "--html", str(page)]))
    assert d in err and words in err and not page.exists()


def test_every_committed_run_keeps_loading():
    """C (issue 71): the number check refuses no run of the committed studies (each of results/chaos, the depth
    study, the ladder: its summaries are those of its own matrices, its raw_metrics within their scales)."""
    runs = records.find_runs([os.path.join(ROOT, "results", d) for d in ("chaos", "depth", "ladder")])
    assert len(runs) > 300
    for r in runs:
        records.load_eval(r)


def test_a_run_that_predates_the_hard_shortcut_gets_it_when_read():
    """A run evaluated before eval.json carried the hard subset's best shortcut printed "no shortcut to compare" beside
    its hard-subset accuracy; load_eval scores the shortcuts on the same fixed test sets, as the run's own evaluation
    does today (a run that carries it keeps its own number)."""
    old = os.path.join(os.path.dirname(__file__), "..", "results", "study", "dyck", "fixed", "seed0")
    assert "shortcut_hard_ood" not in json.load(open(os.path.join(old, "eval.json")))["metrics"]
    m = records.load_eval(old)["metrics"]
    assert m["shortcut_hard_ood"] == pytest.approx(11.6, abs=0.05) and m["shortcut_hard_ood_name"]
    new = glob.glob(os.path.join(os.path.dirname(__file__), "..", "results", "chaos", "dyck", "window", "*", "r0"))[0]
    assert records.load_eval(new)["metrics"]["shortcut_hard_ood"] == json.load(
        open(os.path.join(new, "eval.json")))["metrics"]["shortcut_hard_ood"]
