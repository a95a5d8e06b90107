#!/usr/bin/env python3
"""Data-parallel training of the digits MLP (see train_digits.py) started by
torchrun, which restarts every worker when one fails: the parameters, the
optimizer's state and the step counter live in a named scope of a pdshm
segment kept across the restarts (pdshm.torch.resume), so a restarted job
goes on from the step it reached, with no checkpoint on disk, and ends with
the accuracy of an uninterrupted run.

    PYTHONPATH=$PWD/python /usr/bin/python3 -m torch.distributed.run --standalone \\
        --nproc_per_node=2 --max_restarts=1 --redirects 1 --tee 2 --log_dir /tmp/logs \\
        examples/torchrun_digits.py --kill-at 40

--kill-at STEP: in the first attempt, the last local rank SIGKILLs itself
once it has applied STEP - 1 steps and computed the gradients of STEP (in
the middle of an epoch: 22 steps an epoch); torchrun stops the other worker
and starts both again.  (Debian's torch 1.13 under Python 3.11 needs the
--redirects and --tee above: it cannot parse their defaults.)

Local rank 0 prints "resumed at step N" when the attempt went on from a
kept scope, the test accuracy of every epoch, and at the end "final test
accuracy A" and a CRC of the trained parameters' bytes.
"""
import argparse
import os
import signal
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits import accuracy, batch_rows, load_data, make_model, steps_per_epoch  # noqa: E402

SCOPE = "digits"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64, help="global batch (rows per step)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--kill-at", type=int, default=0, metavar="STEP",
                    help="the last local rank SIGKILLs itself at STEP, in the first attempt")
    ap.add_argument("--segment-size", type=int, default=16 << 20, help="bytes")
    args = ap.parse_args(argv)

    import torch
    import pdshm.torch as pt
    torch.set_num_threads(1)
    rank, size = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if args.batch % size:
        ap.error(f"--batch must be a multiple of the {size} workers")
    x_train, y_train, x_test, y_test = load_data()
    per = steps_per_epoch(len(x_train), args.batch)
    total = per * args.epochs

    model = make_model(torch, args.hidden)
    dp = pt.resume(model, torch.optim.SGD, name=SCOPE, size=args.segment_size, timeout=60.0,
                   lr=args.lr, momentum=0.9)
    if rank == 0 and dp.steps_done:
        print(f"resumed at step {dp.steps_done + 1} (attempt {attempt})", flush=True)
    while dp.steps_done < total:
        step = dp.steps_done + 1
        rows = batch_rows(step, len(x_train), args.batch, size, rank)
        dp.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.from_numpy(x_train[rows])),
                                          torch.from_numpy(y_train[rows])).backward()
        if step == args.kill_at and attempt == 0 and rank == size - 1:
            os.kill(os.getpid(), signal.SIGKILL)
        if dp.step() and rank == 0 and step % per == 0:
            print(f"epoch {step // per}  test accuracy "
                  f"{accuracy(torch, model, x_test, y_test):.4f}", flush=True)
    if rank == 0:
        crc = 0
        for p in model.parameters():
            crc = zlib.crc32(p.detach().numpy().astype(np.float32).tobytes(), crc)
        print(f"final test accuracy {accuracy(torch, model, x_test, y_test):.4f}  "
              f"parameters crc {crc:08x}", flush=True)
    pt.job_done(dp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
