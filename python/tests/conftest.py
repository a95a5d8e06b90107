"""Fixtures of the pdshm test suite.

Each test gets its own segment name, "pyt<pid>-<n>-<test>", removed after the
test even when it fails; at the end of the session no segment of this run may
be left in /dev/shm, and at its start those of earlier runs that were killed
are removed.  Segments are small (SEG_SIZE) because CI machines may
have a 64 MiB /dev/shm.
"""
import errno
import glob
import itertools
import os
import re
import threading
import time

import pytest

import pdshm
from procutil import TIMEOUT, Child

SEG_SIZE = 8 << 20
PREFIX = f"pyt{os.getpid()}"
_serial = itertools.count()


def unlink_quietly(name):
    """pdshm.unlink, where a segment already gone is not an error."""
    try:
        pdshm.unlink(name)
    except pdshm.Error as e:
        if e.errno != errno.ENOENT:
            raise


def _leftovers():
    return sorted(glob.glob(f"/dev/shm/pdshm.{PREFIX}-*"))


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_runs_that_died():
    """Removes the segments of earlier runs of this suite whose process is gone
    (a run killed by a timeout cannot clean up after itself), so that they do
    not pile up in a small /dev/shm."""
    for path in glob.glob("/dev/shm/pdshm.pyt*-*"):
        m = re.fullmatch(r"/dev/shm/pdshm\.pyt(\d+)-\d+-.*", path)
        if m and not _pid_alive(int(m.group(1))) and os.stat(path).st_uid == os.getuid():
            os.unlink(path)


@pytest.fixture(scope="session", autouse=True)
def no_segment_left_behind():
    _sweep_runs_that_died()
    yield
    left = _leftovers()
    for path in left:
        os.unlink(path)
    assert not left, f"segments left in /dev/shm after the session: {left}"


@pytest.fixture
def seg_name(request):
    """A segment name of this test alone, unlinked afterwards."""
    test = re.sub(r"[^A-Za-z0-9._-]", "_", request.node.name)[:100]
    name = f"{PREFIX}-{next(_serial)}-{test}"
    yield name
    unlink_quietly(name)


SPACE_WAIT_S = 120  # seconds create_waiting() waits for room in /dev/shm


def create_waiting(name, size, **kw):
    """pdshm.create(name, size=size, ...), waiting up to SPACE_WAIT_S for
    room while /dev/shm is full (ENOSPC): make check runs this suite beside
    the C tests (-j2), and in a 64 MiB /dev/shm (CI's Docker-sized step) what
    they hold at the moment can leave too little."""
    deadline = time.monotonic() + SPACE_WAIT_S
    while True:
        try:
            return pdshm.create(name, size=size, **kw)
        except pdshm.NoMemory as e:
            if e.code != -errno.ENOSPC or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture
def seg(seg_name):
    """A fresh segment of SEG_SIZE that does not grow (max_size=SEG_SIZE), created
    by this process and detached afterwards."""
    s = create_waiting(seg_name, SEG_SIZE, max_size=SEG_SIZE)
    yield s
    try:
        s.detach()
    except pdshm.Error:
        pass


@pytest.fixture
def lock_taker():
    """take(var, exclusive, timeout): True when a thread took var's lock (and let
    it go) within timeout.  A thread still waiting is joined when the test ends,
    before its segment is detached."""
    threads = []

    def take(var, exclusive=True, timeout=10.0):
        got = threading.Event()

        def run():
            with var.lock(exclusive=exclusive):
                got.set()

        t = threading.Thread(target=run, daemon=True)
        threads.append(t)
        t.start()
        t.join(timeout)
        return got.is_set()

    yield take
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a lock taker is still waiting"


@pytest.fixture
def children():
    """Starts Child processes; kills any still running when the test ends."""
    started = []

    def start(method, fn, *args):
        c = Child(method, fn, *args)
        started.append(c)
        return c

    yield start
    for c in started:
        c.kill()
