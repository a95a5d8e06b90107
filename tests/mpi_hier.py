"""Run by tests/test_mpi_python.sh under mpirun (tests/mpirun.sh), with
simulated hosts (PDSHM_MPI_LOCAL_SIZE): pdshm.mpi against flat MPI, as
tests/mpi_hier.c does for libpdshm-mpi.

 1. for every dtype and op, Job.allreduce of each process's own variable
    equals a flat MPI Allreduce of the same values over the job, byte for
    byte (small integers: every order of summation is exact; float16 and
    bfloat16 reduced flat in float64, MEAN flat as a sum divided once), and
    each process handed MPI 1/L of the bytes (none on one host);
 2. so does Job.allreduce of a torch view of the variable (float32 mean);
 3. another element count on one host: InvalidArgument at every process;
 4. Job.bcast_scope makes every host's scope equal host 0's.
Prints TAP at rank 0; exits non-zero on any failure.

usage: mpirun -np P python3 mpi_hier.py SEGMENT-PREFIX
"""
import sys

import numpy as np
from mpi4py import MPI

import pdshm
import pdshm.mpi

N = 1003
DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64")
OPS = ("sum", "mean", "max", "min")
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
results = []


def report(ok, what):
    ok = comm.allreduce(bool(ok), op=MPI.LAND)
    results.append(ok)
    if rank == 0:
        print(f"{'ok' if ok else 'not ok'} {len(results)} - {what}", flush=True)


def values(r):
    return ((r * 7 + np.arange(N) * 3) % 23 - 11).astype(np.float64)


def as_dtype(x, dtype):
    """float64 values as the variable's words (bfloat16: its uint16 bits)."""
    if dtype == "bfloat16":
        return pdshm.mpi._bf16_narrow(x.astype(np.float32))
    return x.astype(dtype)


def flat(dtype, op):
    integer = dtype.startswith("int")
    mine = values(rank).astype(np.int64) if integer else values(rank)
    mop = {"max": MPI.MAX, "min": MPI.MIN}.get(op, MPI.SUM)
    comm.Allreduce(MPI.IN_PLACE, mine, op=mop)
    if op == "mean":
        mine = np.trunc(mine / size).astype(np.int64) if integer else mine / size
    return as_dtype(mine, dtype)


def one_case(job, local, dtype, op):
    v = local.var("g")
    v.resize(dtype, (N,))
    v.numpy()[:] = as_dtype(values(rank), dtype)
    before = job.bytes_sent
    job.allreduce(v, op=op, timeout=10)
    want = flat(dtype, op)
    got = v.numpy()
    report(got.tobytes() == want.tobytes(), f"hierarchical {dtype} {op} equals flat MPI Allreduce")
    sent, es = job.bytes_sent - before, got.itemsize
    share = N // job.local_size + 1
    report(sent == 0 if job.hosts == 1 else (share - 1) * es <= sent <= share * es,
           f"{dtype} {op}: 1/L of the bytes over MPI")


def torch_view(job, local):
    try:
        import torch
    except ImportError:
        report(True, "# SKIP no torch")
        return
    v = local.var("t")
    v.resize("float32", (N,))
    t = torch.from_dlpack(v)
    t.copy_(torch.from_numpy(values(rank).astype(np.float32)))
    job.allreduce(t, op="mean", timeout=10)
    report(v.numpy().tobytes() == flat("float32", "mean").tobytes(),
           "a torch view of the variable, float32 mean")


def mismatch(job, local):
    v = local.var("g")
    v.resize("float32", (N - 1 if job.host == 1 else N,))
    try:
        job.allreduce(v, op="sum", timeout=10)
        ok = False
    except pdshm.InvalidArgument:
        ok = True
    report(ok, "another element count on one host: InvalidArgument at every process")


def bcast(job):
    if job.local_rank == 0:
        try:
            job.segment.root.unlink("params")
        except pdshm.NotFound:
            pass
    job.local_comm.Barrier()
    params, _ = job.host_scope("params")
    if job.host == 0 and job.local_rank == 0:
        params.var("W").assign(np.arange(15, dtype=np.float32).reshape(3, 5) * 0.5)
        params.var("b").assign(np.arange(1000, 1007, dtype=np.int64))
    job.local_comm.Barrier()
    job.bcast_scope(params, root_host=0, timeout=10)
    w, b = params.find_local_var("W"), params.find_local_var("b")
    ok = w is not None and b is not None and \
        np.array_equal(w.numpy(), np.arange(15, dtype=np.float32).reshape(3, 5) * 0.5) and \
        np.array_equal(b.numpy(), np.arange(1000, 1007))
    report(ok, "bcast_scope: every host's params equal host 0's")


def main():
    with pdshm.mpi.Job(sys.argv[1], size=4 << 20, replace_timeout=0) as job:
        if rank == 0:
            print(f"# {job.hosts} hosts of {job.local_size} trainers", flush=True)
        with job.segment.root.local() as local:
            for dtype in DTYPES:
                for op in OPS:
                    one_case(job, local, dtype, op)
            torch_view(job, local)
            if job.hosts > 1:
                mismatch(job, local)
        bcast(job)
    if rank == 0:
        print(f"1..{len(results)}")
    sys.exit(0 if all(results) else 1)


main()
