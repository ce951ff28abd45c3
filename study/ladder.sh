#!/usr/bin/env bash
# The scale ladder (results/README.md, "Where does deterministic depth fail?"): fixed c = T_max, matched
# and window w = 5 on dyck and copy, 8 controlled seeds a row, at rungs of growing training compute.
#
#   bash study/ladder.sh                  # train every missing run in one lane, then the tables
#   LANE=0 LANES=2 bash study/ladder.sh & LANE=1 LANES=2 bash study/ladder.sh   # two lanes, one per core
#   bash study/ladder.sh --list           # the queue, one line per run: TASK RUNG ROW SEED FLAGS
#   bash study/ladder.sh --tables-only    # regenerate the ladder section of results/README.md
#
# Rung r1 is the study's first round (results/study/, seeds 0-7 of each row: the recipe's width and steps).
# The rungs trained here (compute relative to r1: steps x width^2):
#   r2  the recipe's width (d_model 64), 3x its steps                         3x
#   rE  r2 with a weight EMA (--ema 0.999, TRM's decay), evaluated on it      3x
#   r3  twice the width (d_model 128), 3x its steps                          12x
# and on an H200 (study/cuda/rung.sh): rH, the paper's width (d_model 256).
# A run is `python train.py --task TASK --seed k --seeds 1 --threads 1 --out_dir
# results/ladder/TASK/RUNG/ROW/seedk FLAGS` (study/lanes.sh runs the queue); a killed lane resumes
# (--resume) where it stopped and skips finished runs (eval.json). The queue is seed-major, so a lane cut
# short leaves balanced rows, and task by task: dyck's r2, r3 (the 12x span) and rE, then copy's r2, rE and
# r3, so that one task's answer and part C's rung (ladder.part_c needs a task's r2, r3 and rE) are settled
# first; dyck's seed costs a third of copy's.
set -euo pipefail
cd "$(dirname "$0")/.."
LANE=${LANE:-0}
LANES=${LANES:-1}
bad() { echo "study/ladder.sh: $1" >&2; exit 2; }
case "${1:-}" in ""|--list|--tables-only) ;; *) bad "unknown argument '$1' (allowed: none, --list, --tables-only)" ;; esac
[ $# -le 1 ] || bad "one argument at most, got $#"
[[ "$LANES" =~ ^[1-9][0-9]*$ ]] || bad "LANES=$LANES must be a positive integer"
[[ "$LANE" =~ ^[0-9]+$ ]] && [ "$LANE" -lt "$LANES" ] || bad "LANE=$LANE must be an integer in 0..$((LANES - 1)) (LANES=$LANES)"

steps() { case "$1" in dyck) echo 800 ;; copy) echo 1500 ;; esac; }  # the CPU recipes' max_iters (train.py)
queue() {
  local pair task rung
  for pair in dyck:r2 dyck:r3 dyck:rE copy:r2 copy:rE copy:r3; do
    task=${pair%:*} rung=${pair#*:}
    local s=$(( 3 * $(steps $task) )) extra="--d_model 64"
    [ $rung = r3 ] && extra="--d_model 128"
    [ $rung = rE ] && extra="--d_model 64 --ema 0.999"
    for k in 0 1 2 3 4 5 6 7; do
      echo "$task $rung fixed $k --schedule fixed --max_iters $s $extra"
      echo "$task $rung matched $k --schedule matched --max_iters $s $extra"
      echo "$task $rung window $k --schedule window --w 5 --max_iters $s $extra"
    done
  done
}

if [ "${1:-}" = --list ]; then queue; exit 0; fi
if [ "${1:-}" != --tables-only ]; then  # one thread a run, as declared, whatever THREADS the caller exported
  queue | while read -r task rung row k flags; do echo "results/ladder/$task/$rung/$row/seed$k $task $k $flags"; done \
    | THREADS=1 bash study/lanes.sh results/ladder/logs
fi
if [ -f study/ladder.py ]; then python study/ladder.py; fi  # its exit code is the script's (2: a damaged input)
