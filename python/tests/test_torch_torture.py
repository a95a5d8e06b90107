"""A torture of pdshm.torch.DataParallel with shrink_after: trainers
SIGKILLed from outside at random instants (a second one often a few
milliseconds after the first, inside its repair), replaced or not at
random, newcomers enlisting at random; the members regroup every few
steps.  Every run ends with the parameters of one process over the full
batch and a clean check().  TORTURE_SEEDS=n runs seeds 1..n (3 by
default; a-b: seeds a..b), TORTURE_ROUNDS=m events (kills or newcomers) per run (4 by
default); `make torture-python` runs many.  A failure names its seed."""
import json
import os
import subprocess
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pdshm.torch needs it")
import dp_workers  # noqa: E402
from test_torch_reshard import ATTACH, current_step  # noqa: E402

def seeds(spec):
    """TORTURE_SEEDS: n (seeds 1..n) or a-b (seeds a..b)."""
    first, _, last = spec.partition("-")
    return range(int(first), int(last) + 1) if last else range(1, int(first) + 1)


SEEDS = seeds(os.environ.get("TORTURE_SEEDS", "3"))
ROUNDS = int(os.environ.get("TORTURE_ROUNDS", "4"))
START = 4          # trainers at the start
EVERY = 4          # the members regroup every EVERY steps
SHRINK_AFTER = 1.0  # seconds the survivors wait for a replacement
T = 120.0
T_START = 600.0   # for the processes to start: torch's import is slow on a loaded host
PACE = 0.02       # seconds of "work" per step


def ranks_by_pid(seg):
    """{pid: (rank, size)} of the live members of group "dp"."""
    out = subprocess.run([ATTACH, seg.name, "--groups",
                          "--json"], capture_output=True, text=True, timeout=T, check=True)
    return {m["pid"]: (m["rank"], g["size"]) for g in json.loads(out.stdout)["groups"]
            if g["name"] == "dp" for m in g["members"] if m["state"] == "alive"}


def plan(rng):
    """The run's events, drawn before it starts: [(step, what)], what being
    "add" (a newcomer) or a list of one or two kills, each (delay after
    the previous one in seconds, replaced?); and the spares they need."""
    live, at, events, spares = START, EVERY, [], 0
    for _ in range(ROUNDS):
        at += int(rng.integers(1, 2 * EVERY))
        if live < 2 or rng.random() < 0.3:
            events.append((at, "add"))
            live, spares = live + 1, spares + 1
            continue
        kills = []
        for delay in (0.0, float(rng.uniform(0.0, 0.05))):
            if live < 2 or (kills and rng.random() < 0.5):
                break
            replaced = bool(rng.random() < 0.5)
            kills.append((delay, replaced))
            live, spares = live - (not replaced), spares + replaced
        events.append((at, kills))
    return events, spares, at + 3 * EVERY


class Run:
    """The trainers of one run: `live` those not killed (spares that were
    told to join or enlist too), `killed` the others, `spares` processes
    ready to join (their torch imported: they join within milliseconds)."""

    def __init__(self, seg, children, steps, spares, log):
        self.seg, self.children, self.steps, self.log = seg, children, steps, log
        self.scope = seg.root.new_scope("torture")
        self.spares = [self.start("spare", 0, 0) for _ in range(spares)]
        for k in self.spares:
            assert k.recv(timeout=T_START) == ("ready",)
        self.live = [self.start("member", START, r) for r in range(START)]
        for k in self.live:
            assert k.recv(timeout=T_START)[0] == "joined"
        self.killed = []

    def start(self, role, size, rank):
        return self.children("spawn", dp_workers.torture_trainer, self.seg.name, "torture",
                             self.steps, size, rank, role, SHRINK_AFTER, EVERY, PACE)

    def kill(self, rng, replace):
        victim = self.live[int(rng.integers(len(self.live)))]
        where = ranks_by_pid(self.seg).get(victim.pid)
        victim.kill()
        self.live.remove(victim)
        self.killed.append(victim)
        self.log.append(f"step {current_step(self.scope)}: killed pid {victim.pid} "
                        f"(rank, size: {where})" + (", replaced" if replace else ""))
        if replace:  # a member that ended already has no rank: the spare enlists
            spare = self.spares.pop()
            spare.send(("join", *where[::-1]) if where else ("enlist",))
            self.live.append(spare)

    def add(self):
        spare = self.spares.pop()
        spare.send(("enlist",))
        self.live.append(spare)
        self.log.append(f"step {current_step(self.scope)}: newcomer pid {spare.pid}")

    def wait_for_step(self, step):
        end = time.monotonic() + T
        while current_step(self.scope) < step and time.monotonic() < end:
            time.sleep(0.001)


def final(child):
    """A trainer's result, past the messages it sent before it."""
    while True:
        msg = child.recv(timeout=T)
        if msg[0] == "done":
            child.join(T)
            assert child.proc.exitcode == 0
            return msg[1]


def torture(seg, children, seed, log):
    rng = np.random.default_rng(seed)
    events, spares, steps = plan(rng)
    log.append(f"plan: {events}, {steps} steps")
    run = Run(seg, children, steps, spares, log)
    for at, what in events:
        run.wait_for_step(at)
        if what == "add":
            run.add()
            continue
        for delay, replaced in what:
            time.sleep(delay)
            run.kill(rng, replaced)
    assert not run.spares
    for k in run.killed:
        k.proc.join(T)
        assert k.proc.exitcode == -9
    out = [final(k) for k in run.live]
    log.append(f"end: {len(out)} trainers")
    assert sorted(out) == [(r, len(out)) for r in range(len(out))]
    model = dp_workers.linear_model(torch)
    got = [run.scope[name].numpy().copy() for name, _ in model.named_parameters()]
    ref = children("spawn", dp_workers.reference, ["adam-steplr"], steps, 1).result(timeout=T)
    for g, w in zip(got, ref["adam-steplr"]):
        np.testing.assert_allclose(g, np.array(w, np.float32), rtol=2e-5, atol=2e-6)
    assert seg.check() == []


@pytest.mark.parametrize("seed", SEEDS)
def test_trainers_killed_replaced_and_added_at_random(seg, children, seed):
    log = []
    try:
        torture(seg, children, seed, log)
    except BaseException as e:
        raise AssertionError(f"seed {seed} (TORTURE_ROUNDS={ROUNDS}) failed: {e!r}\n"
                             + "\n".join(log)) from e
