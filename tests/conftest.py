import os

# One thread per test process (and its subprocesses): tiny models gain nothing from more, and on a
# shared 2-core machine oversubscribed OpenMP threads slow a step down by orders of magnitude.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402  (after OMP_NUM_THREADS; pytest.ini's pythonpath makes the root importable)

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # run the suite with OMP_NUM_THREADS=1 and =2
