#!/usr/bin/python3
"""Reads nvdlfw_inspect statistics logs the way their known readers do, and prints what each found.

    nvdlfw_parsers.py LOG_FILE
    nvdlfw_parsers.py --bionemo-dir LOG_DIR

Prints one JSON object: {"te": {name: {iteration: value}}, "bionemo": {...}}, from
  - Transformer Engine's test reader (tests/pytorch/debug/run_distributed.py:330, TE d0067d0):
    r".*_{tensor}_{stat}\\s+.*iteration=(\\d+)\\s+.*value=([-+]?\\d*\\.?\\d+)", here with the name
    captured in place of the fixed tensor and stat;
  - BioNeMo's fp8_analysis recipe (bionemo-recipes/recipes/fp8_analysis/
    analyze_and_create_heatmap.py:121, bionemo-framework 3a9d005), verbatim.
With --bionemo-dir, what BioNeMo's heatmap script reads from the directory it is given and the
rows it would draw: {"bionemo": {...}, "components": [{"group", "identifier", "metric"}]}. The script
reads rank 0's file only (LOG_DIR/rank_0/nvdlfw_inspect_statistics_logs/
nvdlfw_inspect_globalrank-0.log, analyze_and_create_heatmap.py:529) and draws the metrics whose
name holds "gradient_underflows%" (:156-295): each is matched with the first of its component
patterns, one row per encoder layer number (its metric the first that holds "layernorm_qkv", else
the first of that layer), one per head, embedding or unmatched metric. With no such metric it
exits "No components detected!" (:545-547).
The regexes, patterns and literals are the facts taken from those sources; the code around them is
this project's.
"""
import json
import os
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


# (pattern, group, identifier from the match), in the order BioNeMo's script tries them.
BIONEMO_COMPONENTS = [
    (r"\.encoder\.layers\.(\d+)\.", "encoder", lambda m: int(m.group(1))),
    (r"\.layers\.(\d+)\.", "encoder", lambda m: int(m.group(1))),
    (r"\.transformer\.layers\.(\d+)\.", "encoder", lambda m: int(m.group(1))),
    (r"\.lm_head\.dense", "head", lambda m: "Dense"),
    (r"\.lm_head\.decoder", "head", lambda m: "Decoder"),
    (r"\.head\.dense", "head", lambda m: "Dense"),
    (r"\.head\.decoder", "head", lambda m: "Decoder"),
    (r"\.output_layer", "head", lambda m: "Output"),
    (r"\.embeddings?\.", "embedding", lambda m: "Embedding"),
]


def bionemo_components(metrics):
    """The rows BioNeMo's heatmap draws, from metric names in order of first appearance."""
    encoder, others = {}, []
    for metric in (m for m in metrics if "gradient_underflows%" in m):
        for pattern, group, identify in BIONEMO_COMPONENTS:
            m = re.search(pattern, metric)
            if m:
                break
        else:
            group, identify = "unknown", lambda m: "Unknown"
        if group == "encoder":
            encoder.setdefault(identify(m), []).append(metric)
        else:
            others.append({"group": group, "identifier": identify(m), "metric": metric})
    rows = []
    for layer in sorted(encoder):
        qkv = [m for m in encoder[layer] if "layernorm_qkv" in m]
        rows.append({"group": "encoder", "identifier": layer, "metric": (qkv or encoder[layer])[0]})
    order = {"head": 0, "embedding": 1, "unknown": 2}
    return rows + sorted(others, key=lambda r: order[r["group"]])


def main():
    if sys.argv[1] == "--bionemo-dir":
        path = os.path.join(sys.argv[2], "rank_0", "nvdlfw_inspect_statistics_logs", "nvdlfw_inspect_globalrank-0.log")
        found = read(path, BIONEMO, True)
        print(json.dumps({"bionemo": found, "components": bionemo_components(list(found))}))
        return
    path = sys.argv[1]
    print(json.dumps({"te": read(path, TE, False), "bionemo": read(path, BIONEMO, True)}))


if __name__ == "__main__":
    main()
