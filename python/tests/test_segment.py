"""Segments: create, attach, detach, unlink, and their options."""
import errno
import os
import stat

import pytest

import pdshm
import workers
from conftest import SEG_SIZE, unlink_quietly


def shm_path(name):
    return f"/dev/shm/pdshm.{name}"


def test_create_makes_the_file_of_the_given_size_and_mode(seg_name):
    with pdshm.create(seg_name, size=SEG_SIZE, mode=0o640) as s:
        st = os.stat(shm_path(seg_name))
        assert st.st_size == SEG_SIZE
        assert stat.S_IMODE(st.st_mode) == 0o640
        assert s.name == seg_name


def test_create_defaults_to_mode_0600(seg):
    assert stat.S_IMODE(os.stat(shm_path(seg.name)).st_mode) == 0o600


def test_stats_of_a_fresh_segment(seg):
    st = seg.stats()
    assert 0 < st.size <= SEG_SIZE
    assert st.used + st.free == st.size
    assert (st.scopes, st.vars, st.tensor_bytes) == (1, 0, 0)  # the root
    assert (st.procs_alive, st.procs_dead) == (1, 0)


def test_tensor_bytes_counts_the_tensors(seg):
    seg.root.var("a").resize("float32", (100,))
    seg.root.var("b").resize("int8", (7,))
    assert seg.stats().tensor_bytes == 407


def test_fresh_segment_checks_clean(seg):
    assert seg.check() == []


def test_attach_from_another_process_counts_as_alive(seg, children):
    kid = children("spawn", workers.hold_view_until_told, seg.name, "p", "w")
    seg.root.new_scope("p").var("w").resize("int8", (1,))
    kid.recv()
    assert seg.stats().procs_alive == 2
    kid.send("drop")
    kid.recv()
    kid.send("exit")
    kid.result()
    assert (seg.stats().procs_alive, seg.stats().procs_dead) == (1, 0)


def test_with_block_detaches(seg):
    with pdshm.attach(seg.name) as again:
        assert seg.stats().procs_alive == 2
        assert again.name == seg.name
    assert seg.stats().procs_alive == 1


def test_calls_on_a_detached_segment_raise_a_pdshm_error(seg_name):
    s = pdshm.create(seg_name, size=SEG_SIZE)
    s.detach()
    with pytest.raises(pdshm.Error):
        s.stats()
    with pytest.raises(pdshm.Error):
        s.root


def test_unlink_removes_the_name_but_not_the_attachment(seg):
    seg.root.var("w").label = "still here"
    pdshm.unlink(seg.name)
    assert not os.path.exists(shm_path(seg.name))
    assert seg.root["w"].label == "still here"
    with pytest.raises(pdshm.Error) as ei:
        pdshm.attach(seg.name)
    assert ei.value.errno == errno.ENOENT


def test_unlink_of_an_absent_segment_is_enoent(seg_name):
    with pytest.raises(pdshm.Error) as ei:
        pdshm.unlink(seg_name)
    assert ei.value.code == -errno.ENOENT


def test_attach_beyond_max_procs_is_eusers(seg_name):
    with pdshm.create(seg_name, size=SEG_SIZE, max_procs=2):
        with pdshm.attach(seg_name):
            with pytest.raises(pdshm.Error) as ei:
                pdshm.attach(seg_name)
            assert ei.value.code == -errno.EUSERS


def test_segment_name_of_200_bytes_is_accepted(seg_name):
    name = (seg_name + "-" + "n" * 200)[:200]
    try:
        with pdshm.create(name, size=SEG_SIZE) as s:
            assert s.name == name
    finally:
        unlink_quietly(name)
