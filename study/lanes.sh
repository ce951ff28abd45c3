#!/usr/bin/env bash
# Runs a queue of one-seed training runs in one lane: study/ladder.sh and study/round2.sh pipe their
# queues here. Each line of stdin is `OUT_DIR TASK SEED FLAGS...`; lane LANE of LANES (environment, checked
# by the caller) takes its own lines LANE, LANE + LANES, ... first, then any other line that no lane is
# running, so a lane whose share is done helps the others. A finished run (eval.json) is skipped, a started
# one resumed (--resume); a lock per run (LOGS/....lock, released when its lane dies) keeps two lanes off one
# run. Each run logs to LOGS/TASK-...-seedK.log (OUT_DIR below results/X/, / as -). THREADS (default 1)
# sets each run's --threads; a caller whose header declares a thread count sets THREADS itself (round2.sh and
# ladder.sh: 1, threads.sh: 2), so that whatever its own caller exported, the declared command runs.
#
#   QUEUE | THREADS=1 bash study/lanes.sh LOGS
set -euo pipefail
cd "$(dirname "$0")/.."
bad() { echo "study/lanes.sh: $1" >&2; exit 2; }
[ $# = 1 ] || bad "one argument expected (the folder for the logs), got $#"
[[ "${THREADS:-1}" =~ ^[1-9][0-9]{0,3}$ ]] || bad "THREADS=${THREADS:-} must be an integer in 1-9999 (each run's --threads)"
logs=$1
mkdir -p "$logs"
own=() others=()
i=0
while read -r line; do
  if [ $(( i % ${LANES:-1} )) = "${LANE:-0}" ]; then own+=("$line"); else others+=("$line"); fi
  i=$((i + 1))
done
for line in ${own[@]+"${own[@]}"} ${others[@]+"${others[@]}"}; do
  read -r out task k flags <<< "$line"
  [ -f "$out/eval.json" ] && continue
  rel=${out#results/*/}
  log="$logs/${rel//\//-}.log"
  exec 9> "${log%.log}.lock"
  if ! flock -n 9 || [ -f "$out/eval.json" ]; then exec 9>&-; continue; fi  # another lane runs it, or just finished it
  resume=
  [ -f "$out/config.json" ] && resume=--resume
  # shellcheck disable=SC2086
  python train.py --task "$task" --seed "$k" --seeds 1 --threads "${THREADS:-1}" $resume --out_dir "$out" $flags > "$log" 2>&1 \
    || { echo "run $out failed: see $log"; exit 1; }
  exec 9>&-
  echo "$(date +%H:%M) $out"
done
