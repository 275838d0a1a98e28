#!/usr/bin/env python3
"""scripts/compare_llama_cpp.py — the table of scripts/compare-llama-cpp.sh (dsv4 vs llama.cpp, issue 20).

  compare_llama_cpp.py RESULTS_DIR --prompt 512 --gen 16 --depths 0,512 --threads 2 --dsv4-version V --llama-version V

RESULTS_DIR holds the outputs of run N: llama-N-pp.json and llama-N-tg.json (`llama-bench -o json`)
and dsv4-N.txt (`dsv4 bench` stdout). Prints a markdown table of the medians over the runs, the
dsv4 / llama.cpp ratio, the machine and the versions. Standard library only.
"""
import argparse
import json
import pathlib
import re
import statistics
import subprocess


def parse_dsv4(text):
    """`dsv4 bench -m` stdout -> {("pp", n_prompt, depth) | ("tg", n_gen, depth): tok/s}.

    The one place that knows dsv4's output. Reads, in order of preference:
      - llama-bench JSON (a list of objects with n_prompt, n_gen, n_depth, avg_ts), should dsv4 print it;
      - the closing table of `dsv4 bench -m`: "| pp512 @ d512 |  54.07 | ..." (the median column);
      - llama-bench-style rows: "... | pp512 | 35.70 ± 0.20 |" or "tg16 @ d512 ... 12.9 ± 0.1";
      - today's text: "   512 tokens (chunk 512):    15.20 tok/s (min ..." under "prefill" and
        "  depth     512:    8.36 tok/s (min ..." under "decode (16 tokens after ...)".
    """
    s = text.strip()
    if s.startswith("[") or s.startswith("{"):
        try:
            return parse_llama(s)
        except (ValueError, KeyError, TypeError):
            pass
    out = {}
    # The closing table of `dsv4 bench -m`: "| pp512 @ d512     |        54.07 |    54.07 | ..." (median first).
    for m in re.finditer(r"^\|\s*(pp|tg)(\d+)(?:\s*@\s*d(\d+))?\s*\|\s*([0-9]+(?:\.[0-9]+)?)\s*\|", text, re.M):
        out[(m.group(1), int(m.group(2)), int(m.group(3) or 0))] = float(m.group(4))
    if out:
        return out
    for m in re.finditer(r"\b(pp|tg)(\d+)(?:\s*@\s*d(\d+))?\b[^\n]*?([0-9]+(?:\.[0-9]+)?)\s*±", text):
        out[(m.group(1), int(m.group(2)), int(m.group(3) or 0))] = float(m.group(4))
    if out:
        return out
    n_gen = 0
    for line in text.splitlines():
        m = re.match(r"\s*decode \((\d+) tokens", line)
        if m:
            n_gen = int(m.group(1))
        m = re.match(r"\s*(\d+) tokens \(chunk \d+\):\s*([0-9.]+) tok/s", line)
        if m:
            out[("pp", int(m.group(1)), 0)] = float(m.group(2))
        m = re.match(r"\s*depth\s+(\d+):\s*([0-9.]+) tok/s", line)
        if m:
            out[("tg", n_gen, int(m.group(1)))] = float(m.group(2))
    return out


def parse_llama(text):
    """`llama-bench -o json` stdout -> the same keys as parse_dsv4."""
    out = {}
    for t in json.loads(text):
        kind, n = ("pp", t["n_prompt"]) if t["n_gen"] == 0 else ("tg", t["n_gen"])
        out[(kind, int(n), int(t.get("n_depth", 0)))] = float(t["avg_ts"])
    return out


def machine():
    model = "unknown CPU"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = set()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512vbmi", "avx512_bf16", "amx_tile", "amx_int8",
                       "amx_bf16") if f in flags]
    return model, isa


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--prompt", type=int, required=True)
    ap.add_argument("--gen", type=int, required=True)
    ap.add_argument("--depths", required=True)
    ap.add_argument("--threads", required=True)
    ap.add_argument("--model", default="")
    ap.add_argument("--isa", default="native", help="native, or avx2: both engines limited to AVX2")
    ap.add_argument("--dsv4-version", default="?")
    ap.add_argument("--llama-version", default="?")
    a = ap.parse_args()
    d = pathlib.Path(a.results)
    runs = {"dsv4": [parse_dsv4(p.read_text()) for p in sorted(d.glob("dsv4-*.txt"))], "llama": []}
    by_run = {}  # llama-N-pp.json and llama-N-tg.json are one run
    for p in sorted(d.glob("llama-*.json")):
        by_run.setdefault(p.name.split("-")[1], {}).update(parse_llama(p.read_text()))
    runs["llama"] = list(by_run.values())
    runs = {k: [r for r in v if r] for k, v in runs.items()}  # an empty output (a failed run) is no run
    rows = [("prefill %d tokens" % a.prompt, ("pp", a.prompt, 0))]
    rows += [("decode, depth %s" % dep, ("tg", a.gen, int(dep))) for dep in a.depths.split(",")]

    def med(engine, key):
        v = [r[key] for r in runs[engine] if key in r]
        return (statistics.median(v), min(v), max(v), len(v)) if v else None

    model, isa = machine()
    print("| tok/s (median of runs; min-max) | dsv4 | llama.cpp | dsv4 / llama.cpp |")
    print("|---|---|---|---|")
    for label, key in rows:
        x, y = med("dsv4", key), med("llama", key)
        cell = lambda m: "n/a" if m is None else "%.2f (%.2f-%.2f, n=%d)" % m  # noqa: E731
        ratio = "n/a" if x is None or y is None or y[0] == 0 else "**%.2f**" % (x[0] / y[0])
        print("| %s | %s | %s | %s |" % (label, cell(x), cell(y), ratio))
    print()
    compared = "the machine's own" if a.isa == "native" else "%s only (both engines built or run for it)" % a.isa
    print("machine: %s; ISA: %s; compared at: %s; threads: %s; runs: %d dsv4, %d llama.cpp (engines alternated)"
          % (model, " ".join(isa) or "none of avx2/avx512/amx", compared, a.threads, len(runs["dsv4"]),
             len(runs["llama"])))
    if a.model:
        print("model: %s" % a.model)
    print("dsv4: %s" % a.dsv4_version)
    print("llama.cpp: %s" % a.llama_version)


if __name__ == "__main__":
    main()
