"""Handles used after what they stand on is gone raise pdshm.Error, never
crash; views keep their memory even when every handle is gone."""
import gc

import numpy as np
import pytest

import pdshm
from conftest import SEG_SIZE
from reuse import churn


def test_scope_used_after_release_raises(seg):
    s = seg.root.new_scope("p")
    s.release()
    with pytest.raises(pdshm.Error):
        s.var("w")


def test_scope_used_after_its_segment_detached_raises(seg_name):
    seg = pdshm.create(seg_name, size=SEG_SIZE)
    s = seg.root.new_scope("p")
    seg.detach()
    with pytest.raises(pdshm.Error):
        s.var("w")


def test_var_used_after_its_segment_detached_raises(seg_name):
    seg = pdshm.create(seg_name, size=SEG_SIZE)
    v = seg.root.var("w")
    seg.detach()
    with pytest.raises(pdshm.Error):
        v.resize("float32", (1,))


def test_view_outlives_every_handle_being_collected(seg_name):
    seg = pdshm.create(seg_name, size=SEG_SIZE)
    v = seg.root.new_scope("p").var("w")
    v.resize("int64", (512,))
    a = v.numpy()
    a[:] = np.arange(512)
    del seg, v
    gc.collect()
    with pdshm.attach(seg_name) as other:
        other.open("p").erase("w")
        churn(other.root, a.nbytes)
    assert a.sum() == sum(range(512))
    del a
    gc.collect()
    with pdshm.attach(seg_name) as again:
        assert (again.stats().procs_alive, again.stats().procs_dead) == (1, 0)


def test_memoryview_outlives_a_released_anonymous_scope(seg):
    s = seg.root.new_scope()
    v = s.var("x")
    v.resize("uint8", (16,))
    m = memoryview(v)
    m[:] = bytes(range(16))
    s.release()
    churn(seg.root, 16)
    assert bytes(m) == bytes(range(16))
    m.release()
    assert seg.check() == []


def test_view_taken_after_the_variable_was_erased_is_refused(seg):
    v = seg.root.var("w")
    v.resize("float32", (4,))
    seg.root.erase("w")
    with pytest.raises(pdshm.Error):
        np.asarray(v)
    with pytest.raises(pdshm.Error):
        memoryview(v)
