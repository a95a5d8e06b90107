"""What child processes run: module-level functions fn(conn, *args), see procutil."""
import errno
import gc
import os

import numpy as np

import pdshm


def unique_names(conn, seg_name, prefix, count):
    with pdshm.attach(seg_name) as seg:
        return [seg.unique_name(prefix) for _ in range(count)]


def view_roundtrip(conn, seg_name, path, name):
    """Reads through its own view what the test wrote, then writes for the test to read."""
    with pdshm.attach(seg_name) as seg:
        a = seg.open(path)[name].numpy()
        conn.send("ready")
        assert conn.recv() == "check"
        seen = float(a[3])
        a[4] = 2.5
        conn.send(("saw", seen))
        assert conn.recv() == "exit"
        del a


def erase_var(conn, seg_name, path, name):
    with pdshm.attach(seg_name) as seg:
        seg.open(path).erase(name)


def resize_and_fill(conn, seg_name, path, name, dtype, shape, fill):
    with pdshm.attach(seg_name) as seg:
        v = seg.open(path)[name]
        v.resize(dtype, shape)
        v.numpy()[...] = fill


def unlink_scope_then_detach(conn, seg_name, name):
    """Holds the named scope's last handle, unlinks it, and lets detach release the handle."""
    seg = pdshm.attach(seg_name)
    kept = seg.open(name)
    name_seen = kept.name
    seg.root.unlink(name)
    seg.detach()
    return name_seen


def hold_view_until_told(conn, seg_name, path, name):
    """Takes a view, reports its sum, drops it when told, reports again."""
    with pdshm.attach(seg_name) as seg:
        a = seg.open(path)[name].numpy()
        conn.send(("holding", float(a.sum())))
        assert conn.recv() == "drop"
        total = float(a.sum())
        del a
        gc.collect()
        conn.send(("dropped", total))
        assert conn.recv() == "exit"


def trainer_until_killed(conn, seg_name):
    """A trainer holding everything it can: a view of p/w, an anonymous local
    scope with a tensor and a view of it, and w's exclusive lock.  Waits to be
    killed."""
    seg = pdshm.attach(seg_name)
    w = seg.open("p")["w"]
    view = w.numpy()
    local = seg.root.new_scope()
    x = local.var("x")
    x.resize("float32", (16 << 10,))
    xview = x.numpy()
    xview[:] = 1.0
    lock = w.lock()
    lock.__enter__()
    conn.send(("ready", float(view.sum())))
    conn.recv()  # never answered: the test kills us
    # (naming them here keeps every hold alive up to the kill)
    raise AssertionError("still alive", local, view, xview, lock)


def erase_in_other_process(conn, seg_name, path, name):
    """Erases, then lets the test look at its stale Var before exiting."""
    with pdshm.attach(seg_name) as seg:
        seg.open(path).erase(name)
        conn.send("erased")
        assert conn.recv() == "exit"


def use_inherited_segment(conn, seg):
    """Works through a Segment inherited by fork, then detaches it."""
    seg.root.var("from_child").label = "child"
    alive = seg.stats().procs_alive
    seg.detach()
    return alive


def use_inherited_anonymous_scope(conn, scope):
    """Uses an anonymous scope inherited by fork: what it raised, and the code."""
    try:
        scope.var("from_child")
    except pdshm.Forked as e:
        return ("Forked", e.code)
    return ("no error", None)


def read_inherited_view_when_told(conn, view):
    """Reads a numpy view inherited by fork, once the test has done its part."""
    conn.send("ready")
    assert conn.recv() == "read"
    return view.tolist()


def write_through_handles(conn, seg, scope, var):
    """Uses a Segment, a named Scope and a Var given as arguments (pickled or inherited)."""
    var.numpy()[...] = 3
    scope.var("made_by_child").label = "child"
    return (seg.name, scope.name, var.name, seg.root.find_var("top") is not None)


def var_via_unpickled_arguments(conn, var):
    """Reads a Var given as an argument (pickled or inherited)."""
    return (var.name, var.numpy().tolist())


def unique_names_from_stack(conn, seg):
    """50 generated names of new variables made through a ScopeStack of seg."""
    st = pdshm.ScopeStack(seg)
    return [st.new_variable(prefix="t").name for _ in range(50)]


def introspection_subject(conn, seg_name):
    """Leaves marks for the introspection calls to find: a named scope it made
    with a labelled tensor variable read by an operator, an anonymous scope it
    holds, and p/w's exclusive lock; keeps them until told to exit."""
    with pdshm.attach(seg_name) as seg:
        made = seg.root.new_scope("made_by_kid")
        kv = made.var("kv")
        kv.label = "input"
        kv.add_reader("op_r")
        kv.resize("float32", (2, 3))
        local = seg.root.new_scope()
        local.var("lv")
        w = seg.open("p")["w"]
        with w.lock():
            conn.send("ready")
            assert conn.recv() == "exit"
        local.release()
        made.release()


def _plain(value):
    """A call's result in a form that pickles without the segment: names for handles."""
    if hasattr(value, "name") and not isinstance(value, str):  # a Var or a Scope
        return value.name
    if isinstance(value, (list, tuple)):
        return [_plain(x) for x in value]
    return value


def scope_calls(conn, seg_name, calls):
    """Runs calls (path, var name or None, method, args) on a fresh attachment:
    the method of the scope at path, or of its variable of that name (found up
    the chain); a method "=attr" sets the attribute.  Returns each call's result
    (handles as their names), or ("raised", [class names of the exception]).
    """
    out = []
    with pdshm.attach(seg_name) as seg:
        for path, var, method, args in calls:
            try:
                scope = seg.open(path)
                target = scope if var is None else scope[var]
                if method.startswith("="):
                    setattr(target, method[1:], *args)
                    out.append(None)
                else:
                    out.append(_plain(getattr(target, method)(*args)))
            except Exception as e:
                out.append(("raised", [c.__name__ for c in type(e).__mro__]))
    return out


def exit_holding_an_anonymous_scope(conn, seg_name):
    """Makes an anonymous scope with a tensor and exits at once, releasing nothing."""
    seg = pdshm.attach(seg_name)
    local = seg.root.new_scope()
    local.var("x").resize("float32", (4096,))
    conn.send(("made", seg.stats().scopes))
    conn.close()
    os._exit(0)


def hold_lock_until_told(conn, seg_name, path, name, exclusive):
    """Takes the variable's lock (exclusive or shared) and keeps it until told."""
    with pdshm.attach(seg_name) as seg:
        v = seg.open(path)[name]
        with v.lock(exclusive=exclusive):
            conn.send("locked")
            assert conn.recv() == "unlock"
        conn.send("unlocked")
        assert conn.recv() == "exit"


def group_member(conn, seg_name, group, size, rank, steps):
    """Joins the group and runs steps, each one of
         ("barrier", timeout)
         ("allreduce", values, op, timeout[, dtype])   on its own variable,
                                               float64 unless dtype is given
         ("reduce_scatter", values, op, timeout)   likewise
         ("allgather", values, timeout)        likewise (values None: the
                                               variable as the last step left it)
         ("allreduce_private", values, op, timeout, dtype)   of a numpy array
                                               through its own staging variable
         ("allreduce_private_torch", values, op, timeout, dtype)   the same of
                                               a torch tensor (dtype: its name)
         ("tell", msg)  /  ("await", msg)      talk to the test
         ("hang",)                             wait to be killed
    and returns (rank, [each step's result]); a step that raised gives
    ("raised", [class names of the exception]) and the next steps still run.
    A join that raised is ("join raised", [class names], code)."""
    import numpy as np
    with pdshm.attach(seg_name) as seg:
        try:
            g = seg.group(group, size, rank=rank)
        except pdshm.Error as e:
            return ("join raised", [c.__name__ for c in type(e).__mro__], e.code)
        conn.send(("joined", g.rank))
        out = []
        for step in steps:
            try:
                if step[0] == "barrier":
                    out.append(g.barrier(timeout=step[1]))
                elif step[0] == "allreduce":
                    v = seg.root.var(f"{group}.grad{g.rank}")
                    v.assign(np.array(step[1], dtype=step[4] if len(step) > 4 else np.float64))
                    g.allreduce(v, op=step[2], timeout=step[3])
                    out.append(v.numpy().tolist())
                elif step[0] == "allreduce_private":
                    a = np.array(step[1], dtype=step[4])
                    staging = seg.root.var(f"{group}.staging{g.rank}")
                    staging.resize("uint8", (a.nbytes,))
                    g.allreduce_private(a, staging, op=step[2], timeout=step[3])
                    out.append(a.tolist())
                elif step[0] == "allreduce_private_torch":
                    import torch
                    t = torch.tensor(step[1], dtype=getattr(torch, step[4]))
                    staging = seg.root.var(f"{group}.staging{g.rank}")
                    staging.resize("uint8", (t.numel() * t.element_size(),))
                    g.allreduce_private(t, staging, op=step[2], timeout=step[3])
                    out.append(t.tolist())
                elif step[0] in ("reduce_scatter", "allgather"):
                    v = seg.root.var(f"{group}.grad{g.rank}")
                    if step[1] is not None:
                        v.assign(np.array(step[1], dtype=np.float64))
                    if step[0] == "reduce_scatter":
                        g.reduce_scatter(v, op=step[2], timeout=step[3])
                    else:
                        g.allgather(v, timeout=step[2])
                    out.append(v.numpy().tolist())
                elif step[0] == "tell":
                    conn.send(step[1])
                    out.append(None)
                elif step[0] == "await":
                    assert conn.recv() == step[1]
                    out.append(None)
                elif step[0] == "hang":
                    conn.recv()
            except pdshm.Error as e:
                out.append(("raised", [c.__name__ for c in type(e).__mro__]))
        g.leave()
        return (g.rank, out)


def allreduce_until_peer_died(conn, seg_name, group, rank, n):
    """Joins `group` of 2 at `rank` and allreduces (max) its own float32
    variable of n ones ("t<rank>", the same for every group) over and over,
    telling "running" after the first, until one raises; returns that
    exception's class name."""
    import numpy as np
    with pdshm.attach(seg_name) as seg:
        v = seg.root.var(f"t{rank}")
        v.assign(np.ones(n, dtype=np.float32))
        with seg.group(group, 2, rank=rank) as g:
            conn.send("joined")
            g.allreduce(v, op="max", timeout=60.0)
            conn.send("running")
            try:
                while True:
                    g.allreduce(v, op="max", timeout=600.0)
            except pdshm.Error as e:
                return type(e).__name__


def stall_probe(conn, seg_name, group):
    """Beside `group`, whose rank 0 is stopped and rank 1 dead: attaches (which
    reaps), reaps, joins a group of its own and takes rank 1 of `group` over.
    Returns the seconds each took, and how the reap and the takeover ended
    (TimeoutError when a stopped member still writes)."""
    import time
    out = {}
    t = time.monotonic()
    with pdshm.attach(seg_name) as seg:
        out["attach"] = time.monotonic() - t
        t = time.monotonic()
        try:
            out["reaped"] = seg.reap()
        except TimeoutError:
            out["reaped"] = "TimeoutError"
        out["reap"] = time.monotonic() - t
        t = time.monotonic()
        with seg.group(group + ".other", 1):
            pass
        out["join"] = time.monotonic() - t
        t = time.monotonic()
        try:
            with seg.group(group, 2, rank=1):
                out["takeover"] = "joined"
        except TimeoutError:
            out["takeover"] = "TimeoutError"
        out["takeover_s"] = time.monotonic() - t
    return out


def churn(conn, seg_name, seed, ops=None):
    """Creates, resizes, views, locks, renames and erases variables v0..v15 of
    p, and makes and drops anonymous scopes: ops operations, then detaches and
    returns how many raised an error other than absence or existence, or,
    with ops None, until killed at some instruction."""
    import itertools
    import random
    rnd = random.Random(seed)
    seg = pdshm.attach(seg_name)
    p = seg.open("p")
    conn.send("started")
    keep = []
    other_errors = {}
    for _ in (itertools.count() if ops is None else range(ops)):
        name = f"v{rnd.randrange(16)}"
        action = rnd.randrange(6)
        try:
            if action == 0:
                p.var(name).resize("float32", (rnd.randrange(1, 4096),))
            elif action == 1:
                p.erase(name)
            elif action == 2:
                keep.append(p.var(name).numpy())
                if len(keep) > 4:
                    keep.pop(0)
            elif action == 3:
                with p.var(name).lock(exclusive=rnd.randrange(2) == 0):
                    pass
            elif action == 4:
                with p.local() as s:
                    s.var("x").resize("int8", (rnd.randrange(1, 10000),))
            else:
                p.rename(name, f"v{rnd.randrange(16)}")
        except (KeyError, FileExistsError):
            pass
        except pdshm.Error as e:
            if e.code not in (-errno.ESTALE, -10002):  # stale, PDSHM_ETYPE
                key = f"{type(e).__name__}: {e}"
                other_errors[key] = other_errors.get(key, 0) + 1
    del keep
    p.release()
    seg.detach()
    return other_errors


def lock_new_variables(conn, seg_name, path, count):
    """Makes count new variables in path and takes each one's exclusive lock
    (in a thread, 5 s at most); returns the names it could not lock."""
    import threading
    failed = []
    with pdshm.attach(seg_name) as seg:
        p = seg.open(path)
        for i in range(count):
            v = p.var(f"new{i}")
            got = threading.Event()

            def take():
                with v.lock():
                    got.set()

            t = threading.Thread(target=take, daemon=True)
            t.start()
            t.join(5)
            if not got.is_set():
                failed.append(v.name)
                break  # its thread still waits: stop here
        p.release()
        return failed


def hold_lock_across_an_erase(conn, seg_name, path, name):
    """Takes the variable's exclusive lock; when told, lets go of it (the test
    erased the variable meanwhile) and reports how; stays alive until told to
    exit, so that a lock it failed to release stays held meanwhile."""
    with pdshm.attach(seg_name) as seg:
        lock = seg.open(path)[name].lock()
        lock.__enter__()
        conn.send("locked")
        assert conn.recv() == "release"
        try:
            lock.__exit__(None, None, None)
            conn.send(("released", 0))
        except pdshm.Error as e:
            conn.send(("released", e.code))
        assert conn.recv() == "exit"


def elastic_member(conn, seg_name, group, size, rank, steps):
    """Joins `group` of `size` at `rank` (size None: enlists as a newcomer)
    and runs steps, each one of
         ("barrier", timeout)
         ("regroup", timeout)                  gives (rank, size)
         ("allreduce", value, timeout)         sums its own float64 variable
                                               of 4 elements, all `value`
         ("tell", msg)  /  ("await", msg)      talk to the test
         ("hang",)                             wait to be killed
    after telling ("joined", rank, size); returns (rank, size, [each step's
    result]); a step that raised gives ("raised", [class names]) and the
    next steps still run."""
    import numpy as np
    with pdshm.attach(seg_name) as seg:
        g = seg.enlist(group, timeout=60) if size is None else seg.group(group, size, rank=rank)
        conn.send(("joined", g.rank, g.size))
        v = seg.root.var(f"{group}.e{os.getpid()}")
        out = []
        for step in steps:
            try:
                if step[0] == "barrier":
                    out.append(g.barrier(timeout=step[1]))
                elif step[0] == "regroup":
                    out.append(g.regroup(timeout=step[1]))
                elif step[0] == "allreduce":
                    v.assign(np.full(4, step[1], dtype=np.float64))
                    g.allreduce(v, timeout=step[2])
                    out.append(v.numpy().tolist())
                elif step[0] == "tell":
                    conn.send(step[1])
                    out.append(None)
                elif step[0] == "await":
                    assert conn.recv() == step[1]
                    out.append(None)
                elif step[0] == "hang":
                    conn.recv()
            except pdshm.Error as e:
                out.append(("raised", [c.__name__ for c in type(e).__mro__]))
        result = (g.rank, g.size, out)
        g.leave()
        seg.root.erase(f"{group}.e{os.getpid()}")
        return result


def grown_reader(conn, seg_name, names, nbytes):
    """Attached before the test grows the segment: reads, through views, the
    tensors allocated after the growth, then writes through one for the test."""
    with pdshm.attach(seg_name) as seg:
        size0 = seg.stats().size
        conn.send(("ready", size0))
        assert conn.recv() == "check"
        sums = []
        for k, name in enumerate(names):
            a = seg.root[name].numpy()
            assert a.nbytes == nbytes
            sums.append(int(a.sum(dtype="uint64")))
        view = memoryview(seg.root[names[-1]])
        view[0:4] = b"peer"
        del view
        conn.send(("seen", seg.stats().size, sums))
        assert conn.recv() == "exit"


def dlpack_across_growth(conn, seg_name, late_names):
    """Takes a DLPack view (numpy and torch) of "early" before the test grows
    the segment; after the growth checks that the old views still see the
    test's writes, and writes through DLPack views of tensors allocated past
    the size it attached at."""
    import torch

    with pdshm.attach(seg_name) as seg:
        early = seg.root["early"]
        t_early = torch.from_dlpack(early)
        n_early = np.from_dlpack(early)
        conn.send(("ready", seg.stats().size))
        assert conn.recv() == "check"
        seen = [float(t_early.sum()), float(n_early.sum(dtype=np.float64))]
        for k, name in enumerate(late_names):
            t = torch.from_dlpack(seg.root[name])
            t.fill_(k + 1)
            seen.append(float(t.sum()))
            del t
        del t_early, n_early
        conn.send(("seen", seg.stats().size, seen))
        assert conn.recv() == "exit"


def find_var_in_fork_child(conn, step, name):
    """A fork child looks up name from a named scope inherited with the Vars
    it found before: the variable's label and key, then, after the parent
    erased and made it again, the new one's."""
    first = step.find_var(name)
    seen = [(first.label, first.key, step.find_var(name) is first)]
    conn.send("looked")
    assert conn.recv() == "made again"
    again = step.find_var(name)
    seen.append((again.label, again.key))
    return seen
