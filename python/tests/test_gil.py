"""Calls that block release the GIL: while one Python thread waits for a
variable's lock (or for a new version), another thread of the same
interpreter keeps running.  The waiting happens in a fresh interpreter, so
that a module that kept the GIL makes this test time out instead of hanging
the suite."""
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import procutil

STOP_TRIES_S = 60  # stop_holding_scope_lock's bound: it usually takes a few tries

WAITER = r"""
import sys, threading, time
import pdshm

seg = pdshm.attach(sys.argv[1])
v = seg.open("p")["w"]
started, got = threading.Event(), threading.Event()

def take():
    started.set()
    with v.lock():
        got.set()

t = threading.Thread(target=take, daemon=True)
t.start()
started.wait(10)
n, end = 0, time.monotonic() + 0.3
while time.monotonic() < end:
    n += 1
print("spun", n, got.is_set(), flush=True)
sys.stdin.readline()  # the test has let the lock go
t.join(10)
print("taken", got.is_set(), flush=True)
seg.detach()
"""

VERSION_WAITER = r"""
import threading, time
import pdshm

seg = pdshm.attach(NAME)
v = seg.open("p")["w"]
seen = v.version
started, woke = threading.Event(), threading.Event()

def wait():
    started.set()
    v.wait(seen, timeout=20)
    woke.set()

t = threading.Thread(target=wait, daemon=True)
t.start()
started.wait(10)
n, end = 0, time.monotonic() + 0.3
while time.monotonic() < end:
    n += 1
print("spun", n, woke.is_set())
with v.lock():
    pass
t.join(10)
print("woke", woke.is_set())
seg.detach()
"""


BARRIER_WAITER = r"""
import sys, threading, time
import pdshm

seg = pdshm.attach(sys.argv[1])
g = seg.group("g", 2, rank=0)
started, passed = threading.Event(), threading.Event()

def meet():
    started.set()
    g.barrier(timeout=20)
    passed.set()

t = threading.Thread(target=meet, daemon=True)
t.start()
started.wait(10)
n, end = 0, time.monotonic() + 0.3
while time.monotonic() < end:
    n += 1
print("spun", n, passed.is_set(), flush=True)
t.join(20)
print("passed", passed.is_set(), flush=True)
g.leave()
seg.detach()
"""


def readline_within(proc, timeout):
    """The next line proc prints, split; AssertionError after timeout seconds.
    A thread reads the lines (select() would miss those already buffered)."""
    if not hasattr(proc, "lines"):
        proc.lines = queue.Queue()
        threading.Thread(target=lambda: [proc.lines.put(line) for line in proc.stdout],
                         daemon=True).start()
    try:
        return proc.lines.get(timeout=timeout).split()
    except queue.Empty:
        proc.kill()
        proc.wait(procutil.TIMEOUT)
        err = proc.stderr.read()
        raise AssertionError(f"no output within {timeout} s (a waiting thread kept the GIL?)\n{err}")


def start_waiter(code, seg, *args):
    return subprocess.Popen([sys.executable, "-c", code, seg.name, *args], env=procutil.child_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_thread_waiting_for_a_lock_lets_other_threads_run(seg):
    v = seg.root.new_scope("p").var("w")
    with v.lock():
        proc = start_waiter(WAITER, seg)
        try:
            word, spins, got = readline_within(proc, 20)
            assert word == "spun" and int(spins) > 0
            assert got == "False"  # it was really waiting for our lock
        except BaseException:
            proc.kill()
            proc.wait(procutil.TIMEOUT)
            raise
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert readline_within(proc, 20) == ["taken", "True"]
    assert proc.wait(procutil.TIMEOUT) == 0


def test_a_thread_waiting_for_a_version_lets_other_threads_run(seg):
    seg.root.new_scope("p").var("w")
    out = procutil.run_python(VERSION_WAITER.replace("NAME", repr(seg.name)), timeout=20)
    spun, woke = (line.split() for line in out.splitlines())
    assert spun[0] == "spun" and int(spun[1]) > 0 and spun[2] == "False"
    assert woke == ["woke", "True"]


def test_a_thread_waiting_at_a_barrier_lets_other_threads_run(seg):
    with seg.group("g", 2, rank=1) as g:
        proc = start_waiter(BARRIER_WAITER, seg)
        try:
            word, spins, passed = readline_within(proc, 20)
            assert word == "spun" and int(spins) > 0
            assert passed == "False"  # it was really waiting for us
            g.barrier(timeout=20)
            assert readline_within(proc, 20) == ["passed", "True"]
            assert proc.wait(procutil.TIMEOUT) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(procutil.TIMEOUT)


# Scope and variable calls wait for the scope's lock, which another process
# may hold for as long as it is stopped (SIGSTOP) in the middle of a mutation.
MUTATOR = r"""
import select, sys
import pdshm

seg = pdshm.attach(sys.argv[1])
p = seg.open("p")
print("ready", flush=True)
while not select.select([sys.stdin], [], [], 0)[0]:
    p.var("m")
    p.erase("m")
seg.detach()
"""

SCOPE_WAITER = r"""
import sys, threading, time
import numpy  # imported now: not by the call, which would let the spinner run
import pdshm

seg = pdshm.attach(sys.argv[1])
p = seg.open("p")
kid = seg.open("p/kid")
w = p["w"]
views, handles = [], [seg.open("p")] if sys.argv[2] == "dealloc" else []
CALLS = {
    "open": lambda: handles.append(seg.open("p")),
    "parent": lambda: handles.append(kid.parent),
    "local": lambda: handles.append(p.local()),
    "dealloc": lambda: handles.clear(),
    "var": lambda: p.var("b"),
    "create_var": lambda: p.create_var("b"),
    "new_var": lambda: p.new_var(),
    "erase": lambda: p.erase("e"),
    "rename": lambda: p.rename("e", "f"),
    "new_scope": lambda: p.new_scope("k"),
    "unlink": lambda: p.unlink("kid"),
    "drop_kids": lambda: p.drop_kids(),
    "release": lambda: p.release(),
    "resize": lambda: w.resize("float32", (8,)),
    "assign": lambda: w.assign([1.0, 2.0]),
    "numpy": lambda: views.append(w.numpy()),
    "label": lambda: setattr(w, "label", "l"),
    "add_reader": lambda: w.add_reader("op"),
}
call = CALLS[sys.argv[2]]
THEN = {"": lambda: None, "release": p.release, "detach": seg.detach}[sys.argv[3]]
print("ready", flush=True)
sys.stdin.readline()  # the scope's lock is held now
started, done = threading.Event(), threading.Event()

def run():
    started.set()
    try:
        call()
    except pdshm.Error:  # detach() meanwhile may refuse the result
        pass
    done.set()

t = threading.Thread(target=run, daemon=True)
t.start()
started.wait(10)
n, end = 0, time.monotonic() + 0.3
while time.monotonic() < end:
    n += 1
print("spun", n, done.is_set(), flush=True)
THEN()  # while the call waits on the handle or segment it uses
print("then", flush=True)
sys.stdin.readline()  # the lock was let go
t.join(10)
print("done", done.is_set(), flush=True)
sys.stdin.readline()  # the test has counted the handles
seg.detach()
"""


def scope_lock_holder(seg, path):
    """The pid holding the lock of the scope at path, or None."""
    sid = next(s.id for s in seg.scopes() if s.name == path)
    held = [lk.holder_pid for lk in seg.locks()
            if lk.kind == "scope" and lk.scope_id == sid and lk.held]
    return held[0] if held else None


def stop_holding_scope_lock(seg, proc, path):
    """Stops proc (SIGSTOP) at a moment it holds the lock of the scope at path
    (it does about one time in three), trying for up to STOP_TRIES_S.  Each
    try comes after a pause of random length: on a busy machine, pauses of
    one length could fall in step with proc's loop and stop it at the same
    point of it every time."""
    deadline, tries = time.monotonic() + STOP_TRIES_S, 0
    while time.monotonic() < deadline:
        tries += 1
        os.kill(proc.pid, signal.SIGSTOP)
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            raise AssertionError(f"the mutator ended (wait status {status:#x})")
        if scope_lock_holder(seg, path) == proc.pid:
            return
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(random.uniform(0.0005, 0.003))  # time to run again before the next stop
    raise AssertionError(f"the mutator was never caught holding the scope's lock "
                         f"({tries} tries in {STOP_TRIES_S} s)")


@pytest.mark.parametrize("call", ["open", "parent", "local", "dealloc", "var", "create_var", "new_var", "erase", "rename",
                                  "new_scope", "unlink", "drop_kids", "release", "resize",
                                  "assign", "numpy", "label", "add_reader"])
def test_a_thread_waiting_for_a_scope_lock_lets_other_threads_run(seg, call):
    run_scope_waiter(seg, call, "")


@pytest.mark.parametrize("then", ["release", "detach"])
@pytest.mark.parametrize("call", ["var", "new_scope", "erase", "numpy", "parent"])
def test_a_handle_let_go_while_a_call_waits_on_it_goes_when_the_call_ends(seg, call, then):
    """Another thread's release() or detach() while a call waits with the GIL
    released leaves the handle the call uses (and the attachment) to the end
    of the call: they return at once (no other handle of the waiter needs the
    held lock) when the call is on p, and the waiter's handles on p are those
    it still holds (the parent it asked for) once the call ended."""
    kept = 1 if then == "release" and call == "parent" else 0
    run_scope_waiter(seg, call, then, then_at_once=call in ("var", "new_scope", "erase"),
                     waiter_handles=kept)


def run_scope_waiter(seg, call, then, then_at_once=True, waiter_handles=None):
    p = seg.root.new_scope("p")
    p.var("w").resize("float32", (2,))
    p.var("e")
    p.new_scope("kid")
    procs = [start_waiter(MUTATOR, seg), start_waiter(SCOPE_WAITER, seg, call, then)]
    mutator, waiter = procs
    stopped = False
    try:
        assert readline_within(mutator, 20) == ["ready"]
        assert readline_within(waiter, 20) == ["ready"]
        stop_holding_scope_lock(seg, mutator, "p")
        stopped = True
        waiter.stdin.write("go\n")
        waiter.stdin.flush()
        word, spins, done = readline_within(waiter, 20)
        assert word == "spun" and int(spins) > 0
        assert done == "False"  # it was really waiting for the stopped process
        if then_at_once:
            assert readline_within(waiter, 20) == ["then"]
        os.kill(mutator.pid, signal.SIGCONT)
        stopped = False
        if not then_at_once:
            assert readline_within(waiter, 20) == ["then"]
        waiter.stdin.write("go\n")
        waiter.stdin.flush()
        assert readline_within(waiter, 20) == ["done", "True"]
        if waiter_handles is not None:  # ours, the mutator's, the waiter's
            p_info = next(s for s in seg.scopes() if s.name == "p")
            assert p_info.handles == 2 + waiter_handles
        waiter.stdin.write("go\n")
        waiter.stdin.flush()
        mutator.stdin.write("stop\n")
        mutator.stdin.flush()
        assert waiter.wait(procutil.TIMEOUT) == 0
        assert mutator.wait(procutil.TIMEOUT) == 0
    finally:
        if stopped:
            os.kill(mutator.pid, signal.SIGCONT)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(procutil.TIMEOUT)
