"""The committed results agree with the code that claims them."""
import os
import sys

import evaluate
import train

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results"))
import recipes  # noqa: E402


def test_every_committed_recipe_run_was_trained_with_todays_recipe():
    # results/README.md's "What learns" row prints train.RECIPES[task] beside the numbers of this run
    runs = {t: recipes.run_dir(t) for t in train.RECIPES}
    assert all(runs.values()), f"tasks without a committed recipe run: {[t for t, d in runs.items() if not d]}"
    for task, d in runs.items():
        assert recipes.stale(task, evaluate.load_eval(d)) == {}, d


def test_a_changed_recipe_is_caught(monkeypatch):
    monkeypatch.setitem(train.RECIPES, "addition", {**train.RECIPES["addition"], "max_iters": 6000})
    assert recipes.stale("addition", evaluate.load_eval(recipes.run_dir("addition"))) == {"max_iters": 8000}
