"""
The metrics: how a trained looped model is scored. One forward pass to T_test per test batch gives every
sample's prediction at every depth K = 1..T_test; every metric below comes from that trajectory. "OOD" means
the test lengths n > n_max (longer than any training input), "ID" the others.

    acc[n][K]      exact-match accuracy at length n with K loops (lengths x T_test)
    Oracle(n)      max_K acc[n][K]: the best K per length, chosen with the test labels. An upper bound,
                   biased upward on a finite set (a chance-level parity model scores ~58% with 30 K)
    val-K(n)       acc[n][K*(n)] with K*(n) = argmax_K of the same matrix on a *validation* draw of
                   length n (its own seed): the best depth per length, chosen without the test labels
    ID-K           acc[n][K_id] with one K_id per run, chosen on the validation draws of the ID lengths:
                   what a user without any OOD labels would get (a tie goes to the smallest K: a run at
                   100% in distribution from K = 1 on reports ID-K at K = 1)
    T(n) acc.      acc[n][min(T(n), T_test)]  (Fan et al.'s "oracle", named distinctly here)
    per-sample     Pr_x[some K is correct]
    Policy(n)      accuracy at the schedule's own test-time depth;  Gap = Oracle OOD - Policy OOD (pp)
    Front@90       the largest OOD length n with Oracle >= 90% at n and at every smaller OOD length
    flip rate      Pr_x[yhat_{K+1}(x) != yhat_K(x)] over the OOD samples, per K and its mean
    stable K       per length, how many K give accuracy >= 90%
    shortcut       exact match of trivial predictors on the same test sets: the task's rules (tasks.py:
                   dyck's counting rule, multiplication's b <= 2 answers), the most frequent answer and
                   the best constant per position (both fitted on the test set itself: upper bounds).
                   An accuracy at or below its shortcut is not evidence of learning.
    hard           the same accuracies on the task's hard subset (dyck: the prefix goes below zero;
                   multiplication: b >= 3), for tasks that define one
    depth use      does the model use its loop? On all OOD samples and on the hard subset (depth_use):
      K=1 acc.     the accuracy at K = 1, averaged over the OOD lengths: what one loop step answers
      loop gain    Oracle OOD - K=1 acc. (pp): what the rest of the loop adds, at its best depth per length
      settle K     the shallowest single depth K whose accuracy, averaged over the OOD lengths, is within 1
                   point of the best single depth's (the max over K of that average): where answers settle
                   (a model scored at one fixed depth has no K axis: None for all three)

How a schedule is scored: its `policy` picks a depth on the looped trajectory. Two kinds say otherwise through
their own attributes, and this file asks for those, never for a schedule by name:
    score_set(model, x, y, batch_size, device)   a model that scores itself at one fixed depth `depth`
                                                 (ntp.py's autoregressive baselines: greedy decoding)
    full_depth                                   one more depth whose accuracy is reported beside the
                                                 policy's (trm_halt: TRM's test protocol runs every step)

Shapes: B batch, P sequence positions, K loop steps, V vocabulary.
"""

import statistics
from collections import Counter

import torch

from tasks import IGNORE, PAD


def test_lengths(cfg) -> list[int]:
    """The test grid of a run (its --test_lengths), sorted: lengths n > n_max are OOD, the others ID."""
    return sorted({int(s) for s in cfg.test_lengths.split(",") if s.strip()})


# --- the one-pass evaluation ----------------------------------------------------------------------

def exact_match(preds: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(K, B, P) predicted tokens, (B, P) targets -> (K, B) bool: every scored position (y != IGNORE) right."""
    return ((preds == y) | (y == IGNORE)).all(-1)


@torch.no_grad()
def trajectory_correct(model, schedule, x, y, Tn, T_test):
    """One pass to T_test. Returns exact (K, B) bool: sample correct at depth K; preds (K, B, P) with -1 at
    unscored positions; the policy depth (B,) of the schedule's test rule."""
    logits, hidden = model(x, T_test, keep_hidden=True)  # (K, B, P, V), (K+1, B, P, D)
    preds = logits.argmax(-1)  # (K, B, P)
    depth = schedule.policy(Tn, T_test, hidden=hidden, mask=x != PAD).clamp(1, T_test)
    return exact_match(preds, y), preds.masked_fill(y == IGNORE, -1), depth


@torch.no_grad()
def score_sets(model, schedule, sets: dict, T_test: int, batch_size: int, device: str) -> dict:
    """{n: {"exact": (K, B) bool, "flip": (K-1, B) bool, "depth": (B,)}} on the CPU, for sets {n: (x, y, n, Tn)}."""
    if hasattr(schedule, "score_set"):  # a model that scores itself at one fixed depth (module docstring): K = 1 row
        return {n: schedule.score_set(model, x, y, batch_size, device) for n, (x, y, _, _) in sets.items()}
    out = {}
    for n, (x, y, _, Tn) in sets.items():
        parts = []
        for i in range(0, len(x), batch_size):
            xb, yb, tb = (t[i:i + batch_size].to(device) for t in (x, y, Tn))
            e, preds, d = trajectory_correct(model, schedule, xb, yb, tb, T_test)
            parts.append((e.cpu(), (preds[1:] != preds[:-1]).any(-1).cpu(), d.cpu()))
        out[n] = {k: torch.cat([p[i] for p in parts], -1) for i, k in enumerate(("exact", "flip", "depth"))}
    return out



def policy_id_acc(model, schedule, id_sets: dict, T_test: int, batch_size: int, device: str) -> float:
    """Exact match in % at the schedule's own test depth over the ID sets: the training loops' id_acc."""
    scores = score_sets(model.eval(), schedule, id_sets, T_test, batch_size, device)
    return 100 * torch.cat([v["exact"][v["depth"] - 1, torch.arange(len(v["depth"]))]
                            for v in scores.values()]).float().mean().item()

def samples(sets: dict):
    """(n, prompt, answer) of every sample of {n: (x, y, n, Tn)}: the tokens without padding and the
    targets at the scored positions."""
    for n, (x, y, _, _) in sets.items():
        for xi, yi in zip(x.tolist(), y.tolist()):
            yield n, [t for t in xi if t != PAD], [t for t in yi if t != IGNORE]


def shortcut_scores(task, sets: dict, keep=None) -> dict:
    """{predictor: [exact match per length]} of the trivial predictors on the sets (see the docstring);
    keep(x) -> bool: score only those samples (task.hard: the hard subset; None where a length has none)."""
    by_n = {n: [] for n in sorted(sets)}
    for n, x, ans in samples(sets):
        if keep is None or keep(x):
            by_n[n].append((x, tuple(ans)))
    out = {}
    for i, n in enumerate(by_n):
        answers = [a for _, a in by_n[n]]
        if not answers:
            continue
        preds = {"most frequent answer": [Counter(answers).most_common(1)[0][0]] * len(answers),
                 # the best constant answer per position: the most frequent token at each answer slot
                 "best constant per position": [tuple(Counter(col).most_common(1)[0][0] for col in zip(*answers))]
                 * len(answers)}
        for x, _ in by_n[n]:
            for name, p in task.shortcuts(x).items():
                preds.setdefault(name, []).append(tuple(p))
        for name, p in preds.items():
            out.setdefault(name, [None] * len(by_n))[i] = statistics.fmean(a == b for a, b in zip(p, answers))
    return out


@torch.no_grad()
def evaluate(model, schedule, task, test_sets: dict, val_sets: dict, T_test: int, n_max: int,
             batch_size: int = 256, device: str = "cpu") -> dict:
    """Score a model on fixed test sets and validation sets {n: (x, y, n, Tn)} (the same lengths); return
    eval.json's `lengths, K, acc, val_acc, hard, shortcuts, metrics`."""
    was_training = model.training
    model.eval()
    test = score_sets(model, schedule, test_sets, T_test, batch_size, device)
    val = score_sets(model, schedule, val_sets, T_test, batch_size, device)
    model.train(was_training)
    lengths = sorted(test_sets)
    # the depths of the K axis: 1..T_test from one looped pass; one fixed depth for a model that scores itself,
    # whose oracle, val-K, ID-K and policy all collapse to the accuracy there (and T(n) accuracy does not apply)
    fixed = hasattr(schedule, "score_set")
    K = [schedule.depth] if fixed else list(range(1, T_test + 1))
    # a schedule's own extra test depth, reported beside its policy (module docstring)
    full = getattr(schedule, "full_depth", None)
    hard = {n: [task.hard(x) for _, x, _ in samples({n: test_sets[n]})] for n in lengths}
    has_hard = any(h is not None for hs in hard.values() for h in hs)
    rows = []
    for n in lengths:
        # exact (K, B): sample right at depth K; depth (B,): the depth the schedule's policy picks for each sample,
        # 1..T_test (an index into K: row depth - 1 of exact)
        exact, depth = test[n]["exact"].float(), test[n]["depth"]
        policy_ok = exact[depth - 1, torch.arange(len(depth))]  # (B,) right at the policy's depth
        row = {"acc": exact.mean(1).tolist(), "val_acc": val[n]["exact"].float().mean(1).tolist(),
               "tn_acc": exact[min(task.T(n), T_test) - 1].mean().item() if not fixed else None,
               "per_sample_oracle": exact.max(0).values.mean().item(), "policy_acc": policy_ok.mean().item(),
               "policy_depth": torch.tensor(K)[depth - 1].float().mean().item(),  # the depths K[depth - 1] themselves
               "flip": test[n]["flip"].float().mean(1).tolist()}
        if full:
            row["full_depth_acc"] = exact[min(full, T_test) - 1].mean().item()
        if has_hard:
            h = torch.tensor(hard[n], dtype=torch.bool)
            row["hard_frac"] = h.float().mean().item()
            row["hard_acc"] = exact[:, h].mean(1).tolist() if h.any() else None
            row["policy_hard_acc"] = policy_ok[h].mean().item() if h.any() else None
        rows.append(row)
    shortcuts = shortcut_scores(task, test_sets)
    m = metrics(lengths, rows, shortcuts, n_max, K)
    if has_hard:  # the shortcuts on the hard subset: what an accuracy there must beat
        m.update(hard_shortcut(lengths, shortcut_scores(task, test_sets, keep=task.hard), n_max))
    return {"lengths": lengths, "K": K, "acc": [r["acc"] for r in rows],
            "val_acc": [r["val_acc"] for r in rows], "hard_acc": [r.get("hard_acc") for r in rows] if has_hard else None,
            "shortcuts": shortcuts, "metrics": m, **({"full_depth": min(full, T_test)} if full else {})}


def hard_shortcut(lengths: list[int], scores: dict, n_max: int) -> dict:
    """The best shortcut's OOD exact match on the hard subset (mean over the OOD lengths that have hard
    samples), in %, and its name: `shortcut_hard_ood`, `shortcut_hard_ood_name`."""
    ood = [i for i, n in enumerate(lengths) if n > n_max]
    vals = {k: 100 * statistics.fmean(v[i] for i in ood if v[i] is not None) for k, v in scores.items()
            if any(v[i] is not None for i in ood)}
    best = max(vals, key=vals.get) if vals else None
    return {"shortcut_hard_ood": vals.get(best), "shortcut_hard_ood_name": best}


# --- metrics --------------------------------------------------------------------------------------

def front90(lengths: list[int], curve: list[float]):
    """Largest grid length n with curve >= 0.9 at n and at every smaller grid length; None if the first
    fails. lengths: the OOD grid, ascending."""
    best = None
    for n, a in zip(lengths, curve):
        if a < 0.9:
            break
        best = n
    return best



def argmax_first(v: list[float]) -> int:
    """Index of the largest value, the first (smallest K) among ties."""
    return max(range(len(v)), key=lambda k: (v[k], -k))


def pct(vals: list, idx: list[int]) -> float | None:
    """The mean in % of vals (accuracies in [0, 1], one a length) over the lengths idx that have a value."""
    vals = [vals[i] for i in idx if vals[i] is not None]
    return 100 * statistics.fmean(vals) if vals else None


def metrics(lengths: list[int], rows: list[dict], shortcuts: dict, n_max: int, K: list[int] = None) -> dict:
    """Every summary of the per-length rows. Accuracies in %, Gap in pp; None where nothing was tested.
    K: the depth of each column of acc (default 1, 2, ..); one column for a fixed-depth model."""
    K = K or list(range(1, len(rows[0]["acc"]) + 1))
    ood = [i for i, n in enumerate(lengths) if n > n_max]
    ind = [i for i, n in enumerate(lengths) if n <= n_max]

    acc = [r["acc"] for r in rows]
    oracle = [max(a) for a in acc]  # Oracle(n) = max_K acc[n][K]
    # val-K: K*(n) = argmax_K val_acc[n][K], reported on test
    val_k = [argmax_first(r["val_acc"]) for r in rows]
    val_k_acc = [a[k] for a, k in zip(acc, val_k)]
    # ID-K: one K for the run, the best mean validation accuracy over the ID lengths
    id_k = argmax_first([statistics.fmean(rows[i]["val_acc"][k] for i in ind) for k in range(len(acc[0]))]) if ind else None
    id_k_acc = [a[id_k] for a in acc] if id_k is not None else [None] * len(acc)
    policy = [r["policy_acc"] for r in rows]
    flip_idx = ood or ind
    flip_curve = [statistics.fmean(rows[i]["flip"][k] for i in flip_idx) for k in range(len(acc[0]) - 1)]
    m = {"oracle": oracle, "policy": policy, "val_k": [K[k] for k in val_k], "val_k_acc": val_k_acc,
         "id_k": None if id_k is None else K[id_k], "id_k_acc": id_k_acc,
         "tn_acc": [r["tn_acc"] for r in rows], "per_sample_oracle": [r["per_sample_oracle"] for r in rows],
         "policy_depth": [r["policy_depth"] for r in rows], "stable_interval": [sum(a >= 0.9 for a in x) for x in acc],
         "oracle_ood": pct(oracle, ood), "oracle_id": pct(oracle, ind), "val_k_ood": pct(val_k_acc, ood),
         "id_k_ood": pct(id_k_acc, ood), "policy_ood": pct(policy, ood), "policy_id": pct(policy, ind),
         "tn_ood": pct([r["tn_acc"] for r in rows], ood),
         "per_sample_oracle_ood": pct([r["per_sample_oracle"] for r in rows], ood),
         "front90": front90([lengths[i] for i in ood], [oracle[i] for i in ood]),
         "flip_curve": flip_curve, "flip_rate": statistics.fmean(flip_curve) if flip_curve else None,
         "policy_depth_ood": None if not ood else statistics.fmean(rows[i]["policy_depth"] for i in ood)}
    m["gap"] = None if m["oracle_ood"] is None else m["oracle_ood"] - m["policy_ood"]
    # shortcuts: each predictor's ID / OOD exact match, and the best of them
    m["shortcuts"] = {k: {"id": pct(v, ind), "ood": pct(v, ood)} for k, v in shortcuts.items()}
    for split in ("id", "ood"):
        vals = {k: v[split] for k, v in m["shortcuts"].items() if v[split] is not None}
        best = max(vals, key=vals.get) if vals else None
        m[f"shortcut_{split}"], m[f"shortcut_{split}_name"] = (vals[best] if best else None), best
    if "full_depth_acc" in rows[0]:  # a schedule with a full_depth: its accuracy there beside the policy
        m["full_depth_acc"] = [r["full_depth_acc"] for r in rows]
        m["full_depth_ood"], m["full_depth_id"] = pct(m["full_depth_acc"], ood), pct(m["full_depth_acc"], ind)
    if "hard_acc" in rows[0]:
        hard = [r["hard_acc"] for r in rows]
        m["hard_frac"] = [r["hard_frac"] for r in rows]
        m["oracle_hard"] = [None if h is None else max(h) for h in hard]
        m["oracle_hard_ood"] = pct(m["oracle_hard"], ood)
        m["val_k_hard_ood"] = pct([None if h is None else h[k] for h, k in zip(hard, val_k)], ood)
        m["id_k_hard_ood"] = None if id_k is None else pct([None if h is None else h[id_k] for h in hard], ood)
        m["policy_hard_ood"] = pct([r["policy_hard_acc"] for r in rows], ood)
    m.update(depth_use(lengths, acc, [r["hard_acc"] for r in rows] if "hard_acc" in rows[0] else None, n_max, K))
    return m


SETTLE_POINTS = 1.0  # settle K: within this many points of the best single depth


def depth_use(lengths: list[int], acc: list, hard_acc: list | None, n_max: int, K: list[int]) -> dict:
    """Does the model use its loop (module docstring, "depth use")? From the matrices alone, so that an eval.json
    written before these metrics gains them when read (lab/records.load_eval): acc (lengths x K) and hard_acc
    (None for a task without a hard subset; a None row at a length without hard samples), accuracies in [0, 1].
    Returns k1_ood, loop_gain_ood, settle_k_ood and, with hard_acc, k1_hard_ood, loop_gain_hard_ood,
    settle_k_hard_ood: in %, pp and a depth; None without an OOD length that has a value, or without a K axis
    (a model scored at one fixed depth: K has one entry)."""
    out = {}
    for suffix, mat in (("ood", acc), ("hard_ood", hard_acc)):
        if mat is None:  # the task has no hard subset: no hard keys, as in metrics()
            continue
        ood = [i for i, n in enumerate(lengths) if n > n_max and mat[i] is not None]
        k1 = settle = gain = None
        if ood and len(K) > 1 and K[0] == 1:
            # K=1 acc. = mean_{n OOD} acc[n][K = 1]
            k1 = 100 * statistics.fmean(mat[i][0] for i in ood)
            # loop gain = Oracle OOD - K=1 acc. = mean_{n OOD} max_K acc[n][K] - K=1 acc.
            gain = 100 * statistics.fmean(max(mat[i]) for i in ood) - k1
            # settle K = min { K : c(K) >= max_K' c(K') - 1 point },  c(K) = mean_{n OOD} acc[n][K]
            curve = [100 * statistics.fmean(mat[i][k] for i in ood) for k in range(len(K))]
            settle = K[min(k for k, c in enumerate(curve) if c >= max(curve) - SETTLE_POINTS)]
        out |= {f"k1_{suffix}": k1, f"loop_gain_{suffix}": gain, f"settle_k_{suffix}": settle}
    return out


# --- what a run prints -------------------------------------------------------------------------------

def fmt(v, spec=".1f") -> str:
    """A number for a report or a table (every one of the project's: lab/tables.py, results/), "-" for None."""
    return "-" if v is None else format(v, spec)


def vs_shortcut(v, shortcut) -> str:
    """An accuracy in %, flagged when it does not beat the best shortcut."""
    return fmt(v) + "%" + (" (<= shortcut)" if v is not None and shortcut is not None and v <= shortcut else "")


def beyond(where: str, v, shortcut, name) -> str:
    """One clause of the verdict: an oracle accuracy against the best shortcut on the same samples."""
    if v is None or shortcut is None:
        return f"{where}: oracle {fmt(v)}%, no shortcut to compare"
    if v > shortcut:
        return f"learned beyond the shortcut {where} (oracle {fmt(v)}% vs {fmt(shortcut)}%, {name})"
    return f"{where} no better than {name} (oracle {fmt(v)}% vs {fmt(shortcut)}%)"


def verdict(m: dict) -> str:
    """What a run learned beyond its best shortcut, in words: on the hard subset first (where the task has one:
    the samples a shortcut gets wrong), then on all OOD samples (on the ID ones if the grid has no OOD length)."""
    parts = []
    if m.get("oracle_hard_ood") is not None:
        parts.append(beyond("on the hard subset", m["oracle_hard_ood"], m.get("shortcut_hard_ood"),
                            m.get("shortcut_hard_ood_name")))
    if m["oracle_ood"] is not None:
        parts.append(beyond("on all OOD samples", m["oracle_ood"], m["shortcut_ood"], m["shortcut_ood_name"]))
    else:
        parts.append(beyond("in distribution (no OOD length)", m["oracle_id"], m.get("shortcut_id"), m.get("shortcut_id_name")))
    return "; ".join(parts)


def depth_line(m: dict, K: list[int]) -> str | None:
    """The report's depth-use line (depth_use): what one loop step answers, what the loop adds, where answers
    settle; on all OOD samples, then on the hard subset. None without an OOD length."""
    if len(K) == 1:
        return f"  depth use: scored at one fixed depth (K = {K[0]}), no loop to measure"
    if m.get("k1_ood") is None:
        return None
    line = (f"  depth use, OOD: K=1 {fmt(m['k1_ood'])}% -> best {fmt(m['oracle_ood'])}% (the loop adds "
            f"{fmt(m['loop_gain_ood'])} points; answers settle by K = {m['settle_k_ood']})")
    if m.get("k1_hard_ood") is not None:
        line += (f"; hard subset: {fmt(m['k1_hard_ood'])}% -> {fmt(m['oracle_hard_ood'])}% "
                 f"(+{fmt(m['loop_gain_hard_ood'])})")
    return line


def format_run(e: dict) -> str:
    """The report a run prints: the verdict in words, then every metric beside its shortcut (the module
    docstring defines each), then the per-length rows."""
    m = e["metrics"]
    cuts = ", ".join(f"{k} {fmt(v['ood'])}%" for k, v in m["shortcuts"].items())
    lines = [f"{e.get('run_dir', '')}: {verdict(m)}",
             f"  task={e['task']} schedule={e['schedule']} seed={e['seed']}",
             f"  in-distribution: policy {fmt(m['policy_id'])}%  oracle {fmt(m['oracle_id'])}%"]
    if "oracle_hard_ood" in m:  # first the samples that test the rule: most others a shortcut also gets right
        cut = m.get("shortcut_hard_ood")
        # the hard subset's share of the OOD samples (every length has as many samples): what its accuracies average
        ood = [f for n, f in zip(e["lengths"], m["hard_frac"]) if n > e["n_max"] and f is not None]
        lines.append(f"  hard subset ({fmt(100 * statistics.fmean(ood)) if ood else '-'}% of the OOD samples, those "
                     f"that test the rule), OOD: oracle {vs_shortcut(m['oracle_hard_ood'], cut)}  val-K {fmt(m['val_k_hard_ood'])}%  "
                     f"policy {fmt(m['policy_hard_ood'])}%  shortcut " + (f"{fmt(cut)}% ({m['shortcut_hard_ood_name']})"
                                                                          if cut is not None else "-"))
    lines += [f"  OOD, all samples: oracle {vs_shortcut(m['oracle_ood'], m['shortcut_ood'])}  val-K {fmt(m['val_k_ood'])}%  "
             f"ID-K {fmt(m['id_k_ood'])}% (K={m['id_k']})  policy {fmt(m['policy_ood'])}%  gap {fmt(m['gap'])} pp  "
             f"T(n) {fmt(m['tn_ood'])}%  per-sample oracle {fmt(m['per_sample_oracle_ood'])}%",
             f"       front@90 {fmt(m['front90'], '')}  flip rate {fmt(m['flip_rate'], '.3f')}  exit depth {fmt(m['policy_depth_ood'])}"]
    if depth := depth_line(m, e["K"]):
        lines.append(depth)
    lines.append(f"  shortcut (OOD): {cuts}")
    if e.get("diverged"):  # train.py: the final training loss above 2 ln V
        lines.append(f"  DIVERGED in training ({e['diverged']}): these numbers measure a broken run")
    if "full_depth_ood" in m:
        lines.append(f"  full depth K={e.get('full_depth')}: ID {fmt(m['full_depth_id'])}%  OOD {fmt(m['full_depth_ood'])}%"
                     f"  (the policy above exits early)")
    lines += ["  n:         " + " ".join(f"{n:>5}" for n in e["lengths"]),
              "  oracle:    " + " ".join(f"{a:5.2f}" for a in m["oracle"]),
              "  val-K:     " + " ".join(f"{a:5.2f}" for a in m["val_k_acc"]),
              "  policy:    " + " ".join(f"{a:5.2f}" for a in m["policy"]),
              "  stable K:  " + " ".join(f"{s:>5}" for s in m["stable_interval"])]
    return "\n".join(lines)
