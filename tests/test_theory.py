"""Tests of theory_checks.py: the checks pass on tiny settings, hand-computed cases, and wrong bounds
are caught as violated (so the checker can fail)."""

import os
import subprocess
import sys

import pytest
import torch

import theory_checks as tc
from model import LoopedTransformer, ModelConfig
from halting import per_sample_ce


# --- check 1: gradient residual bound ---------------------------------------------------------------

def test_residual_hand_case():
    # xi = G (Gbar = 0): ||xi||^2 = 1, 1, 2 -> B^2 = 2; <e1,e2> = 0, <e1,(1,1)> = <e2,(1,1)> = 1 -> rho = 1/2
    G = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    (row,) = tc.residual_rows(G, torch.zeros(2), [[0, 1, 2]])
    assert row["B^2"] == pytest.approx(2.0) and row["rho"] == pytest.approx(0.5)
    assert row["||G_pi-Gbar||^2"] == pytest.approx(8 / 9)  # mean (2/3, 2/3)
    assert row["bound"] == pytest.approx(2 * (0.5 + 0.5 / 3))
    assert row["ok"]


def test_synthetic_equality_and_wrong_bound_caught():
    gen = torch.Generator().manual_seed(0)
    G, Gbar = tc.synthetic_gradients(7, 50, B=1.5, rho=0.3, gen=gen, exact=True)
    rows = tc.residual_rows(G, Gbar, [list(range(m)) for m in (1, 3, 7)])
    for r in rows:  # the construction attains the bound exactly
        assert r["B^2"] == pytest.approx(2.25) and r["ok"]
        assert r["||G_pi-Gbar||^2"] == pytest.approx(2.25 * (0.3 + 0.7 / r["m"]), rel=1e-9)
    # dropping rho (B^2/m) is violated as soon as two depths share a component
    wrong = tc.residual_rows(G, Gbar, [list(range(m)) for m in (1, 3, 7)], bound=lambda B2, rho, m: B2 / m)
    assert [r["ok"] for r in wrong] == [True, False, False]
    assert tc.exit_status(wrong) == 1 and tc.exit_status(rows) == 0


def test_random_synthetic_bound_holds_and_mean_over_window_is_trivial():
    gen = torch.Generator().manual_seed(1)
    G, Gbar = tc.synthetic_gradients(11, 30, B=1.0, rho=0.2, gen=gen, exact=False)
    assert all(r["ok"] for r in tc.residual_rows(G, Gbar, [list(range(m)) for m in (1, 2, 5, 11)]))
    # Gbar = mean over S itself: the left side is 0 (why the check uses a wider reference range)
    (row,) = tc.residual_rows(G[:5], G[:5].mean(0), [list(range(5))])
    assert row["||G_pi-Gbar||^2"] < 1e-20


def test_centered_windows():
    assert tc.centered_windows(10, [1, 3], 20) == [[9], [8, 9, 10]]
    with pytest.raises(ValueError, match="m=11"):
        tc.centered_windows(3, [11], 20)


def tiny_model(vocab=3, T=6):
    torch.manual_seed(0)
    return LoopedTransformer(ModelConfig(vocab_size=vocab, d_model=8, n_head=2, n_layer=1, n_loops=T))


def test_per_depth_gradients_match_direct_backward():
    model = tiny_model()
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(1, 3, (4, 5), generator=gen)
    y = torch.randint(1, 3, (4, 5), generator=gen)
    G = tc.per_depth_gradients(model, x, y, 4)  # (4, P)
    for k in (1, 4):  # reference: a separate run to depth k, loss at its last step
        model.zero_grad()
        per_sample_ce(model(x, k)[-1], y).mean().backward()
        ref = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double()
        assert torch.allclose(G[k - 1], ref, atol=1e-6)
    rows = tc.residual_rows(G, G.mean(0), tc.centered_windows(2, [1, 3], 4))
    assert all(r["ok"] for r in rows)


# --- check 2: representation consistency -------------------------------------------------------------

def test_spread_hand_case():
    H = torch.tensor([[[0.0, 0.0]], [[2.0, 0.0]]])  # m=2, N=1: (1/4)(0 + 4 + 4 + 0) = 2
    assert tc.spread(H).tolist() == [2.0]


def test_toy_consistency_passes_and_constructed_case_is_tight():
    rows = tc.toy_consistency(steps=20, N=32)
    assert all(r["ok"] for r in rows)
    assert rows[1]["eps=J_S"] < rows[0]["eps=J_S"]  # training lowered the window loss
    tight = rows[-1]
    assert tight["E spread"] == pytest.approx(tight["4eps/mu"], rel=1e-9)


def test_wrong_consistency_constant_is_caught():
    rows = tc.toy_consistency(steps=0, N=32, const=2.0)
    assert rows[-1]["ok"] is False and tc.exit_status(rows) == 1


def test_consistency_row_mu_is_twice_sigma_min_squared():
    W = torch.diag(torch.tensor([3.0, 0.5]))
    Z = torch.zeros(1, 2)
    H = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])  # L = 9 and 0.25 -> eps = 4.625; spread = (1/4)*2*2 = 1
    r = tc.consistency_row("hand", H, Z, W)
    assert r["mu"] == pytest.approx(0.5) and r["eps=J_S"] == pytest.approx(4.625)
    assert r["E spread"] == pytest.approx(1.0) and r["8eps/mu"] == pytest.approx(74.0) and r["ok"]


# --- check 3: REINFORCE ----------------------------------------------------------------------------

needs_rl = pytest.mark.skipif(tc.rl_functions() is None, reason="halting.py has no rl functions")


@needs_rl
def test_reinforce_unbiased():
    assert all(r["ok"] for r in tc.reinforce_rows(n_samples=20000))


@needs_rl
def test_biased_estimator_is_caught():
    # grad of pi(tau) in place of grad of log pi(tau): E[(R - b) grad pi_tau] != grad J
    def biased(logp_tau, reward, baseline):
        return -((reward - baseline).detach() * logp_tau.exp()).mean()

    rows = tc.reinforce_rows(n_samples=20000, reinforce_loss=biased)
    assert tc.exit_status(rows) == 1


# --- the script ----------------------------------------------------------------------------------------

def test_main_exit_status():
    assert tc.main(["--checks", "1a,2a", "--toy_steps", "5"]) == 0
    assert tc.main(["--checks", "2a", "--toy_steps", "5", "--consistency_const", "2"]) == 1


def test_script_exit_codes():
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "theory_checks.py")
    run = lambda *a: subprocess.run([sys.executable, script, *a], capture_output=True, text=True)
    bad = run("--checks", "2a", "--toy_steps", "0", "--consistency_const", "2")
    assert bad.returncode == 1 and "VIOLATED" in bad.stdout
    typo = run("--checks", "7")
    assert typo.returncode == 2 and "--checks" in typo.stderr


def test_main_real_model_tiny():
    argv = ["--checks", "1b,2b", "--steps", "3", "--d_model", "8", "--n_head", "2", "--n_layer", "1",
            "--batch_size", "4", "--T_max", "12", "--n", "6", "--n_max", "8", "--ms", "1,3,5"]
    assert tc.main(argv) == 0


def test_ckpt_of_train_py_is_loaded(tmp_path):
    import dataclasses
    import evaluate
    import train

    cfg = dataclasses.asdict(train.Config(d_model=8, n_head=2, n_layer=1))
    _, model, _ = evaluate.build(cfg)
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "config": cfg}, path)
    task, loaded, fresh = tc.load_ckpt(str(path), 0)
    assert task.name == cfg["task"]
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))
    argv = ["--checks", "1b", "--ckpt", str(path), "--batch_size", "4", "--T_max", "12", "--n", "6", "--ms", "1,3"]
    assert tc.main(argv) == 0
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="not a train.py checkpoint"):
        tc.load_ckpt(str(tmp_path / "junk.pt"), 0)


def test_bad_input():
    with pytest.raises(ValueError, match="--checks"):
        tc.parse_args(["--checks", "1a,9"])
    with pytest.raises(ValueError, match="--n 30"):
        tc.parse_args(["--n", "30"])
    with pytest.raises(ValueError, match="--ms"):
        tc.parse_args(["--ms", "1,x"])
    with pytest.raises(ValueError, match="--ckpt"):
        tc.load_ckpt("/nonexistent/ckpt.pt", 0)
