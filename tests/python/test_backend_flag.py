#!/usr/bin/env python3
"""`--backend` on the command line and DSV4_BACKEND: cpu and auto give the same logits bit for bit;
cuda (not built) and unknown names are clear errors that name the problem. Standard library only."""
import json
import os
import subprocess
import sys
import tempfile


def run(binary, args, env=None):
    return subprocess.run([binary] + args, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})))


def main() -> int:
    binary, model = os.environ["DSV4_BIN"], os.environ["DSV4_MODEL"]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        tokens = os.path.join(tmp, "tokens.json")
        with open(tokens, "w") as f:
            json.dump([(i * 37 + 11) % 1000 for i in range(40)], f)
        outputs = {}
        for name, args, env in (("default", [], None), ("cpu", ["--backend", "cpu"], None),
                                ("auto", ["--backend", "auto"], None), ("env-cpu", [], {"DSV4_BACKEND": "cpu"})):
            out = os.path.join(tmp, name + ".npy")
            r = run(binary, args + ["logits", "-m", model, "--tokens-file", tokens, "--chunk", "7", "--out", out], env)
            if r.returncode != 0:
                failures.append(f"{name}: exit {r.returncode}: {r.stderr.strip()}")
                continue
            with open(out, "rb") as f:
                outputs[name] = f.read()
        if len(set(outputs.values())) != 1 or len(outputs) != 4:
            failures.append(f"logits differ between backend selections: {sorted(outputs)}")

        for args, env, want in ((["--backend", "cuda"], None, "cuda"), ([], {"DSV4_BACKEND": "cuda"}, "cuda"),
                                (["--backend", "tpu"], None, "tpu")):
            r = run(binary, args + ["logits", "-m", model, "--tokens-file", tokens, "--out", os.path.join(tmp, "x.npy")],
                    env)
            if r.returncode == 0:
                failures.append(f"{args or env}: succeeded, expected a clear error")
            elif want not in r.stderr.lower() or "backend" not in r.stderr.lower():
                failures.append(f"{args or env}: error does not name the backend: {r.stderr.strip()!r}")
            if "Traceback" in r.stderr or "terminate" in r.stderr or r.returncode < 0:
                failures.append(f"{args or env}: crashed: {r.stderr.strip()!r}")
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    print("backend flag: ok" if not failures else f"backend flag: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
