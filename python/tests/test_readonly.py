"""A read-only attachment looks (stats, check, introspection) but every scope
and variable call raises PermissionError, changing nothing."""
import pytest

import pdshm


@pytest.fixture
def ro(seg):
    seg.root.new_scope("p").var("w").resize("float32", (8,))
    r = pdshm.attach(seg.name, readonly=True)
    yield r
    r.detach()


def test_read_only_attachment_takes_no_process_slot(seg, ro):
    assert ro.stats().procs_alive == 1


def test_read_only_stats_match_the_writers(seg, ro):
    a, b = seg.stats(), ro.stats()
    for field in ("size", "used", "free", "scopes", "vars", "tensor_bytes", "procs_alive"):
        assert getattr(a, field) == getattr(b, field), field


def test_read_only_check_is_clean(ro):
    assert ro.check() == []


@pytest.mark.parametrize("call", [
    lambda s: s.root.var("x"),
    lambda s: s.root.new_scope("q"),
    lambda s: s.open("p"),
    lambda s: s.open("p").erase("w"),
    lambda s: s.root.drop_kids(),
    lambda s: s.reap(),
], ids=["var", "new_scope", "open", "erase", "drop_kids", "reap"])
def test_read_only_scope_and_var_calls_raise_permission_error(seg, ro, call):
    before = seg.stats()
    with pytest.raises(PermissionError) as ei:
        call(ro)
    assert isinstance(ei.value, pdshm.Error)
    after = seg.stats()
    assert (after.scopes, after.vars, after.used) == (before.scopes, before.vars, before.used)
    assert seg.open("p").find_local_var("w") is not None

