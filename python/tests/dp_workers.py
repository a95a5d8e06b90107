"""Trainer processes for test_torch_dp.py (module level, so spawn can pickle them).

Every backward pass runs in a child: once a process has made a subinterpreter
(test_smoke_pyext does), PyGILState_Check is always true there and torch's
autograd engine refuses to run in it."""
import pdshm

# What each kind trains with: (optimizer, its keyword arguments, a scheduler
# factory or None); "accum" and "autocast" also say how a rank computes its
# gradient (see gradients()).
KINDS = ["sgd", "plain-sgd", "nesterov", "adam", "pdshm-adam", "adamw", "rmsprop", "adagrad",
         "adam-steplr", "accum", "autocast"]


def step_lr(opt):
    import torch
    return torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)


def optimizer_of(kind):
    import torch
    import pdshm.torch as pt
    o = torch.optim
    return {
        "sgd": (o.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01), None),
        "plain-sgd": (o.SGD, dict(lr=0.1), None),
        "nesterov": (o.SGD, dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.02), None),
        "adam": (o.Adam, dict(lr=0.01, weight_decay=0.01), None),
        "pdshm-adam": (pt.Adam, dict(lr=0.01, weight_decay=0.01), None),
        "adamw": (o.AdamW, dict(lr=0.01, weight_decay=0.1), None),
        "rmsprop": (o.RMSprop, dict(lr=0.01, momentum=0.5, centered=True), None),
        "adagrad": (o.Adagrad, dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1),
                    None),
        "adam-steplr": (o.Adam, dict(lr=0.02), step_lr),
        "accum": (o.SGD, dict(lr=0.1, momentum=0.9), None),
        "autocast": (o.Adam, dict(lr=0.01), None),
    }[kind]


def linear_model(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))


def problem(torch):
    """A fixed regression batch of 24 rows."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(24, 5, generator=g)
    return x, (x.sum(1, keepdim=True) * 0.5).sin()


def gradients(torch, model, kind, x, y, parts):
    """Accumulates into model's .grad the gradient of the mean loss over x, y:
    in one pass; for "accum" over 3 micro-batches (each loss's share); for
    "autocast" under bfloat16 autocast in `parts` micro-batches, their
    gradients summed and divided by parts (so that one process rounds as
    `parts` ranks do, whose mean gradient the group takes)."""
    mse = torch.nn.functional.mse_loss
    if kind == "accum":
        for xs, ys in zip(x.chunk(3), y.chunk(3)):
            (mse(model(xs), ys, reduction="sum") / len(x)).backward()
    elif kind == "autocast":
        for xs, ys in zip(x.chunk(parts), y.chunk(parts)):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(xs)
            assert out.dtype == torch.bfloat16
            mse(out.float(), ys).backward()
        for p in model.parameters():
            p.grad.div_(parts)
    else:
        mse(model(x), y).backward()


def reference(conn, kinds, steps, size):
    """One process, full batch, the same torch.optim optimizer: for each kind
    the parameters after `steps`, as lists."""
    import torch
    torch.set_num_threads(1)
    x, y = problem(torch)
    out = {}
    for kind in kinds:
        model = linear_model(torch)
        cls, kw, sched = optimizer_of(kind)
        opt = cls(model.parameters(), **kw)
        scheduler = sched(opt) if sched else None
        for _ in range(steps):
            opt.zero_grad()
            gradients(torch, model, kind, x, y, size)
            opt.step()
            if scheduler:
                scheduler.step()
        out[kind] = [p.detach().numpy().tolist() for p in model.parameters()]
    return out


def build(pt, model, scope, group, kind, cls=None):
    opt, kw, sched = optimizer_of(kind)
    return (cls or pt.DataParallel)(model, scope, group, opt, timeout=30.0, scheduler=sched,
                                    **kw)


def train(torch, dp, model, kind, size, rank, steps):
    """Trains on rank's equal share of problem() until steps are done;
    returns the steps it redid."""
    x, y = problem(torch)
    n = x.shape[0] // size
    xs, ys = x[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n]
    redone = 0
    while dp.steps_done < steps:
        dp.zero_grad()
        gradients(torch, model, kind, xs, ys, 1)
        if not dp.step():
            redone += 1
    assert all(p.dtype == torch.float32 for p in model.parameters())
    return redone


def dp_trainer(conn, seg_name, scope_prefix, size, rank, steps, kinds):
    """For each kind, trains linear_model through pdshm.torch.DataParallel in
    the scope <scope_prefix>-<kind>; returns the steps it redid, per kind."""
    import torch
    import pdshm.torch as pt
    torch.set_num_threads(1)
    redone = []
    with pdshm.attach(seg_name) as seg:
        with pt.join_group(seg, "dp", size, rank) as group:
            for i, kind in enumerate(kinds):
                model = linear_model(torch)
                dp = build(pt, model, seg.open(f"{scope_prefix}-{kind}"), group, kind)
                if i == 0:
                    conn.send(("joined", dp.steps_done))
                redone.append(train(torch, dp, model, kind, size, rank, steps))
                del dp, model
    return redone


def dying_trainer(conn, seg_name, scope_prefix, size, rank, steps, kind, die_step, phase):
    """As dp_trainer, but SIGKILLs itself in step die_step: "reduce" before the
    gradients are reduced, "update" after the optimizer (and scheduler) ran
    in the working copy, before it is staged, "commit" half-way through
    writing the staged step into place, "barrier" after writing it, before
    the barrier."""
    import os
    import signal
    import torch
    import pdshm.torch as pt

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    class Dying(pt.DataParallel):
        def step(self):
            if phase == "reduce" and self.steps_done + 1 == die_step:
                die()
            return super().step()

        def _meta(self):
            if phase == "update" and self.steps_done + 1 == die_step:
                die()
            return super()._meta()

        def _commit(self, t):
            if phase == "commit" and t == die_step:
                dst, staged = self._commits[0]
                dst.copy_(staged)  # the first slice only
                die()
            super()._commit(t)
            if phase == "barrier" and t == die_step:
                die()

    torch.set_num_threads(1)
    with pdshm.attach(seg_name) as seg:
        with pt.join_group(seg, "dp", size, rank) as group:
            model = linear_model(torch)
            dp = build(pt, model, seg.open(f"{scope_prefix}-{kind}"), group, kind, Dying)
            train(torch, dp, model, kind, size, rank, steps)


def share_gradients(torch, model, x, y, rank, size):
    """Accumulates into model's .grad rank's part of the gradient of the mean
    loss over x, y in a group of `size`: its rows [len*rank//size,
    len*(rank+1)//size) (uneven when size does not divide len(x)), their
    summed loss weighted so that the group's mean of the parts is the full
    batch's gradient."""
    n = x.shape[0]
    lo, hi = n * rank // size, n * (rank + 1) // size
    loss = torch.nn.functional.mse_loss(model(x[lo:hi]), y[lo:hi], reduction="sum")
    (loss * (size / n)).backward()


def shrink_trainer(conn, seg_name, scope_prefix, size, rank, steps, kind, deaths=(),
                   newcomer=False, regroup_at=None, shrink_after=0.5, hold_at=None,
                   patient_after_shrink=False, ready_first=False):
    """Trains `kind` through DataParallel(shrink_after=...) on its share of
    problem() at the group's size of the moment, until `steps`.  deaths: a
    list of (step, phase) at which this process SIGKILLs itself: the phases
    of dying_trainer, and "finish" (in a re-shard, half-way through
    committing a dead rank's shard of that step), "switch" (new rank 0,
    after writing the next layout's progress, before switching to it),
    "switched" (new rank 0, right after the switch).
    newcomer: enlist instead of joining.  regroup_at: (step, size): after
    that step the members call dp.regroup() until the group has that size
    (a newcomer taken in).  shrink_after: DataParallel's.  hold_at: once
    that many steps are done, send ("held", rank, size) and wait for a
    message before going on.  patient_after_shrink: once the group is
    smaller than `size`, wait for replacements for 60 s (shrink no more).
    ready_first: send ("ready",) and wait for a message before joining.
    kind: one that share_gradients() can compute (not "accum" nor
    "autocast").  Returns (steps redone, final rank, final size)."""
    import os
    import signal
    import time
    import torch
    import pdshm.torch as pt

    def dying(at, phase):
        return any(a == at and p == phase for a, p in deaths)

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    class Dying(pt.DataParallel):
        def step(self):
            if dying(self.steps_done + 1, "reduce"):
                die()
            return super().step()

        def _meta(self):
            if dying(self.steps_done + 1, "update"):
                die()
            return super()._meta()

        def _commit(self, t):
            mine = self._rank == self.group.rank  # else another's shard, in a re-shard
            if dying(t, "commit" if mine else "finish"):
                dst, staged = self._commits[0]
                dst.copy_(staged)  # the first slice only
                die()
            super()._commit(t)
            if dying(t, "barrier") and mine:
                die()

        def _switch_layout(self):
            if any(p == "switch" for _, p in deaths):
                gen = int(self._generation[0])
                self.scope.var(f"progress.{gen + 1}").assign(
                    __import__("numpy").zeros((self.group.size, 3), "int64"))
                die()
            super()._switch_layout()
            if any(p == "switched" for _, p in deaths):
                die()

    torch.set_num_threads(1)
    x, y = problem(torch)
    opt, kw, sched = optimizer_of(kind)
    redone = 0
    with pdshm.attach(seg_name) as seg:
        if ready_first:
            conn.send(("ready",))
            conn.recv()
        group = seg.enlist("dp", timeout=30.0) if newcomer else pt.join_group(seg, "dp", size,
                                                                                rank)
        with group:
            model = linear_model(torch)
            dp = Dying(model, seg.open(f"{scope_prefix}-{kind}"), group, opt, timeout=30.0,
                       scheduler=sched, shrink_after=shrink_after, newcomer=newcomer, **kw)
            conn.send(("joined", dp.steps_done))
            while dp.steps_done < steps:
                if hold_at is not None and dp.steps_done == hold_at:
                    conn.send(("held", group.rank, group.size))
                    conn.recv()
                    hold_at = None
                if regroup_at is not None and dp.steps_done == regroup_at[0] and not newcomer:
                    while dp.regroup()[1] < regroup_at[1]:
                        time.sleep(0.05)
                    regroup_at = None
                if patient_after_shrink and group.size < size:
                    dp.shrink_after = 60.0
                dp.zero_grad()
                share_gradients(torch, model, x, y, group.rank, group.size)
                if not dp.step():
                    redone += 1
            out = (redone, group.rank, group.size)
            del dp
    return out


def torture_trainer(conn, seg_name, scope_name, steps, size, rank, role, shrink_after, every,
                    pace):
    """A trainer of test_torch_torture.py: trains "adam-steplr" through
    DataParallel(shrink_after=...) on its share_gradients() of problem()
    until `steps`, and every `every` steps all members call dp.regroup()
    (once per boundary: while regrouped_at is behind), which admits the
    newcomers waiting.  role "member": joins rank of size; "spare": sends
    ("ready",), then waits for an order: ("join", size, rank), to replace
    the dead member of that rank (when that fails because the group has
    regrouped meanwhile, it enlists instead), ("enlist",), or ("quit",).
    pace: seconds each step sleeps (the work of a bigger model).  Sends
    ("joined", steps done, rank, size); returns (rank, size) at the end, or
    None for a spare told to quit."""
    import time
    import torch
    import pdshm.torch as pt
    torch.set_num_threads(1)
    x, y = problem(torch)
    from pdshm import _pdshm
    opt, kw, sched = optimizer_of("adam-steplr")
    newcomer = False
    with pdshm.attach(seg_name) as seg:
        if role == "spare":
            conn.send(("ready",))
            order = conn.recv()
            if order[0] == "quit":
                return None
            newcomer = order[0] == "enlist"
            if not newcomer:
                size, rank = order[1:]
        group = None
        if not newcomer:
            try:
                group = pt.join_group(seg, "dp", size, rank, patience=2.0)
            except pdshm.Error as e:  # regrouped (EINVAL) or regrouping (EBUSY) meanwhile
                if role != "spare" or e.code not in (_pdshm.EINVAL, _pdshm.EBUSY):
                    raise
                newcomer = True
        if newcomer:
            group = seg.enlist("dp", timeout=120.0)
        with group:
            model = linear_model(torch)
            dp = pt.DataParallel(model, seg.open(scope_name), group, opt, timeout=60.0,
                                 scheduler=sched, shrink_after=shrink_after,
                                 newcomer=newcomer, **kw)
            conn.send(("joined", dp.steps_done, group.rank, group.size))
            while dp.steps_done < steps:
                s = dp.steps_done
                if s and s % every == 0 and dp.regrouped_at < s:
                    dp.regroup()
                dp.zero_grad()
                share_gradients(torch, model, x, y, group.rank, group.size)
                time.sleep(pace)
                dp.step()
            out = (group.rank, group.size)
            del dp
    return out
