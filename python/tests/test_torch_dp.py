"""pdshm.torch: parameters and optimizer state once in the segment, data-parallel
steps through a trainer group, the same result as one process, a trainer's
death, and the examples."""
import os
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


def reference(children, kind, steps=STEPS):
    """One process, full batch, torch.optim (in a child: see dp_workers)."""
    return [np.array(p, np.float32)
            for p in children("spawn", dp_workers.reference, kind, steps).result(timeout=60)]


def run_group(seg, children, size, kind, scope="run"):
    seg.root.new_scope(scope)
    kids = [children("spawn", dp_workers.dp_trainer, seg.name, scope, size, r, STEPS, kind)
            for r in range(size)]
    return kids


def params_of(seg, scope="run"):
    model = dp_workers.linear_model(torch)
    return [seg.open(scope)[name].numpy().copy() for name, _ in model.named_parameters()]


@pytest.mark.parametrize("size, kind", [(1, "sgd"), (2, "sgd"), (3, "sgd"), (1, "adam"),
                                        (2, "adam"), (3, "adam"), (2, "plain-sgd"),
                                        (3, "nesterov")])
def test_data_parallel_equals_one_process_full_batch(seg, children, size, kind):
    kids = run_group(seg, children, size, kind)
    for k in kids:
        assert k.recv()[0] == "joined"
    assert [k.result(timeout=60) for k in kids] == [0] * size
    for got, want in zip(params_of(seg), reference(children, kind)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("phase, redone", [("reduce", 1), ("update", 0), ("commit", 0),
                                           ("barrier", 0)])
def test_a_trainer_killed_in_any_phase_is_replaced_and_the_result_is_unchanged(
        seg, children, phase, redone):
    size, victim, die_step = 3, 2, 4
    seg.root.new_scope("run")
    survivors = [children("spawn", dp_workers.dp_trainer, seg.name, "run", size, r, STEPS, "adam")
                 for r in range(size - 1)]
    dying = children("spawn", dp_workers.dying_trainer, seg.name, "run", size, victim, STEPS,
                     "adam", die_step, phase)
    dying.proc.join(60)
    assert dying.proc.exitcode == -9, "the trainer did not kill itself"
    replacement = children("spawn", dp_workers.dp_trainer, seg.name, "run", size, victim,
                           STEPS, "adam")
    assert replacement.recv()[0] == "joined"
    assert replacement.result(timeout=60) == 0
    for k in survivors:
        assert k.recv()[0] == "joined"
        assert k.result(timeout=60) == redone
    progress = seg.open("run")["progress"].numpy()
    assert progress[:, 0].tolist() == [STEPS] * size
    assert progress[victim, 2] == 2  # held by two processes
    for got, want in zip(params_of(seg), reference(children, "adam")):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_parameters_and_state_are_labelled_once_in_the_scope(seg):
    scope = seg.root.new_scope("one")
    model = dp_workers.linear_model(torch)
    with seg.group("solo", 1) as g:
        dp = pt.DataParallel(model, scope, g, pt.Adam())
        labels = {v.name: v.label for v in scope.vars()}
        names = [n for n, _ in model.named_parameters()]
        assert sorted(v.name for v in scope.vars("parameter")) == sorted(names)
        assert [v.name for v in scope.vars("gradient")] == ["gradient.0"]
        assert labels["0.weight.exp_avg"] == labels["0.weight.exp_avg_sq"] == "optimizer"
        w = model[0].weight
        assert w.data_ptr() == torch.from_dlpack(scope["0.weight"]).data_ptr()
        assert w.grad.data_ptr() == torch.from_dlpack(scope["gradient.0"]).data_ptr()
        dp.zero_grad()
        for p in model.parameters():  # no backward here: see dp_workers
            p.grad.normal_()
        before = scope["0.weight"].numpy().copy()
        assert dp.step() is True and dp.steps_done == 1
        assert not np.array_equal(scope["0.weight"].numpy(), before)


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
        pt.DataParallel(dp_workers.linear_model(torch), scope, g, pt.SGD(lr=0.1))
    with seg.group("b", 2, rank=0) as g:
        model = dp_workers.linear_model(torch)
        w = model[0].weight
        with pytest.raises(ValueError, match="group of 1"):
            pt.DataParallel(model, scope, g, pt.SGD(lr=0.1))
        assert model[0].weight is w  # the module was left alone


@pytest.mark.parametrize("bad", [dict(lr=0), dict(lr=0.1, momentum=-1),
                                 dict(lr=0.1, nesterov=True)])
def test_bad_sgd_settings_are_value_error(bad):
    with pytest.raises(ValueError):
        pt.SGD(**bad)


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
