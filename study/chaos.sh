#!/usr/bin/env bash
# The perturbation study "Seed or chaos?" (declared in study/chaos.py's docstring before its first run):
# dyck's CPU recipe, rows fixed / window w = 5 / rl, seeds 100-109, five replicates a seed (r = 0 plain,
# r = 1..4 `--perturb 1e-6 --perturb_seed r`), queued replicate layer first; the determinism controls of this
# machine's CPU model after layer 0. study/lanes.sh runs the queue with --threads 1: a finished run
# (eval.json) is skipped, a started one resumed (--resume), so a killed lane just starts again.
#
#   bash study/chaos.sh                   # one lane, then the tables (python study/chaos.py)
#   LANE=0 LANES=2 bash study/chaos.sh & LANE=1 LANES=2 bash study/chaos.sh   # two lanes, one per core
#   bash study/chaos.sh --threads2        # the secondary runs: 2 threads, one process, nothing else running
#   bash study/chaos.sh --list            # the queue, one line per run: OUT_DIR TASK SEED FLAGS
set -euo pipefail
cd "$(dirname "$0")/.."
bad() { echo "study/chaos.sh: $1" >&2; exit 2; }
case "${1:-}" in ""|--list|--threads2) ;; *) bad "unknown argument '$1' (allowed: none, --list, --threads2)" ;; esac
[ $# -le 1 ] || bad "one argument at most, got $#"
LANE=${LANE:-0}
LANES=${LANES:-1}
[[ "$LANES" =~ ^[1-9][0-9]*$ ]] || bad "LANES=$LANES must be a positive integer"
[[ "$LANE" =~ ^[0-9]+$ ]] && [ "$LANE" -lt "$LANES" ] || bad "LANE=$LANE must be an integer in 0..$((LANES - 1)) (LANES=$LANES)"
export LANE LANES
case "${1:-}" in
  --list) python study/chaos.py --queue; exit 0 ;;
  --threads2) python study/chaos.py --queue-threads2 | LANE=0 LANES=1 THREADS=2 bash study/lanes.sh results/chaos/logs ;;
  *) python study/chaos.py --queue | THREADS=1 bash study/lanes.sh results/chaos/logs ;;
esac
python study/chaos.py
