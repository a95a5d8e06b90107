#!/usr/bin/env python3
"""Data-parallel training of a PyTorch MLP on scikit-learn's digits (8x8 images
of handwritten digits, 1797 samples, 10 classes) by N trainer processes of
this host, with the parameters and the optimizer's state held once in a pdshm
segment (pdshm.torch.DataParallel).

    PYTHONPATH=python python3 examples/train_digits.py --trainers 2
    ... --kill-one       SIGKILL a trainer mid-epoch, start a replacement
    ... --kill K         SIGKILL K trainers at random steps, no replacement:
                         the survivors go on as a smaller group
    ... --churn N        N random events: a trainer SIGKILLed (replaced or
                         not) or a new trainer enlisted; then the same
                         training uninterrupted in one process, compared
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
trainers, so the run does not depend on it) and gives each trainer its
share (rows [batch*r/n, batch*(r+1)/n) for rank r of n, its summed loss
weighted by n/batch, so that the group's mean gradient is the global
batch's); the gradients are averaged through the group, and each trainer
updates its slice of the parameters.  With --kill-one the survivors see
pdshm.PeerDied, the replacement takes the dead trainer's rank, and the step
is redone: training ends with the same accuracy as without the kill.  With
--kill K nobody replaces the dead: after a second the survivors regroup,
deal the shards of the update anew and split the global batch among
themselves, and training ends with the loss and accuracy of an
uninterrupted run.  With --churn N (seeded by --seed, printed) trainers
come and go throughout: a trainer SIGKILLed and replaced (a process that
joins its rank; when the survivors have regrouped already, it enlists
instead), one SIGKILLed with no replacement, or a newcomer (enlisted,
taken in when the members regroup, every quarter epoch); at the end the
same training runs uninterrupted in this process, and the two runs' loss,
accuracy and largest parameter difference are printed.
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
    epoch e visits a permutation seeded by e, one global batch per step, of
    which rank takes [batch*rank/size, batch*(rank+1)/size)."""
    per = steps_per_epoch(n_train, batch)
    epoch, i = divmod(step - 1, per)
    order = np.random.default_rng(1000 + epoch).permutation(n_train)
    rows = order[i * batch:(i + 1) * batch]
    return rows[batch * rank // size:batch * (rank + 1) // size]


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


def join(seg, args, order):
    """The group of a trainer started with `order`: ("member", rank), to
    join that rank of --trainers; ("replace", rank, size), to take the rank
    of a dead trainer over (it enlists when the group has regrouped
    since); ("enlist",).  Returns (group, whether enlisted)."""
    import pdshm.torch as pt
    if order[0] == "member":
        return pt.join_group(seg, GROUP, args.trainers, order[1]), False
    if order[0] == "replace":
        try:
            return pt.join_group(seg, GROUP, order[2], order[1], patience=2.0), False
        except pdshm.Error as e:  # EINVAL: regrouped meanwhile; EBUSY: regrouping
            if e.code not in (pdshm._pdshm.EINVAL, pdshm._pdshm.EBUSY):
                raise
            print(f"replacement for rank {order[1]} of {order[2]}: the group has regrouped; "
                  "enlisting", flush=True)
    return seg.enlist(GROUP, timeout=120.0), True


def trainer(seg_name, order, args, conn=None):
    """One trainer process: joins the group as `order` says (see join())
    and trains until every step is done.  With conn (a spare of --churn):
    says it is ready, then waits for its order there (None: quit)."""
    import torch
    import pdshm.torch as pt
    torch.set_num_threads(1)
    x_train, y_train, x_test, y_test = load_data()
    per = steps_per_epoch(len(x_train), args.batch)
    total = per * args.epochs
    if conn is not None:
        conn.send("ready")
        order = conn.recv()
        if order is None:
            return
    with pdshm.attach(seg_name) as seg:
        group, enlisted = join(seg, args, order)
        with group:
            train(torch, pt, seg, group, enlisted, args, x_train, y_train, x_test, y_test,
                  per, total)


def train(torch, pt, seg, group, enlisted, args, x_train, y_train, x_test, y_test, per, total):
    scope = seg.open(SCOPE)
    model = make_model(torch, args.hidden)
    opt, settings = make_optimizer(args)
    elastic = bool(args.kill or args.churn)
    dp = pt.DataParallel(model, scope, group, opt, timeout=120.0,
                         shrink_after=(3.0 if args.churn else 1.0) if elastic else None,
                         newcomer=enlisted, **settings)
    if args.churn:
        print(f"pid {os.getpid()}: {'enlisted' if enlisted else 'joined'}, rank {group.rank} "
              f"of {group.size}, at step {dp.steps_done}", flush=True)
    losses = scope["loss"].numpy()  # (steps, ranks): each rank's summed loss of each step
    sizes = scope["size"].numpy()   # (steps,): the group's size at each step
    pids = scope["pid"].numpy()     # (ranks,): the process at each rank, for --churn
    every = max(1, per // 4)        # the members regroup (admit newcomers) that often
    started = time.monotonic()
    while dp.steps_done < total:
        s = dp.steps_done  # not at 0: the ranks not joined yet would be dropped
        if args.churn and s and s % every == 0 and dp.regrouped_at < s:
            dp.regroup()
        step = dp.steps_done + 1
        rank = group.rank  # it changes when the group shrinks or grows
        pids[rank] = os.getpid()
        rows = batch_rows(step, len(x_train), args.batch, group.size, rank)
        dp.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x_train[rows])),
                                                 torch.from_numpy(y_train[rows]),
                                                 reduction="sum")
        (loss * (group.size / args.batch)).backward()
        # before the step: a death after the step is applied leaves it written
        losses[step - 1, rank] = loss.item()
        if rank == 0:
            sizes[step - 1] = group.size
        if not dp.step():
            print(f"trainer {rank}: a trainer died during step {step}: redoing it",
                  flush=True)
            continue
        if rank == 0 and step % per == 0:
            # every shard of this step is applied, and no one writes the
            # parameters before rank 0 joins the next reduction
            # the loss of rank 0's shares (the others may not have written theirs yet)
            mine = losses[step - per:step, 0].sum() / sum(len(batch_rows(
                t, len(x_train), args.batch, int(sizes[t - 1]), 0))
                for t in range(step - per + 1, step + 1))
            started = report_epoch(torch, model, step // per, mine, x_test, y_test, started)
    del dp


def segment_bytes(args):
    """Room for the model's parameters and their per-rank gradients and
    staging, the optimizer's state and the loss record, with 8 MiB to spare:
    /dev/shm in a container is often 64 MiB, so ask for what is needed."""
    h = args.hidden
    params = 64 * h + h + h * h + h + 10 * h + 10
    # value, two moments, their working copy (the ranks' slices), a spare; a gradient per rank
    per_param = 4 * (7 + max_ranks(args))
    return params * per_param + (8 << 20)


def max_ranks(args):
    """The most trainers the group can have (--churn's newcomers come on top)."""
    return args.trainers + args.churn


def start_trainer(ctx, seg_name, order, args, conn=None, name=None):
    p = ctx.Process(target=trainer, args=(seg_name, order, args, conn),
                    name=name or f"trainer{order[1]}")
    p.start()
    return p


def kill_one_mid_epoch(ctx, seg_name, procs, args, seg, per):
    """Waits until the last rank is half-way through the middle epoch, SIGKILLs
    it and starts a replacement for its rank.  Returns the new process list."""
    victim = args.trainers - 1
    at = per * (args.epochs // 2) + per // 2
    progress = seg.open(SCOPE).find_var("progress")
    # The trainers create the variable first and give it its tensor after.
    while (progress is None or progress.dtype is None
           or progress.numpy()[victim, 0] < at):
        if not procs[victim].is_alive():
            raise SystemExit("the trainer to kill ended early")
        time.sleep(0.001)
        if progress is None:
            progress = seg.open(SCOPE).find_var("progress")
    os.kill(procs[victim].pid, signal.SIGKILL)
    procs[victim].join()
    print(f"killed trainer {victim} (pid {procs[victim].pid}) at step "
          f"{progress.numpy()[victim, 0] + 1}; starting its replacement", flush=True)
    procs[victim] = start_trainer(ctx, seg_name, ("member", victim), args)
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


def start_spares(ctx, seg_name, args, n):
    """n trainers started ahead of --churn's events (torch imported, data
    loaded, so that a replacement joins within milliseconds), each waiting
    for its order on a pipe: [(process, our end)]."""
    spares = []
    for i in range(n):
        ours, theirs = ctx.Pipe()
        spares.append((start_trainer(ctx, seg_name, None, args, theirs, f"spare{i}"), ours))
    for _, conn in spares:
        if conn.recv() != "ready":
            raise SystemExit("a spare trainer failed to start")
    return spares


def churn(procs, spares, args, seg, per):
    """--churn: at args.churn random steps before the last epoch (seeded by
    --seed), SIGKILLs a random trainer and starts a replacement for its
    rank (or not), or starts a newcomer; at least one trainer is left, at
    most max_ranks(args) run.  Returns the processes killed."""
    rng = np.random.default_rng(args.seed)
    total = per * args.epochs
    at = sorted(int(s) for s in rng.choice(np.arange(2, total - per), args.churn, replace=False))
    print(f"--churn {args.churn} (seed {args.seed}): events after steps {at}", flush=True)
    scope = seg.open(SCOPE)
    pids = scope["pid"].numpy()
    live, killed = list(procs), []
    for step in at:
        while current_step(scope) < step:
            if not any(p.is_alive() for p in live):
                raise SystemExit("the trainers ended early")
            time.sleep(0.001)
        event = rng.choice(["replace", "kill", "add"])
        if len(live) < 2 and event != "add":
            event = "add"
        if len(live) >= max_ranks(args) and event == "add":
            event = "replace"
        now = current_step(scope)
        if event == "add":
            proc, conn = spares.pop()
            conn.send(("enlist",))
            live.append(proc)
            print(f"after step {now}: newcomer {proc.name} (pid {proc.pid}) enlists", flush=True)
            continue
        victim = live[int(rng.integers(len(live)))]
        if not victim.is_alive():
            raise SystemExit(f"{victim.name} ended early (exit code {victim.exitcode})")
        sizes = scope["size"].numpy()
        size = int(sizes[now]) or int(sizes[max(0, now - 1)])  # of the step in progress
        held = [r for r in range(size) if pids[r] == victim.pid]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join()
        live.remove(victim)
        killed.append(victim)
        print(f"after step {now}: killed {victim.name} (pid {victim.pid}, rank "
              f"{held[0] if held else '?'} of {size})"
              + ("; no replacement" if event == "kill" else "; starting its replacement"),
              flush=True)
        if event == "replace":  # a rank not known (a regroup meanwhile): it enlists
            proc, conn = spares.pop()
            conn.send(("replace", held[0], size) if len(held) == 1 else ("enlist",))
            live.append(proc)
    for proc, conn in spares:
        conn.send(None)
    return live, killed


def uninterrupted(torch, args, x_train, y_train, per):
    """The same training in this process, the whole global batch at once:
    (model, mean loss of the last epoch)."""
    model = make_model(torch, args.hidden)
    opt_class, settings = make_optimizer(args)
    opt = opt_class(model.parameters(), **settings)
    losses = []
    for step in range(1, per * args.epochs + 1):
        rows = batch_rows(step, len(x_train), args.batch, 1, 0)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x_train[rows])),
                                                 torch.from_numpy(y_train[rows]))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, float(np.mean(losses[-per:]))


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
    ap.add_argument("--churn", type=int, default=0, metavar="N",
                    help="N random events: a trainer killed (replaced or not) or added")
    ap.add_argument("--seed", type=int, default=None,
                    help="--kill, --churn: the seed of the events")
    ap.add_argument("--plot", metavar="FILE", help="write the loss curve as a PNG")
    ap.add_argument("--mpi", metavar="PREFIX",
                    help="run as one MPI rank of a job across hosts (under mpirun); host h's "
                         "segment is PREFIX.h<h>, kept for a restart")
    ap.add_argument("--fresh", action="store_true", help="--mpi: start over, not resume")
    args = ap.parse_args(argv)
    if args.lr is None:
        args.lr = 0.05 if args.optimizer == "sgd" else 0.002
    if args.trainers < 1 or args.batch < args.trainers + args.churn:
        ap.error("--trainers must be >= 1, and --batch at least the most trainers there can be")
    if args.kill_one and args.trainers < 2:
        ap.error("--kill-one needs at least 2 trainers")
    if args.kill and (args.kill_one or not 0 < args.kill < args.trainers):
        ap.error("--kill K needs 0 < K < --trainers, and not --kill-one")
    if args.churn and (args.churn < 0 or args.kill or args.kill_one):
        ap.error("--churn N needs N >= 0, and neither --kill nor --kill-one")
    if (args.kill or args.churn) and args.epochs < 2:
        ap.error("--kill and --churn need at least 2 epochs (the events come before the last)")
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "little")
    if args.mpi:
        if args.kill_one or args.kill or args.churn or args.plot:
            ap.error("--mpi runs without --kill-one, --kill, --churn and --plot")
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
            total = per * args.epochs
            scope.var("loss").assign(np.full((total, max_ranks(args)), np.nan, np.float32))
            scope.var("size").assign(np.zeros(total + 1, np.int64))
            scope.var("pid").assign(np.zeros(max_ranks(args), np.int64))
            spares = start_spares(ctx, seg_name, args, args.churn)
            start = time.monotonic()
            procs = [start_trainer(ctx, seg_name, ("member", r), args)
                     for r in range(args.trainers)]
            killed = []
            if args.kill_one:
                procs = kill_one_mid_epoch(ctx, seg_name, procs, args, seg, per)
            if args.kill:
                killed = [procs[i] for i in kill_some(procs, args, seg, per)]
            if args.churn:
                procs, killed = churn(procs, spares, args, seg, per)
            for p, _ in spares:
                p.join()
            for p in procs:
                p.join()
            failed = [p.name for p in procs if p.exitcode != 0 and p not in killed]
            if failed:
                raise SystemExit(f"trainers failed: {failed}")
            elapsed = time.monotonic() - start
            model = make_model(torch, args.hidden)
            pt.share_parameters(model, scope)  # the trained parameters, from the segment
            # each step's loss: the sum of the shares of the group's size at that step
            sizes, record = scope["size"].numpy()[:total], scope["loss"].numpy()
            losses = np.array([record[s, :n].sum() for s, n in enumerate(sizes)]) / args.batch
            missing = int(np.isnan(losses).sum())
            if missing:
                print(f"{missing} steps have no recorded loss")
            print(f"final test accuracy {accuracy(torch, model, x_test, y_test):.4f}  "
                  f"final loss {losses[-per:].mean():.4f}  "
                  f"({elapsed:.2f} s with process start)")
            if args.churn:
                calm, calm_loss = uninterrupted(torch, args, x_train, y_train, per)
                diff = max(float((a - b).abs().max()) for a, b in
                           zip(model.parameters(), calm.parameters()))
                print(f"uninterrupted: test accuracy {accuracy(torch, calm, x_test, y_test):.4f}"
                      f"  final loss {calm_loss:.4f}  largest parameter difference {diff:.3g}")
            if args.plot:
                plot(losses, args.plot)
        finally:
            pdshm.unlink(seg_name)


if __name__ == "__main__":
    main()
