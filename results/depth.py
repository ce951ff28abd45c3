"""
Does the model use its loop? The depth-use study (results/README.md, "Does the model use its loop?";
results/depth/depth.json), from the committed runs of results/depth.sh.

    python results/depth.py           # the exploratory table and the declared verdicts from the committed runs
    python results/depth.py --queue   # the declared queue, one run a line: OUT_DIR TASK SEED FLAGS (depth.sh)

DECLARATION, 2026-12-07, committed before the first run (not edited after it; amendments are appended below,
dated, with their reason).

Hypothesis (exploratory until now: issue 70, read from the committed dyck runs). A model trained at depths that
reach K = 1 (the window clips T(n) + D at 1) learns to answer within one or two loop steps: its loop adds a few
points and it extrapolates worse than fixed depth, which computes through its loop (0% on the hard subset at K =
1). If that is the mechanism, random depth that never reaches shallow steps keeps the loop and the accuracy:
(1) the window with a depth floor, K = clip(T(n) + D, 10, T_max), scores higher than the plain window on dyck's
hard subset; (2) fixed_window (K = clip(20 + D, 1, T_max)) scores higher than the plain window; and whether
randomness itself costs anything is (3) fixed against fixed_window, two-sided.

Command. The dyck CPU recipe: `python train.py --task dyck --seed k --seeds 1 --threads 1 --out_dir DIR FLAGS`
(800 steps, d_model 64, T_max 20, T_test 30, the defaults), every run from one commit (a frozen worktree at this
declaration), one lane (results/lanes.sh, one thread; a second lane may join, which changes no run).

Rows (FLAGS), in results/depth/dyck/ROW/seedK:
    window        --schedule window --w 5                  K = clip(T(n) + D, 1, 20): the paper's window
    window_floor  --schedule window --w 5 --k_min 10       K = clip(T(n) + D, 10, 20); test K = clip(T(n), 10, 30)
    fixed_window  --schedule fixed_window --c 20 --w 5     K = clip(20 + D, 1, 20); test K = 20
    fixed         --schedule fixed --c 20                  K = 20
Seeds 400-415 (fresh: no earlier run used them), one run a seed and row; seed k starts every row from the same
initial transformer and batches, so the rows are paired by seed. Queued seed-major (seed 400's four rows first),
so a stop leaves complete seeds. 64 runs of about 4 CPU-minutes.

Outcomes, per run, from its eval.json (metrics.py's depth use, computed from the run's acc and hard_acc):
    primary     hard-subset Oracle OOD (metrics.oracle_hard_ood), hard-subset val-K OOD beside it, and the hard
                subset's best shortcut
    secondary   settle K: the shallowest single depth K whose accuracy, averaged over the OOD lengths (all
                samples), is within 1 point of the best single depth's; and, described only, the loop's gain
                (Oracle OOD minus the OOD accuracy at K = 1) and the accuracy at K = 1, on all and hard samples.
                The gain is not tested: a depth never supervised (K < 10 under the floor) scores low by
                construction, so a floor raises the gain almost mechanically.
A run counts if it converged, metrics.policy_id >= 99; a claim uses the seeds whose two runs both converged.

Claims, the family (Holm over 3, alpha 0.05), on the primary outcome; statistic the mean paired difference over
seeds; p from the exact sign-flip permutation test (all 2^k sign patterns of the k seed differences); a 95%
interval of the mean difference by inverting the two-sided sign-flip test:
    C1  window_floor > window          one-sided
    C2  fixed_window > window          one-sided
    C3  fixed != fixed_window          two-sided
"Reproduced" / "confirmed" only at Holm p < 0.05; otherwise "not significant at k seeds" with the interval and
what it excludes. Secondary, a family of one (alpha 0.05): S1 window_floor settles deeper than window (settle K,
one-sided, the same sign-flip test). Everything else printed (the K = 1 accuracies, the gains, the other row
pairs) is descriptive.

Power, stated before the runs from the committed pilots: the paired difference of two dyck rows' hard-subset
Oracle OOD over seeds has an SD of 11.6 (fixed_window - window, results/study/dyck seeds 0-7) to 16.9 (fixed -
window, results/study/dyck, 16 seeds; 16.6 on results/chaos r 0). At 16 seeds and 80% power (normal theory,
paired t), a one-sided claim at Holm's first level (alpha 0.05 / 3) detects a difference of 9.3-13.6 points, at
alpha 0.05 of 7.6-11.1; the two-sided C3 at 0.05 / 3 detects 10.3-15.0. The exploratory fixed - window difference
is 11.2 points (results/chaos): C2 has roughly even to good power for an effect that size; C3 detects only a large
cost of randomness; a small one would go unseen.

Budget and fallback. One lane: about 4.5 hours. If the runs outlast the session, every finished run is committed
(never ckpt.pt) and the study continues later from the same commit; the analysis then uses the complete seeds
(all four rows finished), in queue order, and says how many; a verdict needs at least 8 seed pairs.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):  # run as `python results/depth.py`: the repository is the import root
    sys.path[0] = ROOT

from lab.cli import run  # noqa: E402

TASK = "dyck"
ROWS = {"window": "--schedule window --w 5", "window_floor": "--schedule window --w 5 --k_min 10",
        "fixed_window": "--schedule fixed_window --c 20 --w 5", "fixed": "--schedule fixed --c 20"}
SEEDS = range(400, 416)


def run_dir(row: str, k: int, rel: bool = False) -> str:
    d = os.path.join("results", "depth", TASK, row, f"seed{k}")
    return d if rel else os.path.join(ROOT, d)


def queue() -> list[str]:
    """The declared queue, seed-major: seed 400's four rows, then seed 401's, ..."""
    return [f"{run_dir(row, k, rel=True)} {TASK} {k} {fl}" for k in SEEDS for row, fl in ROWS.items()]


def main(argv: list[str]) -> None:
    if argv == ["--queue"]:
        print("\n".join(queue()))
        return
    raise ValueError(f"unknown arguments {' '.join(argv)} (allowed: --queue; the analysis comes with the runs)")


if __name__ == "__main__":
    sys.exit(run(main, "results/depth.py", sys.argv[1:]))
