"""bench.py: the compared paths compute the same thing, and the counters count the right amounts.
No timing is asserted (timings depend on the machine and its load)."""

import dataclasses

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import bench
import evaluate
from model import LoopedTransformer, ModelConfig
from tasks import eval_set

TINY = ["--quick", "--d_model", "16", "--n_head", "2", "--n_layer", "2", "--batch_size", "6", "--n_max", "6",
        "--T_max", "6", "--T_test", "8", "--test_lengths", "2,6,9", "--flops_d_models", "16"]


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared: oversubscribed threads only slow every test down
    yield
    torch.set_num_threads(n)


def tiny():
    args = bench.parse_args(TINY)
    cfg = bench.run_config(args, args.d_model)
    torch.manual_seed(0)
    task, model, _ = evaluate.build(dataclasses.asdict(cfg))
    return args, cfg, task, model


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
    args, cfg, task, model = tiny()
    batches = bench.make_batches(task, cfg, 3, "cpu")
    paths = [bench.make_path("active", cfg, model, "cpu"), bench.make_path("unroll", cfg, model, "cpu", active_set=False)]
    bench.run_paths(paths, batches, 1, "cpu", len(task.vocab))
    act, unroll = paths
    assert len(act.losses) == len(unroll.losses) == 2
    assert bench.max_loss_diff(unroll, act) < 1e-5
    # both drew the same depths, and the weights moved the same way
    assert act.flops == unroll.flops and act.work == unroll.work
    for p, q in zip(act.model.parameters(), unroll.model.parameters()):
        assert torch.allclose(p, q, atol=1e-5)
    assert any(not torch.equal(p, q) for p, q in zip(act.model.parameters(), model.parameters()))  # it trained


def test_peek_depth_does_not_advance_the_generator():
    args, cfg, task, model = tiny()
    p = bench.make_path("active", cfg, model, "cpu")
    Tn = torch.arange(1, 7)
    first = bench.peek_depth(p, Tn)
    assert torch.equal(first, bench.peek_depth(p, Tn))
    assert torch.equal(first, p.schedule.train_depth(Tn, p.gen))  # what the step itself will draw


def test_acc_matrix_one_pass_equals_one_pass_per_K():
    args, cfg, task, model = tiny()
    model.eval()
    sets = eval_set(task, [2, 6, 9], 5, seed=7)
    sched = bench.make_path("active", cfg, model, "cpu").schedule
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


def test_padding_waste_hand_computed():
    # lengths (3, 1) padded to T = 3, depths (2, 1): real work 3*2 + 1*1 = 7 token-steps
    x = torch.tensor([[1, 2, 1], [2, 0, 0]])
    w = bench.padding_waste(x, torch.tensor([2, 1]), chunks=2)
    assert w["now"] == pytest.approx(1 - 7 / 9)     # 3 * (2 + 1)
    assert w["trim"] == pytest.approx(1 - 7 / 9)    # step 1: 2 rows x 3, step 2: 1 row x 3
    assert w["bucket2"] == pytest.approx(0.0)       # each row alone, padded to itself


def test_bad_flags_raise_value_error():
    for argv in (["--iters", "0"], ["--flops_d_models", "a,b"], ["--d_model", "30", "--n_head", "4"]):
        with pytest.raises(ValueError):
            bench.parse_args(argv)


def test_quick_run_prints_every_row(capsys):
    rows = bench.main(TINY + ["--iters", "1", "--warmup", "0", "--no-compile", "--threads", "1"])
    assert [r[0] for r in rows] == ["(a)", "(b)", "(c)", "(d)", "(e)", "(d)", "(f)", "pad"]
    assert "predictions equal: yes" in rows[1][-1]
    assert "| (a) |" in capsys.readouterr().out
