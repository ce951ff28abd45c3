"""train.py with the seeding of the code before the refactor (commit bb1fda0): for seed 0 the model was
initialised after torch.manual_seed(0), batches came from a generator seeded 0 and depths from one
seeded 1. With that seeding the refactored train.py must give the old code's run bitwise, which isolates
the refactor from the seed-stream change (results/checks/refactor_check.json).

    git worktree add /tmp/old bb1fda0 && (cd /tmp/old && python train.py --threads 1 --out_dir /tmp/eq_old)
    python results/checks/refactor_check_seeding.py --threads 1 --out_dir /tmp/eq_new
"""
import os
import sys

if __package__ in (None, ""):  # run as `python results/checks/refactor_check_seeding.py`: the repository is the import root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import config  # noqa: E402
import train  # noqa: E402

config.stream = lambda seed, name: {"model": seed, "head": seed, "data": 2 * seed, "depth": 2 * seed + 1,
                                   "torch": seed}[name]
sys.exit(train.cli(sys.argv[1:]))
