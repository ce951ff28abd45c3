"""The evaluation suite: metrics with known answers (val-K, shortcuts, hard subset), multi-run tables on
synthetic eval.json files (grouping, labels, Std, Front@90, significance lines), the published rows, the
command line's errors, loading a run, readouts of a frozen model, plots."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

import config
import evaluate
import metrics
from tasks import eval_set, get_task
from lab import records, tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENGTHS, N_MAX = [10, 20, 30, 40], 19
CONFIG = dataclasses.asdict(config.Config())


def synthetic_eval(seed: int, ood_oracle: list, schedule="window", val_shift=0, **config) -> dict:
    """An eval.json whose oracle curve is known: acc[n] = [a, a/2] (K = 2), so Oracle(n) = a; policy = K=2.
    val_shift=1 makes the validation draw prefer K = 2 (val-K then reports a/2)."""
    acc = [[a, a / 2] for a in [1.0] + ood_oracle]
    rows = [{"acc": a, "val_acc": [0.5, 0.5 + val_shift], "tn_acc": a[1], "per_sample_oracle": a[0],
             "policy_acc": a[1], "policy_depth": 2.0, "flip": [0.1]} for a in acc]
    cfg = {**CONFIG, "schedule": schedule, "seed": seed, **config}
    return {"task": "dyck", "schedule": schedule, "seed": seed, "n_max": N_MAX, "lengths": LENGTHS, "K": [1, 2],
            "acc": acc, "metrics": metrics.metrics(LENGTHS, rows, {}, N_MAX), "config": cfg}


def write_runs(root, evals):
    for i, e in enumerate(evals):
        d = os.path.join(root, f"{e['schedule']}-{e['config']['w']}-{i}", f"seed{e['seed']}")
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


# --- metrics of one run ------------------------------------------------------------------------------

def test_val_k_chooses_on_validation_and_reports_test():
    m = synthetic_eval(0, [1.0, 0.8, 0.6])["metrics"]
    assert m["oracle_ood"] == pytest.approx(80.0) and m["val_k"] == [1, 1, 1, 1]  # ties -> the smallest K
    m = synthetic_eval(0, [1.0, 0.8, 0.6], val_shift=1)["metrics"]
    # validation prefers K = 2, where the test accuracy is half the oracle: val-K OOD = 40, below Oracle OOD
    assert m["val_k"] == [2, 2, 2, 2] and m["val_k_ood"] == pytest.approx(40.0) and m["id_k"] == 2
    assert m["id_k_ood"] == pytest.approx(40.0)


def test_shortcuts_on_known_sets():
    task = get_task("multiplication")
    sets = eval_set(task, [3, 4], 64, seed=5)
    s = metrics.shortcut_scores(task, sets)
    for i, n in enumerate([3, 4]):  # the b <= 2 rule is right exactly where b <= 2 (or a = 0: the answer 0)
        ops = [task.operands(x.tolist()) for x in sets[n][0]]
        assert s["b<=2 rule"][i] == pytest.approx(sum(b <= 2 or a == 0 for a, b, _ in ops) / 64)
        assert s["b<=2 rule"][i] >= max(s["zero"][i], s["copy a"][i], s["shift a"][i])
    dyck = get_task("dyck")
    sets = eval_set(dyck, [20], 128, seed=5)
    s = metrics.shortcut_scores(dyck, sets)
    hard = [dyck.hard([t for t in x.tolist() if t]) for x in sets[20][0]]
    # counting fails on a hard sample exactly when some prefix balances after going negative; never on others
    assert 0.6 < s["counting"][0] < 1 and s["counting"][0] >= 1 - sum(hard) / 128
    assert 0.05 < sum(hard) / 128 < 0.4


def test_hard_subset_accuracy_is_over_hard_samples_only():
    task = get_task("dyck")
    sets = eval_set(task, [20], 64, seed=7)
    hard = torch.tensor([task.hard([t for t in x.tolist() if t]) for x in sets[20][0]])

    class Counting(torch.nn.Module):  # predicts with the counting shortcut at every depth
        def forward(self, x, K, keep_hidden=False):
            preds = torch.stack([torch.tensor([1 if t == task.stoi["("] else -1 for t in row]).cumsum(0).eq(0).long() + 3
                                 for row in x.tolist()])
            logits = torch.nn.functional.one_hot(preds, len(task.vocab)).float().expand(K, -1, -1, -1)
            return logits, torch.zeros(K + 1, *x.shape, 2)

    sched = config.build(config.Config(schedule="matched"))[2]
    e = metrics.evaluate(Counting(), sched, task, sets, sets, 3, n_max=10)
    counting = e["shortcuts"]["counting"][0]
    assert e["acc"][0][0] == pytest.approx(counting)  # the model is the shortcut
    assert e["metrics"]["oracle_ood"] == pytest.approx(100 * counting)
    assert e["metrics"]["oracle_hard_ood"] < e["metrics"]["oracle_ood"]  # counting fails on hard samples
    assert e["metrics"]["hard_frac"][0] == pytest.approx(hard.float().mean().item())


# depth use: lengths 10 (ID), 20, 30 (OOD, n_max 19), K = 1, 2, 3; the ID row must not count
DEPTH_ACC = [[0.0, 0.0, 1.0], [0.5, 0.92, 0.95], [0.1, 0.6, 0.58]]
DEPTH_HARD = [[0.0, 0.0, 1.0], None, [0.0, 0.5, 0.4]]  # no hard sample at n = 20


def test_depth_use_on_a_hand_computed_matrix():
    m = metrics.depth_use([10, 20, 30], DEPTH_ACC, DEPTH_HARD, 19, [1, 2, 3])
    # K = 1: (0.5 + 0.1) / 2; best K per length: (0.95 + 0.6) / 2 = 77.5; per depth over OOD: 30, 76.0, 76.5, so K = 2
    # is within a point of the best single depth (K = 3) and K = 1 is not
    assert m["k1_ood"] == pytest.approx(30.0) and m["loop_gain_ood"] == pytest.approx(47.5) and m["settle_k_ood"] == 2
    # the hard subset: n = 30 alone (n = 20 has no hard sample): 0 -> 50, depths 0, 50, 40
    assert m["k1_hard_ood"] == pytest.approx(0.0) and m["loop_gain_hard_ood"] == pytest.approx(50.0)
    assert m["settle_k_hard_ood"] == 2
    # settle K is the shallowest depth within a point: a curve that climbs to the end settles at the end
    assert metrics.depth_use([20], [[0.1, 0.5, 0.9]], None, 19, [1, 2, 3]) == {
        "k1_ood": pytest.approx(10.0), "loop_gain_ood": pytest.approx(80.0), "settle_k_ood": 3}
    # no K axis (one fixed depth), or no OOD length: nothing to measure
    none = {"k1_ood": None, "loop_gain_ood": None, "settle_k_ood": None}
    assert metrics.depth_use([20, 30], [[0.5], [0.4]], None, 19, [15]) == none
    assert metrics.depth_use([10], [[0.5, 0.9]], None, 19, [1, 2]) == none


def depth_eval(seed: int, acc=DEPTH_ACC, hard=DEPTH_HARD) -> dict:
    """An eval.json of the depth-use matrices above, its metrics from metrics.metrics (what train.py writes)."""
    rows = [{"acc": a, "val_acc": a, "tn_acc": a[-1], "per_sample_oracle": max(a), "policy_acc": a[-1],
             "policy_depth": 3.0, "flip": [0.1, 0.1], "hard_acc": h, "hard_frac": 0.0 if h is None else 0.2,
             "policy_hard_acc": None if h is None else h[-1]} for a, h in zip(acc, hard)]
    cfg = {**CONFIG, "seed": seed, "T_test": 3}
    return {"task": "dyck", "schedule": "window", "seed": seed, "n_max": N_MAX, "lengths": [10, 20, 30], "K": [1, 2, 3],
            "acc": acc, "hard_acc": hard, "metrics": metrics.metrics([10, 20, 30], rows, {}, N_MAX, [1, 2, 3]), "config": cfg}


def test_an_old_eval_json_gains_depth_use_when_read(tmp_path):
    e = depth_eval(0)
    written = {k: e["metrics"][k] for k in records.DEPTH_METRICS | records.HARD_DEPTH_METRICS}
    assert written["loop_gain_ood"] == pytest.approx(47.5)  # metrics() writes them
    old = {**e, "metrics": {k: v for k, v in e["metrics"].items() if k not in written}}
    (tmp_path / "eval.json").write_text(json.dumps(old))
    got = records.load_eval(str(tmp_path))["metrics"]
    assert {k: got[k] for k in written} == pytest.approx(written)  # read: the same values metrics() writes
    # a committed run of before the metrics: its file lacks them, load_eval adds them from its acc
    d = os.path.join(ROOT, "results", "chaos", "dyck", "fixed", "seed100", "r0")
    raw = json.load(open(os.path.join(d, "eval.json")))
    assert "k1_ood" not in raw["metrics"]
    m = records.load_eval(d)["metrics"]
    ood = [i for i, n in enumerate(raw["lengths"]) if n > raw["n_max"]]
    assert m["k1_ood"] == pytest.approx(100 * sum(raw["acc"][i][0] for i in ood) / len(ood))
    assert m["k1_ood"] + m["loop_gain_ood"] == pytest.approx(raw["metrics"]["oracle_ood"])
    assert m["k1_hard_ood"] + m["loop_gain_hard_ood"] == pytest.approx(raw["metrics"]["oracle_hard_ood"])
    bad = {**old, "hard_acc": [[0.5]] * 3}  # one depth where K has three
    (tmp_path / "eval.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="'hard_acc' must be null or hold"):
        records.load_eval(str(tmp_path))


def test_the_report_says_what_the_loop_adds():
    e = {**depth_eval(0), "run_dir": "out/x"}
    line = [l for l in metrics.format_run(e).splitlines() if "depth use" in l]
    assert line == ["  depth use, OOD: K=1 30.0% -> best 77.5% (the loop adds 47.5 points; answers settle by K = 2); "
                    "hard subset: 0.0% -> 50.0% (+50.0)"]
    one = {**e, "K": [15], "metrics": {**e["metrics"], **metrics.depth_use(e["lengths"], [[a[0]] for a in e["acc"]], None, N_MAX, [15])}}
    assert "depth use: scored at one fixed depth (K = 15), no loop to measure" in metrics.format_run(one)


# --- tables over seeds ------------------------------------------------------------------------------

def test_table_std_and_front90_on_known_runs():
    md, rows = tables.table(tables.group_runs(known_runs()))
    rows = {r["setting"]: r for r in rows}
    assert set(rows) == {"window w=5", "window w=3"}
    r = rows["window w=5"]
    assert r["seeds"] == 3 and r["std"] == pytest.approx(10.0) and r["front90"] == 30
    assert r["oracle_ood"] == pytest.approx(80.0)
    assert r["gap"] == pytest.approx(40.0)  # policy (K = 2) is half the oracle: 80 - 40
    assert r["std_lo"] <= r["std"] <= r["std_hi"]
    assert rows["window w=3"]["front90"] is None and rows["window w=3"]["std"] is None
    assert "| dyck | window w=5 | 3 | 50.0 | 80.0 | 80.0 | 30 | 10.0 [" in md
    assert " vs " not in md  # no test against a row of one seed


def test_the_table_shows_depth_use_and_the_studies_rows_leave_it_out():
    flat = [[0.0, 0.0, 1.0], [0.95, 0.92, 0.95], [0.58, 0.6, 0.58]]  # a second seed whose loop adds little
    rows = [tables.table_row([depth_eval(0), depth_eval(1, flat), depth_eval(2, flat)])]
    r = rows[0]
    # K = 1: 30 and 76.5 (twice); gain 47.5 and 1.0 (twice); settle K 2, 1, 1 -> median 1
    assert r["k1_ood"] == pytest.approx((30 + 2 * 76.5) / 3) and r["loop_gain_ood"] == pytest.approx((47.5 + 2 * 1) / 3)
    assert r["settle_k_ood"] == 1
    md, _ = tables.table(tables.group_runs([depth_eval(0), depth_eval(1, flat), depth_eval(2, flat)]))
    head, _, line = md.splitlines()[:3]
    assert head.endswith("| K=1 OOD | loop gain | settle K | hard: K=1 / gain / settle K |")
    assert line.endswith(f"| {(30 + 2 * 76.5) / 3:.1f} | {(47.5 + 2 * 1) / 3:.1f} | 1 | {r['k1_hard_ood']:.1f} / "
                         f"{r['loop_gain_hard_ood']:.1f} / {r['settle_k_hard_ood']:g} |")
    assert "K=1" not in tables.format_row({**r, "setting": "window"}, True)  # study/study.py's tables: unchanged
    assert tables.format_row({**r, "setting": "window"}, True).count("|") + 4 == line.count("|")


def test_rows_are_keyed_on_every_setting_and_labelled_by_what_differs():
    runs = [synthetic_eval(s, [1.0, 0.9, 0.8], schedule="rl") for s in (0, 1)]
    runs += [synthetic_eval(s, [1.0, 0.9, 0.5], schedule="rl", lambda_ent=0.0) for s in (0, 1)]
    runs += [synthetic_eval(0, [1.0, 0.9, 0.8], schedule="rl", T_max=5)]
    runs += [synthetic_eval(0, [1.0, 0.9, 0.8], schedule="rl", d_model=256)]
    runs += [synthetic_eval(s, [1.0, 0.9, 0.8], threads=1 + s, out_dir=f"x{s}") for s in (0, 1)]  # bookkeeping only
    runs += [synthetic_eval(2, [1.0, 0.9, 0.8], lambda_ent=0.5)]  # not a window knob: same row as the two above
    groups = tables.group_runs(runs)
    assert sorted(len(g) for g in groups.values()) == [1, 1, 2, 2, 3]
    labels = {label for _, label in groups}
    assert "rl T_max=5 d_model=64 lambda_ent=0.001" in labels and "rl T_max=20 d_model=64 lambda_ent=0" in labels
    assert "rl T_max=20 d_model=256 lambda_ent=0.001" in labels
    assert "window w=5 T_max=20 d_model=64" in labels


def test_fixed_c_0_is_the_row_of_c_T_max_and_meets_the_paper_row():
    runs = [synthetic_eval(0, [1.0, 0.9, 0.8], schedule="fixed", c=0, T_max=20),
            synthetic_eval(1, [1.0, 0.9, 0.8], schedule="fixed", c=20, T_max=20)]
    groups = tables.group_runs(runs)
    assert list(groups) == [("dyck", "fixed c=20")] and len(groups["dyck", "fixed c=20"]) == 2
    md, _ = tables.table(groups, paper=True)
    assert "| fixed c=20 (paper) |" in md


def test_a_row_with_runs_on_different_grids_is_refused():
    a, b = synthetic_eval(0, [1.0, 0.9, 0.8]), synthetic_eval(1, [1.0, 0.9, 0.8])
    b["lengths"] = [10, 20, 30, 45]
    a["run_dir"], b["run_dir"] = "A", "B"
    with pytest.raises(ValueError, match="different grids"):
        tables.group_runs([a, b])


def test_significance_lines_between_rows(capsys):
    window = [synthetic_eval(s, [1.0, 1.0, v]) for s, v in enumerate([0.7, 0.72, 0.74, 0.76])]
    fixed = [synthetic_eval(s, [1.0, 1.0, v], schedule="fixed") for s, v in enumerate([0.99, 0.98, 0.1, 0.97])]
    md, rows = tables.table(tables.group_runs(window + fixed))
    line = [l for l in md.splitlines() if " vs " in l]  # seeds 0-3 on both sides: paired
    assert len(line) == 1 and "sign-flip p " in line[0] and "permutation p " in line[0]  # Oracle OOD (no hard subset)
    assert "paired on the 4 seeds" in line[0] and "no 95% interval at 4 pairs" in line[0] and "inf" not in line[0]
    assert "4 runs vs 4 runs" in line[0] and "detectable" not in line[0] and "80% power" in line[0]
    for e in fixed:  # fresh seeds: unpaired, Welch on the seeds' means
        e["seed"] += 10
    line = [l for l in tables.table(tables.group_runs(window + fixed))[0].splitlines() if " vs " in l]
    assert len(line) == 1 and "no seed in common" in line[0] and "Welch's t" in line[0] and "permutation p " in line[0]


def test_cli_tables_go_to_stdout_and_to_files_only_when_asked(tmp_path, capsys):
    write_runs(tmp_path, known_runs())
    before = sorted(os.listdir(tmp_path))
    evaluate.main([str(tmp_path), str(tmp_path), os.path.join(str(tmp_path), "window-5-0")])  # duplicates count once
    out = capsys.readouterr().out
    assert "| dyck | window w=5 | 3 |" in out and sorted(os.listdir(tmp_path)) == before
    evaluate.main([str(tmp_path), "--out", str(tmp_path / "table")])
    rows = json.loads((tmp_path / "table.json").read_text())["rows"]
    assert {r["setting"] for r in rows} == {"window w=5", "window w=3"}
    assert (tmp_path / "table.md").read_text().startswith("| task | setting |")


def test_paper_rows_beside_ours():
    md, _ = tables.table(tables.group_runs(known_runs()), paper=True)
    lines = md.splitlines()
    ours = next(i for i, l in enumerate(lines) if "| window w=5 |" in l)
    assert lines[ours + 1].startswith("| dyck | window w=5 (paper) | 18 | - | 88.2 | - | 35 | 18.7 | 2.8 |")
    assert any("| dyck | rl (paper) | 18 | - | 97.5 | - | 60 | 3.6 | 4.3 |" in l for l in lines)
    assert not any(l.startswith("| addition") for l in lines)  # only the tasks we ran
    assert len(tables.paper_rows()) == 23


# --- the command line ---------------------------------------------------------------------------------

def test_no_runs_is_a_one_line_error_with_exit_code_2(tmp_path):
    p = subprocess.run([sys.executable, "evaluate.py", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "no runs" in p.stderr and str(tmp_path) in p.stderr


def test_bad_or_missing_checkpoint_is_a_one_line_value_error(tmp_path):
    with pytest.raises(ValueError, match="no checkpoint") as err:
        records.load_run(str(tmp_path))
    assert "\n" not in str(err.value)
    (tmp_path / "ckpt.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a usable train.py checkpoint") as err:
        records.load_run(str(tmp_path))
    assert "\n" not in str(err.value)
    torch.save({"model": {}, "schedule": {}, "config": {"task": "dyck"}}, tmp_path / "ckpt.pt")
    with pytest.raises(ValueError, match="not a usable"):
        records.load_run(str(tmp_path))


def tiny_run(tmp_path, **kw):
    """A run directory (ckpt.pt, config.json, eval.json) of an untrained tiny model."""
    cfg = config.Config(d_model=16, n_head=2, n_layer=1, T_max=4, T_test=6, test_lengths="3,5,8", n_max=5,
                       eval_samples=6, **kw)
    task, model, schedule = config.build(cfg)
    torch.save({"model": model.state_dict(), "schedule": schedule.state_dict(), "config": dataclasses.asdict(cfg),
                "step": cfg.max_iters}, tmp_path / "ckpt.pt")
    sets = [eval_set(task, [3, 5, 8], 6, cfg.eval_seed + i) for i in (0, 1)]
    e = {"task": cfg.task, "schedule": cfg.schedule, "seed": 0, "n_max": 5, "config": dataclasses.asdict(cfg),
         **metrics.evaluate(model, schedule, task, *sets, cfg.T_test, n_max=5)}
    (tmp_path / "eval.json").write_text(json.dumps(e))
    return cfg, model


def test_gate_fitting_leaves_the_model_unchanged(tmp_path, capsys):
    cfg, _ = tiny_run(tmp_path)
    _, task, model, schedule = records.load_run(str(tmp_path))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    evaluate.main([str(tmp_path), "--fit_gate", "linear,mlp"])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    rep = json.loads((tmp_path / "readouts.json").read_text())
    assert {"gate_linear", "gate_mlp"} <= set(rep["readouts"])
    # the three splits are different draws, and the test split is eval.json's
    assert rep["split_seeds"] == {"test": 1234, "val": 1235, "fit": 1236}
    e = records.load_eval(str(tmp_path))
    fixed_test_acc = rep["readouts"]["fixed"]["curve"]["test_acc"]  # exit everyone at K = 1..T_test
    pooled = [sum(e["acc"][i][k] for i in range(3)) / 3 for k in range(cfg.T_test)]
    assert fixed_test_acc == pytest.approx(pooled)


def test_cli_readouts_gates_and_timing(tmp_path, capsys):
    tiny_run(tmp_path)
    evaluate.main([str(tmp_path), "--fit_gate", "linear", "--time", "--samples", "4"])
    rep = json.loads((tmp_path / "readouts.json").read_text())
    names = {"fixed", "top1", "margin", "entropy", "kl", "logit_change", "hidden_change", "stable", "gate_linear",
             "max_conf_batch", "max_conf_sample", "policy", "tn", "oracle_first_correct",
             "kl_huginn", "kl_huginn@0.001", "kl_huginn@0.0005"}  # Huginn's direction, its fixed thresholds
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
    evaluate.main([str(tmp_path), "--plot", str(tmp_path)])
    assert "pip install matplotlib" in capsys.readouterr().err


def test_plots(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    tiny_run(tmp_path)
    evaluate.main([str(tmp_path), "--readouts", "--samples", "4", "--plot", str(tmp_path)])
    out = capsys.readouterr().out
    for name in ("heatmap_dyck", "readouts_dyck", "length_dyck.png", "depth_dyck.png", "flip_dyck.png"):
        assert name in out
    for path in [l.split("plot: ")[1] for l in out.splitlines() if l.startswith("plot: ")]:
        assert os.path.getsize(path) > 1000
