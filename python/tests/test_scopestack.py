"""Seed 003 from Python: ScopeStack, new_variable / new_parameter, unique names."""
import pytest

import pdshm
import workers


def test_global_scope_is_the_root(seg):
    st = pdshm.ScopeStack(seg)
    st.global_scope().var("g").label = "marker"
    assert seg.root["g"].label == "marker"
    assert st.cur_scope().find_local_var("g") is not None


def test_push_stack_makes_a_child_of_the_current_scope(seg):
    st = pdshm.ScopeStack(seg)
    st.global_scope().var("g")
    st.push_stack()
    cur = st.cur_scope()
    assert cur.find_local_var("g") is None
    assert cur.find_var("g") is not None
    st.push_stack()
    st.cur_scope().parent.var("mid")  # the parent is the first pushed scope
    assert cur.find_local_var("mid") is not None
    st.pop_stack()
    st.pop_stack()


def test_pop_stack_returns_to_the_outer_scope_and_reclaims_the_inner(seg):
    st = pdshm.ScopeStack(seg)
    before = seg.stats()
    st.push_stack()
    st.cur_scope().var("x").resize("float32", (256,))
    st.pop_stack()
    assert st.cur_scope().find_var("x") is None
    after = seg.stats()
    assert (after.scopes, after.vars, after.used) == (before.scopes, before.vars, before.used)


def test_sub_block_pushes_for_the_block_and_pops_after(seg):
    st = pdshm.ScopeStack(seg)
    st.new_variable(name="v")
    with st.sub_block():
        c = st.new_variable(name="c")
        assert st.cur_scope().find_local_var("c") is not None
        assert st.cur_scope().find_var("v") is not None
        assert c.name == "c"
    st.new_variable(name="e")
    assert sorted(x.name for x in seg.root.vars()) == ["e", "v"]


def test_sub_block_pops_when_the_block_raises(seg):
    st = pdshm.ScopeStack(seg)
    with pytest.raises(RuntimeError):
        with st.sub_block():
            st.new_variable(name="inner")
            raise RuntimeError("boom")
    assert st.cur_scope().find_var("inner") is None
    st.new_variable(name="outer")
    assert seg.root.find_local_var("outer") is not None


def test_new_variable_goes_to_the_current_scope(seg):
    st = pdshm.ScopeStack(seg)
    with st.sub_block():
        v = st.new_variable(name="h")
        assert st.cur_scope().find_local_var("h") is not None
        assert seg.root.find_local_var("h") is None
        assert v.name == "h"


def test_new_variable_without_a_name_takes_a_unique_name_from_the_prefix(seg):
    st = pdshm.ScopeStack(seg)
    a = st.new_variable(prefix="fc")
    b = st.new_variable(prefix="fc")
    assert a.name != b.name
    assert a.name.startswith("fc-") and b.name.startswith("fc-")


def test_new_variable_without_name_or_prefix_takes_a_unique_name(seg):
    st = pdshm.ScopeStack(seg)
    a = st.new_variable()
    b = st.new_variable()
    assert a.name and b.name and a.name != b.name


def test_new_parameter_goes_to_the_global_scope_labelled_parameter(seg):
    st = pdshm.ScopeStack(seg)
    with st.sub_block():
        with st.sub_block():
            p = st.new_parameter(name="fc.w")
            assert st.cur_scope().find_local_var("fc.w") is None
    assert seg.root["fc.w"].label == "parameter"
    assert p.label == "parameter"
    assert [x.name for x in seg.root.vars(label="parameter")] == ["fc.w"]


def test_new_parameter_with_a_prefix_takes_a_unique_name(seg):
    st = pdshm.ScopeStack(seg)
    p = st.new_parameter(prefix="fc.w")
    q = st.new_parameter(prefix="fc.w")
    assert p.name != q.name and p.name.startswith("fc.w-")
    assert sorted(x.name for x in seg.root.vars(label="parameter")) == sorted([p.name, q.name])


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_unique_names_do_not_repeat_across_processes(seg, children, method):
    kids = [children(method, workers.unique_names, seg.name, "op", 200) for _ in range(2)]
    mine = [seg.unique_name("op") for _ in range(200)]
    theirs = [n for k in kids for n in k.result()]
    every = mine + theirs
    assert len(every) == 600
    assert len(set(every)) == 600
    assert all(n.startswith("op-") for n in every)
