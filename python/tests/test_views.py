"""Zero-copy views in one process: numpy(), np.asarray, memoryview; dtypes and
their buffer formats, float16, zero-size and 0-d tensors, assign, and the pin
that keeps a view's bytes alive through an erase or a resize."""
import gc

import numpy as np
import pytest

import pdshm
from reuse import churn

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]


def filled(seg, dtype, shape, name="w"):
    v = seg.root.var(name)
    v.resize(dtype, shape)
    v.numpy()[...] = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
    return v


def test_numpy_and_asarray_alias_the_same_bytes(seg):
    v = filled(seg, "float32", (2, 3))
    a = v.numpy()
    b = np.asarray(v)
    a[1, 2] = 42.0
    assert b[1, 2] == 42.0
    assert v.numpy()[1, 2] == 42.0


def test_memoryview_aliases_the_numpy_view(seg):
    v = filled(seg, "int32", (4,))
    m = memoryview(v)
    m[2] = -7
    assert v.numpy()[2] == -7
    v.numpy()[0] = 9
    assert m[0] == 9


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_view_has_the_tensor_dtype_and_shape(seg, dtype):
    v = filled(seg, dtype, (3, 2))
    a = v.numpy()
    assert a.dtype == np.dtype(dtype)
    assert a.shape == (3, 2)
    assert v.dtype == dtype
    assert v.nbytes == 6 * np.dtype(dtype).itemsize
    assert a.flags.c_contiguous and a.flags.writeable


@pytest.mark.parametrize("dtype", DTYPES)
def test_memoryview_format_is_the_struct_code_of_the_dtype(seg, dtype):
    v = filled(seg, dtype, (2, 3))
    m = memoryview(v)
    assert np.dtype(m.format) == np.dtype(dtype), m.format
    assert m.itemsize == np.dtype(dtype).itemsize
    assert m.shape == (2, 3)
    assert m.nbytes == v.nbytes
    assert not m.readonly
    assert m.c_contiguous


def test_float16_has_format_e_and_numpy_float16(seg):
    v = seg.root.var("h")
    v.resize("float16", (3,))
    v.numpy()[:] = [0.5, -2.0, 65504.0]
    assert memoryview(v).format == "e"
    assert v.numpy().dtype == np.float16
    assert np.asarray(memoryview(v)).tolist() == [0.5, -2.0, 65504.0]


def test_views_see_the_tensor_bytes_in_native_order(seg):
    v = seg.root.var("w")
    v.resize("int32", (1,))
    v.numpy()[0] = 0x01020304
    assert bytes(memoryview(v).cast("B")) == (0x01020304).to_bytes(4, "little")


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 5, 2)])
def test_zero_size_tensor_has_no_bytes_and_empty_views(seg, shape):
    v = seg.root.var("z")
    v.resize("float32", shape)
    assert v.nbytes == 0
    assert tuple(v.shape) == shape
    assert v.numpy().shape == shape and v.numpy().size == 0
    assert memoryview(v).nbytes == 0
    assert np.asarray(v).shape == shape


def test_zero_dimensional_tensor_is_a_scalar(seg):
    v = seg.root.var("s")
    v.resize("float64", ())
    assert tuple(v.shape) == () and v.nbytes == 8
    a = v.numpy()
    assert a.shape == ()
    a[()] = 2.5
    assert float(np.asarray(v)) == 2.5


def test_assign_makes_the_tensor_a_copy_of_the_array(seg):
    v = seg.root.var("w")
    src = np.arange(12, dtype=np.int16).reshape(3, 4)
    v.assign(src)
    assert (v.dtype, tuple(v.shape)) == ("int16", (3, 4))
    np.testing.assert_array_equal(v.numpy(), src)
    src[0, 0] = 99
    assert v.numpy()[0, 0] == 0


def test_assign_of_a_non_contiguous_array_copies_its_values(seg):
    v = seg.root.var("w")
    src = np.arange(20, dtype=np.float64).reshape(4, 5)[:, ::2]
    v.assign(src)
    assert tuple(v.shape) == (4, 3)
    np.testing.assert_array_equal(v.numpy(), src)


def test_a_view_of_a_variable_that_holds_no_tensor_is_etype(seg):
    v = seg.root.var("empty")
    with pytest.raises(pdshm.Error) as ei:
        v.numpy()
    assert ei.value.code == -10002  # PDSHM_ETYPE


# Pins: a view keeps its bytes after the variable lets them go.

def test_view_keeps_its_bytes_after_an_erase(seg):
    v = filled(seg, "int64", (1000,))
    a = v.numpy()
    seg.root.erase("w")
    churn(seg.root, a.nbytes)
    assert a[999] == 999 and a.sum() == sum(range(1000))


def test_view_keeps_the_old_buffer_after_a_resize(seg):
    v = filled(seg, "float32", (8,))
    a = v.numpy()
    a[:] = 7.0
    v.resize("float32", (8,))
    v.numpy()[:] = 1.0
    assert (a == 7.0).all()


def test_view_keeps_its_bytes_after_the_scope_dies(seg):
    kid = seg.root.new_scope()
    v = kid.var("w")
    v.resize("int32", (64,))
    a = v.numpy()
    a[:] = 5
    kid.release()
    churn(seg.root, a.nbytes)
    assert (a == 5).all()


def test_used_goes_down_only_when_the_last_view_goes(seg):
    s = seg.root.new_scope("p")
    s.var("warm")
    s.erase("warm")
    empty = seg.stats().used
    v = s.var("w")
    v.resize("float64", (32 << 10,))  # 256 KiB
    a = v.numpy()
    b = np.asarray(v)[10:20]
    s.erase("w")
    assert seg.stats().used - empty >= 256 << 10
    del a
    gc.collect()
    assert seg.stats().used - empty >= 256 << 10
    del b
    gc.collect()
    assert seg.stats().used == empty
