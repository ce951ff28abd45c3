"""
Does today's code evaluate a finished run exactly as the code that trained it did? For every run directory below
the given folders that still holds its ckpt.pt (checkpoints are not committed: run this where the runs were
trained), rebuild the run from its checkpoint (lab/records.load_run), evaluate it again on its fixed test and
validation sets (metrics.evaluate, the call train.py ends with), and compare every number with its eval.json.

    python results/checks/regenerate_check.py /work/chaos-tree/results/chaos --json results/checks/regenerate_check.json
"""

import json
import os
import sys

if __package__ in (None, ""):  # run as `python results/checks/regenerate_check.py`: the repository is the import root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import metrics  # noqa: E402
from config import Config, trained_depth  # noqa: E402
from lab import checks, records, rundir  # noqa: E402
from lab.cli import run  # noqa: E402
from lab.files import write_json
from tasks import eval_set  # noqa: E402

FIELDS = ("lengths", "K", "acc", "val_acc", "hard_acc", "shortcuts", "metrics")


def main(argv: list[str]) -> int:
    json_out = None
    if "--json" in argv:
        i = argv.index("--json")
        json_out, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    if not argv or not all(os.path.isdir(d) for d in argv):
        raise ValueError("usage: python results/checks/regenerate_check.py FOLDER [FOLDER ...] [--json PATH]")
    if json_out:
        checks.check_output("--json", json_out)
    out = {"what": "finished runs rebuilt from their ckpt.pt and evaluated again by today's code; every field of "
                   "eval.json that evaluation writes compared for equality", "runs": [], "env": rundir.environment()}
    for d in records.find_runs(argv):
        if not os.path.isfile(os.path.join(d, "ckpt.pt")):
            continue
        e = records.load_eval(d)
        cfg, task, model, schedule = records.load_run(d, e["config"])
        c = Config(**cfg)
        torch.set_num_threads(e["env"].get("threads") or torch.get_num_threads())  # the thread count it was scored with
        lengths = metrics.test_lengths(c)
        sets = (eval_set(task, lengths, c.eval_samples, c.eval_seed), eval_set(task, lengths, c.eval_samples, c.eval_seed + 1))
        T_eval = c.T_test if c.looped else min(c.T_test, trained_depth(c))
        again = json.loads(json.dumps(metrics.evaluate(model, schedule, task, *sets, T_eval, c.n_max, c.eval_batch_size, "cpu")))
        differ = [f for f in FIELDS if again.get(f) != e.get(f)]
        out["runs"].append({"run": os.path.relpath(d), "trained_at": e["env"].get("git_commit"), "equal": not differ,
                            **({"differ": differ} if differ else {})})
        print(f"{d}: {'identical' if not differ else 'DIFFERENT: ' + ', '.join(differ)}")
    out["all_equal"] = bool(out["runs"]) and all(r["equal"] for r in out["runs"])
    if json_out:
        write_json(json_out, out)
    return 0 if out["all_equal"] else 1


if __name__ == "__main__":
    sys.exit(run(main, "results/regenerate_check.py", sys.argv[1:]))
