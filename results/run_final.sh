#!/usr/bin/env bash
# The measurements behind the README's Performance, Theory and Readouts sections (run after
# run_experiments.sh). Part 1 may share the machine; part 2 (timings) wants it to itself.
set -euo pipefail
cd "$(dirname "$0")/.."
part=${1:-all}
if [[ $part == 1 || $part == all ]]; then
  python evaluate.py results/learns > results/learns.txt
  python evaluate.py results/dyck-window results/dyck-rl --paper > results/dyck.txt
  OMP_NUM_THREADS=1 python theory_checks.py --json results/theory.json > results/theory.txt
fi
if [[ $part == 2 || $part == all ]]; then
  python results/schedule_table.py --threads 2 > results/schedules.txt
  OMP_NUM_THREADS=1 python evaluate.py results/dyck-window/seed0 --fit-gate linear --fit-gate mlp --time --plot \
      > results/readouts.txt
  python bench.py --threads 2 --json results/bench.json > results/bench.txt 2> /dev/null
  # a 4-seed sweep: 2 ranks x 1 thread vs 1 process x 2 threads
  S="--seeds 4 --max_iters 100 --eval_samples 32 --log_interval 50"
  /usr/bin/time -f "%e" -o /tmp/sweep_torchrun.time torchrun --standalone --nproc_per_node=2 train.py $S --threads 1 --out_dir /tmp/sweep_tr > /dev/null
  /usr/bin/time -f "%e" -o /tmp/sweep_single.time python train.py $S --threads 2 --out_dir /tmp/sweep_single > /dev/null
fi
if [[ $part == 2 || $part == all ]]; then
  python - <<'PY'
import json
tr, si = (float(open(f"/tmp/sweep_{k}.time").read()) for k in ("torchrun", "single"))
json.dump({"command_common": "train.py --seeds 4 --max_iters 100 --eval_samples 32 --log_interval 50",
           "torchrun_2_ranks_x_1_thread_s": tr, "single_process_2_threads_s": si, "ratio": si / tr},
          open("results/sweep.json", "w"), indent=1)
PY
fi
