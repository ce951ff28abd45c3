"""The study scripts (study/*.py, study/*.sh) and the committed results they read and write: every claim agrees with
the code that makes it; the queues train the declared runs, with the declared thread count whatever the caller
exports; a bad argument, a damaged or hand-edited choice.json, a malformed eval.json, a seed in two places or a foreign
run in a slot is one line, exit 2, with nothing trained or written; every main runs through cli.run. The scripts that
train run on a temporary copy of the code and made-up or copied runs, never on the committed results (the queues are
stood in for by a fake `python`). A test of a reliability case names it (docs/reliability.md)."""
import dataclasses
import json
import os
import random
import resource
import runpy
import shutil
import stat
import subprocess
import sys
import types

import pytest

import config
from lab import files, records
from lab.cli import run
from study import chaos, exclusions, ladder, recipes, stats, study

from conftest import in_process

ROOT = study.ROOT


@pytest.fixture
def round2(tmp_path, monkeypatch):
    """An empty round-two folder in place of results/round2: no recorded choice, so a test sees the rule's own
    pick, not the repository's record."""
    from study import study
    monkeypatch.setattr(study, "ROUND2", str(tmp_path))
    return tmp_path


def test_every_committed_recipe_run_was_trained_with_todays_recipe():
    # results/README.md's "What learns" row prints config.RECIPES[task] beside the numbers of this run. The table
    # holds the tasks with a committed run; a task without a recipe, or a new recipe not yet run, is allowed
    runs = {t: d for t in config.RECIPES if (d := recipes.run_dir(t))}
    assert {"dyck", "copy"} <= set(runs)  # README.md shows these two
    for task, d in runs.items():
        assert recipes.stale(task, records.load_eval(d)) == {}, d


@pytest.mark.smoke
def test_a_changed_recipe_is_caught(monkeypatch):
    monkeypatch.setitem(config.RECIPES, "addition", {**config.RECIPES["addition"], "max_iters": 6000})
    assert recipes.stale("addition", records.load_eval(recipes.run_dir("addition"))) == {"max_iters": 8000}


def study_rows(n=16):
    """Two rows of made-up study runs, seeds 0..n-1: a tight one (Std 0.7) and a wide one (Std 24.6)."""
    run = lambda k, v: {"seed": k, "metrics": {"oracle_ood": v, "gap": 0.0, "front90": 10, "val_k_ood": v,
                                               "policy_id": 100.0, "shortcut_ood": 1.0, "shortcut_ood_name": "constant"},
                        "n_max": 10, "config": {"T_max": 15, "task": "toy", "max_iters": 1500, "d_model": 64}}
    tight = [run(k, 50 + d) for k, d in enumerate([-1, 0, 1, 0] * (n // 4))]
    wide = [run(k, 50 + d) for k, d in enumerate([-30, 0, 30, -25] * (n // 4))]
    return tight, wide


def unconverged(runs, seeds, policy_id=90.0):
    return [{**e, "metrics": {**e["metrics"], "policy_id": policy_id}} if e["seed"] in seeds else e for e in runs]


@pytest.mark.smoke
def test_study_verdicts_follow_the_evidence():
    from study import study
    tight, wide = study_rows()
    claims = lambda rows: {v.claim.text: v for v in study.verdicts("toy", rows)}
    key = "window has a smaller spread of Oracle OOD than matched"
    v = claims({"window": tight, "matched": wide})[key]
    assert v.verdict.startswith("reproduced") and v.result["n"] == 16 and v.result["p"] <= v.p_holm < 0.05
    assert claims({"window": tight, "matched": wide})[key.replace("matched", "fixed")].verdict == "not run (no seeds of fixed)"
    assert claims({"window": wide, "matched": tight})[key].verdict.startswith("contradicted")
    interim = claims({"window": tight[:12], "matched": wide[:12]})[key].verdict  # rows declared at 16 seeds
    assert interim.startswith("interim look, not a verdict") and interim.endswith("window 12 of 16, matched 12 of 16")
    # a pair counts only where both seeds converged; too few pairs, no test
    few = claims({"window": unconverged(tight, range(14)), "matched": wide})[key]
    assert few.result["n"] == 2 and few.verdict == "too few converged pairs (2 of 16)"
    assert claims({"window": tight, "matched": unconverged(wide, range(3))})[key].result["n"] == 13  # either row
    edge = lambda v: claims({"window": unconverged(tight, range(2), v), "matched": wide})[key].result["n"]
    assert edge(98.9) == 14 and edge(99.0) == 16  # the bar: >= 99% ID
    # seeds past the declared count (trained after a look) stay out of the primary test
    late = claims({"window": tight + study_rows(32)[0][16:], "matched": wide + study_rows(32)[1][16:]})[key]
    assert late.result["pairs"] == 16
    # no difference: 'not significant', with the interval of the difference, never equality
    same = claims({"window": tight, "matched": tight})[key].verdict
    assert same.startswith("not significant at 16 pairs") and "95% interval [" in same


@pytest.mark.smoke
def test_holm_adjusts_over_the_claims_of_a_task():
    from study import study
    tight, wide = study_rows()
    rows = {"window": tight, "matched": wide, "fixed": wide, "rl": tight}
    vs = [v for v in study.verdicts("toy", rows) if v.result is not None]
    assert len(vs) == 9 and sum(v.claim.headline for v in vs) == 4  # 4 spreads, 4 gaps, rl vs window
    assert [v.p_holm for v in vs] == pytest.approx(stats.holm([v.result["p"] for v in vs]))
    assert all(v.p_holm >= v.result["p"] for v in vs)


def test_study_sh_trains_the_seeds_study_py_plans():
    import re

    from study import study
    text = open(os.path.join(study.ROOT, "study", "study.sh")).read()
    loop_tasks = re.search(r"for t in ([\w ]+);", text).group(1).split()  # the rows written `row "$t" ...`
    calls = [(t, n, int(k)) for t, k in re.findall(r"main_rows (\w+) (\d+)", text) for n in study.MAIN]
    calls += [(t, n, int(k)) for task, n, k in re.findall(r"^\s*row (\S+) (\S+) (\d+)", text, re.M)
              for t in (loop_tasks if task == '"$t"' else [task])]
    most = {}
    for task, name, seeds in calls:
        most[task, name] = max(seeds, most.get((task, name), 0))
    trained = {key: k for key, k in most.items() if k > 1}  # one-seed rows are demonstrations, never tested
    assert trained[("dyck", "rl")] == study.GROWN[("dyck", "rl")]  # the parse found the extended rows
    assert {key: study.trained(*key) for key in trained} == trained


def test_ladder_sh_trains_what_ladder_py_declares():
    import subprocess

    from study import ladder
    queue = subprocess.run(["bash", os.path.join(ladder.ROOT, "study", "ladder.sh"), "--list"], capture_output=True,
                           text=True, check=True).stdout.split("\n")
    runs = [line.split() for line in queue if line]
    recipe = {t: config.RECIPES[t].get("max_iters", config.Config().max_iters) for t in ladder.TASKS}
    assert recipe == ladder.RECIPE_STEPS
    seen = set()
    for task, rung, row, seed, *flags in runs:
        f = dict(zip(flags[::2], flags[1::2]))
        _, steps, width = ladder.RUNGS[rung]
        assert int(f["--max_iters"]) == steps * recipe[task] and int(f["--d_model"]) == width, (task, rung, row)
        assert f["--schedule"] == row and row in ladder.ROWS and ("--ema" in f) == (rung == "rE")
        seen.add((task, rung, row, int(seed)))
    trained = [r for r, (_, steps, _) in ladder.RUNGS.items() if r != "r1" and steps is not None]  # rH: on a GPU
    assert seen == {(t, r, row, k) for t in ladder.TASKS for r in trained for row in ladder.ROWS for k in range(ladder.SEEDS)}


def test_a_verdict_reads_the_holm_adjusted_p(monkeypatch):
    from study import study
    tight, wide = study_rows()
    fake = {"pairs": 16, "n": 16, "p": 0.02, "da": 1.0, "db": 5.0, "lo": -6.0, "hi": -2.0}
    monkeypatch.setattr(study, "compare", lambda *a, **k: dict(fake))
    head = [v for v in study.verdicts("toy", {"window": tight, "matched": wide, "fixed": wide, "rl": tight})
            if v.claim.headline]
    assert [v.p_holm for v in head] == pytest.approx([0.18] * 4)  # nine claims at p = 0.02
    assert all(v.verdict.startswith("not significant at 16 pairs") for v in head)
    alone = study.verdicts("toy", {"window": tight, "matched": wide})
    assert [v.verdict for v in alone if v.claim.rows == ("window", "matched") and v.claim.spread][0].startswith("reproduced")


def ladder_rungs(spreads: dict, unconverged: int = 0) -> dict:
    """Synthetic ladder rungs: {rung: {row: Std}} -> eval dicts of 8 seeds (the first `unconverged` at ID 90)."""
    rungs = {}
    for rung, rows in spreads.items():
        steps = {"r1": 800, "r2": 2400, "rE": 2400, "r3": 2400}[rung]
        width = 128 if rung == "r3" else 64
        rungs[rung] = {row: [{"seed": k, "config": {"max_iters": steps, "d_model": width},
                              "metrics": {"oracle_ood": 50.0 + sd * (k - 3.5) / 2.45,
                                          "policy_id": 90.0 if k < unconverged else 100.0}} for k in range(8)]
                       for row, sd in rows.items()}
    return rungs


def test_ladder_answer_finds_the_failure_mode_only_where_it_is(round2):
    from study import ladder
    flat = {"fixed": 3.0, "matched": 3.0, "window": 3.0}
    wide = {"fixed": 30.0, "matched": 3.0, "window": 3.0}
    rungs = ladder_rungs({"r1": flat, "r2": flat, "rE": flat, "r3": wide})
    text = "\n".join(ladder.answer("copy", rungs, ladder.family("copy", rungs), ladder.growth("copy", rungs)))
    assert "at r3 the window spreads less than fixed" in text and "Part C's rung: r3" in text
    assert "r3 vs r1: grows" in text
    rungs = ladder_rungs({"r1": flat, "r2": flat, "rE": flat, "r3": flat})
    text = "\n".join(ladder.answer("copy", rungs, ladder.family("copy", rungs), ladder.growth("copy", rungs)))
    assert "no complete rung up to r3 (2400 steps x d_model 128) shows it" in text and "Part C's rung: r1" in text
    assert "**Answer on the CPU rungs** (rH, the H200's, not run)" in text
    # copy's answer waits for its gate (r2, rE), not for r3 (amendment 2), and names what it lacks
    del rungs["r3"]
    text = "\n".join(ladder.answer("copy", rungs, ladder.family("copy", rungs), ladder.growth("copy", rungs)))
    assert "(r3, beyond this CPU's budget (amendment 2), not run; rH, the H200's, not run)" in text
    assert "no complete rung up to rE" in text and "Not complete yet" not in text
    rungs["r3"] = {"fixed": ladder_rungs({"r3": flat})["r3"]["fixed"][:3]}
    text = "\n".join(ladder.answer("copy", rungs, ladder.family("copy", rungs), ladder.growth("copy", rungs)))
    assert "r3, beyond this CPU's budget (amendment 2), not complete" in text and "Not complete yet: r3 (3 of 24 runs)" in text
    # r1 converges on 7 of 8 seeds (< 90%): part C moves to the next rung; an incomplete rung postpones the choice
    rungs = ladder_rungs({"r1": flat}, unconverged=1) | ladder_rungs({"r2": flat, "rE": flat, "r3": flat})
    assert "Part C's rung: r2" in "\n".join(ladder.answer("copy", rungs, ladder.family("copy", rungs), ladder.growth("copy", rungs)))
    # no rung converges on 90% of every row (amendment 3): the one whose worst row converged most, here rE (7 of 8)
    rungs = ladder_rungs({"r1": flat, "r2": flat, "r3": flat}, unconverged=2) | ladder_rungs({"rE": flat}, unconverged=1)
    text = "\n".join(ladder.answer("copy", rungs, ladder.family("copy", rungs), ladder.growth("copy", rungs)))
    assert "Part C's rung: rE (" in text and "converged most (88% of its seeds, below the protocol's 90%)" in text
    del rungs["rE"]["window"][7]
    text = "\n".join(ladder.answer("copy", rungs, ladder.family("copy", rungs), ladder.growth("copy", rungs)))
    assert "rE (23 of 24 runs)" in text and "not chosen until" in text


def test_the_ema_rung_is_tested_against_its_own_raw_weights(round2):
    from study import ladder
    flat = {"fixed": 3.0, "matched": 3.0, "window": 3.0}
    rungs = ladder_rungs({"r1": flat, "r2": flat, "rE": flat, "r3": flat})
    assert ladder.raw(rungs["rE"]) == {} and all(t["result"] is None for t in ladder.growth("copy", rungs) if t["rung"] == "rE")
    wide = ladder_rungs({"rE": {"fixed": 30.0, "matched": 3.0, "window": 3.0}})["rE"]
    for row, runs in rungs["rE"].items():  # the raw weights of the same seeds: fixed spreads 10x wider
        for e, w in zip(runs, wide[row]):
            e["raw_metrics"] = w["metrics"]
    grown = ladder.growth("copy", rungs)
    assert [t["b"] for t in grown if t["rung"] == "rE"] == ["raw"] * 3
    text = "\n".join(ladder.answer("copy", rungs, ladder.family("copy", rungs), grown))
    assert "fixed's Std over converged seeds: " in text and "rE vs raw: shrinks at Holm p 0.023" in text


def test_a_spread_verdict_says_when_its_pair_count_could_not_reach_significance():
    from study import study
    few, many = {"n": 5, "p": 0.3}, {"n": 16, "p": 0.3}
    assert "cannot go below p = 0.062, Holm p >= 0.12" in study.undecidable(few, [0.3, 0.5])
    assert "Holm p >= 0.062" in study.undecidable(few, [0.3, 0.001])  # the other test ranks first: x1, floor 0.0625
    assert study.undecidable(many, [0.3] + [0.9] * 14) == ""  # 16 pairs: 15 x 2 / 2^16 is far below 0.05
    eight = {"n": 8, "p": 0.4}  # the ladder: 2 x 2 / 2^8 = 0.016 can reject; a 10-test family (0.078) could not
    assert study.undecidable(eight, [0.4, 0.9]) == "" and "Holm p >= 0.078" in study.undecidable(eight, [0.4] + [0.9] * 9)


def test_the_ladder_records_part_cs_rung_once(round2):
    import json

    from study import ladder
    from study import study
    flat = {"fixed": 3.0, "matched": 3.0, "window": 3.0}
    rungs = ladder_rungs({"r1": flat}, unconverged=1) | ladder_rungs({"r2": flat, "rE": flat, "r3": flat})
    done, shows, std = ladder.screened("copy", rungs, ladder.family("copy", rungs))
    rung, first, why = ladder.pick("copy", rungs, done, shows, std)
    assert (rung, first) == ("r2", 0)
    no_r3 = {r: v for r, v in rungs.items() if r != "r3"}  # copy's r3 is out of the CPU budget: copy does not wait
    assert ladder.pick("copy", no_r3, *ladder.screened("copy", no_r3, ladder.family("copy", no_r3)))[0] == "r2"
    assert ladder.pick("dyck", no_r3, ["r1", "r2", "rE"], [], None)[:2] == (None, None)  # dyck waits for r3
    path = ladder.record("copy", rungs, rung, first, why)
    c = json.load(open(path))
    assert c["flags"] == "--max_iters 2400 --d_model 64" and c["seeds"] == 16 and c["first"] == 0
    assert c["reuse"] == {row: f"results/ladder/copy/r2/{row}" for row in ladder.ROWS}  # no rl row at r2
    ladder.record("copy", rungs, "r3", 8, "another pick")  # the record is written once
    assert json.load(open(path)) == c
    text = ladder.part_c("copy", rungs, done, shows, std)
    assert "Part C's rung: r2" in text and "recorded in results/round2/copy/choice.json" in text and "would pick" not in text
    rungs["r1"] = ladder_rungs({"r1": flat})["r1"]  # today's data would pick r1: the record stands, and says so
    assert "the rule on today's data would pick r1, the record stands" in ladder.part_c("copy", rungs, *ladder.screened(
        "copy", rungs, ladder.family("copy", rungs)))
    assert ladder.record("dyck", rungs, "r1", 0, "r1") and set(json.load(open(round2 / "dyck" / "choice.json"))["reuse"]) == set(study.MAIN)


def test_round_two_reads_reused_seeds_and_never_a_seed_twice(round2):
    import json
    import shutil

    from study import study
    assert study.round_two("dyck") is None
    reuse = {row: f"results/ladder/dyck/r2/{row}" for row in ("fixed", "matched", "window")}
    (round2 / "dyck").mkdir()
    json.dump({"rung": "r2", "first": 0, "seeds": 16, "flags": "--max_iters 2400 --d_model 64", "why": "test",
               "reuse": reuse}, open(round2 / "dyck" / "choice.json", "w"))
    choice, rows = study.round_two("dyck")
    assert set(rows) == {"fixed", "matched", "window"} and [e["seed"] for e in rows["fixed"]] == list(range(8))
    vs = study.verdicts("dyck", rows, study.round_two_claims("dyck"), choice["first"])
    assert len(study.round_two_claims("dyck")) == 9 and all(v.claim.rows[0] in study.MAIN for v in vs)
    spread = next(v for v in vs if v.claim.rows == ("window", "fixed") and v.claim.spread)
    assert spread.result["pairs"] == 8 and "interim look, declared seeds: window 8 of 16, fixed 8 of 16" in spread.verdict
    assert study.counts("fixed", rows["fixed"], choice["first"]).endswith(" / 8 of 16 declared")  # an interim look
    assert study.counts("fixed", rows["fixed"] + [e | {"seed": e["seed"] + 8} for e in rows["fixed"]]).endswith(" / 16")
    late = json.load(open(round2 / "dyck" / "choice.json")) | {"first": 8}  # seeds 8-23: none of the ladder's
    json.dump(late, open(round2 / "dyck" / "choice.json", "w"))
    assert study.round_two("dyck")[1] == {}
    json.dump(late | {"first": 0}, open(round2 / "dyck" / "choice.json", "w"))
    shutil.copytree(os.path.join(study.ROOT, reuse["fixed"], "seed3"), round2 / "dyck" / "fixed" / "seed3")
    with pytest.raises(ValueError, match="seed 3 appears 2 times"):  # trained again beside its reused twin
        study.round_two("dyck")
    shutil.rmtree(round2 / "dyck" / "fixed")
    json.dump(late | {"first": 0, "reuse": reuse | {"matched": "results/ladder/dyck/r3/matched"}},
              open(round2 / "dyck" / "choice.json", "w"))
    with pytest.raises(ValueError, match=r"runs at different \(steps, d_model, ema\)"):  # a reuse that is not the rung
        study.round_two("dyck")


def test_each_two_thread_run_has_a_one_thread_twin_of_the_same_command():
    from study import study
    from lab import tables
    from study import threads
    found = 0
    for task in ("copy", "dyck"):
        twins = {(n, e["seed"]): e for n, runs in study.round_two(task)[1].items() for e in runs}
        for name in ("fixed", "window"):
            for e in study.load_row([os.path.join(threads.DIR, task, name)]):
                twin = twins[(name, e["seed"])]
                assert (e["env"]["threads"], twin["env"]["threads"]) == (2, 1)
                assert tables.run_key(e) == tables.run_key(twin)
                found += 1
    assert found == sum(len(r["runs"]) == 2 for r in threads.rows())


def test_round2_sh_trains_the_declared_runs_it_cannot_reuse(tmp_path):
    import json
    import re
    import shutil
    import subprocess

    from study import study
    (tmp_path / "results").mkdir()
    (tmp_path / "study").mkdir()
    for name in ("round2.sh", "choice.py"):  # round2.sh checks choice.json with study/choice.py
        shutil.copy(os.path.join(study.ROOT, "study", name), tmp_path / "study" / name)
    shutil.copytree(os.path.join(study.ROOT, "lab"), tmp_path / "lab")  # choice.py's JSON reader: lab/cli.py
    for k in (0, 1, 2):
        (tmp_path / "old" / "fixed" / f"seed{k}").mkdir(parents=True)
        (tmp_path / "old" / "fixed" / f"seed{k}" / "eval.json").write_text("{}")
    (tmp_path / "results" / "round2" / "copy").mkdir(parents=True)
    json.dump({"first": 0, "seeds": 16, "flags": "--max_iters 4500 --d_model 64", "reuse": {"fixed": "old/fixed"}},
              open(tmp_path / "results" / "round2" / "copy" / "choice.json", "w"))
    out = subprocess.run(["bash", str(tmp_path / "study" / "round2.sh"), "--list"], capture_output=True, text=True, check=True).stdout
    runs = [line.split(maxsplit=3) for line in out.splitlines()]
    assert {(t, row, int(k)) for t, row, k, _ in runs} == {("copy", row, k) for row in study.MAIN for k in range(16)} - {
        ("copy", "fixed", k) for k in (0, 1, 2)}
    sh = open(os.path.join(study.ROOT, "study", "study.sh")).read()
    main_rows = dict(re.findall(r'row "\$1" (\w+) "\$2" (.*)', sh))  # study.sh's main rows and their flags
    assert set(main_rows) == set(study.MAIN)
    assert all(flags == f"{main_rows[row].strip()} --max_iters 4500 --d_model 64" for _, row, _, flags in runs)


def test_the_ladder_budget_scales_a_missing_row_by_the_other_tasks_measured_ratio():
    from study import ladder
    timed = lambda minutes, n=8: [{"train_time_s": 60.0 * minutes, "eval_time_s": 0.0}] * n
    copy = {"r2": {"fixed": timed(90)}}
    dyck = {"r2": {"fixed": timed(30)}, "r3": {"fixed": timed(90, 1)}}  # r3 / r2 = 3 on dyck's fixed row
    text = "\n".join(ladder.budget("copy", copy, {"dyck": dyck}))
    assert "| r3 | fixed | 0 / 8 | 270 (r2 x dyck's r3 / r2) | 36.0 |" in text
    assert "| rE | fixed | 0 / 8 | 90 (r2 x compute) | 12.0 |" in text  # dyck has no rE run: compute (3x / 3x)
    assert "| r3 | fixed | 0 / 8 | 360 (r2 x compute) |" in "\n".join(ladder.budget("copy", copy))  # width^2 = 4x


def test_the_ladder_names_the_cpu_models_its_runs_finished_on():
    from study import ladder
    rungs = ladder_rungs({"r1": {"fixed": 3.0}, "r2": {"fixed": 3.0, "window": 3.0}})
    for k, e in enumerate(rungs["r2"]["fixed"] + rungs["r2"]["window"]):
        e["env"] = {"cpu": "AMD EPYC"} if k < 10 else {}  # a run from before env.cpu was recorded
    line = ladder.machines(rungs)[0]
    assert "AMD EPYC: 10" in line and "not recorded (runs before 2026-12-02): 6" in line  # r1: not counted
    assert line.endswith("difference): none.")  # seeds 0-1 of window: EPYC beside fixed's EPYC; 2-7: not recorded
    rungs["r2"]["window"][0]["env"] = {"cpu": "Intel(R) Xeon(R) Processor"}
    rungs["r2"]["window"][2]["env"] = {"cpu": "Intel(R) Xeon(R) Processor"}  # fixed's seed 2 recorded AMD EPYC
    line = ladder.machines(rungs)[0]
    assert line.endswith("difference): r2 window/fixed seed 0, r2 window/fixed seed 2.")


def test_a_lane_runs_its_own_share_first_then_helps_and_skips_locked_runs(tmp_path):
    import fcntl
    import shutil
    import stat
    import subprocess

    (tmp_path / "study").mkdir()
    shutil.copy(os.path.join(recipes.ROOT, "study", "lanes.sh"), tmp_path / "study" / "lanes.sh")
    fake = tmp_path / "bin" / "python"  # stands in for train.py: records the run and writes its eval.json
    fake.parent.mkdir()
    fake.write_text('#!/usr/bin/env bash\nwhile [ "$1" != --out_dir ]; do shift; done\n'
                    'mkdir -p "$2"; echo "{}" > "$2/eval.json"; echo "$2" >> ran.txt\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    runs = [f"results/x/t/r/seed{k}" for k in range(5)]
    (tmp_path / runs[2]).mkdir(parents=True)
    (tmp_path / runs[2] / "eval.json").write_text("{}")  # finished: skipped
    (tmp_path / "logs").mkdir()
    with open(tmp_path / "logs" / "t-r-seed3.lock", "w") as held:  # another lane is running seed 3
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "LANE": "1", "LANES": "2"}
        subprocess.run(["bash", "study/lanes.sh", "logs"], input="".join(f"{r} t {k} --x\n" for k, r in enumerate(runs)),
                       cwd=tmp_path, env=env, text=True, check=True, capture_output=True)
    # lane 1 of 2 owns lines 1 and 3; it runs 1, skips 3 (locked), then helps with 0 and 4 (2 is finished)
    assert (tmp_path / "ran.txt").read_text().split() == [runs[1], runs[0], runs[4]]


def test_the_exclusions_section_is_what_its_json_says():
    # results/README.md's "What the data already say" is regenerated from results/exclusions.json
    import json
    from study import exclusions
    out = json.load(open(exclusions.OUT))
    text = open(exclusions.README).read().split("<!-- exclusions:begin -->\n", 1)[1].split("<!-- exclusions:end -->", 1)[0]
    assert text.rstrip("\n").split("\n") == exclusions.lines(out)
    assert out["spreads"]["dyck"]["excluded"] and out["spreads"]["copy"]["excluded"]  # the paper's rl ratio lies below each interval


def test_the_chaos_study_analyses_complete_layers_of_converged_runs_only(tmp_path, monkeypatch):
    """study/chaos.py on made-up runs: a layer with one run missing is not analysed (the declared fallback);
    an unconverged run (policy_id < 99) is left out of its seed's block; a row whose replicates agree within
    each seed while the seeds differ reads seed-driven, one where replicates scatter as much as seeds does not."""
    from study import chaos
    monkeypatch.setattr(chaos, "ROOT", str(tmp_path))
    monkeypatch.setattr(chaos, "CHAOS", str(tmp_path / "results" / "chaos"))
    rng = random.Random(0)

    def write(row, k, r, y, pid=100.0):
        d = chaos.run_dir(row, k, r)
        os.makedirs(d)
        m = {"oracle_hard_ood": y, "val_k_hard_ood": y, "policy_id": pid, "shortcut_hard_ood": 11.6}
        cfg = chaos.train.parse_args(["--task", "dyck", "--seed", str(k), "--threads", "1"] + chaos.flags(row, r).split())
        with open(os.path.join(d, "eval.json"), "w") as f:  # the declared command's settings (chaos.slot checks them)
            json.dump({"metrics": m, "env": {"cpu": "a cpu"}, "config": dataclasses.asdict(cfg)}, f)

    monkeypatch.setattr(chaos, "load", lambda d: json.load(open(os.path.join(d, "eval.json")))
                        if os.path.isfile(os.path.join(d, "eval.json")) else None)
    for k in chaos.SEEDS:
        for r in range(3):
            write("fixed", k, r, 50 + 4 * (k - 100) + rng.gauss(0, 0.5))  # seed-driven
            write("window", k, r, 70 + rng.gauss(0, 10))  # chaos only
            if not (r == 2 and k == 109):
                write("rl", k, r, 70 + rng.gauss(0, 10), pid=98.9 if (k, r) == (100, 1) else 100.0)
    done = chaos.runs()
    assert chaos.complete_layers(done) == 2  # rl seed 109 lacks r 2
    assert chaos.blocks(done, "rl", 2)[0] == [done["rl", 100, 0]["metrics"]["oracle_hard_ood"]]  # r 1 unconverged
    lines, out = chaos.report(done)
    assert out["rows"]["rl"]["runs"] == 19 and out["rows"]["rl"]["of"] == 20
    assert out["rows"]["fixed"]["verdict"] == "seed-driven" and out["rows"]["window"]["verdict"] != "seed-driven"
    assert len(out["family"]) == 4 and all(0 < t["p"] <= 1 and t["holm_p"] >= t["p"] for t in out["family"])
    text = "\n".join(lines)
    assert "fixed +1.00 [+0.99, +1.00], seed-driven" in text and "excludes a seed share of one half or less" in text and "Verdicts: " in text


# --- the queues and table scripts: bad arguments, choice.json, the declared threads --------------------------------

# a choice as study/ladder.py records it; reuse relative to the repository root (here: a temporary tree)
GOOD = {"task": "copy", "rung": "r2", "first": 0, "seeds": 16, "why": "a test", "flags": "--max_iters 4500 --d_model 64",
        "reuse": {"fixed": "old/fixed"}, "chosen_from": "a test"}


CHOICE = os.path.join("results", "round2", "copy", "choice.json")


without = lambda key: lambda c: {k: v for k, v in c.items() if k != key}


BAD = {  # hand edits and damage: each must be refused by every reader of choice.json
    "flags smuggled into seeds": lambda c: c | {"seeds": "16 --lr 10"},
    "seeds not the declared 16": lambda c: c | {"seeds": 15},
    "seeds a float": lambda c: c | {"seeds": 16.0},
    "first a string": lambda c: c | {"first": "0"},
    "first a boolean": lambda c: c | {"first": False},
    "first not the rule's": lambda c: c | {"first": 3},
    "an extra flag": lambda c: c | {"flags": "--max_iters 4500 --d_model 64 --lr 10"},
    "flags a list": lambda c: c | {"flags": ["--max_iters", "4500", "--d_model", "64"]},
    "an EMA decay above 1": lambda c: c | {"flags": "--max_iters 4500 --d_model 64 --ema 1.5"},
    "reuse a list": lambda c: c | {"reuse": ["old/fixed"]},
    "reuse an absolute path": lambda c: c | {"reuse": {"fixed": "/tmp"}},
    "reuse through ..": lambda c: c | {"reuse": {"fixed": "old/../old/fixed"}},
    "reuse a missing folder": lambda c: c | {"reuse": {"fixed": "old/matched"}},
    "reuse a row that is not a main row": lambda c: c | {"reuse": {"ponder": "old/fixed"}},
    "reuse with flags in its path": lambda c: c | {"reuse": {"fixed": "old/fixed --lr 10"}},
    "reuse a number": lambda c: c | {"reuse": {"fixed": 3}},
    "an unknown key": lambda c: c | {"seed": 16},
    "no flags": without("flags"),
    "another task's": lambda c: c | {"task": "dyck"},
    "not an object": lambda c: [c],
    "truncated": None,  # invalid JSON: the first half of a good file
}


def choice_text(case: str) -> str:
    good = json.dumps(GOOD, indent=1) + "\n"
    return good[:len(good) // 2] if BAD[case] is None else json.dumps(BAD[case](dict(GOOD)), indent=1) + "\n"


def scripts(tmp_path, *names):
    """A bare tree with copies of some results/ scripts, round two's folder and a reuse folder old/fixed."""
    (tmp_path / "results" / "round2" / "copy").mkdir(parents=True)
    (tmp_path / "study").mkdir()
    (tmp_path / "old" / "fixed").mkdir(parents=True)
    for name in names:
        shutil.copy(os.path.join(ROOT, "study", name), tmp_path / "study" / name)
    (tmp_path / "lab").mkdir()
    for name in ("__init__.py", "cli.py", "files.py"):  # study/choice.py reads choice.json with lab/files.py's JSON reader
        shutil.copy(os.path.join(ROOT, "lab", name), tmp_path / "lab" / name)
    return tmp_path


def code_tree(tmp_path):
    """A copy of the repository's code (no run data, no tests): the table scripts run on it, with ROOT there."""
    skip = {".git", "tests", "docs", "__pycache__", ".pytest_cache"}

    def ignore(d, names):
        top = os.path.realpath(d) == os.path.realpath(os.path.join(ROOT, "results"))
        return [n for n in names if n in skip or (top and os.path.isdir(os.path.join(d, n)))]
    dst = tmp_path / "repo"
    shutil.copytree(ROOT, dst, ignore=ignore)
    return dst


def copy_r1(tree, task="copy"):
    """Rung r1 of the ladder (the study's first round, seeds 0-7 of fixed, matched, window): copies of the
    committed eval.json files."""
    for row in ladder.ROWS:
        for k in range(ladder.SEEDS):
            d = tree / "results" / "study" / task / row / f"seed{k}"
            d.mkdir(parents=True)
            shutil.copy(os.path.join(ROOT, "results", "study", task, row, f"seed{k}", "eval.json"), d / "eval.json")


def fake_python(tmp_path):
    """A `python` first on PATH that stands in for train.py (records its command, writes eval.json) and for the
    table scripts (records them); anything else (study/choice.py, `python -`) goes to the real interpreter."""
    ran = tmp_path / "ran.txt"
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(f'#!/usr/bin/env bash\ncase "$1" in\n'
                    f'  train.py) echo "$*" >> "{ran}"; while [ "$1" != --out_dir ]; do shift; done\n'
                    f'    mkdir -p "$2"; echo "{{}}" > "$2/eval.json"; exit 0 ;;\n'
                    f'  study/choice.py) ;;\n'  # round2.sh's check of choice.json: the real one
                    f'  study/*.py) echo "$*" >> "{ran}"; exit 0 ;;\n'
                    f'esac\nexec "{sys.executable}" "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return ran


def env(tmp_path=None, **extra):
    """The caller's environment without the variables the scripts read, plus extra (and the fake python)."""
    out = {k: v for k, v in os.environ.items() if k not in ("THREADS", "LANE", "LANES", "NPROC", "STAGE")}
    if tmp_path is not None:
        out["PATH"] = f"{tmp_path / 'bin'}:{out['PATH']}"
    return out | extra


def bash(cwd, *args, **kw):
    return subprocess.run(["bash", *args], cwd=cwd, capture_output=True, text=True, **kw)


def one_line(r, *words):
    """Exit 2 with one line on stderr that holds every word, and no traceback."""
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, (r.returncode, err)
    assert all(w in err for w in words), err
    return err


def tree_files(tree) -> dict:
    """Every file below tree and its bytes (the code copied is left out: only what a script could write)."""
    return {p: open(os.path.join(d, p), "rb").read() for d, _, names in os.walk(tree) for p in names
            if "__pycache__" not in d}


@pytest.mark.parametrize("script, env, argv, word", [
    ("ladder.sh", {}, ["--table-only"], "'--table-only'"), ("ladder.sh", {}, ["--list", "x"], "got 2"),
    ("ladder.sh", {"LANES": "0"}, [], "LANES=0"), ("ladder.sh", {"LANE": "2", "LANES": "2"}, [], "LANE=2"),
    ("study.sh", {}, ["--tabels"], "'--tabels'"), ("study.sh", {"STAGE": "8"}, [], "STAGE=8"),
    ("study.sh", {"NPROC": "x"}, [], "NPROC=x"), ("cuda/rung.sh", {}, [], "usage"),
    ("cuda/rung.sh", {}, ["out", "abc"], "'abc'"), ("cuda/run.sh", {}, ["out", "4.5"], "'4.5'"),
    ("recipes.sh", {}, ["--tables"], "'--tables'"), ("round2.sh", {}, ["--tables-only"], "'--tables-only'"),
    ("round2.sh", {"LANE": "1"}, [], "LANE=1")])
def test_bad_input_to_the_study_scripts(tmp_path, script, env, argv, word):
    """A typo must not start hours of training (or spend a GPU lease): the script, copied alone into an
    empty tree, exits 2 with one line and writes nothing there."""
    path = tmp_path / "study" / script
    path.parent.mkdir(parents=True)
    path.write_bytes(open(os.path.join(ROOT, "study", script), "rb").read())
    r = subprocess.run(["bash", str(path), *argv], capture_output=True, text=True, env={**os.environ, **env},
                       cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and word in r.stderr and not r.stdout, r
    assert sorted(tmp_path.rglob("*")) == sorted([path, *path.parents][:len(path.relative_to(tmp_path).parts)])


def main_block(capfd, monkeypatch, path, *argv):
    """`python PATH ARGV` run in this process: the file's `if __name__ == "__main__":` block executed as the command
    (runpy), with sys.argv and sys.path (the script sets sys.path[0]) restored after; its exit code, stdout and stderr
    as subprocess.run reports them (sys.exit's code; a traceback becomes the exception's name, so assertions fail)."""
    monkeypatch.setattr(sys, "argv", [path, *argv])
    monkeypatch.setattr(sys, "path", list(sys.path))
    capfd.readouterr()
    try:
        runpy.run_path(path, run_name="__main__")
        code = 0
    except SystemExit as end:
        code = end.code if isinstance(end.code, int) else 0 if end.code is None else 1
    except Exception as err:  # noqa: BLE001
        code = f"raised {type(err).__name__}: {err}"
    out, err = capfd.readouterr()
    return types.SimpleNamespace(returncode=code, stdout=out, stderr=err)


@pytest.mark.parametrize("script", ["study.py", "ladder.py", "recipes.py"])
def test_the_table_scripts_refuse_arguments(script, capfd, monkeypatch):
    """study/*.py take no arguments; a stray one is a typo, refused before any table is written."""
    readme = open(os.path.join(ROOT, "results", "README.md"), "rb").read()
    if script == "recipes.py":  # a real process: recipes.py's only one here (study.sh and ladder.sh run the other two)
        r = subprocess.run([sys.executable, os.path.join("study", script), "--tables-only"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    else:  # its __main__ block in this process
        monkeypatch.chdir(ROOT)
        r = main_block(capfd, monkeypatch, os.path.join("study", script), "--tables-only")
    assert open(os.path.join(ROOT, "results", "README.md"), "rb").read() == readme
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--tables-only" in r.stderr and not r.stdout, r


@pytest.mark.parametrize("case", BAD)
def test_round2_sh_refuses_a_bad_choice_in_one_line_and_trains_nothing(tmp_path, case):
    """4Q1: choice.json's "seeds": "16 --lr 10" put --lr 10 on every queued run; round2.sh refuses every hand edit
    and damage in one line. Failed before its fix."""
    tree = scripts(tmp_path, "round2.sh", "lanes.sh", "choice.py")
    (tree / CHOICE).write_text(choice_text(case))
    r = bash(tree, "study/round2.sh", "--list", env=env())
    one_line(r, CHOICE)
    assert r.stdout == ""
    ran = fake_python(tmp_path)
    one_line(bash(tree, "study/round2.sh", env=env(tmp_path)), CHOICE)
    assert not ran.exists() and not (tree / "results" / "round2" / "logs").exists()


@pytest.mark.parametrize("case", BAD)
def test_study_and_ladder_refuse_the_same_bad_choices(tmp_path, monkeypatch, case):
    """4Q1: study/study.py and study/ladder.py refuse the same bad choices. Failed before its fix."""
    tree = scripts(tmp_path)
    (tree / CHOICE).write_text(choice_text(case))
    monkeypatch.setattr(study, "ROOT", str(tree))
    monkeypatch.setattr(study, "ROUND2", str(tree / "results" / "round2"))
    with pytest.raises(ValueError, match="choice.json: "):
        study.round_two("copy")
    with pytest.raises(ValueError, match="choice.json: "):  # the ladder's section names the recorded rung
        ladder.part_c("copy", {}, [], [], None)


def test_a_choice_as_the_ladder_records_it_passes_every_reader(tmp_path, monkeypatch):
    """4Q1 (the control)."""
    tree = scripts(tmp_path, "round2.sh", "lanes.sh", "choice.py")
    (tree / CHOICE).write_text(json.dumps(GOOD))
    r = bash(tree, "study/round2.sh", "--list", env=env())
    assert r.returncode == 0 and r.stderr == "", r.stderr
    runs = [line.split(maxsplit=3) for line in r.stdout.splitlines()]
    assert len(runs) == 16 * len(study.MAIN) and all(flags.endswith(" " + GOOD["flags"]) for *_, flags in runs)
    monkeypatch.setattr(study, "ROOT", str(tree))
    monkeypatch.setattr(study, "ROUND2", str(tree / "results" / "round2"))
    assert study.round_two("copy") == (GOOD, {})
    assert "Part C's rung: r2 (a test; recorded in results/round2/copy/choice.json" in ladder.part_c("copy", {}, [], [], None)
    ema = GOOD | {"flags": "--max_iters 2400 --d_model 64 --ema 0.999"}  # rE's flags, as record() writes them
    (tree / CHOICE).write_text(json.dumps(ema))
    assert study.round_two("copy")[0] == ema
    assert bash(tree, "study/round2.sh", "--list", env=env()).stdout.splitlines()[0].endswith(" --ema 0.999")


@pytest.mark.smoke
def test_the_committed_choices_pass_and_the_rules_agree_with_the_ladder():
    """4Q1 (the control)."""
    for task in ("copy", "dyck"):
        assert study.read_choice(task)["task"] == task  # reads only
    from study import choice
    assert choice.FIRST == (0, ladder.SEEDS) and set(choice.RUNGS) == set(ladder.RUNGS)
    assert choice.SEEDS == len(study.declared("fixed")) and choice.MAIN == study.MAIN


def test_ladder_writes_its_choice_atomically(tmp_path, monkeypatch):
    """4Q3: study/ladder.py wrote choice.json non-atomically. Failed before its fix."""
    monkeypatch.setattr(study, "ROUND2", str(tmp_path))
    flat = {"fixed": 3.0, "matched": 3.0, "window": 3.0}
    rungs = ladder_rungs({"r1": flat, "r2": flat})
    with pytest.raises(TypeError):  # a failure while writing (here: a `why` JSON cannot hold) leaves no half file
        ladder.record("copy", rungs, "r2", 0, object())
    assert not (tmp_path / "copy" / "choice.json").exists() and os.listdir(tmp_path / "copy") == []
    ladder.record("copy", rungs, "r2", 0, "a test")
    assert json.load(open(tmp_path / "copy" / "choice.json"))["why"] == "a test"


def threads_tree(tmp_path):
    """A code tree for study/threads.sh: round two's choice.json for copy and dyck, the old fixed row."""
    tree = code_tree(tmp_path)
    (tree / "old" / "fixed").mkdir(parents=True)
    for task in ("copy", "dyck"):
        (tree / "results" / "round2" / task).mkdir(parents=True)
        (tree / "results" / "round2" / task / "choice.json").write_text(json.dumps(GOOD | {"task": task}))
    return tree


def test_threads_sh_refuses_a_bad_choice_before_training_anything(tmp_path):
    """4Q1: study/threads.sh refuses a bad choice before it trains anything. Failed before its fix."""
    tree = threads_tree(tmp_path)
    (tree / "results" / "round2" / "dyck" / "choice.json").write_text(json.dumps(GOOD | {"task": "dyck", "flags": "--lr 10"}))
    ran = fake_python(tmp_path)
    one_line(bash(tree, "study/threads.sh", env=env(tmp_path)), os.path.join("results", "round2", "dyck", "choice.json"))
    assert not ran.exists() and not (tree / "results" / "threads").exists()  # copy's runs did not start either


@pytest.mark.parametrize("script", ["round2.sh", "ladder.sh"])
def test_a_queue_trains_with_its_declared_one_thread_whatever_the_caller_exports(tmp_path, script):
    """4Q2: an exported THREADS=2 made round2.sh and ladder.sh train with 2 threads. Failed before its fix."""
    tree = scripts(tmp_path, script, "lanes.sh", "choice.py")
    (tree / CHOICE).write_text(json.dumps(GOOD))
    (tree / "results" / "ladder.py").write_text("")  # ladder.sh runs it if present: the fake python stands in
    ran = fake_python(tmp_path)
    r = bash(tree, f"study/{script}", env=env(tmp_path, THREADS="2"))
    assert r.returncode == 0, r.stderr
    runs = [line for line in ran.read_text().splitlines() if line.startswith("train.py")]
    assert len(runs) == (16 * len(study.MAIN) if script == "round2.sh" else 144)
    assert all(" --threads 1 " in line for line in runs), runs[0]


def test_threads_sh_keeps_its_two_threads(tmp_path):
    """4Q2 (the control)."""
    tree = threads_tree(tmp_path)
    ran = fake_python(tmp_path)
    r = bash(tree, "study/threads.sh", env=env(tmp_path, THREADS="1"))
    assert r.returncode == 0, r.stderr
    runs = [line for line in ran.read_text().splitlines() if line.startswith("train.py")]
    assert len(runs) == 6 and all(" --threads 2 " in line and line.endswith(GOOD["flags"]) for line in runs), runs


@pytest.mark.parametrize("threads", ["0", "two", "-1", "1 --lr 10"])
def test_lanes_sh_refuses_a_bad_thread_count(tmp_path, threads):
    """4Q2: study/lanes.sh refuses a bad THREADS. Failed before its fix."""
    tree = scripts(tmp_path, "lanes.sh")
    ran = fake_python(tmp_path)
    one_line(bash(tree, "study/lanes.sh", "logs", input="results/x/t/r/seed0 t 0 --x\n",
                  env=env(tmp_path, THREADS=threads)), f"THREADS={threads}")
    assert not ran.exists() and not (tree / "logs").exists()


@pytest.mark.parametrize("script", ["study.sh", "ladder.sh"])
def test_the_tables_report_a_damaged_choice_in_one_line_and_write_nothing(tmp_path, script):
    """4Q3: a truncated choice.json crashed the tables of study.sh and ladder.sh. Failed before its fix."""
    tree = code_tree(tmp_path)
    copy_r1(tree)
    (tree / CHOICE).parent.mkdir(parents=True)
    (tree / CHOICE).write_text(choice_text("truncated"))
    before = tree_files(tree)
    one_line(bash(tree, f"study/{script}", "--tables-only", env=env()), CHOICE, "not valid JSON")
    assert tree_files(tree) == before


@pytest.mark.parametrize("command", [["bash", "study/study.sh", "--tables-only"], ["python", "study/threads.py"]])
def test_a_seed_trained_twice_is_one_line(tmp_path, command):
    """4Q4: a seed both in round2/ and in its reuse folder was refused, but as an 18-line traceback. Failed before
    its fix."""
    tree = code_tree(tmp_path)
    (tree / "results" / "study" / "copy").mkdir(parents=True)
    run = os.path.join(ROOT, "results", "study", "copy", "fixed", "seed3", "eval.json")
    for d in ("results/round2/copy/fixed/seed3", "results/old/fixed/seed3"):
        (tree / d).mkdir(parents=True)
        shutil.copy(run, tree / d / "eval.json")
    (tree / CHOICE).write_text(json.dumps(GOOD | {"flags": "--max_iters 1500 --d_model 64",
                                                  "reuse": {"fixed": "results/old/fixed"}}))
    before = tree_files(tree)
    r = subprocess.run([sys.executable if command[0] == "python" else "bash", *command[1:]], cwd=tree,
                       capture_output=True, text=True, env=env())
    one_line(r, "seed 3 appears 2 times")
    assert tree_files(tree) == before


DAMAGE = {"a list for its config": lambda e: e | {"config": [e["config"]]},
          "a null for metrics.oracle": lambda e: e | {"metrics": e["metrics"] | {"oracle": None}},
          "a string for lengths": lambda e: e | {"lengths": "4 7 10"}}


@pytest.mark.parametrize("script,damage", [("study.sh", d) for d in DAMAGE] + [("ladder.sh", "a list for its config")])
def test_a_malformed_eval_json_stops_the_tables_in_one_line(tmp_path, script, damage):
    """4Q5: a malformed eval.json crashed study.sh and ladder.sh --tables-only. Failed before its fix."""
    tree = code_tree(tmp_path)
    copy_r1(tree)
    bad = tree / ("results/study/copy/fixed/seed0" if script == "study.sh" else "results/ladder/copy/r2/fixed/seed0")
    bad.mkdir(parents=True, exist_ok=True)
    e = json.load(open(os.path.join(ROOT, "results", "study", "copy", "fixed", "seed0", "eval.json")))
    (bad / "eval.json").write_text(json.dumps(DAMAGE[damage](e)))
    before = tree_files(tree)
    one_line(bash(tree, f"study/{script}", "--tables-only", env=env()), os.path.relpath(bad / "eval.json", tree))
    assert tree_files(tree) == before


def test_study_sh_reruns_a_one_seed_row_whose_flags_changed(tmp_path):
    """3Sg: study/study.sh skipped a one-seed row for its eval.json after the row's flags had changed. Failed before
    its fix.

    The row() of study/study.sh with python stubbed: a finished one-seed row still goes to train.py (with
    --resume, which reports it again, or refuses it when the flags changed), not skipped for its eval.json."""
    text = open(os.path.join(ROOT, "study", "study.sh")).read()
    func = text[text.index("row() {"):text.index("main_rows() {")]
    (tmp_path / "results" / "study" / "logs").mkdir(parents=True)
    seed0 = tmp_path / "results" / "study" / "copy" / "ntp" / "seed0"
    seed0.mkdir(parents=True)
    (seed0 / "config.json").write_text("{}")
    (seed0 / "eval.json").write_text("{}")
    script = f'NPROC=1\npython() {{ echo "$@" >> called.txt; }}\n{func}\nrow copy ntp 1 --schedule ntp --c 3\n'
    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    called = (tmp_path / "called.txt").read_text() if (tmp_path / "called.txt").exists() else ""
    assert "--resume" in called and "--c 3" in called


def test_a_fifo_named_choice_json_is_refused_not_read(tmp_path):
    """H2: a FIFO named choice.json hung its readers (study/choice.py, study/study.py). Failed before its fix."""
    folder = tmp_path / "results" / "round2" / "dyck"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "choice.json")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "study", "choice.py"), "dyck"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert "choice.json" in command_line(proc) and "regular file" in proc.stderr
    with pytest.raises(ValueError, match="regular file"):
        files.load_json(str(folder / "choice.json"))


def test_round2_sh_list_refuses_a_fifo_named_choice_json(tmp_path):
    """H2: a FIFO named choice.json hung round2.sh --list. Failed before its fix."""
    (tmp_path / "results" / "round2" / "dyck").mkdir(parents=True)
    (tmp_path / "study").mkdir()
    for name in ("round2.sh", "lanes.sh", "choice.py"):
        shutil.copy(os.path.join(ROOT, "study", name), tmp_path / "study" / name)
    shutil.copytree(os.path.join(ROOT, "lab"), tmp_path / "lab")  # choice.py reads with lab/cli.py
    os.mkfifo(tmp_path / "results" / "round2" / "dyck" / "choice.json")
    proc = subprocess.run(["bash", str(tmp_path / "study" / "round2.sh"), "--list"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert "choice.json" in command_line(proc) and proc.stdout == ""


# --- the chaos study and the other table scripts: every error one line, every write whole --------------------------

def command_line(proc, want=2) -> str:
    err = proc.stderr
    assert proc.returncode == want and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (proc.returncode, err)
    return err


def chaos_copy(tmp_path) -> str:
    """study/chaos.py copied into a scratch repository tmp_path (ROOT is its parent's parent), with a
    results/README.md holding the chaos markers; the project's modules come from PYTHONPATH."""
    os.makedirs(tmp_path / "results")
    shutil.copy(os.path.join(ROOT, "study", "chaos.py"), tmp_path / "results" / "chaos.py")
    (tmp_path / "results" / "README.md").write_text("# notebook\n" + "filler line of the notebook\n" * 3000
                                                    + "<!-- chaos:begin -->\nold\n<!-- chaos:end -->\nend\n")
    return str(tmp_path / "results" / "chaos.py")


def chaos_here(capfd, monkeypatch, tmp_path, args=()):
    """study/chaos.py's command run in this process on the scratch repository tmp_path (chaos_copy), as its copy
    there would run (ROOT tmp_path): its exit code, stdout and stderr (conftest.in_process)."""
    monkeypatch.setattr(chaos, "ROOT", str(tmp_path))
    monkeypatch.setattr(chaos, "CHAOS", str(tmp_path / "results" / "chaos"))
    return in_process(capfd, lambda argv: run(chaos.main, "study/chaos.py", argv), list(args), timeout=300)


def run_chaos(script, limit_bytes=None, args=()):
    def limit():
        if limit_bytes:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=300, preexec_fn=limit,
                          env={**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"})


def committed_slot(row="fixed", k=100, r=0) -> str:
    return os.path.join(ROOT, "results", "chaos", "dyck", row, f"seed{k}", f"r{r}")


def test_a_full_disk_leaves_results_readme_whole(tmp_path):
    """D6: a full disk (ulimit -f 40) cut results/README.md short: study/chaos.py's tables.splice wrote in place.
    Failed before its fix."""
    script = chaos_copy(tmp_path)
    readme = tmp_path / "results" / "README.md"
    before = readme.read_bytes()
    assert len(before) > 60 * 1024
    err = command_line(run_chaos(script, limit_bytes=40 * 1024), want=1)  # `ulimit -f 40`
    assert "README.md" in err
    assert readme.read_bytes() == before  # unfixed: cut at 40 KiB
    assert not [f for f in os.listdir(readme.parent) if ".tmp" in f]


def test_chaos_refuses_a_run_of_another_command_in_a_slot(tmp_path, capfd, monkeypatch):
    """S19: study/chaos.py counted whatever run sat in a slot. Failed before its fix."""
    chaos_copy(tmp_path)
    slot = tmp_path / "results" / "chaos" / "dyck" / "fixed" / "seed101" / "r0"
    shutil.copytree(committed_slot("fixed", 100, 0), slot)  # seed 100's run in seed 101's slot
    readme = (tmp_path / "results" / "README.md").read_bytes()
    err = command_line(chaos_here(capfd, monkeypatch, tmp_path))
    assert "fixed/seed101/r0" in err and "seed=100" in err
    assert (tmp_path / "results" / "README.md").read_bytes() == readme
    # chaos.sh: lanes.sh would skip the slot, so the queue refuses it
    proc = chaos_here(capfd, monkeypatch, tmp_path, args=["--queue"])
    assert "fixed/seed101/r0" in command_line(proc) and proc.stdout == ""
    shutil.rmtree(slot)
    shutil.copytree(committed_slot("window", 101, 0), slot)  # another schedule in the slot
    err = command_line(chaos_here(capfd, monkeypatch, tmp_path))
    assert "fixed/seed101/r0" in err and "schedule='window'" in err


def test_every_committed_chaos_run_is_its_slots_declared_run():
    """S19 (the control)."""
    done = chaos.runs()
    assert len(done) == 150


def test_a_torn_eval_json_in_a_chaos_slot_is_one_line(tmp_path, capfd, monkeypatch):
    """T20: a torn eval.json in a chaos slot ended in a traceback. Failed before its fix."""
    chaos_copy(tmp_path)
    slot = tmp_path / "results" / "chaos" / "dyck" / "fixed" / "seed100" / "r0"
    shutil.copytree(committed_slot(), slot)
    (slot / "eval.json").write_text('{"task": "dyck"')
    assert "fixed/seed100/r0/eval.json" in command_line(chaos_here(capfd, monkeypatch, tmp_path))


@pytest.mark.smoke
def test_every_study_script_runs_its_main_through_cli_run():
    """T20: study/chaos.py and study/exclusions.py had no one-line error path. Failed before its fix.

    cli.run turns a ValueError (bad input), an OSError (a full disk) and Ctrl-C into one line."""
    for f in sorted(os.listdir(os.path.join(ROOT, "study"))):
        if f.endswith(".py"):
            text = open(os.path.join(ROOT, "study", f)).read()
            if "__main__" in text:
                main = text.split('if __name__ == "__main__":', 1)[1]
                assert "run(" in main, f"study/{f}: its __main__ does not go through cli.run"


@pytest.mark.smoke
@pytest.mark.parametrize("text, words", [('{"rows": {"fixed": ', "unreadable"),
                                         ('{"rows": {"fixed": {"icc": null}}, "complete_layers": 5, "family": []}', "'icc'"),
                                         ("[1]", "object")])
def test_a_damaged_chaos_json_is_one_line_naming_it(tmp_path, monkeypatch, text, words):
    """T21: a damaged chaos.json ("icc": null) ended in a traceback. Failed before its fix."""
    p = tmp_path / "chaos.json"
    p.write_text(text)
    monkeypatch.setattr(exclusions, "CHAOS", str(p))
    with pytest.raises(ValueError) as err:
        exclusions.chaos_line()
    assert str(p) in str(err.value) and words in str(err.value) and "\n" not in str(err.value)


def test_the_committed_chaos_json_passes_its_check():
    """T21 (the control)."""
    assert exclusions.chaos_record()["rows"]


def test_a_chaos_row_with_no_converged_run_is_one_line(tmp_path, monkeypatch):
    """T22: a chaos row with no converged run (the declared exclusion) ended in a traceback. Failed before its fix."""
    monkeypatch.setattr(chaos, "ROOT", str(tmp_path))
    monkeypatch.setattr(chaos, "CHAOS", str(tmp_path / "results" / "chaos"))

    def fake_run(row, k, r):
        y = 50.0 + k + r
        return {"metrics": {"oracle_hard_ood": y, "val_k_hard_ood": y, "policy_id": 50.0 if row == "rl" else 100.0,
                            "shortcut_hard_ood": 11.6}, "env": {"cpu": "a cpu"}}
    done = {(row, k, r): fake_run(row, k, r) for row in chaos.ROWS for k in chaos.SEEDS for r in chaos.REPS}
    with pytest.raises(ValueError, match="row rl: 0 converged runs"):
        chaos.report(done)


def test_recipes_py_regenerates_its_table_without_matplotlib(tmp_path, monkeypatch, capsys):
    """3T1: study/recipes.py without matplotlib ended in a traceback. Failed before its fix."""
    from study import recipes
    readme = tmp_path / "README.md"
    readme.write_text("<!-- recipes:begin -->\nold\n<!-- recipes:end -->\n")
    monkeypatch.setattr(recipes, "README", str(readme))
    monkeypatch.setattr(recipes, "DIR", str(tmp_path))  # plots, if any were drawn, would land here
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    recipes.main()
    assert "| task | recipe" in readme.read_text()
    err = capsys.readouterr().err
    assert "plots skipped" in err and len(err.strip().splitlines()) == 1


# --- findings.py and against.py: inputs checked and outputs written as a set, before any file changes -------------

def run_script(mod, argv=()):
    """mod.main as its command (cli.run); a traceback (the bug) becomes the exception's name."""
    from lab.cli import run
    try:
        return run(mod.main, mod.__name__, list(argv))
    except Exception as err:  # noqa: BLE001
        return f"raised {type(err).__name__}: {err}"


@pytest.fixture
def findings_tree(tmp_path, monkeypatch):
    """study/findings.py on a scratch repository tmp_path: the committed JSON records it reads, a results/README.md
    and a README.md holding its markers; the study's analysis stood in for by the committed results/findings.json
    (what analyse returned), the picture skipped (no matplotlib)."""
    from study import findings
    for f in ("exclusions.json", "chaos/chaos.json", "paper.json", "depth/explore.json", "depth/depth.json"):
        os.makedirs(tmp_path / "results" / os.path.dirname(f), exist_ok=True)
        shutil.copy(os.path.join(ROOT, "results", f), tmp_path / "results" / f)
    (tmp_path / "results" / "README.md").write_text("notebook\n<!-- findings:begin -->\nold\n<!-- findings:end -->\n")
    (tmp_path / "README.md").write_text("<!-- results:begin -->\nold\n<!-- results:end -->\n<!-- span:begin -->\nold\n"
                                        "<!-- span:end -->\n")
    o = json.load(open(os.path.join(ROOT, "results", "findings.json")))
    monkeypatch.setattr(findings, "ROOT", str(tmp_path))
    monkeypatch.setattr(findings.chaos, "runs", lambda: {})
    monkeypatch.setattr(findings, "analyse", lambda done: o)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    return tmp_path


@pytest.mark.parametrize("damage, key", [(lambda ex: ex["spreads"].pop("copy_gap"), "copy_gap"),
                                         (lambda ex: ex["declared"].__setitem__("gap_window_holm", "0.01"), "gap_window_holm")])
def test_findings_checks_exclusions_json_before_it_writes_anything(findings_tree, capsys, damage, key):
    """T25: study/findings.py indexed results/exclusions.json's keys unchecked, after it had spliced results/README.md.
    Failed before its fix: KeyError: 'copy_gap' (results/README.md already rewritten)."""
    p = findings_tree / "results" / "exclusions.json"
    ex = json.loads(p.read_text())
    damage(ex)
    p.write_text(json.dumps(ex))
    before = snapshot(findings_tree)
    code = run_script(sys.modules["study.findings"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, (code, err)
    assert "exclusions.json" in err and key in err
    assert snapshot(findings_tree) == before


def test_findings_writes_its_four_files_as_a_set(findings_tree, capsys):
    """D10: study/findings.py spliced results/README.md and README.md, then failed on results/findings.json: the prose
    was new, the record old. Failed before its fix: results/README.md rewritten before the error on findings.json."""
    os.makedirs(findings_tree / "results" / "findings.json")  # a folder where the record goes: it cannot be written
    before = snapshot(findings_tree)
    code = run_script(sys.modules["study.findings"])
    err = [x for x in capsys.readouterr().err.splitlines() if "picture is skipped" not in x]  # no matplotlib: a note
    assert code in (1, 2) and len(err) == 1 and "findings.json" in err[0], (code, err)
    assert snapshot(findings_tree) == before


def test_findings_refuses_round_two_with_seeds_missing(tmp_path, monkeypatch):
    """S31: with round two's window seeds 8-15 missing, study/findings.py rewrote README.md with new numbers and still
    said "16 fresh seeds". Failed before its fix: DID NOT RAISE (round_two returned 8 pairs)."""
    from study import findings
    for row in ("fixed", "window"):
        for k in range(16 if row == "fixed" else 8):
            shutil.copytree(os.path.join(ROOT, "results", "study", "dyck", row, f"seed{k}"),
                            tmp_path / "results" / "study" / "dyck" / row / f"seed{k}")
    monkeypatch.setattr(findings, "ROOT", str(tmp_path))
    with pytest.raises(ValueError) as err:
        findings.round_two("window", findings.HARD)
    assert "window" in str(err.value) and "8-15" in str(err.value) and "\n" not in str(err.value)


def snapshot(d):
    out = {}
    for root, dirs, fs in os.walk(d):
        out.update({os.path.join(root, x): "folder" for x in dirs})
        out.update({os.path.join(root, f): open(os.path.join(root, f), "rb").read() for f in fs})
    return out


@pytest.fixture
def against_tree(tmp_path, monkeypatch):
    """study/against.py on a scratch results folder: the committed ensembles read in place, the 10 w = 2 runs copied
    (a test changes them), a results/README.md with its markers; compare.against stood in for by a constant verdict
    (the slots and the writes are under test, not the statistics)."""
    import types
    from study import against
    shutil.copytree(os.path.join(ROOT, "results", "against", "dyck", "window-w2"), tmp_path / "w2",
                    ignore=shutil.ignore_patterns("ckpt.pt", ".lock"))
    os.makedirs(tmp_path / "results" / "against")
    (tmp_path / "results" / "README.md").write_text("notebook\n<!-- against:begin -->\nold\n<!-- against:end -->\n")
    fake = types.SimpleNamespace(against=lambda new, ref: {"verdict": "consistent", "differ": [], "new": len(new),
                                                           "ref": len(ref), "p": {}, "adjusted": {}})
    monkeypatch.setattr(against, "compare", fake)
    monkeypatch.setattr(against, "ROOT", str(tmp_path))
    monkeypatch.setattr(against, "OUT", str(tmp_path / "results" / "against"))
    monkeypatch.setattr(against, "CHANGED", str(tmp_path / "w2"))
    return tmp_path


def test_against_writes_its_record_and_its_block_as_a_set(against_tree, capsys):
    """D10: study/against.py replaced results/against/against.json, then failed on results/README.md (the prose said
    one count, the record another). Failed before its fix: against.json written before the error on README.md."""
    from study import against
    (against_tree / "results" / "README.md").write_text("notebook without the markers\n")
    before = snapshot(against_tree / "results")
    code = run_script(against)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "README.md" in err, (code, err)
    assert snapshot(against_tree / "results") == before  # unfixed: against.json written


@pytest.mark.parametrize("case", ["w5 in a w2 slot", "missing w2 run"])
def test_against_checks_every_slot_before_it_writes(against_tree, capsys, case):
    """S32: study/against.py used a w = 5 run sitting in a w = 2 slot, and a missing run, as they were, and flipped a
    committed verdict. Failed before its fix: rc 0, the block and against.json written."""
    from study import against
    slot = against_tree / "w2" / "seed309"
    shutil.rmtree(slot)
    if case == "w5 in a w2 slot":
        shutil.copytree(committed_slot("window", 109, 0), slot, ignore=shutil.ignore_patterns("ckpt.pt", ".lock"))
    before = snapshot(against_tree / "results")
    code = run_script(against)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "seed309" in err, (code, err)
    assert ("w=5" in err) if case == "w5 in a w2 slot" else ("missing" in err)
    assert snapshot(against_tree / "results") == before
