"""The ranks of test_distributed's jobs: `python dist_workers.py SCENARIO`,
with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the environment (as
torchrun sets them).  A rank prints one JSON line, its report, and exits 0;
a failed check is an exception (exit 1 with the traceback on stderr).

Every rank's input is made from a seed of (case, rank), so each rank
computes every rank's input and thus the expected result locally.
"""
import json
import os
import signal
import sys
import time
import zlib
from datetime import timedelta

import torch
import torch.distributed as dist

import pdshm
import pdshm.distributed as pdist

R = dist.ReduceOp
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8, torch.bool]
OPS = [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG, R.BAND, R.BOR, R.BXOR]
NAMES = {R.SUM: "SUM", R.PRODUCT: "PRODUCT", R.MIN: "MIN", R.MAX: "MAX", R.AVG: "AVG",
         R.BAND: "BAND", R.BOR: "BOR", R.BXOR: "BXOR"}
NUMEL = 37  # odd, and not a multiple of 2 or 3
BIG = 70001  # elements: more than SMALL_BYTES in every dtype, odd
# the simulated hosts' moves and reductions (two segments of 16 MiB, which
# BIG's exchange bytes would fill)
HOSTS_COUNTS = (NUMEL,)


def seeded(case, rank, shape, dtype):
    g = torch.Generator().manual_seed(zlib.crc32(f"{case}/{rank}".encode()))
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    lo = 0 if dtype == torch.uint8 else -9
    return torch.randint(lo, 10, shape, generator=g, dtype=torch.int64).to(dtype)


def strided(t):
    """A non-contiguous tensor holding t's values (every other column of a wider one)."""
    wide = torch.zeros(t.numel(), 2, dtype=t.dtype)
    wide[:, 0] = t.reshape(-1)
    out = wide[:, 0]
    assert not out.is_contiguous()
    return out


def fold(op, parts):
    """The reduction in rank order, as a test computes it."""
    dtype = parts[0].dtype
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    acc = parts[0].to(wide)
    for p in parts[1:]:
        p = p.to(wide)
        if dtype == torch.bool:
            acc = {R.SUM: acc | p, R.MAX: acc | p, R.BOR: acc | p, R.PRODUCT: acc & p,
                   R.MIN: acc & p, R.BAND: acc & p, R.BXOR: acc ^ p}[op]
        else:
            acc = {R.SUM: torch.add, R.AVG: torch.add, R.PRODUCT: torch.mul,
                   R.MIN: torch.minimum, R.MAX: torch.maximum, R.BAND: torch.bitwise_and,
                   R.BOR: torch.bitwise_or, R.BXOR: torch.bitwise_xor}[op](acc, p)
    if op == R.AVG:
        acc = acc / len(parts) if dtype.is_floating_point or dtype.is_complex else \
            torch.div(acc, len(parts), rounding_mode="trunc")
    return acc.to(dtype)


def defined(op, dtype):
    if dtype == torch.bool:
        return op != R.AVG
    if op in (R.BAND, R.BOR, R.BXOR):
        return not dtype.is_floating_point
    return True


def same(got, want, what):
    if want.dtype.is_floating_point:
        torch.testing.assert_close(got, want, msg=lambda m: f"{what}: {m}")
    else:
        assert torch.equal(got, want), f"{what}: got {got}, want {want}"


class Report:
    def __init__(self):
        self.digests = {}

    def add(self, what, *tensors):
        """Remembers the result's bits, for the test to compare across ranks."""
        crc = 0
        for t in tensors:
            crc = zlib.crc32(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes(), crc)
        self.digests[what] = crc


def check_allreduce(rep, rank, n, group=None, ranks=None, dtypes=DTYPES):
    ranks = ranks if ranks is not None else list(range(n))
    me = ranks.index(rank)
    for dtype in dtypes:
        for op in OPS:
            if not defined(op, dtype):
                continue
            case = f"ar/{dtype}/{NAMES[op]}/{len(ranks)}"
            ins = [seeded(case, r, (NUMEL,), dtype) for r in range(len(ranks))]
            want = fold(op, ins)
            t = ins[me].clone()
            dist.all_reduce(t, op, group=group)
            same(t, want, case)
            rep.add(case, t)
    for dtype in (torch.float32, torch.int8):  # non-contiguous, through both paths
        case = f"ar-strided/{dtype}/{len(ranks)}"
        ins = [seeded(case, r, (NUMEL,), dtype) for r in range(len(ranks))]
        t = strided(ins[me])
        dist.all_reduce(t, R.SUM, group=group)
        same(t, fold(R.SUM, ins), case)
        assert torch.equal(t._base[:, 1], torch.zeros(NUMEL, dtype=dtype)), "wrote outside"
    # a tensor of one element
    t = torch.tensor([me + 1.0])
    dist.all_reduce(t, group=group)
    assert t.item() == sum(range(1, len(ranks) + 1))
    # ops a dtype does not have: refused alike by every rank, nothing changed
    for dtype, op in ((torch.bool, R.AVG), (torch.float32, R.BAND), (torch.float16, R.BXOR)):
        t = torch.ones(3, dtype=dtype)
        try:
            dist.all_reduce(t, op, group=group)
        except RuntimeError as e:
            assert "not supported" in str(e) and NAMES[op] in str(e), e
        else:
            raise AssertionError(f"all_reduce {NAMES[op]} of {dtype} was not refused")
        assert torch.equal(t, torch.ones(3, dtype=dtype))
        t = torch.tensor([1])
        dist.all_reduce(t, group=group)  # the next collective works
        assert t.item() == len(ranks)


def check_moves(rep, rank, n, counts=(NUMEL, BIG)):
    """broadcast, all_gather, gather, scatter, all_to_all_single, barrier;
    NUMEL elements go through the SlotReducer, BIG through the exchange
    bytes (a complex64 broadcast of BIG, more than PIPELINE_BYTES, in
    chunks)."""
    for count in counts:
        for dtype in (torch.float32, torch.bfloat16, torch.int8, torch.bool, torch.complex64):
            check_moves_of(rank, n, count, dtype)
    # all_to_all_single, equal and uneven splits (rank r sends r + d + 1 rows to rank d)
    rows = lambda src, dst: src + dst + 1  # noqa: E731
    sent = {(s, d): seeded(f"a2a/{s}/{d}", 0, (rows(s, d), 3), torch.float64)
            for s in range(n) for d in range(n)}
    inp = torch.cat([sent[(rank, d)] for d in range(n)])
    out = torch.empty(sum(rows(s, rank) for s in range(n)), 3, dtype=torch.float64)
    dist.all_to_all_single(out, inp, [rows(s, rank) for s in range(n)],
                           [rows(rank, d) for d in range(n)])
    assert torch.equal(out, torch.cat([sent[(s, rank)] for s in range(n)])), "all_to_all uneven"
    inp = torch.arange(2 * n, dtype=torch.int32) + 100 * rank
    out = torch.empty_like(inp)
    dist.all_to_all_single(out, inp)
    want = torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.int32) + 100 * s
                      for s in range(n)])
    assert torch.equal(out, want), f"all_to_all equal: {out} != {want}"
    outs = [torch.empty(rows(s, rank), 3, dtype=torch.float64) for s in range(n)]
    dist.all_to_all(outs, [sent[(rank, d)] for d in range(n)])
    assert all(torch.equal(o, sent[(s, rank)]) for s, o in enumerate(outs)), "all_to_all"
    dist.barrier()


def check_moves_of(rank, n, count, dtype):
    ins = [seeded(f"mv/{dtype}", r, (count,), dtype) if dtype != torch.complex64 else
           torch.complex(seeded(f"mv/{dtype}", r, (count,), torch.float32),
                         seeded(f"mvi/{dtype}", r, (count,), torch.float32))
           for r in range(n)]
    for root in (0, n - 1):
        t = ins[rank].clone()
        dist.broadcast(t, root)
        assert torch.equal(t, ins[root]), f"broadcast {dtype} from {root}"
        s = strided(ins[rank])
        dist.broadcast(s, root)
        assert torch.equal(s, ins[root]), f"strided broadcast {dtype} from {root}"
    outs = [torch.empty_like(ins[0]) for _ in range(n)]
    dist.all_gather(outs, ins[rank])
    assert all(torch.equal(o, i) for o, i in zip(outs, ins)), f"all_gather {dtype}"
    outs = [strided(torch.empty_like(ins[0])) for _ in range(n)]
    dist.all_gather(outs, strided(ins[rank]))
    assert all(torch.equal(o, i) for o, i in zip(outs, ins)), f"strided all_gather {dtype}"
    flat = torch.empty(n * count, dtype=dtype)
    dist.all_gather_into_tensor(flat, ins[rank])
    assert torch.equal(flat, torch.cat(ins)), f"all_gather_into_tensor {dtype}"
    root = n - 1
    gl = [torch.empty_like(ins[0]) for _ in range(n)] if rank == root else None
    dist.gather(ins[rank], gl, dst=root)
    if rank == root:
        assert all(torch.equal(o, i) for o, i in zip(gl, ins)), f"gather {dtype}"
    parts = [seeded(f"sc/{dtype}", r, (count,), torch.float32).to(dtype) for r in range(n)]
    out = torch.empty_like(parts[0])
    dist.scatter(out, parts if rank == 0 else None, src=0)
    assert torch.equal(out, parts[rank]), f"scatter {dtype}"


def check_reductions(rep, rank, n, counts=(NUMEL, BIG)):
    """reduce, reduce_scatter (list and tensor), all_reduce_coalesced;
    NUMEL elements a part go through the SlotReducer, BIG through the
    exchange bytes."""
    for count in counts:
        for dtype in (torch.float32, torch.float16, torch.int64, torch.int8, torch.uint8,
                      torch.bool):
            for op in (R.SUM, R.MAX, R.PRODUCT):
                check_reduction_of(rank, n, count, dtype, op)
    ts = [seeded("co", rank, (k,), torch.float64) for k in (1, 5, 9)]
    wants = [fold(R.SUM, [seeded("co", r, (k,), torch.float64) for r in range(n)])
             for k in (1, 5, 9)]
    dist.all_reduce_coalesced(ts)
    for t, w in zip(ts, wants):
        same(t, w, "all_reduce_coalesced")


def check_reduction_of(rank, n, count, dtype, op):
    case = f"rs/{dtype}/{NAMES[op]}/{count}"
    chunks = [[seeded(case, r, (count,), dtype) for _ in range(1)] for r in range(n)]
    full = [torch.cat([seeded(f"{case}/{d}", r, (count,), dtype) for d in range(n)])
            for r in range(n)]
    want = fold(op, [f[rank * count:(rank + 1) * count] for f in full])
    out = torch.empty(count, dtype=dtype)
    dist.reduce_scatter(out, list(full[rank].chunk(n)), op)
    same(out, want, f"reduce_scatter {case}")
    out2 = strided(torch.empty(count, dtype=dtype))
    dist.reduce_scatter_tensor(out2, full[rank], op)
    same(out2, want, f"reduce_scatter_tensor {case}")
    t = chunks[rank][0].clone()
    dist.reduce(t, dst=n - 1, op=op)
    if rank == n - 1:
        same(t, fold(op, [c[0] for c in chunks]), f"reduce {case}")
    else:
        assert torch.equal(t, chunks[rank][0]), f"reduce changed rank {rank}'s {case}"


def check_async(rank, n):
    t = torch.full((NUMEL,), float(rank))
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    work.wait()
    assert work.is_completed()
    assert torch.equal(fut.value()[0], torch.full((NUMEL,), float(sum(range(n)))))
    assert fut.value()[0] is t
    outs = [torch.empty(2) for _ in range(n)]
    work = dist.all_gather(outs, torch.full((2,), float(rank)), async_op=True)
    assert work.wait() and work.is_completed()
    assert [o[0].item() for o in outs] == list(range(n))
    b = torch.tensor([rank])
    dist.broadcast(b, 0, async_op=True).get_future().wait()
    assert b.item() == 0
    dist.barrier(async_op=True).wait()
    check_async_in_background(rank, n)
    # a future's callback (run by the thread that completed the collective)
    # may issue a collective and wait for it
    inner = torch.ones(2)
    fut = dist.all_reduce(torch.ones(2), async_op=True).get_future()
    done = fut.then(lambda f: dist.all_reduce(inner) or f.value()[0])
    assert torch.equal(done.wait(), torch.full((2,), float(n)))
    assert torch.equal(inner, torch.full((2,), float(n)))


def check_async_in_background(rank, n):
    """Rank 0 issues three all_reduces with async_op=True before the others
    issued theirs (they wait for the store to say so): the calls return at
    once, the Works complete later, in the order of issue."""
    store = dist.distributed_c10d._get_default_store()
    ts = [torch.full((NUMEL,), float(rank + i)) for i in range(3)]
    if rank == 0:
        works = [dist.all_reduce(t, async_op=True) for t in ts]
        pending = [w.is_completed() for w in works]
        store.set("async/issued", "1")
        assert not any(pending), pending
        works[-1].get_future().wait()
        assert all(w.is_completed() for w in works)
        assert works[1].get_future().value()[0] is ts[1]
    else:
        store.wait(["async/issued"])
        for t in ts:
            dist.all_reduce(t)
    for i, t in enumerate(ts):
        assert torch.equal(t, torch.full((NUMEL,), float(sum(range(n)) + n * i))), (i, t)


def check_subgroups(rep, rank, n):
    pair = [0, n - 1]
    g = dist.new_group(pair)
    others = dist.new_group([r for r in range(n) if r != 0])
    if rank in pair:
        check_allreduce(rep, rank, n, group=g, ranks=pair)
        t = torch.tensor([rank])
        dist.broadcast(t, n - 1, group=g)  # the global rank of the root
        assert t.item() == n - 1
    if rank != 0:
        t = torch.tensor([1.0])
        dist.all_reduce(t, group=others)
        assert t.item() == n - 1
    dist.barrier()


def check_in_place_and_reuse(rank, n):
    """A view of a variable of the job's segment is reduced with no staging;
    staging and exchange variables are reused from call to call."""
    seg = pdist.segment_of()
    pg = dist.distributed_c10d._get_default_group()
    var = seg.root.new_scope(f"mine.{rank}").var("t")
    var.resize("float32", (NUMEL,))
    t = torch.from_dlpack(var)
    t.fill_(rank + 1.0)
    kept = dict(pg._staging.kept)
    ptr = t.data_ptr()
    dist.all_reduce(t)
    assert t.data_ptr() == ptr and torch.equal(t, torch.full((NUMEL,), n * (n + 1) / 2.0))
    assert var.numpy().tolist() == t.tolist()
    assert pg._staging.kept == kept, "a view of the segment went through staging"
    x = torch.ones(1000)
    dist.all_reduce(x)
    dist.all_gather([torch.empty(1000) for _ in range(n)], x)
    mine = lambda: ([v.name for v in pg._scope.vars()], pg._exchange.own.nbytes)  # noqa: E731
    before = mine()
    for _ in range(5):
        dist.all_reduce(x)
        dist.all_reduce(torch.ones(7, dtype=torch.int8))
        dist.all_gather([torch.empty(1000) for _ in range(n)], x)
        dist.broadcast(x, 0)
    assert mine() == before, "a collective made variables in the steady state"
    # staging for more sizes than the segment (16 MiB: the tests run in a
    # 64 MiB /dev/shm too) holds at once: the oldest kept staging variables
    # make room (512 KiB of float32 staging each, 16 sizes: 8 MiB a rank);
    # a rank's budget counts its exchange bytes: when it did not, the ranks'
    # exchange bytes and kept staging left no free block of 512 KiB in 5 of 8
    # runs
    for k in range(16):  # not contiguous: through staging, whatever the size
        big = torch.full((2 * ((1 << 17) + k),), float(rank))[::2]
        dist.all_reduce(big)
        assert big[-1].item() == sum(range(n))


def check_shares(rep, rank, n):
    """Private tensors of 64 KiB and more of float32, float64, float16,
    bfloat16 (folded in float32, rounded once), int32 and int64 are reduced by
    shares through the exchange bytes (in one host: no staging), for SUM,
    AVG, MIN and MAX: against the local fold, bits equal on every rank."""
    pg = dist.distributed_c10d._get_default_group()
    kept = dict(pg._staging.kept)
    numel = (1 << 16) + 5  # not a multiple of 2 or 3
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                  torch.int64):
        for op in (R.SUM, R.AVG, R.MIN, R.MAX):
            case = f"shares/{dtype}/{NAMES[op]}/{n}"
            ins = [seeded(case, r, (numel,), dtype) for r in range(n)]
            t = ins[rank].clone()
            dist.all_reduce(t, op)
            same(t, fold(op, ins), case)
            rep.add(case, t)
    if not isinstance(pg, pdist.ProcessGroupPdshmHosts):  # which reduces through staging
        assert pg._staging.kept == kept, "a private tensor of 64 KiB or more went through staging"


def train(model, xs, ys, steps, lr):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xs), ys).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def make_model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


def check_ddp(rank, n):
    g = torch.Generator().manual_seed(3)
    xs, ys = torch.randn(12, 8, generator=g), torch.randn(12, 2, generator=g)
    want = train(make_model(), xs, ys, 5, 0.1)
    ddp = torch.nn.parallel.DistributedDataParallel(make_model())
    per = 12 // n
    got = train(ddp, xs[rank * per:(rank + 1) * per], ys[rank * per:(rank + 1) * per], 5, 0.1)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def main_collectives():
    if os.environ.get("PDSHM_TEST_INIT") == "tcp":
        dist.init_process_group(
            "pdshm", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
            timeout=timedelta(seconds=60))
    else:
        dist.init_process_group("pdshm", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "pdshm"
    name = pdist.segment_of().name
    assert not os.path.exists(f"/dev/shm/pdshm.{name}"), "the segment's name outlived init"
    rep = Report()
    check_allreduce(rep, rank, n)
    check_moves(rep, rank, n)
    check_reductions(rep, rank, n)
    check_async(rank, n)
    check_in_place_and_reuse(rank, n)
    check_shares(rep, rank, n)
    check_subgroups(rep, rank, n)
    check_ddp(rank, n)
    dist.destroy_process_group()
    return {"rank": rank, "segment": name, "digests": rep.digests}


def small_moves(rank, n, rep):
    """broadcast, all_gather, _all_gather_base and gather of at most
    pdist.SMALL_BYTES (the SlotReducer's one call): every dtype, counts from
    1 to a full slot, contiguous and not, each rank's bytes equal to the
    sender's; then ranks that name different roots all raise, and the next
    broadcast works."""
    for dtype in DTYPES + [torch.complex64, torch.complex128]:
        size = torch.empty(0, dtype=dtype).element_size()
        for count in (1, 37, pdist.SMALL_BYTES // size):
            case = f"small/{dtype}/moves/{count}"
            ins = [seeded(case, r, (count,), dtype) for r in range(n)]
            root = count % n
            t = ins[rank].clone()
            dist.broadcast(t, root)
            assert torch.equal(t, ins[root]), f"{case}: broadcast"
            rep.add(case + "/broadcast", t)
            outs = [torch.zeros_like(ins[0]) for _ in range(n)]
            dist.all_gather(outs, ins[rank])
            assert all(torch.equal(o, i) for o, i in zip(outs, ins)), f"{case}: all_gather"
            flat = torch.zeros(n * count, dtype=dtype)
            dist._all_gather_base(flat, ins[rank])
            assert torch.equal(flat, torch.cat(ins)), f"{case}: _all_gather_base"
            got = [torch.zeros_like(ins[0]) for _ in range(n)] if rank == root else None
            dist.gather(ins[rank], got, dst=root)
            assert rank != root or all(torch.equal(o, i) for o, i in zip(got, ins)), case
            if count == 37:  # non-contiguous: copied in and out
                s = strided(ins[rank])
                dist.broadcast(s, root)
                assert torch.equal(s, ins[root]) and not s._base[:, 1].any(), case
                outs = [strided(torch.zeros_like(ins[0])) for _ in range(n)]
                dist.all_gather(outs, strided(ins[rank]))
                assert all(torch.equal(o, i) and not o._base[:, 1].any()
                           for o, i in zip(outs, ins)), f"{case}: strided all_gather"
    t = torch.full((5,), float(rank))
    try:
        dist.broadcast(t, rank)
    except RuntimeError as e:
        assert "did not take part in the same collective" in str(e), e
    else:
        raise AssertionError("broadcasts from different roots did not raise")
    assert torch.equal(t, torch.full((5,), float(rank))), t
    dist.broadcast(t, n - 1)
    assert torch.equal(t, torch.full((5,), float(n - 1))), t


def main_small():
    """all_reduce of at most pdist.SMALL_BYTES (the SlotReducer's one call):
    every dtype (complex too) and op, counts from 1 to a full slot, odd ones,
    contiguous and not, against the local fold; the SlotReducer's broadcast
    and gathers (small_moves); then ranks whose calls differ: each raises,
    its tensor unchanged, and the next all_reduce works."""
    dist.init_process_group("pdshm", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    rep = Report()
    for dtype in DTYPES + [torch.complex64, torch.complex128]:
        size = torch.empty(0, dtype=dtype).element_size()
        for count in (1, 3, 37, 1001, pdist.SMALL_BYTES // size):
            for op in OPS:
                # torch.distributed reduces complex tensors by SUM and AVG
                # only (as views of their real and imaginary parts)
                if not defined(op, dtype) or (dtype.is_complex and op not in (R.SUM, R.AVG)):
                    continue
                case = f"small/{dtype}/{NAMES[op]}/{count}"
                ins = [seeded(case, r, (count,), dtype) for r in range(n)]
                want = fold(op, ins)
                t = ins[rank].clone()
                dist.all_reduce(t, op)
                same(t, want, case)
                rep.add(case, t)
                if count == 37:  # non-contiguous: copied in and out
                    s = strided(ins[rank])
                    dist.all_reduce(s, op)
                    same(s, want, case + "/strided")
                    assert (s._base[:, 1] == 0).all(), "wrote outside"
                    rep.add(case + "/strided", s)
    small_moves(rank, n, rep)
    # a 2-d tensor, and a 0-d one
    t = torch.full((3, 5), float(rank))
    dist.all_reduce(t, R.MAX)
    assert torch.equal(t, torch.full((3, 5), float(n - 1)))
    t = torch.tensor(rank + 1)
    dist.all_reduce(t)
    assert t.item() == n * (n + 1) // 2
    # integer sums wrap around in the dtype; NaN wins MIN and MAX
    t = torch.tensor([100, -100], dtype=torch.int8)
    dist.all_reduce(t)
    assert torch.equal(t, torch.tensor([100 * n, -100 * n]).to(torch.int8)), t
    t = torch.tensor([float("nan") if rank == n - 1 else 1.0, 2.0])
    dist.all_reduce(t, R.MIN)
    assert t[0].isnan() and t[1] == 2.0, t
    # ranks that do not agree on the collective: all raise, nothing changed
    t = torch.full((5,), 7.0) if rank == 0 else torch.full((6,), 7.0)
    try:
        dist.all_reduce(t)
    except RuntimeError as e:
        assert "did not take part in the same collective" in str(e), e
        mismatch = str(e)
    else:
        raise AssertionError("differing all_reduces did not raise")
    assert torch.equal(t, torch.full((t.numel(),), 7.0)), t
    t = torch.ones(4)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(n)))
    name = pdist.segment_of().name
    dist.destroy_process_group()
    return {"rank": rank, "segment": name, "digests": rep.digests, "mismatch": mismatch}


def main_kill():
    """Ranks train a DDP model; the last rank kills itself at step 3 (after
    writing the time into the store); the others report what their
    backward raised, and after how long."""
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          int(os.environ["WORLD_SIZE"]), os.environ["RANK"] == "0",
                          timedelta(seconds=30))
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("pdshm", store=store, rank=rank, world_size=n,
                            timeout=timedelta(seconds=60))
    name = pdist.segment_of().name
    print(json.dumps({"rank": rank, "segment": name}), flush=True)
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    xs, ys = torch.randn(4, 8), torch.randn(4, 2)
    for step in range(1000):
        loss = torch.nn.functional.mse_loss(model(xs), ys)
        if step == 3 and rank == n - 1:
            store.set("killed", repr(time.monotonic()))
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            loss.backward()
        except Exception as e:
            latency = time.monotonic() - float(store.get("killed").decode())
            try:  # the next collective, called from Python
                dist.all_reduce(torch.ones(3))
            except Exception as e2:
                nxt = e2
            return {"rank": rank, "step": step, "segment": name, "type": repr(type(e)),
                    "runtime": isinstance(e, RuntimeError), "message": str(e)[:300],
                    "latency_ms": latency * 1e3, "next_runtime": isinstance(nxt, RuntimeError),
                    "next_peerdied": isinstance(nxt, pdshm.PeerDied)}
    raise AssertionError("no collective failed after the death")


def main_kill_plain():
    """The last rank kills itself in the middle of a loop of all_reduces (the
    time in the store first); the others report what their pending one raised.
    PDSHM_TEST_NUMEL: the float32 elements of each (default 1 << 16)."""
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("pdshm", timeout=timedelta(seconds=60))
    store = dist.distributed_c10d._get_default_store()
    t = torch.ones(int(os.environ.get("PDSHM_TEST_NUMEL", 1 << 16)))
    for step in range(1000):
        if step == 3 and rank == n - 1:
            store.set("killed", repr(time.monotonic()))
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            dist.all_reduce(t)
        except Exception as e:
            latency = time.monotonic() - float(store.get("killed").decode())
            return {"rank": rank, "step": step, "runtime": isinstance(e, RuntimeError),
                    "peerdied": isinstance(e, pdshm.PeerDied), "latency_ms": latency * 1e3,
                    "segment": pdist.segment_of().name}
    raise AssertionError("no collective failed after the death")


def main_kill_async():
    """The last rank kills itself once the others issued three all_reduces
    with async_op=True; they report what each Work's wait() and the first
    one's future raised."""
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("pdshm", timeout=timedelta(seconds=60))
    store = dist.distributed_c10d._get_default_store()
    dist.all_reduce(torch.ones(4))
    if rank == n - 1:
        store.wait(["issued"])
        os.kill(os.getpid(), signal.SIGKILL)
    works = [dist.all_reduce(torch.ones(1 << 12), async_op=True) for _ in range(3)]
    store.set("issued", "1")
    errors = []
    for w in works:
        try:
            w.wait()
        except Exception as e:
            errors.append([isinstance(e, RuntimeError), isinstance(e, pdshm.PeerDied)])
    try:
        works[0].get_future().wait()
        future = None
    except RuntimeError as e:
        future = str(e)[:300]
    return {"rank": rank, "errors": errors, "future": future,
            "completed": [w.is_completed() for w in works], "segment": pdist.segment_of().name}


def main_exit():
    """The last rank exits normally (no destroy_process_group) after two
    all_reduces; the others' next all_reduce and broadcast raise."""
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("pdshm", timeout=timedelta(seconds=60))
    t = torch.ones(5)
    for _ in range(2):
        dist.all_reduce(t)
    if rank == n - 1:
        return {"rank": rank}
    start = time.monotonic()
    errors = []
    for call in (lambda: dist.all_reduce(t), lambda: dist.broadcast(t, 0)):
        try:
            call()
        except Exception as e:
            errors.append([isinstance(e, RuntimeError), isinstance(e, pdshm.PeerDied), str(e)])
    return {"rank": rank, "errors": errors, "waited": time.monotonic() - start}


def main_hosts():
    """A world of simulated hosts (LOCAL_WORLD_SIZE < WORLD_SIZE): a
    segment per host, gloo between them."""
    dist.init_process_group("pdshm", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    pg = dist.distributed_c10d._get_default_group()
    assert isinstance(pg, pdist.ProcessGroupPdshmHosts) and pg._cross is not None
    rep = Report()
    check_allreduce(rep, rank, n, dtypes=[torch.float32, torch.bfloat16, torch.int64,
                                          torch.int8, torch.bool])
    check_moves(rep, rank, n, counts=HOSTS_COUNTS)
    check_reductions(rep, rank, n, counts=HOSTS_COUNTS)
    check_async(rank, n)
    check_in_place_and_reuse(rank, n)
    check_shares(rep, rank, n)
    check_subgroups(rep, rank, n)
    check_ddp(rank, n)
    name = pdist.segment_of().name
    dist.destroy_process_group()
    return {"rank": rank, "segment": name, "digests": rep.digests}


def main_torchrun():
    """Under torchrun (its agent holds the store): an all_reduce and a DDP step."""
    dist.init_process_group("pdshm", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    assert int(os.environ["LOCAL_WORLD_SIZE"]) == n
    t = torch.full((3,), rank + 1.0)
    dist.all_reduce(t)
    assert t.tolist() == [n * (n + 1) / 2] * 3
    check_ddp(rank, n)
    name = pdist.segment_of().name
    dist.destroy_process_group()
    return {"rank": rank, "segment": name}


def main_stop():
    """The last rank stops itself (SIGSTOP) after two all_reduces; the others'
    next all_reduce raises after the process group's timeout (10 s: every
    wait of the job has that bound, and a loaded machine must not reach it
    before the stop), and rank 0 then kills the stopped rank."""
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("pdshm", timeout=timedelta(seconds=10))
    store = dist.distributed_c10d._get_default_store()
    t = torch.ones(5)
    for _ in range(2):
        dist.all_reduce(t)
    if rank == n - 1:
        store.set("stopped", str(os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)
        raise AssertionError("the stopped rank went on")
    pid = int(store.get("stopped").decode())
    start = time.monotonic()
    try:
        dist.all_reduce(t)
    except Exception as e:
        err = e
    waited = time.monotonic() - start
    if rank == 0:
        os.kill(pid, signal.SIGKILL)
    return {"rank": rank, "runtime": isinstance(err, RuntimeError),
            "timeout": isinstance(err, TimeoutError), "waited": waited,
            "segment": pdist.segment_of().name}


def main_creator_dies():
    """Rank 0 is killed right after it created the segment, before it said
    so in the store (hosted by the test): the others' init fails after its
    timeout, and the segment's name is gone."""
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), n, False,
                          timedelta(seconds=30))
    if rank == 0:
        create = pdshm._pdshm.create

        def create_and_die(*args, **kw):
            create(*args, **kw)
            os.kill(os.getpid(), signal.SIGKILL)
        pdshm._pdshm.create = create_and_die
    try:
        dist.init_process_group("pdshm", store=store, rank=rank, world_size=n,
                                timeout=timedelta(seconds=3))
    except Exception as e:
        return {"rank": rank, "error": repr(e)[:200]}
    raise AssertionError("init succeeded without rank 0")


if __name__ == "__main__":
    result = {"collectives": main_collectives, "hosts": main_hosts, "kill": main_kill,
              "stop": main_stop, "torchrun": main_torchrun, "kill_plain": main_kill_plain,
              "kill_async": main_kill_async, "exit": main_exit,
              "creator_dies": main_creator_dies, "small": main_small}[sys.argv[1]]()
    print(json.dumps(result), flush=True)
