"""The committed results agree with the code that claims them."""
import dataclasses
import json
import os
import random

import pytest

import config
from lab import records, stats
from study import recipes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def test_the_findings_and_readmes_results_are_what_their_json_says():
    # results/README.md's "What the runs taught" and README.md's Results are regenerated from results/findings.json
    import json
    from study import findings
    o = json.load(open("results/findings.json"))
    block = lambda path, tag: open(path).read().split(f"<!-- {tag}:begin -->\n", 1)[1].split(f"<!-- {tag}:end -->", 1)[0]
    assert block("results/README.md", "findings").rstrip("\n").split("\n") == findings.lines(o)
    assert block("README.md", "results").rstrip("\n").split("\n") == findings.front(o)  # every number from here
    assert block("README.md", "span").rstrip("\n").split("\n") == findings.span(o)
    m = o["means"]["window oracle_hard_ood"]
    assert m["diff"] < 0 and m["hi"] < 0 and m["p"] < 0.05  # the window below fixed: the README's first finding


def test_the_readmes_run_output_is_what_its_committed_run_prints():
    # README.md shows `python train.py`'s report; results/readme/dyck-window is that run (its eval.json, config.json)
    import metrics
    from lab import records
    e = {**records.load_eval("results/readme/dyck-window"), "run_dir": "out/dyck-window"}
    shown = open("README.md").read().split("<!-- run:begin -->", 1)[1].split("<!-- run:end -->", 1)[0]
    report = shown.split("```\n", 2)[1].splitlines()[1:]  # after the last log line
    assert report == metrics.format_run(e).splitlines()[:len(report)]
    cfg = e["config"]
    assert (cfg["task"], cfg["schedule"], cfg["seed"], cfg["max_iters"], cfg["d_model"]) == ("dyck", "window", 0, 800, 64)
    last = [l for l in open("results/readme/dyck-window/metrics.jsonl")][-1]
    assert shown.split("```\n", 2)[1].splitlines()[0].startswith(f"step 800 | lr {__import__('json').loads(last)['lr']:.4g}")
    two = records.load_eval("results/readme/dyck-window-2threads")  # the README's two-thread figure
    assert two["env"]["threads"] == 2 and f"reached {two['metrics']['oracle_hard_ood']:.1f}% there" in " ".join(shown.split())


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


def test_the_readmes_against_sentence_is_what_study_against_measured():
    """README.md's `--against` paragraph: its false-alarm count and rate and its two powers are
    results/against/against.json's (python study/against.py), not numbers typed once."""
    d = json.load(open(os.path.join(ROOT, "results", "against", "against.json")))
    text = " ".join(open(os.path.join(ROOT, "README.md")).read().split())
    fa = d["false_alarms"]["all"]
    assert (f"On {fa['splits']} null splits of the committed ensembles (the same method on both sides) it said "
            f"\"differs\" {fa['differs']} times ({100 * fa['rate']:.1f}% [{100 * fa['lo']:.1f}, {100 * fa['hi']:.1f}])") in text
    five = [p for p in d["power"] if p["runs"] == 5]
    wf = [p for p in five if p["change"] == "window against fixed"]
    w2 = [p for p in five if p["change"] == "window w = 2 against w = 5"]
    assert len(w2) == 1 and all(p["differs"] == p["splits"] for p in wf)
    assert f"{wf[0]['differs']} of {wf[0]['splits']} draws of 5 runs" in text
    assert f"w = 2 against w = 5 in {w2[0]['differs']} of {w2[0]['splits']}:" in text
