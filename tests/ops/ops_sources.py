"""What the ops tests read: every PromQL expression the project ships (Grafana panels and template
variables, recording rules, alerts), the series selectors inside them, and the daemon's metrics table."""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import unittest

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DASHBOARDS = sorted(glob.glob(os.path.join(ROOT, "dashboards", "grafana", "*.json")))
RULES = os.path.join(ROOT, "dashboards", "prometheus", "fp8scope-rules.yml")

# Values for the dashboards' variables when an expression runs outside Grafana: every series.
VARIABLES = {"$instance": ".*", "$node": ".*", "$job": ".*", "$layer": ".*", "$gemm": ".*", "$operand": ".*", "$recipe": "tensor_current"}

SELECTOR = re.compile(r"\b((?:fp8scope[a-z0-9_:]*)|up)\b\s*(\{[^}]*\})?")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"')
GROUPING = re.compile(r"\b(?:by|on|without|ignoring|group_left|group_right)\s*\(([^)]*)\)")


class Expr:
    """One shipped expression: where it comes from and its PromQL with variables substituted."""

    def __init__(self, origin, promql, kind):
        self.origin, self.kind = origin, kind  # kind: panel, variable, record, alert
        for name, value in VARIABLES.items():
            promql = promql.replace(name, value)
        self.promql = promql

    def __repr__(self):
        return f"{self.origin}: {self.promql}"


def load_rules():
    with open(RULES) as f:
        return yaml.safe_load(f)


def label_values_selector(query):
    """Grafana's label_values(SELECTOR, LABEL) -> (SELECTOR, LABEL)."""
    m = re.fullmatch(r"label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)", query.strip())
    if not m:
        raise ValueError(f"not a label_values() query: {query}")
    return m.group(1), m.group(2)


def expressions():
    exprs = []
    for path in DASHBOARDS:
        with open(path) as f:
            board = json.load(f)
        name = os.path.basename(path)
        for var in board["templating"]["list"]:
            if var["type"] == "query":
                selector, _ = label_values_selector(var["query"]["query"])
                exprs.append(Expr(f"{name} variable {var['name']}", selector, "variable"))
        for panel in board["panels"]:
            for t in panel.get("targets", []):
                exprs.append(Expr(f"{name} panel '{panel['title']}' {t['refId']}", t["expr"], "panel"))
    for group in load_rules()["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                exprs.append(Expr(f"recording rule {rule['record']}", rule["expr"], "record"))
            else:
                exprs.append(Expr(f"alert {rule['alert']}", rule["expr"], "alert"))
    return exprs


def selectors(promql):
    """[(metric name, '{...}' or '')] of every series selector in an expression."""
    return [(m.group(1), m.group(2) or "") for m in SELECTOR.finditer(promql)]


def matcher_labels(braces):
    return [m.group(1) for m in MATCHER.finditer(braces)]


def grouping_labels(promql):
    labels = []
    for m in GROUPING.finditer(promql):
        labels += [label.strip() for label in m.group(1).split(",") if label.strip()]
    return labels


def recorded_names():
    return {rule["record"] for group in load_rules()["groups"] for rule in group["rules"] if "record" in rule}


def metrics_table(daemon):
    out = subprocess.run([daemon, "--print-metrics-table"], check=True, capture_output=True, text=True).stdout
    return {m["name"]: m for m in json.loads(out)}


def base_metric(name, table):
    """The table row a scraped name belongs to (histograms expose _bucket, _sum and _count)."""
    if name in table:
        return table[name]
    for suffix in ("_bucket", "_sum", "_count"):
        stem = name[: -len(suffix)] if name.endswith(suffix) else None
        if stem and stem in table and table[stem]["type"] == "histogram":
            return table[stem]
    return None


def run_tests(doc, **paths):
    """A test script's main(): reads --NAME PATH for each keyword (its help), then runs the script's
    unittest cases with the remaining arguments. Calls set_paths with {NAME: absolute path} first."""
    set_paths = paths.pop("set_paths")
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, help_text in paths.items():
        parser.add_argument("--" + name, required=True, help=help_text)
    args, rest = parser.parse_known_args()
    set_paths({name: os.path.abspath(getattr(args, name)) for name in paths})
    unittest.main(module="__main__", argv=[sys.argv[0], "-v", *rest])
