"""Threads of one process share an attachment: each works in its own local
scope and on shared variables at once, and the segment stays consistent."""
import threading

import numpy as np
import pytest

import procutil

THREADS = 4
ROUNDS = 200


def test_threads_working_in_their_own_local_scopes_leave_nothing_behind(seg):
    p = seg.root.new_scope("p")
    p.var("shared").resize("int64", (THREADS,))
    before = seg.stats()
    errors = []

    def work(i):
        try:
            for r in range(ROUNDS):
                with p.local() as s:
                    v = s.var(f"t{i}")
                    v.resize("float32", (r % 50 + 1,))
                    v.numpy()[:] = i
                    assert (s.find_var(f"t{i}").numpy() == i).all()
                    assert s.find_var("shared") is not None
                with p["shared"].lock():
                    p["shared"].numpy()[i] += 1
        except BaseException as e:  # reported below, with the thread
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    np.testing.assert_array_equal(p["shared"].numpy(), [ROUNDS] * THREADS)
    after = seg.stats()
    assert (after.scopes, after.vars) == (before.scopes, before.vars)
    assert seg.check() == []


def test_threads_creating_variables_in_one_scope_get_distinct_ones(seg):
    p = seg.root.new_scope("p")
    made = [[] for _ in range(THREADS)]

    def work(i):
        for _ in range(50):
            made[i].append(p.new_var().name)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    every = [n for m in made for n in m]
    assert len(every) == THREADS * 50 == len(set(every))
    assert sorted(v.name for v in p.vars()) == sorted(every)


# Calls release the GIL while the library works: another thread may release
# the very handle a call uses, or detach the segment, meanwhile.  In a fresh
# interpreter, so that a crash fails this test and not the suite.
CHAOS = r"""
import threading, time
import pdshm

seg = pdshm.attach(NAME)
shared = [seg.open("p") for _ in range(8)]
stop = threading.Event()
calls = [0] * THREADS
views = []

def work(i):
    while not stop.is_set():
        h = shared[calls[i] % len(shared)]
        calls[i] += 1
        try:
            with h.local() as k:
                k.var("x").resize("float32", (4,))
                a = k["x"].numpy()
                if KEEP:
                    views.append(a)
            h.var(f"v{i}")
            h.vars()
            h.erase(f"v{i}")
            h.parent
            h.name
            f"v{i}" in h
        except pdshm.Error:  # released, or detached: refused, never a crash
            pass

threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
for t in threads:
    t.start()
for h in shared:
    time.sleep(0.02)
    h.release()
shared[:] = [seg.open("p") for _ in range(8)]
time.sleep(0.1)
seg.detach()
time.sleep(0.1)
stop.set()
for t in threads:
    t.join(30)
for v in views:  # views outlive the detach
    v.sum()
print(sum(calls), len(views))
"""


@pytest.mark.parametrize("keep_views", [True, False])
def test_handles_released_and_detached_under_running_calls_crash_nothing(seg, keep_views):
    """With views kept, detach() leaves the mapping to the last; without, the
    attachment goes as soon as no call holds it."""
    p = seg.root.new_scope("p")
    for _ in range(3):
        out = procutil.run_python(CHAOS.replace("NAME", repr(seg.name))
                                  .replace("THREADS", str(THREADS))
                                  .replace("KEEP", str(keep_views)), timeout=60)
        calls, views = map(int, out.split())
        assert calls > THREADS and (views > 0) == keep_views
    assert [s.name for s in seg.scopes()] == ["", "p"]  # each local scope went
    assert seg.check() == []
    assert next(s for s in seg.scopes() if s.name == "p").handles == 1  # ours: p
    p.release()
