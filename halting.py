"""
Stop schedules: at which loop depth a looped model's training loss is read out, and which depth it uses at test
time. The primary paper's fix is here: train at a *random* depth near the length-matched one (Window), or let a
halting head learn when to stop (RLHalting), instead of a depth that is a function of the input length.

Read Window first: its depth K = clip(T(n) + D, 1, T_max), then Schedule.loss just above it, the cross-entropy
read out at that depth. The other schedules follow, simplest first; the faster paths that compute the same
numbers (the shrinking active set, truncated backpropagation) come after every schedule, and the argument
checks of the copy-alone contract close the file.

Notation (the papers' symbols):

    n        length of an input (per task: string length, bits per operand, ...)
    T(n)     its length-matched depth (Fan et al.): the loop steps the input needs, T(n) = n for most tasks
    K        a number of loop steps: the loop axis of a trajectory (K, B, P, V)
    T_max    training truncation: no training depth exceeds T_max
    T_test   the deepest step read at test time; every test depth is clipped to 1..T_test
    c        the constant depth of the fixed schedules ("fixed K = c" in the papers)
    w        half-width of a window of depths, D ~ Unif{-w..w}
    tau      the depth at which a sample's training loss is read out
    l_k      l(theta; x, y, k) = CE(yhat_k(x), y), averaged over the scored positions of x
    r_t      hazard of a halting head: the probability of stopping at step t, having reached it
    pi       stop distribution pi(t) = r_t prod_{i<t} (1 - r_i), the remaining mass on the last step

Shapes: B batch, P sequence positions (tokens), D the width of the loop's state h (model.py: d_model), K loop
steps, V vocabulary. Depths (K, T(n), T_max, T_test, tau) are loop steps, never positions.

Single-depth schedules supervise one depth per sample and pay only for the steps they need: those of DEPTH_FIRST
draw it before the forward pass, rl samples it during the loop. Weighted ones (multidepth, fixed_prior, ponder,
act) read out every depth of one unrolled trajectory; trm_halt supervises a sequence of detached steps. Each
equation sits above the line that computes it.

To use this with your model (this file imports only torch: copy it alone): your looped model provides
embed(x) -> h0, step(h, h0, t) -> H_t and readout(h) -> logits (model.py's LoopedTransformer has them); then

    schedule = make_schedule("window", w=5, T_max=20)
    loss, stats = schedule.loss(model, x, y, Tn, gen)     # y: IGNORE (-100) where not scored; gen: a Generator

The full contract (shapes, dtypes, devices, what is optional) is CONTRACT at the end of the file, beside the
checks that enforce it.
"""

import inspect
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE = -100  # target of an unscored position (F.cross_entropy's ignore_index)
# the schedules that draw each sample's one depth before the forward pass (Schedule.train_depth): what truncated
# backpropagation (bptt_k), token weighting (loss_weight="token") and the stacked seeds' depth draws need
DEPTH_FIRST = ("fixed", "matched", "window", "fixed_window", "lognormal_poisson")


# --- the loop, read out at any depth ---------------------------------------------------------------------------

def start(model, x: torch.Tensor):
    """(H_0, h0): the state before step 1 (model.init_state(h0) if the model has one, else h0) and the input
    injected into every step, h0 = embed(x) (B, P, D)."""
    h0 = model.embed(x)
    return (model.init_state(h0) if hasattr(model, "init_state") else h0), h0


def per_sample_ce(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """l(theta; x, y, tau) = CE(yhat_tau(x), y) averaged over each sample's scored positions.
    logits (..., B, P, V), y (B, P) with IGNORE at unscored positions -> (..., B)"""
    V = logits.shape[-1]
    ce = F.cross_entropy(logits.reshape(-1, V), y.expand(logits.shape[:-1]).reshape(-1),
                         ignore_index=IGNORE, reduction="none").view(logits.shape[:-1])  # (..., B, P)
    scored = (y != IGNORE).to(ce.dtype)
    return (ce * scored).sum(-1) / scored.sum(-1).clamp(min=1)


def batch_mean(ce: torch.Tensor, y: torch.Tensor, loss_weight: str = "sample") -> torch.Tensor:
    """The batch loss from per-sample CEs ce (B,) and targets y (B, P). "sample": the mean over samples of
    each sample's l(theta; x, y, tau) (the primary paper); "token": the mean over every scored token of the
    batch (Fan et al.'s code: one cross-entropy over all answer tokens), where a long answer weighs more.
    Like every objective below, it reduces the last axes only: stacked seeds (..., B) get one loss each."""
    if loss_weight == "sample":
        return ce.mean(-1)
    n = (y != IGNORE).sum(-1).to(ce.dtype)  # (B,) scored positions of each sample
    # L = sum_i n_i l_i / sum_i n_i  (= the sum of CE over the batch's scored tokens / their number)
    return (ce * n).sum(-1) / n.sum(-1).clamp(min=1)


def unroll(model, x: torch.Tensor, K: int):
    """The trajectory of K loop steps: logits (K, B, P, V) and hidden states (K+1, B, P, D), index 0 = H_0."""
    h, h0 = start(model, x)
    logits, hidden = [], [h]
    for t in range(1, K + 1):
        h = model.step(h, h0, t)
        logits.append(model.readout(h))
        hidden.append(h)
    return torch.stack(logits), torch.stack(hidden)


def logits_at(model, x: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    """Each sample read out at its own depth: x (B, P), depth (B,) -> (B, P, V). The reference: one unroll to
    the deepest depth, each sample's step gathered (B * max depth block applications). active_logits_at and
    truncated_logits_at (after the schedules) compute the same logits with fewer applications or less memory."""
    logits, _ = unroll(model, x, int(depth.max()))  # (K, B, P, V)
    return logits[depth - 1, torch.arange(len(depth), device=x.device)]


# === Single-depth schedules ==========================================================================

class Schedule(nn.Module):
    """Base: every sample is supervised at one depth tau = train_depth(Tn, gen); test rule `policy`.
    active_set (default) reads the depths out with a shrinking batch (active_logits_at); False: the reference
    gather (logits_at); bptt_k > 0: truncated backpropagation (truncated_logits_at). All three give the same loss."""

    name = "base"
    # the keys of the stats dict its loss returns, in order (lab/stack.py's stacked stats keep this order)
    stat_names = ("loss", "block_evals", "depth")
    # settings its constructor takes (through a base) that its loss and policy never read: a flag for one of them
    # would change nothing, so train.py refuses it (config.knobs_of); tests/test_halting.py checks each one bitwise
    unread = ()

    def __init__(self, *, T_max: int = 20, active_set: bool = True, bptt_k: int = 0, loss_weight: str = "sample"):
        super().__init__()
        self.T_max, self.active_set, self.bptt_k, self.loss_weight = T_max, active_set, bptt_k, loss_weight

    def train_depth(self, Tn: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def policy(self, Tn, T_test, hidden=None, mask=None) -> torch.Tensor:
        raise NotImplementedError

    def loss(self, model, x, y, Tn, gen, mask=None):
        check_batch(self, x, y, Tn, gen, mask)
        tau = self.train_depth(Tn, gen).to(x.device)  # (B,)
        # l(theta; x, y, tau) = CE(yhat_tau(x), y), averaged over samples (or over tokens: batch_mean)
        loss = batch_mean(per_sample_ce(self.logits_at(model, x, tau), y), y, self.loss_weight)
        return loss, {"loss": loss.item(), "block_evals": self.block_evals(tau), "depth": tau.float().mean().item()}

    def logits_at(self, model, x, tau):
        """yhat_tau(x) for every sample, (B, P, V): the reference gather, or one of its optimisations. train.py's
        defaults (active_set on, bptt_k 0) take active_logits_at, i.e. model.forward_depths."""
        if self.bptt_k:
            return truncated_logits_at(model, x, tau, self.bptt_k)
        return active_logits_at(model, x, tau) if self.active_set else logits_at(model, x, tau)

    def block_evals(self, tau) -> float:
        """Block applications per sample: sum_i tau_i / B with the active set (or truncation), B * max tau / B without."""
        return float(tau.float().mean().item() if self.active_set or self.bptt_k else tau.max().item())


def uniform_offsets(like: torch.Tensor, w: int, gen: torch.Generator) -> torch.Tensor:
    """D ~ Unif{-w..w}, one per sample, drawn on gen's device and moved to like's."""
    return torch.randint(-w, w + 1, like.shape, generator=gen).to(like.device)


class Window(Schedule):
    """Local window (primary paper): K = clip(T(n) + D, 1, T_max), D ~ Unif{-w..w} per sample; test K = T(n).
    Its loss is Schedule.loss above: l(theta; x, y, tau) = CE(yhat_tau(x), y) at tau = train_depth(Tn).

    k_min (not in the paper; default 1, the paper's clip) is a depth floor: K = clip(T(n) + D, k_min, T_max) in
    training and K = clip(T(n), k_min, T_test) at test. A floor keeps every training depth deep, so a short input
    is never answered in one or two steps (results/README.md, "Does the model use its loop?")."""

    name = "window"

    def __init__(self, *, w: int = 5, k_min: int = 1, **base):
        super().__init__(**base)
        check(1 <= k_min <= self.T_max, f"k_min={k_min}: the depth floor must be in 1..T_max ({self.T_max})")
        self.w, self.k_min = w, k_min

    def train_depth(self, Tn, gen):
        # K = clip(T(n) + D, k_min, T_max)   (k_min = 1: the paper's window)
        return (Tn + uniform_offsets(Tn, self.w, gen)).clamp(self.k_min, self.T_max)

    def policy(self, Tn, T_test, hidden=None, mask=None):
        check_policy(Tn, T_test)
        # K = T(n), clipped to k_min..T_test
        return Tn.clamp(min(self.k_min, T_test), T_test)


class Matched(Schedule):
    """Length-matched: K = T(n) in training (clipped to 1..T_max) and at test (clipped to 1..T_test)."""

    name = "matched"

    def train_depth(self, Tn, gen):
        return Tn.clamp(1, self.T_max)

    def policy(self, Tn, T_test, hidden=None, mask=None):
        check_policy(Tn, T_test)
        return Tn.clamp(1, T_test)


class Fixed(Schedule):
    """K = c for every sample, in training and at test."""

    name = "fixed"

    def __init__(self, *, c: int = 20, **base):
        super().__init__(**base)
        check(1 <= c <= self.T_max, f"c={c}: the fixed depth must be in 1..T_max ({self.T_max})")
        self.c = c

    def train_depth(self, Tn, gen):
        return torch.full_like(Tn, self.c)

    def policy(self, Tn, T_test, hidden=None, mask=None):
        check_policy(Tn, T_test)
        return torch.full_like(Tn, min(self.c, T_test))


class FixedWindow(Fixed):
    """Fixed-compute window: K = clip(c + D, 1, T_max), D ~ Unif{-w..w}; test K = c."""

    name = "fixed_window"

    def __init__(self, *, w: int = 5, **base):
        super().__init__(**base)
        self.w = w

    def train_depth(self, Tn, gen):
        # K = clip(c + D, 1, T_max)
        return (self.c + uniform_offsets(Tn, self.w, gen)).clamp(1, self.T_max)


class LognormalPoisson(Schedule):
    """The depth sampler of the recurrent-depth language model (Geiping et al. 2025, "Scaling up Test-Time
    Compute with Latent Reasoning", section 3.3): input-independent, unlike the window, with a heavy tail;
    test K = r_bar (their evaluation uses the mean recurrence). One depth per batch as in the paper
    (r_per="batch"), or one per sample (r_per="sample")."""

    name = "lognormal_poisson"

    def __init__(self, *, r_bar: int = 10, sigma: float = 0.5, r_per: str = "batch", **base):
        super().__init__(**base)
        self.r_bar, self.sigma, self.r_per = r_bar, sigma, r_per

    def train_depth(self, Tn, gen):
        n = 1 if self.r_per == "batch" else len(Tn)
        # tau ~ Normal(log r_bar - sigma^2 / 2, sigma), so that E[exp(tau)] = r_bar
        tau = math.log(self.r_bar) - self.sigma ** 2 / 2 + self.sigma * torch.randn(n, generator=gen, dtype=torch.float64)
        # r = 1 + Poisson(exp(tau)), clipped to 1..T_max:  E[r] = 1 + r_bar before clipping (Huginn's sampler
        # does not clip: its r is unbounded)
        r = 1 + torch.poisson(tau.exp(), generator=gen)
        return r.clamp(1, self.T_max).long().expand(len(Tn)).to(Tn.device)

    def policy(self, Tn, T_test, hidden=None, mask=None):
        check_policy(Tn, T_test)
        return torch.full_like(Tn, min(self.r_bar, T_test))


# === Weighted schedules: every depth of one trajectory ================================================

class MultiDepth(Matched):
    """Multi-depth average: the deterministic mean of l_k over the window S_w(x); test K = T(n)."""

    name = "multidepth"

    def __init__(self, *, w: int = 5, T_max: int = 20):
        super().__init__(T_max=T_max)
        self.w = w

    def loss(self, model, x, y, Tn, gen, mask=None):
        check_batch(self, x, y, Tn, gen, mask)
        # S_w(x) = {clip(T(n) + d, 1, T_max) : d = -w..w} = the integers lo..hi. A set: the depths that
        # clipping piles up at 1 or T_max count once, so every supervised depth has the same weight.
        lo, hi = self.window(Tn)  # (B,)
        K = int(hi.max())  # one unroll to the deepest window of the batch: B * K block applications
        l = per_sample_ce(unroll(model, x, K)[0], y)  # (K, B): l_k for every depth k = 1..K
        loss = self.objective(l, lo, hi)
        return loss, {"loss": loss.item(), "block_evals": float(K), "depth": ((lo + hi) / 2).float().mean().item()}

    def window(self, Tn):
        """S_w(x) as its bounds lo..hi = clip(T(n) -+ w, 1, T_max). Tn (..., B) -> lo, hi (..., B)."""
        return (Tn - self.w).clamp(1, self.T_max), (Tn + self.w).clamp(1, self.T_max)

    @staticmethod
    def objective(l, lo, hi):
        """L = (1/|S_w(x)|) sum_{k in S_w(x)} l_k, mean over samples. l (..., K, B) the CE at k = 1..K -> (...)."""
        k = torch.arange(1, l.shape[-2] + 1, device=l.device).unsqueeze(1)  # (K, 1)
        in_S = ((k >= lo.unsqueeze(-2)) & (k <= hi.unsqueeze(-2))).to(l.dtype)  # (..., K, B)
        # L = (1/|S_w(x)|) sum_{k in S_w(x)} l_k
        return ((in_S * l).sum(-2) / in_S.sum(-2)).mean(-1)


def truncated_geometric(lam: float, K: int) -> torch.Tensor:
    """p(t) = lam (1 - lam)^(t-1) / Z on t = 1..K, Z = 1 - (1 - lam)^K (truncated and renormalised). -> (K,)"""
    check(0 < lam < 1, f"geometric parameter {lam}: must be in (0, 1)")
    p = lam * (1 - lam) ** torch.arange(K, dtype=torch.float64)
    return (p / p.sum()).float()


class FixedPrior(Schedule):
    """Fixed prior (Popescu et al.): sum_t pi_t l_t with an input-independent pi over 1..T_max; test K = T_max
    (the papers' post-hoc readouts, readouts.py, choose other depths)."""

    name = "fixed_prior"

    def __init__(self, *, prior: str = "geometric", lambda_p: float = 0.2, T_max: int = 20):
        super().__init__(T_max=T_max)
        check(0 < lambda_p < 1, f"lambda_p={lambda_p}: must be in (0, 1)")
        # pi_t = 1 / T_max (uniform), or lambda_p (1 - lambda_p)^(t-1) / Z (truncated geometric)
        pi = torch.full((T_max,), 1 / T_max) if prior == "uniform" else truncated_geometric(lambda_p, T_max)
        self.register_buffer("pi", pi, persistent=False)  # (T_max,)

    def loss(self, model, x, y, Tn, gen, mask=None):
        check_batch(self, x, y, Tn, gen, mask)
        l = per_sample_ce(unroll(model, x, self.T_max)[0], y)  # (T_max, B)
        loss = self.objective(l)
        depth = (self.pi * torch.arange(1, self.T_max + 1, device=self.pi.device)).sum()  # E_pi[t]
        return loss, {"loss": loss.item(), "block_evals": float(self.T_max), "depth": depth.item()}

    def objective(self, l):
        """L = sum_t pi_t l_t, mean over samples. l (..., T_max, B) -> (...)."""
        # L = sum_t pi_t l_t
        return (self.pi.unsqueeze(-1) * l).sum(-2).mean(-1)

    def policy(self, Tn, T_test, hidden=None, mask=None):
        check_policy(Tn, T_test)
        return torch.full_like(Tn, min(self.T_max, T_test))


# === Learned halting: a hazard head on the pooled state ===============================================

def pool(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """h_t = Pool(H_t): mean over each sample's real (non-pad) positions. h (..., B, P, D), mask (B, P) -> (..., B, D)."""
    m = mask.to(h.dtype).unsqueeze(-1)  # (B, P, 1)
    return (h * m).sum(-2) / m.sum(-2).clamp(min=1)


def _log_stop(log_r: torch.Tensor, log_not_r: torch.Tensor) -> torch.Tensor:
    """log pi from log r_t and log(1 - r_t), t = 1..K-1 (..., K-1) -> (..., K)."""
    # log pi(t) = log r_t + sum_{i<t} log(1 - r_i) for t < K;  log pi(K) = sum_{i<K} log(1 - r_i)
    log_survive = F.pad(log_not_r.cumsum(-1), (1, 0))  # log prod_{i<t} (1 - r_i), t = 1..K
    return log_survive + F.pad(log_r, (0, 1))  # the last step takes the remaining mass (log 1 = 0)


def stop_distribution(hazards: torch.Tensor) -> torch.Tensor:
    """pi(tau = t) = r_t prod_{i<t} (1 - r_i) for t < K, the remaining mass on K.
    hazards r (..., K-1) in [0, 1] -> pi (..., K), sums to 1."""
    return _log_stop(hazards.log(), torch.log1p(-hazards)).exp()


def log_stop_distribution(hazard_logits: torch.Tensor) -> torch.Tensor:
    """log pi of stop_distribution(sigmoid(a)), computed stably from the hazard logits a (..., K-1) -> (..., K)."""
    return _log_stop(F.logsigmoid(hazard_logits), F.logsigmoid(-hazard_logits))


class HaltingHead(Schedule):
    """Base of the learned schedules: q_phi, one linear layer on the pooled state, gives the hazard
    r_t = sigmoid(q_phi(h_t)), h_t = Pool(H_t) over the real tokens (pad_id: the padding token, whose
    positions are left out of the pool; None: every position is real)."""

    detach_input = False  # rl: True (the head never sends gradient into the transformer)
    unread = ("active_set",)  # ponder, act, trm_halt unroll every sample to T_max (their losses weigh every depth)

    def __init__(self, *, d_model: int, pad_id: int | None = None, **base):
        super().__init__(**base)
        check(self.T_max >= 2, f"T_max={self.T_max}: a halting head needs T_max >= 2")
        check(not self.bptt_k, f"bptt_k={self.bptt_k}: truncated backpropagation needs a depth known before the "
                               f"forward pass ({', '.join(DEPTH_FIRST)})")
        check(self.loss_weight == "sample", f"loss_weight={self.loss_weight!r}: token weighting is for the "
                                            f"schedules that draw one depth per sample ({', '.join(DEPTH_FIRST)})")
        self.pad_id = pad_id
        self.head = nn.Linear(d_model, 1)  # q_phi
        # r_t ~ 1/T_max at the start: pi spreads over every depth (a bias of 0 gives r ~ 1/2, which puts
        # 3/4 of the mass on steps 1-2 before anything is learned)
        nn.init.constant_(self.head.bias, -math.log(self.T_max - 1))

    def real(self, x: torch.Tensor, mask: torch.Tensor = None) -> torch.Tensor:
        """(B, P) bool: the positions that are not padding, what the head pools over. The caller's mask if it
        gives one; else x != pad_id, which needs token ids (pad_id None: every position is real)."""
        if mask is not None:
            return mask
        if self.pad_id is None:
            return torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        check(x.dim() == 2 and KINDS["integer"](x.dtype),
              f"x: {describe(x)}; pad_id={self.pad_id} finds padding by token id, which needs x (B, P) token ids: "
              f"pass mask= (B, P) bool, True at real tokens (or build the schedule with pad_id=None: all real)")
        return x != self.pad_id

    def hazard_logits(self, h: torch.Tensor) -> torch.Tensor:
        """a_t = q_phi(h_t), pooled states h (..., D) -> (...)."""
        check_head(self.head, h)  # h's width, device and dtype are the head's (the checks at the end)
        return self.head(h.detach() if self.detach_input else h).squeeze(-1)

    def trajectory_logits(self, hidden: torch.Tensor, mask: torch.Tensor, K: int) -> torch.Tensor:
        """Hazard logits of steps 1..K-1 from hidden (>=K, B, P, D) (index 0 = H_0) -> (B, K-1): all that a
        distribution over 1..K needs (step K takes the remaining mass)."""
        return self.hazard_logits(pool(hidden[1:K], mask)).transpose(0, 1)

    def test_log_pi(self, hidden, mask, T_test):
        """log pi^(T_test)(t|x), t = 1..T_test: hazards of steps 1..T_test-1, the remaining mass on T_test."""
        return log_stop_distribution(self.trajectory_logits(hidden, mask, T_test))  # (B, T_test)


def sample_stop(hazard_logits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """tau ~ pi, by inversion with one uniform u per sample: tau = min{t < K : S_t < u}, else K, where
    S_t = prod_{i<=t} (1 - r_i) = Pr(tau > t). hazard_logits (B, K-1), u (B,) -> tau (B,) in 1..K."""
    log_S = F.logsigmoid(-hazard_logits).cumsum(-1)  # (B, K-1)
    stopped = log_S < u.log().unsqueeze(-1)
    K = hazard_logits.shape[-1] + 1
    return torch.where(stopped.any(-1), stopped.int().argmax(-1) + 1, K)


def entropy(log_pi: torch.Tensor) -> torch.Tensor:
    """H(pi) = -sum_t pi_t log pi_t from finite log-probabilities (..., K) -> (...)."""
    return -(log_pi.exp() * log_pi).sum(-1)


def reinforce_loss(logp_tau: torch.Tensor, reward: torch.Tensor, baseline) -> torch.Tensor:
    """REINFORCE surrogate, mean over the batch (the last axis): -sg(R - b) log pi(tau|x). Its gradient is an
    unbiased estimate of -grad_phi E_{tau~pi}[R] (the baseline changes the variance, not the mean). b: a number,
    or one per row of a leading axis (stacked seeds: b (S,), R (S, B))."""
    if isinstance(baseline, torch.Tensor) and baseline.dim():
        baseline = baseline.unsqueeze(-1)
    return -((reward - baseline).detach() * logp_tau).mean(-1)


class RLHalting(HaltingHead):
    """RL-Halting (primary paper): tau ~ pi(.|x), CE at tau, the head trained by REINFORCE on R = -CE.

        h_t = sg(Pool(H_t))          detached: the head never sends gradient into the transformer
        L_halt = -(R - b) log pi(tau|x) - lambda_ent H(pi(.|x)),   b <- 0.9 b + 0.1 mean(R)
        total: CE(yhat_tau, y) + L_halt;   test: K_pi(x) = argmax_{1<=t<=T_test} pi^(T_test)(t|x)

    What keeps R = -CE from always choosing the deepest step: nothing in R itself, which puts no price on
    compute (the paper's choice). The head moves toward the depths of lowest CE, and the model is trained at the
    depths the head samples, so both settle together; the entropy bonus keeps pi from collapsing early. Where a
    deeper step does have a lower CE, the policy drifts deep (a run's report gives its exit depth).

    Cost. Sampling tau and log pi(tau|x) need only the hazards of steps 1..tau, but the entropy over the
    full pi(.|x) needs every hazard r_1..r_{T_max-1}. The reference path (active_set=False) unrolls
    everyone to T_max with gradient (the paper's 20.00 block evaluations per sample). The active-set
    path runs steps 1..tau with gradient and, once a sample has stopped, continues it under no_grad up
    to T_max-1 only to feed the entropy: max(tau, T_max-1) applications, tau with gradient.
    """

    name = "rl"
    unread = ()  # the active set shrinks its sampled-depth pass (block_counts: the gradient applications it counts)
    detach_input = True
    stat_names = ("loss", "halt_loss", "block_evals", "block_evals_grad", "depth", "baseline")

    def __init__(self, *, lambda_ent: float = 0.001, **base):
        super().__init__(**base)
        self.lambda_ent = lambda_ent
        self.register_buffer("baseline", torch.zeros(()))  # b, checkpointed with the schedule

    def policy(self, Tn, T_test, hidden=None, mask=None):
        check_policy(Tn, T_test, hidden, mask, learned=True)
        # K_pi(x) = argmax_{1<=t<=T_test} pi^(T_test)(t|x)
        return self.test_log_pi(hidden, mask, T_test).argmax(-1) + 1

    def loss(self, model, x, y, Tn, gen, mask=None):
        ce, halt, stats = self.terms(model, x, y, Tn, gen, mask)
        # total: CE(yhat_tau, y) + L_halt
        return ce + halt, stats

    def terms(self, model, x, y, Tn, gen, mask=None):
        """The two parts of the loss, CE(yhat_tau, y) and L_halt, and the stats."""
        check_batch(self, x, y, Tn, gen, mask)
        mask = self.real(x, mask)
        u = torch.rand(x.shape[0], generator=gen).to(x.device)  # one uniform per sample: tau ~ pi by inversion
        if not self.active_set:  # the reference: everyone unrolled to T_max with gradient, each sample's tau gathered
            logits, hidden = unroll(model, x, self.T_max)  # (T_max, B, P, V), (T_max+1, B, P, D)
            a = self.trajectory_logits(hidden, mask, self.T_max)  # (B, T_max-1)
            tau = sample_stop(a.detach(), u)
            ce = per_sample_ce(logits[tau - 1, torch.arange(len(tau), device=x.device)], y)
        else:  # the same numbers from the active set (below): tau steps with gradient per sample
            ce, tau, a = self._unroll_active(model, x, y, mask, u.log())
        n_grad, n_nograd = (n.item() for n in self.block_counts(tau, self.T_max, self.active_set))
        # R = -l(theta; x, y, tau), stop-gradient
        R = -ce.detach()
        halt = self.halt_loss(log_stop_distribution(a), tau, R, self.baseline)  # L_halt (below)
        self.update_baseline(self.baseline, R)
        stats = {"loss": ce.mean().item(), "halt_loss": halt.item(), "block_evals": n_grad + n_nograd,
                 "block_evals_grad": n_grad, "depth": tau.float().mean().item(), "baseline": self.baseline.item()}
        return ce.mean(), halt, stats

    def halt_loss(self, log_pi, tau, R, baseline):
        """L_halt = -(R - b) log pi(tau|x) - lambda_ent H(pi(.|x)), mean over samples. log_pi (..., B, T_max),
        tau and R (..., B), b: one per leading row -> (...)."""
        log_pi_tau = log_pi.gather(-1, (tau - 1).unsqueeze(-1)).squeeze(-1)
        # L_halt = -(R - b) log pi(tau|x) - lambda_ent H(pi(.|x))
        return reinforce_loss(log_pi_tau, R, baseline) - self.lambda_ent * entropy(log_pi).mean(-1)

    @staticmethod
    def block_counts(tau, T_max: int, active_set: bool, dtype=torch.float64):
        """Block applications per sample, with and without gradient: the active set runs steps 1..tau with
        gradient, then tau+1..T_max-1 without (only the entropy's hazards need them); the reference path unrolls
        everyone to T_max with gradient. tau (..., B) -> n_grad, n_nograd (...), means over samples."""
        if not active_set:
            full = torch.full(tau.shape[:-1], float(T_max), dtype=dtype, device=tau.device)
            return full, torch.zeros_like(full)
        return tau.to(dtype).mean(-1), (T_max - 1 - tau).clamp(min=0).to(dtype).mean(-1)

    @staticmethod
    def update_baseline(baseline, R) -> None:
        """b <- 0.9 b + 0.1 mean(R), in place, after its use in this step's loss. R (..., B), b (...)."""
        with torch.no_grad():
            baseline.mul_(0.9).add_(0.1 * R.mean(-1))

    def _unroll_active(self, model, x, y, mask, log_u):
        """The active-set path: sample tau online (the rule of sample_stop, step by step) and return the CE at
        tau (B,), tau (B,) and the hazard logits (B, T_max-1) (block_counts: the steps it runs)."""
        B, Tm = x.shape[0], self.T_max
        h_start, h0 = start(model, x)  # (B, P, D)
        live, done = torch.arange(B, device=x.device), torch.zeros(0, dtype=torch.long, device=x.device)
        h_live, h_done = h_start, h_start[:0].detach()  # states of running samples (grad) / stopped ones (no grad)
        log_S = torch.zeros(B, device=x.device, dtype=h0.dtype)  # log prod_{i<=t} (1 - r_i)
        tau = torch.empty(B, dtype=torch.long, device=x.device)
        a, ce = [], []
        for t in range(1, Tm + 1):
            if len(live):
                h_live = model.step(h_live, h0[live], t)
            if t == Tm:  # the remaining mass: whoever still runs stops at T_max
                stop = torch.ones(len(live), dtype=torch.bool, device=x.device)
            else:
                if len(done):
                    with torch.no_grad():  # stopped samples run on only for the entropy's hazards
                        h_done = model.step(h_done, h0[done], t)
                rows = torch.cat([live, done])
                a_t = self.hazard_logits(pool(torch.cat([h_live.detach(), h_done]), mask[rows]))  # (B,), `rows` order
                a.append(a_t[torch.argsort(rows)])
                # tau = t where S_t = prod_{i<=t} (1 - r_i) first drops below u (sample_stop, online)
                log_S[live] += F.logsigmoid(-a_t[: len(live)].detach())
                stop = log_S[live] < log_u[live]
            if stop.any():
                ce.append(per_sample_ce(model.readout(h_live[stop]), y[live[stop]]))
                tau[live[stop]] = t
                done, h_done = torch.cat([done, live[stop]]), torch.cat([h_done, h_live[stop].detach()])
                live, h_live = live[~stop], h_live[~stop]
        ce = torch.cat(ce)[torch.argsort(done)]  # `done` lists the samples in the order they stopped
        return ce, tau, torch.stack(a, 1)


def kl_divergence(log_q: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
    """KL(q || p) = sum_t q_t (log q_t - log p_t). (..., K) -> (...)."""
    return (log_q.exp() * (log_q - log_p)).sum(-1)


class PonderNet(HaltingHead):
    """PonderNet (Banino et al. 2021): sum_t q_t l_t + beta KL(q || truncated geometric(lambda_p)); prior="uniform"
    is Ouro's first-stage objective sum_t q_t l_t - beta H(q) (the same gradients as beta KL(q || uniform)).
    The head is not detached; the remaining mass of q goes to T_max. Test: the first t with cumulative
    q >= alpha (ponder_rule="alpha"), or argmax_t q_t (ponder_rule="argmax")."""

    name = "ponder"
    stat_names = ("loss", "halt_loss", "block_evals", "depth")

    def __init__(self, *, beta: float = 0.01, lambda_p: float = 0.2, alpha: float = 0.5, ponder_rule: str = "alpha",
                 prior: str = "geometric", **base):
        super().__init__(**base)
        check(0 < lambda_p < 1, f"lambda_p={lambda_p}: must be in (0, 1)")
        check(0 < alpha <= 1, f"alpha={alpha}: must be in (0, 1]")
        self.beta, self.alpha, self.rule, self.prior = beta, alpha, ponder_rule, prior
        if prior == "geometric":
            self.register_buffer("log_prior", truncated_geometric(lambda_p, self.T_max).log(), persistent=False)

    def loss(self, model, x, y, Tn, gen, mask=None):
        check_batch(self, x, y, Tn, gen, mask)
        logits, hidden = unroll(model, x, self.T_max)  # (T_max, B, P, V), (T_max+1, B, P, D)
        l = per_sample_ce(logits, y).transpose(0, 1)  # (B, T_max)
        log_q = log_stop_distribution(self.trajectory_logits(hidden, self.real(x, mask), self.T_max))  # (B, T_max)
        task, kl = self.objective(log_q, l)
        depth = (log_q.exp() * torch.arange(1, self.T_max + 1, device=x.device)).sum(1).mean()  # E_q[t]
        return task + kl, {"loss": task.item(), "halt_loss": kl.item(), "block_evals": float(self.T_max),
                           "depth": depth.item()}

    def objective(self, log_q, l):
        """(sum_t q_t l_t, its penalty), means over samples. log_q, l (..., B, T_max) -> (...), (...)."""
        task = (log_q.exp() * l).sum(-1).mean(-1)
        if self.prior == "uniform":
            # Ouro's first stage (Zhu et al. 2025, section 3.3): L = sum_t q_t l_t - beta H(q), the expected task
            # loss minus beta times the exit entropy; = sum_t q_t l_t + beta KL(q || Unif{1..T_max}) - beta log T_max
            return task, -self.beta * entropy(log_q).mean(-1)
        # L = sum_t q_t l_t + beta KL(q || p_G)
        return task, self.beta * kl_divergence(log_q, self.log_prior).mean(-1)

    def policy(self, Tn, T_test, hidden=None, mask=None):
        check_policy(Tn, T_test, hidden, mask, learned=True)
        log_q = self.test_log_pi(hidden, mask, T_test)  # (B, T_test)
        if self.rule == "argmax":
            return log_q.argmax(-1) + 1
        # d_alpha(x) = min{t : sum_{s<=t} q_s >= alpha}  (the last step holds the remaining mass)
        reached = log_q.exp().cumsum(-1) >= self.alpha
        return torch.where(reached.any(-1), reached.int().argmax(-1) + 1, T_test)


def act_weights(halt: torch.Tensor, eps: float):
    """Graves' ACT halting from halting probabilities h_t, t = 1..K-1 (B, K-1) (step K always halts).
    N = min{n : sum_{t<=n} h_t >= 1 - eps} (else K); p_t = h_t for t < N, p_N = R = 1 - sum_{t<N} h_t,
    p_t = 0 after N. Returns N (B,), R (B,), p (B, K)."""
    K = halt.shape[1] + 1
    # N = min{n : sum_{t<=n} h_t >= 1 - eps}, capped at K
    over = halt.cumsum(-1) >= 1 - eps  # (B, K-1)
    N = torch.where(over.any(-1), over.int().argmax(-1) + 1, K)  # (B,)
    t = torch.arange(1, K + 1, device=halt.device)  # (K,)
    before = t.unsqueeze(0) < N.unsqueeze(1)  # (B, K) steps t < N
    # R = 1 - sum_{t<N} h_t;  p_t = h_t (t < N), R (t = N), 0 (t > N)
    R = 1 - (halt * before[:, :-1]).sum(-1)
    p = torch.where(before, F.pad(halt, (0, 1)), torch.zeros((), dtype=halt.dtype, device=halt.device))
    p = p + R.unsqueeze(1) * (t.unsqueeze(0) == N.unsqueeze(1))
    return N, R, p


class ACT(HaltingHead):
    """Graves' Adaptive Computation Time (2016), one halting decision per sample.

    Training: halting probabilities h_t = sigmoid(q_phi(Pool(H_t))) (head not detached), N and the
    weights p_t from act_weights; the output is the mean field of the step outputs, yhat = sum_t p_t
    logits_t (Graves eq. 7, the weighted output before the softmax); loss CE(yhat) + tau_act (N + R).
    Test ("ACT halting"): the evaluation scores single depths, so the policy is the halting step
    N(x) on the test trajectory (capped at T_test) and the prediction is the readout of H_N, not the
    mean field."""

    name = "act"
    stat_names = ("loss", "halt_loss", "block_evals", "depth", "ponder_cost")

    def __init__(self, *, tau_act: float = 0.01, act_eps: float = 0.01, **base):
        super().__init__(**base)
        check(0 < act_eps < 1, f"act_eps={act_eps}: must be in (0, 1)")
        self.tau_act, self.eps = tau_act, act_eps

    def loss(self, model, x, y, Tn, gen, mask=None):
        check_batch(self, x, y, Tn, gen, mask)
        logits, hidden = unroll(model, x, self.T_max)  # (T_max, B, P, V), (T_max+1, B, P, D)
        halt = torch.sigmoid(self.trajectory_logits(hidden, self.real(x, mask), self.T_max))  # (B, T_max-1)
        N, R, p = act_weights(halt, self.eps)  # (B,), (B,), (B, T_max)
        task, cost = self.objective(p, N, R, logits, y)
        depth = (p * torch.arange(1, self.T_max + 1, device=x.device)).sum(1).mean()  # sum_t p_t t
        return task + cost, {"loss": task.item(), "halt_loss": cost.item(), "block_evals": float(self.T_max),
                             "depth": depth.item(), "ponder_cost": (N + R).float().mean().item()}

    def objective(self, p, N, R, logits, y):
        """(CE(yhat, y), tau_act (N + R)), means over samples. p (..., B, K), N, R (..., B), logits (..., K, B, P, V)."""
        # yhat = sum_t p_t logits_t
        mixed = torch.einsum("...bk,...kbpv->...bpv", p, logits)  # (..., B, P, V)
        # L = CE(yhat, y) + tau_act * (N + R)   (N is a step count: its gradient flows through R only)
        return per_sample_ce(mixed, y).mean(-1), self.tau_act * (N + R).mean(-1)

    def policy(self, Tn, T_test, hidden=None, mask=None):
        check_policy(Tn, T_test, hidden, mask, learned=True)
        halt = torch.sigmoid(self.trajectory_logits(hidden, mask, T_test))  # (B, T_test-1)
        return act_weights(halt, self.eps)[0]


class TRMHalt(HaltingHead):
    """The halting of the Tiny Recursive Model (Jolicoeur-Martineau 2025, "Less is More: Recursive Reasoning
    with Tiny Networks", deep supervision and ACT sections): deep supervision over N_sup successive supervision
    steps of trm_steps loop steps each, the state detached between them, and a halting head trained to
    predict whether the current answer is exactly right. For supervision step s = 1..N_sup (state H_{s-1}
    detached, trm_steps loop steps with gradient, prediction yhat_s, halting logit a_s = q_phi(h(H_s))):

        l_s = CE(yhat_s, y) + w_bce BCE(sigmoid(a_s), 1[yhat_s exactly right])

    A sample stops being supervised once sigmoid(a_s) > 1/2 (it leaves the active set); with probability
    halt_explore per sample and supervision step, halting before a minimum m ~ Unif{2..N_sup} is not allowed
    (TRM's exploration, training only). The loss is the mean of l_s over every (sample, step) supervised.
    N_sup = trm_sup, or floor(T_max / trm_steps) when 0; N_sup * trm_steps <= T_max. Test: the early exit at
    the first s with sigmoid(a_s) > 1/2 (T_test if none) is the policy; TRM's code always runs all N_sup
    steps at test, the depth full_depth = N_sup * trm_steps, which metrics.py reports beside it.
    h(H) is the head's input: the mean over real tokens (trm_head="mean", ours), the first position (TRM's
    code, whose attention is bidirectional; under causal attention position 0 sees only token 0), or the
    last real position (the one that sees the whole input under causal attention).
    Mapping onto this model: TRM's two latent states and its recursion cycles become trm_steps steps of the
    one shared block. TRM takes an optimizer step after every supervision step (the batch is a carry whose
    halted samples are replaced by new ones); here the per-step losses are summed into one update per batch.
    With the states detached, each step's gradient is the one TRM computes only if the weights did not move
    in between: here every supervision step sees the batch's starting weights, TRM's the weights after the
    previous step's update (up to N_sup updates per sample where we take one)."""

    name = "trm_halt"
    stat_names = ("loss", "halt_loss", "block_evals", "depth")

    def __init__(self, *, trm_steps: int = 1, trm_sup: int = 0, halt_explore: float = 0.0, trm_bce: float = 1.0,
                 trm_head: str = "mean", **base):
        super().__init__(**base)
        check(1 <= trm_steps <= self.T_max, f"trm_steps={trm_steps}: must be in 1..T_max ({self.T_max})")
        self.m = trm_steps
        check(0 <= trm_sup <= self.T_max // trm_steps, f"trm_sup={trm_sup}: N_sup must be in 1..T_max // trm_steps "
                                                       f"({self.T_max // trm_steps}), or 0 for that maximum")
        self.n_sup = trm_sup or self.T_max // trm_steps
        self.full_depth = self.n_sup * self.m  # the depth of TRM's test protocol: every supervision step
        self.halt_explore, self.bce_w, self.trm_head = halt_explore, trm_bce, trm_head

    def summary(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The head's input h(H): h (..., B, P, D), mask (B, P) -> (..., B, D)."""
        if self.trm_head == "mean":
            return pool(h, mask)
        if self.trm_head == "first":
            return h[..., 0, :]
        last = (mask.long() * torch.arange(mask.shape[-1], device=mask.device)).argmax(-1)  # (B,) last real position
        return h[..., torch.arange(mask.shape[0], device=mask.device), last, :]

    def loss(self, model, x, y, Tn, gen, mask=None):
        check_batch(self, x, y, Tn, gen, mask)
        mask = self.real(x, mask)
        h, h0 = start(model, x)  # (B, P, D)
        live = torch.arange(x.shape[0], device=x.device)  # the samples still supervised
        total, ce_sum, bce_sum, n_sup, evals, depth = 0.0, 0.0, 0.0, 0, 0, torch.zeros(x.shape[0], device=x.device)
        for s in range(1, self.n_sup + 1):
            h = h.detach()  # deep supervision: no gradient into earlier supervision steps
            for j in range(self.m):
                h = model.step(h, h0[live], (s - 1) * self.m + j + 1)
            evals += self.m * len(live)
            logits = model.readout(h)  # (b, P, V)
            ce = per_sample_ce(logits, y[live])  # (b,)
            right = ((logits.argmax(-1) == y[live]) | (y[live] == IGNORE)).all(-1).to(ce.dtype)  # 1[yhat_s right]
            a = self.hazard_logits(self.summary(h, mask[live]))  # (b,)
            # l_s = CE(yhat_s, y) + w_bce BCE(sigmoid(a_s), 1[yhat_s right])
            bce = F.binary_cross_entropy_with_logits(a, right, reduction="none")
            total = total + (ce + self.bce_w * bce).sum()
            ce_sum, bce_sum, n_sup = ce_sum + ce.sum().item(), bce_sum + bce.sum().item(), n_sup + len(live)
            depth[live] = s * self.m
            keep = a.detach() <= 0  # sigmoid(a_s) > 1/2: halt
            if self.halt_explore and self.n_sup >= 2:
                # exploration (TRM): with probability halt_explore, m ~ Unif{2..N_sup}; no halting while s < m
                u = torch.rand(len(live), generator=gen)
                m_min = torch.randint(2, self.n_sup + 1, (len(live),), generator=gen)
                keep |= ((u < self.halt_explore) & (s < m_min)).to(keep.device)
            live, h = live[keep], h[keep]
            if not len(live):
                break
        loss = total / n_sup
        return loss, {"loss": ce_sum / n_sup, "halt_loss": bce_sum / n_sup, "block_evals": evals / x.shape[0],
                      "depth": depth.mean().item()}

    def policy(self, Tn, T_test, hidden=None, mask=None):
        check_policy(Tn, T_test, hidden, mask, learned=True)
        # d(x) = m * min{s : sigmoid(a_s) > 1/2}, T_test if no supervision step halts
        a = self.hazard_logits(self.summary(hidden[self.m:T_test + 1:self.m], mask))  # (S, B), steps m, 2m, ...
        halt = a > 0
        first = halt.int().argmax(0)  # the first halting supervision step (0 if none: checked below)
        return torch.where(halt.any(0), (first + 1) * self.m, T_test)


SCHEDULES = {s.name: s for s in [Fixed, Matched, Window, FixedWindow, LognormalPoisson, MultiDepth, FixedPrior,
                                 RLHalting, PonderNet, ACT, TRMHalt]}


def settings(name: str) -> list[str]:
    """The keyword arguments schedule `name` accepts: its own, and its bases' where it forwards **base."""
    out = []
    for cls in SCHEDULES[name].__mro__:
        if "__init__" in vars(cls):
            params = inspect.signature(cls.__init__).parameters.values()
            out += [p.name for p in params if p.kind == p.KEYWORD_ONLY and p.name not in out]
            if not any(p.kind == p.VAR_KEYWORD for p in params):
                break
    return out


def make_schedule(name: str, **kwargs) -> Schedule:
    """The schedule `name` with its settings, e.g. make_schedule("window", w=5, T_max=20); a misspelt or
    foreign setting is an error (settings(name) lists the valid ones), and so is a value outside its declared kind
    (check_setting). The classes check only what depends on other settings: build schedules through here."""
    check(name in SCHEDULES, f"unknown schedule {name!r}: choose from {', '.join(SCHEDULES)}")
    bad = sorted(set(kwargs) - set(settings(name)))
    check(not bad, f"schedule {name} has no setting {', '.join(bad)}: its settings are {', '.join(settings(name))}")
    undeclared = sorted(set(settings(name)) - {*AT_LEAST, *BETWEEN, *CHOICES, *SWITCHES, *TOKENS})
    check(not undeclared, f"schedule {name}: setting {', '.join(undeclared)} has no declared kind: add it to halting.py's "
                          f"AT_LEAST, BETWEEN, CHOICES, SWITCHES or TOKENS")
    for key, value in kwargs.items():
        check_setting(key, value)  # the kind and range of every value on entry (the tables at the end)
    return SCHEDULES[name](**kwargs)


# === Optimisations: the same logits as logits_at, cheaper ===============================================

def active_logits_at(model, x: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    """logits_at with a shrinking active set: a model's forward_depths (rows sorted by depth, the samples still
    running a prefix of the batch: sum_i depth_i block applications, not B * max depth) when it has one; any
    other looped model falls back to the reference gather."""
    if hasattr(model, "forward_depths"):
        return model.forward_depths(x, depth)
    return logits_at(model, x, depth)


def truncated_logits_at(model, x: torch.Tensor, depth: torch.Tensor, k: int) -> torch.Tensor:
    """Truncated backpropagation through the loop (Geiping et al. 2025, section 3): a sample read out at
    depth tau runs its first tau - k steps without gradient and backpropagates through its last k only,
    so activations are kept for k steps, not tau. Rows sorted by depth (deepest first): the rows still
    running at step t are a prefix of the batch, and among them the rows still in their gradient-free
    part (t <= tau - k) are a prefix again."""
    order = torch.argsort(depth, descending=True, stable=True)
    d = depth[order].tolist()
    h, h0 = start(model, x[order])  # (B, P, D)
    out = [None] * len(d)
    for t in range(1, d[0] + 1):
        n_run = sum(1 for di in d if di >= t)  # samples that run step t
        n_free = sum(1 for di in d if di - k >= t)  # of those, the ones without gradient at step t
        parts = []  # either part may be empty: the model's step never sees 0 rows
        if n_free:
            with torch.no_grad():
                parts.append(model.step(h[:n_free], h0[:n_free], t))
        if n_run > n_free:
            parts.append(model.step(h[n_free:n_run], h0[n_free:n_run], t))
        h = torch.cat(parts)
        for i in range(n_run):
            if d[i] == t:  # sample i stops at step t
                out[i] = model.readout(h[i:i + 1])
    logits = torch.cat(out)  # sorted order
    return logits[torch.argsort(order)]


# === Argument checks: the copy-alone contract, one message naming the argument =====================

def check(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


def describe(v) -> str:
    """What an argument is, in words: a tensor's shape, dtype and device, or another object's type."""
    if isinstance(v, torch.Tensor):
        return f"shape {tuple(v.shape)}, dtype {v.dtype}, device {v.device}"
    return "None" if v is None else f"a {type(v).__module__}.{type(v).__qualname__}"


# dtypes by name. Tn is int32 or int64 (a uint8 or bool index tensor would be read as a mask, int8/int16 ones
# are refused by indexing); y is int64, what F.cross_entropy takes (and a type that holds IGNORE)
KINDS = {"integer": lambda d: not d.is_floating_point and not d.is_complex and d != torch.bool,
         "int32 or int64": lambda d: d in (torch.int32, torch.int64), "int64": lambda d: d == torch.int64,
         "bool": lambda d: d == torch.bool, "floating": lambda d: d.is_floating_point}


def check_tensor(name: str, v, shape: tuple, kind: str, device, expected: str) -> None:
    """v must be a torch.Tensor of `shape` (None: any size), dtype `kind` (a key of KINDS) on `device`."""
    ok = (isinstance(v, torch.Tensor) and v.dim() == len(shape) and KINDS[kind](v.dtype)
          and all(s is None or s == n for s, n in zip(shape, v.shape)) and (device is None or v.device == device))
    check(ok, f"{name}: {describe(v)}; expected {expected}")


def check_targets(y: torch.Tensor) -> None:
    """y's values: a class index >= 0 or IGNORE (one pass over y, one sync; a target >= V is F.cross_entropy's to
    refuse, V being known only at the readout)."""
    bad = (y < 0) & (y != IGNORE)
    if bad.any():
        v = y[bad][0].item()
        raise ValueError(f"y: {describe(y)} holds the target {v}; expected class indices 0..V-1, and IGNORE "
                         f"({IGNORE}), not {v}, at unscored positions")


def check_weights(schedule: nn.Module, device) -> None:
    """A schedule's weights and buffers (a halting head, fixed_prior's pi, rl's baseline) are on x's device."""
    for name, w in [*schedule.named_parameters(), *schedule.named_buffers()]:
        check(w.device == device, f"schedule.{name}: on {w.device} but x is on {device}: move the schedule with "
                                  f"schedule.to('{device}')")


def autocast_on(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 takes no device type
        return torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()


def check_head(head: nn.Linear, h: torch.Tensor) -> None:
    """Where the pooled state h (..., D) meets a halting head q_phi (HaltingHead.hazard_logits): h has the head's
    width d_model, device and dtype (under autocast the head casts the dtype itself)."""
    w = head.weight  # (1, d_model)
    check(h.shape[-1] == w.shape[1], f"the halting head takes states of width d_model={w.shape[1]} but the model's "
                                     f"state h has width D={h.shape[-1]} ({describe(h)}): build the schedule with "
                                     f"d_model={h.shape[-1]}, the width of the loop's state")
    ok = h.device == w.device and (h.dtype == w.dtype or autocast_on(h.device.type))
    check(ok, f"the halting head's weights are {w.dtype} on {w.device} but the model's state h is {h.dtype} on "
              f"{h.device}: move the schedule with schedule.to('{h.device}', {h.dtype})")


# Every setting of make_schedule, by kind: the one table each value is checked against on entry (check_setting), and
# the one a new knob is declared in (make_schedule refuses a setting of a schedule that is not here). What depends on
# other settings (c <= T_max, trm_sup <= T_max // trm_steps) and the open ends of a range ((0, 1)) are the class's.
AT_LEAST = {"T_max": 1, "w": 0, "k_min": 1, "c": 1, "r_bar": 1, "trm_steps": 1, "trm_sup": 0, "bptt_k": 0,
            "d_model": 1}  # an integer (a bool is not one), at least this: a depth is a whole number of loop steps
BETWEEN = {"sigma": (0, math.inf), "lambda_ent": (0, math.inf), "beta": (0, math.inf), "tau_act": (0, math.inf),
           "trm_bce": (0, math.inf), "lambda_p": (0, 1), "alpha": (0, 1), "act_eps": (0, 1),
           "halt_explore": (0, 1)}  # a finite number in [lo, hi]
CHOICES = {"loss_weight": ("sample", "token"), "r_per": ("batch", "sample"), "prior": ("uniform", "geometric"),
           "ponder_rule": ("alpha", "argmax"), "trm_head": ("mean", "first", "last")}
SWITCHES = ("active_set",)  # True or False
TOKENS = ("pad_id",)  # a token id, or None


def check_setting(key: str, v) -> None:
    """One setting of make_schedule, e.g. w=1.5 or c=2.5 (a depth is a whole number of loop steps), d_model=-3,
    lambda_ent=inf, prior="flat": one ValueError naming it and what is allowed (the tables above)."""
    is_int = isinstance(v, int) and not isinstance(v, bool)
    if key in AT_LEAST:
        check(is_int and v >= AT_LEAST[key], f"{key}={v!r}: expected an int >= {AT_LEAST[key]}")
    elif key in BETWEEN:
        lo, hi = BETWEEN[key]
        check((is_int or isinstance(v, float)) and math.isfinite(v) and lo <= v <= hi,
              f"{key}={v!r}: expected a finite number " + (f">= {lo}" if hi == math.inf else f"in [{lo}, {hi}]"))
    elif key in CHOICES:
        check(v in CHOICES[key], f"{key}={v!r}: choose from {', '.join(CHOICES[key])}")
    elif key in SWITCHES:
        check(isinstance(v, bool), f"{key}={v!r}: expected True or False")
    elif key in TOKENS:
        check(v is None or is_int, f"{key}={v!r}: expected a token id (an int) or None (every position is real)")
    else:
        raise ValueError(f"setting {key}={v!r} has no declared kind: add it to halting.py's AT_LEAST, BETWEEN, "
                         f"CHOICES, SWITCHES or TOKENS")


def check_batch(schedule, x, y, Tn, gen, mask=None) -> None:
    """The arguments of a schedule's loss (the contract in the module docstring), and the schedule's device."""
    check(isinstance(x, torch.Tensor) and x.dim() >= 2, f"x: {describe(x)}; expected a tensor (B, P, ...): token "
                                                        f"ids (B, P) or any input the model's embed accepts")
    (B, P), dev = x.shape[:2], x.device
    check(B >= 1, f"x: {describe(x)}; expected a batch of at least one sample (B >= 1)")
    check_tensor("y", y, (B, P), "int64", dev, f"(B, P) = ({B}, {P}) int64 targets on x's device ({dev}), "
                                               f"IGNORE ({IGNORE}) at unscored positions")
    check_targets(y)
    check_tensor("Tn", Tn, (B,), "int32 or int64", dev,
                 f"(B,) = ({B},) integer tensor, int32 or int64, on x's device ({dev}): T(n) per sample")
    if mask is not None:
        check_tensor("mask", mask, (B, P), "bool", dev,
                     f"(B, P) = ({B}, {P}) bool on x's device ({dev}), True at real tokens")
    check(isinstance(gen, torch.Generator), f"gen: {describe(gen)}; expected a torch.Generator, the stream of depth "
                                            f"draws (there is no fallback to the global RNG)")
    check_weights(schedule, dev)


def check_policy(Tn, T_test, hidden=None, mask=None, learned: bool = False) -> None:
    """The arguments of a schedule's policy: Tn (B,) int32 or int64; learned schedules read hidden and mask instead."""
    check(isinstance(T_test, int) and not isinstance(T_test, bool) and T_test >= 1,
          f"T_test: {T_test!r}; expected an int >= 1")
    if not learned:
        return check_tensor("Tn", Tn, (None,), "int32 or int64", None,
                            "(B,) integer tensor, int32 or int64: T(n) per sample")
    check(isinstance(hidden, torch.Tensor) and hidden.dim() == 4 and hidden.shape[0] >= T_test + 1
          and hidden.is_floating_point(),
          f"hidden: {describe(hidden)}; expected (T_test+1, B, P, D) = ({T_test + 1}, B, P, D) floating-point states, "
          f"index 0 the state before step 1 (unroll(model, x, T_test)[1])")
    (B, P), dev = hidden.shape[1:3], hidden.device
    check_tensor("mask", mask, (B, P), "bool", dev,
                 f"(B, P) = ({B}, {P}) bool on hidden's device ({dev}), True at real tokens")
    if Tn is not None:
        check_tensor("Tn", Tn, (B,), "int32 or int64", dev,
                     f"(B,) = ({B},) integer tensor, int32 or int64, on hidden's device ({dev})")



CONTRACT = """
How a foreign looped model meets this file (the checks above enforce it, each with a message naming the argument).

Your looped model provides three methods (model.py's LoopedTransformer has them):

    embed(x) -> h0 (B, P, D)         x: token ids (B, P), or any input your embed accepts (one-hot (B, P, V)
                                     through a linear read-in, ...); h0 is injected into every step. D is the
                                     width of the loop's state h, the d_model= a learned schedule is built with
    step(h, h0, t) -> H_t (B, P, D)  one loop step, t = 1, 2, ... (1-based; a step may ignore it). The optimised
                                     paths call it on a subset of the batch's rows (h and h0 sliced alike),
                                     never on 0 rows
    readout(h) -> logits (B, P, V)

and optionally init_state(h0) -> H_0, the state before step 1 (default: h0 itself, so step 1 receives h0
twice; a loop that starts from zeros returns torch.zeros_like(h0)), and forward_depths(x, depth (B,)) ->
(B, P, V), a faster path used when present. Then:

    schedule = make_schedule("window", w=5, T_max=20)         # learned ones also take d_model=D, pad_id
    opt = torch.optim.AdamW([*model.parameters(), *schedule.parameters()])  # else a halting head never learns
    loss, stats = schedule.loss(model, x, y, Tn, gen)         # add mask= when x is not token ids
    K = schedule.policy(Tn, T_test, hidden=unroll(model, x, T_test)[1], mask=mask)  # test depth (B,)

    y       (B, P) int64 targets on x's device, each in 0..V-1 or IGNORE (-100) wherever a position is not
            scored (never -1): fold your answer mask into y
    Tn      (B,) int32 or int64 tensor on x's device, T(n) per sample (a (B, 1), float, bool, uint8, int8, int16
            or numpy Tn is refused)
    gen     a torch.Generator: the stream of depth draws (required; there is no global-RNG fallback)
    mask    (B, P) bool, True at real tokens, what a halting head pools over. Default: x != pad_id, which
            needs token ids (pad_id=None: every position is real); pass it for any other input
    hidden  (T_test+1, B, P, D), index 0 = H_0 (the state before step 1); only learned schedules read it
            (Tn may then be None)

Every schedule's loss and policy check these arguments on entry (the checks at the end of the file): a wrong
one raises ValueError naming it, its shape, dtype and what is expected; y's values too (no negative target but
IGNORE). The schedule's weights (a halting head, fixed_prior's pi) must be on x's device, and a halting head,
built for states of width d_model=D, takes the dtype of the model's state h (schedule.to(device, dtype)): a
mismatch raises ValueError naming both. stats (a dict of floats): "loss" (the task loss, without any halting
term), "block_evals" (block applications per sample), "depth" (the mean supervised depth).
"""
