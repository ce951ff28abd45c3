"""
Plots of evaluated runs (`python evaluate.py DIR --plot`), PNG files in the folder given: length_{task}.png
(oracle accuracy vs test length, per seed and the seed mean, a panel per schedule), depth_{task}.png (accuracy vs
loop steps K at one OOD length), flip_{task}.png (prediction flip rate vs K), heatmap_*.png (accuracy over length
x K, the first run of each schedule), readouts_*.png (accuracy vs mean exit depth of every readout, readouts.json).
matplotlib is optional: without it plot_all raises ImportError with the install command.
"""

import os

from lab.files import atomic_write


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("--plot needs matplotlib (pip install matplotlib); tables and JSON were still written") from None
    return plt


def plot_lengths(plt, task: str, groups: dict, path: str) -> str:
    """groups {setting: [eval dicts]}: oracle accuracy vs test length, per seed and the seed mean."""
    fig, axes = plt.subplots(1, len(groups), figsize=(4 * len(groups), 3.2), sharey=True, squeeze=False)
    for ax, (label, evals) in zip(axes[0], groups.items()):
        lengths = evals[0]["lengths"]
        curves = [e["metrics"]["oracle"] for e in evals]
        for i, c in enumerate(curves):
            ax.plot(lengths, c, color="tab:blue", alpha=0.3, lw=1, label="one seed" if i == 0 else None)
        ax.plot(lengths, [sum(v) / len(v) for v in zip(*curves)], color="tab:blue", lw=2.5, label="seed mean")
        ax.axvline(evals[0]["n_max"] + 0.5, color="gray", ls=":", lw=1)  # right of it: OOD
        ax.set(title=f"{label} ({len(evals)} seeds)", xlabel="test length n", ylim=(-0.02, 1.02))
    axes[0][0].set_ylabel("oracle accuracy")
    axes[0][0].legend(loc="lower left")
    fig.suptitle(task)
    return save(plt, fig, path)


def plot_depth(plt, task: str, groups: dict, path: str) -> str:
    """Accuracy vs K at one OOD length: one thin line per seed, the seed mean thick, per schedule."""
    e0 = next(iter(groups.values()))[0]
    ood = [n for n in e0["lengths"] if n > e0["n_max"]] or e0["lengths"]
    n = min(ood, key=lambda m: abs(m - 2 * e0["n_max"]))
    i = e0["lengths"].index(n)
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for (label, evals), color in zip(groups.items(), plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3):
        curves = [e["acc"][i] for e in evals]
        for c in curves:
            ax.plot(range(1, len(c) + 1), c, color=color, alpha=0.25, lw=0.8)
        ax.plot(range(1, len(curves[0]) + 1), [sum(v) / len(v) for v in zip(*curves)], color=color, lw=2, label=label)
    ax.set(title=f"{task}: accuracy vs loop steps at n = {n} (T(n) marked)", xlabel="loop steps K",
           ylabel="exact match", ylim=(-0.02, 1.02))
    ax.axvline(min(n, len(e0["K"])) if task != "multiplication" else min(2 * n, len(e0["K"])), color="gray", ls=":", lw=1)
    ax.legend(fontsize=7)
    return save(plt, fig, path)


def plot_flips(plt, task: str, groups: dict, path: str) -> str:
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for label, evals in groups.items():
        curves = [e["metrics"]["flip_curve"] for e in evals]
        ax.plot(range(1, len(curves[0]) + 1), [sum(v) / len(v) for v in zip(*curves)], label=label)
    ax.set(title=f"{task}: prediction flips (OOD lengths)", xlabel="K", ylabel="Pr[yhat_{K+1} != yhat_K]")
    ax.legend()
    return save(plt, fig, path)


def plot_heatmap(plt, e: dict, path: str) -> str:
    fig, ax = plt.subplots(figsize=(6, 3.6))
    im = ax.imshow(e["acc"], aspect="auto", origin="lower", vmin=0, vmax=1, cmap="viridis",
                   extent=(0.5, len(e["K"]) + 0.5, -0.5, len(e["lengths"]) - 0.5))
    ax.set_yticks(range(len(e["lengths"])), [str(n) for n in e["lengths"]])
    ax.set(title=f"{e['task']} {e['schedule']} seed {e['seed']}: accuracy", xlabel="loop steps K", ylabel="test length n")
    fig.colorbar(im, ax=ax)
    return save(plt, fig, path)


def plot_readouts(plt, rep: dict, path: str) -> str:
    """Test accuracy vs test mean exit depth as each readout's threshold sweeps; points for fixed rules."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, r in rep["readouts"].items():
        if "curve" in r:
            c = r["curve"]
            ax.plot(c["test_depth"], c["test_acc"], marker=".", lw=1, label=name, ls="--" if name == "fixed" else "-")
        else:
            ax.plot(r["chosen"]["test_depth"], r["chosen"]["test_acc"], marker="*", ms=10, ls="", label=name)
    ax.set(title=f"{rep['task']} {rep['schedule']} seed {rep['seed']}: readouts (test)", xlabel="mean exit depth",
           ylabel="exact-match accuracy")
    ax.legend(fontsize=7, ncol=2)
    return save(plt, fig, path)


def save(plt, fig, path: str) -> str:
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=120))  # a full disk leaves no half PNG
    plt.close(fig)
    return path


def plot_all(groups: dict, reps: dict, out_dir: str) -> list:
    """groups {(task, setting): [eval dicts]}, reps {run_dir: readouts.json dict}. Returns the PNG paths."""
    plt = pyplot()
    paths, by_task = [], {}
    name = lambda *parts: os.path.join(out_dir, "_".join(str(p).replace(" ", "").replace("=", "") for p in parts) + ".png")
    for (task, label), evals in groups.items():
        by_task.setdefault(task, {})[label] = evals
        paths.append(plot_heatmap(plt, evals[0], name("heatmap", task, label, f"seed{evals[0]['seed']}")))
    for task, g in by_task.items():
        paths.append(plot_lengths(plt, task, g, name("length", task)))
        paths.append(plot_depth(plt, task, g, name("depth", task)))
        paths.append(plot_flips(plt, task, g, name("flip", task)))
    for run_dir, rep in reps.items():
        paths.append(plot_readouts(plt, rep, name("readouts", rep["task"], rep["schedule"], f"seed{rep['seed']}")))
    return paths
