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

import json
import os
import shutil

import pytest
import torch

import train
from lab import checks, files, rundir

from conftest import TINY, snapshot


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


def unfinished(src, d, change=lambda ck: None, step=5):
    """A copy of the finished run src, cut back to an unfinished one at `step`, its ckpt.pt changed by change(ck)."""
    shutil.copytree(src, d)
    os.remove(d / "eval.json")
    ck = torch.load(d / "ckpt.pt", weights_only=True)
    ck["step"], ck["acc_stats"] = step, {}
    change(ck)
    torch.save(ck, d / "ckpt.pt")
    return d


def refused(capsys, d, argv, *words):
    """--resume of d is bad input: one line naming d's ckpt.pt (and the words), exit 2, d untouched."""
    before = snapshot(d)
    err = one_line(capsys, call(TINY + argv + ["--resume", "--out_dir", str(d)]))
    assert f"{d}/ckpt.pt" in err and all(w in err for w in words), err
    assert snapshot(d) == before
    return err


EMA = ["--ema", "0.9", "--ema_start", "5"]


@pytest.fixture(scope="module")
def ema_run(tmp_path_factory):
    """A finished tiny EMA run whose EMA starts after step 5, where its first checkpoint is written."""
    d = tmp_path_factory.mktemp("ema") / "run"
    assert train.cli(TINY + EMA + ["--out_dir", str(d)]) == 0
    return d


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


# --- 2 ----------------------------------------------------------------------------------------------------

def test_2_a_checkpoint_of_other_dtypes_is_refused_not_cast(base, tmp_path, capsys):
    first = lambda part: lambda ck: next(iter(ck[part].items()))
    def retype(dtype, where="model"):
        def change(ck):
            if where == "model":
                k, v = first("model")(ck)
                ck["model"][k] = v.to(dtype)
            else:
                st = next(iter(ck["optimizer"]["state"].values()))
                st["exp_avg"] = st["exp_avg"].to(dtype)
        return change
    for name, change, word in (("float64", retype(torch.float64), "float64"), ("int64", retype(torch.int64), "int64"),
                               ("moments", retype(torch.float64, "optimizer"), "exp_avg")):
        d = unfinished(base, tmp_path / name, change)
        refused(capsys, d, [], word)


def test_2_an_ema_its_run_does_not_keep_is_refused(base, ema_run, tmp_path, capsys):
    # a run without --ema whose checkpoint holds EMA weights: they would have been evaluated ("weights": "ema")
    d = unfinished(base, tmp_path / "foreign", lambda ck: ck.update(ema={"model": dict(ck["model"]), "schedule": {}}))
    refused(capsys, d, [], "EMA weights", "no --ema")
    # an EMA run whose checkpoint past the EMA's start lacks them, or holds them before it
    d = unfinished(ema_run, tmp_path / "lacks", lambda ck: ck.update(ema=None), step=7)
    refused(capsys, d, EMA, "no EMA weights")
    d = unfinished(ema_run, tmp_path / "early", step=3)  # the step-10 checkpoint's EMA, relabelled step 3
    refused(capsys, d, EMA, "before the EMA starts")
    # an EMA of other shapes (broadcast silently into the weights' shape) or dtypes
    def shrink(ck):
        k = next(iter(ck["ema"]["model"]))
        ck["ema"]["model"][k] = ck["ema"]["model"][k][:1]
    refused(capsys, unfinished(ema_run, tmp_path / "shape", shrink, step=7), EMA, "ema model")


# --- 3 ----------------------------------------------------------------------------------------------------

def test_3_an_ema_checkpoint_at_exactly_ema_start_without_its_ema(ema_run, tmp_path, capsys):
    # the EMA is a copy of the weights after step 5, so the step-5 checkpoint holds it: without it, step 6 crashed
    d = unfinished(ema_run, tmp_path / "at", lambda ck: ck.update(ema=None), step=5)
    refused(capsys, d, EMA, "no EMA weights at step 5")
    d = unfinished(ema_run, tmp_path / "ok", step=5)  # with it, the run continues
    assert call(TINY + EMA + ["--resume", "--out_dir", str(d)]) == 0
    assert json.load(open(d / "eval.json"))["weights"] == "ema"


def test_3_damaged_stat_sums_and_optimizer_settings_name_the_checkpoint(base, tmp_path, capsys):
    def betas(ck):
        ck["optimizer"]["param_groups"][0]["betas"] = "x"
    for name, change, word in (("acc", lambda ck: ck.update(acc_stats={"steps": 1.0, "loss": "x"}), "acc_stats"),
                               ("nosteps", lambda ck: ck.update(acc_stats={"loss": 1.0}), "acc_stats"),
                               ("betas", betas, "betas='x'"),
                               ("maximize", lambda ck: ck["optimizer"]["param_groups"][0].update(maximize=True), "maximize"),
                               ("rng", lambda ck: ck["rng"].update(data=torch.zeros(3, dtype=torch.uint8)), "rng data")):
        refused(capsys, unfinished(base, tmp_path / name, change), [], word)


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


def test_4_a_run_stopped_before_its_first_checkpoint_leaves_nothing_that_blocks(tmp_path, monkeypatch, capsys):
    real = train.lr_at
    monkeypatch.setattr(train, "lr_at", lambda cfg, it: float("nan") if it == 0 else real(cfg, it))  # NaN weights
    d = tmp_path / "run"
    err = one_line(capsys, call(TINY + ["--out_dir", str(d)]), 1)
    assert "non-finite loss nan at step 2" in err and "no checkpoint was written yet" in err and "removed" in err
    assert not [f for f in os.listdir(d) if f in files.RUN_FILES], os.listdir(d)
    assert rundir.plan(train.parse_args(TINY + ["--out_dir", str(d)]), str(d)) == ("fresh", None)  # no --overwrite
    # after a checkpoint there is something to resume: the run's files stay
    monkeypatch.setattr(train, "lr_at", lambda cfg, it: float("nan") if it == 6 else real(cfg, it))
    err = one_line(capsys, call(TINY + ["--out_dir", str(tmp_path / "later")]), 1)
    assert "last good checkpoint: step 5" in err and "removed" not in err
    assert {"config.json", "metrics.jsonl", "ckpt.pt"} <= set(os.listdir(tmp_path / "later"))


# --- 5 ----------------------------------------------------------------------------------------------------

def test_5_an_empty_config_json_is_damaged_not_another_run(base, tmp_path, capsys):
    for name, text in (("config.json", "{}"), ("config.json", "[1, 2]"), ("eval.json", "{}")):
        d = unfinished(base, tmp_path / f"{name}-{len(text)}")
        (d / name).write_text(text)
        before = snapshot(d)
        err = one_line(capsys, call(TINY + ["--resume", "--out_dir", str(d)]))
        assert f"{d}/{name} is empty or damaged" in err and "another run" not in err, err
        assert snapshot(d) == before
    d = unfinished(base, tmp_path / "ckpt-config", lambda ck: ck.update(config={}))
    assert "malformed: config" in refused(capsys, d, [])
    sweep = tmp_path / "sweep"  # a sweep's seed folder too
    (sweep / "seed0").mkdir(parents=True)
    (sweep / "seed0" / "config.json").write_text("{}")
    err = one_line(capsys, call(TINY + ["--seeds", "2", "--seed", "1", "--out_dir", str(sweep)]))
    assert "seed0/config.json is empty or damaged" in err


def test_5_a_non_utf8_metrics_jsonl_is_named_before_config_json_is_rewritten(base, tmp_path, capsys):
    d = unfinished(base, tmp_path / "run")
    lines = (d / "metrics.jsonl").read_bytes().split(b"\n")
    (d / "metrics.jsonl").write_bytes(b"\n".join([b"\xff\xfe{\"step\": 1}"] + lines))
    before = snapshot(d)
    err = one_line(capsys, call(TINY + ["--resume", "--out_dir", str(d)]))
    assert f"{d}/metrics.jsonl, line 1" in err and "UTF-8" in err, err
    assert snapshot(d) == before  # config.json was rewritten before metrics.jsonl was read
    # a torn last line cut inside a character is still dropped
    (d / "metrics.jsonl").write_bytes(b"\n".join(lines[:-1] + [b"{\"step\": 15, \"lo\xe2\x82"]))
    assert all(json.loads(l)["step"] <= 5 for l in rundir.log_lines(str(d / "metrics.jsonl"), 5))


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


# --- 7 ----------------------------------------------------------------------------------------------------

def test_7_every_segment_records_stack_and_static(tmp_path):
    src = tmp_path / "stacked"
    assert train.cli(TINY + ["--stack", "1", "--out_dir", str(src)]) == 0
    d = unfinished(src, tmp_path / "run")
    assert train.cli(TINY + ["--resume", "--out_dir", str(d)]) == 0  # unstacked now: accepted
    for f in ("config.json", "eval.json"):
        segs = json.load(open(d / f))["segments"]
        assert [(s["step"], s.get("stack"), s.get("static")) for s in segs] == [(0, 1, False), (5, 0, False)], f


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
