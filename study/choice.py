"""
results/round2/TASK/choice.json, the rung round two runs at, checked: study/ladder.py writes it once (record),
study/study.py, study/ladder.py and study/round2.sh read it through here, so one set of rules decides what a
valid file is. Standard library only (and lab/files.py's JSON reader, itself standard library only), so that
round2.sh can run it before anything else.

    python study/choice.py TASK     # FIRST SEEDS FLAGS, then ROW DIR per reused row; a bad file: one line, exit 2
"""

import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):  # run as `python study/choice.py`: the repository is the import root
    sys.path[0] = ROOT

from lab.cli import run  # noqa: E402  (load_json: a regular file only, a FIFO named choice.json would hang)
from lab.files import load_json
# each key's type; the values study/ladder.py's rule can write (ladder.py: RUNGS, SEEDS; tests check they agree)
KEYS = {"task": str, "rung": str, "first": int, "seeds": int, "why": str, "flags": str, "reuse": dict, "chosen_from": str}
RUNGS = ("r1", "r2", "r3", "rE", "rH")
FIRST = (0, 8)  # seeds 0-15, or 8-23 (fresh: the ladder's seeds are 0-7)
SEEDS = 16  # the declared seeds of a main row
MAIN = ("fixed", "matched", "window", "rl")  # round two's rows
FLAGS = re.compile(r"--max_iters [1-9][0-9]{0,8} --d_model [1-9][0-9]{0,5}(?: --ema (?P<ema>[0-9][0-9.e+-]{0,15}))?")
DIR = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(?:/[A-Za-z0-9._-]+)*/?")  # relative, no blank, no option


def decay(text: str) -> bool:
    try:
        return 0.0 < float(text) < 1.0
    except ValueError:
        return False


def problem(c, task: str, root: str = ROOT, need=("first", "seeds", "flags", "reuse")) -> str:
    """What is wrong with a choice.json's content (c, parsed) for task, in words, or "" if nothing: the keys of
    `need` must be there, every key must be one of KEYS with its type, and each value one the rule can write
    (reuse: main rows -> existing folders below the repository root)."""
    show = lambda v: (s if len(s := json.dumps(v)) <= 40 else s[:37] + "...")  # noqa: E731
    if not isinstance(c, dict):
        return f"a JSON object expected, got {show(c)}"
    if unknown := sorted(set(c) - set(KEYS)):
        return f"unknown key {', '.join(map(repr, unknown))} (allowed: {', '.join(KEYS)})"
    if missing := [k for k in need if k not in c]:
        return f"key {', '.join(map(repr, missing))} missing"
    words = {str: "a string", int: "an integer", dict: "an object"}
    for key, typ in KEYS.items():
        if key in c and (not isinstance(c[key], typ) or isinstance(c[key], bool)):
            return f"{key!r} must be {words[typ]}, got {show(c[key])}"
    if c.get("task", task) != task:
        return f"'task' must be {task!r} (the folder's task), got {show(c['task'])}"
    if c.get("rung", RUNGS[0]) not in RUNGS:
        return f"'rung' must be one of {', '.join(RUNGS)}, got {show(c['rung'])}"
    if c.get("first", FIRST[0]) not in FIRST:
        return f"'first' must be {' or '.join(map(str, FIRST))} (the rule's first seed), got {show(c['first'])}"
    if c.get("seeds", SEEDS) != SEEDS:
        return f"'seeds' must be {SEEDS} (the declared seeds of a main row), got {show(c['seeds'])}"
    if "flags" in c and not ((m := FLAGS.fullmatch(c["flags"])) and (m["ema"] is None or decay(m["ema"]))):
        return (f"'flags' must be '--max_iters N --d_model N', then optionally ' --ema DECAY' (0 < DECAY < 1), as "
                f"study/ladder.py records them, got {show(c['flags'])}")
    for row, d in c.get("reuse", {}).items():
        if row not in MAIN:
            return f"'reuse' names the row {row!r}: allowed {', '.join(MAIN)} (round two's rows)"
        if not (isinstance(d, str) and DIR.fullmatch(d) and ".." not in d.split("/") and os.path.isdir(os.path.join(root, d))):
            return (f"'reuse' of {row} must be an existing folder, relative to the repository and inside it "
                    f"(letters, digits, . _ - /), got {show(d)}")
    return ""


def read(path: str, task: str, root: str = ROOT, need=("first", "seeds", "flags", "reuse", "rung", "why")):
    """The choice.json at path, checked, or None while there is none; a damaged or hand-edited one is a ValueError
    naming the file (one line)."""
    if not os.path.lexists(path):
        return None
    name = os.path.relpath(path, root) if path.startswith(root + os.sep) else path
    try:
        c = load_json(path)
    except (OSError, ValueError) as err:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        what = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(f"{name}: not valid JSON or not readable ({what}); study/ladder.py writes it once: "
                         "restore it from git") from None
    if why := problem(c, task, root, need):
        raise ValueError(f"{name}: {why}")
    return c


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise ValueError("usage: python study/choice.py TASK")
    task = argv[0]
    c = read(os.path.join("results", "round2", task, "choice.json"), task, root=".", need=("first", "seeds", "flags", "reuse"))
    print(c["first"], c["seeds"], c["flags"])
    for row, d in c["reuse"].items():
        print(row, d)


if __name__ == "__main__":  # study/round2.sh: run from the repository root; a bad file: one line, exit 2
    sys.exit(run(main, "study/round2.sh", sys.argv[1:]))
