#!/bin/sh
# pdshm.mpi under mpirun (tests/mpirun.sh): tests/mpi_hier.py with 2
# simulated hosts of 2 processes, then 4 hosts of 1 and 1 host of 4, on the
# module of this build tree.  Skipped without a launcher, mpi4py or numpy.
set -eu
need="mpi4py, numpy"
. "${PDSHM_SRCDIR:-.}/tests/mpi_python_common.sh"
for layout in 2x2 4x1 1x4; do
  hosts=${layout%x*} local=${layout#*x}
  echo "# $hosts hosts x $local"
  PDSHM_MPI_LOCAL_SIZE=$local PDSHM_MPIRUN_TIMEOUT=90 \
    "$src/tests/mpirun.sh" -np $((hosts * local)) -x PDSHM_MPI_LOCAL_SIZE -x PYTHONPATH \
    -x PYTHONDONTWRITEBYTECODE "$PYTHON" "$src/tests/mpi_hier.py" "$prefix-$layout"
done
