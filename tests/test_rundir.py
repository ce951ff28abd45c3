"""A run directory while train.py trains it (lab/rundir.py, lab/checkpoint.py, lab/files.py): one process per run
directory (the OS lock), a folder that holds one run or one sweep and is never wiped or mixed, a resume that refuses
a relabelled run and every damaged or non-finite checkpoint, writes that are atomic and never follow a link. Each test
names its case, and the line that says how it failed before its fix (docs/reliability.md)."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys

import pytest
import torch

import evaluate
import train
from lab import checkpoint, files, rundir
from lab.files import atomic_write

from conftest import ROOT, TINY, call, copy_files, copy_run, nan_copy, one_line, snapshot, train_call


# --- one process per run directory: the lock --------------------------------------------------------------------

def test_a_second_process_on_the_same_run_directory_stops(base, tmp_path, capsys):
    """2D5 (round two, issue 16): two processes on one out_dir interleaved metrics.jsonl; the second now stops,
    naming the holder."""
    d = copy_files(base, tmp_path / "run")
    os.remove(d / "eval.json")  # an unfinished run that --resume would continue
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom lab import files\nwith files.Lock(sys.argv[1]):\n"
                               "    print('held', flush=True); time.sleep(60)", str(d)], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert train.cli(TINY + ["--out_dir", str(d), "--resume"]) == 2
        assert str(holder.pid) in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    assert train.cli(TINY + ["--out_dir", str(d), "--resume"]) == 0  # the holder is gone: a stale lock
    assert not (d / ".lock").exists()


@pytest.mark.smoke
def test_two_locks_on_one_run_directory_never_both_hold(tmp_path):
    """3Dc: two holders of one run directory (check-then-act; a pid lock re-taken by its own process). Failed before
    its fix."""
    d = str(tmp_path / "run")
    with files.Lock(d):  # the old lock took over a .lock naming its own pid: two holders
        with pytest.raises(ValueError, match="in use by process"):
            files.Lock(d).__enter__()


def test_the_lock_names_host_and_pid_and_is_released_by_the_os(tmp_path, capsys):
    """3Dc: the lock names host and pid, and the OS releases it when its holder is SIGKILLed. Failed before its fix."""
    d = tmp_path / "run"
    d.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom lab import files\nwith files.Lock(sys.argv[1]):\n"
                               "    print('held', flush=True); time.sleep(60)", str(d)], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert (d / ".lock").read_text() == f"process {holder.pid} on {socket.gethostname()}"
        assert train.cli(TINY + ["--out_dir", str(d)]) == 2
        assert f"in use by process {holder.pid} on {socket.gethostname()}" in capsys.readouterr().err
    finally:
        holder.send_signal(signal.SIGKILL)  # killed: its .lock stays behind, but the OS lock is gone
        holder.wait()
    assert (d / ".lock").exists()
    with files.Lock(str(d)):
        assert (d / ".lock").read_text().startswith(f"process {os.getpid()} ")


@pytest.mark.smoke
def test_a_stale_lock_naming_a_live_pid_is_taken_over_and_exit_removes_only_its_own(tmp_path):
    """3Dc: a stale .lock naming a live (reused) pid blocked forever, and __exit__ removed another's lock. Failed
    before its fix."""
    d = tmp_path / "run"
    d.mkdir()
    (d / ".lock").write_text(str(os.getppid()))  # the pid of a live process that holds no lock (pid reuse)
    lock = files.Lock(str(d)).__enter__()
    os.remove(d / ".lock")
    (d / ".lock").write_text("process 1 on elsewhere")  # someone else's lock now
    lock.__exit__(None, None, None)
    assert (d / ".lock").read_text() == "process 1 on elsewhere"


@pytest.mark.smoke
def test_a_lock_removes_only_the_projects_own_temp_files(tmp_path):
    """3Da: a fresh run deleted every *.tmp<digits> file of its folder, a user's thesis.tmp1 too. Failed before its
    fix."""
    d = tmp_path / "folder"
    d.mkdir()
    (d / "thesis.tmp1").write_text("a user's own file")
    (d / "ckpt.pt.tmp99999999").write_bytes(b"half")  # a writer killed mid-write (no such pid)
    with files.Lock(str(d)):
        pass
    assert (d / "thesis.tmp1").read_text() == "a user's own file"
    assert not (d / "ckpt.pt.tmp99999999").exists()


def test_a_symlinked_lock_is_refused_and_its_target_untouched(tmp_path, capsys):
    """D7: train.py truncated the target of a .lock symlink and wrote its own line into it. Failed before its fix."""
    victim = tmp_path / "thesis.txt"
    victim.write_text("years of work\n")
    d = tmp_path / "run"
    d.mkdir()
    os.symlink(victim, d / ".lock")
    err = one_line(capsys, call(train.cli, TINY + ["--out_dir", str(d)]))
    assert ".lock" in err and "symlink" in err
    assert victim.read_text() == "years of work\n" and sorted(os.listdir(d)) == [".lock"]


# --- a folder holds one run or one sweep: never wiped, never mixed ------------------------------------------------

def test_a_rerun_without_resume_refuses_to_wipe_the_run(base, tmp_path, capsys):
    """2D1 (round two, issue 16): a command re-run without --resume on a folder holding a run wiped its log and
    checkpoint."""
    d = copy_files(base, tmp_path / "run")
    before = snapshot(d)
    assert train.cli(TINY + ["--out_dir", str(d)]) == 2
    assert "--resume" in capsys.readouterr().err and snapshot(d) == before
    assert train.cli(TINY + ["--out_dir", str(d), "--overwrite", "--max_iters", "5"]) == 0  # explicitly replaced
    assert json.load(open(d / "eval.json"))["steps"] == 5


def test_a_run_inside_a_sweep_folder_is_refused(base, tmp_path, capsys):
    """3Sa: a single run inside a sweep folder was counted twice, and train.py made such folders. Failed before its
    fix."""
    sweep = copy_run(base, tmp_path / "sweep")  # a single run written into the sweep folder itself ...
    copy_run(base, sweep / "seed0")  # ... beside (above) its seed 0
    assert "appears 2 times" in one_line(capsys, evaluate.cli([str(sweep)]))
    # train.py refuses to make such folders: a sweep over a single run, a single run over a sweep
    before = snapshot(sweep)
    assert "holds a single run" in one_line(capsys, train.cli(TINY + ["--seeds", "2", "--resume", "--out_dir", str(sweep)]))
    os.remove(sweep / "eval.json"), os.remove(sweep / "config.json")
    before = snapshot(sweep)
    assert "holds runs below it" in one_line(capsys, train.cli(TINY + ["--out_dir", str(sweep)]))
    assert snapshot(sweep) == before


def test_a_sweep_folder_holds_one_experiment(sweep, tmp_path, capsys):
    """3Sb: a sweep folder mixed experiments (--overwrite with fewer seeds, another schedule). Failed before its fix."""
    d = tmp_path / "sweep"
    shutil.copytree(sweep, d)
    before = snapshot(d)
    # --overwrite with fewer seeds would leave seed2 of the old sweep beside the new ones
    err = one_line(capsys, train.cli(TINY + ["--seeds", "2", "--max_iters", "5", "--overwrite", "--out_dir", str(d)]))
    assert "seed2" in err and "--overwrite would leave" in err
    # more seeds of another schedule would join the folder
    err = one_line(capsys, train.cli(TINY + ["--seeds", "2", "--seed", "3", "--max_iters", "5", "--schedule", "fixed",
                                             "--out_dir", str(d)]))
    assert "another experiment" in err and "schedule='window'" in err
    assert snapshot(d) == before


def test_an_out_dir_that_is_a_file_or_a_dangling_symlink_is_bad_input(tmp_path, capsys):
    """3U1: an --out_dir that is a file or a dangling symlink gave a raw errno and exit 1. Failed before its fix."""
    (tmp_path / "afile").write_text("x")
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    for name, word in (("afile", "is a file, not a directory"), ("dangling", "symlink to a missing path")):
        for extra in ([], ["--seeds", "2"]):
            err = one_line(capsys, train.cli(TINY + ["--out_dir", str(tmp_path / name), *extra]))
            assert word in err, err
    assert not (tmp_path / "gone").exists()


def test_a_run_stopped_before_its_first_checkpoint_leaves_nothing_that_blocks(tmp_path, monkeypatch, capsys):
    """4R4: a run stopped by a non-finite loss before its first checkpoint left a half-run that blocked the corrected
    command. Failed before its fix."""
    real = train.lr_at
    monkeypatch.setattr(train, "lr_at", lambda cfg, it: float("nan") if it == 0 else real(cfg, it))  # NaN weights
    d = tmp_path / "run"
    err = one_line(capsys, train_call(TINY + ["--out_dir", str(d)]), 1)
    assert "non-finite loss nan at step 2" in err and "no checkpoint was written yet" in err and "removed" in err
    assert not [f for f in os.listdir(d) if f in files.RUN_FILES], os.listdir(d)
    assert rundir.plan(train.parse_args(TINY + ["--out_dir", str(d)]), str(d)) == ("fresh", None)  # no --overwrite
    # after a checkpoint there is something to resume: the run's files stay
    monkeypatch.setattr(train, "lr_at", lambda cfg, it: float("nan") if it == 6 else real(cfg, it))
    err = one_line(capsys, train_call(TINY + ["--out_dir", str(tmp_path / "later")]), 1)
    assert "last good checkpoint: step 5" in err and "removed" not in err
    assert {"config.json", "metrics.jsonl", "ckpt.pt"} <= set(os.listdir(tmp_path / "later"))


def test_resume_of_a_run_killed_before_its_first_checkpoint_restarts(tmp_path, capsys):
    for sweep in (False, True):
        d = tmp_path / f"run{sweep}"
        run_dir = d / "seed0" if sweep else d
        run_dir.mkdir(parents=True)
        cfg = train.parse_args(TINY + ["--out_dir", str(run_dir)])
        (run_dir / "config.json").write_text(json.dumps(__import__("dataclasses").asdict(cfg)))
        (run_dir / "metrics.jsonl").write_text("")
        extra = ["--seeds", "1"] if not sweep else ["--seeds", "2"]
        assert train.cli(TINY + ["--out_dir", str(d), "--resume", *extra]) == 0
        assert "started from scratch" in capsys.readouterr().out
        assert (run_dir / "eval.json").exists()


# --- resume: the same run, or a one-line refusal ------------------------------------------------------------------

def test_resume_with_other_settings_is_refused_harmless_ones_allowed(base, tmp_path, capsys):
    """2D3 (round two, issue 16): --resume with other settings rewrote config.json and eval.json and relabelled the
    run."""
    d = copy_files(base, tmp_path / "run")
    before = snapshot(d)
    for other in (["--w", "3"], ["--T_max", "12"], ["--lr", "0.1"], ["--max_iters", "5"], ["--eval_seed", "1"]):
        assert train.cli(TINY + ["--out_dir", str(d), "--resume", *other]) == 2, other
        assert snapshot(d) == before
    # intervals and the eval batch size do not change the run: a finished run is simply reported again
    assert train.cli(TINY + ["--out_dir", str(d), "--resume", "--eval_batch_size", "7", "--log_interval", "2"]) == 0
    assert "finished earlier" in capsys.readouterr().out and snapshot(d) == before


def test_a_run_from_before_a_new_setting_still_resumes_and_groups(base, tmp_path, capsys):
    """A setting added to train.py later (off by default) must not make older runs foreign."""
    d = copy_files(base, tmp_path / "old")
    for f in ("config.json", "eval.json"):
        saved = json.load(open(d / f))
        (saved.get("config", saved)).pop("bptt_k")
        (d / f).write_text(json.dumps(saved))
    assert train.cli(TINY + ["--out_dir", str(d), "--resume"]) == 0  # finished: reported again
    assert "finished earlier" in capsys.readouterr().out
    new = copy_files(base, tmp_path / "new")
    e = json.load(open(new / "eval.json"))
    e["seed"] = e["config"]["seed"] = 1  # another seed of the same experiment (one seed twice is refused)
    (new / "eval.json").write_text(json.dumps(e))
    assert evaluate.cli([str(tmp_path / "old"), str(tmp_path / "new")]) == 0
    assert "| dyck | window w=5 | 2 |" in capsys.readouterr().out  # one row of two runs


def test_every_segment_of_a_resumed_run_keeps_its_settings_and_env(base, tmp_path):
    """3Sf: a resume with other threads rewrote config.json's env. Failed before its fix."""
    d = copy_run(base, tmp_path / "run")
    os.remove(d / "eval.json")
    ck = torch.load(d / "ckpt.pt", weights_only=True)
    ck["step"], ck["acc_stats"] = 5, {}
    torch.save(ck, d / "ckpt.pt")
    assert train.cli([*TINY, "--out_dir", str(d), "--resume", "--device", "cpu"]) == 0  # auto before
    for f in ("config.json", "eval.json"):
        segs = json.load(open(d / f))["segments"]
        assert [(s["step"], s["device"]) for s in segs] == [(0, "auto"), (5, "cpu")], f
        assert all("git_commit" in s["env"] for s in segs)


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git (without it the mark is None: the last assertion)")
def test_an_uncommitted_edit_is_recorded_beside_the_commit(tmp_path, monkeypatch):
    """S37 (round six): an uncommitted edit of halting.py was recorded as the clean commit (no dirty mark), so two
    methods could share a row. Failed before its fix: AttributeError: module 'lab.rundir' has no attribute
    'code_version'

    code_version(root): (commit, dirty) with dirty False for committed code, a digest of `git diff HEAD` of the
    tracked .py files (outside tests/) for an edit, so two different edits differ; (None, None) without git."""
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "halting.py").write_text("LOSS = 1\n")
    (repo / "tests" / "test_x.py").write_text("")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = git(repo, "rev-parse", "HEAD")
    assert rundir.code_version(str(repo)) == (head, False)
    (repo / "README.md").write_text("prose\n")  # not code
    (repo / "tests" / "test_x.py").write_text("x = 1\n")  # nor a test
    assert rundir.code_version(str(repo)) == (head, False)
    (repo / "halting.py").write_text("LOSS = 2\n")
    commit, one = rundir.code_version(str(repo))
    assert commit == head and isinstance(one, str) and len(one) == 12
    (repo / "halting.py").write_text("LOSS = 3\n")
    assert rundir.code_version(str(repo))[1] not in (one, False)  # another edit, another mark
    assert rundir.code_version(str(tmp_path)) == (None, None)  # not a repository
    env = rundir.environment()
    assert "git_commit" in env and "git_dirty" in env
    monkeypatch.setattr(rundir.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(FileNotFoundError("git")))
    assert rundir.code_version(str(repo)) == (None, None)  # git absent: unknown, never an error


def test_a_resume_on_other_code_says_so_in_one_line(base, tmp_path, capsys):
    """S37 (round six): a resume across commits (or with other uncommitted edits) said nothing. Failed before its
    fix: assert 0 == 1 (no line naming the change)

    The segment's code (commit and dirty mark) against the previous segment's: one line on stderr where they differ,
    nothing where they are the same."""
    d = unfinished(base, tmp_path / "run")
    now = rundir.environment()
    saved = json.load(open(d / "config.json"))
    for seg in saved["segments"]:
        seg["env"].update(git_commit="0" * 40, git_dirty=False)
    (d / "config.json").write_text(json.dumps(saved))
    assert train.cli(TINY + ["--resume", "--out_dir", str(d)]) == 0
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if "previous segment" in l]
    assert len(lines) == (1 if now["git_commit"] else 0), err
    if now["git_commit"]:
        assert "000000000000" in lines[0] and now["git_commit"][:12] in lines[0], lines
    d = unfinished(base, tmp_path / "same")  # the same code: no line
    saved = json.load(open(d / "config.json"))
    for seg in saved["segments"]:
        seg["env"].update(git_commit=now["git_commit"], git_dirty=now.get("git_dirty"))
    (d / "config.json").write_text(json.dumps(saved))
    assert train.cli(TINY + ["--resume", "--out_dir", str(d)]) == 0
    assert "previous segment" not in capsys.readouterr().err


def test_every_segment_records_stack_and_static(tmp_path):
    """4R7: a stacked chunk resumed without --stack, with another S, or with or without --static left no trace of it;
    stack and static are recorded per segment, like threads. Failed before its fix."""
    src = tmp_path / "stacked"
    assert train.cli(TINY + ["--stack", "1", "--out_dir", str(src)]) == 0
    d = unfinished(src, tmp_path / "run")
    assert train.cli(TINY + ["--resume", "--out_dir", str(d)]) == 0  # unstacked now: accepted
    for f in ("config.json", "eval.json"):
        segs = json.load(open(d / f))["segments"]
        assert [(s["step"], s.get("stack"), s.get("static")) for s in segs] == [(0, 1, False), (5, 0, False)], f


def test_a_resume_killed_before_its_first_step_leaves_no_empty_segment(base, tmp_path, monkeypatch, capsys):
    """C10 (round six): a resume killed before its first step left an empty segment in config.json, and the next
    resume's eval.json listed it as a segment that trained. Failed before its fix: assert [0, 5, 5] == [0, 5]

    Every segment that starts at or after the checkpoint's step trained nothing that survives: the next one
    replaces it."""
    d = unfinished(base, tmp_path / "run")
    real = train.train_step

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "train_step", killed)
    assert train.cli(TINY + ["--resume", "--out_dir", str(d)]) == 130
    monkeypatch.setattr(train, "train_step", real)
    assert train.cli(TINY + ["--resume", "--out_dir", str(d), "--device", "cpu"]) == 0
    for f in ("config.json", "eval.json"):
        segs = json.load(open(d / f))["segments"]
        assert [s["step"] for s in segs] == [0, 5], f
        assert segs[-1]["device"] == "cpu", f  # the segment that trained, not the empty one


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
    err = one_line(capsys, train_call(TINY + argv + ["--resume", "--out_dir", str(d)]))
    assert f"{d}/ckpt.pt" in err and all(w in err for w in words), err
    assert snapshot(d) == before
    return err


def test_an_empty_config_json_is_damaged_not_another_run(base, tmp_path, capsys):
    """4R5: an empty config.json {} was called "belongs to another run". Failed before its fix."""
    for name, text in (("config.json", "{}"), ("config.json", "[1, 2]"), ("eval.json", "{}")):
        d = unfinished(base, tmp_path / f"{name}-{len(text)}")
        (d / name).write_text(text)
        before = snapshot(d)
        err = one_line(capsys, train_call(TINY + ["--resume", "--out_dir", str(d)]))
        assert f"{d}/{name} is empty or damaged" in err and "another run" not in err, err
        assert snapshot(d) == before
    d = unfinished(base, tmp_path / "ckpt-config", lambda ck: ck.update(config={}))
    assert "malformed: config" in refused(capsys, d, [])
    sweep = tmp_path / "sweep"  # a sweep's seed folder too
    (sweep / "seed0").mkdir(parents=True)
    (sweep / "seed0" / "config.json").write_text("{}")
    err = one_line(capsys, train_call(TINY + ["--seeds", "2", "--seed", "1", "--out_dir", str(sweep)]))
    assert "seed0/config.json is empty or damaged" in err


def test_a_resume_without_config_json_is_refused_not_stripped_of_its_segments(base, tmp_path, capsys):
    """S36 (round six): a removed config.json silently dropped the earlier segments (their machines, environment and
    commit) from the resumed run's eval.json. Failed before its fix: assert 0 == 2

    config.json is the only record of a run's earlier segments (the checkpoint holds none): a resume without it is
    refused in one line naming it, and the run is left as it is."""
    d = unfinished(base, tmp_path / "run")
    os.remove(d / "config.json")
    before = snapshot(d)
    err = one_line(capsys, train_call(TINY + ["--resume", "--out_dir", str(d)]))
    assert f"{d}/config.json" in err and "segments" in err and "--overwrite" in err, err
    assert snapshot(d) == before


def test_a_non_utf8_metrics_jsonl_is_named_before_config_json_is_rewritten(base, tmp_path, capsys):
    """4R5: a non-UTF-8 metrics.jsonl named no file, and config.json had been rewritten before it was read. Failed
    before its fix."""
    d = unfinished(base, tmp_path / "run")
    lines = (d / "metrics.jsonl").read_bytes().split(b"\n")
    (d / "metrics.jsonl").write_bytes(b"\n".join([b"\xff\xfe{\"step\": 1}"] + lines))
    before = snapshot(d)
    err = one_line(capsys, train_call(TINY + ["--resume", "--out_dir", str(d)]))
    assert f"{d}/metrics.jsonl, line 1" in err and "UTF-8" in err, err
    assert snapshot(d) == before  # config.json was rewritten before metrics.jsonl was read
    # a torn last line cut inside a character is still dropped
    (d / "metrics.jsonl").write_bytes(b"\n".join(lines[:-1] + [b"{\"step\": 15, \"lo\xe2\x82"]))
    assert all(json.loads(l)["step"] <= 5 for l in rundir.log_lines(str(d / "metrics.jsonl"), 5))


def test_torn_log_line_and_temp_leftovers_do_not_block_resume(tmp_path, capsys):
    """2D6 (round two, issue 16): a last line of metrics.jsonl torn by a full disk blocked every resume; a killed
    writer's temp file stayed."""
    d = tmp_path / "run"
    ref = tmp_path / "ref"
    assert train.cli(TINY + ["--out_dir", str(ref)]) == 0
    assert train.cli(TINY + ["--out_dir", str(d), "--max_iters", "10"]) == 0
    os.remove(d / "eval.json")
    ck = torch.load(d / "ckpt.pt", weights_only=True)
    ck["step"], ck["acc_stats"] = 5, {}
    torch.save(ck, d / "ckpt.pt")  # pretend the run died right after the step-5 checkpoint ...
    with open(d / "metrics.jsonl", "a") as f:
        f.write('{"step": 15, "lo')  # ... with a write torn by a full disk
    (d / "ckpt.pt.tmp99999").write_bytes(b"half")  # and a killed writer's temp file
    lines = open(d / "metrics.jsonl").read().split("\n")
    (d / "bad.jsonl").write_text("\n".join([lines[0], "garbage", lines[1]]))
    assert train.cli(TINY + ["--out_dir", str(d), "--resume"]) == 0
    assert not (d / "ckpt.pt.tmp99999").exists()
    assert all(json.loads(l)["step"] <= 10 for l in open(d / "metrics.jsonl"))
    from lab import rundir
    with pytest.raises(ValueError, match="bad.jsonl, line 2"):  # a bad line in the middle names the file
        rundir.log_lines(str(d / "bad.jsonl"), 10)


# --- checkpoints: checked before they are used, never written non-finite ------------------------------------------

def test_a_checkpoint_of_other_dtypes_is_refused_not_cast(base, tmp_path, capsys):
    """4R2: a checkpoint with float64 or int64 tensors was cast and resumed without a word. Failed before its fix."""
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


EMA = ["--ema", "0.9", "--ema_start", "5"]


@pytest.fixture(scope="module")
def ema_run(tmp_path_factory):
    """A finished tiny EMA run whose EMA starts after step 5, where its first checkpoint is written."""
    d = tmp_path_factory.mktemp("ema") / "run"
    assert train.cli(TINY + EMA + ["--out_dir", str(d)]) == 0
    return d


def test_an_ema_its_run_does_not_keep_is_refused(base, ema_run, tmp_path, capsys):
    """4R2: an ema entry in a run trained without --ema was evaluated as EMA weights. Failed before its fix."""
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


def test_an_ema_checkpoint_at_exactly_ema_start_without_its_ema(ema_run, tmp_path, capsys):
    """4R3: --resume of an EMA checkpoint at exactly --ema_start without its EMA crashed at the next step (off by
    one). Failed before its fix."""
    # the EMA is a copy of the weights after step 5, so the step-5 checkpoint holds it: without it, step 6 crashed
    d = unfinished(ema_run, tmp_path / "at", lambda ck: ck.update(ema=None), step=5)
    refused(capsys, d, EMA, "no EMA weights at step 5")
    d = unfinished(ema_run, tmp_path / "ok", step=5)  # with it, the run continues
    assert train_call(TINY + EMA + ["--resume", "--out_dir", str(d)]) == 0
    assert json.load(open(d / "eval.json"))["weights"] == "ema"


def test_damaged_stat_sums_and_optimizer_settings_name_the_checkpoint(base, tmp_path, capsys):
    """4R3: acc_stats {'loss': 'x'} or optimizer betas 'x' gave a traceback or a message that named no file. Failed
    before its fix."""
    def betas(ck):
        ck["optimizer"]["param_groups"][0]["betas"] = "x"
    for name, change, word in (("acc", lambda ck: ck.update(acc_stats={"steps": 1.0, "loss": "x"}), "acc_stats"),
                               ("nosteps", lambda ck: ck.update(acc_stats={"loss": 1.0}), "acc_stats"),
                               ("betas", betas, "betas='x'"),
                               ("maximize", lambda ck: ck["optimizer"]["param_groups"][0].update(maximize=True), "maximize"),
                               ("rng", lambda ck: ck["rng"].update(data=torch.zeros(3, dtype=torch.uint8)), "rng data")):
        refused(capsys, unfinished(base, tmp_path / name, change), [], word)


def test_a_non_finite_checkpoint_is_not_resumed_nor_called_good(base, tmp_path, capsys):
    """3Sd: NaN weights or optimizer state were resumed, and called the last good checkpoint. Failed before its fix."""
    for where in ("model", "optimizer"):
        d = nan_copy(base, tmp_path / where, where)
        before = snapshot(d)
        err = one_line(capsys, train.cli(TINY + ["--resume", "--out_dir", str(d)]))
        assert "non-finite values" in err and where in err and snapshot(d) == before
        assert "last good" not in checkpoint.last_good(str(d / "ckpt.pt"))
        assert "none is good" in checkpoint.last_good(str(d / "ckpt.pt"))


# S20's EMA run: its EMA starts after step 2, before its first checkpoint (step 5)
EMA_AT_2 = ["--ema", "0.9", "--ema_start", "2"]


@pytest.fixture(scope="module")
def ema_run_at_2(tmp_path_factory):
    d = tmp_path_factory.mktemp("ema") / "run"
    assert train.cli(TINY + EMA_AT_2 + ["--out_dir", str(d)]) == 0
    return d


def nan_ema(src, d, step=None):
    shutil.copytree(src, d)
    ck = torch.load(d / "ckpt.pt", weights_only=True)
    next(iter(ck["ema"]["model"].values())).fill_(float("nan"))
    if step is not None:  # an unfinished run, to resume
        os.remove(d / "eval.json")
        ck["step"], ck["acc_stats"] = step, {}
    torch.save(ck, d / "ckpt.pt")
    return d


def test_nan_ema_weights_are_refused_by_resume_and_readouts(ema_run_at_2, tmp_path, capsys):
    """S20: NaN EMA weights in ckpt.pt were resumed and read out (rundir.non_finite skipped the EMA). Failed before
    its fix."""
    assert checkpoint.non_finite({"ema": {"model": {"w": torch.tensor([float("nan")])}}}) == "ema model w"
    d = nan_ema(ema_run_at_2, tmp_path / "resume", step=5)
    before = snapshot(d)
    err = one_line(capsys, call(train.cli, TINY + EMA_AT_2 + ["--resume", "--out_dir", str(d)]))
    assert "non-finite" in err and "ema" in err and snapshot(d) == before
    d = nan_ema(ema_run_at_2, tmp_path / "readouts")
    before = snapshot(d)
    err = one_line(capsys, call(evaluate.cli, [str(d), "--readouts", "--samples", "2"]))
    assert "non-finite" in err and "ema" in err and snapshot(d) == before


def test_nan_weights_are_never_checkpointed(tmp_path, monkeypatch, capsys):
    real = train.lr_at
    monkeypatch.setattr(train, "lr_at", lambda cfg, it: float("nan") if it == bad_step[0] - 1 else real(cfg, it))
    bad_step = [7]  # the update of step 7 turns the weights NaN; its loss was still finite
    d = tmp_path / "run"
    assert train.cli(TINY + ["--out_dir", str(d), "--ckpt_interval", "1"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "non-finite weights at step 7" in err and "step 6 at" in err
    ck = torch.load(d / "ckpt.pt", weights_only=True)
    assert ck["step"] == 6 and all(torch.isfinite(v).all() for v in ck["model"].values())
    bad_step[0] = 3  # before the first checkpoint (every 5 steps): the message says there is none
    assert train.cli(TINY + ["--out_dir", str(tmp_path / "run2")]) == 1
    assert "no checkpoint was written yet" in capsys.readouterr().err


def test_a_diverged_run_says_so(tmp_path, capsys):
    """3U5: --lr 10 trained to a loss of ~1900 and said nothing. Failed before its fix."""
    d = tmp_path / "run"
    assert train.cli(TINY + ["--lr", "10", "--warmup_iters", "0", "--grad_clip", "0", "--out_dir", str(d)]) == 0
    out = capsys.readouterr()
    assert "the loss diverged" in out.err and json.load(open(d / "eval.json"))["diverged"]
    assert "DIVERGED in training" in out.out  # and every report of the run says so


# --- writes: atomic, never through a link ------------------------------------------------------------------------

@pytest.mark.smoke
def test_every_writer_goes_through_the_one_atomic_write():
    """D6: tables.splice wrote results/README.md in place, and a full disk cut it short. Failed before its fix.

    No file of lab/, results/*.py, theory_checks.py, bench.py or evaluate.py opens a file for writing, or saves a
    figure to a path, except files.temp_file (atomic_write's temp file); appending to metrics.jsonl is a log."""
    files = [os.path.join("lab", f) for f in os.listdir(os.path.join(ROOT, "lab")) if f.endswith(".py")]
    files += [os.path.join("results", f) for f in os.listdir(os.path.join(ROOT, "results")) if f.endswith(".py")]
    files += ["theory_checks.py", "bench.py", "evaluate.py"]
    writers = re.compile(r"""open\([^)]*["'](w|wb|w\+|x|xb)["']|\.savefig\((?!f\b)|write_text\(|write_bytes\(|json\.dump\(""")
    found = [f"{f}:{i}" for f in files for i, line in enumerate(open(os.path.join(ROOT, f)), 1) if writers.search(line)]
    assert found == [], found


@pytest.mark.smoke
def test_a_planted_temp_file_link_is_not_written_through(tmp_path):
    """D7: a link planted at atomic_write's temp name was written through. Failed before its fix."""
    victim = tmp_path / "thesis.txt"
    victim.write_text("years of work\n")
    out = tmp_path / "table.md"
    os.symlink(victim, f"{out}.tmp{os.getpid()}")  # the temp name atomic_write would use
    files.atomic_write(str(out), lambda f: f.write(b"the table\n"))
    assert victim.read_text() == "years of work\n"
    assert out.read_text() == "the table\n" and not out.is_symlink()


@pytest.mark.smoke
def test_ctrl_c_during_a_write_lands_after_it(tmp_path):
    """A Ctrl-C inside a checkpoint write used to cut torch.save, whose zip writer then raised a RuntimeError
    (a traceback, exit 1): the write now finishes and the KeyboardInterrupt follows."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        def write(f):
            f.write(b"first half, ")
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(10_000))  # bytecodes for the handler to run on
            f.write(b"second half")
        with pytest.raises(KeyboardInterrupt):
            atomic_write(str(tmp_path / "ckpt.pt"), write)
        assert (tmp_path / "ckpt.pt").read_bytes() == b"first half, second half"
        assert os.listdir(tmp_path) == ["ckpt.pt"]
    finally:
        signal.signal(signal.SIGINT, old)
