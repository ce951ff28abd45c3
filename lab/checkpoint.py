"""
A run's ckpt.pt, the same dict from train.py's loop and lab/chunks.py's stacked one (state: plain tensors and
types, loadable with weights_only=True): checked before it is used (load_checkpoint), restored exactly (restore),
written atomically and never with a non-finite value (save_checkpoint).
"""

import dataclasses
import math
import os

import torch

from config import differences, ema_start_step
from lab.files import atomic_write


def state(cfg, step: int, elapsed: float, acc_stats: dict, model: dict, schedule: dict, optimizer: dict, rng: dict,
          ema: dict = None) -> dict:
    """The checkpoint at `step`: the state_dicts, the training seconds, the stat sums since the last log line, the
    settings, the EMA weights ({part: {name: tensor}}, None without --ema) and the RNG states."""
    return {"model": model, "schedule": schedule, "optimizer": optimizer, "step": step, "elapsed": elapsed,
            "acc_stats": acc_stats, "config": dataclasses.asdict(cfg), "ema": ema, "rng": rng}


def load_checkpoint(path: str, cfg) -> dict:
    """ckpt.pt, checked: one line for an unreadable file, a foreign or damaged dict, or another run's settings."""
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise ValueError(f"--resume: {path} is not a readable checkpoint ({type(err).__name__})") from None
    need = {"model": dict, "schedule": dict, "optimizer": dict, "step": int, "elapsed": (int, float),
            "acc_stats": dict, "config": dict, "rng": dict}
    bad = [k for k, t in need.items()
           if not isinstance(ck, dict) or not isinstance(ck.get(k), t) or isinstance(ck.get(k), bool)]
    if bad:
        raise ValueError(f"--resume: {path} is not a train.py checkpoint (missing or malformed: {', '.join(bad)})")
    if set(ck["rng"]) != {"data", "depth", "torch"} or not all(isinstance(v, torch.Tensor) for v in ck["rng"].values()):
        raise ValueError(f"--resume: {path} is not a train.py checkpoint (malformed: rng)")
    if not 0 <= ck["step"] <= cfg.max_iters:
        raise ValueError(f"--resume: {path} is at step {ck['step']}, outside 0..max_iters ({cfg.max_iters})")
    if not all(isinstance(ck["config"].get(k), str) for k in ("task", "schedule")):
        raise ValueError(f"--resume: {path} is not a train.py checkpoint (malformed: config, it records no settings)")
    if diff := differences(ck["config"], cfg):
        raise ValueError(f"--resume: {path} belongs to another run: " + ", ".join(diff))
    if bad := malformed(ck, cfg):
        raise ValueError(f"--resume: {path} is damaged or not this run's checkpoint ({bad})")
    if bad := ema_problem(cfg, ck["step"], ck.get("ema")):
        raise ValueError(f"--resume: {path} {bad}")
    if bad := non_finite(ck):
        raise ValueError(f"--resume: {path} holds non-finite values ({bad}): nothing good to continue from; "
                         f"start again with --overwrite")
    return ck


def malformed(ck: dict, cfg):
    """What in a checkpoint (config already checked) train.py could not have written, in words; None if nothing:
    a tensor of the weights, EMA or optimizer moments not float32 (loading would cast it silently), optimizer
    settings not this run's (a resume takes them from the checkpoint), stat sums not numbers, RNG states not states."""
    parts = {"model": ck["model"], "schedule": ck["schedule"]}
    ema = ck.get("ema")
    if ema is not None:
        if not (isinstance(ema, dict) and set(ema) == {"model", "schedule"}
                and all(isinstance(v, dict) for v in ema.values())):
            return "malformed: ema, not {model: {...}, schedule: {...}}"
        parts.update({f"ema {k}": v for k, v in ema.items()})
    opt = ck["optimizer"]
    if not (isinstance(opt.get("state"), dict) and isinstance(opt.get("param_groups"), list)
            and len(opt["param_groups"]) == 1 and isinstance(opt["param_groups"][0], dict)
            and all(isinstance(st, dict) for st in opt["state"].values())):
        return "malformed: optimizer, not one AdamW parameter group and its state"
    parts["optimizer state"] = {f"{i} {k}": v for i, st in opt["state"].items() for k, v in st.items()
                                if not (k == "step" and isinstance(v, (int, float)))}
    for part, tensors in parts.items():
        for k, v in tensors.items():
            if not isinstance(v, torch.Tensor):
                return f"{part} {k}: not a tensor ({type(v).__name__})"
            if v.dtype != torch.float32:
                return f"{part} {k}: {str(v.dtype).replace('torch.', '')}, where train.py writes float32"
    group, ref = opt["param_groups"][0], torch.optim.AdamW(
        [torch.zeros(1)], lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay).param_groups[0]
    norm = lambda v: tuple(v) if isinstance(v, (list, tuple)) else v
    for k, want in ref.items():  # a key this torch does not know, or an older torch did not write, is left alone
        if k not in ("params", "lr") and k in group and norm(group[k]) != norm(want):
            return f"optimizer {k}={group[k]!r}, where this run has {want!r}"
    if not (isinstance(group.get("lr"), (int, float)) and not isinstance(group["lr"], bool)
            and math.isfinite(group["lr"])):
        return f"optimizer lr={group.get('lr')!r}: not a finite number"
    sums = ck["acc_stats"]
    if sums and not all(isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
                        for k, v in sums.items()):
        return f"acc_stats {sums!r}: the stat sums must be numbers"
    if sums and not (isinstance(sums.get("steps"), (int, float)) and sums["steps"] >= 1):
        return f"acc_stats {sums!r}: the stat sums need their step count ('steps' >= 1)"
    for k, v in ck["rng"].items():
        try:
            torch.Generator().set_state(v)
        except (RuntimeError, TypeError, ValueError):
            return f"rng {k}: not a generator state"
    return None


def ema_problem(cfg, step: int, ema):
    """Why a checkpoint at `step` with EMA weights `ema` (None: none) cannot continue this run's EMA; None if it
    can. The EMA is a copy of the weights after step ema_start_step(cfg): held from that step on, never before."""
    if not cfg.ema:
        return None if ema is None else "holds EMA weights, but its run has no --ema (it would evaluate them)"
    start = ema_start_step(cfg)
    if step >= start and ema is None:
        return f"holds no EMA weights at step {step}, though the EMA starts after step {start} (--ema {cfg.ema})"
    if step < start and ema is not None:
        return f"holds EMA weights at step {step}, before the EMA starts (after step {start})"
    return None


def non_finite(ck, name: str = ""):
    """The path of keys to the first non-finite floating tensor anywhere in a checkpoint; None if all are finite."""
    if isinstance(ck, torch.Tensor):
        return name.strip() if ck.is_floating_point() and not torch.isfinite(ck).all() else None
    items = ck.items() if isinstance(ck, dict) else enumerate(ck) if isinstance(ck, (list, tuple)) else ()
    for k, v in items:
        if (bad := non_finite(v, f"{name} {k}")) is not None:
            return bad
    return None


def restore(start: dict, run_dir: str, model, schedule, optimizer, gens: dict):
    """Continue from the checked checkpoint `start`: weights, optimizer, the data and depth generators and torch's
    RNG exactly where they were. Returns (step, elapsed, acc_stats, ema)."""
    weights = {"model": dict(model.named_parameters()), "schedule": dict(schedule.named_parameters())}
    where = f"--resume: {run_dir}/ckpt.pt does not fit this run"
    # load_state_dict casts another dtype silently, and the EMA is only read here: each must be what this run holds
    parts = [("model", start["model"], model.state_dict()), ("schedule", start["schedule"], schedule.state_dict())]
    if start.get("ema") is not None:
        parts += [(f"ema {part}", start["ema"][part], ps) for part, ps in weights.items()]
    for part, saved, want in parts:
        if set(saved) != set(want):
            odd = sorted(set(saved) ^ set(want))
            raise ValueError(f"{where} ({part}: {len(odd)} keys differ, e.g. {odd[0]})")
        for k, v in want.items():
            if (saved[k].dtype, saved[k].shape) != (v.dtype, v.shape):
                raise ValueError(f"{where} ({part} {k}: {str(saved[k].dtype).replace('torch.', '')} "
                                 f"{tuple(saved[k].shape)}, where this run has {str(v.dtype).replace('torch.', '')} "
                                 f"{tuple(v.shape)})")
    params, ids = optimizer.param_groups[0]["params"], start["optimizer"]["param_groups"][0].get("params")
    ids = dict(zip(ids, params)) if isinstance(ids, list) and len(ids) == len(params) and all(
        isinstance(i, int) for i in ids) else {}  # the checkpoint's parameter ids, in the optimizer's order
    for i, st in start["optimizer"]["state"].items():  # the moments of a parameter have its shape
        p = ids.get(i) if isinstance(i, int) else None
        bad = [k for k, v in st.items() if k != "step" and (p is None or v.shape != p.shape)]
        if bad:
            why = ("no such parameter" if p is None else
                   f"{tuple(st[bad[0]].shape)}, where the parameter is {tuple(p.shape)}")
            raise ValueError(f"{where} (optimizer state {i} {bad[0]}: {why})")
    try:
        model.load_state_dict(start["model"])
        schedule.load_state_dict(start["schedule"])
        optimizer.load_state_dict(start["optimizer"])
        for k, g in gens.items():
            g.set_state(start["rng"][k])
        torch.set_rng_state(start["rng"]["torch"])
        ema = start.get("ema")
        if ema is not None:  # the checkpoint is read onto the CPU: the EMA lives beside the weights
            ema = {part: {k: ema[part][k].to(p.device) for k, p in ps.items()} for part, ps in weights.items()}
    except (RuntimeError, KeyError, ValueError, TypeError, AttributeError) as err:
        msg = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        raise ValueError(f"{where} ({msg})") from None
    return start["step"], start["elapsed"], start["acc_stats"], ema


def save_checkpoint(path: str, ck: dict) -> None:
    """ckpt.pt, written atomically; refused (one line naming the last good checkpoint) if a weight is not finite."""
    if bad := non_finite(ck):
        raise FloatingPointError(f"non-finite weights at step {ck['step']} ({bad}); " + last_good(path))
    atomic_write(path, lambda f: torch.save(ck, f))


def last_good(ckpt_path: str) -> str:
    """Where a failed run can be continued from, in words."""
    if not os.path.isfile(ckpt_path):
        return "no checkpoint was written yet"
    ck = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    if bad := non_finite(ck):
        return f"the checkpoint at step {ck['step']} ({ckpt_path}) holds non-finite values ({bad}): none is good"
    return f"last good checkpoint: step {ck['step']} at {ckpt_path}"
