"""The seed rules across processes: what one process does to the scope tree,
another sees (DESIGN section 1 holds "in one process and across processes")."""
import pytest

import workers


def in_child(children, seg, *calls):
    """Each call's result in a spawned child (see workers.scope_calls)."""
    return children("spawn", workers.scope_calls, seg.name, list(calls)).result()


def raised(result, cls):
    return isinstance(result, tuple) and result[0] == "raised" and cls.__name__ in result[1]


def test_var_gets_the_variable_another_process_created(seg, children):
    seg.root.new_scope("p").var("w").label = "made_here"
    assert in_child(children, seg, ("p", "w", "=label", ("seen",)), ("p", None, "var", ("w",))) == \
        [None, "w"]
    assert seg.open("p")["w"].label == "seen"
    assert [v.name for v in seg.open("p").vars()] == ["w"]


def test_create_var_refuses_a_name_another_process_created(seg, children):
    seg.root.new_scope("p").create_var("w")
    (r,) = in_child(children, seg, ("p", None, "create_var", ("w",)))
    assert raised(r, FileExistsError)


def test_find_var_up_the_chain_sees_another_process_variable(seg, children):
    seg.root.new_scope("p").new_scope("q")
    in_child(children, seg, ("", None, "var", ("g",)), ("", "g", "=label", ("global",)))
    assert seg.open("p/q").find_var("g").label == "global"
    assert seg.open("p/q").find_local_var("g") is None


def test_erase_in_another_process_uncovers_the_parent_variable(seg, children):
    seg.root.var("w").label = "global"
    seg.root.new_scope("p").create_var("w").label = "shadow"
    with seg.open("p") as p:
        assert p["w"].label == "shadow"
        in_child(children, seg, ("p", None, "erase", ("w",)))
        assert p["w"].label == "global"


def test_rename_in_another_process_is_seen_here(seg, children):
    seg.root.new_scope("p").var("old").label = "moved"
    in_child(children, seg, ("p", None, "rename", ("old", "new")))
    p = seg.open("p")
    assert p.find_local_var("old") is None
    assert p["new"].label == "moved"


def test_named_scope_outlives_the_process_that_made_it(seg, children):
    in_child(children, seg, ("", None, "new_scope", ("params",)),
             ("params", None, "var", ("w",)), ("params", "w", "=label", ("parameter",)))
    assert seg.open("params")["w"].label == "parameter"
    assert seg.stats().procs_alive == 1


def test_anonymous_scope_goes_with_the_process_that_made_it(seg, children):
    before = seg.stats()
    kid = children("spawn", workers.exit_holding_an_anonymous_scope, seg.name)
    assert kid.recv() == ("made", before.scopes + 1)
    kid.join()
    assert seg.stats().procs_dead == 1
    assert seg.reap() == 1
    after = seg.stats()
    assert (after.scopes, after.vars, after.used) == (before.scopes, before.vars, before.used)


def test_drop_kids_in_another_process_leaves_our_handle_usable(seg, children):
    before = seg.stats()
    kid = seg.root.new_scope("a")
    kid.var("x").label = "kept"
    in_child(children, seg, ("", None, "drop_kids", ()))
    with pytest.raises(KeyError):
        seg.open("a")
    assert kid["x"].label == "kept"
    kid.release()
    after = seg.stats()
    assert (after.scopes, after.vars) == (before.scopes, before.vars)


def test_labels_set_by_two_processes_filter_together(seg, children):
    p = seg.root.new_scope("p")
    p.var("mine").label = "parameter"
    in_child(children, seg, ("p", None, "var", ("theirs",)), ("p", "theirs", "=label", ("parameter",)),
             ("p", None, "var", ("input",)), ("p", "input", "=label", ("input",)))
    assert sorted(v.name for v in p.vars(label="parameter")) == ["mine", "theirs"]


def test_readers_and_writers_added_by_two_processes_are_all_kept(seg, children):
    w = seg.root.new_scope("p").var("w")
    w.add_reader("here_reads")
    in_child(children, seg, ("p", "w", "add_reader", ("there_reads",)),
             ("p", "w", "add_writer", ("there_writes",)))
    assert sorted(w.readers) == ["here_reads", "there_reads"]
    assert list(w.writers) == ["there_writes"]


def test_generated_names_of_two_processes_never_collide(seg, children):
    p = seg.root.new_scope("p")
    mine = [p.new_var().name for _ in range(20)]
    theirs = in_child(children, seg, *[("p", None, "new_var", ())] * 20)
    assert len(set(mine) | set(theirs)) == 40

