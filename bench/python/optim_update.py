#!/usr/bin/env python3
"""One rank's update through pdshm.torch.DataParallel, by optimizer.

A group of one over the digits MLP (examples/train_digits.py's, hidden 64
and 512): the time of DataParallel._apply, the part of a step that depends
on the optimizer (its step in the working copy, the state moved and the rest
pickled, the commit into place), in us per update, best of several runs.
pdshm.torch.Adam against torch.optim.Adam (and with foreach=True), and
torch.optim.SGD for scale: pdshm.torch.Adam exists because it is faster.

    PYTHONPATH=python /usr/bin/python3 bench/python/optim_update.py [--quick]
"""
import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import Table  # noqa: E402


def optimizers(torch, pt):
    return [("pdshm.torch.Adam", pt.Adam, dict(lr=1e-3)),
            ("torch.optim.Adam", torch.optim.Adam, dict(lr=1e-3)),
            ("torch.optim.Adam(foreach=True)", torch.optim.Adam, dict(lr=1e-3, foreach=True)),
            ("torch.optim.SGD(momentum=0.9)", torch.optim.SGD, dict(lr=1e-2, momentum=0.9))]


def us_per_update(seg, torch, pt, hidden, opt, kw, updates):
    name = seg.unique_name("optim")
    scope = seg.root.new_scope(name)
    with seg.group(name, 1) as g:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(),
                                    torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                    torch.nn.Linear(hidden, 10))
        dp = pt.DataParallel(model, scope, g, opt, **kw)
        for p in model.parameters():
            p.grad.normal_()
        for _ in range(3):
            dp._apply(dp.steps_done + 1)
        t0 = time.perf_counter()
        for _ in range(updates):
            dp._apply(dp.steps_done + 1)
        us = (time.perf_counter() - t0) / updates * 1e6
        del dp, model, p
    gc.collect()
    del scope
    seg.root.unlink(name)
    return us


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    import torch
    import pdshm
    import pdshm.torch as pt
    torch.set_num_threads(1)
    repeat = 3 if args.quick else 7
    table = Table()
    name = f"optim-update-{os.getpid()}"
    seg = pdshm.create(name, size=64 << 20)
    try:
        for hidden, updates in ((64, 100 if args.quick else 400), (512, 20 if args.quick else 100)):
            n = 64 * hidden + hidden + hidden * hidden + hidden + 10 * hidden + 10
            section = f"an update of {n} parameters (hidden {hidden}): us, best of {repeat}"
            best = {}
            for _ in range(repeat):  # interleaved, so that a busy spell hits all alike
                for what, opt, kw in optimizers(torch, pt):
                    us = us_per_update(seg, torch, pt, hidden, opt, kw, updates)
                    best[what] = min(best.get(what, us), us)
            base = best["torch.optim.Adam"]
            for what, us in best.items():
                table.add(section, what, us, "us", f"x{base / us:.2f} of torch.optim.Adam's speed")
        table.print(sys.stdout)
    finally:
        seg.detach()
        pdshm.unlink(name)


if __name__ == "__main__":
    main()
