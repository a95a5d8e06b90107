"""Threads of one process share an attachment: each works in its own local
scope and on shared variables at once, and the segment stays consistent."""
import threading

import numpy as np

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
