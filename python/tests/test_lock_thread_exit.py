"""A Python thread that ends while holding variable locks lets go of them:
another process can take them at once, and the VarLock objects left behind
are harmless when collected later on another thread."""
import gc
import threading

import workers


def test_locks_of_an_ended_thread_are_let_go(seg, children):
    p = seg.root.new_scope("p")
    shared, exclusive = p.var("s"), p.var("x")
    kept = []

    def hold_and_end():
        for var, excl in ((shared, False), (exclusive, True)):
            lk = var.lock(exclusive=excl)
            lk.__enter__()
            kept.append(lk)

    t = threading.Thread(target=hold_and_end)
    t.start()
    t.join(10)
    assert not t.is_alive()
    for name in ("s", "x"):
        kid = children("spawn", workers.hold_lock_until_told, seg.name, "p", name, True)
        kid.expect("locked")
        kid.send("unlock")
        kid.expect("unlocked")
        kid.send("exit")
        kid.result()
    kept.clear()
    gc.collect()
    with exclusive.lock():
        pass
    assert seg.check() == []
