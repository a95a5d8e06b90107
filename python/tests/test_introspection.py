"""The introspection calls (what pdshm-attach shows) on a segment that several
processes use: process slots, scopes with their creators and holders,
variables, locks with their holders, the allocator, the header."""
import os

import pytest

import pdshm
import workers



@pytest.fixture
def busy(seg, children):
    """seg, with a second process attached and holding things (see workers)."""
    seg.root.new_scope("p").var("w").resize("int32", (4,))
    kid = children("spawn", workers.introspection_subject, seg.name)
    kid.expect("ready")
    yield seg, kid
    if kid.proc.is_alive():
        kid.send("exit")
        kid.result()


def scope_named(seg, name):
    found = [s for s in seg.scopes() if s.name == name]
    assert len(found) == 1, [s.name for s in seg.scopes()]
    return found[0]


def test_procs_lists_every_attached_process(busy):
    seg, kid = busy
    live = {p.pid: p for p in seg.procs()}
    assert set(live) == {os.getpid(), kid.pid}
    assert all(p.state == "alive" for p in live.values())
    assert live[kid.pid].handles >= 1  # its anonymous scope at least


def test_procs_shows_a_killed_process_dead_until_reaped(busy):
    seg, kid = busy
    kid.kill()
    states = {p.pid: p.state for p in seg.procs()}
    assert states == {os.getpid(): "alive", kid.pid: "dead"}
    seg.reap()
    assert [p.pid for p in seg.procs()] == [os.getpid()]


def test_scopes_lists_the_root_first_then_the_tree(busy):
    seg, kid = busy
    scopes = seg.scopes()
    assert scopes[0].depth == 0 and scopes[0].parent_id == 0
    names = {s.name for s in scopes if s.named}
    assert names == {"p", "made_by_kid"}
    ids = {s.id for s in scopes}
    assert all(s.parent_id in ids for s in scopes[1:])


def test_scopes_shows_who_made_a_named_scope(busy):
    seg, kid = busy
    made = scope_named(seg, "made_by_kid")
    assert made.creator_pid == kid.pid
    assert made.linked and made.named
    assert made.vars == 1


def test_scopes_shows_another_process_holding_its_anonymous_scope(busy):
    seg, kid = busy
    anon = [s for s in seg.scopes() if s.depth == 1 and not s.named]
    assert len(anon) == 1
    assert anon[0].creator_pid == kid.pid
    assert kid.pid in list(anon[0].holders)[:anon[0].nholders]


def test_vars_of_describes_another_process_variable(busy):
    seg, kid = busy
    made = scope_named(seg, "made_by_kid")
    (kv,) = seg.vars_of(made.id)
    assert (kv.name, kv.label) == ("kv", "input")
    assert list(kv.readers) == ["op_r"] and list(kv.writers) == []
    assert (kv.type, kv.dtype, tuple(kv.shape), kv.nbytes) == ("tensor", "float32", (2, 3), 24)


def test_vars_of_shows_an_exclusive_lock_and_its_holder(busy):
    seg, kid = busy
    (w,) = seg.vars_of(scope_named(seg, "p").id)
    assert w.lock_state == "exclusive"
    assert w.lock_holder_pid == kid.pid


def test_locks_lists_no_variable_lock(busy):
    # a variable's lock is a word of its record, not an entry of the lock
    # table: vars_of shows its holder (above)
    seg, kid = busy
    assert [lk for lk in seg.locks() if lk.kind == "var"] == []
    assert any(lk.kind == "scope" for lk in seg.locks())


def test_alloc_agrees_with_stats(busy):
    seg, kid = busy
    a, st = seg.alloc(), seg.stats()
    assert a.used == st.used
    assert a.used + a.free == a.arena == st.size


def test_info_describes_the_header(seg):
    info = seg.info()
    assert info.creator_pid == os.getpid()
    assert info.creator_uid == os.getuid()
    assert info.max_procs == 128
    assert info.size == 8 << 20
    assert not info.poisoned


def test_read_only_attachment_sees_the_same_tree(busy):
    seg, kid = busy
    with pdshm.attach(seg.name, readonly=True) as ro:
        assert [(s.id, s.name, s.creator_pid) for s in ro.scopes()] == \
            [(s.id, s.name, s.creator_pid) for s in seg.scopes()]
        assert {p.pid for p in ro.procs()} == {os.getpid(), kid.pid}
        assert [v.name for v in ro.vars_of(0)] == [v.name for v in seg.vars_of(0)]


def test_scopes_shows_a_dropped_kid_still_held_as_unlinked(seg, children):
    held = seg.root.new_scope("a")
    children("spawn", workers.scope_calls, seg.name, [("", None, "drop_kids", ())]).result()
    a = scope_named(seg, "a")
    assert a.named and not a.linked
    assert os.getpid() in list(a.holders)[:a.nholders]
    held.release()
    assert [s.name for s in seg.scopes() if s.name == "a"] == []


def test_procs_counts_the_handles_of_each_process(seg):
    s1, s2 = seg.root.new_scope(), seg.root.new_scope("n")
    mine = {p.pid: p for p in seg.procs()}[os.getpid()]
    assert mine.handles >= 2
    s1.release()
    s2.release()
    assert {p.pid: p for p in seg.procs()}[os.getpid()].handles == mine.handles - 2
