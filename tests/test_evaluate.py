"""evaluate.py and what it reads into tables (metrics.py, lab/tables.py): metrics with known answers (exact match, the
one-pass acc[n][K], val-K, shortcuts, hard subset), multi-run tables on synthetic eval.json files (grouping, row keys,
labels, Std, Front@90, significance lines), the published rows, the command line's errors and what it writes,
loading a run, readouts of a frozen model and the readouts.json tied to it, plots. A test of a reliability case
names it (docs/reliability.md)."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

import config
import evaluate
from halting import make_schedule
import metrics
from model import LoopedTransformer, ModelConfig
from tasks import IGNORE, eval_set, get_task
from lab import records, tables

from conftest import call, copy_files, copy_run, in_process, one_line, snapshot

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

@pytest.mark.smoke
def test_val_k_chooses_on_validation_and_reports_test():
    m = synthetic_eval(0, [1.0, 0.8, 0.6])["metrics"]
    assert m["oracle_ood"] == pytest.approx(80.0) and m["val_k"] == [1, 1, 1, 1]  # ties -> the smallest K
    m = synthetic_eval(0, [1.0, 0.8, 0.6], val_shift=1)["metrics"]
    # validation prefers K = 2, where the test accuracy is half the oracle: val-K OOD = 40, below Oracle OOD
    assert m["val_k"] == [2, 2, 2, 2] and m["val_k_ood"] == pytest.approx(40.0) and m["id_k"] == 2
    assert m["id_k_ood"] == pytest.approx(40.0)


@pytest.mark.smoke
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


class Oracle(torch.nn.Module):
    """A fake model: at depth K sample b predicts every scored position right iff K is in good[b], and
    predicts a constant at unscored positions (which exact match must ignore)."""

    def __init__(self, y, good, V):
        super().__init__()
        self.y, self.good, self.V = y, good, V

    def forward(self, x, n_steps, keep_hidden=False):
        scored = self.y != IGNORE
        right = torch.where(scored, self.y, 1)  # (B, T)
        wrong = torch.where(scored, right % (self.V - 1) + 1, 1)  # another token at scored positions
        tok = torch.stack([torch.stack([right[b] if k + 1 in g else wrong[b] for b, g in enumerate(self.good)])
                           for k in range(n_steps)])  # (K, B, T)
        return torch.nn.functional.one_hot(tok, self.V).float(), None


@pytest.mark.smoke
def test_exact_match_counts_only_scored_positions_and_metrics():
    task = get_task("copy")
    sets = eval_set(task, [3, 20], 4, seed=0)
    # sample b of each length is correct at depths good[b]
    good = [{1}, {2, 3}, {3}, set()]
    fixed = make_schedule("fixed", c=3)
    out = {}
    for n, (x, y, _, Tn) in sets.items():
        m = Oracle(y, good, len(task.vocab))
        exact, _, depth = metrics.trajectory_correct(m, fixed, x, y, Tn, 4)
        assert exact.tolist() == [[k + 1 in g for g in good] for k in range(4)]
        out[n] = exact
    e = metrics.evaluate(Oracle(sets[20][1], good, len(task.vocab)), fixed, task, {20: sets[20]}, {20: sets[20]}, 4,
                          n_max=19)
    assert e["acc"] == [[0.25, 0.25, 0.5, 0.0]]
    m = e["metrics"]
    assert m["oracle_ood"] == 50.0 and m["policy_ood"] == 50.0 and m["gap"] == 0.0  # K=3 is the best
    assert m["per_sample_oracle_ood"] == 75.0 and m["front90"] is None


def test_one_pass_matrix_equals_one_pass_per_K():
    task = get_task("dyck")
    torch.manual_seed(0)
    model = LoopedTransformer(ModelConfig(vocab_size=len(task.vocab), d_model=16, n_head=2, n_layer=1))
    sets = eval_set(task, [4, 9], 16, seed=3)
    sched = make_schedule("window", w=2)
    e = metrics.evaluate(model, sched, task, sets, sets, 6, n_max=5)
    for i, n in enumerate(e["lengths"]):
        x, y, _, _ = sets[n]
        for K in range(1, 7):
            pred = model(x, K)[-1].argmax(-1)
            exact = ((pred == y) | (y == IGNORE)).all(-1).float().mean().item()
            assert e["acc"][i][K - 1] == pytest.approx(exact)


def test_front90_and_table_row():
    assert metrics.front90([20, 25, 30], [0.95, 0.91, 0.5]) == 25
    assert metrics.front90([20, 25, 30], [0.8, 0.95, 0.95]) is None
    lengths = [10, 20, 25]
    mk = lambda seed, orc, pol: {"task": "t", "schedule": "s", "seed": seed, "n_max": 19, "lengths": lengths,
                                 "metrics": {"oracle": orc, "oracle_ood": 100 * sum(orc[1:]) / 2,
                                             "policy_ood": pol, "policy_id": 100.0, "gap": 100 * sum(orc[1:]) / 2 - pol,
                                             "policy_depth_ood": 20.0, "flip_rate": 0.1}}
    r = tables.table_row([mk(0, [1, 1.0, 0.8], 80.0), mk(1, [1, 0.9, 0.7], 70.0)])
    # per-seed Oracle OOD 90 and 80: mean 85, sample std sqrt(50) = 7.07 pp
    assert r["oracle_ood"] == pytest.approx(85.0) and r["std"] == pytest.approx(50 ** 0.5)
    assert r["gap"] == pytest.approx(10.0) and r["seeds"] == 2
    assert r["front90"] == 20  # seed-mean oracle curve: 0.95 at 20, 0.75 at 25


# --- tables over seeds ------------------------------------------------------------------------------

@pytest.mark.smoke
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


def test_runs_of_uncommitted_edits_are_their_own_row_and_say_so():
    """S37 (round six): a run trained with an uncommitted edit (of halting.py, say: another method) and a run of the
    committed code shared one row, unlabelled (here: called copies of one seed). Failed before its fix: ValueError: row
    dyck window w=5: seed 0 appears 3 times (?, ?, ?): one run would count as several seeds

    A run's dirty mark (env.git_dirty, any of its segments) is part of its row: runs of committed code (or of
    unknown code: no git, a run from before the mark) keep their rows and labels; each edit is a row of its own,
    labelled by it."""
    clean = synthetic_eval(0, [1.0, 0.9, 0.8])
    clean["env"] = {"git_commit": "a" * 40, "git_dirty": False}
    old = synthetic_eval(1, [1.0, 0.9, 0.8])  # a run from before the mark: no env at all
    edited = synthetic_eval(0, [1.0, 0.9, 0.5])
    edited["env"] = {"git_commit": "a" * 40, "git_dirty": False}
    edited["segments"] = [{"step": 0, "env": {"git_commit": "a" * 40, "git_dirty": "1a2b3c4d5e6f"}}]
    other = synthetic_eval(0, [1.0, 0.9, 0.4])
    other["env"] = {"git_commit": "a" * 40, "git_dirty": "ffffffffffff"}
    groups = tables.group_runs([clean, old, edited, other])
    assert sorted(len(g) for g in groups.values()) == [1, 1, 2]
    assert set(groups) == {("dyck", "window w=5"), ("dyck", "window w=5 uncommitted=1a2b3c4d5e6f"),
                           ("dyck", "window w=5 uncommitted=ffffffffffff")}
    assert tables.run_key(clean) == tables.run_key(edited)  # the same settings: --against still compares them
    # runs that all ran one and the same edit (tests on an edited checkout) are one row, labelled as ever
    same = [synthetic_eval(k, [1.0, 0.9, 0.8]) for k in range(2)]
    for e in same:
        e["env"] = {"git_commit": "a" * 40, "git_dirty": "1a2b3c4d5e6f"}
    assert list(tables.group_runs(same)) == [("dyck", "window w=5")]


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


def fake(seed, eps, j, ood):
    return {"task": "dyck", "schedule": "fixed", "seed": seed, "n_max": 6, "lengths": [3, 8], "run_dir": f"s{seed}e{eps}r{j}",
            "config": {"perturb": eps, "perturb_seed": j, "seed": seed}, "metrics": {"oracle_ood": ood, "oracle": [100.0, ood]}}


@pytest.mark.smoke
def test_perturb_eps_is_part_of_a_rows_key():
    """S17 (round five), revised by issue 68: a rounding-sized --perturb (at most tables.REPLICATE_EPS) is a
    replicate of its seed's plain run, as --perturb_seed is, so the plain and nudged runs share one row; a larger EPS
    starts elsewhere and is another row, labelled by it."""
    plain = [fake(0, 0.0, 0, 10.0), fake(1, 0.0, 0, 20.0)]
    small = [fake(0, 1e-6, j, 10.0 + j) for j in (1, 2)]
    large = [fake(0, 1e-3, j, 12.0 + j) for j in (1, 2)]
    groups = tables.group_runs(plain + small + large)
    assert sorted(len(g) for g in groups.values()) == [2, 4]
    assert {label for _, label in groups} == {"fixed c=20 perturb=0", "fixed c=20 perturb=0.001"}
    assert len({tables.run_key(e) for e in small}) == 1  # perturb_seed stays the replicate, not the key


def test_a_copied_run_is_refused_not_counted_twice(base, tmp_path, capsys):
    """3Sa: cp -r run run.bak counted one seed twice. Failed before its fix."""
    copy_run(base, tmp_path / "rows" / "run")
    copy_run(base, tmp_path / "rows" / "run.bak")  # cp -r run run.bak
    err = one_line(capsys, evaluate.cli([str(tmp_path / "rows")]))
    assert "seed 0 appears 2 times" in err


def test_a_run_given_twice_counts_once_and_mixed_grids_are_refused(base, tmp_path, capsys):
    """2D8 (round two, issue 16): evaluate.py counted a run twice when given a folder twice, or a folder and its
    subfolder."""
    d = copy_files(base, tmp_path / "a" / "run")
    assert evaluate.cli([str(tmp_path / "a"), str(d), str(d)]) == 0
    assert "| dyck | window w=5 | 1 |" in capsys.readouterr().out  # one seed, not three
    other = tmp_path / "a" / "other"
    copy_files(base, other)
    e = json.load(open(other / "eval.json"))
    e["lengths"], e["seed"] = [5, 19, 20, 30], 1
    (other / "eval.json").write_text(json.dumps(e))
    assert evaluate.cli([str(tmp_path / "a")]) == 2
    assert "different grids" in capsys.readouterr().err


# --- the command line ---------------------------------------------------------------------------------

def test_no_runs_is_a_one_line_error_with_exit_code_2(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(ROOT)
    p = in_process(capfd, evaluate.cli, [str(tmp_path)])
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


def test_evaluate_writes_tables_only_where_asked(base, tmp_path, capsys):
    """2D7 (round two, issue 16): evaluate.py overwrote the committed results/table.md and table.json; tables go to
    stdout, and to files only where asked."""
    d = copy_files(base, tmp_path / "run")
    before = snapshot(d)
    assert evaluate.cli([str(d), str(d)]) == 0
    assert "| dyck | window w=5 | 1 |" in capsys.readouterr().out and snapshot(d) == before
    assert not any(".tmp" in f for f in os.listdir(d))


def test_evaluate_out_never_overwrites_a_runs_own_files(base, tmp_path, capsys):
    """3Dd: evaluate.py --out RUN/eval overwrote the run's eval.json (summary.json, config.json too). Failed before
    its fix."""
    d = copy_run(base, tmp_path / "run")
    before = snapshot(d)
    for prefix in ("eval", "summary", "config"):
        assert evaluate.cli([str(d), "--out", str(d / prefix)]) == 2
        assert "the name of a run's own file" in capsys.readouterr().err
    assert snapshot(d) == before


def test_evaluate_plot_creates_its_folder(base, tmp_path, capsys):
    """3U6: evaluate.py --plot DIR refused a folder that did not exist. Failed before its fix."""
    d = copy_run(base, tmp_path / "run")
    assert evaluate.cli([str(d), "--plot", str(tmp_path / "new" / "plots")]) == 0
    assert (tmp_path / "new" / "plots").is_dir()
    capsys.readouterr()  # without matplotlib the first call said "--plot skipped" (one line, exit 0)
    (tmp_path / "afile").write_text("x")
    assert "not a writable folder" in one_line(capsys, evaluate.cli([str(d), "--plot", str(tmp_path / "afile" / "p")]))


def test_readouts_on_a_run_and_its_copy_are_refused_before_any_readout(base, tmp_path, capsys):
    """U17: evaluate.py RUN COPY --readouts wrote readouts.json into both, then refused the table. Failed before its
    fix."""
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(base, a)
    shutil.copytree(base, b)
    before = snapshot(tmp_path)
    err = one_line(capsys, call(evaluate.cli, [str(a), str(b), "--readouts", "--samples", "2"]))
    assert "appears 2 times" in err and snapshot(tmp_path) == before  # unfixed: readouts.json in both


def test_readouts_of_a_run_trained_again_since_are_refused(base, tmp_path, capsys, monkeypatch):
    """S21: evaluate.py --readouts while train.py --overwrite replaced the run put the old weights' readouts.json
    beside the new eval.json. Failed before its fix."""
    d = tmp_path / "run"
    shutil.copytree(base, d)
    assert evaluate.cli([str(d), "--readouts", "--samples", "2"]) == 0
    assert json.load(open(d / "readouts.json"))["tie"]["ckpt.pt"]
    capsys.readouterr()
    ck = torch.load(d / "ckpt.pt", weights_only=True)  # train.py --overwrite: another ckpt.pt, another eval.json
    next(iter(ck["model"].values())).add_(1.0)
    torch.save(ck, d / "ckpt.pt")
    err = one_line(capsys, call(evaluate.cli, [str(d), "--plot", str(tmp_path / "plots")]))
    assert "readouts.json" in err and "trained again" in err
    # replaced while the readouts are computed: nothing written
    os.remove(d / "readouts.json")
    real = evaluate.readouts.readout_report

    def replaced_meanwhile(*a, **k):
        out = real(*a, **k)
        (d / "eval.json").write_bytes((d / "eval.json").read_bytes() + b"\n")
        return out
    monkeypatch.setattr(evaluate.readouts, "readout_report", replaced_meanwhile)
    err = one_line(capsys, call(evaluate.cli, [str(d), "--readouts", "--samples", "2"]))
    assert "changed while" in err and not (d / "readouts.json").exists()


def test_out_writes_md_and_json_as_a_set(tmp_path):
    """C9: `evaluate.py --out PREFIX` wrote PREFIX.md, then failed on PREFIX.json (a full disk): the table and its
    record disagreed. Failed before its fix: PREFIX.md replaced, then "cannot write PREFIX.json (File too large)"."""
    import resource
    write_runs(tmp_path / "runs", known_runs())
    (tmp_path / "t.md").write_text("old table\n")
    (tmp_path / "t.json").write_text('{"rows": []}\n')

    def limit():  # the .md (about 0.5 KB) fits, the .json (about 2 KB) does not
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "evaluate.py"), str(tmp_path / "runs"), "--out",
                           str(tmp_path / "t")], capture_output=True, text=True, timeout=300, preexec_fn=limit,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    err = proc.stderr
    assert proc.returncode == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (proc.returncode, err)
    assert "t.json" in err
    assert (tmp_path / "t.md").read_text() == "old table\n" and (tmp_path / "t.json").read_text() == '{"rows": []}\n'
    assert not [f for f in os.listdir(tmp_path) if ".tmp" in f]
