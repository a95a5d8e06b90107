#!/bin/sh
# examples/fit_a_line reaches the noise floor the README promises with any
# trainer count it accepts (an epoch is the same SGD steps whatever the
# count), and leaves no segment behind without --keep.
set -eu
bin=${abs_top_builddir:-.}/examples/fit_a_line
for n in 1 8; do
  name=t-fit-$$-$n
  out=$("$bin" --trainers "$n" "$name")
  echo "$out" | tail -n 2
  last=$(echo "$out" | awk '/epoch/ {loss = $4} END {print loss}')
  # the data's noise has variance 0.01: the fit must get there
  awk -v l="$last" -v n="$n" 'BEGIN {
    if (l == "" || l + 0 > 0.0100) { printf "%d trainers: last loss %s above 0.0100\n", n, l; exit 1 } }'
  if [ -e "/dev/shm/pdshm.$name" ]; then
    echo "/dev/shm/pdshm.$name left behind"
    rm -f "/dev/shm/pdshm.$name"
    exit 1
  fi
done
# a count that does not divide the global batch is refused, nothing made
if "$bin" --trainers 3 "t-fit-$$-3" 2>/dev/null; then echo "3 trainers accepted"; exit 1; fi
[ ! -e "/dev/shm/pdshm.t-fit-$$-3" ]
