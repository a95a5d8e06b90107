"""A Python trainer killed by SIGKILL while it holds views, an anonymous local
scope and a variable's exclusive lock: the reaper gives every byte back, the
segment checks clean, and the lock can be taken again."""
import gc

import numpy as np
import pytest

import workers

N = 16 << 10  # float64 elements of p/w


def setup_params(seg):
    p = seg.root.new_scope("p")
    p.var("warm")
    p.erase("warm")
    empty = seg.stats().used
    w = p.var("w")
    w.resize("float64", (N,))
    w.numpy()[:] = np.arange(N, dtype=np.float64)
    return p, w, empty


def start_trainer(children, method, seg):
    """A trainer holding what workers.trainer_until_killed takes, ready to be killed."""
    kid = children(method, workers.trainer_until_killed, seg.name)
    assert kid.recv() == ("ready", float(sum(range(N))))
    st = seg.stats()
    assert st.procs_alive == 2
    return kid


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_killed_trainer_is_reaped_with_every_byte_back(seg, children, method):
    p, w, _ = setup_params(seg)
    baseline = seg.stats()
    kid = start_trainer(children, method, seg)
    assert seg.stats().used > baseline.used  # its local scope, tensor, handles
    kid.kill()
    assert seg.stats().procs_dead == 1
    assert seg.reap() == 1
    st = seg.stats()
    assert (st.procs_alive, st.procs_dead) == (1, 0)
    assert (st.used, st.scopes, st.vars) == (baseline.used, baseline.scopes, baseline.vars)
    assert seg.check() == []


def test_killed_trainers_lock_can_be_taken_again(seg, lock_taker, children):
    p, w, _ = setup_params(seg)
    kid = start_trainer(children, "spawn", seg)
    assert not lock_taker(w, timeout=0.2)  # the trainer holds it
    kid.kill()
    seg.reap()
    assert lock_taker(w)
    np.testing.assert_array_equal(w.numpy(), np.arange(N, dtype=np.float64))
    assert seg.check() == []


def test_killed_trainers_lock_is_recovered_without_an_explicit_reap(seg, lock_taker, children):
    p, w, _ = setup_params(seg)
    kid = start_trainer(children, "spawn", seg)
    kid.kill()
    assert lock_taker(w)
    assert seg.check() == []


def test_buffer_pinned_by_a_killed_trainer_goes_back_at_reap(seg, children):
    p, w, empty = setup_params(seg)
    kid = start_trainer(children, "spawn", seg)
    p.erase("w")
    gc.collect()
    kid.kill()
    assert seg.stats().used - empty >= N * 8  # its view still pins w's buffer
    seg.reap()
    assert seg.stats().used == empty
    assert seg.check() == []
