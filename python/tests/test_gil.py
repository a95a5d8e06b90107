"""Calls that block release the GIL: while one Python thread waits for a
variable's lock (or for a new version), another thread of the same
interpreter keeps running.  The waiting happens in a fresh interpreter, so
that a module that kept the GIL makes this test time out instead of hanging
the suite."""
import select
import subprocess
import sys

import procutil

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
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        proc.kill()
        _, err = proc.communicate(timeout=procutil.TIMEOUT)
        raise AssertionError(f"no output within {timeout} s (a waiting thread kept the GIL?)\n{err}")
    return proc.stdout.readline().split()


def start_waiter(code, seg):
    return subprocess.Popen([sys.executable, "-c", code, seg.name], env=procutil.child_env(),
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
            proc.communicate(timeout=procutil.TIMEOUT)
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
                proc.communicate(timeout=procutil.TIMEOUT)
