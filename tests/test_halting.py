"""Tests of the stop schedules (halting.py): hand-computed cases, independent reference computations and
invariants, on tiny models (d_model 16, one layer)."""

import json
import math

import pytest
import torch

import halting
from halting import (
    act_weights,
    entropy,
    kl_divergence,
    log_stop_distribution,
    make_schedule,
    per_sample_ce,
    reinforce_loss,
    sample_stop,
    stop_distribution,
    truncated_geometric,
)
from model import LoopedTransformer, ModelConfig
from tasks import PAD, get_task, make_batch, train_batch

TASK = get_task("dyck")


def tiny_model(seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    return LoopedTransformer(ModelConfig(vocab_size=len(TASK.vocab), d_model=16, n_head=2, n_layer=1)).to(dtype)


def batch(B=12, seed=0, n_max=19):
    return train_batch(TASK, B, 1, n_max, torch.Generator().manual_seed(seed))


def grads(params):
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]


# --- the stop distribution and its pieces ---------------------------------------------------------

@pytest.mark.smoke
def test_stop_distribution_hand_case():
    # r = (0.5, 0.2): pi(1) = 0.5, pi(2) = 0.2 * 0.5 = 0.1, pi(3) = remaining = 0.5 * 0.8 = 0.4
    pi = stop_distribution(torch.tensor([0.5, 0.2], dtype=torch.float64))
    assert torch.allclose(pi, torch.tensor([0.5, 0.1, 0.4], dtype=torch.float64))
    logits = torch.logit(torch.tensor([0.5, 0.2], dtype=torch.float64))
    assert torch.allclose(log_stop_distribution(logits).exp(), pi)


@pytest.mark.smoke
def test_stop_distribution_sums_to_one_with_remaining_mass_last():
    r = torch.rand(5, 19, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    pi = stop_distribution(r)  # (5, 20)
    assert pi.shape == (5, 20)
    assert torch.allclose(pi.sum(-1), torch.ones(5, dtype=torch.float64))
    assert torch.allclose(pi[:, -1], (1 - r).prod(-1))  # the last step holds prod_{i<T_max} (1 - r_i)
    # a hazard of 1 at step 3 puts all the mass there
    r[:, 2] = 1.0
    assert torch.allclose(stop_distribution(r)[:, 3:].sum(-1), torch.zeros(5, dtype=torch.float64))


@pytest.mark.smoke
def test_entropy_against_direct_computation():
    log_pi = log_stop_distribution(torch.randn(3, 9, generator=torch.Generator().manual_seed(1)).double())
    direct = [-sum(p * math.log(p) for p in row) for row in log_pi.exp().tolist()]
    assert torch.allclose(entropy(log_pi), torch.tensor(direct, dtype=torch.float64))
    uniform = torch.full((4,), math.log(1 / 4), dtype=torch.float64)
    assert entropy(uniform).item() == pytest.approx(math.log(4))


@pytest.mark.smoke
def test_kl_nonnegative_zero_at_prior_and_direction():
    log_p = truncated_geometric(0.3, 10).double().log()
    log_q = log_stop_distribution(torch.randn(100, 9, generator=torch.Generator().manual_seed(2)).double())
    assert (kl_divergence(log_q, log_p) >= 0).all()
    assert kl_divergence(log_p, log_p).abs().item() < 1e-12
    # KL(q || p) with q = (0.9, 0.1), p = (0.5, 0.5): 0.9 ln 1.8 + 0.1 ln 0.2 = 0.36806 (KL(p || q) = 0.51083)
    q, p = torch.tensor([0.9, 0.1]).double().log(), torch.tensor([0.5, 0.5]).double().log()
    assert kl_divergence(q, p).item() == pytest.approx(0.9 * math.log(1.8) + 0.1 * math.log(0.2))
    assert kl_divergence(q, p).item() == pytest.approx(0.36806, abs=1e-5)


@pytest.mark.smoke
def test_truncated_geometric_sums_to_one():
    p = truncated_geometric(0.3, 20).double()
    assert p.sum().item() == pytest.approx(1.0, abs=1e-6)
    assert torch.allclose(p[1:] / p[:-1], torch.full((19,), 0.7, dtype=torch.float64), atol=1e-6)
    # p(1) = lam / (1 - (1 - lam)^K)
    assert p[0].item() == pytest.approx(0.3 / (1 - 0.7 ** 20), rel=1e-6)
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError):
            truncated_geometric(bad, 20)


def test_sample_stop_follows_pi():
    a = torch.tensor([[-1.0, 0.5, -0.3]], dtype=torch.float64)  # K = 4
    u = torch.rand(200_000, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    tau = sample_stop(a.expand(len(u), 3), u)
    freq = torch.bincount(tau, minlength=5)[1:].double() / len(u)
    assert torch.allclose(freq, log_stop_distribution(a)[0].exp(), atol=5e-3)


def test_reinforce_estimate_matches_exact_gradient():
    """Mean of the REINFORCE surrogate's gradient over many taus = exact gradient of -E_tau[R], the
    expectation computed by enumerating every tau (K = 4, two inputs, a linear head)."""
    g = torch.Generator().manual_seed(4)
    feats = torch.randn(2, 3, 5, dtype=torch.float64, generator=g)  # (inputs, K-1 steps, features)
    R = torch.randn(2, 4, dtype=torch.float64, generator=g)  # reward of every (input, tau)
    head = torch.nn.Linear(5, 1).double()

    def log_pi():
        return log_stop_distribution(head(feats).squeeze(-1))  # (2, 4)

    exact = torch.autograd.grad(-(log_pi().exp() * R).sum(1).mean(), list(head.parameters()))
    N = 100_000
    idx = torch.arange(2).repeat(N)  # each input N times
    lp = log_pi()
    tau = sample_stop(head(feats).squeeze(-1).detach()[idx], torch.rand(2 * N, dtype=torch.float64, generator=g))
    reward = R[idx, tau - 1]
    for b in (0.0, 0.7):  # a baseline changes the variance, not the mean
        surrogate = reinforce_loss(lp[idx, tau - 1], reward, b)
        est = torch.autograd.grad(surrogate, list(head.parameters()), retain_graph=True)
        for e, x in zip(est, exact):
            assert torch.allclose(e, x, atol=0.02), (b, e, x)
    assert max(x.abs().max().item() for x in exact) > 0.05  # the check is not vacuous


# --- the hand-made schedules: window coverage and the active set ----------------------------------

@pytest.mark.parametrize("name", ["window", "fixed_window"])
def test_window_depths_within_clipped_window_and_cover_it(name):
    s = make_schedule(name, c=20, w=5, T_max=20) if name == "fixed_window" else make_schedule(name, w=5, T_max=20)
    Tn = torch.tensor([1, 3, 10, 19, 25]).repeat(400)
    K = s.train_depth(Tn, torch.Generator().manual_seed(5))
    centre = Tn if name == "window" else torch.full_like(Tn, 20)
    for c in centre.unique().tolist():
        got = set(K[centre == c].tolist())
        assert got == set(range(max(1, c - 5), min(20, c + 5) + 1)), (c, got)


def test_window_depth_floor_k_min_clips_training_and_test_depths_from_below():
    """K = clip(T(n) + D, k_min, T_max) in training, clip(T(n), k_min, T_test) at test; k_min = 1 is the plain window
    draw for draw (the same generator state gives the same depths)."""
    Tn = torch.tensor([1, 3, 10, 19, 25]).repeat(400)
    floor = make_schedule("window", w=5, k_min=10, T_max=20).train_depth(Tn, torch.Generator().manual_seed(5))
    for t in Tn.unique().tolist():
        got = set(floor[Tn == t].tolist())
        assert got == {min(20, max(10, t + d)) for d in range(-5, 6)}, (t, got)
    plain = make_schedule("window", w=5, T_max=20).train_depth(Tn, torch.Generator().manual_seed(5))
    one = make_schedule("window", w=5, k_min=1, T_max=20).train_depth(Tn, torch.Generator().manual_seed(5))
    assert torch.equal(plain, one) and torch.equal(floor, plain.clamp(min=10))
    assert make_schedule("window", k_min=10).policy(torch.tensor([1, 12, 40]), 30).tolist() == [10, 12, 30]
    for bad in (0, 21, 2.5, True):
        with pytest.raises(ValueError, match="k_min"):
            make_schedule("window", k_min=bad, T_max=20)


def test_hand_made_policies_clip_to_T_test():
    Tn = torch.tensor([1, 19, 40])
    assert make_schedule("fixed", c=20).policy(Tn, 30).tolist() == [20] * 3
    assert make_schedule("fixed_window", c=20).policy(Tn, 15).tolist() == [15] * 3
    for name in ("matched", "window", "multidepth"):
        assert make_schedule(name).policy(Tn, 30).tolist() == [1, 19, 30]


@pytest.mark.smoke
@pytest.mark.parametrize("name", ["fixed", "matched", "window", "fixed_window", "rl"])
def test_active_set_equals_unroll_to_max_and_gather(name):
    x, y, _, Tn = batch(10, seed=6)
    out = []
    for active in (True, False):
        model = tiny_model()
        knobs = dict(c=12, w=5, T_max=12, active_set=active, d_model=16, pad_id=PAD)
        s = make_schedule(name, **{k: v for k, v in knobs.items() if k in halting.settings(name)}).double()
        loss, stats = s.loss(model, x, y, Tn, torch.Generator().manual_seed(7))
        loss.backward()
        out.append((loss, grads(list(model.parameters()) + list(s.parameters())), stats))
    (la, ga, sa), (lr, gr, sr) = out
    assert torch.allclose(la, lr, atol=1e-10)
    assert sa["depth"] == sr["depth"]  # same sampled depths
    for a, b in zip(ga, gr):
        assert torch.allclose(a, b, atol=1e-9)
    assert sa["block_evals"] <= sr["block_evals"]


def test_rl_block_evals_count_the_no_grad_steps():
    x, y, _, Tn = batch(10, seed=8)
    s = make_schedule("rl", T_max=12, d_model=16, pad_id=PAD).double()
    model = tiny_model()
    ce, halt, stats = s.terms(model, x, y, Tn, torch.Generator().manual_seed(9))
    g = torch.Generator().manual_seed(9)
    u = torch.rand(10, generator=g)
    with torch.no_grad():
        _, hidden = model(x, 12, keep_hidden=True)
    tau = sample_stop(s.trajectory_logits(hidden, x != PAD, 12), u)
    # each sample: tau steps with gradient, then no-grad steps up to T_max - 1 for the entropy
    assert stats["depth"] == pytest.approx(tau.double().mean().item())
    assert stats["block_evals_grad"] == pytest.approx(tau.double().mean().item())
    assert stats["block_evals"] == pytest.approx(tau.clamp(min=11).double().mean().item())


# --- RL-Halting --------------------------------------------------------------------------------------

@pytest.mark.parametrize("active", [True, False])
def test_rl_gradients_are_separated(active):
    x, y, _, Tn = batch(8, seed=10)
    model = tiny_model()
    s = make_schedule("rl", T_max=10, active_set=active, d_model=16, pad_id=PAD).double()
    s.baseline.fill_(-0.3)
    ce, halt, _ = s.terms(model, x, y, Tn, torch.Generator().manual_seed(11))
    g_halt = torch.autograd.grad(halt, list(model.parameters()), retain_graph=True, allow_unused=True)
    assert all(g is None or g.abs().max() == 0 for g in g_halt)  # L_halt -> no gradient into the transformer
    g_ce = torch.autograd.grad(ce, list(s.parameters()), retain_graph=True, allow_unused=True)
    assert all(g is None or g.abs().max() == 0 for g in g_ce)  # CE -> no gradient into the halting head
    g_head = torch.autograd.grad(halt, list(s.parameters()), retain_graph=True)
    assert any(g.abs().max() > 0 for g in g_head)
    g_model = torch.autograd.grad(ce, list(model.parameters()), allow_unused=True)
    assert any(g is not None and g.abs().max() > 0 for g in g_model)


def test_rl_baseline_update_and_loss_value():
    x, y, _, Tn = batch(8, seed=12)
    model = tiny_model()
    s = make_schedule("rl", T_max=10, d_model=16, pad_id=PAD, lambda_ent=0.05).double()
    s.baseline.fill_(0.5)
    ce, halt, stats = s.terms(model, x, y, Tn, torch.Generator().manual_seed(13))
    # b <- 0.9 b + 0.1 mean(R), R = -CE at tau
    assert s.baseline.item() == pytest.approx(0.9 * 0.5 + 0.1 * (-ce.item()))
    assert "baseline" in s.state_dict()  # checkpointed with the schedule
    # L_halt uses the old b: recompute it from the reference trajectory with the same draws
    u = torch.rand(8, generator=torch.Generator().manual_seed(13))
    logits, hidden = model(x, 10, keep_hidden=True)
    a = s.trajectory_logits(hidden, x != PAD, 10)
    tau = sample_stop(a, u)
    R = -per_sample_ce(logits[tau - 1, torch.arange(8)], y)
    log_pi = log_stop_distribution(a)
    want = (-(R - 0.5) * log_pi[torch.arange(8), tau - 1]).mean() - 0.05 * entropy(log_pi).mean()
    assert halt.item() == pytest.approx(want.item(), rel=1e-9)


def test_rl_policy_uses_hazards_up_to_T_test_minus_1():
    s = make_schedule("rl", T_max=6, d_model=16).double()
    with torch.no_grad():
        s.head.weight.zero_(), s.head.bias.zero_()
        s.head.weight[0, 0] = 1.0  # a_t = mean of feature 0 over real tokens
    T_test, B, T = 8, 3, 5
    hidden = torch.zeros(T_test + 1, B, T, 16, dtype=torch.float64)
    hidden[..., 0] = -30.0  # r_t ~ 0 everywhere ...
    hidden[T_test - 1, :, :, 0] = 30.0  # ... except at step T_test - 1: pi(T_test - 1) ~ 1
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, 3:] = False
    hidden[T_test - 1, 0, 3:, 0] = -1000.0  # pads do not count in the pooled state
    assert s.policy(None, T_test, hidden=hidden, mask=mask).tolist() == [T_test - 1] * B
    hidden[T_test - 1, :, :, 0] = -30.0
    assert s.policy(None, T_test, hidden=hidden, mask=mask).tolist() == [T_test] * B  # remaining mass
    hidden[T_test, :, :, 0] = 30.0  # the hazard at step T_test is never used
    assert s.policy(None, T_test, hidden=hidden, mask=mask).tolist() == [T_test] * B
    hidden[2, :, :, 0] = 30.0  # step 2
    assert s.policy(None, T_test, hidden=hidden, mask=mask).tolist() == [2] * B


# --- PonderNet, multidepth, fixed prior, ACT -------------------------------------------------------------

def test_ponder_loss_and_policies():
    x, y, _, Tn = batch(6, seed=14)
    model = tiny_model()
    s = make_schedule("ponder", T_max=8, d_model=16, pad_id=PAD, beta=0.3, lambda_p=0.25).double()
    loss, stats = s.loss(model, x, y, Tn, torch.Generator())
    logits, hidden = model(x, 8, keep_hidden=True)
    q = stop_distribution(torch.sigmoid(s.head(halting.pool(hidden[1:8], x != PAD)).squeeze(-1).T))  # (B, 8)
    p = truncated_geometric(0.25, 8).double()
    want = (q * per_sample_ce(logits, y).T).sum(1) + 0.3 * (q * (q / p).log()).sum(1)
    assert loss.item() == pytest.approx(want.mean().item(), rel=1e-7)  # the prior is stored in float32
    assert stats["block_evals"] == 8
    assert stats["depth"] == pytest.approx((q * torch.arange(1, 9)).sum(1).mean().item())
    h = hidden.detach().requires_grad_()  # the head is not detached: gradient reaches the states
    s.trajectory_logits(h, x != PAD, 8).sum().backward()
    assert h.grad.abs().max() > 0
    # test rules on a hand case: hazards (0.2, 0.5, 0.5) -> q = (0.2, 0.4, 0.2, 0.2), cumulative 0.2, 0.6, ...
    with torch.no_grad():
        s.head.weight.zero_(), s.head.bias.zero_()
        s.head.weight[0, 0] = 1.0
    hid = torch.zeros(5, 1, 2, 16, dtype=torch.float64)
    hid[1:4, :, :, 0] = torch.logit(torch.tensor([0.2, 0.5, 0.5], dtype=torch.float64)).view(3, 1, 1)
    mask = torch.ones(1, 2, dtype=torch.bool)
    assert s.policy(None, 4, hidden=hid, mask=mask).tolist() == [2]  # first cumulative q >= 0.5
    s.rule = "argmax"
    assert s.policy(None, 4, hidden=hid, mask=mask).tolist() == [2]  # argmax q = step 2 (0.4)
    s.rule, s.alpha = "alpha", 0.9
    assert s.policy(None, 4, hidden=hid, mask=mask).tolist() == [4]


def test_multidepth_is_the_mean_of_single_depth_losses():
    x, y, _, _ = make_batch(TASK, [1, 2, 9, 17, 19], torch.Generator().manual_seed(15))
    Tn = torch.tensor([1, 2, 9, 17, 19])
    model = tiny_model()
    s = make_schedule("multidepth", w=5, T_max=20)
    loss, stats = s.loss(model, x, y, Tn, torch.Generator())
    windows = [range(1, 7), range(1, 8), range(4, 15), range(12, 21), range(14, 21)]  # clipped, each depth once
    want = []
    for i, S in enumerate(windows):  # each sample alone: l_k for k in its window, averaged
        l = per_sample_ce(model(x[i:i + 1], S[-1]), y[i:i + 1])[:, 0]  # (S[-1],)
        want.append(sum(l[k - 1].item() for k in S) / len(S))
    assert loss.item() == pytest.approx(sum(want) / len(want), rel=1e-9)
    assert stats["block_evals"] == 20
    assert stats["depth"] == pytest.approx(sum((S[0] + S[-1]) / 2 for S in windows) / 5)
    assert s.policy(Tn, 18).tolist() == [1, 2, 9, 17, 18]


@pytest.mark.parametrize("prior", ["uniform", "geometric"])
def test_fixed_prior_weights(prior):
    x, y, _, Tn = batch(6, seed=16)
    model = tiny_model()
    s = make_schedule("fixed_prior", T_max=6, prior=prior, lambda_p=0.3).double()
    loss, stats = s.loss(model, x, y, Tn, torch.Generator())
    l = per_sample_ce(model(x, 6), y).mean(1)  # (6,) mean loss of every depth
    pi = torch.full((6,), 1 / 6) if prior == "uniform" else 0.3 * 0.7 ** torch.arange(6.0) / (1 - 0.7 ** 6)
    assert loss.item() == pytest.approx((pi.double() * l).sum().item(), rel=1e-6)
    assert stats["depth"] == pytest.approx((pi * torch.arange(1, 7)).sum().item(), rel=1e-6)
    assert s.policy(Tn, 30).tolist() == [6] * 6 and s.policy(Tn, 4).tolist() == [4] * 6
    with pytest.raises(ValueError, match="prior"):
        make_schedule("fixed_prior", prior="poisson")


@pytest.mark.smoke
def test_act_weights_hand_cases():
    halt = torch.tensor([[0.3, 0.5, 0.4], [0.1, 0.1, 0.1], [0.995, 0.2, 0.2]], dtype=torch.float64)
    N, R, p = act_weights(halt, eps=0.01)
    assert N.tolist() == [3, 4, 1]  # 0.3 + 0.5 + 0.4 >= 0.99 at 3; never: cap K = 4; 0.995 at once
    assert torch.allclose(R, torch.tensor([0.2, 0.7, 1.0], dtype=torch.float64))
    want = torch.tensor([[0.3, 0.5, 0.2, 0], [0.1, 0.1, 0.1, 0.7], [1, 0, 0, 0]], dtype=torch.float64)
    assert torch.allclose(p, want)


def test_act_loss_is_mean_field_ce_plus_ponder_cost():
    x, y, _, Tn = batch(6, seed=17)
    model = tiny_model()
    s = make_schedule("act", T_max=6, d_model=16, pad_id=PAD, tau_act=0.1).double()
    loss, stats = s.loss(model, x, y, Tn, torch.Generator())
    logits, hidden = model(x, 6, keep_hidden=True)
    N, R, p = act_weights(torch.sigmoid(s.trajectory_logits(hidden, x != PAD, 6)), 0.01)
    mixed = sum(p[:, k, None, None] * logits[k] for k in range(6))
    assert loss.item() == pytest.approx((per_sample_ce(mixed, y) + 0.1 * (N + R)).mean().item(), rel=1e-9)
    with torch.no_grad():
        s.head.weight.zero_(), s.head.bias.fill_(-30.0)  # never halts: ACT caps at T_test
    assert s.policy(Tn, 9, hidden=model(x, 9, keep_hidden=True)[1], mask=x != PAD).tolist() == [9] * 6


@pytest.mark.smoke
def test_make_schedule_refuses_unknown_or_misspelt_knobs_and_bad_values():
    s = make_schedule("rl", d_model=16, lambda_ent=0.01)
    assert s.lambda_ent == 0.01
    with pytest.raises(ValueError, match="lamda_ent"):  # a misspelt knob is an error, not silently ignored
        make_schedule("rl", d_model=16, lamda_ent=0.5)
    with pytest.raises(ValueError, match="w"):  # a knob of another schedule too
        make_schedule("fixed", w=3)
    with pytest.raises(TypeError):  # a halting head has no hidden default width
        make_schedule("rl")
    for name, kw in [("rl", dict(lambda_ent=-1)), ("ponder", dict(alpha=0)), ("ponder", dict(lambda_p=1.5)),
                     ("ponder", dict(ponder_rule="max")), ("act", dict(tau_act=-0.1)), ("nope", {}),
                     ("fixed", dict(c=21, T_max=20))]:
        with pytest.raises(ValueError):
            make_schedule(name, **({"d_model": 16} if name in ("rl", "ponder", "act") else {}), **kw)


def test_a_knob_without_a_declared_kind_is_refused_and_every_knob_is_declared(monkeypatch):
    """Issue 69 (an extender's trip): a new knob got no kind check unless its author found the tables, so
    shift=1.5 gave depths 5.5. Now make_schedule refuses a schedule whose knob is in none of halting.py's tables,
    and every shipped knob is in one (so every value given is checked)."""
    class Shifted(halting.Window):
        name = "shifted"

        def __init__(self, *, shift: int = 0, **base):
            super().__init__(**base)
            self.shift = shift
    monkeypatch.setitem(halting.SCHEDULES, "shifted", Shifted)
    with pytest.raises(ValueError, match="setting shift has no declared kind"):
        make_schedule("shifted", shift=1)
    monkeypatch.setitem(halting.AT_LEAST, "shift", 0)
    with pytest.raises(ValueError, match=r"shift=1.5: expected an int >= 0"):
        make_schedule("shifted", shift=1.5)
    assert make_schedule("shifted", shift=2).shift == 2
    for name in halting.SCHEDULES:
        if name != "shifted":
            make_schedule(name, **({"d_model": 8} if "d_model" in halting.settings(name) else {}))


def test_make_schedule_checks_every_argument_on_entry():
    # each bad value fails in make_schedule itself, with one line naming the argument and what is allowed
    cases = [("window", dict(w=1.5), "w=1.5: expected an int >= 0"), ("window", dict(w=math.inf), "w=inf"),
             ("window", dict(T_max=2.5), "T_max=2.5: expected an int >= 1"),
             ("rl", dict(d_model=-3), "d_model=-3: expected an int >= 1"),
             ("fixed", dict(c=2.5), "c=2.5: expected an int >= 1"), ("window", dict(w=True), "w=True"),
             ("rl", dict(d_model=16, lambda_ent=math.inf), "lambda_ent=inf: expected a finite number"),
             ("window", dict(active_set=1), "active_set=1: expected True or False"),
             ("rl", dict(d_model=16, pad_id="0"), "pad_id='0'")]
    for name, kw, msg in cases:
        with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace("+", r"\+")):
            make_schedule(name, **kw)
    x, y, _, Tn = batch(B=4)
    with pytest.raises(ValueError, match=r"x: shape \(0, .*B >= 1"):  # an empty batch is named, not a later IndexError
        make_schedule("window").loss(tiny_model(), x[:0], y[:0], Tn[:0], torch.Generator())


# --- a tiny real run ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_rl_learns_dyck(tmp_path):
    import train
    from lab import rundir
    cfg = train.parse_args(["--task", "dyck", "--schedule", "rl", "--max_iters", "500", "--d_model", "32",
                            "--n_layer", "2", "--lr", "1e-3", "--warmup_iters", "50", "--T_max", "10",
                            "--T_test", "10", "--n_max", "10", "--test_lengths", "4,7,10", "--eval_samples", "64",
                            "--log_interval", "100", "--eval_interval", "500", "--ckpt_interval", "500"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is as fast, and far faster on a shared CPU
    try:
        train.train_run(cfg, rundir.Run(cfg, str(tmp_path)), "cpu")
    finally:
        torch.set_num_threads(threads)
    e = json.loads((tmp_path / "eval.json").read_text())
    assert e["metrics"]["policy_id"] >= 90


# --- beyond the papers: lognormal_poisson, truncated backpropagation, trm_halt -----------------------

@pytest.mark.parametrize("r_per", ["sample", "batch"])
def test_lognormal_poisson_moments(r_per):
    """r = 1 + Poisson(exp(tau)), tau ~ N(log r_bar - sigma^2/2, sigma): E[r] = 1 + r_bar and
    Var[r] = r_bar + r_bar^2 (exp(sigma^2) - 1) (Poisson variance plus the variance of the rate)."""
    s = make_schedule("lognormal_poisson", r_bar=10, sigma=0.5, r_per=r_per, T_max=10_000)
    g = torch.Generator().manual_seed(21)
    if r_per == "sample":
        r = s.train_depth(torch.zeros(200_000, dtype=torch.long), g).double()
    else:  # one depth per batch: every sample of a batch shares it
        draws = [s.train_depth(torch.zeros(4, dtype=torch.long), g) for _ in range(40_000)]
        assert all(len(set(d.tolist())) == 1 for d in draws[:100])
        r = torch.stack([d[0] for d in draws]).double()
    var = 10 + 100 * (math.exp(0.25) - 1)
    se_mean, se_var = math.sqrt(var / len(r)), var * math.sqrt(2 / len(r)) * 3  # generous for the heavy tail
    assert abs(r.mean().item() - 11) < 5 * se_mean and abs(r.var().item() - var) < 5 * se_var
    clipped = make_schedule("lognormal_poisson", r_bar=10, T_max=12, r_per="sample").train_depth(torch.zeros(500, dtype=torch.long), g)
    assert clipped.min() >= 1 and clipped.max() == 12  # clipped to T_max
    assert make_schedule("lognormal_poisson", r_bar=7).policy(torch.tensor([3, 40]), 30).tolist() == [7, 7]


class GainLoop(torch.nn.Module):
    """A looped model with a parameter per step (gain[t]): its gradient says which steps were backpropagated."""

    def __init__(self, V=6, D=8, T=12):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Parameter(torch.randn(V, D, generator=g))
        self.mix = torch.nn.Parameter(torch.randn(D, D, generator=g) / D ** 0.5)
        self.out = torch.nn.Parameter(torch.randn(D, V, generator=g))
        self.gain = torch.nn.Parameter(torch.ones(T))

    def embed(self, x):
        return self.emb[x]

    def step(self, h, h0, t):
        return torch.tanh((h + h0) @ self.mix) * self.gain[t - 1]

    def readout(self, h):
        return h @ self.out


@pytest.mark.parametrize("name", ["fixed", "window", "lognormal_poisson"])
def test_truncated_backprop_zero_gradient_to_early_steps_same_loss(name):
    x, y, _, Tn = batch(10, seed=22, n_max=10)
    losses, grads_ = [], []
    for k in (0, 3):
        model = GainLoop()
        knobs = dict(c=8, w=3, r_bar=7, T_max=12, bptt_k=k)
        s = make_schedule(name, **{a: b for a, b in knobs.items() if a in halting.settings(name)})
        loss, stats = s.loss(model, x, y, Tn, torch.Generator().manual_seed(23))
        loss.backward()
        losses.append(loss.item())
        grads_.append(model.gain.grad.clone())
    tau = s.train_depth(Tn, torch.Generator().manual_seed(23)).tolist()  # the depths both runs drew
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)  # the forward is the same
    for t in range(1, 13):  # step t gets gradient iff it is among the last 3 steps of some sample
        backprop = any(d - 3 < t <= d for d in tau)
        assert (grads_[1][t - 1] != 0).item() == backprop, (t, tau)
        if not any(t <= d for d in tau):
            assert grads_[0][t - 1] == 0
    assert (grads_[0][: min(tau)] != 0).all()  # full backpropagation reaches every step run


def test_truncated_backprop_refused_where_the_depth_is_sampled_during_the_forward():
    for name in ("rl", "ponder", "act", "trm_halt"):
        with pytest.raises(ValueError, match="bptt_k"):
            make_schedule(name, d_model=16, bptt_k=2)


def trm_reference(s, model, x, y, m):
    """trm_halt's loss, sample by sample, without an active set: the independent reference."""
    terms = []
    for i in range(len(x)):
        xi, yi = x[i:i + 1], y[i:i + 1]
        h0 = h = model.embed(xi)
        for step in range(1, s.T_max // m + 1):
            h = h.detach()
            for j in range(m):
                h = model.step(h, h0, (step - 1) * m + j + 1)
            logits = model.readout(h)
            right = ((logits.argmax(-1) == yi) | (yi == -100)).all(-1).double()
            a = s.head(halting.pool(h, xi != PAD)).squeeze(-1)
            terms.append(per_sample_ce(logits, yi) + torch.nn.functional.binary_cross_entropy_with_logits(a, right))
            if a.item() > 0:
                break
    return torch.cat(terms).mean()


@pytest.mark.parametrize("m", [1, 3])
def test_trm_halt_loss_matches_a_per_sample_reference(m):
    x, y, _, Tn = batch(6, seed=24, n_max=8)
    model = tiny_model()
    s = make_schedule("trm_halt", T_max=9, d_model=16, pad_id=PAD, trm_steps=m).double()
    with torch.no_grad():  # some samples halt early, others run to T_max
        s.head.bias.fill_(0.0)
        s.head.weight.normal_(0, 3.0, generator=torch.Generator().manual_seed(25))
    loss, stats = s.loss(model, x, y, Tn, torch.Generator())
    assert loss.item() == pytest.approx(trm_reference(s, model, x, y, m).item(), rel=1e-9)
    assert 1 <= stats["depth"] <= 9 and stats["block_evals"] <= 9
    loss.backward()
    assert s.head.weight.grad.abs().max() > 0  # the halting head learns from the BCE


def test_trm_halt_exit_rule_hand_case():
    s = make_schedule("trm_halt", T_max=6, d_model=16, pad_id=PAD, trm_steps=2).double()
    with torch.no_grad():
        s.head.weight.zero_(), s.head.bias.zero_()
        s.head.weight[0, 0] = 1.0  # a_t = mean of feature 0 over real tokens
    hidden = torch.full((9, 3, 4, 16), -1.0, dtype=torch.float64)  # steps 0..8; a < 0: no halt
    hidden[4, 0, :, 0] = 2.0  # sample 0 halts at step 4 (the 2nd supervision step)
    hidden[3, 1, :, 0] = 2.0  # sample 1: step 3 is not a supervision step (m = 2): ignored ...
    hidden[6, 1, :, 0] = 2.0  # ... it halts at step 6
    mask = torch.ones(3, 4, dtype=torch.bool)
    assert s.policy(None, 8, hidden=hidden, mask=mask).tolist() == [4, 6, 8]  # sample 2 never: T_test


def test_a_setting_a_schedule_declares_unread_changes_nothing_bitwise():
    """H / S33 (issue 71): ponder, act and trm_halt took active_set through their base class and never read it
    (--no-active_set trained bitwise the plain run; evaluate.py then split one experiment into two rows). Each
    schedule now declares what its loss and policy never read (`unread`, which train.py refuses as flags): here
    flipping such a setting changes no loss, statistic or gradient bit, so the declaration is true; and every
    other schedule taking active_set reads it somewhere (a reference path).
    Failed before its fix: AttributeError: type object 'Fixed' has no attribute 'unread'."""
    import config
    x, y, _, Tn = batch(B=12, seed=3)
    for name, cls in halting.SCHEDULES.items():
        if "active_set" not in halting.settings(name):
            continue
        out = []
        for active in (True, False):
            cfg = config.Config(schedule=name, d_model=16, n_head=2, n_layer=1, T_max=6, T_test=8, active_set=active)
            _, model, schedule = config.build(cfg)
            loss, stats = schedule.loss(model, x, y, Tn, torch.Generator().manual_seed(5))
            loss.backward()
            params = list(model.parameters()) + list(schedule.parameters())
            out.append((loss.detach(), stats, [p.grad.clone() if p.grad is not None else None for p in params]))
        (l1, s1, g1), (l2, s2, g2) = out
        same = torch.equal(l1, l2) and s1 == s2 and all(
            (a is None and b is None) or torch.equal(a, b) for a, b in zip(g1, g2))
        if "active_set" in cls.unread:
            assert same, name
        else:  # read: its class (or a base it calls) refers to the setting
            import inspect
            src = "".join(inspect.getsource(c) for c in cls.__mro__ if c.__module__ == "halting")
            assert "self.active_set" in src, name
    assert {n for n, c in halting.SCHEDULES.items() if "active_set" in c.unread} == {"ponder", "act", "trm_halt"}
