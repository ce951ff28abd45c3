"""The command line of the four commands (lab/cli.py, config.py's flags): bad input, table-driven across train.py,
evaluate.py, bench.py and theory_checks.py: every case exits with code 2, prints one line naming the bad value and no
traceback, and leaves a pre-existing run directory byte-identical; both flag forms and the presets; an output flag
never names a run's own file; Ctrl-C is one line and exit 130, from `import torch` to the training loop; what a
command prints reaches any stdout. A test of a reliability case names it (docs/reliability.md).

Each table row: (name, script, argv, a word the one line must contain). The scripts run in-process
through their entry points (cli.run), which is what `python SCRIPT.py ...` does.
"""

import json
import os
import signal
import subprocess
import sys

import pytest
import torch

import bench
import config
import evaluate
import theory_checks
import train
from lab import checkpoint, checks, cli, files
from lab.cli import run

from conftest import ROOT, TINY, call, one_line, run_cli, snapshot, synthetic_eval, write_run

ENTRY = {"train": train.main, "evaluate": evaluate.main, "bench": bench.main, "theory": theory_checks.command}


def crafted(tmp, base, name, change):
    """A copy of the base run whose ckpt.pt was changed by change(ck)."""
    d = tmp / f"ckpt-{name}"
    d.mkdir()
    for f in ("config.json", "metrics.jsonl"):
        (d / f).write_bytes((base / f).read_bytes())
    ck = torch.load(base / "ckpt.pt", weights_only=True)
    ck["step"] = 5  # not finished: --resume must load it
    change(ck)
    torch.save(ck, d / "ckpt.pt")
    return str(d)


def cases(base, tmp):
    """(name, script, argv, word)."""
    t = lambda *a: TINY + ["--out_dir", str(tmp / "fresh"), *a]
    r = lambda d, *a: TINY + ["--resume", "--out_dir", str(d), *a]
    (tmp / "empty").mkdir()
    (tmp / "afile").write_text("x")
    bad_evals = {"null": "null", "number": "123", "nometrics": json.dumps({**json.load(open(base / "eval.json")), "metrics": {}}),
                 "acc": json.dumps({**json.load(open(base / "eval.json")), "acc": "x"}), "torn": '{"task": "dyck"'}
    for k, text in bad_evals.items():
        (tmp / f"eval-{k}").mkdir()
        (tmp / f"eval-{k}" / "eval.json").write_text(text)
    dirs = {}
    for f in ("metrics.jsonl", "config.json"):  # a run file that is a directory
        d = tmp / f"dir-{f}"
        d.mkdir()
        (d / f).mkdir()
        (d / "ckpt.pt").write_bytes((base / "ckpt.pt").read_bytes())
        dirs[f] = str(d)
    trunc = tmp / "trunc"
    trunc.mkdir()
    (trunc / "ckpt.pt").write_bytes((base / "ckpt.pt").read_bytes()[:2000])
    (tmp / "text").mkdir()
    (tmp / "text" / "ckpt.pt").write_text("not a checkpoint\n")
    (tmp / "foreign").mkdir()
    torch.save({"weights": torch.zeros(2)}, tmp / "foreign" / "ckpt.pt")
    for d in ("trunc", "text", "foreign"):  # a run directory whose checkpoint alone is damaged (S36: config.json kept)
        (tmp / d / "config.json").write_bytes((base / "config.json").read_bytes())
    ck = lambda name, change: crafted(tmp, base, name, change)
    big = str(tmp / "missing" / "x.json")
    return [
        # train.py: names and numbers
        ("unknown task", "train", t("--task", "dyk"), "dyk"),
        ("unknown schedule", "train", t("--schedule", "windw"), "windw"),
        ("unknown preset", "train", t("--preset", "huge"), "huge"),
        ("unknown device", "train", t("--device", "tpu"), "tpu"),
        ("unknown flag", "train", t("--nope", "1"), "--nope"),
        ("abbreviated flag missed by the preset", "train", t("--preset", "paper", "--max_it", "10"), "--max_it"),
        ("not a number", "train", t("--w", "five"), "five"),
        ("w < 0", "train", t("--w", "-1"), "--w -1"),
        ("c < 0", "train", t("--c", "-1"), "--c -1"),
        ("c > T_max", "train", t("--schedule", "fixed", "--c", "1000"), "--c 1000"),
        ("T_max < 1", "train", t("--T_max", "0"), "--T_max 0"),
        ("T_test < T_max", "train", t("--T_test", "10"), "--T_test 10"),
        ("T_test too big for memory", "train", t("--T_test", "1000000"), "GiB"),
        ("batch too big for memory", "train", t("--batch_size", "100000000"), "GiB"),
        ("length a task cannot produce", "train", t("--test_lengths", "0,20"), "n=0"),
        ("test_lengths not integers", "train", t("--test_lengths", "a,b"), "a,b"),
        ("test_lengths empty", "train", t("--test_lengths", ",,"), ",,"),
        ("lr <= 0", "train", t("--lr", "0"), "--lr 0"),
        ("lr NaN", "train", t("--lr", "nan"), "--lr nan"),
        ("lr inf", "train", t("--lr", "inf"), "--lr inf"),
        ("min_lr negative", "train", t("--min_lr", "-1"), "--min_lr -1"),
        ("min_lr NaN", "train", t("--min_lr", "nan"), "--min_lr nan"),
        ("weight_decay negative", "train", t("--weight_decay", "-1"), "--weight_decay -1"),
        ("beta1 > 1", "train", t("--beta1", "1.5"), "--beta1 1.5"),
        ("beta2 = 1", "train", t("--beta2", "1"), "--beta2 1"),
        ("dropout 2", "train", t("--dropout", "2"), "--dropout 2"),
        ("dropout NaN", "train", t("--dropout", "nan"), "--dropout nan"),
        ("grad_clip NaN", "train", t("--grad_clip", "nan"), "--grad_clip nan"),
        ("batch_size 0", "train", t("--batch_size", "0"), "--batch_size 0"),
        ("eval_batch_size 0", "train", t("--eval_batch_size", "0"), "--eval_batch_size 0"),
        ("max_iters 0", "train", t("--max_iters", "0"), "--max_iters 0"),
        ("n_min > n_max", "train", t("--n_min", "9", "--n_max", "3"), "n_min"),
        ("seeds 0", "train", t("--seeds", "0"), "--seeds 0"),
        ("seed past 64 bits", "train", t("--seed", str(2 ** 64)), str(2 ** 64)),
        ("negative seed", "train", t("--seed", "-3"), "--seed -3"),
        ("init_seed -2", "train", t("--init_seed", "-2"), "--init_seed -2"),
        ("eval_samples 0", "train", t("--eval_samples", "0"), "--eval_samples 0"),
        ("log_interval 0", "train", t("--log_interval", "0"), "--log_interval 0"),
        ("d_model % n_head", "train", t("--d_model", "30", "--n_head", "4"), "--d_model 30"),
        ("rl lambda_ent < 0", "train", t("--schedule", "rl", "--lambda_ent", "-1"), "--lambda_ent -1"),
        ("ponder alpha 0", "train", t("--schedule", "ponder", "--alpha", "0"), "--alpha 0"),
        ("unique_set V 0", "train", t("--task", "unique_set", "--V", "0"), "V=0"),
        ("resume and overwrite", "train", t("--resume", "--overwrite"), "--overwrite"),
        ("out_dir cannot be written", "train", TINY + ["--out_dir", str(tmp / "afile" / "sub")], "cannot write"),
        # train.py --resume: checkpoints and run files
        ("resume: nothing there", "train", r(tmp / "empty"), "no checkpoint"),
        ("resume: truncated ckpt.pt", "train", r(trunc), "not a readable checkpoint"),
        ("resume: text file as ckpt.pt", "train", r(tmp / "text"), "not a readable checkpoint"),
        ("resume: a torch file that is no checkpoint", "train", r(tmp / "foreign"), "not a train.py checkpoint"),
        ("resume: other task", "train", r(base, "--task", "parity_prefix"), "task='dyck'"),
        ("resume: other model size", "train", r(base, "--d_model", "32"), "d_model=16"),
        ("resume: other w, T_max and lr", "train", r(base, "--w", "3", "--T_max", "12", "--lr", "0.1"), "w=5"),
        ("resume: fewer steps", "train", r(base, "--max_iters", "5"), "max_iters=10"),
        ("resume: empty model", "train", r(ck("empty", lambda c: c.update(model={}))), "does not fit"),
        ("resume: wrong shapes", "train", r(ck("shapes", lambda c: c["model"].update(
            {k: torch.zeros(3) for k in c["model"]}))), "does not fit"),
        ("resume: no rng", "train", r(ck("norng", lambda c: c.pop("rng"))), "rng"),
        ("resume: no schedule", "train", r(ck("nosched", lambda c: c.pop("schedule"))), "schedule"),
        ("resume: config is a list", "train", r(ck("cfglist", lambda c: c.update(config=[1, 2]))), "config"),
        ("resume: step is a string", "train", r(ck("stepstr", lambda c: c.update(step="5"))), "step"),
        ("resume: metrics.jsonl is a directory", "train", r(dirs["metrics.jsonl"]), "metrics.jsonl"),
        ("resume: config.json is a directory", "train", r(dirs["config.json"]), "config.json"),
        # a flag the run does not read (config.check_unread)
        ("train: a knob matched does not read", "train", ["--schedule", "matched", "--w", "3"],
         "--w 3: schedule matched does not read it; its knobs: T_max, active_set, bptt_k, loss_weight"),
        ("train: rl's knob with window", "train", ["--lambda_ent", "0.1"], "--lambda_ent 0.1: schedule window"),
        ("train: a task knob dyck does not read", "train", ["--V=3"], "--V 3: task dyck does not read it; its knobs: none"),
        ("train: ntp has no active set", "train", ["--task", "copy", "--schedule", "ntp", "--no-active_set"],
         "--active_set False: schedule ntp does not read it; its knobs: c, ntp_greedy"),
        # evaluate.py
        ("evaluate: no arguments", "evaluate", [], "no run directories"),
        ("evaluate: unknown flag", "evaluate", [str(base), "--nope"], "--nope"),
        ("evaluate: no runs", "evaluate", [str(tmp / "empty")], "no runs"),
        ("evaluate: not a directory", "evaluate", [str(tmp / "nowhere")], "nowhere"),
        *[(f"evaluate: eval.json {k}", "evaluate", [str(tmp / f"eval-{k}")], "malformed eval.json") for k in bad_evals],
        ("evaluate: readouts on cuda", "evaluate", [str(base), "--readouts", "--device", "cuda"], "--device cuda"),
        ("evaluate: readouts on nosuch", "evaluate", [str(base), "--readouts", "--device", "nosuch"], "nosuch"),
        ("evaluate: tol NaN", "evaluate", [str(base), "--tol", "nan"], "--tol nan"),
        ("evaluate: unknown gate", "evaluate", [str(base), "--fit_gate", "tree"], "tree"),
        ("evaluate: --out in a missing folder", "evaluate", [str(base), "--out", str(tmp / "missing" / "t")], "missing"),
        # bench.py and theory_checks.py
        ("bench: json in a missing folder", "bench", ["--quick", "--json", big], "missing"),
        ("bench: d_model % n_head", "bench", ["--quick", "--d_model", "30", "--n_head", "4"], "--d_model 30"),
        ("bench: w < 0", "bench", ["--quick", "--w", "-1"], "--w -1"),
        ("bench: test_lengths empty", "bench", ["--quick", "--test_lengths", ",,"], ",,"),
        ("theory: json in a missing folder", "theory", ["--json", big], "missing"),
        ("theory: d_model % n_head", "theory", ["--d_model", "30", "--n_head", "4"], "--d_model 30"),
        ("theory: w < 0", "theory", ["--w", "-1"], "--w -1"),
        ("theory: consistency_const NaN", "theory", ["--consistency_const", "nan"], "--consistency_const nan"),
        ("theory: unknown check", "theory", ["--checks", "9z"], "9z"),
    ]


def test_bad_inputs_one_line_exit_2_files_untouched(base, tmp_path, capsys):
    table = cases(base, tmp_path)
    assert len(table) >= 60
    capsys.readouterr()
    for name, script, argv, word in table:
        before = snapshot(tmp_path), snapshot(base)
        try:
            code = run(ENTRY[script], f"{script}.py", argv)
        except SystemExit as e:  # argparse's own errors (unknown choice, not a number, unknown flag)
            code = e.code
        out = capsys.readouterr()
        lines = out.err.strip().splitlines()
        assert code == 2, (name, code, out.err[-500:])
        assert len(lines) == 1 and "Traceback" not in out.err, (name, out.err)
        assert word in lines[0], (name, lines[0])
        assert (snapshot(tmp_path), snapshot(base)) == before, name


@pytest.mark.smoke
def test_a_knob_at_its_default_or_set_by_a_recipe_is_not_refused():
    assert train.parse_args(["--schedule", "matched", "--w", "5"]).w == 5  # the default: harmless
    assert train.parse_args(["--task", "unique_set"]).V == 32  # the recipe sets V, the user did not
    assert train.parse_args(["--task", "unique_set", "--V", "8", "--schedule", "rl", "--lambda_ent", "0.01"]).V == 8
    assert train.parse_args(["--schedule", "fixed_window", "--c", "10", "--w", "2"]).c == 10


def test_bad_input_from_the_shell():
    r = subprocess.run([sys.executable, "train.py", "--lr", "-1"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--lr -1" in r.stderr


# --- flags: both forms, presets, output files, sizes, all checked before any work ---------------------------------

@pytest.mark.smoke
def test_both_flag_forms_parse():
    a = train.parse_args(["--w", "3", "--lr", "1", "--task", "copy", "--no-inject"])
    b = train.parse_args(["--w=3", "--lr=1", "--task=copy", "--no-inject"])
    assert a == b and a.w == 3 and a.lr == 1.0 and isinstance(a.lr, float) and a.inject is False


@pytest.mark.smoke
def test_preset_paper_and_explicit_flags_win():
    c = train.parse_args(["--preset", "paper", "--lr", "5e-4"])
    assert (c.d_model, c.n_head, c.max_iters, c.lr) == (256, 8, 100_000, 5e-4)
    assert train.parse_args([]) == config.Config()  # bare `python train.py` is the default job


@pytest.mark.parametrize("flag,value", [("--task", "dyk"), ("--schedule", "windw")])
def test_unknown_name_is_one_line_error(flag, value):
    r = run_cli("train.py", flag, value)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and value in lines[0] and "Traceback" not in r.stderr
    assert ("dyck" if flag == "--task" else "window") in lines[0]  # lists the valid names


def test_validation_one_line():
    r = run_cli("train.py", "--d_model", "30", "--n_head", "4")
    assert r.returncode == 2 and "d_model" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["eval.json", "ckpt.pt", "config.json"])
def test_json_outputs_never_name_a_runs_own_file(base, name):
    """D8: theory_checks.py --json RUN/eval.json and bench.py --json RUN/ckpt.pt replaced a finished run's file.
    Failed before its fix."""
    target = str(base / name)
    with pytest.raises(ValueError, match="run's own file"):
        theory_checks.validate(cli.parse(theory_checks.Config, ["--json", target]))
    with pytest.raises(ValueError, match="run's own file"):
        bench.parse_args(["--json", target])


def test_bench_refuses_to_measure_nothing_and_plot_needs_a_real_folder(base, tmp_path, capsys):
    """U19: bench.py --only_stack --stacks '' measured nothing and exited 0; evaluate.py --plot /proc/x passed the
    folder check and failed after the work. Failed before its fix."""
    with pytest.raises(ValueError, match="--only_stack"):
        bench.parse_args(["--only_stack", "--stacks", ""])
    err = one_line(capsys, call(evaluate.cli, [str(base), "--plot", "/proc/x"]))
    assert "--plot" in err and "/proc" in err
    assert files.creatable(str(tmp_path)) and os.listdir(tmp_path) == []  # the probe leaves nothing behind


def test_readouts_with_too_many_samples_are_refused_before_any_work(tmp_path, capsys):
    """4E4: evaluate.py --readouts --samples 100000000 had no memory check. Failed before its fix.

    No ckpt.pt here: the code before the fix went on to load_run and said "no checkpoint" (with a checkpoint
    it would have drawn 3 x 10^8 samples per length), the memory check comes first."""
    d = write_run(tmp_path / "run", synthetic_eval())
    before = snapshot(tmp_path)
    err = one_line(capsys, evaluate.cli([d, "--readouts", "--samples", "100000000"]))
    assert "--samples 100000000" in err and "GiB" in err and d in err, err
    assert snapshot(tmp_path) == before
    err = one_line(capsys, evaluate.cli([d, "--readouts", "--fit_gate", "linear", "--samples", "100"]))
    assert "no checkpoint" in err  # a sensible size passes the estimate


# --- Ctrl-C: one line and exit 130, from `import torch` to the training loop -------------------------------------

def test_ctrl_c_is_one_line_exit_130_and_resume_continues(tmp_path, monkeypatch, capsys):
    d = tmp_path / "run"
    real = train.train_batch
    calls = {"n": 0}

    def interrupted(*a):
        calls["n"] += 1
        if calls["n"] == 8:
            raise KeyboardInterrupt
        return real(*a)

    monkeypatch.setattr(train, "train_batch", interrupted)
    assert train.cli(TINY + ["--out_dir", str(d)]) == 130
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--resume" in err and "after step 7" in err and "step 5 at" in err
    monkeypatch.setattr(train, "train_batch", real)
    assert train.cli(TINY + ["--out_dir", str(d), "--resume"]) == 0


def test_sigint_from_the_shell(tmp_path):
    # a suite started in the background (`cmd &`, nohup) inherits SIGINT ignored, and Python keeps an ignored
    # SIGINT ignored: give the child the default disposition, as a terminal's foreground job has
    p = subprocess.Popen([sys.executable, "train.py", *TINY, "--max_iters", "100000", "--out_dir", str(tmp_path / "r")],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"},
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    log = tmp_path / "r" / "metrics.jsonl"
    for _ in range(6000):  # wait for the first log lines, then Ctrl-C
        if log.exists() and log.stat().st_size > 0:
            break
        if p.poll() is not None:
            break
        __import__("time").sleep(0.01)
    p.send_signal(signal.SIGINT)
    err = p.communicate(timeout=120)[1]
    assert p.returncode == 130 and len(err.strip().splitlines()) == 1 and "interrupted" in err, err[-2000:]


def test_ctrl_c_during_start_up_and_pressed_twice(tmp_path, monkeypatch, capsys):
    """3T4: a Ctrl-C during start-up (outside the training loop it printed "train.py: " and nothing more), and a
    Ctrl-C pressed twice. Failed before its fix."""
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


SIGINT_DEFAULT = dict(preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal's foreground job


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
def test_ctrl_c_while_torch_is_imported_is_one_line_and_exit_130(script, argv, pending):
    """4E5: a Ctrl-C during import torch printed a traceback. Failed before its fix."""
    if pending and "ctrl_c_at_start(__name__" not in open(os.path.join(ROOT, script)).read():
        pytest.skip(f"PENDING: {script} does not call lab.cli.ctrl_c_at_start before importing torch yet")
    r = subprocess.run([sys.executable, "-c", CTRL_C_IN_IMPORT, script, *argv], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, **SIGINT_DEFAULT)
    assert r.returncode == 130 and r.stderr == f"{script}: interrupted\n" and not r.stdout, r


@pytest.mark.smoke
def test_the_start_handler_is_only_for_the_command_and_run_hands_ctrl_c_back(monkeypatch):
    """4E5, the handler's limits.

    Imported (a test, bench.py importing train.py) nothing changes; run() restores Python's KeyboardInterrupt
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


# --- what a command prints: paths any stdout can encode, one rank's line --------------------------------------------

def test_a_run_path_stdout_cannot_encode_is_printed_escaped(tmp_path):
    """4E6: PYTHONIOENCODING=ascii with a non-ASCII run path was reported as bad input. Failed before its fix."""
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


@pytest.mark.smoke
def test_under_torchrun_bad_input_is_printed_once(monkeypatch, capsys):
    """3T5: under torchrun every rank printed the bad-input line (now rank 0 alone). Failed before its fix."""
    for rank, lines in (("1", 0), ("0", 1)):
        monkeypatch.setenv("RANK", rank)
        assert train.cli(["--lr", "-1"]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == lines, rank
