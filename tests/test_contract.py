"""The copy-alone contract of halting.py and readouts.py, as a stranger meets it: their own looped models
(tests/foreign.py and here, not model.py), arguments of the wrong dtype or values, a float64 model, a schedule on another
device, a model without forward_depths. Every wrong input is refused on entry with one line naming it; the
optimised paths never call a model's step on 0 rows. Of ours, only halting and readouts are imported.

The cases 4C1-4C6 are round four's (issue 53; docs/reliability.md): each test says which, and failed before its fix."""

import numpy as np
import pytest
import torch
import torch.nn as nn

from foreign import ForeignLoop
import halting
import readouts

V, D, B, P = 6, 8, 5, 7
LEARNED = ("rl", "ponder", "act", "trm_halt")
KNOBS = dict(c=4, w=1, T_max=6, d_model=D, pad_id=0, lambda_ent=0.01)


Loop = ForeignLoop  # another project's looped model (tests/foreign.py): embed / step / readout only


class RowsGuard(Loop):
    """A model whose step cannot take 0 rows (it reshapes by the batch, keeps per-batch state from embed, ...)
    and that counts the rows each step receives."""

    def embed(self, x):
        self.batch_rows, self.calls = len(x), []
        return super().embed(x)

    def step(self, h, h0, t):
        self.calls.append(len(h))
        if not 1 <= len(h) <= self.batch_rows or len(h) != len(h0):
            raise RuntimeError(f"step received {len(h)} rows (h0: {len(h0)}) of a batch of {self.batch_rows}")
        return super().step(h, h0, t)


class Trajectory(Loop):
    """Loop with the model(x, K, keep_hidden=True) that readouts.collect needs."""

    def forward(self, x, K, keep_hidden=False):
        logits, hidden = halting.unroll(self, x, K)
        return (logits, hidden) if keep_hidden else logits


def data(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(1, V, (B, P), generator=g)
    x[0, 4:] = 0  # token 0 pads the first sample
    y = torch.randint(1, V, (B, P), generator=g)
    y[:, :2] = halting.IGNORE
    return x, y, torch.tensor([1, 2, 3, 5, 6]), x != 0


def schedule(name, **extra):
    knobs = {**KNOBS, **extra}
    return halting.make_schedule(name, **{k: v for k, v in knobs.items() if k in halting.settings(name)})


def policy_of(s, Tn, T_test=8, hidden=None, mask=None):
    if hidden is None:
        x, _, _, mask = data()
        hidden = halting.unroll(Loop(), x, T_test)[1].detach()
    return s.policy(Tn, T_test, hidden=hidden, mask=mask)


def refused(fn, starts: str, *contains: str) -> str:
    """fn() raises ValueError whose one-line message starts with `starts` and contains every `contains`."""
    with pytest.raises(ValueError) as err:
        fn()
    msg = str(err.value)
    assert msg.startswith(starts) and "\n" not in msg, msg
    for c in contains:
        assert c in msg, (c, msg)
    return msg


# --- 1. Tn is int32 or int64: a uint8 Tn is not read as a mask, int8/int16 do not crash in indexing ---------

@pytest.mark.parametrize("name", list(halting.SCHEDULES))
def test_tn_of_a_small_integer_dtype_is_refused_naming_tn_and_its_dtype(name):
    """4C1: a uint8 Tn was read as a mask (multidepth gave NaN), int8/int16 a bare IndexError; Tn must be int32 or
    int64. Failed before its fix."""
    x, y, Tn, mask = data()
    for dtype in (torch.uint8, torch.int8, torch.int16, torch.bool):
        bad = Tn.to(dtype)
        refused(lambda: schedule(name).loss(Loop(), x, y, bad, torch.Generator().manual_seed(0), mask=mask),
                "Tn:", str(dtype), "int32 or int64")
        refused(lambda: policy_of(schedule(name), bad), "Tn:", str(dtype), "int32 or int64")


@pytest.mark.parametrize("name", list(halting.SCHEDULES))
def test_tn_int32_gives_the_numbers_of_int64(name):
    """4C1: an int32 Tn is accepted and gives the numbers of int64. Failed before its fix."""
    x, y, Tn, mask = data()
    out = []
    for dtype in (torch.int64, torch.int32):
        loss, stats = schedule(name).loss(Loop(), x, y, Tn.to(dtype), torch.Generator().manual_seed(1), mask=mask)
        out.append((loss.item(), stats["depth"], policy_of(schedule(name), Tn.to(dtype), mask=mask).tolist()))
    assert out[0][0] == pytest.approx(out[1][0], rel=1e-12, abs=1e-12)
    assert out[0][1:] == out[1][1:]


def test_readouts_collect_refuses_a_uint8_tn():
    """4C1: readouts.collect refuses a uint8 Tn too. Failed before its fix."""
    x, y, Tn, _ = data()
    sets = {3: (x, y, torch.full((B,), 3), Tn.to(torch.uint8))}
    refused(lambda: readouts.collect(Trajectory(), schedule("matched"), sets, 8, pad_id=0),
            "sets[3] Tn:", "torch.uint8", "int32 or int64")


# --- 2. y: no negative target but IGNORE; int64 ------------------------------------------------------------

@pytest.mark.parametrize("name", list(halting.SCHEDULES))
def test_y_with_minus_one_for_unscored_is_refused_naming_y_and_ignore(name):
    """4C2: y with -1 as the ignore value gave a bare "Target -1 is out of bounds"; y is int64 with no negative value
    but IGNORE. Failed before its fix."""
    x, y, Tn, mask = data()
    y1 = y.masked_fill(y == halting.IGNORE, -1)
    refused(lambda: schedule(name).loss(Loop(), x, y1, Tn, torch.Generator().manual_seed(0), mask=mask),
            "y:", "-1", "IGNORE (-100)")
    refused(lambda: schedule(name).loss(Loop(), x, y.int(), Tn, torch.Generator().manual_seed(0), mask=mask),
            "y:", "torch.int32", "int64")


def test_readouts_collect_refuses_targets_outside_the_vocabulary():
    """4C2: readouts.collect also checks y in 0..V-1 (halting.py cannot: V is known only at the readout). Failed before
    its fix."""
    x, y, Tn, _ = data()
    for bad in (-1, V):
        yb = y.clone()
        yb[1, 3] = bad
        sets = {3: (x, yb, torch.full((B,), 3), Tn)}
        refused(lambda: readouts.collect(Trajectory(), schedule("matched"), sets, 8, pad_id=0),
                "sets[3] y:", str(bad), f"0..{V - 1}", "IGNORE (-100)")


# --- 3. the optimised paths never call step on 0 rows ----------------------------------------------------

@pytest.mark.parametrize("name", halting.DEPTH_FIRST)
@pytest.mark.parametrize("k", [1, 2, 5])
def test_truncated_backprop_never_steps_zero_rows_and_keeps_the_loss(name, k):
    """4C3: --bptt_k called the model's step on a 0-row batch. Failed before its fix."""
    x, y, Tn, _ = data()
    losses = []
    for bptt_k in (0, k):
        model = RowsGuard().double()
        s = schedule(name, bptt_k=bptt_k, active_set=False)
        loss, _ = s.loss(model, x, y, Tn, torch.Generator().manual_seed(2))
        loss.backward()
        assert min(model.calls) >= 1
        losses.append(loss.item())
    assert losses[1] == pytest.approx(losses[0], rel=1e-9)


@pytest.mark.parametrize("name", list(halting.SCHEDULES))
def test_no_schedule_steps_zero_rows(name):
    """4C3: no schedule calls step on 0 rows, with or without the active set. Failed before its fix."""
    x, y, Tn, mask = data()
    for active in (True, False):
        model = RowsGuard()
        s = schedule(name, active_set=active)
        if name == "trm_halt":  # half the samples halt at the first supervision step
            with torch.no_grad():
                s.head.bias.fill_(0.0)
                s.head.weight.normal_(0, 3.0, generator=torch.Generator().manual_seed(3))
        loss, _ = s.loss(model, x, y, Tn, torch.Generator().manual_seed(4), mask=mask)
        loss.backward()
        assert torch.isfinite(loss) and min(model.calls) >= 1, name


# --- 4. a float64 model, a width other than d_model, a schedule on another device ----------------------------

@pytest.mark.parametrize("name", LEARNED)
def test_a_float64_model_with_the_float32_head_is_named(name):
    """4C4: a float64 model with the float32 halting head: a bare torch error. Failed before its fix."""
    x, y, Tn, mask = data()
    refused(lambda: schedule(name).loss(Loop().double(), x, y, Tn, torch.Generator(), mask=mask),
            "the halting head's weights are torch.float32 on cpu but the model's state h is torch.float64 on cpu",
            "schedule.to(")
    hidden = halting.unroll(Loop().double(), x, 8)[1].detach()
    refused(lambda: policy_of(schedule(name), Tn, hidden=hidden, mask=mask), "the halting head's weights are",
            "torch.float64", "schedule.to(")
    loss, _ = schedule(name).double().loss(Loop().double(), x, y, Tn, torch.Generator(), mask=mask)  # moved: fine
    assert torch.isfinite(loss)


@pytest.mark.parametrize("name", LEARNED)
def test_a_state_width_other_than_d_model_is_named(name):
    """4C4: a state width other than the head's d_model: a bare torch error. Failed before its fix."""
    x, y, Tn, mask = data()
    refused(lambda: schedule(name, d_model=2 * D).loss(Loop(), x, y, Tn, torch.Generator(), mask=mask),
            "the halting head takes states of width d_model=16 but the model's state h has width D=8",
            f"d_model={D}")


@pytest.mark.parametrize("name", LEARNED + ("fixed_prior",))
def test_a_schedule_on_another_device_is_named(name):
    """4C4: model and schedule on different devices: a bare torch error. Failed before its fix."""
    x, y, Tn, mask = data()
    s = schedule(name).to("meta")  # a device other than the batch's, on any machine
    refused(lambda: s.loss(Loop(), x, y, Tn, torch.Generator(), mask=mask), "schedule.", "on meta but x is on cpu",
            "schedule.to('cpu')")
    if name in LEARNED:
        refused(lambda: policy_of(s, Tn, mask=mask), "the halting head's weights are torch.float32 on meta",
                "schedule.to('cpu'")


@pytest.mark.smoke
def test_the_contract_says_d_model_is_the_width_of_the_state():
    """4C4: the contract's "d_model=D" was unexplained. Failed before its fix."""
    doc = " ".join((halting.__doc__ + halting.CONTRACT).split())
    assert "D is the width of the loop's state h, the d_model= a learned schedule is built with" in doc
    assert "D the width of the loop's state h" in doc


# --- 5. readouts: the methods time_exits, time_inference, early_exit and collect need ------------------------

@pytest.mark.smoke
def test_readouts_name_a_missing_forward_depths_or_policy_on_entry():
    """4C5: readouts' time_exits / time_inference needed forward_depths unsaid; collect without .policy raised
    AttributeError. Failed before its fix."""
    x, y, Tn, mask = data()
    scored = y != readouts.IGNORE
    refused(lambda: readouts.time_inference(Loop(), [(x, y, scored, mask)], [("fixed", 3, None)], 6),
            "model:", "has no forward_depths")
    rows = readouts.time_inference(Loop(), [(x, y, scored, mask)], [("top1", 0.5, None)], 6, repeats=1)
    assert rows[0]["readout"] == "top1"  # the online readouts need no forward_depths
    refused(lambda: readouts.time_exits(Loop(), {}, {}, {3: (x, y, None, Tn)}, 6, 0), "model:",
            "has no forward_depths")
    sets = {3: (x, y, torch.full((B,), 3), Tn)}
    refused(lambda: readouts.collect(Trajectory(), object(), sets, 8, pad_id=0), "schedule: a builtins.object",
            "has no policy")
    refused(lambda: readouts.collect(Loop(), schedule("matched"), sets, 8, pad_id=0), "model.forward", "keep_hidden")
    refused(lambda: readouts.early_exit(nn.Linear(2, 2), x, scored, mask, "top1", 0.5, 6), "model:",
            "has no embed, step, readout")
    out = readouts.collect(Trajectory(), schedule("matched"), sets, 8, pad_id=0)
    assert out["policy"].tolist() == Tn.clamp(1, 8).tolist()
    doc = " ".join(readouts.__doc__.split())  # the contract says so
    assert "time_exits as time_inference with \"fixed\" rules: needs model.forward_depths" in doc


# --- 6. every schedule's loss and policy check their arguments on entry --------------------------------------

def loss_cases():
    x, y, Tn, mask = data()
    y1 = y.masked_fill(y == halting.IGNORE, -1)
    gen = torch.Generator()
    return [("x", ([[1, 2]], y, Tn, gen, None)), ("y", (x, y[:, :1], Tn, gen, None)),
            ("y", (x, y.float(), Tn, gen, None)), ("y", (x, y.int(), Tn, gen, None)), ("y", (x, y1, Tn, gen, None)),
            ("Tn", (x, y, Tn[:, None], gen, None)), ("Tn", (x, y, Tn.float(), gen, None)),
            ("Tn", (x, y, Tn.to(torch.uint8), gen, None)), ("Tn", (x, y, Tn.to(torch.int16), gen, None)),
            ("Tn", (x, y, np.arange(1, B + 1), gen, None)), ("Tn", (x, y, Tn[:3], gen, None)),
            ("gen", (x, y, Tn, None, None)), ("gen", (x, y, Tn, 0, None)),
            ("mask", (x, y, Tn, gen, mask.float())), ("mask", (x, y, Tn, gen, mask[:, :3]))]


@pytest.mark.smoke
@pytest.mark.parametrize("name", list(halting.SCHEDULES))
def test_every_loss_checks_every_argument_on_entry(name):
    """4C6: "loss and policy check every argument on entry" was not true of every schedule's loss. Failed before its
    fix."""
    for arg, (x, y, Tn, gen, mask) in loss_cases():
        model = RowsGuard()
        refused(lambda: schedule(name).loss(model, x, y, Tn, gen, mask=mask), f"{arg}:")
        assert not getattr(model, "calls", None), (name, arg)  # refused before the model ran a step


@pytest.mark.parametrize("name", list(halting.SCHEDULES))
def test_every_policy_checks_every_argument_on_entry(name):
    """4C6: "loss and policy check every argument on entry" was not true of every schedule's policy. Failed before its
    fix."""
    x, _, Tn, mask = data()
    hidden = halting.unroll(Loop(), x, 8)[1].detach()  # (9, B, P, D)
    s = schedule(name)
    cases = [("T_test", (Tn, 0, hidden, mask)), ("T_test", (Tn, 8.0, hidden, mask)),
             ("Tn", (Tn.to(torch.uint8), 8, hidden, mask)), ("Tn", (Tn.float(), 8, hidden, mask)),
             ("Tn", (Tn[:, None], 8, hidden, mask))]
    if name in LEARNED:
        cases += [("hidden", (None, 8, None, mask)), ("hidden", (None, 8, hidden[:5], mask)),
                  ("hidden", (None, 8, hidden[:, :, 0], mask)), ("hidden", (None, 8, hidden.long(), mask)),
                  ("mask", (None, 8, hidden, None)), ("mask", (None, 8, hidden, mask.long())),
                  ("mask", (None, 8, hidden, mask[:3])), ("Tn", (Tn[:3], 8, hidden, mask))]
    else:
        cases += [("Tn", (None, 8, hidden, mask)), ("Tn", (Tn.numpy(), 8, hidden, mask))]
    for arg, (tn, T_test, hid, m) in cases:
        refused(lambda: s.policy(tn, T_test, hidden=hid, mask=m), f"{arg}:")
