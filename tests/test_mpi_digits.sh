#!/bin/sh
# examples/train_digits.py --mpi across 2 simulated hosts of 2 trainers: a
# run of 2 epochs, host 1's segment removed, a run to 3 epochs (host 1
# re-seeded from host 0, resumed at the step reached) ends with the same
# test accuracy and loss as a fresh 3-epoch run.  Skipped without mpirun,
# mpi4py, torch or sklearn.
set -eu
need="mpi4py, torch, sklearn"
. "${PDSHM_SRCDIR:-.}/tests/mpi_python_common.sh"
digits() {
  PDSHM_MPI_LOCAL_SIZE=2 PDSHM_MPIRUN_TIMEOUT=120 "$src/tests/mpirun.sh" -np 4 \
    -x PDSHM_MPI_LOCAL_SIZE -x PYTHONPATH -x PYTHONDONTWRITEBYTECODE \
    "$PYTHON" "$src/examples/train_digits.py" --mpi "$@"
}
digits "$prefix" --epochs 2 --fresh >/dev/null
rm "/dev/shm/pdshm.$prefix.h1"
out=$(digits "$prefix" --epochs 3)
echo "$out"
echo "$out" | grep -q "host 1: no state in its segment; re-seeded from host 0" ||
  { echo "host 1 was not re-seeded"; exit 1; }
echo "$out" | grep -q "resumed at step 44" || { echo "did not resume at step 44"; exit 1; }
fresh=$(digits "$prefix-fresh" --epochs 3)
a=$(echo "$out" | grep '^epoch   3'); b=$(echo "$fresh" | grep '^epoch   3')
a=${a%  *s}; b=${b%  *s}   # without the epoch's time
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "resumed: $a"; echo "fresh:   $b"; exit 1; }
echo "resumed and fresh runs end alike: $a"
