"""The seed rules of DESIGN section 1, from Python, in one process."""
import errno

import pytest

import pdshm


def names(vars_):
    return sorted(v.name for v in vars_)


# S1, S2: get-or-create, and create refusing a local conflict

def test_var_creates_a_missing_variable(seg):
    v = seg.root.var("w")
    assert v.name == "w"
    assert seg.root.find_local_var("w").name == "w"


def test_var_returns_the_existing_variable(seg):
    v = seg.root.var("w")
    v.label = "parameter"
    assert seg.root.var("w").label == "parameter"
    assert names(seg.root.vars()) == ["w"]


def test_create_var_refuses_an_existing_local_name(seg):
    seg.root.create_var("w").label = "first"
    with pytest.raises(FileExistsError) as ei:
        seg.root.create_var("w")
    assert isinstance(ei.value, pdshm.Error)
    assert ei.value.errno == errno.EEXIST
    assert seg.root.find_var("w").label == "first"


def test_create_var_may_shadow_a_parent_variable(seg):
    seg.root.var("w")
    with seg.root.local() as kid:
        kid.create_var("w").label = "shadow"
        assert kid.find_var("w").label == "shadow"
    assert seg.root.find_var("w").label == ""


# S3: find up the chain

def test_find_var_searches_the_parent_chain(seg):
    seg.root.var("w").label = "global"
    mid = seg.root.new_scope("mid")
    with mid.local() as leaf:
        assert leaf.find_var("w").label == "global"
        assert leaf["w"].label == "global"
        assert "w" in leaf


def test_find_var_returns_none_when_absent(seg):
    with seg.root.local() as kid:
        assert kid.find_var("nope") is None
        assert "nope" not in kid


def test_find_local_var_does_not_search_the_parents(seg):
    seg.root.var("w")
    with seg.root.local() as kid:
        assert kid.find_local_var("w") is None
        assert kid.find_var("w") is not None


def test_getitem_raises_key_error_when_absent_everywhere(seg):
    seg.root.var("w")
    with seg.root.local() as kid:
        with pytest.raises(KeyError):
            kid["nope"]


# S4: erase and rename act on the scope itself only

def test_erase_removes_the_local_variable(seg):
    seg.root.var("w")
    seg.root.erase("w")
    assert seg.root.find_var("w") is None
    assert names(seg.root.vars()) == []


def test_erase_of_a_parent_variable_is_key_error(seg):
    seg.root.var("w")
    with seg.root.local() as kid:
        with pytest.raises(KeyError) as ei:
            kid.erase("w")
        assert isinstance(ei.value, pdshm.Error)
        assert ei.value.errno == errno.ENOENT
    assert seg.root.find_var("w") is not None


def test_erasing_a_shadow_uncovers_the_parent_variable(seg):
    seg.root.var("w").label = "global"
    with seg.root.local() as kid:
        kid.create_var("w").label = "shadow"
        kid.erase("w")
        assert kid.find_var("w").label == "global"


def test_rename_moves_the_variable_with_its_contents(seg):
    v = seg.root.var("old")
    v.resize("int32", (3,))
    v.numpy()[:] = [1, 2, 3]
    seg.root.rename("old", "new")
    assert seg.root.find_var("old") is None
    assert list(seg.root["new"].numpy()) == [1, 2, 3]


def test_rename_of_a_parent_variable_is_key_error(seg):
    seg.root.var("w")
    with seg.root.local() as kid:
        with pytest.raises(KeyError):
            kid.rename("w", "v")
        assert kid.find_local_var("v") is None
    assert seg.root.find_var("w") is not None


def test_rename_onto_an_existing_name_is_file_exists_error(seg):
    seg.root.var("a").label = "a"
    seg.root.var("b").label = "b"
    with pytest.raises(FileExistsError):
        seg.root.rename("a", "b")
    assert seg.root["a"].label == "a"
    assert seg.root["b"].label == "b"


# S7, S8, S10b: scopes, names, parents and lifetimes

def test_root_has_no_parent(seg):
    assert seg.root.parent is None


def test_root_has_no_name_to_open_it_by(seg):
    assert not seg.root.name


def test_anonymous_scope_has_no_name_and_the_creator_as_parent(seg):
    params = seg.root.new_scope("params")
    with params.local() as kid:
        assert kid.name is None
        assert kid.parent.name == "params"


def test_named_scope_is_opened_by_path(seg):
    seg.root.new_scope("params").new_scope("fc").var("w").label = "parameter"
    assert seg.open("params/fc")["w"].label == "parameter"


def test_named_scope_outlives_its_handle(seg):
    s = seg.root.new_scope("params")
    s.var("w")
    s.release()
    assert seg.open("params").find_local_var("w") is not None


def test_named_scope_under_an_anonymous_one_is_refused(seg):
    with seg.root.local() as kid:
        with pytest.raises(ValueError):
            kid.new_scope("named")


def test_sibling_scope_with_the_same_name_is_refused(seg):
    seg.root.new_scope("params")
    with pytest.raises(FileExistsError):
        seg.root.new_scope("params")


def test_anonymous_scope_is_reclaimed_at_release(seg):
    before = seg.stats()
    kid = seg.root.new_scope()
    kid.var("x").resize("float32", (1024,))
    assert seg.stats().scopes == before.scopes + 1
    kid.release()
    after = seg.stats()
    assert (after.scopes, after.vars, after.used) == (before.scopes, before.vars, before.used)


def test_local_scope_is_reclaimed_when_the_with_block_ends(seg):
    before = seg.stats()
    with seg.root.local() as kid:
        kid.var("x").resize("float32", (1024,))
    after = seg.stats()
    assert (after.scopes, after.vars, after.used) == (before.scopes, before.vars, before.used)


def test_with_block_releases_an_anonymous_scope(seg):
    before = seg.stats()
    with seg.root.new_scope() as kid:
        kid.var("x").resize("int8", (100,))
    after = seg.stats()
    assert (after.scopes, after.vars, after.used) == (before.scopes, before.vars, before.used)


def test_child_keeps_its_released_parent_alive(seg):
    mid = seg.root.new_scope()
    mid.var("w").label = "mid"
    leaf = mid.new_scope()
    mid.release()
    assert leaf.find_var("w").label == "mid"
    assert leaf.parent.find_local_var("w") is not None
    leaf.release()


def test_unlinked_named_scope_can_no_longer_be_opened(seg):
    seg.root.new_scope("params").release()
    seg.root.unlink("params")
    with pytest.raises(KeyError):
        seg.open("params")


def test_unlinked_named_scope_stays_usable_through_a_held_handle(seg):
    s = seg.root.new_scope("params")
    s.var("w").label = "kept"
    seg.root.unlink("params")
    assert s.find_local_var("w").label == "kept"


# S10: drop_kids

def test_drop_kids_unlinks_the_named_kids(seg):
    seg.root.new_scope("a").release()
    seg.root.new_scope("b").release()
    seg.root.drop_kids()
    for path in ("a", "b"):
        with pytest.raises(KeyError):
            seg.open(path)


def test_drop_kids_keeps_the_scopes_own_variables(seg):
    seg.root.var("w").label = "kept"
    seg.root.new_scope("a").release()
    seg.root.drop_kids()
    assert seg.root["w"].label == "kept"


def test_drop_kids_leaves_held_kids_usable(seg):
    kid = seg.root.new_scope("a")
    kid.var("x").label = "still"
    seg.root.drop_kids()
    assert kid.find_local_var("x").label == "still"


def test_drop_kids_reclaims_unheld_kids(seg):
    before = seg.stats()
    seg.root.new_scope("a").var("x").resize("float64", (512,))
    seg.root.drop_kids()
    after = seg.stats()
    assert (after.scopes, after.vars) == (before.scopes, before.vars)


# S11: generated names

def test_new_var_names_never_collide(seg):
    made = {seg.root.new_var().name for _ in range(50)}
    assert len(made) == 50


def test_new_var_avoids_a_name_taken_by_hand(seg):
    first = seg.root.new_var().name
    seg.root.erase(first)
    seg.root.var(first)
    for _ in range(20):
        assert seg.root.new_var().name != first


def test_new_var_never_reuses_an_erased_generated_name(seg):
    seen = set()
    for _ in range(20):
        v = seg.root.new_var()
        assert v.name not in seen
        seen.add(v.name)
        seg.root.erase(v.name)


# S12: labels

def test_label_is_empty_until_set(seg):
    assert seg.root.var("w").label == ""


def test_vars_lists_only_local_variables(seg):
    seg.root.var("g")
    with seg.root.local() as kid:
        kid.var("a")
        kid.var("b")
        assert names(kid.vars()) == ["a", "b"]


def test_vars_filters_by_label(seg):
    for n, label in (("w", "parameter"), ("b", "parameter"), ("x", "input"), ("y", "")):
        seg.root.var(n).label = label
    assert names(seg.root.vars(label="parameter")) == ["b", "w"]
    assert names(seg.root.vars(label="input")) == ["x"]
    assert names(seg.root.vars()) == ["b", "w", "x", "y"]


# S13: readers and writers

def test_readers_and_writers_are_kept_in_order(seg):
    v = seg.root.var("w")
    v.add_reader("matmul")
    v.add_reader("relu_grad")
    v.add_writer("sgd")
    assert list(v.readers) == ["matmul", "relu_grad"]
    assert list(v.writers) == ["sgd"]


def test_a_fresh_variable_has_no_readers_or_writers(seg):
    v = seg.root.var("w")
    assert list(v.readers) == [] and list(v.writers) == []


# S14: unique names

def test_unique_name_is_prefix_dash_number(seg):
    a = seg.unique_name("fc")
    b = seg.unique_name("fc")
    assert a != b
    for n in (a, b):
        prefix, _, num = n.rpartition("-")
        assert prefix == "fc" and num.isdigit()


# S15: tensors

def test_resize_sets_dtype_shape_and_nbytes(seg):
    v = seg.root.var("w")
    v.resize("float32", (2, 3))
    assert (v.dtype, tuple(v.shape), v.nbytes) == ("float32", (2, 3), 24)


def test_resize_bumps_the_version(seg):
    v = seg.root.var("w")
    v0 = v.version
    v.resize("int64", (4,))
    assert v.version > v0


def test_releasing_an_exclusive_lock_bumps_the_version(seg):
    v = seg.root.var("w")
    v0 = v.version
    with v.lock():
        pass
    assert v.version > v0


def test_shared_lock_does_not_bump_the_version(seg):
    v = seg.root.var("w")
    v0 = v.version
    with v.lock(exclusive=False):
        pass
    assert v.version == v0
