#!/bin/sh
# pdshm.mpi: a trainer killed with SIGKILL ends the whole MPI job within
# seconds, never a hang (tests/mpi_kill.py, 2 simulated hosts of 2).
# Skipped without a launcher, mpi4py or numpy.
set -eu
need="mpi4py, numpy"
. "${PDSHM_SRCDIR:-.}/tests/mpi_python_common.sh"
guard=60 # s: mpirun.sh kills a job still running then
start=$(date +%s)
if out=$(PDSHM_MPI_LOCAL_SIZE=2 PDSHM_MPIRUN_TIMEOUT=$guard "$src/tests/mpirun.sh" -np 4 \
    -x PDSHM_MPI_LOCAL_SIZE -x PYTHONPATH -x PYTHONDONTWRITEBYTECODE \
    "$PYTHON" "$src/tests/mpi_kill.py" "$prefix" 2>&1); then
  echo "$out"; echo "mpirun exited 0 after a trainer's death"; exit 1
fi
took=$(($(date +%s) - start))
echo "$out" | grep -E '^step|pdshm.mpi|signal 9|MPI_ABORT|went on' | head -n 6
if echo "$out" | grep -q "went on"; then exit 1; fi
echo "$out" | grep -q '^step 2$' || { echo "the steps before the death did not complete"; exit 1; }
echo "the job ended ${took}s after it started"
[ "$took" -lt "$guard" ] || { echo "it ran ${took}s, until the ${guard}s guard killed it: a hang"; exit 1; }
