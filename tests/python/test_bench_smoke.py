#!/usr/bin/env python3
"""Smoke test of `dsv4 bench kernels --quick --json`: the report's structure, never its speed.

Every requested type appears in the matrix x vector and matrix x matrix tables with positive,
finite figures, the bandwidth fraction is gbps / read_gbps_nearby, and the one-thread in-cache
speed is reported. Standard-library Python only.
"""
import json
import math
import os
import subprocess
import sys


def main() -> int:
    binary = os.environ["DSV4_BIN"]
    types = ["q8_0", "iq2_xxs", "q2_k"]
    out = subprocess.run([binary, "bench", "kernels", "--quick", "--json", "--types", ",".join(types)],
                         check=True, capture_output=True, text=True, timeout=300).stdout
    report = json.loads(out)
    failures = []

    def positive(value, what):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            failures.append(f"{what}: {value!r} is not a positive finite number")

    machine = report["machine"]
    positive(machine["read_gbps"], "machine.read_gbps")
    positive(machine["fma_gflops"], "machine.fma_gflops")
    for table in ("matvec", "matmul"):
        seen = sorted({row["type"] for row in report[table]})
        if seen != sorted(types):
            failures.append(f"{table}: types {seen}, expected {sorted(types)}")
    for row in report["matvec"]:
        name = f"matvec {row['type']} {row['rows']}x{row['n']}"
        for key in ("gbps", "read_gbps_nearby", "cache_gbps_one_thread"):
            positive(row[key], f"{name}.{key}")
        if abs(row["fraction_of_bandwidth"] - row["gbps"] / row["read_gbps_nearby"]) > 1e-9:
            failures.append(f"{name}: fraction_of_bandwidth is not gbps / read_gbps_nearby")
    for row in report["matmul"]:
        positive(row["gflops"], f"matmul {row['type']} cols {row['cols']}.gflops")
    for f in failures:
        print("FAIL:", f)
    print(f"bench smoke: {len(report['matvec'])} matvec rows, {len(report['matmul'])} matmul rows, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
