"""Bad input, table-driven, across the four scripts: every case exits with code 2 (130 for Ctrl-C), prints
one line naming the bad value and no traceback, and leaves a pre-existing run directory byte-identical.
Then the data-loss cases: a run is never wiped, mixed up or relabelled.

Each table row: (name, script, argv, a word the one line must contain). The scripts run in-process
through their entry points (cli.run), which is what `python SCRIPT.py ...` does.
"""

import json
import os
import signal
import subprocess
import sys

import torch

import bench
import evaluate
import theory_checks
import train
from lab.cli import run

from conftest import ROOT, TINY, snapshot

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


def test_a_knob_at_its_default_or_set_by_a_recipe_is_not_refused():
    assert train.parse_args(["--schedule", "matched", "--w", "5"]).w == 5  # the default: harmless
    assert train.parse_args(["--task", "unique_set"]).V == 32  # the recipe sets V, the user did not
    assert train.parse_args(["--task", "unique_set", "--V", "8", "--schedule", "rl", "--lambda_ent", "0.01"]).V == 8
    assert train.parse_args(["--schedule", "fixed_window", "--c", "10", "--w", "2"]).c == 10


def test_bad_input_from_the_shell():
    r = subprocess.run([sys.executable, "train.py", "--lr", "-1"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--lr -1" in r.stderr


# --- data loss and mix-ups ------------------------------------------------------------------------------

def copy_run(base, d):
    d.mkdir(parents=True)
    for f in os.listdir(base):
        (d / f).write_bytes((base / f).read_bytes())
    return d


# --- failures during a run ------------------------------------------------------------------------------


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
