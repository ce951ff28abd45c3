"""model.py, tasks.py, halting.py and readouts.py each work when copied alone into another project:
each is copied into an empty folder and used there by a script that cannot import anything else of ours.
halting.py is driven by a minimal looped model of another project (tests/foreign.py, not model.py): embed /
step / readout."""

import os
import shutil
import subprocess
import sys

import pytest

import foreign

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY_LOOP = foreign.SOURCE + """
torch.manual_seed(0)
x = torch.randint(1, 6, (5, 7)); x[0, 4:] = 0  # token 0 pads the first sample
y = torch.randint(1, 6, (5, 7)); y[:, :2] = -100
Tn = torch.tensor([1, 2, 3, 5, 6])
"""

SCRIPTS = {
    "halting.py": TINY_LOOP + """
import halting
knobs = dict(c=4, w=1, T_max=6, d_model=8, pad_id=0, lambda_ent=0.01, active_set=True)
for name in halting.SCHEDULES:
    model = ForeignLoop()
    s = halting.make_schedule(name, **{k: v for k, v in knobs.items() if k in halting.settings(name)})
    opt = torch.optim.AdamW(list(model.parameters()) + list(s.parameters()), lr=1e-2)
    for step in range(2):
        loss, stats = s.loss(model, x, y, Tn, torch.Generator().manual_seed(step))
        opt.zero_grad(); loss.backward(); opt.step()
    _, hidden = halting.unroll(model, x, 8)
    K = s.policy(Tn, 8, hidden=hidden, mask=x != 0)
    assert torch.isfinite(loss) and K.shape == (5,) and 1 <= K.min() and K.max() <= 8, name
    print(name, "ok", round(stats["loss"], 3))
""",
    "model.py": """
import torch
from model import LoopedTransformer, ModelConfig
m = LoopedTransformer(ModelConfig(vocab_size=6, d_model=16, n_head=2, n_layer=1))
x = torch.randint(1, 6, (3, 5))
logits, hidden = m(x, 4, keep_hidden=True)
d = torch.tensor([1, 4, 2])
assert torch.allclose(m.forward_depths(x, d), logits[d - 1, torch.arange(3)], atol=1e-6)
print("model ok", tuple(logits.shape), tuple(hidden.shape))
""",
    "tasks.py": """
import torch
import tasks
for name in tasks.TASKS:
    task = tasks.get_task(name)
    x, y, n, Tn = tasks.train_batch(task, 4, 1, 6, torch.Generator().manual_seed(0))
    sets = tasks.eval_set(task, [3, 7], 2)
    assert x.shape == y.shape and len(sets) == 2
    print(name, "ok", task.decode(x[0].tolist()))
""",
    "readouts.py": """
import torch
import readouts
K, B, T, V, D = 5, 4, 6, 3, 8
logits, hidden = torch.randn(K, B, T, V), torch.randn(K + 1, B, T, D)
signals = readouts.trajectory_signals(logits, hidden, torch.ones(B, T, dtype=torch.bool))
d = readouts.exit_depths(readouts.score("top1", signals["top1"]), torch.tensor([0.5, 0.9]))
assert d.shape == (2, B)
print("readouts ok", sorted(signals))
""",
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_file_works_copied_alone(tmp_path, name):
    shutil.copy(os.path.join(ROOT, name), tmp_path / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", SCRIPTS[name]], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert os.listdir(tmp_path) == [name] or set(os.listdir(tmp_path)) <= {name, "__pycache__"}
    assert "ok" in r.stdout


# --- a model built the other way round ------------------------------------------------------------------
# One-hot inputs through a linear read-in, a loop that starts from zeros (init_state), a step that ignores
# t, no forward_depths, its own forward. halting.py and readouts.py are copied alone beside it; the
# numbers are checked against the model's own per-step logits, not only for finiteness.

OTHER_WAY = """
import torch, torch.nn as nn, torch.nn.functional as F
import halting, readouts
torch.manual_seed(0)
V, D, B, T, T_max, w = 6, 8, 12, 7, 6, 2

class OneHotLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.read_in, self.mix, self.out = nn.Linear(V, D), nn.Linear(D, D), nn.Linear(D, V)
    def embed(self, x):  # x (B, T, V) one-hot
        return self.read_in(x)
    def init_state(self, h0):  # the loop starts from zeros, not from embed(x)
        return torch.zeros_like(h0)
    def step(self, h, h0, t):  # ignores t
        return torch.tanh(self.mix(h) + h0)
    def readout(self, h):
        return self.out(h)
    def forward(self, x, K, keep_hidden=False):  # the model's own loop, written without halting.py
        e, h = self.embed(x), torch.zeros(x.shape[0], x.shape[1], D)
        logits, hidden = [], [h]
        for _ in range(K):
            h = torch.tanh(self.mix(h) + e)
            logits.append(self.out(h)), hidden.append(h)
        return (torch.stack(logits), torch.stack(hidden)) if keep_hidden else torch.stack(logits)

model = OneHotLoop()
ids = torch.randint(1, V, (B, T)); ids[0, 4:] = 0  # token 0 pads the first sample
x, mask = F.one_hot(ids, V).float(), ids != 0
y = torch.randint(1, V, (B, T)); y[:, :2] = -100; y[0, 4:] = -100
Tn = torch.arange(1, B + 1) % T_max + 1

def ce_by_hand(logits, y, i):  # mean CE over sample i's scored positions
    keep = y[i] != -100
    return F.cross_entropy(logits[i][keep], y[i][keep])

# 1) the window loss = CE at the sampled depth, from the model's own logits; the draw replayed on a clone
own = model(x, T_max)  # (T_max, B, T, V)
for active in (True, False):
    s = halting.make_schedule("window", w=w, T_max=T_max, active_set=active)
    gen = torch.Generator().manual_seed(3)
    replay = torch.Generator().set_state(gen.get_state())
    loss, stats = s.loss(model, x, y, Tn, gen)
    tau = (Tn + torch.randint(-w, w + 1, (B,), generator=replay)).clamp(1, T_max)
    want = torch.stack([ce_by_hand(own[tau[i] - 1], y, i) for i in range(B)]).mean()
    assert abs(loss.item() - want.item()) < 1e-6, (active, loss.item(), want.item())
    assert abs(stats["depth"] - tau.float().mean().item()) < 1e-9 and len(set(tau.tolist())) > 2
print("window loss = CE at the sampled depth", round(loss.item(), 4))

# 2) the learned heads pool over the real-token mask: any embedding works, and the pool ignores pads
for name in ("rl", "ponder", "act", "trm_halt"):
    s = halting.make_schedule(name, T_max=T_max, d_model=D, pad_id=0)
    opt = torch.optim.AdamW([*model.parameters(), *s.parameters()], lr=1e-2)
    loss, _ = s.loss(model, x, y, Tn, torch.Generator().manual_seed(1), mask=mask)
    opt.zero_grad(); loss.backward(); opt.step()
    assert s.head.weight.grad.abs().max() > 0, name
    _, hidden = model(x, 8, keep_hidden=True)
    K = s.policy(Tn, 8, hidden=hidden, mask=mask)
    assert K.shape == (B,) and 1 <= K.min() and K.max() <= 8, name
    moved = hidden.clone(); moved[:, 0, 4:] += 100.0  # change the padded positions only
    assert torch.equal(s.policy(Tn, 8, hidden=moved, mask=mask), K), name
print("learned heads ok")

# 3) maximum-confidence stopping = a direct implementation of its rule
n = torch.tensor([3] * 6 + [5] * 6)
sets = {3: (x[:6], y[:6], n[:6], Tn[:6]), 5: (x[6:], y[6:], n[6:], Tn[6:])}
data = readouts.collect(model, halting.make_schedule("matched", T_max=T_max), sets, 8, pad_id=None)
logits = model(x, 8)  # (8, B, T, V)
self_ce = [[-logits[t, i][y[i] != -100].log_softmax(-1).max(-1).values.mean().item() for i in range(B)]
           for t in range(8)]  # self_ce[t][i]: mean over scored positions of -log max_v p
for group in (range(0, 6), range(6, 12)):  # per batch (one length): the step of least mean self-CE
    mean = [sum(self_ce[t][i] for i in group) / len(group) for t in range(8)]
    best = min(range(8), key=lambda t: mean[t]) + 1
    assert readouts.max_conf_batch(data["signals"]["self_ce"], data["n"])[list(group)].tolist() == [best] * 6
per_sample = [min(range(8), key=lambda t: self_ce[t][i]) + 1 for i in range(B)]
assert readouts.max_conf_sample(data["signals"]["self_ce"]).tolist() == per_sample
# early exit runs the model's own loop (from zeros): a sample's answer is the trajectory's at its exit step
pred, depth = readouts.early_exit(model, x, y != -100, mask, "top1", 0.5, 8)
assert torch.equal(pred, readouts.answer(logits, y != -100)[depth - 1, torch.arange(B)])
print("max confidence ok", data["signals"]["self_ce"].shape)
"""


def test_a_model_built_the_other_way_round(tmp_path):
    for name in ("halting.py", "readouts.py"):
        shutil.copy(os.path.join(ROOT, name), tmp_path / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", OTHER_WAY], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "max confidence ok" in r.stdout


# --- the contract's checks: one message naming the argument ---------------------------------------------

@pytest.mark.smoke
def test_wrong_arguments_fail_with_one_line_naming_them():
    import numpy as np
    import torch
    import halting
    import readouts
    x, y = torch.randint(1, 6, (4, 5)), torch.randint(1, 6, (4, 5))
    Tn, gen = torch.tensor([1, 2, 3, 4]), torch.Generator()
    s = halting.make_schedule("matched", T_max=6)
    cases = {"Tn: shape (4, 1), dtype torch.int64, device cpu; expected (B,) = (4,) integer": (x, y, Tn[:, None], gen),
             "Tn: shape (4,), dtype torch.float32, device cpu; expected (B,) = (4,) integer": (x, y, Tn.float(), gen),
             "Tn: a numpy.ndarray; expected (B,) = (4,) integer": (x, y, np.arange(1, 5), gen),
             "gen: None; expected a torch.Generator": (x, y, Tn, None),
             "y: shape (4, 1)": (x, y[:, :1], Tn, gen)}
    for msg, args in cases.items():
        with pytest.raises(ValueError) as err:
            s.loss(halting_model(), *args)
        assert str(err.value).startswith(msg) and "\n" not in str(err.value), str(err.value)
    onehot = torch.nn.functional.one_hot(x, 6).float()
    with pytest.raises(ValueError, match=r"^x: shape \(4, 5, 6\), dtype torch.float32.*pass mask="):
        halting.make_schedule("rl", T_max=6, d_model=8, pad_id=0).loss(halting_model(onehot=True), onehot, y, Tn, gen)
    with pytest.raises(ValueError, match=r"^Tn: shape \(4, 1\).*expected \(B,\) integer"):
        s.policy(Tn[:, None], 8)
    with pytest.raises(ValueError, match=r"^mask: shape \(4, 5, 6\)"):
        halting.make_schedule("act", T_max=6, d_model=8).policy(Tn, 8, hidden=torch.zeros(9, 4, 5, 8), mask=onehot > 0)
    with pytest.raises(ValueError, match=r"^groups: shape \(4, 1\).*expected \(B,\) = \(4,\) integer"):
        readouts.max_conf_batch(torch.rand(3, 4), Tn[:, None])
    with pytest.raises(ValueError, match=r"^scored: shape \(4, 5, 1\)"):
        readouts.trajectory_signals(torch.randn(3, 4, 5, 6), torch.randn(4, 4, 5, 8), (y != 0)[..., None])


def halting_model(onehot=False):
    import torch
    import torch.nn as nn

    class Loop(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Linear(6, 8) if onehot else nn.Embedding(6, 8)
            self.out = nn.Linear(8, 6)

        def embed(self, x):
            return self.emb(x)

        def step(self, h, h0, t):
            return torch.tanh(h + h0)

        def readout(self, h):
            return self.out(h)
    return Loop()
