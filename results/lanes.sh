#!/usr/bin/env bash
# Runs a queue of one-seed training runs in one lane: results/ladder.sh and results/round2.sh pipe their
# queues here. Each line of stdin is `OUT_DIR TASK SEED FLAGS...`; lane LANE of LANES (environment, checked
# by the caller) takes lines LANE, LANE + LANES, ... A finished run (eval.json) is skipped, a started one
# resumed (--resume), and each run logs to LOGS/TASK-...-seedK.log (OUT_DIR below results/X/, / as -).
#
#   QUEUE | bash results/lanes.sh LOGS
set -euo pipefail
cd "$(dirname "$0")/.."
logs=$1
mkdir -p "$logs"
i=0
while read -r out task k flags; do
  i=$((i + 1))
  [ $(( (i - 1) % ${LANES:-1} )) = "${LANE:-0}" ] || continue
  [ -f "$out/eval.json" ] && continue
  resume=
  [ -f "$out/config.json" ] && resume=--resume
  rel=${out#results/*/}
  log="$logs/${rel//\//-}.log"
  # shellcheck disable=SC2086
  python train.py --task "$task" --seed "$k" --seeds 1 --threads 1 $resume --out_dir "$out" $flags > "$log" 2>&1 \
    || { echo "run $out failed: see $log"; exit 1; }
  echo "$(date +%H:%M) $out"
done
