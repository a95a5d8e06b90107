"""The digits trainer (examples/train_digits.py's MLP and data) run by N
processes three ways, same model, data, global batch and steps:

  pdshm     pdshm.torch.DataParallel: parameters and SGD state once in the
            segment, gradients averaged by Group.allreduce, shard-wise update
  ddp       torch.nn.parallel.DistributedDataParallel over gloo (file://),
            torch.optim.SGD in every process (N copies of everything)
  hogwild   torch.multiprocessing: the parameters in shared memory
            (share_memory()), every process steps them unsynchronised with
            its own torch.optim.SGD (its momentum buffers private)

Samples per second (global batch x steps / rank 0's wall time) and memory:
the trainers' RSS summed, their PSS summed (shared pages split between
the processes that map them: the fair total) and, for pdshm, the segment's
used bytes.
"""
import multiprocessing
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))

import train_digits  # noqa: E402

BATCH, LR = 64, 0.05


def _memory():
    """(RSS, PSS) of this process in bytes."""
    rss = pss = 0
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
    return rss, pss


def _rows(data, step, size, rank):
    x, y = data[0], data[1]
    rows = train_digits.batch_rows(step, len(x), BATCH, size, rank)
    return x[rows], y[rows]


def _pdshm_worker(seg_name, size, rank, steps, hidden, out):
    import torch
    import pdshm
    import pdshm.torch as pt
    torch.set_num_threads(1)
    data = train_digits.load_data()
    with pdshm.attach(seg_name) as seg, seg.group("bench", size, rank=rank) as g:
        model = train_digits.make_model(torch, hidden)
        dp = pt.DataParallel(model, seg.open("digits"), g, torch.optim.SGD, lr=LR, momentum=0.9)
        g.barrier()
        t0 = time.perf_counter()
        while dp.steps_done < steps:
            x, y = _rows(data, dp.steps_done + 1, size, rank)
            dp.zero_grad()
            torch.nn.functional.cross_entropy(model(torch.from_numpy(x)),
                                              torch.from_numpy(y)).backward()
            dp.step()
        out.put((rank, time.perf_counter() - t0) + _memory())
        g.barrier()


def _ddp_worker(init_file, size, rank, steps, hidden, out):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    data = train_digits.load_data()
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=size)
    model = torch.nn.parallel.DistributedDataParallel(train_digits.make_model(torch, hidden))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    dist.barrier()
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        x, y = _rows(data, step, size, rank)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.from_numpy(x)),
                                          torch.from_numpy(y)).backward()
        opt.step()
    out.put((rank, time.perf_counter() - t0) + _memory())
    dist.barrier()
    dist.destroy_process_group()


def _hogwild_worker(model, size, rank, steps, barrier, out):
    import torch
    torch.set_num_threads(1)
    data = train_digits.load_data()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    barrier.wait()
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        x, y = _rows(data, step, size, rank)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.from_numpy(x)),
                                          torch.from_numpy(y)).backward()
        opt.step()
    out.put((rank, time.perf_counter() - t0) + _memory())
    barrier.wait()


def _collect(procs, out, size):
    for p in procs:
        p.start()
    got = [out.get(timeout=900) for _ in range(size)]
    for p in procs:
        p.join(600)
    if any(p.exitcode for p in procs):
        raise RuntimeError(f"exit codes {[p.exitcode for p in procs]}")
    elapsed = max(g[1] for g in got)
    return elapsed, sum(g[2] for g in got), sum(g[3] for g in got)


def run_one(kind, size, steps, hidden, prefix):
    """(seconds, RSS sum, PSS sum, segment bytes) of one run."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    if kind == "pdshm":
        import pdshm
        seg_name = f"{prefix}-dp{size}"
        with pdshm.create(seg_name, size=(64 << 20) + size * hidden * hidden * 24) as seg:
            try:
                seg.root.new_scope("digits")
                procs = [ctx.Process(target=_pdshm_worker,
                                     args=(seg_name, size, r, steps, hidden, out))
                         for r in range(size)]
                res = _collect(procs, out, size)
                return res + (seg.stats().used,)
            finally:
                pdshm.unlink(seg_name)
    if kind == "ddp":
        with tempfile.TemporaryDirectory() as d:
            init = os.path.join(d, "init")
            procs = [ctx.Process(target=_ddp_worker, args=(init, size, r, steps, hidden, out))
                     for r in range(size)]
            return _collect(procs, out, size) + (0,)
    import torch
    model = train_digits.make_model(torch, hidden)
    model.share_memory()
    bar = ctx.Barrier(size)
    procs = [ctx.Process(target=_hogwild_worker, args=(model, size, r, steps, bar, out))
             for r in range(size)]
    return _collect(procs, out, size) + (0,)


def trainers(table, quick, prefix, sizes, hidden=256, steps=None):
    """{(kind, procs): (samples/s, RSS, PSS, segment)} and table rows."""
    steps = steps or (150 if quick else 600)
    results = {}
    for size in sizes:
        for kind in ("pdshm", "ddp", "hogwild"):
            what = f"{size} procs {kind}, hidden {hidden}"
            try:
                secs, rss, pss, segb = run_one(kind, size, steps, hidden, prefix)
            except (ImportError, RuntimeError) as e:
                table.add("trainer", what, 0, "", f"failed: {e}")
                continue
            rate = steps * BATCH / secs
            results[(kind, size)] = (rate, rss, pss, segb)
            note = (f"RSS {rss / 2**20:.0f} MiB, PSS {pss / 2**20:.0f} MiB"
                    + (f", segment used {segb / 2**20:.1f} MiB" if segb else ""))
            table.add("trainer", what, rate, "samples/s", note)
    return results
