"""grow_train.py [--quick] - pdshm.torch training with no segment size given.

Two trainer processes (spawn) train an MLP of 3 x 1024x1024 (3.1 M float32
parameters; with their gradients, Adam's moments and DataParallel's own
buffers many times the few MiB a segment made without a size starts with)
through pdshm.torch.DataParallel, first in a segment created with no size
(it grows as the trainers put their state in it), then in one created
fixed at the size the first run ended with.  Prints the milliseconds per
step of each (the slower rank's, from the second step on), the segment's
size at create and at the end, and its growths.
"""
import argparse
import multiprocessing
import os
import time

import pdshm

WIDTH = 1024
LAYERS = 3
RANKS = 2


def model_of(torch):
    torch.manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers)


def trainer(seg_name, rank, steps, out):
    import torch
    import pdshm.torch as pt
    torch.set_num_threads(1)
    with pdshm.attach(seg_name) as seg:
        with pt.join_group(seg, "dp", RANKS, rank) as group:
            model = model_of(torch)
            dp = pt.DataParallel(model, seg.open("run"), group, torch.optim.Adam, lr=1e-3,
                                 timeout=60.0)
            g = torch.Generator().manual_seed(rank)
            x = torch.randn(32, WIDTH, generator=g)
            t0 = None
            while dp.steps_done < steps:
                if dp.steps_done == 1:
                    t0 = time.perf_counter()  # the first step puts the state in place
                dp.zero_grad()
                model(x).square().mean().backward()
                dp.step()
            out.put((rank, (time.perf_counter() - t0) / (steps - 1)))


def run(label, tag, steps, **create):
    name = f"grow_train-{os.getpid()}-{tag}"
    ctx = multiprocessing.get_context("spawn")
    with pdshm.create(name, **create) as seg:
        first = seg.info().size
        seg.root.new_scope("run").release()
        out = ctx.Queue()
        kids = [ctx.Process(target=trainer, args=(name, r, steps, out)) for r in range(RANKS)]
        for k in kids:
            k.start()
        per_step = max(out.get(timeout=600)[1] for _ in kids)
        for k in kids:
            k.join(60)
        info = seg.info()
        print(f"{label:<28} {per_step * 1e3:9.1f} ms/step   size {first >> 20} MiB at create, "
              f"{info.size >> 20} MiB at the end, {info.growths} growths")
        size = info.size
    pdshm.unlink(name)
    return size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    steps = 6 if ap.parse_args().quick else 20
    print(f"pdshm.torch.DataParallel, {RANKS} ranks, an MLP of {LAYERS} x {WIDTH}x{WIDTH}, Adam, "
          f"{steps} steps")
    end = run("no size given (grows)", "grows", steps)
    run("fixed at that size", "fixed", steps, size=end, max_size=end)


if __name__ == "__main__":
    main()
