"""fork() and multiprocessing: an inherited Segment, named Scope and Var
re-attach on first use in the child; an anonymous scope raises pdshm.Forked
there; a numpy view taken before the fork stays readable in the child; and
handles passed to children of every start method work."""
import gc

import numpy as np
import pytest

import procutil
import workers


def test_inherited_segment_reattaches_in_a_fork_child(seg, children):
    alive_in_child = children("fork", workers.use_inherited_segment, seg).result()
    assert alive_in_child == 2  # the parent's attachment and the child's own
    assert seg.root["from_child"].label == "child"


def test_child_detaching_an_inherited_segment_leaves_the_parent_attached(seg, children):
    children("fork", workers.use_inherited_segment, seg).result()
    st = seg.stats()
    assert (st.procs_alive, st.procs_dead) == (1, 0)
    seg.root.var("after").label = "parent"
    assert seg.check() == []


def test_inherited_anonymous_scope_raises_forked(seg, children):
    kid_scope = seg.root.new_scope()
    assert children("fork", workers.use_inherited_anonymous_scope, kid_scope).result() == \
        ("Forked", -10003)


def test_parents_anonymous_scope_survives_a_fork_child(seg, children):
    kid_scope = seg.root.new_scope()
    kid_scope.var("mine").label = "parent"
    before = seg.stats()
    children("fork", workers.use_inherited_anonymous_scope, kid_scope).result()
    seg.reap()
    assert kid_scope["mine"].label == "parent"
    after = seg.stats()
    assert (after.scopes, after.vars, after.used) == (before.scopes, before.vars, before.used)


def test_view_taken_before_fork_is_readable_in_the_child(seg, children):
    v = seg.root.new_scope("p").var("w")
    v.resize("int32", (100,))
    a = v.numpy()
    a[:] = np.arange(100)
    kid = children("fork", workers.read_inherited_view_when_told, a)
    kid.expect("ready")
    kid.send("read")
    assert kid.result() == list(range(100))


def test_view_inherited_by_fork_outlives_the_parents_erase_and_reuse(seg, children):
    p = seg.root.new_scope("p")
    v = p.var("w")
    v.resize("int32", (4096,))
    a = v.numpy()
    a[:] = np.arange(4096)
    kid = children("fork", workers.read_inherited_view_when_told, a)
    kid.expect("ready")
    p.erase("w")
    del a, v
    gc.collect()
    for i in range(4):  # would take the freed buffer, were it freed
        r = p.var(f"reuse{i}")
        r.resize("int32", (4096,))
        r.numpy()[:] = -1
    kid.send("read")
    assert kid.result() == list(range(4096))
    seg.reap()
    assert seg.check() == []


@pytest.mark.parametrize("method", procutil.METHODS)
def test_segment_named_scope_and_var_work_in_a_child(seg, children, method):
    seg.root.var("top")
    fc = seg.root.new_scope("params").new_scope("fc")
    w = fc.var("w")
    w.resize("int64", (5,))
    w.numpy()[:] = 0
    got = children(method, workers.write_through_handles, seg, fc, w).result()
    assert got == (seg.name, "fc", "w", True)
    assert w.numpy().tolist() == [3] * 5
    assert fc["made_by_child"].label == "child"


@pytest.mark.parametrize("method", procutil.METHODS)
def test_child_leaves_nothing_behind_once_reaped(seg, children, method):
    fc = seg.root.new_scope("fc")
    w = fc.var("w")
    w.resize("int64", (5,))
    before = seg.stats()
    children(method, workers.var_via_unpickled_arguments, w).result()
    seg.reap()
    after = seg.stats()
    assert (after.used, after.procs_alive, after.procs_dead) == (before.used, 1, 0)
    assert seg.check() == []


@pytest.mark.parametrize("method", procutil.METHODS)
def test_scope_stack_names_are_unique_across_children(seg, children, method):
    kids = [children(method, workers.unique_names_from_stack, seg) for _ in range(2)]
    got = [n for k in kids for n in k.result()]
    assert len(set(got)) == 100
    assert sorted(v.name for v in seg.root.vars()) == sorted(got)
