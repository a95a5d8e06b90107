"""pdshm.mpi: data-parallel training past one host, over mpi4py.  The
processes of a host share one segment and form one trainer group; MPI
carries between the hosts only what must cross (the scheme of libpdshm-mpi,
include/pdshm-mpi.h, and Horovod's hierarchical allreduce).

    from mpi4py import MPI
    import pdshm.mpi
    with pdshm.mpi.Job("train") as job:           # host h's segment: "train.h<h>"
        params = job.host_scope("params")          # one copy per host
        ...
        job.allreduce(grad_var, op="mean")         # over every process of the job
        job.bcast_scope(params, root_host=0)       # host 0's parameters everywhere

Which host a process is on: MPI's shared-memory split
(MPI_COMM_TYPE_SHARED), unless local_size (or the environment's
PDSHM_MPI_LOCAL_SIZE) is given: then ranks [h*L, (h+1)*L) are host h, so
that several hosts can be simulated on one machine.

Job.allreduce(x, op): (1) the host's group reduce-scatters the local
tensors in place in the segment: local rank i's shard [i n/L, (i+1) n/L)
(Group.share) of its own tensor holds the host's result; (2) the hosts agree
on the outcome and on the call (dtype, size, op) in one small MPI allreduce,
so that a host that failed does not leave the others waiting; (3) local rank
i allreduces its shard of its own tensor across hosts, MPI reading and
writing the segment's memory; (4) the group allgathers the shards into every
local tensor.  Every process hands MPI 1/L of the bytes of a flat allreduce,
and reads and writes about 2n elements of host memory (1: n + n/L, 4: n).
Integer results are the same whatever the layout, as the group's own: a sum
wraps in the dtype, MEAN divides the wrapped sum once, at the end, truncating
towards zero.  A float result may differ from one host's in the last places:
each host's result is rounded into the dtype before it crosses, float16 and
bfloat16 cross as 16-bit words through MPI ops that compute in float32 and
round each combination, and a float MEAN is the hosts' sum of each host's
mean, divided by the number of hosts.

A Job is also a group for pdshm.torch.DataParallel (.rank, .size: the local
rank and size; .allreduce over the job; .barrier over the host): the host's
trainers each update their slice of the host's one copy of the parameters,
and every host applies the same update.

Faults: MPI is not fault-tolerant.  When the host's group reports a death
(pdshm.PeerDied), the host waits up to replace_timeout seconds for the dead
rank to be taken over and a barrier to complete, then raises PeerDied (redo
the step); otherwise it prints one line on stderr and calls MPI Abort on the
job's communicator: the job ends, never hangs.  (Under OpenMPI a dead MPI
rank cannot be replaced: in practice the job ends.)

Why pure Python over the C extension and mpi4py rather than a second C
extension over libpdshm-mpi: the extension's Var objects and mpi4py's
communicators are each their module's own, with no C API between them (a
C extension would need the pdshm_var behind a Var and mpi4py's C API); the
work is the group's (C) and MPI's (C), on zero-copy numpy views of the
segment, and Python only orders the calls.  Only the float16 / bfloat16 ops
run numpy code per MPI message.
"""
from __future__ import annotations

import math as _math
import operator as _operator
import os as _os
import sys as _sys
import time as _time
from typing import Any, Optional

import numpy as _np

from . import _pdshm

GROUP = "pdshm-mpi"
LOCAL_SIZE_ENV = "PDSHM_MPI_LOCAL_SIZE"
_OPS = ("sum", "mean", "max", "min")
_ERRORS = {
    _pdshm.EINVAL: _pdshm.InvalidArgument, _pdshm.ETIMEDOUT: _pdshm.TimedOut,
    _pdshm.EOWNERDEAD: _pdshm.PeerDied, _pdshm.ETYPE: _pdshm.WrongType,
    _pdshm.EBADSEG: _pdshm.BadSegment, _pdshm.ENOMEM: _pdshm.NoMemory,
}


def _error(code: int, what: str) -> _pdshm.Error:
    """The pdshm exception of a code another host met (it reached us as a number)."""
    exc = _ERRORS.get(code, _pdshm.Error)(-code, f"{_pdshm.strerror(code)}: {what}")
    exc.code = code
    return exc


def _count(what: str, x: Any, least: int) -> int:
    """x as an int >= least: TypeError for no int, InvalidArgument below."""
    if isinstance(x, bool):
        raise TypeError(f"{what} must be an int, not bool")
    n = _operator.index(x)
    if n < least:
        raise _error(_pdshm.EINVAL, f"{what} must be at least {least}, not {n}")
    return n


def _seconds(what: str, x: Any) -> float:
    """x as finite seconds >= 0: TypeError for no number, InvalidArgument for
    NaN, a negative or an infinite one (as the group's timeouts)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"{what} must be seconds (int or float), not {type(x).__name__}")
    if not (0 <= x < _math.inf):
        raise _error(_pdshm.EINVAL, f"{what} must be finite seconds >= 0, not {x!r}")
    return float(x)


# ---- 16-bit floats over MPI ---------------------------------------------------

def _bf16_widen(u: _np.ndarray) -> _np.ndarray:
    return (u.astype(_np.uint32) << 16).view(_np.float32)


def _bf16_narrow(f: _np.ndarray) -> _np.ndarray:
    """Round to nearest, ties to even; NaN stays a quiet NaN."""
    bits = _np.ascontiguousarray(f, _np.float32).view(_np.uint32)
    out = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(_np.uint16)
    out[_np.isnan(f)] = 0x7FC0
    return out


# float16 and bfloat16 as uint16 words, to and from float32.
_WIDEN = {"float16": lambda u: u.view(_np.float16).astype(_np.float32), "bfloat16": _bf16_widen}
_NARROW = {"float16": lambda f: f.astype(_np.float16).view(_np.uint16), "bfloat16": _bf16_narrow}
_COMBINE = {"sum": _np.add, "max": _np.maximum, "min": _np.minimum}


def _half_op(MPI: Any, dtype: str, op: str) -> Any:
    widen, narrow, combine = _WIDEN[dtype], _NARROW[dtype], _COMBINE[op]

    def fn(inbuf: Any, outbuf: Any, datatype: Any) -> None:
        a = _np.frombuffer(inbuf, _np.uint16)
        b = _np.frombuffer(outbuf, _np.uint16)
        b[:] = narrow(combine(widen(a), widen(b)))
    return MPI.Op.Create(fn, commute=True)


# ---- the tensors' numpy side ----------------------------------------------------

def _flat(x: Any) -> tuple:
    """(dtype name, flat zero-copy numpy view) of a Var or a view of one
    (numpy array, torch tensor); float16 and bfloat16 show as their uint16
    words, as MPI carries them."""
    if isinstance(x, _pdshm.Var):
        name, a = x.dtype, x.numpy()
    elif type(x).__module__.startswith("torch"):
        import torch
        name = str(x.dtype).replace("torch.", "")
        t = x.detach()
        a = t.view(torch.int16).numpy() if name in _WIDEN else t.numpy()
    else:
        a = _np.asarray(x)
        name = str(a.dtype)
    a = a.reshape(-1)
    return name, a.view(_np.uint16) if name in _WIDEN else a


def _divide(a: _np.ndarray, dtype: str, by: int) -> None:
    """a /= by in place: integers truncate towards zero, 16-bit floats
    compute in float32 and round to nearest even."""
    if dtype in ("int32", "int64"):
        q = a // by
        q[(a % by != 0) & (a < 0)] += 1
        a[:] = q
    elif dtype in _WIDEN:
        a[:] = _NARROW[dtype](_WIDEN[dtype](a) / _np.float32(by))
    else:
        a /= by


class Job:
    """This process's place in an MPI job of hosts (see the module's
    docstring): .host .hosts .local_rank .local_size .segment .group
    .local_comm .cross_comm (rank = host) .bytes_sent; .rank and .size are
    the local ones, so that a Job serves as pdshm.torch.DataParallel's
    group.  `with` closes.  Collective: every method is called by every
    process concerned (the host or the job), in the same order."""

    def __init__(self, prefix: str, comm: Any = None, local_size: Optional[int] = None,
                 size: Optional[int] = None, replace_timeout: float = 2.0) -> None:
        # checked before MPI is touched: every process refuses the same way
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
        if local_size is not None:
            local_size = _count("local_size", local_size, 1)
        replace_timeout = _seconds("replace_timeout", replace_timeout)
        from mpi4py import MPI
        self._MPI = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.replace_timeout = replace_timeout
        self.bytes_sent = 0
        self.local_comm = self._split_hosts(local_size)
        self.local_rank, self.local_size = self.local_comm.Get_rank(), self.local_comm.Get_size()
        self._split_cross()
        self.segment = self.group = None
        failure = None
        try:
            self.segment = self._open_segment(f"{prefix}.h{self.host}", size)
            self.group = self.segment.group(GROUP, self.local_size, rank=self.local_rank)
        except _pdshm.Error as e:
            failure = e
        # every process opens, or none does: nobody waits in MPI for one that failed
        code = self.comm.allreduce(failure.code if failure is not None else 0, op=MPI.MIN)
        if code:
            if self.group is not None:
                self.group.leave()
            if self.segment is not None:
                self.segment.detach()
            self.cross_comm.Free()
            self.local_comm.Free()
            raise failure if failure is not None else \
                _error(code, "another process could not open its host's segment or group")
        self._half_ops = {(d, o): _half_op(MPI, d, o) for d in _WIDEN for o in _COMBINE}

    def _split_hosts(self, local_size: Optional[int]) -> Any:
        MPI, comm = self._MPI, self.comm
        if local_size is None and _os.environ.get(LOCAL_SIZE_ENV):
            local_size = int(_os.environ[LOCAL_SIZE_ENV])
        bad = local_size is not None and (local_size <= 0 or comm.Get_size() % local_size)
        if comm.allreduce(bool(bad), op=MPI.LOR):
            raise _error(_pdshm.EINVAL, f"local size {local_size} does not divide the job's "
                         f"{comm.Get_size()} processes")
        if local_size:
            return comm.Split(comm.Get_rank() // local_size, comm.Get_rank())
        return comm.Split_type(MPI.COMM_TYPE_SHARED, comm.Get_rank())

    def _split_cross(self) -> None:
        MPI, comm = self._MPI, self.comm
        sizes = comm.allgather(self.local_size)
        if min(sizes) != max(sizes):
            raise _error(_pdshm.EINVAL, f"hosts of unequal sizes {sorted(set(sizes))}")
        leaders = comm.Split(0 if self.local_rank == 0 else MPI.UNDEFINED, comm.Get_rank())
        host = leaders.Get_rank() if leaders != MPI.COMM_NULL else None
        if leaders != MPI.COMM_NULL:
            leaders.Free()
        self.host = self.local_comm.bcast(host, root=0)
        self.hosts = comm.Get_size() // self.local_size
        self.cross_comm = comm.Split(self.local_rank, self.host)

    def _open_segment(self, name: str, size: Optional[int]) -> Any:
        seg, why = None, None
        if self.local_rank == 0:
            try:
                seg = _pdshm.attach(name)
            except _pdshm.NotFound:
                try:
                    seg = _pdshm.create(name, size=size)
                except _pdshm.Error as e:
                    why = e
            except _pdshm.Error as e:
                why = e
        code = self.local_comm.bcast(why.code if why is not None else 0, root=0)
        if code:
            raise why if why is not None else _error(code, f"host {self.host}'s segment {name}")
        return seg if seg is not None else _pdshm.attach(name)

    # ---- a Group's face, for DataParallel ------------------------------------
    @property
    def rank(self) -> int:
        return self.local_rank

    @property
    def size(self) -> int:
        return self.local_size

    # ---- deaths --------------------------------------------------------------
    def _death(self, what: str) -> _pdshm.PeerDied:
        """A member of the host died: wait for its replacement (then return
        the PeerDied to raise), else end the job."""
        deadline = _time.monotonic() + self.replace_timeout
        while (left := deadline - _time.monotonic()) > 0:
            try:
                self.group.barrier(timeout=left)
                return _error(_pdshm.EOWNERDEAD, f"a trainer of host {self.host} died during "
                              f"{what}; its replacement joined: redo the step")
            except _pdshm.PeerDied:
                continue
            except _pdshm.TimedOut:
                break
        print(f"pdshm.mpi: host {self.host}, local rank {self.local_rank}: a trainer of this "
              f"host died during {what} and none took its rank over within "
              f"{self.replace_timeout:.1f} s: MPI Abort", file=_sys.stderr, flush=True)
        self.comm.Abort(128 + 9)
        raise AssertionError("MPI Abort returned")  # not reached

    def _group_call(self, what: str, fn: Any, *args: Any, **kw: Any) -> None:
        try:
            fn(*args, **kw)
        except _pdshm.PeerDied:
            raise self._death(what) from None

    def barrier(self, timeout: Optional[float] = None) -> None:
        """A barrier of the host's group, with the death path."""
        self._group_call("a barrier", self.group.barrier, timeout=timeout)

    # ---- allreduce -----------------------------------------------------------
    def _agree(self, code: int, dtype: str, n: int, op: str) -> int:
        d = ["float16", "bfloat16", "float32", "float64", "int32", "int64"].index(dtype) \
            if not code else -1
        k = _OPS.index(op)
        w = _np.array([code, d, -d, n, -n, k, -k], _np.int64)
        self.cross_comm.Allreduce(self._MPI.IN_PLACE, w, op=self._MPI.MIN)
        if w[0]:
            return int(w[0])
        return 0 if w[1] == -w[2] and w[3] == -w[4] and w[5] == -w[6] else _pdshm.EINVAL

    def _mpi_type(self, dtype: str) -> Any:
        MPI = self._MPI
        return {"float16": MPI.UINT16_T, "bfloat16": MPI.UINT16_T, "float32": MPI.FLOAT,
                "float64": MPI.DOUBLE, "int32": MPI.INT32_T, "int64": MPI.INT64_T}[dtype]

    def _cross_hosts(self, dtype: str, a: _np.ndarray, op: str) -> None:
        """Step 3, on this rank's flat view a, whose shard holds the host's result."""
        MPI = self._MPI
        lo, hi = self.group.share(a.size)
        comb = "sum" if op == "mean" else op
        mop = self._half_ops[(dtype, comb)] if dtype in _WIDEN else \
            {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[comb]
        shard = a[lo:hi]
        if shard.size:
            self.cross_comm.Allreduce(MPI.IN_PLACE, [shard, self._mpi_type(dtype)], op=mop)
        self.bytes_sent += shard.nbytes
        if op == "mean":
            integer = dtype in ("int32", "int64")
            _divide(shard, dtype, self.hosts * self.local_size if integer else self.hosts)

    def allreduce(self, x: Any, op: str = "sum", timeout: Optional[float] = None) -> None:
        """Every process's tensor x (a Var of its host's segment, or a whole
        view of one) becomes op over every process's x.  Raises what the
        group raises (InvalidArgument at every process for calls that differ,
        within a host or between hosts), PeerDied after a replacement."""
        if op not in _OPS:
            raise _error(_pdshm.EINVAL, f"op {op!r} is not one of {_OPS}")
        if self.hosts == 1:
            return self._group_call("an allreduce", self.group.allreduce, x, op=op,
                                    timeout=timeout)
        dtype, a = _flat(x)
        in_host = "sum" if op == "mean" and dtype in ("int32", "int64") else op
        code, failure = 0, None
        try:
            self._group_call("an allreduce's reduce-scatter", self.group.reduce_scatter, x,
                             op=in_host, timeout=timeout)
        except _pdshm.Error as e:
            code, failure = e.code, e
        agreed = self._agree(code, dtype, a.size, op)
        if agreed:
            raise failure if failure is not None and agreed == code else \
                _error(agreed, "an allreduce: another host's call failed or differs")
        self._cross_hosts(dtype, a, op)
        self._group_call("an allreduce's allgather", self.group.allgather, x, timeout=timeout)

    # ---- broadcast -----------------------------------------------------------
    def _check_root(self, bad: bool, root_host: int, what: str) -> None:
        """Raises InvalidArgument at every process when any process had a bad
        argument (bad) or a root_host out of range or other than the others'."""
        given = root_host
        try:  # a root_host of no int type is a bad argument like the others
            root_host = -1 if isinstance(root_host, bool) else _operator.index(root_host)
        except TypeError:
            root_host = -1
        bad = bad or not 0 <= root_host < self.hosts
        root_host = root_host if 0 <= root_host < self.hosts else 0
        w = _np.array([-int(bad), root_host, -root_host], _np.int64)
        self.comm.Allreduce(self._MPI.IN_PLACE, w, op=self._MPI.MIN)
        if w[0] or w[1] != -w[2]:
            raise _error(_pdshm.EINVAL, f"{what}: a process passed a bad argument, another "
                         "variable or scope than its host's, or another root host than "
                         f"{given!r} of {self.hosts}")

    def _from_root(self, obj: Any, root_host: int) -> Any:
        """obj of root_host's local rank 0, at every process (through every
        host's local rank 0): what one process read, all act on."""
        if self.local_rank == 0:
            obj = self.cross_comm.bcast(obj, root=root_host)
        return self.local_comm.bcast(obj, root=0)

    def bcast(self, var: Any, root_host: int = 0, timeout: Optional[float] = None) -> None:
        """var (the same variable for every process of a host: a parameter in
        a named scope) becomes root_host's tensor on every host; each local
        rank carries 1/L of the bytes.  InvalidArgument at every process when
        a process passed None, another variable than its host's others, or
        another root_host (or one out of range); WrongType at every process
        when the root's var holds no tensor."""
        try:
            key = var.key if var is not None else None
        except _pdshm.Error:  # stale: a bad argument, agreed on below
            key = None
        keys = self.local_comm.allgather(key)
        self._check_root(key is None or keys.count(key) != len(keys), root_host, "bcast")
        reader = self.host == root_host and self.local_rank == 0
        desc = self._from_root((var.dtype, tuple(var.shape or ())) if reader else None, root_host)
        if desc[0] is None:
            raise _error(_pdshm.ETYPE, f"host {root_host}'s {var.name} holds no tensor")
        failed = None
        if self.host != root_host and self.local_rank == 0 and \
                (var.dtype, tuple(var.shape or ())) != desc:
            try:
                var.resize(desc[0], desc[1])
            except _pdshm.Error as e:
                failed = e
        if self.comm.allreduce(failed is not None, op=self._MPI.LOR):
            raise failed or _error(_pdshm.ENOMEM, f"another host could not resize {var.name}")
        self.barrier(timeout)
        raw = var.numpy().reshape(-1).view(_np.uint8)
        n = raw.size
        lo, hi = self.group.share(n)
        if hi > lo:
            self.cross_comm.Bcast([raw[lo:hi], self._MPI.BYTE], root=root_host)
        if self.host == root_host:
            self.bytes_sent += hi - lo
        self.barrier(timeout)

    def bcast_scope(self, scope: Any, root_host: int = 0, timeout: Optional[float] = None) -> None:
        """Every tensor variable of root_host's scope, by name, into the same
        named scope on every host (created or resized as needed)."""
        self._check_root(scope is None, root_host, "bcast_scope")
        names = sorted(v.name for v in scope.vars() if v.dtype is not None) \
            if self.host == root_host and self.local_rank == 0 else None
        for name in self._from_root(names, root_host):
            self.bcast(scope.var(name), root_host, timeout)

    def first_host(self, have: bool) -> Optional[int]:
        """The lowest host whose `have` is true (None when none): where a
        restarted job re-seeds the others from."""
        h = self.comm.allreduce(self.host if have else self.hosts, op=self._MPI.MIN)
        return None if h == self.hosts else h

    def host_scope(self, name: str) -> tuple:
        """(the host's named scope NAME, whether it was there): local rank 0
        makes it when missing, the others open it after."""
        scope, had = None, True
        if self.local_rank == 0:
            try:
                scope = self.segment.open(name)
            except _pdshm.NotFound:
                had, scope = False, self.segment.root.new_scope(name)
        had = self.local_comm.bcast(had, root=0)
        return (scope if scope is not None else self.segment.open(name)), had

    # ---- the end -------------------------------------------------------------
    def close(self) -> None:
        """Leaves the group and detaches (the segment stays, with its named
        scopes); frees the communicators.  Collective over the job, as freeing
        a communicator is (once closed, a Job's close does nothing)."""
        if self.group is None:
            return
        self.group.leave()
        self.segment.detach()
        for op in self._half_ops.values():
            op.Free()
        for c in (self.cross_comm, self.local_comm):
            c.Free()
        self.group = None

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False
