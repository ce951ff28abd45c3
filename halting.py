"""
Stop schedules: at which loop depth K the training loss is read out, and which K is used at test time
(SPEC section 3).

A schedule is an nn.Module (learned schedules own a halting head) with two methods:

    loss(model, x, y, Tn, gen) -> (loss, stats)   training loss of a batch; stats holds
                                                  `block_evals` (block applications per sample) and
                                                  `depth` (mean supervised depth)
    policy(Tn, T_test, logits, hidden, mask) -> K (B,)   the test-time depth of every sample

`model` is any object with the looped model's interface (forward(idx, n_steps, keep_hidden),
forward_depths(idx, depth), embed/step/readout): this file imports only torch, so it can be copied
alone.

Shape legend: B batch, T sequence length, D model width, K loop steps, V vocabulary.
"""

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


SCHEDULES = {s.name: s for s in [Fixed, Matched, Window, FixedWindow]}


def make_schedule(name: str, **kwargs) -> Schedule:
    """kwargs: K, w, T_max, active_set, d_model and the learned schedules' own settings."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}: choose from {', '.join(SCHEDULES)}")
    return SCHEDULES[name](**kwargs)
