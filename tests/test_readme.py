"""README.md as a reader meets it: the "Copy it into your project" block runs as printed, in a folder that holds only
model.py, halting.py and tasks.py, the three files it claims to need (shortened from outside: 60 steps instead of 400); the Results, span
and run-output blocks are what their committed JSON and run say; the file table names every root file; a generated
block is spliced in whole or not at all."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from lab import tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_readmes_copy_block_runs_on_the_three_files_alone(tmp_path):
    readme = open(os.path.join(ROOT, "README.md")).read()
    block = readme.split("<!-- copy:begin -->\n```python\n", 1)[1].split("```\n<!-- copy:end -->", 1)[0]
    assert len(block.splitlines()) <= 30, "the block stays short enough to copy"
    for f in ("model.py", "halting.py", "tasks.py"):
        shutil.copy(os.path.join(ROOT, f), tmp_path / f)
    assert block.count("range(400)") == 1 and "environ" not in block, "what a copier pastes: no test plumbing"
    (tmp_path / "block.py").write_text(block.replace("range(400)", "range(60)"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    r = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert set(os.listdir(tmp_path)) - {"__pycache__"} == {"block.py", "halting.py", "model.py", "tasks.py"}
    losses = [float(v) for v in re.findall(r"^step \d+ loss (\S+)$", r.stdout, re.M)]
    assert losses and all(0 < v < 10 for v in losses)
    scores = re.findall(r"^n=(\d+) exact match at K=\1: (\d+\.\d)%$", r.stdout, re.M)
    assert [n for n, _ in scores] == ["6", "8"] and all(0 <= float(a) <= 100 for _, a in scores), r.stdout


@pytest.mark.smoke
def test_the_findings_and_readmes_results_are_what_their_json_says():
    # results/README.md's "What the runs taught" and README.md's Results are regenerated from results/findings.json
    import json
    from study import findings
    o = json.load(open("results/findings.json"))
    block = lambda path, tag: open(path).read().split(f"<!-- {tag}:begin -->\n", 1)[1].split(f"<!-- {tag}:end -->", 1)[0]
    assert block("results/README.md", "findings").rstrip("\n").split("\n") == findings.lines(o)
    assert block("README.md", "results").rstrip("\n").split("\n") == findings.front(o)  # every number from here
    assert block("README.md", "span").rstrip("\n").split("\n") == findings.span(o)
    m = o["means"]["window oracle_hard_ood"]
    assert m["diff"] < 0 and m["hi"] < 0 and m["p"] < 0.05  # the window below fixed: the README's first finding


def test_the_readmes_run_output_is_what_its_committed_run_prints():
    # README.md shows `python train.py`'s report; results/readme/dyck-window is that run (its eval.json, config.json)
    import metrics
    from lab import records
    e = {**records.load_eval("results/readme/dyck-window"), "run_dir": "out/dyck-window"}
    shown = open("README.md").read().split("<!-- run:begin -->", 1)[1].split("<!-- run:end -->", 1)[0]
    report = shown.split("```\n", 2)[1].splitlines()[1:]  # after the last log line
    assert report == metrics.format_run(e).splitlines()[:len(report)]
    cfg = e["config"]
    assert (cfg["task"], cfg["schedule"], cfg["seed"], cfg["max_iters"], cfg["d_model"]) == ("dyck", "window", 0, 800, 64)
    last = [l for l in open("results/readme/dyck-window/metrics.jsonl")][-1]
    assert shown.split("```\n", 2)[1].splitlines()[0].startswith(f"step 800 | lr {__import__('json').loads(last)['lr']:.4g}")
    two = records.load_eval("results/readme/dyck-window-2threads")  # the README's two-thread figure
    assert two["env"]["threads"] == 2 and f"reached {two['metrics']['oracle_hard_ood']:.1f}% there" in " ".join(shown.split())


@pytest.mark.smoke
def test_the_readmes_file_table_names_every_root_file():
    import re
    text = open(os.path.join(ROOT, "README.md")).read().split("## Files, in reading order", 1)[1].split("\n\n", 2)[1]
    named = {f for line in text.splitlines() if line.startswith("| `") for f in re.findall(r"`(\w+\.py)`", line.split(" | ")[0])}
    assert named == {f for f in os.listdir(ROOT) if f.endswith(".py")}, "the table names every root file, and only those"


@pytest.mark.smoke
def test_splice_refuses_missing_markers_in_one_line(tmp_path):
    """D6: tables.splice, which writes the generated blocks, refuses a file without its markers in one line and
    leaves it as it was."""
    p = tmp_path / "notes.md"
    p.write_text("no markers\n")
    with pytest.raises(ValueError, match="markers"):
        tables.splice(str(p), "chaos", ["x"])
    assert p.read_text() == "no markers\n"


def test_the_readmes_against_sentence_is_what_study_against_measured():
    """README.md's `--against` paragraph: its false-alarm count and rate and its two powers are
    results/against/against.json's (python study/against.py), not numbers typed once."""
    d = json.load(open(os.path.join(ROOT, "results", "against", "against.json")))
    text = " ".join(open(os.path.join(ROOT, "README.md")).read().split())
    fa = d["false_alarms"]["all"]
    assert (f"On {fa['splits']} null splits of the committed ensembles (the same method on both sides) it said "
            f"\"differs\" {fa['differs']} times ({100 * fa['rate']:.1f}% [{100 * fa['lo']:.1f}, {100 * fa['hi']:.1f}])") in text
    five = [p for p in d["power"] if p["runs"] == 5]
    wf = [p for p in five if p["change"] == "window against fixed"]
    w2 = [p for p in five if p["change"] == "window w = 2 against w = 5"]
    assert len(w2) == 1 and all(p["differs"] == p["splits"] for p in wf)
    assert f"{wf[0]['differs']} of {wf[0]['splits']} draws of 5 runs" in text
    assert f"w = 2 against w = 5 in {w2[0]['differs']} of {w2[0]['splits']}:" in text


def test_the_readmes_task_and_schedule_tables_list_what_the_code_has():
    """Issue 69 (one home per fact): README.md's task table, its count of tasks ("the nine tasks") and its schedule
    table name exactly tasks.TASKS and halting.SCHEDULES, so a task or schedule added (or removed) shows here."""
    import re
    import halting
    import tasks
    text = open(os.path.join(ROOT, "README.md")).read()
    table = lambda head: [re.match(r"\| `(\w+)", line).group(1) for line in text.split(head, 1)[1].split("\n\n", 1)[0].splitlines()
                          if re.match(r"\| `\w+", line)]
    assert table("| task | n means |") == list(tasks.TASKS)
    assert set(table("| schedule | training loss |")) == set(halting.SCHEDULES)
    words = {9: "nine", 10: "ten", 11: "eleven", 12: "twelve"}
    assert text.count(f"the {words[len(tasks.TASKS)]} tasks") == 2  # the command block and the file table
