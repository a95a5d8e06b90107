"""A Var is a weak handle: once its variable is erased or its scope dies, in
any process, using it raises pdshm.Error ESTALE, and its ref() reads None."""
import errno

import pytest

import pdshm
import workers


def assert_stale(call):
    with pytest.raises(pdshm.Error) as ei:
        call()
    assert (ei.value.code, ei.value.errno) == (-errno.ESTALE, errno.ESTALE)


def test_var_erased_in_another_process_is_stale(seg, children):
    v = seg.root.new_scope("p").var("w")
    v.resize("float32", (4,))
    kid = children("spawn", workers.erase_in_other_process, seg.name, "p", "w")
    kid.expect("erased")
    assert_stale(lambda: v.numpy())
    assert_stale(lambda: v.resize("float32", (2,)))
    assert_stale(lambda: setattr(v, "label", "x"))
    assert_stale(lambda: v.add_reader("op"))
    kid.send("exit")
    kid.result()


def test_var_stays_stale_when_the_name_is_taken_again(seg):
    s = seg.root.new_scope("p")
    old = s.var("w")
    s.erase("w")
    s.var("w").label = "new"
    assert_stale(lambda: old.label)


def test_key_is_the_variables_and_its_incarnations(seg):
    s = seg.root.new_scope("p")
    old = s.var("w")
    assert s.var("w").key == old.key != s.var("b").key
    assert all(isinstance(k, int) for k in old.key)
    key = old.key
    s.erase("w")
    assert s.var("w").key != key  # the name taken again: another variable
    assert_stale(lambda: old.key)


def test_var_of_a_released_anonymous_scope_is_stale(seg):
    kid = seg.root.new_scope()
    v = kid.var("x")
    kid.release()
    assert_stale(lambda: v.version)


def test_ref_reads_the_var_while_it_lives(seg):
    v = seg.root.var("w")
    v.label = "live"
    r = v.ref()
    assert r().label == "live"
    assert r().name == "w"


def test_ref_reads_none_after_an_erase_in_another_process(seg, children):
    r = seg.root.new_scope("p").var("w").ref()
    children("spawn", workers.erase_var, seg.name, "p", "w").result()
    assert r() is None


def test_ref_reads_none_after_the_name_is_taken_again(seg):
    s = seg.root.new_scope("p")
    r = s.var("w").ref()
    s.erase("w")
    s.var("w")
    assert r() is None
