"""Trainer groups (DESIGN sections 4 and 5): join, barrier, allreduce,
allreduce_private, reduce_scatter, allgather and share, the death of a member seen as pdshm.PeerDied by the survivors, a replacement
taking over the dead member's rank, the errors of joining, and a member stopped
inside an allreduce beside a dead one, which holds up no attach, reap or join."""
import errno
import os
import random
import signal
import time

import numpy as np
import pytest

import pdshm
import workers
from conftest import create_waiting

T = 20.0  # seconds: the timeout of every barrier and reduction that should succeed


def member(children, seg, size, rank, *steps, group="g"):
    kid = children("spawn", workers.group_member, seg.name, group, size, rank, list(steps))
    return kid


def joined(kid):
    msg = kid.recv()
    assert msg[0] == "joined", msg
    return msg[1]


def my_tensor(seg, g, values, group="g"):
    v = seg.root.var(f"{group}.grad{g.rank}")
    v.assign(np.array(values, dtype=np.float64))
    return v


def test_join_gives_the_rank_asked_for_and_the_size(seg):
    with seg.group("g", 3, rank=2) as g:
        assert (g.rank, g.size) == (2, 3)


def test_join_without_a_rank_takes_the_lowest_free_one(seg, children):
    with seg.group("g", 3, rank=0):
        kid = member(children, seg, 3, None, ("await", "exit"))
        assert joined(kid) == 1
        kid.send("exit")
        kid.result()


def test_barrier_returns_once_every_member_arrived(seg, children):
    with seg.group("g", 2, rank=0) as g:
        kid = member(children, seg, 2, 1, ("barrier", T))
        joined(kid)
        g.barrier(timeout=T)
        assert kid.result() == (1, [None])


def test_barrier_without_the_other_members_times_out(seg):
    with seg.group("g", 2, rank=0) as g:
        start = time.monotonic()
        with pytest.raises(TimeoutError) as ei:
            g.barrier(timeout=0.2)
        assert isinstance(ei.value, pdshm.Error)
        assert ei.value.code == -errno.ETIMEDOUT
        assert time.monotonic() - start < 10


def test_allreduce_sums_every_members_tensor(seg, children):
    with seg.group("g", 3, rank=0) as g:
        kids = [member(children, seg, 3, r, ("allreduce", [r + 1.0, 10.0 * (r + 1)], "sum", T))
                for r in (1, 2)]
        for k in kids:
            joined(k)
        v = my_tensor(seg, g, [1.0, 10.0])
        g.allreduce(v, op="sum", timeout=T)
        assert v.numpy().tolist() == [6.0, 60.0]
        assert sorted(k.result() for k in kids) == [(1, [[6.0, 60.0]]), (2, [[6.0, 60.0]])]


@pytest.mark.parametrize("op, expected", [("mean", [2.0, -1.0]), ("max", [3.0, 0.0]),
                                          ("min", [1.0, -2.0])])
def test_allreduce_ops(seg, children, op, expected):
    with seg.group("g", 2, rank=0) as g:
        kid = member(children, seg, 2, 1, ("allreduce", [3.0, -2.0], op, T))
        joined(kid)
        v = my_tensor(seg, g, [1.0, 0.0])
        g.allreduce(v, op=op, timeout=T)
        assert v.numpy().tolist() == expected
        assert kid.result() == (1, [expected])


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_allreduce_integer_mean_divides_the_wrapped_sum_once(seg, children, dtype):
    """DESIGN section 4: a sum wraps in the dtype, MEAN divides the wrapped
    sum, truncating towards zero, as MPI's sum would (whatever the layout)."""
    big = int(np.iinfo(dtype).max)
    half = (big + 1) // 2
    mine, theirs = [half, -7, big, 5], [half, 2, 1, -1]
    with seg.group("g", 2, rank=0) as g:
        kid = member(children, seg, 2, 1, ("allreduce", theirs, "mean", T, dtype))
        joined(kid)
        v = seg.root.var("g.grad0")
        v.assign(np.array(mine, dtype=dtype))
        g.allreduce(v, op="mean", timeout=T)
        # half + half and big + 1 wrap to the dtype's least value, -(big + 1)
        expected = [-half, -2, -half, 2]
        assert v.numpy().tolist() == expected
        assert kid.result() == (1, [expected])


@pytest.mark.parametrize("dtype, op, expected", [
    ("float32", "sum", [6.0, -1.5, 33.0, 3.0, 28.0]),
    ("float64", "max", [3.0, 0.5, 22.0, 1.0, 16.0]),
    ("float16", "min", [1.0, -2.0, 0.0, 1.0, 4.0]),
    ("int32", "mean", [2, 0, 11, 1, 9]),  # -2 / 3 truncates to 0
    ("int64", "sum", [6, -2, 33, 3, 28])])
def test_allreduce_private_reduces_each_members_array_in_its_memory(seg, children, dtype, op,
                                                                     expected):
    rows = [[1, -2, 0, 1, 4], [2, 0.5, 11, 1, 8], [3, 0, 22, 1, 16]]
    if dtype.startswith("int"):
        rows = [[int(x) for x in r] for r in rows]
    with seg.group("g", 3, rank=0) as g:
        kids = [member(children, seg, 3, r, ("allreduce_private", rows[r], op, T, dtype))
                for r in (1, 2)]
        for k in kids:
            joined(k)
        a = np.array(rows[0], dtype=dtype)
        staging = seg.root.var("staging0")
        staging.resize("uint8", (a.nbytes,))
        g.allreduce_private(a, staging, op=op, timeout=T)
        assert a.tolist() == expected
        assert sorted(k.result() for k in kids) == [(1, [expected]), (2, [expected])]


@pytest.mark.parametrize("dtype, op, rows, expected", [
    # 1 + 2**-8 + 2**-8 in float32, rounded once: 1 + 2**-7; folded in
    # bfloat16 step by step, 1 + 2**-8 would round to 1 twice
    ("bfloat16", "sum", [[1.0, -3.0], [2 ** -8, 0.5], [2 ** -8, 0.25]], [1 + 2 ** -7, -2.25]),
    ("float32", "max", [[1.0, -3.0], [2.0, 0.5], [-1.0, 0.25]], [2.0, 0.5]),
    ("int64", "mean", [[3, -7], [4, 0], [5, 1]], [4, -2])])
def test_allreduce_private_reduces_a_torch_tensor_through_dlpack(seg, children, dtype, op, rows,
                                                                 expected):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    with seg.group("g", 3, rank=0) as g:
        kids = [member(children, seg, 3, r, ("allreduce_private_torch", rows[r], op, T, dtype))
                for r in (1, 2)]
        for k in kids:
            joined(k)
        t = torch.tensor(rows[0], dtype=getattr(torch, dtype))
        staging = seg.root.var("staging0")
        staging.resize("uint8", (t.numel() * t.element_size(),))
        g.allreduce_private(t, staging, op=op, timeout=T)
        assert t.tolist() == expected
        assert sorted(k.result() for k in kids) == [(1, [expected]), (2, [expected])]


def test_allreduce_private_refuses_bad_torch_tensors_and_changes_nothing(seg):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    with seg.group("g", 1, rank=0) as g:
        staging = seg.root.var("staging")
        staging.resize("uint8", (64,))
        grid = torch.arange(8, dtype=torch.float32).reshape(4, 2)
        with pytest.raises(pdshm.InvalidArgument, match="not contiguous"):
            g.allreduce_private(grid[:, 0], staging)
        with pytest.raises(pdshm.InvalidArgument, match="DLPack dtype code 5"):
            g.allreduce_private(torch.zeros(4, dtype=torch.complex64), staging)
        with pytest.raises(pdshm.InvalidArgument, match="cannot be reduced"):
            g.allreduce_private(torch.zeros(4, dtype=torch.int8), staging)
        with pytest.raises(pdshm.InvalidArgument, match="staging tensor holds 64 bytes"):
            g.allreduce_private(torch.zeros(32, dtype=torch.float32), staging)
        assert grid.flatten().tolist() == list(range(8))
        t = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
        g.allreduce_private(t, staging, op="mean", timeout=T)  # the group goes on
        assert t.tolist() == [1.5, -2.0]


def test_allreduce_private_refuses_bad_buffers_and_staging_and_changes_nothing(seg):
    other = create_waiting(seg.name + "x", 8 << 20)
    try:
        with seg.group("g", 1, rank=0) as g:
            a = np.arange(6, dtype=np.float32)
            staging = seg.root.var("staging")
            staging.resize("uint8", (a.nbytes,))
            small = seg.root.var("small")
            small.resize("uint8", (a.nbytes - 1,))
            with pytest.raises(pdshm.InvalidArgument, match="cannot be reduced"):
                g.allreduce_private(np.zeros(4, dtype=np.uint8), staging)
            with pytest.raises((BufferError, ValueError)):  # numpy's: ValueError
                g.allreduce_private(np.zeros((4, 2), dtype=np.float32)[:, 0], staging)
            with pytest.raises(BufferError, match="not writable"):
                g.allreduce_private(b"\0" * 8, staging)
            with pytest.raises(TypeError, match="pdshm.Var"):
                g.allreduce_private(a, np.zeros(6, dtype=np.float32))
            with pytest.raises(pdshm.InvalidArgument, match="lives in segment"):
                g.allreduce_private(a, other.root.var("s"))
            with pytest.raises(pdshm.InvalidArgument, match="staging tensor holds 23 bytes"):
                g.allreduce_private(a, small)
            with pytest.raises(TypeError):
                g.allreduce_private(a, seg.root.var("notensor"))
            with pytest.raises(pdshm.InvalidArgument, match="op must be"):
                g.allreduce_private(a, staging, op="prod")
            assert a.tolist() == list(range(6))
            g.allreduce_private(a, staging, op="mean", timeout=T)  # the group goes on
            assert a.tolist() == list(range(6))
    finally:
        other.detach()
        pdshm.unlink(other.name)


def test_allreduce_of_tensors_of_different_sizes_is_value_error_at_every_member(seg, children):
    with seg.group("g", 2, rank=0) as g:
        kid = member(children, seg, 2, 1, ("allreduce", [1.0, 2.0, 3.0], "sum", T))
        joined(kid)
        v = my_tensor(seg, g, [1.0, 2.0])
        with pytest.raises(ValueError):
            g.allreduce(v, op="sum", timeout=T)
        rank, (theirs,) = kid.result()
        assert theirs[0] == "raised" and "ValueError" in theirs[1]


def test_unknown_reduction_is_value_error(seg):
    with seg.group("g", 1, rank=0) as g:
        with pytest.raises(ValueError):
            g.allreduce(my_tensor(seg, g, [1.0]), op="median", timeout=T)


def test_death_of_a_member_is_peer_died_for_the_survivor(seg, children):
    with seg.group("g", 2, rank=0) as g:
        kid = member(children, seg, 2, 1, ("hang",))
        joined(kid)
        kid.kill()
        start = time.monotonic()
        with pytest.raises(pdshm.PeerDied):
            g.barrier(timeout=T)
        assert time.monotonic() - start < 5  # noticed at once, not at the timeout


def test_death_during_a_barrier_wakes_the_waiting_member(seg, children):
    with seg.group("g", 3, rank=0):
        waiter = member(children, seg, 3, 1, ("tell", "waiting"), ("barrier", T))
        victim = member(children, seg, 3, 2, ("hang",))
        joined(waiter)
        joined(victim)
        assert waiter.recv() == "waiting"
        victim.kill()
        rank, (_, outcome) = waiter.result()
        assert outcome[0] == "raised" and "PeerDied" in outcome[1]


def test_replacement_takes_over_the_dead_members_rank(seg, children):
    with seg.group("g", 2, rank=0) as g:
        first = member(children, seg, 2, 1, ("hang",))
        joined(first)
        first.kill()
        with pytest.raises(pdshm.PeerDied):
            g.barrier(timeout=T)
        second = member(children, seg, 2, 1, ("barrier", T))
        assert joined(second) == 1
        g.barrier(timeout=T)
        assert second.result() == (1, [None])


def test_rank_held_by_a_live_member_is_ebusy(seg, children):
    with seg.group("g", 2, rank=0):
        got = member(children, seg, 2, 0).result()
        assert got[0] == "join raised" and got[2] == -errno.EBUSY


def test_size_other_than_the_groups_is_value_error(seg, children):
    with seg.group("g", 2, rank=0):
        got = member(children, seg, 3, None).result()
        assert got[0] == "join raised" and "ValueError" in got[1]
        assert got[2] == -errno.EINVAL


def test_joining_a_full_group_is_eusers(seg, children):
    with seg.group("g", 1, rank=0):
        got = member(children, seg, 1, None).result()
        assert got[0] == "join raised" and got[2] == -errno.EUSERS


def test_group_memory_goes_back_when_the_last_member_leaves(seg):
    before = seg.stats().used
    g = seg.group("g", 2, rank=0)
    assert seg.stats().used > before
    g.leave()
    assert seg.stats().used == before


def test_group_of_a_killed_last_member_goes_back_at_reap(seg, children):
    before = seg.stats().used
    kid = member(children, seg, 2, 0, ("hang",))
    joined(kid)
    kid.kill()
    seg.reap()
    assert seg.stats().used == before
    assert seg.check() == []


def test_allreduce_of_a_numpy_view_reduces_its_variable(seg, children):
    with seg.group("g", 2, rank=0) as g:
        kid = member(children, seg, 2, 1, ("allreduce", [3.0, -2.0], "sum", T))
        joined(kid)
        view = my_tensor(seg, g, [1.0, 5.0]).numpy()
        g.allreduce(view, op="sum", timeout=T)
        assert view.tolist() == [4.0, 3.0]
        assert kid.result() == (1, [[4.0, 3.0]])


def test_allreduce_of_a_torch_view_reduces_its_variable(seg, children):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    with seg.group("g", 2, rank=0) as g:
        kid = member(children, seg, 2, 1, ("allreduce", [3.0, -2.0], "mean", T))
        joined(kid)
        v = my_tensor(seg, g, [1.0, 0.0])
        t = torch.from_dlpack(v)
        g.allreduce(t, op="mean", timeout=T)
        assert t.tolist() == [2.0, -1.0]
        assert v.numpy().tolist() == [2.0, -1.0]
        assert kid.result() == (1, [[2.0, -1.0]])


def test_allreduce_refuses_what_is_no_whole_view_of_a_variable_and_changes_nothing(seg):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    with seg.group("g", 1, rank=0) as g:
        v = my_tensor(seg, g, [1.0, 2.0, 3.0, 4.0])
        t = torch.from_dlpack(v)
        for bad in (t[1:], t[::2], np.ones(4), t.clone(), "x", 3):
            with pytest.raises(pdshm.InvalidArgument):
                g.allreduce(bad, op="sum", timeout=T)
        assert v.numpy().tolist() == [1.0, 2.0, 3.0, 4.0]
        v.resize("float64", (8,))  # the view now shows bytes the variable no longer has
        with pytest.raises(pdshm.InvalidArgument):
            g.allreduce(t, op="sum", timeout=T)
        g.allreduce(v.numpy(), op="sum", timeout=T)  # a fresh view is fine


def test_holds_says_which_views_a_collective_takes_itself(seg):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    with seg.group("g", 1, rank=0) as g:
        v = my_tensor(seg, g, [1.0, 2.0, 3.0, 4.0])
        t = torch.from_dlpack(v)
        assert g.holds(t) and g.holds(v.numpy()) and g.holds(t.view(2, 2))
        for bad in (t[1:], t[::2], np.ones(4), t.clone(), "x", 3):
            assert not g.holds(bad)
        v.resize("float64", (8,))  # the view now shows bytes the variable no longer has
        assert not g.holds(t)
        g.leave()
        with pytest.raises(pdshm.Error):
            g.holds(v.numpy())


def test_share_splits_n_elements_in_rank_order(seg):
    with seg.group("g", 4, rank=3) as g:
        assert g.share(10) == (7, 10)
        assert g.share(2) == (1, 2)
        assert g.share(0) == (0, 0)
        assert g.share(2**64 - 1) == ((2**64 - 1) * 3 // 4, 2**64 - 1)
        for bad in (-1, 2**64, "3"):
            with pytest.raises(ValueError):
                g.share(bad)
    with pytest.raises(pdshm.Error):
        g.share(10)  # left


def test_reduce_scatter_reduces_each_members_share_and_leaves_the_rest(seg, children):
    with seg.group("g", 3, rank=0) as g:
        kids = [member(children, seg, 3, r,
                       ("reduce_scatter", [float(r + 1)] * 7, "mean", T)) for r in (1, 2)]
        for k in kids:
            joined(k)
        v = my_tensor(seg, g, [1.0] * 7)
        g.reduce_scatter(v, op="mean", timeout=T)
        assert g.share(7) == (0, 2)
        assert v.numpy().tolist() == [2.0, 2.0] + [1.0] * 5
        # rank 1's share [2, 4) is the mean 2.0, as was the rest; rank 2's [4, 7)
        assert sorted(k.result() for k in kids) == [(1, [[2.0] * 7]),
                                                    (2, [[3.0] * 4 + [2.0] * 3])]


def test_allgather_spreads_each_members_share(seg, children):
    with seg.group("g", 3, rank=0) as g:
        # member r holds r + 1 in its share of 7 ([0, 2), [2, 4), [4, 7)), -1 elsewhere
        theirs = {1: [-1.0, -1.0, 2.0, 2.0, -1.0, -1.0, -1.0],
                  2: [-1.0] * 4 + [3.0] * 3}
        kids = [member(children, seg, 3, r, ("allgather", theirs[r], T)) for r in (1, 2)]
        for k in kids:
            joined(k)
        v = my_tensor(seg, g, [1.0, 1.0] + [-1.0] * 5)
        g.allgather(v, timeout=T)
        want = [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0]
        assert v.numpy().tolist() == want
        assert sorted(k.result() for k in kids) == [(1, [want]), (2, [want])]


def test_reduce_scatter_then_allgather_is_an_allreduce(seg, children):
    with seg.group("g", 2, rank=0) as g:
        kid = member(children, seg, 2, 1, ("reduce_scatter", [3.0, -2.0, 5.0], "sum", T),
                     ("allgather", None, T))
        joined(kid)
        v = my_tensor(seg, g, [1.0, 5.0, 1.0])
        g.reduce_scatter(v.numpy(), timeout=T)
        g.allgather(v, timeout=T)
        assert v.numpy().tolist() == [4.0, 3.0, 6.0]
        # its share of 3 is [1, 3): reduced there, its element 0 left as it was
        assert kid.result() == (1, [[3.0, 3.0, 6.0], [4.0, 3.0, 6.0]])


def test_mixing_collectives_is_value_error_at_every_member_and_changes_nothing(seg, children):
    with seg.group("g", 2, rank=0) as g:
        kid = member(children, seg, 2, 1, ("allgather", [7.0, 8.0], T),
                     ("reduce_scatter", [7.0, 8.0], "sum", T), ("barrier", T))
        joined(kid)
        v = my_tensor(seg, g, [1.0, 2.0])
        with pytest.raises(ValueError):
            g.reduce_scatter(v, op="sum", timeout=T)   # beside its allgather
        with pytest.raises(ValueError):
            g.allreduce(v, op="sum", timeout=T)        # beside its reduce_scatter
        with pytest.raises(ValueError):
            g.allgather(v, timeout=T)                  # beside its barrier
        assert v.numpy().tolist() == [1.0, 2.0]
        rank, out = kid.result()
        assert out[0][0] == "raised" and "ValueError" in out[0][1]
        assert out[1][0] == "raised" and "ValueError" in out[1][1]
        assert out[2] is None


def test_death_of_a_member_is_peer_died_in_reduce_scatter_and_allgather(seg, children):
    with seg.group("g", 2, rank=0) as g:
        kid = member(children, seg, 2, 1, ("hang",))
        joined(kid)
        kid.kill()
        v = my_tensor(seg, g, [1.0, 2.0])
        start = time.monotonic()
        with pytest.raises(pdshm.PeerDied):
            g.reduce_scatter(v, timeout=T)
        assert time.monotonic() - start < 5
    with seg.group("h", 2, rank=0) as g:
        kid = member(children, seg, 2, 1, ("hang",), group="h")
        joined(kid)
        kid.kill()
        v = my_tensor(seg, g, [1.0, 2.0], group="h")
        with pytest.raises(pdshm.PeerDied):
            g.allgather(v, timeout=T)


def _stopped(pid):
    """Whether pid is stopped (state T in /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def _reap_all(seg):
    """Reaps until no dead slot is left (a slot shows dead a moment after its
    process is gone)."""
    deadline = time.monotonic() + T
    while seg.stats().procs_dead and time.monotonic() < deadline:
        seg.reap()
        time.sleep(0.001)
    assert seg.stats().procs_dead == 0


def test_a_member_stopped_in_an_allreduce_beside_a_dead_one_holds_up_nobody(seg_name, children):
    """Rank 0 stopped (SIGSTOP: slow, not dead) inside an allreduce, rank 1
    killed: attach, reap, a join and a takeover return within seconds; the reap
    and the takeover raise TimeoutError when rank 0 was stopped writing (tried
    until it was); after SIGCONT rank 0 gets PeerDied and the segment checks."""
    n = 1 << 20  # float32: the members write during most of each allreduce
    seg = create_waiting(seg_name, 32 << 20)
    try:
        for attempt in range(20):
            group = f"stall{attempt}"
            a, b = (children("spawn", workers.allreduce_until_peer_died, seg_name, group, r, n)
                    for r in (0, 1))
            for kid in (a, b):
                kid.expect("joined")
            a.expect("running")
            time.sleep(random.uniform(0, 0.01))
            os.kill(a.pid, signal.SIGSTOP)
            deadline = time.monotonic() + T
            while not _stopped(a.pid) and time.monotonic() < deadline:
                time.sleep(0.001)
            b.kill()
            while not seg.stats().procs_dead and time.monotonic() < deadline:
                time.sleep(0.001)
            probe = children("spawn", workers.stall_probe, seg_name, group).result(timeout=T)
            for what in ("attach", "reap", "join", "takeover_s"):
                assert probe[what] < 5.0, (what, probe)
            caught = probe["reaped"] == "TimeoutError"
            assert probe["takeover"] == ("TimeoutError" if caught else "joined"), probe
            os.kill(a.pid, signal.SIGCONT)
            assert a.result() == "PeerDied"
            _reap_all(seg)
            assert seg.check() == []
            if caught:
                break
        assert caught, "rank 0 was never stopped while it wrote"
    finally:
        seg.detach()
