"""
eval.json on disk: the schema every reader relies on, a run's file loaded and checked, the runs below a
folder, and a finished run's checkpoint rebuilt for post-hoc readouts.

    find_runs(paths)       every run directory (an eval.json) at or below the paths, each once
    load_eval(run_dir)     its eval.json, checked against REQUIRED / METRICS (keys) and the *_KINDS (the type of
                           every value a reader uses): one line naming the file and the key otherwise; a file
                           written before the depth-use metrics (DEPTH_METRICS) gains them from its acc / hard_acc
    load_run(run_dir)      (cfg, task, model, schedule) with the weights eval.json measured (EMA if kept)
"""

import dataclasses
import json
import os

import torch

import metrics
from config import EMA, Config, build, differences
from lab import checkpoint
from lab.files import load_json


def find_runs(paths: list[str]) -> list[str]:
    """Every directory at or below the given paths that holds an eval.json, each once (a folder given
    twice, a folder and its subfolder, or a symlink to a folder already seen, count once). Symlinked
    folders are followed (a seed linked into a sweep is one of its seeds). A folder that cannot be listed
    (chmod 000) is refused, not skipped: the runs below it would be missing from the table without a word."""
    def unreadable(err: OSError):
        raise ValueError(f"cannot read the folder {err.filename!r} ({err.strerror or err}): the runs below it would be "
                         f"left out of the table; fix its permissions, or name the folders beside it instead")

    runs, seen = [], set()
    for p in paths:
        if not os.path.isdir(p):
            raise ValueError(f"not a directory: {p!r}")
        for root, dirs, files in os.walk(p, followlinks=True, onerror=unreadable):
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
# metrics.depth_use, computed from acc / hard_acc when an older eval.json lacks them (the hard ones with hard_acc)
DEPTH_METRICS = {"k1_ood", "loop_gain_ood", "settle_k_ood"}
HARD_DEPTH_METRICS = {"k1_hard_ood", "loop_gain_hard_ood", "settle_k_hard_ood"}

# The type of every value the readers use (metrics.format_run, tables.py, plots.py, train.py --resume, the
# results/ scripts), checked when present (the keys above must be): a kind, or [kind] for a list with one
# value per test length. Accuracies and their summaries are None where nothing was tested (metrics.metrics).
KINDS = {  # kind: (test, words)
    "number": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "number?": (lambda v: v is None or isinstance(v, (int, float)) and not isinstance(v, bool), "a number or null"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "int?": (lambda v: v is None or isinstance(v, int) and not isinstance(v, bool), "an integer or null"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "str?": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "scalar": (lambda v: v is None or isinstance(v, (str, int, float)), "a string, number, boolean or null"),
}
METRIC_KINDS = {
    **dict.fromkeys(["oracle", "policy", "val_k_acc", "stable_interval", "per_sample_oracle", "policy_depth", "hard_frac",
                     "full_depth_acc"], ["number"]),
    **dict.fromkeys(["tn_acc", "id_k_acc", "oracle_hard"], ["number?"]),
    "val_k": ["int"],
    **dict.fromkeys(["oracle_ood", "oracle_id", "policy_ood", "policy_id", "val_k_ood", "id_k_ood", "gap", "tn_ood",
                     "per_sample_oracle_ood", "flip_rate", "policy_depth_ood", "front90", "shortcut_ood", "shortcut_id",
                     "full_depth_ood", "full_depth_id", "oracle_hard_ood", "val_k_hard_ood", "id_k_hard_ood",
                     "policy_hard_ood", "shortcut_hard_ood", "k1_ood", "loop_gain_ood", "k1_hard_ood",
                     "loop_gain_hard_ood"], "number?"),
    **dict.fromkeys(["id_k", "settle_k_ood", "settle_k_hard_ood"], "int?"),
    **dict.fromkeys(["shortcut_ood_name", "shortcut_id_name", "shortcut_hard_ood_name"], "str?"),
}
TOP_KINDS = {"train_time_s": "number", "eval_time_s": "number", "steps": "int", "full_depth": "int?"}
# a config value has the type of its Config field (a float field takes an integer too, as Config does);
# a setting Config no longer has must still be a plain value (tables.run_key hashes every one)
CONFIG_KINDS = {f.name: {bool: "bool", int: "int", float: "number", str: "str"}[type(f.default)]
                for f in dataclasses.fields(Config)}


def show(v) -> str:
    s = json.dumps(v)
    return s if len(s) <= 40 else s[:37] + "..."


def check_value(where: str, v, kind: str) -> None:
    test, words = KINDS[kind]
    if not test(v):
        raise ValueError(f"{where} must be {words}, got {show(v)}")


def check_list(where: str, v, kind: str, n: int = None, what: str = "") -> None:
    """A list of `kind` values: n of them if given (what says why), at least one otherwise."""
    if not isinstance(v, list) or (len(v) != n if n is not None else not v):
        count = f"{n} values{what}" if n is not None else "values"
        raise ValueError(f"{where} must be a list of {count}, each {KINDS[kind][1]}; got {show(v)}")
    for i, x in enumerate(v):
        check_value(f"{where}[{i}]", x, kind)


def check_metrics(name: str, m: dict, n: int) -> None:
    """metrics (or raw_metrics) of a run with n test lengths: every key the readers need, of its type."""
    missing = METRICS - set(m) | (HARD_METRICS - set(m) if "oracle_hard_ood" in m else set())
    if missing:
        raise ValueError(f"{name} lack {', '.join(sorted(missing))}")
    for key, kind in METRIC_KINDS.items():
        if key in m:
            if isinstance(kind, list):
                check_list(f"{name} {key!r}", m[key], kind[0], n, " (one per test length)")
            else:
                check_value(f"{name} {key!r}", m[key], kind)
    if not isinstance(m["flip_curve"], list):
        raise ValueError(f"{name} 'flip_curve' must be a list of numbers, got {show(m['flip_curve'])}")
    for i, x in enumerate(m["flip_curve"]):
        check_value(f"{name} 'flip_curve'[{i}]", x, "number")
    if not isinstance(m["shortcuts"], dict) or not all(isinstance(v, dict) and "ood" in v for v in m["shortcuts"].values()):
        raise ValueError(f"{name} 'shortcuts' must map each predictor to its {{'id', 'ood'}} accuracy")
    for k, v in m["shortcuts"].items():
        for split in ("id", "ood"):
            if split in v:
                check_value(f"{name} 'shortcuts'[{k!r}][{split!r}]", v[split], "number?")


def load_eval(run_dir: str) -> dict:
    """A run's eval.json, checked: one line naming the file and the problem otherwise (a missing key, or a
    value of another type than the readers use)."""
    path = os.path.join(run_dir, "eval.json")
    try:
        e = load_json(path)  # a regular file (a FIFO would block the reader forever), bounded in size and depth
        if not isinstance(e, dict):
            raise ValueError(f"a JSON object expected, got {type(e).__name__}")
        for key, typ in REQUIRED.items():
            if not isinstance(e.get(key), typ):
                raise ValueError(f"key {key!r} missing or not a {typ.__name__}")
        for key in ("task", "schedule"):
            check_value(repr(key), e[key], "str")
        for key in ("seed", "n_max"):
            check_value(repr(key), e[key], "int")
        check_list("'lengths'", e["lengths"], "int")
        check_list("'K'", e["K"], "int")
        if len(e["acc"]) != len(e["lengths"]) or not all(
                isinstance(row, list) and row and all(KINDS["number"][0](a) for a in row) for row in e["acc"]):
            raise ValueError("'acc' must hold one list of numbers per test length")
        if any(len(row) != len(e["K"]) for row in e["acc"]):
            raise ValueError(f"'acc' must hold one accuracy per depth of 'K' ({len(e['K'])}) at every test length")
        hard = e.get("hard_acc")
        if hard is not None and (not isinstance(hard, list) or len(hard) != len(e["lengths"]) or not all(
                row is None or isinstance(row, list) and len(row) == len(e["K"]) and all(KINDS["number"][0](a) for a in row)
                for row in hard)):
            raise ValueError("'hard_acc' must be null or hold, per test length, null or one accuracy per depth of 'K'")
        for key, v in e["config"].items():
            check_value(f"config {key!r}", v, CONFIG_KINDS.get(key, "scalar"))
        want = DEPTH_METRICS | (HARD_DEPTH_METRICS if hard is not None else set())
        if isinstance(e["metrics"], dict) and not want <= set(e["metrics"]):  # written before metrics.depth_use
            e["metrics"].update(metrics.depth_use(e["lengths"], e["acc"], hard, e["n_max"], e["K"]))
        check_metrics("metrics", e["metrics"], len(e["lengths"]))
        if "raw_metrics" in e:  # an EMA run's raw weights, read as metrics by study/ladder.py
            if not isinstance(e["raw_metrics"], dict):
                raise ValueError(f"'raw_metrics' must be an object, got {show(e['raw_metrics'])}")
            check_metrics("raw_metrics", e["raw_metrics"], len(e["lengths"]))
        for key, kind in TOP_KINDS.items():
            if key in e:
                check_value(repr(key), e[key], kind)
        if "env" in e:  # where the run ran (study/study.py, ladder.py, chaos.py)
            if not isinstance(e["env"], dict):
                raise ValueError(f"'env' must be an object, got {show(e['env'])}")
            for key, kind in (("cpu", "str?"), ("hardware", "str?"), ("cpu_count", "int?")):
                if key in e["env"]:
                    check_value(f"env {key!r}", e["env"][key], kind)
    except (OSError, ValueError) as err:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"malformed eval.json at {path}: {err}") from None
    e["run_dir"] = run_dir
    return e


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
            EMA.apply(model, schedule, ck["ema"])
    except Exception as err:
        msg = str(err).strip().splitlines()[0][:120] if str(err).strip() else ""
        raise ValueError(f"{path} is not a usable train.py checkpoint ({type(err).__name__}: {msg})") from None
    if bad := checkpoint.non_finite(ck):
        raise ValueError(f"{path} holds non-finite values ({bad}): nothing to read out")
    if saved is not None and (diff := differences(saved, Config(**cfg))):
        raise ValueError(f"{path} belongs to another run than {run_dir}/eval.json (eval.json has "
                         f"{', '.join(diff).replace('(now', '(ckpt.pt')})")
    if ck.get("step") != cfg["max_iters"]:
        raise ValueError(f"{path} is at step {ck.get('step')} of {cfg['max_iters']}: not the weights eval.json measured")
    return cfg, task, model.eval(), schedule.eval()
