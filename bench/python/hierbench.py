"""Allreduce across simulated hosts (float32 sum, every process its own
tensor): pdshm.mpi's hierarchical scheme (a reduce-scatter in the host
through the segment, each trainer's 1/L of the bytes across hosts over MPI,
an allgather in the host) against
a flat MPI_Allreduce over every process (the baseline: OpenMPI through
mpi4py) and torch.distributed's gloo over every process, in one MPI job.
Figures are ratios against the baseline measured in the same run.

Run it under mpirun with simulated hosts (PDSHM_MPI_LOCAL_SIZE):

    PDSHM_MPI_LOCAL_SIZE=2 tests/mpirun.sh -np 4 -x PDSHM_MPI_LOCAL_SIZE -x PYTHONPATH \\
        /usr/bin/python3 bench/python/hierbench.py [--quick] [MiB ...]

Every process does the same rounds after a warm-up; a figure is rank 0's
time per round, the best of a few repetitions each started by a barrier
(allreduce_peers' timing).  The tensors hold zeros (the values do not change
the work).  Bytes: what each process hands MPI per step (measured:
Job.bytes_sent), and what a ring allreduce of that sends, 2 (n-1)/n of it
among n peers.  On one machine every "host" shares the same memory and
cores: the MPI hop between simulated hosts is shared memory, not a network,
so the times say what the scheme costs here, and the bytes what it would
save on a network.
"""
import argparse
import os
import socket
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from allreduce_peers import _time_rounds, rounds_for  # noqa: E402

MIB = 1 << 20
SIZES_MIB = (1, 4, 16, 64, 100)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gloo_group(comm):
    """torch.distributed over gloo among the job's processes, or None (why printed)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return None, "no torch"
    port = comm.bcast(free_port() if comm.Get_rank() == 0 else None, root=0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=comm.Get_rank(), world_size=comm.Get_size())
    return dist, None


def measure(job, comm, dist, nbytes, quick, repeat):
    """{scheme: seconds a round}, and the bytes the hierarchical scheme handed MPI a round."""
    from mpi4py import MPI
    rounds = rounds_for(nbytes, quick)
    out = {}
    with job.segment.root.local() as local:
        v = local.var("g")
        v.assign(np.zeros(nbytes // 4, np.float32))
        job.allreduce(v)  # warm-up: the pages are touched
        before = job.bytes_sent
        out["hier"] = _time_rounds(lambda: job.allreduce(v), comm.Barrier, rounds, repeat)
        hier_bytes = (job.bytes_sent - before) / (rounds * repeat)
    buf = np.zeros(nbytes // 4, np.float32)
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    out["flat"] = _time_rounds(lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
                               comm.Barrier, rounds, repeat)
    del buf
    if dist is not None:
        import torch
        t = torch.zeros(nbytes // 4)
        dist.all_reduce(t)
        out["gloo"] = _time_rounds(lambda: dist.all_reduce(t), comm.Barrier, rounds, repeat)
        del t
    return out, hier_bytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a quarter of the rounds, one repetition")
    ap.add_argument("--no-gloo", action="store_true", help="leave gloo out")
    ap.add_argument("sizes", type=float, nargs="*", default=SIZES_MIB, help="MiB (default: %(default)s)")
    opt = ap.parse_args()
    from mpi4py import MPI
    import pdshm
    import pdshm.mpi
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    sizes = [int(s * MIB) // 4 * 4 for s in opt.sizes]
    repeat = 1 if opt.quick else 3
    prefix = comm.bcast(f"hierbench-{os.getpid()}" if rank == 0 else None, root=0)
    seg_bytes = 2 * max(sizes) + (64 << 20)
    dist, why = (None, "--no-gloo") if opt.no_gloo else gloo_group(comm)
    with pdshm.mpi.Job(prefix, size=seg_bytes) as job:
        report(job, comm, dist, why, sizes, opt.quick, repeat)
        hosts = job.hosts
    comm.Barrier()  # every process detached: the segments can go
    if rank == 0:
        for h in range(hosts):
            pdshm.unlink(f"{prefix}.h{h}")
    if dist is not None:
        dist.destroy_process_group()


def report(job, comm, dist, why, sizes, quick, repeat):
    rank, n = comm.Get_rank(), comm.Get_size()
    H, L = job.hosts, job.local_size
    cores = os.cpu_count() or 1
    if rank == 0:
        print(f"hierbench: {H} simulated hosts x {L} trainers = {n} processes on {cores} cores"
              + (f" (oversubscribed {n / cores:g}x)" if n > cores else ""))
        print("  times: ratio = flat MPI_Allreduce's time / the scheme's (> 1: faster than flat)")
        print(f"  gloo: {'n/a: ' + why if dist is None else f'torch.distributed over {n}'}")
        print(f"{'size':>8} {'flat ms':>9} {'hier ms':>9} {'ratio':>6} {'gloo ms':>9} {'ratio':>6}"
              f" | {'MPI bytes/step/proc: flat':>26} {'hier':>10} {'hier/flat':>9}"
              f" | {'ring-sent: flat':>16} {'hier':>10}")
    for nbytes in sizes:
        t, hb = measure(job, comm, dist, nbytes, quick, repeat)
        if rank != 0:
            continue
        flat_sent = 2 * (n - 1) / n * nbytes
        hier_sent = 2 * (H - 1) / H * hb if H > 1 else 0
        g = t.get("gloo")
        print(f"{nbytes / MIB:7g}M {t['flat'] * 1e3:9.2f} {t['hier'] * 1e3:9.2f} "
              f"{t['flat'] / t['hier']:6.2f} "
              + (f"{g * 1e3:9.2f} {t['flat'] / g:6.2f}" if g else f"{'n/a':>9} {'':>6}")
              + f" | {nbytes:26d} {hb:10.0f} {hb / nbytes:9.3f}"
              f" | {flat_sent:16.0f} {hier_sent:10.0f}", flush=True)


if __name__ == "__main__":
    main()
