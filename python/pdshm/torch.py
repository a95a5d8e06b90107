"""pdshm.torch: data-parallel training of a torch.nn.Module by the trainer
processes of one host, with the parameters and the optimizer's state held
ONCE in a pdshm segment (torch is imported when these functions are called,
so `import pdshm` never needs it).

    seg = pdshm.attach("train")
    scope = seg.open("mlp")                       # a named scope: persists
    group = seg.group("trainers", size, rank)
    model = Net()                                 # same seed in every trainer
    dp = pdshm.torch.DataParallel(model, scope, group, pdshm.torch.SGD(lr=0.1))
    while dp.steps_done < steps:
        x, y = batch(dp.steps_done, group.rank)   # this rank's share of the step
        dp.zero_grad()
        loss_fn(model(x), y).backward()
        dp.step()                                 # False: a member died, redo

What lives where, in `scope`:
  <parameter name>              the parameter, label "parameter" (one copy)
  <parameter name>.<state>      optimizer state, label "optimizer" (one copy)
  gradient.<rank>               each rank's gradients, flat, label "gradient"
  staged.<rank>                 each rank's last computed shard update
  progress                      int64 (size, 3): per rank, the last step it
                                applied, the last step it staged, and how
                                many processes have held the rank

The module's parameters are replaced by zero-copy views of their variables
and each parameter's .grad by a view of this rank's gradient variable, so
autograd accumulates straight into the segment.  step() averages the
gradients over the group (Group.allreduce, "mean"), then rank r updates its
slice [r*n/size, (r+1)*n/size) of every parameter and state tensor, then a
barrier.  An update is staged first (computed out of place into staged.<r>,
then copied into place), so it can be finished by whoever holds the rank.

Deaths.  When a member dies, the survivors get pdshm.PeerDied from the round
in progress; step() catches it, waits (two barriers) for a replacement to
take the rank over and repair, and returns False when the step must be
redone (the death came before the gradients were reduced) or True when it
was applied.  A replacement (a new process that joins the dead member's
rank with join_group and builds a DataParallel over the same scope) takes
the parameters from the segment, finishes the dead member's shard of the
last step if its peers had applied theirs, and continues from steps_done.
One death at a time is handled; a second death during that repair is not.

Lifetime: the variables live in `scope` (name it to make it persist); a new
training run wants a new scope.  The views keep their bytes (pins) as views
do; after fork() a DataParallel is the parent's: build a new one (and join
the group again) in the child.
"""
from __future__ import annotations

import time as _time
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple

import numpy as _np

from . import _pdshm

if TYPE_CHECKING:
    import torch
    from ._pdshm import Group, Scope, Segment, Var

__all__ = ["join_group", "share_parameters", "SGD", "Adam", "DataParallel"]

DONE, STAGED, HOLDERS = 0, 1, 2  # the columns of the progress variable


def _torch() -> Any:
    import torch
    return torch


def _init_var(var: Var, make: Callable[[], _np.ndarray], label: str) -> None:
    """Gives var its first value (make() -> numpy array) and label unless some
    process did already; under the variable's lock, so the first one wins."""
    with var.lock():
        if var.dtype is None:
            var.assign(make())
            var.label = label


def join_group(seg: Segment, name: str, size: int, rank: int,
               patience: float = 5.0) -> Group:
    """seg.group(name, size, rank), retrying for up to `patience` seconds while
    it says EBUSY: a replacement that joins a dead member's rank right after
    the death may find the rank still held for a few milliseconds (the dead
    process's files are not closed yet)."""
    deadline = _time.monotonic() + patience
    while True:
        try:
            return seg.group(name, size, rank=rank)
        except _pdshm.Error as e:
            if e.code != _pdshm.EBUSY or _time.monotonic() >= deadline:
                raise
        _time.sleep(0.005)


def share_parameters(module: torch.nn.Module, scope: Scope,
                     label: str = "parameter") -> List[Tuple[str, Var]]:
    """Puts module's parameters into scope, one variable each named as in
    module.named_parameters() and labelled `label`, unless they are there
    already (then the segment's values win: a later or replacement trainer
    picks them up), and replaces them in the module by zero-copy torch views of
    those variables.  Returns [(name, Var)] in named_parameters() order.
    ValueError (changing nothing) when a variable there has another shape or
    dtype than the module's parameter."""
    torch = _torch()
    found = []
    for mod_name, mod in module.named_modules():
        for pname, p in mod._parameters.items():
            if p is not None:
                found.append((f"{mod_name}.{pname}" if mod_name else pname, mod, pname, p))
    seen = {}
    plan = []
    for name, mod, pname, p in found:
        if id(p) in seen:  # a parameter shared by two modules: one variable
            plan.append((name, mod, pname, p, seen[id(p)]))
            continue
        if p.dtype in (torch.bfloat16,) or p.is_complex():
            raise ValueError(f"parameter {name!r}: dtype {p.dtype} is not supported")
        var = scope.find_local_var(name)
        if var is not None and var.dtype is not None:
            want = str(p.dtype).replace("torch.", "")
            if tuple(var.shape) != tuple(p.shape) or var.dtype != want:
                raise ValueError(f"variable {name!r} holds {var.dtype}{list(var.shape)}, the "
                                 f"module's parameter is {want}{list(p.shape)}")
        seen[id(p)] = name
        plan.append((name, mod, pname, p, name))
    out = []
    made = {}
    for name, mod, pname, p, first in plan:
        if first not in made:
            var = scope.var(first)
            _init_var(var, lambda p=p: p.detach().cpu().numpy(), label)
            made[first] = torch.nn.Parameter(torch.from_dlpack(var), requires_grad=p.requires_grad)
            out.append((first, var))
        mod._parameters[pname] = made[first]
    return out


class SGD:
    """Stochastic gradient descent as torch.optim.SGD computes it (momentum,
    dampening, nesterov, weight_decay); the momentum buffers live in the
    segment.  For DataParallel."""

    def __init__(self, lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        if not lr > 0 or momentum < 0 or weight_decay < 0:
            raise ValueError("lr must be > 0, momentum and weight_decay >= 0")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("nesterov needs momentum > 0 and dampening 0")
        self.lr, self.momentum, self.dampening = lr, momentum, dampening
        self.weight_decay, self.nesterov = weight_decay, nesterov
        self.state_names = ("momentum_buffer",) if momentum else ()

    def update(self, p: torch.Tensor, g: torch.Tensor, state: Sequence[torch.Tensor], t: int,
               out: Sequence[torch.Tensor]) -> None:
        """Writes the new values of a slice into out ([parameter] + one tensor
        per state_names, the same size as p) from p and g (parameter and mean
        gradient), state (one tensor per state_names) and t (this step, from
        1), writing none of its inputs.  out[0] doubles as scratch space."""
        torch = _torch()
        new_p = out[0]
        d = g
        if self.weight_decay:
            d = torch.add(g, p, alpha=self.weight_decay, out=new_p)
        if not self.momentum:
            torch.add(p, d, alpha=-self.lr, out=new_p)
            return
        buf = out[1]
        if t == 1:
            buf.copy_(d)
        else:
            torch.mul(state[0], self.momentum, out=buf).add_(d, alpha=1 - self.dampening)
        if self.nesterov:
            d = torch.add(d, buf, alpha=self.momentum, out=new_p)
            torch.add(p, d, alpha=-self.lr, out=new_p)
        else:
            torch.add(p, buf, alpha=-self.lr, out=new_p)


class Adam:
    """Adam as torch.optim.Adam computes it (no amsgrad); exp_avg and
    exp_avg_sq live in the segment, the step is DataParallel's.  For
    DataParallel."""

    state_names = ("exp_avg", "exp_avg_sq")

    def __init__(self, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        if not lr > 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1) or eps < 0:
            raise ValueError("lr must be > 0, betas in [0, 1), eps >= 0")
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay

    def update(self, p: torch.Tensor, g: torch.Tensor, state: Sequence[torch.Tensor], t: int,
               out: Sequence[torch.Tensor]) -> None:
        """As SGD.update."""
        torch = _torch()
        b1, b2 = self.betas
        new_p, m, v = out
        if self.weight_decay:
            g = torch.add(g, p, alpha=self.weight_decay, out=new_p)
        torch.mul(state[0], b1, out=m).add_(g, alpha=1 - b1)
        torch.mul(state[1], b2, out=v).addcmul_(g, g, value=1 - b2)
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        denom = torch.sqrt(v, out=new_p).div_(bc2 ** 0.5).add_(self.eps)
        torch.div(m, denom, out=new_p)
        torch.add(p, new_p, alpha=-(self.lr / bc1), out=new_p)


class DataParallel:
    """One trainer's side of data-parallel training over `group` (see the
    module's docstring): shares module's parameters through scope, keeps the
    optimizer's state there, and makes each parameter's .grad a view of this
    rank's gradient variable.  timeout (seconds, None: no limit) bounds every
    reduction and barrier."""

    def __init__(self, module: torch.nn.Module, scope: Scope, group: Group,
                 optimizer: SGD | Adam, timeout: Optional[float] = 60.0) -> None:
        torch = _torch()
        self.module, self.scope, self.group = module, scope, group
        self.optimizer, self.timeout = optimizer, timeout
        rank, size = group.rank, group.size
        used = scope.find_local_var("progress")
        if used is not None and used.shape is not None and tuple(used.shape) != (size, 3):
            raise ValueError(f"scope {scope.path!r} was used by a group of {used.shape[0]}")
        self.params = share_parameters(module, scope)
        tensors = [p for p in _unique_params(module)]
        dtypes = {p.dtype for p in tensors}
        if len(dtypes) != 1 or not tensors:
            raise ValueError(f"DataParallel wants parameters of one floating dtype, not {dtypes}")
        dtype = next(iter(dtypes))
        np_dtype = str(dtype).replace("torch.", "")
        total = sum(p.numel() for p in tensors)

        progress = scope.var("progress")
        _init_var(progress, lambda: _np.zeros((size, 3), _np.int64), "optimizer")
        if tuple(progress.shape) != (size, 3):
            raise ValueError(f"scope {scope.path!r} was used by a group of {progress.shape[0]}")
        self._progress_var = progress
        self._progress = progress.numpy()

        self._grad_var = self._own_var(f"gradient.{rank}", np_dtype, total, "gradient")
        self._grad = torch.from_dlpack(self._grad_var)
        self._grad.zero_()
        off = 0
        tensors_of = []  # per tensor: (param flat, grad flat, [state flat], lo, hi)
        for (name, _), p in zip(self.params, tensors):
            n = p.numel()
            p.grad = self._grad[off:off + n].view_as(p)
            states = []
            for s in optimizer.state_names:
                var = scope.var(f"{name}.{s}")
                _init_var(var, lambda: _np.zeros(tuple(p.shape), np_dtype), "optimizer")
                states.append(torch.from_dlpack(var).view(-1))
            lo, hi = n * rank // size, n * (rank + 1) // size
            tensors_of.append((p.detach().view(-1), self._grad[off:off + n], states, lo, hi))
            off += n
        shard = sum((hi - lo) * (1 + len(st)) for _, _, st, lo, hi in tensors_of)
        self._stage_var = self._own_var(f"staged.{rank}", np_dtype, shard, "optimizer")
        self._stage = torch.from_dlpack(self._stage_var)
        # this rank's slices, as views made once: (param, grad, [state], [staged
        # param and states]) for the update, (destination, staged) for the commit
        self._shards, self._commits = [], []
        off = 0
        for p, g, states, lo, hi in tensors_of:
            if hi == lo:
                continue
            staged = []
            for dst in [p] + states:
                staged.append(self._stage[off:off + hi - lo])
                self._commits.append((dst[lo:hi], staged[-1]))
                off += hi - lo
            self._shards.append((p[lo:hi], g[lo:hi], [st[lo:hi] for st in states], staged))

        holders = int(self._progress[rank, HOLDERS])
        self._progress[rank, HOLDERS] = holders + 1
        if holders:  # this process took the rank over from a dead one
            self._take_over()

    def _own_var(self, name: str, np_dtype: str, n: int, label: str) -> Var:
        var = self.scope.var(name)
        if var.dtype != np_dtype or tuple(var.shape) != (n,):
            var.resize(np_dtype, (n,))
        var.label = label
        return var

    @property
    def steps_done(self) -> int:
        """The steps this rank has applied: the next step is steps_done + 1."""
        return int(self._progress[self.group.rank, DONE])

    def zero_grad(self) -> None:
        """Zeroes this rank's gradients (in the segment)."""
        self._grad.zero_()

    def step(self) -> bool:
        """Averages the gradients over the group, applies this rank's shard of
        the update, waits for the others.  True when the step was applied;
        False when a member died before the gradients were reduced: compute
        this step's gradients again (same data) and call step() again."""
        t = self.steps_done + 1
        try:
            self.group.allreduce(self._grad, op="mean", timeout=self.timeout)
        except _pdshm.PeerDied:
            self._wait_for_replacement()
            return False
        self._apply(t)
        try:
            self.group.barrier(timeout=self.timeout)
        except _pdshm.PeerDied:
            self._wait_for_replacement()
        return True

    def _apply(self, t: int) -> None:
        """Computes this rank's shard of step t from the mean gradient into the
        staging variable, then writes it into the parameters and the state."""
        for p, g, states, staged in self._shards:
            self.optimizer.update(p, g, states, t, staged)
        self._progress[self.group.rank, STAGED] = t
        self._commit(t)

    def _commit(self, t: int) -> None:
        """Copies the staged shard into place (repeatable) and records step t."""
        for dst, staged in self._commits:
            dst.copy_(staged)
        self._progress[self.group.rank, DONE] = t

    def _wait_for_replacement(self) -> None:
        """A survivor's side of a repair: one barrier once the replacement has
        joined, one once it has finished the dead member's shard."""
        self.group.barrier(timeout=self.timeout)
        self.group.barrier(timeout=self.timeout)

    def _take_over(self) -> None:
        """A replacement's side: after the first barrier the survivors wait;
        when they applied a step this rank had not, finish this rank's shard
        of it (from the staged values if it got that far, else from a
        survivor's mean gradient), then the second barrier."""
        rank, size = self.group.rank, self.group.size
        self.group.barrier(timeout=self.timeout)
        mine = int(self._progress[rank, DONE])
        peers = [q for q in range(size) if q != rank]
        ahead = [q for q in peers if int(self._progress[q, DONE]) == mine + 1]
        if ahead:
            t = mine + 1
            if int(self._progress[rank, STAGED]) == t:
                self._commit(t)
            else:
                torch = _torch()
                peer_grad = torch.from_dlpack(self.scope.var(f"gradient.{ahead[0]}"))
                self._grad.copy_(peer_grad)
                self._apply(t)
        self.group.barrier(timeout=self.timeout)


def _unique_params(module: torch.nn.Module) -> List[torch.nn.Parameter]:
    return list(module.parameters())  # deduplicated, in named_parameters() order
