"""Reliability of the study scripts (results/*.sh, study/study.py, ladder.py, threads.py): a damaged or
hand-edited results/round2/TASK/choice.json, a bad THREADS, a seed in two places and a malformed eval.json each
get one line on stderr and exit 2, with nothing trained or written; a queue runs with its declared thread count
whatever the caller exports. Every script runs on a temporary copy of the code and made-up or copied runs, never
on the committed results (the queues are stood in for by a fake `python`)."""

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from study import ladder, study

ROOT = study.ROOT
# a choice as study/ladder.py records it; reuse relative to the repository root (here: a temporary tree)
GOOD = {"task": "copy", "rung": "r2", "first": 0, "seeds": 16, "why": "a test", "flags": "--max_iters 4500 --d_model 64",
        "reuse": {"fixed": "old/fixed"}, "chosen_from": "a test"}
CHOICE = os.path.join("results", "round2", "copy", "choice.json")
without = lambda key: lambda c: {k: v for k, v in c.items() if k != key}
BAD = {  # hand edits and damage: each must be refused by every reader of choice.json
    "flags smuggled into seeds": lambda c: c | {"seeds": "16 --lr 10"},
    "seeds not the declared 16": lambda c: c | {"seeds": 15},
    "seeds a float": lambda c: c | {"seeds": 16.0},
    "first a string": lambda c: c | {"first": "0"},
    "first a boolean": lambda c: c | {"first": False},
    "first not the rule's": lambda c: c | {"first": 3},
    "an extra flag": lambda c: c | {"flags": "--max_iters 4500 --d_model 64 --lr 10"},
    "flags a list": lambda c: c | {"flags": ["--max_iters", "4500", "--d_model", "64"]},
    "an EMA decay above 1": lambda c: c | {"flags": "--max_iters 4500 --d_model 64 --ema 1.5"},
    "reuse a list": lambda c: c | {"reuse": ["old/fixed"]},
    "reuse an absolute path": lambda c: c | {"reuse": {"fixed": "/tmp"}},
    "reuse through ..": lambda c: c | {"reuse": {"fixed": "old/../old/fixed"}},
    "reuse a missing folder": lambda c: c | {"reuse": {"fixed": "old/matched"}},
    "reuse a row that is not a main row": lambda c: c | {"reuse": {"ponder": "old/fixed"}},
    "reuse with flags in its path": lambda c: c | {"reuse": {"fixed": "old/fixed --lr 10"}},
    "reuse a number": lambda c: c | {"reuse": {"fixed": 3}},
    "an unknown key": lambda c: c | {"seed": 16},
    "no flags": without("flags"),
    "another task's": lambda c: c | {"task": "dyck"},
    "not an object": lambda c: [c],
    "truncated": None,  # invalid JSON: the first half of a good file
}


def choice_text(case: str) -> str:
    good = json.dumps(GOOD, indent=1) + "\n"
    return good[:len(good) // 2] if BAD[case] is None else json.dumps(BAD[case](dict(GOOD)), indent=1) + "\n"


def scripts(tmp_path, *names):
    """A bare tree with copies of some results/ scripts, round two's folder and a reuse folder old/fixed."""
    (tmp_path / "results" / "round2" / "copy").mkdir(parents=True)
    (tmp_path / "study").mkdir()
    (tmp_path / "old" / "fixed").mkdir(parents=True)
    for name in names:
        shutil.copy(os.path.join(ROOT, "study", name), tmp_path / "study" / name)
    (tmp_path / "lab").mkdir()
    for name in ("__init__.py", "cli.py", "files.py"):  # study/choice.py reads choice.json with lab/files.py's JSON reader
        shutil.copy(os.path.join(ROOT, "lab", name), tmp_path / "lab" / name)
    return tmp_path


def code_tree(tmp_path):
    """A copy of the repository's code (no run data, no tests): the table scripts run on it, with ROOT there."""
    skip = {".git", "tests", "docs", "__pycache__", ".pytest_cache"}

    def ignore(d, names):
        top = os.path.realpath(d) == os.path.realpath(os.path.join(ROOT, "results"))
        return [n for n in names if n in skip or (top and os.path.isdir(os.path.join(d, n)))]
    dst = tmp_path / "repo"
    shutil.copytree(ROOT, dst, ignore=ignore)
    return dst


def copy_r1(tree, task="copy"):
    """Rung r1 of the ladder (the study's first round, seeds 0-7 of fixed, matched, window): copies of the
    committed eval.json files."""
    for row in ladder.ROWS:
        for k in range(ladder.SEEDS):
            d = tree / "results" / "study" / task / row / f"seed{k}"
            d.mkdir(parents=True)
            shutil.copy(os.path.join(ROOT, "results", "study", task, row, f"seed{k}", "eval.json"), d / "eval.json")


def fake_python(tmp_path):
    """A `python` first on PATH that stands in for train.py (records its command, writes eval.json) and for the
    table scripts (records them); anything else (study/choice.py, `python -`) goes to the real interpreter."""
    ran = tmp_path / "ran.txt"
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(f'#!/usr/bin/env bash\ncase "$1" in\n'
                    f'  train.py) echo "$*" >> "{ran}"; while [ "$1" != --out_dir ]; do shift; done\n'
                    f'    mkdir -p "$2"; echo "{{}}" > "$2/eval.json"; exit 0 ;;\n'
                    f'  study/choice.py) ;;\n'  # round2.sh's check of choice.json: the real one
                    f'  study/*.py) echo "$*" >> "{ran}"; exit 0 ;;\n'
                    f'esac\nexec "{sys.executable}" "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return ran


def env(tmp_path=None, **extra):
    """The caller's environment without the variables the scripts read, plus extra (and the fake python)."""
    out = {k: v for k, v in os.environ.items() if k not in ("THREADS", "LANE", "LANES", "NPROC", "STAGE")}
    if tmp_path is not None:
        out["PATH"] = f"{tmp_path / 'bin'}:{out['PATH']}"
    return out | extra


def bash(cwd, *args, **kw):
    return subprocess.run(["bash", *args], cwd=cwd, capture_output=True, text=True, **kw)


def one_line(r, *words):
    """Exit 2 with one line on stderr that holds every word, and no traceback."""
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, (r.returncode, err)
    assert all(w in err for w in words), err
    return err


def files(tree) -> dict:
    """Every file below tree and its bytes (the code copied is left out: only what a script could write)."""
    return {p: open(os.path.join(d, p), "rb").read() for d, _, names in os.walk(tree) for p in names
            if "__pycache__" not in d}


# --- case 1 (and 3): a hand-edited or damaged choice.json is refused by every reader, in one line -------------

@pytest.mark.parametrize("case", BAD)
def test_round2_sh_refuses_a_bad_choice_in_one_line_and_trains_nothing(tmp_path, case):
    tree = scripts(tmp_path, "round2.sh", "lanes.sh", "choice.py")
    (tree / CHOICE).write_text(choice_text(case))
    r = bash(tree, "study/round2.sh", "--list", env=env())
    one_line(r, CHOICE)
    assert r.stdout == ""
    ran = fake_python(tmp_path)
    one_line(bash(tree, "study/round2.sh", env=env(tmp_path)), CHOICE)
    assert not ran.exists() and not (tree / "results" / "round2" / "logs").exists()


@pytest.mark.parametrize("case", BAD)
def test_study_and_ladder_refuse_the_same_bad_choices(tmp_path, monkeypatch, case):
    tree = scripts(tmp_path)
    (tree / CHOICE).write_text(choice_text(case))
    monkeypatch.setattr(study, "ROOT", str(tree))
    monkeypatch.setattr(study, "ROUND2", str(tree / "results" / "round2"))
    with pytest.raises(ValueError, match="choice.json: "):
        study.round_two("copy")
    with pytest.raises(ValueError, match="choice.json: "):  # the ladder's section names the recorded rung
        ladder.part_c("copy", {}, [], [], None)


def test_a_choice_as_the_ladder_records_it_passes_every_reader(tmp_path, monkeypatch):
    tree = scripts(tmp_path, "round2.sh", "lanes.sh", "choice.py")
    (tree / CHOICE).write_text(json.dumps(GOOD))
    r = bash(tree, "study/round2.sh", "--list", env=env())
    assert r.returncode == 0 and r.stderr == "", r.stderr
    runs = [line.split(maxsplit=3) for line in r.stdout.splitlines()]
    assert len(runs) == 16 * len(study.MAIN) and all(flags.endswith(" " + GOOD["flags"]) for *_, flags in runs)
    monkeypatch.setattr(study, "ROOT", str(tree))
    monkeypatch.setattr(study, "ROUND2", str(tree / "results" / "round2"))
    assert study.round_two("copy") == (GOOD, {})
    assert "Part C's rung: r2 (a test; recorded in results/round2/copy/choice.json" in ladder.part_c("copy", {}, [], [], None)
    ema = GOOD | {"flags": "--max_iters 2400 --d_model 64 --ema 0.999"}  # rE's flags, as record() writes them
    (tree / CHOICE).write_text(json.dumps(ema))
    assert study.round_two("copy")[0] == ema
    assert bash(tree, "study/round2.sh", "--list", env=env()).stdout.splitlines()[0].endswith(" --ema 0.999")


def test_the_committed_choices_pass_and_the_rules_agree_with_the_ladder():
    for task in ("copy", "dyck"):
        assert study.read_choice(task)["task"] == task  # reads only
    from study import choice
    assert choice.FIRST == (0, ladder.SEEDS) and set(choice.RUNGS) == set(ladder.RUNGS)
    assert choice.SEEDS == len(study.declared("fixed")) and choice.MAIN == study.MAIN


def test_ladder_writes_its_choice_atomically(tmp_path, monkeypatch):
    monkeypatch.setattr(study, "ROUND2", str(tmp_path))
    flat = {"fixed": 3.0, "matched": 3.0, "window": 3.0}
    from test_results import ladder_rungs
    rungs = ladder_rungs({"r1": flat, "r2": flat})
    with pytest.raises(TypeError):  # a failure while writing (here: a `why` JSON cannot hold) leaves no half file
        ladder.record("copy", rungs, "r2", 0, object())
    assert not (tmp_path / "copy" / "choice.json").exists() and os.listdir(tmp_path / "copy") == []
    ladder.record("copy", rungs, "r2", 0, "a test")
    assert json.load(open(tmp_path / "copy" / "choice.json"))["why"] == "a test"


def threads_tree(tmp_path):
    """A code tree for study/threads.sh: round two's choice.json for copy and dyck, the old fixed row."""
    tree = code_tree(tmp_path)
    (tree / "old" / "fixed").mkdir(parents=True)
    for task in ("copy", "dyck"):
        (tree / "results" / "round2" / task).mkdir(parents=True)
        (tree / "results" / "round2" / task / "choice.json").write_text(json.dumps(GOOD | {"task": task}))
    return tree


def test_threads_sh_refuses_a_bad_choice_before_training_anything(tmp_path):
    tree = threads_tree(tmp_path)
    (tree / "results" / "round2" / "dyck" / "choice.json").write_text(json.dumps(GOOD | {"task": "dyck", "flags": "--lr 10"}))
    ran = fake_python(tmp_path)
    one_line(bash(tree, "study/threads.sh", env=env(tmp_path)), os.path.join("results", "round2", "dyck", "choice.json"))
    assert not ran.exists() and not (tree / "results" / "threads").exists()  # copy's runs did not start either


# --- case 2: the declared thread count wins over the caller's THREADS ----------------------------------------

@pytest.mark.parametrize("script", ["round2.sh", "ladder.sh"])
def test_a_queue_trains_with_its_declared_one_thread_whatever_the_caller_exports(tmp_path, script):
    tree = scripts(tmp_path, script, "lanes.sh", "choice.py")
    (tree / CHOICE).write_text(json.dumps(GOOD))
    (tree / "results" / "ladder.py").write_text("")  # ladder.sh runs it if present: the fake python stands in
    ran = fake_python(tmp_path)
    r = bash(tree, f"study/{script}", env=env(tmp_path, THREADS="2"))
    assert r.returncode == 0, r.stderr
    runs = [line for line in ran.read_text().splitlines() if line.startswith("train.py")]
    assert len(runs) == (16 * len(study.MAIN) if script == "round2.sh" else 144)
    assert all(" --threads 1 " in line for line in runs), runs[0]


def test_threads_sh_keeps_its_two_threads(tmp_path):
    tree = threads_tree(tmp_path)
    ran = fake_python(tmp_path)
    r = bash(tree, "study/threads.sh", env=env(tmp_path, THREADS="1"))
    assert r.returncode == 0, r.stderr
    runs = [line for line in ran.read_text().splitlines() if line.startswith("train.py")]
    assert len(runs) == 6 and all(" --threads 2 " in line and line.endswith(GOOD["flags"]) for line in runs), runs


@pytest.mark.parametrize("threads", ["0", "two", "-1", "1 --lr 10"])
def test_lanes_sh_refuses_a_bad_thread_count(tmp_path, threads):
    tree = scripts(tmp_path, "lanes.sh")
    ran = fake_python(tmp_path)
    one_line(bash(tree, "study/lanes.sh", "logs", input="results/x/t/r/seed0 t 0 --x\n",
                  env=env(tmp_path, THREADS=threads)), f"THREADS={threads}")
    assert not ran.exists() and not (tree / "logs").exists()


# --- case 3: a truncated choice.json stops the table scripts in one line --------------------------------------

@pytest.mark.parametrize("script", ["study.sh", "ladder.sh"])
def test_the_tables_report_a_damaged_choice_in_one_line_and_write_nothing(tmp_path, script):
    tree = code_tree(tmp_path)
    copy_r1(tree)
    (tree / CHOICE).parent.mkdir(parents=True)
    (tree / CHOICE).write_text(choice_text("truncated"))
    before = files(tree)
    one_line(bash(tree, f"study/{script}", "--tables-only", env=env()), CHOICE, "not valid JSON")
    assert files(tree) == before


# --- case 4: a seed in round two's folder and in its reuse folder: one line -----------------------------------

@pytest.mark.parametrize("command", [["bash", "study/study.sh", "--tables-only"], ["python", "study/threads.py"]])
def test_a_seed_trained_twice_is_one_line(tmp_path, command):
    tree = code_tree(tmp_path)
    (tree / "results" / "study" / "copy").mkdir(parents=True)
    run = os.path.join(ROOT, "results", "study", "copy", "fixed", "seed3", "eval.json")
    for d in ("results/round2/copy/fixed/seed3", "results/old/fixed/seed3"):
        (tree / d).mkdir(parents=True)
        shutil.copy(run, tree / d / "eval.json")
    (tree / CHOICE).write_text(json.dumps(GOOD | {"flags": "--max_iters 1500 --d_model 64",
                                                  "reuse": {"fixed": "results/old/fixed"}}))
    before = files(tree)
    r = subprocess.run([sys.executable if command[0] == "python" else "bash", *command[1:]], cwd=tree,
                       capture_output=True, text=True, env=env())
    one_line(r, "seed 3 appears 2 times")
    assert files(tree) == before


# --- case 5: a malformed eval.json stops the table scripts in one line ----------------------------------------

DAMAGE = {"a list for its config": lambda e: e | {"config": [e["config"]]},
          "a null for metrics.oracle": lambda e: e | {"metrics": e["metrics"] | {"oracle": None}},
          "a string for lengths": lambda e: e | {"lengths": "4 7 10"}}


@pytest.mark.parametrize("script,damage", [("study.sh", d) for d in DAMAGE] + [("ladder.sh", "a list for its config")])
def test_a_malformed_eval_json_stops_the_tables_in_one_line(tmp_path, script, damage):
    tree = code_tree(tmp_path)
    copy_r1(tree)
    bad = tree / ("results/study/copy/fixed/seed0" if script == "study.sh" else "results/ladder/copy/r2/fixed/seed0")
    bad.mkdir(parents=True, exist_ok=True)
    e = json.load(open(os.path.join(ROOT, "results", "study", "copy", "fixed", "seed0", "eval.json")))
    (bad / "eval.json").write_text(json.dumps(DAMAGE[damage](e)))
    before = files(tree)
    one_line(bash(tree, f"study/{script}", "--tables-only", env=env()), os.path.relpath(bad / "eval.json", tree))
    assert files(tree) == before
