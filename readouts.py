"""
Post-hoc readouts: when to stop a *trained, frozen* looped model, read off its trajectory (Popescu et
al. for the signals, D@X and frozen-trajectory gates; Fan et al. for maximum confidence). Nothing here
changes the model.

To use this with your model (this file imports only torch: copy it alone)
----------------------------------------------------------------------------
    trajectory_signals, sweep, max_conf_*, fit_gate   work on tensors alone: logits (K, B, P, V), hidden
                     (K+1, B, P, D) (index 0 = the state before step 1), scored (B, P) bool (True where y is
                     scored: fold your answer mask in), correct (K, B) bool, all on one device
    collect, readout_report   need model(x, K, keep_hidden=True) -> (logits, hidden) as above and a
                     schedule with policy(Tn, T_test, hidden=, mask=) -> (B,) (any halting.py schedule);
                     sets {n: (x, y, n, Tn)} with x token ids padded with pad_id (pad_id=None: any input,
                     every position real), y (B, P) int64 in 0..V-1 with IGNORE (-100) where unscored (never
                     -1), Tn (B,) int32 or int64
    early_exit       needs model.embed / step / readout as in halting.py (step's t is 1-based; an optional
                     init_state(h0) gives the state before step 1, as there); scored and mask (B, P) bool
    time_inference   as early_exit; its "fixed" rule also needs model.forward_depths (leave it out otherwise)
    time_exits       as time_inference with "fixed" rules: needs model.forward_depths and embed / step / readout

max_conf_batch and max_conf_sample return (B,) long depths in 1..K on self_ce's device; collect returns
every tensor on the CPU. A wrong argument raises ValueError naming it, its shape and dtype, and what is
expected; a missing method (schedule.policy, model.forward_depths, ...) raises ValueError naming it, on entry.

A readout turns a trajectory into a per-sample *score* s_t (K, B), higher = readier to stop, and exits
each sample at the first step whose score crosses a threshold (the last step if none does):

    d(x) = min { t : s_t(x) >= thr }   (d = K if no step qualifies)

Signals of one sample at step t. A sequence task scores several positions (dyck scores every bracket);
each signal is aggregated over the sample's scored positions by its *worst case*, so a sample stops
only when every answer position is ready:

    top1           min_pos max_v p_t(v)                      stop when >= thr
    margin         min_pos (z_t^(1) - z_t^(2))               stop when >= thr   (top-2 logit gap)
    entropy        max_pos H(p_t)                            stop when <= thr
    kl             max_pos KL(p_t || p_{t-1})                stop when <= thr   (t = 1: never)
    kl_huginn      max_pos KL(p_{t-1} || p_t)                stop when <= thr   (Huginn's direction; p_0 uniform)
    logit_change   max_pos ||z_t - z_{t-1}|| / ||z_{t-1}||   stop when <= thr   (t = 1: never)
    hidden_change  max_pos ||H_t - H_{t-1}|| / ||H_{t-1}||   stop when <= thr   (t = 1 compares H_0)
    stable         run_t = steps since the predicted answer last changed      stop when >= m
    self_ce        mean_pos -log max_v p_t(v)   (maximum confidence; Fan et al.'s self-cross-entropy:
                   the CE of the output against its own greedy prediction)

Huginn's fixed thresholds (kl_huginn <= 1e-3, its code's default; 5e-4, its first release) are reported
beside the validation-chosen one. Gates fitted on the frozen trajectory give an exit distribution q and exit
at the first t whose cumulative exit probability sum_{s<=t} q_s reaches a threshold (Ouro's q).
"<= thr" signals are negated into scores, so one rule serves all. Thresholds come from a quantile sweep
of the *validation* scores and are chosen on validation only; the test split only reports.

Shape legend: K loop steps, B batch, P sequence positions, V vocabulary, D model width, N thresholds.
"""

import inspect
import math
import time

import torch
import torch.nn as nn

INF = float("inf")
IGNORE = -100  # target of an unscored position


# --- the contract, checked (as in halting.py; repeated so that this file stands alone) -----------------

def describe(v) -> str:
    if isinstance(v, torch.Tensor):
        return f"shape {tuple(v.shape)}, dtype {v.dtype}, device {v.device}"
    return "None" if v is None else f"a {type(v).__module__}.{type(v).__qualname__}"


KINDS = {"integer": lambda d: not d.is_floating_point and not d.is_complex and d != torch.bool,
         "int32 or int64": lambda d: d in (torch.int32, torch.int64), "int64": lambda d: d == torch.int64,
         "bool": lambda d: d == torch.bool, "float": lambda d: d.is_floating_point, "any": lambda d: True}


def expect(name: str, v, dims: str, sizes: tuple, kind: str = "any", device=None) -> None:
    """v must be a torch.Tensor of sizes (None: any) named dims ("(K, B)"), dtype kind, on device (None: any)."""
    ok = (isinstance(v, torch.Tensor) and v.dim() == len(sizes) and KINDS[kind](v.dtype)
          and all(s is None or s == n for s, n in zip(sizes, v.shape)) and (device is None or v.device == device))
    if not ok:
        letters = dims.strip("()").split(", ")
        known = ", ".join(l if s is None else str(s) for l, s in zip(letters, sizes)) + ("," if len(sizes) == 1 else "")
        what = ("" if kind == "any" else kind + " ") + "tensor" + (f" on {device}" if device is not None else "")
        raise ValueError(f"{name}: {describe(v)}; expected {dims} = ({known}) {what}")


def expect_methods(name: str, obj, methods: tuple, need: str) -> None:
    """obj must have every method in `methods`; need: who calls them, and how."""
    missing = [m for m in methods if not callable(getattr(obj, m, None))]
    if missing:
        raise ValueError(f"{name}: {describe(obj)} has no {', '.join(missing)}; {need}")


LOOP = ("embed", "step", "readout")  # what early_exit runs: the loop of halting.py's contract
LOOP_NEED = "early_exit runs the loop itself: model.embed(x), step(h, h0, t), readout(h), as in halting.py"


# --- signals: each works on one step (B, P, .) or a whole trajectory (K, B, P, .) -------------------

def worst(v: torch.Tensor, scored: torch.Tensor, largest: bool) -> torch.Tensor:
    """Aggregate a per-position value over each sample's scored positions: max (largest) or min.
    v (..., B, P), scored (B, P) bool -> (..., B)."""
    fill = -INF if largest else INF
    v = v.masked_fill(~scored, fill)
    return v.amax(-1) if largest else v.amin(-1)


def rel_change(a: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
    """||a - prev|| / ||prev|| over the last dim. (..., K, C) -> (..., K)."""
    return (a - prev).norm(dim=-1) / prev.norm(dim=-1).clamp(min=1e-8)


def top1(logits, prev_logits, h, prev_h, scored):
    return worst(logits.softmax(-1).amax(-1), scored, largest=False)


def margin(logits, prev_logits, h, prev_h, scored):
    z = logits.topk(2, dim=-1).values  # (..., B, P, 2)
    return worst(z[..., 0] - z[..., 1], scored, largest=False)


def predictive_entropy(logits, prev_logits, h, prev_h, scored):
    logp = logits.log_softmax(-1)
    # H(p) = -sum_v p(v) log p(v)
    return worst(-(logp.exp() * logp).sum(-1), scored, largest=True)


def kl(logits, prev_logits, h, prev_h, scored):
    if prev_logits is None:  # step 1 has nothing to compare with: never stop there
        return torch.full(logits.shape[:-2], INF, device=logits.device)
    logp, logq = logits.log_softmax(-1), prev_logits.log_softmax(-1)
    # KL(p_t || p_{t-1}) = sum_v p_t(v) (log p_t(v) - log p_{t-1}(v))
    return worst((logp.exp() * (logp - logq)).sum(-1), scored, largest=True)


def kl_huginn(logits, prev_logits, h, prev_h, scored):
    # Huginn's exit (Geiping et al. 2025; their KLExitEvaluator): the previous step's distribution first, and
    # step 1 compared with the uniform distribution, as their loop starts
    logp = logits.log_softmax(-1)
    logq = torch.full_like(logp, -math.log(logp.shape[-1])) if prev_logits is None else prev_logits.log_softmax(-1)
    # KL(p_{t-1} || p_t) = sum_v p_{t-1}(v) (log p_{t-1}(v) - log p_t(v)),  p_0 = uniform
    return worst((logq.exp() * (logq - logp)).sum(-1), scored, largest=True)


def logit_change(logits, prev_logits, h, prev_h, scored):
    if prev_logits is None:
        return torch.full(logits.shape[:-2], INF, device=logits.device)
    return worst(rel_change(logits, prev_logits), scored, largest=True)


def hidden_change(logits, prev_logits, h, prev_h, scored):
    return worst(rel_change(h, prev_h), scored, largest=True)


def self_ce(logits, prev_logits, h, prev_h, scored):
    # self-CE = -log p_t(yhat_t), yhat_t = argmax_v p_t(v), averaged over the scored positions
    s = scored.float()
    return (-logits.log_softmax(-1).amax(-1) * s).sum(-1) / s.sum(-1).clamp(min=1)


# name -> (signal function, direction): score = direction * signal, stop when score >= threshold
SIGNALS = {"top1": (top1, 1), "margin": (margin, 1), "entropy": (predictive_entropy, -1), "kl": (kl, -1),
           "kl_huginn": (kl_huginn, -1), "logit_change": (logit_change, -1), "hidden_change": (hidden_change, -1)}


def answer(logits: torch.Tensor, scored: torch.Tensor) -> torch.Tensor:
    """The predicted answer: argmax at scored positions, -1 elsewhere. (..., B, P, V) -> (..., B, P)."""
    return logits.argmax(-1).masked_fill(~scored, -1)


def update_run(run: torch.Tensor, pred: torch.Tensor, prev_pred: torch.Tensor) -> torch.Tensor:
    """run_t = run_{t-1} + 1 if the predicted answer is unchanged since step t-1, else 0. (B,)"""
    return (run + 1) * (pred == prev_pred).all(-1)


def pool(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of the hidden state over each sample's real (non-pad) tokens. (..., B, P, D) -> (..., B, D).
    (halting.pool does the same; repeated here so that this file stands alone.)"""
    m = mask.unsqueeze(-1).to(h.dtype)  # (B, P, 1)
    return (h * m).sum(-2) / m.sum(-2).clamp(min=1)


@torch.no_grad()
def trajectory_signals(logits: torch.Tensor, hidden: torch.Tensor, scored: torch.Tensor) -> dict:
    """Every signal at every step of a trajectory. logits (K, B, P, V), hidden (K+1, B, P, D) with
    hidden[0] = H_0, scored (B, P) -> {name: (K, B)} (raw signals, not scores)."""
    expect("logits", logits, "(K, B, P, V)", (None, None, None, None), "float")
    K, B, P, _ = logits.shape
    expect("hidden", hidden, "(K+1, B, P, D)", (K + 1, B, P, None), "float", logits.device)
    expect("scored", scored, "(B, P)", (B, P), "bool", logits.device)
    out = {}
    for name, (fn, _) in SIGNALS.items():
        first = fn(logits[:1], None, hidden[1:2], hidden[:1], scored)  # (1, B)
        rest = fn(logits[1:], logits[:-1], hidden[2:], hidden[1:-1], scored)  # (K-1, B)
        out[name] = torch.cat([first, rest])
    out["self_ce"] = self_ce(logits, None, None, None, scored)
    preds = answer(logits, scored)  # (K, B, P)
    run = [torch.zeros(logits.shape[1], dtype=torch.long, device=logits.device)]
    for t in range(1, len(logits)):
        run.append(update_run(run[-1], preds[t], preds[t - 1]))
    out["stable"] = torch.stack(run).float()  # (K, B)
    return out


def score(name: str, signal: torch.Tensor) -> torch.Tensor:
    """Raw signal -> score (higher = readier to stop)."""
    return signal * SIGNALS[name][1] if name in SIGNALS else signal


# --- the exit rule, sweeps and threshold choice --------------------------------------------------------

def exit_depths(scores: torch.Tensor, thresholds: torch.Tensor) -> torch.Tensor:
    """d(x) = first t with score_t(x) >= thr, K if none. scores (K, B), thresholds (N,) -> depths (N, B),
    1-based."""
    expect("scores", scores, "(K, B)", (None, None))
    expect("thresholds", thresholds, "(N,)", (None,), "any", scores.device)
    hit = scores.unsqueeze(0) >= thresholds.view(-1, 1, 1)  # (N, K, B)
    hit[:, -1] = True  # the last step always exits
    return hit.float().argmax(1) + 1  # argmax returns the first maximum: the first hit


def accuracy_at(correct: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    """Exact-match accuracy when each sample exits at its depth. correct (K, B) bool, depth (N, B) -> (N,)."""
    expect("correct", correct, "(K, B)", (None, None), "bool")
    expect("depth", depth, "(N, B)", (None, correct.shape[1]), "int64", correct.device)
    return correct.float().gather(0, depth - 1).mean(-1)


def report(correct: torch.Tensor, depth: torch.Tensor, groups: torch.Tensor) -> dict:
    """Test accuracy and mean exit depth of one depth per sample, overall and per group (e.g. length n).
    correct (K, B) bool, depth (B,), groups (B,)."""
    expect("correct", correct, "(K, B)", (None, None), "bool")
    expect("depth", depth, "(B,)", (correct.shape[1],), "int64", correct.device)
    expect("groups", groups, "(B,)", (correct.shape[1],), "integer")
    ok = correct.float().gather(0, depth.view(1, -1) - 1)[0]  # (B,)
    gs = sorted(set(groups.tolist()))
    return {"test_acc": ok.mean().item(), "test_depth": depth.float().mean().item(),
            "by_group": {"group": gs, "test_acc": [ok[groups == g].mean().item() for g in gs],
                         "test_depth": [depth[groups == g].float().mean().item() for g in gs]}}


def quantile_thresholds(val_scores: torch.Tensor, n: int = 41) -> torch.Tensor:
    """Candidate thresholds: quantiles 0, 1/(n-1), ..., 1 of the finite validation scores (deduplicated)."""
    s = val_scores[torch.isfinite(val_scores)].double()
    if s.numel() == 0:
        return torch.tensor([INF])
    return torch.unique(torch.quantile(s, torch.linspace(0, 1, n, dtype=torch.double))).float()


def d_at_x(acc: list, depth: list, x: float):
    """D@X: the smallest mean depth among sweep points with accuracy >= X% (x in %); its index, or None."""
    ok = [i for i in range(len(acc)) if acc[i] >= x / 100 - 1e-12]
    return min(ok, key=lambda i: (depth[i], -acc[i])) if ok else None


def select(acc: list, depth: list, tol: float = 0.0) -> int:
    """Index of the operating point: the smallest mean depth whose accuracy is within tol of the best.
    Called with validation numbers only."""
    return d_at_x(acc, depth, 100 * (max(acc) - tol))


def sweep(val_scores, val_correct, test_scores, test_correct, thresholds, test_groups,
          tol: float = 0.0, xs=(90, 95, 99)) -> dict:
    """Accuracy and mean exit depth on both splits for every threshold; the operating point and D@X are
    chosen on validation and reported on test. scores (K, B_split), correct (K, B_split) bool,
    thresholds (N,) in score units, test_groups (B_test,): the length n of each test sample."""
    curve = {"threshold": thresholds.tolist()}
    depths = {}
    for split, s, c in (("val", val_scores, val_correct), ("test", test_scores, test_correct)):
        depths[split] = d = exit_depths(s, thresholds)  # (N, B)
        curve[f"{split}_acc"] = accuracy_at(c, d).tolist()
        curve[f"{split}_depth"] = d.float().mean(-1).tolist()
    i = select(curve["val_acc"], curve["val_depth"], tol)
    chosen = {**{k: v[i] for k, v in curve.items()}, **report(test_correct, depths["test"][i], test_groups)}
    d_at = {}
    for x in xs:
        j = d_at_x(curve["val_acc"], curve["val_depth"], x)
        d_at[str(x)] = None if j is None else {k: v[j] for k, v in curve.items()}
    return {"curve": curve, "chosen": chosen, "d_at": d_at}


# --- maximum confidence (Fan et al.) ------------------------------------------------------------------

def max_conf_batch(self_ce: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Per-batch rule (Fan et al.): every sample of a batch exits at the single step with the lowest mean
    self-CE over the batch, K* = argmin_t mean_x self_ce_t(x). A "batch" = the samples sharing a group id
    (one test length, as Fan et al. evaluate each length as one batch). self_ce (K, B) -> depth (B,), long,
    on self_ce's device."""
    expect("self_ce", self_ce, "(K, B)", (None, None), "float")
    expect("groups", groups, "(B,)", (self_ce.shape[1],), "integer", self_ce.device)
    depth = torch.empty_like(self_ce[0], dtype=torch.long)  # (B,), on self_ce's device
    for g in groups.unique():
        sel = groups == g
        depth[sel] = self_ce[:, sel].mean(1).argmin() + 1
    return depth


def max_conf_sample(self_ce: torch.Tensor) -> torch.Tensor:
    """Per-sample variant: each sample exits at its own argmin_t self_ce_t(x). (K, B) -> (B,)."""
    expect("self_ce", self_ce, "(K, B)", (None, None), "float")
    return self_ce.argmin(0) + 1


# --- gates fitted on a frozen trajectory (Popescu et al.) ---------------------------------------------

class Gate(nn.Module):
    """Hazard e_t = sigmoid(g(h_t)) from the pooled hidden state h_t; g linear or a 2-layer MLP. Inputs
    are standardised with the fitting data's mean and std."""

    def __init__(self, d: int, kind: str = "linear", hidden: int = 64):
        super().__init__()
        if kind not in ("linear", "mlp", "ouro"):
            raise ValueError(f"unknown gate {kind!r}: choose from linear, mlp, ouro")
        self.kind = kind
        self.register_buffer("mu", torch.zeros(d))
        self.register_buffer("sd", torch.ones(d))
        self.net = nn.Linear(d, 1) if kind in ("linear", "ouro") else nn.Sequential(
            nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """(..., D) -> hazard (...)"""
        return torch.sigmoid(self.net((h - self.mu) / self.sd)).squeeze(-1)


def exit_distribution(e: torch.Tensor) -> torch.Tensor:
    """q_t = e_t prod_{j<t} (1 - e_j) for t < K, q_K = prod_{j<K} (1 - e_j). e (K, B) -> q (K, B).
    (halting.stop_distribution is the same with the batch first.)"""
    surv = torch.cumprod(1 - e, 0)  # prod_{j<=t} (1 - e_j)
    before = torch.cat([torch.ones_like(e[:1]), surv[:-1]])  # prod_{j<t} (1 - e_j)
    return torch.cat([e[:-1] * before[:-1], before[-1:]])


def truncated_geometric(lam: float, K: int) -> torch.Tensor:
    """Prior pi_t proportional to lam (1 - lam)^(t-1), t = 1..K, renormalised. (K,) (As in halting.py.)"""
    if not 0 < lam < 1:
        raise ValueError(f"geometric parameter {lam}: must be in (0, 1)")
    p = lam * (1 - lam) ** torch.arange(K, dtype=torch.float64)
    return (p / p.sum()).float()


def gate_loss(q: torch.Tensor, losses: torch.Tensor, prior: torch.Tensor, beta: float) -> torch.Tensor:
    """PonderNet objective: mean_x [ sum_t q_t(x) l_t(x) + beta KL(q(x) || prior) ]. q, losses (K, B)."""
    kl_q = (q * (q.clamp(min=1e-12).log() - prior.log().unsqueeze(1))).sum(0)  # (B,)
    return ((q * losses).sum(0) + beta * kl_q).mean()


OURO_K, OURO_GAMMA = 50.0, 0.005  # Ouro's slope k and improvement threshold gamma (Zhu et al. 2025, section 3.4)


def ouro_gate_loss(e: torch.Tensor, losses: torch.Tensor, k: float = OURO_K, gamma: float = OURO_GAMMA) -> torch.Tensor:
    """Ouro's second stage: the exit hazard e_t (K, B) of a frozen model learns whether the next step still
    pays. losses (K, B) per-step CE. Our reading of the hazard: e_t decides the exit after step t, so its
    target is the improvement of step t+1 (the last step always exits and is not trained)."""
    # I_t = max(0, l_t - l_{t+1}),  w_t = sigmoid(k (I_t - gamma)): the target of continuing after step t
    w = torch.sigmoid(k * ((losses[:-1] - losses[1:]).clamp(min=0) - gamma))  # (K-1, B)
    # L = -mean_t [ w_t log(1 - e_t) + (1 - w_t) log e_t ]
    return nn.functional.binary_cross_entropy(e[:-1], 1 - w)


def fit_gate(kind: str, pooled: torch.Tensor, losses: torch.Tensor, steps: int = 300, lr: float = 1e-2,
             beta: float = 0.01, lam: float = 0.2, seed: int = 0) -> Gate:
    """Fit a gate on a frozen trajectory: pooled (K, B, D) hidden states and losses (K, B) per-step
    per-sample CE, both precomputed (no gradient reaches the model). Full-batch Adam. linear, mlp: the
    PonderNet objective (gate_loss); ouro: a linear gate on Ouro's loss-improvement target (ouro_gate_loss)."""
    expect("pooled", pooled, "(K, B, D)", (None, None, None), "float")
    expect("losses", losses, "(K, B)", tuple(pooled.shape[:2]), "float", pooled.device)
    pooled, losses = pooled.detach(), losses.detach()
    gen = torch.Generator().manual_seed(seed)
    gate = Gate(pooled.shape[-1], kind)
    flat = pooled.reshape(-1, pooled.shape[-1])
    gate.mu.copy_(flat.mean(0)), gate.sd.copy_(flat.std(0).clamp(min=1e-6))
    layers = [m for m in gate.net.modules() if isinstance(m, nn.Linear)]
    for m in layers:  # explicit generator: same seed, same gate
        b = 1 / math.sqrt(m.in_features)
        nn.init.uniform_(m.weight, -b, b, generator=gen), nn.init.zeros_(m.bias)
    nn.init.constant_(layers[-1].bias, math.log(lam / (1 - lam)))  # start at the prior's hazard
    prior = truncated_geometric(lam, pooled.shape[0])
    opt = torch.optim.Adam(gate.parameters(), lr=lr)
    for _ in range(steps):
        e = gate(pooled)  # (K, B) hazards
        loss = ouro_gate_loss(e, losses) if kind == "ouro" else gate_loss(exit_distribution(e), losses, prior, beta)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return gate.eval()


@torch.no_grad()
def gate_scores(gate: Gate, pooled: torch.Tensor) -> torch.Tensor:
    """Cumulative exit mass sum_{s<=t} q_s: exit at the first t where it reaches alpha. (K, B, D) -> (K, B)"""
    expect("pooled", pooled, "(K, B, D)", (None, None, gate.mu.shape[0]), "float")
    return exit_distribution(gate(pooled)).cumsum(0)


# --- every readout on a validation and a test trajectory ---------------------------------------------

ALPHAS = [round(0.05 * i, 2) for i in range(1, 20)]  # alpha (Ouro's q) = 0.05 .. 0.95
HUGINN_KL = (1e-3, 5e-4)  # Huginn's fixed kl thresholds: its code's default, its first release's
HAZARD_HEADS = ("rl", "ponder")  # schedules whose head defines pi(t) = r_t prod_{i<t} (1 - r_i) (halting.py)


def all_readouts(val: dict, test: dict, gates: dict = None, n_thresholds: int = 41, tol: float = 0.0) -> dict:
    """val, test: {"signals": {name: (K, B)}, "correct": (K, B) bool, "n": (B,), "Tn": (B,), "policy": (B,),
    "pooled": (K, B, D) if gates}. gates: {name: Gate} already fitted on a third split.
    Returns {readout: {"kind", "chosen", and for swept readouts "curve", "d_at"}}."""
    K = test["correct"].shape[0]
    out = {}

    def add(name, kind, s_val, s_test, thresholds):  # sign: raw signal threshold = sign * threshold
        out[name] = {"kind": kind, "sign": SIGNALS.get(name, (None, 1))[1], **sweep(s_val, val["correct"], s_test, test["correct"], thresholds,
                                           test["n"], tol)}

    def steps(split):  # score_t = t: the threshold K exits everyone at depth K
        return torch.arange(1, K + 1, dtype=torch.float).unsqueeze(1).expand(K, split["correct"].shape[1])

    add("fixed", "depth", steps(val), steps(test), torch.arange(1, K + 1, dtype=torch.float))
    for name in SIGNALS:
        s_val, s_test = score(name, val["signals"][name]), score(name, test["signals"][name])
        add(name, "threshold", s_val, s_test, quantile_thresholds(s_val, n_thresholds))
    add("stable", "m", val["signals"]["stable"], test["signals"]["stable"], torch.arange(1, K, dtype=torch.float))
    for name, gate in (gates or {}).items():
        add(name, "alpha", gate_scores(gate, val["pooled"]), gate_scores(gate, test["pooled"]), torch.tensor(ALPHAS))
    if "head_cdf" in test:  # the trained head's own exit distribution, cut at a cumulative probability q
        add("head_cdf", "alpha", val["head_cdf"], test["head_cdf"], torch.tensor(ALPHAS))
    # rules without a threshold: one depth per test sample
    c = test["correct"]
    points = {"max_conf_batch": max_conf_batch(test["signals"]["self_ce"], test["n"]),
              "max_conf_sample": max_conf_sample(test["signals"]["self_ce"]),
              "policy": test["policy"], "tn": test["Tn"].clamp(1, K),
              # the first correct step uses labels: an upper bound, not a readout
              "oracle_first_correct": torch.where(c.any(0), c.float().argmax(0) + 1, K)}
    for thr in HUGINN_KL:  # fixed, not chosen on validation: exit at the first t with kl_huginn <= thr
        points[f"kl_huginn@{thr:g}"] = exit_depths(score("kl_huginn", test["signals"]["kl_huginn"]), torch.tensor([-thr]))[0]
    for name, d in points.items():
        out[name] = {"kind": "point", "chosen": report(c, d.long(), test["n"])}
    return out


# --- early exit that saves compute: exited samples leave the batch --------------------------------------

@torch.no_grad()
def early_exit(model, x: torch.Tensor, scored: torch.Tensor, mask: torch.Tensor, readout: str,
               threshold: float, T_max: int, gate: Gate = None):
    """Run the loop, and after every step drop the rows whose readout says stop: step t costs only the
    still-active rows. `model` has embed/step/readout. threshold in score units (as in the sweep).
    Returns the predicted answer (B, P) and the exit depth (B,). Samples do not interact (attention is
    within a sequence), so each one's result equals the full trajectory read at its exit step."""
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise ValueError(f"x: {describe(x)}; expected a tensor (B, P, ...) that the model's embed accepts")
    B, P = x.shape[:2]
    expect("scored", scored, "(B, P)", (B, P), "bool", x.device)
    expect("mask", mask, "(B, P)", (B, P), "bool", x.device)
    expect_methods("model", model, LOOP, LOOP_NEED)
    rows = torch.arange(B, device=x.device)  # original index of each active row
    pred_out = torch.empty((B, P), dtype=torch.long, device=x.device)
    depth_out = torch.empty(B, dtype=torch.long, device=x.device)
    h0 = model.embed(x)  # (B, P, D), injected into every step
    prev_h = model.init_state(h0) if hasattr(model, "init_state") else h0  # the state before step 1
    prev_logits = prev_pred = None
    run = torch.zeros(B, dtype=torch.long, device=x.device)
    cum = torch.zeros(B, device=x.device)  # gate: exit mass so far
    surv = torch.ones(B, device=x.device)  # gate: prod_{j<t} (1 - e_j)
    for t in range(1, T_max + 1):
        h = model.step(prev_h, h0, t)
        logits = model.readout(h)  # (b, P, V), b = active rows
        pred = answer(logits, scored)
        if readout in SIGNALS:
            fn, sign = SIGNALS[readout]
            s = sign * fn(logits, prev_logits, h, prev_h, scored).to(x.device)
        elif readout == "stable":
            run = run if prev_pred is None else update_run(run, pred, prev_pred)
            s = run.float()
        elif gate is not None:
            e = gate(pool(h, mask))
            cum, surv = cum + e * surv, surv * (1 - e)
            s = cum
        else:
            raise ValueError(f"unknown readout {readout!r}: choose from {', '.join(SIGNALS)}, stable, or a gate")
        stop = s >= threshold if t < T_max else torch.ones_like(s, dtype=torch.bool)
        prev_h, prev_logits, prev_pred = h, logits, pred
        if stop.any():  # the stopped rows leave the batch
            pred_out[rows[stop]], depth_out[rows[stop]] = pred[stop], t
            keep = ~stop
            if not keep.any():
                break
            rows, h0, prev_h, scored, mask = rows[keep], h0[keep], h[keep], scored[keep], mask[keep]
            prev_logits, prev_pred, run, cum, surv = logits[keep], pred[keep], run[keep], cum[keep], surv[keep]
    return pred_out, depth_out


def time_inference(model, batches: list, rules: list, T_max: int, repeats: int = 3, sync=None) -> list:
    """Wall time of inference over batches [(x, y, scored, mask)] for rules [(readout, threshold, gate)];
    readout "fixed" runs every sample to depth = threshold and reads out once (model.forward_depths).
    Time = best of `repeats` passes. Returns rows {readout, depth (mean exit), acc, seconds}."""
    if any(name == "fixed" for name, _, _ in rules):
        expect_methods("model", model, ("forward_depths",), "time_inference's \"fixed\" rule runs model."
                       "forward_depths(x, depth (B,)) -> (B, P, V): leave that rule out for a model without one")
    if any(name != "fixed" for name, _, _ in rules):
        expect_methods("model", model, LOOP, LOOP_NEED)
    sync = sync or (lambda: None)
    rows = []
    with torch.no_grad():
        for name, thr, gate in rules:
            best = INF
            for _ in range(repeats):
                sync()
                ok, depth, t0 = [], [], time.perf_counter()
                for x, y, scored, mask in batches:
                    if name == "fixed":
                        d = torch.full((len(x),), int(thr), device=x.device)
                        pred = answer(model.forward_depths(x, d), scored)
                    else:
                        pred, d = early_exit(model, x, scored, mask, name, thr, T_max, gate)
                    ok.append(((pred == y) | ~scored).all(-1)), depth.append(d)
                sync()
                best = min(best, time.perf_counter() - t0)
            rows.append({"readout": f"fixed K={int(thr)}" if name == "fixed" else name, "seconds": best,
                         "depth": torch.cat(depth).float().mean().item(), "acc": torch.cat(ok).float().mean().item()})
    return rows


def format_timing(rows: list) -> str:
    """Markdown: mean exit depth, accuracy and wall time of each row, speed-up against the first row."""
    lines = [f"| inference | mean exit depth | test acc | wall time (s) | speed-up vs {rows[0]['readout']} |",
             "|---" * 5 + "|"]
    lines += [f"| {r['readout']} | {r['depth']:.2f} | {100 * r['acc']:.1f} | {r['seconds']:.3f} "
              f"| {rows[0]['seconds'] / r['seconds']:.2f}x |" for r in rows]
    return "\n".join(lines)


# --- every readout of a trained model -----------------------------------------------------------------
# The caller builds the data: splits {"test", "val", "fit"} of fixed sets {n: (x, y, n, T(n))}, three
# disjoint draws of the test grid. Thresholds, alphas and D@X are chosen on val, gates trained on fit,
# everything reported on test.

def real_tokens(x: torch.Tensor, pad_id) -> torch.Tensor:
    """(B, P) bool, True at real tokens: x != pad_id for token ids; every position when pad_id is None."""
    if pad_id is None:
        return torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
    if x.dim() != 2 or x.dtype.is_floating_point:
        raise ValueError(f"x: {describe(x)}; pad_id={pad_id} finds padding by token id, which needs x (B, P) "
                         f"token ids: pass pad_id=None for any other input (every position real)")
    return x != pad_id


@torch.no_grad()
def collect(model, schedule, sets: dict, T_test: int, pad_id: int, device: str = "cpu", batch_size: int = 256,
            pooled: bool = False) -> dict:
    """One pass to T_test per batch: every readout signal {name: (K, B)}, exact match (K, B), per-step CE
    (K, B) (what a gate is fitted to), the schedule's policy depth (B,), n (B,), T(n) (B,) and, with
    pooled, the states pooled over real tokens (K, B, D)."""
    expect_methods("schedule", schedule, ("policy",), "collect needs schedule.policy(Tn, T_test, hidden=, mask=) "
                                                      "-> (B,) (any halting.py schedule)")
    need = "collect needs model(x, K, keep_hidden=True) -> (logits (K, B, P, V), hidden (K+1, B, P, D))"
    forward = getattr(model, "forward", model)
    if not callable(forward):
        raise ValueError(f"model: {describe(model)} is not callable; {need}")
    params = inspect.signature(forward).parameters
    if "keep_hidden" not in params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        raise ValueError(f"model.forward{inspect.signature(forward)} takes no keep_hidden: {need}")
    parts = []
    for n in sorted(sets):
        x, y, ns, Tn = sets[n]
        for i in range(0, len(x), batch_size):
            xb, yb, tb = (t[i:i + batch_size].to(device) for t in (x, y, Tn))
            B, P = xb.shape[:2]
            expect(f"sets[{n}] y", yb, "(B, P)", (B, P), "int64")
            expect(f"sets[{n}] Tn", tb, "(B,)", (B,), "int32 or int64")
            mask = real_tokens(xb, pad_id)
            out = model(xb, T_test, keep_hidden=True)
            if not (isinstance(out, tuple) and len(out) == 2):
                raise ValueError(f"model(x, {T_test}, keep_hidden=True) returned {describe(out)}: {need}")
            logits, hidden = out  # (K, B, P, V), (K+1, B, P, D)
            V = logits.shape[-1]
            bad = (yb != IGNORE) & ((yb < 0) | (yb >= V))
            if bad.any():
                raise ValueError(f"sets[{n}] y: holds the target {yb[bad][0].item()}; expected class indices 0..{V - 1} "
                                 f"(V = {V}, the logits' last dim), and IGNORE ({IGNORE}) at unscored positions")
            scored = yb != IGNORE
            ce = nn.functional.cross_entropy(logits.flatten(0, 2), yb.expand(logits.shape[:-1]).flatten(),
                                             ignore_index=IGNORE, reduction="none").view(logits.shape[:-1])
            part = {"signals": trajectory_signals(logits, hidden, scored),
                    "correct": ((logits.argmax(-1) == yb) | ~scored).all(-1),
                    "ce": (ce * scored).sum(-1) / scored.sum(-1).clamp(min=1),  # mean CE over scored positions
                    "policy": schedule.policy(tb, T_test, hidden=hidden, mask=mask).clamp(1, T_test),
                    "n": ns[i:i + batch_size].to(device), "Tn": tb}
            if pooled:
                part["pooled"] = pool(hidden[1:], mask)
            if getattr(schedule, "name", None) in HAZARD_HEADS:  # cumulative exit probability sum_{s<=t} pi_s (K, B)
                part["head_cdf"] = schedule.test_log_pi(hidden, mask, T_test).exp().cumsum(-1).transpose(0, 1)
            parts.append(part)
    # per-step tensors (K, B, ...) join along the batch dim 1, per-sample ones (B,) along dim 0
    out = {k: torch.cat([p[k] for p in parts], 0 if k in ("policy", "n", "Tn") else 1).cpu()
           for k in parts[0] if k != "signals"}
    out["signals"] = {k: torch.cat([p["signals"][k] for p in parts], 1).cpu() for k in parts[0]["signals"]}
    return out


def readout_report(model, schedule, splits: dict, T_test: int, n_max: int, pad_id: int, gates=(), device: str = "cpu",
           seed: int = 0, tol: float = 0.0, meta: dict = None):
    """Every readout of a frozen model on the splits (gates: kinds to fit on splits["fit"], seeded by seed).
    Returns (the readouts.json dict, the fitted gates)."""
    was_training = model.training
    model.eval()
    data = {s: collect(model, schedule, splits[s], T_test, pad_id, device, pooled=bool(gates))
            for s in ["test", "val"] + (["fit"] if gates else [])}
    model.train(was_training)
    fitted = {f"gate_{k}": fit_gate(k, data["fit"]["pooled"], data["fit"]["ce"], seed=seed) for k in gates}
    rep = {**(meta or {}), "n_max": n_max, "T_test": T_test, "lengths": sorted(splits["test"]),
           "samples": len(next(iter(splits["test"].values()))[0]),
           "readouts": all_readouts(data["val"], data["test"], fitted, tol=tol)}
    return rep, fitted


def format_readouts(rep: dict) -> str:
    """One line per readout: operating point (chosen on val) and D@X, all on test; accuracies in %."""
    ood = [i for i, n in enumerate(rep["lengths"]) if n > rep["n_max"]]
    f = lambda v, spec=".1f": "-" if v is None else format(v, spec)
    lines = ["readouts " + " ".join(f"{k}={rep[k]}" for k in ("task", "schedule", "seed") if k in rep)
             + "  (val-chosen, test-reported)",
             "| readout | threshold | test acc | depth | OOD acc | OOD depth | D@90 | D@95 | D@99 |", "|---" * 9 + "|"]
    for name, r in rep["readouts"].items():
        c, g = r["chosen"], r["chosen"]["by_group"]
        ood_acc = 100 * sum(g["test_acc"][i] for i in ood) / len(ood) if ood else None
        ood_d = sum(g["test_depth"][i] for i in ood) / len(ood) if ood else None
        thr = c.get("threshold")
        dx = [f"{d['test_depth']:.1f} ({100 * d['test_acc']:.0f}%)" if d else "-" for d in r.get("d_at", {}).values()]
        lines.append(f"| {name} | {f(None if thr is None else r['sign'] * thr, '.3g')} | {100 * c['test_acc']:.1f} "
                     f"| {c['test_depth']:.2f} | {f(ood_acc)} | {f(ood_d, '.2f')} | " + " | ".join(dx or ["-"] * 3) + " |")
    return "\n".join(lines)


def time_exits(model, rep: dict, fitted: dict, test_sets: dict, T_test: int, pad_id: int, device: str = "cpu",
               batch_size: int = 256) -> list:
    """Wall time on the test split: fixed depth T_test and the val-chosen fixed depth against every online
    readout at its val-chosen threshold (time_inference). Needs model.forward_depths and embed / step / readout."""
    expect_methods("model", model, ("forward_depths",), "time_exits times fixed depths with "
                   "model.forward_depths(x, depth (B,)) -> (B, P, V)")
    expect_methods("model", model, LOOP, LOOP_NEED)
    batches = []
    for x, y, _, _ in test_sets.values():
        for i in range(0, len(x), batch_size):
            xb, yb = x[i:i + batch_size].to(device), y[i:i + batch_size].to(device)
            batches.append((xb, yb, yb != IGNORE, real_tokens(xb, pad_id)))
    R = rep["readouts"]
    rules = [("fixed", T_test, None), ("fixed", int(R["fixed"]["chosen"]["threshold"]), None)]
    gates = {k: g.to(device) for k, g in fitted.items()}
    rules += [(k, R[k]["chosen"]["threshold"], gates.get(k)) for k in list(SIGNALS) + ["stable", *gates]]
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else None
    return time_inference(model, batches, rules, T_test, sync=sync)
