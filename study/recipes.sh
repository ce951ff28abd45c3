#!/usr/bin/env bash
# What learns on this CPU: one run of every task's CPU recipe (train.py RECIPES), window w=5, seed 0,
# then the table of results/README.md ("What learns") and the accuracy-vs-K plots.
#
#   bash study/recipes.sh            # two runs at a time, one thread each (say so beside the times)
#   bash study/recipes.sh --table    # only the table and plots, from the committed JSON
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in ""|--table) ;; *) echo "study/recipes.sh: unknown argument '$1' (allowed: none, --table)" >&2; exit 2 ;; esac
if [ "${1:-}" != "--table" ]; then
  mkdir -p results/recipes/logs
  lane() {  # a finished run is skipped, an interrupted one resumed
    for t in "$@"; do
      d="results/recipes/$t"
      [ -f "$d/eval.json" ] || [ -f "results/study/$t/window/seed0/eval.json" ] && continue  # the study's seed 0 is this run
      python train.py --task "$t" --threads 1 --out_dir "$d" $([ -f "$d/config.json" ] && echo --resume) \
        > "results/recipes/logs/$t.log" 2>&1 || echo "$t failed: see results/recipes/logs/$t.log"
    done
  }
  lane parity_prefix parity binary_sum multiplication &
  lane unique_set addition mano dyck copy &
  wait
fi
python study/recipes.py
