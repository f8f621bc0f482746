#!/usr/bin/python3
"""Reads nvdlfw_inspect statistics logs the way their known readers do, and prints what each found.

    nvdlfw_parsers.py LOG_FILE

Prints one JSON object: {"te": {name: {iteration: value}}, "bionemo": {...}}, from
  - Transformer Engine's test reader (tests/pytorch/debug/run_distributed.py:330, TE d0067d0):
    r".*_{tensor}_{stat}\\s+.*iteration=(\\d+)\\s+.*value=([-+]?\\d*\\.?\\d+)", here with the name
    captured in place of the fixed tensor and stat;
  - BioNeMo's fp8_analysis recipe (bionemo-recipes/recipes/fp8_analysis/
    analyze_and_create_heatmap.py:121, bionemo-framework 3a9d005), verbatim.
The regexes are the facts taken from those sources; the code around them is this project's.
"""
import json
import re
import sys

TE = re.compile(r"^.* - INFO - (.+?)\s+.*iteration=(\d+)\s+.*value=([-+]?\d*\.?\d+)")
BIONEMO = re.compile(r"^\d{4}-\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2},\d{3}\s+-\s+INFO\s+-\s+(.+?)\s+iteration=(\d+)\s+value=([\d.]+)$")


def read(path, pattern, strip):
    found = {}
    with open(path) as f:
        for raw in f:
            line = raw.strip() if strip else raw.rstrip("\n")
            m = pattern.search(line) if not strip else pattern.match(line)
            if m:
                found.setdefault(m.group(1).strip(), {})[int(m.group(2))] = float(m.group(3))
    return found


def main():
    path = sys.argv[1]
    print(json.dumps({"te": read(path, TE, False), "bionemo": read(path, BIONEMO, True)}))


if __name__ == "__main__":
    main()
