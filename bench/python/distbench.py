#!/usr/bin/env python3
"""torch.distributed on one host: the "pdshm" backend against gloo, in one run.

  collectives  all_reduce (float32 sum), broadcast, all_gather, reduce_scatter
               (gloo has none in torch 1.13: n/a) of 4 KiB .. 64 MiB per rank
               (16 MiB with --quick), through torch.distributed, on private
               tensors (copied in and out)
  in place     all_reduce of a tensor that is a view of the job's segment
  ddp step     an unmodified DistributedDataParallel training step (forward,
               backward, SGD step) of an MLP with ~32 MiB of gradients (8 MiB
               with --quick), float32, a batch of 8 per rank
  ddp compute  the same step under ddp.no_sync() (no gradient reduction)
  ddp comm     step - compute: what the gradients' reduction adds to a step
               (the part of it that the backward pass does not hide)
  ddp cpu      CPU seconds of rank 0's process (every thread) per step

  mpi          the same collectives through mpi4py (Debian's OpenMPI) on numpy
               float32 buffers of the same sizes: Allreduce in place, Bcast,
               Allgather, Reduce_scatter_block, a job of N ranks under mpirun
               (bench/python/mpi_dist_worker.py), timed the same way; n/a
               when mpi4py or mpirun is missing or the launch fails (the
               reason is printed)

all_reduce (float32 sum of private tensors) against two more contenders,
in jobs of their own:
  shm peer     a DeepSpeed-style shared-memory all_reduce, this bench's own
               code after the algorithm of DeepSpeed's csrc/cpu/comm/shm.cpp:
               one shared buffer per rank, each rank copies its tensor into
               its buffer and raises its flag, all spin-wait on the flags;
               below 1 MiB every rank reduces every buffer into its tensor,
               from 1 MiB each reduces its slice of all buffers into its own
               buffer, then every rank copies every slice out (copies in and
               out counted)
  bound        the memory traffic that an all_reduce of private tensors
               cannot avoid, with no synchronisation: every rank at once
               copies the tensor in, reduces its slice (reading every rank's
               slice) and copies the tensor out, at the machine's copy speed
               in the same run

Each backend runs as a job of its own, one after the other (with a gloo
group beside the pdshm one, used once, pdshm's 16 MiB all_reduce took 3.6x
as long, for a reason not found), and the jobs alternate for --rounds
rounds: each figure is the best over rounds of the best of several
repetitions, as rank 0 sees it (the machine may be shared: alternating
keeps a burst of load from favouring one backend).  Prints a table of times
and the ratio gloo / pdshm (> 1: pdshm is faster).

The segment is 2 GiB unless PDSHM_TORCH_SEGMENT_SIZE says otherwise.

usage: bench/python/distbench.py [--quick] [--procs 2] [--rounds 3] [--ddp-only]
"""
import argparse
import os
import resource
import socket
import subprocess
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


def cpu_s():
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def ddp_figures(group, grad_bytes, repeat):
    """{name: seconds} of a DDP training step (forward, backward, SGD step):
    the step, the same under no_sync(), and CPU seconds per step."""
    import torch.nn.parallel as par
    model, width = mlp(grad_bytes)
    ddp = par.DistributedDataParallel(model, process_group=group)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(8, width)

    def step():
        opt.zero_grad()
        ddp(x).sum().backward()
        opt.step()

    def local_step():
        with ddp.no_sync():
            step()
    step()
    local_step()
    cpu0 = cpu_s()
    figs = {"ddp step": best_s(step, group, 2, repeat)}
    figs["ddp cpu"] = (cpu_s() - cpu0) / (2 * repeat)
    figs["ddp compute"] = best_s(local_step, group, 2, repeat)
    figs["ddp comm"] = figs["ddp step"] - figs["ddp compute"]
    return figs


class ShmPeer:
    """The DeepSpeed-style shared-memory all_reduce of float32 sums (see the
    module's docstring): flags and one buffer per rank in a POSIX shared
    memory block that rank 0 makes (its name goes through the store)."""

    SLICED = MIB  # from this size: reduce-scatter by slice, then all-gather

    def __init__(self, rank, n, max_bytes):
        import numpy as np
        from multiprocessing import shared_memory
        self.rank, self.n, self.seq = rank, n, 0
        flag_bytes = 64 * n  # a cache line per flag
        store = dist.distributed_c10d._get_default_store()
        if rank == 0:
            self.shm = shared_memory.SharedMemory(create=True, size=flag_bytes + n * max_bytes)
            store.set("shm-peer", self.shm.name)
        else:
            self.shm = shared_memory.SharedMemory(name=store.get("shm-peer").decode())
        dist.barrier()
        if rank == 0:
            self.shm.unlink()
        self.flags = np.ndarray((n, 8), np.int64, self.shm.buf)[:, 0]
        self.flags[rank] = 0
        self.bufs = [torch.frombuffer(self.shm.buf, dtype=torch.float32, count=max_bytes // 4,
                                      offset=flag_bytes + r * max_bytes) for r in range(n)]
        dist.barrier()

    def close(self):
        self.flags = self.bufs = None
        self.shm.close()

    def _signal_wait(self):
        self.seq += 1
        self.flags[self.rank] = self.seq
        for r in range(self.n):
            while self.flags[r] < self.seq:
                pass

    def all_reduce(self, t):
        count, me = t.numel(), self.rank
        bufs = [b[:count] for b in self.bufs]
        bufs[me].copy_(t)
        self._signal_wait()
        if count * 4 < self.SLICED:
            torch.add(bufs[0], bufs[1], out=t)
            for b in bufs[2:]:
                t.add_(b)
        else:
            bounds = [count * k // self.n for k in range(self.n + 1)]
            mine = bufs[me][bounds[me]:bounds[me + 1]]
            for r, b in enumerate(bufs):
                if r != me:
                    mine.add_(b[bounds[me]:bounds[me + 1]])
            self._signal_wait()
            for r, b in enumerate(bufs):
                t[bounds[r]:bounds[r + 1]].copy_(b[bounds[r]:bounds[r + 1]])
        self._signal_wait()  # before anyone writes its buffer again


def bound_fn(count, n):
    """The unavoidable memory traffic of one rank's all_reduce of count
    float32 (see the module's docstring), as a closure."""
    src, shared, out = torch.ones(count), torch.empty(count), torch.empty(count)
    others = [torch.ones(count // n) for _ in range(n - 1)]
    lo, hi = 0, count // n

    def fn():
        shared.copy_(src)
        acc = shared[lo:hi]
        for o in others:
            acc.add_(o)
        out.copy_(shared)
    return fn


def peer_figures(rank, n, sizes, repeat):
    """{(row, size): seconds} of the shm peer and the bound."""
    figs = {}
    peer = ShmPeer(rank, n, max(sizes))
    for size in sizes:
        number = max(2, min(200, (64 * MIB) // (size * n * 4)))
        t = torch.ones(max(size // 4, n))
        peer.all_reduce(t)
        if t[0].item() != n:
            raise AssertionError(f"shm peer: {t[0].item()} where {n} is due")
        figs[("shm peer", size)] = best_s(lambda: peer.all_reduce(t), None, number, repeat)
        figs[("bound", size)] = best_s(bound_fn(max(size // 4, n), n), None, number, repeat)
    peer.close()
    return figs


def job_sizes(quick):
    """The bytes per rank of the collectives."""
    return [4 * KIB, 64 * KIB, MIB, 16 * MIB] + ([] if quick else [64 * MIB])


def rank_main(rank, backend, n, port, quick, ddp_only, out):
    """One rank of a job of one backend: puts {(row, size): seconds} (rank 0).
    backend "shm-peer": a gloo job (for its store and barriers) that times
    the shm peer and the bound."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import pdshm.distributed as pdist
    dist.init_process_group("gloo" if backend == "shm-peer" else backend, rank=rank,
                            world_size=n, timeout=timedelta(seconds=300))
    sizes = job_sizes(quick)
    repeat = 3 if quick else 5
    if backend == "shm-peer":
        figs = peer_figures(rank, n, sizes, repeat)
        if rank == 0:
            out.put(figs)
        dist.barrier()
        dist.destroy_process_group()
        return
    figs = {}
    for name in () if ddp_only else ("all_reduce", "broadcast", "all_gather", "reduce_scatter"):
        for size in sizes:
            number = max(2, min(200, (64 * MIB) // (size * n * 4)))
            fn = collective(name, size, n, None)
            try:
                fn()
            except RuntimeError:  # gloo has no reduce_scatter in torch 1.13
                continue
            figs[(name, size)] = best_s(fn, None, number, repeat)
    if backend == pdist.BACKEND and not ddp_only:  # a view of the segment: reduced in place
        var = pdist.segment_of().root.new_scope(f"bench.{rank}").var("t")
        for size in sizes[1:]:
            var.resize("float32", (size // 4,))
            t = torch.from_dlpack(var)
            t.fill_(1.0)
            number = max(2, min(200, (64 * MIB) // (size * n * 4)))
            figs[("all_reduce in place", size)] = best_s(lambda: dist.all_reduce(t), None,
                                                         number, repeat)
    grad = (8 if quick else 32) * MIB
    for name, seconds in ddp_figures(None, grad, repeat).items():
        figs[(name, grad)] = seconds
    if rank == 0:
        out.put(figs)
    dist.barrier()
    dist.destroy_process_group()


def mpi_job(n, quick):
    """(rank 0's {(collective, size): seconds} of the MPI contender, None),
    or (None, why not)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from mpi_peer import unavailable
    why = unavailable()
    if why:
        return None, why
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_dist_worker.py")
    cmd = ["mpirun", "--oversubscribe", "-np", str(n)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    cmd += [sys.executable, worker, "--repeat", str(3 if quick else 5)]
    cmd += [str(b) for b in job_sizes(quick)]
    env = dict(os.environ)
    for attempt in range(2):
        # the second launch goes without the shared-memory transport's
        # single-copy mechanism (CMA), which a container's ptrace policy may forbid
        if attempt:
            env["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, f"mpirun -np {n}: {e}"
        figs = {}
        for line in done.stdout.splitlines():
            f = line.split()
            if len(f) == 4 and f[0] == "mpi":
                figs[(f[1], int(f[2]))] = float(f[3])
        if done.returncode == 0 and len(figs) == 4 * len(job_sizes(quick)):
            return figs, None
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        why = f"mpirun -np {n} exited {done.returncode}: {last}"
    return None, why


def run_job(backend, n, quick, ddp_only):
    """Runs a job of n ranks on backend; rank 0's figures."""
    if backend == "mpi":
        figs, why = mpi_job(n, quick)
        if figs is None:
            print(f"mpi: n/a ({why})", file=sys.stderr)
        return figs or {}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(rank_main, args=(backend, n, port, quick, ddp_only, out), nprocs=n,
                       start_method="spawn")
    return out.get()


def best_of(runs):
    """{key: the least of the runs' figures}; "ddp comm" recomputed from the
    best step and compute."""
    best = {key: min(r[key] for r in runs) for key in runs[0]}
    for key in best:
        if key[0] == "ddp comm":
            best[key] = best[("ddp step", key[1])] - best[("ddp compute", key[1])]
    return best


def fmt_time(seconds):
    if abs(seconds) >= 0.01:
        return f"{seconds * 1e3:9.1f}ms"
    return f"{seconds * 1e6:9.1f}us"


def fmt_size(b):
    return f"{b // MIB} MiB" if b >= MIB else f"{b // KIB} KiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and rounds")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="jobs of each backend, alternating")
    ap.add_argument("--ddp-only", action="store_true", help="only the DDP step")
    opt = ap.parse_args()
    # reduce_scatter of 64 MiB per rank stages 2 x 64 MiB per rank
    os.environ.setdefault("PDSHM_TORCH_SEGMENT_SIZE", "2G")
    runs = {"pdshm": [], "gloo": []}
    if not opt.ddp_only:
        runs["shm-peer"] = []
        runs["mpi"] = []
    for _ in range(opt.rounds):
        for backend, figs in runs.items():
            figs.append(run_job(backend, opt.procs, opt.quick, opt.ddp_only))
    mine, gloo = best_of(runs["pdshm"]), best_of(runs["gloo"])
    peers = best_of(runs["shm-peer"]) if not opt.ddp_only else {}
    mpi = best_of(runs["mpi"]) if not opt.ddp_only and all(runs["mpi"]) else {}
    print(f"torch.distributed, {opt.procs} processes on {os.cpu_count()} cores "
          f"(torch {torch.__version__}, load average {os.getloadavg()[0]:.1f}); times per call "
          f"or step, best of {opt.rounds} alternating jobs of each backend")
    print(f"{'collective':22} {'size':>7} {'pdshm':>11} {'gloo':>11} {'gloo/pdshm':>10} "
          f"{'mpi':>11} {'mpi/pdshm':>10}")
    for (name, size), p in mine.items():
        m = mpi.get((name, size))
        ms = f"{fmt_time(m)} {m / p:9.2f}x" if m is not None else f"{'':11} {'':10}"
        if name == "all_reduce in place":
            g = mine[("all_reduce", size)]
            note = "  (second column: pdshm on a private tensor)"
        else:
            g = gloo.get((name, size))
            note = "" if g is not None else "  (gloo does not have it)"
        if name == "ddp comm" and p <= 0:
            ratio, note = f"{'':10}", "  (pdshm's reduction hidden by the backward pass)"
        else:
            ratio = f"{g / p:9.2f}x" if g is not None else f"{'':10}"
        gs = fmt_time(g) if g is not None else f"{'n/a':>11}"
        print(f"{name:22} {fmt_size(size):>7} {fmt_time(p)} {gs} {ratio} {ms}{note}")
    if peers:
        print("\nall_reduce, float32 sum of private tensors: pdshm against the shm peer and the "
              "bound (ratios > 1: pdshm is faster)")
        print(f"{'size':>7} {'pdshm':>11} {'shm peer':>11} {'bound':>11} {'peer/pdshm':>10} "
              f"{'bound/pdshm':>11}")
        for (name, size), peer in peers.items():
            if name != "shm peer":
                continue
            p, b = mine[("all_reduce", size)], peers[("bound", size)]
            print(f"{fmt_size(size):>7} {fmt_time(p)} {fmt_time(peer)} {fmt_time(b)} "
                  f"{peer / p:9.2f}x {b / p:10.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
