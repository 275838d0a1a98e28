"""Every shell block of README.md runs as documented (standard library only).

Each ```sh block must follow a directive comment (the test fails on a block without one, so a newly
documented command is either run here or says why not):

    <!-- readme-test: run -->               run the block as one bash script (set -euo pipefail); exit 0
    <!-- readme-test: run expect-answer --> ... and every chat completion in its output has non-empty
                                            content, every Anthropic stream a text delta
    <!-- readme-test: serve -->             the block starts a server: run it in the background and wait
                                            for /health; the blocks after it talk to it (a later serve
                                            block replaces it)
    <!-- readme-test: skip: REASON -->      not run, for the reason given

How the commands run, verbatim except for what is listed here:
  * in a scratch directory laid out like the clone after the build: `build` (a link to the CMake build
    directory), `scripts`, and the stand-ins for what the README downloads:
    `models/DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2.gguf` is the built-in tiny model
    and `DeepSeek-V4-Flash/` the tiny HF checkpoint tests/data/hf/tiny_a;
  * a block that configures (`cmake -S .`) runs in the source tree itself (it reconfigures and
    rebuilds the build directory under test, which is up to date, so nothing is rebuilt), with
    `build` replaced by the build directory when that is not <source>/build;
  * port 8080 becomes a free port (`8080` -> N, and `dsv4 serve` -> `dsv4 serve --port N`), since
    8080 may be taken on a test machine.
Environment: DSV4_SOURCE_DIR, DSV4_BUILD_DIR (CTest sets both).
"""
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SOURCE = pathlib.Path(os.environ.get("DSV4_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BUILD = pathlib.Path(os.environ.get("DSV4_BUILD_DIR", SOURCE / "build"))
REAL_GGUF = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2.gguf"
DIRECTIVE = re.compile(r"<!--\s*readme-test:\s*(run|serve|skip)\b:?\s*(.*?)\s*-->")
SERVE_WAIT_S = 900  # the first block runs setup.sh and a (no-op) configure + build before serving


def blocks(text):
    """[(line number, kind, argument, code)] for every ```sh block."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if re.fullmatch(r"```(sh|bash|shell|console)\s*", lines[i]):
            start = i
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            code = "\n".join(lines[i + 1:j]) + "\n"
            k = start - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            m = DIRECTIVE.fullmatch(lines[k].strip()) if k >= 0 else None
            out.append((start + 1, m.group(1) if m else None, m.group(2) if m else "", code))
            i = j + 1
        else:
            i += 1
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scratch_clone(root):
    (root / "models").mkdir()
    os.symlink(BUILD, root / "build")
    os.symlink(SOURCE / "scripts", root / "scripts")
    os.symlink(BUILD / "models" / "dsv4-tiny-random.gguf", root / "models" / REAL_GGUF)
    os.symlink(SOURCE / "tests" / "data" / "hf" / "tiny_a", root / "DeepSeek-V4-Flash")


def substitute(code, port, in_source):
    code = code.replace("8080", str(port))
    code = re.sub(r"\bdsv4 serve\b", f"dsv4 serve --port {port}", code)
    if in_source and BUILD.resolve() != (SOURCE / "build").resolve():
        code = re.sub(r"(?<![\w./-])build(?=/|\s|$)", str(BUILD), code)
    return code


def check_answers(stdout, line):
    """Chat completions must carry content; Anthropic streams a text delta."""
    dec, pos, seen = json.JSONDecoder(), 0, 0
    while True:
        start = stdout.find('{"', pos)
        if start < 0:
            break
        try:
            obj, end = dec.raw_decode(stdout, start)
        except json.JSONDecodeError:
            pos = start + 1
            continue
        pos = end
        if obj.get("object") == "chat.completion":
            seen += 1
            content = obj["choices"][0]["message"].get("content")
            assert content, f"README line {line}: the chat completion has no answer: {json.dumps(obj)[:400]}"
    if "event: message_start" in stdout:
        seen += 1
        assert '"type":"text_delta"' in stdout.replace(" ", ""), \
            f"README line {line}: the Anthropic stream has no text: {stdout[:400]}"
    assert seen, f"README line {line}: expect-answer, but no chat completion or stream in the output"


class Server:
    def __init__(self):
        self.proc = None

    def start(self, code, cwd, port, line, log_dir):
        self.stop()
        log = open(log_dir / f"serve_{line}.log", "w+")  # never in the source tree
        self.proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", code], cwd=cwd, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.log = log
        deadline = time.time() + SERVE_WAIT_S
        while time.time() < deadline:
            if self.proc.poll() is not None:
                log.seek(0)
                raise AssertionError(f"README line {line}: exited {self.proc.returncode} before serving:\n{log.read()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        print(f"  serving on port {port}")
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"README line {line}: no /health on port {port} within {SERVE_WAIT_S} s")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


def main():
    text = (SOURCE / "README.md").read_text(encoding="utf-8")
    found = blocks(text)
    missing = [line for line, kind, _, _ in found if kind is None]
    assert not missing, (f"README.md: sh blocks at lines {missing} have no <!-- readme-test: run|serve|skip: "
                         "REASON --> line before them")
    assert any(k == "run" for _, k, _, _ in found) and any(k == "serve" for _, k, _, _ in found)
    port = free_port()
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="dsv4_readme_"))
    server = Server()
    counts = {"run": 0, "serve": 0, "skip": 0}
    try:
        scratch_clone(scratch)
        for line, kind, arg, code in found:
            counts[kind] += 1
            first = code.strip().splitlines()[0] if code.strip() else ""
            if kind == "skip":
                assert arg, f"README line {line}: a skipped block must say why"
                print(f"README line {line}: skipped ({arg}): {first}")
                continue
            in_source = "cmake -S ." in code
            cwd = SOURCE if in_source else scratch
            run = substitute(code, port, in_source)
            print(f"README line {line}: {kind} in {'the source tree' if in_source else 'the scratch clone'}:\n"
                  + "".join(f"  $ {c}\n" for c in run.strip().splitlines()))
            sys.stdout.flush()
            if kind == "serve":
                server.start(run, cwd, port, line, scratch)
                continue
            t0 = time.time()
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", run], cwd=cwd, capture_output=True, text=True,
                               timeout=600)
            print(f"  exit {r.returncode} in {time.time() - t0:.1f} s; output (first 1500 chars):\n"
                  f"{r.stdout[:1500]}\n{r.stderr[-1500:]}")
            assert r.returncode == 0, f"README line {line}: exit {r.returncode}"
            if arg == "expect-answer":
                check_answers(r.stdout, line)
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"README.md: {counts['run']} blocks run, {counts['serve']} servers started, {counts['skip']} skipped "
          "(reasons above)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
