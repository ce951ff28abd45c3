"""
train.py --seeds N --stack S: the seeds trained S at a time, each chunk one batched program (stack.py), each seed
with the run directory, log, checkpoints and evaluation it would have alone. Stacked seed s is seed s: the same
initial weights, batches, depth draws (its own generators), halting head and learning rate. One step: every seed's
batch right-padded to the chunk's longest (padding is never attended to nor scored), L = sum_s L_s, backward, each
seed's gradient clipped by its own norm, one AdamW (elementwise).

A seed whose loss is not finite stops alone. Eager (the CPU default): the losses are read every step and the seed
is dropped before its update counts. --static (CUDA): no host read inside the step (fixed padding per task, loops
to T_max, masked; a non-finite seed's update undone on the device, read at log and checkpoint time); fused AdamW
with a tensor learning rate; --compile compiles the loss and the update (CUDA graphs on CUDA).
"""

import contextlib
import os
import sys
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

from config import build, lr_at, seeds_of, stream, trained_depth
import metrics
from tasks import IGNORE, PAD, curriculum_n_max, eval_set, train_batch
from lab import checkpoint, rundir, stack
from lab.cli import ctrl_c_after, interrupted, log_line
from lab.files import publish, staged


def pad_length(task, cfg) -> int:
    """--static: one pad length per task, the longest training sequence at n_max of 16 draws (multiplication's widths
    vary; a longer batch still works, it only changes the shape once more)."""
    gen = torch.Generator().manual_seed(0)
    return max(len(task.sample(cfg.n_max, gen)[0]) for _ in range(16))


class Chunk:
    """S seeds of one configuration (cfgs differ only in their seeds) as one stacked program on `device`.
    states: the seeds' checkpoints (a resumed chunk) or None (fresh). dtype: for the float64 tests."""

    def __init__(self, cfgs: list, device: str, states: list = None, dtype: torch.dtype = None):
        self.cfgs, self.cfg, self.device, self.static = list(cfgs), cfgs[0], device, cfgs[0].static
        built = [build(c) for c in cfgs]  # each seed's own initial weights and halting head
        self.task = built[0][0]
        self.models = [b[1].to(device=device, dtype=dtype) for b in built]  # unstacked twins: evaluation
        self.schedules = [b[2].to(device=device, dtype=dtype) for b in built]
        self.model = stack.StackedLoopedTransformer(self.models)
        self.schedule = stack.StackedSchedule(self.schedules)
        self.params = list(self.model.parameters()) + list(self.schedule.parameters())  # train.py's order
        cfg = self.cfg
        fused = {"fused": True, "lr": torch.tensor(cfg.lr, device=device)} if self.static else {"lr": cfg.lr}
        self.optimizer = torch.optim.AdamW(self.params, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay,
                                           **fused)
        # the param group an unstacked run's checkpoint holds (stacked seeds write ordinary checkpoints)
        twin = list(self.models[0].parameters()) + list(self.schedules[0].parameters())
        self.group = torch.optim.AdamW(twin, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                                       weight_decay=cfg.weight_decay).state_dict()["param_groups"][0]
        self.gens = [{k: torch.Generator().manual_seed(stream(seeds_of(c)[k], k)) for k in ("data", "depth")} for c in cfgs]
        self.torch_rng = [torch.Generator().manual_seed(stream(seeds_of(c)["torch"], "torch")).get_state() for c in cfgs]
        self.names = self.schedule.stat_names + ["grad_norm"]
        S = len(cfgs)
        self.acc = torch.zeros(S, len(self.names), dtype=torch.float64, device=device)  # stat sums since the last log
        self.n_acc = 0
        self.bad_step = torch.zeros(S, dtype=torch.long, device=device)  # --static: step of the first non-finite loss
        self.bad_loss = torch.zeros(S, device=device)
        self.pad = pad_length(self.task, cfg) if self.static else 0
        self.autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if cfg.amp and device.startswith("cuda")
                         else contextlib.nullcontext())
        self.forward, self.update = self._forward, self._update
        if cfg.compile:  # --static --compile: the step as captured graphs (CUDA graphs on CUDA)
            mode = "reduce-overhead" if device.startswith("cuda") else None
            self.forward, self.update = torch.compile(self._forward, mode=mode), torch.compile(self._update, mode=mode)
        if states:
            self.load(states)

    def load(self, states: list) -> None:
        self.model.load_state_dict(stack.stack_states([st["model"] for st in states]))
        self.schedule.load_state_dict(stack.stack_states([st["schedule"] for st in states]))
        saved = [st["optimizer"]["state"] for st in states]
        inner = {i: {k: (v if k == "step" else torch.stack([sv[i][k] for sv in saved])) for k, v in saved[0][i].items()}
                 for i in saved[0]}
        self.optimizer.load_state_dict({"state": inner, "param_groups": self.optimizer.state_dict()["param_groups"]})
        lr = states[0]["optimizer"]["param_groups"][0]["lr"]
        self.optimizer.param_groups[0]["lr"] = torch.tensor(float(lr), device=self.device) if self.static else lr
        for g, st in zip(self.gens, states):
            for k in g:
                g[k].set_state(st["rng"][k])
        self.torch_rng = [st["rng"]["torch"] for st in states]
        acc = [st.get("acc_stats") or {} for st in states]
        self.n_acc = int(acc[0].get("steps", 0))
        if self.n_acc:
            self.acc = torch.tensor([[a[k] for k in self.names] for a in acc], dtype=torch.float64, device=self.device)

    def state(self, s: int) -> dict:
        """Seed s's model, schedule, optimizer, RNG states and stat sums, as train.py's checkpoint holds them."""
        inner = {i: {k: (v if k == "step" else v[s]).detach().cpu().clone() for k, v in st.items()}
                 for i, st in self.optimizer.state_dict()["state"].items()}
        group = {**self.group, "lr": float(self.optimizer.param_groups[0]["lr"])}
        acc = {"steps": float(self.n_acc), **dict(zip(self.names, self.acc[s].tolist()))} if self.n_acc else {}
        return {"model": stack.unstack(self.model.state_dict(), s), "schedule": stack.unstack(self.schedule.state_dict(), s),
                "optimizer": {"state": inner, "param_groups": [group]}, "acc_stats": acc,
                "rng": {**{k: g.get_state() for k, g in self.gens[s].items()}, "torch": self.torch_rng[s]}}

    def twin(self, s: int):
        """Seed s as an ordinary (model, schedule) with the stacked weights: what evaluation scores."""
        self.models[s].load_state_dict(stack.unstack(self.model.state_dict(), s))
        self.schedules[s].load_state_dict(stack.unstack(self.schedule.state_dict(), s))
        return self.models[s], self.schedules[s]

    def keep(self, idx: list[int]) -> None:
        """Continue with the seeds idx only (the others stopped): the chunk is rebuilt from their states."""
        states, acc, n_acc = [self.state(s) for s in idx], self.acc[idx], self.n_acc
        models, schedules = [self.models[s] for s in idx], [self.schedules[s] for s in idx]
        self.__init__([self.cfgs[s] for s in idx], self.device, states, dtype=next(self.model.parameters()).dtype)
        self.models, self.schedules, self.acc, self.n_acc = models, schedules, acc, n_acc

    def batch(self, n_hi: int):
        """Every seed's batch from its own data generator and its depth draw from its own depth generator,
        stacked: x, y (S, B, P) right-padded, Tn and the draw (S, B), on the host."""
        cfg = self.cfg
        parts = [train_batch(self.task, cfg.batch_size, cfg.n_min, n_hi, g["data"]) for g in self.gens]
        T = max([self.pad] + [p[0].shape[1] for p in parts])
        x = torch.stack([F.pad(p[0], (0, T - p[0].shape[1]), value=PAD) for p in parts])
        y = torch.stack([F.pad(p[1], (0, T - p[1].shape[1]), value=IGNORE) for p in parts])
        Tn = torch.stack([p[3] for p in parts])
        return x, y, Tn, self.schedule.draw(Tn, [g["depth"] for g in self.gens])

    def _forward(self, x, y, Tn, draw, draw_host=None):
        with self.autocast:
            return self.schedule.loss(self.model, x, y, Tn, draw, draw_host)

    def _update(self, finite: torch.Tensor) -> torch.Tensor:
        """Per-seed clipping and one AdamW step; --static: a non-finite seed's update is undone on the device."""
        gnorm = stack.clip_per_seed(self.params, self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf"))
        if not self.static:
            self.optimizer.step()
            return gnorm
        saved = [[t.detach().clone() for t in [p] + [v for k, v in self.optimizer.state[p].items() if k != "step"]]
                 for p in self.params]
        self.optimizer.step()
        with torch.no_grad():
            for p, old in zip(self.params, saved):  # the moments exist from the second step on
                now = [p] + [v for k, v in self.optimizer.state[p].items() if k != "step"]
                for t, o in zip(now, old):
                    t.copy_(torch.where(finite.view(-1, *[1] * (t.dim() - 1)), t, o))
        return gnorm

    def step(self, it: int) -> list:
        """One training step of every seed. Eager: returns [(seed index, loss)] of the seeds whose loss was not
        finite (the caller stops them); --static: [] (read them with failed())."""
        cfg = self.cfg
        n_hi = curriculum_n_max(it, cfg.curriculum_start, cfg.n_max, cfg.curriculum_every) if cfg.curriculum else cfg.n_max
        host = self.batch(n_hi)
        cuda = self.device.startswith("cuda")
        x, y, Tn, draw = (t.pin_memory().to(self.device, non_blocking=True) if cuda else t.to(self.device) for t in host)
        lr = lr_at(cfg, it)
        if self.static:
            self.optimizer.param_groups[0]["lr"].fill_(lr)
        else:
            self.optimizer.param_groups[0]["lr"] = lr
        loss, stats = self.forward(x, y, Tn, draw, None if self.static else host[3])
        finite = torch.isfinite(loss.detach())  # eager: read on the host, the step's one host read
        bad = [] if self.static else [(s, v) for s, (ok, v) in enumerate(zip(finite.tolist(), loss.tolist())) if not ok]
        self.optimizer.zero_grad(set_to_none=True)
        torch.where(finite, loss, torch.zeros_like(loss)).sum().backward()  # d/dtheta_s sum_r L_r = dL_s/dtheta_s
        gnorm = self.update(finite)
        if self.static:
            first = finite.logical_not() & (self.bad_step == 0)
            self.bad_step = torch.where(first, it + 1, self.bad_step)
            self.bad_loss = torch.where(first, loss.detach().float(), self.bad_loss)
        self.acc += torch.cat([stats, gnorm.unsqueeze(1)], 1).to(self.acc.dtype)
        self.n_acc += 1
        return bad

    def failed(self) -> list:
        """--static: [(seed index, step, loss)] of the seeds with a non-finite loss so far (a host read)."""
        return [(s, st, v) for s, (st, v) in enumerate(zip(self.bad_step.tolist(), self.bad_loss.tolist())) if st]

    def means(self) -> list[dict]:
        """Each seed's mean stats since the last log line; the sums start again."""
        out = [dict(zip(self.names, (row / self.n_acc).tolist())) for row in self.acc]
        self.acc.zero_()
        self.n_acc = 0
        return out


def save_checkpoints(paths: list, cks: list, seeds: list) -> None:
    """The ckpt.pt of every seed of a chunk at one step, committed together, so that a resume continues them as the
    same chunk (other seeds pad its batches otherwise). All are checked and written to temp files first, then renamed;
    a failure before the renames leaves every seed at its previous checkpoint. A Ctrl-C lands after the last rename."""
    for p, ck, k in zip(paths, cks, seeds):
        if bad := checkpoint.non_finite(ck):
            raise FloatingPointError(f"seed {k}: non-finite weights at step {ck['step']} ({bad}); " + checkpoint.last_good(p))
    tmps = []
    with ctrl_c_after():
        try:
            for p, ck in zip(paths, cks):  # atomic_write's halves: a failed write (a full disk) names its file
                tmps.append(staged(p, lambda f, ck=ck: torch.save(ck, f)))
            for tmp, p in zip(tmps, paths):
                publish(p, tmp)
        finally:  # the temp files left by a failure before the renames
            for tmp in tmps:
                if os.path.lexists(tmp):
                    os.remove(tmp)


def train_chunk(cfgs: list, dirs: list, device: str, starts: list, finish) -> tuple[list, list]:
    """train.py's train_run for the seeds cfgs in dirs as one chunk (from their checkpoints `starts`, all at one step,
    or None), then finish(cfg, run_dir, model, schedule, task, T_eval, elapsed, env, segments, device) each seed
    (train.py's finish_run). Returns (evals, [(seed, message)] of the seeds stopped by a non-finite loss)."""
    cfg = cfgs[0]
    ch = Chunk(cfgs, device, starts)
    step, elapsed = (starts[0]["step"], starts[0]["elapsed"]) if starts else (0, 0.0)
    seeds, dirs = [c.seed for c in cfgs], list(dirs)
    ckpts, logs = [os.path.join(d, "ckpt.pt") for d in dirs], [os.path.join(d, "metrics.jsonl") for d in dirs]
    opened = [rundir.open_run(c, d, step, resumed=bool(starts)) for c, d in zip(cfgs, dirs)]  # config.json, metrics.jsonl
    env, segments = opened[0][0], [segs for _, segs in opened]
    T_eval = cfg.T_test if cfg.looped else min(cfg.T_test, trained_depth(cfg))
    id_sets = eval_set(ch.task, [n for n in metrics.test_lengths(cfg) if n <= cfg.n_max] or [cfg.n_max], 64, cfg.eval_seed)
    failures = []

    def stop(bad: list) -> None:  # [(index, message)]: these seeds stop, the others go on
        nonlocal seeds, dirs, ckpts, logs, cfgs, segments
        for s, msg in bad:
            msg = f"seed {seeds[s]}: {msg}; " + checkpoint.last_good(ckpts[s])
            if gone := rundir.forget_unsaved(dirs[s]):  # before its first checkpoint: nothing left that blocks
                msg += f"; {gone}"
            print(f"train.py: {msg}", file=sys.stderr)
            failures.append((seeds[s], msg))
        keep = [s for s in range(len(seeds)) if s not in {b for b, _ in bad}]
        seeds, dirs, ckpts, logs, cfgs, segments = ([v[s] for s in keep] for v in (seeds, dirs, ckpts, logs, cfgs, segments))
        if keep:
            ch.keep(keep)

    def sync() -> None:  # --static: the failures since the last read
        if cfg.static and (bad := ch.failed()):
            stop([(s, f"non-finite loss {v} at step {st}") for s, st, v in bad])

    t0, t0_step, done = time.time(), step, step
    bar = tqdm(range(step, cfg.max_iters), initial=step, total=cfg.max_iters, desc=f"seeds {seeds[0]}..{seeds[-1]}",
               disable=not sys.stderr.isatty(), leave=False)
    try:
        for it in bar:
            bad = ch.step(it)
            done = it + 1
            if bad:
                stop([(s, f"non-finite loss {v} at step {done}") for s, v in bad])
            if not seeds:
                break
            if done % cfg.log_interval == 0 or done == cfg.max_iters:
                sync()
                if not seeds:
                    break
                now = time.time()
                elapsed += now - t0
                n_hi = (curriculum_n_max(it, cfg.curriculum_start, cfg.n_max, cfg.curriculum_every) if cfg.curriculum
                        else cfg.n_max)
                ms = 1000 * (now - t0) / (done - t0_step)
                t0, t0_step = now, done
                for s, means in enumerate(ch.means()):
                    rec = rundir.log_record(done, lr_at(cfg, it), n_hi, means, ms, elapsed)  # train.py's line
                    if done % cfg.eval_interval == 0 or done == cfg.max_iters:  # the policy's ID exact match
                        model, schedule = ch.twin(s)
                        rec["id_acc"] = metrics.policy_id_acc(model, schedule, id_sets, T_eval, cfg.eval_batch_size, device)
                    rundir.append_log(logs[s], rec)
                    (bar.write if not bar.disable else print)(f"seed {seeds[s]} | {log_line(rec)}")
                t0 = time.time()
            if done % cfg.ckpt_interval == 0 or done == cfg.max_iters:
                sync()
                t_save = time.time()
                sts = [ch.state(s) for s in range(len(seeds))]  # train.py's checkpoints
                cks = [checkpoint.state(c, done, elapsed, st["acc_stats"], st["model"], st["schedule"], st["optimizer"],
                                        st["rng"]) for c, st in zip(cfgs, sts)]
                with ctrl_c_after():  # a Ctrl-C during the writes lands after them, and after `step` names them
                    save_checkpoints(ckpts, cks, seeds)
                    step = done
                t0 += time.time() - t_save  # checkpoint writes are not training time
    except KeyboardInterrupt:  # Ctrl-C: one line, exit 130 (cli.run)
        raise interrupted(done, lambda: f"the last checkpoints are at step {step}" if step
                          else "no checkpoint was written yet") from None
    bar.close()
    evals = []
    for s, (c, d) in enumerate(zip(cfgs, dirs)):
        model, schedule = ch.twin(s)
        evals.append({**finish(c, d, model, schedule, ch.task, T_eval, elapsed, env, segments[s], device), "run_dir": d})
    return evals, failures

