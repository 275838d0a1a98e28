"""requirements-test.lock agrees with requirements-test.txt (standard library only, no network).

The lock (scripts/lock-requirements.sh) pins every package the test tools pull in, each with its
sha256 hashes; scripts/setup.sh installs it with --require-hashes. This fails when someone edits
requirements-test.txt without regenerating the lock: a top-level pin missing from the lock or at
another version, a package the lock still lists as direct that is no longer asked for, or an entry
without hashes (pip would refuse the whole install).
"""
import os
import pathlib
import re
import sys

ROOT = pathlib.Path(os.environ.get("DSV4_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def top_level():
    pins = {}
    for line in (ROOT / "requirements-test.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        assert m, f"requirements-test.txt: {line!r}: pin each tool exactly (name==version)"
        pins[norm(m.group(1))] = m.group(2)
    return pins


def lock_entries():
    """{name: (version, n_hashes, direct)} from pip-compile's output format."""
    entries, current = {}, None
    for line in (ROOT / "requirements-test.lock").read_text(encoding="utf-8").splitlines():
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if m:
            current = norm(m.group(1))
            entries[current] = [m.group(2), 0, False]
        elif current and line.strip().startswith("--hash=sha256:"):
            entries[current][1] += 1
        elif current and "-r requirements-test.txt" in line:
            entries[current][2] = True
    return entries


def main():
    want, lock = top_level(), lock_entries()
    errors = []
    for name, version in sorted(want.items()):
        if name not in lock:
            errors.append(f"{name}=={version} is in requirements-test.txt but not in the lock")
        elif lock[name][0] != version:
            errors.append(f"{name}: requirements-test.txt pins {version}, the lock {lock[name][0]}")
    for name, (version, hashes, direct) in sorted(lock.items()):
        if hashes == 0:
            errors.append(f"{name}=={version}: no --hash in the lock")
        if direct and name not in want:
            errors.append(f"{name}: the lock has it from requirements-test.txt, which no longer asks for it")
    if errors:
        print("\n".join(errors))
        print("requirements-test.lock is stale: run scripts/lock-requirements.sh and commit it", file=sys.stderr)
        return 1
    print(f"requirements-test.lock: {len(lock)} packages ({len(want)} direct), all pinned with hashes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
