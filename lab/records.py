"""eval.json on disk: the runs below some folders (find_runs), a run's eval.json loaded and checked against the
schema every reader relies on (load_eval), and a finished run's checkpoint rebuilt for readouts (load_run)."""

import dataclasses
import json
import math
import os

import torch

import metrics
from config import EMA, Config, build, differences
from tasks import eval_set, get_task, task_kwargs
from lab import checkpoint
from lab.files import load_json


def find_runs(paths: list[str]) -> list[str]:
    """Every directory at or below the paths that holds an eval.json, each once (symlinks followed). A folder that
    cannot be listed is refused, not skipped: its runs would be missing from the table without a word."""
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
# metrics.depth_use, computed from acc / hard_acc when an older eval.json lacks them
DEPTH_METRICS = {"k1_ood", "loop_gain_ood", "settle_k_ood"}
HARD_DEPTH_METRICS = {"k1_hard_ood", "loop_gain_hard_ood", "settle_k_hard_ood"}


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# The type of every value the readers use, checked when present: a kind, or [kind] for a list with one value per
# test length. Accuracies and their summaries are None where nothing was tested (metrics.metrics).
KINDS = {"number": (is_number, "a number"), "int": (lambda v: is_number(v) and isinstance(v, int), "an integer"),
         "str": (lambda v: isinstance(v, str), "a string")}  # kind: (test, words); KIND? also takes None
KINDS.update({k + "?": (lambda v, t=t: v is None or t(v), f"{w} or null") for k, (t, w) in KINDS.items()})
KINDS.update({"bool": (lambda v: isinstance(v, bool), "true or false"),
              "scalar": (lambda v: v is None or isinstance(v, (str, int, float)), "a string, number, boolean or null")})
METRIC_KINDS = {
    **dict.fromkeys(["oracle", "policy", "val_k_acc", "stable_interval", "per_sample_oracle", "policy_depth",
                     "hard_frac", "full_depth_acc"], ["number"]),
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
# a config value has the type of its Config field (a float field takes an integer too); a setting Config no longer
# has must still be a plain value (tables.run_key hashes every one)
CONFIG_KINDS = {f.name: {bool: "bool", int: "int", float: "number", str: "str"}[type(f.default)]
                for f in dataclasses.fields(Config)}


# The scale of every number of a run's metrics (check_numbers): a summary of accuracies in %, a per-length accuracy,
# a share and the matrices in [0, 1], a difference of accuracies in points, a depth, a length or a count >= 0;
# every one finite (a key in none of these sets is only checked finite).
PERCENT = {"oracle_ood", "oracle_id", "policy_ood", "policy_id", "val_k_ood", "id_k_ood", "tn_ood",
           "per_sample_oracle_ood", "shortcut_ood", "shortcut_id", "full_depth_ood", "full_depth_id", "oracle_hard_ood",
           "val_k_hard_ood", "id_k_hard_ood", "policy_hard_ood", "shortcut_hard_ood", "k1_ood", "k1_hard_ood"}
FRACTION = {"oracle", "policy", "val_k_acc", "per_sample_oracle", "hard_frac", "full_depth_acc", "tn_acc",
            "id_k_acc", "oracle_hard", "flip_curve", "flip_rate"}
POINTS = {"gap", "loop_gain_ood", "loop_gain_hard_ood"}
AT_LEAST_0 = {"policy_depth", "policy_depth_ood", "stable_interval", "front90", "val_k", "id_k", "settle_k_ood",
              "settle_k_hard_ood"}
SCALES = {"%": (0, 100, "an accuracy in % (0..100)"), "[0, 1]": (0, 1, "an accuracy or a share in [0, 1]"),
          "pp": (-100, 100, "a difference of accuracies in points (-100..100)"),
          ">= 0": (0, math.inf, "a number >= 0"), "finite": (-math.inf, math.inf, "a finite number")}
SCALE = {**dict.fromkeys(PERCENT, "%"), **dict.fromkeys(FRACTION, "[0, 1]"), **dict.fromkeys(POINTS, "pp"),
         **dict.fromkeys(AT_LEAST_0, ">= 0")}
TOLERANCE = 1e-6  # a summary recomputed from the run's own matrices: equal up to float rounding (in its own unit)


def check_number(where: str, v, kind: str) -> None:
    """v (a number, or None where nothing was tested) finite and within its scale (SCALES)."""
    lo, hi, words = SCALES[kind]
    if v is not None and not (math.isfinite(v) and lo <= v <= hi):
        raise ValueError(f"{where} is {show(v)}, not {words}")


def check_numbers(e: dict) -> None:
    """The one number check of a run (after the type checks): every number finite and within its scale, and
    metrics consistent with the run's own matrices (raw_metrics, of the raw weights, have none of their own)."""
    acc, hard, L = e["acc"], e.get("hard_acc"), len(e["lengths"])
    for name, mat in (("acc", acc), ("hard_acc", hard)):
        for i, row in enumerate(mat or []):
            for j, a in enumerate(row or []):
                check_number(f"{name!r}[{i}][{j}]", a, "[0, 1]")
    cuts = e.get("shortcuts")
    if cuts is not None:
        if not isinstance(cuts, dict) or not all(isinstance(v, list) and len(v) == L for v in cuts.values()):
            raise ValueError(f"'shortcuts' must map each predictor to one accuracy per test length ({L}), "
                             f"got {show(cuts)}")
        for k, v in cuts.items():
            for i, a in enumerate(v):
                check_value(f"'shortcuts'[{k!r}][{i}]", a, "number?")
                check_number(f"'shortcuts'[{k!r}][{i}]", a, "[0, 1]")
    for key in TOP_KINDS:
        if key in e:
            check_number(repr(key), e[key], ">= 0")
    for name in ("metrics", "raw_metrics"):
        for key, v in (e.get(name) or {}).items():
            if key == "shortcuts":
                for k, split in v.items():
                    for part, a in split.items():
                        check_number(f"{name} 'shortcuts'[{k!r}][{part!r}]", a, "%")
            elif isinstance(v, list):
                for i, x in enumerate(v):
                    if is_number(x):
                        check_number(f"{name} {key!r}[{i}]", x, SCALE.get(key, "finite"))
            elif is_number(v):
                check_number(f"{name} {key!r}", v, SCALE.get(key, "finite"))
    consistent(e)


def consistent(e: dict) -> None:
    """metrics as its own acc / hard_acc give them (metrics.metrics, metrics.depth_use), where it holds the key."""
    m, acc, hard, K = e["metrics"], e["acc"], e.get("hard_acc"), e["K"]
    ood = [i for i, n in enumerate(e["lengths"]) if n > e["n_max"]]
    ind = [i for i, n in enumerate(e["lengths"]) if n <= e["n_max"]]

    def same(key, got, want, how, i=None, src="acc"):
        if got is None and want is None:
            return
        if got is None or want is None or abs(got - want) > TOLERANCE:
            where = f"metrics {key!r}" + ("" if i is None else f"[{i}]")
            raise ValueError(f"{where} is {show(got)} but the run's own {src} gives {show(want)} ({how}): a summary "
                             f"its own numbers do not support")

    oracle = [max(row) for row in acc]
    for i, o in enumerate(oracle):
        same("oracle", m["oracle"][i], o, "max_K acc[n][K]", i)
        same("stable_interval", m["stable_interval"][i], sum(a >= 0.9 for a in acc[i]), "how many K give acc >= 0.9", i)
        if "val_k" in m and "val_k_acc" in m:
            if m["val_k"][i] not in K:
                raise ValueError(f"metrics 'val_k'[{i}] is {show(m['val_k'][i])}, not a depth of 'K'")
            same("val_k_acc", m["val_k_acc"][i], acc[i][K.index(m["val_k"][i])], "acc[n][val-K]", i)
    for key, where, part in (("oracle_ood", ood, "OOD"), ("oracle_id", ind, "ID")):
        same(key, m[key], metrics.pct(oracle, where), f"the mean of max_K acc[n][K] over the {part} lengths, in %")
    if m["oracle_ood"] is not None and m["policy_ood"] is not None:  # Gap = Oracle OOD - Policy OOD
        same("gap", m["gap"], m["oracle_ood"] - m["policy_ood"], "Gap, in points", src="oracle_ood - policy_ood")
    if hard is not None and "oracle_hard" in m:
        oh = [None if h is None else max(h) for h in hard]
        for i, o in enumerate(oh):
            same("oracle_hard", m["oracle_hard"][i], o, "max_K hard_acc[n][K]", i, src="hard_acc")
        same("oracle_hard_ood", m["oracle_hard_ood"], metrics.pct(oh, ood), "the mean of max_K hard_acc[n][K] over "
             "the OOD lengths, in %", src="hard_acc")
    for key, want in metrics.depth_use(e["lengths"], acc, hard, e["n_max"], K).items():
        if key in m:
            same(key, m[key], want, "metrics.depth_use", src="acc / hard_acc")


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
    cuts = m["shortcuts"]
    if not isinstance(cuts, dict) or not all(isinstance(v, dict) and "ood" in v for v in cuts.values()):
        raise ValueError(f"{name} 'shortcuts' must map each predictor to its {{'id', 'ood'}} accuracy")
    for k, v in cuts.items():
        for split in ("id", "ood"):
            if split in v:
                check_value(f"{name} 'shortcuts'[{k!r}][{split!r}]", v[split], "number?")


_HARD_CUTS = {}  # (task, its knobs, eval_seed, eval_samples, lengths, n_max) -> hard_shortcut's answer


def hard_shortcut(e: dict) -> dict:
    """The hard subset's best shortcut (metrics.hard_shortcut) of a run evaluated before eval.json carried it,
    scored on the same fixed test sets (tasks.eval_set of its eval_seed): the number its accuracy there must beat."""
    cfg = {**dataclasses.asdict(Config()), **e["config"]}
    kw = task_kwargs(e["task"], cfg)
    key = (e["task"], tuple(sorted(kw.items())), cfg["eval_seed"], cfg["eval_samples"], tuple(e["lengths"]), e["n_max"])
    if key not in _HARD_CUTS:
        task = get_task(e["task"], **kw)
        sets = eval_set(task, e["lengths"], cfg["eval_samples"], cfg["eval_seed"])
        _HARD_CUTS[key] = metrics.hard_shortcut(e["lengths"], metrics.shortcut_scores(task, sets, keep=task.hard),
                                                e["n_max"])
    return _HARD_CUTS[key]


def load_eval(run_dir: str) -> dict:
    """A run's eval.json, checked (keys, types, numbers): one line naming the file and the problem otherwise."""
    path = os.path.join(run_dir, "eval.json")
    try:
        e = load_json(path)
        if not isinstance(e, dict):
            raise ValueError(f"a JSON object expected, got {type(e).__name__}")
        for key, typ in REQUIRED.items():
            if not isinstance(e.get(key), typ):
                raise ValueError(f"key {key!r} missing or not a {typ.__name__}")
        for key in ("seed", "n_max"):
            check_value(repr(key), e[key], "int")
        check_list("'lengths'", e["lengths"], "int")
        check_list("'K'", e["K"], "int")
        if len(e["acc"]) != len(e["lengths"]) or not all(
                isinstance(row, list) and row and all(is_number(a) for a in row) for row in e["acc"]):
            raise ValueError("'acc' must hold one list of numbers per test length")
        if any(len(row) != len(e["K"]) for row in e["acc"]):
            raise ValueError(f"'acc' must hold one accuracy per depth of 'K' ({len(e['K'])}) at every test length")
        hard = e.get("hard_acc")
        if hard is not None and (not isinstance(hard, list) or len(hard) != len(e["lengths"]) or not all(
                row is None or isinstance(row, list) and len(row) == len(e["K"]) and all(is_number(a) for a in row)
                for row in hard)):
            raise ValueError("'hard_acc' must be null or hold, per test length, null or one accuracy per depth of 'K'")
        for key, v in e["config"].items():
            check_value(f"config {key!r}", v, CONFIG_KINDS.get(key, "scalar"))
        want = DEPTH_METRICS | (HARD_DEPTH_METRICS if hard is not None else set())
        if isinstance(e["metrics"], dict) and not want <= set(e["metrics"]):  # written before metrics.depth_use
            e["metrics"].update(metrics.depth_use(e["lengths"], e["acc"], hard, e["n_max"], e["K"]))
        if isinstance(e["metrics"], dict) and e["metrics"].get("oracle_hard_ood") is not None and \
                "shortcut_hard_ood" not in e["metrics"]:  # written before eval.json carried it
            e["metrics"].update(hard_shortcut(e))
        check_metrics("metrics", e["metrics"], len(e["lengths"]))
        if "raw_metrics" in e:  # an EMA run's raw weights, read as metrics by study/ladder.py
            if not isinstance(e["raw_metrics"], dict):
                raise ValueError(f"'raw_metrics' must be an object, got {show(e['raw_metrics'])}")
            check_metrics("raw_metrics", e["raw_metrics"], len(e["lengths"]))
        for key, kind in TOP_KINDS.items():
            if key in e:
                check_value(repr(key), e[key], kind)
        check_numbers(e)
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
    """(cfg, task, model, schedule) of a train.py run with the weights eval.json measured (EMA if kept), in eval
    mode; saved: the config of the run's eval.json, which the checkpoint's must match."""
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
        raise ValueError(f"{path} is at step {ck.get('step')} of {cfg['max_iters']}: not the weights eval.json "
                         f"measured")
    return cfg, task, model.eval(), schedule.eval()
