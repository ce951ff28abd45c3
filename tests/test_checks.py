"""lab/checks.py: every check a command makes before a file is touched (settings, machine, output paths)."""

import os
import shutil

import pytest

import bench
import evaluate
import theory_checks
from lab import checks, cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "results", "chaos", "dyck", "window", "seed100", "r0")


@pytest.mark.parametrize("form", ["NEWDIR/", "NEWDIR/.", "NEWDIR/..", "OLDDIR/", "OLDDIR/."])
def test_an_output_path_that_names_a_folder_is_refused_before_the_work(tmp_path, capsys, form):
    """J / U20 (issue 71): `--html NEWDIR/` (basename '') passed the up-front check and failed after the work
    ("cannot write NEWDIR/ (No such file or directory)", exit 1); `--out DIR/` wrote DIR/.md and DIR/.json. One
    helper (checks.file_target) splits an output path as the write will and refuses a folder's form up front:
    exit 2, one line, nothing on disk.
    Failed before its fix: assert 1 == 2 (evaluate.py: error: cannot write .../NEWDIR/ (No such file or directory))."""
    (tmp_path / "OLDDIR").mkdir()
    shutil.copytree(RUN, tmp_path / "run")
    target = str(tmp_path) + os.sep + form  # as typed (a pathlib path would drop the trailing '/' and '.')
    before = sorted(os.listdir(tmp_path))
    for flag in (["--html"], ["--out"]):
        code = evaluate.cli([str(tmp_path / "run"), *flag, target])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and err.startswith("evaluate.py: error: "), (flag, err)
        assert "names a folder" in err or "a folder; name the page's file" in err, err
    assert sorted(os.listdir(tmp_path)) == before and os.listdir(tmp_path / "OLDDIR") == []
    with pytest.raises(ValueError, match="names a folder"):  # the other output flags share the helper
        theory_checks.validate(cli.parse(theory_checks.Config, ["--json", target]))
    with pytest.raises(ValueError, match="names a folder"):
        bench.parse_args(["--json", target])


def test_file_target_splits_a_path_as_the_write_resolves_it(tmp_path):
    """J / U20 (issue 71): the folder checked is the one the write uses, not a lexical normalisation of it
    (abspath folds 'link/..' to the folder beside the link, the OS follows the link first).
    Failed before its fix: AttributeError: module 'lab.checks' has no attribute 'file_target'."""
    assert checks.file_target("--json", "page.html") == (".", "page.html")
    assert checks.file_target("--json", "a/b//c.json") == ("a/b", "c.json")
    (tmp_path / "deep" / "er").mkdir(parents=True)
    os.symlink(tmp_path / "deep" / "er", tmp_path / "link")
    folder, name = checks.file_target("--json", str(tmp_path / "link" / ".." / "x.json"))
    assert os.path.realpath(folder) == str(tmp_path / "deep") and name == "x.json"
    checks.check_output("--json", str(tmp_path / "link" / ".." / "x.json"))  # deep/ exists: a file can be made there
    with pytest.raises(ValueError, match="names a folder"):
        checks.file_target("--json", str(tmp_path / "link") + "/")
