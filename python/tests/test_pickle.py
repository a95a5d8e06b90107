"""Pickling: a Segment by name, a named Scope by its path, a Var of a named
scope as (segment, path, name); an anonymous scope, and its variables, refuse."""
import pickle

import pytest

import pdshm


def roundtrip(obj):
    return pickle.loads(pickle.dumps(obj))


def test_segment_pickles_by_name(seg):
    seg.root.var("w").label = "seen"
    again = roundtrip(seg)
    assert again.name == seg.name
    assert again.root["w"].label == "seen"


def test_segment_pickle_carries_no_bytes_of_the_segment(seg):
    seg.root.var("w").resize("uint8", (1 << 20,))
    assert len(pickle.dumps(seg)) < 1024


def test_named_scope_pickles_by_its_path(seg):
    fc = seg.root.new_scope("params").new_scope("fc")
    fc.var("w").label = "parameter"
    again = roundtrip(fc)
    assert again.name == "fc"
    assert again.parent.name == "params"
    assert again.find_local_var("w").label == "parameter"


def test_var_of_a_named_scope_pickles_as_its_place(seg):
    w = seg.root.new_scope("params").var("w")
    w.resize("float32", (3,))
    w.numpy()[:] = [1, 2, 3]
    again = roundtrip(w)
    assert again.name == "w"
    again.numpy()[0] = 9
    assert w.numpy().tolist() == [9, 2, 3]


def test_var_of_the_root_pickles(seg):
    seg.root.var("g").label = "global"
    assert roundtrip(seg.root["g"]).label == "global"


def test_anonymous_scope_refuses_to_pickle(seg):
    with seg.root.local() as kid:
        with pytest.raises((TypeError, pickle.PicklingError)) as ei:
            pickle.dumps(kid)
        assert "anonymous" in str(ei.value)


def test_var_of_an_anonymous_scope_refuses_to_pickle(seg):
    with seg.root.local() as kid:
        v = kid.var("x")
        with pytest.raises((TypeError, pickle.PicklingError)) as ei:
            pickle.dumps(v)
        assert "anonymous" in str(ei.value)


def test_pickled_var_of_an_erased_variable_is_stale_or_absent(seg):
    s = seg.root.new_scope("params")
    data = pickle.dumps(s.var("w"))
    s.erase("w")
    with pytest.raises(pdshm.Error):
        pickle.loads(data).numpy()
