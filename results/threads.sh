#!/usr/bin/env bash
# Part A's thread-count check: does the study's budget converge with two threads as with one? The round-two
# commands (copy at r2, dyck at r1: results/round2/TASK/choice.json) for fixed and window, copy's seeds 0-1 and
# dyck's seed 0 (dyck's first round solved its training lengths on every seed), each as one process with 2
# threads and nothing else running (a copy fixed run took ~27 min here, the six runs 1.5 hours). Their
# one-thread twins are round two's runs of the same seeds. results/lanes.sh runs the queue (one lane): a
# finished run (eval.json) is skipped, a started one resumed.
#
#   bash results/threads.sh                # train the missing runs, then the table (python results/threads.py)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# = 0 ] || { echo "results/threads.sh: no arguments allowed, got '$*'" >&2; exit 2; }
for task in copy dyck; do
  flags=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["flags"])' "results/round2/$task/choice.json")
  seeds="0 1"
  [ $task = dyck ] && seeds=0
  for k in $seeds; do
    echo "results/threads/$task/fixed/seed$k $task $k --schedule fixed $flags"
    echo "results/threads/$task/window/seed$k $task $k --schedule window --w 5 $flags"
  done
done | THREADS=2 bash results/lanes.sh results/threads/logs
python results/threads.py
