#!/usr/bin/python3
"""End to end: the real fp8scoped is fed by the real `fp8scope push`, a real Prometheus (Debian's
package) scrapes it with the project's scrape config and loads the project's rules, and then every
PromQL expression of the dashboards and the rules parses, every series it selects has data, every
dashboard expression and recording rule returns data, the non-finite alert goes pending, and the
daemon's /metrics passes `promtool check metrics`.

    tests/ops/prometheus_live_test.py --daemon build/server/fp8scoped --cli build/client/cli/fp8scope
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

import numpy as np
import yaml

from ops_sources import RULES, expressions, selectors

DAEMON = CLI = None  # set by main()
DEADLINE_SECONDS = 120
JOB = "livetest"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def read_json(path):
    with open(path) as f:
        return json.load(f)


def wait_for(what, probe, seconds=DEADLINE_SECONDS):
    """Polls probe() until it returns something truthy; fails with `what` at the deadline."""
    deadline = time.monotonic() + seconds
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except (OSError, ValueError, KeyError) as e:
            last_error = e
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what} (last error: {last_error})")


class Process:
    """A child process stopped by PID with SIGTERM (SIGKILL after a grace period)."""

    def __init__(self, args, log_path):
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={k: v for k, v in os.environ.items() if not k.startswith("FP8SCOPE_")})

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


class LivePrometheus(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="fp8scope-live-")
        cls.processes = []
        try:
            cls.start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        codes = [p.stop() for p in reversed(cls.processes)]
        if all(code == 0 for code in codes):
            shutil.rmtree(cls.tmp, ignore_errors=True)
        else:
            print(f"logs kept in {cls.tmp}", file=sys.stderr)

    @classmethod
    def start(cls):
        ready = os.path.join(cls.tmp, "ready.json")
        # A small sample limit so one push is dropped as too_large (the drop alert needs one).
        cls.processes.append(Process([DAEMON, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--data-dir",
                                      os.path.join(cls.tmp, "data"), "--ready-file", ready, "--backend", "cpu",
                                      "--max-sample-bytes", "65536", "--queue-budget-bytes", "16777216"],
                                     os.path.join(cls.tmp, "fp8scoped.log")))
        addresses = wait_for("fp8scoped's ready file", lambda: os.path.exists(ready) and read_json(ready))
        cls.grpc, cls.metrics = addresses["grpc"], addresses["metrics"]

        # The project's own scrape config and rules; only the target and the intervals change.
        with open(os.path.join(os.path.dirname(RULES), "prometheus.yml")) as f:
            config = yaml.safe_load(f)
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        config["scrape_configs"][0]["static_configs"] = [{"targets": [cls.metrics]}]
        shutil.copy(RULES, cls.tmp)
        with open(os.path.join(cls.tmp, "prometheus.yml"), "w") as f:
            yaml.safe_dump(config, f)
        port = free_port()
        cls.prometheus = f"http://127.0.0.1:{port}"
        cls.processes.append(Process(["/usr/bin/prometheus", "--config.file=" + os.path.join(cls.tmp, "prometheus.yml"),
                                      "--storage.tsdb.path=" + os.path.join(cls.tmp, "tsdb"),
                                      f"--web.listen-address=127.0.0.1:{port}"],
                                     os.path.join(cls.tmp, "prometheus.log")))
        wait_for("Prometheus to scrape fp8scoped", lambda: cls.query('up{job="fp8scoped"} == 1'))
        cls.feed()
        # Data flows through scrape and rule evaluation: wait for the last link of each chain.
        wait_for("the GEMM output metrics", lambda: cls.query("fp8scope_gemm_output_mse"))
        wait_for("the recording rule", lambda: cls.query("fp8scope:delayed_scale_lag:ratio"))
        wait_for("the drop to be scraped", lambda: cls.query('fp8scope_samples_dropped_total{reason="too_large"} > 0'))
        wait_for("two scrapes of every series", lambda: cls.query("count_over_time(fp8scope_last_step[5m]) > 1"))

    @classmethod
    def push(cls, name, array, layer, operand, step, gemm="fprop", expect_code=0, extra=()):
        path = os.path.join(cls.tmp, f"{name}.npy")
        np.save(path, array)
        r = subprocess.run([CLI, "push", path, "--endpoint", cls.grpc, "--job", JOB, "--layer", layer,
                            "--operand", operand, "--gemm", gemm, "--step", str(step), *extra],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == expect_code, f"push {name}: exit {r.returncode}\n{r.stdout}{r.stderr}"

    @classmethod
    def feed(cls):
        """A few training steps of a small model: one forward GEMM's X and W (an activation that grows
        at the last step, so delayed scaling lags), a gradient with NaN, an over-sized sample."""
        rng = np.random.default_rng(7)
        w = (rng.standard_normal((32, 64)) * 0.02).astype(np.float32)
        for step in range(1, 5):
            x = rng.standard_normal((16, 64)).astype(np.float32) * (1.0 if step < 4 else 50.0)
            cls.push(f"x{step}", x, "blocks.0.mlp.fc1", "x", step)
            cls.push(f"w{step}", w, "blocks.0.mlp.fc1", "w", step)
        dy = (rng.standard_normal((16, 32)) * 1e-6).astype(np.float32)
        dy[3, 5] = np.nan
        cls.push("dy", dy, "blocks.0.mlp.fc1", "dy", 4, gemm="wgrad")
        # A job's own MXFP8 operand: E4M3 codes of a 16 x 64 tensor and its E8M0 scales, one per
        # 1x32 block, in cuBLASLt's 128x4 tiles (16 rows padded to 128, 2 blocks padded to 4).
        codes = rng.integers(0, 0x7F, size=(16, 64), dtype=np.uint8)
        tiles = np.zeros(128 * 4, np.uint8)
        for row in range(16):
            tiles[row % 32 * 16 + row // 32 * 4: row % 32 * 16 + row // 32 * 4 + 2] = [120, 121]
        np.save(os.path.join(cls.tmp, "scales.npy"), tiles)
        cls.push("mx", codes, "blocks.1.mlp.fc1", "x", 4,
                 extra=("--dtype", "e4m3", "--scale-layout", "vec32_ue8m0", "--scales", os.path.join(cls.tmp, "scales.npy")))
        cls.push("too_large", np.ones((64, 512), np.float32), "blocks.1.mlp.fc1", "x", 4, expect_code=3)

    @classmethod
    def api(cls, path, **params):
        body = json.loads(http_get(f"{cls.prometheus}/api/v1/{path}?{urllib.parse.urlencode(params)}"))
        if body.get("status") != "success":
            raise ValueError(f"{path} {params}: {body}")
        return body["data"]

    @classmethod
    def query(cls, promql):
        return cls.api("query", query=promql)["result"]

    def test_every_expression_parses_and_selects_series_with_data(self):
        exprs = expressions()
        self.assertGreater(len(exprs), 40)
        for e in exprs:
            with self.subTest(expr=e.origin):
                self.query(e.promql)  # raises unless Prometheus parsed and ran it
                for name, braces in selectors(e.promql):
                    self.assertTrue(self.query(name + braces), f"{e}: {name}{braces} has no data")

    def test_every_dashboard_expression_and_recording_rule_returns_data(self):
        for e in expressions():
            if e.kind in ("panel", "variable", "record"):
                with self.subTest(expr=e.origin):
                    self.assertTrue(self.query(e.promql), f"{e} returned nothing")

    def test_alerts_follow_the_data(self):
        by_alert = {e.origin.split()[-1]: e.promql for e in expressions() if e.kind == "alert"}
        self.assertTrue(self.query(by_alert["FP8NonFiniteValues"]))  # the NaN gradient
        self.assertTrue(self.query(by_alert["FP8ScopeSamplesDropped"]))  # the over-sized sample
        self.assertFalse(self.query(by_alert["FP8ScopeDaemonDown"]))  # it is up
        # Prometheus itself evaluates every rule without error, and the NaN alert goes pending (at
        # the first evaluation after the NaN gradient was scraped).
        def rule_states():
            rules = [r for g in self.api("rules")["groups"] for r in g["rules"]]
            if not all(r["health"] == "ok" for r in rules):
                return None
            states = {r["name"]: r.get("state") for r in rules if r["type"] == "alerting"}
            return states if states["FP8NonFiniteValues"] in ("pending", "firing") else None

        states = wait_for("every rule healthy and FP8NonFiniteValues pending", rule_states)
        self.assertEqual(states["FP8ScopeDaemonDown"], "inactive")

    def test_exposition_passes_promtool(self):
        text = http_get(f"http://{self.metrics}/metrics")
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


def main():
    global DAEMON, CLI
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--daemon", required=True)
    parser.add_argument("--cli", required=True)
    args, rest = parser.parse_known_args()
    DAEMON, CLI = os.path.abspath(args.daemon), os.path.abspath(args.cli)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
