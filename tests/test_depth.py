"""study/depth.py, the depth-use study: the declared analysis on made-up runs in a temporary tree (each slot
checked against its declared command, complete seeds only, no verdict below 8 pairs, Holm over the three claims,
the declared words), and the exploratory table (seed means first, replicates one cluster) against its committed
output."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

import metrics
from lab import stats
from study import depth

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENGTHS, N_MAX, K = [10, 25], 19, [1, 2, 3, 4]


def made_up(row: str, k: int, hard: float, settle: int = 2, policy_id: float = 1.0, **flags) -> dict:
    """A full eval.json of the declared command of (row, seed k) whose hard-subset Oracle OOD is `hard` (%) and
    whose all-samples OOD curve settles at depth `settle` (metrics.depth_use): rising 0.2 a step up to it, flat after."""
    argv = ["--task", "dyck", "--seed", str(k), "--seeds", "1", "--threads", "1", "--out_dir", depth.run_dir(row, k)]
    cfg = depth.train.parse_args(argv + depth.ROWS[row].split() + [x for f, v in flags.items() for x in (f"--{f}", str(v))])
    ood = [min(0.9, 0.9 - 0.2 * (settle - j)) for j in K]  # the curve reaches 0.9 at K = settle
    acc = [[policy_id] * len(K), ood]
    hard_acc = [None, [hard / 100 * j / len(K) for j in K]]  # its best (K = 4) is `hard`
    rows = [{"acc": a, "val_acc": a, "tn_acc": a[-1], "per_sample_oracle": max(a), "policy_acc": a[-1],
             "policy_depth": 4.0, "flip": [0.0] * 3, "hard_acc": h, "hard_frac": 0.0 if h is None else 0.2,
             "policy_hard_acc": None if h is None else h[-1]} for a, h in zip(acc, hard_acc)]
    m = metrics.metrics(LENGTHS, rows, {}, N_MAX, K) | {"shortcut_hard_ood": 11.6, "shortcut_hard_ood_name": "x"}
    return {"task": "dyck", "schedule": cfg.schedule, "seed": k, "n_max": N_MAX, "lengths": LENGTHS, "K": K,
            "acc": acc, "hard_acc": hard_acc, "metrics": m, "config": dataclasses.asdict(cfg), "env": {"cpu": "a cpu"}}


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """study/depth.py pointed at an empty repository in tmp_path; write(e) puts a run into its slot."""
    monkeypatch.setattr(depth, "ROOT", str(tmp_path))
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "README.md").write_text("x\n<!-- depth:begin -->\n<!-- depth:end -->\n"
                                                   "<!-- depth-explore:begin -->\n<!-- depth-explore:end -->\n")

    def write(row, e):
        d = depth.run_dir(row, e["seed"])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "eval.json"), "w") as f:
            json.dump(e, f)
    return write


@pytest.mark.smoke
def test_made_up_runs_have_the_outcomes_they_are_made_with():
    m = made_up("window", 400, 70.0, settle=3)["metrics"]
    assert m["oracle_hard_ood"] == pytest.approx(70.0) and m["settle_k_ood"] == 3 and m["policy_id"] == pytest.approx(100)


def test_no_verdict_below_eight_complete_seeds(tree):
    for k in range(400, 407):  # seeds 400-406 complete, 407 with one row only: 7 complete seeds
        for row in depth.ROWS:
            tree(row, made_up(row, k, 60 + 10 * (row == "window_floor")))
    tree("window", made_up("window", 407, 60.0))
    lines, out = depth.report(depth.runs())
    assert out["finished"] == 29 and out["complete_seeds"] == list(range(400, 407))
    assert lines[0].startswith("29 of 64 declared runs finished (the rest: ") and "; 7 of 16 seeds complete" in lines[0]
    assert all(t["p"] is None and t["verdict"].startswith("no verdict: 7 seed pairs") for t in out["family"] + [out["secondary"]])
    assert "confirmed" not in "\n".join(lines)


def test_the_declared_claims_follow_the_evidence(tree):
    """Ten complete seeds: the floor 10 points above the window on every seed (C1 confirmed), fixed_window scattered
    around the window (C2 not significant), fixed equal to fixed_window up to +-3 alternating (C3 not significant);
    the floor settles at K = 4, the window at 2 (S1 confirmed); one unconverged window run drops its seed's pairs."""
    noise = [5.0, -4.0, 3.0, -6.0, 2.0, -1.0, 4.0, -3.0, 1.0, -2.0]
    for i, k in enumerate(range(400, 410)):
        w = 60.0 + i
        tree("window", made_up("window", k, w, settle=2, policy_id=0.5 if k == 409 else 1.0))
        tree("window_floor", made_up("window_floor", k, w + 10 + 0.1 * i, settle=4))
        tree("fixed_window", made_up("fixed_window", k, w + noise[i]))
        tree("fixed", made_up("fixed", k, w + noise[i] + (3 if i % 2 else -3)))
    lines, out = depth.report(depth.runs())
    fam = {t["claim"]: t for t in out["family"]}
    assert out["rows"]["window"]["converged"] == 9 and out["rows"]["window"]["runs"] == 10
    c1, c2, c3, s1 = fam["C1"], fam["C2"], fam["C3"], out["secondary"]
    assert c1["pairs"] == c2["pairs"] == 9 and c3["pairs"] == 10  # seed 409's window run did not converge
    assert c1["p"] == pytest.approx(1 / 2 ** 9) and c1["holm_p"] == pytest.approx(3 / 2 ** 9)  # every sign positive: exact
    assert c1["verdict"].startswith("confirmed: window_floor scores higher than window (+10.")
    assert c1["lo"] > 0 and c1["lo"] <= c1["diff"] <= c1["hi"]
    assert c2["holm_p"] >= c2["p"] > 0.05 and c2["verdict"].startswith("not significant at 9 seeds")
    assert c2["lo"] < 0 < c2["hi"] and "excludes differences below" in c2["verdict"] and "does not show them equal" in c2["verdict"]
    assert c3["p"] == pytest.approx(stats.sign_flip([3.0 if i % 2 else -3.0 for i in range(10)], "two-sided"))
    assert c3["verdict"].startswith("not significant at 10 seeds")
    assert s1["pairs"] == 9 and s1["diff"] == pytest.approx(2.0) and s1["p"] == pytest.approx(1 / 2 ** 9)
    assert s1["verdict"].startswith("confirmed: window_floor settles deeper than window")
    text = "\n".join(lines)
    assert "10 of 16 seeds complete" in text and "interim" in text and "| C3 fixed != fixed_window (two-sided) | 10 |" in text
    depth.main([])  # writes the README's block and depth.json from the same report
    readme = open(os.path.join(depth.ROOT, "results", "README.md")).read()
    assert "\n".join(lines) in readme.split("<!-- depth:begin -->")[1]
    assert json.load(open(os.path.join(depth.ROOT, "results", "depth", "depth.json")))["family"][0]["verdict"] == c1["verdict"]


def test_a_foreign_run_in_a_slot_is_named_and_stops_the_queue(tree):
    tree("window", made_up("window", 400, 60.0, w=3))  # --w 3 in the w = 5 slot
    for call in (lambda: depth.report(depth.runs()), lambda: depth.checked(depth.queue())):
        with pytest.raises(ValueError, match=r"results/depth/dyck/window/seed400: not the declared run of its slot .*w=3"):
            call()


def test_bad_arguments_are_one_line_and_exit_2():
    p = subprocess.run([sys.executable, "study/depth.py", "--bogus"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--bogus" in p.stderr and not p.stdout


# --- the exploratory table ------------------------------------------------------------------------------

def test_a_seeds_replicates_are_averaged_before_the_seeds_are():
    # seed 0: two --perturb replicates (K = 1 at 10% and 30%: their mean 20), seeds 1 and 2 one run each (40, 60)
    runs = []
    for seed, rep, k1 in ((0, 0, 0.1), (0, 1, 0.3), (1, 0, 0.4), (2, 0, 0.6)):
        e = made_up("window", 400 + seed, 50.0)
        e["acc"][1] = [k1, 0.9, 0.9, 0.9]
        e["metrics"].update(metrics.depth_use(e["lengths"], e["acc"], e["hard_acc"], N_MAX, K))
        e["config"].update(perturb=1e-6 if rep else 0.0, perturb_seed=rep)
        runs.append({**e, "run_dir": f"s{seed}r{rep}"})
    r = depth.explore_row("x/window", runs)
    assert r["runs"] == 4 and r["seeds"] == 3
    assert r["k1_ood"]["mean"] == pytest.approx(40.0)  # (20 + 40 + 60) / 3, not the runs' 35
    half = stats.t_quantile(0.05, 2) * 20.0 / 3 ** 0.5  # the seed means' SD is 20
    assert r["k1_ood"]["lo"] == 0.0 and r["k1_ood"]["hi"] == pytest.approx(40 + half)  # cut at 0: an accuracy
    assert r["settle_k_ood"]["median_runs"] == 2
    with pytest.raises(ValueError, match="one seed and replicate appears twice"):
        depth.explore_row("x/window", runs + [runs[0]])
    other = {**runs[2], "config": {**runs[2]["config"], "w": 3}}
    with pytest.raises(ValueError, match="differ in settings"):
        depth.explore_row("x/window", runs[:2] + [other])


@pytest.mark.smoke
def test_a_runs_row_is_its_folder_without_seed_and_replicate():
    results = os.path.join(depth.ROOT, "results")
    assert depth.row_path(os.path.join(results, "chaos", "dyck", "window", "seed100", "r3")) == "chaos/dyck/window"
    assert depth.row_path(os.path.join(results, "recipes", "parity")) == "recipes/parity"


def test_the_exploratory_block_is_what_its_json_says_and_the_json_what_the_runs_say():
    ex = json.load(open(os.path.join(ROOT, "results", "depth", "explore.json")))
    block = open(os.path.join(ROOT, "results", "README.md")).read().split("<!-- depth-explore:begin -->\n")[1]
    assert block.split("<!-- depth-explore:end -->")[0].rstrip("\n").split("\n") == depth.explore_lines(ex)
    rows = {r["folder"]: r for r in ex["rows"]}
    from lab import records
    # two rows recomputed from their committed runs (study/dyck/fixed predates the hard shortcut: load_eval fills it)
    for folder in ("chaos/dyck/window", "study/dyck/fixed"):
        runs = [records.load_eval(d) for d in records.find_runs([os.path.join(ROOT, "results", folder)])]
        again = json.loads(json.dumps(depth.explore_row(folder, runs)))
        assert _close(again, rows[folder]), folder


def _close(a, b) -> bool:
    """Nested dicts equal, numbers to 1e-9 (the JSON holds them as Python wrote them)."""
    if isinstance(a, dict):
        return set(a) == set(b) and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return a == pytest.approx(b, rel=1e-9, abs=1e-9)
    return a == b


def test_the_schedules_page_cites_the_exploratory_table():
    # docs/schedules.md's depth-use paragraph: its results/chaos figures are explore.json's, rounded
    rows = {r["folder"]: r for r in json.load(open(os.path.join(ROOT, "results", "depth", "explore.json")))["rows"]}
    fixed, window = rows["chaos/dyck/fixed"], rows["chaos/dyck/window"]
    text = " ".join(open(os.path.join(ROOT, "docs", "schedules.md")).read().split())
    f = lambda r, k: f"{r[k]['mean']:.1f}"
    assert (f"fixed depth answers {f(fixed, 'k1_hard_ood')}% at K = 1 and {f(fixed, 'oracle_hard_ood')}% at its best depth"
            in text)
    assert (f"window answers {f(window, 'k1_hard_ood')}% at K = 1 and its loop adds {f(window, 'loop_gain_hard_ood')} "
            f"points ({f(window, 'oracle_hard_ood')}%)" in text)
    assert f"scores {fixed['shortcut_hard_ood']['mean']:.1f}%) fixed depth" in text
