"""lab/records.py: eval.json on disk, the one reader every table, comparison and page goes through."""

import json
import math
import os
import shutil

import pytest

import evaluate
from lab import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "results", "chaos", "dyck", "window", "seed100", "r0")


def one_line(capsys, code, want=2) -> str:
    err = capsys.readouterr().err
    assert code == want and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (code, err)
    return err


def setter(*path):
    def f(e, v):
        for k in path[:-1]:
            e = e[k]
        e[path[-1]] = v
    return f


# (what is changed, its value, the words of the refusal: the field and the value)
BAD = {
    "S27 oracle_ood NaN": (setter("metrics", "oracle_ood"), math.nan, "metrics 'oracle_ood' is NaN, not an accuracy in %"),
    "S28 oracle_ood 250": (setter("metrics", "oracle_ood"), 250, "metrics 'oracle_ood' is 250, not an accuracy in % (0..100)"),
    "S28 policy_id -40": (setter("metrics", "policy_id"), -40, "metrics 'policy_id' is -40, not an accuracy in %"),
    "S30 acc NaN": (setter("acc", 0, 0), math.nan, "'acc'[0][0] is NaN, not an accuracy or a share in [0, 1]"),
    "acc 1.5": (setter("acc", 3, 2), 1.5, "'acc'[3][2] is 1.5, not an accuracy or a share in [0, 1]"),
    "hard_acc inf": (setter("hard_acc", 9, 1), math.inf, "'hard_acc'[9][1] is Infinity, not an accuracy"),
    "a shortcut's OOD 120": (lambda e, v: e["metrics"]["shortcuts"]["counting"].__setitem__("ood", v), 120,
                             "metrics 'shortcuts'['counting']['ood'] is 120, not an accuracy in %"),
    "flip_rate 2": (setter("metrics", "flip_rate"), 2, "metrics 'flip_rate' is 2, not an accuracy or a share in [0, 1]"),
    "policy_depth -1": (setter("metrics", "policy_depth", 0), -1, "metrics 'policy_depth'[0] is -1, not a number >= 0"),
    "gap 300": (setter("metrics", "gap"), 300, "metrics 'gap' is 300, not a difference of accuracies in points"),
    "train_time_s NaN": (setter("train_time_s"), math.nan, "'train_time_s' is NaN, not a number >= 0"),
    # in range, but not what the run's own matrices give: the summary is not trusted over them
    "oracle_ood 50": (setter("metrics", "oracle_ood"), 50, "metrics 'oracle_ood' is 50 but the run's own acc gives 78.03"),
    "oracle[8] 1.0": (setter("metrics", "oracle", 8), 1.0, "metrics 'oracle'[8] is 1.0 but the run's own acc gives 0.71"),
    "oracle_hard_ood 99": (setter("metrics", "oracle_hard_ood"), 99, "metrics 'oracle_hard_ood' is 99 but the run's own hard_acc gives 79.17"),
    "gap 5": (setter("metrics", "gap"), 5, "metrics 'gap' is 5 but the run's own oracle_ood - policy_ood gives 0.0868"),
    # T24: the top-level shortcuts the page reads per length
    "T24 shortcuts short": (lambda e, v: e["shortcuts"].__setitem__("counting", v), [0.5], "'shortcuts' must map each "
                            "predictor to one accuracy per test length (13)"),
}


def bad_run(tmp_path, case) -> str:
    d = tmp_path / "runs" / "seed100"
    shutil.copytree(RUN, d)
    e = json.load(open(d / "eval.json"))
    change, value, _ = BAD[case]
    change(e, value)
    (d / "eval.json").write_text(json.dumps(e))  # json writes NaN / Infinity as Python's json reads them
    return str(d)


@pytest.mark.parametrize("case", list(BAD))
def test_s27_s28_s30_a_number_off_its_scale_or_off_its_matrices_is_refused(tmp_path, capsys, case):
    """C / S27, S28, S30 (issue 71): "a number" was any float. oracle_ood NaN was dropped from --against's tests
    unsaid, oracle_ood 250 and policy_id -40 were printed and compared, acc[0][0] NaN made a page JSON.parse
    rejects; and a run's summary was trusted over its own acc / hard_acc. The one reader (load_eval) now checks
    every number: finite, within its scale (% for summaries, [0, 1] for the matrices and per-length accuracies,
    points for differences, >= 0 for depths and times), and the summaries those of the run's matrices; a run
    failing it is refused in one line naming the run, the field and the value, by the table and by --html.
    Failed before its fix: Failed: DID NOT RAISE <class 'ValueError'> (every case)."""
    d = bad_run(tmp_path, case)
    words = BAD[case][2]
    with pytest.raises(ValueError, match="^malformed eval.json at " + d) as err:
        records.load_eval(d)
    assert words in str(err.value), str(err.value)
    err = one_line(capsys, evaluate.cli([d]))
    assert d in err and words in err
    page = tmp_path / "page.html"
    err = one_line(capsys, evaluate.cli([d, "--html", str(page)]))
    assert d in err and words in err and not page.exists()


def test_s27_s28_s30_every_committed_run_keeps_loading():
    """C (issue 71): the number check refuses no run of the committed studies (each of results/chaos, the depth
    study, the ladder: its summaries are those of its own matrices, its raw_metrics within their scales)."""
    runs = records.find_runs([os.path.join(ROOT, "results", d) for d in ("chaos", "depth", "ladder")])
    assert len(runs) > 300
    for r in runs:
        records.load_eval(r)
