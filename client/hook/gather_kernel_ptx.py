#!/usr/bin/python3
"""The gather kernel's PTX, which the hook embeds (capture.cc loads it with cuModuleLoadData).

    gather_kernel_ptx.py --nvcc NVCC --write          # regenerate gather_kernel.ptx from gather_kernel.cu
    gather_kernel_ptx.py --nvcc NVCC --ptxas PTXAS --check
    gather_kernel_ptx.py --check-sources              # no nvcc: the PTX was written from today's sources

The PTX is committed, so the hook builds without nvcc. nvcc 13 writes `.version 9.0`, which only a
CUDA 13 driver's JIT accepts; the kernel uses nothing newer than PTX ISA 7.0 (CUDA 11.0), so the
version is lowered to 7.0 and any driver since CUDA 11 loads it. --check assembles the committed
PTX for every architecture fp8scope builds for (and Turing and Blackwell) with ptxas, and, when
this nvcc is the one that wrote the committed file, checks that it still writes exactly that.

--write records in the PTX a SHA-256 of the sources it was compiled from (gather_kernel.cu and the
project headers it includes, found by following its quoted includes), and --check-sources, which
needs no CUDA compiler, fails when they no longer hash to it: a kernel edited without regenerating
its PTX fails every build's tests, with or without nvcc.
"""
import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "gather_kernel.cu")
COMMITTED = os.path.join(HERE, "gather_kernel.ptx")
# The scale tensor size rule, and the graph kernels' arguments.
INCLUDES = [os.path.join(HERE, "..", "..", "kernels", "include"), os.path.join(HERE, "include")]
ISA = "7.0"
ARCHITECTURES = ["sm_75", "sm_89", "sm_90", "sm_100"]
ENTRIES = ["fp8scope_gather", "fp8scope_gather_scales", "fp8scope_plan_copy", "fp8scope_plan_set", "fp8scope_plan_gather"]
DIGEST_LINE = "// fp8scope sources sha256 "


def sources():
    """gather_kernel.cu and every project header it reaches through quoted includes, sorted."""
    found, todo = set(), [SOURCE]
    while todo:
        path = todo.pop()
        if path in found:
            continue
        found.add(path)
        for name in re.findall(r'(?m)^\s*#\s*include\s+"([^"]+)"', open(path).read()):
            headers = [os.path.normpath(os.path.join(d, name)) for d in INCLUDES]
            headers = [h for h in headers if os.path.exists(h)]
            if not headers:
                sys.exit(f"gather_kernel_ptx: {path} includes {name}, which is under none of {INCLUDES}")
            todo.append(headers[0])
    return sorted(found)


def sources_digest():
    h = hashlib.sha256()
    root = os.path.normpath(os.path.join(HERE, "..", ".."))
    for path in sources():
        h.update(os.path.relpath(path, root).encode() + b"\0" + open(path, "rb").read() + b"\0")
    return h.hexdigest()


def recorded_digest(text):
    match = re.search("(?m)^" + re.escape(DIGEST_LINE) + "([0-9a-f]{64})$", text)
    return match.group(1) if match else None


def generate(nvcc):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "gather_kernel.ptx")
        includes = [arg for d in INCLUDES for arg in ("-I", d)]
        subprocess.run([nvcc, "-ptx", "-arch=compute_75", "-O3", *includes, SOURCE, "-o", out], check=True)
        text = open(out).read()
    lowered, n = re.subn(r"(?m)^\.version \d+\.\d+$", f".version {ISA}", text)
    if n != 1:
        sys.exit("gather_kernel_ptx: nvcc wrote no .version line")
    return f"{DIGEST_LINE}{sources_digest()}\n" + lowered


def toolkit_line(text):
    match = re.search(r"(?m)^// Cuda compilation tools, release .*$", text)
    return match.group(0) if match else ""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nvcc")
    parser.add_argument("--ptxas")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--check-sources", action="store_true")
    args = parser.parse_args()
    if args.check_sources:
        recorded, now = recorded_digest(open(COMMITTED).read()), sources_digest()
        if recorded != now:
            names = ", ".join(os.path.relpath(p, HERE) for p in sources())
            sys.exit(f"{COMMITTED} was written from other sources than today's ({names}): "
                     f"recorded {recorded}, now {now}; run gather_kernel_ptx.py --nvcc NVCC --write and commit it")
        print(f"{COMMITTED}: written from today's sources ({now[:16]}...)")
        return
    if not args.nvcc:
        parser.error("--write and --check need --nvcc")
    if args.write:
        open(COMMITTED, "w").write(generate(args.nvcc))
        print(f"wrote {COMMITTED}")
        return
    committed = open(COMMITTED).read()
    entries = [e for e in ENTRIES if f".entry {e}(" not in committed]
    if f".version {ISA}" not in committed or entries:
        sys.exit(f"{COMMITTED}: expected PTX ISA {ISA} with the entries {', '.join(ENTRIES)}")
    for arch in ARCHITECTURES:
        with tempfile.TemporaryDirectory() as tmp:
            result = subprocess.run([args.ptxas, f"-arch={arch}", COMMITTED, "-o", os.path.join(tmp, "k.cubin")],
                                    capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"ptxas -arch={arch} refused {COMMITTED}:\n{result.stderr}")
    fresh = generate(args.nvcc)
    if toolkit_line(fresh) == toolkit_line(committed) and fresh != committed:
        sys.exit(f"{COMMITTED} is not what {args.nvcc} writes from gather_kernel.cu: run with --write and commit it")
    print(f"{COMMITTED}: assembles for {', '.join(ARCHITECTURES)}"
          + ("" if toolkit_line(fresh) == toolkit_line(committed) else " (written by another nvcc: not compared)"))


if __name__ == "__main__":
    main()
