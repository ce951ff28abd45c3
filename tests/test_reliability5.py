"""Round five (issue 61): bad input is one line naming the value, exit 2, nothing on disk changed; a crash loses at
most the work since the last checkpoint. Each test failed on the code before its fix (docs/reliability.md).

    D6  a full disk cut results/README.md short (tables.splice wrote in place); every writer is one atomic write
    D7  a symlinked .lock: train.py truncated its target; a planted temp-file link was written through
    D8  theory_checks.py / bench.py --json onto a run's own file (eval.json, ckpt.pt)
    S16 --perturb below float32's resolution changed no weight and was called a replicate
    S17 --perturb EPS is part of a row's key: a plain run and a perturbed one are two rows
    S19 study/chaos.py counted whatever run sat in a slot
    S20 NaN EMA weights in ckpt.pt were resumed and read out
    T18-T22 deeply nested JSON, a torn slot, a damaged chaos.json, a row with no converged run: tracebacks
    H2  a FIFO named choice.json hung its readers
    U16-U19 --threads overflow, a sweep stopped by one seed, readouts before the grouping refusal, bench measuring
        nothing, --plot /proc/x
    S21 readouts.json of a run trained again since
"""

import os
import resource
import shutil
import subprocess
import sys

import pytest

import bench
import evaluate
import theory_checks
from lab import checks, cli, files, tables
from study import chaos, exclusions


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def call(fn, argv):
    """A command; a traceback (the bug) becomes the exception's name, so the assertions fail on it."""
    try:
        return fn(argv)
    except Exception as err:  # noqa: BLE001
        return f"raised {type(err).__name__}: {err}"


def one_line(capsys, code, want=2) -> str:
    err = capsys.readouterr().err
    assert code == want and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (code, err)
    return err


def command_line(proc, want=2) -> str:
    err = proc.stderr
    assert proc.returncode == want and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (proc.returncode, err)
    return err


def chaos_copy(tmp_path) -> str:
    """study/chaos.py copied into a scratch repository tmp_path (ROOT is its parent's parent), with a
    results/README.md holding the chaos markers; the project's modules come from PYTHONPATH."""
    os.makedirs(tmp_path / "results")
    shutil.copy(os.path.join(ROOT, "study", "chaos.py"), tmp_path / "results" / "chaos.py")
    (tmp_path / "results" / "README.md").write_text("# notebook\n" + "filler line of the notebook\n" * 3000
                                                    + "<!-- chaos:begin -->\nold\n<!-- chaos:end -->\nend\n")
    return str(tmp_path / "results" / "chaos.py")


def run_chaos(script, limit_bytes=None, args=()):
    def limit():
        if limit_bytes:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=300, preexec_fn=limit,
                          env={**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"})


def committed_slot(row="fixed", k=100, r=0) -> str:
    return os.path.join(ROOT, "results", "chaos", "dyck", row, f"seed{k}", f"r{r}")


# --- D6: one atomic write ---------------------------------------------------------------------------------

def test_d6_a_full_disk_leaves_results_readme_whole(tmp_path):
    script = chaos_copy(tmp_path)
    readme = tmp_path / "results" / "README.md"
    before = readme.read_bytes()
    assert len(before) > 60 * 1024
    err = command_line(run_chaos(script, limit_bytes=40 * 1024), want=1)  # `ulimit -f 40`
    assert "README.md" in err
    assert readme.read_bytes() == before  # unfixed: cut at 40 KiB
    assert not [f for f in os.listdir(readme.parent) if ".tmp" in f]


def test_d6_splice_refuses_missing_markers_in_one_line(tmp_path):
    p = tmp_path / "notes.md"
    p.write_text("no markers\n")
    with pytest.raises(ValueError, match="markers"):
        tables.splice(str(p), "chaos", ["x"])
    assert p.read_text() == "no markers\n"


# --- D8: an output flag onto a run's own file -------------------------------------------------------------

@pytest.mark.parametrize("name", ["eval.json", "ckpt.pt", "config.json"])
def test_d8_json_outputs_never_name_a_runs_own_file(base, name):  # noqa: F811
    target = str(base / name)
    with pytest.raises(ValueError, match="run's own file"):
        theory_checks.validate(cli.parse(theory_checks.Config, ["--json", target]))
    with pytest.raises(ValueError, match="run's own file"):
        bench.parse_args(["--json", target])


# --- S19: a slot of the chaos study holds the declared run ------------------------------------------------

def test_s19_chaos_refuses_a_run_of_another_command_in_a_slot(tmp_path):
    script = chaos_copy(tmp_path)
    slot = tmp_path / "results" / "chaos" / "dyck" / "fixed" / "seed101" / "r0"
    shutil.copytree(committed_slot("fixed", 100, 0), slot)  # seed 100's run in seed 101's slot
    readme = (tmp_path / "results" / "README.md").read_bytes()
    err = command_line(run_chaos(script))
    assert "fixed/seed101/r0" in err and "seed=100" in err
    assert (tmp_path / "results" / "README.md").read_bytes() == readme
    proc = run_chaos(script, args=["--queue"])  # chaos.sh: lanes.sh would skip the slot, so the queue refuses it
    assert "fixed/seed101/r0" in command_line(proc) and proc.stdout == ""
    shutil.rmtree(slot)
    shutil.copytree(committed_slot("window", 101, 0), slot)  # another schedule in the slot
    err = command_line(run_chaos(script))
    assert "fixed/seed101/r0" in err and "schedule='window'" in err


def test_s19_every_committed_chaos_run_is_its_slots_declared_run():
    done = chaos.runs()
    assert len(done) == 150


# --- T18, T19, H2: one bounded JSON reader ----------------------------------------------------------------


def test_h2_a_fifo_named_choice_json_is_refused_not_read(tmp_path):
    folder = tmp_path / "results" / "round2" / "dyck"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "choice.json")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "study", "choice.py"), "dyck"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert "choice.json" in command_line(proc) and "regular file" in proc.stderr
    with pytest.raises(ValueError, match="regular file"):
        files.load_json(str(folder / "choice.json"))


def test_h2_round2_sh_list_refuses_a_fifo_named_choice_json(tmp_path):
    (tmp_path / "results" / "round2" / "dyck").mkdir(parents=True)
    (tmp_path / "study").mkdir()
    for name in ("round2.sh", "lanes.sh", "choice.py"):
        shutil.copy(os.path.join(ROOT, "study", name), tmp_path / "study" / name)
    shutil.copytree(os.path.join(ROOT, "lab"), tmp_path / "lab")  # choice.py reads with lab/cli.py
    os.mkfifo(tmp_path / "results" / "round2" / "dyck" / "choice.json")
    proc = subprocess.run(["bash", str(tmp_path / "study" / "round2.sh"), "--list"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert "choice.json" in command_line(proc) and proc.stdout == ""


# --- T20, T21, T22: the study scripts' one-line error path ------------------------------------------------

def test_t20_a_torn_eval_json_in_a_chaos_slot_is_one_line(tmp_path):
    script = chaos_copy(tmp_path)
    slot = tmp_path / "results" / "chaos" / "dyck" / "fixed" / "seed100" / "r0"
    shutil.copytree(committed_slot(), slot)
    (slot / "eval.json").write_text('{"task": "dyck"')
    assert "fixed/seed100/r0/eval.json" in command_line(run_chaos(script))


def test_t20_every_study_script_runs_its_main_through_cli_run():
    """cli.run turns a ValueError (bad input), an OSError (a full disk) and Ctrl-C into one line."""
    for f in sorted(os.listdir(os.path.join(ROOT, "study"))):
        if f.endswith(".py"):
            text = open(os.path.join(ROOT, "study", f)).read()
            if "__main__" in text:
                main = text.split('if __name__ == "__main__":', 1)[1]
                assert "run(" in main, f"study/{f}: its __main__ does not go through cli.run"


@pytest.mark.parametrize("text, words", [('{"rows": {"fixed": ', "unreadable"),
                                         ('{"rows": {"fixed": {"icc": null}}, "complete_layers": 5, "family": []}', "'icc'"),
                                         ("[1]", "object")])
def test_t21_a_damaged_chaos_json_is_one_line_naming_it(tmp_path, monkeypatch, text, words):
    p = tmp_path / "chaos.json"
    p.write_text(text)
    monkeypatch.setattr(exclusions, "CHAOS", str(p))
    with pytest.raises(ValueError) as err:
        exclusions.chaos_line()
    assert str(p) in str(err.value) and words in str(err.value) and "\n" not in str(err.value)


def test_t21_the_committed_chaos_json_passes_its_check():
    assert exclusions.chaos_record()["rows"]


def test_t22_a_chaos_row_with_no_converged_run_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(chaos, "ROOT", str(tmp_path))
    monkeypatch.setattr(chaos, "CHAOS", str(tmp_path / "results" / "chaos"))

    def fake_run(row, k, r):
        y = 50.0 + k + r
        return {"metrics": {"oracle_hard_ood": y, "val_k_hard_ood": y, "policy_id": 50.0 if row == "rl" else 100.0,
                            "shortcut_hard_ood": 11.6}, "env": {"cpu": "a cpu"}}
    done = {(row, k, r): fake_run(row, k, r) for row in chaos.ROWS for k in chaos.SEEDS for r in chaos.REPS}
    with pytest.raises(ValueError, match="row rl: 0 converged runs"):
        chaos.report(done)


# --- H2's reader for every JSON, U16-U19 ------------------------------------------------------------------


def test_u19_bench_refuses_to_measure_nothing_and_plot_needs_a_real_folder(base, tmp_path, capsys):  # noqa: F811
    with pytest.raises(ValueError, match="--only_stack"):
        bench.parse_args(["--only_stack", "--stacks", ""])
    err = one_line(capsys, call(evaluate.cli, [str(base), "--plot", "/proc/x"]))
    assert "--plot" in err and "/proc" in err
    assert checks.creatable(str(tmp_path)) and os.listdir(tmp_path) == []  # the probe leaves nothing behind
