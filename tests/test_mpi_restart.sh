#!/bin/sh
# A restarted job resumes from the parameters in the hosts' segments, with
# no checkpoint file: 2 epochs, then host 1's segment removed, then a run to
# 4 epochs (host 1 re-seeded from host 0, resuming at step 32) ends with
# exactly the parameters of a fresh 4-epoch run.
set -eu
. "${PDSHM_SRCDIR:-.}/tests/mpi_common.sh"
fit_2x2 --epochs 2 --fresh "$prefix" >/dev/null
rm "/dev/shm/pdshm.$prefix.h1"
out=$(fit_2x2 --epochs 4 "$prefix")
echo "$out"
echo "$out" | grep -q "resumed at step 32 from host 0" || { echo "did not resume at step 32"; exit 1; }
echo "$out" | grep -q "host 1: no parameters in its segment, re-seeded from host 0" ||
  { echo "host 1 was not re-seeded"; exit 1; }
# the resumed run's segments are done with: the fresh run's take their room
# (a 64 MiB /dev/shm, shared with the suites running beside this one)
rm -f "/dev/shm/pdshm.$prefix.h0" "/dev/shm/pdshm.$prefix.h1"
fresh=$(fit_2x2 --epochs 4 --fresh "$prefix-fresh")
a=$(echo "$out" | grep '^params'); b=$(echo "$fresh" | grep '^params')
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "resumed: $a"; echo "fresh:   $b"; exit 1; }
echo "resumed and fresh runs end with the same parameters"
