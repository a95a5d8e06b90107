#!/usr/bin/env python3
"""Parameters shared by trainer processes through one pdshm segment.

The coordinator creates a segment, fills the named scope "params" with a
weight matrix W and a bias b (labelled "parameter"), and starts trainer
processes (multiprocessing, spawn).  Each trainer attaches the segment by
name, opens "params" by path and, for each step, makes a local scope of its
own, finds W and b up the scope chain and reads them in place: with numpy
(np.asarray: no copy) and, when torch is installed, with torch
(torch.from_dlpack: no copy either).  It checks what it read, adds its rank
to b under b's exclusive lock (so that everybody sees everybody's writes),
and leaves its checksum in its own variable of the named scope "results".
The coordinator then checks b and every trainer's result.

usage: examples/params.py [--trainers N] [--steps N]      (exit 0: all agreed)
"""
import argparse
import multiprocessing
import os
import sys

import numpy as np

import pdshm

ROWS, COLS = 512, 256


def expected_w():
    w = np.arange(ROWS * COLS, dtype=np.float64) / (ROWS * COLS)
    return w.astype(np.float32).reshape(ROWS, COLS)


def trainer(seg_name, rank, steps):
    try:
        import torch
    except ImportError:
        torch = None
    with pdshm.attach(seg_name) as seg:
        params = seg.open("params")
        results = seg.open("results")
        want = float(expected_w().sum(dtype=np.float64))
        for _ in range(steps):
            with params.local() as step:          # this step's scope, gone at exit
                w = step.find_var("W")            # found in params, up the chain
                got = np.asarray(w)               # aliases the segment: no copy
                if got.shape != (ROWS, COLS) or got.dtype != np.float32:
                    raise SystemExit(f"trainer {rank}: W is {got.dtype}{got.shape}")
                total = float(got.sum(dtype=np.float64))
                if torch is not None:
                    t = torch.from_dlpack(w)      # the same bytes, as a tensor
                    if float(t.double().sum()) != total:
                        raise SystemExit(f"trainer {rank}: torch and numpy disagree")
                    del t
                del got
                if abs(total - want) > 1e-6 * abs(want):
                    raise SystemExit(f"trainer {rank}: sum(W) = {total}, not {want}")
        b = params.find_var("b")
        with b.lock(exclusive=True):
            view = np.asarray(b)
            view += rank
            del view
        mine = results.create_var(f"trainer{rank}")
        mine.assign(np.array([total], dtype=np.float64))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trainers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    opt = ap.parse_args()
    name = f"params-example-{os.getpid()}"
    with pdshm.create(name, size=16 << 20) as seg:
        try:
            params = seg.root.new_scope("params")
            w = params.create_var("W")
            w.assign(expected_w())
            w.label = "parameter"
            b = params.create_var("b")
            b.assign(np.zeros(COLS, dtype=np.float32))
            b.label = "parameter"
            seg.root.new_scope("results")

            ctx = multiprocessing.get_context("spawn")
            procs = [ctx.Process(target=trainer, args=(name, r, opt.steps))
                     for r in range(opt.trainers)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
            failed = [r for r, p in enumerate(procs) if p.exitcode != 0]
            if failed:
                sys.exit(f"params: trainers {failed} failed")

            want_b = sum(range(opt.trainers))
            got_b = np.asarray(b)
            if not (got_b == want_b).all():
                sys.exit(f"params: b is {got_b[:4]}..., not {want_b} everywhere")
            results = seg.open("results")
            want = float(expected_w().sum(dtype=np.float64))
            for r in range(opt.trainers):
                got = float(np.asarray(results.find_var(f"trainer{r}"))[0])
                if abs(got - want) > 1e-6 * abs(want):
                    sys.exit(f"params: trainer {r} read sum(W) = {got}, not {want}")
            print(f"params: {opt.trainers} trainers x {opt.steps} steps read W "
                  f"({ROWS}x{COLS} float32) in place; b = {want_b} everywhere")
        finally:
            pdshm.unlink(name)


if __name__ == "__main__":
    main()
