#!/usr/bin/env python3
"""pdshm from Python: the benchmarks of `import pdshm` (make bench).

  read      a 64 MiB float32 parameter read from another process, against
            torch's shared tensors, multiprocessing.shared_memory, py-lmdb,
            pickle through a pipe and plain memcpy (the baseline)
  calls     find_var, var, local() and numpy() against a dict and the C call
  step      a step's tensors (local scope, 10 x 4 KiB, release) against numpy

Prints a table, then the targets with PASS or MISS: the figures are
compared with baselines measured in the same run, never with constants, and
a MISS does not fail the run (timings are not assertions).  A peer that is
not installed is skipped with the reason; a peer that fails is reported.

usage: bench/python/pybench.py [--quick | --full] [--only read,calls,step]
                               [--pdshm-bench PATH]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import call_overhead  # noqa: E402
import read_peers     # noqa: E402
import step_alloc     # noqa: E402
from timing import Table  # noqa: E402

TARGETS = (
    ("read", "ratio", "zero-copy read >= 0.9x memcpy speed", lambda r: r >= 0.9),
    ("calls", "find_var_vs_dict", "find_var within 2x a dict lookup (d.get)", lambda r: r <= 2.0),
)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="fewer repetitions (make bench)")
    mode.add_argument("--full", action="store_true", help="more repetitions (the default)")
    ap.add_argument("--only", default="read,calls,step")
    ap.add_argument("--pdshm-bench", help="pdshm-bench, for the C figure of find_var")
    opt = ap.parse_args()
    only = set(opt.only.split(","))
    unknown = only - {"read", "calls", "step"}
    if unknown:
        ap.error(f"--only: unknown {', '.join(sorted(unknown))}")

    import numpy
    import pdshm
    print(f"pybench: {sys.executable} {sys.version.split()[0]}, numpy {numpy.__version__}, "
          f"pdshm from {os.path.dirname(pdshm.__file__)}; "
          f"{'quick' if opt.quick else 'full'} run on {os.cpu_count()} cores")
    prefix = f"pybench{os.getpid()}"
    table = Table()
    results = {}
    started = time.monotonic()
    if "read" in only:
        results["read"] = read_peers.run(table, opt.quick, prefix)
    if "calls" in only:
        results["calls"] = call_overhead.run(table, opt.quick, prefix, opt.pdshm_bench)
    if "step" in only:
        results["step"] = step_alloc.run(table, opt.quick, prefix)
    table.print(sys.stdout)
    print("\ntargets")
    for part, key, text, ok in TARGETS:
        if part not in results:
            continue
        r = results[part].get(key)
        verdict = "-   " if r is None else ("PASS" if ok(r) else "MISS")
        print(f"  {verdict}  {text}: " + ("not measured" if r is None else f"{r:.2f}x"))
    print(f"\npybench: done in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
