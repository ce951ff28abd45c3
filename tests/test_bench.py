"""bench.py: the compared paths compute the same thing, the counters count the right amounts, and a bad
flag fails before any work. No timing is asserted (timings depend on the machine and its load)."""

import json
import os
import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import bench
import config
from model import LoopedTransformer, ModelConfig
from tasks import eval_set
from lab import cli

from conftest import one_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--quick", "--d_model", "16", "--n_head", "2", "--n_layer", "2", "--batch_size", "6", "--n_max", "6",
        "--T_max", "6", "--T_test", "8", "--test_lengths", "2,6,9", "--flops_d_models", "16", "--no-compile"]


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared: oversubscribed threads only slow every test down
    yield
    torch.set_num_threads(n)


def tiny():
    cfg = bench.parse_args(TINY)
    task, model, _ = config.build(bench.train_config(cfg, cfg.d_model))
    return cfg, task, model


@pytest.mark.smoke
def test_quick_flags_are_defaults_and_explicit_flags_win():
    cfg = bench.parse_args(["--quick", "--iters", "5"])
    assert (cfg.iters, cfg.d_model, cfg.matmul_n) == (5, bench.QUICK["d_model"], bench.QUICK["matmul_n"])
    assert bench.parse_args([]).d_model == config.Config().d_model  # without --quick: train.py's defaults
    tcfg = bench.train_config(cfg, 48)
    assert (tcfg.schedule, tcfg.d_model, tcfg.T_max, tcfg.amp, tcfg.compile) == ("window", 48, 8, False, False)


@pytest.mark.smoke
def test_step_flops_hand_computed():
    # depths (2, 1): a_1 = 2 rows, a_2 = 1 row; T = 3, D = 4, one layer, V = 5
    # per layer 24 a T D^2 + 4 a T^2 D: a=2 -> 2304 + 288, a=1 -> 1152 + 144; readout 2 B T D V = 240
    assert bench.step_flops(torch.tensor([2, 1]), T=3, D=4, n_layer=1, V=5) == 3 * (2304 + 288 + 1152 + 144 + 240)


def test_step_flops_matches_torch_flop_counter():
    # torch's FlopCounterMode counts the matmuls of a real forward_depths (+ backward); it does not count the
    # CPU attention kernel, so the attention term 4 a T^2 D per layer and active row is added by hand
    m = LoopedTransformer(ModelConfig(vocab_size=6, d_model=16, n_head=2, n_layer=2))
    x, depth = torch.randint(1, 6, (5, 7)), torch.tensor([3, 1, 4, 4, 2])
    with FlopCounterMode(display=False) as fc:
        m.forward_depths(x, depth).sum().backward()
    attention = 2 * sum(4 * a * 7 * 7 * 16 for a in (5, 4, 3, 2))  # a_t rows with depth >= t
    assert bench.step_flops(depth, 7, 16, 2, 6) == fc.get_total_flops() + 3 * attention


def test_active_set_and_unroll_give_the_same_losses():
    cfg, task, model = tiny()
    batches = bench.make_batches(task, bench.train_config(cfg, cfg.d_model), 3, "cpu")
    act, unroll = bench.run_variants([bench.make_variant(n, cfg, cfg.d_model, "cpu") for n in ("active", "unroll")],
                                     batches, 1, "cpu")
    assert unroll.schedule.active_set is False and act.schedule.active_set is True
    assert len(act.losses) == len(unroll.losses) == len(act.depths) == 3 and len(act.times) == 2
    row = bench.compare_row("(a)", "", act, unroll, tol=1e-5)  # raises if step 1 disagrees
    assert max(abs(a - b) for a, b in zip(act.losses, unroll.losses)) < 1e-5, row
    # both drew the same depths, and the weights moved the same way
    assert all(torch.equal(a, b) for a, b in zip(act.depths, unroll.depths))
    assert act.flops == unroll.flops and act.work == unroll.work
    for p, q in zip(act.model.parameters(), unroll.model.parameters()):
        assert torch.allclose(p, q, atol=1e-5)
    assert any(not torch.equal(p, q) for p, q in zip(act.model.parameters(), model.parameters()))  # it trained


def test_only_the_bptt_variant_truncates_and_it_keeps_less_for_backward():
    # --bptt_k is a bench flag (row (g)); every other variant backpropagates through all loop steps
    cfg, task, model = tiny()
    v = {n: bench.make_variant(n, cfg, 64, "cpu") for n in ("active", "unroll", "bptt")}
    assert (v["active"].cfg.bptt_k, v["unroll"].cfg.bptt_k, v["bptt"].cfg.bptt_k) == (0, 0, cfg.bptt_k) != (0, 0, 0)
    x, y, _, Tn = eval_set(task, [6], 6, seed=0)[6]  # depth ~ n + D >= 1, up to T_max = 6 > bptt_k = 3
    Tn = Tn + 4  # push the window's depths to T_max for everyone: 6 steps kept by active, 3 by bptt
    full, cut = (float(bench.memory_row("(d)", v[n], (x, y, Tn), "cpu")[2].split()[0]) for n in ("active", "bptt"))
    assert cut < full, (cut, full)


def test_compare_row_catches_disagreeing_losses():
    cfg, task, model = tiny()
    a, b = (bench.make_variant("active", cfg, cfg.d_model, "cpu") for _ in range(2))
    a.times, b.times, a.losses, b.losses = [1.0, 1.0], [2.0, 2.0], [1.0, 1.0], [1.5, 1.0]
    assert bench.compare_row("(x)", "", a, b)[2:5] == ["1000.0 ms", "2000.0 ms", "2.00x"]
    with pytest.raises(AssertionError):
        bench.compare_row("(x)", "", a, b, tol=1e-5)


def test_variants_start_from_the_same_weights_and_depths():
    cfg, task, model = tiny()
    a, b = bench.make_variant("active", cfg, cfg.d_model, "cpu"), bench.make_variant("bf16", cfg, cfg.d_model, "cpu")
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    assert isinstance(b.autocast, torch.autocast) and not isinstance(a.autocast, torch.autocast)
    Tn = torch.arange(1, 7)
    first = bench.peek_depth(a, Tn)
    assert torch.equal(first, bench.peek_depth(a, Tn))  # peeking does not advance the generator
    assert torch.equal(first, bench.peek_depth(b, Tn))
    assert torch.equal(first, a.schedule.train_depth(Tn, a.gen))  # what the step itself will draw


def test_acc_matrix_one_pass_equals_one_pass_per_K():
    cfg, task, model = tiny()
    model.eval()
    sets = eval_set(task, [2, 6, 9], 5, seed=7)
    sched = bench.make_variant("active", cfg, cfg.d_model, "cpu").schedule
    one, per_k = bench.acc_one_pass(model, sched, sets, 8), bench.acc_per_K(model, sched, sets, 8)
    assert [e.shape for e, _ in one] == [(8, 5)] * 3
    assert [p.shape for _, p in per_k] == [(8, 5, 2), (8, 5, 6), (8, 5, 9)]  # (K, B, T) per length
    assert bench.same_matrices(one, per_k)
    # the comparison bites: an untrained model's predictions differ between depths
    shifted = [(e, torch.roll(p, 1, dims=0)) for e, p in per_k]
    assert not bench.same_matrices(one, shifted)


def test_peak_bytes_sees_a_temporary_allocation():
    def f():
        a = torch.ones(1 << 20)  # 4 MiB, freed before the function returns
        return float((a * 2).sum())  # another 4 MiB while a is alive

    peak = bench.peak_bytes(f, "cpu")
    assert 8 * 2 ** 20 <= peak < 9 * 2 ** 20


def test_memory_row_counts_weights_and_both_adam_moments():
    cfg, task, model = tiny()
    v = bench.make_variant("active", cfg, 128, "cpu")  # wide enough for MiB to tell 2 copies from 3
    x, y, _, Tn = eval_set(task, [4], 3, seed=0)[4]
    row = bench.memory_row("(d)", v, (x, y, Tn), "cpu")
    n = sum(p.numel() for p in v.model.parameters())
    assert row[3] == f"{3 * 4 * n / 2 ** 20:.1f} MiB state" != f"{2 * 4 * n / 2 ** 20:.1f} MiB state"
    assert float(row[2].split()[0]) > 0  # the step allocated activations and gradients


@pytest.mark.smoke
def test_padding_waste_hand_computed():
    # lengths (3, 1) padded to T = 3, depths (2, 1): real work 3*2 + 1*1 = 7 token-steps
    x = torch.tensor([[1, 2, 1], [2, 0, 0]])
    w = bench.padding_waste(x, torch.tensor([2, 1]), chunks=2)
    assert w["now"] == pytest.approx(1 - 7 / 9)     # 3 * (2 + 1)
    assert w["trim"] == pytest.approx(1 - 7 / 9)    # step 1: 2 rows x 3, step 2: 1 row x 3
    assert w["bucket2"] == pytest.approx(0.0)       # each row alone, padded to itself


BAD = [  # (flags, what the one error line must name)
    (["--json", "{tmp}/missing/b.json"], "--json"),
    (["--d_model", "30", "--n_head", "4"], "--d_model 30 --n_head 4"),
    (["--w", "-1"], "--w -1"),
    (["--test_lengths", ",,"], "--test_lengths ',,'"),
    (["--iters", "0"], "--iters 0"),
    (["--matmul_n", "0"], "--matmul_n 0"),
    (["--matmul_n", "-5"], "--matmul_n -5"),
    (["--flops_d_models", "a,b"], "--flops_d_models 'a,b'"),
    (["--flops_d_models", "64,x"], "--flops_d_models '64,x'"),
    (["--flops_d_models", "30"], "--flops_d_models '30'"),  # not a multiple of n_head
]


@pytest.mark.parametrize("flags, named", BAD, ids=[" ".join(f) for f, _ in BAD])
def test_bad_flags_fail_with_one_line_before_any_work(flags, named, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench, "bench", lambda cfg: pytest.fail("the work started before the flags were checked"))
    flags = [f.format(tmp=tmp_path) for f in flags]
    json_flag = [] if "--json" in flags else ["--json", str(tmp_path / "b.json")]  # a valid path: must stay unwritten
    assert cli.run(bench.main, "bench.py", ["--quick", "--no-compile"] + json_flag + flags) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("bench.py: error: ") and named in err, err
    assert "Traceback" not in err and out == ""
    assert os.listdir(tmp_path) == []  # nothing written


def test_bad_flag_as_a_command(tmp_path):
    # the real entry point: exit 2, one line, no traceback, nothing written
    path = tmp_path / "missing" / "b.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), "--quick", "--json", str(path)],
                       capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and str(path) in r.stderr, r.stderr
    assert r.stdout == "" and os.listdir(tmp_path) == []


def test_quick_run_prints_every_row_and_writes_the_json(tmp_path, capsys):
    path = tmp_path / "bench.json"
    rows = bench.main(TINY + ["--iters", "2", "--warmup", "0", "--threads", "1", "--json", str(path)])
    assert [r[0] for r in rows] == ["(a)", "(b)", "(c)", "(d)", "(e)", "(d)", "(f)", "(g)", "(g)", "pad", "(h)", "(h)"]
    assert "2 seeds" in rows[-1][1] and rows[-1][4].endswith("x") and "masked" in rows[-1][-1]  # --quick: S = 1, 2
    assert "predictions equal: yes" in rows[1][-1]
    assert [r[1].rsplit(", ", 1)[-1] for r in rows if r[0] == "(d)"] == ["active", "unroll"]
    assert "bf16" in rows[6][1] and rows[6][2].endswith(" ms")
    assert "| (a) |" in capsys.readouterr().out
    saved = json.loads(path.read_text())
    assert saved["rows"] == rows and saved["columns"] == bench.COLUMNS
    assert os.listdir(tmp_path) == ["bench.json"]  # written atomically: no temp file left


def test_bench_refuses_stacks_that_cannot_fit_in_one_line(capsys):
    """4S5: bench.py --stacks 100000000 had no memory check (it went on to build 10^8 models). Failed before its fix."""
    argv = ["--quick", "--only_stack", "--no-compile", "--stacks", "1,100000000"]
    with pytest.raises(ValueError, match="--stacks"):  # before any work (the old code went on to build 10^8 models)
        bench.parse_args(argv)
    err = one_line(capsys, cli.run(bench.main, "bench.py", argv), 2)
    assert "--stacks" in err and "100000000" in err and "GiB" in err, err
    assert bench.parse_args(["--quick", "--stacks", "1,2"]).stacks == "1,2"  # a small row (h) still runs
    assert bench.parse_args([]).stacks == "1,4,16"
