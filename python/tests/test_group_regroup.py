"""Groups that shrink and grow (DESIGN section 4): Group.regroup() after
members were killed (kill -9) with no replacement, the survivors keeping the
order of their old ranks, a member killed during the regroup, newcomers taken
in through Segment.enlist(), allreduces right at the new size, a stopped
member that times the regroup out (nothing changed), and the errors (a
regroup beside a barrier, ValueError, needs to know who arrived first:
tests/test_group_regroup.c has it)."""
import os
import signal
import time

import numpy as np
import pytest

import pdshm
import workers

T = 20.0  # seconds: the timeout of every call that should succeed


def elastic(children, seg, size, rank, *steps, group="g", method="spawn"):
    return children(method, workers.elastic_member, seg.name, group, size, rank, list(steps))


def joined(kid):
    msg = kid.recv()
    assert msg[0] == "joined", msg
    return msg[1], msg[2]


def allreduce(seg, g, value):
    v = seg.root.var(f"mine{g.rank}.{os.getpid()}")
    v.assign(np.full(4, value, dtype=np.float64))
    g.allreduce(v, timeout=T)
    return v.numpy().tolist()


def admit(g, size):
    """Regroups until a newcomer made the group `size` (each regroup with
    nobody waiting passes at once)."""
    end = time.monotonic() + T
    while g.size < size and time.monotonic() < end:
        g.regroup(timeout=T)
        time.sleep(0.01)
    assert g.size == size


def test_killed_member_with_no_replacement_leaves_a_group_of_one(seg, children):
    with seg.group("g", 2, rank=0) as g:
        kid = elastic(children, seg, 2, 1, ("hang",))
        joined(kid)
        kid.kill()
        with pytest.raises(pdshm.PeerDied):
            g.barrier(timeout=T)
        assert g.regroup(timeout=T) == (0, 1)
        assert (g.rank, g.size) == (0, 1)
        assert g.share(10) == (0, 10)
        assert allreduce(seg, g, 3.0) == [3.0] * 4
        g.barrier(timeout=T)
    assert not seg.check()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_three_to_two_keeps_the_order_of_the_old_ranks(seg, children, method):
    with seg.group("g", 3, rank=2) as g:
        keep = elastic(children, seg, 3, 0, ("await", "go"), ("regroup", T),
                       ("allreduce", 1.0, T), method=method)
        victim = elastic(children, seg, 3, 1, ("hang",), method=method)
        joined(keep)
        joined(victim)
        victim.kill()
        keep.send("go")
        assert g.regroup(timeout=T) == (1, 2)
        assert allreduce(seg, g, 2.0) == [3.0] * 4
        assert keep.result() == (0, 2, [None, (0, 2), [3.0] * 4])
    assert not seg.check()


def test_four_to_two_after_two_kills(seg, children):
    with seg.group("g", 4, rank=3) as g:
        keep = elastic(children, seg, 4, 1, ("await", "go"), ("regroup", T),
                       ("allreduce", 5.0, T))
        victims = [elastic(children, seg, 4, r, ("hang",)) for r in (0, 2)]
        for kid in [keep] + victims:
            joined(kid)
        for kid in victims:
            kid.kill()
        keep.send("go")
        assert g.regroup(timeout=T) == (1, 2)
        assert allreduce(seg, g, 1.0) == [6.0] * 4
        assert keep.result() == (0, 2, [None, (0, 2), [6.0] * 4])
    assert not seg.check()


def test_member_killed_during_the_regroup_is_dropped_too(seg, children):
    with seg.group("g", 3, rank=0) as g:
        keep = elastic(children, seg, 3, 1, ("await", "go"), ("regroup", T),
                       ("allreduce", 1.0, T))
        victim = elastic(children, seg, 3, 2, ("await", "start"), ("tell", "regrouping"),
                         ("regroup", T))
        joined(keep)
        joined(victim)  # both joined before anyone regroups: a join then is EBUSY
        victim.send("start")
        assert victim.recv() == "regrouping"
        time.sleep(0.2)  # let it wait in the regroup for the other two
        victim.kill()
        keep.send("go")
        assert g.regroup(timeout=T) == (0, 2)
        assert allreduce(seg, g, 1.0) == [2.0] * 4
        assert keep.result() == (1, 2, [None, (1, 2), [2.0] * 4])
    assert not seg.check()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_newcomer_enlists_and_the_group_grows(seg, children, method):
    with seg.group("g", 1, rank=0) as g:
        kid = elastic(children, seg, None, None, ("allreduce", 2.0, T), method=method)
        admit(g, 2)
        assert g.rank == 0
        assert joined(kid) == (1, 2)
        assert allreduce(seg, g, 1.0) == [3.0] * 4
        assert kid.result() == (1, 2, [[3.0] * 4])
    assert not seg.check()


def test_a_death_and_a_newcomer_in_one_regroup(seg, children):
    with seg.group("g", 2, rank=0) as g:
        victim = elastic(children, seg, 2, 1, ("hang",))
        joined(victim)
        victim.kill()
        with pytest.raises(pdshm.PeerDied):
            g.barrier(timeout=T)
        kid = elastic(children, seg, None, None, ("allreduce", 4.0, T))
        end = time.monotonic() + T
        while time.monotonic() < end:  # nobody waits yet: 1; the newcomer: 2
            if g.regroup(timeout=T) == (0, 2):
                break
            time.sleep(0.01)
        assert joined(kid) == (1, 2)
        assert allreduce(seg, g, 1.0) == [5.0] * 4
        kid.result()
    assert not seg.check()


def test_stopped_member_times_the_regroup_out_and_no_longer(seg, children):
    with seg.group("g", 3, rank=0) as g:
        slow = elastic(children, seg, 3, 1, ("await", "go"), ("regroup", T),
                       ("allreduce", 1.0, T))
        victim = elastic(children, seg, 3, 2, ("hang",))
        joined(slow)
        joined(victim)
        victim.kill()
        os.kill(slow.pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            with pytest.raises(TimeoutError):
                g.regroup(timeout=0.3)
            assert time.monotonic() - start < 10
            assert (g.rank, g.size) == (0, 3)  # nothing changed
        finally:
            os.kill(slow.pid, signal.SIGCONT)
        slow.send("go")
        assert g.regroup(timeout=T) == (0, 2)
        assert allreduce(seg, g, 1.0) == [2.0] * 4
        assert slow.result() == (1, 2, [None, (1, 2), [2.0] * 4])
    assert not seg.check()


def test_bad_arguments(seg):
    with pytest.raises(KeyError):
        seg.enlist("nope", timeout=0.1)
    with pytest.raises(ValueError):
        seg.enlist("", timeout=0.1)
    with pytest.raises(TypeError):
        seg.enlist(5)
    with seg.group("g", 2, rank=0) as g:
        with pytest.raises(ValueError):
            g.regroup(timeout=-1)
        with pytest.raises(TypeError):
            g.regroup(timeout="soon")
        with pytest.raises(TimeoutError):
            seg.enlist("g", timeout=0.1)  # nobody regroups: no longer a candidate
        assert (g.rank, g.size) == (0, 2)
        assert g.regroup(timeout=T) == (0, 1)  # rank 1, never taken, is dropped
    assert not seg.check()
    g = seg.group("h", 1)
    g.leave()
    with pytest.raises(pdshm.Error):
        g.regroup(timeout=T)


def test_alone_with_nobody_dead_or_waiting_a_regroup_is_a_barrier(seg):
    with seg.group("g", 1) as g:
        assert g.regroup(timeout=T) == (0, 1)
        assert g.regroup() == (0, 1)
        g.barrier(timeout=T)
