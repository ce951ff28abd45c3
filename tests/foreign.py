"""Another project's looped model, as a stranger copying halting.py or readouts.py brings it: embed / step /
readout only (no forward_depths, no keep_hidden), H_t = tanh(W (H_{t-1} + H_0)). SOURCE is its text, which the
copy-alone tests (test_portability.py) run in a folder of their own; ForeignLoop is that same text run here."""

SOURCE = '''
import torch
import torch.nn as nn


class ForeignLoop(nn.Module):  # another project's looped model: embed / step / readout only
    def __init__(self, V=6, D=8, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb, self.mix, self.out = nn.Embedding(V, D), nn.Linear(D, D), nn.Linear(D, V)

    def embed(self, x):
        return self.emb(x)

    def step(self, h, h0, t):
        return torch.tanh(self.mix(h + h0))

    def readout(self, h):
        return self.out(h)
'''

exec(SOURCE)  # defines ForeignLoop here, from the one text
