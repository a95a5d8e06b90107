"""Run by tests/test_mpi_python_kill.sh under mpirun with simulated hosts:
every process allreduces a small tensor through pdshm.mpi step after step;
at step 3 the last rank kills itself with SIGKILL.  The job must end (the
dead rank's host sees the death and, with no replacement within 0.3 s,
calls MPI Abort; mpirun also ends a job whose rank died by a signal).
Rank 0 prints "step N" as the steps complete.

usage: mpirun -np P python3 mpi_kill.py SEGMENT-PREFIX
"""
import os
import signal
import sys

import numpy as np
from mpi4py import MPI

import pdshm.mpi

comm = MPI.COMM_WORLD
with pdshm.mpi.Job(sys.argv[1], size=4 << 20, replace_timeout=0.3) as job:
    with job.segment.root.local() as local:
        v = local.var("g")
        v.assign(np.ones(1000, np.float32))
        for step in range(1000):
            if step == 3 and comm.Get_rank() == comm.Get_size() - 1:
                os.kill(os.getpid(), signal.SIGKILL)
            job.allreduce(v, op="mean", timeout=60)
            if comm.Get_rank() == 0:
                print(f"step {step}", flush=True)
print("the job went on after a trainer's death", flush=True)
sys.exit(1)
