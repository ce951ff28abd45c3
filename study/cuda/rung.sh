#!/usr/bin/env bash
# Issue 33's rung on the lent H200, as one command of at most 9 minutes: dyck at d_model 256 (the paper
# width), fixed c = T_max, matched and window w = 5 (study/ladder.sh's rows), 16 seeds a row trained as
# one stacked chunk (train.py --seeds 16 --stack 16), at the step budget that fits:
#   1. a 12-step run of the fixed row (every sample 20 loop steps: the slowest row), eager and --static:
#      the faster mode is used, and its ms per step and evaluation time set the budget
#   2. max_iters = what fits BUDGET seconds for the three rows, after the measurement, process starts and
#      each seed's evaluation
#   3. the rows, one after the other; each finished seed's eval.json, config.json and metrics.jsonl are
#      copied to OUT/results/ladder/dyck/rH/ROW/seedk/ as soon as its row ends (unpack OUT in the repo root)
#
#   bash study/cuda/rung.sh OUT [BUDGET]       # BUDGET default 450 s
#   SMOKE=1 bash study/cuda/rung.sh OUT 60     # CPU, a tiny size, 2 seeds a row: does it run (tests/test_stack.py)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: rung.sh OUT [BUDGET] (got $# arguments)" >&2; exit 2; }
OUT=$1
BUDGET=${2:-450}
[[ "$BUDGET" =~ ^[1-9][0-9]*$ ]] || { echo "rung.sh: BUDGET '$BUDGET' must be a positive number of seconds" >&2; exit 2; }
start=$(date +%s)
SCRATCH=$(mktemp -d)
export PYTHONUNBUFFERED=1
if [ "${SMOKE:-0}" = 1 ]; then
  SEEDS=2 MAX_STEPS=20
  FLAGS="--device cpu --threads 1 --d_model 16 --n_head 2 --n_layer 1 --batch_size 8 --T_max 6 --T_test 8 --n_max 6 --eval_samples 8 --test_lengths 3,6,8"
else
  SEEDS=16 MAX_STEPS=100000
  FLAGS="--device cuda --d_model 256 --n_head 8"
fi
ROWS=("fixed --schedule fixed" "matched --schedule matched" "window --schedule window --w 5")
run() {  # DIR MAX_ITERS EXTRA...: one row of SEEDS stacked seeds
  local d=$1 m=$2; shift 2
  # shellcheck disable=SC2086
  python train.py --task dyck --seeds "$SEEDS" --stack "$SEEDS" --max_iters "$m" --log_interval 4 --eval_interval "$m" \
    --ckpt_interval "$m" --out_dir "$d" $FLAGS "$@" > "$d.log" 2>&1
}
# 1. the fixed row for 12 steps, eager and static
for mode in eager static; do
  extra=""; [ $mode = static ] && extra=--static
  t0=$(date +%s); run "$SCRATCH/m_$mode" 12 --schedule fixed $extra; echo $(( $(date +%s) - t0 )) > "$SCRATCH/m_$mode.wall"
done
# 2. the mode and the step budget (python: medians of the measured log lines, the first one is warm-up)
read -r MODE ITERS < <(python - "$SCRATCH" "$BUDGET" "$(( $(date +%s) - start ))" "$SEEDS" "$MAX_STEPS" <<'EOF'
import json, statistics, sys
scratch, budget, spent, seeds, cap = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
best = None
for mode in ("eager", "static"):
    lines = [json.loads(l) for l in open(f"{scratch}/m_{mode}/seed0/metrics.jsonl")]
    ms = statistics.median(l["ms_per_step"] for l in lines[1:])
    ev = sum(json.load(open(f"{scratch}/m_{mode}/seed{k}/eval.json"))["eval_time_s"] for k in range(seeds))
    train = float(open(f"{scratch}/m_{mode}.wall").read()) - ev  # start-up, 12 steps, checkpoints
    fixed_cost = train - 12 * ms / 1e3 + ev  # what a row costs besides its steps
    if best is None or ms < best[1]:
        best = (mode, ms, fixed_cost)
mode, ms, fixed_cost = best
iters = int((budget - spent - 3 * fixed_cost - 15) / (3 * ms / 1e3))
print(mode, max(1, min(cap, iters)))
EOF
)
echo "rung: mode $MODE, $ITERS steps a row, $(( $(date +%s) - start )) s spent measuring"
extra=""; [ "$MODE" = static ] && extra=--static
# 3. the rows; each one's seeds go to OUT when it ends
for r in "${ROWS[@]}"; do
  row=${r%% *}
  d="$SCRATCH/results/ladder/dyck/rH/$row"
  mkdir -p "$(dirname "$d")"
  # shellcheck disable=SC2086
  run "$d" "$ITERS" ${r#* } $extra || echo "row $row: train.py exited $? (see the log in OUT)"
  for s in "$d"/seed*/; do
    [ -f "$s/eval.json" ] || continue
    dest="$OUT/results/ladder/dyck/rH/$row/$(basename "$s")"
    mkdir -p "$dest"
    cp "$s/eval.json" "$s/config.json" "$s/metrics.jsonl" "$dest/"
  done
  cp "$d.log" "$OUT/rung-$row.log"
  echo "$(( $(date +%s) - start )) s: row $row done"
done
rm -rf "$SCRATCH"
