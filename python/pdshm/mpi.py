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

Job.allreduce(x, op), which is pdshm_mpi_allreduce: (1) the host's group
reduce-scatters the local tensors in place in the segment: local rank i's
shard [i n/L, (i+1) n/L) (Group.share) of its own tensor holds the host's
result; (2) the hosts agree on the outcome and on the call (dtype, size,
op) in one small MPI allreduce, so that a host that failed does not leave
the others waiting; (3) local rank i allreduces its shard of its own tensor
across hosts, MPI reading and writing the segment's memory; (4) the group
allgathers the shards into every local tensor.  Every process hands MPI 1/L
of the bytes of a flat allreduce, and reads and writes about 2n elements of
host memory (1: n + n/L, 4: n).
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

The work is libpdshm-mpi's, the one implementation of all this: Job wraps
its job (pdshm_mpi_open, pdshm_mpi_allreduce, pdshm_mpi_bcast_var, ...)
through the extension pdshm._pdshm_mpi, which takes the communicator from
mpi4py's C API (mpi4py.h) and the variable behind a Var or a view from
pdshm._pdshm's, and releases the GIL in every call.  That extension is built
with the package by configure and make where MPI and mpi4py (with its
header) are found; in a package built without it (pip) Job raises
ImportError.
"""
from __future__ import annotations

import math as _math
import operator as _operator
from typing import Any, Optional

from . import _pdshm

GROUP = "pdshm-mpi"                      # PDSHM_MPI_GROUP
LOCAL_SIZE_ENV = "PDSHM_MPI_LOCAL_SIZE"  # PDSHM_MPI_LOCAL_SIZE_ENV
_OPS = ("sum", "mean", "max", "min")


def _extension() -> Any:
    """pdshm._pdshm_mpi, imported at the first Job (importing it starts MPI,
    as importing mpi4py.MPI does)."""
    try:
        from . import _pdshm_mpi
    except ImportError as e:
        raise ImportError("pdshm.mpi needs the extension pdshm._pdshm_mpi (libpdshm-mpi "
                          "and mpi4py's C API), which configure and make build where MPI "
                          f"and mpi4py are found; this pdshm has none ({e})") from e
    return _pdshm_mpi


def _error(cls: type, code: int, what: str) -> _pdshm.Error:
    """cls(errno, message) with .code, as the extension raises them."""
    exc = cls(-code, f"{_pdshm.strerror(code)}: {what}")
    exc.code = code
    return exc


def _invalid(what: str) -> _pdshm.Error:
    return _error(_pdshm.InvalidArgument, _pdshm.EINVAL, what)


def _count(what: str, x: Any, least: int) -> int:
    """x as an int >= least: TypeError for no int, InvalidArgument below."""
    if isinstance(x, bool):
        raise TypeError(f"{what} must be an int, not bool")
    n = _operator.index(x)
    if n < least:
        raise _invalid(f"{what} must be at least {least}, not {n}")
    return n


def _seconds(what: str, x: Any) -> float:
    """x as finite seconds >= 0: TypeError for no number, InvalidArgument for
    NaN, a negative or an infinite one (as the group's timeouts)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"{what} must be seconds (int or float), not {type(x).__name__}")
    if not (0 <= x < _math.inf):
        raise _invalid(f"{what} must be finite seconds >= 0, not {x!r}")
    return float(x)


def _ns(seconds: float) -> int:
    """Seconds as libpdshm-mpi's nanoseconds (beyond 4e9 s: no limit in practice)."""
    return (1 << 62) if seconds >= 4e9 else int(seconds * 1e9)


def _timeout_ns(timeout: Optional[float]) -> int:
    """A timeout argument: None (no limit: -1) or seconds >= 0, as the group's."""
    return -1 if timeout is None else _ns(_seconds("timeout", timeout))


def _root(root_host: Any) -> int:
    """root_host as an int; -1 (out of range: a bad argument that every
    process then refuses alike) for no int or one beyond an int."""
    if isinstance(root_host, bool):
        return -1
    try:
        r = _operator.index(root_host)
    except TypeError:
        return -1
    return r if 0 <= r < 1 << 31 else -1


class Job:
    """This process's place in an MPI job of hosts (see the module's
    docstring): .host .hosts .local_rank .local_size .segment (this
    process's attachment of its host's segment) .local_comm .cross_comm
    (rank = host) .bytes_sent; .rank and .size are the local ones, so that a
    Job serves as pdshm.torch.DataParallel's group.  `with` closes.
    Collective: every method is called by every process concerned (the host
    or the job), in the same order; one thread at a time uses a Job (another
    thread's call meanwhile raises pdshm.Error, EBUSY)."""

    def __init__(self, prefix: str, comm: Any = None, local_size: Optional[int] = None,
                 size: Optional[int] = None, replace_timeout: float = 2.0) -> None:
        # checked before MPI is touched: every process refuses the same way
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
        if local_size is not None:
            local_size = _count("local_size", local_size, 1)
        if size is not None:
            size = _count("size", size, 1)
        replace_timeout = _seconds("replace_timeout", replace_timeout)
        ext = _extension()
        from mpi4py import MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.replace_timeout = replace_timeout
        self._ops = {op: getattr(ext, op.upper()) for op in _OPS}
        self._job = ext.open(self.comm, prefix, local_size or 0, size or 0, _ns(replace_timeout))
        j = self._job
        self.host, self.hosts = j.host, j.hosts
        self.local_rank, self.local_size = j.local_rank, j.local_size
        self.local_comm, self.cross_comm = j.local_comm, j.cross_comm
        # Python's own attachment, for the scopes and variables of this host
        failure, self.segment = None, None
        try:
            self.segment = _pdshm.attach(f"{prefix}.h{self.host}")
        except _pdshm.Error as e:
            failure = e
        # every process opens, or none does
        if self.comm.allreduce(failure is not None, op=MPI.LOR):
            if self.segment is not None:
                self.segment.detach()
            j.close()
            raise failure or _error(_pdshm.Error, _pdshm.EIO, "another process could not "
                                    "attach its host's segment")

    # ---- a Group's face, for DataParallel ------------------------------------
    @property
    def rank(self) -> int:
        return self.local_rank

    @property
    def size(self) -> int:
        return self.local_size

    @property
    def bytes_sent(self) -> int:
        """Bytes this process handed to MPI as payload of allreduces and
        broadcasts since the job opened (pdshm_mpi_bytes_sent)."""
        return self._job.bytes_sent

    def barrier(self, timeout: Optional[float] = None) -> None:
        """A barrier of the host's group, with the death path."""
        self._job.barrier(_timeout_ns(timeout))

    # ---- allreduce, broadcast -------------------------------------------------
    def allreduce(self, x: Any, op: str = "sum", timeout: Optional[float] = None) -> None:
        """Every process's tensor x (a Var of its host's segment, or a whole
        view of one) becomes op over every process's x.  Raises what the
        group raises (InvalidArgument at every process for calls that differ,
        within a host or between hosts, and for an x that names no variable
        of the host's segment at any process), PeerDied after a
        replacement."""
        if not isinstance(op, str) or op not in _OPS:
            raise _invalid(f"op {op!r} is not one of {_OPS}")
        self._job.allreduce(self.segment, x, self._ops[op], _timeout_ns(timeout))

    def bcast(self, var: Any, root_host: int = 0, timeout: Optional[float] = None) -> None:
        """var (the same variable for every process of a host: a parameter in
        a named scope) becomes root_host's tensor on every host; each local
        rank carries 1/L of the bytes.  InvalidArgument at every process when
        a process passed None, another variable than its host's others, or
        another root_host (or one out of range); WrongType at every process
        when the root's var holds no tensor."""
        self._job.bcast(self.segment, var, _root(root_host), _timeout_ns(timeout))

    def bcast_scope(self, scope: Any, root_host: int = 0, timeout: Optional[float] = None) -> None:
        """Every tensor variable of root_host's scope, by name, into the same
        named scope on every host (created or resized as needed)."""
        path = scope.path if isinstance(scope, _pdshm.Scope) else None
        self._job.bcast_scope(path, _root(root_host), _timeout_ns(timeout))

    def first_host(self, have: bool) -> Optional[int]:
        """The lowest host whose `have` is true (None when none): where a
        restarted job re-seeds the others from."""
        return self._job.first_host(bool(have))

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
        scopes); frees the communicators (.local_comm and .cross_comm become
        MPI.COMM_NULL).  Collective over the job, as freeing a communicator
        is (once closed, a Job's close does nothing)."""
        if self._job.closed:
            return
        try:
            self._job.close()  # EBUSY while another thread is in a call: nothing done
        finally:
            if self._job.closed:
                self.segment.detach()

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False
