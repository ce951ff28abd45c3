"""
Stop schedules: at which loop depth K the training loss is read out, and which K is used at test time
(SPEC section 3).

A schedule is an nn.Module (learned schedules own a halting head) with two methods:

    loss(model, x, y, Tn, gen) -> (loss, stats)   training loss of a batch; stats holds
                                                  `block_evals` (block applications per sample, with
                                                  or without gradient) and `depth` (mean supervised
                                                  depth; weighted schedules: the mean depth under
                                                  their weights)
    policy(Tn, T_test, logits, hidden, mask) -> K (B,)   the test-time depth of every sample

Single-depth schedules (fixed, matched, window, fixed_window, rl) supervise one depth per sample and
pay only for the steps they need; weighted schedules (ponder, multidepth, fixed_prior, act) read out
every depth of one unrolled trajectory.

`model` is any object with the looped model's interface (forward(idx, n_steps, keep_hidden),
forward_depths(idx, depth), embed/step/readout): this file imports only torch, so it can be copied
alone.

Shape legend: B batch, T sequence length, D model width, K loop steps, V vocabulary.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE = -100


def per_sample_ce(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """l(theta; x, y, tau) = CE(yhat_tau(x), y) averaged over each sample's scored positions.

    logits (..., B, T, V), y (B, T) with IGNORE at unscored positions -> (..., B)
    """
    V = logits.shape[-1]
    ce = F.cross_entropy(logits.reshape(-1, V), y.expand(logits.shape[:-1]).reshape(-1),
                         ignore_index=IGNORE, reduction="none").view(logits.shape[:-1])  # (..., B, T)
    scored = (y != IGNORE).float()
    return (ce * scored).sum(-1) / scored.sum(-1).clamp(min=1)


def uniform_offsets(shape, w: int, gen: torch.Generator) -> torch.Tensor:
    """D ~ Unif{-w..w}, one per sample."""
    return torch.randint(-w, w + 1, shape, generator=gen)


PAD = 0  # token id of padding (tasks.PAD); pads are excluded from the pooled state of a halting head


def pool(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """h_t = Pool(H_t): mean over each sample's real (non-pad) positions.
    h (..., B, T, D), mask (B, T) -> (..., B, D)."""
    m = mask.to(h.dtype).unsqueeze(-1)  # (B, T, 1)
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


def entropy(log_pi: torch.Tensor) -> torch.Tensor:
    """H(pi) = -sum_t pi_t log pi_t from finite log-probabilities (..., K) -> (...)."""
    return -(log_pi.exp() * log_pi).sum(-1)


def kl_divergence(log_q: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
    """KL(q || p) = sum_t q_t (log q_t - log p_t). (..., K) -> (...)."""
    return (log_q.exp() * (log_q - log_p)).sum(-1)


def truncated_geometric(lam: float, K: int) -> torch.Tensor:
    """p(t) = lam (1 - lam)^(t-1) / Z on t = 1..K, Z = 1 - (1 - lam)^K (truncated and renormalised). -> (K,)"""
    if not 0 < lam < 1:
        raise ValueError(f"geometric parameter {lam}: must be in (0, 1)")
    p = lam * (1 - lam) ** torch.arange(K, dtype=torch.float64)
    return (p / p.sum()).float()


def sample_stop(hazard_logits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """tau ~ pi, by inversion with one uniform u per sample: tau = min{t < K : S_t < u}, else K, where
    S_t = prod_{i<=t} (1 - r_i) = Pr(tau > t). hazard_logits (B, K-1), u (B,) -> tau (B,) in 1..K."""
    log_S = F.logsigmoid(-hazard_logits).cumsum(-1)  # (B, K-1)
    stopped = log_S < u.log().unsqueeze(-1)
    K = hazard_logits.shape[-1] + 1
    return torch.where(stopped.any(-1), stopped.int().argmax(-1) + 1, K)


def reinforce_loss(logp_tau: torch.Tensor, reward: torch.Tensor, baseline) -> torch.Tensor:
    """REINFORCE surrogate, mean over the batch: -sg(R - b) log pi(tau|x). Its gradient is an unbiased
    estimate of -grad_phi E_{tau~pi}[R] (the baseline changes the variance, not the mean)."""
    return -((reward - baseline).detach() * logp_tau).mean()


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


class Schedule(nn.Module):
    """Base: single-depth supervision at a depth drawn by `train_depth`, test rule `policy`."""

    name = "base"
    needs_hidden = False  # does policy() need the hidden states?

    def __init__(self, K: int = 20, w: int = 5, T_max: int = 20, active_set: bool = True, **_):
        super().__init__()
        self.K, self.w, self.T_max, self.active_set = K, w, T_max, active_set

    def train_depth(self, Tn: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def policy(self, Tn, T_test, logits=None, hidden=None, mask=None) -> torch.Tensor:
        raise NotImplementedError

    def loss(self, model, x, y, Tn, gen):
        # l(theta; x, y, tau) = CE(yhat_tau(x), y), tau = this schedule's depth for each sample
        tau = self.train_depth(Tn, gen).to(x.device)
        if self.active_set:  # pays sum_i tau_i block evaluations
            logits = model.forward_depths(x, tau)  # (B, T, V)
            evals = tau.float().mean()
        else:  # reference: unroll everyone to max tau, gather each sample's depth
            traj = model(x, int(tau.max()))  # (K, B, T, V)
            logits = traj[tau - 1, torch.arange(len(tau), device=x.device)]
            evals = tau.max().float()
        loss = per_sample_ce(logits, y).mean()
        return loss, {"block_evals": evals.item(), "depth": tau.float().mean().item()}


class Fixed(Schedule):
    """K = c for every sample, in training and at test."""

    name = "fixed"

    def train_depth(self, Tn, gen):
        return torch.full_like(Tn, self.K)

    def policy(self, Tn, T_test, logits=None, hidden=None, mask=None):
        return torch.full_like(Tn, min(self.K, T_test))


class Matched(Schedule):
    """Length-matched: K = T(n) in training (clipped to 1..T_max) and at test (clipped to 1..T_test)."""

    name = "matched"

    def train_depth(self, Tn, gen):
        return Tn.clamp(1, self.T_max)

    def policy(self, Tn, T_test, logits=None, hidden=None, mask=None):
        return Tn.clamp(1, T_test)


class Window(Matched):
    """Local window: K = clip(T(n) + D, 1, T_max), D ~ Unif{-w..w} per sample; test K = T(n)."""

    name = "window"

    def train_depth(self, Tn, gen):
        # K = clip(T(n) + D, 1, T_max)
        return (Tn + uniform_offsets(Tn.shape, self.w, gen)).clamp(1, self.T_max)


class FixedWindow(Fixed):
    """Fixed-compute window: K = clip(c + D, 1, T_max), D ~ Unif{-w..w}; test K = c."""

    name = "fixed_window"

    def train_depth(self, Tn, gen):
        # K = clip(c + D, 1, T_max)
        return (self.K + uniform_offsets(Tn.shape, self.w, gen)).clamp(1, self.T_max)


class MultiDepth(Matched):
    """Multi-depth average: the deterministic mean of the per-depth losses over the window; test K = T(n)."""

    name = "multidepth"

    def loss(self, model, x, y, Tn, gen):
        # S_w(x) = {clip(T(n) + d, 1, T_max) : d = -w..w} = the integers lo..hi. A set: the depths that
        # clipping piles up at 1 or T_max count once, so every supervised depth has the same weight.
        lo, hi = (Tn - self.w).clamp(1, self.T_max), (Tn + self.w).clamp(1, self.T_max)  # (B,)
        K = int(hi.max())  # one unroll to the deepest window of the batch: B * K block applications
        l = per_sample_ce(model(x, K), y)  # (K, B): l_k for every depth k = 1..K
        k = torch.arange(1, K + 1, device=x.device).unsqueeze(1)  # (K, 1)
        in_S = ((k >= lo) & (k <= hi)).to(l.dtype)  # (K, B)
        # L = (1/|S_w(x)|) sum_{k in S_w(x)} l_k
        loss = ((in_S * l).sum(0) / in_S.sum(0)).mean()
        return loss, {"block_evals": float(K), "depth": ((lo + hi) / 2).float().mean().item()}


class FixedPrior(Schedule):
    """Fixed prior: sum_t pi_t l_t with an input-independent pi over 1..T_max (seed 001); test K = T_max."""

    name = "fixed_prior"

    def __init__(self, prior: str = "geometric", lam: float = 0.3, **kwargs):
        super().__init__(**kwargs)
        if prior not in ("uniform", "geometric"):
            raise ValueError(f"--prior {prior!r}: choose from uniform, geometric")
        if prior == "geometric" and not 0 < lam < 1:
            raise ValueError(f"--lam {lam}: must be in (0, 1)")
        # pi_t = 1 / T_max (uniform), or lam (1 - lam)^(t-1) / Z (truncated geometric)
        pi = torch.full((self.T_max,), 1 / self.T_max) if prior == "uniform" else truncated_geometric(lam, self.T_max)
        self.register_buffer("pi", pi, persistent=False)  # (T_max,)

    def loss(self, model, x, y, Tn, gen):
        l = per_sample_ce(model(x, self.T_max), y)  # (T_max, B)
        # L = sum_t pi_t l_t
        loss = (self.pi.unsqueeze(1) * l).sum(0).mean()
        depth = (self.pi * torch.arange(1, self.T_max + 1, device=self.pi.device)).sum()  # E_pi[t]
        return loss, {"block_evals": float(self.T_max), "depth": depth.item()}

    def policy(self, Tn, T_test, logits=None, hidden=None, mask=None):
        return torch.full_like(Tn, min(self.T_max, T_test))


class LearnedHalting(Schedule):
    """Base of the schedules with a halting head q_phi: one linear layer on the pooled state,
    hazard r_t = sigmoid(q_phi(h_t)), h_t = Pool(H_t) over real tokens."""

    needs_hidden = True
    detach_input = False  # rl: True (the head never sends gradient into the transformer)

    def __init__(self, d_model: int = 64, **kwargs):
        super().__init__(**kwargs)
        if self.T_max < 2:
            raise ValueError(f"--T_max {self.T_max}: a halting head needs T_max >= 2")
        self.head = nn.Linear(d_model, 1)  # q_phi
        # r_t ~ 1/T_max at the start: pi spreads over every depth (a bias of 0 gives r ~ 1/2, which puts
        # 3/4 of the mass on steps 1-2 before anything is learned)
        nn.init.constant_(self.head.bias, -math.log(self.T_max - 1))

    def hazard_logits(self, h: torch.Tensor) -> torch.Tensor:
        """a_t = q_phi(h_t), pooled states h (..., D) -> (...)."""
        return self.head(h.detach() if self.detach_input else h).squeeze(-1)

    def trajectory_logits(self, hidden: torch.Tensor, mask: torch.Tensor, K: int) -> torch.Tensor:
        """Hazard logits of steps 1..K-1 from hidden (>=K, B, T, D) (index 0 = H_0) -> (B, K-1): all that a
        distribution over 1..K needs (step K takes the remaining mass)."""
        return self.hazard_logits(pool(hidden[1:K], mask)).transpose(0, 1)

    def test_log_pi(self, hidden, mask, T_test):
        """log pi^(T_test)(t|x), t = 1..T_test: hazards of steps 1..T_test-1, the remaining mass on T_test."""
        return log_stop_distribution(self.trajectory_logits(hidden, mask, T_test))  # (B, T_test)


class RLHalting(LearnedHalting):
    """RL-Halting (seed 000, SPEC section 3): tau ~ pi(.|x), CE at tau, the head trained by REINFORCE.

    Cost. Sampling tau and log pi(tau|x) need only the hazards of steps 1..tau, but the entropy bonus
    over the full pi(.|x) needs every hazard r_1..r_{T_max-1}, i.e. the states H_1..H_{T_max-1}. With
    the active set, a sample runs steps 1..tau with gradient; after it stops, it keeps running under
    no_grad (no activations kept, no backward) up to T_max-1, only to feed the entropy. So every sample
    costs max(tau, T_max-1) block applications, of which tau carry gradient: block_evals counts both,
    block_evals_grad the gradient ones. active_set=False is the reference: everyone unrolled with
    gradient to T_max (the paper's 20.00 evaluations per step), hazards read from that trajectory.
    """

    name = "rl"
    detach_input = True

    def __init__(self, lambda_ent: float = 0.001, **kwargs):
        super().__init__(**kwargs)
        if not lambda_ent >= 0:
            raise ValueError(f"--lambda_ent {lambda_ent}: must be >= 0")
        self.lambda_ent = lambda_ent
        self.register_buffer("baseline", torch.zeros(()))  # b, checkpointed with the schedule

    def policy(self, Tn, T_test, logits=None, hidden=None, mask=None):
        # K_pi(x) = argmax_{1<=t<=T_test} pi^(T_test)(t|x)
        return self.test_log_pi(hidden, mask, T_test).argmax(-1) + 1

    def _unroll_active(self, model, x, y, mask, log_u):
        """Sample tau online (the rule of sample_stop, step by step) and return the CE at tau (B,), tau (B,),
        the hazard logits (B, T_max-1) and the block applications per sample with and without gradient."""
        B, Tm = x.shape[0], self.T_max
        h0 = model.embed(x)  # (B, T, D)
        live, done = torch.arange(B, device=x.device), torch.zeros(0, dtype=torch.long, device=x.device)
        h_live, h_done = h0, h0[:0].detach()  # states of running samples (grad) / stopped ones (no grad)
        log_S = torch.zeros(B, device=x.device, dtype=h0.dtype)  # log prod_{i<=t} (1 - r_i)
        tau = torch.empty(B, dtype=torch.long, device=x.device)
        a, ce, n_grad, n_nograd = [], [], 0, 0
        for t in range(1, Tm + 1):
            if len(live):
                h_live, n_grad = model.step(h_live, h0[live], t), n_grad + len(live)
            if t == Tm:  # the remaining mass: whoever still runs stops at T_max
                stop = torch.ones(len(live), dtype=torch.bool, device=x.device)
            else:
                if len(done):
                    with torch.no_grad():  # stopped samples run on only for the entropy's hazards
                        h_done, n_nograd = model.step(h_done, h0[done], t), n_nograd + len(done)
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
        return ce, tau, torch.stack(a, 1), n_grad / B, n_nograd / B

    def terms(self, model, x, y, Tn, gen):
        """The two parts of the loss, CE(yhat_tau, y) and L_halt, and the stats."""
        mask = x != PAD
        u = torch.rand(x.shape[0], generator=gen).to(x.device)  # one uniform per sample: tau ~ pi by inversion
        if self.active_set:
            ce, tau, a, n_grad, n_nograd = self._unroll_active(model, x, y, mask, u.log())
        else:  # reference: unroll everyone to T_max with gradient, gather each sample's tau
            logits, hidden = model(x, self.T_max, keep_hidden=True)  # (T_max, B, T, V), (T_max+1, B, T, D)
            a = self.trajectory_logits(hidden, mask, self.T_max)  # (B, T_max-1)
            tau = sample_stop(a.detach(), u)
            ce = per_sample_ce(logits[tau - 1, torch.arange(len(tau), device=x.device)], y)
            n_grad, n_nograd = float(self.T_max), 0.0
        log_pi = log_stop_distribution(a)  # (B, T_max)
        # R = -l(theta; x, y, tau), stop-gradient
        R = -ce.detach()
        # L_halt = -(R - b) log pi(tau|x) - lambda_ent H(pi(.|x))
        log_pi_tau = log_pi.gather(1, (tau - 1).unsqueeze(1)).squeeze(1)
        halt = reinforce_loss(log_pi_tau, R, self.baseline) - self.lambda_ent * entropy(log_pi).mean()
        # b <- 0.9 b + 0.1 mean(R)   (after its use in this step's loss)
        with torch.no_grad():
            self.baseline.mul_(0.9).add_(0.1 * R.mean())
        stats = {"block_evals": n_grad + n_nograd, "block_evals_grad": n_grad, "depth": tau.float().mean().item(),
                 "ce": ce.mean().item(), "baseline": self.baseline.item()}
        return ce.mean(), halt, stats

    def loss(self, model, x, y, Tn, gen):
        # total: CE(yhat_tau, y) + L_halt
        ce, halt, stats = self.terms(model, x, y, Tn, gen)
        return ce + halt, stats


class PonderNet(LearnedHalting):
    """PonderNet (Banino et al. 2021): sum_t q_t l_t + beta KL(q || truncated geometric(lambda_p)).
    The head is not detached; the remaining mass of q goes to T_max. Test: first t with cumulative
    q >= alpha (ponder_rule="alpha"), or argmax_t q_t (ponder_rule="argmax")."""

    name = "ponder"

    def __init__(self, beta: float = 0.01, lambda_p: float = 0.2, alpha: float = 0.5, ponder_rule: str = "alpha",
                 **kwargs):
        super().__init__(**kwargs)
        if not beta >= 0:
            raise ValueError(f"--beta {beta}: must be >= 0")
        if not 0 < alpha <= 1:
            raise ValueError(f"--alpha {alpha}: must be in (0, 1]")
        if ponder_rule not in ("alpha", "argmax"):
            raise ValueError(f"--ponder_rule {ponder_rule!r}: choose from alpha, argmax")
        if not 0 < lambda_p < 1:
            raise ValueError(f"--lambda_p {lambda_p}: must be in (0, 1)")
        self.beta, self.alpha, self.rule = beta, alpha, ponder_rule
        self.register_buffer("log_prior", truncated_geometric(lambda_p, self.T_max).log(), persistent=False)

    def loss(self, model, x, y, Tn, gen):
        logits, hidden = model(x, self.T_max, keep_hidden=True)  # (T_max, B, T, V), (T_max+1, B, T, D)
        l = per_sample_ce(logits, y).transpose(0, 1)  # (B, T_max)
        log_q = log_stop_distribution(self.trajectory_logits(hidden, x != PAD, self.T_max))  # (B, T_max)
        # L = sum_t q_t l_t + beta KL(q || p_G)
        loss = ((log_q.exp() * l).sum(1) + self.beta * kl_divergence(log_q, self.log_prior)).mean()
        depth = (log_q.exp() * torch.arange(1, self.T_max + 1, device=x.device)).sum(1).mean()  # E_q[t]
        return loss, {"block_evals": float(self.T_max), "depth": depth.item()}

    def policy(self, Tn, T_test, logits=None, hidden=None, mask=None):
        log_q = self.test_log_pi(hidden, mask, T_test)  # (B, T_test)
        if self.rule == "argmax":
            return log_q.argmax(-1) + 1
        # d_alpha(x) = min{t : sum_{s<=t} q_s >= alpha}  (the last step holds the remaining mass)
        reached = log_q.exp().cumsum(-1) >= self.alpha
        return torch.where(reached.any(-1), reached.int().argmax(-1) + 1, T_test)


class ACT(LearnedHalting):
    """Graves' Adaptive Computation Time (2016), one halting decision per sample.

    Training: halting probabilities h_t = sigmoid(q_phi(Pool(H_t))) (head not detached), N and the
    weights p_t from act_weights; the output is the mean field of the step outputs, yhat = sum_t p_t
    logits_t (Graves eq. 7, the weighted output before the softmax); loss CE(yhat) + tau_act (N + R).
    Test ("ACT halting"): the evaluation scores single depths, so the policy is the halting step
    N(x) on the test trajectory (capped at T_test) and the prediction is the readout of H_N, not the
    mean field."""

    name = "act"

    def __init__(self, tau_act: float = 0.01, act_eps: float = 0.01, **kwargs):
        super().__init__(**kwargs)
        if not tau_act >= 0:
            raise ValueError(f"--tau_act {tau_act}: must be >= 0")
        if not 0 < act_eps < 1:
            raise ValueError(f"--act_eps {act_eps}: must be in (0, 1)")
        self.tau_act, self.eps = tau_act, act_eps

    def loss(self, model, x, y, Tn, gen):
        logits, hidden = model(x, self.T_max, keep_hidden=True)  # (T_max, B, T, V), (T_max+1, B, T, D)
        halt = torch.sigmoid(self.trajectory_logits(hidden, x != PAD, self.T_max))  # (B, T_max-1)
        N, R, p = act_weights(halt, self.eps)  # (B,), (B,), (B, T_max)
        # yhat = sum_t p_t logits_t
        mixed = torch.einsum("bk,kbtv->btv", p, logits)  # (B, T, V)
        # L = CE(yhat, y) + tau_act * (N + R)   (N is a step count: its gradient flows through R only)
        loss = (per_sample_ce(mixed, y) + self.tau_act * (N + R)).mean()
        depth = (p * torch.arange(1, self.T_max + 1, device=x.device)).sum(1).mean()  # sum_t p_t t
        return loss, {"block_evals": float(self.T_max), "depth": depth.item(),
                      "ponder_cost": (N + R).float().mean().item()}

    def policy(self, Tn, T_test, logits=None, hidden=None, mask=None):
        halt = torch.sigmoid(self.trajectory_logits(hidden, mask, T_test))  # (B, T_test-1)
        return act_weights(halt, self.eps)[0]


SCHEDULES = {s.name: s for s in [Fixed, Matched, Window, FixedWindow, RLHalting, PonderNet, MultiDepth,
                                 FixedPrior, ACT]}


def make_schedule(name: str, **kwargs) -> Schedule:
    """kwargs: K, w, T_max, active_set, d_model and the learned schedules' own settings."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}: choose from {', '.join(SCHEDULES)}")
    return SCHEDULES[name](**kwargs)
