#!/bin/sh
# callcount.sh [--layers] [PATH...] - the instructions one round of each hot
# path costs (callgrind; bench_calls.c lists the paths): two runs of 1000
# and 2000 rounds, the difference divided by 1000.  Run from the build
# directory after `make bench/bench_calls`.
#
# --layers: the same difference split by where the code executed lives, one
# line per lib/ folder (lib/LAYERS: locks, journal, heap, model...), the
# code inlined from a folder's headers apart ("heap.h" under "heap
# (headers)": the bounds and record checks the other layers call), glibc's
# mutex, the other libraries (the rest of the C library, jemalloc), and the
# bench's own loop.  The lines add up to the path's total, give or take the
# rounding of each.
set -e
prog=${BENCH_CALLS:-bench/bench_calls}
layers=false
if [ "$1" = "--layers" ]; then
  layers=true
  shift
fi
[ $# -gt 0 ] || set -- excl shared resize64 resize4k getcreate step malloc64 malloc4k
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Runs PATH for N rounds under callgrind into $tmp/out.N; prints the total.
refs() {
  ./libtool --mode=execute valgrind --tool=callgrind --callgrind-out-file="$tmp/out.$2" \
    "$prog" "$1" "$2" 2>&1 |
    sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}

# The self instructions of a callgrind output, summed by where the code
# lives: "group count" lines.
by_layer() {
  callgrind_annotate --threshold=100 --auto=no "$1" | awk '
    /^ *[0-9,]+ \( *[0-9.]+%\) +[^ ]/ {
      n = $1; gsub(/,/, "", n)
      line = $0; sub(/^ *[0-9,]+ \( *[0-9.]+%\) +/, "", line)
      split(line, w, " "); f = w[1]
      if (f == "PROGRAM") next
      if (match(f, /lib\/[a-z_]+\//)) {
        g = substr(f, RSTART + 4, RLENGTH - 5)
        if (f ~ /\.h:/) g = g " (headers)"
      } else if (f ~ /pthread_mutex/) g = "glibc mutex"
      else if (f ~ /(^|\/)bench\//) g = "bench loop"
      else g = "other libraries"
      sum[g] += n
    }
    END { for (g in sum) printf "%s\t%d\n", g, sum[g] }'
}

for path in "$@"; do
  a=$(refs "$path" 1000)
  b=$(refs "$path" 2000)
  echo "$path $(((b - a) / 1000))"
  $layers || continue
  by_layer "$tmp/out.1000" >"$tmp/a"
  by_layer "$tmp/out.2000" >"$tmp/b"
  # a group missing from one run counts 0 there
  awk -F '\t' 'NR == FNR { a[$1] = $2; next }
    { d = int(($2 - a[$1]) / 1000); if (d > 0) printf "%d\t%s\n", d, $1 }' "$tmp/a" "$tmp/b" |
    sort -n -r | awk -F '\t' '{ printf "  %-18s %6d\n", $2, $1 }'
done
