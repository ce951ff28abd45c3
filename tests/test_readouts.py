"""Readouts on hand-built trajectories whose correct exit step is known; threshold choice on validation
only; maximum confidence per batch vs per sample; D@X; frozen-trajectory gates; early exit."""

import math

import pytest
import torch

from model import LoopedTransformer, ModelConfig
import readouts

SURE0, SURE1 = [10.0, 0.0, 0.0], [0.0, 10.0, 0.0]  # p(top) ~ 0.9999
UNSURE = [0.0, 0.0, 1.0]  # argmax 2, p(top) = e / (e + 2) ~ 0.576


def hand_trajectory():
    """K = 4 steps, B = 2 samples, T = 3 positions (the last one unscored), V = 3.

    sample 0: step 1 both scored positions unsure; step 2 position 0 sure; step 3 both sure; step 4 = step 3.
    sample 1: sure at both positions from step 1 on (its logits never change).
    The unscored position changes wildly at every step: a readout that looked at it would never stop.
    """
    s0 = [[UNSURE, UNSURE], [SURE0, UNSURE], [SURE0, SURE1], [SURE0, SURE1]]
    s1 = [[SURE0, SURE1]] * 4
    noise = torch.randn(4, 2, 1, 3, generator=torch.Generator().manual_seed(0)) * 5
    logits = torch.cat([torch.tensor([s0, s1]).transpose(0, 1), noise], 2)  # (K, B, T, V)
    scored = torch.tensor([[True, True, False]] * 2)
    # hidden states (K+1, B, T, D): sample 0 settles after step 3, sample 1 after step 1
    h0 = torch.tensor([1.0, 2.0, 4.0, 4.01, 4.01]).view(5, 1, 1, 1).expand(5, 1, 3, 2)
    h1 = torch.tensor([1.0, 4.0, 4.0, 4.0, 4.0]).view(5, 1, 1, 1).expand(5, 1, 3, 2)
    hidden = torch.cat([h0, h1], 1).clone()
    hidden[:, :, 2] = torch.randn(5, 2, 2, generator=torch.Generator().manual_seed(1))  # unscored: noise
    return logits, hidden, scored


def exit_of(name, threshold, sig):
    s = readouts.score(name, sig[name])
    return readouts.exit_depths(s, readouts.score(name, torch.tensor([threshold])))[0].tolist()


@pytest.mark.smoke
@pytest.mark.parametrize("name, threshold, expected", [
    ("top1", 0.9, [3, 1]),           # min over scored positions: position 1 is unsure until step 3
    ("margin", 5.0, [3, 1]),
    ("entropy", 0.01, [3, 1]),
    ("kl", 1e-6, [4, 2]),            # step 4 = step 3 for sample 0; step 1 never (nothing to compare)
    ("logit_change", 1e-6, [4, 2]),
    ("hidden_change", 0.01, [3, 2]),  # ||H_3 - H_2|| / ||H_2|| = 0.0025; sample 1: H_2 = H_1
    ("stable", 1, [4, 2]),           # sample 0's answer changes at steps 2 and 3, unchanged at 4
    ("stable", 2, [4, 3]),           # m = 2 never happens for sample 0: the last step
])
def test_each_readout_exits_at_the_known_step(name, threshold, expected):
    logits, hidden, scored = hand_trajectory()
    sig = readouts.trajectory_signals(logits, hidden, scored)
    assert exit_of(name, threshold, sig) == expected


@pytest.mark.smoke
def test_signal_values_by_hand():
    logits, hidden, scored = hand_trajectory()
    sig = readouts.trajectory_signals(logits, hidden, scored)
    p = torch.tensor(UNSURE).softmax(0)
    assert sig["top1"][0, 0].item() == pytest.approx(p.max().item())
    assert sig["entropy"][0, 0].item() == pytest.approx(-(p * p.log()).sum().item())
    assert sig["margin"][0, 0].item() == pytest.approx(1.0)
    assert sig["self_ce"][0, 0].item() == pytest.approx(-math.log(p.max().item()))
    assert math.isinf(sig["kl"][0, 0]) and math.isinf(sig["logit_change"][0, 1])
    assert sig["stable"][:, 0].tolist() == [0, 0, 0, 1]


@pytest.mark.smoke
def test_threshold_chosen_on_validation_only():
    """Val and test disagree on the best threshold: the chosen one is val's, reported with test's numbers."""
    K = 2
    scores = torch.tensor([[1.0, 1.0], [2.0, 2.0]])  # (K, B): threshold 0.5 exits at 1, 1.5 exits at 2
    val_correct = torch.tensor([[False, False], [True, True]])  # val: only depth 2 is right
    test_correct = torch.tensor([[True, True], [False, False]])  # test: only depth 1 is right
    thr = torch.tensor([0.5, 1.5])
    r = readouts.sweep(scores, val_correct, scores, test_correct, thr, torch.tensor([7, 7]))
    assert r["curve"]["test_acc"] == [1.0, 0.0]  # the test curve would pick 0.5
    assert r["chosen"]["threshold"] == 1.5 and r["chosen"]["test_acc"] == 0.0 and r["chosen"]["test_depth"] == K
    assert r["d_at"]["90"]["threshold"] == 1.5 and r["d_at"]["90"]["test_acc"] == 0.0
    # changing the test split changes nothing that is chosen
    r2 = readouts.sweep(scores, val_correct, scores, ~test_correct, thr, torch.tensor([7, 7]))
    assert r2["chosen"]["threshold"] == 1.5 and r2["d_at"]["90"]["threshold"] == 1.5
    # quantile thresholds come from the validation scores alone
    assert readouts.quantile_thresholds(scores, 3).tolist() == [1.0, 1.5, 2.0]


def test_all_readouts_thresholds_do_not_depend_on_test():
    g = torch.Generator().manual_seed(0)

    def split(K=5, B=40):
        sig = {k: torch.rand(K, B, generator=g) for k in list(readouts.SIGNALS) + ["self_ce"]}
        sig["stable"] = torch.randint(0, 4, (K, B), generator=g).float()
        return {"signals": sig, "correct": torch.rand(K, B, generator=g) > 0.5, "n": torch.randint(1, 4, (B,), generator=g),
                "Tn": torch.full((B,), 3), "policy": torch.full((B,), 3)}

    val, test_a, test_b = split(), split(), split()
    ra, rb = readouts.all_readouts(val, test_a), readouts.all_readouts(val, test_b)
    for name in list(readouts.SIGNALS) + ["stable", "fixed"]:
        assert ra[name]["curve"]["threshold"] == rb[name]["curve"]["threshold"]
        assert ra[name]["chosen"]["threshold"] == rb[name]["chosen"]["threshold"]
        i = readouts.select(ra[name]["curve"]["val_acc"], ra[name]["curve"]["val_depth"])
        assert ra[name]["chosen"]["test_acc"] == ra[name]["curve"]["test_acc"][i]


def test_max_confidence_per_batch_and_per_sample_differ():
    self_ce = torch.tensor([[0.1, 1.0], [1.0, 0.5], [1.0, 0.0]])  # (K=3, B=2); batch means 0.55, 0.75, 0.5
    one_batch = torch.tensor([0, 0])
    assert readouts.max_conf_batch(self_ce, one_batch).tolist() == [3, 3]
    assert readouts.max_conf_sample(self_ce).tolist() == [1, 3]
    # each group (test length) is its own batch
    assert readouts.max_conf_batch(self_ce, torch.tensor([0, 1])).tolist() == [1, 3]


@pytest.mark.smoke
def test_d_at_x_on_a_constructed_curve():
    acc = [0.5, 0.92, 0.96, 0.99, 0.995, 0.97]
    depth = [2.0, 4.0, 6.0, 8.0, 10.0, 5.0]
    pick = lambda x: depth[readouts.d_at_x(acc, depth, x)]  # noqa: E731
    assert pick(90) == 4.0 and pick(95) == 5.0 and pick(99) == 8.0
    assert readouts.d_at_x(acc, depth, 99.9) is None


def test_exit_distribution_and_prior():
    e = torch.tensor([[0.5], [0.5], [0.9]])  # (K=3, B=1): the last hazard is unused
    q = readouts.exit_distribution(e)
    assert q[:, 0].tolist() == pytest.approx([0.5, 0.25, 0.25])
    p = readouts.truncated_geometric(0.5, 3)
    assert p.tolist() == pytest.approx([4 / 7, 2 / 7, 1 / 7])


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_fitted_gate_learns_the_only_good_step(kind):
    """Features reveal the step (one-hot); the loss is 0 only at step 3: the gate must exit at 3."""
    K, B = 5, 8
    pooled = torch.eye(K).unsqueeze(1).expand(K, B, K) + 0.01 * torch.randn(K, B, K, generator=torch.Generator().manual_seed(0))
    losses = torch.ones(K, B)
    losses[2] = 0.0
    gate = readouts.fit_gate(kind, pooled, losses, steps=300, lr=0.05, beta=0.0)
    d = readouts.exit_depths(readouts.gate_scores(gate, pooled), torch.tensor([0.5]))
    assert d.tolist() == [[3] * B]


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return LoopedTransformer(ModelConfig(vocab_size=5, d_model=16, n_head=2, n_layer=1)).eval()


def threshold_between(s: torch.Tensor) -> float:
    """A threshold in the middle of the widest gap between distinct finite scores: online and offline scores
    may differ in the last bits (another batch, another kernel), so a threshold on or next to a score would
    make the test depend on the CPU and the thread count. The gap must dwarf float32 rounding."""
    v = s[torch.isfinite(s)].double().unique()  # sorted
    i = max(range(1, len(v)), key=lambda j: v[j] - v[j - 1])
    assert v[i] - v[i - 1] > max(1e-6, 1e-5 * v.abs().max().item())
    return ((v[i] + v[i - 1]) / 2).item()


def test_early_exit_matches_the_full_trajectory_and_drops_rows():
    """Online early exit (rows leave the batch) = offline exit on the full trajectory, for every readout;
    the block runs only on active rows: sum over steps of batch sizes = sum of exit depths."""
    model, K = tiny_model(), 6
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, 5, (12, 7), generator=g)
    x[:4, 5:] = 0  # some right padding
    scored = torch.rand(12, 7, generator=g) > 0.3
    scored &= x != 0
    with torch.no_grad():
        logits, hidden = model(x, K, keep_hidden=True)
    sig = readouts.trajectory_signals(logits, hidden, scored)
    pooled = readouts.pool(hidden[1:], x != 0)
    gate = readouts.fit_gate("linear", pooled, torch.rand(K, 12, generator=g), steps=20)
    sizes, step = [], model.step
    model.step = lambda h, h0, t: sizes.append(len(h)) or step(h, h0, t)
    names = list(readouts.SIGNALS) + ["stable", "gate"]
    for name in names:
        s = readouts.gate_scores(gate, pooled) if name == "gate" else readouts.score(name, sig[name])
        thr = threshold_between(s)
        offline = readouts.exit_depths(s, torch.tensor([thr]))[0]
        sizes.clear()
        pred, d = readouts.early_exit(model, x, scored, x != 0, name, thr, K, gate if name == "gate" else None)
        assert d.tolist() == offline.tolist(), name
        assert sum(sizes) == d.sum().item(), name
        assert torch.equal(pred, readouts.answer(logits, scored)[d - 1, torch.arange(12)]), name
