#!/usr/bin/python3
"""client/python/fp8scope.py: outside `fp8scope run` it does nothing and says so; under it, a
Python training loop that uses name_modules, step and log gives the daemon module-path layer
names, its steps and its losses. The run starts its own daemon (--start-daemon), as a user would.

    tests/python/fp8scope_helper_test.py --cli build/client/cli/fp8scope --fixtures build/tests/fixtures
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
                                  os.path.join(HERE, "fake_training.py"), FIXTURES, "3"],
                                 env=env, capture_output=True, text=True, timeout=120)
            ready = os.path.join(data, "fp8scoped.ready.json")
            try:
                self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
                self.assertIn("hook loaded", run.stdout)
                self.assertIn("started fp8scoped", run.stderr)
                layers, losses = self.wait_for_history(os.path.join(data, "history.sqlite"))
                # Each layer's operands, and the output of its forward GEMM the daemon checks (y).
                self.assertEqual(layers, {(f"model.{fc}#0", gemm, op) for fc in ("fc1", "fc2")
                                          for gemm, op in (("fprop", "x"), ("fprop", "w"), ("fprop", "y"),
                                                           ("dgrad", "w"), ("dgrad", "dy"))})
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
                    losses = list(db.execute("SELECT step, value FROM scalars WHERE run = 'py1' AND name = 'loss' "
                                             "ORDER BY step"))
                    steps = {row[0] for row in db.execute("SELECT DISTINCT step FROM records WHERE run = 'py1'")}
                finally:
                    db.close()
                if len(layers) == 10 and len(losses) == 3 and steps == {0, 1, 2}:
                    return layers, losses
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
