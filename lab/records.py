"""
eval.json on disk: the schema every reader relies on, a run's file loaded and checked, the runs below a
folder, and a finished run's checkpoint rebuilt for post-hoc readouts.

    find_runs(paths)       every run directory (an eval.json) at or below the paths, each once
    load_eval(run_dir)     its eval.json, checked against REQUIRED / METRICS: one line naming the file otherwise
    load_run(run_dir)      (cfg, task, model, schedule) with the weights eval.json measured (EMA if kept)
"""

import json
import os

import torch

from config import Config, build
from lab import rundir


def find_runs(paths: list[str]) -> list[str]:
    """Every directory at or below the given paths that holds an eval.json, each once (a folder given
    twice, a folder and its subfolder, or a symlink to a folder already seen, count once). Symlinked
    folders are followed (a seed linked into a sweep is one of its seeds)."""
    runs, seen = [], set()
    for p in paths:
        if not os.path.isdir(p):
            raise ValueError(f"not a directory: {p!r}")
        for root, dirs, files in os.walk(p, followlinks=True):
            real = os.path.realpath(root)
            if real in seen:  # reached twice (a link, or a folder given twice): pruned, counted once
                dirs.clear()
                continue
            seen.add(real)
            dirs.sort()
            if "eval.json" in files:
                runs.append(root)
    return runs


REQUIRED = {"task": str, "schedule": str, "seed": int, "n_max": int, "lengths": list, "acc": list,
            "metrics": dict, "config": dict, "K": list}
# every metric that format_run, tables.py and plots.py read (hard: when the task has a hard subset)
METRICS = {"oracle", "oracle_ood", "oracle_id", "policy", "policy_ood", "policy_id", "val_k_ood", "val_k_acc", "id_k",
           "id_k_ood", "gap", "tn_ood", "per_sample_oracle_ood", "front90", "flip_curve", "flip_rate",
           "policy_depth_ood", "stable_interval", "shortcuts", "shortcut_ood", "shortcut_ood_name"}
HARD_METRICS = {"oracle_hard_ood", "val_k_hard_ood", "policy_hard_ood", "hard_frac"}
PER_LENGTH = ("oracle", "policy", "val_k_acc", "stable_interval")


def load_eval(run_dir: str) -> dict:
    """A run's eval.json, checked: one line naming the file and the problem otherwise."""
    path = os.path.join(run_dir, "eval.json")
    try:
        with open(path) as f:
            e = json.load(f)
        if not isinstance(e, dict):
            raise ValueError(f"a JSON object expected, got {type(e).__name__}")
        for key, typ in REQUIRED.items():
            if not isinstance(e.get(key), typ):
                raise ValueError(f"key {key!r} missing or not a {typ.__name__}")
        if len(e["acc"]) != len(e["lengths"]) or not all(
                isinstance(row, list) and row and all(isinstance(a, (int, float)) for a in row) for row in e["acc"]):
            raise ValueError("'acc' must hold one list of numbers per test length")
        m = e["metrics"]
        missing = METRICS - set(m) | (HARD_METRICS - set(m) if "oracle_hard_ood" in m else set())
        if missing:
            raise ValueError(f"metrics lack {', '.join(sorted(missing))}")
        short = [k for k in PER_LENGTH if not (isinstance(m[k], list) and len(m[k]) == len(e["lengths"]))]
        if short:
            raise ValueError(f"metrics {', '.join(short)} must hold one value per test length")
        if not isinstance(m["shortcuts"], dict) or not all(isinstance(v, dict) and "ood" in v for v in m["shortcuts"].values()):
            raise ValueError("metrics 'shortcuts' must map each predictor to its {'id', 'ood'} accuracy")
    except (OSError, ValueError) as err:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"malformed eval.json at {path}: {err}") from None
    e["run_dir"] = run_dir
    return e


def apply_ema(model, schedule, ema: dict) -> None:
    """Copy the EMA weights of a checkpoint ({"model": {name: tensor}, "schedule": {...}}) into the parameters."""
    with torch.no_grad():
        for part, module in (("model", model), ("schedule", schedule)):
            for name, p in module.named_parameters():
                p.copy_(ema[part][name])


def load_run(run_dir: str, saved: dict = None):
    """(cfg, task, model, schedule) of a train.py run with its ckpt.pt weights (the EMA weights when the run kept
    them, as train.py evaluated), in eval mode; saved: the config of the run's eval.json, which the checkpoint's
    must match."""
    path = os.path.join(run_dir, "ckpt.pt")
    if not os.path.isfile(path):
        raise ValueError(f"no checkpoint at {path}: readouts need a trained run (train.py --out_dir {run_dir})")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
        cfg = ck["config"]
        task, model, schedule = build(Config(**cfg))
        model.load_state_dict(ck["model"])
        schedule.load_state_dict(ck["schedule"])
        if ck.get("ema") is not None:
            apply_ema(model, schedule, ck["ema"])
    except Exception as err:
        msg = str(err).strip().splitlines()[0][:120] if str(err).strip() else ""
        raise ValueError(f"{path} is not a usable train.py checkpoint ({type(err).__name__}: {msg})") from None
    if bad := rundir.non_finite(ck):
        raise ValueError(f"{path} holds non-finite values ({bad}): nothing to read out")
    if saved is not None and (diff := rundir.differences(saved, Config(**cfg))):
        raise ValueError(f"{path} belongs to another run than {run_dir}/eval.json (eval.json has "
                         f"{', '.join(diff).replace('(now', '(ckpt.pt')})")
    if ck.get("step") != cfg["max_iters"]:
        raise ValueError(f"{path} is at step {ck.get('step')} of {cfg['max_iters']}: not the weights eval.json measured")
    return cfg, task, model.eval(), schedule.eval()
