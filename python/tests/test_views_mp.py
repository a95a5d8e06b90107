"""Views across processes: two processes' views alias the same bytes, and a
view outlives an erase, a resize and a detach done by another process, its
bytes intact, stats().used going down only when the last view goes."""
import gc

import numpy as np
import pytest

import pdshm
import workers
from reuse import churn


N = 32 << 10  # float64 elements of the test tensor
NBYTES = N * 8


def warm_scope(seg, name="p"):
    """A named scope whose index has seen one variable, and its used bytes without one."""
    s = seg.root.new_scope(name)
    s.var("warm")
    s.erase("warm")
    return s, seg.stats().used


def filled_var(scope, name="w", n=N):
    v = scope.var(name)
    v.resize("float64", (n,))
    v.numpy()[:] = np.arange(n, dtype=np.float64)
    return v


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_views_alias_the_same_bytes_across_processes(seg, children, method):
    p = seg.root.new_scope("p")
    v = p.var("w")
    v.resize("float32", (16,))
    a = v.numpy()
    a[:] = 0
    kid = children(method, workers.view_roundtrip, seg.name, "p", "w")
    kid.expect("ready")
    a[3] = 1.5
    kid.send("check")
    assert kid.recv() == ("saw", 1.5)
    assert a[4] == 2.5
    kid.send("exit")
    kid.result()


def test_view_outlives_an_erase_in_another_process(seg, children):
    p, empty = warm_scope(seg)
    a = filled_var(p).numpy()
    children("spawn", workers.erase_var, seg.name, "p", "w").result()
    assert p.find_local_var("w") is None
    churn(p, NBYTES)
    np.testing.assert_array_equal(a, np.arange(N, dtype=np.float64))


def test_used_goes_down_when_the_last_view_of_an_erased_variable_goes(seg, children):
    p, empty = warm_scope(seg)
    v = filled_var(p)
    a = v.numpy()
    b = np.asarray(v)[100:200]
    children("spawn", workers.erase_var, seg.name, "p", "w").result()
    assert seg.stats().used - empty >= NBYTES
    del a
    gc.collect()
    assert seg.stats().used - empty >= NBYTES
    assert b[0] == 100.0
    del b
    gc.collect()
    assert seg.stats().used == empty


def test_view_outlives_a_resize_in_another_process(seg, children):
    p, _ = warm_scope(seg)
    v = filled_var(p)
    a = v.numpy()
    children("spawn", workers.resize_and_fill, seg.name, "p", "w", "int32", (10,), -1).result()
    churn(p, NBYTES)
    np.testing.assert_array_equal(a, np.arange(N, dtype=np.float64))
    assert (v.dtype, tuple(v.shape)) == ("int32", (10,))
    assert (v.numpy() == -1).all()


def test_used_goes_down_when_the_last_view_of_a_resized_buffer_goes(seg, children):
    p, _ = warm_scope(seg)
    v = filled_var(p)
    a = v.numpy()
    children("spawn", workers.resize_and_fill, seg.name, "p", "w", "int32", (10,), -1).result()
    with_old = seg.stats().used
    del a
    gc.collect()
    assert with_old - seg.stats().used >= NBYTES


def test_view_outlives_its_scope_dying_at_another_process_detach(seg, children):
    p, _ = warm_scope(seg, "q")
    v = filled_var(p)
    p.release()  # the child's handle is left the last reference after its unlink
    a = v.numpy()
    assert children("spawn", workers.unlink_scope_then_detach, seg.name, "q").result() == "q"
    with pytest.raises(pdshm.Error):
        seg.open("q")
    churn(seg.root, NBYTES)
    np.testing.assert_array_equal(a, np.arange(N, dtype=np.float64))
    before = seg.stats().used
    del a
    gc.collect()
    after = seg.stats()
    assert before - after.used >= NBYTES
    assert seg.check() == []


def test_view_outlives_its_own_process_detach(seg_name):
    s = pdshm.create(seg_name, size=8 << 20)
    v = filled_var(s.root.new_scope("p"))
    a = v.numpy()
    s.detach()
    with pdshm.attach(seg_name) as other:
        churn(other.root, NBYTES)
    np.testing.assert_array_equal(a, np.arange(N, dtype=np.float64))
    a[0] = -1.0  # still writable, still ours
    del a, v
    gc.collect()
    with pdshm.attach(seg_name) as again:
        st = again.stats()
        assert (st.procs_alive, st.procs_dead) == (1, 0)
        assert again.open("p")["w"].numpy()[0] == -1.0
        assert again.check() == []


def test_used_stays_while_a_view_in_another_process_lives(seg, children):
    p, empty = warm_scope(seg)
    filled_var(p)
    kid = children("spawn", workers.hold_view_until_told, seg.name, "p", "w")
    total = float(sum(range(N)))
    assert kid.recv() == ("holding", total)
    p.erase("w")
    assert seg.stats().used - empty >= NBYTES
    kid.send("drop")
    assert kid.recv() == ("dropped", total)
    assert seg.stats().used - empty < NBYTES
    kid.send("exit")
    kid.result()
    assert seg.stats().used == empty
