#!/usr/bin/env bash
# Round two of the study (part C, results/README.md "The main table again"): the four main rows of
# results/study.sh (fixed, matched, window w = 5, rl) again, 16 declared seeds a row, at the rung the
# ladder's rule picked for a task. `python results/ladder.py` records that choice once, in
# results/round2/TASK/choice.json (rung, flags, first seed, reuse); a task without one is skipped.
#
#   bash results/round2.sh                  # train every missing run in one lane, then the tables
#   LANE=0 LANES=2 bash results/round2.sh & LANE=1 LANES=2 bash results/round2.sh   # two lanes, one per core
#   bash results/round2.sh --list           # the queue, one line per run: TASK ROW SEED FLAGS
#
# A declared seed already trained by the same command (the ladder's rung, or the first round at r1: the
# choice's `reuse` directories) is not trained again; results/study.py reads it from there. A run is
# `python train.py --task TASK --seed k --seeds 1 --threads 1 --out_dir results/round2/TASK/ROW/seedk FLAGS`
# (results/lanes.sh runs the queue); a killed lane resumes (--resume) and skips finished runs (eval.json).
# The queue is seed-major, and built before a run starts: a choice.json that is damaged or holds what the rule
# does not write (results/study.py's choice_problem) is refused, one line and exit 2, with nothing trained.
set -euo pipefail
cd "$(dirname "$0")/.."
LANE=${LANE:-0}
LANES=${LANES:-1}
bad() { echo "results/round2.sh: $1" >&2; exit 2; }
case "${1:-}" in ""|--list) ;; *) bad "unknown argument '$1' (allowed: none, --list)" ;; esac
[ $# -le 1 ] || bad "one argument at most, got $#"
[[ "$LANES" =~ ^[1-9][0-9]*$ ]] || bad "LANES=$LANES must be a positive integer"
[[ "$LANE" =~ ^[0-9]+$ ]] && [ "$LANE" -lt "$LANES" ] || bad "LANE=$LANE must be an integer in 0..$((LANES - 1)) (LANES=$LANES)"

row_flags() {  # the main rows, as results/study.sh's main_rows trains them
  case "$1" in
    fixed) echo "--schedule fixed" ;;
    matched) echo "--schedule matched" ;;
    window) echo "--schedule window --w 5" ;;
    rl) echo "--schedule rl --lambda_ent 0.001" ;;
  esac
}
# choice TASK: results/round2/TASK/choice.json checked by results/study.py's rules (choice_problem: the keys this
# script reads must be there, every key known and of its type, each value one results/ladder.py's rule can write;
# tests/test_reliability4_results.py runs both on the same files), printed as `FIRST SEEDS FLAGS`, then
# `ROW DIR` per reused row. A damaged or hand-edited file: one line naming it, exit 2.
choice() {
  python - "$1" <<'PY'
import json, os, re, sys
task, path = sys.argv[1], f"results/round2/{sys.argv[1]}/choice.json"
KEYS = {"task": str, "rung": str, "first": int, "seeds": int, "why": str, "flags": str, "reuse": dict, "chosen_from": str}
RUNGS, FIRST, SEEDS, MAIN = ("r1", "r2", "r3", "rE", "rH"), (0, 8), 16, ("fixed", "matched", "window", "rl")
FLAGS = re.compile(r"--max_iters [1-9][0-9]{0,8} --d_model [1-9][0-9]{0,5}(?: --ema (?P<ema>[0-9][0-9.e+-]{0,15}))?")
DIR = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(?:/[A-Za-z0-9._-]+)*/?")
show = lambda v: (s if len(s := json.dumps(v)) <= 40 else s[:37] + "...")
words = {str: "a string", int: "an integer", dict: "an object"}


def decay(text):
    try:
        return 0.0 < float(text) < 1.0
    except ValueError:
        return False


def problem(c):
    if not isinstance(c, dict):
        return f"a JSON object expected, got {show(c)}"
    if unknown := sorted(set(c) - set(KEYS)):
        return f"unknown key {', '.join(map(repr, unknown))} (allowed: {', '.join(KEYS)})"
    if missing := [k for k in ("first", "seeds", "flags", "reuse") if k not in c]:
        return f"key {', '.join(map(repr, missing))} missing"
    for key, typ in KEYS.items():
        if key in c and (not isinstance(c[key], typ) or isinstance(c[key], bool)):
            return f"{key!r} must be {words[typ]}, got {show(c[key])}"
    if c.get("task", task) != task:
        return f"'task' must be {task!r} (the folder's task), got {show(c['task'])}"
    if c.get("rung", RUNGS[0]) not in RUNGS:
        return f"'rung' must be one of {', '.join(RUNGS)}, got {show(c['rung'])}"
    if c["first"] not in FIRST:
        return f"'first' must be {' or '.join(map(str, FIRST))} (the rule's first seed), got {show(c['first'])}"
    if c["seeds"] != SEEDS:
        return f"'seeds' must be {SEEDS} (the declared seeds of a main row), got {show(c['seeds'])}"
    if not ((m := FLAGS.fullmatch(c["flags"])) and (m["ema"] is None or decay(m["ema"]))):
        return (f"'flags' must be '--max_iters N --d_model N', then optionally ' --ema DECAY' (0 < DECAY < 1), as "
                f"results/ladder.py records them, got {show(c['flags'])}")
    for row, d in c["reuse"].items():
        if row not in MAIN:
            return f"'reuse' names the row {row!r}: allowed {', '.join(MAIN)} (round two's rows)"
        if not (isinstance(d, str) and DIR.fullmatch(d) and ".." not in d.split("/") and os.path.isdir(d)):
            return (f"'reuse' of {row} must be an existing folder, relative to the repository and inside it "
                    f"(letters, digits, . _ - /), got {show(d)}")
    return ""


try:
    with open(path, encoding="utf-8") as f:
        c = json.load(f)
except (OSError, ValueError) as err:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
    what = str(err).splitlines()[0] if str(err) else type(err).__name__
    sys.exit(print(f"results/round2.sh: {path}: not valid JSON or not readable ({what}); results/ladder.py writes it "
                   "once: restore it from git", file=sys.stderr) or 2)
if why := problem(c):
    sys.exit(print(f"results/round2.sh: {path}: {why}", file=sys.stderr) or 2)
print(c["first"], c["seeds"], c["flags"])
for row, d in c["reuse"].items():
    print(row, d)
PY
}
queue() {  # the whole queue, or (a bad choice.json) one line on stderr and exit 2 before any line
  local task file lines first seeds flags k row dir out=()
  for task in dyck copy; do
    file="results/round2/$task/choice.json"
    [ -e "$file" ] || [ -L "$file" ] || continue
    lines=$(choice "$task") || exit $?
    read -r first seeds flags <<< "${lines%%$'\n'*}"
    local -A reuse=()
    while read -r row dir; do reuse[$row]=$dir; done < <(tail -n +2 <<< "$lines")
    for ((k = first; k < first + seeds; k++)); do
      for row in fixed matched window rl; do
        dir=${reuse[$row]:-}
        [ -n "$dir" ] && [ -f "$dir/seed$k/eval.json" ] && continue
        out+=("$task $row $k $(row_flags $row) $flags")
      done
    done
  done
  [ ${#out[@]} = 0 ] || printf '%s\n' "${out[@]}"
}

# the queue is built (every choice.json checked) before a run starts; the runs' command is the header's, one
# thread each whatever THREADS the caller exported
q=$(queue) || exit $?
if [ "${1:-}" = --list ]; then
  [ -z "$q" ] || echo "$q"
  exit 0
fi
[ -z "$q" ] || while read -r task row k flags; do echo "results/round2/$task/$row/seed$k $task $k $flags"; done <<< "$q" \
  | THREADS=1 bash results/lanes.sh results/round2/logs
python results/study.py
