#!/usr/bin/env python3
"""pdshm.torch.DataParallel, elastic: the cost of a repair, and the trainer
against DDP with a torch.optim optimizer.

  repair      N trainers of the digits MLP (examples/train_digits.py) under
              DataParallel(shrink_after=S); one is SIGKILLed mid-training and
              none replaces it: the time from the kill to the end of the
              survivors' regroup and re-shard, and to their first completed
              step, for 2 -> 1 and 4 -> 3; printed as ms, less S (the wait for
              a replacement, the caller's choice), and as a multiple of the
              median step before the kill (the baseline, same run)
  throughput  the digits trainer by 2 and 4 processes: DataParallel against
              DistributedDataParallel over gloo, with torch.optim.SGD
              (momentum 0.9) and torch.optim.Adam, the same global batch and
              steps: samples/s and PSS summed over the trainers (from
              /proc/<pid>/smaps_rollup; the segment's shared pages are split
              between the processes that map them), as ratios to DDP's

Prints ratios of figures measured in this run; asserts nothing.  More
processes than cores are oversubscribed: the output says how many cores.

usage: bench/python/elasticbench.py [--quick] [--only repair,throughput] [--runs N]
"""
import argparse
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))

import train_digits  # noqa: E402

BATCH, HIDDEN = 64, 256
SHRINK_AFTER = 0.25  # seconds the survivors wait for a replacement
OPTIMIZERS = {"sgd-momentum": ("SGD", dict(lr=0.05, momentum=0.9)),
              "adam": ("Adam", dict(lr=0.002))}


def pss_bytes(pid):
    """The PSS of process pid in bytes, from /proc/<pid>/smaps_rollup."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def step_on(torch, model, data, step, size, rank):
    """Accumulates rank's part of the global batch's gradient at `step`
    (train_digits' shares: the summed loss weighted by size / BATCH)."""
    x, y = data[0], data[1]
    rows = train_digits.batch_rows(step, len(x), BATCH, size, rank)
    loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x[rows])),
                                             torch.from_numpy(y[rows]), reduction="sum")
    (loss * (size / BATCH)).backward()


# ---- repair ------------------------------------------------------------------
def repair_worker(seg_name, size, rank, steps, conn):
    """Trains until `steps`; sends the time each step completed (monotonic:
    one clock for every process of the host) and when a re-shard ended."""
    import torch
    import pdshm
    import pdshm.torch as pt
    torch.set_num_threads(1)
    data = train_digits.load_data()
    reshards = []

    class Timed(pt.DataParallel):
        def _reshard(self):
            super()._reshard()
            reshards.append(time.monotonic())

    with pdshm.attach(seg_name) as seg, pt.join_group(seg, "bench", size, rank) as g:
        model = train_digits.make_model(torch, HIDDEN)
        dp = Timed(model, seg.open("digits"), g, torch.optim.SGD, timeout=60.0,
                   shrink_after=SHRINK_AFTER, lr=0.05, momentum=0.9)
        conn.send("ready")
        done = []
        while dp.steps_done < steps:
            dp.zero_grad()
            step_on(torch, model, data, dp.steps_done + 1, g.size, g.rank)
            if dp.step():
                done.append((dp.steps_done, g.size, time.monotonic()))
        conn.send((done, reshards))
        del dp


def repair_once(size, prefix, steps, kill_at):
    """(kill -> re-shard end, kill -> first step, median step before) in s."""
    import pdshm
    ctx = multiprocessing.get_context("spawn")
    name = f"{prefix}-repair{size}"
    with pdshm.create(name, size=64 << 20) as seg:
        try:
            scope = seg.root.new_scope("digits")
            pipes, procs = [], []
            for r in range(size):
                ours, theirs = ctx.Pipe()
                procs.append(ctx.Process(target=repair_worker,
                                         args=(name, size, r, steps, theirs)))
                procs[-1].start()
                pipes.append(ours)
            for p in pipes:
                assert p.recv() == "ready"
            while ("progress" not in scope
                   or int(scope["progress"].numpy()[:, 0].max()) < kill_at):
                time.sleep(0.0005)
            killed = time.monotonic()
            os.kill(procs[-1].pid, signal.SIGKILL)
            results = [p.recv() for p in pipes[:-1]]
            for p in procs:
                p.join(120)
        finally:
            pdshm.unlink(name)
    done, reshards = results[0]
    before = [t for _, n, t in done if n == size and t < killed]
    step = statistics.median(b - a for a, b in zip(before, before[1:]))
    ended = max(r[1][0] for r in results)  # the last survivor out of the re-shard
    # the step the kill interrupted is applied by the repair: the first step
    # of the shrunk group is the one after it
    first = min(t for _, n, t in done if n == size - 1 and t > reshards[0])
    return ended - killed, first - killed, step


def repair(quick, runs, prefix):
    steps, kill_at = (80, 40) if quick else (200, 100)
    for size in (2, 4):
        got = [repair_once(size, prefix, steps, kill_at) for _ in range(runs)]
        reshard = statistics.median(g[0] for g in got)
        first = statistics.median(g[1] for g in got)
        step = statistics.median(g[2] for g in got)
        print(f"repair {size} -> {size - 1} (median of {runs}): kill -> re-shard end "
              f"{reshard * 1e3:.0f} ms ({(reshard - SHRINK_AFTER) * 1e3:.0f} ms past "
              f"shrink_after {SHRINK_AFTER * 1e3:.0f} ms = "
              f"{(reshard - SHRINK_AFTER) / step:.1f} steps); kill -> first step "
              f"{first * 1e3:.0f} ms ({(first - SHRINK_AFTER) * 1e3:.0f} ms past "
              f"shrink_after = {(first - SHRINK_AFTER) / step:.1f} steps); "
              f"baseline step {step * 1e3:.2f} ms", flush=True)


# ---- throughput ----------------------------------------------------------------
def pdshm_worker(seg_name, size, rank, steps, opt, conn):
    import torch
    import pdshm
    import pdshm.torch as pt
    torch.set_num_threads(1)
    data = train_digits.load_data()
    cls, kw = OPTIMIZERS[opt]
    with pdshm.attach(seg_name) as seg, seg.group("bench", size, rank=rank) as g:
        model = train_digits.make_model(torch, HIDDEN)
        dp = pt.DataParallel(model, seg.open("digits"), g, getattr(torch.optim, cls), **kw)
        g.barrier()
        t0 = time.perf_counter()
        while dp.steps_done < steps:
            dp.zero_grad()
            step_on(torch, model, data, dp.steps_done + 1, size, rank)
            dp.step()
        conn.send(time.perf_counter() - t0)
        conn.recv()  # measured, then let go
        g.barrier()
        del dp


def ddp_worker(init_file, size, rank, steps, opt, conn):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    data = train_digits.load_data()
    cls, kw = OPTIMIZERS[opt]
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=size)
    model = torch.nn.parallel.DistributedDataParallel(train_digits.make_model(torch, HIDDEN))
    optimizer = getattr(torch.optim, cls)(model.parameters(), **kw)
    dist.barrier()
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        optimizer.zero_grad()
        # DDP averages the gradients: each rank's summed loss over its share,
        # weighted by size / BATCH, averages to the global batch's
        step_on(torch, model, data, step, size, rank)
        optimizer.step()
    conn.send(time.perf_counter() - t0)
    conn.recv()
    dist.barrier()
    dist.destroy_process_group()


def run_trainers(kind, size, steps, opt, prefix):
    """(samples/s, PSS summed in bytes) of one run."""
    ctx = multiprocessing.get_context("spawn")

    def run(target, first):
        pipes, procs = [], []
        for r in range(size):
            ours, theirs = ctx.Pipe()
            procs.append(ctx.Process(target=target, args=(first, size, r, steps, opt, theirs)))
            procs[-1].start()
            pipes.append(ours)
        secs = max(p.recv() for p in pipes)
        pss = sum(pss_bytes(p.pid) for p in procs)  # every trainer still holds its state
        for p in pipes:
            p.send("go")
        for p in procs:
            p.join(120)
        if any(p.exitcode for p in procs):
            raise RuntimeError(f"{kind}: exit codes {[p.exitcode for p in procs]}")
        return steps * BATCH / secs, pss

    if kind == "ddp":
        with tempfile.TemporaryDirectory() as d:
            return run(ddp_worker, os.path.join(d, "init"))
    import pdshm
    name = f"{prefix}-tp{size}"
    with pdshm.create(name, size=64 << 20) as seg:
        try:
            seg.root.new_scope("digits")
            return run(pdshm_worker, name)
        finally:
            pdshm.unlink(name)


def throughput(quick, prefix):
    steps = 150 if quick else 600
    for opt in OPTIMIZERS:
        for size in (2, 4):
            p_rate, p_pss = run_trainers("pdshm", size, steps, opt, prefix)
            d_rate, d_pss = run_trainers("ddp", size, steps, opt, prefix)
            print(f"throughput {opt}, {size} procs on {os.cpu_count()} cores: DataParallel "
                  f"{p_rate:.0f} samples/s, DDP gloo {d_rate:.0f} samples/s: "
                  f"{p_rate / d_rate:.2f}x; PSS {p_pss / 2**20:.0f} MiB vs "
                  f"{d_pss / 2**20:.0f} MiB: {p_pss / d_pss:.2f}x", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and runs")
    ap.add_argument("--only", default="repair,throughput")
    ap.add_argument("--runs", type=int, default=None, help="repair: kills per size "
                    "(default 3, 1 with --quick)")
    opt = ap.parse_args()
    only = set(opt.only.split(","))
    if only - {"repair", "throughput"}:
        ap.error(f"--only: unknown {sorted(only - {'repair', 'throughput'})}")
    prefix = f"elasticbench-{os.getpid()}"
    started = time.monotonic()
    print(f"elasticbench: {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    if "repair" in only:
        repair(opt.quick, opt.runs or (1 if opt.quick else 3), prefix)
    if "throughput" in only:
        throughput(opt.quick, prefix)
    print(f"elasticbench: {time.monotonic() - started:.0f} s, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
