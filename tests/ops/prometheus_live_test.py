#!/usr/bin/python3
"""End to end: two real fp8scoped ("two nodes" of one job, exporting the same tensors) are fed by
the real `fp8scope push`; a real Prometheus (Debian's package) scrapes both with the project's
scrape config and loads the project's rules; a Prometheus agent started as deploy/fleet says
forwards one daemon's series by remote_write. Then every PromQL expression of the dashboards and
the rules parses, every series it selects has data, every dashboard expression and recording rule
returns data with one series per tensor (not one per daemon), every rule is healthy, the
non-finite alert goes pending, the agent's `node` label is expanded from the environment, and the
daemon's /metrics passes `promtool check metrics`.

    tests/ops/prometheus_live_test.py --daemon build/server/fp8scoped --cli build/cli/fp8scope
"""
import json
import os
import re
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

from ops_sources import ROOT, RULES, expressions, run_tests, selectors

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

    def __init__(self, args, log_path, env=None):
        self.log = open(log_path, "w")
        environment = {k: v for k, v in os.environ.items() if not k.startswith("FP8SCOPE_")}
        environment.update(env or {})
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=environment)

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
    def daemon(cls, name, *extra):
        """Starts one fp8scoped; returns its (gRPC, metrics) addresses."""
        ready = os.path.join(cls.tmp, f"{name}.ready.json")
        cls.processes.append(Process([DAEMON, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--data-dir",
                                      os.path.join(cls.tmp, name), "--ready-file", ready, "--backend", "cpu",
                                      "--log2-histogram-metrics", *extra],
                                     os.path.join(cls.tmp, f"{name}.log")))
        addresses = wait_for(f"{name}'s ready file", lambda: os.path.exists(ready) and read_json(ready))
        return addresses["grpc"], addresses["metrics"]

    @classmethod
    def start(cls):
        # Two nodes of one job. A small sample limit on the first so one push is dropped as
        # too_large (the drop alert needs one).
        cls.grpc, cls.metrics = cls.daemon("node1", "--max-sample-bytes", "65536", "--queue-budget-bytes", "16777216")
        cls.grpc2, cls.metrics2 = cls.daemon("node2")

        # The project's own scrape config and rules; only the targets and the intervals change.
        with open(os.path.join(os.path.dirname(RULES), "prometheus.yml")) as f:
            config = yaml.safe_load(f)
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        config["scrape_configs"][0]["static_configs"] = [{"targets": [cls.metrics, cls.metrics2]}]
        shutil.copy(RULES, cls.tmp)
        with open(os.path.join(cls.tmp, "prometheus.yml"), "w") as f:
            yaml.safe_dump(config, f)
        port = free_port()
        cls.prometheus = f"http://127.0.0.1:{port}"
        cls.processes.append(Process(["/usr/bin/prometheus", "--config.file=" + os.path.join(cls.tmp, "prometheus.yml"),
                                      "--storage.tsdb.path=" + os.path.join(cls.tmp, "tsdb"),
                                      f"--web.listen-address=127.0.0.1:{port}", "--web.enable-remote-write-receiver"],
                                     os.path.join(cls.tmp, "prometheus.log")))
        wait_for("Prometheus to scrape both daemons", lambda: len(cls.query('up{job="fp8scoped"} == 1')) == 2)
        cls.start_agent(port)
        cls.feed(cls.grpc, cls.metrics)
        cls.feed(cls.grpc2, cls.metrics2)
        # Data flows through scrape and rule evaluation: wait for the last link of each chain.
        wait_for("the GEMM output metrics", lambda: len(cls.query("fp8scope_gemm_output_mse")) >= 2)
        wait_for("the recording rules", lambda: cls.query("fp8scope:delayed_scale_lag:max") and
                 cls.query("fp8scope:tensor_resampled:1h == 1"))
        wait_for("the drop to be scraped", lambda: cls.query('fp8scope_samples_dropped_total{reason="too_large"} > 0'))
        wait_for("two scrapes of every series", lambda: cls.query("count_over_time(fp8scope_last_step[5m]) > 1"))

    @classmethod
    def start_agent(cls, central_port):
        """deploy/fleet's agent, started with the command its header documents, its scrape target
        and remote_write URL pointed at this test (the credentials file lives on real nodes)."""
        path = os.path.join(ROOT, "deploy", "fleet", "prometheus-agent.yml")
        with open(path) as f:
            text = f.read()
        command = re.search(r"(?m)^#\s+(prometheus --.*)$", text).group(1).split()
        config = yaml.safe_load(text)
        config["global"]["scrape_interval"] = "1s"
        config["scrape_configs"][0]["static_configs"] = [{"targets": [cls.metrics2]}]
        config["remote_write"][0]["url"] = f"http://127.0.0.1:{central_port}/api/v1/write"
        del config["remote_write"][0]["authorization"]
        with open(os.path.join(cls.tmp, "prometheus-agent.yml"), "w") as f:
            yaml.safe_dump(config, f)
        port = free_port()
        flags = [a.replace("prometheus-agent.yml", os.path.join(cls.tmp, "prometheus-agent.yml")) for a in command[1:]]
        cls.processes.append(Process(["/usr/bin/prometheus", *flags, "--storage.agent.path=" + os.path.join(cls.tmp, "agent"),
                                      f"--web.listen-address=127.0.0.1:{port}"],
                                     os.path.join(cls.tmp, "agent.log"), env={"NODE_NAME": "gpu-node-2"}))

    @classmethod
    def push(cls, endpoint, name, array, layer, operand, step, gemm="fprop", expect_code=0, extra=()):
        path = os.path.join(cls.tmp, f"{name}.npy")
        np.save(path, array)
        r = subprocess.run([CLI, "push", path, "--endpoint", endpoint, "--job", JOB, "--layer", layer,
                            "--operand", operand, "--gemm", gemm, "--step", str(step), *extra],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == expect_code, f"push {name}: exit {r.returncode}\n{r.stdout}{r.stderr}"

    @classmethod
    def feed(cls, endpoint, metrics):
        """A few training steps of a small model, the same on both nodes: one forward GEMM's X and W
        (an activation that grows at the last step, so delayed scaling lags), a gradient with NaN, a
        job's own MXFP8 operand; each step scraped before the next, so Prometheus sees each tensor
        resampled."""
        rng = np.random.default_rng(7)
        w = (rng.standard_normal((32, 64)) * 0.02).astype(np.float32)
        for step in range(1, 5):
            x = rng.standard_normal((16, 64)).astype(np.float32) * (1.0 if step < 4 else 50.0)
            cls.push(endpoint, f"x{step}", x, "blocks.0.mlp.fc1", "x", step)
            cls.push(endpoint, f"w{step}", w, "blocks.0.mlp.fc1", "w", step)
            selector = f'fp8scope_last_step{{instance="{metrics}",layer="blocks.0.mlp.fc1",operand="w"}}'
            wait_for(f"step {step} scraped from {metrics}", lambda: cls.query(f"{selector} == {step}"))
        dy = (rng.standard_normal((16, 32)) * 1e-6).astype(np.float32)
        dy[3, 5] = np.nan
        cls.push(endpoint, "dy", dy, "blocks.0.mlp.fc1", "dy", 4, gemm="wgrad")
        # E4M3 codes of a 16 x 64 tensor and its E8M0 scales, one per 1x32 block, in cuBLASLt's
        # 128x4 tiles (16 rows padded to 128, 2 blocks padded to 4).
        codes = rng.integers(0, 0x7F, size=(16, 64), dtype=np.uint8)
        tiles = np.zeros(128 * 4, np.uint8)
        for row in range(16):
            tiles[row % 32 * 16 + row // 32 * 4: row % 32 * 16 + row // 32 * 4 + 2] = [120, 121]
        np.save(os.path.join(cls.tmp, "scales.npy"), tiles)
        cls.push(endpoint, "mx", codes, "blocks.1.mlp.fc1", "x", 4,
                 extra=("--dtype", "e4m3", "--scale-layout", "vec32_ue8m0", "--scales", os.path.join(cls.tmp, "scales.npy")))
        # A mixture-of-experts layer: four experts' X, each padded to 16 rows past its tokens (the
        # padding zero), one expert routed nothing.
        tokens = [12, 9, 11, 0]
        for expert, routed in enumerate(tokens[:3]):
            x = np.zeros((16, 64), np.float32)
            x[:routed] = rng.standard_normal((routed, 64)).astype(np.float32)
            cls.push(endpoint, f"expert{expert}", x, "blocks.2.mlp.experts", "x", 4,
                     extra=("--expert", str(expert), "--expert-tokens", ",".join(map(str, tokens)),
                            "--valid-rows", str(routed)))
        # A job's own cast, sent with its input as the hook sends a Transformer Engine cast: E4M3
        # codes of values E4M3 holds exactly, under scale 1 (the daemon's code check has data).
        exact = np.array([0.5, -1.0, 1.5, 2.0, -3.0, 448.0, 0.015625, 0.0], np.float32)
        cast_input = np.tile(exact, (16, 8)).astype(np.float32)
        cast_codes = np.tile(np.array([0x30, 0xB8, 0x3C, 0x40, 0xC4, 0x7E, 0x08, 0x00], np.uint8), (16, 8))
        np.save(os.path.join(cls.tmp, "cast_input.npy"), cast_input)
        np.save(os.path.join(cls.tmp, "cast_codes.npy"), cast_codes)
        cls.push(endpoint, "cast", cast_codes, "blocks.3.mlp.fc1", "x", 4,
                 extra=("--dtype", "e4m3", "--scale-inv", "1", "--cast-input", os.path.join(cls.tmp, "cast_input.npy"),
                        "--cast-recipe", "tensor_delayed", "--cast-scale", "1"))
        if endpoint == cls.grpc:  # the first node refuses samples over 64 KiB
            cls.push(endpoint, "too_large", np.ones((64, 512), np.float32), "blocks.1.mlp.fc1", "x", 4, expect_code=3)

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

    def test_one_series_per_tensor_from_two_daemons(self):
        # One per node as scraped (the agent forwards node2's again, with its node label).
        tensor = '{job="%s", layer="blocks.0.mlp.fc1", gemm="fprop", operand="x", node=""}' % JOB
        self.assertEqual(len(self.query("fp8scope_scale_current" + tensor)), 2)
        for rule in ("fp8scope:delayed_scale_lag:max", "fp8scope:delayed_scale_lag:min",
                     "fp8scope:overflow_ratio:max", "fp8scope:cosine_similarity:min"):
            with self.subTest(rule=rule):
                series = self.query(rule + '{job="%s", layer="blocks.0.mlp.fc1", gemm="fprop", operand="x", '
                                           'recipe=~"tensor_delayed|"}' % JOB)
                self.assertEqual(len(series), 1, series)
        nonfinite = self.query("fp8scope:nonfinite_ratio:max > 0")
        self.assertEqual(len(nonfinite), 1, nonfinite)

    def test_fleet_agent_expands_the_node_label(self):
        try:
            series = wait_for("the agent's remote_write", lambda: self.query('fp8scope_build_info{node="gpu-node-2"}'))
        except AssertionError as e:
            with open(os.path.join(self.tmp, "agent.log")) as f:
                raise AssertionError(f"{e}; the agent's log ends:\n{f.read()[-3000:]}") from None
        self.assertEqual(series[0]["metric"]["instance"], self.metrics2)
        self.assertFalse(self.query('{node=~".*NODE_NAME.*"}'))

    def test_exposition_passes_promtool(self):
        text = http_get(f"http://{self.metrics}/metrics")
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


def set_paths(paths):
    global DAEMON, CLI
    DAEMON, CLI = paths["daemon"], paths["cli"]


if __name__ == "__main__":
    run_tests(__doc__, daemon="the built fp8scoped binary", cli="the built fp8scope CLI", set_paths=set_paths)
