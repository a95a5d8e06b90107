#!/bin/sh
# libpdshm-mpi under mpirun (tests/mpirun.sh): tests/mpi_hier with 2
# simulated hosts of 2 processes (the case the component is for), then 4
# hosts of 1 and 1 host of 4 (the edges: no sharing in a host, no MPI
# between hosts), and 2 hosts of 3 (a local size that is not a power of
# two): every layout gives the same answer.  Each host's segment is removed
# afterwards.
set -eu
. "${PDSHM_SRCDIR:-.}/tests/mpi_common.sh"
# 2x3's six ranks with the suite's other tests beside them need more than the
# 64 MiB /dev/shm of a container (CI runs the suite there too).
shm_mib=$(df -Pm /dev/shm | awk 'NR == 2 {print $2}')
for layout in 2x2 4x1 1x4 2x3; do
  hosts=${layout%x*} local=${layout#*x}
  if [ "$layout" = 2x3 ] && [ "${shm_mib:-0}" -lt 128 ]; then
    echo "# $hosts hosts x $local: skipped, /dev/shm is $shm_mib MiB (this layout wants 128)"
    continue
  fi
  echo "# $hosts hosts x $local"
  PDSHM_MPI_LOCAL_SIZE=$local PDSHM_MPIRUN_TIMEOUT=60 \
    "$src/tests/mpirun.sh" -np $((hosts * local)) -x PDSHM_MPI_LOCAL_SIZE \
    "$build/tests/mpi_hier" "$prefix-$layout"
  for h in $(seq 0 $((hosts - 1))); do
    [ -e "/dev/shm/pdshm.$prefix-$layout.h$h" ] || { echo "host $h's segment is missing"; exit 1; }
  done
done
