#!/usr/bin/env python3
"""The include graph runs down the layers only: every project header a library's sources include
belongs to the library itself or to one the table below lets it use, so no include climbs back up
(the vocabulary at the bottom; kernels, the history and the wire above it; the daemon's stages in
a sample's order; the capture and study paths; the CLI on top). Tests and benchmarks may include
anything.

    include_layers_test.py [--root DIR]
"""
import argparse
import os
import re
import sys

# Library -> the folder its sources and headers live in.
FOLDERS = {
    "vocabulary": "vocabulary",
    "kernels": "kernels",
    "pattern": "pattern",
    "history": "history",
    "te": "te",
    "wire": "proto",
    "ingest": "server/ingest",
    "analysis": "server/analysis",
    "export": "server/export",
    "services": "server/services",
    "daemon": "server/daemon",
    "shm": "client/shm",
    "hook": "client/hook",
    "daemon_client": "client/daemon_client",
    "shipper": "client/shipper",
    "tensorfile": "study/tensorfile",
    "insight": "study/insight",
    "report": "study/report",
    "checkpoint": "study/checkpoint",
    "cli": "cli",
}

# What each library may include besides itself (include/fp8scope/<library>/ ... and the generated
# fp8scope/v1/ as "v1", which only the wire, the services, the clients and the CLI see).
USES = {
    "vocabulary": set(),
    "kernels": {"vocabulary"},
    "pattern": set(),
    "history": {"vocabulary", "kernels", "pattern"},
    "te": {"vocabulary", "kernels", "pattern", "history", "wire", "tensorfile"},
    "wire": {"vocabulary", "kernels", "pattern", "history", "v1"},
    "ingest": {"vocabulary", "kernels", "history", "wire", "v1"},
    "analysis": {"vocabulary", "kernels", "pattern", "ingest", "wire"},
    "export": {"vocabulary", "kernels", "history", "te", "ingest", "analysis"},
    "services": {"vocabulary", "kernels", "pattern", "history", "te", "wire", "v1", "ingest", "analysis", "export"},
    "daemon": {"vocabulary", "kernels", "pattern", "history", "te", "wire", "v1", "ingest", "analysis", "export",
               "services"},
    "shm": {"vocabulary", "wire"},  # the policy's sampling rules, a plain wire header
    "hook": {"vocabulary", "kernels", "pattern", "wire", "shm"},
    "daemon_client": {"vocabulary", "kernels", "history", "wire", "v1"},
    "shipper": {"vocabulary", "kernels", "wire", "v1", "shm", "daemon_client"},
    "tensorfile": {"vocabulary", "kernels"},
    "insight": {"vocabulary", "kernels", "history", "te"},
    "checkpoint": {"vocabulary", "kernels", "pattern", "history", "tensorfile", "insight", "te"},
    "report": {"vocabulary", "kernels", "history", "insight", "checkpoint", "te"},
    "cli": {"vocabulary", "kernels", "pattern", "history", "te", "wire", "v1", "daemon_client", "shipper", "tensorfile",
            "insight", "report", "checkpoint"},
}

# The hook and the shared-memory layout compile the wire's plain headers only (no protobuf in the
# training process).
PLAIN_WIRE = {"fp8scope/wire/sampling_rule.h", "fp8scope/wire/shared_region_protocol.h"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"(fp8scope/([a-z0-9_]+)/[^"]+)"', re.M)


def library_of(path):
    best = None
    for lib, folder in FOLDERS.items():
        if path == folder or path.startswith(folder + "/"):
            if best is None or len(FOLDERS[best]) < len(folder):
                best = lib
    return best


def header_library(root, include, name):
    """The library an include names: fp8scope/<library>/..., with wire's folder spelled "wire"."""
    if name == "v1":
        return "v1"
    for lib, folder in FOLDERS.items():
        if os.path.exists(os.path.join(root, folder, "include", include)):
            return lib
    return None


def violations(root):
    found = []
    for folder in sorted(set(FOLDERS.values())):
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for f in files:
                if not f.endswith((".h", ".cc", ".cu", ".cuh")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                lib = library_of(rel)
                with open(path, encoding="utf-8") as src:
                    text = src.read()
                for m in INCLUDE.finditer(text):
                    include, name = m.group(1), m.group(2)
                    target = header_library(root, include, name)
                    if target is None:
                        found.append(f"{rel}: includes {include}, which no library has")
                    elif target == lib:
                        continue
                    elif lib in ("hook", "shm") and target == "wire" and include not in PLAIN_WIRE:
                        found.append(f"{rel}: {lib} includes {include}: only the wire's plain headers")
                    elif target not in USES[lib]:
                        found.append(f"{rel}: {lib} includes {include} ({target}), which it may not use")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    missing = [folder for folder in FOLDERS.values() if not os.path.isdir(os.path.join(root, folder))]
    found = violations(root)
    for line in found:
        print(line)
    # A table entry whose folder moved would check nothing: the folders must exist (checkpoint's
    # may come later, and is checked once it does).
    for folder in missing:
        if folder != "study/checkpoint":
            print(f"no folder {folder}: the table is out of date")
            found.append(folder)
    print(f"{len(found)} upward or unlisted includes")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
