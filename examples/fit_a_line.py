#!/usr/bin/env python3
"""Seed 004's program over pdshm: linear regression on the UCI housing data.

    x = layer.data(name="x", size=13)
    y_predict = layer.fc(input=x, size=1, act="linear")
    y = layer.data(name="y", size=1)
    cost = layer.mse(input=y_predict, label=y)
    params = parameters.create(cost)
    trainer = SGD(cost=cost, parameters=params, update_equation=Momentum(momentum=0))
    trainer.train(reader, num_passes, trainers=N)

As the seed asks: a layer creates variables and labels them by purpose
("input", "parameter", "activation", "objective") in one named scope of the
segment, and records its operator as a reader of its inputs and a writer of
its outputs; parameters.create(cost) walks the network back from the cost
through those lists and enlists the variables labelled "parameter".  The
trainers are N processes: each runs the operators (numpy) in a local scope
of its own under the network's scope, where the inputs, activations and
gradients live, while the parameters, found up the scope chain, exist once.
Every step the gradients are averaged through a pdshm trainer group and each
trainer updates its slice of each parameter.

The data: scikit-learn ships the UCI housing set (506 rows, 13 features and
the median value) as sklearn/datasets/data/boston_house_prices.csv; it is
normalised and split as Paddle's uci_housing reader did (each feature
(x - mean) / (max - min), the first 80% of the rows to train, the rest to test).

usage: examples/fit_a_line.py [--trainers N] [--passes N] [--batch N]
"""
import argparse
import multiprocessing
import os

import numpy as np

import pdshm

NET = "fit_a_line"  # the network's named scope
GROUP = "fit_a_line.trainers"


# ---- the data ------------------------------------------------------------------------------

def housing_csv():
    import sklearn.datasets
    return os.path.join(os.path.dirname(sklearn.datasets.__file__), "data",
                        "boston_house_prices.csv")


def load_housing(ratio=0.8):
    """(train, test): rows of 13 normalised features and the price, as uci_housing did."""
    with open(housing_csv()) as f:
        n_rows = int(f.readline().split(",")[0])
        f.readline()  # the column names
        data = np.loadtxt(f, delimiter=",", dtype=np.float64)
    if data.shape != (n_rows, 14):
        raise SystemExit(f"{housing_csv()}: expected {n_rows} rows of 14 columns, "
                         f"got {data.shape}")
    features = data[:, :13]
    data[:, :13] = (features - features.mean(0)) / (features.max(0) - features.min(0))
    cut = int(len(data) * ratio)
    return data[:cut].astype(np.float32), data[cut:].astype(np.float32)


# ---- layers: variables in the network's scope, operators as their readers and writers ----

class Layer:
    """A layer's output variable (its name) and the operator that writes it."""

    def __init__(self, net, name, op, size):
        self.net, self.name, self.op, self.size = net, name, op, size


class Network:
    """The operators by name; the variables are in scope (a named scope)."""

    def __init__(self, scope):
        self.scope, self.ops = scope, {}

    def declare(self, name, label):
        var = self.scope.var(name)
        if var.label != label:
            var.label = label
        return var

    def add_op(self, op):
        self.ops[op.name] = op
        for name in op.inputs:
            self.scope[name].add_reader(op.name)
        for name in op.outputs:
            self.scope[name].add_writer(op.name)
        return op


class Op:
    """An operator: reads its inputs, writes its outputs (names of variables)."""

    def __init__(self, name, inputs, outputs):
        self.name, self.inputs, self.outputs = name, list(inputs), list(outputs)


class FC(Op):
    """out = x @ w + b (act "linear" only: the seed's program needs no other)."""

    def forward(self, env):
        x, w, b = (env.get(n) for n in self.inputs)
        env.put(self.outputs[0], x @ w + b)

    def backward(self, env):
        x, w, _ = (env.get(n) for n in self.inputs)
        dout = env.grad(self.outputs[0])
        env.put_grad(self.inputs[1], x.T @ dout)
        env.put_grad(self.inputs[2], dout.sum(0))
        env.put_grad(self.inputs[0], dout @ w.T)


class MSE(Op):
    """cost = mean over the batch of (prediction - label)^2."""

    def forward(self, env):
        p, y = (env.get(n) for n in self.inputs)
        env.put(self.outputs[0], np.array([((p - y) ** 2).sum(1).mean()], np.float32))

    def backward(self, env):
        p, y = (env.get(n) for n in self.inputs)
        env.put_grad(self.inputs[0], 2.0 * (p - y) / len(p))


class layer:  # noqa: N801  (the seed's spelling: paddle.layer.xxx)
    net = None  # the Network being described

    @staticmethod
    def data(name, size):
        layer.net.declare(name, "input")
        return Layer(layer.net, name, None, size)

    @staticmethod
    def fc(input, size, act="linear", name="fc"):
        if act != "linear":
            raise ValueError(f"act {act!r}: only \"linear\" is implemented")
        net, n_in = layer.net, input.size
        w, b, out = f"{name}.w", f"{name}.b", f"{name}.out"
        rng = np.random.default_rng(len(net.ops))
        for pname, init in ((w, lambda: rng.normal(0, 1 / np.sqrt(n_in), (n_in, size))),
                            (b, lambda: np.zeros(size))):
            var = net.declare(pname, "parameter")
            with var.lock():
                if var.dtype is None:  # the first process to get here initialises it
                    var.assign(init().astype(np.float32))
        net.declare(out, "activation")
        return Layer(net, out, net.add_op(FC(f"{name}.op", [input.name, w, b], [out])), size)

    @staticmethod
    def mse(input, label, name="mse"):
        net = layer.net
        net.declare(f"{name}.cost", "objective")
        return Layer(net, f"{name}.cost",
                     net.add_op(MSE(f"{name}.op", [input.name, label.name], [f"{name}.cost"])), 1)


class parameters:  # noqa: N801
    @staticmethod
    def create(cost):
        """The names of the variables labelled "parameter" that the cost depends
        on: found by walking back from it through writers and readers."""
        net, found, todo, seen = cost.net, [], [cost.name], set()
        while todo:
            var = net.scope[todo.pop()]
            if var.name in seen:
                continue
            seen.add(var.name)
            if var.label == "parameter":
                found.append(var.name)
            for op_name in var.writers:
                todo.extend(net.ops[op_name].inputs)
        return sorted(found)


class Momentum:
    def __init__(self, momentum=0.0, learning_rate=0.01):
        self.momentum, self.learning_rate = momentum, learning_rate


# ---- running it: a trainer's local scope ------------------------------------------------

class Env:
    """Values of one trainer's step: inputs, activations and gradients in its
    own local scope, parameters found up the chain (the network's scope)."""

    def __init__(self, local):
        self.local = local

    def get(self, name):
        return self.local.find_var(name).numpy()

    def put(self, name, value):
        self.local.var(name).assign(np.ascontiguousarray(value, np.float32))

    def grad(self, name):
        return self.local.var(name + "@GRAD").numpy()

    def put_grad(self, name, value):
        self.put(name + "@GRAD", value)


def topological(net, cost):
    """The operators that the cost needs, each after the writers of its inputs."""
    order, seen = [], set()

    def visit(name):
        for op_name in net.scope[name].writers:
            if op_name not in seen:
                seen.add(op_name)
                for inp in net.ops[op_name].inputs:
                    visit(inp)
                order.append(net.ops[op_name])
    visit(cost.name)
    return order


def describe(scope):
    """The seed's program; returns the cost layer."""
    layer.net = Network(scope)
    x = layer.data(name="x", size=13)
    y_predict = layer.fc(input=x, size=1, act="linear")
    y = layer.data(name="y", size=1)
    return layer.mse(input=y_predict, label=y)


class SGD:
    """trainer.SGD: N processes, gradients averaged through a pdshm group."""

    def __init__(self, cost, parameters, update_equation):
        self.cost, self.params, self.opt = cost, parameters, update_equation

    def train(self, seg_name, num_passes, batch, trainers):
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=run_trainer, args=(seg_name, r, trainers, num_passes, batch,
                                                       self.opt.learning_rate, self.opt.momentum))
                 for r in range(trainers)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode for p in procs):
            raise SystemExit(f"a trainer failed: exit codes {[p.exitcode for p in procs]}")


def run_trainer(seg_name, rank, size, passes, batch, lr, momentum):
    train, test = load_housing()
    with pdshm.attach(seg_name) as seg, seg.group(GROUP, size, rank=rank) as group:
        net_scope = seg.open(NET)
        cost = describe(net_scope)
        params = parameters.create(cost)
        ops = topological(layer.net, cost)
        with net_scope.local() as local:
            env = Env(local)
            shards = {}
            for name in params:
                n = net_scope[name].numpy().size
                shards[name] = (n * rank // size, n * (rank + 1) // size)
            share = batch // size
            for pass_id in range(passes):
                order = np.random.default_rng(pass_id).permutation(len(train))
                costs = []
                for start in range(0, len(train) - batch + 1, batch):
                    rows = train[order[start + rank * share:start + (rank + 1) * share]]
                    env.put("x", rows[:, :13])
                    env.put("y", rows[:, 13:])
                    for op in ops:
                        op.forward(env)
                    env.put_grad(cost.name, np.ones(1))
                    for op in reversed(ops):
                        op.backward(env)
                    for name in params + [cost.name]:  # the mean over the group
                        group.allreduce(local.var(name + "@GRAD" if name in params else name),
                                        op="mean", timeout=60.0)
                    costs.append(float(env.get(cost.name)[0]))
                    for name in params:  # my slice of each parameter
                        lo, hi = shards[name]
                        p = net_scope[name].numpy().reshape(-1)
                        g = env.grad(name).reshape(-1)
                        vel = local.var(name + "@VELOCITY")
                        if vel.dtype is None:
                            vel.assign(np.zeros_like(p))
                        v = vel.numpy()
                        v[lo:hi] = momentum * v[lo:hi] + g[lo:hi]
                        p[lo:hi] -= lr * v[lo:hi]
                    group.barrier(timeout=60.0)
                if rank == 0:
                    env.put("x", test[:, :13])
                    env.put("y", test[:, 13:])
                    for op in ops:
                        op.forward(env)
                    print(f"pass {pass_id:3d}  train cost {np.mean(costs):8.3f}  "
                          f"test cost {env.get(cost.name)[0]:8.3f}", flush=True)
                # no barrier: nobody writes a parameter before rank 0 joins the next reduction


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--passes", type=int, default=30)
    ap.add_argument("--batch", type=int, default=20, help="global batch (rows per step)")
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args(argv)
    if args.trainers < 1 or args.batch % args.trainers:
        ap.error("--trainers must be >= 1 and divide --batch")
    train, test = load_housing()
    print(f"UCI housing: {len(train)} training rows, {len(test)} test rows, 13 features; "
          f"{args.trainers} trainers, global batch {args.batch}")
    seg_name = f"fit-a-line-{os.getpid()}"
    with pdshm.create(seg_name, size=16 << 20) as seg:
        try:
            cost = describe(seg.root.new_scope(NET))
            params = parameters.create(cost)
            print(f"parameters.create(cost): {params}")
            for var in seg.open(NET).vars():
                print(f"  {var.name:14s} {var.label:10s} readers {var.readers} "
                      f"writers {var.writers}")
            trainer = SGD(cost=cost, parameters=params,
                          update_equation=Momentum(momentum=0, learning_rate=args.lr))
            trainer.train(seg_name, args.passes, args.batch, args.trainers)
            w = seg.open(NET)["fc.w"].numpy().reshape(-1)
            print("fc.w:", np.array2string(w, precision=2, max_line_width=120))
        finally:
            pdshm.unlink(seg_name)


if __name__ == "__main__":
    main()
