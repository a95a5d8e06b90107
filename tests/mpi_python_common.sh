# Sourced by the Python MPI test scripts after setting `need` (the modules
# they import, as "mpi4py, numpy"): skip without a launcher, without those
# modules for $PYTHON, or in a sanitized build (the module would load under
# an uninstrumented interpreter); then this build tree's module comes first
# on PYTHONPATH, and the segments of PREFIX are removed at exit.
build=${abs_top_builddir:-.}
src=${PDSHM_SRCDIR:-.}
if [ -z "${MPIRUN:-}" ] || ! command -v "$MPIRUN" >/dev/null 2>&1; then
  echo "no mpirun: skipped"; exit 77
fi
if [ -z "${PYTHON:-}" ] || ! "$PYTHON" -c "import $need" 2>/dev/null; then
  echo "no $need for ${PYTHON:-(no interpreter)}: skipped"; exit 77
fi
case "${PDSHM_SANITIZERS:-}" in
  *sanitize*) echo "a sanitized module under an uninstrumented interpreter: skipped"; exit 77 ;;
esac
PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH PYTHONDONTWRITEBYTECODE
prefix=t-$(basename "$0" .sh)-$$
cleanup() { rm -f /dev/shm/pdshm."$prefix"*; }
trap cleanup EXIT
