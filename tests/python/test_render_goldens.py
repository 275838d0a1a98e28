#!/usr/bin/env python3
"""`dsv4 render` against the official DeepSeek V4 encoder's output, byte for byte.

tests/data/chat/requests/NAME.json (OpenAI chat-completions bodies) were rendered by the official
encoder into tests/data/chat/expected/NAME.txt (tests/data/chat/make_goldens.py); ctx.json gives
the context size per case (default 1048576). tests/data/chat/bad/NAME.json must fail: exit 1, empty
stdout, and stderr containing the text bad.json gives for NAME. Standard library only: runs as a plain script (CTest)
or under pytest. Env: DSV4_BIN (the dsv4 binary), DSV4_CHAT_DATA (tests/data/chat).
"""
import json
import os
import pathlib
import subprocess
import sys

DATA = pathlib.Path(os.environ.get("DSV4_CHAT_DATA", pathlib.Path(__file__).resolve().parents[1] / "data" / "chat"))
MIN_GOLDENS = 40


def first_diff(a: bytes, b: bytes) -> str:
    n = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
    return f"first difference at byte {n}: got {a[max(0, n - 40):n + 40]!r}, want {b[max(0, n - 40):n + 40]!r}"


def run_all() -> list:
    binary = os.environ.get("DSV4_BIN")
    if not binary:
        return ["DSV4_BIN is not set (path to the dsv4 binary)"]
    ctx = json.loads((DATA / "ctx.json").read_text())
    requests = sorted((DATA / "requests").glob("*.json"))
    errors = []
    if len(requests) < MIN_GOLDENS:
        errors.append(f"only {len(requests)} golden requests (want >= {MIN_GOLDENS})")
    for req in requests:
        want_path = DATA / "expected" / (req.stem + ".txt")
        if not want_path.exists():
            errors.append(f"{req.stem}: missing {want_path}")
            continue
        cmd = [binary, "render", "--request", str(req), "--ctx", str(ctx.get(req.stem, 1048576))]
        p = subprocess.run(cmd, capture_output=True, timeout=60)
        if p.returncode != 0:
            errors.append(f"{req.stem}: exit {p.returncode}: {p.stderr.decode(errors='replace').strip()}")
            continue
        want = want_path.read_bytes()
        if p.stdout != want:
            errors.append(f"{req.stem}: output differs ({len(p.stdout)} vs {len(want)} bytes); " +
                          first_diff(p.stdout, want))
    print(f"render goldens: {len(requests) - len(errors)}/{len(requests)} byte-identical")
    bad = json.loads((DATA / "bad.json").read_text())
    for name, want_err in sorted(bad.items()):
        p = subprocess.run([binary, "render", "--request", str(DATA / "bad" / (name + ".json"))], capture_output=True,
                           timeout=60)
        stderr = p.stderr.decode(errors="replace")
        if p.returncode != 1 or p.stdout or want_err not in stderr:
            errors.append(f"bad/{name}: want exit 1, no stdout and {want_err!r} on stderr; got exit {p.returncode}, "
                          f"stdout {p.stdout[:80]!r}, stderr {stderr.strip()!r}")
    return errors


def test_render_goldens():
    errors = run_all()
    assert not errors, "\n".join(errors)


if __name__ == "__main__":
    errs = run_all()
    for e in errs:
        print("FAIL", e, file=sys.stderr)
    sys.exit(1 if errs else 0)
