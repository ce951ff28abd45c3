"""The "What learns" table of results/README.md (between `<!-- recipes:begin -->` and
`<!-- recipes:end -->`) and its plots, from results/recipes/TASK/{eval.json, metrics.jsonl, config.json}
(written by study/recipes.sh; for a task the study runs, its `results/study/TASK/window/seed0`, which is
the same command): per task, its CPU recipe, the in-distribution exact match, the OOD
numbers beside the best shortcut, and accuracy against the number of loops K at one OOD length.

    python study/recipes.py
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):  # run as `python study/recipes.py`: the repository is the import root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import config  # noqa: E402
import metrics  # noqa: E402
from lab import records, tables  # noqa: E402
from lab.cli import no_arguments, run  # noqa: E402
from lab.files import atomic_write, parse_json


DIR = os.path.join(ROOT, "results", "recipes")
STUDY = os.path.join(ROOT, "results", "study")


def run_dir(task: str):
    """The task's recipe run: results/recipes/TASK, or seed 0 of the study's window row (same flags)."""
    for d in (os.path.join(DIR, task), os.path.join(STUDY, task, "window", "seed0")):
        if os.path.isfile(os.path.join(d, "eval.json")):
            return d
    return None
README = os.path.join(ROOT, "results", "README.md")

# One line per task: why its recipe, and what its OOD number measures (evidence: recipes/exploration/).
NOTES = {
    "dyck": "the defaults; OOD is mostly the counting shortcut's ground: read the hard subset (prefixes that go below zero)",
    "copy": "n <= 10, lr 1e-3 (n <= 19 at lr 3e-4 reached 14% in 500 steps); the depth-matters task of the study",
    "parity_prefix": "the copy recipe at 2500 steps; a start token `^` lifts the 75% ceiling of a constant run without positions",
    "parity": "the copy recipe at 2500 steps (98.4% at 1500); solved at K = 2, so depth hardly matters",
    "binary_sum": "the copy recipe at 4000 steps (97.7% at 2500); OOD counts >= 16 need an output bit that training never sets",
    "unique_set": "V = 32, so OOD answers are longer than any training answer (V = 16 saturates at n = 60); 4000 steps (98.7% at 3000)",
    "addition": "n <= 4 bits per operand, 8000 steps (n <= 8: 31% in 2500 steps; n <= 5: 92% in 6000, n = 5 at 0.78; "
                "n <= 4: 98% in 4000): the longest training length learns last; OOD barely above the shortcut",
    "multiplication": "n <= 6 so T(n) = n*m <= 12 fits T_max in training; 4000 steps (96.1% at 2500); shortcut: b <= 2 "
                      "(zero / copy / shift), hard subset: b >= 3",
    "mano": "needs the mod-23 tables even at n = 1: the learning curve shows how far 2000 steps get",
}


def stale(task: str, e: dict) -> dict:
    """The recipe settings (config.RECIPES) that the run in eval.json `e` was trained without: {flag: its value}."""
    return {k: e["config"].get(k) for k, v in config.RECIPES[task].items() if e["config"].get(k) != v}


def depth_row(e: dict):
    """(n, [acc at K = 1, T(n)/2, T(n), T_test]) at the shortest OOD length (where a model that extrapolates
    at all still answers: the place to see whether depth matters)."""
    n = min(n for n in e["lengths"] if n > e["n_max"])
    acc, K = e["acc"][e["lengths"].index(n)], e["K"]
    Tn = min(n * (e["config"].get("m_test", 1) if e["task"] == "multiplication" else 1), K[-1])
    ks = sorted({1, max(1, Tn // 2), Tn, K[-1]})
    return n, [(k, acc[k - 1]) for k in ks]


def plots(rows: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for task, e in rows.items():
        n, _ = depth_row(e)
        fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
        i = e["lengths"].index(n)
        ax[0].plot(e["K"], e["acc"][i], marker=".", label=f"n = {n} (OOD)")
        ax[0].plot(e["K"], e["acc"][e["lengths"].index(max(m for m in e["lengths"] if m <= e["n_max"]))],
                   marker=".", label="longest ID length")
        ax[0].set(xlabel="loop steps K", ylabel="exact match", ylim=(-0.02, 1.02), title=f"{task}: accuracy vs K")
        ax[0].legend(fontsize=8)
        log = [parse_json(l) for l in open(os.path.join(run_dir(task), "metrics.jsonl")) if '"id_acc"' in l]
        ax[1].plot([r["step"] for r in log], [r["id_acc"] for r in log], marker=".")
        ax[1].set(xlabel="training step", ylabel="ID exact match (%)", ylim=(-2, 102), title="learning curve")
        fig.tight_layout()
        atomic_write(os.path.join(DIR, f"{task}.png"), lambda f: fig.savefig(f, format="png", dpi=100, metadata={"Software": None}))
        plt.close(fig)


def main() -> None:
    rows = {t: records.load_eval(run_dir(t)) for t in config.RECIPES if run_dir(t)}
    lines = ["| task | recipe (`python train.py --task T` sets) | steps | minutes | ID | Oracle OOD | val-K OOD | "
             "shortcut OOD | hard subset, Oracle OOD | Front@90 | acc vs K at one OOD length |", "|---" * 11 + "|"]
    for task, e in rows.items():
        m, r = e["metrics"], config.RECIPES[task]
        if wrong := stale(task, e):  # the row would show one recipe and the numbers of another
            raise SystemExit(f"{run_dir(task)} was not trained with {task}'s recipe: it has {wrong}; rerun it")
        n, ks = depth_row(e)
        recipe = " ".join(f"--{k} {v}" for k, v in r.items() if k != "test_lengths") or "the defaults"
        lines.append(f"| {task} | {recipe} | {e['steps']} | {e['train_time_s'] / 60:.1f} | {metrics.fmt(m['policy_id'])} | "
                     f"{metrics.vs_shortcut(m['oracle_ood'], m['shortcut_ood'])} | {metrics.fmt(m['val_k_ood'])} | "
                     f"{metrics.fmt(m['shortcut_ood'])} ({m['shortcut_ood_name']}) | {metrics.fmt(m.get('oracle_hard_ood'))} | "
                     f"{metrics.fmt(m['front90'], '')} | n = {n}: "
                     + ", ".join(f"K={k} {a:.2f}" for k, a in ks) + " |")
    if rows:
        try:
            plots(rows)
        except ImportError:  # matplotlib is optional (README): the table still regenerates
            print("study/recipes.py: plots skipped: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
    lines += ["", "Why each recipe, and what its OOD number measures (the runs behind each choice: "
              "[recipes/exploration/](recipes/exploration/README.md)):", ""]
    lines += [f"- {t}: {NOTES[t]}" for t in rows]
    tables.splice(README, "recipes", lines)
    print(f"wrote the recipes table of {README} ({len(rows)} tasks)")


if __name__ == "__main__":  # a damaged or inconsistent input (ValueError): one line naming it, exit 2
    no_arguments("study/recipes.py")
    sys.exit(run(lambda argv: main(), "study/recipes.py"))
