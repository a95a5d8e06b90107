"""Exception classes: each PDSHM_E* code raises pdshm.Error that is also the
builtin that fits, with .code (negative), .errno (positive) and the C detail
in its message."""
import errno
import os

import pytest

import pdshm
from conftest import SEG_SIZE

SIZE_MAX = 1 << 40  # PDSHM_SIZE_MAX, the largest segment


def test_error_is_an_os_error():
    assert issubclass(pdshm.Error, OSError)


@pytest.mark.parametrize("cls", ["BadSegment", "Forked", "PeerDied"])
def test_specific_errors_are_pdshm_errors(cls):
    assert issubclass(getattr(pdshm, cls), pdshm.Error)


def test_absent_name_is_key_error_with_enoent(seg):
    with pytest.raises(KeyError) as ei:
        seg.root.erase("nope")
    e = ei.value
    assert isinstance(e, pdshm.Error)
    assert (e.code, e.errno) == (-errno.ENOENT, errno.ENOENT)


def test_absent_segment_is_enoent(seg_name):
    with pytest.raises(pdshm.Error) as ei:
        pdshm.attach(seg_name)
    assert (ei.value.code, ei.value.errno) == (-errno.ENOENT, errno.ENOENT)


def test_existing_segment_is_file_exists_error(seg):
    with pytest.raises(FileExistsError) as ei:
        pdshm.create(seg.name, size=SEG_SIZE)
    e = ei.value
    assert isinstance(e, pdshm.Error)
    assert (e.code, e.errno) == (-errno.EEXIST, errno.EEXIST)


def test_existing_variable_is_file_exists_error(seg):
    seg.root.create_var("w")
    with pytest.raises(FileExistsError) as ei:
        seg.root.create_var("w")
    assert (ei.value.code, ei.value.errno) == (-errno.EEXIST, errno.EEXIST)


def test_tensor_larger_than_the_segment_is_memory_error(seg):
    v = seg.root.var("w")
    v.resize("float32", (4,))
    with pytest.raises(MemoryError) as ei:
        v.resize("float32", (SEG_SIZE,))  # 4 bytes each: four times the segment
    e = ei.value
    assert isinstance(e, pdshm.Error)
    assert (e.code, e.errno) == (-errno.ENOMEM, errno.ENOMEM)
    assert (v.dtype, tuple(v.shape)) == ("float32", (4,))


def test_full_dev_shm_is_memory_error_saying_how_big_it_is(seg_name):
    vfs = os.statvfs("/dev/shm")
    if vfs.f_blocks == 0 or vfs.f_blocks * vfs.f_frsize >= SIZE_MAX:
        pytest.skip("/dev/shm has no limit below the largest segment: nothing to exceed safely")
    with pytest.raises(MemoryError) as ei:
        pdshm.create(seg_name, size=SIZE_MAX)
    e = ei.value
    assert isinstance(e, pdshm.Error)
    assert (e.code, e.errno) == (-errno.ENOSPC, errno.ENOSPC)
    assert "/dev/shm" in str(e) and "MiB" in str(e)
    assert not os.path.exists(f"/dev/shm/pdshm.{seg_name}")


def test_too_many_dimensions_is_value_error_with_einval(seg):
    v = seg.root.var("w")
    with pytest.raises(ValueError) as ei:
        v.resize("float32", (1,) * 9)
    e = ei.value
    assert isinstance(e, pdshm.Error)
    assert (e.code, e.errno) == (-errno.EINVAL, errno.EINVAL)
    assert "9" in str(e)


def test_negative_dimension_is_value_error_naming_it(seg):
    v = seg.root.var("w")
    with pytest.raises(ValueError) as ei:
        v.resize("float32", (2, -1))
    e = ei.value
    assert isinstance(e, pdshm.Error)
    assert (e.code, e.errno) == (-errno.EINVAL, errno.EINVAL)
    assert "negative" in str(e)


def test_overflowing_shape_is_value_error_with_eoverflow(seg):
    v = seg.root.var("w")
    with pytest.raises(ValueError) as ei:
        v.resize("float64", (1 << 40, 1 << 40))
    e = ei.value
    assert isinstance(e, pdshm.Error)
    assert (e.code, e.errno) == (-errno.EOVERFLOW, errno.EOVERFLOW)


def test_over_long_name_is_value_error_with_enametoolong(seg):
    with pytest.raises(ValueError) as ei:
        seg.root.var("x" * 256)
    e = ei.value
    assert isinstance(e, pdshm.Error)
    assert (e.code, e.errno) == (-errno.ENAMETOOLONG, errno.ENAMETOOLONG)


def test_bad_segment_name_is_value_error_naming_the_byte(seg_name):
    with pytest.raises(ValueError) as ei:
        pdshm.create(seg_name + "/x", size=SEG_SIZE)
    e = ei.value
    assert isinstance(e, pdshm.Error)
    assert e.code == -errno.EINVAL
    assert "0x2f" in str(e)


def test_group_writable_segment_is_permission_error(seg_name):
    pdshm.create(seg_name, size=SEG_SIZE, mode=0o660).detach()
    with pytest.raises(PermissionError) as ei:
        pdshm.attach(seg_name)
    e = ei.value
    assert isinstance(e, pdshm.Error)
    assert (e.code, e.errno) == (-errno.EACCES, errno.EACCES)
    assert "writable by group or others" in str(e)


def test_shared_users_accepts_a_group_writable_segment(seg_name):
    pdshm.create(seg_name, size=SEG_SIZE, mode=0o660).detach()
    with pdshm.attach(seg_name, shared_users=True) as s:
        assert s.stats().procs_alive == 1


def test_wait_past_its_timeout_is_timeout_error(seg):
    v = seg.root.var("w")
    with pytest.raises(TimeoutError) as ei:
        v.wait(v.version, timeout=0.05)
    e = ei.value
    assert isinstance(e, pdshm.Error)
    assert (e.code, e.errno) == (-errno.ETIMEDOUT, errno.ETIMEDOUT)


def test_file_that_is_not_a_segment_is_bad_segment(seg_name):
    path = f"/dev/shm/pdshm.{seg_name}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, 1 << 20)
    finally:
        os.close(fd)
    with pytest.raises(pdshm.BadSegment) as ei:
        pdshm.attach(seg_name)
    e = ei.value
    assert isinstance(e, pdshm.Error)
    assert e.code == -10001
    assert "no pdshm magic" in str(e)


@pytest.mark.parametrize("call, named", [
    (lambda s: s.root.erase("nope_var"), "nope_var"),
    (lambda s: s.open("no_scope/fc"), "no_scope"),
    (lambda s: s.root.rename("gone_var", "x"), "gone_var"),
], ids=["erase", "open", "rename"])
def test_key_error_message_names_what_is_absent(seg, call, named):
    with pytest.raises(KeyError) as ei:
        call(seg)
    assert named in str(ei.value)


def test_error_names_its_code_in_the_message(seg):
    with pytest.raises(FileExistsError) as ei:
        seg.root.new_scope("a")
        seg.root.new_scope("a")
    assert "exist" in str(ei.value)


def test_erase_of_a_stale_var_is_estale(seg):
    v = seg.root.var("w")
    seg.root.erase("w")
    with pytest.raises(pdshm.Error) as ei:
        v.resize("float32", (1,))
    assert (ei.value.code, ei.value.errno) == (-errno.ESTALE, errno.ESTALE)
