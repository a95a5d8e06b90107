"""Smoke tests of the extension's own machinery (threads, subinterpreters,
lazy owner paths, inherited views across two forks, DLPack keywords).

Self-contained: each test makes its own segment "smoke<pid>-<n>" and removes
it, whatever happens.
"""
import itertools
import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest

import pdshm

_serial = itertools.count()


@pytest.fixture
def smoke_seg():
    name = f"smoke{os.getpid()}-{next(_serial)}"
    s = pdshm.create(name, size=8 << 20)
    yield s
    s.detach()
    try:
        pdshm.unlink(name)
    except pdshm.NotFound:
        pass


def wait_child(pid, timeout=30.0):
    """The child's exit status; kills it when it outlives timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"child {pid} still running after {timeout} s")


def test_detach_from_another_thread_leaves_running_calls_a_live_attachment(smoke_seg):
    v = smoke_seg.root.var("w")
    v.assign(np.ones(1 << 16))
    failures = []

    def work():
        for i in range(3000):
            try:
                smoke_seg.stats()
                with v.lock():
                    pass
                v.assign(np.ones(1 << 16))
            except pdshm.InvalidArgument:
                return  # "segment was detached": the expected end
            except BaseException as e:  # anything else is a failure
                failures.append(repr(e))
                return

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    smoke_seg.detach()
    for t in threads:
        t.join(30)
    assert not failures
    assert smoke_seg.closed


def test_module_works_in_a_subinterpreter(smoke_seg):
    si = pytest.importorskip("_xxsubinterpreters")
    code = (
        "import pdshm\n"
        f"s = pdshm.attach({smoke_seg.name!r})\n"
        "s.root.var('from_sub').resize('int8', (3,))\n"
        "try:\n"
        "    s.root['absent']\n"
        "except KeyError:\n"
        "    s.root.var('saw_keyerror')\n"
        "s.detach()\n"
    )
    iid = si.create()
    try:
        si.run_string(iid, code)
    finally:
        si.destroy(iid)
    root = smoke_seg.root
    assert root.find_local_var("from_sub").shape == (3,)
    assert "saw_keyerror" in root


def test_var_found_through_anonymous_scopes_pickles_as_its_owners(smoke_seg):
    params = smoke_seg.root.new_scope("params")
    w = params.var("W")
    with params.local() as step, step.local() as inner:
        found = inner.find_var("W")
        assert found.scope_path == "params"
        assert pickle.loads(pickle.dumps(found)) == w
        own = inner.var("tmp")
        assert own.scope_path is None
        with pytest.raises(TypeError):
            pickle.dumps(own)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_grandchild_keeps_a_view_taken_before_both_forks(smoke_seg):
    sc = smoke_seg.root.new_scope("s")
    v = sc.var("w")
    v.assign(np.arange(4096, dtype=np.float64))
    view = v.numpy()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: fork a grandchild that checks after the erase
        status = 1
        try:
            os.close(w)
            gpid = os.fork()
            if gpid == 0:
                os.read(r, 1)
                ok = bool((view == np.arange(4096)).all())
                os._exit(0 if ok else 3)
            status = os.waitstatus_to_exitcode(wait_child(gpid))
        finally:
            os._exit(status)
    os.close(r)
    sc.erase("w")
    for i in range(8):
        sc.var(f"x{i}").assign(np.full(4096, -1.0))
    os.write(w, b"x")
    os.close(w)
    assert os.waitstatus_to_exitcode(wait_child(pid)) == 0
    assert smoke_seg.check() == []


def test_dlpack_takes_newer_consumers_keywords(smoke_seg):
    torch = pytest.importorskip("torch")
    v = smoke_seg.root.var("w")
    v.assign(np.ones(3))
    t = torch.from_dlpack(v.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=False))
    t += 1
    assert v.numpy().tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(BufferError):
        v.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        v.__dlpack__(dl_device=(2, 0))


def test_wait_is_woken_by_another_process_unlocking(smoke_seg):
    v = smoke_seg.root.var("w")
    seen = v.version
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            time.sleep(0.2)
            child_seg = pdshm.attach(smoke_seg.name)
            with child_seg.root["w"].lock():
                pass
            status = 0
        finally:
            os._exit(status)
    assert v.wait(seen, timeout=20) > seen
    assert os.waitstatus_to_exitcode(wait_child(pid)) == 0
    with pytest.raises(TimeoutError):
        v.wait(v.version, timeout=0.05)


def test_barrier_survivor_gets_peer_died_when_a_member_is_killed(smoke_seg):
    g = smoke_seg.group("pair", 2, rank=0)
    pid = os.fork()
    if pid == 0:
        try:
            child_seg = pdshm.attach(smoke_seg.name)
            member = child_seg.group("pair", 2, rank=1)  # kept: dying, not leaving
            member.barrier(timeout=20)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    g.barrier(timeout=20)  # both arrive: the round passes
    with pytest.raises(pdshm.PeerDied):
        g.barrier(timeout=20)  # the other member died meanwhile
    wait_child(pid)
    g.leave()
    assert g.left


def test_detach_while_another_thread_waits_in_a_barrier(smoke_seg):
    g = smoke_seg.group("two", 2)
    answers = []

    def waiter():
        try:
            g.barrier(timeout=1)
            answers.append("passed")
        except pdshm.Error as e:
            answers.append(type(e))

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)
    with pytest.raises(pdshm.Error):
        g.barrier()  # one thread at a time
    smoke_seg.detach()
    assert g.left
    t.join(30)
    assert answers == [pdshm.TimedOut]


def test_assign_of_the_same_layout_writes_in_place_under_live_views(smoke_seg):
    v = smoke_seg.root.var("w")
    v.assign(np.zeros(4))
    view = v.numpy()
    v.assign(np.arange(4.0))
    assert view.tolist() == [0.0, 1.0, 2.0, 3.0]
    v.assign(view[::-1])  # overlapping source and destination
    assert v.numpy().tolist() == [3.0, 2.0, 1.0, 0.0]
    v.assign(np.ones(5))  # another shape: a new buffer, the view keeps the old one
    assert view.tolist() == [3.0, 2.0, 1.0, 0.0]
    assert v.numpy().tolist() == [1.0] * 5
