#!/usr/bin/env python3
"""`--backend` on the command line and DSV4_BACKEND: cpu and auto give the same logits bit for bit;
cuda (not built) and unknown names are clear errors that name the problem; --cuda-disable takes its
list of kernel forms (no effect on the CPU's logits) and names a form it does not know. Standard library
only."""
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
                                ("auto", ["--backend", "auto"], None), ("env-cpu", [], {"DSV4_BACKEND": "cpu"}),
                                ("cuda-disable", ["--backend", "cpu", "--cuda-disable", "staged-loads,hc-cluster,attn-decode"],
                                 None)):
            out = os.path.join(tmp, name + ".npy")
            r = run(binary, args + ["logits", "-m", model, "--tokens-file", tokens, "--chunk", "7", "--out", out], env)
            if r.returncode != 0:
                failures.append(f"{name}: exit {r.returncode}: {r.stderr.strip()}")
                continue
            with open(out, "rb") as f:
                outputs[name] = f.read()
        if len(set(outputs.values())) != 1 or len(outputs) != 5:
            failures.append(f"logits differ between backend selections: {sorted(outputs)}")

        for args, env, want in ((["--backend", "cuda"], None, "cuda"), ([], {"DSV4_BACKEND": "cuda"}, "cuda"),
                                (["--backend", "tpu"], None, "tpu"),
                                (["--backend", "cpu", "--cuda-disable", "staged-loads,warp-drive"], None, "warp-drive"),
                                ([], {"DSV4_BACKEND": "cpu", "DSV4_CUDA_DISABLE": "hc-cluster,"}, "cuda-disable")):
            r = run(binary, args + ["logits", "-m", model, "--tokens-file", tokens, "--out", os.path.join(tmp, "x.npy")],
                    env)
            if r.returncode == 0:
                failures.append(f"{args or env}: succeeded, expected a clear error")
            elif want not in r.stderr.lower() or ("backend" not in r.stderr.lower() and "cuda-disable" not in r.stderr):
                failures.append(f"{args or env}: error does not name the problem: {r.stderr.strip()!r}")
            if "Traceback" in r.stderr or "terminate" in r.stderr or r.returncode < 0:
                failures.append(f"{args or env}: crashed: {r.stderr.strip()!r}")
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    print("backend flag: ok" if not failures else f"backend flag: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
