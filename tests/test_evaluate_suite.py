"""The evaluation suite: multi-run tables on synthetic eval.json files with known answers, the published
rows, the command line's errors, loading a run, readouts of a frozen model, plots."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

import evaluate
import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENGTHS, N_MAX = [10, 20, 30, 40], 19


def synthetic_eval(seed: int, ood_oracle: list, schedule="window", w=5) -> dict:
    """An eval.json whose oracle curve is known: acc[n] = [a, a/2] (K = 2), so Oracle(n) = a; policy = K=2."""
    acc = [[a, a / 2] for a in [1.0] + ood_oracle]
    rows = [{"tn_acc": a[1], "per_sample_oracle": a[0], "policy_acc": a[1], "policy_depth": 2.0, "flip": [0.1]}
            for a in acc]
    return {"task": "dyck", "schedule": schedule, "seed": seed, "n_max": N_MAX, "lengths": LENGTHS, "K": [1, 2],
            "acc": acc, "metrics": evaluate.metrics(LENGTHS, acc, rows, N_MAX), "config": {"w": w, "K": 20}}


def write_runs(root, evals):
    for i, e in enumerate(evals):
        d = os.path.join(root, f"{e['schedule']}-{e['config']['w']}", f"seed{i}")
        os.makedirs(d)
        with open(os.path.join(d, "eval.json"), "w") as f:
            json.dump(e, f)


def known_runs():
    # per-seed OOD oracle curves at n = 20, 30, 40: Oracle OOD 90, 80, 70 -> Std = 10 (ddof 1);
    # seed-mean curve 0.967, 0.95, 0.483 -> Front@90 = 30
    window = [synthetic_eval(0, [1.0, 1.0, 0.7]), synthetic_eval(1, [1.0, 0.95, 0.45]),
              synthetic_eval(2, [0.9, 0.9, 0.3])]
    # one seed of w=3 that fails at the first OOD length: Front@90 None, Std undefined
    return window + [synthetic_eval(3, [0.8, 1.0, 1.0], w=3)]


def test_table_std_and_front90_on_known_runs(tmp_path):
    write_runs(tmp_path, known_runs())
    evaluate.main([str(tmp_path)])
    rows = {r["setting"]: r for r in json.loads((tmp_path / "table.json").read_text())["rows"]}
    assert set(rows) == {"window w=5", "window w=3"}
    r = rows["window w=5"]
    assert r["seeds"] == 3 and r["std"] == pytest.approx(10.0) and r["front90"] == 30
    assert r["oracle_ood"] == pytest.approx(80.0)
    assert r["gap"] == pytest.approx(40.0)  # policy (K = 2) is half the oracle: 80 - 40
    assert rows["window w=3"]["front90"] is None and rows["window w=3"]["std"] is None
    md = (tmp_path / "table.md").read_text()
    assert "| dyck | window w=5 | 3 | 80.0 | 30 | 10.0 | 40.0 |" in md


def test_paper_rows_beside_ours(tmp_path):
    write_runs(tmp_path, known_runs())
    evaluate.main([str(tmp_path), "--paper"])
    lines = (tmp_path / "table.md").read_text().splitlines()
    ours = next(i for i, l in enumerate(lines) if "| window w=5 |" in l)
    assert lines[ours + 1].startswith("| dyck | window w=5 (paper) | 18 | 88.2 | 35 | 18.7 | 2.8 |")
    assert any("| dyck | rl (paper) | 18 | 97.5 | 60 | 3.6 | 4.3 |" in l for l in lines)
    assert not any(l.startswith("| addition") for l in lines)  # only the tasks we ran
    paper = json.loads((tmp_path / "table.json").read_text())["paper"]
    assert len(paper) == len(evaluate.PAPER) == 19


def test_no_runs_is_a_one_line_error_with_exit_code_2(tmp_path):
    p = subprocess.run([sys.executable, "evaluate.py", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "no runs" in p.stderr and str(tmp_path) in p.stderr


def test_bad_or_missing_checkpoint_is_a_one_line_value_error(tmp_path):
    with pytest.raises(ValueError, match="no checkpoint") as err:
        evaluate.load_run(str(tmp_path))
    assert "\n" not in str(err.value)
    (tmp_path / "ckpt.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a usable train.py checkpoint") as err:
        evaluate.load_run(str(tmp_path))
    assert "\n" not in str(err.value)
    torch.save({"model": {}, "schedule": {}, "config": {"task": "dyck"}}, tmp_path / "ckpt.pt")
    with pytest.raises(ValueError, match="not a usable"):
        evaluate.load_run(str(tmp_path))


def tiny_cfg(**kw) -> dict:
    c = train.Config(d_model=16, n_head=2, n_layer=1, T_max=4, T_test=6, test_lengths="3,5,8", n_max=5,
                     eval_samples=6, **kw)
    return dataclasses.asdict(c)


def tiny_run(tmp_path, **kw):
    """A run directory (ckpt.pt, config.json, eval.json) of an untrained tiny model."""
    cfg = tiny_cfg(**kw)
    torch.manual_seed(0)
    task, model, schedule = evaluate.build(cfg)
    torch.save({"model": model.state_dict(), "schedule": schedule.state_dict(), "config": cfg}, tmp_path / "ckpt.pt")
    sets = evaluate.eval_set(task, [3, 5, 8], 6, cfg["eval_seed"])
    e = {"task": cfg["task"], "schedule": cfg["schedule"], "seed": 0, "n_max": 5, "config": cfg,
         **evaluate.evaluate(model, schedule, task, sets, cfg["T_test"], n_max=5)}
    (tmp_path / "eval.json").write_text(json.dumps(e))
    return cfg, model


def test_gate_fitting_leaves_the_model_unchanged(tmp_path):
    cfg, _ = tiny_run(tmp_path)
    _, task, model, schedule = evaluate.load_run(str(tmp_path))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rep, data, fitted = evaluate.readout_report(model, schedule, task, cfg, gates=("linear", "mlp"))
    assert set(fitted) == {"gate_linear", "gate_mlp"}
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    # the three splits are different draws, and the test split is eval.json's
    assert rep["split_seeds"] == {"test": 1234, "val": 1235, "fit": 1236}
    assert not torch.equal(data["val"]["signals"]["top1"], data["test"]["signals"]["top1"])
    e = evaluate.load_eval(str(tmp_path))
    fixed_test_acc = rep["readouts"]["fixed"]["curve"]["test_acc"]  # exit everyone at K = 1..T_test
    pooled = [sum(e["acc"][i][k] for i in range(3)) / 3 for k in range(cfg["T_test"])]
    assert fixed_test_acc == pytest.approx(pooled)


def test_cli_readouts_gates_and_timing(tmp_path, capsys):
    tiny_run(tmp_path)
    evaluate.main([str(tmp_path), "--fit-gate", "linear", "--time", "--samples", "4"])
    rep = json.loads((tmp_path / "readouts.json").read_text())
    names = {"fixed", "top1", "margin", "entropy", "kl", "logit_change", "hidden_change", "stable", "gate_linear",
             "max_conf_batch", "max_conf_sample", "policy", "tn", "oracle_first_correct"}
    assert set(rep["readouts"]) == names
    timing = {r["readout"]: r for r in rep["timing"]}
    assert timing["fixed K=6"]["depth"] == 6
    for name in ("top1", "stable", "gate_linear"):  # online early exit reproduces the offline operating point
        c = rep["readouts"][name]["chosen"]
        assert timing[name]["depth"] == pytest.approx(c["test_depth"]) and timing[name]["acc"] == pytest.approx(c["test_acc"])
    out = capsys.readouterr().out
    assert "| gate_linear |" in out and "speed-up" in out


def test_plot_without_matplotlib_is_a_message(tmp_path, monkeypatch, capsys):
    write_runs(tmp_path, known_runs())
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    evaluate.main([str(tmp_path), "--plot"])
    assert "pip install matplotlib" in capsys.readouterr().err
    assert (tmp_path / "table.md").exists()


def test_plots(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    tiny_run(tmp_path)
    evaluate.main([str(tmp_path), "--readouts", "--samples", "4", "--plot"])
    out = capsys.readouterr().out
    for name in ("heatmap.png", "readouts.png", "length_dyck.png", "flip_dyck.png"):
        assert (tmp_path / name).stat().st_size > 1000 and name in out
