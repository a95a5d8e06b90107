"""A step's tensors: a new local scope, 10 variables of 4 KiB, release.

The pdshm figure: `with params.local() as s:` and, in it, 10 times
s.var(name).resize("float32", (1024,)); the scope's release at the end of
the with frees the variables and their buffers.  Against numpy: 10
np.empty(1024, float32) in a list, dropped.  Both in ns per step, best of
several runs.
"""
import numpy as np

from timing import best_ns_per_call

NAMES = tuple(f"t{i}" for i in range(10))

PDSHM_STEP = """
with loc() as s:
    for n in names:
        s.var(n).resize("float32", (1024,))
"""
NUMPY_STEP = """
ts = [empty(1024, f32) for n in names]
del ts
"""


def run(table, quick, seg_prefix):
    import pdshm
    number, repeat = (2000, 5) if quick else (20000, 7)
    name = f"{seg_prefix}-step"
    section = "a step's tensors: local scope + 10 x 4 KiB + release (ns per step, best of %d x %d)" \
        % (repeat, number)
    seg = pdshm.create(name, size=16 << 20)
    try:
        params = seg.root.new_scope("params")
        env = {"loc": params.local, "names": NAMES}
        ours = best_ns_per_call(PDSHM_STEP, env, number, repeat)
        if seg.stats().vars != 0:
            raise RuntimeError("the step's variables outlived their scope")
    finally:
        seg.detach()
        pdshm.unlink(name)
    env = {"empty": np.empty, "f32": np.float32, "names": NAMES}
    theirs = best_ns_per_call(NUMPY_STEP, env, number, repeat)
    table.add(section, "pdshm", ours, "ns", f"{ours / theirs:.1f}x numpy")
    table.add(section, "numpy np.empty", theirs, "ns")
    return {"step_vs_numpy": ours / theirs}
