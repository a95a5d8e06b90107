#!/bin/sh
# mpirun as the MPI tests, examples and benchmarks need it on one machine,
# written down once:
#  --oversubscribe            more ranks than cores (2 simulated hosts x 2 on
#                             2 cores);
#  --allow-run-as-root        only when running as root (OpenMPI refuses
#                             root otherwise);
#  --mca btl self,vader       ranks talk through shared memory only (no
#                             network probing in a container);
#  OMPI_MCA_btl_vader_single_copy_mechanism=none
#                             CMA (process_vm_readv) is often forbidden by a
#                             container's ptrace policy; copying through the
#                             shared buffers works everywhere;
#  OMPI_MCA_btl_vader_backing_directory=/tmp
#                             the ranks' own shared-memory files go to /tmp, so
#                             that /dev/shm holds only pdshm's segments (the
#                             suite also runs in a 64 MiB /dev/shm, where six
#                             ranks' files left no room for their segments);
#  OMPI_MCA_plm_rsh_agent=    no ssh/rsh is needed (or present) to launch on
#                             the local host;
#  OMPI_MCA_rmaps_base_oversubscribe=1, and --bind-to none: no binding to cores
#                             that other ranks share.
#  ASAN_OPTIONS gains detect_leaks=0 when set (a sanitized build): OpenMPI's
#                             components leak at MPI_Finalize and are unloaded
#                             before LeakSanitizer looks, so their leaks cannot
#                             be suppressed by name; the ranks inherit it.
#                             Leaks of pdshm's own are checked by every other
#                             suite of that build.
# A launch that outlives PDSHM_MPIRUN_TIMEOUT seconds (default 120) is
# killed: a test never hangs.
#
# usage: tests/mpirun.sh -np N [more mpirun options] program [args...]
set -eu
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
OMPI_MCA_btl_vader_single_copy_mechanism=none
OMPI_MCA_btl_vader_backing_directory=/tmp
OMPI_MCA_plm_rsh_agent=
OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism OMPI_MCA_btl_vader_backing_directory \
  OMPI_MCA_plm_rsh_agent OMPI_MCA_rmaps_base_oversubscribe
if [ -n "${ASAN_OPTIONS:-}" ]; then
  ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0
  export ASAN_OPTIONS
fi
exec timeout -k 5 "${PDSHM_MPIRUN_TIMEOUT:-120}" "${MPIRUN:-mpirun}" $root --oversubscribe \
  --bind-to none --mca btl self,vader "$@"
