#!/usr/bin/env python3
"""What a newcomer meets first on the command line (standard library only):
  * --log-level / DSV4_LOG_LEVEL: `warn` silences the info lines (the "loaded ..." line), `info` shows
    them, and a bad value is a usage error naming the flag and the accepted values;
  * `dsv4 chat -p` without -n stops: at the end-of-sentence token or after 4096 tokens with thinking
    off (32768 with it; never beyond the context), not when the context is full;
  * `dsv4 synth` explains fallback types in one info line (the build passes --log-level warn: silent).
"""
import os
import subprocess
import sys
import tempfile


def run(binary, args, env=None, timeout=600):
    return subprocess.run([binary] + args, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def main() -> int:
    binary, model = os.environ["DSV4_BIN"], os.environ["DSV4_MODEL"]
    failures = []
    chat = ["chat", "-m", model, "-p", "Hi", "--no-think", "-n", "2", "--seed", "1"]
    for args, env, shown in ((["--log-level", "warn"], None, False), (["--log-level", "info"], None, True),
                             ([], {"DSV4_LOG_LEVEL": "error"}, False), ([], None, True)):
        r = run(binary, args + chat, env)
        if r.returncode != 0:
            failures.append(f"{args} {env}: exit {r.returncode}: {r.stderr.strip()}")
        elif ("dsv4 info: loaded" in r.stderr) != shown:
            failures.append(f"{args} {env}: info line {'missing' if shown else 'shown'}: {r.stderr.strip()[:300]}")
    for args, env in ((["--log-level", "loud"], None), ([], {"DSV4_LOG_LEVEL": "loud"})):
        r = run(binary, args + chat, env)
        if r.returncode == 0 or "--log-level" not in r.stderr or "error, warn, info or debug" not in r.stderr:
            failures.append(f"bad log level {args} {env}: exit {r.returncode}, stderr {r.stderr.strip()[:300]!r}")

    # The tiny random model rarely emits EOS: without -n the reply must stop at 4096 tokens (thinking off),
    # in a context of 8192 that would otherwise allow ~8180.
    r = run(binary, ["chat", "-m", model, "--ctx", "8192", "-p", "Hi", "--no-think", "--seed", "3"])
    if r.returncode != 0:
        failures.append(f"chat -p without -n: exit {r.returncode}: {r.stderr.strip()[:300]}")
    elif "[length limit" in r.stderr and "[length limit: 4096 tokens" not in r.stderr:
        failures.append(f"chat -p without -n: expected the 4096-token default, got {r.stderr.strip()[-300:]}")
    else:
        print("chat -p without -n:", "stopped at 4096 tokens" if "[length limit" in r.stderr else "ended at EOS")

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t.gguf")
        for level, shown in (("info", True), ("warn", False)):
            r = run(binary, ["--log-level", level, "synth", "--preset", "tiny", "--type", "q8_0", "--out", out])
            lines = [l for l in r.stderr.splitlines() if "stored wider" in l]
            if r.returncode != 0 or len(lines) != (1 if shown else 0):
                failures.append(f"synth --log-level {level}: exit {r.returncode}, fallback lines {lines}")
            elif shown and "8 tensors" not in lines[0]:
                failures.append(f"synth: expected 8 fallback tensors in the tiny q8_0 model: {lines[0]}")
        r = run(binary, ["synth", "--preset", "tiny", "--type", "q8_0", "--out", out])
        if "does not fit" in r.stderr:
            failures.append("synth still prints one line per fallback tensor")

    for f in failures:
        print("FAIL:", f)
    print("cli behaviour:", "ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
