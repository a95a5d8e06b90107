#!/usr/bin/env python3
"""Data-parallel training on one host with pdshm (make bench).

  allreduce  float32 sum of 4 KiB .. 100 MiB among 2 and 4 processes (8 with
             --full): pdshm Group.allreduce vs torch.distributed gloo vs a
             naive numpy reduce over multiprocessing.shared_memory vs
             MPI_Allreduce (OpenMPI through mpi4py, under mpirun; optional:
             n/a, with the reason printed, when mpi4py or mpirun is missing)
  barrier    a pdshm barrier round among 2 processes from Python (and the C
             figure of bench/bench_group with --bench-group PATH)
  trainer    the digits MLP trained by 2 and 4 processes: pdshm.torch vs DDP
             (gloo) vs Hogwild (torch.multiprocessing): samples/s and memory
             (with --full also a wide one, hidden 2048, among 4)

Prints a table, then the targets with PASS or MISS, each a ratio of figures
measured in this run (or an absolute bound where the target is one); a MISS
does not fail the run.  More processes than cores are oversubscribed: the
table says how many cores there are.

usage: bench/python/dpbench.py [--quick | --full] [--only allreduce,barrier,trainer]
                               [--procs 2,4,8] [--bench-group PATH]
"""
import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import allreduce_peers  # noqa: E402
from timing import Table  # noqa: E402

MIB = 1 << 20


def c_barrier_us(path):
    """bench_group's figure for a barrier round of 2 processes, in us, or None."""
    try:
        done = subprocess.run([path, "--quick"], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"barrier of 2 processes: ([0-9.]+) us", done.stdout)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="fewer rounds (make bench)")
    mode.add_argument("--full", action="store_true", help="more rounds, and 8 processes")
    ap.add_argument("--only", default="allreduce,barrier,trainer")
    ap.add_argument("--procs", help="the allreduce's process counts, each with every size "
                    "(default: 2,4, and 8 up to 1 MiB with --full)")
    ap.add_argument("--bench-group", help="bench/bench_group, for the C barrier figure")
    opt = ap.parse_args()
    only = set(opt.only.split(","))
    unknown = only - {"allreduce", "barrier", "trainer"}
    if unknown:
        ap.error(f"--only: unknown {', '.join(sorted(unknown))}")
    procs = None
    if opt.procs:
        try:
            procs = [int(n) for n in opt.procs.split(",")]
        except ValueError:
            procs = []
        if not procs or min(procs) < 2:
            ap.error(f"--procs: want process counts of 2 or more, like 2,4,8, not {opt.procs!r}")
    try:
        import torch
    except ImportError:
        torch = None
    import pdshm
    print(f"dpbench: {sys.executable} {sys.version.split()[0]}, torch "
          f"{torch.__version__ if torch else 'missing'}, pdshm from "
          f"{os.path.dirname(pdshm.__file__)}; {'quick' if opt.quick else 'full'} run on "
          f"{os.cpu_count()} cores (4 and 8 processes oversubscribe fewer cores)")
    prefix = f"dpbench{os.getpid()}"
    table = Table()
    targets = []
    started = time.monotonic()

    if "allreduce" in only:
        sizes = allreduce_peers.SIZES
        if procs:
            plan = [(n, sizes) for n in procs]
        else:
            plan = [(2, sizes), (4, sizes)] + ([(8, sizes[:3])] if opt.full else [])
        if torch is None:
            print("allreduce: no torch, no gloo figures")
        ar = allreduce_peers.allreduce(table, opt.quick, prefix, plan)
        # against each peer a user would otherwise pick: gloo (torch's CPU
        # backend) and MPI_Allreduce (OpenMPI's shared-memory transport; the
        # DeepSpeed-style peer is bench/bench_allreduce's, in C)
        for nbytes, peer, want in ((MIB, "gloo", 10.0), (100 * MIB, "gloo", 4.0),
                                   (4 << 10, "mpi", 1.0), (MIB, "mpi", 1.0),
                                   (100 * MIB, "mpi", 1.0)):
            r = ar.get((2, nbytes))
            if r and r[peer]:
                targets.append((f"allreduce {allreduce_peers._human(nbytes)}, 2 procs: >= "
                                f"{want:g}x {peer}", r[peer] / r["pdshm"], want))

    if "barrier" in only:
        t = allreduce_peers.barrier_rtt(table, opt.quick, prefix)
        if opt.bench_group:
            c = c_barrier_us(opt.bench_group)
            if c is not None:
                table.add("barrier", "2 procs, C (bench_group)", c, "us", "a round")
        targets.append(("barrier round, 2 procs, Python: <= 10 us", t * 1e6, None))

    if "trainer" in only:
        if torch is None:
            print("trainer: skipped: torch is not installed")
        else:
            import trainer_peers
            tr = trainer_peers.trainers(table, opt.quick, prefix, (2, 4))
            if opt.full:  # a wide model, where N copies of its state show in memory
                trainer_peers.trainers(table, opt.quick, prefix, (4,), hidden=2048, steps=40)
            for size in (2, 4):
                p, d = tr.get(("pdshm", size)), tr.get(("ddp", size))
                if p and d:
                    targets.append((f"trainer, {size} procs: pdshm samples/s >= DDP gloo",
                                    p[0] / d[0], 1.0))

    table.print(sys.stdout)
    print()
    for what, value, want in targets:
        if want is None:  # an absolute bound: the barrier's us
            ok = value <= 10.0
            print(f"{'PASS' if ok else 'MISS'}  {what}: {value:.2f} us")
        else:
            print(f"{'PASS' if value >= want else 'MISS'}  {what}: {value:.2f}x")
    print(f"dpbench: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
