"""
The depth explorer: `python evaluate.py DIR... --html FILE` writes one self-contained page of what a looped model
does at every depth: acc[n][K] (metrics.py), exact match at every test length n and loop count K. Three views, by
tab or by the URL's hash (`FILE#view=run&run=3&cmp=5`; `&tip=i,j` hovers a cell, for a screenshot or a test):

    runs     every run as a point per schedule (Oracle / val-K / policy OOD, K = 1 or the loop's gain; all samples
             and the hard subset); a click opens the run, shift-click compares with it
    run      acc[n][K] as a heatmap (the hard subset's beside it) with n_max, the policy, oracle and stable depths
             and the K = 1 column with what the loop adds; a second run beside it, and their difference
    sample   runs with a ckpt.pt only: a few fixed test samples of one length with the answer at every K

The viewer is lab/explorer.html: plain HTML, SVG and a short script, no dependency, no network; a page of 169 runs
is ~0.9 MB (plotly's bundle alone is 3.5 MB). A page is passed around: each hash value is one the page allows or its
default, and what the views write into the page is escaped text or a number. Values are rounded to 3 decimals.
"""

import json
import os

import metrics
from tasks import eval_set
from lab import tables
from lab.files import atomic_write
from lab.records import load_run

PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "explorer.html")  # the viewer; /*DATA*/: the runs
SAMPLES = 6  # test samples per length in the sample view, half of them from the hard subset where there is one


def r3(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def group(e: dict) -> str:
    """The schedule and its depth knobs ("window w=5", "fixed c=20"): the column of a run in the runs view."""
    k = dict(tables.run_key(e))
    return " ".join([k["schedule"]] + [f"{f}={tables.value(k[f])}" for f in tables.PRIMARY.get(k["schedule"], ()) if f in k])


def run_data(e: dict) -> dict:
    """What the views draw of one eval.json: the matrices, the per-length marks and the run's summaries."""
    m, hard, cuts = e["metrics"], e.get("hard_acc"), e.get("shortcuts") or {}
    best = [max(((v[i], k) for k, v in cuts.items() if v[i] is not None), default=(None, None))
            for i in range(len(e["lengths"]))]  # the best shortcut at each length: (score, name)
    return {"dir": e["run_dir"], "group": group(e), "seed": e["seed"], "n_max": e["n_max"], "n": e["lengths"],
            "K": e["K"], "acc": [[r3(a) for a in row] for row in e["acc"]],
            "hard": hard and [row and [r3(a) for a in row] for row in hard],
            # the oracle depth: the column of max_K acc[n][K], the smallest K among ties (metrics.argmax_first)
            "ok": [metrics.argmax_first(row) for row in e["acc"]],
            "okh": hard and [row and metrics.argmax_first(row) for row in hard],
            "pd": [r3(d) for d in m.get("policy_depth", [])] or None, "stable": m["stable_interval"],
            "cut": [r3(s) for s, _ in best], "cutname": [k for _, k in best],
            "hard_frac": [r3(v) for v in m.get("hard_frac", [])] or None,
            "cut_hard": r3(m.get("shortcut_hard_ood")), "cut_hard_name": m.get("shortcut_hard_ood_name"),
            "sum": {k: r3(m.get(k)) for k in ("oracle_ood", "val_k_ood", "policy_ood", "oracle_hard_ood", "val_k_hard_ood",
                                              "policy_hard_ood", "shortcut_ood", "shortcut_hard_ood", "policy_id",
                                              # depth use (metrics.depth_use): K = 1, the loop's gain, settle K
                                              "k1_ood", "loop_gain_ood", "settle_k_ood", "k1_hard_ood",
                                              "loop_gain_hard_ood", "settle_k_hard_ood")}}


def sample_data(e: dict) -> dict | None:
    """{n: [sample]} of a run with a ckpt.pt (else None): SAMPLES samples of each length of eval.json's test set, each
    with input, target, policy depth, right/wrong at every K ("0110..") and its answers as segments [K0, K1, tokens]."""
    if not os.path.isfile(os.path.join(e["run_dir"], "ckpt.pt")):
        return None
    cfg, task, model, schedule = load_run(e["run_dir"], e["config"])
    if hasattr(schedule, "score_set"):  # ntp.py's baselines decode at one fixed depth: no trajectory to show
        return None
    out = {}
    for n, (x, y, _, Tn) in eval_set(task, e["lengths"], cfg["eval_samples"], cfg["eval_seed"]).items():
        items = list(metrics.samples({n: (x, y, None, None)}))  # (n, prompt, answer) without padding
        hard = [bool(task.hard(p)) for _, p, _ in items]
        pick = [i for i, h in enumerate(hard) if h][:SAMPLES // 2]
        pick = sorted(pick + [i for i in range(len(items)) if i not in pick][:SAMPLES - len(pick)])
        ok, preds, depth = metrics.trajectory_correct(model, schedule, x[pick], y[pick], Tn[pick], cfg["T_test"])
        out[n] = []
        for j, i in enumerate(pick):
            segs = []
            for k, p in enumerate(preds[:, j].tolist(), 1):  # p: the K-th answer, -1 at unscored positions
                a = [task.vocab[t] for t in p if t != -1]
                if segs and segs[-1][2] == a:
                    segs[-1][1] = k
                else:
                    segs.append([k, k, a])
            out[n].append({"x": [task.vocab[t] for t in items[i][1]], "y": [task.vocab[t] for t in items[i][2]],
                           "hard": hard[i], "depth": int(depth[j]), "ok": "".join("01"[c] for c in ok[:, j].tolist()),
                           "segs": segs})
    return out


def finite_json(v) -> bool:
    """Whether json.dumps(v, allow_nan=False) holds: no NaN or infinity anywhere in v."""
    try:
        json.dumps(v, allow_nan=False)
        return True
    except ValueError:
        return False


def write(path: str, evals: list, title: str) -> None:
    """The page of the runs (one task) to path, written atomically."""
    if len({e["task"] for e in evals}) > 1:
        raise ValueError(f"--html shows one task a page; these runs hold {', '.join(sorted({e['task'] for e in evals}))}: "
                         f"name the folders of one task")
    runs = [run_data(e) | {"samples": sample_data(e)} for e in evals]
    try:  # never NaN or Infinity in the page: JSON.parse rejects them, and every view would be blank
        data = json.dumps({"task": evals[0]["task"], "title": title, "runs": runs}, separators=(",", ":"), allow_nan=False)
    except ValueError:
        bad = [e["run_dir"] for e, r in zip(evals, runs) if not finite_json(r)]
        raise ValueError(f"--html: {', '.join(bad) or 'a run'} holds a non-finite number (NaN or Infinity), which "
                         f"the page's JSON cannot hold; nothing written") from None
    with open(PAGE, encoding="utf-8", newline="") as f:
        page = f.read()
    html = page.replace("/*DATA*/", data.replace("<", "\\u003c"))  # a "</script>" or "<!--" in a string would end the block
    atomic_write(path, lambda f: f.write(html.encode()))
