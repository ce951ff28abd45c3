#!/usr/bin/env bash
# The runs behind the README's result tables, on the 2-core CPU: two lanes of one thread each
# (one process per core; see README "Performance" on threads). Each run writes eval.json,
# metrics.jsonl and config.json under results/ (checkpoints are not committed).
set -euo pipefail
cd "$(dirname "$0")/.."
T="--threads 1"
lane_a() {
  python train.py --task dyck --schedule window --w 5 --seeds 3 $T --out_dir results/dyck-window
  python train.py --task parity_prefix --max_iters 500 $T --out_dir results/learns/parity_prefix
  python train.py --task copy --max_iters 500 --curriculum --curriculum_start 2 --curriculum_every 25 $T --out_dir results/learns/copy
  python train.py --task parity --max_iters 500 --curriculum --curriculum_start 2 --curriculum_every 25 $T --out_dir results/learns/parity
  python train.py --task addition --max_iters 500 --curriculum --curriculum_start 2 --curriculum_every 25 $T --out_dir results/learns/addition
}
lane_b() {
  python train.py --task dyck --schedule rl --seeds 3 $T --out_dir results/dyck-rl
  python train.py --task unique_set --max_iters 500 --curriculum --curriculum_start 2 --curriculum_every 25 $T --out_dir results/learns/unique_set
  python train.py --task binary_sum --max_iters 500 --curriculum --curriculum_start 2 --curriculum_every 25 $T --out_dir results/learns/binary_sum
  python train.py --task multiplication --max_iters 500 --curriculum --curriculum_start 2 --curriculum_every 25 $T --out_dir results/learns/multiplication
  python train.py --task mano --max_iters 500 --curriculum --curriculum_start 1 --curriculum_every 25 $T --out_dir results/learns/mano
}
lane_a > results/lane_a.log 2>&1 &
lane_b > results/lane_b.log 2>&1 &
wait
