"""Fidelity to the anchors' own code (issue 36): weight EMA, Fan's token weighting, TRM's halting as its code
runs it, Huginn's KL exit and truncation, Ouro's exit objective and gate. Each test fails without its change."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import config
from foreign import ForeignLoop
from halting import IGNORE, entropy, log_stop_distribution, make_schedule, per_sample_ce, unroll
import metrics
import readouts
import train
from lab import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--task", "copy", "--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8",
        "--eval_samples", "8", "--test_lengths", "5,12", "--log_interval", "5", "--eval_interval", "10",
        "--ckpt_interval", "10", "--max_iters", "20", "--threads", "1"]


def batch(B=6, T=5, V=5):
    g = torch.Generator().manual_seed(1)
    x = torch.randint(1, V, (B, T), generator=g)
    y = torch.randint(0, V, (B, T), generator=g)
    y[:, 0] = IGNORE
    y[: B // 2, 1:3] = IGNORE  # answers of different lengths: the two weightings differ
    return x, y, torch.full((B,), 3)


# --- 1. weight EMA ----------------------------------------------------------------------------------

@pytest.mark.smoke
def test_ema_of_a_known_sequence_by_hand():
    model, head = torch.nn.Linear(1, 1, bias=False), torch.nn.Module()
    ema = config.EMA(SimpleNamespace(ema=0.5, ema_start=1), model, head)
    with torch.no_grad():
        for step, v in enumerate((9.0, 1.0, 2.0, 4.0)):
            model.weight.fill_(v)
            ema.after(step)  # step 0: before the start (nothing); step 1: the copy; then it follows
    # 1 -> 0.5 * 1 + 0.5 * 2 = 1.5 -> 0.5 * 1.5 + 0.5 * 4 = 2.75
    assert abs(ema.weights["model"]["weight"].item() - 2.75) < 1e-6
    assert config.EMA(SimpleNamespace(ema=0.0, ema_start=0), model, head).weights is None  # --ema 0: off


def test_ema_start_is_the_curriculums_end():
    c = config.Config(curriculum=True, curriculum_start=2, n_max=10, curriculum_every=50)
    assert config.ema_start_step(c) == 400  # the step where curriculum_n_max reaches n_max
    assert config.ema_start_step(config.Config()) == 0 and config.ema_start_step(config.Config(ema_start=7)) == 7


def test_ema_leaves_training_alone_is_evaluated_and_resumes_bitwise(tmp_path, monkeypatch):
    train.main(TINY + ["--out_dir", str(tmp_path / "raw")])
    scored, real_eval = [], metrics.evaluate  # the weights each evaluation of the EMA run scores

    def spy(model, *args, **kw):
        scored.append({k: p.detach().clone() for k, p in model.named_parameters()})
        return real_eval(model, *args, **kw)

    monkeypatch.setattr(metrics, "evaluate", spy)
    train.main(TINY + ["--out_dir", str(tmp_path / "a"), "--ema", "0.9", "--ema_start", "5"])
    monkeypatch.setattr(metrics, "evaluate", real_eval)
    raw, a = (torch.load(tmp_path / d / "ckpt.pt", weights_only=True) for d in ("raw", "a"))
    assert len(scored) == 2  # raw_metrics on the raw weights, then metrics on the EMA weights
    for weights, want in zip(scored, (a["model"], a["ema"]["model"])):
        assert all(torch.equal(p, want[k]) for k, p in weights.items())
    assert raw["ema"] is None and all(torch.equal(v, a["model"][k]) for k, v in raw["model"].items())
    assert not all(torch.equal(a["ema"]["model"][k], v) for k, v in a["model"].items())  # the average differs
    ea = json.load(open(tmp_path / "a" / "eval.json"))
    er = json.load(open(tmp_path / "raw" / "eval.json"))
    assert ea["weights"] == "ema" and er["weights"] == "raw" and "raw_metrics" not in er
    assert ea["raw_metrics"] == er["metrics"]  # the EMA run scores its raw weights too: the same weights, the same scores
    _, _, model, _ = records.load_run(str(tmp_path / "a"))  # readouts see the weights eval.json scored
    assert all(torch.equal(p, a["ema"]["model"][k]) for k, p in model.named_parameters())
    # crash after the checkpoint at step 10, resume: the same weights and the same EMA, bit for bit
    calls, real = {"n": 0}, train.train_batch

    def crashing(*args, **kw):
        calls["n"] += 1
        if calls["n"] == 14:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(train, "train_batch", crashing)
    with pytest.raises(KeyboardInterrupt):
        train.main(TINY + ["--out_dir", str(tmp_path / "b"), "--ema", "0.9", "--ema_start", "5"])
    monkeypatch.setattr(train, "train_batch", real)
    assert torch.load(tmp_path / "b" / "ckpt.pt", weights_only=True)["step"] == 10
    train.main(TINY + ["--out_dir", str(tmp_path / "b"), "--ema", "0.9", "--ema_start", "5", "--resume"])
    b = torch.load(tmp_path / "b" / "ckpt.pt", weights_only=True)
    for part in ("model", "schedule"):
        assert all(torch.equal(v, b["ema"][part][k]) for k, v in a["ema"][part].items())
    assert json.load(open(tmp_path / "b" / "eval.json"))["acc"] == ea["acc"]


# --- 2. Fan's loss weighting -------------------------------------------------------------------------

@pytest.mark.smoke
def test_token_weighting_is_one_cross_entropy_over_the_batchs_answer_tokens():
    model, (x, y, Tn) = ForeignLoop(V=5), batch()
    gen = lambda: torch.Generator().manual_seed(0)
    tok, _ = make_schedule("matched", T_max=4, loss_weight="token").loss(model, x, y, Tn, gen())
    smp, _ = make_schedule("matched", T_max=4).loss(model, x, y, Tn, gen())
    logits = unroll(model, x, 3)[0][-1]  # every sample at depth 3
    fan = F.cross_entropy(logits[y != IGNORE], y[y != IGNORE])  # Fan et al.: nn.CrossEntropyLoss on mask == 1
    assert torch.allclose(tok, fan, atol=1e-6)
    assert torch.allclose(smp, per_sample_ce(logits, y).mean(), atol=1e-6) and abs(smp - tok) > 1e-3
    with pytest.raises(ValueError, match="loss_weight"):
        make_schedule("rl", T_max=4, d_model=8, loss_weight="token")


# --- 3. TRM ------------------------------------------------------------------------------------------

def trm(**kw):
    return make_schedule("trm_halt", T_max=8, d_model=8, **kw)


def test_trm_supervision_steps_bce_weight_and_exploration():
    model, (x, y, Tn) = ForeignLoop(V=5), batch()
    s = trm(trm_steps=2, trm_sup=3)
    torch.nn.init.constant_(s.head.bias, -30.0)  # never halts: every sample runs all N_sup steps
    _, st = s.loss(model, x, y, Tn, torch.Generator())
    assert st["block_evals"] == 6 and s.full_depth == 6  # N_sup * trm_steps, not T_max
    # BCE weight: the loss is CE + w * BCE per (sample, step)
    l0, st0 = trm(trm_bce=0.0).loss(model, x, y, Tn, torch.Generator())
    assert abs(l0.item() - st0["loss"]) < 1e-5
    l5, st5 = trm(trm_bce=0.5).loss(model, x, y, Tn, torch.Generator())
    assert abs(l5.item() - (st5["loss"] + 0.5 * st5["halt_loss"])) < 1e-5
    # exploration: a head that halts at once halts at step 1 without it, later with it (probability 1)
    halts = trm(trm_sup=8)
    torch.nn.init.constant_(halts.head.bias, 30.0)
    assert halts.loss(model, x, y, Tn, torch.Generator().manual_seed(0))[1]["depth"] == 1
    halts.halt_explore = 1.0
    assert halts.loss(model, x, y, Tn, torch.Generator().manual_seed(0))[1]["depth"] > 1
    with pytest.raises(ValueError, match="trm_sup"):
        trm(trm_steps=3, trm_sup=3)  # 9 > T_max


def test_trm_head_positions():
    h, mask = torch.randn(4, 3, 5, 8), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]).bool()
    assert torch.equal(trm(trm_head="first").summary(h, mask), h[:, :, 0])
    last = trm(trm_head="last").summary(h, mask)
    assert torch.equal(last[:, 0], h[:, 0, 2]) and torch.equal(last[:, 1], h[:, 1, 4]) and torch.equal(last[:, 2], h[:, 2, 0])


def test_trm_eval_reports_the_full_depth_protocol(tmp_path):
    train.main(TINY + ["--out_dir", str(tmp_path), "--schedule", "trm_halt", "--trm_steps", "2", "--trm_sup", "4"])
    e = json.load(open(tmp_path / "eval.json"))
    full = [a[7] for a in e["acc"]]  # K = N_sup * trm_steps = 8
    assert e["full_depth"] == 8 and e["metrics"]["full_depth_acc"] == full
    assert "full depth" in metrics.format_run(e)


# --- 4. Huginn ---------------------------------------------------------------------------------------

@pytest.mark.smoke
def test_kl_huginn_is_kl_of_the_previous_step_against_the_current():
    g = torch.Generator().manual_seed(0)
    logits, scored = torch.randn(3, 2, 4, 6, generator=g), torch.ones(2, 4, dtype=torch.bool)
    p, q = logits[1].softmax(-1), logits[0].softmax(-1)  # current, previous
    want = (q * (q.log() - p.log())).sum(-1).amax(-1)  # KL(p_{t-1} || p_t), worst position
    got = readouts.trajectory_signals(logits, torch.randn(4, 2, 4, 5, generator=g), scored)
    assert torch.allclose(got["kl_huginn"][1], want, atol=1e-6)
    assert not torch.allclose(got["kl"][1], want, atol=1e-4)  # our kl is the other direction
    u = torch.full((6,), 1 / 6)  # step 1 against the uniform distribution, as Huginn's loop starts
    p1 = logits[0].softmax(-1)
    assert torch.allclose(got["kl_huginn"][0], (u * (u.log() - p1.log())).sum(-1).amax(-1), atol=1e-6)


def test_huginn_fixed_thresholds_and_head_cdf_are_readouts():
    K, B = 4, 6
    sig = {name: torch.rand(K, B) for name in list(readouts.SIGNALS) + ["stable", "self_ce"]}
    sig["kl_huginn"] = torch.tensor([[1.0] * B, [2e-3] * B, [7e-4] * B, [1e-4] * B])
    split = {"signals": sig, "correct": torch.ones(K, B, dtype=torch.bool), "n": torch.arange(B), "Tn": torch.full((B,), 2),
             "policy": torch.full((B,), 2), "head_cdf": torch.linspace(0.1, 1, K).unsqueeze(1).expand(K, B)}
    out = readouts.all_readouts(split, split)
    assert out["kl_huginn@0.001"]["chosen"]["test_depth"] == 3 and out["kl_huginn@0.0005"]["chosen"]["test_depth"] == 4
    assert out["head_cdf"]["kind"] == "alpha"


def test_paper_preset_truncates_lognormal_poisson_as_huginn_and_r_bar_above_T_max_is_refused():
    c = train.parse_args(["--preset", "paper", "--schedule", "lognormal_poisson", "--r_bar", "32", "--T_max", "64",
                          "--T_test", "64"])
    assert c.bptt_k == 8  # Huginn: 8 of 32
    assert train.parse_args(["--preset", "paper", "--schedule", "lognormal_poisson"]).bptt_k == 3  # ceil(10 / 4)
    assert train.parse_args(["--preset", "paper"]).bptt_k == 0  # only lognormal_poisson
    r = subprocess.run([sys.executable, "train.py", "--schedule", "lognormal_poisson", "--r_bar", "25"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "r_bar" in r.stderr and "T_max" in r.stderr


# --- 5. Ouro -----------------------------------------------------------------------------------------

def test_ponder_uniform_prior_is_expected_loss_minus_beta_entropy():
    model, (x, y, Tn) = ForeignLoop(V=5), batch()
    s = make_schedule("ponder", T_max=5, d_model=8, beta=0.1, prior="uniform")
    loss, st = s.loss(model, x, y, Tn, torch.Generator())
    logits, hidden = unroll(model, x, 5)
    log_q = log_stop_distribution(s.trajectory_logits(hidden, s.real(x), 5))
    task = (log_q.exp() * per_sample_ce(logits, y).T).sum(1).mean()
    assert torch.allclose(loss, task - 0.1 * entropy(log_q).mean(), atol=1e-6)
    geo, _ = make_schedule("ponder", T_max=5, d_model=8, beta=0.1).loss(model, x, y, Tn, torch.Generator())
    assert abs(geo.item() - loss.item()) > 1e-4  # the geometric prior (PonderNet) is another objective


def test_ouro_gate_learns_where_the_loss_stops_improving():
    K, B, D = 6, 64, 4
    g = torch.Generator().manual_seed(0)
    stop = torch.randint(2, 5, (B,), generator=g)  # the step after which the loss stops falling
    t = torch.arange(1, K + 1).unsqueeze(1)
    losses = torch.where(t <= stop, 1.0 - 0.2 * t, 1.0 - 0.2 * stop).float()  # (K, B)
    pooled = torch.randn(K, B, D, generator=g) * 0.1
    pooled[..., 0] = (t >= stop).float()  # a feature that says "no more improvement"
    gate = readouts.fit_gate("ouro", pooled, losses, steps=300)
    q = readouts.gate_scores(gate, pooled)  # cumulative exit probability
    d = readouts.exit_depths(q, torch.tensor([0.5]))[0]
    assert (d == stop).float().mean() > 0.9
