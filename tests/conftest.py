import os
import sys

# One thread per test process (and its subprocesses): tiny models gain nothing from more, and on a
# shared 2-core machine oversubscribed OpenMP threads slow a step down by orders of magnitude.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# the project is a set of flat scripts: make them importable from tests/
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # run the suite with OMP_NUM_THREADS=1 and =2
