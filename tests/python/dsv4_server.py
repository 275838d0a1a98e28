"""Starts and stops a real `dsv4 serve` process for the server tests.

The server binds 127.0.0.1 on a free port (--port 0) and logs "listening on http://HOST:PORT";
we read that line from its stderr. Its stderr is drained into `log` on a thread so it never blocks,
and stop() sends SIGTERM and checks a clean exit (and, under ASan, no sanitizer report).
Env: DSV4_BIN (the dsv4 binary), DSV4_MODEL (default: the build's built-in tiny model).
"""
import os
import re
import signal
import subprocess
import threading
import time

LISTEN = re.compile(r"listening on http://([0-9.]+):(\d+)")


def dsv4_bin():
    b = os.environ.get("DSV4_BIN")
    assert b and os.path.exists(b), "DSV4_BIN must point at the dsv4 binary (run through ctest)"
    return b


def default_model():
    m = os.environ.get("DSV4_MODEL")
    if m:
        assert os.path.exists(m), f"{m} missing: build the default_model target (cmake --build build)"
        return m
    return None  # dsv4 serve falls back to its built-in model


class Server:
    def __init__(self, *args, model=None, env=None, timeout=120):
        cmd = [dsv4_bin(), "--threads", "2", "serve", "--port", "0"]
        model = model or default_model()
        if model:
            cmd += ["-m", model]
        cmd += [str(a) for a in args]
        self.cmd = cmd
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=full_env)
        self.log = []
        self._port = None
        self._ready = threading.Event()
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        if not self._ready.wait(timeout) or self._port is None:
            self.proc.kill()
            raise RuntimeError("dsv4 serve did not start:\n" + "".join(self.log))
        self.url = f"http://127.0.0.1:{self._port}"

    def _read_stderr(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace")
            self.log.append(line)
            m = LISTEN.search(line)
            if m and self._port is None:
                self._port = int(m.group(2))
                self._ready.set()
        self._ready.set()

    @property
    def port(self):
        return self._port

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout=60):
        """SIGTERM, wait; returns the exit code. Raises if the process had to be killed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("dsv4 serve did not stop within %ds after SIGTERM" % timeout)
        self._drain.join(5)
        text = "".join(self.log)
        assert "AddressSanitizer" not in text and "LeakSanitizer" not in text and "runtime error:" not in text, text[-5000:]
        return self.proc.returncode

    def wait_idle(self, timeout=30):
        """Waits until the engine worker has no running or queued job (via /health)."""
        import json
        import urllib.request
        deadline = time.time() + timeout
        while time.time() < deadline:
            with urllib.request.urlopen(self.url + "/health", timeout=10) as r:
                h = json.load(r)
            if not h["busy"] and h["queue_depth"] == 0:
                return h
            time.sleep(0.05)
        raise AssertionError("the server stayed busy")
