#!/usr/bin/env python3
"""Fails when a room includes a header of a room it may not use (docs/architecture.md).

Rooms are folders under src/ (and apps/); project headers are included as "room/path.h" relative
to src/. The table below is the one-way dependency graph; anything else is an error, printed as
file:line: room 'x' may not include 'y/...'. Usage: check_rooms.py REPO_ROOT
"""
import pathlib
import re
import sys

# room -> rooms it may include (itself always allowed)
ALLOWED = {
    "base": set(),
    "numerics": set(),  # header-only, host C++ and CUDA device code
    "gguf": {"base"},
    "backend": {"base", "numerics"},  # the backend interface
    "backend/cpu": {"base", "numerics", "backend"},
    "backend/cuda": {"base", "numerics", "backend"},
    "backend/registry": {"base", "backend", "backend/cpu", "backend/cuda"},  # creates the backend a run asks for
    "model": {"base", "numerics", "gguf", "backend"},
    "kv": {"base", "backend", "model"},
    "tokenizer": {"base", "gguf"},
    "sampling": {"base", "numerics"},
    "tools": {"base", "numerics", "gguf", "model", "backend", "backend/cpu", "backend/registry", "tokenizer"},  # convert, synth
    # the engine gets its backend from the registry and never names a concrete one
    "engine": {"dsv4", "base", "gguf", "backend", "backend/registry", "model", "kv",
               "tokenizer", "sampling"},
    "server/http": {"base"},
    "server/api": {"base"},
    "server/serve": {"dsv4", "server/api", "server/http", "base"},
    # apps hold main() and flag parsing; the tool commands call the rooms they drive directly.
    "apps": {"dsv4", "server/http", "server/api", "server/serve", "base", "gguf", "backend", "backend/cpu",
             "backend/registry", "model", "tokenizer", "sampling", "engine", "tools"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def room_of_header(inc: str, rooms):
    parts = inc.split("/")
    for n in (2, 1):
        cand = "/".join(parts[:n])
        if len(parts) > n and cand in rooms:
            return cand
    return None


def room_of_file(rel: pathlib.PurePosixPath):
    parts = rel.parts
    if parts[0] == "apps":
        return "apps"
    if parts[0] == "src":
        for n in (3, 2):
            cand = "/".join(parts[1:n])
            if cand in ALLOWED and len(parts) > n:
                return cand
    return None


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    rooms = set(ALLOWED) | {"dsv4"}
    errors = []
    files = [p for d in ("src", "apps") for p in (root / d).rglob("*") if p.suffix in (".h", ".cpp", ".cu", ".cuh")]
    for path in sorted(files):
        rel = pathlib.PurePosixPath(path.relative_to(root).as_posix())
        room = room_of_file(rel)
        if room is None:
            errors.append(f"{rel}: not inside a known room")
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = room_of_header(m.group(1), rooms)
            if target is None or target == room:
                continue  # a file of the same room, or an app-local header
            if target not in ALLOWED[room]:
                errors.append(f"{rel}:{lineno}: room '{room}' may not include '{m.group(1)}'")
    for e in errors:
        print(e)
    print(f"check_rooms: {len(files)} files, {len(errors)} violations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
