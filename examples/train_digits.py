#!/usr/bin/env python3
"""Data-parallel training of a PyTorch MLP on scikit-learn's digits (8x8 images
of handwritten digits, 1797 samples, 10 classes) by N trainer processes of
this host, with the parameters and the optimizer's state held once in a pdshm
segment (pdshm.torch.DataParallel).

    PYTHONPATH=python python3 examples/train_digits.py --trainers 2
    ... --kill-one       SIGKILL a trainer mid-epoch, start a replacement
    ... --kill K         SIGKILL K trainers at random steps, no replacement:
                         the survivors go on as a smaller group
    ... --plot loss.png  the loss curve (needs matplotlib)

Across hosts (pdshm.mpi over mpi4py): every MPI rank is a trainer, the
trainers of a host share that host's segment, and the gradients are averaged
over the whole job (in the host through the segment, across hosts over MPI):

    PDSHM_MPI_LOCAL_SIZE=2 tests/mpirun.sh -np 4 -x PDSHM_MPI_LOCAL_SIZE \
        -x PYTHONPATH /usr/bin/python3 examples/train_digits.py --mpi digits
    ... --mpi digits --epochs 20   resumes at the step the last run reached
    ... --mpi digits --fresh       starts over

(PDSHM_MPI_LOCAL_SIZE=2: 2 simulated hosts of 2 trainers on one machine;
without it MPI's shared-memory split finds the real hosts.)  The parameters
and the optimizer's state live in the named scope "digits" of each host's
segment, so a run resumes from the segments without a checkpoint file; a
host whose segment is gone is re-seeded from another host.

Every step takes one global batch (--batch rows, the same for any number of
trainers, so the run does not depend on it) and gives each trainer an equal
share; the gradients are averaged through the group, and each trainer
updates its slice of the parameters.  With --kill-one the survivors see
pdshm.PeerDied, the replacement takes the dead trainer's rank, and the step
is redone: training ends with the same accuracy as without the kill.  With
--kill K nobody replaces the dead: after a second the survivors regroup,
deal the shards of the update anew and split the global batch among
themselves (--batch must divide evenly at every size), and training ends
with the loss and accuracy of an uninterrupted run.
"""
import argparse
import multiprocessing
import os
import signal
import sys
import time

import numpy as np

import pdshm

GROUP = "trainers"
SCOPE = "digits"


def load_data(seed=0):
    """(x_train, y_train, x_test, y_test): digits scaled to [0, 1], a fixed 80/20 split."""
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = (x[order] / 16.0).astype(np.float32), y[order].astype(np.int64)
    cut = len(x) * 4 // 5
    return x[:cut], y[:cut], x[cut:], y[cut:]


def make_model(torch, hidden, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 10))


def steps_per_epoch(n_train, batch):
    return n_train // batch


def batch_rows(step, n_train, batch, size, rank):
    """The rows of the training set that `rank` of `size` uses at `step` (from 1):
    epoch e visits a permutation seeded by e, one global batch per step."""
    per = steps_per_epoch(n_train, batch)
    epoch, i = divmod(step - 1, per)
    order = np.random.default_rng(1000 + epoch).permutation(n_train)
    rows = order[i * batch:(i + 1) * batch]
    share = batch // size
    return rows[rank * share:(rank + 1) * share]


def accuracy(torch, model, x, y):
    with torch.no_grad():
        return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def report_epoch(torch, model, epoch, loss, x_test, y_test, started):
    """Prints an epoch's line; returns the time it was printed at."""
    now = time.monotonic()
    print(f"epoch {epoch:3d}  loss {loss:.4f}  "
          f"test accuracy {accuracy(torch, model, x_test, y_test):.4f}  "
          f"{now - started:.3f} s", flush=True)
    return now


def make_optimizer(args):
    """(optimizer class, its settings) for DataParallel: any torch.optim one."""
    import torch
    import pdshm.torch as pt
    if args.optimizer == "adam":
        return pt.Adam, dict(lr=args.lr)  # torch.optim.Adam's result, computed faster
    if args.optimizer == "adamw":
        return torch.optim.AdamW, dict(lr=args.lr, weight_decay=0.01)
    return torch.optim.SGD, dict(lr=args.lr, momentum=0.9)


def trainer(seg_name, rank, args):
    """One trainer process: joins rank `rank` and trains until every step is done."""
    import torch
    import pdshm.torch as pt
    torch.set_num_threads(1)
    x_train, y_train, x_test, y_test = load_data()
    per = steps_per_epoch(len(x_train), args.batch)
    total = per * args.epochs
    with pdshm.attach(seg_name) as seg, pt.join_group(seg, GROUP, args.trainers, rank) as group:
        scope = seg.open(SCOPE)
        model = make_model(torch, args.hidden)
        opt, settings = make_optimizer(args)
        dp = pt.DataParallel(model, scope, group, opt, timeout=120.0,
                             shrink_after=1.0 if args.kill else None, **settings)
        losses = scope["loss"].numpy()  # (steps, trainers): each rank's share of each step
        started = time.monotonic()
        while dp.steps_done < total:
            step = dp.steps_done + 1
            rank = group.rank  # it changes when the group shrinks
            rows = batch_rows(step, len(x_train), args.batch, group.size, rank)
            dp.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x_train[rows])),
                                                     torch.from_numpy(y_train[rows]))
            loss.backward()
            # before the step: a death after the step is applied leaves it written
            losses[step - 1, rank] = loss.item()
            if not dp.step():
                print(f"trainer {rank}: a trainer died during step {step}: redoing it",
                      flush=True)
                continue
            if rank == 0 and step % per == 0:
                # every shard of this step is applied, and no one writes the
                # parameters before rank 0 joins the next reduction
                # the loss of rank 0's shares (the others may not have written theirs yet)
                started = report_epoch(torch, model, step // per, losses[step - per:step, 0].mean(),
                                       x_test, y_test, started)


def segment_bytes(args):
    """Room for the model's parameters and their per-rank gradients and
    staging, the optimizer's state and the loss record, with 8 MiB to spare:
    /dev/shm in a container is often 64 MiB, so ask for what is needed."""
    h = args.hidden
    params = 64 * h + h + h * h + h + 10 * h + 10
    # value, two moments, their working copy (the ranks' slices), a spare; a gradient per rank
    per_param = 4 * (7 + args.trainers)
    return params * per_param + (8 << 20)


def start_trainer(ctx, seg_name, rank, args):
    p = ctx.Process(target=trainer, args=(seg_name, rank, args), name=f"trainer{rank}")
    p.start()
    return p


def kill_one_mid_epoch(ctx, seg_name, procs, args, seg, per):
    """Waits until the last rank is half-way through the middle epoch, SIGKILLs
    it and starts a replacement for its rank.  Returns the new process list."""
    victim = args.trainers - 1
    at = per * (args.epochs // 2) + per // 2
    progress = seg.open(SCOPE).find_var("progress")
    while progress is None or progress.numpy()[victim, 0] < at:
        if not procs[victim].is_alive():
            raise SystemExit("the trainer to kill ended early")
        time.sleep(0.001)
        if progress is None:
            progress = seg.open(SCOPE).find_var("progress")
    os.kill(procs[victim].pid, signal.SIGKILL)
    procs[victim].join()
    print(f"killed trainer {victim} (pid {procs[victim].pid}) at step "
          f"{progress.numpy()[victim, 0] + 1}; starting its replacement", flush=True)
    procs[victim] = start_trainer(ctx, seg_name, victim, args)
    return procs


def current_step(scope):
    """The last step any trainer applied, 0 before the first (the progress
    variable of the current layout generation: see pdshm.torch)."""
    gen = scope.find_local_var("generation")
    g = 0 if gen is None or gen.dtype is None else int(gen.numpy()[0])
    progress = scope.find_local_var("progress" if g == 0 else f"progress.{g}")
    try:
        return 0 if progress is None or progress.dtype is None else int(progress.numpy()[:, 0].max())
    except pdshm.Error:  # erased by a regroup meanwhile: look again
        return 0


def kill_some(procs, args, seg, per):
    """SIGKILLs args.kill trainers, each at a random step before the last
    epoch (seeded by --seed), and starts no replacement."""
    rng = np.random.default_rng(args.seed)
    total = per * args.epochs
    at = sorted(int(s) for s in rng.choice(np.arange(2, total - per), args.kill, replace=False))
    print(f"--kill {args.kill} (seed {args.seed}): at steps {at}", flush=True)
    scope = seg.open(SCOPE)
    killed = []
    for step in at:
        while current_step(scope) < step:
            if not any(p.is_alive() for p in procs):
                raise SystemExit("the trainers ended early")
            time.sleep(0.001)
        victim = procs[int(rng.choice([i for i, p in enumerate(procs) if i not in killed]))]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join()
        killed.append(procs.index(victim))
        print(f"killed {victim.name} (pid {victim.pid}) after step {current_step(scope)}; "
              "no replacement", flush=True)
    return killed


def plot(losses, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot: matplotlib is not installed; no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(np.arange(1, len(losses) + 1), losses)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (cross entropy)")
    ax.set_yscale("log")
    ax.set_title("digits MLP, data-parallel over pdshm")
    fig.tight_layout()
    fig.savefig(path)
    print(f"loss curve written to {path}")


def mpi_main(args):
    """The --mpi run: this MPI rank is one trainer of the job (see above)."""
    import torch
    import pdshm.mpi
    import pdshm.torch as pt
    from mpi4py import MPI
    torch.set_num_threads(1)
    world, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    if args.batch % size:
        raise SystemExit(f"the job's {size} processes must divide --batch {args.batch}")
    x_train, y_train, x_test, y_test = load_data()
    per = steps_per_epoch(len(x_train), args.batch)
    total = per * args.epochs
    with pdshm.mpi.Job(args.mpi, size=segment_bytes(args)) as job:
        if args.fresh and job.local_rank == 0:
            try:
                job.segment.root.unlink(SCOPE)
            except pdshm.NotFound:
                pass
        job.local_comm.Barrier()
        scope, had = job.host_scope(SCOPE)
        # the lowest host with a previous run's state re-seeds every host's copy
        source = job.first_host(had and scope.find_local_var("progress") is not None)
        if source is not None:
            if not had and job.local_rank == 0:
                print(f"host {job.host}: no state in its segment; re-seeded from host {source}",
                      flush=True)
            job.bcast_scope(scope, root_host=source, timeout=60)
        model = make_model(torch, args.hidden)
        opt, settings = make_optimizer(args)
        dp = pt.DataParallel(model, scope, job, opt, timeout=120.0, **settings)
        if world == 0:
            print(f"digits over MPI: {job.hosts} hosts x {job.local_size} trainers, global batch "
                  f"{args.batch}, {per} steps per epoch; "
                  + (f"resumed at step {dp.steps_done}" if dp.steps_done else "fresh start"),
                  flush=True)
        started, losses = time.monotonic(), []
        while dp.steps_done < total:
            step = dp.steps_done + 1
            rows = batch_rows(step, len(x_train), args.batch, size, world)
            dp.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x_train[rows])),
                                                     torch.from_numpy(y_train[rows]))
            loss.backward()
            if not dp.step():
                continue
            losses.append(loss.item())
            if world == 0 and step % per == 0:
                started = report_epoch(torch, model, step // per, np.mean(losses[-per:]),
                                       x_test, y_test, started)
        if world == 0:
            print(f"final test accuracy {accuracy(torch, model, x_test, y_test):.4f}  "
                  f"({job.bytes_sent / max(1, len(losses)) / 1024:.1f} KiB a step over MPI "
                  f"from this process)", flush=True)
        del dp, model  # the views of the segment go before the detach


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64, help="global batch (rows per step)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default="sgd")
    ap.add_argument("--lr", type=float, default=None, help="default 0.05 (sgd), 0.002 (adam)")
    ap.add_argument("--kill-one", action="store_true",
                    help="SIGKILL the last trainer mid-epoch and start a replacement")
    ap.add_argument("--kill", type=int, default=0, metavar="K",
                    help="SIGKILL K trainers at random steps, start no replacement")
    ap.add_argument("--seed", type=int, default=None, help="--kill: the seed of the steps")
    ap.add_argument("--plot", metavar="FILE", help="write the loss curve as a PNG")
    ap.add_argument("--mpi", metavar="PREFIX",
                    help="run as one MPI rank of a job across hosts (under mpirun); host h's "
                         "segment is PREFIX.h<h>, kept for a restart")
    ap.add_argument("--fresh", action="store_true", help="--mpi: start over, not resume")
    args = ap.parse_args(argv)
    if args.lr is None:
        args.lr = 0.05 if args.optimizer == "sgd" else 0.002
    if args.trainers < 1 or args.batch % args.trainers:
        ap.error("--trainers must be >= 1 and divide --batch")
    if args.kill_one and args.trainers < 2:
        ap.error("--kill-one needs at least 2 trainers")
    if args.kill and (args.kill_one or not 0 < args.kill < args.trainers):
        ap.error("--kill K needs 0 < K < --trainers, and not --kill-one")
    if any(args.batch % n for n in range(args.trainers - args.kill, args.trainers + 1)):
        ap.error(f"--batch must divide evenly among {args.trainers - args.kill} to "
                 f"{args.trainers} trainers")
    if args.kill and args.epochs < 2:
        ap.error("--kill needs at least 2 epochs (the kills come before the last)")
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "little")
    if args.mpi:
        if args.kill_one or args.kill or args.plot:
            ap.error("--mpi runs without --kill-one, --kill and --plot")
        return mpi_main(args)

    import torch
    import pdshm.torch as pt
    x_train, y_train, x_test, y_test = load_data()
    per = steps_per_epoch(len(x_train), args.batch)
    print(f"digits: {len(x_train)} training and {len(x_test)} test samples; {args.trainers} "
          f"trainers, global batch {args.batch}, {per} steps per epoch, {args.optimizer}")
    seg_name = f"digits-{os.getpid()}"
    ctx = multiprocessing.get_context("spawn")
    with pdshm.create(seg_name, size=segment_bytes(args)) as seg:
        try:
            scope = seg.root.new_scope(SCOPE)
            scope.var("loss").assign(np.full((per * args.epochs, args.trainers), np.nan,
                                             np.float32))
            start = time.monotonic()
            procs = [start_trainer(ctx, seg_name, r, args) for r in range(args.trainers)]
            killed = []
            if args.kill_one:
                procs = kill_one_mid_epoch(ctx, seg_name, procs, args, seg, per)
            if args.kill:
                killed = kill_some(procs, args, seg, per)
            for p in procs:
                p.join()
            failed = [p.name for i, p in enumerate(procs) if p.exitcode != 0 and i not in killed]
            if failed:
                raise SystemExit(f"trainers failed: {failed}")
            elapsed = time.monotonic() - start
            model = make_model(torch, args.hidden)
            pt.share_parameters(model, scope)  # the trained parameters, from the segment
            # the shares of the group's final size (the kills came before the last epoch)
            losses = scope["loss"].numpy()[:, :args.trainers - args.kill].mean(axis=1)
            missing = int(np.isnan(losses).sum())
            if missing:
                print(f"{missing} steps have no recorded loss")
            print(f"final test accuracy {accuracy(torch, model, x_test, y_test):.4f}  "
                  f"final loss {losses[-per:].mean():.4f}  "
                  f"({elapsed:.2f} s with process start)")
            if args.plot:
                plot(losses, args.plot)
        finally:
            pdshm.unlink(seg_name)


if __name__ == "__main__":
    main()
