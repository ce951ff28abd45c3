"""model.py, tasks.py, halting.py and readouts.py each work when copied alone into another project:
each is copied into an empty folder and used there by a script that cannot import anything else of ours.
halting.py is driven by a minimal looped model defined here (not model.py): embed / step / readout."""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY_LOOP = """
import torch, torch.nn as nn
torch.manual_seed(0)

class TinyLoop(nn.Module):  # another project's looped model: no forward_depths, no keep_hidden
    def __init__(self, V=6, D=8):
        super().__init__()
        self.emb, self.mix, self.out = nn.Embedding(V, D), nn.Linear(D, D), nn.Linear(D, V)
    def embed(self, x):
        return self.emb(x)
    def step(self, h, h0, t):
        return torch.tanh(self.mix(h + h0))
    def readout(self, h):
        return self.out(h)

x = torch.randint(1, 6, (5, 7)); x[0, 4:] = 0  # token 0 pads the first sample
y = torch.randint(1, 6, (5, 7)); y[:, :2] = -100
Tn = torch.tensor([1, 2, 3, 5, 6])
"""

SCRIPTS = {
    "halting.py": TINY_LOOP + """
import halting
knobs = dict(c=4, w=1, T_max=6, d_model=8, pad_id=0, lambda_ent=0.01, active_set=True)
for name in halting.SCHEDULES:
    model = TinyLoop()
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
