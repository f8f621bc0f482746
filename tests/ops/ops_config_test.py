#!/usr/bin/python3
"""Offline checks of what operators deploy: the dashboards and reference docs are what their
generators write; every series a dashboard or rule asks for is one the daemon exports, with
labels it has; promtool accepts the rules (and their unit tests) and the Prometheus configs; the
deploy files parse; every daemon command line they hold is one fp8scoped accepts; the systemd
unit passes `systemd-analyze verify`.

    tests/ops/ops_config_test.py --daemon build/server/fp8scoped
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

from ops_sources import (DASHBOARDS, ROOT, RULES, base_metric, expressions, grouping_labels, matcher_labels,
                         metrics_table, recorded_names, run_tests, selectors)

DAEMON = None  # set by main()
PROMTOOL = shutil.which("promtool")


def run(args, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, **kwargs)


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith("FP8SCOPE_")}


def deploy_path(*parts):
    return os.path.join(ROOT, "deploy", *parts)


def load_all(path):
    with open(path) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


class Generated(unittest.TestCase):
    def test_dashboards_are_what_the_generator_writes(self):
        r = run([sys.executable, os.path.join(ROOT, "dashboards", "generate.py"), "--check"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_reference_docs_and_config_template_are_what_the_daemon_says(self):
        r = run([sys.executable, os.path.join(ROOT, "docs", "generate.py"), "--daemon", DAEMON, "--check"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class Dashboards(unittest.TestCase):
    def test_provisionable_and_templated(self):
        uids = set()
        for path in DASHBOARDS:
            with self.subTest(dashboard=os.path.basename(path)):
                with open(path) as f:
                    board = json.load(f)
                self.assertNotIn(board["uid"], uids)
                uids.add(board["uid"])
                variables = {v["name"]: v for v in board["templating"]["list"]}
                self.assertEqual(variables["datasource"]["type"], "datasource")
                for name in ("instance", "node"):  # many daemons: pick one, or all
                    self.assertIn(name, variables)
                ids = [p["id"] for p in board["panels"]]
                self.assertEqual(len(ids), len(set(ids)))
                for p in board["panels"]:
                    self.assertEqual(p["datasource"]["uid"], "${datasource}", p["title"])
                    self.assertLessEqual(p["gridPos"]["x"] + p["gridPos"]["w"], 24, p["title"])
                    self.assertTrue(p["targets"], p["title"])
                    self.assertTrue(p.get("description"), p["title"])
        self.assertEqual(len(uids), 4)  # overview, layer, GEMM output, daemon health

    def boards(self):
        for path in DASHBOARDS:
            with open(path) as f:
                yield os.path.basename(path), json.load(f)

    def test_ranking_panels_are_instant_and_link_to_the_layer_dashboard(self):
        by_uid = {board["uid"]: board for _, board in self.boards()}
        ranked = 0
        for name, board in self.boards():
            for p in board["panels"]:
                for t in p["targets"]:
                    if not re.match(r"\s*(topk|bottomk)\(", t["expr"]):
                        continue
                    ranked += 1
                    with self.subTest(dashboard=name, panel=p["title"]):
                        # A range query would rank every step on its own and show more than ten bars.
                        self.assertTrue(t.get("instant") and t.get("range") is False)
                        links = p["fieldConfig"]["defaults"].get("links", [])
                        self.assertTrue(links)
                        for link in links:
                            m = re.match(r"/d/([^/]+)/[^?]*\?(.*)", link["url"])
                            self.assertTrue(m, link["url"])
                            target = by_uid[m.group(1)]
                            names = {v["name"] for v in target["templating"]["list"]}
                            for var in re.findall(r"var-(\w+)=", m.group(2)):
                                self.assertIn(var, names)
                            self.assertIn("${__url_time_range}", link["url"])
        self.assertEqual(ranked, 4)
        lowest = [t["expr"] for _, b in self.boards() for p in b["panels"] if p["title"] == "Lowest cosine"
                  for t in p["targets"]]
        self.assertRegex(lowest[0], r"^bottomk\(10, min by")

    def test_magnitudes_and_scales_have_log_axes(self):
        for name, board in self.boards():
            for p in board["panels"]:
                exprs = " ".join(t["expr"] for t in p["targets"])
                if re.search(r"fp8scope_(amax|amin|scale|scale_current)\b|delayed_scale_lag", exprs):
                    with self.subTest(dashboard=name, panel=p["title"]):
                        custom = p["fieldConfig"]["defaults"].get("custom", {})
                        self.assertEqual(custom.get("scaleDistribution", {}).get("type"), "log")

    def test_legends_name_the_tensor(self):
        for name, board in self.boards():
            for p in board["panels"]:
                for t in p["targets"]:
                    if "$layer" not in t["expr"] or t.get("format") == "heatmap":
                        continue
                    with self.subTest(dashboard=name, panel=p["title"], ref=t["refId"]):
                        self.assertIn("{{layer}}", t["legendFormat"])
                        if "$gemm" in t["expr"]:  # a layer's series (an MoE layer's load) has no GEMM to name
                            self.assertTrue("{{gemm}}" in t["legendFormat"] or "fprop" in t["legendFormat"])


class SeriesExist(unittest.TestCase):
    """Every selector names an exported metric (or a recording rule, or `up`) and only its labels."""

    # Labels a scrape adds: the target's address, and the fleet agent's external label.
    SCRAPE_LABELS = {"instance", "node"}

    def labels_of(self, name, table, recorded_labels):
        if name == "up":
            return {"job"} | self.SCRAPE_LABELS
        if name in recorded_labels:
            return recorded_labels[name]
        row = base_metric(name, table)
        self.assertIsNotNone(row, f"{name} is not in fp8scoped --print-metrics-table")
        labels = set(row["labels"]) | self.SCRAPE_LABELS
        if row["type"] == "histogram":
            labels.add("le")
        return labels

    def recorded_labels(self, table):
        """Each recording rule's labels: those it aggregates by, else those of what it reads."""
        recorded = {}
        for e in expressions():
            if e.kind == "record":
                name = e.origin.split()[-1]
                m = re.match(r"\s*(?:max|min|sum|avg|count)\s+by\s*\(([^)]*)\)", e.promql)
                if m:
                    recorded[name] = {label.strip() for label in m.group(1).split(",")}
                else:
                    recorded[name] = set().union(*(self.labels_of(n, table, recorded) for n, _ in selectors(e.promql)))
        return recorded

    def test_rules_keep_only_fp8scopes_labels(self):
        """With many daemons behind one Prometheus, a tensor's rules and alerts must not split (or
        fail to match) by where a series was scraped."""
        recorded = self.recorded_labels(metrics_table(DAEMON))
        for name, labels in recorded.items():
            with self.subTest(rule=name):
                self.assertFalse(labels & self.SCRAPE_LABELS, labels)

    def test_dashboard_variables_filter_every_panel(self):
        table = metrics_table(DAEMON)
        recorded = self.recorded_labels(table)
        for path in DASHBOARDS:
            with open(path) as f:
                board = json.load(f)
            variables = {v["name"] for v in board["templating"]["list"] if v["type"] == "query"}
            # A variable on a dashboard filters something there: none is shown that does nothing.
            text = json.dumps([t["expr"] for p in board["panels"] for t in p["targets"]])
            for var in variables:
                self.assertIn("$" + var, text, f"{os.path.basename(path)}: variable {var} filters no panel")
            for p in board["panels"]:
                for t in p["targets"]:
                    for metric, braces in selectors(t["expr"]):
                        filtered = {m.group(1) for m in re.finditer(r'(\w+)=~"\$(\w+)"', braces) if m.group(1) == m.group(2)}
                        for var in variables & self.labels_of(metric, table, recorded):
                            with self.subTest(dashboard=os.path.basename(path), panel=p["title"], variable=var):
                                self.assertIn(var, filtered, f"{metric}{braces}")

    def test_selectors_and_labels(self):
        table = metrics_table(DAEMON)
        recorded_labels = self.recorded_labels(table)
        self.assertEqual(set(recorded_labels), recorded_names())
        exprs = expressions()
        for e in exprs:
            with self.subTest(expr=e.origin):
                found = selectors(e.promql)
                self.assertTrue(found, f"no series selector in {e}")
                available = set()
                for name, braces in found:
                    labels = self.labels_of(name, table, recorded_labels)
                    available |= labels
                    for label in matcher_labels(braces):
                        self.assertIn(label, labels, f"{e}: {name} has no label {label}")
                for label in grouping_labels(e.promql):
                    self.assertIn(label, available, f"{e}: no series has label {label}")


class Promtool(unittest.TestCase):
    def promtool(self, *args, cwd=None):
        self.assertTrue(PROMTOOL, "promtool not found: scripts/setup.sh installs Debian's prometheus")
        r = run([PROMTOOL, *args], cwd=cwd)
        self.assertEqual(r.returncode, 0, f"promtool {' '.join(args)}:\n{r.stdout}{r.stderr}")
        return r.stdout

    def test_rules_check(self):
        out = self.promtool("check", "rules", RULES)
        self.assertIn("SUCCESS", out)

    def test_rules_unit_tests(self):
        self.promtool("test", "rules", "fp8scope-rules.test.yml", cwd=os.path.dirname(RULES))

    def test_every_alert_is_unit_tested_and_documented(self):
        tests = load_all(os.path.join(os.path.dirname(RULES), "fp8scope-rules.test.yml"))[0]
        tested = {t["alertname"] for case in tests["tests"] for t in case.get("alert_rule_test", [])}
        with open(os.path.join(ROOT, "docs", "alerts.md")) as f:
            anchors = {line[3:].strip().lower() for line in f if line.startswith("## ")}
        for group in load_all(RULES)[0]["groups"]:
            for rule in group["rules"]:
                if "alert" not in rule:
                    continue
                with self.subTest(alert=rule["alert"]):
                    notes = rule["annotations"]
                    self.assertIn(rule["alert"], tested)
                    for key in ("summary", "description", "runbook", "runbook_url"):
                        self.assertTrue(notes.get(key), key)
                    self.assertTrue(notes["runbook_url"].endswith("docs/alerts.md#" + rule["alert"].lower()))
                    self.assertIn(rule["alert"].lower(), anchors)
                    self.assertIn(rule["labels"]["severity"], ("info", "warning", "critical"))
                    # Values read as numbers a person reads: percentages, or humanized / rounded.
                    for key in ("summary", "description"):
                        for use in re.findall(r"\{\{[^}]*\$value[^}]*\}\}", notes[key]):
                            self.assertRegex(use, r"humanize|printf", f"{key}: {use}")
                    # A tensor alert names the whole tensor: job, layer, GEMM and operand.
                    if rule["alert"].startswith("FP8") and not rule["alert"].startswith("FP8Scope"):
                        for label in ("job", "layer", "gemm", "operand"):
                            self.assertIn("$labels." + label, notes["summary"])

    def test_rules_unit_tests_see_two_daemons(self):
        """The unit tests feed series from two daemons, as one Prometheus scraping a multi-node
        job does, so a rule that matched series one-to-one across daemons would fail them."""
        tests = load_all(os.path.join(os.path.dirname(RULES), "fp8scope-rules.test.yml"))[0]
        for case in tests["tests"]:
            instances = {}
            for item in case["input_series"]:
                m = re.match(r"([a-z0-9_]+)\{(.*)\}", item["series"])
                labels = dict(re.findall(r'([a-z0-9_]+)="([^"]*)"', m.group(2)))
                where = (labels.get("instance"), labels.get("node"))
                instances.setdefault(m.group(1), set()).add(where)
            with self.subTest(case=case["name"]):
                self.assertTrue(instances)
                self.assertTrue(any(len(v) >= 2 for v in instances.values()), instances)

    def test_prometheus_configs(self):
        self.promtool("check", "config", os.path.join(os.path.dirname(RULES), "prometheus.yml"))
        # compose mounts the rules beside its config; check it the same way.
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(deploy_path("compose", "prometheus.yml"), tmp)
            shutil.copy(RULES, tmp)
            self.promtool("check", "config", os.path.join(tmp, "prometheus.yml"))
        # The fleet agent's credentials file lives on the node, so only its syntax is checked here.
        self.promtool("check", "config", "--agent", "--syntax-only", deploy_path("fleet", "prometheus-agent.yml"))

    def test_every_scrape_keeps_the_training_jobs_label(self):
        configs = [os.path.join(os.path.dirname(RULES), "prometheus.yml"), deploy_path("compose", "prometheus.yml"),
                   deploy_path("fleet", "prometheus-agent.yml")]
        for path in configs:
            for job in load_all(path)[0]["scrape_configs"]:
                self.assertTrue(job.get("honor_labels"), path)


class DeployFiles(unittest.TestCase):
    def test_every_yaml_and_json_file_parses(self):
        count = 0
        for base in ("deploy", "dashboards"):
            for folder, _, files in os.walk(os.path.join(ROOT, base)):
                for name in files:
                    path = os.path.join(folder, name)
                    if name.endswith((".yml", ".yaml")):
                        self.assertTrue(load_all(path), path)
                        count += 1
                    elif name.endswith(".json"):
                        with open(path) as f:
                            json.load(f)
                        count += 1
        self.assertGreaterEqual(count, 12)

    def test_kubernetes_manifests(self):
        docs = load_all(deploy_path("kubernetes", "fp8scope.yaml"))
        for doc in docs:
            self.assertTrue(doc["apiVersion"] and doc["metadata"]["name"], doc)
        kinds = {doc["kind"]: doc for doc in docs}
        # No token ships: the install steps create the Secret with a random one.
        self.assertEqual(set(kinds), {"Namespace", "ConfigMap", "DaemonSet", "Service", "ServiceMonitor"})
        with open(deploy_path("kubernetes", "fp8scope.yaml")) as f:
            self.assertRegex(f.read(), r"kubectl -n fp8scope create secret generic fp8scope-token --from-literal=token=")
        pod = kinds["DaemonSet"]["spec"]["template"]["spec"]
        self.assertTrue(pod["securityContext"]["runAsNonRoot"])
        self.assertIn({"name": "token", "secret": {"secretName": "fp8scope-token"}}, pod["volumes"])
        # The hostPath kubelet creates as root is handed to the daemon's user before it starts.
        uid = pod["securityContext"]["runAsUser"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        container = pod["containers"][0]
        data = next(m for m in container["volumeMounts"] if m["mountPath"] == "/var/lib/fp8scope")
        self.assertIn("hostPath", volumes[data["name"]])
        init = pod["initContainers"][0]
        self.assertEqual(init["command"], ["chown", f"{uid}:{pod['securityContext']['fsGroup']}", "/var/lib/fp8scope",
                                           "/run/fp8scope"])
        self.assertIn({"name": data["name"], "mountPath": "/var/lib/fp8scope"}, init["volumeMounts"])
        # The shared-memory socket where the systemd unit puts it, on a hostPath training pods mount.
        args = container["args"]
        self.assertEqual(args[args.index("--shared-memory-socket") + 1], "/run/fp8scope/shared-memory.sock")
        run = next(m for m in container["volumeMounts"] if m["mountPath"] == "/run/fp8scope")
        self.assertEqual(volumes[run["name"]]["hostPath"]["path"], "/run/fp8scope")
        self.assertIn({"name": run["name"], "mountPath": "/run/fp8scope"}, init["volumeMounts"])
        self.assertEqual(init["securityContext"]["capabilities"], {"drop": ["ALL"], "add": ["CHOWN"]})
        self.assertFalse(container["securityContext"]["allowPrivilegeEscalation"])
        self.assertEqual(container["readinessProbe"]["httpGet"]["path"], "/health")
        self.assertTrue(kinds["ServiceMonitor"]["spec"]["endpoints"][0]["honorLabels"])
        labels = kinds["DaemonSet"]["spec"]["selector"]["matchLabels"]
        self.assertEqual(kinds["Service"]["spec"]["selector"], labels)

    def test_compose_mounts_what_exists(self):
        compose = load_all(deploy_path("compose", "docker-compose.yml"))[0]
        self.assertEqual(set(compose["services"]), {"token", "fp8scoped", "postgres", "prometheus", "grafana"})
        for service in compose["services"].values():
            for volume in service.get("volumes", []):
                source = volume.split(":")[0]
                if source.startswith("."):
                    self.assertTrue(os.path.exists(deploy_path("compose", source)), volume)
                else:
                    self.assertIn(source, compose["volumes"])

    def test_compose_generates_its_token_at_first_start(self):
        """No token is committed: the token service writes a random one into the volume the daemon
        reads, once. Its script runs here against a directory standing in for the volume."""
        self.assertFalse(os.path.exists(deploy_path("compose", "token")))
        compose = load_all(deploy_path("compose", "docker-compose.yml"))[0]
        daemon, token = compose["services"]["fp8scoped"], compose["services"]["token"]
        self.assertEqual(daemon["depends_on"]["token"], {"condition": "service_completed_successfully"})
        token_file = daemon["command"][daemon["command"].index("--token-file") + 1]
        volume_dir = os.path.dirname(token_file)
        self.assertIn(f"fp8scope-token:{volume_dir}:ro", daemon["volumes"])
        self.assertIn(f"fp8scope-token:{volume_dir}", token["volumes"])
        self.assertEqual(token["entrypoint"][:2], ["/bin/sh", "-c"])
        with tempfile.TemporaryDirectory() as tmp:
            script = token["entrypoint"][2].replace(volume_dir, tmp)
            path = os.path.join(tmp, os.path.basename(token_file))
            self.assertEqual(run(["/bin/sh", "-c", script]).returncode, 0)
            with open(path) as f:
                first = f.read()
            self.assertRegex(first, r"^[0-9a-f]{64}$")
            self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
            self.assertEqual(run(["/bin/sh", "-c", script]).returncode, 0)  # a restart keeps it
            with open(path) as f:
                self.assertEqual(f.read(), first)
        with tempfile.TemporaryDirectory() as tmp:  # another machine gets another token
            run(["/bin/sh", "-c", token["entrypoint"][2].replace(volume_dir, tmp)])
            with open(os.path.join(tmp, os.path.basename(token_file))) as f:
                self.assertNotEqual(f.read(), first)

    def test_container_runs_as_non_root(self):
        with open(deploy_path("container", "Dockerfile")) as f:
            text = f.read()
        stages = re.findall(r"^FROM\s+\S+(?:\s+AS\s+(\S+))?", text, re.M)
        self.assertEqual(len(stages), 2)  # build, runtime
        self.assertRegex(text, r"(?m)^FROM nvidia/cuda:\S+-runtime-")
        self.assertRegex(text, r"(?m)^USER (?!root|0\b)\S+")
        self.assertIn('ENTRYPOINT ["fp8scoped"]', text)


class DaemonCommandLines(unittest.TestCase):
    """Each command line a deploy file gives fp8scoped is accepted by the built daemon."""

    def accepts(self, args, where):
        r = run([DAEMON, *args, "--print-config"], env=clean_env())
        self.assertEqual(r.returncode, 0, f"{where}: fp8scoped {' '.join(args)}\n{r.stderr}")
        return r.stdout

    def test_kubernetes_daemonset_with_its_configmap(self):
        docs = {d["kind"]: d for d in load_all(deploy_path("kubernetes", "fp8scope.yaml"))}
        with tempfile.TemporaryDirectory() as tmp:
            config = os.path.join(tmp, "fp8scoped.toml")
            with open(config, "w") as f:
                f.write(docs["ConfigMap"]["data"]["fp8scoped.toml"])
            args = docs["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]["args"]
            args = [config if a == "/etc/fp8scope/fp8scoped.toml" else a for a in args]
            effective = self.accepts(args, "DaemonSet")
        self.assertIn('listen="0.0.0.0:7767"', effective)
        self.assertIn("queue-budget-bytes=4294967296", effective)  # from the ConfigMap
        # The ConfigMap holds overrides only: a pasted default would silently pin it.
        with open(deploy_path("fp8scoped.toml")) as f:
            defaults = dict(line[2:].split("=", 1) for line in f.read().splitlines() if re.match(r"# [a-z-]+=", line))
        for line in docs["ConfigMap"]["data"]["fp8scoped.toml"].splitlines():
            if line and not line.startswith("#"):
                key, value = line.split("=", 1)
                self.assertNotEqual(defaults[key], value, f"ConfigMap repeats the default of {key}")

    def test_compose_and_container(self):
        compose = load_all(deploy_path("compose", "docker-compose.yml"))[0]
        self.accepts(compose["services"]["fp8scoped"]["command"], "compose")
        with open(deploy_path("container", "Dockerfile")) as f:
            cmd = re.search(r"(?m)^CMD (\[.*\])$", f.read()).group(1)
        self.accepts(json.loads(cmd), "Dockerfile CMD")

    def test_systemd_unit_with_the_config_template(self):
        with open(deploy_path("systemd", "fp8scoped.service")) as f:
            unit = f.read()
        exec_start = re.search(r"(?m)^ExecStart=(.*)$", unit).group(1)
        args = shlex.split(exec_start)[1:]
        args = [deploy_path("fp8scoped.toml") if a == "/etc/fp8scope/fp8scoped.toml" else a for a in args]
        effective = self.accepts(args, "systemd ExecStart")
        self.assertIn('# listen="127.0.0.1:7767"', effective)  # loopback default, not overridden
        for directive in ("NoNewPrivileges=yes", "ProtectSystem=strict", "DynamicUser=yes", "CapabilityBoundingSet=",
                          "SystemCallFilter=@system-service", "UMask=0077", "ProtectProc=invisible", "IPAddressDeny=any",
                          "IPAddressAllow=localhost"):
            self.assertRegex(unit, rf"(?m)^{re.escape(directive)}$")

    def systemd_analyze(self, *args):
        self.assertTrue(shutil.which("systemd-analyze"), "systemd-analyze not found: scripts/setup.sh installs systemd")
        with open(deploy_path("systemd", "fp8scoped.service")) as f:
            unit = f.read().replace("/usr/local/bin/fp8scoped", os.path.abspath(DAEMON))
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "fp8scoped.service")
            with open(path, "w") as f:
                f.write(unit)
            return run(["systemd-analyze", *args, path])

    def test_systemd_analyze_verify(self):
        r = self.systemd_analyze("verify")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("fp8scoped.service:", r.stderr)  # no warning about our unit

    def test_systemd_analyze_security(self):
        # systemd's own exposure score, 0 (locked down) to 10; the unit before hardening scored 3.5.
        r = self.systemd_analyze("security", "--offline=true")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        score = float(re.search(r"Overall exposure level for fp8scoped.service: ([0-9.]+)", r.stdout).group(1))
        self.assertLessEqual(score, 2.0, r.stdout)


def set_paths(paths):
    global DAEMON
    DAEMON = paths["daemon"]


if __name__ == "__main__":
    run_tests(__doc__, daemon="the built fp8scoped binary", set_paths=set_paths)
