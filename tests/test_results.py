"""The committed results agree with the code that claims them."""
import os
import sys

import config
import evaluate

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results"))
import recipes  # noqa: E402


def test_every_committed_recipe_run_was_trained_with_todays_recipe():
    # results/README.md's "What learns" row prints config.RECIPES[task] beside the numbers of this run
    runs = {t: recipes.run_dir(t) for t in config.RECIPES}
    assert all(runs.values()), f"tasks without a committed recipe run: {[t for t, d in runs.items() if not d]}"
    for task, d in runs.items():
        assert recipes.stale(task, evaluate.load_eval(d)) == {}, d


def test_a_changed_recipe_is_caught(monkeypatch):
    monkeypatch.setitem(config.RECIPES, "addition", {**config.RECIPES["addition"], "max_iters": 6000})
    assert recipes.stale("addition", evaluate.load_eval(recipes.run_dir("addition"))) == {"max_iters": 8000}


def study_rows():
    """Two 16-seed rows of made-up study runs: a tight one (Std 0.7) and a wide one (Std 24.6)."""
    run = lambda v: {"metrics": {"oracle_ood": v, "gap": 0.0, "front90": 10, "val_k_ood": v, "shortcut_ood": 1.0,
                                 "shortcut_ood_name": "constant"}, "n_max": 10, "config": {"T_max": 15, "task": "toy"}}
    return [run(50 + d) for d in (-1, 0, 1, 0) * 4], [run(50 + d) for d in (-30, 0, 30, -25) * 4]


def test_study_verdicts_follow_the_evidence(monkeypatch):
    import study
    monkeypatch.setattr(study, "PLANNED", {("toy", "fixed_window"): 16})  # a row extended after its 8-seed look
    tight, wide = study_rows()
    claims = lambda rows: {c.text: c.verdict for c in study.claims(rows)}
    verdicts = claims({"window": tight, "matched": wide})
    assert verdicts["window has a smaller spread of Oracle OOD than matched"].startswith("reproduced")
    assert verdicts["window has a smaller spread of Oracle OOD than fixed"] == "not run yet (no seeds of fixed)"
    verdicts = claims({"window": wide, "matched": tight})
    assert verdicts["window has a smaller spread of Oracle OOD than matched"].startswith("contradicted")
    interim = claims({"window": tight[:8], "matched": wide[:8]})  # rows planned at 16 seeds
    assert interim["window has a smaller spread of Oracle OOD than matched"].startswith("consistent with the paper")
    assert interim["window has a smaller spread of Oracle OOD than matched"].endswith("window 8 of 16, matched 8 of 16")
    assert claims({"window": tight, "matched": tight[:3]})[
        "window has a smaller spread of Oracle OOD than matched"].startswith("not significant at 16 and 3 seeds")
    no_direction = claims({"window": tight, "multidepth": wide[:1]})["multidepth ~ window (Oracle OOD)"]
    assert no_direction.startswith("not enough seeds; interim look"), no_direction
    lower = [{**r, "metrics": {**r["metrics"], "oracle_ood": r["metrics"]["oracle_ood"] - 10}} for r in tight[:8]]
    ablations = claims({"fixed_window": tight, "fixed": wide, "rl_ent0.1": lower, "rl": tight})
    assert ablations["fixed_window (c +- w) has a smaller spread of Oracle OOD than fixed"].startswith("reproduced")
    assert ablations["lambda_ent = 0.1 is too uniform (lower Oracle OOD than 0.001)"].startswith("reproduced")
    differ = claims({"multidepth": lower, "window": tight})["multidepth ~ window (Oracle OOD)"]
    assert differ.startswith("they differ (mean 40.0 vs 50.0"), differ
    assert ablations["lambda_ent = 0 collapses (lower Oracle OOD than 0.001)"] == "not run yet (no seeds of rl_ent0)"
    extended = claims({"fixed_window": tight[:8], "fixed": wide})
    assert extended["fixed_window (c +- w) has a smaller spread of Oracle OOD than fixed"].endswith("fixed_window 8 of 16")


def test_study_sh_trains_the_seeds_study_py_plans():
    import re

    import study
    text = open(os.path.join(study.ROOT, "results", "study.sh")).read()
    loop_tasks = re.search(r"for t in ([\w ]+);", text).group(1).split()  # the rows written `row "$t" ...`
    calls = [(t, n, int(k)) for t, k in re.findall(r"main_rows (\w+) (\d+)", text) for n in study.MAIN]
    calls += [(t, n, int(k)) for task, n, k in re.findall(r"^\s*row (\S+) (\S+) (\d+)", text, re.M)
              for t in (loop_tasks if task == '"$t"' else [task])]
    most = {}
    for task, name, seeds in calls:
        most[task, name] = max(seeds, most.get((task, name), 0))
    trained = {key: k for key, k in most.items() if k > 1}  # one-seed rows are demonstrations, never tested
    assert trained[("dyck", "rl")] == study.PLANNED[("dyck", "rl")]  # the parse found the extended rows
    assert {key: study.planned(*key) for key in trained} == trained


def test_the_headline_shows_the_main_rows_and_only_their_spread_verdicts():
    import study
    tight, wide = study_rows()
    text = "\n".join(study.headline_rows("copy", {"window": tight, "matched": wide, "ponder": wide[:8]}))
    assert "| window w=5 | 16 | 50.0 ± 0.7 |" in text and "| matched | 16 |" in text and "ponder" not in text
    assert "- window has a smaller spread of Oracle OOD than matched: reproduced" in text
    assert "than fixed" not in text  # a claim whose rows were not run stays out of the headline
