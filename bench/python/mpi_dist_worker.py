"""One rank of distbench's MPI contender (bench/python/distbench.py starts it
under mpirun -np N): mpi4py's Allreduce (in place), Bcast, Allgather and
Reduce_scatter_block of numpy float32 buffers of the sizes distbench's
collectives use, timed as distbench times them (the best of --repeat runs of
a number of calls, each run started by a barrier).

Rank 0 prints one line a figure: "mpi <collective> <bytes> <seconds a call>".

usage: mpi_dist_worker.py --repeat R BYTES...
"""
import argparse
import time

import numpy as np

MIB = 1 << 20


def best_s(fn, barrier, number, repeat):
    best = float("inf")
    for _ in range(repeat):
        barrier()
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def call(comm, name, nbytes):
    """A closure running collective `name` over nbytes of float32 per rank
    (distbench's counts)."""
    from mpi4py import MPI
    n = comm.Get_size()
    count = max(nbytes // 4, n)
    count -= count % n
    t = np.ones(count, np.float32)
    if name == "all_reduce":
        return lambda: comm.Allreduce(MPI.IN_PLACE, t, op=MPI.SUM)
    if name == "broadcast":
        return lambda: comm.Bcast(t, root=0)
    if name == "all_gather":
        outs = np.empty(count * n, np.float32)
        return lambda: comm.Allgather(t, outs)
    if name == "reduce_scatter":
        ins = np.ones(count * n, np.float32)
        return lambda: comm.Reduce_scatter_block(ins, t, op=MPI.SUM)
    raise ValueError(name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, required=True)
    ap.add_argument("sizes", type=int, nargs="+", help="bytes per rank")
    opt = ap.parse_args()
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    for name in ("all_reduce", "broadcast", "all_gather", "reduce_scatter"):
        for nbytes in opt.sizes:
            fn = call(comm, name, nbytes)
            fn()  # warm-up: the pages are touched
            number = max(2, min(200, (64 * MIB) // (nbytes * n * 4)))
            t = best_s(fn, comm.Barrier, number, opt.repeat)
            if comm.Get_rank() == 0:
                print(f"mpi {name} {nbytes} {t!r}", flush=True)
    comm.Barrier()


if __name__ == "__main__":
    main()
