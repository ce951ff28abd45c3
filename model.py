"""
A looped transformer: one shared block of L causal GPT layers applied K times with input injection.

    H_0 = E(x)                      token embedding, no positional encoding ("NoPE")
    H_t = Block(H_{t-1} + H_0)      t = 1..K   (input injection; --no-inject: H_t = Block(H_{t-1}))
    logits_t = head(LN_f(H_t))      one shared readout, applicable at every step

The loop starts from H_0 = E(x) itself, so step 1 computes Block(2 E(x)): the input is both the state and the
injection (a model that starts from zeros instead gives halting.py an init_state; this one does not).

The model exposes the whole *trajectory* (hidden state and logits at every step) from one pass, so
every depth K = 1..n_steps can be read out without re-running shorter loops.
`looped=False` builds the non-looped "vanilla" baseline: n_layer * n_loops distinct layers run once
through the same code (step t uses its own block t), where n_loops is the depth it is trained at.

This file imports only torch, so it can be copied alone.

Shape legend: B batch, P sequence positions (tokens), D model width (d_model), K loop steps, V vocabulary.
T is kept for depths: T(n), T_max, T_test (halting.py).
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelConfig:
    vocab_size: int = 8       # tokens of the task (PAD = 0 included)
    d_model: int = 64         # D, width of the residual stream
    n_head: int = 4           # attention heads; d_model % n_head == 0
    n_layer: int = 3          # L, GPT layers in the shared block
    dropout: float = 0.0      # no dropout by default (as in the papers)
    inject: bool = True       # input injection H_t = Block(H_{t-1} + H_0)
    looped: bool = True       # False: vanilla baseline with n_loops distinct blocks, run once
    n_loops: int = 20         # vanilla only: how many distinct blocks (the K it is trained at)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        assert cfg.d_model % cfg.n_head == 0, "d_model must be divisible by n_head"
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *lead, P, D = x.shape  # lead: (B,); (S, B) when lab/stack.py runs S seeds' weights as one model
        q, k, v = self.qkv(x).split(D, dim=-1)
        # (B, P, D) -> (B, nh, P, hs)
        q, k, v = (t.reshape(-1, P, self.n_head, D // self.n_head).transpose(1, 2) for t in (q, k, v))
        # causal: position i sees 0..i, so right padding never leaks into real tokens
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(*lead, P, D)  # (B, P, D)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Layer(nn.Module):
    """One pre-LayerNorm GPT layer: x + attn(LN(x)), then x + mlp(LN(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Block(nn.Sequential):
    """L layers applied in order: the unit that the loop repeats."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(*[Layer(cfg) for _ in range(cfg.n_layer)])


class LoopedTransformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        n_blocks = 1 if cfg.looped else cfg.n_loops
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(n_blocks)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init_weights)
        # GPT-2 scaled init of the residual projections, see nanoGPT / GPT-2 paper section 2.3
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    # --- the three pieces of the loop ------------------------------------------------------------

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """H_0 = E(x). idx (B, P) -> (B, P, D)."""
        return self.embed_tokens(idx)

    def step(self, h: torch.Tensor, h0: torch.Tensor, t: int) -> torch.Tensor:
        """One loop step t (1-based): H_t = Block(H_{t-1} + H_0). (B, P, D) -> (B, P, D)."""
        block = self.blocks[0] if self.cfg.looped else self.blocks[t - 1]
        return block(h + h0 if self.cfg.inject else h)

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        """logits_t = head(LN_f(H_t)). (..., D) -> (..., V)."""
        return self.head(self.ln_f(h))

    # --- whole trajectory --------------------------------------------------------------------------

    def forward(self, idx: torch.Tensor, n_steps: int, keep_hidden: bool = False):
        """Run the loop n_steps times; return the trajectory.

        idx (B, P) -> logits (K, B, P, V) at every step K = 1..n_steps, and, with keep_hidden, the
        hidden states (K+1, B, P, D) for steps 0..n_steps (index 0 is H_0 = E(x)).
        """
        if not self.cfg.looped and n_steps > self.cfg.n_loops:
            raise ValueError(f"vanilla model has {self.cfg.n_loops} blocks, cannot run {n_steps} steps")
        h0 = h = self.embed(idx)  # (B, P, D)
        logits, hidden = [], [h0]
        for t in range(1, n_steps + 1):
            h = self.step(h, h0, t)
            logits.append(self.readout(h))
            if keep_hidden:
                hidden.append(h)
        logits = torch.stack(logits)  # (K, B, P, V)
        return (logits, torch.stack(hidden)) if keep_hidden else logits

    # --- per-sample depth with a shrinking active set ------------------------------------------------

    def forward_depths(self, idx: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
        """Logits of each sample read out at its own depth: sample i at depth[i].

        idx (B, P), depth (B,) ints >= 1 -> logits (B, P, V).
        Cost: sum_i depth[i] block applications, not B * max_i depth[i]. Rows are sorted by depth
        (deepest first), so the samples still running at step t are a prefix of the batch: the active
        set shrinks by slicing, without gathers. Each sample is read out once, at the step it stops.
        """
        order = torch.argsort(depth, descending=True, stable=True)
        d_sorted = depth[order].tolist()
        h0 = h = self.embed(idx[order])
        out = [None] * d_sorted[0]
        # n_active[t] = number of samples with depth >= t (a prefix of the sorted rows)
        n_active = [sum(1 for d in d_sorted if d >= t) for t in range(d_sorted[0] + 2)]
        for t in range(1, d_sorted[0] + 1):
            h = self.step(h[: n_active[t]], h0[: n_active[t]], t)
            # rows n_active[t+1]:n_active[t] stop exactly at step t
            lo, hi = n_active[t + 1], n_active[t]
            if hi > lo:
                out[t - 1] = self.readout(h[lo:hi])
        logits = torch.cat([o for o in reversed(out) if o is not None])  # sorted order again
        return logits[torch.argsort(order)]  # back to the caller's order (B, P, V)
