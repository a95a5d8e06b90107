#!/bin/sh
# pdshm.mpi under mpirun (tests/mpirun.sh): tests/mpi_hier.py with 2
# simulated hosts of 2 processes, then 4 hosts of 1 and 1 host of 4, on the
# module of this build tree.  Skipped without a launcher, mpi4py or numpy.
set -eu
build=${abs_top_builddir:-.}
src=${PDSHM_SRCDIR:-.}
if [ -z "${MPIRUN:-}" ] || ! command -v "$MPIRUN" >/dev/null 2>&1; then
  echo "no mpirun: skipped"; exit 77
fi
if [ -z "${PYTHON:-}" ] || ! "$PYTHON" -c 'import mpi4py, numpy' 2>/dev/null; then
  echo "no mpi4py or numpy for ${PYTHON:-(no interpreter)}: skipped"; exit 77
fi
case "${PDSHM_SANITIZERS:-}" in
  *sanitize*) echo "a sanitized module under an uninstrumented interpreter: skipped"; exit 77 ;;
esac
PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH PYTHONDONTWRITEBYTECODE
prefix=t-mpipy-$$
cleanup() { rm -f /dev/shm/pdshm."$prefix"-*; }
trap cleanup EXIT
for layout in 2x2 4x1 1x4; do
  hosts=${layout%x*} local=${layout#*x}
  echo "# $hosts hosts x $local"
  PDSHM_MPI_LOCAL_SIZE=$local PDSHM_MPIRUN_TIMEOUT=90 \
    "$src/tests/mpirun.sh" -np $((hosts * local)) -x PDSHM_MPI_LOCAL_SIZE -x PYTHONPATH \
    -x PYTHONDONTWRITEBYTECODE "$PYTHON" "$src/tests/mpi_hier.py" "$prefix-$layout"
done
