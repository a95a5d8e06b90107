"""What a call into pdshm costs from Python, against a dict and against C.

A scope "params" holds 100 variables; the lookups are made from a local
scope below it, so that find_var goes one parent up (as a trainer's step
does), the figure pdshm-bench reports for C as "lookup hit, parent depth 1"
(100 names).  The dict holds the same 100 names.  Each figure is the best,
in ns per call, of several timeit runs (the loop's few ns included, the same
in every row).  Rows:

  dict d["W"]            subscript: a bytecode, no call
  dict d.get("W")        a call of a bound method with one str: the shape of find_var
  Python scope chain     a scope written in Python (a dict and a parent), its
                         find_var one parent up: what a process-local scope
                         costs in Python
  find_var("W")          pdshm, one parent up (a Var, a weak handle)
  var("W")               get-or-create, a hit in the scope itself
  local()                a new anonymous child scope and its release (with)
  numpy()                a view of a 4 KiB tensor (and its release)
  np.asarray(private)    a view of a private 4 KiB array: numpy's own cost
"""
import json
import subprocess

import numpy as np

from timing import best_ns_per_call

NAMES = [f"var{i:03d}" for i in range(99)] + ["W"]


class PyScope:
    """A process-local scope in plain Python: variables in a dict, a parent."""

    def __init__(self, parent=None):
        self.vars = {}
        self.parent = parent

    def find_var(self, name):
        s = self
        while s is not None:
            v = s.vars.get(name)
            if v is not None:
                return v
            s = s.parent
        return None


def c_lookup_ns(pdshm_bench):
    """pdshm-bench's C figure for the same lookup, or None (with the reason)."""
    if not pdshm_bench:
        return None, "no pdshm-bench given (--pdshm-bench)"
    try:
        out = subprocess.run([pdshm_bench, "--quick", "--only", "names", "--json"],
                             check=True, capture_output=True, text=True, timeout=600).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"pdshm-bench failed: {e}"
    for r in json.loads(out)["results"]:
        if (r["scenario"], r["param"], r["subject"]) == \
                ("lookup hit, parent depth 1", "100", "pdshm"):
            return r["value"], "pdshm-bench, the C call"
    return None, "pdshm-bench reported no 'lookup hit, parent depth 1' for 100 names"


def run(table, quick, seg_prefix, pdshm_bench=None):
    """Adds the rows; returns {'find_var_vs_dict': ratio to d.get, ...}."""
    import pdshm
    number, repeat = (20000, 5) if quick else (200000, 7)
    name = f"{seg_prefix}-calls"
    section = "per-call cost from Python (ns per call, best of %d x %d)" % (repeat, number)
    seg = pdshm.create(name, size=16 << 20)
    try:
        params = seg.root.new_scope("params")
        for n in NAMES:
            params.create_var(n).assign(np.zeros(1024, np.float32))
        d = {n: object() for n in NAMES}
        py_params = PyScope()
        py_params.vars.update(d)
        py_step = PyScope(py_params)
        with params.local() as step:
            env = {"d": d, "get": d.get, "fv": step.find_var, "var": params.var,
                   "loc": params.local, "v": params.find_var("W"), "np": np,
                   "priv": np.zeros(1024, np.float32), "pyfv": py_step.find_var}
            t = {
                "subscript": best_ns_per_call('d["W"]', env, number, repeat),
                "get": best_ns_per_call('get("W")', env, number, repeat),
                "pyscope": best_ns_per_call('pyfv("W")', env, number, repeat),
                "find_var": best_ns_per_call('fv("W")', env, number, repeat),
                "var": best_ns_per_call('var("W")', env, number, repeat),
                "local": best_ns_per_call("with loc(): pass", env, number // 4, repeat),
                "numpy": best_ns_per_call("v.numpy()", env, number // 4, repeat),
                "asarray": best_ns_per_call("np.asarray(priv)", env, number, repeat),
            }
            if step.find_var("W") is None:
                raise RuntimeError("find_var did not find W one scope up")
    finally:
        seg.detach()
        pdshm.unlink(name)
    c_ns, c_note = c_lookup_ns(pdshm_bench)
    table.add(section, 'dict d["W"]', t["subscript"], "ns")
    table.add(section, 'dict d.get("W")', t["get"], "ns", "the baseline of find_var")
    table.add(section, "Python scope chain find_var", t["pyscope"], "ns",
              "a dict per scope, one parent up")
    table.add(section, 'scope.find_var("W")', t["find_var"], "ns",
              f'{t["find_var"] / t["get"]:.2f}x d.get, {t["find_var"] / t["subscript"]:.2f}x d["W"], '
              f'{t["find_var"] / t["pyscope"]:.2f}x the Python scope'
              + (f", {t['find_var'] / c_ns:.1f}x C" if c_ns else ""))
    table.add(section, "C pdshm_find_var", c_ns, "ns", c_note)
    table.add(section, 'scope.var("W")', t["var"], "ns", "get-or-create, a hit")
    table.add(section, "with scope.local(): pass", t["local"], "ns", "new child scope + release")
    table.add(section, "var.numpy() (4 KiB)", t["numpy"], "ns",
              f'{t["numpy"] / t["asarray"]:.1f}x np.asarray of a private array')
    table.add(section, "np.asarray(private 4 KiB)", t["asarray"], "ns")
    return {"find_var_vs_dict": t["find_var"] / t["get"],
            "find_var_vs_subscript": t["find_var"] / t["subscript"]}
