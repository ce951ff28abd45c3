"""
The next-token-prediction (NTP) baselines of Fan et al. (ICLR 2025, section 6): the answer is generated
token by token after the prompt, instead of predicted in one shot at answer slots.

    ntp         a plain decoder of c distinct blocks (c * L layers), no input injection
    ntp_pause   the same, with p pause tokens between the prompt and the answer (Goyal et al. 2024)
    ntp_loop    the looped block (input injection) run a fixed c loops for every token

They take the same one-shot batches as the stop schedules of halting.py (tasks.py's x, y), so training
data and evaluation sets are literally the same strings; each batch is rewritten here into a sequence

    s = prompt + PAUSE^p + a_1 .. a_m + END        (p = 0 for ntp and ntp_loop)

where prompt is x without its padding and answer slots, a_1..a_m are the scored targets of y up to the
first END filler (unique_set, binary_sum) and END closes every answer. Notation:

    N        prompt length (the real tokens of x before the answer slots '_')
    p        number of pause tokens (--n_pause)
    m        answer length; the model predicts m + 1 tokens (the answer and END)
    c        the fixed depth: blocks of ntp / ntp_pause, loops of ntp_loop (--c, 0: T_max)
    f_c      the model read out after c steps: logits_c = head(LN_f(H_c)), H_t = Block_t(H_{t-1} [+ H_0])

Training is teacher forcing: every answer position sees the true prefix, and only the m + 1 answer
tokens are scored (prompt, pause and pad positions are ignored). Testing is greedy decoding from the
prompt (and pauses) until END. Exact match: the decoded tokens equal a_1 .. a_m END.

Depth. Every token gets the same c steps; c = T_max by default, the deepest depth the looped models are
trained at, so ntp is a plain GPT of c * L layers: the looped model's effective depth at its longest
training lengths. This is how the paper matches depths: the configurations of its code give the NTP
decoder L x 20 layers for an L-layer looped block trained up to length 20 (3 -> 60, 2 -> 40, 1 -> 20
layers; github.com/UW-Madison-Lee-Lab/looped-tf, src/conf/models/*_ntp*.yaml). No positional encoding
anywhere ("NoPE", as the looped model and the paper's code). The number of pause tokens is our choice
(--n_pause, default 20, the default T_max: one extra position per loop step the looped model may
take): we could not find the paper's count.

Token ids come from the task (no new vocabulary, so one seed gives the same initial weights as the
one-shot models): PAUSE is the answer-slot token '_' (a position to compute in, as in the one-shot
format); END is the task's END filler '$' where it has one, else the PAD id, which is only ever a
target, never an input (a sequence stops there). Tasks without answer slots (dyck, parity_prefix: one
label per input position) have no answer sequence and are refused.

The schedules need only a looped model with embed / step / readout (model.py's LoopedTransformer, or
halting.py's minimal contract); build() is the one place that imports model.py. Shapes: B batch,
P sequence positions, D model width, V vocabulary.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE = -100  # target of an unscored position (F.cross_entropy's ignore_index)


def check(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


# --- one-shot batch -> next-token-prediction batch ----------------------------------------------------

class NTP(nn.Module):
    """Vanilla NTP: a plain decoder of c distinct blocks (the model that build() gives it), teacher
    forcing in training, greedy decoding at test. Depth c for every token; no pause tokens."""

    name = "ntp"
    looped = False  # build(): c distinct blocks without input injection

    def __init__(self, *, depth: int, pad_id: int, slot_id: int, end_id: int, n_pause: int = 0,
                 greedy: bool = False):
        super().__init__()
        check(depth >= 1, f"c={depth}: the fixed depth must be >= 1")
        check(n_pause >= 0, f"n_pause={n_pause}: must be >= 0")
        self.depth, self.n_pause, self.greedy = depth, n_pause, greedy
        self.pad_id, self.slot_id, self.end_id = pad_id, slot_id, end_id
        self.pause_id = slot_id  # PAUSE = the answer-slot token '_'

    def split(self, x: torch.Tensor, y: torch.Tensor):
        """One-shot rows -> (prompts, answers), lists of token lists. prompt: the real tokens of x that are
        not answer slots; answer: the scored targets of y up to the first END filler, then END."""
        prompts, answers = [], []
        for xi, yi in zip(x.tolist(), y.tolist()):
            prompts.append([t for t in xi if t not in (self.pad_id, self.slot_id)])
            a = [t for t in yi if t != IGNORE]
            a = a[:a.index(self.end_id)] if self.end_id in a else a  # drop the END filler of the slots
            answers.append(a + [self.end_id])
        return prompts, answers

    def teacher_forcing(self, x: torch.Tensor, y: torch.Tensor):
        """(inp, tgt) (B, P'): the sequences s without their last token, and the next token at the answer
        positions, IGNORE at prompt, pause and pad positions. Rows are right-padded with PAD: with causal
        attention a real token never sees the padding after it."""
        prompts, answers = self.split(x, y)
        seqs = [p + [self.pause_id] * self.n_pause + a for p, a in zip(prompts, answers)]
        P = max(len(s) for s in seqs) - 1
        inp = torch.full((len(seqs), P), self.pad_id, dtype=torch.long)
        tgt = torch.full((len(seqs), P), IGNORE, dtype=torch.long)
        for i, (p, a, s) in enumerate(zip(prompts, answers, seqs)):
            inp[i, :len(s) - 1] = torch.tensor(s[:-1])
            # position j predicts s[j+1]: the answer a_1 .. END is predicted at positions N+p-1 .. N+p+m-1
            start = len(p) + self.n_pause - 1
            tgt[i, start:start + len(a)] = torch.tensor(a)
        return inp.to(x.device), tgt.to(x.device)

    # --- the model at depth c -------------------------------------------------------------------------

    def logits(self, model, inp: torch.Tensor) -> torch.Tensor:
        """f_c: the model read out after its c steps. inp (B, P) -> (B, P, V). For ntp step t applies
        block t (a plain stack of c blocks); for ntp_loop it applies the shared block with injection."""
        h0 = h = model.embed(inp)  # (B, P, D)
        for t in range(1, self.depth + 1):
            h = model.step(h, h0, t)
        return model.readout(h)

    def loss(self, model, x, y, Tn, gen):
        """Teacher forcing on the one-shot batch x, y (B, P); Tn and gen are unused (the depth is fixed).
            l(x) = (1/(m+1)) sum_{j=1}^{m+1} -log p_c(s_{N+p+j} | s_{<N+p+j}),   loss = mean_x l(x)
        (each sample weighs the same whatever its answer length, as halting.per_sample_ce)."""
        inp, tgt = self.teacher_forcing(x, y)
        logits = self.logits(model, inp)  # (B, P', V)
        ce = F.cross_entropy(logits.transpose(1, 2), tgt, ignore_index=IGNORE, reduction="none")  # (B, P')
        scored = (tgt != IGNORE).to(ce.dtype)
        loss = ((ce * scored).sum(1) / scored.sum(1)).mean()
        return loss, {"loss": loss.item(), "block_evals": float(self.depth), "depth": float(self.depth)}

    # --- test: greedy decoding ------------------------------------------------------------------------

    @torch.no_grad()
    def decode(self, model, x: torch.Tensor, y: torch.Tensor = None, max_new: int = None):
        """Greedy decoding from each prompt (and its pauses) up to and including END:
            s_hat_t = argmax_v p_c(v | prompt, PAUSE^p, s_hat_<t),   stop at END or after max_new tokens
        x (B, P) one-shot prompts (their answer slots are dropped), y (B, P) their targets, or None.
        Returns correct (B,) bool (s_hat = a_1 .. a_m END; None without y) and the decoded token lists.
        max_new defaults to each row's m + 1: a row without END by then cannot be correct anyway.
        Like nanoGPT's generate, every new token re-runs the whole prefix (no key-value cache): the
        simple version. `exact` below scores the same exact match in one pass."""
        check(y is not None or max_new is not None, "decode without targets needs max_new")
        prompts, answers = self.split(x, y if y is not None else torch.full_like(x, IGNORE))
        B = len(prompts)
        start = torch.tensor([len(p) + self.n_pause for p in prompts])  # (B,) first generated position
        cap = torch.tensor([max_new or len(a) for a in answers])  # (B,) tokens allowed per row
        buf = torch.full((B, int((start + cap).max())), self.pad_id, dtype=torch.long)
        for i, p in enumerate(prompts):
            buf[i, :start[i]] = torch.tensor(p + [self.pause_id] * self.n_pause)
        pos, done, rows = start.clone(), torch.zeros(B, dtype=torch.bool), torch.arange(B)
        while not done.all():
            live = rows[~done]  # rows still generating; finished rows are not run again
            P = int(pos[live].max())
            logits = self.logits(model, buf[live, :P].to(x.device))  # (b, P, V)
            nxt = logits[torch.arange(len(live)), pos[live] - 1].argmax(-1).cpu()  # the token after each prefix
            buf[live, pos[live]] = nxt
            pos[live] += 1
            done[live] = (nxt == self.end_id) | (pos[live] - start[live] >= cap[live])
        out = [buf[i, start[i]:pos[i]].tolist() for i in range(B)]
        correct = torch.tensor([o == a for o, a in zip(out, answers)]) if y is not None else None
        return correct, out

    @torch.no_grad()
    def exact(self, model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The exact match of greedy decoding, in one teacher-forced pass. (B,) bool.
            s_hat = a_1 .. a_m END   <=>   argmax p_c(. | s_<j) = s_j at every answer position j
        (=>: greedy reproduces the true prefix token by token; <=: at the first position where the argmax
        is wrong, greedy decoding has fed the true prefix so far, so it emits that wrong token.) The two
        can differ only where a float tie flips an argmax between a prefix pass and a full pass."""
        inp, tgt = self.teacher_forcing(x, y)
        preds = self.logits(model, inp).argmax(-1)  # (B, P')
        return ((preds == tgt) | (tgt == IGNORE)).all(-1)

    def score_set(self, model, x, y, batch_size: int, device: str) -> dict:
        """metrics.score_sets' record of one length for this fixed-depth model: {"exact": (1, B) bool (one
        depth: the K axis is [c]), "flip": (0, B) (no second depth to flip to), "depth": (B,) ones (the
        index into that axis)}, on the CPU. Scored by `exact` (one pass), or by `decode` with greedy=True
        (the same numbers, ~m times the cost: every token re-runs its prefix)."""
        parts = []
        for i in range(0, len(x), batch_size):
            xb, yb = x[i:i + batch_size].to(device), y[i:i + batch_size].to(device)
            parts.append(self.decode(model, xb, yb)[0] if self.greedy else self.exact(model, xb, yb).cpu())
        ok = torch.cat(parts)
        return {"exact": ok.unsqueeze(0), "flip": torch.zeros(0, len(ok), dtype=torch.bool),
                "depth": torch.ones(len(ok), dtype=torch.long)}


class NTPPause(NTP):
    """NTP with p pause tokens between the prompt and the answer (Goyal et al. 2024): p more positions to
    compute in before the first answer token; the predictions at the pause positions are not scored."""

    name = "ntp_pause"


class NTPLoop(NTP):
    """NTP-Loop: the looped block with input injection, H_t = Block(H_{t-1} + H_0), run a fixed c loops for
    every generated token (the one-shot `fixed --c` schedule, trained and tested autoregressively)."""

    name = "ntp_loop"
    looped = True


SCHEDULES = {s.name: s for s in [NTP, NTPPause, NTPLoop]}


def token_ids(task) -> dict:
    """PAD, the answer-slot token (= PAUSE) and END of a task (see the module docstring). A task without
    answer slots is refused: its answer is one label per input position, not a sequence to generate."""
    check("_" in task.stoi, f"task {task.name} has no answer slots '_' (one label per input position): "
                            f"the NTP baselines need an answer sequence after a separator")
    pad = task.stoi[task.vocab[0]]  # tasks.py: token 0 is PAD in every vocabulary
    return {"pad_id": pad, "slot_id": task.stoi["_"], "end_id": task.stoi.get("$", pad)}


def make(name: str, cfg: dict, task) -> NTP:
    """The schedule `name` for a task with the settings of a config dict (config.Config as a dict)."""
    check(name in SCHEDULES, f"unknown schedule {name!r}: choose from {', '.join(SCHEDULES)}")
    n_pause = cfg["n_pause"] if name == "ntp_pause" else 0
    check(name != "ntp_pause" or n_pause >= 1, f"--n_pause {n_pause}: ntp_pause needs >= 1 pause token")
    check(name != "ntp_loop" or cfg.get("looped", True), "--no-looped with ntp_loop: the looped NTP baseline is "
                                                          "looped; the non-looped one is --schedule ntp")
    return SCHEDULES[name](depth=cfg["c"] or cfg["T_max"], n_pause=n_pause, greedy=cfg.get("ntp_greedy", False),
                           **token_ids(task))


def build(cfg: dict, task):
    """(model, schedule) for cfg["schedule"] in SCHEDULES. The model is model.py's LoopedTransformer with
    the task's vocabulary: ntp / ntp_pause get c distinct blocks of L layers without input injection (a
    plain GPT of c * L layers: the looped model's effective depth at c loops); ntp_loop gets the shared
    block, injection as cfg["inject"]. The caller seeds torch first (config.build's model stream)."""
    from model import LoopedTransformer, ModelConfig  # the one project import, here so the schedules copy alone

    schedule = make(cfg["schedule"], cfg, task)
    model = LoopedTransformer(ModelConfig(
        vocab_size=len(task.vocab), d_model=cfg["d_model"], n_head=cfg["n_head"], n_layer=cfg["n_layer"],
        dropout=cfg["dropout"], inject=cfg["inject"] and schedule.looped, looped=schedule.looped,
        n_loops=schedule.depth))
    return model, schedule


if __name__ == "__main__":  # one sample of every task with an answer sequence, as an NTP sequence
    from tasks import TASKS, get_task, make_batch

    for name in TASKS:
        task = get_task(name)
        if "_" not in task.stoi:
            print(f"== {name}: one label per input position, no answer sequence (refused)")
            continue
        s = NTPPause(depth=1, n_pause=2, **token_ids(task))
        x, y, _, _ = make_batch(task, [4], torch.Generator().manual_seed(0))
        inp, tgt = s.teacher_forcing(x, y)
        show = lambda ids: " ".join("END" if t == s.end_id else "<pause>" if t == s.pause_id else task.vocab[t]
                                    for t in ids)
        print(f"== {name}  (n = 4, two pause tokens)")
        print(f"  one-shot x: {task.decode(x[0].tolist())}")
        print(f"  NTP input:  {show(inp[0].tolist())}")
        print(f"  target:     {' '.join('.' if t == IGNORE else show([t]) for t in tgt[0].tolist())}")
