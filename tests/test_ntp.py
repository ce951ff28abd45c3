"""The NTP baselines (ntp.py): the rewrite of a one-shot batch into a next-token batch, the loss, greedy
decoding and its one-pass exact match, the models build() gives, and ntp.py copied alone."""

import dataclasses
import os
import shutil
import subprocess
import sys

import pytest
import torch

import ntp
from config import Config
from model import LoopedTransformer, ModelConfig
from tasks import IGNORE, PAD, Task, eval_set, get_task, make_batch

ANSWER_TASKS = ["copy", "parity", "addition", "unique_set", "binary_sum", "multiplication", "mano"]


def config(**kw) -> dict:
    return {**dataclasses.asdict(Config()), "n_pause": 20, **kw}


class Countdown(Task):
    """A toy mapping a tiny model learns in ~100 steps: the prompt is r copies of k (r in 1..3, so prompts
    differ in length within a batch), the answer k-1, k-2, .., 0 (m = k tokens, then END '$'). Each next
    token depends only on the current one, so nothing teaches it the unseen tokens: the k beyond training
    are answered wrongly (and greedy decoding often ends early there)."""

    name, symbols = "countdown", [str(v) for v in range(10)] + ["_", "$"]

    def _sample(self, n, gen):
        r = int(torch.randint(1, 4, (1,), generator=gen))
        return self.tok([n] * r + ["_"] * n), [IGNORE] * r + self.tok(list(range(n - 1, -1, -1)))


def train_countdown(cls, n_pause=0, steps=100):
    task = Countdown()
    torch.manual_seed(0)
    model = LoopedTransformer(ModelConfig(vocab_size=len(task.vocab), d_model=32, n_head=2, n_layer=1,
                                          looped=cls.looped, inject=cls.looped, n_loops=2))
    s = cls(depth=2, n_pause=n_pause, **ntp.token_ids(task))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x, y, _, Tn = make_batch(task, torch.randint(1, 7, (16,), generator=gen).tolist(), gen)  # k in 1..6
        loss, _ = s.loss(model, x, y, Tn, None)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return task, model.eval(), s


@pytest.mark.smoke
def test_teacher_forcing_layout_by_hand():
    # unique_set: END filler dropped, one END closes the answer; 2 pauses; a shorter row padded
    task = get_task("unique_set", V=4)
    s = ntp.NTPPause(depth=1, n_pause=2, **ntp.token_ids(task))
    rows = [task.encode([3, 1, 3]), task.encode([2])]  # 3 1 3 > _ _ _ -> 3 1 $ ;  2 > _ -> 2
    x = torch.full((2, 7), PAD)
    y = torch.full((2, 7), IGNORE)
    for i, (xi, yi) in enumerate(rows):
        x[i, :len(xi)], y[i, :len(yi)] = torch.tensor(xi), torch.tensor(yi)
    inp, tgt = s.teacher_forcing(x, y)
    t = lambda *syms: task.tok(syms)
    P, E = task.stoi["_"], task.stoi["$"]
    assert inp.tolist() == [t(3, 1, 3, ">") + [P, P] + t(3, 1), t(2, ">") + [P, P] + t(2) + [PAD] * 3]
    assert tgt.tolist() == [[IGNORE] * 5 + t(3, 1) + [E], [IGNORE] * 3 + t(2) + [E] + [IGNORE] * 3]
    # copy (no '$'): END is the PAD id, and only ever a target
    task = get_task("copy")
    s = ntp.NTP(depth=1, **ntp.token_ids(task))
    x, y, _, _ = make_batch(task, [2], torch.Generator().manual_seed(0))
    inp, tgt = s.teacher_forcing(x, y)
    assert s.end_id == PAD and PAD not in inp.tolist()[0] and tgt.tolist()[0][-1] == PAD


@pytest.mark.smoke
def test_loss_ignores_prompt_and_pad_positions():
    task = get_task("addition")
    x, y, _, Tn = make_batch(task, [1, 3, 6], torch.Generator().manual_seed(0))  # three lengths: padding
    for cls, n_pause in ((ntp.NTP, 0), (ntp.NTPPause, 3)):
        torch.manual_seed(0)
        model = LoopedTransformer(ModelConfig(vocab_size=len(task.vocab), d_model=16, n_head=2, n_layer=1,
                                              looped=False, inject=False, n_loops=2))
        s = cls(depth=2, n_pause=n_pause, **ntp.token_ids(task))
        loss, stats = s.loss(model, x, y, Tn, None)
        # an independent reference: each row alone (no padding at all), CE at its m + 1 answer positions
        per_row = []
        for i in range(3):
            prompt, answer = s.split(x[i:i + 1], y[i:i + 1])
            seq = torch.tensor(prompt[0] + [s.pause_id] * n_pause + answer[0])
            logits = s.logits(model, seq[None, :-1])[0]  # (len - 1, V)
            m1 = len(answer[0])  # answer and END, predicted at the last m + 1 positions
            per_row.append(torch.nn.functional.cross_entropy(logits[-m1:], seq[-m1:]))
        assert torch.allclose(loss, torch.stack(per_row).mean(), atol=1e-5)
        assert stats["depth"] == stats["block_evals"] == 2.0
        # the prompt and pause positions get no gradient through the logits
        inp, tgt = s.teacher_forcing(x, y)
        logits = s.logits(model, inp).detach().requires_grad_()
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tgt, ignore_index=IGNORE, reduction="none")
        ce.sum().backward()
        assert (logits.grad.abs().sum(-1)[tgt == IGNORE] == 0).all()


@pytest.mark.parametrize("cls,n_pause", [(ntp.NTP, 0), (ntp.NTPPause, 2), (ntp.NTPLoop, 0)])
def test_learned_toy_mapping_greedy_decoding_equals_teacher_forcing(cls, n_pause):
    task, model, s = train_countdown(cls, n_pause)
    ks = list(range(1, 10)) * 4  # 1..6 trained, 7..9 never seen
    x, y, _, _ = make_batch(task, ks, torch.Generator().manual_seed(5))
    correct, out = s.decode(model, x, y)
    assert correct.view(4, 9)[:, :6].all() and not correct.view(4, 9)[:, 6:].all()  # right and wrong rows
    # one teacher-forced pass gives the same exact match, row by row (right and wrong rows alike) ...
    assert torch.equal(s.exact(model, x, y), correct)
    # ... and, on the right rows, the same tokens as its argmax at the answer positions
    inp, tgt = s.teacher_forcing(x, y)
    preds = s.logits(model, inp).argmax(-1)
    for i in correct.nonzero().flatten().tolist():
        assert preds[i][tgt[i] != IGNORE].tolist() == out[i] == list(range(ks[i], 0, -1)) + [s.end_id]
    # the record metrics.score_sets uses: one depth, both scorings alike
    rec = s.score_set(model, x, y, batch_size=7, device="cpu")
    s.greedy = True
    assert torch.equal(s.score_set(model, x, y, batch_size=7, device="cpu")["exact"], rec["exact"])
    assert rec["exact"].shape == (1, len(ks)) and rec["flip"].shape == (0, len(ks)) and (rec["depth"] == 1).all()


class Constant(torch.nn.Module):
    """A 'model' whose readout always puts the most mass on one token."""

    def __init__(self, token, V):
        super().__init__()
        self.token, self.V = token, V

    def embed(self, x):
        return torch.zeros(*x.shape, 1)

    def step(self, h, h0, t):
        return h

    def readout(self, h):
        return torch.nn.functional.one_hot(torch.full(h.shape[:-1], self.token), self.V).float()


def test_decoding_stops_at_end():
    task = Countdown()
    s = ntp.NTP(depth=3, **ntp.token_ids(task))
    x, y, _, _ = make_batch(task, [1, 4, 9], torch.Generator().manual_seed(0))
    V = len(task.vocab)
    correct, out = s.decode(Constant(s.end_id, V), x, y)  # END at once: one token each, never correct
    assert out == [[s.end_id]] * 3 and not correct.any()
    one = task.stoi["1"]
    correct, out = s.decode(Constant(one, V), x, y)  # never END: stopped after m + 1 tokens
    assert out == [[one] * 2, [one] * 5, [one] * 10] and not correct.any()
    _, out = s.decode(Constant(one, V), x, max_new=3)  # without targets: max_new tokens
    assert out == [[one] * 3] * 3
    _, model, s = train_countdown(ntp.NTP)  # a trained model, without targets: it stops at its own END
    x, y, _, _ = make_batch(task, list(range(1, 7)), torch.Generator().manual_seed(1))
    _, out = s.decode(model, x, max_new=12)
    assert out == [list(range(k, 0, -1)) + [s.end_id] for k in range(1, 7)]


@pytest.mark.parametrize("name", ANSWER_TASKS)
def test_eval_sets_identical_to_the_one_shot_mode(name):
    # the NTP schedules read the one-shot evaluation sets themselves: rebuilding the one-shot rows from the
    # NTP prompts and answers gives back exactly the same strings, so both modes score the same examples
    task = get_task(name)
    s = ntp.make("ntp", config(task=name), task)
    sets = eval_set(task, [1, 4, 9], 16, seed=1234)
    for n, (x, y, _, _) in sets.items():
        prompts, answers = s.split(x, y)
        for xi, yi, p, a in zip(x.tolist(), y.tolist(), prompts, answers):
            slots = sum(t != IGNORE for t in yi)
            fill = [task.stoi["$"]] * (slots - len(a) + 1) if "$" in task.stoi else []
            assert [t for t in xi if t != PAD] == p + [task.stoi["_"]] * slots
            assert [t for t in yi if t != IGNORE] == a[:-1] + fill and a[-1] == s.end_id


def test_build_models_and_refusals():
    task = get_task("copy")
    torch.manual_seed(0)
    model, s = ntp.build(config(task="copy", schedule="ntp", c=4, n_layer=2), task)
    assert (not model.cfg.looped and not model.cfg.inject and len(model.blocks) == 4 and s.depth == 4
            and model.cfg.vocab_size == len(task.vocab))
    torch.manual_seed(0)
    model, s = ntp.build(config(task="copy", schedule="ntp_loop", c=0, T_max=7), task)
    assert model.cfg.looped and model.cfg.inject and len(model.blocks) == 1 and s.depth == 7 and s.n_pause == 0
    torch.manual_seed(0)  # the same vocabulary, so the same initial weights as the one-shot looped model
    one_shot = LoopedTransformer(ModelConfig(vocab_size=len(task.vocab)))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), one_shot.state_dict().values()))
    assert ntp.make("ntp_pause", config(n_pause=5), task).n_pause == 5
    for cfg, msg in [(config(task="dyck", schedule="ntp"), "no answer slots"),
                     (config(task="copy", schedule="ntp_pause", n_pause=0), "n_pause 0"),
                     (config(task="copy", schedule="ntp_loop", looped=False), "no-looped")]:
        with pytest.raises(ValueError, match=msg):
            ntp.build(cfg, get_task(cfg["task"]))


def test_copied_alone(tmp_path):
    # the schedules need only torch and a model with embed / step / readout (here a minimal one)
    shutil.copy(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ntp.py"), tmp_path)
    script = """
import torch, torch.nn as nn
import ntp
class Tiny(nn.Module):
    def __init__(self):
        super().__init__(); self.e, self.m, self.o = nn.Embedding(6, 8), nn.Linear(8, 8), nn.Linear(8, 6)
    def embed(self, x): return self.e(x)
    def step(self, h, h0, t): return torch.tanh(self.m(h + h0))
    def readout(self, h): return self.o(h)
torch.manual_seed(0)
s = ntp.NTPLoop(depth=3, pad_id=0, slot_id=5, end_id=0)
x = torch.tensor([[1, 2, 3, 5, 5, 0], [2, 1, 1, 3, 5, 5]]); y = torch.full_like(x, -100)
y[0, 3:5] = torch.tensor([3, 2]); y[1, 4:6] = torch.tensor([1, 1])
loss, stats = s.loss(Tiny(), x, y, None, None); loss.backward()
correct, out = s.decode(Tiny(), x, y)
assert torch.isfinite(loss) and len(out) == 2, (loss, out)
print("ntp alone ok")
"""
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": ""})
    assert r.returncode == 0 and "ntp alone ok" in r.stdout, r.stderr
