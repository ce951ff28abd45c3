#!/usr/bin/env bash
# The depth-use study "Does the model use its loop?" (declared in study/depth.py's docstring before its first
# run): dyck's CPU recipe, rows window / window_floor (--k_min 10) / fixed_window / fixed, seeds 400-415, one run a
# seed and row, queued seed-major. study/lanes.sh runs the queue with --threads 1: a finished run (eval.json) is
# skipped, a started one resumed (--resume), so a killed lane just starts again.
#
#   bash study/depth.sh                   # one lane, then the tables (python study/depth.py)
#   LANE=1 LANES=2 bash study/depth.sh    # a second lane beside it (it helps with what the first is not running)
#   bash study/depth.sh --list            # the queue, one line per run: OUT_DIR TASK SEED FLAGS
set -euo pipefail
cd "$(dirname "$0")/.."
bad() { echo "study/depth.sh: $1" >&2; exit 2; }
case "${1:-}" in ""|--list) ;; *) bad "unknown argument '$1' (allowed: none, --list)" ;; esac
[ $# -le 1 ] || bad "one argument at most, got $#"
LANE=${LANE:-0}
LANES=${LANES:-1}
[[ "$LANES" =~ ^[1-9][0-9]*$ ]] || bad "LANES=$LANES must be a positive integer"
[[ "$LANE" =~ ^[0-9]+$ ]] && [ "$LANE" -lt "$LANES" ] || bad "LANE=$LANE must be an integer in 0..$((LANES - 1)) (LANES=$LANES)"
export LANE LANES
if [ "${1:-}" = --list ]; then python study/depth.py --queue; exit 0; fi
python study/depth.py --queue | THREADS=1 bash study/lanes.sh results/depth/logs
python study/depth.py
