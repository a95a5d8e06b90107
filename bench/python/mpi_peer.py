"""The MPI_Allreduce peer of the allreduce benchmark: Debian's OpenMPI through
mpi4py, N ranks started by mpirun -np N (bench/python/mpi_allreduce_worker.py),
all the sizes of one process count in one launch.

Optional: when mpi4py (for this interpreter) or mpirun is missing, or mpirun
fails, allreduce_times says why and the benchmark shows n/a, never fails.
As root mpirun needs --allow-run-as-root; --oversubscribe lets N exceed the
cores.  When a launch fails, it is tried once more without the shared-memory
transport's single-copy mechanism (CMA, which a container's ptrace policy may
forbid): OMPI_MCA_btl_vader_single_copy_mechanism=none.
"""
import importlib.util
import os
import shutil
import subprocess
import sys

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_allreduce_worker.py")


def unavailable():
    """Why the MPI peer cannot run here, or None."""
    if importlib.util.find_spec("mpi4py") is None:
        return f"mpi4py is not installed for {sys.executable} (Debian: python3-mpi4py)"
    if shutil.which("mpirun") is None:
        return "mpirun is not on PATH (Debian: openmpi-bin)"
    return None


def _launch(procs, sizes, quick, repeat, env):
    cmd = ["mpirun", "--oversubscribe", "-np", str(procs)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    cmd += [sys.executable, WORKER, "--repeat", str(repeat)] + (["--quick"] if quick else [])
    cmd += [str(n) for n in sizes]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    times = {}
    for line in done.stdout.splitlines():
        f = line.split()
        if len(f) == 3 and f[0] == "mpi-allreduce":
            times[int(f[1])] = float(f[2])
    if done.returncode != 0 or set(times) != set(sizes):
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        return None, f"mpirun -np {procs} exited {done.returncode}: {last}"
    return times, None


def allreduce_times(procs, sizes, quick, repeat):
    """({bytes: seconds a round of rank 0}, None), or (None, why not)."""
    why = unavailable()
    if why:
        return None, why
    env = dict(os.environ)
    try:
        times, why = _launch(procs, sizes, quick, repeat, env)
        if times is None and "OMPI_MCA_btl_vader_single_copy_mechanism" not in env:
            env["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"
            times, again = _launch(procs, sizes, quick, repeat, env)
            why = None if times else f"{why}; with single-copy none too: {again}"
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"mpirun -np {procs}: {e}"
    return times, why
