"""Variable locks from Python: exclusive and shared across processes, the
context manager, the version bump, and a second take by the same thread
refused instead of hanging."""
import errno
import threading

import pytest

import pdshm
import workers


@pytest.fixture
def w(seg):
    return seg.root.new_scope("p").var("w")


def other_holds(children, seg, exclusive):
    kid = children("spawn", workers.hold_lock_until_told, seg.name, "p", "w", exclusive)
    kid.expect("locked")
    return kid


def let_go(kid):
    kid.send("unlock")
    kid.expect("unlocked")
    kid.send("exit")
    kid.result()


def test_exclusive_lock_of_another_process_excludes_ours(seg, w, lock_taker, children):
    kid = other_holds(children, seg, exclusive=True)
    assert not lock_taker(w, exclusive=True, timeout=0.2)
    assert not lock_taker(w, exclusive=False, timeout=0.2)
    let_go(kid)


def test_our_waiting_lock_is_granted_when_the_other_process_lets_go(seg, w, children):
    kid = other_holds(children, seg, exclusive=True)
    got = threading.Event()

    def take():
        with w.lock():
            got.set()

    t = threading.Thread(target=take, daemon=True)
    t.start()
    assert not got.wait(0.2)
    let_go(kid)
    t.join(10)
    assert got.is_set()


def test_shared_locks_of_two_processes_coexist(seg, w, lock_taker, children):
    kid = other_holds(children, seg, exclusive=False)
    assert lock_taker(w, exclusive=False, timeout=10)
    let_go(kid)


def test_shared_lock_of_another_process_excludes_an_exclusive_one(seg, w, lock_taker, children):
    kid = other_holds(children, seg, exclusive=False)
    assert not lock_taker(w, exclusive=True, timeout=0.2)
    let_go(kid)
    assert lock_taker(w, exclusive=True, timeout=10)


def test_lock_is_released_when_the_with_block_raises(w, lock_taker):
    with pytest.raises(RuntimeError):
        with w.lock():
            raise RuntimeError("boom")
    assert lock_taker(w, exclusive=True, timeout=10)


def test_exclusive_unlock_bumps_the_version_seen_by_another_process(seg, w, children):
    v0 = w.version
    kid = other_holds(children, seg, exclusive=True)
    let_go(kid)
    assert w.version > v0


def test_second_lock_by_the_same_thread_is_refused_not_a_hang(w):
    outcome = []

    def twice():
        with w.lock():
            try:
                with w.lock():
                    outcome.append("taken twice")
            except pdshm.Error as e:
                outcome.append(e.code)

    t = threading.Thread(target=twice, daemon=True)
    t.start()
    t.join(10)
    assert outcome == [-errno.EDEADLK]


def test_lock_held_while_its_variable_is_erased_blocks_no_new_variable(
        seg, w, lock_taker, children):
    holder = children("spawn", workers.hold_lock_across_an_erase, seg.name, "p", "w")
    holder.expect("locked")
    p = seg.open("p")
    p.erase("w")
    holder.send("release")
    assert holder.recv() in (("released", 0), ("released", -errno.ESTALE))
    # the holder lives on: a lock it failed to let go of would still be held
    assert children("spawn", workers.lock_new_variables, seg.name, "p", 20).result() == []
    for i in range(20):
        assert lock_taker(p.var(f"mine{i}"), timeout=5), f"mine{i}"
    holder.send("exit")
    holder.result()
    assert seg.check() == []
