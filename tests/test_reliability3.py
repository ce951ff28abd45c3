"""Reliability, round three: the red team's cases (issue 34), one or more tests per class, each of which failed
on the code before the fix. Classes: data loss (a-d), silent wrong results (a-h), tracebacks, unclear messages.
docs/reliability.md lists every case with its test."""

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch

import train
from lab import checkpoint, checks

from conftest import ROOT, TINY


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


def test_wrong_g_study_sh_reruns_a_one_seed_row_whose_flags_changed(tmp_path):
    """The row() of study/study.sh with python stubbed: a finished one-seed row still goes to train.py (with
    --resume, which reports it again, or refuses it when the flags changed), not skipped for its eval.json."""
    text = open(os.path.join(ROOT, "study", "study.sh")).read()
    func = text[text.index("row() {"):text.index("main_rows() {")]
    (tmp_path / "results" / "study" / "logs").mkdir(parents=True)
    seed0 = tmp_path / "results" / "study" / "copy" / "ntp" / "seed0"
    seed0.mkdir(parents=True)
    (seed0 / "config.json").write_text("{}")
    (seed0 / "eval.json").write_text("{}")
    script = f'NPROC=1\npython() {{ echo "$@" >> called.txt; }}\n{func}\nrow copy ntp 1 --schedule ntp --c 3\n'
    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    called = (tmp_path / "called.txt").read_text() if (tmp_path / "called.txt").exists() else ""
    assert "--resume" in called and "--c 3" in called


# --- tracebacks -----------------------------------------------------------------------------------------

def test_tracebacks_recipes_py_regenerates_its_table_without_matplotlib(tmp_path, monkeypatch, capsys):
    from study import recipes
    readme = tmp_path / "README.md"
    readme.write_text("<!-- recipes:begin -->\nold\n<!-- recipes:end -->\n")
    monkeypatch.setattr(recipes, "README", str(readme))
    monkeypatch.setattr(recipes, "DIR", str(tmp_path))  # plots, if any were drawn, would land here
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    recipes.main()
    assert "| task | recipe" in readme.read_text()
    err = capsys.readouterr().err
    assert "plots skipped" in err and len(err.strip().splitlines()) == 1


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
