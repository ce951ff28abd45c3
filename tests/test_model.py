"""The looped model: trajectory, padding, causality, injection, vanilla baseline."""

import pytest
import torch

from model import LoopedTransformer, ModelConfig

pytestmark = pytest.mark.smoke  # every test here is quick: all in the smoke tier


def tiny(**kw):
    torch.manual_seed(0)
    return LoopedTransformer(ModelConfig(vocab_size=6, d_model=16, n_head=2, n_layer=1, **kw)).eval()


def test_trajectory_matches_manual_loop():
    m = tiny()
    x = torch.randint(1, 6, (3, 7))
    logits, hidden = m(x, 4, keep_hidden=True)
    assert logits.shape == (4, 3, 7, 6) and hidden.shape == (5, 3, 7, 16)
    h0 = m.embed_tokens(x)
    h = h0
    for t in range(4):  # H_t = Block(H_{t-1} + H_0), read out at every step
        h = m.blocks[0](h + h0)
        torch.testing.assert_close(hidden[t + 1], h)
        torch.testing.assert_close(logits[t], m.head(m.ln_f(h)))


def test_padding_invariance():
    m = tiny()
    a = torch.randint(1, 6, (1, 5))
    long = torch.randint(1, 6, (1, 9))
    batch = torch.cat([torch.cat([a, torch.zeros(1, 4, dtype=torch.long)], 1), long])  # right-padded
    alone = m(a, 6)
    together = m(batch, 6)
    torch.testing.assert_close(together[:, :1, :5], alone, atol=1e-5, rtol=1e-5)


def test_causality():
    m = tiny()
    x = torch.randint(1, 6, (2, 8))
    y = x.clone()
    y[:, 5:] = torch.randint(1, 6, (2, 3))  # change the future only
    torch.testing.assert_close(m(x, 5)[:, :, :5], m(y, 5)[:, :, :5])
    assert not torch.allclose(m(x, 5)[:, :, 5:], m(y, 5)[:, :, 5:])


def test_injection_changes_the_trajectory():
    on, off = tiny(inject=True), tiny(inject=False)
    off.load_state_dict(on.state_dict())  # same weights, only the loop differs
    x = torch.randint(1, 6, (2, 6))
    l_on, l_off = on(x, 3), off(x, 3)
    assert not torch.allclose(l_on[1:], l_off[1:])
    # without injection: H_1 = Block(H_0); with it: H_1 = Block(2 H_0)
    h0 = on.embed_tokens(x)
    torch.testing.assert_close(l_off[0], off.head(off.ln_f(off.blocks[0](h0))))


def test_forward_depths_reads_each_sample_at_its_depth():
    m = tiny()
    x = torch.randint(1, 6, (5, 7))
    depth = torch.tensor([3, 1, 4, 3, 2])
    traj = m(x, 4)
    got = m.forward_depths(x, depth)
    torch.testing.assert_close(got, traj[depth - 1, torch.arange(5)], atol=1e-5, rtol=1e-5)


def test_vanilla_uses_distinct_blocks():
    m = tiny(looped=False, n_loops=3)
    assert len(m.blocks) == 3
    x = torch.randint(1, 6, (2, 5))
    logits, hidden = m(x, 3, keep_hidden=True)
    h0 = m.embed_tokens(x)
    h = m.blocks[0](h0 + h0)
    h = m.blocks[1](h + h0)
    torch.testing.assert_close(hidden[2], h)
