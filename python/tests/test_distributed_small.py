"""The all_reduce, broadcast and gathers of small tensors (at most
pdshm.distributed.SMALL_BYTES), which the backend runs in one call of
pdshm's SlotReducer: every dtype and op against the local fold and the
senders' bytes, in jobs of 2 and 3 processes (dist_workers.py "small"); a
rank killed while the others wait in it; and the reducer's checks of its
arguments, in one process (a group of one)."""
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

import pdshm  # noqa: E402
from pdshm import _pdshm  # noqa: E402
from test_distributed import last_reports, reports, run_job  # noqa: E402

SLOT = 1 << 10  # data bytes of a slot in the one-process tests


@pytest.mark.parametrize("n", [2, 3])
def test_small_all_reduce_every_dtype_op_and_count(n):
    ranks = last_reports(run_job("small", n))
    assert all(len(r["digests"]) > 300 for r in ranks)
    for case in ranks[0]["digests"]:
        bits = {r["digests"][case] for r in ranks}
        assert len(bits) == 1, f"{case}: the results' bits differ between ranks"
    assert all("rank" in r["mismatch"] for r in ranks)
    assert not os.path.exists(f"/dev/shm/pdshm.{ranks[0]['segment']}")


@pytest.mark.parametrize("n", [2, 3])
def test_killed_rank_raises_peer_died_in_the_pending_small_all_reduce(n):
    results = run_job("kill_plain", n, {"PDSHM_TEST_NUMEL": "1000"})
    assert results[-1][0] == -9, f"the victim exited with {results[-1][0]}:\n{results[-1][2]}"
    for rank, res in enumerate(results[:-1]):
        r = reports(res)[-1]
        assert r["runtime"] and r["peerdied"] and r["step"] == 3, r
        print(f"rank {rank}: PeerDiedError {r['latency_ms']:.1f} ms after the SIGKILL")
    assert not os.path.exists(f"/dev/shm/pdshm.{r['segment']}")


@pytest.fixture
def lone(seg):
    """(group, slot variable, reducer) of a group of one member."""
    g = seg.group("small", 1)
    var = seg.root.var("slots")
    var.resize("uint8", (2 * (32 + SLOT),))
    yield g, var, _pdshm.SlotReducer(g, [var], SLOT)
    g.leave()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int8,
                                   torch.uint8, torch.int64, torch.complex128])
def test_lone_member_gets_its_own_values(lone, dtype):
    _, _, red = lone
    t = (torch.arange(13) - 6).to(dtype)
    red.allreduce(t, "sum")
    assert torch.equal(t, (torch.arange(13) - 6).to(dtype))
    red.allreduce(t, "mean", timeout=5.0)
    assert torch.equal(t, (torch.arange(13) - 6).to(dtype))
    assert red.seq == 2


def test_reducer_refuses_bad_tensors_and_ops_with_no_round(lone):
    _, _, red = lone
    t = torch.ones(8)
    with pytest.raises(pdshm.InvalidArgument, match="not contiguous"):
        red.allreduce(torch.ones(8, 2)[:, 0], "sum")
    with pytest.raises(pdshm.InvalidArgument, match="a slot holds"):
        red.allreduce(torch.ones(SLOT // 4 + 1), "sum")
    with pytest.raises(pdshm.InvalidArgument, match="op must be"):
        red.allreduce(t, "avg")
    with pytest.raises(pdshm.InvalidArgument, match="no band of float32"):
        red.allreduce(t, "band")
    with pytest.raises(pdshm.InvalidArgument, match="no min of complex64"):
        red.allreduce(torch.ones(2, dtype=torch.complex64), "min")
    with pytest.raises(pdshm.InvalidArgument, match="timeout"):
        red.allreduce(t, "sum", -1.0)
    with pytest.raises(TypeError):
        red.allreduce(t, "sum", 1.0, 2.0)
    with pytest.raises(TypeError):
        red.allreduce(t, "sum", wait=1.0)
    with pytest.raises(Exception):
        red.allreduce([1.0, 2.0], "sum")  # no tensor: torch's to_dlpack refuses it
    assert red.seq == 0  # no round was started
    red.allreduce(t, "max")
    assert torch.equal(t, torch.ones(8)) and red.seq == 1


def test_reducer_moves_a_lone_members_bytes_and_refuses_bad_calls_with_no_round(lone):
    _, _, red = lone
    t = torch.arange(5, dtype=torch.int16)
    red.broadcast(t, 0)
    assert torch.equal(t, torch.arange(5, dtype=torch.int16)) and red.seq == 1
    out = torch.zeros(5, dtype=torch.int16)
    red.allgather(t, [out], timeout=5.0)
    assert torch.equal(out, t) and red.seq == 2
    with pytest.raises(pdshm.InvalidArgument, match="root 1 is not a rank of a group of 1"):
        red.broadcast(t, 1)
    with pytest.raises(pdshm.InvalidArgument, match="root -1"):
        red.broadcast(t, -1)
    with pytest.raises(TypeError):
        red.broadcast(t, "0")
    with pytest.raises(pdshm.InvalidArgument, match="a slot holds"):
        red.broadcast(torch.ones(SLOT // 4 + 1), 0)
    with pytest.raises(pdshm.InvalidArgument, match="2 outputs for a group of 1"):
        red.allgather(t, [out, out])
    with pytest.raises(pdshm.InvalidArgument, match=r"outputs\[0\] is int32\[5\], the tensor int16"):
        red.allgather(t, [torch.zeros(5, dtype=torch.int32)])
    with pytest.raises(pdshm.InvalidArgument, match=r"outputs\[0\] is int16\[4\]"):
        red.allgather(t, [torch.zeros(4, dtype=torch.int16)])
    with pytest.raises(pdshm.InvalidArgument, match="not contiguous"):
        red.allgather(t, [torch.zeros(5, 2, dtype=torch.int16)[:, 0]])
    with pytest.raises(TypeError, match="sequence of tensors"):
        red.allgather(t, 3)
    with pytest.raises(TypeError):
        red.allgather(t)
    assert red.seq == 2 and torch.equal(out, t)  # no round was started


def test_reducer_wants_a_group_and_a_slot_variable_per_member(seg, lone):
    g, var, _ = lone
    with pytest.raises(TypeError, match="pdshm.Group"):
        _pdshm.SlotReducer(seg, [var], SLOT)
    with pytest.raises(pdshm.InvalidArgument, match="slot variables for a group of 1"):
        _pdshm.SlotReducer(g, [var, var], SLOT)
    with pytest.raises(TypeError, match="pdshm.Var"):
        _pdshm.SlotReducer(g, [torch.ones(3)], SLOT)
    with pytest.raises(pdshm.InvalidArgument, match="two slots"):
        _pdshm.SlotReducer(g, [var], 2 * SLOT)
    with pytest.raises(pdshm.InvalidArgument, match="multiple of 32"):
        _pdshm.SlotReducer(g, [var], 100)


def test_reducer_of_a_member_that_left_raises(lone):
    g, _, red = lone
    g.leave()
    with pytest.raises(pdshm.Error, match="left the group"):
        red.allreduce(torch.ones(3), "sum")
