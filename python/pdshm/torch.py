"""pdshm.torch: data-parallel training of a torch.nn.Module by the trainer
processes of one host, with the parameters and the optimizer's state held
ONCE in a pdshm segment (torch is imported when these functions are called,
so `import pdshm` never needs it).

    seg = pdshm.attach("train")
    scope = seg.open("mlp")                       # a named scope: persists
    group = seg.group("trainers", size, rank)
    model = Net()                                 # same seed in every trainer
    dp = pdshm.torch.DataParallel(model, scope, group, torch.optim.AdamW, lr=1e-3,
                                  scheduler=lambda opt: StepLR(opt, 100))
    while dp.steps_done < steps:
        x, y = batch(dp.steps_done, group.rank)   # this rank's share of the step
                                                  # (of group.size: it may change)
        dp.zero_grad()
        loss_fn(model(x), y).backward()           # (or several micro-batches)
        dp.step()                                 # False: a member died, redo

Any torch.optim optimizer (a class and its keyword arguments, or a factory
taking the parameters): each rank builds it over its slice of every
parameter, and steps it with the slice of the mean gradient.  Elementwise
optimizers (SGD, Adam, AdamW, RMSprop, Adagrad, ...) so compute exactly what
one process computes over the whole model; one that looks across a whole
parameter (a norm, as LAMB's trust ratio) sees only the slice.
pdshm.torch.Adam is torch.optim.Adam's arithmetic without its allocations.

What lives where, in `scope`:
  <parameter name>              the parameter, label "parameter" (one copy)
  <parameter name>.<key>        optimizer state of the parameter's shape
                                (exp_avg, momentum_buffer, ...), label
                                "optimizer" (one copy: each rank its slice)
  optimizer.<rank>              the rest of rank's optimizer state (step
                                counts, other shapes), its param_groups'
                                settings (lr, ...) and its scheduler's state,
                                pickled
  gradient.<rank>               each rank's gradients, flat, label "gradient"
  staged.<rank>[.state|.meta]   the working copy of rank's slices, state and
                                pickled rest: the optimizer's own tensors
  progress[.<g>]                int64 (size, 3): per rank, the last step it
                                applied, the last step it staged, and how
                                many processes have held the rank; one per
                                layout generation (see "Shrinking and
                                growing"), `generation` int64[1] names it

The module's parameters are replaced by zero-copy views of their variables
and each parameter's .grad by a view of this rank's gradient variable, so
autograd accumulates straight into the segment (gradient accumulation over
micro-batches and torch.autocast work as usual; the parameters, and so the
master copy, stay in their dtype).  step() averages the gradients over the
group (Group.allreduce, "mean"), then rank r runs its optimizer over its
slice [r*n/size, (r+1)*n/size) of every parameter, then a barrier.

The optimizer's tensors are views of the working copy (staged.<r>...): the
optimizer steps there, lazily created state is moved there after the step
that made it (the optimizer keeps using the views), the rest is pickled into
staged.<r>.meta, and only then is the step marked staged and copied into
place (the parameters, <parameter>.<key>, optimizer.<r>).  So the values in
place are always those of a whole step, and whoever holds the rank can redo
the step from them (a death before it was staged) or finish copying it (a
death after): the same guarantee for any optimizer, at any instruction, as
long as its step writes nothing but its parameters and optimizer.state (as
torch.optim's do; state kept in attributes of its own is not kept).

optimizer.state_dict() is the rank's slice's; optimizer.load_state_dict()
(between steps) takes effect in the segment with the next step, as do
changes to param_groups.  A scheduler given as DataParallel(...,
scheduler=factory) is stepped by step() and its state kept in the segment;
one built by hand over dp.optimizer works too, but a replacement starts it
afresh.

Deaths.  When a member dies, the survivors get pdshm.PeerDied from the round
in progress; step() catches it and repairs, then returns False when the step
must be redone (the death came before the gradients were reduced) or True
when it was applied.  With shrink_after=None (the default) the repair waits
(two barriers) for a replacement: a new process that joins the dead member's
rank with join_group and builds a DataParallel over the same scope, with the
same optimizer.  It takes the parameters, its slice's optimizer state and the
scheduler's from the segment, finishes the dead member's shard of the last
step if the dead member had staged it or its peers had applied theirs, and
continues from steps_done.

Shrinking and growing.  With shrink_after=s the survivors wait s seconds for
a replacement; when none came they regroup (Group.regroup: the dead dropped,
the survivors in the order of their old ranks) and re-shard, and step() goes
on in the smaller group.  A newcomer (Segment.enlist, then
DataParallel(..., newcomer=True)) is taken in when the members call
dp.regroup() at a step boundary.  A step is defined by the global batch: after
a repair each member computes its share of it at the group's new size.  A
loop that regroups every k steps does so at a boundary s only while
dp.regrouped_at (kept in the segment) < s: a replacement could not tell
otherwise whether its predecessor's peers had regrouped at s already.  A
replacement waits, as the survivors do, shrink_after for the other dead
to be replaced; when they are not, or another member dies while it takes
the rank over, it regroups and re-shards with the survivors.

The re-shard is crash-safe by the same means as a step: every stage can be
redone from what is in the segment, by whoever is left.  The layouts are
numbered: `generation` (int64[1]) names the current one, whose progress is
`progress` (generation 0) or `progress.<g>`, one row per rank of that
layout's size.  Every member of the new group, newcomers too, runs:
  1. Finish the old layout.  T = the last step any old rank applied; each
     old rank q behind it (dead, or never past its reduction) is new rank
     q mod the new size's (a function of q alone: the members look at the
     progress at different instants), which works as q would: commit staged.<q> if q staged T (repeatable), else load q's
     slice from the values in place and redo q's shard of T from the mean
     gradient left in gradient.<p> of a rank p that applied T (it stages
     before it commits, as a step does).  The old ranks are then all at T,
     committed: the parameters and <parameter>.<key> are whole at step T.
  2. Barrier.  New rank 0 writes progress.<g+1> (new size rows: every rank
     at T), copies optimizer.0 into optimizer.<r> of every new rank r (an
     elementwise optimizer's rest, settings and schedule are the same for
     all ranks), and then stores g+1 in `generation`: one 8-byte store, the
     switch.  Before it the old layout is current (and finished: a repeat
     finds nothing behind); after it the new one, whose ranks all load
     their slice of the state from the values in place.  Then it erases
     progress.<g> (g > 0; a death just before leaves it behind, unused).
  3. Barrier; each member binds to its new rank's slices (a new optimizer
     over them, loaded from the segment).
A death anywhere in 1-3 (of a member doing another's shard, of rank 0
switching, two at once) breaks a barrier for all: they regroup again and
start over at 1 in the layout `generation` names.  A death after 3 is an
ordinary death in the new layout.  The optimizer object (dp.optimizer,
dp.scheduler) is a new one after a re-shard.  Not kept across a re-shard:
optimizer state that is not elementwise (of another shape than the
parameter: it was the old slice's), and a replacement arriving just as the
survivors give up waiting for it (join_group then fails with EBUSY or it
joins a layout that no longer exists: start it with enlist instead).

Lifetime: the variables live in `scope` (name it to make it persist); a new
training run wants a new scope.

Restarts.  Under torchrun --max-restarts=N, which restarts every worker of
the job when one fails, resume() is the one line that makes a restarted
job go on from the step it reached, with no checkpoint on disk:

    dp = pdshm.torch.resume(model, torch.optim.SGD, lr=0.1)  # dp.steps_done: reached
    while dp.steps_done < steps:
        ...                                       # as above
    pdshm.torch.job_done(dp)                      # the job's segment goes

It keeps the scope in a segment named after the job (torchrun's run id,
the same for every attempt) that outlives the workers, one trainer group
of the host's ranks (LOCAL_RANK of LOCAL_WORLD_SIZE) per attempt; each
worker of a restarted attempt takes its rank over as a replacement does,
finishing or redoing the step the failure interrupted.  The views keep their bytes (pins) as views
do; after fork() a DataParallel is the parent's: build a new one (and join
the group again) in the child.
"""
from __future__ import annotations

import io
import os
import pickle
import time as _time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

import numpy as _np

from . import _pdshm

if TYPE_CHECKING:
    import torch
    from ._pdshm import Group, Scope, Segment, Var

__all__ = ["join_group", "share_parameters", "Adam", "DataParallel", "resume", "job_done"]

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


RESUME_PATIENCE_S = 30.0  # seconds resume() waits for the segment and the group


def _job_segment(name: str, size: Optional[int]) -> Segment:
    """The segment `name`, attached, or made by this process if no other
    process of the host has made it."""
    deadline = _time.monotonic() + RESUME_PATIENCE_S
    while True:
        try:
            return _pdshm.attach(name)
        except _pdshm.NotFound:
            pass
        try:
            return _pdshm.create(name, size=size)
        except _pdshm.Exists:
            pass  # made in between by another rank: attach it
        if _time.monotonic() >= deadline:
            raise TimeoutError(f"pdshm: segment {name!r} neither attaches nor can be made")
        _time.sleep(0.01)


def _named_scope(seg: Segment, name: str) -> Scope:
    """The named scope `name` of seg's root, made by this process if no other has."""
    try:
        return seg.open(name)
    except _pdshm.NotFound:
        pass
    try:
        return seg.root.new_scope(name)
    except _pdshm.Exists:  # made in between by another rank
        return seg.open(name)


def _torchrun_env() -> Tuple[int, int, str, int]:
    """(local rank, local world size, job id, attempt) from torchrun's environment."""
    env = os.environ
    try:
        rank, size = int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"])
    except (KeyError, ValueError):
        raise RuntimeError("pdshm.torch.resume: LOCAL_RANK and LOCAL_WORLD_SIZE are not set "
                           "(start the script with torchrun)") from None
    job = env.get("TORCHELASTIC_RUN_ID", "none")
    if job == "none":  # torchrun without --rdzv_id (nor --standalone): its port names the job
        job = f"{env.get('MASTER_ADDR', 'local')}-{env.get('MASTER_PORT', '0')}"
    return rank, size, job, int(env.get("TORCHELASTIC_RESTART_COUNT", "0"))


def resume(module: torch.nn.Module, optimizer: Callable[..., torch.optim.Optimizer],
           name: str = "train", size: Optional[int] = None, timeout: Optional[float] = 60.0,
           scheduler: Optional[Callable[[torch.optim.Optimizer], Any]] = None,
           **optimizer_kwargs: Any) -> "DataParallel":
    """A DataParallel over the scope `name` of this torchrun job's segment
    (/dev/shm/pdshm.torchrun-<run id>, `size` bytes when this call makes
    it; default 64 MiB), in a trainer group of the host's ranks: its
    steps_done is the step the job reached before a restart (0 at first).
    Every local rank of an attempt calls it with the same module (same
    seed), optimizer and settings.  In a restarted attempt each rank takes
    its rank over as a replacement does (see Deaths), so the step that the
    failure interrupted is finished or redone.  The segment is kept on
    purpose: job_done(dp) removes it at the end of the job (a job that
    fails for good leaves it, for the next run of the same job id or for
    pdshm.unlink)."""
    rank, local_size, job, attempt = _torchrun_env()
    seg = _job_segment(f"torchrun-{job}", size)
    group = join_group(seg, f"{name}.attempt{attempt}", local_size, rank,
                       patience=RESUME_PATIENCE_S)
    scope = _named_scope(seg, name)
    progress = scope.find_local_var("progress")
    # Whether an earlier attempt used the scope, decided by every rank
    # before any rank of this attempt can make the progress variable.
    resumed = attempt > 0 and progress is not None and progress.dtype is not None
    group.barrier(timeout=timeout)
    if resumed:
        held = progress.numpy()
        if held[rank, HOLDERS] == 0:  # this rank never started: it takes over anyway,
            held[rank, HOLDERS] = 1   # so that every rank runs the take-over's barriers
    dp = DataParallel(module, scope, group, optimizer, timeout=timeout, scheduler=scheduler,
                      **optimizer_kwargs)
    dp.segment = seg
    return dp


def job_done(dp: "DataParallel") -> None:
    """The end of a job that resume() started: once every local rank got
    here (a barrier), the segment's name is removed (its memory goes with
    the last process)."""
    dp.group.barrier(timeout=dp.timeout)
    if dp.group.rank == 0:
        try:
            _pdshm.unlink(dp.segment.name)
        except _pdshm.NotFound:
            pass


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


class _Scratch:
    """A tensor per parameter for intermediate results, kept out of the
    optimizer's state (so never in the segment): the arithmetic allocates
    nothing after the first step."""

    def __init__(self) -> None:
        self._of: Dict[int, torch.Tensor] = {}

    def __call__(self, p: torch.Tensor) -> torch.Tensor:
        s = self._of.get(id(p))
        if s is None or s.shape != p.shape:
            s = self._of[id(p)] = _torch().empty_like(p)
        return s


def _adam_class() -> Any:
    torch = _torch()

    class Adam(torch.optim.Optimizer):
        """torch.optim.Adam's arithmetic (no amsgrad) and state ("step",
        "exp_avg", "exp_avg_sq": a state_dict loads into either), with no
        allocation per step: torch 1.13's Adam allocates two tensors of the
        parameter's size per parameter and step; an update through
        DataParallel with this one took 1/1.2 to 1/1.9 of the time
        (bench/python/optim_update.py).  Adam(params, lr=1e-3,
        betas=(0.9, 0.999), eps=1e-8, weight_decay=0)."""

        def __init__(self, params: Any, lr: float = 1e-3,
                     betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                     weight_decay: float = 0.0) -> None:
            if not lr > 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1) or eps < 0:
                raise ValueError("lr must be > 0, betas in [0, 1), eps >= 0")
            super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                          weight_decay=weight_decay))
            self._scratch = _Scratch()

        @torch.no_grad()
        def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
            loss = None
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()
            for group in self.param_groups:
                (b1, b2), wd = group["betas"], group["weight_decay"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if "exp_avg" not in state:
                        state["step"] = 0
                        state["exp_avg"] = torch.zeros_like(p)
                        state["exp_avg_sq"] = torch.zeros_like(p)
                    t = state["step"] = int(state["step"]) + 1
                    m, v, scratch = state["exp_avg"], state["exp_avg_sq"], self._scratch(p)
                    g = p.grad
                    if wd:
                        g = torch.add(g, p, alpha=wd, out=scratch)
                    m.mul_(b1).add_(g, alpha=1 - b1)
                    v.mul_(b2).addcmul_(g, g, value=1 - b2)
                    denom = torch.sqrt(v, out=scratch).div_((1 - b2 ** t) ** 0.5)
                    p.addcdiv_(m, denom.add_(group["eps"]), value=-group["lr"] / (1 - b1 ** t))
            return loss

    return Adam


def __getattr__(name: str) -> Any:
    """Adam: made when first asked for (it derives from torch.optim.Optimizer,
    and importing this module must not import torch)."""
    if name == "Adam":
        cls = _adam_class()
        cls.__module__, cls.__qualname__ = __name__, name
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class DataParallel:
    """One trainer's side of data-parallel training over `group` (see the
    module's docstring): shares module's parameters through scope, builds the
    optimizer over this rank's slice of them and keeps its state there, and
    makes each parameter's .grad a view of this rank's gradient variable.

    optimizer: a torch.optim.Optimizer class, or any factory, called as
    optimizer(params, **optimizer_kwargs); it must return an Optimizer over
    exactly `params`: one 1-D tensor per module parameter (named_parameters()
    order), this rank's slice of it (empty when the parameter has fewer
    elements than the group has ranks).  It is called twice, first over
    stand-ins: a bad optimizer or setting raises (TypeError, ValueError)
    before the module or the scope is changed.  scheduler: None, or a factory called
    as scheduler(optimizer) returning an LR scheduler: step() steps it after
    every applied step and keeps its state in the segment.  timeout (seconds,
    None: no limit) bounds every reduction and barrier.  shrink_after
    (seconds, None: wait for a replacement as long as timeout allows): how
    long the survivors of a death wait for a replacement before they regroup
    without the dead and re-shard (ValueError when < 0).  newcomer: group
    came from Segment.enlist; the constructor takes part in the members'
    re-shard (they call regroup()).  Attributes: .optimizer, .scheduler (new
    objects after a re-shard), .steps_done."""

    def __init__(self, module: torch.nn.Module, scope: Scope, group: Group,
                 optimizer: Callable[..., torch.optim.Optimizer],
                 timeout: Optional[float] = 60.0,
                 scheduler: Optional[Callable[[torch.optim.Optimizer], Any]] = None,
                 shrink_after: Optional[float] = None, newcomer: bool = False,
                 **optimizer_kwargs: Any) -> None:
        torch = _torch()
        if not callable(optimizer):
            raise TypeError("optimizer must be a torch.optim.Optimizer class or a factory "
                            f"taking the parameters, not a {type(optimizer).__name__}")
        if shrink_after is not None and not shrink_after >= 0:
            raise ValueError("shrink_after must be None or a number of seconds >= 0")
        self.module, self.scope, self.group, self.timeout = module, scope, group, timeout
        self.segment: Optional[Segment] = None  # the job's segment, under resume()
        self.shrink_after = shrink_after
        rank, size = group.rank, group.size
        generation = scope.find_local_var("generation")
        gen = 0 if generation is None or generation.dtype is None else int(generation.numpy()[0])
        used = scope.find_local_var(_progress_name(gen))
        if (not newcomer and used is not None and used.shape is not None
                and tuple(used.shape) != (size, 3)):
            raise ValueError(f"scope {scope.path!r} was used by a group of {used.shape[0]}")
        dtypes = {p.dtype for p in _unique_params(module)}
        if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
            raise ValueError(f"DataParallel wants parameters of one floating dtype, not {dtypes}")
        dtype = next(iter(dtypes))
        spans = _spans(module, rank, size)
        # a trial over stand-ins, so that a bad optimizer (or its settings)
        # raises before the module and the scope are touched
        stand_ins = [torch.empty(hi - lo, dtype=dtype) for lo, hi in spans]
        self._check_optimizer(optimizer(list(stand_ins), **optimizer_kwargs), stand_ins,
                              scheduler)
        self._factories = (optimizer, optimizer_kwargs, scheduler)
        self.params = share_parameters(module, scope)
        self._np_dtype = str(_unique_params(module)[0].dtype).replace("torch.", "")
        self._generation_var = scope.var("generation")
        _init_var(self._generation_var, lambda: _np.zeros(1, _np.int64), "optimizer")
        self._generation = self._generation_var.numpy()
        self._regrouped_var = scope.var("regrouped")
        _init_var(self._regrouped_var, lambda: _np.full(1, -1, _np.int64), "optimizer")
        self._regrouped = self._regrouped_var.numpy()
        self._boundary = False  # in regroup(): the switch records the step in `regrouped`
        _init_var(scope.var("progress"), lambda: _np.zeros((size, 3), _np.int64), "optimizer")
        if newcomer:  # enlisted: the members are regrouping with it
            self._reshard()
            return
        self._bind(rank, size)
        self._grad.zero_()
        holders = int(self._progress[rank, HOLDERS])
        self._progress[rank, HOLDERS] = holders + 1
        # a step staged and not committed stays in the working copy for _take_over
        pending = int(self._progress[rank, STAGED]) > self.steps_done
        if pending:
            self._set_layout(self._read_meta(self._meta_var)["layout"])
        else:
            self._load()
        if holders:  # this process took the rank over from a dead one
            self._take_over(pending)

    def _bind(self, rank: int, size: int) -> None:
        """Makes this object work rank's shard of the layout of `size` ranks
        in the current generation: the progress, rank's gradient variable
        (the module's .grad views it), its slices, its working copy, and a
        new optimizer (and scheduler) over the working copy.  Loads nothing."""
        torch = _torch()
        make_opt, kwargs, make_sched = self._factories
        self._rank = rank
        self._progress_var = self.scope.var(_progress_name(int(self._generation[0])))
        self._progress = self._progress_var.numpy()
        tensors = _unique_params(self.module)
        self._grad_var = self._own_var(f"gradient.{rank}", sum(p.numel() for p in tensors),
                                       "gradient")
        self._grad = torch.from_dlpack(self._grad_var)
        # per parameter: (name, shape, lo, hi), this rank's slice [lo, hi) of it,
        # and views of that slice of its value and of the mean gradient
        self._slices: List[Tuple[str, Tuple[int, ...], int, int]] = []
        homes, self._grads = [], []
        off = 0
        for (name, _), p, (lo, hi) in zip(self.params, tensors, _spans(self.module, rank, size)):
            n = p.numel()
            p.grad = self._grad[off:off + n].view_as(p)
            self._slices.append((name, tuple(p.shape), lo, hi))
            homes.append(p.detach().view(-1)[lo:hi])
            self._grads.append(self._grad[off + lo:off + hi])
            off += n
        # the working copy: the optimizer's parameters, its state, the rest pickled
        self._state_views: List[torch.Tensor] = []  # dropped before a resize
        self._work = []
        stage_var = self._own_var(f"staged.{rank}", sum(hi - lo for *_, lo, hi in self._slices),
                                  "optimizer")
        stage = torch.from_dlpack(stage_var)
        off = 0
        for *_, lo, hi in self._slices:
            self._work.append(stage[off:off + hi - lo])
            off += hi - lo
        self._param_commits = list(zip(homes, self._work))
        self._state_var = self._labelled(f"staged.{rank}.state")
        self._meta_var = self._labelled(f"staged.{rank}.meta")
        self._home_meta = self._labelled(f"optimizer.{rank}")
        self._layout: List[Tuple[int, str]] = []  # the state beside the slices: (parameter, key)
        self._counts: List[int] = []  # the number of state entries of each parameter
        self._commits = list(self._param_commits)  # (in place, working copy)
        self.optimizer = make_opt(list(self._work), **kwargs)
        self._check_optimizer(self.optimizer, self._work, None)
        self.scheduler = make_sched(self.optimizer) if make_sched is not None else None

    @staticmethod
    def _check_optimizer(opt: Any, given: List[torch.Tensor],
                         scheduler: Optional[Callable[[Any], Any]]) -> None:
        """TypeError unless opt is a torch.optim.Optimizer, ValueError unless
        over exactly the tensors `given` to its factory; then builds the
        scheduler over it, if any, for its errors."""
        torch = _torch()
        if not isinstance(opt, torch.optim.Optimizer):
            raise TypeError(f"the optimizer factory returned a {type(opt).__name__}, "
                            "not a torch.optim.Optimizer")
        got = [p for g in opt.param_groups for p in g["params"]]
        if sorted(map(id, got)) != sorted(map(id, given)):
            raise ValueError("the optimizer must be built over exactly the parameters "
                             "DataParallel gives its factory, each once")
        if scheduler is not None:
            scheduler(opt)

    def _own_var(self, name: str, n: int, label: str) -> Var:
        var = self.scope.var(name)
        if var.dtype != self._np_dtype or tuple(var.shape) != (n,):
            var.resize(self._np_dtype, (n,))
        var.label = label
        return var

    def _labelled(self, name: str) -> Var:
        var = self.scope.var(name)
        var.label = "optimizer"
        return var

    @property
    def steps_done(self) -> int:
        """The steps this rank has applied: the next step is steps_done + 1."""
        return int(self._progress[self._rank, DONE])

    def zero_grad(self) -> None:
        """Zeroes this rank's gradients (in the segment)."""
        self._grad.zero_()

    def step(self) -> bool:
        """Averages the gradients over the group, applies this rank's shard of
        the update, waits for the others.  True when the step was applied;
        False when a member died before the gradients were reduced: compute
        this step's gradients again (same data, this rank's share of it at
        the group's size now: a repair may have shrunk the group) and call
        step() again."""
        t = self.steps_done + 1
        try:
            self.group.allreduce(self._grad, op="mean", timeout=self.timeout)
        except _pdshm.PeerDied:
            self._repair()
            return self.steps_done >= t
        self._apply(t)
        try:
            self.group.barrier(timeout=self.timeout)
        except _pdshm.PeerDied:
            self._repair()
        return True

    def regroup(self) -> Tuple[int, int]:
        """At a step boundary, every member together: Group.regroup() (dead
        members dropped, newcomers waiting in Segment.enlist taken in; they
        build their DataParallel with newcomer=True), then the shards are
        dealt again over the new group.  Returns the new (rank, size).  The
        step count it was called at becomes regrouped_at.  A replacement
        that joined the rank of a member dead at this boundary takes part
        once it has waited shrink_after for the peers' repair."""
        self._boundary = True
        try:
            # a replacement that took a rank over just now waits in its first
            # barrier until it gives up waiting (shrink_after) and regroups too
            self._regroup()
            self._reshard()
        finally:
            self._boundary = False
        return self.group.rank, self.group.size

    @property
    def regrouped_at(self) -> int:
        """The step count at which the members last called regroup() (-1:
        never), kept in the segment.  A loop that regroups every k steps
        calls regroup() at a boundary s only while regrouped_at < s: a
        replacement cannot know otherwise whether the peers of the member
        it replaces regrouped at s before that member died (a death in step
        s + 1) or not yet (a death at the end of step s), and every member
        of a group must call regroup() at the same boundary."""
        return int(self._regrouped[0])

    # ---- a step: run in the working copy, staged, then committed -----------
    def _apply(self, t: int) -> None:
        """Steps the optimizer (and the scheduler) in the working copy with the
        mean gradient, moves new state there, pickles the rest beside it, marks
        step t staged and commits it.  Nothing in place is written before."""
        for p, g in zip(self._work, self._grads):
            p.grad = g
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        self._adopt_state()
        self._meta_var.assign(_np.frombuffer(_dumps(self._meta()), _np.uint8))
        self._progress[self._rank, STAGED] = t
        self._commit(t)

    def _commit(self, t: int) -> None:
        """Copies the staged step into place (repeatable) and records step t."""
        for dst, staged in self._commits:
            dst.copy_(staged)
        self._home_meta.assign(self._meta_var.numpy())
        self._progress[self._rank, DONE] = t

    def _beside(self, i: int, key: Any, value: Any) -> bool:
        """Whether state[key] of parameter i is kept beside the slice (a tensor
        of the slice's shape and dtype, under a name); the rest is pickled."""
        torch = _torch()
        p = self._work[i]
        return (isinstance(key, str) and key.isidentifier() and torch.is_tensor(value)
                and value.shape == p.shape and value.dtype == p.dtype)

    def _adopt_state(self) -> None:
        """Moves the optimizer's state tensors of the slices' shape into the
        working copy, leaving views of it in optimizer.state (the optimizer
        then updates the segment in place): new state (a first step), new
        tensors (a load_state_dict, an optimizer that replaces its state)."""
        state = self.optimizer.state
        counts = [len(state[p]) if p in state else -1 for p in self._work]
        if counts == self._counts and all(state[self._work[i]].get(k) is view for (i, k), view
                                          in zip(self._layout, self._state_views)):
            return  # the state is where it was
        layout = [(i, k) for i, p in enumerate(self._work) if p in state
                  for k, v in state[p].items() if self._beside(i, k, v)]
        self._counts = counts
        if layout != self._layout:
            values = [state[self._work[i]][k].detach().clone() for i, k in layout]
            self._set_layout(layout)
            for view, v in zip(self._state_views, values):
                view.copy_(v)
        for (i, k), view in zip(self._layout, self._state_views):
            st = state[self._work[i]]
            if st[k] is not view:
                view.copy_(st[k])
                st[k] = view

    def _set_layout(self, layout: List[Tuple[int, str]]) -> None:
        """Sizes the working copy of the state for `layout`, with views of it
        and their places: <parameter>.<key> (made as zeros if new)."""
        torch = _torch()
        for i, k in layout:
            name, shape, _, _ = self._slices[i]
            home = self.scope.var(f"{name}.{k}")
            _init_var(home, lambda: _np.zeros(shape, self._np_dtype), "optimizer")
            if home.dtype != self._np_dtype or tuple(home.shape) != shape:
                raise ValueError(f"variable {name}.{k} holds {home.dtype}{list(home.shape)}, "
                                 f"not {self._np_dtype}{list(shape)}")
        sizes = [self._work[i].numel() for i, _ in layout]
        self._state_views = []  # dropped before a resize: they pin the old bytes
        if self._state_var.dtype != self._np_dtype or self._state_var.shape != (sum(sizes),):
            self._state_var.resize(self._np_dtype, (sum(sizes),))
        flat = torch.from_dlpack(self._state_var)
        self._commits = list(self._param_commits)
        off = 0
        for (i, k), n in zip(layout, sizes):
            name, _, lo, hi = self._slices[i]
            self._state_views.append(flat[off:off + n])
            home = torch.from_dlpack(self.scope.var(f"{name}.{k}")).view(-1)[lo:hi]
            self._commits.append((home, self._state_views[-1]))
            off += n
        self._layout = layout

    def _meta(self) -> Dict[str, Any]:
        """What the working copy's tensors do not hold: the layout, the other
        state, the param_groups' settings, the scheduler's state."""
        beside = set(self._layout)
        state = self.optimizer.state
        other = {i: {k: v for k, v in state[p].items() if (i, k) not in beside}
                 for i, p in enumerate(self._work) if p in state}
        return {"layout": self._layout, "state": other,
                "groups": [{k: v for k, v in g.items() if k != "params"}
                           for g in self.optimizer.param_groups],
                "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None}

    @staticmethod
    def _read_meta(var: Var) -> Dict[str, Any]:
        meta = pickle.loads(var.numpy().tobytes())
        meta["layout"] = [tuple(e) for e in meta["layout"]]
        return meta

    def _load(self) -> None:
        """Makes the working copy and the optimizer (and scheduler) those of
        the last committed step: from the values in place and optimizer.<r>."""
        for dst, staged in self._param_commits:
            staged.copy_(dst)
        if self.steps_done == 0 or self._home_meta.dtype is None:
            return  # the optimizer's own initial state (Adagrad makes it at once)
        meta = self._read_meta(self._home_meta)
        self.optimizer.state.clear()
        self._set_layout(meta["layout"])
        for (i, k), (dst, staged) in zip(self._layout, self._commits[len(self._param_commits):]):
            staged.copy_(dst)
            self.optimizer.state[self._work[i]][k] = staged
        for i, kv in meta["state"].items():
            self.optimizer.state[self._work[i]].update(kv)
        for g, saved in zip(self.optimizer.param_groups, meta["groups"]):
            g.update(saved)
        if self.scheduler is not None and meta["scheduler"] is not None:
            self.scheduler.load_state_dict(meta["scheduler"])

    # ---- deaths --------------------------------------------------------------
    def _repair(self) -> None:
        """A survivor's side of a repair after a death: with shrink_after
        None, wait for a replacement; else wait for one for shrink_after
        seconds, and when none came (or another member died meanwhile and
        none came for it either) regroup without the dead and re-shard."""
        if self.shrink_after is None:
            self._wait_for_replacement()
            return
        while True:
            try:
                self.group.barrier(timeout=self.shrink_after)
                break
            except _pdshm.PeerDied:
                continue  # another death: wait for its replacement too
            except TimeoutError:
                self._regroup()
                self._reshard()
                return
        try:
            self.group.barrier(timeout=self.timeout)  # the replacement has finished its shard
        except _pdshm.PeerDied:  # a death while it did (its own, maybe): re-shard (the
            self._regroup()      # replacement does so too), which finishes what is behind
            self._reshard()

    def _regroup(self) -> None:
        """Group.regroup(), again while a member still waits in the barrier
        this one gave up (the regroup is then refused: InvalidArgument, and
        nothing changed) until that member gives up too, within timeout."""
        deadline = None if self.timeout is None else _time.monotonic() + self.timeout
        while True:
            try:
                self.group.regroup(timeout=self.timeout)
                return
            except _pdshm.InvalidArgument:
                if deadline is not None and _time.monotonic() >= deadline:
                    raise
            _time.sleep(0.01)

    def _wait_for_replacement(self) -> None:
        """A survivor's side of a repair: one barrier once the replacement has
        joined, one once it has finished the dead member's shard."""
        self.group.barrier(timeout=self.timeout)
        self.group.barrier(timeout=self.timeout)

    def _reshard(self) -> None:
        """Every member of a group that regroup() just changed (newcomers
        too): finish the last step in the old layout, switch to a layout of
        the new size, bind to this member's new shard.  A death on the way
        regroups again and starts over: every stage is repeatable (see the
        module's docstring, "Shrinking and growing")."""
        while True:
            try:
                self._finish_old_layout()
                self.group.barrier(timeout=self.timeout)
                if self.group.rank == 0:
                    self._switch_layout()
                self.group.barrier(timeout=self.timeout)
                break
            except _pdshm.PeerDied:
                self._regroup()
        self._bind(self.group.rank, self.group.size)
        self._load()

    def _finish_old_layout(self) -> None:
        """Brings every old rank's shard to the last step any rank applied, T:
        old rank q behind is new rank q % size's to finish (a function of q
        alone: the members look at different instants, and one that looks
        after another finished its own still finds all of its own behind),
        committed if it was staged, else run from the mean gradient of a rank
        that applied T (as _take_over does)."""
        progress = self.scope.var(_progress_name(int(self._generation[0]))).numpy()
        done = [int(d) for d in progress[:, DONE]]
        last = max(done)
        behind = [q for q, d in enumerate(done) if d < last]
        source = done.index(last)
        for q in behind:
            if q % self.group.size != self.group.rank:
                continue
            self._bind(q, len(done))
            if int(self._progress[q, STAGED]) == last:
                self._set_layout(self._read_meta(self._meta_var)["layout"])
                self._commit(last)
            else:
                self._load()
                self._grad.copy_(_torch().from_dlpack(self.scope.var(f"gradient.{source}")))
                self._apply(last)

    def _switch_layout(self) -> None:
        """New rank 0's part: the progress of the next generation (every rank
        at T, committed), every new rank's optimizer.<r> a copy of
        optimizer.0 (the settings, the schedule and the rest are the same for
        every rank of an elementwise optimizer), and then, in one 8-byte
        store, the generation number: the switch."""
        gen = int(self._generation[0])
        old = self.scope.var(_progress_name(gen)).numpy()
        last = int(old[:, DONE].max())
        size = self.group.size
        new = _np.zeros((size, 3), _np.int64)
        new[:, DONE] = new[:, STAGED] = last
        new[:, HOLDERS] = 1
        nxt = self.scope.var(_progress_name(gen + 1))
        nxt.assign(new)
        nxt.label = "optimizer"
        first = self.scope.var("optimizer.0")
        if first.dtype is not None:
            meta = first.numpy()
            for r in range(1, size):
                self._labelled(f"optimizer.{r}").assign(meta)
        del old
        if self._boundary:  # recorded before the switch, so a redone switch records it too
            self._regrouped[0] = last
        self._generation[0] = gen + 1
        if gen:  # no one reads the old generation's progress any more
            self.scope.erase(_progress_name(gen))

    def _take_over(self, pending: bool) -> None:
        """A replacement's side: after the first barrier the survivors wait;
        finish this rank's step if it was staged (it was computed from a
        completed reduction, and the values in place may be half written:
        so even when no peer applied it, as when the group is this rank
        alone), else when the peers applied a step this rank had not, run
        this rank's shard of it from a survivor's mean gradient; then the
        second barrier."""
        try:
            self._finish_taken_rank(pending)
        except (_pdshm.PeerDied, TimeoutError):
            if self.shrink_after is None:
                raise
            # another death during the take-over, or one that no replacement
            # came for (the first barrier waits shrink_after for it, as the
            # survivors do): the survivors re-shard (see _repair), and so
            # does this member, which finishes whatever this rank has not
            self._regroup()
            self._reshard()

    def _finish_taken_rank(self, pending: bool) -> None:
        """_take_over's two barriers and, between them, this rank's shard."""
        rank, size = self._rank, self.group.size
        self.group.barrier(timeout=self.timeout if self.shrink_after is None
                           else self.shrink_after)
        mine = self.steps_done
        ahead = [q for q in range(size) if q != rank and int(self._progress[q, DONE]) == mine + 1]
        if pending:
            self._commit(mine + 1)
            self._load()
        elif ahead:
            peer_grad = _torch().from_dlpack(self.scope.var(f"gradient.{ahead[0]}"))
            self._grad.copy_(peer_grad)
            self._apply(mine + 1)
        self.group.barrier(timeout=self.timeout)


def _tensor(array: _np.ndarray) -> torch.Tensor:
    return _torch().from_numpy(array)


class _Pickler(pickle.Pickler):
    """Pickles a tensor numpy can hold as that array (torch's own pickling of
    a tensor costs some 30 us: a step count is pickled at every step)."""

    def reducer_override(self, obj: Any) -> Any:
        torch = _torch()
        if (type(obj) is torch.Tensor and not obj.requires_grad
                and obj.dtype not in (torch.bfloat16,) and not obj.is_complex()):
            return _tensor, (obj.detach().numpy().copy(),)
        return NotImplemented


def _dumps(obj: Any) -> bytes:
    out = io.BytesIO()
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return out.getvalue()


def _progress_name(generation: int) -> str:
    """The progress variable of a layout generation (0: the first)."""
    return "progress" if generation == 0 else f"progress.{generation}"


def _spans(module: torch.nn.Module, rank: int, size: int) -> List[Tuple[int, int]]:
    """rank's slice [lo, hi) of each parameter (flattened) in a group of size."""
    return [(n * rank // size, n * (rank + 1) // size)
            for n in (p.numel() for p in _unique_params(module))]


def _unique_params(module: torch.nn.Module) -> List[torch.nn.Parameter]:
    return list(module.parameters())  # deduplicated, in named_parameters() order
