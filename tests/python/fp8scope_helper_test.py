#!/usr/bin/python3
"""client/python/fp8scope.py: outside `fp8scope run` it does nothing and says so; on real torch.nn
modules name_modules opens each module's range in forward and in backward, nested as the modules
are, so every GEMM happens under its own module's name (a probe records the innermost range where
each GEMM runs); under `fp8scope run`, a PyTorch training loop whose GEMMs reach cuBLASLt gives the
daemon module-path layer names for fprop, dgrad and wgrad, its steps and its losses. The run starts
its own daemon (--start-daemon), as a user would.

    tests/python/fp8scope_helper_test.py --cli build/cli/fp8scope --fixtures build/tests/fixtures
"""
import argparse
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest
import warnings
from unittest import mock

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import fp8scope  # noqa: E402

CLI = FIXTURES = None  # set by main()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WithoutTheHook(unittest.TestCase):
    def test_everything_is_a_quiet_no_op(self):
        self.assertFalse(fp8scope.available())
        fp8scope.step(3)
        fp8scope.log("loss", 1.5)
        fp8scope.range_push("x")
        fp8scope.range_pop()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.assertEqual(fp8scope.name_modules(object(), use_nvtx=False), [])
        self.assertIn("not loaded", str(caught[0].message))

    def test_bad_arguments_are_refused(self):
        with self.assertRaises(ValueError):
            fp8scope.step(-1)
        for name in ("", "has space", "x" * 64, "naïve"):
            with self.assertRaises(ValueError, msg=name):
                fp8scope.log(name, 1.0)


class Recorder:
    """Stands in for the hook's range stack: what was pushed, in order, and where each GEMM ran."""

    def __init__(self):
        self.stack, self.pushes, self.pops, self.gemms, self.declared = [], [], 0, [], []

    def push(self, label):
        self.pushes.append((label, tuple(self.stack)))
        self.stack.append(label)

    def declare(self, sequence):
        self.declared.append((self.stack[-1], sequence))

    def pop(self):
        assert self.stack, "a range popped that was never pushed"
        self.stack.pop()
        self.pops += 1

    def gemm(self, role, path):
        self.gemms.append((role, path, self.stack[-1] if self.stack else None))


RECORDER = None


class ProbeGemm(torch.autograd.Function):
    """y = x w^T, noting the innermost range at each GEMM the way the hook names it: fprop in
    forward, dgrad (when x needs a gradient) and wgrad in backward."""

    @staticmethod
    def forward(ctx, x, w, path):
        RECORDER.gemm("fprop", path)
        ctx.save_for_backward(x, w)
        ctx.path = path
        return x @ w.t()

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dx = None
        if ctx.needs_input_grad[0]:
            RECORDER.gemm("dgrad", ctx.path)
            dx = dy @ w
        RECORDER.gemm("wgrad", ctx.path)
        return dx, dy.t() @ x, None


class ProbeLinear(torch.nn.Linear):
    def forward(self, x):
        return ProbeGemm.apply(x, self.weight, self.path) + self.bias


class Block(torch.nn.Module):
    """Pre-norm MLP block with a gate that reads the same normalized input as the MLP (as q, k and v
    do), an in-place ReLU and an in-place residual add."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.mlp = torch.nn.Sequential(ProbeLinear(16, 32), torch.nn.ReLU(inplace=True), ProbeLinear(32, 16))
        self.gate = ProbeLinear(16, 16)

    def forward(self, x):
        n = self.norm(x)
        h = self.mlp(n) * torch.sigmoid(self.gate(n))
        h += x
        return h


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = ProbeLinear(8, 16)  # its input needs no gradient: no dgrad, nothing after its wgrad
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = ProbeLinear(16, 4)

    def forward(self, x):
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


class NameModulesOnTorchModules(unittest.TestCase):
    def setUp(self):
        global RECORDER
        RECORDER = Recorder()
        torch.manual_seed(1)
        self.model = Model()
        for name, module in self.model.named_modules():
            module.path = f"model.{name}" if name else "model"
        self.probes = [m.path for m in self.model.modules() if isinstance(m, ProbeLinear)]
        patches = [mock.patch.object(fp8scope, "_hook", object()),
                   mock.patch.object(fp8scope, "range_push", RECORDER.push),
                   mock.patch.object(fp8scope, "range_pop", RECORDER.pop)]
        for p in patches:
            p.start()
            self.addCleanup(p.stop)
        self.x = torch.randn(4, 8)

    def step(self):
        self.model.zero_grad()
        self.model(self.x).square().mean().backward()
        return [p.grad.clone() for p in self.model.parameters()]

    def test_every_gemm_runs_under_its_own_module_in_forward_and_backward(self):
        handles = fp8scope.name_modules(self.model, use_nvtx=False)
        self.assertEqual(len(handles), 2 * len(list(self.model.modules())))
        self.step()
        expected = [("fprop", p, f"{p}/forward") for p in self.probes]
        expected += [("wgrad", p, f"{p}/backward") for p in self.probes]
        expected += [("dgrad", p, f"{p}/backward") for p in self.probes if p != "model.embed"]
        self.assertEqual(sorted(RECORDER.gemms), sorted(expected))
        # Every range closed by the end of the backward pass.
        self.assertEqual(RECORDER.stack, [])
        self.assertEqual(RECORDER.pops, len(RECORDER.pushes))

    def test_ranges_nest_as_the_modules_do(self):
        fp8scope.name_modules(self.model, use_nvtx=False)
        self.step()
        called = {label.rsplit("/", 1)[0] for label, _ in RECORDER.pushes}
        self.assertNotIn("model.blocks", called)  # a ModuleList is never called: no range of its own
        # An in-place module hands its input on as its output: its backward (no GEMM) has no range.
        in_place = {"model.blocks.0.mlp.1", "model.blocks.1.mlp.1"}
        for direction in ("forward", "backward"):
            pushes = [(label.rsplit("/", 1)[0], below) for label, below in RECORDER.pushes
                      if label.endswith("/" + direction)]
            # Each called module once per pass, each after all of its called ancestors and inside them.
            expected = called if direction == "forward" else called - in_place
            self.assertEqual(sorted(path for path, _ in pushes), sorted(expected), direction)
            for path, below in pushes:
                ancestors = [f"{a}/{direction}" for a in called if path.startswith(a + ".") or
                             (a == "model" and path != "model")]
                self.assertTrue(set(ancestors) <= set(below), (path, below))
                if direction == "forward":  # forward nests exactly
                    self.assertEqual(sorted(below), sorted(ancestors), path)

    def test_names_change_no_gradient_and_go_away_with_their_handles(self):
        plain = self.step()
        handles = fp8scope.name_modules(self.model, use_nvtx=False)
        named = self.step()
        one_step = len(RECORDER.pushes)
        for a, b in zip(plain, named):
            self.assertTrue(torch.equal(a, b))
        again = self.step()  # a second step: the same ranges again, all closed
        self.assertEqual(RECORDER.stack, [])
        self.assertEqual(RECORDER.pushes[one_step:], RECORDER.pushes[:one_step])
        self.assertTrue(all(torch.equal(a, b) for a, b in zip(named, again)))
        for h in handles:
            h.remove()
        pushed = len(RECORDER.pushes)
        self.step()
        self.assertEqual(len(RECORDER.pushes), pushed)

    def test_without_gradients_only_forward_ranges(self):
        fp8scope.name_modules(self.model, use_nvtx=False)
        with torch.no_grad():
            self.model(self.x)
        self.assertTrue(RECORDER.pushes)
        self.assertTrue(all(label.endswith("/forward") for label, _ in RECORDER.pushes))
        self.assertEqual(RECORDER.stack, [])


def te_module(cls):
    """`cls` as if Transformer Engine defined it (the helper knows TE's modules by class)."""
    cls.__module__ = "transformer_engine.pytorch.module." + cls.__name__.lower()
    return cls


@te_module
class LayerNormMLP(torch.nn.Module):
    """TE's LayerNormMLP as the helper sees it: no child modules, two GEMMs (fc1, fc2)."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.fc1_weight = torch.nn.Parameter(torch.randn(32, 16))
        self.fc2_weight = torch.nn.Parameter(torch.randn(16, 32))

    def forward(self, x):
        h = torch.relu(ProbeGemm.apply(self.norm(x), self.fc1_weight, "fc1"))
        return ProbeGemm.apply(h, self.fc2_weight, "fc2")


@te_module
class Linear(torch.nn.Linear):
    def forward(self, x):
        return ProbeGemm.apply(x, self.weight, "linear") + self.bias


class TransformerLayer(torch.nn.Module):
    def __init__(self, layer_number):
        super().__init__()
        self.layer_number = layer_number  # as TE's TransformerLayer keeps it
        self.layernorm_mlp = LayerNormMLP()

    def forward(self, x):
        return x + self.layernorm_mlp(x)


class TeModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(8, 16)
        self.layers = torch.nn.ModuleList([TransformerLayer(1), TransformerLayer(2)])
        self.head = Linear(16, 4)
        self.head.name = "output_layer"  # te.Linear(..., name="output_layer")

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


class NameModulesAsTransformerEngineNamesThem(unittest.TestCase):
    def setUp(self):
        global RECORDER
        RECORDER = Recorder()
        torch.manual_seed(1)
        patches = [mock.patch.object(fp8scope, "_hook", object()),
                   mock.patch.object(fp8scope, "range_push", RECORDER.push),
                   mock.patch.object(fp8scope, "range_pop", RECORDER.pop),
                   mock.patch.object(fp8scope, "range_gemms", RECORDER.declare)]
        for p in patches:
            p.start()
            self.addCleanup(p.stop)
        self.model = TeModel()
        fp8scope.name_modules(self.model, use_nvtx=False)
        self.model(torch.randn(4, 8)).square().mean().backward()

    def test_paths_are_nvdlfw_inspects_layer_names(self):
        forward = {label for label, _ in RECORDER.pushes if label.endswith("/forward")}
        # A ModuleList's children by layer_number (TE numbers its layers from 1), a TE module by
        # the name TE gave it.
        self.assertIn("model.layers.1.layernorm_mlp/forward", forward)
        self.assertIn("model.layers.2.layernorm_mlp/forward", forward)
        self.assertIn("output_layer/forward", forward)
        self.assertNotIn("model.layers.0/forward", forward)

    def test_te_modules_declare_their_gemms_in_both_passes(self):
        expected = []
        for layer in ("model.layers.1.layernorm_mlp", "model.layers.2.layernorm_mlp"):
            expected.append((f"{layer}/forward", "fc1/fprop fc2/fprop"))
            expected.append((f"{layer}/backward", "fc2/dgrad fc2/wgrad fc1/dgrad fc1/wgrad"))
        expected += [("output_layer/forward", "/fprop"), ("output_layer/backward", "/dgrad /wgrad")]
        self.assertEqual(sorted(RECORDER.declared), sorted(expected))
        # The order the declarations give is the order the GEMMs ran in each range.
        backward = [(role, path) for role, path, top in RECORDER.gemms if top == "model.layers.1.layernorm_mlp/backward"]
        self.assertEqual(backward, [("dgrad", "fc2"), ("wgrad", "fc2"), ("dgrad", "fc1"), ("wgrad", "fc1")])


class UnderTheHook(unittest.TestCase):
    def test_layer_names_steps_and_losses_reach_the_daemon(self):
        with tempfile.TemporaryDirectory() as tmp:
            endpoint = f"127.0.0.1:{free_port()}"
            data = os.path.join(tmp, "data")
            env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "client", "python"), PYTHONDONTWRITEBYTECODE="1")
            env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
            run = subprocess.run([CLI, "run", "--start-daemon", "--endpoint", endpoint, "--data-dir", data,
                                  "--daemon-metrics", "127.0.0.1:0", "--every",
                                  "1", "--job", "py", "--run", "py1", "--", sys.executable,
                                  os.path.join(HERE, "torch_training.py"), FIXTURES, "3"],
                                 env=env, capture_output=True, text=True, timeout=120)
            ready = os.path.join(data, "fp8scoped.ready.json")
            try:
                self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
                self.assertIn("hook loaded", run.stdout)
                self.assertIn("started fp8scoped", run.stderr)
                layers, checked, losses = self.wait_for_history(os.path.join(data, "history.sqlite"))
                # Each layer's operands in fprop, dgrad (not for fc1, whose input needs no gradient)
                # and wgrad; and the output of its forward GEMM, which the daemon checks.
                gemms = {"fprop": ("x", "w"), "dgrad": ("w", "dy"), "wgrad": ("x", "dy")}
                self.assertEqual(layers, {(f"model.{fc}#0", gemm, op) for fc in ("fc1", "fc2")
                                          for gemm, ops in gemms.items() for op in ops
                                          if not (fc == "fc1" and gemm == "dgrad")})
                self.assertEqual(checked, {"model.fc1#0", "model.fc2#0"})
                self.assertEqual([step for step, _ in losses], [0, 1, 2])
            finally:
                if os.path.exists(ready):
                    with open(ready) as f:
                        os.kill(json.load(f)["pid"], signal.SIGTERM)

    def wait_for_history(self, path, seconds=60):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if os.path.exists(path):
                db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
                try:
                    layers = set(db.execute("SELECT DISTINCT layer, gemm, operand FROM records WHERE run = 'py1'"))
                    checked = {row[0] for row in db.execute("SELECT DISTINCT layer FROM gemm_outputs WHERE run = 'py1'")}
                    losses = list(db.execute("SELECT step, value FROM scalars WHERE run = 'py1' AND name = 'loss' "
                                             "ORDER BY step"))
                    steps = {row[0] for row in db.execute("SELECT DISTINCT step FROM records WHERE run = 'py1'")}
                finally:
                    db.close()
                if len(layers) == 10 and len(checked) == 2 and len(losses) == 3 and steps == {0, 1, 2}:
                    return layers, checked, losses
            time.sleep(0.2)
        self.fail("the daemon's history did not get the run's records and losses in time")


def main():
    global CLI, FIXTURES
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", required=True)
    parser.add_argument("--fixtures", required=True)
    args, rest = parser.parse_known_args()
    CLI, FIXTURES = os.path.abspath(args.cli), os.path.abspath(args.fixtures)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
