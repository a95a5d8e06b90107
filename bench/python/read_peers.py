"""Reading a 64 MiB float32 parameter that another process made.

The parent process (the owner) makes the parameter in each peer; a reader
process (spawned, so nothing is inherited) opens it and, for each read,
takes a fresh view and copies it into a private buffer it keeps: the same
work for every peer.  The baseline is plain memcpy: that copy from a private
array of the reader's own (np.copyto).  The peers:

  memcpy 4K    the same from private memory of 4 KiB pages (an anonymous
               mmap; numpy asks for transparent huge pages for its own large
               arrays, and shared memory on tmpfs has 4 KiB pages unless
               /dev/shm is mounted huge=): what the page size alone costs
  pdshm        a variable of a named scope: find_var, np.asarray (no copy)
  torch        a tensor after share_memory_(), passed to the reader by
               torch.multiprocessing; .numpy() (no copy)
  shm          multiprocessing.shared_memory, np.ndarray over its buffer
  lmdb         py-lmdb, buffers=True: np.frombuffer over the mapped value
  pickle       the array sent through a pipe (multiprocessing.Connection),
               unpickled by the reader: the copies that sharing avoids

For each peer: the first read (the reader's page faults included) and the
best of the following ones, which alternate with a memcpy of the same bytes
from a private copy in the same process: each ratio to memcpy is of two bests
taken under the same load.
"""
import multiprocessing
import os
import shutil
import tempfile

import numpy as np

from timing import once_s

PEERS = ("memcpy", "memcpy 4K", "pdshm", "torch", "shm", "lmdb", "pickle")


# ---- the reader's side (in the spawned process) ------------------------------

def _open_reader(kind, handle, conn):
    """(read_into(dst), close()) for one peer, in the reader process."""
    if kind == "memcpy":
        src = handle.copy() if handle is not None else None
        return (lambda dst: np.copyto(dst, src)), (lambda: None)
    if kind == "memcpy 4K":
        import mmap
        mem = mmap.mmap(-1, handle.nbytes)
        src = np.frombuffer(mem, np.float32)
        src[:] = handle
        return (lambda dst: np.copyto(dst, src)), (lambda: None)
    if kind == "pdshm":
        import pdshm
        seg = pdshm.attach(handle)
        scope = seg.open("bench")
        return (lambda dst: np.copyto(dst, np.asarray(scope.find_var("W")))), seg.detach
    if kind == "torch":
        return (lambda dst: np.copyto(dst, handle.numpy())), (lambda: None)
    if kind == "shm":
        from multiprocessing import shared_memory
        shm = shared_memory.SharedMemory(name=handle[0])
        count = handle[1]
        return (lambda dst: np.copyto(dst, np.ndarray(count, np.float32, buffer=shm.buf))), shm.close
    if kind == "lmdb":
        import lmdb
        env = lmdb.open(handle, readonly=True, lock=False)

        def read(dst):
            with env.begin(buffers=True) as txn:
                np.copyto(dst, np.frombuffer(txn.get(b"W"), np.float32))
        return read, env.close
    if kind == "pickle":
        def read(dst):
            conn.send("get")
            np.copyto(dst, conn.recv())
        return read, (lambda: None)
    raise ValueError(f"unknown peer {kind}")


def _reader(kind, handle, count, reps, conn):
    try:
        read_into, close = _open_reader(kind, handle, conn)
        dst = np.zeros(count, np.float32)          # touched: no faults in the timing
        cold = once_s(lambda: read_into(dst))
        # The peer's reads alternate with memcpy from a private copy of what
        # it read, so that both see the same load on a shared machine: the
        # ratio of the two bests is this run's, not two moments'.
        private = dst.copy()
        best = base = float("inf")
        for _ in range(reps):
            best = min(best, once_s(lambda: read_into(dst)))
            base = min(base, once_s(lambda: np.copyto(dst, private)))
        read_into(dst)
        check = float(dst[::65536].sum(dtype=np.float64))
        close()
        conn.send(("result", cold, best, base, check))
    except BaseException as e:  # the parent reports it as the peer's failure
        conn.send(("error", f"{type(e).__name__}: {e}"))


# ---- the owner's side ---------------------------------------------------------------

class _Owner:
    """Makes the parameter in one peer: handle (what the reader gets), close()."""

    def __init__(self, kind, arr, seg_prefix):
        self.kind = kind
        self.handle = None
        self.close = lambda: None
        getattr(self, "_make_" + kind.replace(" ", "_").lower())(arr, seg_prefix)

    def _make_memcpy(self, arr, _):
        self.handle = None     # the reader makes its own source (see run_peer)

    _make_memcpy_4k = _make_memcpy

    def _make_pdshm(self, arr, prefix):
        import pdshm
        name = f"{prefix}-read"
        seg = pdshm.create(name, size=arr.nbytes + (32 << 20))
        try:
            seg.root.new_scope("bench").create_var("W").assign(arr)
        except BaseException:
            seg.detach()
            pdshm.unlink(name)
            raise
        self.handle = name

        def close():
            seg.detach()
            pdshm.unlink(name)
        self.close = close

    def _make_torch(self, arr, _):
        import torch
        self.handle = torch.from_numpy(arr).clone().share_memory_()

    def _make_shm(self, arr, _):
        from multiprocessing import shared_memory
        shm = shared_memory.SharedMemory(create=True, size=arr.nbytes)
        np.ndarray(arr.shape, arr.dtype, buffer=shm.buf)[:] = arr
        self.handle = (shm.name, arr.size)

        def close():
            shm.close()
            shm.unlink()
        self.close = close

    def _make_lmdb(self, arr, _):
        import lmdb
        where = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        path = tempfile.mkdtemp(prefix="pdshm-bench-lmdb-", dir=where)
        env = lmdb.open(path, map_size=arr.nbytes * 2 + (16 << 20))
        with env.begin(write=True) as txn:
            txn.put(b"W", arr.tobytes())
        self.handle = path

        def close():
            env.close()
            shutil.rmtree(path, ignore_errors=True)
        self.close = close


def _context(kind):
    if kind == "torch":
        import torch.multiprocessing
        return torch.multiprocessing.get_context("spawn")
    return multiprocessing.get_context("spawn")


def run_peer(kind, arr, reps, seg_prefix):
    """One peer: {'cold': s, 'best': s} or {'skip': reason} or {'error': text}."""
    try:
        owner = _Owner(kind, arr, seg_prefix) if kind != "pickle" else None
    except ImportError as e:
        return {"skip": f"not installed ({e.name})"}
    try:
        ctx = _context(kind)
        mine, theirs = ctx.Pipe()
        handle = owner.handle if owner else None
        if kind.startswith("memcpy"):
            handle = arr         # the reader copies it into its private memory
        proc = ctx.Process(target=_reader, args=(kind, handle, arr.size, reps, theirs))
        proc.start()
        theirs.close()
        while True:
            msg = mine.recv()
            if msg == "get":     # pickle: one transfer per read
                mine.send(arr)
                continue
            break
        proc.join()
    finally:
        if owner:
            owner.close()
    if msg[0] == "error":
        return {"error": msg[1]}
    _, cold, best, base, check = msg
    want = float(arr[::65536].sum(dtype=np.float64))
    if check != want:
        return {"error": f"read {check} where {want} was written"}
    return {"cold": cold, "best": best, "base": base}


def run(table, quick, seg_prefix, nbytes=64 << 20):
    """Every peer; adds the rows and returns {'ratio': pdshm/memcpy speed}."""
    arr = np.arange(nbytes // 4, dtype=np.float32)
    reps = 5 if quick else 30
    section = f"read a {nbytes >> 20} MiB float32 parameter made by another process " \
              f"(view + copy into a private buffer; best of {reps}, first read in the note)"
    res = {}
    for kind in PEERS:
        res[kind] = r = run_peer(kind, arr, reps, seg_prefix)
        if "skip" in r or "error" in r:
            table.add(section, kind, None, "", r.get("skip") or "FAILED: " + r["error"])
            continue
        speed = nbytes / r["best"] / 1e9
        note = f"{r['base'] / r['best']:.2f}x memcpy, first read {nbytes / r['cold'] / 1e9:.2f} GB/s"
        table.add(section, kind, speed, "GB/s", note)
    ours = res["pdshm"]
    return {"ratio": ours["base"] / ours["best"] if "best" in ours else None}
