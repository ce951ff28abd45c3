"""lab/files.py: the one writer, the one reader, the lock, and the one rule guarding a run's own files."""

import os
import shutil
import signal
import subprocess
import sys

import pytest

import bench
import evaluate
import theory_checks
from lab import cli, files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMITTED = os.path.join(ROOT, "results", "chaos", "dyck", "window", "seed100", "r0")


def snapshot(d) -> dict:
    out = {}
    for root, _, names in os.walk(d):
        for f in names:
            out[os.path.join(root, f)] = open(os.path.join(root, f), "rb").read()
    return out


@pytest.fixture
def held(tmp_path):
    """A copy of a committed run whose lock another process holds (as a train.py --resume would)."""
    d = tmp_path / "run"
    shutil.copytree(COMMITTED, d)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom lab import files\nwith files.Lock(sys.argv[1]):\n"
                               "    print('held', flush=True); time.sleep(120)", str(d)], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield d, holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


def test_no_output_flag_replaces_a_held_lock_or_a_temp_file(held, capsys):
    """E / D9 (issue 71): `evaluate.py RUN --html RUN/.lock`, `theory_checks.py --json RUN/.lock` and `bench.py
    --json RUN/.lock` replaced the lock another process held (the next --resume then trained the held run), and a
    write's temp name NAME.tmpPID was not guarded either. Now one rule (files.guarded) covers the lock and temp
    names: exit 2, one line naming the path and why, nothing on disk changed.
    Failed before its fix: assert 0 == 2 (evaluate.py wrote html: .../run/.lock (1 run, 0.02 MB))."""
    d, pid = held
    (d / "eval.json.tmp99999").write_bytes(b"a write in progress")
    before = snapshot(d)
    for name in (".lock", "eval.json.tmp99999", "page.html.tmp12.3"):
        target = str(d / name)
        assert evaluate.cli([str(d), "--html", target]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and target in err and "a run's own file" in err, err
        assert ("its lock" if name == ".lock" else "temp file") in err, err
        with pytest.raises(ValueError, match="a run's own file"):
            theory_checks.validate(cli.parse(theory_checks.Config, ["--json", target]))
        with pytest.raises(ValueError, match="a run's own file"):
            bench.parse_args(["--json", target])
    assert snapshot(d) == before and (d / ".lock").read_text().startswith(f"process {pid} ")


def test_atomic_write_itself_never_writes_a_lock_or_a_temp_name(tmp_path):
    """E / D9 (issue 71): the writer inherits the rule too, for a caller that forgot the up-front check.
    Failed before its fix: Failed: DID NOT RAISE <class 'ValueError'>."""
    (tmp_path / ".lock").write_text("process 1 on elsewhere")
    for name in (".lock", "x.tmp123"):
        with pytest.raises(ValueError, match="nothing written"):
            files.atomic_write(str(tmp_path / name), lambda f: f.write(b"page"))
    assert os.listdir(tmp_path) == [".lock"] and (tmp_path / ".lock").read_text() == "process 1 on elsewhere"


def test_write_set_checks_every_target_first_and_names_what_a_failed_rename_left_replaced(tmp_path, monkeypatch):
    """F (D10, C9): a multi-file output was written one file at a time. The set's targets are checked before the first
    write (a folder in place of one: nothing written); a rename that still fails names the files already replaced."""
    a, b = str(tmp_path / "a.md"), str(tmp_path / "b.json")
    open(a, "w").write("old\n")
    os.makedirs(b)
    with pytest.raises(ValueError, match="b.json: is a folder; nothing written"):
        files.write_set({a: "new\n", b: {"rows": []}})
    assert open(a).read() == "old\n"
    os.rmdir(b)
    replace = os.replace

    def fail_on_b(src, dst):
        if dst == b:
            raise OSError(5, "Input/output error")
        replace(src, dst)
    monkeypatch.setattr(files.os, "replace", fail_on_b)
    with pytest.raises(OSError, match=r"cannot write .*b\.json .*already replaced: .*a\.md"):
        files.write_set({a: "new\n", b: {"rows": []}})
    assert open(a).read() == "new\n" and not os.path.exists(b)
    assert sorted(os.listdir(tmp_path)) == ["a.md"]  # no temp file left
