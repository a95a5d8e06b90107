"""pdshm.torch: parameters and optimizer state once in the segment, data-parallel
steps through a trainer group, the same result as one process, a trainer's
death, and the examples."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import pdshm

torch = pytest.importorskip("torch", reason="torch is not installed: pdshm.torch needs it")
import pdshm.torch as pt  # noqa: E402
import dp_workers  # noqa: E402
from procutil import child_env  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
STEPS = 8


_references = {}


def reference(children, kinds, size, steps=STEPS):
    """One process, full batch, torch.optim (in a child: see dp_workers); the
    same arguments, the same result: computed once."""
    key = (tuple(kinds), size, steps)
    if key not in _references:
        out = children("spawn", dp_workers.reference, kinds, steps, size).result(timeout=60)
        _references[key] = {kind: [np.array(p, np.float32) for p in ps]
                            for kind, ps in out.items()}
    return _references[key]


def params_of(seg, scope):
    model = dp_workers.linear_model(torch)
    return [seg.open(scope)[name].numpy().copy() for name, _ in model.named_parameters()]


@pytest.mark.parametrize("size", [1, 2, 3])
def test_data_parallel_equals_one_process_full_batch_for_any_optimizer(seg, children, size):
    """SGD (momentum, nesterov), Adam (torch's and pdshm's), AdamW, RMSprop,
    Adagrad, Adam with a StepLR schedule, gradient accumulation, bfloat16
    autocast: one group runs them all, one scope each."""
    kinds = dp_workers.KINDS
    for kind in kinds:
        seg.root.new_scope(f"run-{kind}")
    kids = [children("spawn", dp_workers.dp_trainer, seg.name, "run", size, r, STEPS, kinds)
            for r in range(size)]
    for k in kids:
        assert k.recv()[0] == "joined"
    assert [k.result(timeout=120) for k in kids] == [[0] * len(kinds)] * size
    want = reference(children, kinds, size)
    for kind in kinds:
        for got, w in zip(params_of(seg, f"run-{kind}"), want[kind]):
            np.testing.assert_allclose(got, w, rtol=2e-5, atol=2e-6, err_msg=kind)
    assert seg.check() == []


@pytest.mark.parametrize("phase, die_step, redone", [
    ("reduce", 4, 1), ("update", 4, 0), ("commit", 4, 0), ("barrier", 4, 0),
    ("commit", 1, 0)])
def test_a_trainer_killed_in_any_phase_is_replaced_and_the_result_is_unchanged(
        seg, children, phase, die_step, redone):
    """torch.optim.Adam under a StepLR schedule: the replacement takes the
    dead rank's slice of the moments, its step count and the schedule from
    the segment."""
    size, victim, kind = 3, 2, "adam-steplr"
    seg.root.new_scope(f"run-{kind}")
    survivors = [children("spawn", dp_workers.dp_trainer, seg.name, "run", size, r, STEPS, [kind])
                 for r in range(size - 1)]
    dying = children("spawn", dp_workers.dying_trainer, seg.name, "run", size, victim, STEPS,
                     kind, die_step, phase)
    dying.proc.join(60)
    assert dying.proc.exitcode == -9, "the trainer did not kill itself"
    replacement = children("spawn", dp_workers.dp_trainer, seg.name, "run", size, victim,
                           STEPS, [kind])
    assert replacement.recv()[0] == "joined"
    assert replacement.result(timeout=60) == [0]
    for k in survivors:
        assert k.recv()[0] == "joined"
        assert k.result(timeout=60) == [redone]
    progress = seg.open(f"run-{kind}")["progress"].numpy()
    assert progress[:, 0].tolist() == [STEPS] * size
    assert progress[victim, 2] == 2  # held by two processes
    for got, want in zip(params_of(seg, f"run-{kind}"), reference(children, [kind], size)[kind]):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    assert seg.check() == []


@pytest.mark.parametrize("phase", ["update", "commit"])
def test_the_only_trainer_killed_mid_step_is_replaced_and_the_result_is_unchanged(
        seg, children, phase):
    """With no peer to have applied the step, a step staged before the death
    is still finished (the values in place may be half written), and one
    not staged is redone from the values in place."""
    kind = "adam-steplr"
    seg.root.new_scope(f"run-{kind}")
    dying = children("spawn", dp_workers.dying_trainer, seg.name, "run", 1, 0, STEPS, kind, 4,
                     phase)
    dying.proc.join(60)
    assert dying.proc.exitcode == -9, "the trainer did not kill itself"
    replacement = children("spawn", dp_workers.dp_trainer, seg.name, "run", 1, 0, STEPS, [kind])
    assert replacement.recv() == ("joined", 4 if phase == "commit" else 3)
    assert replacement.result(timeout=60) == [0]
    for got, want in zip(params_of(seg, f"run-{kind}"), reference(children, [kind], 1)[kind]):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    assert seg.check() == []


def fake_gradients(model, seed):
    """Gradients without a backward pass (see dp_workers)."""
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad.copy_(torch.randn(p.shape, generator=g))


def test_parameters_and_state_are_labelled_once_in_the_scope(seg):
    scope = seg.root.new_scope("one")
    model = dp_workers.linear_model(torch)
    with seg.group("solo", 1) as g:
        dp = pt.DataParallel(model, scope, g, torch.optim.Adam, lr=0.01)
        names = [n for n, _ in model.named_parameters()]
        assert sorted(v.name for v in scope.vars("parameter")) == sorted(names)
        assert [v.name for v in scope.vars("gradient")] == ["gradient.0"]
        w = model[0].weight
        assert w.data_ptr() == torch.from_dlpack(scope["0.weight"]).data_ptr()
        assert w.grad.data_ptr() == torch.from_dlpack(scope["gradient.0"]).data_ptr()
        assert "0.weight.exp_avg" not in scope  # Adam makes its state at its first step
        dp.zero_grad()
        fake_gradients(model, 0)
        before = scope["0.weight"].numpy().copy()
        assert dp.step() is True and dp.steps_done == 1
        assert not np.array_equal(scope["0.weight"].numpy(), before)
        labels = {v.name: v.label for v in scope.vars()}
        assert labels["0.weight.exp_avg"] == labels["0.weight.exp_avg_sq"] == "optimizer"
        # the optimizer's state tensors are views of the segment, where the
        # optimizer goes on updating them; the committed copy is in place
        work = torch.from_dlpack(scope["staged.0.state"])
        state = dp.optimizer.state[dp.optimizer.param_groups[0]["params"][0]]
        lo, hi = work.data_ptr(), work.data_ptr() + work.numel() * work.element_size()
        assert lo <= state["exp_avg"].data_ptr() < hi
        np.testing.assert_array_equal(scope["0.weight.exp_avg"].numpy().ravel(),
                                      state["exp_avg"].numpy())
        assert float(state["step"]) == 1
        fake_gradients(model, 1)
        dp.step()
        np.testing.assert_array_equal(scope["0.weight.exp_avg_sq"].numpy().ravel(),
                                      state["exp_avg_sq"].numpy())
        assert float(state["step"]) == 2
        del dp, state, work


def test_a_new_trainer_of_the_rank_resumes_the_optimizer_and_schedule_from_the_segment(seg):
    """What a replacement does, in one process: a second DataParallel over the
    same scope and rank takes the state, the step count, the settings and
    the schedule from the segment, and goes on as the first would have."""
    scope = seg.root.new_scope("resume")
    sched = dp_workers.step_lr
    with seg.group("solo", 1) as g:
        first = dp_workers.linear_model(torch)
        dp = pt.DataParallel(first, scope, g, torch.optim.AdamW, lr=0.02, scheduler=sched)
        for i in range(4):
            fake_gradients(first, i)
            dp.step()
        saved = dp.optimizer.state_dict()
        assert dp.optimizer.param_groups[0]["lr"] == pytest.approx(0.01)  # halved after 3
        twin = dp_workers.linear_model(torch)  # the same run, out of the segment
        again = torch.optim.AdamW(twin.parameters(), lr=0.02)
        again_sched = sched(again)
        for i in range(4):
            for p, q in zip(twin.parameters(), first.parameters()):
                p.grad = torch.zeros_like(p)
            fake_gradients(twin, i)
            again.step()
            again_sched.step()
        del dp

        second = dp_workers.linear_model(torch)
        dp2 = pt.DataParallel(second, scope, g, torch.optim.AdamW, lr=0.02, scheduler=sched)
        assert dp2.steps_done == 4
        got = dp2.optimizer.state_dict()
        assert got["param_groups"][0]["lr"] == saved["param_groups"][0]["lr"]
        assert dp2.scheduler.last_epoch == 4
        for i, st in saved["state"].items():
            assert float(got["state"][i]["step"]) == float(st["step"]) == 4
            for k in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(got["state"][i][k], st[k])
        for i in range(4, 8):
            fake_gradients(second, i)
            dp2.step()
            fake_gradients(twin, i)
            again.step()
            again_sched.step()
        for p, q in zip(second.parameters(), twin.parameters()):
            torch.testing.assert_close(p.detach(), q.detach(), rtol=2e-6, atol=1e-7)
        del dp2


def test_load_state_dict_goes_into_the_segment_with_the_next_step(seg):
    scope = seg.root.new_scope("loaded")
    with seg.group("solo", 1) as g:
        model = dp_workers.linear_model(torch)
        dp = pt.DataParallel(model, scope, g, torch.optim.SGD, lr=0.1, momentum=0.9)
        fake_gradients(model, 0)
        dp.step()
        sd = dp.optimizer.state_dict()
        sd = {"state": {i: {"momentum_buffer": torch.full_like(st["momentum_buffer"], 2.0)}
                        for i, st in sd["state"].items()},
              "param_groups": [dict(sd["param_groups"][0], lr=0.5)]}
        dp.optimizer.load_state_dict(sd)
        assert dp.optimizer.param_groups[0]["lr"] == 0.5
        before = scope["0.bias"].numpy().copy()
        dp.zero_grad()
        dp.step()  # a zero gradient: the buffer decays by momentum, lr 0.5 applies it
        np.testing.assert_allclose(scope["0.bias.momentum_buffer"].numpy(), 1.8, rtol=1e-6)
        np.testing.assert_allclose(scope["0.bias"].numpy(), before - 0.5 * 1.8, rtol=1e-6)
        buf = dp.optimizer.state[dp.optimizer.param_groups[0]["params"][1]]["momentum_buffer"]
        assert buf.data_ptr() != 0 and torch.equal(buf, torch.full_like(buf, 1.8))
        del dp, buf


def test_a_second_trainer_takes_the_parameters_from_the_segment(seg):
    scope = seg.root.new_scope("shared")
    first = dp_workers.linear_model(torch)
    pt.share_parameters(first, scope)
    with torch.no_grad():
        first[0].bias.fill_(3.0)
    torch.manual_seed(5)  # another initialisation: the segment's values win
    second = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    pt.share_parameters(second, scope)
    assert second[0].bias.tolist() == [3.0] * 4
    assert second[0].weight.data_ptr() == first[0].weight.data_ptr()  # one copy of the bytes
    with torch.no_grad():
        second[2].weight.mul_(0)
    assert first[2].weight.abs().sum().item() == 0


def test_a_variable_of_another_shape_is_value_error_and_changes_nothing(seg):
    scope = seg.root.new_scope("clash")
    pt.share_parameters(torch.nn.Linear(3, 2), scope)
    other = torch.nn.Linear(4, 2)
    w = other.weight
    with pytest.raises(ValueError, match="weight"):
        pt.share_parameters(other, scope)
    assert other.weight is w
    assert sorted(v.name for v in scope.vars()) == ["bias", "weight"]


def test_a_parameter_shared_by_two_modules_is_one_variable(seg):
    scope = seg.root.new_scope("tied")
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    model[1].weight = model[0].weight
    shared = pt.share_parameters(model, scope)
    assert [name for name, _ in shared] == ["0.weight", "0.bias", "1.bias"]
    assert model[0].weight is model[1].weight
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "1.bias"]


def test_group_of_another_size_on_the_same_scope_is_value_error(seg):
    scope = seg.root.new_scope("sized")
    with seg.group("a", 1) as g:
        pt.DataParallel(dp_workers.linear_model(torch), scope, g, torch.optim.SGD, lr=0.1)
    with seg.group("b", 2, rank=0) as g:
        model = dp_workers.linear_model(torch)
        w = model[0].weight
        with pytest.raises(ValueError, match="group of 1"):
            pt.DataParallel(model, scope, g, torch.optim.SGD, lr=0.1)
        assert model[0].weight is w  # the module was left alone


@pytest.mark.parametrize("optimizer, kwargs, error", [
    (torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1), {}, TypeError),
    (lambda params: "not an optimizer", {}, TypeError),
    (lambda params: torch.optim.SGD(params[:1], lr=0.1), {}, ValueError),
    (torch.optim.SGD, dict(lr=-1), ValueError),
    (torch.optim.SGD, dict(lr=0.1, no_such_setting=1), TypeError),
    (pt.Adam, dict(lr=0.1, betas=(1.5, 0.9)), ValueError)])
def test_a_bad_optimizer_raises_and_changes_nothing(seg, optimizer, kwargs, error):
    scope = seg.root.new_scope("bad")
    model = dp_workers.linear_model(torch)
    w = model[0].weight
    with seg.group("solo", 1) as g:
        with pytest.raises(error):
            pt.DataParallel(model, scope, g, optimizer, **kwargs)
    assert model[0].weight is w
    assert list(scope.vars()) == []


def test_pdshm_adam_computes_what_torch_adam_does():
    a, b = dp_workers.linear_model(torch), dp_workers.linear_model(torch)
    mine = pt.Adam(a.parameters(), lr=0.01, weight_decay=0.01)
    theirs = torch.optim.Adam(b.parameters(), lr=0.01, weight_decay=0.01)
    for i in range(5):
        for model, opt in ((a, mine), (b, theirs)):
            for p in model.parameters():
                p.grad = torch.zeros_like(p)
            fake_gradients(model, i)
            opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert isinstance(mine, torch.optim.Optimizer) and pt.Adam.__qualname__ == "Adam"
    theirs.load_state_dict(mine.state_dict())  # the same state, by the same names


def run_example(name, *args, timeout=240):
    done = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *args],
                          env=child_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def final_accuracy(out):
    lines = [ln for ln in out.splitlines() if ln.startswith("final test accuracy")]
    assert lines, out
    return float(lines[0].split()[3])


def test_train_digits_with_a_kill_ends_as_without(tmp_path):
    pytest.importorskip("sklearn", reason="sklearn (python3-sklearn) is not installed")
    common = ["--trainers", "2", "--epochs", "2"]
    calm = run_example("train_digits.py", *common)
    killed = run_example("train_digits.py", *common, "--kill-one", "--plot",
                         str(tmp_path / "loss.png"))
    # Whether a survivor redoes a step depends on where the kill lands: a
    # replacement may finish the dead rank's share of the step itself.
    assert "killed trainer 1" in killed, killed
    assert final_accuracy(calm) > 0.8, calm
    assert abs(final_accuracy(killed) - final_accuracy(calm)) <= 0.01, (calm, killed)
    assert sum(ln.startswith("epoch") for ln in killed.splitlines()) == 2
    assert "no recorded loss" not in killed, killed
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fit_a_line_costs_go_down_and_enlists_the_parameters():
    pytest.importorskip("sklearn", reason="sklearn (python3-sklearn) ships the housing data")
    out = run_example("fit_a_line.py", "--trainers", "2", "--passes", "4")
    assert "parameters.create(cost): ['fc.b', 'fc.w']" in out, out
    passes = [ln.split() for ln in out.splitlines() if ln.startswith("pass")]
    assert len(passes) == 4, out
    train = [float(p[4]) for p in passes]
    test = [float(p[7]) for p in passes]
    assert train[-1] < train[0] and test[-1] < test[0], out


def test_importing_pdshm_torch_does_not_import_torch():
    from procutil import run_python
    out = run_python("import sys, pdshm, pdshm.torch\n"
                     "print('torch' in sys.modules)")
    assert out.strip() == "False"


def torchrun_digits(log_dir, *args):
    """Runs examples/torchrun_digits.py ARGS under torchrun (2 workers, at
    most 1 restart); (the run's id, {attempt: local rank 0's stdout})."""
    env = child_env()
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"):
        env.pop(var, None)
    # Debian's torch 1.13 under Python 3.11 cannot parse --redirects 0 or
    # --tee 0 (the defaults); 1 and 2 parse.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "--max_restarts=1", "--redirects", "1", "--tee", "2", "--log_dir", str(log_dir),
           os.path.join(EXAMPLES, "torchrun_digits.py"), *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode and "RendezvousConnectionError" in done.stderr:
        # torchrun's own rendezvous (its TCP store) lost a connection, which a
        # loaded machine makes happen now and then: once more, as a new run,
        # without what the failed one kept
        for run_dir in os.listdir(log_dir):
            try:
                pdshm.unlink("torchrun-" + run_dir.rsplit("_", 1)[0])
            except pdshm.NotFound:
                pass
        shutil.rmtree(log_dir)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"torchrun exited {done.returncode}:\n{done.stderr[-3000:]}"
    (run_dir,) = os.listdir(log_dir)
    outs = {}
    for attempt in os.listdir(os.path.join(log_dir, run_dir)):
        with open(os.path.join(log_dir, run_dir, attempt, "0", "stdout.log")) as f:
            outs[int(attempt.split("_")[1])] = f.read()
    return run_dir.rsplit("_", 1)[0], outs


def test_torchrun_restart_resumes_at_the_step_reached(tmp_path):
    """A worker SIGKILLed at step 40 (mid-epoch): torchrun restarts both,
    which go on from step 40 (the scope kept in the job's segment) and end
    with the accuracy and the parameters of an uninterrupted run; the
    segment is gone after either run."""
    run_id, killed = torchrun_digits(tmp_path / "killed", "--kill-at", "40")
    assert sorted(killed) == [0, 1], killed
    assert "resumed at step 40 (attempt 1)" in killed[1].splitlines(), killed[1]
    assert not os.path.exists(f"/dev/shm/pdshm.torchrun-{run_id}")
    run_id, whole = torchrun_digits(tmp_path / "whole")
    assert sorted(whole) == [0] and "resumed" not in whole[0], whole
    assert not os.path.exists(f"/dev/shm/pdshm.torchrun-{run_id}")
    final = [ln for ln in whole[0].splitlines() if ln.startswith("final test accuracy")]
    assert final and final[0] in killed[1].splitlines(), (whole[0], killed[1])
