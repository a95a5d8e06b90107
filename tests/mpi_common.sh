# Sourced by the MPI test scripts: skip without a launcher, run
# examples/fit_a_line_mpi with 2 simulated hosts of 2 trainers through
# tests/mpirun.sh, remove the segments of PREFIX at exit.
build=${abs_top_builddir:-.}
src=${PDSHM_SRCDIR:-.}
if [ -z "${MPIRUN:-}" ] || ! command -v "$MPIRUN" >/dev/null 2>&1; then
  echo "no mpirun: skipped"
  exit 77
fi
prefix=t-$(basename "$0" .sh)-$$
cleanup() { rm -f /dev/shm/pdshm."$prefix"*; }
trap cleanup EXIT
fit_2x2() {
  PDSHM_MPI_LOCAL_SIZE=2 PDSHM_MPIRUN_TIMEOUT=${PDSHM_MPIRUN_TIMEOUT:-60} \
    "$src/tests/mpirun.sh" -np 4 -x PDSHM_MPI_LOCAL_SIZE "$build/examples/fit_a_line_mpi" "$@"
}
