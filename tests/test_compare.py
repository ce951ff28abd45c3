"""Two sets of runs compared with the seed as the unit (lab/stats.py's cluster tests, lab/compare.py, evaluate.py
--against), against hand and textbook values and by simulation. Each test was seen failing on a deliberate
mutation, named in its docstring."""

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest

from lab import compare, stats

# Wikipedia, "Welch's t-test", example 1: t = -2.46, df = 25.0 (tests/test_stats.py checks p)
A1 = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
A2 = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]


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


def test_effective_runs_by_hand():
    """N / (1 + (m - 1) ICC). Mutation seen failing: m - 1 replaced by m."""
    groups = [[1.0, 2.0, 3.0], [4.0, 6.0, 5.0], [2.0, 2.0, 5.0], [7.0, 8.0, 9.0]]
    icc = stats.anova_icc(groups)["icc"]
    assert stats.effective_runs(groups) == pytest.approx(12 / (1 + 2 * icc))
    assert stats.effective_runs([[1.0], [2.0], [4.0]]) == 3


def fake(seed, ood, hard, task="dyck"):
    return {"seed": seed, "task": task, "run_dir": "/nonexistent",
            "metrics": {"oracle_ood": ood, "oracle_hard_ood": hard, "policy_id": 100.0 if seed % 7 else 99.0,
                        "flip_rate": 0.01, "policy_depth_ood": 28.3}}


def ensemble(rng, seeds, shift=0.0):
    return [fake(int(s), float(rng.normal(90 + shift, 4)), float(rng.normal(75 + shift, 8))) for s in seeds]


def test_against_false_alarms_and_a_real_change():
    """New sets drawn from the reference's own distribution are called consistent about 95% of the time; a
    shift of 10 points is called different. Mutation seen failing: the raw p compared to 0.05 (no calibration:
    the near-constant ID accuracy then raises an alarm in most null sets)."""
    rng = np.random.default_rng(0)
    ref = ensemble(rng, range(40))
    alarms = sum(compare.against(ensemble(rng, range(100 + 10 * i, 105 + 10 * i)), ref, splits=200)["verdict"] == "differs"
                 for i in range(30))
    assert alarms <= 4  # Binomial(30, 0.05): Pr(X >= 5) = 0.016
    r = compare.against(ensemble(rng, range(500, 510), shift=-10), ref, splits=200)
    assert r["verdict"] == "differs" and "OOD: location" in r["differ"]
    assert r["false_alarm"] <= 0.05


def test_against_with_the_seeds_of_the_reference():
    """New runs of the reference's seeds (another machine, the same seeds): held out from the same seeds."""
    rng = np.random.default_rng(3)
    ref = [fake(s, float(rng.normal(90, 4)), float(rng.normal(75, 8))) for s in range(10) for _ in range(4)]
    r = compare.against([fake(s, float(rng.normal(90, 4)), float(rng.normal(75, 8))) for s in range(10)], ref, splits=200)
    assert r["shared_seeds"] and r["held_out_seeds"] == 10 and 0 < r["false_alarm"] <= 0.05


@pytest.mark.parametrize("new, ref, words", [
    ("results/chaos/dyck/threads2/window", "results/ladder/copy", "one task"),
    ("results/chaos/dyck/threads2/window/seed100", "results/chaos/dyck/window", "at least 2 seeds"),
    ("results/chaos/dyck/threads2/window", "results/chaos/dyck/window/seed100", "at least 4 seeds"),
    ("results/chaos/dyck/threads2/window", "results/chaos/dyck/threads2", "in both sets"),
])
def test_against_bad_input_is_one_line(new, ref, words):
    p = subprocess.run([sys.executable, "evaluate.py", new, "--against", ref], capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == "" and words in p.stderr and len(p.stderr.strip().splitlines()) == 1
