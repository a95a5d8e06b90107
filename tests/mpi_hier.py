"""Run by tests/test_mpi_python.sh under mpirun (tests/mpirun.sh), with
simulated hosts (PDSHM_MPI_LOCAL_SIZE): pdshm.mpi against flat MPI, as
tests/mpi_hier.c does for libpdshm-mpi.

 1. for every dtype and op, Job.allreduce of each process's own variable
    equals a flat MPI Allreduce of the same values over the job: integers
    byte for byte, in their own dtype, with sums that overflow it (they
    wrap; MEAN divides the wrapped sum once, truncating); floats (small
    integers: every order of summation is exact; float16 and bfloat16
    reduced flat in float64, MEAN flat as a sum divided once) byte for byte
    but for MEAN, which rounds per step and is within a few units in the
    last place; and each process handed MPI 1/L of the bytes (none on one
    host);
 2. so does Job.allreduce of a torch view of the variable (float32 mean);
 3. another element count on one host: InvalidArgument at every process;
 4. Job.bcast_scope makes every host's scope equal host 0's; Job.bcast is
    InvalidArgument at every process, none waiting, when one process of the
    root host or of a receiving host passes another variable (with a tensor
    of the same shape, or none), None, or another root host; so is
    Job.bcast_scope for another scope than its host's or another root host;
 5. Job.allreduce of an array that views no variable, at one process:
    InvalidArgument there and at every other process, none waiting;
 6. Job.barrier: local rank 0 alone times out (in several of its 200 ms
    slices), and its next barrier, with the others, passes;
 7. once the job is closed, its local and cross communicators are
    MPI.COMM_NULL, and bytes_sent is still its total.
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


def bf16_narrow(f):
    """float32 as bfloat16 words, rounded to nearest even (no NaN here)."""
    bits = np.ascontiguousarray(f, np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_widen(u):
    return (u.astype(np.uint32) << 16).view(np.float32)


def as_dtype(x, dtype):
    """float64 values as the variable's words (bfloat16: its uint16 bits)."""
    if dtype == "bfloat16":
        return bf16_narrow(x.astype(np.float32))
    return x.astype(dtype)


def int_values(r, dtype):
    """Small integers, or near half the dtype's largest value (three or more
    overflow its sum): all positive, all negative, or of r's parity's sign."""
    small = values(r).astype(np.int64)
    big = int(np.iinfo(dtype).max) // 2
    i = np.arange(N)
    alt = np.where((r + i) % 2 == 1, big, -big)
    return np.choose(i % 4, [small, big + small, -big - 12 + small, alt + small]).astype(dtype)


def mine(dtype):
    return int_values(rank, dtype) if dtype.startswith("int") else as_dtype(values(rank), dtype)


def flat(dtype, op):
    """Integers: MPI's Allreduce in the dtype (a sum wraps), MEAN that sum
    divided once, truncating.  Floats: in float64, MEAN divided once."""
    mop = {"max": MPI.MAX, "min": MPI.MIN}.get(op, MPI.SUM)
    if dtype.startswith("int"):
        a = int_values(rank, dtype)
        comm.Allreduce(MPI.IN_PLACE, a, op=mop)
        if op == "mean":
            a = np.array([-(-x // size) if x < 0 else x // size for x in a.tolist()], dtype)
        return a
    a = values(rank)
    comm.Allreduce(MPI.IN_PLACE, a, op=mop)
    return as_dtype(a / size if op == "mean" else a, dtype)


ULP = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}


def as_float(a, dtype):
    return bf16_widen(a).astype(np.float64) if dtype == "bfloat16" \
        else a.astype(np.float64)


def agrees(got, want, dtype, op):
    """Byte for byte, but for a float MEAN: a few units in the last place of
    a result of magnitude <= 16 (the host's mean, the hosts' sum and its
    division each round)."""
    if dtype.startswith("int") or op != "mean":
        return got.tobytes() == want.tobytes()
    return bool(np.all(np.abs(as_float(got, dtype) - as_float(want, dtype)) <= 32 * ULP[dtype]))


def one_case(job, local, dtype, op):
    v = local.var("g")
    v.resize(dtype, (N,))
    v.numpy()[:] = mine(dtype)
    before = job.bytes_sent
    job.allreduce(v, op=op, timeout=10)
    want = flat(dtype, op)
    got = v.numpy()
    report(agrees(got, want, dtype, op), f"hierarchical {dtype} {op} equals flat MPI Allreduce")
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
    report(agrees(v.numpy(), flat("float32", "mean"), "float32", "mean"),
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
    bcast_mismatches(job, params, w)


def invalid_everywhere(what, call):
    try:
        call()
        ok = False
    except pdshm.InvalidArgument:
        ok = True
    report(ok, f"{what}: InvalidArgument at every process")


def bcast_mismatches(job, params, w):
    """The odd process: local rank 1 of host h (another variable, with W's
    shape or no tensor), or the job's last (None, another root host,
    another scope: its own, with a W of W's shape)."""
    with job.segment.root.local() as mine:
        full, empty = mine.var("W"), mine.var("empty")
        full.resize("float32", (3, 5))
        last = rank == size - 1
        for h in sorted({0, job.hosts - 1}) if job.local_size > 1 else ():
            odd = job.host == h and job.local_rank == 1
            where = "the root host" if h == 0 else "a receiving host"
            for other, kind in ((full, "with a tensor"), (empty, "with no tensor")):
                invalid_everywhere(f"bcast, another variable {kind} on {where}",
                                   lambda: job.bcast(other if odd else w, 0, timeout=1))
        invalid_everywhere("bcast, None at one process",
                           lambda: job.bcast(None if last else w, 0, timeout=1))
        invalid_everywhere("bcast, another root host at one process",
                           lambda: job.bcast(w, max(job.hosts - 1, 1) if last else 0, timeout=1))
        if job.local_size > 1:  # alone on its host, mine is its host's scope
            invalid_everywhere("bcast_scope, another scope at one process of a host",
                               lambda: job.bcast_scope(mine if last else params, 0, timeout=1))
        invalid_everywhere("bcast_scope, a root host out of range at one process",
                           lambda: job.bcast_scope(params, job.hosts if last else 0, timeout=1))


def not_a_view(job, local):
    v = local.var("g")
    v.resize("float32", (N,))
    odd = np.zeros(N, np.float32)  # no variable's bytes
    invalid_everywhere("allreduce of an array that views no variable at one process",
                       lambda: job.allreduce(odd if rank == size - 1 else v, timeout=10))


def barrier(job):
    timed_out = None
    if job.local_rank == 0:
        try:
            job.barrier(timeout=0.5)
            timed_out = False
        except pdshm.TimedOut:
            timed_out = True
    job.local_comm.Barrier()
    job.barrier(timeout=10)
    report(timed_out is not False, "barrier: one rank alone times out, then all pass")


def main():
    job = pdshm.mpi.Job(sys.argv[1], size=4 << 20, replace_timeout=0)
    with job:
        if rank == 0:
            print(f"# {job.hosts} hosts of {job.local_size} trainers", flush=True)
        with job.segment.root.local() as local:
            for dtype in DTYPES:
                for op in OPS:
                    one_case(job, local, dtype, op)
            torch_view(job, local)
            if job.hosts > 1:
                mismatch(job, local)
            not_a_view(job, local)
        if job.local_size > 1:
            barrier(job)
        bcast(job)
        sent = job.bytes_sent
    report(job.local_comm == MPI.COMM_NULL and job.cross_comm == MPI.COMM_NULL,
           "a closed job's communicators are MPI.COMM_NULL")
    report(job.bytes_sent == sent, "a closed job's bytes_sent stays readable")
    if rank == 0:
        print(f"1..{len(results)}")
    sys.exit(0 if all(results) else 1)


main()
