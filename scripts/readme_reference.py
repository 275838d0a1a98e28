#!/usr/bin/env python3
"""README.md's command reference is generated: `dsv4 reference` prints it from the flag registry and
each command's declared options, and this script puts it between the markers in README.md.

    scripts/readme_reference.py [--dsv4 build/dsv4]          rewrite the section
    scripts/readme_reference.py --check [--dsv4 build/dsv4]  exit 1 (with a diff) if it is stale

CTest runs --check (test readme_reference), so a flag added, removed or reworded without
regenerating the README fails the suite. Standard library only.
"""
import argparse
import difflib
import pathlib
import subprocess
import sys

BEGIN = "<!-- BEGIN GENERATED: dsv4 reference (scripts/readme_reference.py; do not edit by hand) -->"
END = "<!-- END GENERATED: dsv4 reference -->"


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsv4", default=str(root / "build" / "dsv4"), help="the dsv4 binary")
    ap.add_argument("--readme", default=str(root / "README.md"))
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 when the README is stale")
    a = ap.parse_args()
    readme = pathlib.Path(a.readme)
    text = readme.read_text(encoding="utf-8")
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        sys.exit(f"{readme}: expected the markers once each, in order:\n  {BEGIN}\n  {END}")
    generated = subprocess.run([a.dsv4, "reference"], check=True, capture_output=True, text=True).stdout
    head, rest = text.split(BEGIN, 1)
    old, tail = rest.split(END, 1)
    new_text = head + BEGIN + "\n" + generated.rstrip("\n") + "\n" + END + tail
    if new_text == text:
        print(f"{readme}: command reference up to date")
        return 0
    if a.check:
        diff = difflib.unified_diff(old.strip("\n").splitlines(), generated.rstrip("\n").splitlines(),
                                    "README.md (committed)", "dsv4 reference (now)", lineterm="")
        print("\n".join(diff))
        print(f"\n{readme}: the command reference is stale: run scripts/readme_reference.py", file=sys.stderr)
        return 1
    readme.write_text(new_text, encoding="utf-8")
    print(f"{readme}: command reference rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
