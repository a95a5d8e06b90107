"""pdshm.distributed: the torch.distributed backend "pdshm" (imports torch).

    import pdshm.distributed                      # registers "pdshm"
    torch.distributed.init_process_group("pdshm") # env://, tcp://, or store=
    model = torch.nn.parallel.DistributedDataParallel(model)

The ranks of one host share one pdshm segment, agreed on through the
process group's store: the host's first rank creates it under a random
name, the others attach once the store says it exists, and every rank
unlinks the name once all have attached (or init failed), so /dev/shm holds
nothing of the job past its initialisation, whoever is killed later (the
memory goes back with the last process).  Each process group (new_group
subgroups too) is one pdshm trainer group in that segment.

A collective's arguments are checked in the call that issues it (a bad one
raises there); then it is queued, and the call returns a Work.  Each
process group runs its queue in the order of issue, in a worker thread of
its own, so that async_op=True (and DDP, which reduces each bucket of
gradients as soon as the backward pass filled it) goes on computing
meanwhile; a synchronous caller, whose wait() comes at once, runs the queue
up to its collective itself (when the queue is idle, it runs its collective
right away and gets a Work that is always completed).  Work.wait() raises
the collective's error, and Work.get_future() (whose value is the tensor
list) fails with a RuntimeError naming it: a member's death is a
PeerDiedError (a RuntimeError that is also a pdshm.PeerDied) in every
survivor, and so is every later collective of that process group (through
DDP's backward, a plain RuntimeError whose message says PeerDiedError: C++
is in between); a member that stops answering makes them raise
CollectiveTimeout (a RuntimeError that is also a TimeoutError) after the
process group's timeout.  A member that exits normally (or closes the
group) while the others wait is a PeerDiedError for them too, within
LEFT_CHECK_S: their waits are barriers taken in slices (one starts every
reduction), and between slices they look for members whose exchange
variable is gone.

A reduction of at most SMALL_BYTES (any dtype and op) is one call of C
(pdshm's SlotReducer, with the GIL released while it waits) and one
barrier: each rank copies its tensor into one of two slots of its own
(_Small) and folds every rank's, in rank order, straight into its tensor.
A broadcast, all_gather or gather of at most SMALL_BYTES goes the same
way: the senders copy into their slots, one barrier, and each rank copies
the slots it receives straight into its tensors.
A larger private tensor of float16, bfloat16, float32, float64, int32 or
int64 (SUM, AVG, MIN, MAX) is reduced by shares through the exchange bytes, in one call of C
(_reduce_by_shares, the group's allreduce_private: each rank copies in only
what the others reduce, and copies their reduced shares straight into its
tensor).  A larger tensor that is a view of a
variable of the segment (segment_of(group), torch.from_dlpack(var)) is
reduced in place by the pdshm group with no copy; the remaining reductions
the group does (non-contiguous tensors) go through a staging variable.  The others
(PRODUCT, the bitwise ops, int8, int16, uint8, bool), reduce_scatter and
every larger op that only moves bytes go through per-rank exchange variables: each
rank writes its bytes into its own, a barrier, each reads what it needs
from the others' (reducing in rank order, so every rank computes the same
bits), a barrier; a broadcast from PIPELINE_BYTES goes in chunks, the
root's copies in overlapping the others' copies out
(_broadcast_pipelined).  Staging and exchange variables are kept and reused
from call to call.

Environment: PDSHM_TORCH_SEGMENT_SIZE (bytes, or with a K, M or G suffix;
default 512M) sizes the segment the job's staging lives in.

A group whose ranks span hosts (ranks whose host names or boot ids differ,
or nodes simulated by LOCAL_WORLD_SIZE < WORLD_SIZE) has one segment per
host and reduces hierarchically (ProcessGroupPdshmHosts).

Not supported: send/recv, allgather_coalesced, several tensors per rank in
one collective (the multi-device form), PREMUL_SUM.  Each raises an error
naming the op.
"""
from __future__ import annotations

import atexit
import collections
import os
import secrets
import socket
import sys
import threading
import time
import weakref
from datetime import timedelta
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, ReduceOp

from . import _pdshm

__all__ = ["BACKEND", "ProcessGroupPdshm", "ProcessGroupPdshmHosts", "PeerDiedError",
           "CollectiveTimeout", "segment_of"]

BACKEND = "pdshm"
SIZE_ENV = "PDSHM_TORCH_SEGMENT_SIZE"
STAGING_BASE = 512 << 20  # staging is kept while, with exchange bytes, a host's ranks hold half this
STAGING_KEEP = 8  # staging variables kept per process group (least recently used go)
LEFT_CHECK_S = 0.05  # seconds between two looks for a member that left, while waiting
KEEP_WORKS = 16  # completed Works a process group keeps alive (see _Work)
CLOSE_WAIT_S = 5.0  # seconds close() waits for a running collective to finish

_RED = ReduceOp.RedOpType
# The reductions the pdshm group does in the segment, and the dtypes it does them for.
_GROUP_OPS = {_RED.SUM: "sum", _RED.AVG: "mean", _RED.MIN: "min", _RED.MAX: "max"}
_GROUP_DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32,
                 torch.int64}
_HALF = {torch.float16, torch.bfloat16}
SHARES_MIN_BYTES = 64 << 10  # a private tensor of _GROUP_DTYPES goes by shares from this
SMALL_BYTES = 64 << 10  # up to this, a reduction's bytes go through _Small
PIPELINE_BYTES = 512 << 10  # from this, a broadcast goes in chunks (_broadcast_pipelined)
PIPELINE_CHUNKS = 8  # the most chunks of a broadcast


class PeerDiedError(RuntimeError, _pdshm.PeerDied):
    """A member of the process group died: the collective was abandoned."""


class CollectiveTimeout(RuntimeError, TimeoutError):
    """A member did not reach the collective within the process group's timeout."""


def _segment_size() -> Optional[int]:
    """The fixed size SIZE_ENV asks for, or None: a segment that grows."""
    text = os.environ.get(SIZE_ENV, "").strip()
    if not text:
        return None
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
    digits = text[:-1] if scale != 1 else text
    try:
        size = int(digits) * scale
    except ValueError:
        size = 0
    if size <= 0:
        raise ValueError(f"{SIZE_ENV}={text!r}: want a byte count, e.g. 512M or 2G")
    return size


def _host() -> str:
    """This host's identity: its name and its boot's id (two containers may
    share a name); and the node's index when the environment says that the
    world has more ranks than this node (LOCAL_WORLD_SIZE < WORLD_SIZE, as
    torchrun sets them), so that nodes simulated on one machine are hosts."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    host = f"{socket.gethostname()}/{boot}"
    env = os.environ
    try:
        local, world = int(env["LOCAL_WORLD_SIZE"]), int(env["WORLD_SIZE"])
        node = int(env.get("GROUP_RANK", int(env["RANK"]) // local)) if local < world else None
    except (KeyError, ValueError, ZeroDivisionError):
        node = None
    return host if node is None else f"{host}/node{node}"


def _layout(store, rank: int, size: int) -> Tuple[List[List[int]], int]:
    """The ranks of each host of a group (hosts in the order of their first
    rank) and this rank's host's index, agreed on through the group's store."""
    store.set(f"pdshm/host/{rank}", _host())
    keys = [store.get(f"pdshm/host/{r}").decode() for r in range(size)]
    index: Dict[str, int] = {}
    hosts: List[List[int]] = []
    for r, key in enumerate(keys):
        if key not in index:
            index[key] = len(hosts)
            hosts.append([])
        hosts[index[key]].append(r)
    return hosts, index[keys[rank]]


class _Job:
    """The segment that the process groups of this process share with the
    ranks of its host, agreed on through a group's store."""

    def __init__(self, store, local: Sequence[int], rank: int, host: int,
                 timeout: timedelta) -> None:
        """local: the group ranks on this host; host: this host's index."""
        # The host's first rank publishes the name before it creates the
        # segment, and every rank unlinks it once all of the host have
        # attached, or when init fails: the name outlives init only if every
        # rank of the host that read it dies during init.
        key = f"pdshm/h{host}"
        if rank == local[0]:
            name = f"torch-{secrets.token_hex(8)}"
            store.set(f"{key}/segment", name)
        else:
            name = store.get(f"{key}/segment").decode()
        try:
            if rank == local[0]:
                size = _segment_size()
                self.seg = _pdshm.create(name, size=size, max_size=size)
                store.set(f"{key}/created", "1")
            else:
                store.wait([f"{key}/created"], timeout)
                self.seg = _pdshm.attach(name)
            # The last to attach says so; then nobody needs the name any more.
            if store.add(f"{key}/attached", 1) == len(local):
                store.set(f"{key}/all-attached", "1")
            store.wait([f"{key}/all-attached"], timeout)
        finally:
            try:
                _pdshm.unlink(name)
            except _pdshm.NotFound:
                pass
        self.users = 0  # process groups on this segment

    def drop(self) -> None:
        self.users -= 1
        if self.users == 0:
            self.seg.detach()


_world_job: Optional[_Job] = None
# The process groups not closed yet: closed at exit (before pdshm detaches),
# which tells the other members that this one left.
_OPEN: "weakref.WeakSet[ProcessGroupPdshm]" = weakref.WeakSet()


def _close_open_groups() -> None:
    for pg in list(_OPEN):
        try:
            pg.close()
        except Exception:  # exiting: what is left goes with the process
            pass


atexit.register(_close_open_groups)


class _Staging:
    """Per-dtype, per-size variables of this rank's own, with a torch view
    each: the copies in and out of the group's reductions."""

    def __init__(self, scope, budget: int, beside: Callable[[], int]) -> None:
        """budget: the bytes kept at most (but always the last one used),
        counting the bytes beside() says this rank holds otherwise in the
        segment (its exchange bytes, which only grow), so that the ranks
        sharing the segment leave each other room."""
        self.scope = scope
        self.budget = budget
        self.beside = beside
        self.kept: "collections.OrderedDict[Tuple[torch.dtype, int], tuple]" = \
            collections.OrderedDict()

    def get(self, dtype: torch.dtype, numel: int):
        key = (dtype, numel)
        hit = self.kept.get(key)
        if hit is not None:
            self.kept.move_to_end(key)
            return hit
        var = self.scope.new_var()
        try:
            self._resize(var, dtype, numel)
        except BaseException:
            self.scope.erase(var.name)
            raise
        hit = (var, torch.from_dlpack(var))
        self.kept[key] = hit
        while len(self.kept) > STAGING_KEEP or (
                len(self.kept) > 1 and
                sum(v.nbytes for v, _ in self.kept.values()) + self.beside() > self.budget):
            self._drop_oldest()
        return hit

    def _resize(self, var, dtype: torch.dtype, numel: int) -> None:
        """Gives var numel elements of dtype, letting go of the kept staging
        variables (oldest first) while the segment has no room."""
        while True:
            try:
                var.resize(str(dtype).replace("torch.", ""), (numel,))
                return
            except _pdshm.NoMemory as e:
                if not self.kept:
                    raise MemoryError(f"pdshm: no room for {numel} x {dtype} of staging in "
                                      f"the segment: {e}") from None
                self._drop_oldest()

    def _drop_oldest(self) -> None:
        old_var, _ = self.kept.popitem(last=False)[1]
        self.scope.erase(old_var.name)  # a view still alive keeps the bytes (a pin)


class _Exchange:
    """Each rank's exchange variable (bytes, only ever grown by its owner)
    and views of everyone's, refreshed when an owner grew its variable."""

    def __init__(self, seg, prefix: str, rank: int, size: int) -> None:
        self.root = seg.root
        self.names = [f"{prefix}.x{r}" for r in range(size)]
        self.rank = rank
        self.own = self.root.var(self.names[rank])
        self.own.resize("uint8", (1 << 12,))
        self.views: Dict[int, torch.Tensor] = {}

    def mine(self, nbytes: int) -> torch.Tensor:
        """This rank's exchange bytes, at least nbytes (call before the first barrier)."""
        if self.own.nbytes < nbytes:
            self.views.pop(self.rank, None)
            try:  # doubled, so that slowly growing sizes do not resize every call
                self.own.resize("uint8", (max(nbytes, 2 * self.own.nbytes),))
            except _pdshm.NoMemory:
                try:
                    self.own.resize("uint8", (nbytes,))
                except _pdshm.NoMemory as e:
                    raise MemoryError(f"pdshm: no room for {nbytes} bytes of exchange in the "
                                      f"segment: {e}") from None
        return self.of(self.rank)

    def of(self, r: int) -> torch.Tensor:
        """Rank r's exchange bytes as r last wrote them (after a barrier)."""
        view = self.views.get(r)
        var = self.own if r == self.rank else None
        if var is None:
            var = self.root.find_var(self.names[r])
        if view is None or view.numel() != var.nbytes:
            view = torch.from_dlpack(var)
            self.views[r] = view
        return view

    def departed(self) -> Optional[int]:
        """A rank whose exchange variable is gone (it left), or None."""
        for r, name in enumerate(self.names):
            if r != self.rank and self.root.find_var(name) is None:
                return r
        return None

    def close(self) -> None:
        self.views.clear()
        try:
            self.root.erase(self.names[self.rank])
        except _pdshm.Error:
            pass


class _Small:
    """Each rank's variable of two slots for all_reduces, broadcasts and
    gathers of at most SMALL_BYTES, and the SlotReducer (pdshm._pdshm, C)
    that runs each in one call: each sender copies its tensor into its slot
    of the collective, one barrier, each rank folds or copies the slots
    straight into its tensors (see SlotReducer).  The reducer pins every rank's variable, so it is
    made once all exist (after the group's first barrier: start())."""

    HEAD = 32  # bytes of a slot's header

    def __init__(self, seg, prefix: str, rank: int, size: int) -> None:
        self.root = seg.root
        self.names = [f"{prefix}.y{r}" for r in range(size)]
        self.rank = rank
        self.own = self.root.var(self.names[rank])
        self.own.resize("uint8", (2 * (self.HEAD + SMALL_BYTES),))
        self.reducer = None

    def start(self, group) -> None:
        """Makes the reducer; every rank's variable exists."""
        slots = []
        for r, name in enumerate(self.names):
            var = self.own if r == self.rank else self.root.find_var(name)
            if var is None:
                raise PeerDiedError(f"pdshm: rank {r} left the process group")
            slots.append(var)
        self.reducer = _pdshm.SlotReducer(group, slots, SMALL_BYTES)

    def close(self) -> None:
        self.reducer = None
        try:
            self.root.erase(self.names[self.rank])
        except _pdshm.Error:
            pass


# The reducer's name of each op; bool tensors go as uint8 (0 or 1), whose
# bitwise ops are the logical ones.
_SLOT_OPS = {_RED.SUM: "sum", _RED.AVG: "mean", _RED.PRODUCT: "product", _RED.MIN: "min",
             _RED.MAX: "max", _RED.BAND: "band", _RED.BOR: "bor", _RED.BXOR: "bxor"}
_SLOT_BOOL_OPS = {_RED.SUM: "bor", _RED.MAX: "bor", _RED.BOR: "bor", _RED.PRODUCT: "band",
                  _RED.MIN: "band", _RED.BAND: "band", _RED.BXOR: "bxor"}


def _bytes_of(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _as(raw: torch.Tensor, like: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """raw's bytes [offset, offset + like's size) seen as a tensor shaped like `like`."""
    n = _bytes_of(like)
    return raw[offset:offset + n].view(like.dtype).view(like.shape)


def _fold_of(op, dtype: torch.dtype, what: str):
    """The binary torch function that folds dtype's values by op; a
    RuntimeError naming `what` when op is not defined for dtype (checked
    before any communication, so every rank refuses alike)."""
    fold = _FOLDS.get((op, dtype))
    if fold is None:
        fold = _FOLDS[(op, dtype)] = _find_fold(op, dtype)
    if fold is _NO_FOLD:
        raise RuntimeError(f"pdshm: {what} with {op.name} of {dtype} is not supported")
    return fold


_FOLDS: Dict[tuple, object] = {}
_NO_FOLD = object()


def _find_fold(op, dtype: torch.dtype):
    """_fold_of's answer (_NO_FOLD: none), before it is cached."""
    if dtype == torch.bool:
        fold = {_RED.SUM: torch.logical_or, _RED.MAX: torch.logical_or,
                _RED.BOR: torch.logical_or, _RED.PRODUCT: torch.logical_and,
                _RED.MIN: torch.logical_and, _RED.BAND: torch.logical_and,
                _RED.BXOR: torch.logical_xor}.get(op)
    elif dtype.is_floating_point or dtype.is_complex:
        fold = {_RED.SUM: torch.add, _RED.AVG: torch.add, _RED.PRODUCT: torch.mul}.get(op)
        if not dtype.is_complex:
            fold = fold or {_RED.MIN: torch.minimum, _RED.MAX: torch.maximum}.get(op)
    else:
        fold = {_RED.SUM: torch.add, _RED.AVG: torch.add, _RED.PRODUCT: torch.mul,
                _RED.MIN: torch.minimum, _RED.MAX: torch.maximum, _RED.BAND: torch.bitwise_and,
                _RED.BOR: torch.bitwise_or, _RED.BXOR: torch.bitwise_xor}.get(op)
    return _NO_FOLD if fold is None else fold


# The reducer's op name by (op's value, dtype), for the dtypes it takes as
# they are and the ops the fold defines for them (allreduce's shortest way).
_SLOT_FAST = {(op.value, dtype): name for op, name in _SLOT_OPS.items()
              for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64,
                            torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
              if _find_fold(op, dtype) is not _NO_FOLD}


# The dtypes whose tensors the SlotReducer broadcasts and gathers (bool as uint8).
_SLOT_DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
                torch.complex128, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
                torch.bool}


def _slot_arg(t: torch.Tensor) -> torch.Tensor:
    """t (contiguous) as the SlotReducer takes it."""
    return t.view(torch.uint8) if t.dtype == torch.bool else t


def _reduce_local(op, parts: Sequence[torch.Tensor], out: torch.Tensor) -> None:
    """out = op over parts, in their order (out may alias none of them)."""
    dtype = out.dtype
    fold = _fold_of(op, dtype, "a reduction")
    if dtype not in _HALF:  # folded straight into out
        if len(parts) == 1:
            out.copy_(parts[0])
        else:
            fold(parts[0], parts[1], out=out)
            for p in parts[2:]:
                fold(out, p, out=out)
        if op == _RED.AVG:
            if dtype.is_floating_point or dtype.is_complex:
                out.div_(len(parts))
            else:
                out.copy_(torch.div(out, len(parts), rounding_mode="trunc"))
        return
    # float16 and bfloat16 compute in float32 and round once, as the group does.
    wide = torch.float32
    acc = parts[0].to(wide, copy=True)
    for p in parts[1:]:
        fold(acc, p.to(wide), out=acc)
    if op == _RED.AVG:
        if dtype.is_floating_point or dtype.is_complex:
            acc.div_(len(parts))
        else:
            acc = torch.div(acc, len(parts), rounding_mode="trunc")
    out.copy_(acc)


def _one(tensors: Sequence[torch.Tensor], what: str) -> torch.Tensor:
    if len(tensors) != 1:
        raise RuntimeError(f"pdshm: {what} takes one tensor per rank, not {len(tensors)}")
    t = tensors[0]
    if t.device.type != "cpu":
        raise RuntimeError(f"pdshm: {what} takes CPU tensors, not {t.device}")
    return t


def _unwrap(fut: torch.futures.Future):
    return fut.value()


class _Work(dist.Work):
    """The Work of one collective: completed by its process group's queue
    (_Queue), in the order the collectives were issued.

    wait() raises the collective's own error (PeerDiedError,
    CollectiveTimeout, ...).  get_future()'s value is the result (the tensor
    list DDP wants); on an error, waiting for it or reading its value raises
    a RuntimeError whose message names the error.  That future is derived
    with then() from one that the queue completes: set_exception() alone
    completes a torch Future with the exception as its value, which C++
    (DDP's Reducer) would take for the tensors (in torch 1.13 that crashed
    DDP's backward), whereas an exception raised by a then() callback makes
    the derived future fail in C++ too.  The futures are made when first
    asked for (a synchronous collective never needs them).

    A Python Work that C++ still holds must not be collected (C++ would then
    wait on the bare base class for ever): the process group keeps every
    Work of its queue and the last KEEP_WORKS issued (C++ callers such as
    DDP's take the future, or wait, right after the call)."""

    def __init__(self, result, queue: "_Queue") -> None:
        super().__init__()
        self._result = result
        self._queue = queue
        self._finished = False  # these three change under queue.cond
        self._error: Optional[Exception] = None
        self._inner: Optional[torch.futures.Future] = None
        self._future: Optional[torch.futures.Future] = None

    def _complete(self, error: Optional[Exception]) -> None:
        with self._queue.cond:
            self._error = error
            self._finished = True
            inner = self._inner
            self._queue.cond.notify_all()
        if inner is not None:
            self._settle(inner)

    def _settle(self, inner: torch.futures.Future) -> None:
        if self._error is None:
            inner.set_result(self._result)
        else:
            inner.set_exception(self._error)

    def wait(self, timeout: Optional[timedelta] = None) -> bool:
        """True once the collective completed; raises its error.  A timeout
        (a timedelta; zero or None: none) that passes first raises
        CollectiveTimeout, the collective going on in the background."""
        seconds = timeout.total_seconds() if timeout is not None else 0.0
        if not self._finished:
            if seconds > 0:
                if not self._queue.wait_for(self, seconds):
                    raise CollectiveTimeout(f"pdshm: the collective did not complete within "
                                            f"{seconds} s")
            else:
                self._queue.run_until(self)
        if self._error is not None:
            raise self._error
        return True

    def get_future(self) -> torch.futures.Future:
        with self._queue.cond:
            if self._future is None:
                self._inner = torch.futures.Future()
                self._future = self._inner.then(_unwrap)
                settle = self._finished
            else:
                settle = False
        if settle:
            self._settle(self._inner)
        else:
            self._queue.wake()
        return self._future

    def is_completed(self) -> bool:
        if not self._finished:
            self._queue.wake()
        return self._finished

    def is_success(self) -> bool:
        return self._finished and self._error is None

    def result(self):
        return self._result


class _Queue:
    """The collectives of a process group, run one at a time in the order
    they were issued, by the group's worker thread, or by a thread that
    waits for one of them (running the queue up to it).  A collective issued
    by one of torch.distributed's functions with async_op=False, which waits
    for it at once, does not wake the worker thread: its caller runs it,
    sparing two thread switches.  Whoever asks a Work for its future or
    whether it completed wakes the worker, so nothing waits for a job
    nobody runs."""

    def __init__(self, name: str) -> None:
        self._jobs: "collections.deque[tuple]" = collections.deque()
        self.cond = threading.Condition(threading.Lock())
        # held while a job runs (or a collective run at once: _submit);
        # reentrant: a job's completion runs its future's callbacks, which
        # may issue and wait for collectives
        self.running = threading.RLock()
        self._awake = False  # the worker thread was told of the jobs queued
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, work: _Work, fn, wake: bool) -> None:
        with self.cond:
            if self._stopping:
                raise RuntimeError("pdshm: this process group was closed")
            self._jobs.append((work, fn))
            if wake:
                self._awake = True
                self.cond.notify_all()

    def busy(self) -> bool:
        """Whether jobs are queued, or the queue stops (then submit raises)."""
        return bool(self._jobs) or self._stopping

    def wake(self) -> None:
        """Lets the worker thread run the jobs queued."""
        with self.cond:
            if self._jobs and not self._awake:
                self._awake = True
                self.cond.notify_all()

    def _serve(self) -> None:
        while True:
            with self.cond:
                while not (self._jobs and self._awake) and not self._stopping:
                    self.cond.wait()
                if not self._jobs:
                    return
            with self.running:
                self._run_first()

    def _run_first(self) -> bool:
        """Runs the first job (the caller holds running); False if there was none."""
        with self.cond:
            if not self._jobs:
                self._awake = False
                return False
            work, fn = self._jobs.popleft()
            if not self._jobs:
                self._awake = False
        try:
            fn()
        except Exception as e:
            work._complete(e)
        except BaseException as e:  # Ctrl-C in a waiting caller: the Work fails, e goes on
            work._complete(RuntimeError(f"pdshm: the collective was interrupted ({e!r})"))
            raise
        else:
            work._complete(None)
        return True

    def run_until(self, work: _Work) -> None:
        """Returns once work completed, running the queue's jobs up to it
        unless the worker thread is running them."""
        with self.running:
            while not work._finished and self._run_first():
                pass
        self.wait_for(work, None)

    def wait_for(self, work: _Work, timeout: Optional[float]) -> bool:
        """Whether work completed within timeout seconds (None: no limit),
        the worker thread running it."""
        with self.cond:
            if not work._finished and self._jobs and not self._awake:
                self._awake = True
                self.cond.notify_all()
            return self.cond.wait_for(lambda: work._finished, timeout)

    def stop(self, timeout: float) -> bool:
        """Fails the jobs not started, lets the worker thread finish the one
        it runs (for at most timeout seconds); whether it finished."""
        with self.cond:
            self._stopping = True
            jobs, self._jobs = list(self._jobs), collections.deque()
            self.cond.notify_all()
        for work, _ in jobs:
            work._complete(RuntimeError("pdshm: the process group was closed before the "
                                        "collective ran"))
        if threading.current_thread() is self._thread:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()


def _issued_synchronously(depth: int) -> bool:
    """Whether the collective being issued comes from one of
    torch.distributed's functions called with async_op=False (such a
    function waits for the Work at once): the function `depth` frames up
    from this one's caller (1: the caller's caller) called the process
    group's method."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:  # called from C++ in a thread with no Python frames
        return False
    return (frame.f_code.co_filename == _C10D_FILE and "async_op" in frame.f_code.co_varnames
            and frame.f_locals.get("async_op") is False)


_C10D_FILE = dist.distributed_c10d.__file__


class ProcessGroupPdshm(ProcessGroup):
    """A torch.distributed process group whose ranks are one pdshm trainer
    group in the host's segment (see the module's docstring)."""

    _slots_span_group = True  # the SlotReducer's members are the process group's ranks

    def __init__(self, store, rank: int, size: int, timeout: timedelta, group_id: str,
                 job: _Job, local: Optional[Sequence[int]] = None) -> None:
        """local: the group ranks on this host (default: all)."""
        super().__init__(rank, size)
        self._timeout = timeout.total_seconds()
        self._job = job
        job.users += 1
        seg = job.seg
        prefix = f"pg.{group_id}"
        local = list(range(size)) if local is None else list(local)
        member = local.index(rank)
        self._group = seg.group(prefix, len(local), rank=member)
        self._scope = seg.root.new_scope()
        room = min(seg.info().max_size, STAGING_BASE)  # a growing segment's max is /dev/shm's
        self._exchange = _Exchange(seg, prefix, member, len(local))
        self._staging = _Staging(self._scope, room // (2 * len(local)),
                                 lambda: self._exchange.own.nbytes)
        self._small = _Small(seg, prefix, member, len(local))
        self._closed = False
        self._death: Optional[str] = None  # what the first PeerDied said
        # Everyone's exchange and slot variables exist before anyone looks them up.
        self._call(self._group.barrier)
        self._small.start(self._group)
        self._works: "collections.deque[_Work]" = collections.deque(maxlen=KEEP_WORKS)
        self._queue = _Queue(f"pdshm {prefix}")
        self._done = _Work(None, self._queue)  # _submit's, for collectives run at once
        self._done._finished = True
        _OPEN.add(self)

    def getBackendName(self) -> str:
        return BACKEND

    @property
    def segment(self):
        """The pdshm.Segment this group lives in."""
        return self._job.seg

    def close(self) -> None:
        """Leaves the trainer group and lets go of this rank's variables
        (destroy_process_group does not call it; dropping the group does)."""
        if self._closed:
            return
        self._closed = True
        if not self._queue.stop(CLOSE_WAIT_S):
            # A collective still runs in the worker thread and uses the
            # group: what this rank holds goes with the process.
            return
        self._exchange.close()
        self._small.close()
        self._staging.kept.clear()
        self._group.leave()
        self._scope.release()
        self._job.drop()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ---- the group's calls, with their errors in torch's terms -------------------

    def _call(self, fn, *args, timeout: Optional[float] = None):
        """fn(*args, timeout=) (a call of the trainer group) with its errors in
        torch's terms; timeout defaults to the process group's."""
        if self._closed:
            raise RuntimeError("pdshm: this process group was closed")
        if self._death is not None:
            # The trainer group would wait for a replacement that torch never sends.
            raise PeerDiedError(f"pdshm: an earlier collective of this process group saw a "
                                f"member die ({self._death}): destroy it and start again")
        try:
            return fn(*args, timeout=self._timeout if timeout is None else timeout)
        except _pdshm.PeerDied as e:
            self._death = str(e.strerror or e)
            err = PeerDiedError(f"pdshm: {self._death}")
            err.code = e.code
            raise err from None
        except _pdshm.TimedOut as e:
            raise CollectiveTimeout(f"pdshm: a member did not reach the collective within "
                                    f"the process group's timeout ({self._timeout} s): "
                                    f"{e.strerror or e}") from None

    def _barrier(self) -> None:
        """The group's barrier, waited for in slices: between them, a member
        that left (its exchange variable erased: it exited normally or
        closed the group) is a PeerDiedError, as a death is.  A barrier that
        timed out has not been passed, so slicing it changes nothing."""
        deadline = time.monotonic() + self._timeout
        while True:
            left = deadline - time.monotonic()
            try:
                self._call(self._group.barrier, timeout=max(0.0, min(LEFT_CHECK_S, left)))
                return
            except CollectiveTimeout:
                if left <= LEFT_CHECK_S:
                    raise
            gone = self._exchange.departed()
            if gone is not None:
                self._death = f"rank {gone} left the process group"
                raise PeerDiedError(f"pdshm: {self._death} (it exited or destroyed the group) "
                                    "while this rank waited for it")

    def _reduce_in_group(self, op, t: torch.Tensor) -> bool:
        """t (any layout) reduced over the group, in place when it is a view of
        a variable of the segment, else through a staging variable; False
        (nothing done) when the group does not reduce t's dtype by op."""
        name = _GROUP_OPS.get(op)
        if name is None or t.dtype not in _GROUP_DTYPES:
            return False
        # Each reduction starts with a barrier: the reduction itself cannot
        # tell a member that left from one that is late (see _barrier).
        if t.is_contiguous() and self._group.holds(t):  # in the segment already: no copy
            self._barrier()
            self._call(self._group.allreduce, t, name)
            return True
        var, view = self._staging.get(t.dtype, t.numel())
        view.view(t.shape).copy_(t)
        self._barrier()
        self._call(self._group.allreduce, var, name)
        t.copy_(view.view(t.shape))
        return True

    def _exchanged_parts(self, t: torch.Tensor, offset: int = 0) -> List[torch.Tensor]:
        """Every rank's tensor shaped like t from byte offset of its exchange bytes."""
        return [_as(self._exchange.of(r), t, offset) for r in range(self.size())]

    def _reduce_by_exchange(self, op, t: torch.Tensor) -> None:
        _as(self._exchange.mine(_bytes_of(t)), t).copy_(t)
        self._barrier()
        _reduce_local(op, self._exchanged_parts(t), t)
        self._barrier()

    def _reduce_by_shares(self, op, t: torch.Tensor) -> None:
        """t (contiguous, private memory) reduced by op over the group with
        the fewest bytes moved, in one call of the group's allreduce_private
        (C, the GIL released) through this rank's exchange bytes: each rank
        copies into them only the shares the others reduce, reduces its own
        share of every rank's values in rank order into its tensor, then
        copies the others' reduced shares from their exchange bytes straight
        into its tensor.  Every share is reduced once, so every rank gets
        the same bits.  Per rank, 4 bytes of traffic for each byte of t with
        2 ranks (the group's allreduce between a copy in and out: 6).  The
        barrier first is the one that can tell a member that left (see
        _barrier)."""
        self._exchange.mine(_bytes_of(t))
        self._barrier()
        self._call(self._group.allreduce_private, t.detach(), self._exchange.own,
                   _GROUP_OPS[op])

    def _reduce_small(self, op, t: torch.Tensor) -> None:
        """t (at most SMALL_BYTES) reduced over the group in one call of the
        SlotReducer (one barrier; a non-contiguous t through a contiguous copy)."""
        c = t if t.is_contiguous() else t.contiguous()
        if c.dtype == torch.bool:
            arg, name = c.view(torch.uint8), _SLOT_BOOL_OPS[op]
        else:
            arg, name = c, _SLOT_OPS[op]
        self._slot_reduce(arg, name)
        if c is not t:
            t.copy_(c)

    def _slot_reduce(self, t: torch.Tensor, name: str) -> None:
        """The SlotReducer's all_reduce of t (contiguous, at most SMALL_BYTES)
        by op `name`, its errors in torch's terms."""
        self._slot_call("all_reduce", self._small.reducer.allreduce, t, name)

    def _slot_call(self, what: str, fn, *args) -> None:
        """fn(*args) (a call of the SlotReducer) with its errors in torch's terms."""
        try:
            self._call(fn, *args)
        except _pdshm.InvalidArgument as e:  # the ranks' calls differ
            raise RuntimeError(f"pdshm: {what}: {e}") from None

    def _in_slots(self, t: torch.Tensor) -> bool:
        """Whether a broadcast or gather of t goes through the SlotReducer,
        decided from what every rank's t has alike (device, dtype, size)."""
        return (self._slots_span_group and t.is_cpu and t.dtype in _SLOT_DTYPES
                and 0 < _bytes_of(t) <= SMALL_BYTES)

    def _broadcast_small(self, t: torch.Tensor, root: int) -> None:
        c = t if t.is_contiguous() else t.contiguous()
        self._slot_call("broadcast", self._small.reducer.broadcast, _slot_arg(c), root)
        if c is not t:
            t.copy_(c)

    def _broadcast_pipelined(self, t: torch.Tensor, root: int) -> None:
        """t broadcast in k chunks (2 to PIPELINE_CHUNKS, the same at every
        rank) through two halves of the root's exchange bytes: in step j the
        root copies chunk j into half j % 2 while the others copy chunk j - 1
        out of the other half, then a barrier; a half is written again two
        steps after it was written, once everyone read it.  So the root's
        copies and the others' overlap, where one copy in and one copy out
        follow each other."""
        c = t if t.is_contiguous() else t.contiguous()
        flat = c.reshape(-1).view(torch.uint8)
        n = flat.numel()
        k = min(PIPELINE_CHUNKS, n // (PIPELINE_BYTES // 2))
        chunk = -(-n // k)
        is_root = self.rank() == root
        halves = self._exchange.mine(2 * chunk) if is_root else None
        for j in range(k + 1):
            if is_root and j < k:
                part = flat[j * chunk:(j + 1) * chunk]
                at = (j % 2) * chunk
                halves[at:at + part.numel()].copy_(part)
            elif not is_root and j:
                if j == 1:  # the root sized its bytes before the first barrier
                    halves = self._exchange.of(root)
                part = flat[(j - 1) * chunk:j * chunk]
                at = ((j - 1) % 2) * chunk
                part.copy_(halves[at:at + part.numel()])
            self._barrier()
        if c is not t and not is_root:
            t.copy_(c)

    def _gather_small(self, outs: Sequence[torch.Tensor], t: torch.Tensor) -> None:
        """_gather_into through the SlotReducer: outs that are not contiguous
        through contiguous copies, none (a gather's non-root) into scratch."""
        c = t if t.is_contiguous() else t.contiguous()
        if not outs:
            scratch = torch.empty_like(c)
            outs = [scratch] * self.size()
        into = [o if o.is_contiguous() else torch.empty_like(c) for o in outs]
        self._slot_call("all_gather", self._small.reducer.allgather, _slot_arg(c),
                        [_slot_arg(i.view(c.shape)) for i in into])
        for o, i in zip(outs, into):
            if i is not o:
                o.copy_(i.view(o.shape))

    def _allreduce1(self, op, t: torch.Tensor) -> None:
        _fold_of(op, t.dtype, "allreduce")
        if not t.numel():
            return
        if _bytes_of(t) <= SMALL_BYTES:
            self._reduce_small(op, t)
        elif (self.size() > 1 and op in _GROUP_OPS and t.dtype in _GROUP_DTYPES
                and _bytes_of(t) >= SHARES_MIN_BYTES and t.is_contiguous()
                and not self._group.holds(t)):
            self._reduce_by_shares(op, t)
        elif not self._reduce_in_group(op, t):
            self._reduce_by_exchange(op, t)

    # ---- the collectives -----------------------------------------------------------

    def _run_now(self, fn, sync: bool) -> Optional[_Work]:
        """For a synchronous caller (sync: _issued_synchronously) that finds
        the queue idle: runs fn() at once and returns the process group's
        Work that is always completed (fn's error is raised here: the caller
        would raise it from wait() at once).  Otherwise None, nothing run."""
        queue = self._queue
        if not sync or queue.busy() or not queue.running.acquire(blocking=False):
            return None
        try:
            if queue.busy():
                return None
            fn()
        finally:
            queue.running.release()
        return self._done

    def _submit(self, result, fn) -> _Work:
        """A Work of result, completed once fn() (the collective, its
        arguments checked) ran in the queue, or at once (_run_now)."""
        sync = _issued_synchronously(2)
        work = self._run_now(fn, sync)
        if work is not None:
            return work
        work = _Work(result, self._queue)
        self._queue.submit(work, fn, wake=not sync)
        self._works.append(work)
        return work

    def allreduce(self, tensors, opts=None):
        if self._slots_span_group and len(tensors) == 1 and opts is not None:
            # the shortest way, for a small tensor the reducer takes as it is
            t = tensors[0]
            name = _SLOT_FAST.get((opts.reduceOp.op.value, t.dtype))
            if (name is not None and t.is_cpu and t.is_contiguous()
                    and 0 < t.numel() * t.element_size() <= SMALL_BYTES):
                work = self._run_now(lambda: self._slot_reduce(t, name), _issued_synchronously(1))
                if work is not None:
                    return work
        t = _one(tensors, "allreduce")
        op = _op(opts)
        _fold_of(op, t.dtype, "allreduce")
        return self._submit(tensors, lambda: self._allreduce1(op, t))

    def allreduce_coalesced(self, tensors, opts=None):
        if not tensors:
            return self._submit(tensors, lambda: None)
        if len({t.dtype for t in tensors}) != 1:
            raise RuntimeError("pdshm: allreduce_coalesced takes tensors of one dtype")
        op = _op(opts)
        _fold_of(op, tensors[0].dtype, "allreduce_coalesced")

        def run():
            flat = torch.cat([t.reshape(-1) for t in tensors])
            self._allreduce1(op, flat)
            off = 0
            for t in tensors:
                t.copy_(flat[off:off + t.numel()].view(t.shape))
                off += t.numel()
        return self._submit(tensors, run)

    def reduce(self, tensors, opts=None):
        t = _one(tensors, "reduce")
        root = _root(opts, self.size())
        op = _op(opts)
        _fold_of(op, t.dtype, "reduce")
        # the same collective, on a copy at non-roots: their tensors stay as they were
        return self._submit(tensors, lambda: self._allreduce1(
            op, t if self.rank() == root else t.clone()))

    def broadcast(self, tensors, opts=None):
        t = _one(tensors, "broadcast")
        root = _root(opts, self.size())

        def run():
            if self._in_slots(t):
                self._broadcast_small(t, root)
                return
            if _bytes_of(t) >= PIPELINE_BYTES:
                self._broadcast_pipelined(t, root)
                return
            if self.rank() == root:
                _as(self._exchange.mine(_bytes_of(t)), t).copy_(t)
            self._barrier()
            if self.rank() != root:
                t.copy_(_as(self._exchange.of(root), t))
            self._barrier()
        return self._submit(tensors, run)

    def _gather_into(self, outs: Sequence[torch.Tensor], t: torch.Tensor) -> None:
        """outs[r] = rank r's t, for every r (outs may be empty: contribute
        only); outs are shaped like t (_check_like)."""
        if self._in_slots(t):
            self._gather_small(outs, t)
            return
        _as(self._exchange.mine(_bytes_of(t)), t).copy_(t)
        self._barrier()
        for r, o in enumerate(outs):
            o.copy_(_as(self._exchange.of(r), t))
        self._barrier()

    def allgather(self, output_lists, input_list, opts=None):
        t = _one(input_list, "allgather")
        outs = _one_list(output_lists, self.size(), "allgather")
        for o in outs:
            _check_like(o, t, "allgather")
        return self._submit(output_lists, lambda: self._gather_into(outs, t))

    def _allgather_base(self, output, input, opts=None):
        if output.numel() != input.numel() * self.size():
            raise RuntimeError(f"pdshm: _allgather_base: output has {output.numel()} elements, "
                               f"want {self.size()} x {input.numel()}")
        if output.dtype != input.dtype:
            raise RuntimeError(f"pdshm: _allgather_base: output of {output.dtype}, input of "
                               f"{input.dtype}")

        def run():
            if output.is_contiguous():
                chunks = output.view(-1).chunk(self.size())
                self._gather_into([c.view(input.shape) for c in chunks], input)
            else:
                flat = output.reshape(-1).clone()
                self._gather_into([c.view(input.shape) for c in flat.chunk(self.size())], input)
                output.copy_(flat.view(output.shape))
        return self._submit([output], run)

    def gather(self, output_lists, input_list, opts=None):
        t = _one(input_list, "gather")
        root = _root(opts, self.size())
        if self.rank() == root:
            outs = _one_list(output_lists, self.size(), "gather")
        elif output_lists and any(len(o) for o in output_lists):
            raise RuntimeError("pdshm: gather: only the root passes output tensors")
        else:
            outs = []
        for o in outs:
            _check_like(o, t, "gather")
        return self._submit(output_lists, lambda: self._gather_into(outs, t))

    def scatter(self, output_list, input_lists, opts=None):
        t = _one(output_list, "scatter")
        root = _root(opts, self.size())
        n = self.size()
        ins = _scatter_inputs(input_lists, t, n, self.rank() == root)

        def run():
            if ins:
                raw = self._exchange.mine(n * _bytes_of(t))
                for r, i in enumerate(ins):
                    _as(raw, t, r * _bytes_of(t)).copy_(i)
            self._barrier()
            t.copy_(_as(self._exchange.of(root), t, self.rank() * _bytes_of(t)))
            self._barrier()
        return self._submit(output_list, run)

    def reduce_scatter(self, output_list, input_lists, opts=None):
        out = _one(output_list, "reduce_scatter")
        ins = _one_list(input_lists, self.size(), "reduce_scatter")
        for i in ins:
            _check_like(i, out, "reduce_scatter")
        op = _op(opts)
        _fold_of(op, out.dtype, "reduce_scatter")
        return self._submit(output_list, lambda: self._reduce_scatter(op, out, ins))

    def _reduce_scatter_base(self, output, input, opts=None):
        n = self.size()
        if input.numel() != output.numel() * n:
            raise RuntimeError(f"pdshm: _reduce_scatter_base: input has {input.numel()} "
                               f"elements, want {n} x {output.numel()}")
        if output.dtype != input.dtype:
            raise RuntimeError(f"pdshm: _reduce_scatter_base: output of {output.dtype}, input "
                               f"of {input.dtype}")
        op = _op(opts)
        _fold_of(op, output.dtype, "reduce_scatter")
        ins = [c.view(output.shape) for c in input.reshape(-1).chunk(n)] if output.numel() \
            else [output] * n
        return self._submit([output], lambda: self._reduce_scatter(op, output, ins))

    def _reduce_scatter(self, op, out: torch.Tensor, ins: Sequence[torch.Tensor]) -> None:
        """out = op over every rank's ins[this rank]; ins[r] are shaped like
        out.  Each rank copies into its exchange bytes only the parts the
        others reduce, then folds its own part from its input and theirs, in
        rank order, straight into out (every part is reduced by one rank:
        the same bits everywhere).  Parts of at most SMALL_BYTES in all go
        through the SlotReducer instead, whose fold is in rank order too."""
        n, me = self.size(), self.rank()
        if not out.numel():
            return
        _fold_of(op, out.dtype, "reduce_scatter")
        ins = [i.reshape(out.shape) for i in ins]
        b = _bytes_of(out)
        if self._slots_span_group and n * b <= SMALL_BYTES:
            # fewer bytes than rounds: every rank reduces all the parts in
            # one call of the SlotReducer and keeps its own
            flat = torch.cat([i.reshape(-1) for i in ins])
            self._reduce_small(op, flat)
            out.copy_(flat[me * out.numel():(me + 1) * out.numel()].view(out.shape))
            return
        raw = self._exchange.mine(n * b)
        for r, i in enumerate(ins):
            if r != me:
                _as(raw, out, r * b).copy_(i)
        own = ins[me]
        if own.storage().data_ptr() == out.storage().data_ptr():
            own = own.clone()  # out may alias no part
        self._barrier()
        parts = [own if r == me else _as(self._exchange.of(r), out, me * b) for r in range(n)]
        _reduce_local(op, parts, out)
        self._barrier()

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        n = self.size()
        ins = _split_rows(input, input_split_sizes, n, "alltoall_base input")
        outs = _split_rows(output, output_split_sizes, n, "alltoall_base output")
        return self._submit([output], lambda: self._alltoall(outs, ins))

    def alltoall(self, output_list, input_list, opts=None):
        n = self.size()
        if len(output_list) != n or len(input_list) != n:
            raise RuntimeError(f"pdshm: alltoall takes {n} input and {n} output tensors")
        outs, ins = list(output_list), list(input_list)
        return self._submit(output_list, lambda: self._alltoall(outs, ins))

    def _alltoall(self, outs: Sequence[torch.Tensor], ins: Sequence[torch.Tensor]) -> None:
        """outs[r] = rank r's ins[this rank].  Each rank's exchange bytes start
        with n + 1 int64 byte offsets of its parts."""
        n, me = self.size(), self.rank()
        head = 8 * (n + 1)
        offs = [head]
        for i in ins:
            offs.append(offs[-1] + _bytes_of(i))
        raw = self._exchange.mine(offs[-1])
        raw[:head].view(torch.int64).copy_(torch.tensor(offs, dtype=torch.int64))
        for i, lo in zip(ins, offs):
            _as(raw, i, lo).copy_(i)
        self._barrier()
        for r, o in enumerate(outs):
            theirs = self._exchange.of(r)
            lo, hi = theirs[:head].view(torch.int64)[me:me + 2].tolist()
            if hi - lo != _bytes_of(o):
                self._barrier()
                raise RuntimeError(f"pdshm: alltoall: rank {r} sends {hi - lo} bytes to rank "
                                   f"{me}, whose output for it holds {_bytes_of(o)}")
            o.copy_(_as(theirs, o, lo))
        self._barrier()

    def barrier(self, opts=None):
        return self._submit([], self._barrier)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        raise RuntimeError("pdshm: allgather_coalesced is not supported")

    def send(self, tensors, dst, tag=0):
        raise RuntimeError("pdshm: send is not supported (point-to-point: use gloo)")

    def recv(self, tensors, src, tag=0):
        raise RuntimeError("pdshm: recv is not supported (point-to-point: use gloo)")

    def recv_anysource(self, tensors, tag=0):
        raise RuntimeError("pdshm: recv_anysource is not supported (point-to-point: use gloo)")


class ProcessGroupPdshmHosts(ProcessGroupPdshm):
    """A process group whose ranks span hosts: the ranks of each host are a
    trainer group in that host's segment, and gloo carries what crosses
    hosts.  all_reduce (SUM, AVG, MIN, MAX of the group's dtypes) is
    hierarchical, as libpdshm-mpi's: a reduce-scatter in the segment, an
    all_reduce of each rank's share among the ranks of the same local index
    on every host (gloo), an allgather in the segment; so each rank hands
    the network 1/L of the bytes.  The other collectives go through a gloo
    group of all the ranks (reductions it does not do as an all_gather of
    the bytes, reduced by every rank in rank order).  Hosts with different
    numbers of ranks reduce through that gloo group alone."""

    _slots_span_group = False  # the SlotReducer's members are the host's ranks only

    def __init__(self, store, rank: int, size: int, timeout: timedelta, group_id: str,
                 job: _Job, hosts: List[List[int]], host: int) -> None:
        super().__init__(store, rank, size, timeout, group_id, job, local=hosts[host])
        self._world = dist.ProcessGroupGloo(dist.PrefixStore("pdshm/world", store), rank,
                                            size, timeout)
        self._cross = None
        if len({len(h) for h in hosts}) == 1:
            member = hosts[host].index(rank)
            self._cross = dist.ProcessGroupGloo(dist.PrefixStore(f"pdshm/cross{member}", store),
                                                host, len(hosts), timeout)

    def _barrier(self) -> None:
        self._world.barrier().wait()

    def _world_parts(self, t: torch.Tensor) -> List[torch.Tensor]:
        """Every rank's t (gloo all_gather of its bytes), in rank order."""
        raw = t.contiguous().reshape(-1).view(torch.uint8)
        outs = [torch.empty_like(raw) for _ in range(self.size())]
        self._world.allgather([outs], [raw]).wait()
        return [o.view(t.dtype).view(t.shape) for o in outs]

    def _allreduce1(self, op, t: torch.Tensor) -> None:
        _fold_of(op, t.dtype, "allreduce")
        if not t.numel():
            return
        if self._cross is None or op not in _GROUP_OPS or t.dtype not in _GROUP_DTYPES:
            _reduce_local(op, self._world_parts(t), t)
            return
        if t.dtype not in _HALF and t.is_contiguous() and self._group.holds(t):
            var, flat = t, t.view(-1)  # in the segment already: no copy
        else:
            # float16 and bfloat16 go as float32, rounded once at the end as in one host
            wide = torch.float32 if t.dtype in _HALF else t.dtype
            var, flat = self._staging.get(wide, t.numel())
            flat.view(t.shape).copy_(t)
        local_op = "sum" if op == _RED.AVG else _GROUP_OPS[op]
        ProcessGroupPdshm._barrier(self)  # the host's members: one that left raises
        self._call(self._group.reduce_scatter, var, local_op)
        lo, hi = self._group.share(t.numel())
        if hi > lo:
            self._across_hosts(op, flat[lo:hi])
        self._call(self._group.allgather, var)
        if var is not t:
            t.copy_(flat.view(t.shape))

    def _across_hosts(self, op, share: torch.Tensor) -> None:
        """share (float32 for float16 and bfloat16) = op over the same share
        of every host (gloo), then AVG's division."""
        opts = dist.AllreduceOptions()
        opts.reduceOp = ReduceOp.SUM if op in (_RED.SUM, _RED.AVG) else \
            (ReduceOp.MIN if op == _RED.MIN else ReduceOp.MAX)
        self._cross.allreduce([share], opts).wait()
        if op == _RED.AVG:
            if share.dtype.is_floating_point:
                share.div_(self.size())
            else:
                share.copy_(torch.div(share, self.size(), rounding_mode="trunc"))

    def _reduce_scatter(self, op, out: torch.Tensor, ins: Sequence[torch.Tensor]) -> None:
        if not out.numel():
            return
        c, me = out.numel(), self.rank()
        flat = torch.cat([i.reshape(-1) for i in ins])
        self._allreduce1(op, flat)
        out.copy_(flat[me * c:(me + 1) * c].view(out.shape))

    def _gather_into(self, outs: Sequence[torch.Tensor], t: torch.Tensor) -> None:
        for o, part in zip(outs, self._world_parts(t)):
            o.copy_(part)

    def broadcast(self, tensors, opts=None):
        t = _one(tensors, "broadcast")
        bopts = dist.BroadcastOptions()
        bopts.rootRank = _root(opts, self.size())

        def run():
            raw = t.contiguous().reshape(-1).view(torch.uint8)
            self._world.broadcast([raw], bopts).wait()
            if raw.data_ptr() != t.data_ptr():
                t.copy_(raw.view(t.dtype).view(t.shape))
        return self._submit(tensors, run)

    def scatter(self, output_list, input_lists, opts=None):
        t = _one(output_list, "scatter")
        root = _root(opts, self.size())
        n, b = self.size(), _bytes_of(t)
        ins = _scatter_inputs(input_lists, t, n, self.rank() == root)
        bopts = dist.BroadcastOptions()
        bopts.rootRank = root

        def run():
            raw = torch.empty(n * b, dtype=torch.uint8)
            for r, i in enumerate(ins):
                _as(raw, t, r * b).copy_(i)
            self._world.broadcast([raw], bopts).wait()
            t.copy_(_as(raw, t, self.rank() * b))
        return self._submit(output_list, run)

    def _alltoall(self, outs: Sequence[torch.Tensor], ins: Sequence[torch.Tensor]) -> None:
        inp = torch.cat([i.contiguous().reshape(-1).view(torch.uint8) for i in ins])
        out = torch.empty(sum(_bytes_of(o) for o in outs), dtype=torch.uint8)
        self._world.alltoall_base(out, inp, [_bytes_of(o) for o in outs],
                                  [_bytes_of(i) for i in ins], dist.AllToAllOptions()).wait()
        off = 0
        for o in outs:
            o.copy_(_as(out, o, off))
            off += _bytes_of(o)


def _op(opts):
    return opts.reduceOp.op if opts is not None else _RED.SUM


def _root(opts, size: int) -> int:
    root = opts.rootRank if opts is not None else 0
    if not 0 <= root < size:
        raise RuntimeError(f"pdshm: root rank {root} is outside [0, {size})")
    return root


def _one_list(lists, n: int, what: str) -> List[torch.Tensor]:
    if len(lists) != 1 or len(lists[0]) != n:
        raise RuntimeError(f"pdshm: {what} takes one list of {n} tensors per rank")
    return list(lists[0])


def _check_like(o: torch.Tensor, t: torch.Tensor, what: str) -> None:
    if o.dtype != t.dtype or o.numel() != t.numel():
        raise RuntimeError(f"pdshm: {what}: a tensor of {o.dtype}[{o.numel()}] where "
                           f"{t.dtype}[{t.numel()}] is wanted")


def _scatter_inputs(input_lists, t: torch.Tensor, n: int, is_root: bool) -> List[torch.Tensor]:
    """The root's n tensors to scatter, each like t; [] at the other ranks,
    which pass none."""
    if is_root:
        ins = _one_list(input_lists, n, "scatter")
        for i in ins:
            _check_like(i, t, "scatter")
        return ins
    if input_lists and any(len(i) for i in input_lists):
        raise RuntimeError("pdshm: scatter: only the root passes input tensors")
    return []


def _split_rows(t: torch.Tensor, sizes, n: int, what: str) -> List[torch.Tensor]:
    rows = t.shape[0] if t.dim() else 1
    if not sizes:
        if rows % n:
            raise RuntimeError(f"pdshm: {what}: {rows} rows do not split into {n} equal parts")
        sizes = [rows // n] * n
    if len(sizes) != n or sum(sizes) != rows:
        raise RuntimeError(f"pdshm: {what}: split sizes {list(sizes)} do not split {rows} rows "
                           f"into {n} parts")
    return list(t.split(list(sizes))) if t.dim() else [t]


def _create(opts, pg_options=None) -> ProcessGroupPdshm:
    """The backend's creator (extended form): the default group makes the
    job's segment on each host; subgroups of a pdshm default group live in
    it, others in a segment of their own.  A group whose ranks span hosts is
    a ProcessGroupPdshmHosts."""
    global _world_job
    store, rank, size = opts.store, opts.group_rank, opts.group_size
    hosts, host = _layout(store, rank, size)
    shared = (opts.global_ranks_in_group and dist.get_backend() == BACKEND
              and _world_job is not None and _world_job.users)
    job = _world_job if shared else _Job(store, hosts[host], rank, host, opts.timeout)
    if not opts.global_ranks_in_group:
        _world_job = job
    try:
        if len(hosts) == 1:
            return ProcessGroupPdshm(store, rank, size, opts.timeout, opts.group_id, job)
        return ProcessGroupPdshmHosts(store, rank, size, opts.timeout, opts.group_id, job,
                                      hosts, host)
    except BaseException:
        if job.users == 0:
            job.seg.detach()
        raise


def segment_of(group=None):
    """The pdshm.Segment of a pdshm process group (default: the default group):
    a tensor made there (torch.from_dlpack(var)) is a view of shared memory."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, ProcessGroupPdshm):
        raise ValueError(f"{pg!r} is not a pdshm process group")
    return pg.segment


if BACKEND.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, _create, extended_api=True)
