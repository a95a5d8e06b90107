"""Segments that grow while processes are attached: create() without a size
starts small; an allocation that finds no room grows the segment up to
max_size, and a process attached before the growth reads, through its
views, what was allocated after it."""
import errno

import numpy as np
import pytest

import pdshm
import workers

MIB = 1 << 20


def test_create_without_a_size_starts_small_and_grows(seg_name):
    with pdshm.create(seg_name) as s:
        info = s.info()
        assert 4 * MIB <= info.size <= 8 * MIB
        assert info.first_size == info.size
        assert info.max_size >= info.size
        assert info.growths == 0
        size0 = s.stats().size
        v = s.root.var("big")
        v.resize("uint8", (12 * MIB,))
        v.numpy()[:] = 7
        assert s.stats().size > max(size0, 12 * MIB)
        assert s.info().growths >= 1
        assert s.info().size > info.size
        assert s.check() == []


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_peer_attached_before_a_growth_reads_after_it(seg_name, children, method):
    names = ["t0", "t1", "t2"]
    nbytes = 3 * MIB
    with pdshm.create(seg_name, size=4 * MIB, max_size=48 * MIB) as s:
        kid = children(method, workers.grown_reader, seg_name, names, nbytes)
        tag, size0 = kid.recv()
        assert tag == "ready"
        growths = s.info().growths
        sums = []
        for k, name in enumerate(names):
            v = s.root.var(name)
            v.resize("uint8", (nbytes,))
            a = v.numpy()
            a[:] = (np.arange(nbytes) * (k + 3)).astype(np.uint8)
            sums.append(int(a.sum(dtype=np.uint64)))
        assert s.info().growths > growths
        kid.send("check")
        tag, size1, seen = kid.recv()
        assert tag == "seen"
        assert size1 > size0
        assert seen == sums
        assert bytes(memoryview(s.root["t2"])[0:4]) == b"peer"
        kid.send("exit")
        kid.result()
        assert s.check() == []


def test_max_size_reached_is_memory_error_and_changes_nothing(seg_name):
    with pdshm.create(seg_name, size=4 * MIB, max_size=8 * MIB) as s:
        v = s.root.var("w")
        v.resize("float32", (4,))
        size = s.stats().size
        with pytest.raises(MemoryError) as ei:
            v.resize("uint8", (16 * MIB,))
        assert (ei.value.code, ei.value.errno) == (-errno.ENOMEM, errno.ENOMEM)
        assert "at most 8 MiB" in str(ei.value)
        assert (v.dtype, tuple(v.shape)) == ("float32", (4,))
        assert s.stats().size == size
        assert s.info().max_size == 8 * MIB
        assert s.check() == []


def test_max_size_below_the_size_is_refused(seg_name):
    with pytest.raises(ValueError):
        pdshm.create(seg_name, size=8 * MIB, max_size=4 * MIB)
    with pytest.raises(ValueError):
        pdshm.create(seg_name, size=8 * MIB, max_size=0)


def test_max_size_equal_to_size_is_a_fixed_segment(seg_name):
    with pdshm.create(seg_name, size=4 * MIB, max_size=4 * MIB) as s:
        assert s.info().max_size == s.info().size == 4 * MIB
        with pytest.raises(MemoryError):
            s.root.var("w").resize("uint8", (4 * MIB,))
        assert s.info().growths == 0


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_dlpack_views_stay_valid_across_a_growth(seg_name, children, method):
    """DLPack views taken before a growth keep pointing at their tensor in
    this process and in a peer attached before it, and tensors allocated past
    the peer's first size export to DLPack there."""
    torch = pytest.importorskip("torch")
    late = ["late0", "late1"]
    count = 2 * MIB  # float32 elements: 8 MiB a tensor
    with pdshm.create(seg_name, size=4 * MIB, max_size=64 * MIB) as s:
        early = s.root.var("early")
        early.resize("float32", (1024,))
        t_early = torch.from_dlpack(early)
        kid = children(method, workers.dlpack_across_growth, seg_name, late)
        tag, size0 = kid.recv()
        assert tag == "ready"
        for name in late:
            s.root.var(name).resize("float32", (count,))
        assert s.stats().size > size0
        t_early.fill_(2.0)  # through the view taken before the growth
        assert float(np.asarray(early.numpy()).sum()) == 2048.0
        kid.send("check")
        tag, size1, seen = kid.recv()
        assert tag == "seen"
        assert size1 > size0
        assert seen == [2048.0, 2048.0, 1.0 * count, 2.0 * count]
        for k, name in enumerate(late):
            assert float(torch.from_dlpack(s.root[name]).sum()) == (k + 1) * count
        kid.send("exit")
        kid.result()
        del t_early
        assert s.check() == []
