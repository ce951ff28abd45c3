"""--perturb EPS --perturb_seed J (issue 51): a replicate of a seed whose initial weights are nudged by
theta * (1 + EPS * N(0, 1)) from a stream of its own. EPS = 0 is bitwise the plain run; no other stream moves;
tables hold a seed's replicates in one row and report their within-seed spread."""

import json
import math
import statistics

import pytest
import torch

import config
import train
from lab import tables
from lab.cli import run

TINY = ["--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8", "--T_max", "6", "--T_test", "8",
        "--n_max", "6", "--max_iters", "6", "--log_interval", "3", "--eval_interval", "3", "--ckpt_interval", "3",
        "--eval_samples", "4", "--test_lengths", "3,8", "--threads", "1"]


def trained(tmp_path, name, argv):
    d = tmp_path / name
    assert run(train.main, "train.py", TINY + argv + ["--out_dir", str(d)]) == 0
    return torch.load(d / "ckpt.pt", weights_only=True), d


@pytest.mark.parametrize("schedule", ["window", "rl"])
def test_perturb_zero_is_bitwise_the_plain_run(tmp_path, schedule):
    plain, d0 = trained(tmp_path, "plain", ["--schedule", schedule])
    zero, d1 = trained(tmp_path, "zero", ["--schedule", schedule, "--perturb", "0"])
    for part in ("model", "schedule"):
        assert plain[part].keys() == zero[part].keys()
        assert all(torch.equal(plain[part][k], zero[part][k]) for k in plain[part]), part
    assert (d0 / "metrics.jsonl").read_text().splitlines()[0].split('"ms_per_step"')[0] == \
        (d1 / "metrics.jsonl").read_text().splitlines()[0].split('"ms_per_step"')[0]
    nudged, d2 = trained(tmp_path, "nudged", ["--schedule", schedule, "--perturb", "1e-3", "--perturb_seed", "1"])
    assert not all(torch.equal(plain["model"][k], nudged["model"][k]) for k in plain["model"])
    cfg = json.load(open(d2 / "eval.json"))["config"]
    assert cfg["perturb"] == 1e-3 and cfg["perturb_seed"] == 1  # eval.json records both


@pytest.mark.smoke
def test_perturb_multiplies_every_weight_and_moves_no_other_stream():
    cfg = train.parse_args(TINY + ["--schedule", "rl", "--seed", "3"])
    _, model, head = config.build(cfg)
    state_after_plain = torch.get_rng_state()
    eps = 1e-2
    pcfg = train.parse_args(TINY + ["--schedule", "rl", "--seed", "3", "--perturb", str(eps), "--perturb_seed", "2"])
    _, pmodel, phead = config.build(pcfg)
    assert torch.equal(state_after_plain, torch.get_rng_state())  # the global (torch) stream is where it was
    gen = torch.Generator().manual_seed(config.perturb_stream(3, 2))
    pairs = list(zip(list(model.parameters()) + list(head.parameters()), list(pmodel.parameters()) + list(phead.parameters())))
    for p, q in pairs:  # the same noise, drawn in the same order, by hand
        assert torch.allclose(q, p * (1 + eps * torch.randn(p.shape, generator=gen)), rtol=0, atol=1e-7)
    ratios = torch.cat([(q / p).flatten() for p, q in pairs if (p.abs() > 1e-3).all()]) - 1
    assert abs(ratios.std().item() / eps - 1) < 0.1  # relative noise of scale eps, not additive
    other = config.build(train.parse_args(TINY + ["--schedule", "rl", "--seed", "3", "--perturb", str(eps),
                                                  "--perturb_seed", "3"]))[1]
    assert not torch.equal(next(other.parameters()), next(pmodel.parameters()))  # J picks the noise
    # torch keeps a seed's low 32 bits: the streams must differ there
    assert len({config.perturb_stream(s, j) % 2 ** 32 for s in range(200) for j in range(1, 9)}
               | {config.stream(s, n) % 2 ** 32 for s in range(200) for n in config.STREAMS}) == 200 * 8 + 200 * 5


@pytest.mark.parametrize("argv, word", [(["--perturb=-1e-6"], "--perturb -1e-06"),
                                        (["--perturb", "nan"], "--perturb nan"),
                                        (["--perturb_seed", "2"], "needs --perturb"),
                                        (["--perturb", "1e-6", "--perturb_seed=-1"], "--perturb_seed -1"),
                                        (["--perturb", "1e-6"], "needs --perturb_seed")])
def test_bad_perturb_is_one_line(tmp_path, capsys, argv, word):
    assert run(train.main, "train.py", TINY + argv + ["--out_dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert word in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def fake(seed, j, ood):
    return {"task": "dyck", "schedule": "fixed", "seed": seed, "n_max": 6, "lengths": [3, 8], "run_dir": f"s{seed}r{j}",
            "config": {"perturb": 1e-6 if j else 0.0, "perturb_seed": j, "seed": seed},
            "metrics": {"oracle_ood": ood, "oracle": [100.0, ood]}}


@pytest.mark.smoke
def test_tables_hold_replicates_in_one_row_with_their_within_seed_std():
    ys = {0: [10.0, 12.0, 14.0], 1: [30.0, 31.0, 35.0]}
    runs = [fake(s, j, y) for s, v in ys.items() for j, y in enumerate(v, start=1)]
    groups = tables.group_runs(runs)
    assert len(groups) == 1 and len(next(iter(groups.values()))) == 6
    # a rounding-sized nudge (<= REPLICATE_EPS) is a replicate: the plain runs of the same seeds join the row
    both = tables.group_runs(runs + [fake(0, 0, 11.0), fake(1, 0, 32.0)])
    assert [len(g) for g in both.values()] == [8] and [label for _, label in both] == ["fixed c=20"]
    # a nudge above it is part of the experiment: another row, labelled by it
    big = [{**e, "config": {**e["config"], "perturb": 1e-3}} for e in runs]
    apart = tables.group_runs(big + [fake(0, 0, 11.0), fake(1, 0, 32.0)])
    assert sorted(len(g) for g in apart.values()) == [2, 6]
    assert sorted(label for _, label in apart) == ["fixed c=20 perturb=0", "fixed c=20 perturb=0.001"]
    row = tables.table_row(next(iter(groups.values())))
    # by hand: within-seed sums of squares 8 and 14 over 2 + 2 degrees of freedom
    assert math.isclose(row["within_seed_std"], math.sqrt(22 / 4)) and row["n_seeds"] == 2
    assert math.isclose(row["std"], statistics.stdev([y for v in ys.values() for y in v]))
    assert "within-seed Std 2.3" in tables.format_row({**row, "setting": "fixed"}, False)
    with pytest.raises(ValueError, match="seed 1 .--perturb 1e-06 --perturb_seed 2. appears 2 times"):
        tables.group_runs(runs + [fake(1, 2, 9.0)])
    plain = tables.table_row([fake(0, 0, 1.0), fake(1, 0, 2.0)])
    assert "replicates" not in plain and "within_seed_std" not in plain  # rows without replicates are unchanged
