"""README.md's "Copy it into your project" block runs as printed, in a folder that holds only model.py, halting.py
and tasks.py: the three files it claims to need (shortened from outside: 60 steps instead of 400)."""

import os
import re
import shutil
import subprocess
import sys

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
