"""
S seeds as one batched program (train.py --stack S): every weight of the looped transformer and of its halting
head gets a leading seed axis. The model is model.py's LoopedTransformer with its leaves (nn.Linear, nn.LayerNorm,
nn.Embedding) swapped for seed-axis twins; each schedule's loss is halting.py's, called with the seed axis in front.

Nothing couples two seeds: every op is per seed, the chunk's loss is the sum of the seeds' losses, the gradient is
clipped per seed and AdamW is elementwise. Stacked seed s thus computes what the unstacked model with its weights
computes, up to the rounding of a reduction order (tests/test_stack.py). A stacked module has the unstacked one's
state_dict keys, each tensor with the leading S axis: unstack(state, s) is an ordinary checkpoint of seed s.

Not stackable (refusal): trm_halt and the NTP baselines, dropout (its mask comes from the global RNG), the vanilla
baseline (a block no sample of one seed reaches has no gradient there, AdamW skips it, the stack cannot) and
truncated backpropagation. Shapes: S seeds, B batch, P positions, D model width, K loop steps, V vocabulary.
"""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from halting import DEPTH_FIRST, act_weights, batch_mean, log_stop_distribution, per_sample_ce, pool, sample_stop, unroll
from model import LoopedTransformer

SINGLE = DEPTH_FIRST  # one depth per sample, drawn before the forward pass
STACKABLE = SINGLE + ("multidepth", "fixed_prior", "rl", "ponder", "act")


def refusal(cfg) -> str | None:
    """Why the run of cfg (train.py's Config) cannot stack, in one line; None if it can."""
    if cfg.schedule not in STACKABLE:
        return f"--stack: schedule {cfg.schedule} does not stack (stackable: {', '.join(STACKABLE)})"
    for bad, why in ((cfg.dropout > 0, f"--dropout {cfg.dropout}"), (not cfg.looped, "--no-looped"),
                     (cfg.bptt_k > 0, f"--bptt_k {cfg.bptt_k}"),
                     (cfg.compile and not cfg.static, "--compile without --static"),
                     (cfg.ema > 0, f"--ema {cfg.ema}"), (cfg.loss_weight != "sample", f"--loss_weight {cfg.loss_weight}"),
                     (cfg.schedule == "ponder" and cfg.prior == "uniform", "ponder --prior uniform")):
        if bad:
            return f"--stack: {why} does not stack (see stack.py)"
    return None


def stack_states(states: list[dict]) -> dict:
    """S state_dicts with the same keys -> one with each tensor stacked on a new leading axis."""
    return {k: torch.stack([sd[k] for sd in states]) for k in states[0]}


def unstack(state: dict, s: int) -> dict:
    """Seed s's ordinary state_dict, on the CPU (a clone: saving a view would save every seed)."""
    return {k: v[s].detach().cpu().clone() for k, v in state.items()}


# --- model.py's leaves with a leading seed axis on every weight: S of them as one batched op --------------------

class Linear(nn.Module):
    def __init__(self, S: int, d_in: int, d_out: int, bias: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(S, d_out, d_in))
        self.bias = nn.Parameter(torch.empty(S, d_out)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(S, ..., d_in) -> (S, ..., d_out): y[s] = x[s] W[s]^T + b[s]."""
        flat = x.reshape(x.shape[0], -1, x.shape[-1])  # (S, N, d_in)
        w = self.weight.transpose(1, 2)
        y = torch.bmm(flat, w) if self.bias is None else torch.baddbmm(self.bias.unsqueeze(1), flat, w)
        return y.view(*x.shape[:-1], -1)


class LayerNorm(nn.Module):
    def __init__(self, S: int, D: int):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.empty(S, D)), nn.Parameter(torch.empty(S, D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (x.shape[0], *[1] * (x.dim() - 2), x.shape[-1])  # each seed's scale and shift, broadcast
        return F.layer_norm(x, x.shape[-1:]) * self.weight.view(shape) + self.bias.view(shape)


class Embedding(nn.Module):
    def __init__(self, S: int, V: int, D: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(S, V, D))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx (S, B, P) -> (S, B, P, D): seed s looks up row idx of its table, row s*V + idx of all S."""
        S, V, D = self.weight.shape
        offset = (torch.arange(S, device=idx.device) * V).view(S, *[1] * (idx.dim() - 1))
        return F.embedding(idx + offset, self.weight.view(S * V, D))


# each leaf module of model.py -> its seed-axis twin above
TWINS = {nn.Linear: lambda S, m: Linear(S, m.in_features, m.out_features, bias=m.bias is not None),
         nn.LayerNorm: lambda S, m: LayerNorm(S, m.normalized_shape[-1]),
         nn.Embedding: lambda S, m: Embedding(S, m.num_embeddings, m.embedding_dim)}


def StackedLoopedTransformer(models: list[LoopedTransformer]) -> LoopedTransformer:
    """S looped transformers as one: a copy of model.py's with every leaf replaced by its seed-axis twin (the
    architecture stays model.py's code). The same state_dict keys and parameters() order, each with a leading S."""
    stacked = copy.deepcopy(models[0])
    for name, leaf in list(stacked.named_modules()):
        if type(leaf) in TWINS:
            parent, _, attr = name.rpartition(".")
            setattr(stacked.get_submodule(parent), attr, TWINS[type(leaf)](len(models), leaf))
        elif not list(leaf.children()) and list(leaf.parameters(recurse=False)):
            raise ValueError(f"stack.py has no seed-axis twin for {type(leaf).__name__} ({name})")
    p = next(models[0].parameters())
    stacked.to(device=p.device, dtype=p.dtype)
    stacked.load_state_dict(stack_states([m.state_dict() for m in models]))
    return stacked


def trajectory(model: StackedLoopedTransformer, x: torch.Tensor, K: int):
    """halting.unroll on the stack, seed axis first: logits (S, K, B, P, V), hidden states (S, K+1, B, P, D)."""
    logits, hidden = unroll(model, x, K)  # (K, S, B, P, V), (K+1, S, B, P, D)
    return logits.transpose(0, 1), hidden.transpose(0, 1)


def logits_at(model: StackedLoopedTransformer, x: torch.Tensor, depth: torch.Tensor, depth_host: torch.Tensor | None,
              K: int) -> torch.Tensor:
    """Each sample read out at its own depth: x (S, B, P), depth (S, B) -> (S, B, P, V). depth_host (the depths on
    the host): rows sorted deepest first per seed, step t runs the first n(t) = max_s #{i : depth[s, i] >= t} rows
    of every seed. None: masked compute, every row runs all K steps, no host read (the static step)."""
    S, B = depth.shape
    rows = torch.arange(S, device=x.device).unsqueeze(1)  # (S, 1)
    if depth_host is not None:
        order = torch.argsort(depth_host, dim=1, descending=True, stable=True)  # (S, B)
        steps = torch.arange(1, K + 1).view(1, 1, K)
        n_run = (depth_host.gather(1, order).unsqueeze(-1) >= steps).sum(1).amax(0).tolist()  # (K,) n(t)
        order = order.to(x.device)
        x, depth = x[rows, order], depth[rows, order]
    else:
        n_run = [B] * K
    h0 = h = final = model.embed(x)  # (S, B, P, D); `final`: each row's state at its depth, once reached
    tails = []  # rows past n(t) have all stopped: their final states, set aside
    for t in range(1, K + 1):
        n = n_run[t - 1]
        if n < final.shape[1]:
            tails.append(final[:, n:])
            final, h = final[:, :n], h[:, :n]
        h = model.step(h, h0[:, :n], t)
        final = torch.where((depth[:, :n] == t)[..., None, None], h, final)
    logits = model.readout(torch.cat([final] + tails[::-1], 1))  # (S, B, P, V)
    return logits if depth_host is None else logits[rows, torch.argsort(order, dim=1)]


# --- the stacked schedules -------------------------------------------------------------------------------

class StackedSchedule(nn.Module):
    """The stop schedules of S seeds (halting.py objects, the same settings) as one: the halting head stacked,
    rl's baseline one per seed. Each seed's own object draws its depths (draw); loss is halting.py's with the
    seed axis in front, its stats a tensor (S, len(stat_names)) in the unstacked stats dict's order."""

    def __init__(self, schedules: list):
        super().__init__()
        self.seeds, self.name, self.T_max = schedules, schedules[0].name, schedules[0].T_max  # a list: not submodules
        state = stack_states([s.state_dict() for s in schedules])
        if "head.weight" in state:
            w = state["head.weight"]
            self.head = Linear(len(schedules), w.shape[-1], 1).to(device=w.device, dtype=w.dtype)
        if "baseline" in state:
            self.register_buffer("baseline", torch.zeros_like(state["baseline"]))
        self.load_state_dict(state)
        self.stat_names = list(schedules[0].stat_names)  # halting.py's order of the unstacked stats dict

    @property
    def first(self):  # the settings, which every seed shares
        return self.seeds[0]

    def _apply(self, fn, *args, **kwargs):  # .to(), .double(): the per-seed objects (fixed_prior's pi) follow
        for s in self.seeds:
            s._apply(fn, *args, **kwargs)
        return super()._apply(fn, *args, **kwargs)

    def draw(self, Tn: torch.Tensor, gens: list) -> torch.Tensor:
        """Each seed's draw of this step from its own generator, on the host: the depth (S, B) of a single-depth
        schedule, rl's uniforms (S, B); Tn (S, B) itself for the others."""
        if self.name in SINGLE:
            return torch.stack([s.train_depth(t, g) for s, t, g in zip(self.seeds, Tn, gens)])
        if self.name == "rl":
            return torch.stack([torch.rand(Tn.shape[1], generator=g) for g in gens])
        return Tn

    def loss(self, model, x, y, Tn, draw, draw_host=None):
        """Every seed's training loss (S,) and stats (S, n). x, y (S, B, P), Tn and draw (S, B) on the device.
        draw_host: the draw on the host (eager); None: static, every loop runs to T_max, nothing is read back."""
        S, B = Tn.shape
        arange = torch.arange(1, self.T_max + 1, device=x.device, dtype=torch.float32)  # t = 1..T_max
        if self.name in SINGLE:
            K = self.T_max if draw_host is None else int(draw_host.max())
            active = draw_host if self.first.active_set and draw_host is not None else None
            # halting.Schedule.loss: l(theta; x, y, tau) = CE(yhat_tau(x), y), averaged over samples
            loss = batch_mean(per_sample_ce(logits_at(model, x, draw, active, K), y), y)
            tau = draw.float()
            evals = tau.mean(1) if self.first.active_set else tau.amax(1)  # what the unstacked run counts
            return loss, torch.stack([loss.detach(), evals, tau.mean(1)], 1)
        if self.name == "multidepth":
            lo, hi = self.first.window(Tn)  # (S, B): S_w(x) = lo..hi
            K = self.T_max if draw_host is None else int(self.first.window(draw_host)[1].max())
            l = per_sample_ce(trajectory(model, x, K)[0], y.unsqueeze(1))  # (S, K, B)
            loss = self.first.objective(l, lo, hi)  # halting.MultiDepth: the mean of l_k over S_w(x)
            return loss, torch.stack([loss.detach(), hi.amax(1).float(), ((lo + hi) / 2).float().mean(1)], 1)
        logits, hidden = trajectory(model, x, self.T_max)  # (S, T_max, B, P, V), (S, T_max+1, B, P, D)
        if self.name == "fixed_prior":
            loss = self.first.objective(per_sample_ce(logits, y.unsqueeze(1)))  # halting.FixedPrior: sum_t pi_t l_t
            depth = (self.first.pi * arange).sum().expand(S)  # E_pi[t]
            return loss, torch.stack([loss.detach(), torch.full_like(depth, self.T_max), depth], 1)
        pad = self.first.pad_id  # real tokens: what the head pools over (halting.HaltingHead.real, on (S, B, P))
        mask = x != pad if pad is not None else torch.ones_like(x, dtype=torch.bool)
        h = pool(hidden[:, 1:self.T_max], mask.unsqueeze(1))  # a_t = q_phi(h_t), t < T_max; rl's head: detached states
        a = self.head(h.detach() if self.first.detach_input else h).squeeze(-1).transpose(1, 2)  # (S, B, T_max-1)
        full = torch.full((S,), float(self.T_max), device=x.device)
        if self.name == "ponder":
            log_q = log_stop_distribution(a)  # (S, B, T_max)
            l = per_sample_ce(logits, y.unsqueeze(1)).transpose(1, 2)  # (S, B, T_max)
            task, kl = self.first.objective(log_q, l)  # halting.PonderNet: sum_t q_t l_t + beta KL(q || p_G)
            depth = (log_q.exp() * arange).sum(2).mean(1)  # E_q[t]
            return task + kl, torch.stack([task.detach(), kl.detach(), full, depth.detach()], 1)
        if self.name == "act":
            N, R, p = (v.view(S, B, *v.shape[1:]) for v in act_weights(torch.sigmoid(a).flatten(0, 1), self.first.eps))
            task, cost = self.first.objective(p, N, R, logits, y)  # halting.ACT: CE(sum_t p_t logits_t) + tau_act (N + R)
            depth = (p * arange).sum(2).mean(1)
            return task + cost, torch.stack([task.detach(), cost.detach(), full, depth.detach(),
                                             (N + R).float().mean(1).detach()], 1)
        # rl: tau ~ pi(.|x) by inversion of one uniform per sample (the reference path of halting.RLHalting)
        tau = sample_stop(a.detach().flatten(0, 1), draw.flatten()).view(S, B)  # (S, B)
        rows, cols = torch.arange(S, device=x.device).unsqueeze(1), torch.arange(B, device=x.device)
        ce = per_sample_ce(logits[rows, tau - 1, cols], y)  # (S, B)
        R = -ce.detach()  # R = -l(theta; x, y, tau)
        halt = self.first.halt_loss(log_stop_distribution(a), tau, R, self.baseline)  # halting.RLHalting's L_halt
        self.first.update_baseline(self.baseline, R)  # b <- 0.9 b + 0.1 mean(R), per seed
        n_grad, n_nograd = self.first.block_counts(tau, self.T_max, self.first.active_set, torch.float32)  # halting.RLHalting's
        return ce.mean(1) + halt, torch.stack([ce.mean(1).detach(), halt.detach(), n_grad + n_nograd, n_grad,
                                               tau.float().mean(1), self.baseline.clone()], 1)


# --- per-seed optimisation --------------------------------------------------------------------------------

def clip_per_seed(params: list, max_norm: float) -> torch.Tensor:
    """clip_grad_norm_ for each seed apart: g_s scaled by min(1, max_norm / (||g_s|| + 1e-6)). Returns ||g_s|| (S,)."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.stack([g.flatten(1).norm(dim=1) for g in grads]).norm(dim=0)  # (S,)
    coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *[1] * (g.dim() - 1)))
    return norm
