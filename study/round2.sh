#!/usr/bin/env bash
# Round two of the study (part C, results/README.md "The main table again"): the four main rows of
# study/study.sh (fixed, matched, window w = 5, rl) again, 16 declared seeds a row, at the rung the
# ladder's rule picked for a task. `python study/ladder.py` records that choice once, in
# results/round2/TASK/choice.json (rung, flags, first seed, reuse); a task without one is skipped.
#
#   bash study/round2.sh                  # train every missing run in one lane, then the tables
#   LANE=0 LANES=2 bash study/round2.sh & LANE=1 LANES=2 bash study/round2.sh   # two lanes, one per core
#   bash study/round2.sh --list           # the queue, one line per run: TASK ROW SEED FLAGS
#
# A declared seed already trained by the same command (the ladder's rung, or the first round at r1: the
# choice's `reuse` directories) is not trained again; study/study.py reads it from there. A run is
# `python train.py --task TASK --seed k --seeds 1 --threads 1 --out_dir results/round2/TASK/ROW/seedk FLAGS`
# (study/lanes.sh runs the queue); a killed lane resumes (--resume) and skips finished runs (eval.json).
# The queue is seed-major, and built before a run starts: a choice.json that is damaged or holds what the rule
# does not write (study/study.py's choice_problem) is refused, one line and exit 2, with nothing trained.
set -euo pipefail
cd "$(dirname "$0")/.."
LANE=${LANE:-0}
LANES=${LANES:-1}
bad() { echo "study/round2.sh: $1" >&2; exit 2; }
case "${1:-}" in ""|--list) ;; *) bad "unknown argument '$1' (allowed: none, --list)" ;; esac
[ $# -le 1 ] || bad "one argument at most, got $#"
[[ "$LANES" =~ ^[1-9][0-9]*$ ]] || bad "LANES=$LANES must be a positive integer"
[[ "$LANE" =~ ^[0-9]+$ ]] && [ "$LANE" -lt "$LANES" ] || bad "LANE=$LANE must be an integer in 0..$((LANES - 1)) (LANES=$LANES)"

row_flags() {  # the main rows, as study/study.sh's main_rows trains them
  case "$1" in
    fixed) echo "--schedule fixed" ;;
    matched) echo "--schedule matched" ;;
    window) echo "--schedule window --w 5" ;;
    rl) echo "--schedule rl --lambda_ent 0.001" ;;
  esac
}
# choice TASK: results/round2/TASK/choice.json checked by study/choice.py's rules (those of study.py and ladder.py
# too), printed as `FIRST SEEDS FLAGS`, then `ROW DIR` per reused row. A damaged or hand-edited file: one line
# naming it, exit 2.
choice() { python study/choice.py "$1"; }
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
  | THREADS=1 bash study/lanes.sh results/round2/logs
python study/study.py
