"""Type stubs of the C extension pdshm._pdshm (see pdshm/__init__.py)."""
from __future__ import annotations

from typing import Any, List, Optional, Tuple, Union

NAME_MAX: int
NDIM_MAX: int
SEG_NAME_MAX: int
# The library's codes, negative as in C (compare with Error.code).
EPERM: int
ENOENT: int
EIO: int
EAGAIN: int
ENOMEM: int
EACCES: int
EBUSY: int
EEXIST: int
EINVAL: int
EMFILE: int
EFBIG: int
ENOSPC: int
EROFS: int
ERANGE: int
EDEADLK: int
ENAMETOOLONG: int
ENOLCK: int
ENOSYS: int
EOVERFLOW: int
EUSERS: int
ESTALE: int
ENOTRECOVERABLE: int
EBADSEG: int
ETYPE: int
EFORKED: int

# dtype: "bool" "uint8" "int8" "int16" "int32" "int64" "float16" "bfloat16" "float32"
# "float64", "torch.<name>", a torch dtype, or anything numpy.dtype() accepts but
# None; a numpy dtype (or array) of the other byte order is ValueError.
DType = Any
Shape = Union[int, Tuple[int, ...], List[int]]
# Arguments.  Names are str (TypeError for bytes or another type; ValueError for
# a NUL, a surrogate, or too long); counts, ranks and ids are ints (TypeError for
# a float or another type; ValueError when negative or out of range, beyond 64
# bits included).  A timeout is None (wait without a limit) or finite seconds
# >= 0 (0: do not wait); NaN, a negative or an infinite timeout is ValueError,
# another type TypeError.  A refused call changes nothing.

class Error(OSError):
    code: int
class NotFound(Error, KeyError): ...
class Exists(Error, FileExistsError): ...
class NoMemory(Error, MemoryError): ...
class InvalidArgument(Error, ValueError): ...
class PermissionDenied(Error, PermissionError): ...
class TimedOut(Error, TimeoutError): ...
class WrongType(Error, TypeError): ...
class Stale(Error): ...
class BadSegment(Error): ...
class Forked(Error): ...
class PeerDied(Error): ...

class Stats(Tuple[int, ...]):
    size: int
    used: int
    free: int
    scopes: int
    vars: int
    tensor_bytes: int
    procs_alive: int
    procs_dead: int

class SegInfo(Tuple[Any, ...]):
    size: int
    arena: int
    layout_version: int
    max_procs: int
    max_locks: int
    creator_pid: int
    creator_uid: int
    daemon_pid: int
    created_ns: int
    daemon_beat_ns: int
    reaped: int
    poisoned: bool
    max_size: int
    first_size: int
    growths: int

class ScopeInfo(Tuple[Any, ...]):
    id: int
    parent_id: int
    depth: int
    named: bool
    linked: bool
    last: bool
    name: str
    refs: int
    kids: int
    vars: int
    bytes: int
    tensor_bytes: int
    creator_pid: int
    nholders: int
    holders: Tuple[int, ...]
    handles: int
    created_ns: int

class VarInfo(Tuple[Any, ...]):
    scope_id: int
    gen: int
    name: str
    label: str
    type: str                        # "empty" | "tensor"
    dtype: Optional[str]
    shape: Optional[Tuple[int, ...]]
    nbytes: int
    bytes: int
    version: int
    lock_state: str                  # "free" | "shared" | "exclusive"
    lock_readers: int
    lock_holder_pid: int
    lock: int
    readers: Tuple[str, ...]
    writers: Tuple[str, ...]

class ProcInfo(Tuple[Any, ...]):
    slot: int
    pid: int
    state: str                       # "alive" | "dead" | "reaping"
    reaper_pid: int
    attach_ns: int
    handles: int
    bytes_held: int

class LockInfo(Tuple[Any, ...]):
    index: int
    kind: str                        # "heap" | "scope" | "var"
    scope_id: int
    var: Optional[str]
    held: bool
    holder_pid: int
    acquisitions: int
    contended: int
    wait_ns: int
    owner_died: int
    unrecoverable: bool

class AllocClass(Tuple[int, ...]):
    block_size: int
    used: int
    cached: int

class AllocInfo(Tuple[Any, ...]):
    arena: int
    used: int
    free: int
    cached: int
    blocks_used: int
    blocks_free: int
    blocks_cached: int
    largest_free: int
    large_used: int
    large_blocks: int
    punched: int
    rebuilds: int
    fragmentation: float
    scope_bytes: int
    var_bytes: int
    name_bytes: int
    table_bytes: int
    tensor_bytes: int
    handle_bytes: int
    oplist_bytes: int
    hold_bytes: int
    raw_bytes: int
    classes: Tuple[AllocClass, ...]

class Segment:
    """An attachment; `with` detaches; pickles by name."""
    @property
    def name(self) -> str: ...
    @property
    def root(self) -> Scope: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    def open(self, path: str) -> Scope: ...
    def stats(self) -> Stats: ...
    def check(self) -> List[str]: ...
    def reap(self) -> int: ...
    def unique_name(self, prefix: str) -> str: ...
    def detach(self) -> None: ...
    def info(self) -> SegInfo: ...
    def scopes(self) -> List[ScopeInfo]: ...
    def vars_of(self, scope_id: int = 0) -> List[VarInfo]: ...
    def procs(self) -> List[ProcInfo]: ...
    def locks(self) -> List[LockInfo]: ...
    def alloc(self) -> AllocInfo: ...
    # with the trainer-groups API only
    def group(self, name: str, size: int, rank: Optional[int] = None) -> Group: ...
    def __enter__(self) -> Segment: ...
    def __exit__(self, *exc: Any) -> bool: ...

class Scope:
    """A handle owning one reference; `with` releases; a named scope pickles by path."""
    @property
    def name(self) -> Optional[str]: ...
    @property
    def path(self) -> Optional[str]: ...
    @property
    def parent(self) -> Optional[Scope]: ...
    @property
    def segment(self) -> Segment: ...
    def new_scope(self, name: Optional[str] = None) -> Scope: ...
    def local(self) -> Scope: ...
    def var(self, name: str) -> Var: ...
    def create_var(self, name: str) -> Var: ...
    def new_var(self) -> Var: ...
    def find_var(self, name: str) -> Optional[Var]: ...
    def find_local_var(self, name: str) -> Optional[Var]: ...
    def __getitem__(self, name: str) -> Var: ...
    def __contains__(self, name: object) -> bool: ...
    def erase(self, name: str) -> None: ...
    def rename(self, old: str, new: str) -> None: ...
    def vars(self, label: Optional[str] = None) -> List[Var]: ...
    def unlink(self, name: str) -> None: ...
    def drop_kids(self) -> None: ...
    def release(self) -> None: ...
    def __enter__(self) -> Scope: ...
    def __exit__(self, *exc: Any) -> bool: ...

# Present when libpdshm has the trainer-groups API (pdshm.h defines PDSHM_GROUP_MAX).
class Group:
    """A membership of a trainer group (Segment.group()); `with` leaves."""
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def left(self) -> bool: ...
    def barrier(self, timeout: Optional[float] = None) -> None: ...
    # var: a Var, or a whole-tensor view of one (numpy array, torch tensor) made
    # through this Segment object
    def allreduce(self, var: Union[Var, Any], op: str = "sum",
                  timeout: Optional[float] = None) -> None: ...
    # the allreduce of a writable C-contiguous buffer in this process's memory
    # (numpy array: float16, float32, float64, int32, int64) through staging, a
    # Var of this member's holding at least the buffer's bytes
    def allreduce_private(self, buffer: Any, staging: Var, op: str = "sum",
                          timeout: Optional[float] = None) -> None: ...
    # the first half of allreduce: this member's share of its own tensor
    # holds the op over every member's same share; the rest is left as it was
    def reduce_scatter(self, var: Union[Var, Any], op: str = "sum",
                       timeout: Optional[float] = None) -> None: ...
    # the second half: each member's share copied into every other's tensor
    def allgather(self, var: Union[Var, Any], timeout: Optional[float] = None) -> None: ...
    # this member's share of n elements: (n * rank // size, n * (rank + 1) // size)
    def share(self, n: int) -> Tuple[int, int]: ...
    # a collective takes `view` itself (a whole-tensor view of a variable of this
    # Segment object): True; anything else: False
    def holds(self, view: Any) -> bool: ...
    def leave(self) -> None: ...
    def __enter__(self) -> Group: ...
    def __exit__(self, *exc: Any) -> bool: ...

class Pin:
    """A pinned tensor buffer (flat bytes); what every view holds."""
    @property
    def nbytes(self) -> int: ...
    @property
    def version(self) -> int: ...

class VarLock:
    """A held variable lock; `with` or release()."""
    @property
    def held(self) -> bool: ...
    @property
    def exclusive(self) -> bool: ...
    def release(self) -> None: ...
    def __enter__(self) -> VarLock: ...
    def __exit__(self, *exc: Any) -> bool: ...

class VarRef:
    """Var.ref(): call for the Var, or None once stale."""
    def __call__(self) -> Optional[Var]: ...

class Var:
    """A weak handle on a variable (Stale once erased).  Views: buffer protocol
    (bfloat16 as 'H', raw bits), __array_interface__ ('<u2' for bfloat16),
    DLPack (bfloat16 as torch.bfloat16, bool as uint8)."""
    @property
    def name(self) -> str: ...
    label: str  # assign None or "" to clear
    @property
    def readers(self) -> List[str]: ...
    @property
    def writers(self) -> List[str]: ...
    @property
    def version(self) -> int: ...
    @property
    def dtype(self) -> Optional[str]: ...
    @property
    def shape(self) -> Optional[Tuple[int, ...]]: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def key(self) -> Tuple[int, int]: ...
    @property
    def segment(self) -> Segment: ...
    @property
    def scope_path(self) -> Optional[str]: ...
    @property
    def __array_interface__(self) -> dict: ...
    def add_reader(self, op: str) -> None: ...
    def add_writer(self, op: str) -> None: ...
    def lock(self, exclusive: bool = True) -> VarLock: ...
    def ref(self) -> VarRef: ...
    # with the trainer-groups API only: the new version
    def wait(self, seen: int, timeout: Optional[float] = None) -> int: ...
    def resize(self, dtype: DType, shape: Shape) -> None: ...
    def assign(self, array: Any) -> None: ...
    def numpy(self) -> Any: ...
    def __dlpack__(self, *, stream: None = None, max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None,
                   copy: Optional[bool] = None) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def __buffer__(self, flags: int) -> memoryview: ...

def create(name: str, size: Optional[int] = None, max_procs: Optional[int] = None,
           mode: Optional[int] = None, max_size: Optional[int] = None) -> Segment: ...
def attach(name: str, readonly: bool = False, shared_users: bool = False) -> Segment: ...
def unlink(name: str) -> None: ...
def strerror(code: int) -> str: ...
def _after_fork_child() -> None: ...
