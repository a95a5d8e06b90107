"""pdshm: PaddlePaddle's Scope / Variable / Tensor model in one POSIX
shared-memory segment, shared by the trainer processes of a host.

    import pdshm
    with pdshm.create("demo") as seg:               # starts small, grows
        params = seg.root.new_scope("params")       # named: published
        w = params.var("w")
        w.assign(numpy.zeros((3, 4), "float32"))    # copy in, resizing
        a = w.numpy()                               # zero-copy view
        t = torch.from_dlpack(w)                    # zero-copy, too
        with seg.root.local() as step:              # anonymous, per step
            step.var("tmp").resize("bfloat16", (8,))
    pdshm.unlink("demo")

Segments: create(), attach(), unlink(); Segment (.root .open .stats .check
.reap .unique_name .detach, introspection: .info .scopes .vars_of .procs
.locks .alloc).  Scopes: Scope (a handle).  Variables: Var (a weak handle:
pdshm.Stale once erased), Var.lock() -> VarLock, Var.ref() -> VarRef.
Seed 003: ScopeStack.  Trainer groups:
Segment.group() -> Group (.barrier .allreduce .leave), Var.wait();
pdshm.torch (imports torch): DataParallel (any torch.optim optimizer), Adam,
share_parameters.
pdshm.distributed (imports torch): the torch.distributed backend "pdshm"
(init_process_group("pdshm") after `import pdshm.distributed`).
pdshm.mpi (imports mpi4py): Job, one segment per host and MPI between hosts
(hierarchical allreduce, broadcast of parameters); a Job is also a group for
DataParallel.
Errors: Error (an OSError) and its subclasses that are also builtins
(NotFound is a KeyError, Exists a FileExistsError, ...).

Views (numpy(), np.asarray, memoryview, torch.from_dlpack) pin the tensor's
bytes: they stay valid after an erase, a resize or a detach, in any process.
bfloat16 shows as uint16 (raw bits) to numpy and memoryview, as
torch.bfloat16 through DLPack.

fork(): a Segment, a named Scope and a Var re-attach by name in the child on
first use; an anonymous Scope raises Forked there.  Segment, named Scope and
Var of a named scope pickle (multiprocessing with fork, forkserver, spawn).
"""
import atexit as _atexit
import os as _os

from . import _pdshm
from ._pdshm import (AllocClass, AllocInfo, BadSegment, Error, Exists, Forked, Group,
                     InvalidArgument, LockInfo, NoMemory, NotFound, PeerDied,
                     PermissionDenied, Pin, ProcInfo, Scope, ScopeInfo, Segment,
                     SegInfo, Stale, Stats, TimedOut, Var, VarInfo, VarLock, VarRef,
                     WrongType, attach, create, strerror, unlink)
from ._stack import ScopeStack

__all__ = [
    "create", "attach", "unlink", "strerror",
    "Segment", "Scope", "Var", "VarLock", "VarRef", "Pin", "Group", "ScopeStack",
    "Error", "NotFound", "Exists", "NoMemory", "InvalidArgument", "PermissionDenied",
    "TimedOut", "WrongType", "Stale", "BadSegment", "Forked", "PeerDied",
    "Stats", "SegInfo", "ScopeInfo", "VarInfo", "ProcInfo", "LockInfo", "AllocInfo",
    "AllocClass",
]

# Views that exist at fork() stay backed in the child: the hook attaches the
# segment again there and takes over each pin (pdshm_pin_inherit).
_os.register_at_fork(after_in_child=_pdshm._after_fork_child)
# A normal exit detaches (views still alive keep their mapping to the end), so
# the process slot is freed at once rather than by a reaper.  atexit runs it
# after the handlers registered later than this import.
_atexit.register(_pdshm._close_all)
