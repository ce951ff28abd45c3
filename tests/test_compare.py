"""Two sets of runs compared with the seed as the unit (lab/stats.py's cluster tests, lab/compare.py, evaluate.py
--against), against hand and textbook values and by simulation. Each test was seen failing on a deliberate
mutation, named in its docstring."""

import itertools
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import evaluate
from lab import compare, stats
from study import stats as study_stats

from conftest import in_process

# Wikipedia, "Welch's t-test", example 1: t = -2.46, df = 25.0 (tests/test_stats.py checks p)
A1 = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
A2 = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]


@pytest.mark.smoke
def test_cluster_welch_interval_by_hand_and_a_seed_counts_once():
    """Mutation seen failing: the runs pooled as seeds (np.concatenate in place of cluster_means)."""
    r = stats.cluster_welch([[x] for x in A1], [[x] for x in A2])
    diff = np.mean(A1) - np.mean(A2)
    se = math.sqrt(np.var(A1, ddof=1) / 15 + np.var(A2, ddof=1) / 15)
    assert r["diff"] == pytest.approx(diff) and r["df"] == pytest.approx(25.0, abs=0.05)
    assert r["hi"] - r["diff"] == pytest.approx(2.0595 * se, rel=2e-3)  # t_.975(25) = 2.0595, any t table
    assert r["lo"] < diff < r["hi"] < 0
    # 80% power: (t_.975 + t_.80) se with t_.80(25) = 0.856
    assert r["detectable"] == pytest.approx((2.0595 + 0.856) * se, rel=3e-3)
    # five identical replicates of every seed are the same evidence as one run a seed
    five = stats.cluster_welch([[x] * 5 for x in A1], [[x] * 5 for x in A2])
    assert five["p"] == pytest.approx(r["p"]) and five["hi"] == pytest.approx(r["hi"])


def brute_spread_p(a, b):
    """The permutation p by hand: centre each set, move whole seeds, every split enumerated."""
    ca = [np.asarray(c, float) - np.concatenate(a).mean() for c in a]
    cb = [np.asarray(c, float) - np.concatenate(b).mean() for c in b]
    pool = ca + cb

    def T(ia):
        x = np.concatenate([pool[i] for i in ia])
        y = np.concatenate([pool[i] for i in range(len(pool)) if i not in ia])
        return math.log(x.var(ddof=1) / y.var(ddof=1))
    t0 = T(tuple(range(len(ca))))
    ts = [T(ia) for ia in itertools.combinations(range(len(pool)), len(ca))]
    return min(1.0, 2 * min(np.mean([t >= t0 - 1e-12 for t in ts]), np.mean([t <= t0 + 1e-12 for t in ts])))


def test_cluster_spread_p_against_enumeration():
    """Mutation seen failing: the two-sided p as Pr(|T*| >= |T|) without the doubling of the smaller tail."""
    a = [[1.0, 2.5], [4.0], [0.5, 0.7]]
    b = [[3.0, 3.2], [3.5], [2.9, 3.1], [3.3], [3.4], [3.0]]  # p 0.024 here, 0.060 by |T*| >= |T|
    r = stats.cluster_spread(a, b)
    assert r["exact"] and r["p"] == pytest.approx(brute_spread_p(a, b))
    assert r["ratio"] == pytest.approx(math.sqrt(stats.run_var(a) / stats.run_var(b)))
    assert r["lo"] < r["ratio"] < r["hi"]


def coverage(reps: int, sims: int = 120, seed: int = 1) -> float:
    rng, hits = np.random.default_rng(seed), 0
    for i in range(sims):
        # true Std ratio over runs: a: seed Std 2, run Std 1; b: 1 and 0.5 -> sqrt(5 / 1.25) = 2
        a = [list(rng.normal(rng.normal(0, 2), 1, reps)) for _ in range(8)]
        b = [list(rng.normal(rng.normal(7, 1), 0.5, reps)) for _ in range(10)]
        r = stats.cluster_spread(a, b, n_perm=199, seed=i)
        hits += r["lo"] <= 2 <= r["hi"]
    return hits / sims


def test_cluster_spread_interval_covers_with_and_without_replicates():
    """Mutations seen failing: no centring (the means 0 and 7 count as spread: coverage 0); moving single runs
    in place of whole seeds (coverage 0.73 with replicates)."""
    assert 0.88 <= coverage(1) <= 1.0
    assert 0.88 <= coverage(3) <= 1.0


def test_detectable_ratio_against_the_f_table_and_by_simulation():
    """F_.975(9, 9) = 4.026 and F_.80(9, 9) = 1.785 (any F table). Mutation seen failing: F_.80 in place of F_.20."""
    r = stats.detectable_ratio(10, 10)
    assert r == pytest.approx(math.sqrt(4.026 * 1.785), rel=2e-3)
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, r, (4000, 10)), rng.normal(0, 1, (4000, 10))
    F = a.var(axis=1, ddof=1) / b.var(axis=1, ddof=1)
    assert np.mean(F > 4.026) == pytest.approx(0.8, abs=0.03)


@pytest.mark.smoke
def test_effective_runs_by_hand():
    """N / (1 + (m - 1) ICC). Mutation seen failing: m - 1 replaced by m."""
    groups = [[1.0, 2.0, 3.0], [4.0, 6.0, 5.0], [2.0, 2.0, 5.0], [7.0, 8.0, 9.0]]
    icc = stats.anova_icc(groups)["icc"]
    assert stats.effective_runs(groups) == pytest.approx(12 / (1 + 2 * icc))
    assert stats.effective_runs([[1.0], [2.0], [4.0]]) == 3


def simulated_run(seed, rng, level, shift=0.0):
    """One simulated dyck run of a seed whose own level is `level` (OOD, hard subset), numerical chaos on top; ID is
    100 but in one run in fifty (99.8), exit depth one value (a fixed schedule's), no training log."""
    return {"seed": int(seed), "task": "dyck", "run_dir": "/nonexistent",
            "metrics": {"oracle_ood": float(level[0] + shift + rng.normal(0, 6)),
                        "oracle_hard_ood": float(level[1] + shift + rng.normal(0, 9)),
                        "policy_id": 99.8 if rng.random() < 0.02 else 100.0,
                        "flip_rate": float(np.exp(rng.normal(-7, 0.8))), "policy_depth_ood": 28.3}}


def simulated_sets(rng, design, shift=0.0):
    """(new, reference): a reference of 10 seeds x 5 runs, and 5 new runs: one more run of each of 5 of its seeds
    (design "same") or 5 fresh seeds one run each ("fresh"), shifted by `shift` points on OOD and the hard subset."""
    level = lambda: (rng.normal(88, 3), rng.normal(75, 5))
    levels = {s: level() for s in range(100, 110)}
    ref = [simulated_run(s, rng, levels[s]) for s in levels for _ in range(5)]
    if design == "same":
        return [simulated_run(s, rng, levels[s], shift) for s in rng.choice(list(levels), 5, replace=False)], ref
    return [simulated_run(s, rng, level(), shift) for s in range(200, 205)], ref


@pytest.mark.parametrize("design", ["same", "fresh"])
def test_against_false_alarm_rate_and_a_real_change_on_simulated_ensembles(design):
    """Sets drawn from the reference's own distribution are called "differs" at most about 5% of the time (200
    draws: the Clopper-Pearson interval reaches 5%, the rate is at most 8%), with the reference's seeds and with
    fresh ones; a 15-point shift is found. Seen failing on the old calibration (the reference's own runs held out,
    the new runs left out of the null; git show 0407f9f:lab/compare.py, the same 200 draws at 200 of its splits):
    58 of 200 (29%) with the same seeds, 132 of 200 (66%) with fresh seeds."""
    rng = np.random.default_rng(1)
    alarms = sum(compare.against(*simulated_sets(rng, design))["verdict"] == "differs" for _ in range(200))
    assert study_stats.binomial_interval(alarms, 200)[0] <= 0.05 and alarms <= 16
    found = [compare.against(*simulated_sets(rng, design, shift=-15)) for _ in range(20)]
    assert sum(r["verdict"] == "differs" for r in found) >= 15
    assert all("OOD: location" in r["differ"] or "hard-subset OOD: location" in r["differ"] for r in found if r["differ"])


def test_against_one_run_off_a_constant_reference_is_not_a_difference():
    """The case of issue 68, 2(c): ID is 100 in every reference run and one new run converged at 99.8. Seen failing
    on the old calibration (every split of a constant reference gives p 1, so any new p below it "differs")."""
    rng = np.random.default_rng(5)
    for design in ("same", "fresh"):
        new, ref = simulated_sets(rng, design)
        for e in ref:
            e["metrics"]["policy_id"] = 100.0
        for e in new:
            e["metrics"]["policy_id"] = 100.0
        new[0]["metrics"]["policy_id"] = 99.8
        r = compare.against(new, ref)
        assert r["adjusted"]["ID: location"] > 0.05 and r["adjusted"]["ID: spread"] > 0.05
        assert "ID is 100 in every reference run" in r["constant"][0]


def test_against_resplits_follow_the_new_sets_design():
    """Within seeds: each shared seed keeps its count of new runs in every re-split; fresh seeds: as many seeds as the
    new set has are drawn as new, each cut to one run. Mutation seen failing: half the seeds held out (issue 68, 2(b))."""
    seeds = [0, 1, 2] + [s for s in range(10) for _ in range(5)]
    is_new = np.arange(len(seeds)) < 3
    A, B, within, n = compare.resplits(seeds, is_new, 200, np.random.default_rng(0))
    assert within and n == 6 ** 3 and not (A & B).any()
    for s in (0, 1, 2):
        assert ((A[:, np.array(seeds) == s]).sum(1) == 1).all()
    assert B[:, np.array(seeds) >= 3].all()
    seeds = [20, 21, 22] + seeds[3:]
    A, B, within, n = compare.resplits(seeds, is_new, 200, np.random.default_rng(0))
    drawn = [{seeds[i] for i in np.flatnonzero(row)} for row in A]
    assert not within and n == math.comb(13, 3) and all(len(d) == 3 for d in drawn) and (A.sum(1) == 3).all()
    assert all(not d & {seeds[i] for i in np.flatnonzero(row)} for d, row in zip(drawn, B))


def test_against_refuses_new_seeds_partly_in_the_reference():
    rng = np.random.default_rng(0)
    new, ref = simulated_sets(rng, "fresh")
    new[0]["seed"] = 100
    with pytest.raises(ValueError, match=r"share seeds \[100\] with the reference but not seeds \[201, 202, 203, 204\]"):
        compare.against(new, ref)


@pytest.mark.parametrize("new, ref, words", [
    ("results/chaos/dyck/threads2/window", "results/ladder/copy", "one task"),
    ("results/chaos/dyck/threads2/window/seed100", "results/chaos/dyck/window", "at least 2 seeds"),
    ("results/chaos/dyck/threads2/window", "results/chaos/dyck/window/seed100", "at least 4 seeds"),
    ("results/chaos/dyck/threads2/window", "results/chaos/dyck/threads2/window", "its own reference"),
])
def test_against_bad_input_is_one_line(new, ref, words, capfd):
    p = in_process(capfd, evaluate.cli, [new, "--against", ref])
    assert p.returncode == 2 and p.stdout == "" and words in p.stderr and len(p.stderr.strip().splitlines()) == 1


# --- issue 71, group B: --against reads one experiment a side, and a run once; group D: H3 -------------------

def against_cli(new, ref, timeout=120):
    """`python evaluate.py NEW --against REF`, a real process: the command's own wiring (its __main__) and a
    hang killed by the timeout."""
    return subprocess.run([sys.executable, "evaluate.py", str(new), "--against", str(ref)], capture_output=True,
                          text=True, timeout=timeout)


def against_here(capfd, new, ref):
    """The same command run in this process (conftest.in_process): its exit code, stdout and stderr."""
    return in_process(capfd, evaluate.cli, [str(new), "--against", str(ref)], timeout=120)


def test_against_refuses_a_reference_of_two_experiments(tmp_path, capfd):
    """S22: a reference of fixed and rl runs was pooled as one ensemble (a seed's fixed and rl runs "replicates")
    and the verdict printed, rc 0. Seen failing before the fix (CONSISTENT)."""
    (tmp_path / "ref").mkdir()
    for row in ("fixed", "rl"):
        os.symlink(os.path.abspath(f"results/chaos/dyck/{row}"), tmp_path / "ref" / row)
    p = against_here(capfd, "results/chaos/dyck/threads2/fixed", tmp_path / "ref")
    assert p.returncode == 2 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1
    assert "--against: 2 experiments (fixed c=20" in p.stderr and "rl" in p.stderr


def test_against_copies_of_the_references_runs_are_not_new_runs(tmp_path, capfd):
    """S23: `cp -r` copies of the reference's own runs passed as new runs (only realpaths were compared). Seen failing
    before the fix (CONSISTENT, rc 0)."""
    for k in (100, 101, 102):
        shutil.copytree(f"results/chaos/dyck/window/seed{k}/r0", tmp_path / "new" / f"seed{k}")
    p = against_here(capfd, tmp_path / "new", "results/chaos/dyck/window")
    assert p.returncode == 2 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1
    assert "has the seed, replicate and results of the reference's" in p.stderr and "its own reference" in p.stderr


def test_against_a_run_and_its_backup_are_not_two_replicates(tmp_path, capfd):
    """S24: a run and its `cp -r` backup counted as two replicates of its seed (the table of the same folder refuses
    it). Seen failing before the fix (a verdict, rc 0)."""
    shutil.copytree("results/chaos/dyck/threads2/window", tmp_path / "ref")
    shutil.copytree(tmp_path / "ref" / "seed100", tmp_path / "ref" / "seed100.bak")
    p = against_here(capfd, "results/chaos/dyck/threads2/fixed", tmp_path / "ref")
    assert p.returncode == 2 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1
    assert "seed 100 appears 2 times" in p.stderr


def test_against_a_fifo_log_neither_hangs_nor_drops_the_loss_test_silently(tmp_path):
    """H3: --against opened metrics.jsonl with a plain open(): a FIFO hung it, and any unreadable log silently
    dropped that run from the final-loss test. Seen failing before the fix (killed by the timeout after 60 s)."""
    shutil.copytree("results/chaos/dyck/threads2/window", tmp_path / "new")
    log = tmp_path / "new" / "seed100" / "metrics.jsonl"
    log.unlink()
    os.mkfifo(log)
    p = against_cli(tmp_path / "new", "results/chaos/dyck/window", timeout=60)  # first: before the fix it hung
    assert p.returncode in (0, 1), p.stderr
    assert f"final training loss: 1 new run(s) without a readable log (e.g. {log}: not a regular file" in p.stdout
    assert "tested on the other runs" in p.stdout
    with pytest.raises(ValueError, match="not a regular file"):
        compare.final_loss({"run_dir": str(log.parent)})


# --- issue 71, group C: a run --against cannot read is named, never dropped -------------------------------------

def test_against_a_new_run_with_a_nan_metric_is_refused_by_name(tmp_path, capfd):
    """C / S27 (issue 71): a new run with oracle_ood NaN was dropped from the OOD tests without a word and the verdict
    printed (rc 0). The one reader refuses it: one line naming the run, the field and the value, exit 2.
    Failed before its fix: assert 0 == 2 (--against: CONSISTENT: new 5 runs against the reference's 50 runs)."""
    shutil.copytree("results/chaos/dyck/threads2/window", tmp_path / "new")
    path = tmp_path / "new" / "seed100" / "eval.json"
    e = json.load(open(path))
    e["metrics"]["oracle_ood"] = float("nan")
    path.write_text(json.dumps(e))
    p = against_here(capfd, tmp_path / "new", "results/chaos/dyck/window")
    assert p.returncode == 2 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert f"{path}: metrics 'oracle_ood' is NaN, not an accuracy in %" in p.stderr


def test_against_a_run_without_a_metric_is_named_and_counted(tmp_path, capfd):
    """C / S27 (issue 71): a run whose metric is null (nothing tested there) left that metric's test without a word.
    It is named and counted now, beside the verdict.
    Failed before its fix: assert 'exit depth: 1 new run(s) without a value' in '--against: CONSISTENT: ...'."""
    shutil.copytree("results/chaos/dyck/threads2/window", tmp_path / "new")
    path = tmp_path / "new" / "seed100" / "eval.json"
    e = json.load(open(path))
    e["metrics"]["policy_depth_ood"] = None
    path.write_text(json.dumps(e))
    p = against_here(capfd, tmp_path / "new", "results/chaos/dyck/window")
    assert p.returncode in (0, 1), p.stderr
    assert (f"exit depth: 1 new run(s) without a value (e.g. {path.parent}); tested on the other runs") in p.stdout, p.stdout
