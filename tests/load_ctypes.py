"""load_ctypes.py LIB - libpdshm loaded into Python by ctypes.CDLL, with torch.

Each case runs in a fresh interpreter: the library alone; the library, then
`import torch`; `import torch`, then the library.  Each creates a segment,
attaches it a second time, writes a tensor's bytes through one attachment and
reads them through the other (and, with torch, through torch.frombuffer),
takes the variable's lock from another thread, detaches and unlinks.

Exit status: 0 when every case passed, 1 when one failed, 77 (automake's SKIP)
when torch is not installed, after the case without torch passed.
"""
import os
import subprocess
import sys

CHILD = r'''
import ctypes, sys, threading
lib_path, order, name = sys.argv[1:4]
if order == "torch-first":
    import torch
lib = ctypes.CDLL(lib_path)
if order == "torch-after":
    import torch
P = ctypes.c_void_p

class Options(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("max_procs", ctypes.c_uint), ("mode", ctypes.c_uint),
                ("flags", ctypes.c_uint), ("max_locks", ctypes.c_uint),
                ("max_size", ctypes.c_size_t)]

for fn, args, res in [("pdshm_create", [ctypes.c_char_p, P, P], ctypes.c_int),
                      ("pdshm_attach", [ctypes.c_char_p, P, P], ctypes.c_int),
                      ("pdshm_detach", [P], ctypes.c_int),
                      ("pdshm_unlink", [ctypes.c_char_p], ctypes.c_int),
                      ("pdshm_root", [P, P], ctypes.c_int),
                      ("pdshm_scope_release", [P], ctypes.c_int),
                      ("pdshm_var_create", [P, ctypes.c_char_p, P], ctypes.c_int),
                      ("pdshm_find_var", [P, ctypes.c_char_p], P),
                      ("pdshm_var_lock", [P, ctypes.c_int], ctypes.c_int),
                      ("pdshm_var_unlock", [P], ctypes.c_int),
                      ("pdshm_tensor_resize", [P, ctypes.c_int, ctypes.c_int, P], ctypes.c_int),
                      ("pdshm_tensor_data", [P], P),
                      ("pdshm_last_error", [], ctypes.c_char_p)]:
    f = getattr(lib, fn)
    f.argtypes, f.restype = args, res

def ok(rc, what):
    if rc != 0:
        raise SystemExit("%s: %d (%s)" % (what, rc, lib.pdshm_last_error().decode()))

F32 = 8  # PDSHM_F32 in pdshm_dtype
bname = name.encode()
lib.pdshm_unlink(bname)
a, b, ra, rb, va = P(), P(), P(), P(), P()
ok(lib.pdshm_create(bname, ctypes.byref(Options(size=4 << 20)), ctypes.byref(a)), "create")
ok(lib.pdshm_attach(bname, None, ctypes.byref(b)), "attach")
ok(lib.pdshm_root(a, ctypes.byref(ra)), "root a")
ok(lib.pdshm_root(b, ctypes.byref(rb)), "root b")
ok(lib.pdshm_var_create(ra, b"w", ctypes.byref(va)), "var_create")
dims = (ctypes.c_int64 * 1)(4)
ok(lib.pdshm_tensor_resize(va, F32, 1, ctypes.cast(dims, P)), "resize")
vb = lib.pdshm_find_var(rb, b"w")
assert vb, "the variable is not found through the second attachment"
ok(lib.pdshm_var_lock(va, 1), "lock")
(ctypes.c_float * 4).from_address(lib.pdshm_tensor_data(va))[:] = [1.0, 2.0, 3.0, 4.5]
ok(lib.pdshm_var_unlock(va), "unlock")
seen = list((ctypes.c_float * 4).from_address(lib.pdshm_tensor_data(vb)))
assert seen == [1.0, 2.0, 3.0, 4.5], seen
if order != "alone":
    buf = (ctypes.c_float * 4).from_address(lib.pdshm_tensor_data(vb))
    t = torch.frombuffer(buf, dtype=torch.float32)
    assert t.sum().item() == 10.5, t
    assert torch.ones(1 << 20).sum().item() == float(1 << 20)  # torch's own allocations
    del t, buf
errors = []
def worker():
    for i in range(20):
        if lib.pdshm_var_lock(vb, i % 2) or lib.pdshm_var_unlock(vb):
            errors.append(lib.pdshm_last_error().decode())
threads = [threading.Thread(target=worker) for _ in range(3)]
for th in threads: th.start()
for th in threads: th.join()
assert not errors, errors
ok(lib.pdshm_scope_release(rb), "release b")
ok(lib.pdshm_scope_release(ra), "release a")
ok(lib.pdshm_detach(b), "detach b")
ok(lib.pdshm_detach(a), "detach a")
ok(lib.pdshm_unlink(bname), "unlink")
print("ok", order)
'''


def run(lib, order):
    name = "t-load-py-%d-%s" % (os.getpid(), order)
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, lib, order, name], capture_output=True,
                           text=True, timeout=300)
    finally:
        try:
            os.unlink("/dev/shm/pdshm." + name)
        except FileNotFoundError:
            pass
    print("%-12s exit %d %s%s" % (order, p.returncode, p.stdout.strip(), p.stderr.strip()[-2000:]))
    return p.returncode == 0 and p.stdout.strip() == "ok " + order


def torch_missing():
    p = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True,
                       timeout=300)
    lines = p.stderr.strip().splitlines()
    return None if p.returncode == 0 else (lines[-1] if lines else "exit %d" % p.returncode)


def main():
    lib = os.path.abspath(sys.argv[1])
    if not run(lib, "alone"):
        return 1
    why = torch_missing()
    if why:
        print("SKIP: torch cannot be imported by %s (%s); the library alone loaded and worked"
              % (sys.executable, why))
        return 77
    return 0 if all([run(lib, "torch-after"), run(lib, "torch-first")]) else 1


if __name__ == "__main__":
    sys.exit(main())
