#!/bin/sh
# smoke.sh TARGET LOG ARGS... - one libFuzzer run of make fuzz-smoke.
#
# The run's output goes to LOG; what is printed is its last lines or, when
# the run fails, the first lines of its report (the signal or sanitizer, and
# the frames that led to it) after its statistics, so that the end of a
# CI log, often all of it that is kept, names the fault.
target=$1 log=$2
shift 2
"$target" "$@" >"$log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
  tail -n 6 "$log"
  exit 0
fi
tail -n 12 "$log"
echo "---- $target failed ($rc); the start of its report (all of it in $log):"
grep -m 1 -A 40 -e '^==[0-9]*==.*ERROR' -e 'runtime error:' -e 'invariant failed' \
  -e 'Assertion' -e '^ALARM' -e 'out-of-memory' "$log" | head -n 40
exit 1
