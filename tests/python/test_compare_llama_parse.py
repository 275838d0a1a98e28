#!/usr/bin/env python3
"""scripts/compare_llama_cpp.py reads what `dsv4 bench -m` prints today: a real bench run on a tiny
synthetic model (pp and tg at two depths), parsed by the script's parse_dsv4, must give every case
with the median the bench's own closing table shows. (The parser once read an older format and the
comparison printed n/a for dsv4.) Also llama-bench's JSON shape through parse_llama. Standard-library
Python only.
"""
import os
import pathlib
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
import compare_llama_cpp  # noqa: E402


def main() -> int:
    binary = os.environ["DSV4_BIN"]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny.gguf")
        subprocess.run([binary, "synth", "--preset", "tiny", "--out", model], check=True, capture_output=True,
                       timeout=300)
        out = subprocess.run([binary, "bench", "--threads", "2", "-m", model, "--prompt", "8", "--depth", "0,8",
                              "--decode", "2", "--repeat", "2", "--warmup", "0"],
                             check=True, capture_output=True, text=True, timeout=300).stdout
        # A prompt longer than the decoded tokens: the warm-up (prefill, then a few decoded tokens) must
        # fit the session's context too (it once failed: "17 + 1 tokens exceed the context of 17").
        short = subprocess.run([binary, "bench", "--threads", "2", "-m", model, "--prompt", "16", "--depth", "0",
                                "--decode", "4", "--repeat", "1", "--warmup", "0"],
                               capture_output=True, text=True, timeout=300)
        if short.returncode != 0 or set(compare_llama_cpp.parse_dsv4(short.stdout)) != {("pp", 16, 0), ("tg", 4, 0)}:
            failures.append(f"bench --prompt 16 --decode 4: rc {short.returncode}\n{short.stdout}\n{short.stderr}")
    got = compare_llama_cpp.parse_dsv4(out)
    want = {("pp", 8, 0), ("pp", 8, 8), ("tg", 2, 0), ("tg", 2, 8)}
    if set(got) != want:
        failures.append(f"parse_dsv4 keys {sorted(got)} != {sorted(want)}\n{out}")
    for m in re.finditer(r"^\|\s*(pp|tg)(\d+)(?:\s*@\s*d(\d+))?\s*\|\s*([0-9.]+)", out, re.M):
        key = (m.group(1), int(m.group(2)), int(m.group(3) or 0))
        if got.get(key) != float(m.group(4)) or not float(m.group(4)) > 0:
            failures.append(f"{key}: parsed {got.get(key)}, table median {m.group(4)}")
    llama = compare_llama_cpp.parse_llama(
        '[{"n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 61.7},'
        ' {"n_prompt": 0, "n_gen": 16, "n_depth": 512, "avg_ts": 17.9}]')
    if llama != {("pp", 512, 0): 61.7, ("tg", 16, 512): 17.9}:
        failures.append(f"parse_llama: {llama}")
    for f in failures:
        print("FAIL:", f)
    print(f"compare_llama_cpp parse: {len(want)} cases, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
