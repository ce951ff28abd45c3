#!/usr/bin/env bash
# The screenshots of the depth explorer (python evaluate.py DIR --html FILE, lab/explorer.py) in results/explorer/,
# taken by headless Chromium: the across-runs and run views of the chaos study's 169 runs (results/chaos/dyck,
# committed without checkpoints), and the samples view of a short fresh run with its ckpt.pt (dyck, window w=5,
# 300 steps, 32 test samples a length: a few minutes on one core; trained into out/dyck-short once).
#
#   bash study/shots.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BROWSER=$(command -v chromium || command -v chromium-browser) || {
    echo "study/shots.sh: needs chromium (apt-get install chromium)" >&2; exit 2; }
PROFILE=$(mktemp -d)
trap 'rm -rf "$PROFILE"' EXIT
mkdir -p out
[ -f out/dyck-short/eval.json ] || python train.py --max_iters 300 --eval_samples 32 --threads 1 --out_dir out/dyck-short
python evaluate.py results/chaos/dyck --html out/chaos-dyck.html
python evaluate.py out/dyck-short --html out/dyck-short.html
shot() {  # PNG name, page#hash, window height
    "$BROWSER" --headless --disable-gpu --no-sandbox --hide-scrollbars --user-data-dir="$PROFILE" \
        --screenshot="results/explorer/$1" --window-size=1400,"$3" "file://$PWD/out/$2" >/dev/null 2>&1
}
# run 129 is results/chaos/dyck/window/seed102/r0, run 64 rl/seed102/r0 (the page's order: find_runs, sorted);
# tip=8,3 hovers n = 40, K = 4
shot runs.png "chaos-dyck.html#view=runs&run=129&cmp=64" 440
shot run.png "chaos-dyck.html#view=run&run=129&tip=8,3" 440
shot compare.png "chaos-dyck.html#view=run&run=129&cmp=64" 730
shot sample.png "dyck-short.html#view=sample&n=55" 535
ls -l results/explorer/*.png
