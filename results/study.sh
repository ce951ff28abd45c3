#!/usr/bin/env bash
# The reproduction study: the primary paper's table and ablations at laptop scale (results/README.md).
#
#   bash results/study.sh                  # train every missing seed (finished ones are skipped), then the tables
#   bash results/study.sh --tables-only    # regenerate results/README.md's study tables and plots from the JSON
#   NPROC=1 bash results/study.sh          # torchrun ranks of one thread each (default 2: one per core)
#   STAGE=dyck bash results/study.sh       # only the runs of one stage (dyck, ...), then the tables
#
# Every run is `python train.py --task TASK ...` with the task's CPU recipe; seed k of every row starts
# from the same initial weights and sees the same batches (controlled seeds). A run writes
# results/study/TASK/ROW/seed{k}/{config.json, eval.json, metrics.jsonl} (committed) and ckpt.pt
# (git-ignored). A killed study resumes where it stopped: `--resume` continues a run from its checkpoint
# and skips a finished one.
set -euo pipefail
cd "$(dirname "$0")/.."
NPROC=${NPROC:-2}
STAGE=${STAGE:-all}

row() {  # row TASK NAME SEEDS FLAGS...: seeds 0..SEEDS-1 of one table row
  local task=$1 name=$2 seeds=$3
  shift 3
  python -m torch.distributed.run --standalone --nproc_per_node "$NPROC" train.py --task "$task" --seeds "$seeds" \
    --threads 1 --resume --out_dir "results/study/$task/$name" "$@" > "results/study/logs/$task-$name.log" 2>&1 \
    || { echo "row $task $name failed: see results/study/logs/$task-$name.log"; exit 1; }
  echo "$(date +%H:%M) $task $name: $seeds seeds"
}

if [ "${1:-}" != "--tables-only" ]; then
  mkdir -p results/study/logs
  if [ "$STAGE" = all ] || [ "$STAGE" = dyck ]; then
    # the four main rows: 8 seeds each first (the power estimate), then 16
    for n in 8 16; do
      row dyck fixed "$n" --schedule fixed
      row dyck matched "$n" --schedule matched
      row dyck window "$n" --schedule window --w 5
      row dyck rl "$n" --schedule rl --lambda_ent 0.001
    done
    row dyck fixed_window 8 --schedule fixed_window --c 20 --w 5
    row dyck multidepth 8 --schedule multidepth --w 5
    row dyck ponder 8 --schedule ponder
  fi
fi
python results/study.py
