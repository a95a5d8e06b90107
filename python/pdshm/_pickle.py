"""How pdshm objects come back from a pickle (multiprocessing, spawn).

A Segment pickles as its name and flags, a named Scope as (segment, path), a
Var of a named scope as (segment, scope path, name).  Unpickling attaches by
name; the Segments made by unpickling are shared within a process (one
attachment, one process slot, however many objects arrive), and a detached
one is replaced by a fresh attachment.
"""
from __future__ import annotations

import errno
import os
import threading
import weakref

from . import _pdshm

_lock = threading.Lock()
_segments: "weakref.WeakValueDictionary[tuple, _pdshm.Segment]" = weakref.WeakValueDictionary()


def _after_fork_in_child() -> None:
    # Another thread may have held the lock at fork(): the child starts afresh.
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def segment(name: str, readonly: bool = False, shared_users: bool = False) -> _pdshm.Segment:
    """The Segment NAME attached with these flags: a live one this process
    already unpickled, or a new attachment."""
    key = (name, bool(readonly), bool(shared_users))
    with _lock:
        seg = _segments.get(key)
        if seg is None or seg.closed:
            seg = _pdshm.attach(name, readonly=readonly, shared_users=shared_users)
            _segments[key] = seg
        return seg


def scope(seg: _pdshm.Segment, path: str) -> _pdshm.Scope:
    """The named scope at path (opened again)."""
    return seg.open(path)


def var(seg: _pdshm.Segment, path: str, name: str) -> _pdshm.Var:
    """The variable NAME of the scope at path; NotFound when it is gone."""
    s = seg.open(path)
    try:
        v = s.find_local_var(name)
    finally:
        s.release()
    if v is None:
        e = _pdshm.NotFound(errno.ENOENT, "no such variable: %r in scope %r" % (name, path))
        e.code = _pdshm.ENOENT
        raise e
    return v
