#!/usr/bin/env bash
# What one lease of the lent GPU machine (one H200, 16 CPU cores, a few minutes) runs, as one command:
#   1. study/cuda/check.py --part time       the paper preset's ms per training step, fp32 vs bf16 (quiet GPU)
#   2. study seeds on CUDA (fp32, --no-amp) WORKERS at a time, until BUDGET seconds after the start,
#      beside study/cuda/check.py --part schedules (every schedule trains and evaluates on CUDA)
#   3. the finished seeds' JSON packed into OUT/study.tgz (unpack it in the repo root; runs cut by the
#      deadline are dropped)
#
#   bash study/cuda/run.sh OUT [BUDGET]      # OUT: a folder that comes back; BUDGET default 470 s
#
# The study seeds are the same runs as study/study.sh's rows (same flags, same controlled seeds); only
# the device differs, and eval.json records it (env.hardware), so a table can say which seeds ran where.
set -u
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: run.sh OUT [BUDGET] (got $# arguments)" >&2; exit 2; }
OUT=$1
BUDGET=${2:-470}
[[ "$BUDGET" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: BUDGET '$BUDGET' must be a positive number of seconds" >&2; exit 2; }
WORKERS=${WORKERS:-14}
ONLY=${ONLY:-.}  # a regex on the queue's lines "TASK ROW SEED FLAGS" (e.g. ONLY='^dyck rl (8|9) '); CHECK=0: no checks
start=$(date +%s)
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
mkdir -p "$OUT" /tmp/claims /tmp/wlogs
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
[ "${CHECK:-1}" = 0 ] || timeout 110 python study/cuda/check.py --part time --json "$OUT/time.json" > "$OUT/time.txt" 2>&1

queue() {  # TASK ROW SEED FLAGS, seed-balanced: dyck's main rows to 16 seeds, copy's fixed and matched to 16
  # and its window to 16. rl comes last: on CUDA its step is slower than on one CPU thread (results/README.md).
  local rows=("fixed --schedule fixed" "matched --schedule matched" "window --schedule window --w 5")
  local rl="rl --schedule rl --lambda_ent 0.001"
  for k in 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7; do
    for r in "${rows[@]}"; do echo "dyck ${r%% *} $k ${r#* }"; done
  done
  for k in 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7; do  # copy's window seeds 0-7 also run on the CPU
    for r in "${rows[@]}"; do echo "copy ${r%% *} $k ${r#* }"; done
  done
  for k in 9 10 11 12 13 14 15 3 4 5 6 7; do echo "dyck rl $k ${rl#* }"; done
}
worker() {
  while read -r task row seed flags; do
    mkdir "/tmp/claims/$task-$row-$seed" 2>/dev/null || continue
    d=results/study/$task/$row/seed$seed
    [ -f "$d/eval.json" ] && continue
    echo "$(date +%s) start $task $row $seed" >> "/tmp/wlogs/worker$1.txt"
    python train.py --task "$task" --seed "$seed" --seeds 1 --threads 1 --device cuda --no-amp --overwrite \
      --out_dir "$d" $flags > "/tmp/wlogs/$task-$row-seed$seed.log" 2>&1
    rc=$?
    echo "$(date +%s) exit $rc $task $row $seed" >> "/tmp/wlogs/worker$1.txt"
  done < /tmp/queue.txt
}
queue | grep -E "$ONLY" > /tmp/queue.txt
touch /tmp/stamp
for i in $(seq "$WORKERS"); do worker "$i" & done
[ "${CHECK:-1}" = 0 ] || timeout 240 python study/cuda/check.py --part schedules --json "$OUT/schedules.json" > "$OUT/schedules.txt" 2>&1
while [ $(( $(date +%s) - start )) -lt "$BUDGET" ]; do sleep 5; done
pkill -f "train.py --task"; sleep 2; kill $(jobs -p) 2>/dev/null
nvidia-smi >> "$OUT/nvidia-smi.txt" 2>&1
find results/study -name eval.json -newer /tmp/stamp | while read -r f; do
  d=$(dirname "$f"); echo "$d/config.json"; echo "$d/eval.json"; echo "$d/metrics.jsonl"
done > /tmp/files.txt
tar czf "$OUT/study.tgz" -T /tmp/files.txt
tar czf "$OUT/wlogs.tgz" -C /tmp wlogs
echo "finished seeds: $(( $(wc -l < /tmp/files.txt) / 3 )) in $(( $(date +%s) - start )) s"
