"""Tests of theory_checks.py: hand-computed cases, the checks pass on tiny settings, and every class of
bug the checks exist to catch is caught. Checks 1a, 1b and 2a hold by construction, so a test must show
that each can still fail; the bug classes and the tests that catch them:

    B1  a residual bound that is too small (e.g. the rho term dropped)   test_equality_construction_...
    B2  B^2 or rho measured wrongly (a mean for the max, the diagonal)   test_residual_hand_case
    B3  per-depth gradients taken at the wrong depth                     test_per_depth_gradients_...
    B4  the spread normalised by m(m-1) instead of m^2                   test_constructed_row_is_an_equality
    B5  a wrong PL constant mu (factor 2 lost, sigma_max for sigma_min)  test_constructed_row_..., test_mu_...
    B6  a readout W without full column rank accepted (no mu exists)    test_rank_deficient_readout_refused
    B7  a biased REINFORCE estimator (a 10% bias, or grad pi for grad log pi)   test_biased_..._caught
    B8  a sampler that draws tau from another distribution than pi      test_wrong_sampler_is_caught
    B9  a check 3 that cannot fail (its tolerance lost)                 test_biased_..., test_wrong_sampler_...

B1-B6 live in theory_checks.py: injected there, each makes its test fail. B7 and B8 live in halting.py:
injected there, test_reinforce_unbiased fails (and `--checks 3` exits 1); the tests named above pass a
wrong estimator or sampler in, so they fail if check 3 stops catching them (B9).
"""

import json
import os
import subprocess
import sys

import pytest
import torch

import halting
import theory_checks as tc
from halting import per_sample_ce
from model import LoopedTransformer, ModelConfig
from lab import cli
from lab.cli import run

from conftest import nan_copy, one_line

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "theory_checks.py")


# --- check 1: gradient residual bound ---------------------------------------------------------------

@pytest.mark.smoke
def test_residual_hand_case():
    # B2: xi = G (Gbar = 0): ||xi||^2 = 1, 1, 2 -> B^2 = 2 (the max, not the mean 4/3); <e1,e2> = 0,
    # <e1,(1,1)> = <e2,(1,1)> = 1 -> rho = 1/2 (off-diagonal only: the diagonal would give 1)
    G = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    (row,) = tc.residual_rows(G, torch.zeros(2), [[0, 1, 2]])
    assert row["B^2"] == pytest.approx(2.0) and row["rho"] == pytest.approx(0.5)
    assert row["rho_S"] == pytest.approx(0.5)
    assert row["||G_pi-Gbar||^2"] == pytest.approx(8 / 9)  # mean (2/3, 2/3)
    assert row["bound"] == pytest.approx(2 * (0.5 + 0.5 / 3)) and row["check"]
    # within-window noise: mean ||G_k - (2/3, 2/3)||^2 = (5/9 + 5/9 + 2/9) / 3 = 4/9, and
    # mean ||xi_k||^2 = 4/3 = lhs + within
    assert row["within"] == pytest.approx(4 / 9)


def test_equality_construction_catches_a_wrong_bound():
    # B1: orthonormal u, v_k make the bound an equality, so any right side that is too small fails
    gen = torch.Generator().manual_seed(0)
    G, Gbar = tc.synthetic_gradients(7, 50, B=1.5, rho=0.3, gen=gen, exact=True)
    windows = [list(range(m)) for m in (1, 3, 7)]
    rows = tc.residual_rows(G, Gbar, windows)
    for r in rows:
        assert r["B^2"] == pytest.approx(2.25) and r["check"]
        assert r["||G_pi-Gbar||^2"] == pytest.approx(2.25 * (0.3 + 0.7 / r["m"]), rel=1e-9)
        assert r["bound"] == pytest.approx(r["||G_pi-Gbar||^2"], rel=1e-9)
    wrong = tc.residual_rows(G, Gbar, windows, bound=lambda B2, rho, m: B2 / m)  # rho term dropped
    assert [r["check"] for r in wrong] == [True, False, False]
    assert tc.exit_status(wrong) == 1 and tc.exit_status(rows) == 0


def test_bias_plus_within_is_the_mean_residual():
    gen = torch.Generator().manual_seed(1)
    G, Gbar = tc.synthetic_gradients(11, 30, B=1.0, rho=0.2, gen=gen, exact=False)
    rows = tc.residual_rows(G, Gbar, [list(range(m)) for m in (1, 2, 5, 11)])
    assert all(r["check"] for r in rows)
    for r in rows:  # (1/m) sum ||xi_k||^2 = ||G_S - Gbar||^2 + (1/m) sum ||G_k - G_S||^2
        mean_xi = (G[: r["m"]] - Gbar).pow(2).sum(1).mean().item()
        assert r["||G_pi-Gbar||^2"] + r["within"] == pytest.approx(mean_xi, rel=1e-9)
    # Gbar = the mean over S itself: the left side is 0 (why the choice of Gbar matters)
    (row,) = tc.residual_rows(G[:5], G[:5].mean(0), [list(range(5))])
    assert row["||G_pi-Gbar||^2"] < 1e-20


@pytest.mark.smoke
def test_centered_windows():
    assert tc.centered_windows(10, [1, 3], 20) == [[9], [8, 9, 10]]
    with pytest.raises(ValueError, match="m=11"):
        tc.centered_windows(3, [11], 20)


def tiny_model(vocab=5):
    torch.manual_seed(0)
    return LoopedTransformer(ModelConfig(vocab_size=vocab, d_model=8, n_head=2, n_layer=1))


def test_per_depth_gradients_match_direct_backward():
    # B3: each row must be the gradient of the loss read out at exactly its depth
    model = tiny_model()
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(1, 3, (4, 5), generator=gen)
    y = torch.randint(1, 3, (4, 5), generator=gen)
    G = tc.per_depth_gradients(model, x, y, 4)  # (4, P)
    for k in (1, 2, 4):  # reference: a separate run to depth k, loss at its last step
        model.zero_grad()
        per_sample_ce(model(x, k)[-1], y).mean().backward()
        ref = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double()
        assert torch.allclose(G[k - 1], ref, atol=1e-6)


# --- check 2: representation consistency -------------------------------------------------------------

@pytest.mark.smoke
def test_spread_hand_case():
    H = torch.tensor([[[0.0, 0.0]], [[2.0, 0.0]]])  # m=2, N=1: (1/4)(0 + 4 + 4 + 0) = 2
    assert tc.spread(H).tolist() == [2.0]


def test_toy_consistency_passes():
    rows = tc.toy_consistency(steps=20, N=32)
    assert all(r["check"] for r in rows) and tc.exit_status(rows) == 0
    assert rows[1]["eps=J_S"] < rows[0]["eps=J_S"]  # training lowered the window loss


def test_constructed_row_is_an_equality():
    # B4, B5: states Z* +- delta with W = 3 * orthonormal columns: spread = 2||delta||^2 = 4 eps/mu exactly.
    # Normalising by m(m-1) makes it 4/3 too big (violates the sharp 4); a mu off by a factor makes the
    # row no longer an equality (the check demands both directions)
    (row,) = tc.toy_consistency(steps=0, N=32)[-1:]
    assert row["E spread"] == pytest.approx(row["4eps/mu"], rel=1e-9) and row["mu"] == pytest.approx(18.0)
    assert row["spread/(4eps/mu)"] == pytest.approx(1.0, rel=1e-9) and row["check"]
    Z = torch.zeros(1, 2, dtype=torch.float64)
    H = torch.stack([Z + 1, Z - 1] * 2)  # m = 4 states at +-(1, 1)
    assert tc.consistency_row("x", H, Z, torch.eye(2), tight=True)["check"]
    # a row declared tight whose states do not attain 4 eps/mu (all at Z* + (1, 1): spread 0) fails
    assert not tc.consistency_row("x", torch.stack([Z + 1] * 4), Z, torch.eye(2), tight=True)["check"]


def test_wrong_consistency_constant_is_caught():
    rows = tc.toy_consistency(steps=0, N=32, const=2.0)
    assert rows[-1]["check"] is False and tc.exit_status(rows) == 1


@pytest.mark.smoke
def test_mu_is_twice_sigma_min_squared():
    # B5: W = diag(3, 0.5): mu = 2 * 0.5^2 (sigma_max would give 18)
    W = torch.diag(torch.tensor([3.0, 0.5]))
    Z = torch.zeros(1, 2)
    H = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])  # L = 9 and 0.25 -> eps = 4.625; spread = (1/4)*2*2 = 1
    r = tc.consistency_row("hand", H, Z, W)
    assert r["mu"] == pytest.approx(0.5) and r["eps=J_S"] == pytest.approx(4.625)
    assert r["E spread"] == pytest.approx(1.0) and r["C*eps/mu"] == pytest.approx(74.0) and r["check"]


def test_rank_deficient_readout_refused():
    # B6: without full column rank no mu > 0 exists; svdvals alone would return a usable-looking number
    H, Z = torch.zeros(2, 1, 3), torch.zeros(1, 3)
    for W in (torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),  # p < d: 2 singular values, both > 0
              torch.tensor([[1.0, 2.0, 0.0], [2.0, 4.0, 0.0], [0.0, 0.0, 1.0], [1.0, 2.0, 1.0]])):  # rank 2
        with pytest.raises(ValueError, match="full column rank"):
            tc.consistency_row("x", H, Z, W)
    assert tc.pl_constant(torch.eye(3)) == pytest.approx(2.0)


# --- check 3: REINFORCE ----------------------------------------------------------------------------

def test_reinforce_unbiased():
    for K, seed in ((5, 0), (8, 1)):
        rows = tc.reinforce_rows(n_samples=20000, K=K, seed=seed)
        assert all(r["check"] for r in rows) and rows[-1]["param"].startswith("joint")


@pytest.mark.parametrize("name, loss", [
    ("10% bias", lambda logp, R, b: 1.1 * halting.reinforce_loss(logp, R, b)),
    ("grad pi for grad log pi", lambda logp, R, b: -((R - b).detach() * logp.exp()).mean())])
def test_biased_estimator_is_caught(name, loss):
    # B7: the z-test and the joint chi^2 both flag it, in both settings
    for K, seed in ((5, 0), (8, 1)):
        rows = tc.reinforce_rows(n_samples=20000, K=K, seed=seed, loss_fn=loss)
        assert tc.exit_status(rows) == 1 and rows[-1]["check"] is False, name


def test_wrong_sampler_is_caught():
    # B8: hazards read 0.3 too high: tau stops early, so the mean gradient is of another distribution
    rows = tc.reinforce_rows(n_samples=20000, sampler=lambda a, u: halting.sample_stop(a + 0.3, u))
    assert tc.exit_status(rows) == 1


# --- real models, the script ----------------------------------------------------------------------------

TINY = ["--steps", "3", "--d_model", "8", "--n_head", "2", "--n_layer", "1", "--batch_size", "4",
        "--T_max", "12", "--n", "6", "--n_max", "8", "--ms", "1,3,5", "--seeds", "2"]


def test_main_real_model_tiny(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert tc.main(["--checks", "1b,2b", "--json", str(out), *TINY]) == 0
    assert "holds by construction; fails only on a bug" in capsys.readouterr().out
    data = json.loads(out.read_text())
    titles = [t["title"][:2] for t in data["tables"]]
    assert titles == ["1b", "1b", "1b", "2b", "2b"] and data["status"] == 0 and "cpu" in data["platform"]
    residual = data["tables"][1]["rows"]
    assert {r["model"] for r in residual} == {"untrained", "window", "fixed"}
    assert {r["Gbar"] for r in residual} == {"mean 1..12", "mean 1..11", "mean 12..12"}
    summary = data["tables"][2]["rows"]  # 1b over seeds: one row per model and Gbar, every seed checked
    assert len(summary) == 6 and all(r["seeds"] == 2 and r["check"] for r in summary)
    runs = data["tables"][3]["rows"]
    assert {(r["model"], r["seed"]) for r in runs} == {(m, s) for m in ("fixed", "window") for s in (0, 1)}
    assert all(r["eps=J_S"] > 0 and r["spread H"] >= 0 for r in runs)
    assert os.listdir(tmp_path) == ["t.json"]  # written atomically: no temp file left


def test_consistency_eps_is_the_mean_loss_over_S():
    model, task = tiny_model(), tc.get_task("dyck")
    cfg = tc.Config(n_max=8, T_max=12, w=2, batch_size=4)
    rows = tc.consistency_rows({("m", 0): model}, task, cfg)
    r = rows[-1]  # n = 8, S = 6..10
    x, y, _, _ = tc.make_batch(task, [8] * 4, torch.Generator().manual_seed(8))
    with torch.no_grad():
        ref = per_sample_ce(model(x, 10)[5:10], y).mean().item()
    assert r["depths S"] == "6..10" and r["eps=J_S"] == pytest.approx(ref, rel=1e-6)


def test_consistency_summary_ratios():
    rows = [{"model": m, "seed": s, "n": 4, "depths S": "1..9", "eps=J_S": e, "spread H": h, "spread LN_f(H)": 1.0}
            for m, s, e, h in (("a", 0, 1.0, 2.0), ("a", 1, 3.0, 9.0), ("b", 0, 1.0, 4.0), ("b", 1, 1.0, 3.0))]
    (row,) = tc.consistency_summary(rows, "a", "b")
    assert row["ratio spread H"] == "0.5..3" and row["eps a"] == "1..3" and row["seeds"] == 2


def test_ckpt_is_loaded(tmp_path):
    model = tiny_model()
    cfg = {"task": "dyck", "d_model": 8, "n_head": 2, "n_layer": 1, "inject": True, "looped": True}
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "config": cfg}, path)
    task, (loaded, fresh) = tc.load_ckpt(str(path), 0)
    assert task.name == "dyck" and isinstance(fresh, LoopedTransformer)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))
    argv = ["--checks", "1b", "--ckpt", str(path), "--batch_size", "4", "--T_max", "12", "--n", "6", "--ms", "1,3"]
    assert tc.main(argv) == 0
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    torch.save({"model": model.state_dict()}, tmp_path / "noconfig.pt")
    torch.save({"model": model.state_dict(), "config": {**cfg, "d_model": 16}}, tmp_path / "wrong.pt")
    for name in ("junk.pt", "noconfig.pt", "wrong.pt", "missing.pt"):
        with pytest.raises(ValueError, match="--ckpt"):
            tc.load_ckpt(str(tmp_path / name), 0)


@pytest.mark.parametrize("argv, names", [
    (["--checks", "1a,9"], "--checks"), (["--ms", "1,x"], "--ms"), (["--ms", "41"], "m=41"),
    (["--json", "/nonexistent/dir/t.json"], "--json"), (["--d_model", "30", "--n_head", "4"], "--d_model 30"),
    (["--w", "-1"], "--w -1"), (["--consistency_const", "nan"], "--consistency_const nan"),
    (["--lr", "-1"], "--lr -1"), (["--lr", "inf"], "--lr inf"), (["--T_max", "1"], "--T_max 1"),
    (["--n", "0"], "--n 0"), (["--seeds", "0"], "--seeds 0"), (["--ckpt", "/nonexistent.pt"], "--ckpt")])
def test_bad_input_is_refused_before_any_work(argv, names, monkeypatch):
    def no_work(*a, **k):
        raise AssertionError("work started before the input was validated")

    for fn in ("synthetic_gradients", "train_short", "small_model", "toy_consistency", "reinforce_rows"):
        monkeypatch.setattr(tc, fn, no_work)
    with pytest.raises(ValueError, match=names.replace("+", r"\+")):
        tc.main(argv)


def test_script_exit_codes(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, SCRIPT, *a], capture_output=True, text=True)
    bad = run("--checks", "2a", "--toy_steps", "0", "--consistency_const", "2")
    assert bad.returncode == 1 and "VIOLATED" in bad.stdout
    out = tmp_path / "missing" / "t.json"
    typo = run("--checks", "1a", "--json", str(out))
    assert typo.returncode == 2 and typo.stderr.count("\n") == 1 and "--json" in typo.stderr
    assert "Traceback" not in typo.stderr and not out.parent.exists()


def test_theory_checks_refuse_degenerate_inputs_instead_of_violated(base, tmp_path, capsys):
    """3Sh: theory_checks.py said VIOLATED on --rl_samples 2 and on a non-finite checkpoint. Failed before its fix."""
    code = run(tc.command, "theory_checks.py", ["--checks", "3", "--rl_samples", "2"])
    assert "too few samples" in one_line(capsys, code)
    d = nan_copy(base, tmp_path / "nan", "model")
    code = run(tc.command, "theory_checks.py", ["--checks", "1b", "--ckpt", str(d / "ckpt.pt")])
    assert "non-finite weights" in one_line(capsys, code)


def test_theory_checks_says_what_t_max_a_check_needs(capsys):
    """4E7: theory_checks.py --checks 3 --T_max 2 said "choose m <= -15". Failed before its fix."""
    command = lambda *argv: cli.run(tc.command, "theory_checks.py", list(argv))  # noqa: E731
    for argv, need in ((["--checks", "1b"], 15), (["--checks", "2b"], 15), (["--checks", "3,1b"], 15), ([], 15)):
        err = one_line(capsys, command(*argv, "--T_max", "2"))
        assert "--T_max 2" in err and f"needs --T_max >= {need}" in err and "<= -" not in err, (argv, err)
    # check 3 (and 1a, 2a) do not use T_max: nothing to refuse
    assert command("--checks", "3", "--T_max", "2", "--rl_samples", "200") == 0
    assert "3 found no bias" in capsys.readouterr().out
    err = one_line(capsys, command("--checks", "1b", "--n", "1", "--ms", "1,3"))  # a window below depth 1
    assert "choose m <= 1" in err
