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
# The queue is seed-major.
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
queue() {
  local task choice first seeds flags k row dir
  for task in dyck copy; do
    choice="results/round2/$task/choice.json"
    [ -f "$choice" ] || continue
    read -r first seeds flags < <(python -c 'import json, sys; c = json.load(open(sys.argv[1])); print(c["first"], c["seeds"], c["flags"])' "$choice")
    local -A reuse=()
    while read -r row dir; do reuse[$row]=$dir; done < <(python -c 'import json, sys; [print(*kv) for kv in json.load(open(sys.argv[1]))["reuse"].items()]' "$choice")
    for ((k = first; k < first + seeds; k++)); do
      for row in fixed matched window rl; do
        dir=${reuse[$row]:-}
        [ -n "$dir" ] && [ -f "$dir/seed$k/eval.json" ] && continue
        echo "$task $row $k $(row_flags $row) $flags"
      done
    done
  done
}

if [ "${1:-}" = --list ]; then queue; exit 0; fi
queue | while read -r task row k flags; do echo "results/round2/$task/$row/seed$k $task $k $flags"; done \
  | bash results/lanes.sh results/round2/logs
python results/study.py
