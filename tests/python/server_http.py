"""Raw HTTP helpers for the server fault and soak tests (standard library only).

Requests go out byte for byte (invalid JSON / UTF-8 arrive verbatim), responses are read from the
socket and de-chunked here, so a test sees exactly what the server sent: status, headers, body, and
for streams every SSE line including the ": keep-alive" / ": prefill" comments. A stream can be
abandoned mid-way with close() (the client disconnect the server must notice).

Also: the bad-request corpus (tests/data/server/bad_requests.jsonl), API error-shape checks, SSE
parsing, /health and /metrics readers, and the EOS token id of the model a server runs.
"""
import base64
import json
import re
import socket
import subprocess
import time
from pathlib import Path

from dsv4_server import dsv4_bin

CORPUS_PATH = Path(__file__).resolve().parents[1] / "data" / "server" / "bad_requests.jsonl"
OPENAI_ROUTES = ("/v1/chat/completions", "/v1/completions")
ANTHROPIC_ROUTE = "/v1/messages"
EOS_TEXT = "<｜end▁of▁sentence｜>"
NO_THINK = {"type": "disabled"}


# --- the bad-request corpus -----------------------------------------------------------------------

def load_corpus(min_entries=100):
    """The corpus rows; fails (never skips) when the file is missing, malformed or too small."""
    assert CORPUS_PATH.is_file(), f"the bad-request corpus {CORPUS_PATH} is missing"
    rows = []
    for n, line in enumerate(CORPUS_PATH.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise AssertionError(f"{CORPUS_PATH}:{n}: not JSON: {e}")
        bodies = [k for k in ("body", "raw_body", "raw_body_b64") if k in row]
        assert len(bodies) == 1, f"{CORPUS_PATH}:{n}: needs exactly one of body/raw_body/raw_body_b64"
        for k in ("name", "route", "status", "error_type"):
            assert k in row, f"{CORPUS_PATH}:{n}: no '{k}'"
        rows.append(row)
    assert len(rows) >= min_entries, (
        f"the bad-request corpus {CORPUS_PATH} has {len(rows)} entries; at least {min_entries} expected")
    return rows


def corpus_body(row):
    """The exact bytes an entry sends."""
    if "raw_body_b64" in row:
        return base64.b64decode(row["raw_body_b64"])
    if "raw_body" in row:
        return row["raw_body"].encode("utf-8")
    return json.dumps(row["body"], ensure_ascii=False).encode("utf-8")


# --- one request, one response --------------------------------------------------------------------

class Response:
    def __init__(self, status, reason, headers, body=b""):
        self.status = status
        self.reason = reason
        self.headers = headers  # lower-case name → value (the last one wins)
        self.body = body

    def header(self, name):
        return self.headers.get(name.lower())

    def json(self):
        """The body as JSON; the bytes must be valid UTF-8 (a server must never emit anything else)."""
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return f"<{self.status} {self.reason} {self.body[:300]!r}>"


class Conn:
    """One HTTP/1.1 connection over a plain socket. send() writes a request; read_head() parses the
    status line and headers; then read_body() (whole) or iter_body() (as it arrives) or sse()."""

    def __init__(self, port, timeout=120):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.eof = False

    def send(self, method, path, body=None, headers=None):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode("utf-8")
        path = path if isinstance(path, bytes) else path.encode("utf-8")
        lines = [b"%s %s HTTP/1.1" % (method.encode(), path), b"Host: 127.0.0.1"]
        h = {"Content-Type": "application/json"} if body is not None else {}
        h.update(headers or {})
        for k, v in h.items():
            lines.append(b"%s: %s" % (k.encode(), v if isinstance(v, bytes) else str(v).encode()))
        if body is not None:
            lines.append(b"Content-Length: %d" % len(body))
        data = b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer (413) before reading everything; the answer is still there
        return self

    def _fill(self):
        if self.eof:
            return False
        try:
            d = self.sock.recv(65536)
        except ConnectionResetError:
            d = b""
        if not d:
            self.eof = True
            return False
        self.buf += d
        return True

    def _read_until(self, sep):
        while sep not in self.buf:
            if not self._fill():
                raise ConnectionError(f"connection closed before {sep!r} (have {self.buf[:200]!r})")
        i = self.buf.index(sep)
        out, self.buf = self.buf[:i], self.buf[i + len(sep):]
        return out

    def _read_exact(self, n):
        while len(self.buf) < n:
            if not self._fill():
                raise ConnectionError(f"connection closed after {len(self.buf)} of {n} bytes")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_head(self):
        head = self._read_until(b"\r\n\r\n").decode("latin-1")
        status_line, *hdr_lines = head.split("\r\n")
        m = re.match(r"HTTP/1\.[01] (\d{3}) ?(.*)", status_line)
        assert m, f"bad status line {status_line!r}"
        headers = {}
        for line in hdr_lines:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        self.response = Response(int(m.group(1)), m.group(2), headers)
        return self.response

    def iter_body(self):
        """The body's bytes as they arrive (de-chunked)."""
        h = self.response.headers
        if "chunked" in h.get("transfer-encoding", "").lower():
            while True:
                size_line = self._read_until(b"\r\n")
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    self._read_until(b"\r\n")  # (no trailers are sent)
                    return
                data = self._read_exact(size)
                assert self._read_exact(2) == b"\r\n", "chunk not followed by CRLF"
                yield data
        elif "content-length" in h:
            n = int(h["content-length"])
            if n:
                yield self._read_exact(n)
        else:
            while self._fill():
                pass
            yield self.buf
            self.buf = b""

    def read_body(self):
        self.response.body = b"".join(self.iter_body())
        return self.response

    def sse(self):
        """Yields ('comment', text) for ':' lines and ('event', name or None, data) per SSE event."""
        pending = b""
        for piece in self.iter_body():
            pending += piece
            while b"\n\n" in pending:
                block, pending = pending.split(b"\n\n", 1)
                name, data = None, []
                for line in block.decode("utf-8").split("\n"):
                    if line.startswith(":"):
                        yield ("comment", line[1:].strip())
                    elif line.startswith("event:"):
                        name = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].lstrip(" "))
                    else:
                        raise AssertionError(f"unexpected SSE line {line!r}")
                if data:
                    yield ("event", name, "\n".join(data))
                elif name is not None:
                    raise AssertionError(f"SSE event {name!r} without data")
        assert pending.strip() == b"", f"stream ended inside an event: {pending[:200]!r}"

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def request(port, method, path, body=None, headers=None, timeout=120):
    c = Conn(port, timeout)
    try:
        c.send(method, path, body, headers)
        c.read_head()
        return c.read_body()
    finally:
        c.close()


def post(port, path, body, **kw):
    return request(port, "POST", path, body, **kw)


def get_json(port, path):
    r = request(port, "GET", path, timeout=30)
    assert r.status == 200, r
    return r.json()


def open_stream(port, path, body, timeout=120):
    """Sends a streaming request and reads the head; the caller reads sse() and close()s."""
    c = Conn(port, timeout)
    c.send("POST", path, body)
    c.read_head()
    return c


# --- error shapes ---------------------------------------------------------------------------------

def check_error(route, resp, status, error_type=None, param=None, code=None, message_contains=None):
    """The response is `status` with the route's API error shape; returns the inner error object."""
    assert resp.status == status, f"{route}: expected {status}, got {resp!r}"
    ctype = resp.header("content-type") or ""
    assert ctype.startswith("application/json"), f"{route}: error content type {ctype!r}"
    body = resp.json()
    if route.startswith(ANTHROPIC_ROUTE):
        assert isinstance(body, dict) and set(body) == {"type", "error"}, body
        assert body["type"] == "error", body
        err = body["error"]
        assert isinstance(err, dict) and {"type", "message"} <= set(err), body
    else:
        assert isinstance(body, dict) and set(body) == {"error"}, body
        err = body["error"]
        assert isinstance(err, dict) and set(err) == {"message", "type", "param", "code"}, body
        assert err["param"] is None or isinstance(err["param"], str), body
        assert err["code"] is None or isinstance(err["code"], str), body
        if param is not None:
            assert err["param"] == param, f"param: expected {param!r}, got {body}"
        if code is not None:
            assert err["code"] == code, f"code: expected {code!r}, got {body}"
    assert isinstance(err["message"], str) and err["message"], body
    assert isinstance(err["type"], str) and err["type"], body
    if error_type is not None:
        assert err["type"] == error_type, f"type: expected {error_type!r}, got {body}"
    if message_contains is not None:
        assert message_contains in err["message"], f"message should contain {message_contains!r}: {body}"
    return err


def check_corpus_response(row, resp):
    check_error(row["route"], resp, row["status"], row["error_type"],
                param=row.get("param"), message_contains=row.get("message_contains"))


# --- server state ---------------------------------------------------------------------------------

def health(port):
    return get_json(port, "/health")


METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)'
                         r'(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*\})?'
                         r' (\S+)$')


def metrics(port):
    """Parses the Prometheus text: {'name{labels}': value}; every line must be well-formed."""
    r = request(port, "GET", "/metrics", timeout=30)
    assert r.status == 200, r
    assert (r.header("content-type") or "").startswith("text/plain"), r.headers
    out = {}
    for line in r.body.decode("utf-8").splitlines():
        if not line or line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        m = METRIC_LINE.match(line)
        assert m, f"malformed metrics line {line!r}"
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def wait_metrics(port, check, timeout=10):
    """Polls /metrics until check(metrics) passes (returns them) or the timeout (re-raises).
    Request counts (dsv4_requests_total) are taken after the response is written, so a client can
    see its answer a moment before the count moves."""
    deadline = time.time() + timeout
    while True:
        m = metrics(port)
        try:
            check(m)
            return m
        except (AssertionError, KeyError):
            if time.time() > deadline:
                raise
        time.sleep(0.05)


def wait_until(pred, timeout, what, interval=0.05):
    deadline = time.time() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def wait_idle(port, timeout=30):
    return wait_until(lambda: (lambda h: h if not h["busy"] and h["queue_depth"] == 0 else None)(health(port)),
                      timeout, "the server to be idle (/health busy=false, queue_depth=0)")


def eos_token_id(port):
    """The id of <｜end▁of▁sentence｜> in the model the server runs (its path from /props)."""
    model = get_json(port, "/props")["model"]["path"]
    out = subprocess.run([dsv4_bin(), "tokenize", "-m", model, "--text", EOS_TEXT],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    ids = json.loads(out.stdout)
    assert isinstance(ids, list) and len(ids) == 1, f"{EOS_TEXT} is not one token: {ids}"
    return ids[0]


def long_chat(eos, content="Tell me a very long story about the sea.", max_tokens=800, **kw):
    """A streaming chat request that cannot end early: EOS banned, no thinking, no stops."""
    body = {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "stream": True, "thinking": NO_THINK, "logit_bias": {str(eos): -100}}
    body.update(kw)
    return body
