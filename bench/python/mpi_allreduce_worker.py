"""One rank of the MPI_Allreduce peer (bench/python/mpi_peer.py starts it
under mpirun -np N): comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM) of a numpy
float32 buffer of each size, timed as allreduce_peers times the others (a
warm-up, then the best over the repetitions of the mean of the rounds, each
repetition started by a barrier).

Rank 0 prints one line a size: "mpi-allreduce <bytes> <seconds a round>".

usage: mpi_allreduce_worker.py [--quick] --repeat R BYTES...
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from allreduce_peers import _time_rounds, rounds_for  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the rounds of a quick run")
    ap.add_argument("--repeat", type=int, required=True)
    ap.add_argument("sizes", type=int, nargs="+", help="bytes, multiples of 4")
    opt = ap.parse_args()
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    for nbytes in opt.sizes:
        buf = np.zeros(nbytes // 4, np.float32)  # zeros: see allreduce_peers
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)  # warm-up: the pages are touched

        def allreduce():
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

        t = _time_rounds(allreduce, comm.Barrier, rounds_for(nbytes, opt.quick), opt.repeat)
        if comm.Get_rank() == 0:
            print(f"mpi-allreduce {nbytes} {t!r}", flush=True)
        comm.Barrier()


if __name__ == "__main__":
    main()
