"""
Evaluate trained runs: print each run's metrics (metrics.py), the table over seeds, and optionally the
post-hoc readouts of each run's frozen trajectory (readouts.py) and plots.

    python evaluate.py out/dyck-window                  # one run, or every run below a folder
    python evaluate.py results/dyck-window results/dyck-rl --paper    # the table over seeds, p-values
    python evaluate.py out/dyck-window --readouts --fit_gate linear   # post-hoc readouts (readouts.py)
    python evaluate.py out/my-port --against results/chaos/dyck/window  # did my change keep the method?
    python evaluate.py results/chaos/dyck --html dyck.html            # one page: every run at every depth

Rows are compared as distributions of runs, the seed as the unit (lab/compare.py): the replicates of one
seed count once. --against holds a set of new runs to a reference ensemble over a small family of metrics and
prints one verdict, consistent (exit 0) or differs (exit 1). Tables go to stdout (and to --out PREFIX.md /
PREFIX.json when asked); --readouts writes readouts.json into the run; --html writes the depth explorer
(lab/explorer.py) in place of the tables. What each metric means: metrics.py's docstring. The command's
plumbing (eval.json on disk, tables, comparisons, plots, the page) lives in lab/.
"""

from lab.cli import ctrl_c_at_start  # run machinery: a Ctrl-C while torch loads is one line, exit 130
ctrl_c_at_start(__name__, "evaluate.py")

import hashlib
import json
import math
import os
import sys
from dataclasses import dataclass

import torch

import readouts
from metrics import evaluate, format_run  # noqa: F401  (evaluate: `import evaluate; evaluate.evaluate(...)` as before)
from tasks import PAD, eval_set, get_task, task_kwargs
from lab import checks, compare, explorer, plots, tables
from config import opt
from lab.cli import parse, run
from lab.files import load_json, write_json, write_set
from lab.records import find_runs, load_eval, load_run


# --- command line ---------------------------------------------------------------------------------

@dataclass
class Args:
    run_dirs: tuple = opt((), "run directories, or folders holding several runs", positional=True)
    paper: bool = opt(False, "show the published rows (results/paper.json) beside ours", section="tables")
    against: tuple = opt((), "reference runs (folders, one experiment): are the runs given first (one experiment) "
                              "from the same distribution? one verdict over OOD, hard-subset OOD, ID, final loss, flip "
                              "rate, exit depth (location and spread): a permutation test of both sets' runs pooled and "
                              "re-split as the new set was built (within seeds when it shares the reference's seeds, "
                              "whole seeds when it does not); its false-alarm rate as measured on the committed "
                              "ensembles is in results/README.md; exit 1 if it differs")
    out: str = opt("", "also write the table to OUT.md and OUT.json")
    plot: str = opt("", "write PNG plots into this folder (needs matplotlib)")
    html: str = opt("", "write the depth explorer, one self-contained HTML page of acc[n][K] of every run (one task), "
                        "to this file instead of the tables (lab/explorer.py)")
    readouts: bool = opt(False, "every post-hoc readout of each run (needs ckpt.pt); writes RUN/readouts.json",
                         section="readouts")
    fit_gate: str = opt("", "comma-separated gates to fit on the frozen trajectory: linear, mlp (PonderNet objective), "
                            "ouro (Ouro's loss-improvement target) (implies --readouts)")
    time: bool = opt(False, "wall time of early exit vs fixed depth (implies --readouts)")
    samples: int = opt(0, "samples per length of each readout split (0: the run's eval_samples)")
    tol: float = opt(0.0, "operating point: the smallest val depth within tol of the best val accuracy")
    device: str = opt("cpu", "device of the readout passes")

    def gates(self) -> list[str]:
        return [g for g in self.fit_gate.split(",") if g]


def parse_args(argv=None) -> Args:
    """Args, checked before any work: one line naming the bad value otherwise."""
    args = parse(Args, argv, prog="evaluate.py", doc=__doc__)
    if not args.run_dirs:
        raise ValueError("no run directories given: python evaluate.py DIR [DIR ...]")
    if set(args.gates()) - {"linear", "mlp", "ouro"}:
        raise ValueError(f"--fit_gate {args.fit_gate!r}: choose from linear, mlp, ouro")
    if args.against and (args.readouts or args.gates() or args.time or args.plot or args.out or args.paper or args.html):
        raise ValueError("--against prints one verdict; run --readouts, --fit_gate, --time, --plot, --out, --paper or --html without it")
    if args.samples < 0 or not math.isfinite(args.tol) or args.tol < 0:
        raise ValueError(f"--samples {args.samples} --tol {args.tol}: need samples >= 0 and a finite tol >= 0")
    if args.device != "cpu" and not (args.device.startswith("cuda") and torch.cuda.is_available()):
        raise ValueError(f"--device {args.device}: not available here; use cpu" + (", cuda" if torch.cuda.is_available() else ""))
    if args.out:  # a prefix is a file's name too: --out DIR/ would write DIR/.md and DIR/.json
        checks.file_target("--out", args.out)
    for target in (args.out and [f"{args.out}.md", f"{args.out}.json"]) or []:
        checks.check_output("--out", target)  # never a run's own file (--out RUN/eval), a file that can be created
    if args.plot:  # created if missing (when the plots are drawn)
        checks.check_output("--plot", args.plot, folder=True)
    if args.html:
        if os.path.isdir(args.html):
            raise ValueError(f"--html {args.html!r}: a folder; name the page's file, e.g. {os.path.join(args.html, 'runs.html')}")
        checks.check_output("--html", args.html)  # never a run's own file, a file that can be created
        if args.out or args.plot or args.paper or args.readouts or args.gates() or args.time:
            raise ValueError("--html writes the page alone: run the tables, plots or readouts without it")
    return args


def readout_bytes(e: dict, samples: int, gates: list) -> tuple:
    """(a rough upper estimate of the host memory the readouts of run e hold, its longest sequence in tokens):
    per split (test, val, and fit with gates) and sample, the set (~100 bytes a token, as lab/rundir.py counts
    the evaluation sets) and ~12 float signals per depth (the pooled states too with gates). None where the
    run's config names no task this version knows (load_run refuses it then)."""
    c = e["config"]
    try:
        task = get_task(c["task"], **task_kwargs(c["task"], c))
        S = len(task.sample(max(e["lengths"]), torch.Generator().manual_seed(0), test=True)[0])
        K, D = c["T_test"], c["d_model"]
    except (KeyError, ValueError, TypeError):
        return None, None
    per_sample = 100 * S + 4 * K * (12 + (D if gates else 0))
    return (3 if gates else 2) * len(e["lengths"]) * samples * per_sample, S


def check_readouts(args: Args, evals: list) -> None:
    """Before any readout: every run's folder must be writable (readouts.json goes there) and its readout
    splits must fit in memory."""
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for e in evals:
        if not os.access(e["run_dir"], os.W_OK):
            raise ValueError(f"{e['run_dir']}: not writable (readouts.json goes there)")
        n = args.samples or e["config"].get("eval_samples", 0)
        need, S = readout_bytes(e, n, args.gates())
        if need is not None and need > 0.8 * host:
            splits = 3 if args.gates() else 2
            raise ValueError(f"--samples {n}: the readout splits of {e['run_dir']} ({splits} splits x "
                             f"{len(e['lengths'])} lengths x {n} samples, up to {S} tokens and {e['config']['T_test']} "
                             f"depths a sample) need about {need / 2**30:.3g} GiB, more than this machine's "
                             f"{host / 2**30:.3g} GiB allow; choose a smaller --samples")


def load_readouts(path: str) -> dict:
    """A run's readouts.json (for --plot): one line naming the file when it cannot be read, or when it was computed
    from another ckpt.pt / eval.json than the run holds now (its "tie"; a file from before ties is taken as it is)."""
    try:
        rep = load_json(path)
        if not (isinstance(rep, dict) and isinstance(rep.get("readouts"), dict)
                and all(k in rep for k in ("task", "schedule", "seed"))):
            raise ValueError("not an object with 'task', 'schedule', 'seed' and 'readouts'")
    except (OSError, ValueError) as err:
        raise ValueError(f"malformed readouts.json at {path}: {err}; write it again with evaluate.py --readouts, "
                         f"or remove it") from None
    if "tie" in rep and rep["tie"] != tie(os.path.dirname(path)):
        raise ValueError(f"{path} was computed from another ckpt.pt / eval.json than the run holds now (the run was "
                         f"trained again since): write it again with evaluate.py --readouts, or remove it")
    return rep


def tie(run_dir: str) -> dict:
    """What ties a readouts.json to the run it was computed from: the SHA-256 of its ckpt.pt and eval.json (None
    where missing)."""
    out = {}
    for f in ("ckpt.pt", "eval.json"):
        h, path = hashlib.sha256(), os.path.join(run_dir, f)
        if not os.path.isfile(path):  # missing (or a FIFO, which load_eval / load_run refuse)
            out[f] = None
            continue
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        out[f] = h.hexdigest()
    return out


def against(new: list, ref_dirs: list) -> int:
    """--against: the verdict on the new runs against the reference ensemble; exit status 1 when they differ."""
    ref = [load_eval(r) for r in find_runs(ref_dirs)]
    for name, runs, least in (("the new runs", new, 2), ("--against", ref, 4)):
        seeds = {e["seed"] for e in runs}
        if len(seeds) < least:
            raise ValueError(f"{name}: {len(runs)} runs of {len(seeds)} seeds under {' '.join(sorted({os.path.dirname(e['run_dir']) for e in runs}) or ref_dirs)}; "
                             f"a comparison of distributions needs at least {least} seeds there")
    tasks, grids = {e["task"] for e in new + ref}, {(tuple(e["lengths"]), e["n_max"]) for e in new + ref}
    if len(tasks) > 1 or len(grids) > 1:
        raise ValueError(f"--against: the runs are of {', '.join(sorted(tasks))} on {len(grids)} test grid(s); "
                         f"compare runs of one task scored on one grid (the same --test_lengths and n_max)")
    for name, runs in (("the new runs", new), ("--against", ref)):
        rows = tables.group_runs(runs)  # one experiment a side; a run and its copy (cp -r run run.bak) are refused here
        if len(rows) > 1:
            raise ValueError(f"{name}: {len(rows)} experiments ({'; '.join(label for _, label in rows)}); --against holds "
                             f"one experiment to another: name the folders of one")
    # a run is its replicate and its results: a copy of a reference run (or a rerun that changed no number) is no new draw
    identity = lambda e: (tables.replicate(e), json.dumps([e["acc"], e.get("hard_acc"), e["metrics"]], sort_keys=True))
    seen = {identity(e): e["run_dir"] for e in ref}
    for e in new:
        if identity(e) in seen:
            raise ValueError(f"--against: the new run {e['run_dir']} has the seed, replicate and results of the reference's "
                             f"{seen[identity(e)]} (a copy, or a rerun that changed no number); a run cannot be its own reference")
    r = compare.against(new, ref)
    print("\n".join(compare.against_lines(r)))
    return 1 if r["verdict"] == "differs" else 0


def main(argv=None) -> int:
    args = parse_args(argv)
    evals = [load_eval(r) for r in find_runs(args.run_dirs)]
    if not evals:
        raise ValueError(f"no runs (no eval.json) under {' '.join(args.run_dirs)}")
    if args.against:  # a verdict, nothing else
        return against(evals, args.against)
    if args.html:  # the depth explorer in place of the tables
        explorer.write(args.html, evals, " ".join(args.run_dirs))
        print(f"html: {args.html} ({len(evals)} run{'s' * (len(evals) != 1)}, {os.path.getsize(args.html) / 1e6:.2f} MB)")
        return
    gates = args.gates()
    groups = tables.group_runs(evals)  # a copy or a mixed grid is refused before any readout is written
    if args.readouts or gates or args.time:
        check_readouts(args, evals)
    reps = {}
    for e in evals:
        print(format_run(e))
        if args.readouts or gates or args.time:
            weights = tie(e["run_dir"])  # the files the readouts are computed from, before and after
            cfg, task, model, schedule = load_run(e["run_dir"], e["config"])
            if hasattr(schedule, "score_set"):
                raise ValueError(f"{e['run_dir']}: readouts stop a looped trajectory of one-shot predictions; "
                                 f"{cfg['schedule']} (ntp.py) generates its answer at one fixed depth")
            model.to(args.device)
            schedule.to(args.device)
            lengths, n = e["lengths"], args.samples or cfg["eval_samples"]
            # three disjoint draws of the test grid: test (the sets of eval.json), val (thresholds), fit (gates)
            seeds = {"test": cfg["eval_seed"], "val": cfg["eval_seed"] + 1, "fit": cfg["eval_seed"] + 2}
            splits = {s: eval_set(task, lengths, n, seed) for s, seed in seeds.items()}
            rep, fitted = readouts.readout_report(model, schedule, splits, cfg["T_test"], cfg["n_max"], PAD,
                                          gates, args.device, cfg["seed"], args.tol,
                                          meta={k: cfg[k] for k in ("task", "schedule", "seed")} | {"split_seeds": seeds})
            if args.time:
                rep["timing"] = readouts.time_exits(model, rep, fitted, splits["test"], cfg["T_test"], PAD, args.device)
            if tie(e["run_dir"]) != weights:  # train.py --overwrite replaced the run meanwhile
                raise ValueError(f"{e['run_dir']}: its ckpt.pt or eval.json changed while its readouts were computed "
                                 f"(the run was trained again); readouts.json not written: run evaluate.py again")
            write_json(os.path.join(e["run_dir"], "readouts.json"), {**rep, "tie": weights})
            print(readouts.format_readouts(rep) + ("\n" + readouts.format_timing(rep["timing"]) if args.time else ""))
        path = os.path.join(e["run_dir"], "readouts.json")
        if os.path.isfile(path):
            reps[e["run_dir"]] = load_readouts(path)
    md, rows = tables.table(groups, args.paper)
    print("\n" + md)
    if args.out:
        write_set({f"{args.out}.md": md + "\n", f"{args.out}.json": {"rows": rows}})  # both, or neither
    if args.plot:
        try:
            os.makedirs(args.plot, exist_ok=True)
            for path in plots.plot_all(groups, reps, args.plot):
                print(f"plot: {path}")
        except ImportError as err:
            print(f"evaluate.py: --plot skipped: {err}", file=sys.stderr)


def cli(argv=None) -> int:
    """main() as a command: one line and exit code 2 for bad input (cli.run)."""
    return run(main, "evaluate.py", argv)


if __name__ == "__main__":
    sys.exit(cli())
