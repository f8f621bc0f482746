#!/usr/bin/python3
"""The hot paths' benchmarks against the figures the README states: run after changing the ingest
path, the engine or the hook, before the change lands (a hardening once made shared-memory ingest
11x slower and nobody noticed).

    bench_check.py --build DIR [--repetitions N]   # run the benchmarks, print each figure, exit 1 on a regression
    bench_check.py --check-readme                  # no benchmarks: every figure below is the README's

bench/bench_check.tsv lists the figures: the benchmark binary, the filter that runs the row and the
baselines its ratio needs in the same run, the benchmark and counter read, whether more or less is
worse, the figure as the README states it, and the limit past which it counts as regressed (the
README's worst figure with room for a shared machine's noise, or the target where that is looser).
Every ratio is against a baseline measured in the same run of the same binary, so figures from
different machines compare; the CPU's vector ISA is printed beside them.
"""
import argparse
import collections
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "bench", "bench_check.tsv")
README = os.path.join(ROOT, "README.md")

Row = collections.namedtuple("Row", "binary filter benchmark counter worse readme limit what")


def rows():
    out = []
    with open(TABLE, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 8 or fields[4] not in ("more", "less"):
                sys.exit(f"{TABLE}: expected 8 tab-separated fields (worse: more or less), got: {line!r}")
            out.append(Row(*fields[:6], float(fields[6]), fields[7]))
    return out


def check_readme(table):
    with open(README, encoding="utf-8") as f:
        text = f.read()
    missing = [r for r in table if r.readme not in text]
    for r in missing:
        print(f"README.md does not state {r.readme!r} ({r.what}), which {TABLE} compares with")
    return 1 if missing else 0


def cpu_isa():
    flags = ""
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("flags"):
                flags = line
                break
    return "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else "neither AVX2 nor AVX-512"


def run(binary_path, filters, repetitions):
    """{(benchmark, counter): value} from one run of a benchmark binary (its median reporter)."""
    with tempfile.NamedTemporaryFile(mode="r", suffix=".tsv") as counters:
        env = dict(os.environ, FP8SCOPE_BENCH_COUNTERS=counters.name)
        args = [binary_path, "--benchmark_filter=" + "|".join(filters), f"--benchmark_repetitions={repetitions}",
                "--benchmark_report_aggregates_only=true", "--benchmark_color=false"]
        done = subprocess.run(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.exit(f"{binary_path} failed ({done.returncode}): {done.stderr[-2000:]}")
        values = {}
        for line in counters.read().splitlines():
            name, counter, value = line.split("\t")
            values[(name, counter)] = float(value)
        return values


def measured(values, row):
    """The row's figure: the median's with repetitions, else the single run's."""
    found = {name: v for (name, counter), v in values.items() if counter == row.counter and name.startswith(row.benchmark)}
    medians = [v for name, v in found.items() if name.endswith("_median")]
    runs = [v for name, v in found.items() if not name.endswith(("_mean", "_stddev", "_cv"))]
    return (medians or runs or [None])[-1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="the build folder (Release)")
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--check-readme", action="store_true")
    a = p.parse_args()
    table = rows()
    if a.check_readme:
        return check_readme(table)
    by_binary = collections.OrderedDict()
    for r in table:
        by_binary.setdefault(r.binary, []).append(r)
    regressed = 0
    print(f"CPU: {cpu_isa()}, {os.cpu_count()} cores; medians of {a.repetitions}; ratios against baselines of the same run")
    print(f"{'figure':58} {'measured':>10} {'limit':>9}  README")
    for binary, binary_rows in by_binary.items():
        path = os.path.join(a.build, "bench", binary)
        if not os.access(path, os.X_OK):
            sys.exit(f"{path}: not built (cmake -DFP8SCOPE_BUILD_BENCH=ON, Release)")
        values = run(path, [r.filter for r in binary_rows], a.repetitions)
        for r in binary_rows:
            v = measured(values, r)
            bad = v is None or (v > r.limit if r.worse == "more" else v < r.limit)
            regressed += bad
            shown = "missing" if v is None else f"{v:.3g}"
            print(f"{r.what:58} {shown:>10} {('<= ' if r.worse == 'more' else '>= ') + format(r.limit, 'g'):>9}  "
                  f"{r.readme.strip('| `(').replace(' | ', ': ')}{'  REGRESSED' if bad else ''}")
    if regressed:
        print(f"{regressed} figure(s) regressed past the README's; find the change, or measure again on a quiet machine")
    else:
        print("no figure regressed")
    return 1 if regressed else 0


if __name__ == "__main__":
    sys.exit(main())
