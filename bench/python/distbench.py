#!/usr/bin/env python3
"""torch.distributed on one host: the "pdshm" backend against gloo, in one run.

  collectives  all_reduce (float32 sum), broadcast, all_gather, reduce_scatter
               (gloo has none in torch 1.13: n/a) of 4 KiB .. 64 MiB per rank
               (16 MiB with --quick), through torch.distributed, on private
               tensors (copied in and out)
  in place     all_reduce of a tensor that is a view of the job's segment
  ddp          an unmodified DistributedDataParallel training step of an MLP
               with ~32 MiB of gradients (8 MiB with --quick)

The ranks make one process group of each backend (the default group is
pdshm, the other a gloo group of the same ranks) and time both on the same
tensors, alternating; each figure is the best of several repetitions, as
rank 0 sees it.  Prints a table of times and the ratio gloo / pdshm (> 1:
pdshm is faster).

The segment is 2 GiB unless PDSHM_TORCH_SEGMENT_SIZE says otherwise.

usage: bench/python/distbench.py [--quick] [--procs 2]
"""
import argparse
import os
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

KIB, MIB = 1 << 10, 1 << 20


def best_s(fn, group, number, repeat):
    """Best of `repeat` runs of `number` calls of fn(), in seconds per call,
    each run started together (a barrier of `group`)."""
    best = float("inf")
    for _ in range(repeat):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def collective(name, nbytes, n, group):
    """A closure running collective `name` over nbytes of float32 per rank in group."""
    count = max(nbytes // 4, n)
    count -= count % n
    t = torch.ones(count)
    if name == "all_reduce":
        return lambda: dist.all_reduce(t, group=group)
    if name == "broadcast":
        return lambda: dist.broadcast(t, 0, group=group)
    if name == "all_gather":
        outs = [torch.empty(count) for _ in range(n)]
        return lambda: dist.all_gather(outs, t, group=group)
    if name == "reduce_scatter":
        ins = list(torch.ones(count * n).chunk(n))
        return lambda: dist.reduce_scatter(t, ins, group=group)
    raise ValueError(name)


def mlp(grad_bytes):
    width = int((grad_bytes / 4 / 4) ** 0.5)  # four width x width layers
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]), width


def ddp_step_s(group, grad_bytes, repeat):
    """Seconds of one DDP training step (forward, backward, SGD step)."""
    import torch.nn.parallel as par
    model, width = mlp(grad_bytes)
    ddp = par.DistributedDataParallel(model, process_group=group)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(8, width)

    def step():
        opt.zero_grad()
        ddp(x).sum().backward()
        opt.step()
    step()
    return best_s(step, group, 2, repeat)


def rank_main(rank, n, port, quick, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import pdshm.distributed as pdist
    dist.init_process_group("pdshm", rank=rank, world_size=n, timeout=timedelta(seconds=300))
    pdshm_pg = dist.distributed_c10d._get_default_group()
    gloo_pg = dist.new_group(list(range(n)), backend="gloo")
    rows = []
    sizes = [4 * KIB, 64 * KIB, MIB, 16 * MIB] + ([] if quick else [64 * MIB])
    repeat = 3 if quick else 5
    for name in ("all_reduce", "broadcast", "all_gather", "reduce_scatter"):
        for size in sizes:
            number = max(2, min(200, (64 * MIB) // (size * n * 4)))
            figs = {}
            for label, pg in (("pdshm", pdshm_pg), ("gloo", gloo_pg)):
                fn = collective(name, size, n, pg)
                try:
                    fn()
                except RuntimeError:  # gloo has no reduce_scatter in torch 1.13
                    figs[label] = None
                    continue
                figs[label] = best_s(fn, pg, number, repeat)
            rows.append((name, size, figs["pdshm"], figs["gloo"]))
    # a view of the segment: reduced in place
    seg = pdist.segment_of()
    var = seg.root.new_scope(f"bench.{rank}").var("t")
    for size in sizes[1:]:
        var.resize("float32", (size // 4,))
        t = torch.from_dlpack(var)
        t.fill_(1.0)
        number = max(2, min(200, (64 * MIB) // (size * n * 4)))
        in_place = best_s(lambda: dist.all_reduce(t), pdshm_pg, number, repeat)
        private = torch.ones(size // 4)
        copied = best_s(lambda: dist.all_reduce(private), pdshm_pg, number, repeat)
        rows.append(("all_reduce in place", size, in_place, copied))
    grad = (8 if quick else 32) * MIB
    rows.append(("ddp step", grad, ddp_step_s(pdshm_pg, grad, repeat),
                 ddp_step_s(gloo_pg, grad, repeat)))
    if rank == 0:
        out.put(rows)
    dist.barrier(group=gloo_pg)
    dist.destroy_process_group()


def fmt_size(b):
    return f"{b // MIB} MiB" if b >= MIB else f"{b // KIB} KiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and rounds")
    ap.add_argument("--procs", type=int, default=2)
    opt = ap.parse_args()
    # reduce_scatter of 64 MiB per rank stages 2 x 64 MiB per rank
    os.environ.setdefault("PDSHM_TORCH_SEGMENT_SIZE", "2G")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(rank_main, args=(opt.procs, port, opt.quick, out), nprocs=opt.procs,
                       start_method="spawn")
    rows = out.get()
    print(f"torch.distributed, {opt.procs} processes on {os.cpu_count()} cores "
          f"(torch {torch.__version__}); times are per call, best of several")
    print(f"{'collective':22} {'size':>7} {'pdshm':>11} {'gloo':>11} {'gloo/pdshm':>10}")
    for name, size, p, g in rows:
        if name == "all_reduce in place":
            print(f"{name:22} {fmt_size(size):>7} {p * 1e6:9.1f}us {g * 1e6:9.1f}us "
                  f"{g / p:9.2f}x  (second column: pdshm on a private tensor)")
        elif g is None:
            print(f"{name:22} {fmt_size(size):>7} {p * 1e6:9.1f}us {'n/a':>11} "
                  f"{'':10}  (gloo does not have it)")
        else:
            print(f"{name:22} {fmt_size(size):>7} {p * 1e6:9.1f}us {g * 1e6:9.1f}us "
                  f"{g / p if p > 0 else float('nan'):9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
