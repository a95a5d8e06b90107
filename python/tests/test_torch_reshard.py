"""pdshm.torch.DataParallel in groups that shrink and grow: trainers killed
(kill -9) with no replacement, in any phase of a step, two or three in one
step, three in three steps, one during the repair of another and the one
switching the layout; a newcomer taken in at a step boundary and by the
regroup a death starts; replacements in a shrunk group, for one of two
dead, killed while taking over, and at a boundary where the members
regroup.  Every run ends with the parameters of one process over the same
global batches; train_digits.py --kill K and --churn N with the loss and
accuracy of an uninterrupted run."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import pdshm

torch = pytest.importorskip("torch", reason="torch is not installed: pdshm.torch needs it")
import pdshm.torch as pt  # noqa: E402
import dp_workers  # noqa: E402
from procutil import child_env  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pdshm-attach, of the build tree (make check says where it is)
ATTACH = os.path.join(os.environ.get("abs_top_builddir", ROOT), "tools", "pdshm-attach")

STEPS = 8
KIND = "adam-steplr"  # moments, a step count and a schedule: all must move right
T = 120.0


def run(children, seg, size, deaths):
    """Starts `size` shrink_trainers (deaths: {rank: [(step, phase)]});
    returns the survivors' results and checks that the dying ones died."""
    seg.root.new_scope(f"run-{KIND}")
    kids = {r: children("spawn", dp_workers.shrink_trainer, seg.name, "run", size, r, STEPS,
                        KIND, deaths.get(r, ()))
            for r in range(size)}
    for k in kids.values():
        assert k.recv(timeout=T)[0] == "joined"
    out = []
    for r, k in kids.items():
        if r in deaths:
            k.proc.join(T)
            assert k.proc.exitcode == -9, f"rank {r} did not kill itself"
        else:
            out.append(k.result(timeout=T))
    return out


def current_step(scope):
    """The last step any trainer applied (in the current layout generation)."""
    gen = scope.find_local_var("generation")
    g = 0 if gen is None or gen.dtype is None else int(gen.numpy()[0])
    progress = scope.find_local_var("progress" if g == 0 else f"progress.{g}")
    try:
        return int(progress.numpy()[:, 0].max())
    except (AttributeError, pdshm.Error):  # none yet, or erased by a re-shard meanwhile
        return 0


def check_result(seg, children, steps=STEPS):
    model = dp_workers.linear_model(torch)
    got = [seg.open(f"run-{KIND}")[name].numpy().copy() for name, _ in model.named_parameters()]
    ref = children("spawn", dp_workers.reference, [KIND], steps, 1).result(timeout=T)[KIND]
    for g, w in zip(got, ref):
        np.testing.assert_allclose(g, np.array(w, np.float32), rtol=2e-5, atol=2e-6)
    assert seg.check() == []


@pytest.mark.parametrize("victim", [0, 2])
@pytest.mark.parametrize("phase", ["reduce", "update", "commit", "barrier"])
def test_a_trainer_killed_with_no_replacement_leaves_a_smaller_group_with_the_same_result(
        seg, children, phase, victim):
    out = run(children, seg, 3, {victim: [(4, phase)]})
    assert sorted((r, s) for _, r, s in out) == [(0, 2), (1, 2)]
    check_result(seg, children)


def test_two_trainers_killed_in_one_step(seg, children):
    out = run(children, seg, 4, {1: [(3, "update")], 3: [(3, "commit")]})
    assert sorted((r, s) for _, r, s in out) == [(0, 2), (1, 2)]
    check_result(seg, children)


def test_a_trainer_killed_while_finishing_a_dead_ones_shard(seg, children):
    """Rank 3 dies before staging step 4; rank 0 (new rank 0 of the 3
    survivors) is dealt its shard, stages it and dies half-way through
    committing it: the other two finish it."""
    out = run(children, seg, 4, {3: [(4, "update")], 0: [(4, "finish")]})
    assert sorted((r, s) for _, r, s in out) == [(0, 2), (1, 2)]
    check_result(seg, children)


def test_the_trainer_switching_the_layout_is_killed(seg, children):
    """Rank 1 dies; new rank 0 (old 0) dies after writing the next layout's
    progress, before the switch: the last survivor finishes alone."""
    out = run(children, seg, 3, {1: [(5, "update")], 0: [(5, "switch")]})
    assert [(r, s) for _, r, s in out] == [(0, 1)]
    check_result(seg, children)


def test_the_trainer_that_switched_the_layout_is_killed_before_the_others_pass(seg, children):
    """Rank 1 dies; new rank 0 (old 0) switches to the layout of 3 and dies
    before the last barrier: the two left start over in that layout and
    switch to one of 2."""
    out = run(children, seg, 4, {1: [(5, "update")], 0: [(5, "switched")]})
    assert sorted((r, s) for _, r, s in out) == [(0, 2), (1, 2)]
    assert int(seg.open(f"run-{KIND}")["generation"].numpy()[0]) == 2
    check_result(seg, children)


def test_a_newcomer_is_taken_in_at_a_step_boundary(seg, children):
    seg.root.new_scope(f"run-{KIND}")
    kids = [children("spawn", dp_workers.shrink_trainer, seg.name, "run", 2, r, STEPS, KIND,
                     (), False, (4, 3)) for r in range(2)]
    for k in kids:
        assert k.recv(timeout=T)[0] == "joined"
    new = children("spawn", dp_workers.shrink_trainer, seg.name, "run", 2, -1, STEPS, KIND,
                   (), True, None)
    assert new.recv(timeout=T) == ("joined", 4)
    out = [k.result(timeout=T) for k in kids] + [new.result(timeout=T)]
    assert sorted((r, s) for _, r, s in out) == [(0, 3), (1, 3), (2, 3)]
    scope = seg.open(f"run-{KIND}")
    gen = int(scope["generation"].numpy()[0])
    assert gen >= 1 and f"progress.{gen}" in scope  # the old generations' are erased
    assert not [h for h in range(1, gen) if f"progress.{h}" in scope]
    assert int(scope["regrouped"].numpy()[0]) == 4  # dp.regrouped_at of the members
    check_result(seg, children)


def three_with_rank_2_killed_in_step_4(seg, children):
    """3 trainers that wait 60 s for a replacement (shrink_after); rank 2
    dies in step 4's update, and is gone when this returns: the trainers."""
    seg.root.new_scope(f"run-{KIND}")
    kids = [children("spawn", dp_workers.shrink_trainer, seg.name, "run", 3, r, STEPS, KIND,
                     [(4, "update")] if r == 2 else (), False, None, 60.0) for r in range(3)]
    for k in kids:
        assert k.recv(timeout=T)[0] == "joined"
    kids[2].proc.join(T)
    assert kids[2].proc.exitcode == -9
    return kids


def test_a_replacement_within_shrink_after_takes_the_rank_over(seg, children):
    """The survivors wait shrink_after for a replacement, which comes: the
    group keeps its size, as without shrink_after."""
    kids = three_with_rank_2_killed_in_step_4(seg, children)
    new = children("spawn", dp_workers.shrink_trainer, seg.name, "run", 3, 2, STEPS, KIND,
                   (), False, None, 60.0)
    assert new.recv(timeout=T) == ("joined", 4)  # it finished the dead one's step 4
    out = [k.result(timeout=T) for k in kids[:2]] + [new.result(timeout=T)]
    assert [(r, s) for _, r, s in out] == [(0, 3), (1, 3), (2, 3)]
    assert "generation" in seg.open(f"run-{KIND}")
    assert int(seg.open(f"run-{KIND}")["generation"].numpy()[0]) == 0  # no re-shard
    check_result(seg, children)


def candidates(seg, group="dp"):
    """The processes waiting in Segment.enlist for `group`, as pdshm-attach
    --groups shows them."""
    out = subprocess.run([ATTACH, seg.name, "--groups",
                          "--json"], capture_output=True, text=True, timeout=T, check=True)
    return sum(g["candidates"] for g in json.loads(out.stdout)["groups"] if g["name"] == group)


def test_a_newcomer_waiting_is_admitted_by_the_regroup_a_death_starts(seg, children):
    """3 trainers hold after step 3 until a newcomer waits in enlist; then
    rank 2 dies in step 5: the survivors' regroup (no replacement came)
    drops it and admits the newcomer, which takes part in that re-shard."""
    seg.root.new_scope(f"run-{KIND}")
    kids = [children("spawn", dp_workers.shrink_trainer, seg.name, "run", 3, r, STEPS, KIND,
                     [(5, "update")] if r == 2 else (), False, None, 0.5, 3) for r in range(3)]
    for k in kids:
        assert k.recv(timeout=T)[0] == "joined"
    for k in kids:
        assert k.recv(timeout=T)[0] == "held"
    new = children("spawn", dp_workers.shrink_trainer, seg.name, "run", 3, -1, STEPS, KIND,
                   (), True, None)
    end = time.monotonic() + T
    while candidates(seg) < 1 and time.monotonic() < end:
        time.sleep(0.05)
    assert candidates(seg) == 1
    for k in kids:
        k.send("go")
    kids[2].proc.join(T)
    assert kids[2].proc.exitcode == -9
    assert new.recv(timeout=T) == ("joined", 5)  # it helped finish the dead one's step 5
    out = [k.result(timeout=T) for k in kids[:2]] + [new.result(timeout=T)]
    assert [(r, s) for _, r, s in out] == [(0, 3), (1, 3), (2, 3)]
    assert int(seg.open(f"run-{KIND}")["generation"].numpy()[0]) == 1  # one re-shard
    check_result(seg, children)


def test_a_replacement_takes_a_rank_of_a_shrunk_group_over(seg, children):
    """3 trainers; rank 2 dies in step 3 with no replacement (group of 2,
    generation 1); old rank 1, now rank 1 of 2, dies in step 6 and a
    replacement joins rank 1 of the group of 2: it takes the rank over in
    the shrunk layout, finishing the dead one's step 6."""
    seg.root.new_scope(f"run-{KIND}")
    deaths = {1: [(6, "update")], 2: [(3, "update")]}
    kids = [children("spawn", dp_workers.shrink_trainer, seg.name, "run", 3, r, STEPS, KIND,
                     deaths.get(r, ()), False, None, 0.5, None, True) for r in range(3)]
    for k in kids:
        assert k.recv(timeout=T)[0] == "joined"
    for r in (2, 1):
        kids[r].proc.join(T)
        assert kids[r].proc.exitcode == -9
    new = children("spawn", dp_workers.shrink_trainer, seg.name, "run", 2, 1, STEPS, KIND,
                   (), False, None, 60.0)
    assert new.recv(timeout=T) == ("joined", 6)
    out = [kids[0].result(timeout=T), new.result(timeout=T)]
    assert [(r, s) for _, r, s in out] == [(0, 2), (1, 2)]
    assert int(seg.open(f"run-{KIND}")["generation"].numpy()[0]) == 1  # no second re-shard
    check_result(seg, children)


def test_a_replacement_for_one_of_two_dead_joins_the_regroup_for_the_other(seg, children):
    """Ranks 2 and 3 of 4 die in step 4; a replacement joins rank 2 only:
    it waits for rank 3's replacement as long as the survivors do
    (shrink_after), then regroups with them into a group of 3 and the
    re-shard finishes both shards."""
    seg.root.new_scope(f"run-{KIND}")
    kids = [children("spawn", dp_workers.shrink_trainer, seg.name, "run", 4, r, STEPS, KIND,
                     [(4, "update")] if r >= 2 else (), False, None, 3.0, 3) for r in range(4)]
    for k in kids:
        assert k.recv(timeout=T)[0] == "joined"
    for k in kids:
        assert k.recv(timeout=T)[0] == "held"
    new = children("spawn", dp_workers.shrink_trainer, seg.name, "run", 4, 2, STEPS, KIND,
                   (), False, None, 3.0, None, False, True)
    assert new.recv(timeout=T) == ("ready",)
    for k in kids:
        k.send("go")
    for k in kids[2:]:
        k.proc.join(T)
        assert k.proc.exitcode == -9
    new.send("go")
    assert new.recv(timeout=T) == ("joined", 4)
    out = [k.result(timeout=T) for k in kids[:2]] + [new.result(timeout=T)]
    assert [(r, s) for _, r, s in out] == [(0, 3), (1, 3), (2, 3)]
    check_result(seg, children)


def test_a_replacement_killed_while_taking_the_rank_over(seg, children):
    """Rank 2 of 3 dies in step 4; its replacement dies half-way through
    committing the dead one's shard of step 4, and no one replaces it: the
    survivors re-shard into a group of 2, finishing that shard."""
    kids = three_with_rank_2_killed_in_step_4(seg, children)
    new = children("spawn", dp_workers.shrink_trainer, seg.name, "run", 3, 2, STEPS, KIND,
                   [(4, "commit")], False, None, 60.0)
    new.proc.join(T)
    assert new.proc.exitcode == -9
    out = [k.result(timeout=T) for k in kids[:2]]
    assert [(r, s) for _, r, s in out] == [(0, 2), (1, 2)]
    check_result(seg, children)


def members(seg, group="dp"):
    """{rank: pid} of the live members of `group`, as pdshm-attach --groups shows them."""
    out = subprocess.run([ATTACH, seg.name, "--groups", "--json"], capture_output=True,
                         text=True, timeout=T, check=True)
    return {m["rank"]: m["pid"] for g in json.loads(out.stdout)["groups"] if g["name"] == group
            for m in g["members"] if m["state"] == "alive"}


def test_a_replacement_joins_at_a_boundary_where_the_members_regroup(seg, children):
    """3 trainers hold after step 4, where they will call dp.regroup();
    rank 2 is killed there and its replacement joins rank 2 before the
    others regroup: it waits for a repair that does not come (they are
    regrouping, not repairing) for shrink_after, then regroups with them."""
    seg.root.new_scope(f"run-{KIND}")
    kids = [children("spawn", dp_workers.shrink_trainer, seg.name, "run", 3, r, STEPS, KIND,
                     (), False, (4, 3), 2.0, 4) for r in range(3)]
    for k in kids:
        assert k.recv(timeout=T)[0] == "joined"
    for k in kids:
        assert k.recv(timeout=T)[0] == "held"
    kids[2].kill()
    new = children("spawn", dp_workers.shrink_trainer, seg.name, "run", 3, 2, STEPS, KIND,
                   (), False, None, 2.0)
    end = time.monotonic() + T
    while members(seg).get(2) != new.pid and time.monotonic() < end:
        time.sleep(0.05)
    assert members(seg).get(2) == new.pid
    for k in kids[:2]:
        k.send("go")
    assert new.recv(timeout=T) == ("joined", 4)
    out = [k.result(timeout=T) for k in kids[:2]] + [new.result(timeout=T)]
    assert [(r, s) for _, r, s in out] == [(0, 3), (1, 3), (2, 3)]
    assert int(seg.open(f"run-{KIND}")["regrouped"].numpy()[0]) == 4
    check_result(seg, children)


def test_five_trainers_lose_three_in_three_steps(seg, children):
    """5 -> 4 -> 3 -> 2, one death per step, in three phases (24 rows: the
    shares of 5 and 4... are uneven)."""
    out = run(children, seg, 5, {4: [(2, "update")], 0: [(4, "commit")], 2: [(6, "reduce")]})
    assert sorted((r, s) for _, r, s in out) == [(0, 2), (1, 2)]
    assert int(seg.open(f"run-{KIND}")["generation"].numpy()[0]) == 3
    check_result(seg, children)


def test_five_trainers_lose_three_in_one_step(seg, children):
    out = run(children, seg, 5, {1: [(3, "update")], 2: [(3, "commit")], 4: [(3, "reduce")]})
    assert sorted((r, s) for _, r, s in out) == [(0, 2), (1, 2)]
    check_result(seg, children)


KILL_RUNS = int(os.environ.get("PDSHM_TORCH_KILL_RUNS", "4"))


@pytest.mark.parametrize("seed", range(1, 1 + KILL_RUNS))
def test_trainers_killed_at_random_instants_with_no_replacement(seg, children, seed):
    """4 trainers; two SIGKILLed from outside at random instants: the first
    once a random step was applied, the second soon after (often inside
    the first's repair).  The seed is in the test's name;
    PDSHM_TORCH_KILL_RUNS=n runs seeds 1..n (4 by default)."""
    rng = np.random.default_rng(seed)
    steps = 60
    seg.root.new_scope(f"run-{KIND}")
    kids = [children("spawn", dp_workers.shrink_trainer, seg.name, "run", 4, r, steps, KIND,
                     (), False, None, 0.2) for r in range(4)]
    for k in kids:
        assert k.recv(timeout=T)[0] == "joined"
    victims = rng.choice(4, 2, replace=False)
    at = int(rng.integers(2, steps - 10))
    scope = seg.open(f"run-{KIND}")
    end = time.monotonic() + T
    while current_step(scope) < at and time.monotonic() < end:
        time.sleep(0.0005)
    kids[victims[0]].kill()
    time.sleep(rng.uniform(0.0, 0.02))
    kids[victims[1]].kill()
    out = [k.result(timeout=T) for i, k in enumerate(kids) if i not in victims]
    assert sorted((r, s) for _, r, s in out) == [(0, 2), (1, 2)]
    check_result(seg, children, steps)


def test_shrink_after_must_be_a_number_of_seconds(seg):
    scope = seg.root.new_scope("bad")
    model = dp_workers.linear_model(torch)
    with seg.group("solo", 1) as g:
        with pytest.raises(ValueError, match="shrink_after"):
            pt.DataParallel(model, scope, g, torch.optim.SGD, lr=0.1, shrink_after=-1.0)
    assert "progress" not in scope  # nothing changed


def final_line(out):
    """(test accuracy, final loss) of train_digits' last line."""
    words = [ln for ln in out.splitlines() if ln.startswith("final test accuracy")][0].split()
    return float(words[3]), float(words[6])


def test_train_digits_with_kills_and_no_replacement_ends_as_without():
    pytest.importorskip("sklearn", reason="sklearn (python3-sklearn) is not installed")
    common = [os.path.join(ROOT, "examples", "train_digits.py"), "--trainers", "3",
              "--batch", "48", "--epochs", "3"]
    outs = [subprocess.run([sys.executable, *common, *more], env=child_env(),
                           capture_output=True, text=True, timeout=240)
            for more in ([], ["--kill", "2", "--seed", "1"])]
    for done in outs:
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    calm, killed = (d.stdout for d in outs)
    assert killed.count("no replacement") == 2, killed
    # the same parameters up to float rounding (the mean of 3 shares or of
    # 1): printed with 4 decimals, a last digit may differ
    (acc, loss), (calm_acc, calm_loss) = final_line(killed), final_line(calm)
    assert calm_acc > 0.8 and abs(acc - calm_acc) <= 1 / 360 and abs(loss - calm_loss) <= 2e-4, \
        (calm, killed)


def test_train_digits_with_churn_ends_as_an_uninterrupted_run():
    """--churn 5: trainers killed (replaced or not) and added at random
    steps; the script trains the same uninterrupted in one process and
    prints both results and the largest parameter difference."""
    pytest.importorskip("sklearn", reason="sklearn (python3-sklearn) is not installed")
    done = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "train_digits.py"),
                           "--trainers", "3", "--batch", "48", "--epochs", "3", "--churn", "5",
                           "--seed", "2"], env=child_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    out = done.stdout
    events = [ln for ln in out.splitlines() if ln.startswith("after step")]
    assert "--churn 5 (seed 2)" in out and len(events) == 5, out
    acc, loss = final_line(out)
    words = [ln for ln in out.splitlines() if ln.startswith("uninterrupted:")][0].split()
    calm_acc, calm_loss, diff = float(words[3]), float(words[6]), float(words[10])
    assert calm_acc > 0.8 and abs(acc - calm_acc) <= 1 / 360 and abs(loss - calm_loss) <= 2e-4
    assert diff < 1e-5, out
