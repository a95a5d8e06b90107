"""Allreduce (float32 sum, every process its own tensor) among N processes:
pdshm's Group.allreduce against torch.distributed with gloo (init over a
file://, world of N), a naive numpy reduce over multiprocessing
.shared_memory (N input slots and one output: rank 0 sums, everyone copies
the sum back, two multiprocessing.Barrier waits a round) and MPI_Allreduce
(OpenMPI through mpi4py, under mpirun: mpi_peer.py; n/a when it cannot run).  Also the round
trip of a pdshm barrier among 2 processes from Python.

Every process does the same number of rounds after a warm-up and a barrier;
the figure is rank 0's time per round, best of a few repetitions.  The
tensors hold zeros: the values do not change the work, and repeated sums of
anything else would overflow.
"""
import multiprocessing
import os
import tempfile
import time

import numpy as np

import mpi_peer

KIB, MIB = 1 << 10, 1 << 20
SIZES = (4 * KIB, 64 * KIB, MIB, 16 * MIB, 100 * MIB)


def rounds_for(nbytes, quick):
    n = max(3, min(1000, int(2e8 / nbytes)))
    return max(3, n // 4) if quick else n


def _time_rounds(fn, sync, rounds, repeat):
    """The best over `repeat` of the mean time of `rounds` calls of fn, each
    repetition started together (sync)."""
    best = float("inf")
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        for _ in range(rounds):
            fn()
        best = min(best, (time.perf_counter() - t0) / rounds)
    return best


def _pdshm_worker(seg_name, size, rank, nbytes, rounds, repeat, out):
    import pdshm
    with pdshm.attach(seg_name) as seg, seg.group(f"ar{size}.{nbytes}", size, rank=rank) as g:
        v = seg.root.var(f"ar{size}.{nbytes}.{rank}")
        v.assign(np.zeros(nbytes // 4, np.float32))
        view = v.numpy()
        g.allreduce(view, "sum")  # warm-up: the pages are touched
        t = _time_rounds(lambda: g.allreduce(view, "sum"), g.barrier, rounds, repeat)
        if rank == 0:
            out.put(t)
        g.barrier()


def _gloo_worker(init_file, size, rank, nbytes, rounds, repeat, out):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=size)
    t = torch.zeros(nbytes // 4)
    dist.all_reduce(t)
    res = _time_rounds(lambda: dist.all_reduce(t), dist.barrier, rounds, repeat)
    if rank == 0:
        out.put(res)
    dist.barrier()
    dist.destroy_process_group()


def _shm_worker(shm_name, size, rank, nbytes, rounds, repeat, barrier, out):
    from multiprocessing import shared_memory
    shm = shared_memory.SharedMemory(name=shm_name)
    n = nbytes // 4
    slots = np.ndarray((size + 1, n), np.float32, buffer=shm.buf)
    mine, total = slots[rank], slots[size]
    mine[:] = 0

    def reduce():
        barrier.wait()  # every input is there
        if rank == 0:
            np.sum(slots[:size], axis=0, out=total)
        barrier.wait()  # the sum is there
        mine[:] = total

    reduce()
    t = _time_rounds(reduce, barrier.wait, rounds, repeat)
    if rank == 0:
        out.put(t)
    barrier.wait()
    del slots, mine, total
    shm.close()


def _run(ctx, target, args_of, size):
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=args_of(r) + (out,)) for r in range(size)]
    for p in procs:
        p.start()
    try:
        t = out.get(timeout=600)
    finally:
        for p in procs:
            p.join(600)
    if any(p.exitcode for p in procs):
        raise RuntimeError(f"{target.__name__}: exit codes {[p.exitcode for p in procs]}")
    return t


def allreduce(table, quick, prefix, sizes_procs):
    """{(procs, nbytes): {"pdshm": s, "gloo": s, "numpy-shm": s, "mpi": s}} and table
    rows (a figure is None where its peer could not run)."""
    import pdshm
    ctx = multiprocessing.get_context("spawn")
    results = {}
    repeat = 2 if quick else 3
    for size, sizes in sizes_procs:
        seg_name = f"{prefix}-ar{size}"
        need = sum(sizes) * size + (64 << 20)
        mpi, mpi_why = mpi_peer.allreduce_times(size, sizes, quick, repeat)
        if mpi_why:
            print(f"allreduce: MPI_Allreduce among {size}: n/a: {mpi_why}")
        with pdshm.create(seg_name, size=need):
            try:
                for nbytes in sizes:
                    rounds = rounds_for(nbytes, quick)
                    r = {}
                    r["pdshm"] = _run(ctx, _pdshm_worker, lambda k: (seg_name, size, k, nbytes,
                                                                     rounds, repeat), size)
                    with tempfile.TemporaryDirectory() as d:
                        init = os.path.join(d, "init")
                        try:
                            r["gloo"] = _run(ctx, _gloo_worker, lambda k: (init, size, k, nbytes,
                                                                           rounds, repeat), size)
                        except (ImportError, RuntimeError) as e:
                            r["gloo"] = None
                            table.add("allreduce", f"gloo {size}p", 0, "", f"failed: {e}")
                    from multiprocessing import shared_memory
                    shm = shared_memory.SharedMemory(create=True, size=nbytes * (size + 1))
                    try:
                        bar = ctx.Barrier(size)
                        r["numpy-shm"] = _run(ctx, _shm_worker, lambda k: (
                            shm.name, size, k, nbytes, rounds, repeat, bar), size)
                    finally:
                        shm.close()
                        shm.unlink()
                    r["mpi"] = mpi[nbytes] if mpi else None
                    results[(size, nbytes)] = r
                    label = f"{size} procs {_human(nbytes)}"
                    for who in ("pdshm", "gloo", "numpy-shm", "mpi"):
                        if r[who] is not None:
                            note = (f"{nbytes / r[who] / 1e9:.2f} GB/s" if who == "pdshm" else
                                    _compared(r["pdshm"], r[who]))
                            table.add("allreduce", f"{label} {who}", r[who] * 1e6, "us", note)
                        elif who == "mpi":
                            table.add("allreduce", f"{label} {who}", None, "", "n/a")
            finally:
                pdshm.unlink(seg_name)
    return results


def _barrier_worker(seg_name, rank, rounds, out):
    import pdshm
    with pdshm.attach(seg_name) as seg, seg.group("rtt", 2, rank=rank) as g:
        g.barrier()
        t = _time_rounds(g.barrier, g.barrier, rounds, 3)
        if rank == 0:
            out.put(t)
        g.barrier()


def barrier_rtt(table, quick, prefix):
    """Seconds per barrier round among 2 processes, from Python."""
    import pdshm
    ctx = multiprocessing.get_context("spawn")
    seg_name = f"{prefix}-rtt"
    with pdshm.create(seg_name, size=16 << 20):
        try:
            t = _run(ctx, _barrier_worker, lambda k: (seg_name, k, 5000 if quick else 20000), 2)
        finally:
            pdshm.unlink(seg_name)
    table.add("barrier", "2 procs, Python Group.barrier", t * 1e6, "us", "a round")
    return t


def _compared(ours, theirs):
    """pdshm's time against a peer's, as the note of the peer's row."""
    if theirs >= ours:
        return f"pdshm {theirs / ours:.1f}x faster"
    return f"pdshm {ours / theirs:.1f}x slower"


def _human(n):
    return f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"
