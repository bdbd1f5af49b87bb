#!/usr/bin/env python3
"""Envoy's CPU per request for several builds of the module, in one sitting.

usage: bench-modules.py ROUNDS NAME=PATH...   (the first is the baseline)

Each round runs every build in turn through the proxy sitting of `make
bench` (BENCH_MODULE, one round each, its throughput cases: no rule
matched, a store call per request, leases on) and takes each build's CPU
per request as a ratio to the baseline's of the same round; prints the
median and range of the ratios per case. Build the driver first:
`cargo build --profile driver -p host-tests --bin bench`.
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

CASES = ["no rule matched (32", "batching on, 1 identity (32", "leases on, Zipf(1.1) over 10,000 identities (32", "deny-cache hit) (32"]
LINE = re.compile(r"^(.*?\(\d+ conn\))\s+cpu ([0-9.]+) ")


def sitting(path):
    env = dict(os.environ, BENCH_MODULE=path, BENCH_ONLY="proxy", BENCH_ROUNDS="1", BENCH_CASES=";".join(CASES))
    with tempfile.TemporaryDirectory() as out:
        text = subprocess.run(["target/driver/bench", out], env=env, check=True, capture_output=True, text=True).stdout
    cpu = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            cpu[m.group(1).strip()] = float(m.group(2))
    return cpu


def main():
    rounds = int(sys.argv[1])
    builds = [a.split("=", 1) for a in sys.argv[2:]]
    runs = {name: [] for name, _ in builds}
    for r in range(rounds):
        for name, path in builds:
            runs[name].append(sitting(path))
            print(f"round {r + 1}: {name} {runs[name][-1]}", file=sys.stderr)
    base = builds[0][0]
    cases = sorted(runs[base][0])
    print("| build | bytes | " + " | ".join(f"{c}: µs, ratio" for c in cases) + " |")
    print("|---|---|" + "---|" * len(cases))
    for name, path in builds:
        cells = []
        for c in cases:
            ratios = [runs[name][i][c] / runs[base][i][c] for i in range(rounds)]
            us = statistics.median(run[c] for run in runs[name])
            cells.append(f"{us:.1f}, {statistics.median(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f})")
        print(f"| {name} | {os.path.getsize(path)} | " + " | ".join(cells) + " |")


main()
