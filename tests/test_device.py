"""Every schedule trains a step and evaluates on a device other than the one where random draws and
Python-built tensors land by default.

Without a GPU we simulate the second device: OtherDevice, a TorchFunctionMode, marks the tensors that
"live on the device" (the model's weights, the batch moved with .to(device), whatever torch creates with
an explicit device= or computes from marked tensors) and raises on any op that mixes a marked tensor with
an unmarked one of more than one element, as CUDA does. `.cpu()` unmarks. A tensor drawn from a CPU
generator and added to a device tensor (the bug that made window fail at step 1 on CUDA) is caught.
"""

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

import config
from halting import SCHEDULES
import metrics
import readouts
from tasks import PAD, eval_set, train_batch
import train


class DeviceMismatch(RuntimeError):
    pass


def mark(t):
    if isinstance(t, torch.Tensor):
        t._on_device = True
    return t


def on_device(t) -> bool:
    return getattr(t, "_on_device", False)


class OtherDevice(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name in ("cpu", "to") and isinstance(out, torch.Tensor) and any(out is t for t in tensors):
            out = out.view_as(out)  # a move makes a new tensor, as it would between real devices
        if name in ("cpu", "numpy", "tolist", "item", "__get__", "__repr__", "__format__", "__len__"):
            return out  # back on the host (or not a tensor)
        marked = [on_device(t) for t in tensors]
        if any(marked):
            mixed = [t for t, m in zip(tensors, marked) if not m and t.numel() > 1]
            if mixed:  # a 0-dim or one-element CPU tensor is a scalar: CUDA accepts those
                raise DeviceMismatch(f"{name}: a device tensor meets a host tensor of shape {tuple(mixed[0].shape)}")
        explicit = name == "to" and (len(args) > 1 and isinstance(args[1], (str, torch.device)) or "device" in kwargs)
        if any(marked) or explicit or (not tensors and kwargs.get("device") is not None):
            for t in tree_flatten(out)[0]:
                mark(t)
        return out


def to_device(*modules):
    """What .to(device) does to a module: every weight and buffer lives on the device, and so will the
    gradients (autograd creates them outside the mode)."""
    for m in modules:
        for t in list(m.parameters()) + list(m.buffers()):
            mark(t)
        for p in m.parameters():
            p.register_post_accumulate_grad_hook(lambda p: setattr(p.grad, "_on_device", True))


TINY = dict(d_model=16, n_head=2, n_layer=1, T_max=6, T_test=8, n_max=6, batch_size=6, c=6, w=2)


@pytest.mark.smoke
def test_the_checker_catches_a_host_tensor_added_to_a_device_tensor():
    with OtherDevice():
        Tn = mark(torch.tensor([3, 4, 5]))
        with pytest.raises(DeviceMismatch):
            Tn + torch.randint(-2, 3, (3,), generator=torch.Generator().manual_seed(0))  # the old window bug
        assert on_device(Tn + torch.randint(-2, 3, (3,)).to(Tn.device))  # moved first: fine
        assert on_device(Tn + torch.arange(3, device=Tn.device)) and not on_device(Tn.cpu())
        assert on_device(Tn * torch.tensor(2))  # a scalar: fine


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_train_step_and_evaluation_on_another_device(name):
    cfg = config.Config(schedule=name, **TINY)
    task, model, schedule = config.build(cfg)
    to_device(model, schedule)
    optimizer = torch.optim.AdamW(list(model.parameters()) + list(schedule.parameters()), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    x, y, _, Tn = train_batch(task, 6, 1, 6, torch.Generator().manual_seed(1))
    sets = eval_set(task, [3, 8], 4, seed=2)
    with OtherDevice():
        for active in (True, False):
            schedule.active_set = active
            stats = train.train_step(model, schedule, optimizer, (x.to("cpu"), y.to("cpu"), Tn.to("cpu")), gen, 1.0)
            assert stats["grad_norm"] > 0
        e = metrics.evaluate(model, schedule, task, sets, sets, cfg.T_test, cfg.n_max, device="cpu")
        rep, _ = readouts.readout_report(model, schedule, {"test": sets, "val": sets}, cfg.T_test, cfg.n_max, PAD)
        xb, yb = sets[8][0].to("cpu"), sets[8][1].to("cpu")
        readouts.early_exit(model, xb, yb != readouts.IGNORE, xb != PAD, "top1", 0.5, cfg.T_test)
    assert len(e["acc"]) == 2 and "policy" in rep["readouts"]
