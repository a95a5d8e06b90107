#!/bin/sh
# A trainer killed with SIGKILL ends the whole MPI job within seconds, never
# a hang: its host's group sees the death and, with no replacement within
# --replace-ms, the host calls MPI_Abort; OpenMPI's mpirun also ends a job
# one of whose ranks died by a signal (whichever comes first).  Then a
# restart on the same segments resumes from the step the job had reached.
set -eu
. "${PDSHM_SRCDIR:-.}/tests/mpi_common.sh"
guard=60 # s: mpirun.sh kills a job still running then
start=$(date +%s)
if out=$(PDSHM_MPIRUN_TIMEOUT=$guard fit_2x2 --epochs 2 --fresh --die 5:1 --replace-ms 300 "$prefix" 2>&1); then
  echo "$out"; echo "the job went on after a trainer's death"; exit 1
fi
took=$(($(date +%s) - start))
echo "$out" | grep -E 'pdshm-mpi|signal 9|MPI_ABORT' | head -n 3
echo "the job ended ${took}s after it started"
[ "$took" -lt "$guard" ] || { echo "it ran ${took}s, until the ${guard}s guard killed it: a hang"; exit 1; }
out=$(fit_2x2 --epochs 1 "$prefix")
echo "$out" | head -n 2
echo "$out" | grep -q "resumed at step 5 from host 0" || { echo "did not resume at step 5"; exit 1; }
