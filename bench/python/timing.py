"""Timing helpers of the Python benchmarks: best-of-N timers and the table.

Figures are the best of several repetitions (the least disturbed by other
work on the machine); ratios are taken against a baseline measured in the
same run, never against a constant.
"""
import time
import timeit


def best_ns_per_call(stmt, env, number, repeat):
    """Best of `repeat` runs of `number` executions of stmt, in ns per execution.

    stmt is a timeit statement over the names in env; the loop's own overhead
    (a few ns) is included, the same for every statement compared.
    """
    timer = timeit.Timer(stmt, globals=env)
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e9


def once_s(fn):
    """Seconds fn() takes, once."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class Table:
    """Rows of (section, what, figure, unit, note), printed aligned."""

    def __init__(self):
        self.rows = []

    def add(self, section, what, value, unit, note=""):
        self.rows.append((section, what, value, unit, note))

    def print(self, out):
        width = max((len(r[1]) for r in self.rows), default=10)
        section = None
        for sec, what, value, unit, note in self.rows:
            if sec != section:
                section = sec
                print(f"\n{sec}", file=out)
            fig = "-" if value is None else (f"{value:10.1f}" if value >= 100 else f"{value:10.3f}")
            print(f"  {what:<{width}}  {fig:>10} {unit:<8} {note}", file=out)
