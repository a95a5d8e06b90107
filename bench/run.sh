#!/bin/sh
# run.sh [--report FILE] - every benchmark of `make bench`, in one run, from
# the build directory (make bench and make bench-report call it).
#
# With --report, FILE also gets the run as Markdown: when and where it ran
# (date, CPU, cores, load average, the build's flags, the revision) and each
# command's standard output under its own command line (progress, on
# stderr, goes to the terminal only), so that every figure in it
# names what produced it and a table cannot outlive the run that made it.
# Instruction counts (bench/callcount.sh) join the report when valgrind is
# installed and the build is optimized (a debug build's counts are ~4x).
#
# Environment (set by make): PYTHON, the interpreter with the module's
# dependencies (empty: no Python benchmarks); abs_builddir; srcdir.
set -e
report=
if [ "$1" = "--report" ]; then
  report=$2
  shift 2
fi
srcdir=${srcdir:-.}
abs_builddir=${abs_builddir:-$(pwd)}

# The commands, in order: a command line per line.
commands() {
  echo "./bench/bench_group --quick"
  echo "./bench/bench_allreduce --quick"
  echo "./bench/bench_alloc --quick"
  echo "./bench/bench_grow --quick"
  echo "./bench/bench_recovery --quick"
  echo "./bench/pdshm-bench --quick"
  if [ -n "$PYTHON" ]; then
    echo "$PYTHON $srcdir/bench/python/pybench.py --quick --pdshm-bench bench/pdshm-bench"
    echo "$PYTHON $srcdir/bench/python/dpbench.py --quick --bench-group bench/bench_group"
    echo "$PYTHON $srcdir/bench/python/grow_train.py --quick"
  fi
  if [ -n "$report" ] && command -v valgrind >/dev/null 2>&1 && [ -x bench/bench_calls ] &&
    ! grep -q '^#define PDSHM_DEBUG 1' config.h; then
    echo "$srcdir/bench/callcount.sh"
  fi
}

header() {
  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
  flags=$(./config.status --config 2>/dev/null)
  rev=$(git -C "$srcdir" describe --always --dirty 2>/dev/null || echo "not a git checkout")
  echo "# One run of the benchmarks"
  echo
  echo "Written by \`make bench-report\` (bench/run.sh): every figure below is the"
  echo "output of the command above it, all from this one run. Ratios compare figures"
  echo "measured in the same run; a figure alone says little on another machine."
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- machine: ${cpu:-unknown CPU}, $(nproc) cores, $(uname -srm)"
  echo "- load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- build: configure ${flags:-(flags unknown)}"
  echo "- revision: $rev"
}

# The header is made before the report is opened: opening it first would
# make the tree, which holds the report, "-dirty" in the revision it names.
if [ -n "$report" ]; then
  head=$(header)
  printf '%s\n' "$head" >"$report"
fi
# Each command's stdin is /dev/null: the loop reads the list from its own
# stdin, which a command (mpirun forwards it to its ranks) would drain.
commands | while IFS= read -r cmd; do
  echo "== $cmd"
  if [ -z "$report" ]; then
    PYTHONPATH="$abs_builddir/python" PYTHONDONTWRITEBYTECODE=1 sh -c "$cmd" </dev/null
    continue
  fi
  # the report keeps what a command prints on stdout; its progress on stderr
  # shows on the terminal as it runs
  out=$(PYTHONPATH="$abs_builddir/python" PYTHONDONTWRITEBYTECODE=1 sh -c "$cmd" </dev/null) ||
    { echo "$out"; echo "bench/run.sh: $cmd failed" >&2; exit 1; }
  echo "$out"
  { echo; echo "## \`$cmd\`"; echo; echo '```'; echo "$out"; echo '```'; } >>"$report"
done
[ -z "$report" ] || {
  printf '\n(load average at the end: %s)\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$report"
  echo "bench/run.sh: the run is in $report"
}
