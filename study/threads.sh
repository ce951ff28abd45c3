#!/usr/bin/env bash
# Part A's thread-count check: does the study's budget converge with two threads as with one? The round-two
# commands (copy at r2, dyck at r1: results/round2/TASK/choice.json) for fixed and window, copy's seeds 0-1 and
# dyck's seed 0 (dyck's first round solved its training lengths on every seed), each as one process with 2
# threads and nothing else running (a copy fixed run took ~27 min here, the six runs 1.5 hours). Their
# one-thread twins are round two's runs of the same seeds. study/lanes.sh runs the queue (one lane): a
# finished run (eval.json) is skipped, a started one resumed.
#
#   bash study/threads.sh                # train the missing runs, then the table (python study/threads.py)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# = 0 ] || { echo "study/threads.sh: no arguments allowed, got '$*'" >&2; exit 2; }
# each task's round-two flags, from its choice.json as study/study.py checks it (read_choice): a missing,
# damaged or hand-edited one is one line and exit 2, before any run starts
flags=$(python -c '
import sys
from study import study
try:
    for task in sys.argv[1:]:
        if (c := study.read_choice(task)) is None:
            raise ValueError(f"results/round2/{task}/choice.json is missing: the check runs the command of round two")
        print(task, c["flags"])
except ValueError as err:
    sys.exit(print(f"study/threads.sh: {err}", file=sys.stderr) or 2)
' copy dyck) || exit $?
queue=$(while read -r task f; do
  seeds="0 1"
  [ $task = dyck ] && seeds=0
  for k in $seeds; do
    echo "results/threads/$task/fixed/seed$k $task $k --schedule fixed $f"
    echo "results/threads/$task/window/seed$k $task $k --schedule window --w 5 $f"
  done
done <<< "$flags")
THREADS=2 bash study/lanes.sh results/threads/logs <<< "$queue"  # two threads a run, as declared
python study/threads.py
