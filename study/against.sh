#!/usr/bin/env bash
# evaluate.py --against on the committed runs (study/against.py): first the 10 runs of a deliberately changed
# method, window w = 2, seeds 300-309 of the default recipe (one thread; --resume continues a stopped sweep),
# then the verdicts.
set -euo pipefail
cd "$(dirname "$0")/.."
out=results/against/dyck/window-w2
if [ -d "$out" ]; then resume=--resume; else resume=; fi
python train.py --schedule window --w 2 --seed 300 --seeds 10 --threads 1 --out_dir "$out" $resume
python study/against.py
