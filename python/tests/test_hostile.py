"""Hostile input: bad names, over-long names, wrong types and bad shapes are
TypeError or ValueError (pdshm's own or Python's), and change nothing."""
import numpy as np
import pytest

import pdshm
from conftest import SEG_SIZE

NAME_MAX = 255


@pytest.fixture
def snapshot(seg):
    """The scope tree's state, to compare before and after a refused call."""
    seg.root.new_scope("p").var("w").resize("float32", (4,))

    def take():
        st = seg.stats()
        p = seg.open("p")
        w = p["w"]
        return (st.used, st.scopes, st.vars, sorted(v.name for v in p.vars()),
                w.dtype, tuple(w.shape), w.label, tuple(w.readers))
    return take


BAD_VAR_NAMES = ["", "x" * (NAME_MAX + 1), "nul\0inside", "\udcff"]


@pytest.mark.parametrize("name", BAD_VAR_NAMES, ids=["empty", "too_long", "nul", "surrogate"])
@pytest.mark.parametrize("call", ["var", "create_var"])
def test_bad_variable_name_is_value_error(seg, snapshot, name, call):
    before = snapshot()
    with pytest.raises(ValueError):
        getattr(seg.open("p"), call)(name)
    assert snapshot() == before


def test_longest_variable_name_is_accepted_whole(seg):
    name = "v" * NAME_MAX
    seg.root.var(name)
    assert [v.name for v in seg.root.vars()] == [name]


@pytest.mark.parametrize("name", ["", "a/b", "s" * (NAME_MAX + 1)], ids=["empty", "slash", "too_long"])
def test_bad_scope_name_is_value_error(seg, snapshot, name):
    before = snapshot()
    with pytest.raises(ValueError):
        seg.root.new_scope(name)
    assert snapshot() == before


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "sp ace", "n" * 201],
                         ids=["empty", "dot", "dotdot", "slash", "space", "too_long"])
def test_bad_segment_name_is_value_error_and_creates_nothing(name):
    import os
    before = set(os.listdir("/dev/shm"))
    with pytest.raises(ValueError):
        pdshm.create(name, size=SEG_SIZE)
    assert set(os.listdir("/dev/shm")) - before == set()


@pytest.mark.parametrize("bad", [123, None, b"w", ["w"]], ids=["int", "none", "bytes", "list"])
def test_non_string_variable_name_is_type_error(seg, snapshot, bad):
    before = snapshot()
    with pytest.raises(TypeError):
        seg.open("p").var(bad)
    assert snapshot() == before


@pytest.mark.parametrize("args", [
    (123, (2,)),
    ("float32", "abc"),
    ("float32", (2.5,)),
    ("float32", None),
], ids=["dtype_int", "shape_str", "shape_float", "shape_none"])
def test_resize_with_wrong_types_is_type_error(seg, snapshot, args):
    before = snapshot()
    with pytest.raises(TypeError):
        seg.open("p")["w"].resize(*args)
    assert snapshot() == before


@pytest.mark.parametrize("args", [
    ("complex64", (2,)),
    ("no_such_type", (2,)),
    ("float32", (-1,)),
    ("float32", (1,) * 9),
    ("float32", (1 << 62, 1 << 62)),
], ids=["complex", "unknown", "negative", "ndim9", "overflow"])
def test_resize_with_bad_values_is_value_error(seg, snapshot, args):
    before = snapshot()
    with pytest.raises(ValueError):
        seg.open("p")["w"].resize(*args)
    assert snapshot() == before


def test_resize_with_a_dimension_beyond_64_bits_is_refused(seg, snapshot):
    before = snapshot()
    with pytest.raises((ValueError, OverflowError)):
        seg.open("p")["w"].resize("float32", (1 << 70,))
    assert snapshot() == before


@pytest.mark.parametrize("bad", [np.array([1 + 2j]), np.array([object()]), np.array(["text"])],
                         ids=["complex", "object", "unicode"])
def test_assign_of_an_unsupported_dtype_is_refused(seg, snapshot, bad):
    before = snapshot()
    with pytest.raises((TypeError, ValueError)):
        seg.open("p")["w"].assign(bad)
    assert snapshot() == before


@pytest.mark.parametrize("label", [5, b"x", ["x"]], ids=["int", "bytes", "list"])
def test_label_of_a_wrong_type_is_type_error(seg, snapshot, label):
    before = snapshot()
    with pytest.raises(TypeError):
        seg.open("p")["w"].label = label
    assert snapshot() == before


def test_over_long_label_is_value_error(seg, snapshot):
    before = snapshot()
    with pytest.raises(ValueError):
        seg.open("p")["w"].label = "l" * (NAME_MAX + 1)
    assert snapshot() == before


@pytest.mark.parametrize("op", ["", "o" * (NAME_MAX + 1)], ids=["empty", "too_long"])
def test_bad_operator_name_is_value_error(seg, snapshot, op):
    before = snapshot()
    with pytest.raises(ValueError):
        seg.open("p")["w"].add_reader(op)
    assert snapshot() == before


@pytest.mark.parametrize("kwargs", [{"size": -1}, {"size": 1}, {"max_procs": -3}, {"mode": 0o10000}],
                         ids=["size_negative", "size_tiny", "procs_negative", "mode_bits"])
def test_bad_create_options_are_refused_and_create_nothing(seg_name, kwargs):
    with pytest.raises((ValueError, OverflowError)):
        pdshm.create(seg_name, **kwargs)
    with pytest.raises(pdshm.Error):
        pdshm.attach(seg_name)


@pytest.mark.parametrize("kwargs", [{"size": "big"}, {"max_procs": 2.5}], ids=["size_str", "procs_float"])
def test_create_options_of_wrong_types_are_type_error(seg_name, kwargs):
    with pytest.raises(TypeError):
        pdshm.create(seg_name, **kwargs)
    with pytest.raises(pdshm.Error):
        pdshm.attach(seg_name)


def test_open_of_a_path_with_an_empty_component_is_refused(seg):
    seg.root.new_scope("a").new_scope("b")
    with pytest.raises((KeyError, ValueError)):
        seg.open("a//b")


def test_wait_with_a_wrong_type_is_type_error(seg):
    v = seg.root.var("w")
    with pytest.raises(TypeError):
        v.wait("zero", timeout=0.01)


def test_unique_name_with_an_over_long_prefix_is_value_error(seg):
    with pytest.raises(ValueError):
        seg.unique_name("p" * (NAME_MAX + 1))
