#!/bin/sh
# callcount.sh [PATH...] - the instructions one round of each hot path costs
# (callgrind; bench_calls.c lists the paths): two runs of 1000 and 2000
# rounds, the difference divided by 1000.  Run from the build directory
# after `make bench/bench_calls`.
set -e
prog=${BENCH_CALLS:-bench/bench_calls}
[ $# -gt 0 ] || set -- excl shared resize64 resize4k getcreate step
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
refs() {
  ./libtool --mode=execute valgrind --tool=callgrind --callgrind-out-file="$tmp/out" \
    "$prog" "$1" "$2" 2>&1 |
    sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}
for path in "$@"; do
  a=$(refs "$path" 1000)
  b=$(refs "$path" 2000)
  echo "$path $(((b - a) / 1000))"
done
