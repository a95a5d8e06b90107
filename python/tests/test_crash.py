"""Python trainers working on the same variables at once (creates, resizes,
views, locks, erases, renames and local scopes): when they finish, and when
they are killed (SIGKILL) at arbitrary moments and reaped, the segment checks
clean."""
import random
import time

import pytest

import workers

ROUNDS = 6


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_trainer_killed_mid_work_leaves_a_segment_that_checks_clean(seg, children, round_):
    seg.root.new_scope("warm").release()  # the root's index as it will be with p
    seg.root.unlink("warm")
    baseline = seg.stats()
    p = seg.root.new_scope("p")
    seed = random.randrange(1 << 30)
    kids = [children("spawn", workers.churn, seg.name, seed + i) for i in range(2)]
    for k in kids:
        k.expect("started")
    time.sleep(0.05 + 0.05 * round_)  # the point: kill them at some moment of their work
    for k in kids:
        k.kill()
    assert seg.reap() == 2, f"seed {seed}"
    assert seg.check() == [], f"seed {seed}"
    st = seg.stats()
    assert (st.procs_alive, st.procs_dead) == (1, 0)
    assert st.scopes == baseline.scopes + 1, f"seed {seed}"  # p; their local scopes went
    for v in p.vars():  # what they left is whole and usable
        v.resize("int8", (1,))
        p.erase(v.name)
    p.release()
    seg.root.unlink("p")
    assert seg.stats().used == baseline.used, f"seed {seed}"


def test_trainers_racing_on_the_same_variables_leave_a_clean_segment(seg, children):
    seg.root.new_scope("p")
    seed = random.randrange(1 << 30)
    kids = [children("spawn", workers.churn, seg.name, seed + i, 20000) for i in range(2)]
    for k in kids:
        k.expect("started")
    assert [k.result() for k in kids] == [{}, {}], f"seed {seed}"
    assert seg.check() == [], f"seed {seed}"
    st = seg.stats()
    assert (st.procs_alive, st.procs_dead) == (1, 0)
