"""
Bench row (h)'s hot path before and after the redesign (issue 52 C), side by side in one process: the stacked
model and schedule of an old checkout's stack.py (its own layer classes and losses) against lab/stack.py (model.py's
modules with seed-axis leaves, halting.py's objectives), on the same stacked weights and batch: one training
step's forward and backward for S seeds, alternated, median of the repeats. Also checks the two give the same loss
and gradients bitwise.

    git worktree add /tmp/old 5f4ee36
    python results/checks/layout_bench.py /tmp/old --json results/checks/layout_bench.json
"""

import dataclasses
import importlib.util
import os
import statistics
import sys
import time

if __package__ in (None, ""):  # run as `python results/checks/layout_bench.py`: the repository is the import root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import train  # noqa: E402
from config import build  # noqa: E402
from lab import checks, rundir, stack  # noqa: E402
from lab.cli import run  # noqa: E402
from lab.files import write_json
from tasks import IGNORE, PAD, train_batch  # noqa: E402


def old_stack(tree: str):
    """The old checkout's stack.py, loaded as its own module (it imports halting and model: today's, whose
    functions it uses are unchanged)."""
    spec = importlib.util.spec_from_file_location("old_stack", os.path.join(tree, "stack.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 3) or not os.path.isfile(os.path.join(argv[0], "stack.py")):
        raise ValueError("usage: python results/checks/layout_bench.py OLD_CHECKOUT [--json PATH]")
    if len(argv) == 3:
        checks.check_output("--json", argv[2])
    torch.set_num_threads(1)
    old = old_stack(argv[0])
    out = {"what": "one stacked training step (forward + backward), S seeds, old stack.py vs lab/stack.py, alternated in "
                   "one process, one thread; median ms", "rows": [], "env": rundir.environment()}
    for schedule in ("window", "rl"):
        for S in (1, 4):
            cfg = train.parse_args(["--schedule", schedule, "--threads", "1"])
            cfgs = [dataclasses.replace(cfg, seed=k) for k in range(S)]
            built = [build(c) for c in cfgs]
            task = built[0][0]
            gens = [torch.Generator().manual_seed(k) for k in range(S)]
            parts = [train_batch(task, cfg.batch_size, cfg.n_min, cfg.n_max, g) for g in gens]
            P = max(p[0].shape[1] for p in parts)
            pad = lambda t, v: torch.nn.functional.pad(t, (0, P - t.shape[1]), value=v)
            x = torch.stack([pad(p[0], PAD) for p in parts])
            y = torch.stack([pad(p[1], IGNORE) for p in parts])
            Tn = torch.stack([p[3] for p in parts])
            sides = {}
            for name, mod in (("old", old), ("new", stack)):
                model = mod.StackedLoopedTransformer([b[1] for b in built])
                sched = mod.StackedSchedule([b[2] for b in built])
                sides[name] = (model, sched)
            draw = sides["new"][1].draw(Tn, [torch.Generator().manual_seed(100 + k) for k in range(S)])

            def step(name):
                model, sched = sides[name]
                model.zero_grad(set_to_none=True)
                if hasattr(sched, "baseline"):
                    sched.baseline.zero_()
                t = time.perf_counter()
                loss, _ = sched.loss(model, x, y, Tn, draw, draw)
                loss.sum().backward()
                return time.perf_counter() - t, loss.detach(), [p.grad.clone() for p in model.parameters()]

            _, lo, go = step("old")
            _, ln, gn = step("new")
            same = torch.equal(lo, ln) and all(torch.equal(a, b) for a, b in zip(go, gn))
            times = {"old": [], "new": []}
            for rep in range(8):  # alternated, each side first every other time
                for name in (("old", "new") if rep % 2 else ("new", "old")):
                    times[name].append(step(name)[0])
            ms = {k: 1000 * statistics.median(v) for k, v in times.items()}
            row = {"schedule": schedule, "S": S, "old_ms": ms["old"], "new_ms": ms["new"], "new_over_old": ms["new"] / ms["old"],
                   "loss_and_gradients_equal": same}
            out["rows"].append(row)
            print(f"{schedule} S={S}: old {ms['old']:.0f} ms, new {ms['new']:.0f} ms ({row['new_over_old']:.2f}x), "
                  f"loss and gradients {'bitwise equal' if same else 'DIFFERENT'}")
    if len(argv) == 3:
        write_json(argv[2], out)
    return 0


if __name__ == "__main__":
    sys.exit(run(main, "results/layout_bench.py", sys.argv[1:]))
