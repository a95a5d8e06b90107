"""Trainer processes for test_torch_dp.py (module level, so spawn can pickle them).

Every backward pass runs in a child: once a process has made a subinterpreter
(test_smoke_pyext does), PyGILState_Check is always true there and torch's
autograd engine refuses to run in it."""
import pdshm


def linear_model(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))


def problem(torch):
    """A fixed regression batch of 24 rows."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(24, 5, generator=g)
    return x, (x.sum(1, keepdim=True) * 0.5).sin()


def reference(conn, kind, steps):
    """One process, full batch, torch.optim: the parameters after `steps`, as lists."""
    import torch
    torch.set_num_threads(1)
    model = linear_model(torch)
    if kind == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    elif kind == "plain-sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    elif kind == "nesterov":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.8, nesterov=True,
                              weight_decay=0.02)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.01)
    x, y = problem(torch)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().numpy().tolist() for p in model.parameters()]


def make_optimizer(kind):
    import pdshm.torch as pt
    if kind == "sgd":
        return pt.SGD(lr=0.1, momentum=0.9, weight_decay=0.01)
    if kind == "plain-sgd":
        return pt.SGD(lr=0.1)
    if kind == "nesterov":
        return pt.SGD(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.02)
    return pt.Adam(lr=0.01, weight_decay=0.01)


def dp_trainer(conn, seg_name, scope_path, size, rank, steps, kind):
    """Trains linear_model on rank's equal share of problem() for `steps` steps
    through pdshm.torch.DataParallel; returns the steps it redid."""
    import torch
    import pdshm.torch as pt
    torch.set_num_threads(1)
    with pdshm.attach(seg_name) as seg:
        with pt.join_group(seg, "dp", size, rank) as group:
            model = linear_model(torch)
            dp = pt.DataParallel(model, seg.open(scope_path), group, make_optimizer(kind),
                                 timeout=30.0)
            conn.send(("joined", dp.steps_done))
            x, y = problem(torch)
            n = x.shape[0] // size
            xs, ys = x[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n]
            redone = 0
            while dp.steps_done < steps:
                dp.zero_grad()
                torch.nn.functional.mse_loss(model(xs), ys).backward()
                if not dp.step():
                    redone += 1
            return redone


def dying_trainer(conn, seg_name, scope_path, size, rank, steps, kind, die_step, phase):
    """As dp_trainer, but SIGKILLs itself in step die_step: "reduce" before the
    gradients are reduced, "update" after, "commit" half-way through writing
    its shard into place, "barrier" after writing it, before the barrier."""
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

        def _apply(self, t):
            if phase == "update" and t == die_step:
                die()
            super()._apply(t)

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
            dp = Dying(model, seg.open(scope_path), group, make_optimizer(kind), timeout=30.0)
            x, y = problem(torch)
            n = x.shape[0] // size
            xs, ys = x[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n]
            while dp.steps_done < steps:
                dp.zero_grad()
                torch.nn.functional.mse_loss(model(xs), ys).backward()
                dp.step()
