"""Round five (issue 61): bad input is one line naming the value, exit 2, nothing on disk changed; a crash loses at
most the work since the last checkpoint. Each test failed on the code before its fix (docs/reliability.md).

    D6  a full disk cut results/README.md short (tables.splice wrote in place); every writer is one atomic write
    D7  a symlinked .lock: train.py truncated its target; a planted temp-file link was written through
    D8  theory_checks.py / bench.py --json onto a run's own file (eval.json, ckpt.pt)
    S16 --perturb below float32's resolution changed no weight and was called a replicate
    S17 --perturb EPS is part of a row's key: a plain run and a perturbed one are two rows
    S19 study/chaos.py counted whatever run sat in a slot
    S20 NaN EMA weights in ckpt.pt were resumed and read out
    T18-T22 deeply nested JSON, a torn slot, a damaged chaos.json, a row with no converged run: tracebacks
    H2  a FIFO named choice.json hung its readers
    U16-U19 --threads overflow, a sweep stopped by one seed, readouts before the grouping refusal, bench measuring
        nothing, --plot /proc/x
    S21 readouts.json of a run trained again since
"""

import os

import pytest

import bench
import evaluate
import theory_checks
from lab import checks, cli


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def call(fn, argv):
    """A command; a traceback (the bug) becomes the exception's name, so the assertions fail on it."""
    try:
        return fn(argv)
    except Exception as err:  # noqa: BLE001
        return f"raised {type(err).__name__}: {err}"


def one_line(capsys, code, want=2) -> str:
    err = capsys.readouterr().err
    assert code == want and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (code, err)
    return err


# --- D8: an output flag onto a run's own file -------------------------------------------------------------

@pytest.mark.parametrize("name", ["eval.json", "ckpt.pt", "config.json"])
def test_d8_json_outputs_never_name_a_runs_own_file(base, name):  # noqa: F811
    target = str(base / name)
    with pytest.raises(ValueError, match="run's own file"):
        theory_checks.validate(cli.parse(theory_checks.Config, ["--json", target]))
    with pytest.raises(ValueError, match="run's own file"):
        bench.parse_args(["--json", target])


# --- H2's reader for every JSON, U16-U19 ------------------------------------------------------------------


def test_u19_bench_refuses_to_measure_nothing_and_plot_needs_a_real_folder(base, tmp_path, capsys):  # noqa: F811
    with pytest.raises(ValueError, match="--only_stack"):
        bench.parse_args(["--only_stack", "--stacks", ""])
    err = one_line(capsys, call(evaluate.cli, [str(base), "--plot", "/proc/x"]))
    assert "--plot" in err and "/proc" in err
    assert checks.creatable(str(tmp_path)) and os.listdir(tmp_path) == []  # the probe leaves nothing behind
