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


def made_from(entry, name):
    """Whether /dev/shm's entry could be a segment made from `name` (the
    suites that run beside this one make segments of their own meanwhile)."""
    stem = "pdshm." + name.split("/")[0]
    return entry == stem or (name.strip(".") != "" and entry.startswith(stem))


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "sp ace", "n" * 201],
                         ids=["empty", "dot", "dotdot", "slash", "space", "too_long"])
def test_bad_segment_name_is_value_error_and_creates_nothing(name):
    import os
    before = set(os.listdir("/dev/shm"))
    with pytest.raises(ValueError):
        pdshm.create(name, size=SEG_SIZE)
    new = set(os.listdir("/dev/shm")) - before
    assert {e for e in new if made_from(e, name)} == set()


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


# ---- segment names and create options ---------------------------------------------

NOT_STR = [123, None, b"seg", ["seg"], 1.5]
NOT_STR_IDS = ["int", "none", "bytes", "list", "float"]


@pytest.mark.parametrize("bad", NOT_STR, ids=NOT_STR_IDS)
@pytest.mark.parametrize("fn", ["create", "attach", "unlink"])
def test_non_string_segment_name_is_type_error(fn, bad):
    with pytest.raises(TypeError):
        getattr(pdshm, fn)(bad)


@pytest.mark.parametrize("name", ["nul\0inside", "\udcff", "n" * 5000], ids=["nul", "surrogate", "huge"])
@pytest.mark.parametrize("fn", ["create", "attach", "unlink"])
def test_bad_segment_name_is_value_error_everywhere(fn, name):
    import os
    before = set(os.listdir("/dev/shm"))
    with pytest.raises(ValueError):
        getattr(pdshm, fn)(name)
    # what a name cut at its NUL, encoded or truncated would have made (the
    # suite's other tests make segments of their own meanwhile)
    made = "pdshm." + name[:3].split("\0")[0]
    assert {f for f in set(os.listdir("/dev/shm")) - before if f.startswith(made)} == set()


@pytest.mark.parametrize("kwargs", [
    {"size": 1 << 70}, {"size": -(1 << 70)}, {"max_procs": 1 << 40}, {"max_procs": 1 << 70},
    {"max_procs": 0}, {"mode": -1}, {"mode": 1 << 70}, {"size": 1 << 62},
    {"max_procs": (1 << 32) - 1},
], ids=["size_70bit", "size_minus_70bit", "procs_40bit", "procs_70bit", "procs_zero",
        "mode_negative", "mode_70bit", "size_huge", "procs_uint_max"])
def test_oversize_create_options_are_refused_and_create_nothing(seg_name, kwargs):
    with pytest.raises((ValueError, OverflowError, MemoryError)):
        pdshm.create(seg_name, **kwargs)
    with pytest.raises(pdshm.Error):
        pdshm.attach(seg_name)


@pytest.mark.parametrize("kwargs", [{"size": None, "max_procs": "8"}, {"mode": 0.5},
                                    {"size": [1]}],
                         ids=["procs_str", "mode_float", "size_list"])
def test_more_create_options_of_wrong_types_are_type_error(seg_name, kwargs):
    with pytest.raises(TypeError):
        pdshm.create(seg_name, **kwargs)
    with pytest.raises(pdshm.Error):
        pdshm.attach(seg_name)


# ---- Segment methods -----------------------------------------------------------------

@pytest.mark.parametrize("call, exc", [
    (lambda s: s.open(123), TypeError),
    (lambda s: s.open(b"p"), TypeError),
    (lambda s: s.open("p\0q"), ValueError),
    (lambda s: s.open("p/" * 3000), KeyError),
    (lambda s: s.unique_name(None), TypeError),
    (lambda s: s.unique_name("a\0b"), ValueError),
    (lambda s: s.vars_of(-1), (ValueError, OverflowError)),
    (lambda s: s.vars_of(1 << 70), (ValueError, OverflowError)),
    (lambda s: s.vars_of("0"), TypeError),
    (lambda s: s.vars_of(1.0), TypeError),
], ids=["open_int", "open_bytes", "open_nul", "open_huge", "unique_none", "unique_nul",
        "vars_of_negative", "vars_of_70bit", "vars_of_str", "vars_of_float"])
def test_bad_segment_method_arguments_are_refused(seg, snapshot, call, exc):
    before = snapshot()
    with pytest.raises(exc):
        call(seg)
    assert snapshot() == before


@pytest.mark.parametrize("args, kwargs, exc", [
    ((123, 1), {}, TypeError),
    ((b"g", 1), {}, TypeError),
    (("g\0h", 1), {}, ValueError),
    (("g" * 300, 1), {}, ValueError),
    (("g", -1), {}, (ValueError, OverflowError)),
    (("g", 0), {}, ValueError),
    (("g", 1 << 32), {}, (ValueError, OverflowError)),
    (("g", (1 << 32) + 1), {}, (ValueError, OverflowError)),
    (("g", 1 << 70), {}, (ValueError, OverflowError)),
    (("g", 1 << 20), {}, ValueError),
    (("g", "2"), {}, TypeError),
    (("g", 2.0), {}, TypeError),
    (("g", None), {}, TypeError),
    (("g", 2), {"rank": -1}, ValueError),
    (("g", 2), {"rank": 2}, ValueError),
    (("g", 2), {"rank": 1 << 70}, (ValueError, OverflowError)),
    (("g", 2), {"rank": "0"}, TypeError),
    (("g", 2), {"rank": 0.0}, TypeError),
], ids=["name_int", "name_bytes", "name_nul", "name_long", "size_negative", "size_zero",
        "size_2_32", "size_wraps_to_1", "size_70bit", "size_huge", "size_str", "size_float",
        "size_none", "rank_negative", "rank_too_big", "rank_70bit", "rank_str", "rank_float"])
def test_bad_group_arguments_are_refused(seg, args, kwargs, exc):
    with pytest.raises(exc):
        seg.group(*args, **kwargs)
    assert seg.group("g", 1).size == 1  # nothing joined: a group of one is still free


# ---- Scope methods ---------------------------------------------------------------------

@pytest.mark.parametrize("call, exc", [
    (lambda p: p.new_scope(123), TypeError),
    (lambda p: p.new_scope(b"k"), TypeError),
    (lambda p: p.new_scope("k\0"), ValueError),
    (lambda p: p.unlink(None), TypeError),
    (lambda p: p.unlink("k\0"), ValueError),
    (lambda p: p.erase(1), TypeError),
    (lambda p: p.erase("w\0"), ValueError),
    (lambda p: p.rename(1, "x"), TypeError),
    (lambda p: p.rename("w", None), TypeError),
    (lambda p: p.rename("w", "x\0"), ValueError),
    (lambda p: p.rename("w", "x" * (NAME_MAX + 1)), ValueError),
    (lambda p: p.rename("w"), TypeError),
    (lambda p: p.rename("w", "x", "y"), TypeError),
    (lambda p: p.vars(label=5), TypeError),
    (lambda p: p.vars(label="l\0"), ValueError),
    (lambda p: p.find_var(None), TypeError),
    (lambda p: p.find_local_var(b"w"), TypeError),
    (lambda p: p[5], TypeError),
    (lambda p: p["w\0"], ValueError),
    (lambda p: p.create_var("w\0"), ValueError),
], ids=["new_scope_int", "new_scope_bytes", "new_scope_nul", "unlink_none", "unlink_nul",
        "erase_int", "erase_nul", "rename_int", "rename_none", "rename_nul", "rename_long",
        "rename_one_arg", "rename_three_args", "vars_label_int", "vars_label_nul",
        "find_none", "find_local_bytes", "getitem_int", "getitem_nul", "create_nul"])
def test_bad_scope_method_arguments_are_refused(seg, snapshot, call, exc):
    before = snapshot()
    with pytest.raises(exc):
        call(seg.open("p"))
    assert snapshot() == before


def test_membership_of_a_non_string_is_false(seg, snapshot):
    before = snapshot()
    with seg.open("p") as p:
        assert 5 not in p and None not in p and b"w" not in p
        with pytest.raises(ValueError):
            "w\0" in p
    assert snapshot() == before


# ---- timeouts --------------------------------------------------------------------------
# None waits without a limit; a timeout is seconds >= 0, finite.  NaN, a negative
# or an infinite timeout is ValueError (pdshm.InvalidArgument), another type TypeError.

BAD_TIMEOUTS = [float("nan"), -1, -0.5, float("inf"), -float("inf"), 1e-300 * -1]
BAD_TIMEOUT_IDS = ["nan", "minus_one", "minus_half", "inf", "minus_inf", "minus_tiny"]


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS, ids=BAD_TIMEOUT_IDS)
def test_bad_wait_timeout_is_value_error(seg, timeout):
    v = seg.root.var("w")
    with pytest.raises(pdshm.InvalidArgument):
        v.wait(v.version, timeout=timeout)


@pytest.mark.parametrize("timeout", ["1", [1], b"1"], ids=["str", "list", "bytes"])
def test_wait_timeout_of_a_wrong_type_is_type_error(seg, timeout):
    v = seg.root.var("w")
    with pytest.raises(TypeError):
        v.wait(v.version, timeout=timeout)


@pytest.mark.parametrize("seen", [-1, 1 << 64, 1 << 70], ids=["negative", "2_64", "70bit"])
def test_wait_for_a_version_beyond_64_bits_is_refused(seg, seen):
    v = seg.root.var("w")
    with pytest.raises((ValueError, OverflowError)):
        v.wait(seen, timeout=0)


def test_zero_timeout_times_out_at_once(seg):
    v = seg.root.var("w")
    with pytest.raises(pdshm.TimedOut):
        v.wait(v.version, timeout=0)


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS, ids=BAD_TIMEOUT_IDS)
@pytest.mark.parametrize("call", ["barrier", "allreduce", "reduce_scatter", "allgather"])
def test_bad_group_timeout_is_value_error_and_changes_nothing(seg, call, timeout):
    v = seg.root.var("x")
    v.assign(np.arange(4, dtype=np.float32))
    with seg.group("g", 1) as g:
        args = () if call == "barrier" else (v,)
        with pytest.raises(pdshm.InvalidArgument):
            getattr(g, call)(*args, timeout=timeout)
        g.barrier(timeout=10)  # the group still works
    assert v.numpy().tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("call, exc", [
    (lambda g, v: g.allreduce(v, op=5), TypeError),
    (lambda g, v: g.allreduce(v, op="prod"), ValueError),
    (lambda g, v: g.allreduce(v, op="sum\0"), ValueError),
    (lambda g, v: g.allreduce(123), ValueError),
    (lambda g, v: g.allreduce(None), ValueError),
    (lambda g, v: g.allreduce(np.zeros(4, np.float32)), ValueError),
    (lambda g, v: g.reduce_scatter(v, op=None), TypeError),
    (lambda g, v: g.allgather("x"), ValueError),
    (lambda g, v: g.share(-1), ValueError),
    (lambda g, v: g.share(1 << 64), ValueError),
    (lambda g, v: g.share("4"), ValueError),
    (lambda g, v: g.barrier(timeout="1"), TypeError),
], ids=["op_int", "op_unknown", "op_nul", "var_int", "var_none", "foreign_array",
        "rs_op_none", "gather_str", "share_negative", "share_2_64", "share_str",
        "barrier_str"])
def test_bad_collective_arguments_are_refused(seg, call, exc):
    v = seg.root.var("x")
    v.assign(np.arange(4, dtype=np.float32))
    with seg.group("g", 1) as g:
        with pytest.raises(exc):
            call(g, v)
        g.barrier(timeout=10)
    assert v.numpy().tolist() == [0, 1, 2, 3]


# ---- dtypes and arrays -----------------------------------------------------------------

NON_NATIVE = ">" if np.little_endian else "<"


@pytest.mark.parametrize("dtype", ["f4", "i8", "f2", "i2", "f8"])
def test_resize_to_a_non_native_byte_order_is_value_error(seg, snapshot, dtype):
    before = snapshot()
    with pytest.raises(ValueError):
        seg.open("p")["w"].resize(np.dtype(NON_NATIVE + dtype), (2,))
    assert snapshot() == before


@pytest.mark.parametrize("dtype", ["f4", "i8", "f2", "i4", "f8"])
def test_assign_of_a_non_native_byte_order_is_value_error(seg, snapshot, dtype):
    before = snapshot()
    a = np.arange(4).astype(NON_NATIVE + dtype)
    with pytest.raises(ValueError):
        seg.open("p")["w"].assign(a)
    assert snapshot() == before


@pytest.mark.parametrize("bad", [
    np.zeros((1,) * 9, np.float32),
    np.zeros(2, dtype=[("a", "f4"), ("b", "i4")]),
    np.array([b"ab", b"cd"]),
    np.zeros(2, dtype="M8[s]"),
    np.zeros(2, dtype=np.complex128),
    np.zeros(2, dtype=np.uint16),
    np.zeros(2, dtype=np.uint64),
    {"a": 1},
    object(),
    "text",
], ids=["ndim9", "structured", "bytes", "datetime", "complex128", "uint16", "uint64", "dict",
        "object", "str"])
def test_assign_of_what_is_no_tensor_is_refused(seg, snapshot, bad):
    before = snapshot()
    with pytest.raises((TypeError, ValueError)):
        seg.open("p")["w"].assign(bad)
    assert snapshot() == before


@pytest.mark.parametrize("make", [
    lambda: np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2],
    lambda: np.arange(24, dtype=np.float32).reshape(4, 6).T,
    lambda: np.arange(24, dtype=np.float32)[::-3],
    lambda: np.broadcast_to(np.arange(3, dtype=np.float32), (4, 3)),
    lambda: np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)),
], ids=["strided", "transposed", "reversed", "broadcast", "fortran"])
def test_assign_of_a_non_contiguous_array_copies_its_elements(seg, make):
    a = make()
    v = seg.root.var("x")
    v.assign(a)
    assert v.dtype == str(a.dtype) and v.shape == a.shape
    assert np.array_equal(v.numpy(), a)


@pytest.mark.parametrize("dtype", [("float32", 5), ("float32", None), (None, (2,)),
                                   ([np.float32], (2,)), ("float32", (2, "3")),
                                   ("float32", (2, None))],
                         ids=["shape_int_ok_type", "shape_none", "dtype_none", "dtype_list",
                              "dim_str", "dim_none"])
def test_resize_with_more_wrong_types_is_type_error(seg, snapshot, dtype):
    dt, shape = dtype
    before = snapshot()
    if dt == "float32" and shape == 5:  # an int shape is one dimension: accepted
        seg.root.var("x").resize(dt, shape)
        assert seg.root["x"].shape == (5,)
        return
    with pytest.raises(TypeError):
        seg.open("p")["w"].resize(dt, shape)
    assert snapshot() == before


@pytest.mark.parametrize("kwargs, exc", [
    ({"stream": 1}, ValueError),
    ({"dl_device": (2, 0)}, BufferError),
    ({"dl_device": "cpu"}, TypeError),
    ({"dl_device": [1, 0]}, TypeError),
    ({"dl_device": (1,)}, TypeError),
    ({"dl_device": (1, 1 << 70)}, OverflowError),
    ({"copy": True}, BufferError),
], ids=["stream", "cuda", "device_str", "device_list", "device_short", "device_70bit", "copy"])
def test_bad_dlpack_arguments_are_refused(seg, snapshot, kwargs, exc):
    before = snapshot()
    with pytest.raises(exc):
        seg.open("p")["w"].__dlpack__(**kwargs)
    assert snapshot() == before


# ---- ScopeStack ------------------------------------------------------------------------

@pytest.mark.parametrize("args", [(123,), (None,), ("seg",)], ids=["int", "none", "str"])
def test_scope_stack_of_no_segment_is_type_error(args):
    with pytest.raises(TypeError):
        pdshm.ScopeStack(*args)


def test_scope_stack_with_a_global_scope_of_another_type_is_type_error(seg):
    with pytest.raises(TypeError):
        pdshm.ScopeStack(seg, "root")


@pytest.mark.parametrize("kwargs, exc", [
    ({"name": 5}, TypeError), ({"prefix": 5}, TypeError), ({"name": "n\0"}, ValueError),
    ({"prefix": "p\0"}, ValueError), ({"name": b"n"}, TypeError),
], ids=["name_int", "prefix_int", "name_nul", "prefix_nul", "name_bytes"])
def test_scope_stack_names_of_wrong_types_are_refused(seg, snapshot, kwargs, exc):
    st = pdshm.ScopeStack(seg)
    before = snapshot()
    with pytest.raises(exc):
        st.new_variable(**kwargs)
    with pytest.raises(exc):
        st.new_parameter(**kwargs)
    assert snapshot() == before


# ---- pdshm.mpi: arguments are checked before MPI is touched ---------------------------

@pytest.mark.parametrize("kwargs, exc", [
    ({"prefix": 5}, TypeError), ({"prefix": None}, TypeError),
    ({"local_size": 0}, ValueError), ({"local_size": -2}, ValueError),
    ({"local_size": 2.0}, TypeError), ({"local_size": "2"}, TypeError),
    ({"replace_timeout": float("nan")}, ValueError), ({"replace_timeout": -1}, ValueError),
    ({"replace_timeout": float("inf")}, ValueError), ({"replace_timeout": "2"}, TypeError),
], ids=["prefix_int", "prefix_none", "local_zero", "local_negative", "local_float",
        "local_str", "replace_nan", "replace_negative", "replace_inf", "replace_str"])
def test_bad_job_arguments_are_refused_before_mpi(kwargs, exc):
    pm = pytest.importorskip("pdshm.mpi")
    args = {"prefix": "job"}
    args.update(kwargs)
    with pytest.raises(exc):
        pm.Job(args.pop("prefix"), **args)
