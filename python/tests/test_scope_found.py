"""A Scope returns again the Var it made for a variable while a lookup finds
that same variable (its record and generation): a variable erased and made
again, a nearer one that shadows it, a rename, a detach and a fork child all
give what a new Var would."""
import errno
import threading

import pytest

import pdshm
import workers


@pytest.fixture
def step(seg):
    """A named scope one below "params", which holds W."""
    params = seg.root.new_scope("params")
    params.var("W").label = "first"
    return params.new_scope("step")


def assert_stale(call):
    with pytest.raises(pdshm.Error) as ei:
        call()
    assert ei.value.code == -errno.ESTALE


def test_a_lookup_that_finds_the_same_variable_returns_the_same_var(step):
    found = step.find_var("W")
    assert step.find_var("W") is found
    assert step["W"] is found
    own = step.var("x")
    assert step.var("x") is own
    assert step.find_local_var("x") is own
    assert step.find_var("x").scope_path == "params/step"
    assert found.scope_path == "params"


def test_a_variable_made_again_at_its_record_is_the_new_one(seg, step):
    params = seg.open("params")
    old = step.find_var("W")
    old_key = old.key
    params.erase("W")
    assert step.find_var("W") is None
    params.var("W").label = "second"
    new = step.find_var("W")
    assert new is not old
    assert new.key != old_key and new.label == "second"
    assert_stale(lambda: old.label)


def test_made_again_at_the_same_record_with_another_generation(seg, step):
    params = seg.open("params")
    old = step.find_var("W")
    off, gen = old.key
    for _ in range(64):  # the heap hands the freed record out again
        params.erase("W")
        params.var("W")
        if params.var("W").key[0] == off:
            break
    new = step.find_var("W")
    assert new.key[0] == off, "the record was not reused: the test proves nothing"
    assert new.key[1] != gen and new is not old
    assert new.label == ""
    assert_stale(lambda: old.label)


def test_a_nearer_variable_shadows_the_one_found_before(step):
    above = step.find_var("W")
    mine = step.var("W")
    assert step.find_var("W").key == mine.key
    assert mine.key != above.key and mine.scope_path == "params/step"
    step.erase("W")
    assert step.find_var("W").key == above.key


def test_a_renamed_variable_is_found_under_its_new_name_only(seg, step):
    found = step.find_var("W")
    seg.open("params").rename("W", "W2")
    assert step.find_var("W") is None
    assert step.find_var("W2").key == found.key


def test_after_detach_the_var_and_the_scope_raise(seg, step):
    found = step.find_var("W")
    seg.detach()
    with pytest.raises(pdshm.Error):
        found.label
    with pytest.raises(pdshm.Error):
        step.find_var("W")


def test_a_fork_child_finds_the_variable_the_parent_made_again(seg, step, children):
    before = step.find_var("W")
    key = before.key
    kid = children("fork", workers.find_var_in_fork_child, step, "W")
    kid.expect("looked")
    seg.open("params").erase("W")
    seg.open("params").var("W").label = "second"
    kid.send("made again")
    first, again = kid.result()
    assert first == ("first", key, True)
    assert again == ("second", step.find_var("W").key)
    assert again[1] != key
    assert_stale(lambda: before.label)


def test_many_variables_share_the_slots_and_each_lookup_gets_its_own(seg, step):
    params = seg.open("params")
    names = [f"v{i}" for i in range(40)]
    for n in names:
        params.var(n).label = n
    for _ in range(3):
        for n in names:
            assert step.find_var(n).label == n
            assert params.var(n).label == n


def test_threads_looking_up_while_one_erases_and_makes_again(seg, step):
    params = seg.open("params")
    names = [f"v{i}" for i in range(20)]
    for n in names:
        params.var(n).label = n
    wrong, done = [], threading.Event()

    def look():
        while not done.is_set():
            for n in names:
                v = step.find_var(n)
                try:
                    if v is not None and v.label not in (n, ""):  # "": made, not labelled yet
                        wrong.append((n, v.label))
                except pdshm.Stale:
                    pass  # erased since the lookup

    threads = [threading.Thread(target=look) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(300):
            for n in names[:5]:
                params.erase(n)
                params.var(n).label = n
    finally:
        done.set()
        for t in threads:
            t.join()
    assert wrong == []
    assert [step.find_var(n).key for n in names] == [params.var(n).key for n in names]


# ---- answers kept while the tables they rest on stand still -------------------------------


def test_another_process_change_to_a_table_read_ends_the_kept_answer(seg, step, children):
    found = step.find_var("W")
    assert step.find_var("W") is found  # kept
    calls = [("params/step", None, "var", ("W",))]  # shadows the parent's W
    children("spawn", workers.scope_calls, seg.name, calls).result()
    nearer = step.find_var("W")
    assert nearer is not found and nearer.scope_path == "params/step"
    children("spawn", workers.erase_var, seg.name, "params/step", "W").result()
    assert step.find_var("W").key == found.key
    children("spawn", workers.erase_var, seg.name, "params", "W").result()
    assert step.find_var("W") is None
    assert "W" not in step


def test_a_kept_miss_ends_when_the_name_is_made(seg, step, children):
    assert step.find_var("late") is None
    assert step.find_local_var("late") is None
    assert "late" not in step
    calls = [("params", None, "var", ("late",)), ("params", "late", "=label", ("made",))]
    children("spawn", workers.scope_calls, seg.name, calls).result()
    assert step.find_var("late").label == "made"
    assert step.find_local_var("late") is None  # the local lookup reads the step's table only
    assert "late" in step


def test_find_var_and_find_local_var_keep_their_own_answers(seg, step):
    up = step.find_var("W")
    assert step.find_local_var("W") is None
    assert step.find_var("W") is up
    own = step.var("W")
    assert step.find_local_var("W") is own
    assert step.find_var("W").key == own.key


def test_equal_names_and_str_subclasses_get_the_same_answer(seg, step):
    class Name(str):
        pass

    found = step.find_var("W")
    assert step.find_var("".join(["W"])) is found  # equal, not the same object
    assert step.find_var(Name("W")) is found
    assert step[Name("W")] is found
    with pytest.raises(TypeError):
        step.find_var(b"W")
    with pytest.raises(ValueError):
        step.find_var("W\0")


def test_a_released_scope_keeps_nothing(seg, step):
    with step.local() as s:
        assert s.find_var("W").scope_path == "params"
    with pytest.raises(pdshm.Error):
        s.find_var("W")


def test_names_that_share_an_entry_each_get_their_own_answer(seg, step):
    params = seg.open("params")
    names = [f"n{i}" for i in range(200)]  # many more than the entries kept
    for n in names:
        params.var(n).label = n
    for _ in range(2):
        assert [step.find_var(n).label for n in names] == names
        assert [step.find_var(n + "-absent") for n in names[:50]] == [None] * 50
    params.erase("n7")
    assert step.find_var("n7") is None
