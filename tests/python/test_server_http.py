"""Hostile HTTP against a real `dsv4 serve` (issue #15 section 2, items 2-14), over raw sockets:
JSON limits on every route (linear parsing, no deep-nesting crash), bounded chunked bodies and
refused content codings, header limits (431), request-smuggling building blocks, pipelining,
Range ignored, 411 at once, slowloris connections, a second server on a taken port, the queue
limit, stop during a body read, disconnects during non-streaming generation, form bodies (415),
and unlimited keep-alive. Every server is stopped with SIGTERM and must exit 0 (and, under ASan,
without a sanitizer report): no crash and no 5xx anywhere.
"""
import gzip
import json
import os
import socket
import subprocess
import threading
import time

import pytest

from dsv4_server import Server, default_model, dsv4_bin
from server_http import (ANTHROPIC_ROUTE, NO_THINK, Conn, check_error, eos_token_id, health, long_chat, metrics,
                         post, request, wait_idle, wait_until)

CHAT, COMPLETIONS, MESSAGES = "/v1/chat/completions", "/v1/completions", ANTHROPIC_ROUTE
COUNT = "/v1/messages/count_tokens"
HI = [{"role": "user", "content": "hi"}]


def small_chat(**kw):
    body = {"model": "m", "messages": HI, "max_tokens": 3, "thinking": NO_THINK}
    body.update(kw)
    return body


def assert_served(port):
    r = post(port, CHAT, small_chat())
    assert r.status == 200, r
    assert r.json()["object"] == "chat.completion"
    wait_idle(port)


def raw_exchange(port, data, timeout=30):
    """Sends raw bytes, then reads everything until the server closes (or `timeout`)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        out = b""
        while True:
            try:
                d = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not d:
                break
            out += d
        return out
    finally:
        s.close()


def responses_in(raw):
    """The status codes of the HTTP responses in a byte stream (Content-Length framed)."""
    statuses = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, raw[:200]
        lines = head.decode("latin-1").split("\r\n")
        statuses.append(int(lines[0].split(" ")[1]))
        n = 0
        for line in lines[1:]:
            k, _, v = line.partition(":")
            if k.strip().lower() == "content-length":
                n = int(v.strip())
        raw = rest[n:]
    return statuses


def one_response(port, data, timeout=30):
    c = Conn(port, timeout=timeout)
    try:
        c.sock.sendall(data)
        c.read_head()
        return c.read_body()
    finally:
        c.close()


@pytest.fixture(scope="module")
def server():
    s = Server("--keepalive-ms", "100", "--head-timeout-s", "3")
    yield s
    assert s.stop() == 0
    assert not any("ERROR: AddressSanitizer" in line for line in s.log)


@pytest.fixture(scope="module")
def small_server():
    s = Server("--max-body-mb", "1")
    yield s
    assert s.stop() == 0


# --- 2 and 13: one JSON parser, one set of limits, linear time, on every route ----------------------

def keys_object(n, start=0):
    return "{" + ",".join(f'"k{start + i}":{i}' for i in range(n)) + "}"


def test_80k_keys_are_rejected_at_once(server):
    body = ('{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}],"x":' + keys_object(80000) +
            "}").encode()
    t0 = time.time()
    r = post(server.port, CHAT, body)
    elapsed = time.time() - t0
    check_error(CHAT, r, 400, "invalid_request_error", message_contains="more than 4096 keys")
    assert elapsed < 3, f"80k keys took {elapsed:.1f} s"


def test_a_million_keys_are_rejected_at_once(server):
    """1e6 keys in one object used to hang the server (and its SIGTERM)."""
    body = ('{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}],"x":' + keys_object(1000000) +
            "}").encode()
    t0 = time.time()
    r = post(server.port, MESSAGES, body)
    elapsed = time.time() - t0
    check_error(MESSAGES, r, 400, "invalid_request_error", message_contains="more than 4096 keys")
    assert elapsed < 5, f"1e6 keys took {elapsed:.1f} s"
    assert_served(server.port)


def test_deep_nesting_on_every_route(server):
    """A 100k-deep body used to kill the server through /v1/messages/count_tokens."""
    deep = "[" * 100000 + "]" * 100000
    for route, body in ((COUNT, '{"model":"m","messages":[{"role":"user","content":"hi"}],"x":%s}'),
                        (MESSAGES, '{"model":"m","max_tokens":3,"messages":[],"x":%s}'),
                        (CHAT, '{"model":"m","messages":[],"x":%s}'),
                        (COMPLETIONS, '{"model":"m","prompt":"a","x":%s}'),
                        ("/tokenize", '{"content":"a","x":%s}'),
                        ("/detokenize", '{"tokens":[1],"x":%s}')):
        r = post(server.port, route, (body % deep).encode())
        check_error(route, r, 400, message_contains="nested more than 256 levels")
        assert server.alive()
    many = ('{"model":"m","messages":[{"role":"user","content":"hi"}],"x":' + keys_object(5000) + "}").encode()
    for route in (COUNT, "/tokenize", "/detokenize"):
        r = post(server.port, route, many)
        check_error(route, r, 400, message_contains="more than 4096 keys")
    r = post(server.port, COUNT, {"model": "m", "messages": HI})
    assert r.status == 200 and r.json()["input_tokens"] > 0, r
    assert_served(server.port)


# --- 3: chunked and compressed bodies are bounded --------------------------------------------------

def test_chunked_body_over_the_limit_is_413(small_server):
    server = small_server
    piece = b"a" * 65536
    data = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" +
            b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(40)) + b"0\r\n\r\n")
    r = one_response(server.port, data)
    check_error(CHAT, r, 413, message_contains="1048576")
    assert r.header("connection") == "close"
    # One declared chunk over the limit is refused before its data is sent.
    r = one_response(server.port, b"POST /v1/messages HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n200000\r\n")
    check_error(MESSAGES, r, 413, "request_too_large")


def test_chunked_body_under_the_limit_is_served(server):
    body = json.dumps(small_chat()).encode()
    data = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(b"%x;ext=1\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7])
                                                           for i in range(0, len(body), 7)) + b"0\r\nX-T: 1\r\n\r\n")
    r = one_response(server.port, data)
    assert r.status == 200 and r.json()["object"] == "chat.completion", r


def test_gzip_bodies_are_refused_not_inflated(small_server):
    server = small_server
    """A 1 KB gzip body that inflates to 64 MB (over the 1 MiB limit): 415, never decoded."""
    bomb = gzip.compress(b"{" + b" " * (64 << 20) + b"}")
    assert len(bomb) < 200000
    for enc in ("gzip", "deflate", "br", "gzip, identity"):
        c = Conn(server.port)
        try:
            c.send("POST", CHAT, bomb, headers={"Content-Encoding": enc})
            c.read_head()
            r = c.read_body()
        finally:
            c.close()
        err = check_error(CHAT, r, 415, "invalid_request_error")
        assert "uncompressed" in err["message"], err
        assert r.header("accept-encoding") == "identity"
    r = post(server.port, CHAT, small_chat(), headers={"Content-Encoding": "identity"})
    assert r.status == 200, r


# --- 4: header count and size (before authentication) ---------------------------------------------

def test_too_many_or_too_large_headers_are_431():
    s = Server("--api-key", "k")
    try:
        many = b"GET /v1/models HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(3000)) + b"\r\n"
        r = one_response(s.port, many)
        check_error("/v1/models", r, 431, message_contains="header fields")
        big = b"GET /v1/models HTTP/1.1\r\nX-Big: " + b"a" * (200 << 10) + b"\r\n\r\n"
        r = one_response(s.port, big)
        check_error("/v1/models", r, 431)
        long_line = b"GET /" + b"a" * (16 << 10) + b" HTTP/1.1\r\n\r\n"
        r = one_response(s.port, long_line)
        assert r.status == 414, r
        ok = b"GET /v1/models HTTP/1.1\r\nAuthorization: Bearer k\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(90))
        r = one_response(s.port, ok + b"\r\n")
        assert r.status == 200, r
    finally:
        assert s.stop() == 0


# --- 5: request smuggling building blocks ---------------------------------------------------------

def test_unread_body_of_a_401_is_not_a_request():
    s = Server("--api-key", "k")
    try:
        inner = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        data = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(inner)) + inner
        raw = raw_exchange(s.port, data)
        assert responses_in(raw) == [401], raw[:500]
        assert b"connection: close" in raw.lower()
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("head", [
    b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    b"Content-Length: 5\r\nContent-Length: 5\r\n",
    b"Content-Length: 5\r\nContent-Length: 6\r\n",
    b"Content-Length: 5, 5\r\n",
    b"Transfer-Encoding : chunked\r\n",
    b"Transfer-Encoding: chunked, identity\r\n",
    b"Transfer-Encoding: xchunked\r\n",
    b" Content-Length: 5\r\n",
    b"X: a\r\n folded: 5\r\n",
])
def test_smuggling_heads_get_400_and_close(server, head):
    smuggled = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    data = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n0\r\n\r\n" + smuggled
    raw = raw_exchange(server.port, data)
    assert responses_in(raw) == [400], raw[:500]
    assert b"connection: close" in raw.lower()
    assert server.alive()


# --- 6 and 14: pipelining and keep-alive -----------------------------------------------------------

def test_pipelined_requests_are_answered_in_order(server):
    body = json.dumps(small_chat()).encode()
    data = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s"
            b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") % (len(body), body)
    raw = raw_exchange(server.port, data)
    assert responses_in(raw) == [200, 200, 404, 200], raw[:800]
    parts = raw.split(b"HTTP/1.1 ")[1:]
    assert b'"status":"ok"' in parts[0] and b"chat.completion" in parts[1] and b'"object":"list"' in parts[3]


def test_keep_alive_is_not_limited_to_5_requests(server):
    c = Conn(server.port)
    try:
        for i in range(30):
            c.send("GET", "/health")
            r = c.read_head()
            c.read_body()
            assert r.status == 200, (i, r)
            assert (r.header("connection") or "").lower() != "close", (i, r.headers)
        c.send("POST", CHAT, small_chat())
        c.read_head()
        assert c.read_body().status == 200
    finally:
        c.close()


def test_expect_100_continue(server):
    body = json.dumps(small_chat()).encode()
    c = Conn(server.port)
    try:
        c.sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                       b"Content-Length: %d\r\n\r\n" % len(body))
        assert c.read_head().status == 100
        c.sock.sendall(body)
        r = c.read_head()
        assert c.read_body().status == 200, r
    finally:
        c.close()


# --- 7: Range is not applied to API responses -----------------------------------------------------

def test_range_is_ignored(server):
    full = request(server.port, "GET", "/v1/models")
    for rng in ("bytes=0-3", "bytes=-2", "bytes=0-1,4-5"):
        r = request(server.port, "GET", "/v1/models", headers={"Range": rng})
        assert r.status == 200 and r.header("content-range") is None, r
        assert r.body == full.body
    r = post(server.port, CHAT, small_chat(), headers={"Range": "bytes=0-3"})
    assert r.status == 200 and r.json()["object"] == "chat.completion", r


# --- 8: a POST without a length is answered at once -----------------------------------------------

def test_post_without_length_is_411_at_once(server):
    t0 = time.time()
    r = one_response(server.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n")
    check_error(CHAT, r, 411, message_contains="Content-Length")
    assert time.time() - t0 < 2


# --- 9: slowloris ----------------------------------------------------------------------------------

def test_normal_requests_are_served_during_100_slowloris_connections(server):
    port = server.port
    stop = threading.Event()
    socks = []
    for _ in range(100):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)

    def drip():
        # Drips for 1.5 s (the normal requests go through meanwhile), then goes quiet so that the
        # 408 answers are not reset by late bytes.
        end = time.time() + 1.5
        while not stop.is_set() and time.time() < end:
            for s in socks:
                try:
                    s.sendall(b"X")
                except OSError:
                    pass
            time.sleep(0.5)

    t = threading.Thread(target=drip, daemon=True)
    t.start()
    try:
        time.sleep(0.5)
        t0 = time.time()
        r = post(port, CHAT, small_chat(), timeout=20)
        assert r.status == 200, r
        assert request(port, "GET", "/health", timeout=20).status == 200
        assert time.time() - t0 < 10
        # --head-timeout-s 3: every slow head is answered 408 and closed.
        time.sleep(4)
        closed = 0
        for s in socks:
            s.settimeout(5)
            try:
                data = s.recv(65536)
                if data.startswith(b"HTTP/1.1 408"):
                    closed += 1
            except OSError:
                pass
        assert closed == 100, closed
    finally:
        stop.set()
        t.join(5)
        for s in socks:
            s.close()
    assert_served(port)


def test_idle_connection_is_closed_after_the_idle_timeout():
    s = Server("--idle-timeout-s", "1")
    try:
        c = Conn(s.port, timeout=10)
        try:
            c.send("GET", "/health")
            c.read_head()
            c.read_body()
            t0 = time.time()
            assert c.sock.recv(10) == b""  # closed by the server
            assert 0.5 < time.time() - t0 < 5
        finally:
            c.close()
    finally:
        assert s.stop() == 0


# --- 10: a second server on a taken port fails --------------------------------------------------------

def test_second_server_on_the_same_port_fails(server):
    cmd = [dsv4_bin(), "--threads", "1", "serve", "--port", str(server.port)]
    if default_model():
        cmd += ["-m", default_model()]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0, out.stderr[-2000:]
    assert "address already in use" in out.stderr.lower(), out.stderr[-2000:]
    assert_served(server.port)


# --- 11: queue limit, stop during a body, disconnect during a non-streaming generation --------------

def test_max_queue_0_serves_when_idle():
    s = Server("--max-queue", "0")
    try:
        for _ in range(3):
            r = post(s.port, CHAT, small_chat())
            assert r.status == 200, r
            wait_idle(s.port)
    finally:
        assert s.stop() == 0


def test_stop_does_not_wait_for_a_body_in_flight():
    s = Server()
    c = Conn(s.port)
    try:
        c.sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"a\"")
        time.sleep(0.3)
        t0 = time.time()
        assert s.stop(timeout=20) == 0
        assert time.time() - t0 < 5, time.time() - t0
    finally:
        c.close()


def test_disconnect_during_non_streaming_generation_cancels_it(server):
    port = server.port
    eos = eos_token_id(port)
    wait_idle(port)
    before = metrics(port)
    c = Conn(port)
    c.send("POST", CHAT, long_chat(eos, "A long answer nobody waits for.", max_tokens=1000, stream=False))
    wait_until(lambda: health(port)["busy"], 60, "the generation to start")
    c.close()
    wait_idle(port, timeout=15)
    after = metrics(port)
    assert after['dsv4_errors_total{kind="cancelled"}'] - before.get('dsv4_errors_total{kind="cancelled"}', 0) == 1
    generated = after["dsv4_completion_tokens_total"] - before["dsv4_completion_tokens_total"]
    assert generated < 1000, generated
    assert_served(port)


# --- 12: form bodies --------------------------------------------------------------------------------

def test_json_sent_as_form_is_served_and_a_real_form_is_415(server):
    body = json.dumps(small_chat(user="u" * 10000)).encode()
    r = post(server.port, CHAT, body, headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status == 200, r
    form = b"model=m&" + b"x=" * 6000
    for route in (CHAT, MESSAGES, COUNT):
        r = post(server.port, route, form, headers={"Content-Type": "application/x-www-form-urlencoded"})
        check_error(route, r, 415, message_contains="JSON")


# --- the rest: malformed heads, timeouts, nothing 5xx ---------------------------------------------------

def test_malformed_heads_are_4xx_json(server):
    for raw, status in ((b"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", 400),
                        (b"GET /\x01 HTTP/1.1\r\n\r\n", 400),
                        (b"GET / HTTP/2.0\r\n\r\n", 400),
                        (b"POST /v1/chat/completions HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
                        (b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", 413),
                        (b"GET / HTTP/1.1\r\nExpect: nothing\r\n\r\n", 417)):
        r = one_response(server.port, raw)
        assert r.status == status, (raw, r)
        r.json()
    assert server.alive()


def test_head_timeout_is_408(server):
    c = Conn(server.port, timeout=20)
    try:
        c.sock.sendall(b"GET /health HTTP/1.1\r\nHost")
        t0 = time.time()
        r = c.read_head()
        assert r.status == 408 and 2 < time.time() - t0 < 10, r
    finally:
        c.close()


def test_no_5xx_in_the_metrics(server):
    m = metrics(server.port)
    bad = {k: v for k, v in m.items() if k.startswith("dsv4_requests_total") and 'status="5' in k}
    assert not bad, bad
