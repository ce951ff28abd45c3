"""--stack S (lab/stack.py, lab/chunks.py): stacked seed k is seed k trained alone; a NaN seed stops alone; a killed
chunk resumes bitwise; each seed's eval.json is its twin's; --static computes what the eager step does.
The last tests break the stacking on purpose and check that the equivalence checks see it."""

import json
import os
import signal
import subprocess
import sys

import pytest
import torch

import config
from tasks import train_batch
import train
from lab import chunks, files, stack

from conftest import TINY_STACK, one_line, strip_clock

TINY = ["--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8", "--T_max", "6", "--T_test", "8",
        "--n_max", "6",  # fixed's c: 0, i.e. T_max = 6
        # a large step and a tight clip: 30 steps move the weights far, and every seed is clipped by its own norm
        "--lr", "3e-3", "--warmup_iters", "0", "--grad_clip", "0.1", "--max_iters", "30"]
KNOBS = {"w": "2", "r_bar": "3"}  # given only to the schedules that read them: train.py refuses a knob a schedule ignores


def tiny(argv):
    """TINY, then the KNOBS that argv's schedule reads, then argv."""
    name = argv[argv.index("--schedule") + 1] if "--schedule" in argv else "window"
    return TINY + [a for k, v in KNOBS.items() if k in config.knobs_of(name) for a in (f"--{k}", v)] + list(argv)
RUN = ["--eval_samples", "16", "--test_lengths", "3,6,8", "--log_interval", "5", "--eval_interval", "10",
       "--ckpt_interval", "10"]
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def cfgs(schedule, n=3, *extra):
    return [train.parse_args(tiny(["--schedule", schedule, "--seed", str(k), *extra])) for k in range(n)]


SEPARATE = {}  # (cfg, dtype) -> weights: the mutation checks reuse the references


def separate(cfg, dtype, steps=30) -> dict:
    """Seed cfg.seed trained alone for `steps` steps: train_run's loop (train.py), without its files."""
    key = (repr(cfg), dtype, steps)
    if key not in SEPARATE:
        SEPARATE[key] = _separate(cfg, dtype, steps)
    return SEPARATE[key]


def _separate(cfg, dtype, steps):
    task, model, schedule = config.build(cfg)
    model.to(dtype), schedule.to(dtype)
    opt = torch.optim.AdamW(list(model.parameters()) + list(schedule.parameters()), lr=cfg.lr,
                            betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
    s = config.seeds_of(cfg)
    gens = {k: torch.Generator().manual_seed(config.stream(s[k], k)) for k in ("data", "depth")}
    for it in range(steps):
        opt.param_groups[0]["lr"] = config.lr_at(cfg, it)
        x, y, _, Tn = train_batch(task, cfg.batch_size, cfg.n_min, cfg.n_max, gens["data"])
        train.train_step(model, schedule, opt, (x, y, Tn), gens["depth"], cfg.grad_clip)
    return {**model.state_dict(), **{"schedule." + k: v for k, v in schedule.state_dict().items()}}


STACKED = {}  # (cfgs, dtype, steps) -> weights of an unbroken chunk: the static test reuses the eager ones
CLIP = stack.clip_per_seed


def stacked(cs, dtype, steps=30, broken=None) -> list[dict]:
    """The chunk of cs trained for `steps` steps; broken(ch) first (a mutation check, never cached)."""
    key = (repr(cs), dtype, steps)
    cache = broken is None and stack.clip_per_seed is CLIP
    if not (cache and key in STACKED):
        ch = chunks.Chunk(cs, "cpu", dtype=dtype)
        if broken:
            broken(ch)
        for it in range(steps):
            assert ch.step(it) == []
        out = [{**ch.state(s)["model"], **{"schedule." + k: v for k, v in ch.state(s)["schedule"].items()}}
               for s in range(len(cs))]
        if not cache:
            return out
        STACKED[key] = out
    return STACKED[key]


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def stack_vs_separate(schedule, dtype, broken=None) -> float:
    cs = cfgs(schedule)
    return max(max_diff(st, separate(c, dtype)) for st, c in zip(stacked(cs, dtype, broken=broken), cs))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("schedule", stack.STACKABLE)
def test_stacked_seeds_equal_separate_runs(schedule, dtype):
    assert stack_vs_separate(schedule, dtype) <= TOL[dtype]


@pytest.mark.smoke
def test_the_stacked_checkpoint_is_an_ordinary_one():
    cs = cfgs("rl", 2)
    ch = chunks.Chunk(cs, "cpu")
    ch.step(0)
    _, model, schedule = config.build(cs[1])
    st = ch.state(1)
    model.load_state_dict(st["model"]), schedule.load_state_dict(st["schedule"])  # strict: same keys, same shapes
    opt = torch.optim.AdamW(list(model.parameters()) + list(schedule.parameters()), lr=cs[1].lr)
    opt.load_state_dict(st["optimizer"])
    assert all(v.shape == p.shape for v, p in zip((s["exp_avg"] for s in st["optimizer"]["state"].values()), model.parameters()))


def test_static_step_equals_the_eager_one():
    """--static: fixed padding, masked loops to T_max, fused AdamW, the update undone on the device: the same
    numbers as the eager stacked step, up to rounding."""
    for schedule in ("window", "multidepth", "rl"):
        cs = cfgs(schedule)
        eager = stacked(cs, torch.float32)
        static = stacked([train.parse_args(tiny(["--schedule", schedule, "--seed", str(k), "--stack", "3", "--static"]))
                          for k in range(3)], torch.float32)
        assert max(max_diff(a, b) for a, b in zip(eager, static)) <= 1e-5, schedule


def test_a_schedule_that_cannot_stack_is_refused_in_one_line(capsys):
    assert "trm_halt" in one_line(capsys, train.cli(["--stack", "2", "--seeds", "2", "--schedule", "trm_halt"]))
    assert "--static" in one_line(capsys, train.cli(["--static"]))
    # the options of the anchors' code that the stacked step does not implement are refused, not ignored
    cfg = lambda **kw: config.Config(seeds=2, stack=2, **kw)
    assert "--ema 0.999" in stack.refusal(cfg(ema=0.999))
    assert "--loss_weight token" in stack.refusal(cfg(loss_weight="token"))
    assert "ponder --prior uniform" in stack.refusal(cfg(schedule="ponder", prior="uniform"))
    assert stack.refusal(cfg(schedule="fixed_prior", prior="uniform")) is None


def run(tmp_path, name, *extra, stacked=True):
    argv = tiny(RUN + ["--seeds", "3", "--out_dir", str(tmp_path / name), *extra] + (["--stack", "3"] if stacked else []))
    return train.cli(argv)


def ckpt(path):
    return torch.load(path, weights_only=True)


def poison(monkeypatch, at=8, seed=1):
    """The stacked loss of seed `seed` (of 3) is NaN at step `at`."""
    real, calls = stack.StackedSchedule.loss, {"n": 0}

    def poisoned(self, *a):
        loss, stats = real(self, *a)
        calls["n"] += 1
        nan = torch.ones(3, dtype=loss.dtype)
        nan[seed] = float("nan")
        return (loss * nan if calls["n"] == at else loss), stats

    monkeypatch.setattr(stack.StackedSchedule, "loss", poisoned)
    return real


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """The three seeds trained one at a time (checkpoints every 5 steps), once for the tests below."""
    d = tmp_path_factory.mktemp("alone")
    assert run(d, "u", "--ckpt_interval", "5", stacked=False) == 0
    return d / "u"


@pytest.mark.parametrize("static", [False, True])
def test_nan_seed_stops_alone(tmp_path, monkeypatch, capsys, static, alone):
    """Seed 1's loss is NaN at step 8: it stops with its message and its checkpoint of step 5; seeds 0 and 2
    finish as they would have alone. --static: its update is undone on the device and it stops at the
    next read (step 10), before anything of it is saved."""
    poison(monkeypatch)
    flags = ["--ckpt_interval", "5"] + (["--static"] if static else [])
    assert run(tmp_path, "s", *flags) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "seed 1: non-finite loss nan at step 8; last good checkpoint: step 5" in err[-1] and "1 of 3 seeds stopped" in err[-1]
    assert ckpt(tmp_path / "s" / "seed1" / "ckpt.pt")["step"] == 5 and not os.path.exists(tmp_path / "s" / "seed1" / "eval.json")
    for k in (0, 2):
        got, want = ckpt(tmp_path / "s" / f"seed{k}" / "ckpt.pt"), ckpt(alone / f"seed{k}" / "ckpt.pt")
        assert got["step"] == want["step"] == 30 and max_diff(got["model"], want["model"]) <= 1e-5


def test_a_seed_stopped_before_its_first_checkpoint_leaves_nothing_that_blocks(tmp_path, monkeypatch, capsys):
    """Seed 1's loss is NaN at step 3, before the chunk's first checkpoint (step 5): its config.json and
    metrics.jsonl are removed (as an unstacked run's are), so the corrected command needs no --overwrite."""
    poison(monkeypatch, at=3)
    assert run(tmp_path, "s", "--ckpt_interval", "5") == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "seed 1: non-finite loss nan at step 3; no checkpoint was written yet" in err and "removed" in err, err
    d = tmp_path / "s" / "seed1"
    assert not [f for f in os.listdir(d) if f in files.RUN_FILES], os.listdir(d)
    for k in (0, 2):  # the others finished, their files kept
        assert {"config.json", "metrics.jsonl", "ckpt.pt", "eval.json"} <= set(os.listdir(tmp_path / "s" / f"seed{k}"))


@pytest.mark.parametrize("static", [False, True])
def test_killed_chunk_resumes_bitwise(tmp_path, monkeypatch, capsys, static):
    flags = ["--ckpt_interval", "7"] + (["--static"] if static else [])  # logs every 5: the resumed log line mixes both
    assert run(tmp_path, "a", *flags) == 0
    real, calls = chunks.train_batch, {"n": 0}

    def crashing(*a, **k):  # the 16th step's batches (3 a step): killed after the checkpoint of step 14
        calls["n"] += 1
        if calls["n"] == 3 * 15 + 1:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(chunks, "train_batch", crashing)
    capsys.readouterr()
    assert run(tmp_path, "b", *flags) == 130
    assert "interrupted after step 15; the last checkpoints are at step 14; continue with --resume" in capsys.readouterr().err
    monkeypatch.setattr(chunks, "train_batch", real)
    assert ckpt(tmp_path / "b" / "seed2" / "ckpt.pt")["step"] == 14
    assert run(tmp_path, "b", "--resume", *flags) == 0
    for k in range(3):
        a, b = ckpt(tmp_path / "a" / f"seed{k}" / "ckpt.pt"), ckpt(tmp_path / "b" / f"seed{k}" / "ckpt.pt")
        for part in ("model", "schedule"):
            assert a[part].keys() == b[part].keys() and all(torch.equal(a[part][n], b[part][n]) for n in a[part])
        sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
        assert all(torch.equal(sa[i][n], sb[i][n]) for i in sa for n in sa[i])
        assert strip_clock(tmp_path / "a" / f"seed{k}" / "metrics.jsonl") == strip_clock(tmp_path / "b" / f"seed{k}" / "metrics.jsonl")


def numbers(path) -> dict:
    """Every number of an eval.json's acc, val_acc and metrics, by its place."""
    e = json.load(open(path))
    out = {}

    def walk(v, at):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{at}.{k}")
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, f"{at}[{i}]")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[at] = v
    walk({k: e[k] for k in ("acc", "val_acc", "metrics")}, "")
    return out


def test_each_seeds_eval_equals_its_unstacked_twins(tmp_path):
    flags = ["--max_iters", "60", "--schedule", "rl"]
    assert run(tmp_path, "s", *flags) == 0 and run(tmp_path, "u", *flags, stacked=False) == 0
    evals = {(m, k): numbers(tmp_path / m / f"seed{k}" / "eval.json") for m in "su" for k in range(3)}
    # an argmax may flip on a rounding difference: one sample of 16 at most (acc in [0, 1], metrics in %)
    for k in range(3):
        s, u = evals["s", k], evals["u", k]
        assert s.keys() == u.keys()
        assert all(abs(s[i] - u[i]) <= (1 if i.startswith((".acc", ".val_acc")) else 100) / 16 + 1e-9 for i in s)
    assert any(evals["u", 0][i] != evals["u", 1][i] for i in evals["u", 0])  # the seeds' evals do differ: the check has power


# --- a chunk's checkpoints commit together; its Ctrl-C line --------------------------------------------------------

@pytest.fixture
def sigint():
    """Ctrl-C as a terminal delivers it (a suite started in the background inherits SIGINT ignored)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


STACK = TINY_STACK + ["--max_iters", "30", "--ckpt_interval", "7", "--seeds", "3", "--stack", "3"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    d = tmp_path_factory.mktemp("stack") / "a"
    assert train.cli(STACK + ["--out_dir", str(d)]) == 0
    return d


def same_as(a, b):
    """Seeds 0..2 of sweeps a and b: bitwise the same weights, optimizer state and log."""
    for k in range(3):
        x, y = ckpt(a / f"seed{k}" / "ckpt.pt"), ckpt(b / f"seed{k}" / "ckpt.pt")
        assert x["step"] == y["step"] == 30
        for part in ("model", "schedule"):
            assert x[part].keys() == y[part].keys() and all(torch.equal(x[part][n], y[part][n]) for n in x[part]), (k, part)
        sx, sy = x["optimizer"]["state"], y["optimizer"]["state"]
        assert all(torch.equal(sx[i][n], sy[i][n]) for i in sx for n in sx[i]), k
        assert strip_clock(a / f"seed{k}" / "metrics.jsonl") == strip_clock(b / f"seed{k}" / "metrics.jsonl"), k


@pytest.mark.parametrize("fault", ["ctrl-c", "full disk"])
def test_a_chunks_checkpoints_commit_together(tmp_path, monkeypatch, capsys, sigint, uninterrupted, fault):
    """4S2: a Ctrl-C or a failed write between two seeds' checkpoint writes left a chunk's seeds at two steps, and
    the resume no longer gave the uninterrupted run. Failed before its fix.

    The checkpoints of step 14: a Ctrl-C right after seed 0's write lands after every seed's (all at 14); a
    write that fails at seed 1 (a full disk) leaves every seed at step 7. Either way the resume is one chunk
    again and gives the uninterrupted run bitwise."""
    real, calls = torch.save, []

    def save(obj, f, *a, **k):
        if isinstance(obj, dict) and obj.get("step") == 14:
            calls.append(obj["config"]["seed"])
            if fault == "full disk" and len(calls) == 2:
                raise OSError(28, "No space left on device")
        real(obj, f, *a, **k)
        if isinstance(obj, dict) and obj.get("step") == 14 and fault == "ctrl-c" and len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # between seed 0's write and seed 1's
            sum(range(10_000))  # bytecodes for the handler to run on

    monkeypatch.setattr(torch, "save", save)
    b = tmp_path / "b"
    rc = train.cli(STACK + ["--out_dir", str(b)])
    monkeypatch.setattr(torch, "save", real)
    err = capsys.readouterr().err
    at = 14 if fault == "ctrl-c" else 7
    assert [ckpt(b / f"seed{k}" / "ckpt.pt")["step"] for k in range(3)] == [at] * 3, err  # the old code: 14, 7, 7
    if fault == "ctrl-c":
        assert rc == 130 and "interrupted after step 14; the last checkpoints are at step 14;" in err, err
    else:
        assert rc == 1 and "No space left" in err, err
    assert not [f for k in range(3) for f in os.listdir(b / f"seed{k}") if ".tmp" in f]
    assert train.cli(STACK + ["--out_dir", str(b), "--resume"]) == 0
    out = capsys.readouterr().out
    assert [l for l in out.splitlines() if l.startswith("chunk of seeds 0, 1, 2:") and f"resumed at step {at}" in l], out
    same_as(uninterrupted, b)


def test_a_chunks_full_disk_names_the_checkpoint_it_could_not_write(tmp_path, monkeypatch):
    """U21 (round six): a --stack chunk's full disk said "[Errno 28] No space left on device", naming no file
    (save_checkpoints wrote its temp files outside files.atomic_write). Failed before its fix: assert
    'cannot write' in '[Errno 28] No space left on device'

    The write goes through atomic_write's own halves: one line naming the seed's ckpt.pt, every seed left at its
    previous checkpoint (the chunk's checkpoints still commit together), and no temp file behind."""
    paths = [str(tmp_path / f"seed{k}" / "ckpt.pt") for k in range(3)]
    for p in paths:
        os.makedirs(os.path.dirname(p))
        torch.save({"step": 7}, p)
    real, calls = torch.save, []

    def save(obj, f, *a, **k):
        calls.append(obj["step"])
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", save)
    with pytest.raises(OSError) as err:
        chunks.save_checkpoints(paths, [{"step": 14, "w": torch.ones(2)} for _ in paths], [0, 1, 2])
    monkeypatch.setattr(torch, "save", real)
    assert "cannot write" in str(err.value) and paths[1] in str(err.value) and err.value.errno == 28, str(err.value)
    assert [torch.load(p, weights_only=True)["step"] for p in paths] == [7, 7, 7]
    assert not [f for k in range(3) for f in os.listdir(tmp_path / f"seed{k}") if ".tmp" in f]


def test_a_chunks_ctrl_c_before_its_first_checkpoint_says_none_was_written(tmp_path, monkeypatch, capsys):
    """4S3: a chunk's Ctrl-C before its first checkpoint said "the last checkpoints are at step 0". Failed before its
    fix."""
    real, calls = chunks.train_batch, {"n": 0}

    def interrupted(*a, **k):  # the 4th step's batches (3 seeds a step)
        calls["n"] += 1
        if calls["n"] == 3 * 3 + 1:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(chunks, "train_batch", interrupted)
    err = one_line(capsys, train.cli(STACK + ["--out_dir", str(tmp_path / "c")]), 130)
    assert "interrupted after step 3; no checkpoint was written yet; continue with --resume" in err, err


# --- the checks above see a broken stack (mutation checks) ------------------------------------------------------

def shared_clip(params, max_norm):
    """Broken on purpose: one clipping norm over all the seeds together (clip_grad_norm_ on the stack)."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.stack([g.norm() for g in grads]).norm()
    for g in grads:
        g.mul_((max_norm / (norm + 1e-6)).clamp(max=1.0))
    return norm.expand(grads[0].shape[0])


def one_stream(name):
    def broken(ch):  # broken on purpose: every seed draws from seed 0's generator `name`
        for g in ch.gens:
            g[name] = ch.gens[0][name]
    return broken


@pytest.mark.parametrize("schedule", ["window", "rl"])
@pytest.mark.parametrize("mutant", ["shared clipping norm", "one data stream", "one depth stream"])
def test_equivalence_check_sees_a_broken_stack(schedule, mutant, monkeypatch):
    if mutant == "shared clipping norm":
        monkeypatch.setattr(stack, "clip_per_seed", shared_clip)
    broken = {"one data stream": one_stream("data"), "one depth stream": one_stream("depth")}.get(mutant, lambda ch: None)
    assert stack_vs_separate(schedule, torch.float64, broken) > 1e-4


# --- the prepared H200 scripts, smoke-tested on the CPU ----------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_h200_stack_check_runs_on_the_cpu(tmp_path):
    out = tmp_path / "stack.json"
    r = subprocess.run([sys.executable, "study/cuda/stack_check.py", "--smoke", "--steps", "1", "--json", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.load(open(out))
    kinds = {(row["kind"], row.get("mode")) for row in got["rows"] if "ms" in row}
    assert {("today", None), ("stacked", "eager"), ("stacked", "static")} <= kinds
    assert all("error" not in row or row.get("mode") == "graphs" for row in got["rows"]), got["rows"]
    assert got["estimate"]["dyck"]["table_gpu_hours_stacked"] > 0


@pytest.mark.slow  # five train.py processes: ~30 s of CPU, 1.5 min on a busy 2-core machine
def test_h200_rung_runs_on_the_cpu(tmp_path):
    r = subprocess.run(["bash", "study/cuda/rung.sh", str(tmp_path), "40"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "SMOKE": "1"})
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]
    for row in ("fixed", "matched", "window"):
        for k in range(2):
            d = tmp_path / "results" / "ladder" / "dyck" / "rH" / row / f"seed{k}"
            assert sorted(os.listdir(d)) == ["config.json", "eval.json", "metrics.jsonl"]
            e = json.load(open(d / "eval.json"))
            assert e["schedule"] == row and e["seed"] == k and e["config"]["stack"] == 2
