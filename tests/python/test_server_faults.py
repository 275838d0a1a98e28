"""Fault handling of a real `dsv4 serve` (built-in tiny model), over raw sockets so every byte is
under the test's control: the bad-request corpus (tests/data/server/bad_requests.jsonl), body limit
(413), bounded queue (429 + Retry-After), client disconnects (running and queued generations are
cancelled), SSE progress/keep-alive comments, context limits, absurd values, unknown routes and
methods, malformed HTTP, CORS, and a graceful SIGTERM during a generation. Every server is stopped
with SIGTERM and must exit 0 without a sanitizer report (dsv4_server.Server.stop).
"""
import collections
import json
import threading
import time

import pytest

from dsv4_server import Server
from server_http import (ANTHROPIC_ROUTE, NO_THINK, Conn, check_corpus_response, check_error, corpus_body,
                         eos_token_id, get_json, health, load_corpus, long_chat, metrics, open_stream, post,
                         request, wait_idle, wait_metrics, wait_until)

CHAT, COMPLETIONS, MESSAGES = "/v1/chat/completions", "/v1/completions", ANTHROPIC_ROUTE
HI = [{"role": "user", "content": "hi"}]


def small_chat(**kw):
    body = {"model": "m", "messages": HI, "max_tokens": 3, "thinking": NO_THINK}
    body.update(kw)
    return body


def assert_served(port):
    """The server answers a normal request and is idle afterwards."""
    r = post(port, CHAT, small_chat())
    assert r.status == 200, r
    out = r.json()
    assert out["object"] == "chat.completion" and out["choices"][0]["finish_reason"] in ("stop", "length"), out
    wait_idle(port)


def delta_events(conn, n):
    """Reads SSE events until n data events carried generated text; returns all items read."""
    got, items = 0, []
    for item in conn.sse():
        items.append(item)
        if item[0] == "event" and item[2] != "[DONE]":
            ev = json.loads(item[2])
            if ev.get("choices") and (ev["choices"][0].get("delta", {}).get("content") or
                                      ev["choices"][0].get("text")):
                got += 1
                if got >= n:
                    return items
    raise AssertionError(f"the stream ended after {got} text events: {items[-5:]}")


@pytest.fixture(scope="module")
def server():
    # Short keep-alive interval: a queued stream's disconnect is noticed at its next keep-alive.
    s = Server("--keepalive-ms", "100")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def eos(server):
    return eos_token_id(server.port)


# --- the bad-request corpus -----------------------------------------------------------------------

def test_corpus_is_present_and_large():
    rows = load_corpus(min_entries=100)
    routes = collections.Counter(r["route"] for r in rows)
    assert set(routes) == {CHAT, COMPLETIONS, MESSAGES, "/v1/responses"}, routes


def test_bad_request_corpus(server):
    rows = load_corpus(min_entries=100)
    before = metrics(server.port)
    failures = []
    for row in rows:
        r = post(server.port, row["route"], corpus_body(row))
        try:
            check_corpus_response(row, r)
        except AssertionError as e:
            failures.append(f"{row['name']}: {e}")
    assert not failures, f"{len(failures)} of {len(rows)} corpus entries failed:\n" + "\n".join(failures)
    # Each rejection was counted under its route and status, and as a bad request.
    def counted(after):
        for route, n in collections.Counter((r["route"], r["status"]) for r in rows).items():
            key = f'dsv4_requests_total{{route="{route[0]}",status="{route[1]}"}}'
            assert after.get(key, 0) - before.get(key, 0) == n, (key, after.get(key, 0) - before.get(key, 0), n)
    after = wait_metrics(server.port, counted)
    key = 'dsv4_errors_total{kind="bad_request"}'
    assert after.get(key, 0) - before.get(key, 0) == len(rows)
    # Nothing reached the engine, and the server is fine.
    assert after["dsv4_generations_total"] == before["dsv4_generations_total"]
    assert health(server.port) == {"status": "ok", "busy": False, "queue_depth": 0}
    assert_served(server.port)


def test_corpus_on_one_keep_alive_connection(server):
    """Rejected bodies are consumed exactly: the next request on the same connection is parsed cleanly."""
    rows = load_corpus(min_entries=100)
    picks = [r for r in rows if r["route"] == CHAT][:3] + [r for r in rows if r["route"] == MESSAGES][:1]
    c = Conn(server.port)
    try:
        for row in picks:
            c.send("POST", row["route"], corpus_body(row))
            c.read_head()
            check_corpus_response(row, c.read_body())
        c.send("POST", CHAT, small_chat())
        c.read_head()
        r = c.read_body()
        assert r.status == 200 and r.json()["object"] == "chat.completion", r
    finally:
        c.close()


# --- body limit -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_body_server():
    s = Server("--max-body-mb", "1")
    yield s
    assert s.stop() == 0


def test_413_body_too_large(small_body_server):
    port = small_body_server.port
    big = json.dumps(small_chat(user="u" * (2 << 20))).encode()
    assert len(big) > 2 << 20
    for route in (CHAT, COMPLETIONS, MESSAGES):
        r = post(port, route, big)
        err = check_error(route, r, 413)
        assert "1048576" in err["message"], err
    assert metrics(port)['dsv4_errors_total{kind="too_large"}'] == 3
    # Just under the limit is read and served.
    ok = json.dumps(small_chat(user="u" * ((1 << 20) - 4096))).encode()
    assert len(ok) < 1 << 20
    r = post(port, CHAT, ok)
    assert r.status == 200, r
    assert_served(port)


def test_413_chunked_body_too_large(small_body_server):
    port = small_body_server.port
    c = Conn(port)
    try:
        piece = b"a" * 65536
        data = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" +
                b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(40)) + b"0\r\n\r\n")
        try:
            c.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        c.read_head()
        r = c.read_body()
    finally:
        c.close()
    check_error(CHAT, r, 413)


def test_json_body_with_curl_default_content_type(server):
    body = json.dumps(small_chat(user="u" * 10000)).encode()
    r = post(server.port, CHAT, body, headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status == 200, r


# --- bounded queue --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def queue1_server():
    s = Server("--max-queue", "1", "--keepalive-ms", "100")
    yield s
    assert s.stop() == 0


def test_429_when_the_queue_is_full(queue1_server):
    port = queue1_server.port
    eos = eos_token_id(port)
    running = open_stream(port, CHAT, long_chat(eos, "Story one."))
    queued = None
    try:
        assert running.response.status == 200, running.response
        wait_until(lambda: (lambda h: h["busy"] and h["queue_depth"] == 0)(health(port)), 60, "the first job to run")
        queued = open_stream(port, CHAT, long_chat(eos, "Story two."))
        assert queued.response.status == 200, queued.response
        wait_until(lambda: health(port)["queue_depth"] == 1, 60, "the second job to queue")
        # One running, one waiting: everything else is turned away at once, in each route's shape.
        rejected = [
            (CHAT, small_chat(), "rate_limit_exceeded"),
            (CHAT, long_chat(eos), "rate_limit_exceeded"),
            (COMPLETIONS, {"model": "m", "prompt": "Hello", "max_tokens": 3}, "rate_limit_exceeded"),
            (MESSAGES, {"model": "m", "max_tokens": 3, "messages": HI}, "rate_limit_error"),
            (MESSAGES, {"model": "m", "max_tokens": 3, "messages": HI, "stream": True}, "rate_limit_error"),
        ]
        for route, body, etype in rejected:
            r = post(port, route, body)
            err = check_error(route, r, 429, etype)
            assert r.header("retry-after") == "1", r.headers
            if route != MESSAGES:
                assert err["code"] == "queue_full", err
        assert health(port)["queue_depth"] == 1
    finally:
        running.close()
        if queued:
            queued.close()
    wait_idle(port)
    m = metrics(port)
    assert m['dsv4_errors_total{kind="queue_full"}'] == 5
    assert m['dsv4_errors_total{kind="cancelled"}'] == 2
    assert_served(port)


def test_429_under_a_burst_of_streams(queue1_server):
    """Several long streams at once against --max-queue 1: one runs, at most one waits, the rest get
    429 with Retry-After; cancelling the accepted ones frees the server."""
    port = queue1_server.port
    eos = eos_token_id(port)
    n = 5
    conns, errors = [None] * n, []
    start = threading.Barrier(n)

    def client(i):
        try:
            start.wait()
            conns[i] = open_stream(port, CHAT, long_chat(eos, f"Story number {i}."))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert not errors, errors
        statuses = collections.Counter(c.response.status for c in conns)
        assert set(statuses) <= {200, 429} and 1 <= statuses[200] <= 2 and statuses[429] >= n - 2, statuses
        for c in conns:
            if c.response.status == 429:
                check_error(CHAT, c.read_body(), 429, "rate_limit_exceeded", code="queue_full")
                assert c.response.header("retry-after") == "1"
    finally:
        for c in conns:
            if c:
                c.close()
    wait_idle(port)
    assert_served(port)


# --- client disconnects ---------------------------------------------------------------------------

def test_disconnect_mid_stream_cancels_the_generation(server, eos):
    port = server.port
    wait_idle(port)
    before = metrics(port)
    c = open_stream(port, CHAT, long_chat(eos, "A story about disconnecting.", max_tokens=800))
    try:
        assert c.response.status == 200, c.response
        assert c.response.header("content-type").startswith("text/event-stream")
        delta_events(c, 3)
    finally:
        c.close()
    # The worker notices at its next token: busy=false soon (a finished generation would take 800 tokens).
    wait_idle(port, timeout=15)
    after = metrics(port)
    assert after['dsv4_errors_total{kind="cancelled"}'] - before.get('dsv4_errors_total{kind="cancelled"}', 0) == 1
    assert after["dsv4_generations_total"] - before["dsv4_generations_total"] == 1
    generated = after["dsv4_completion_tokens_total"] - before["dsv4_completion_tokens_total"]
    assert 3 <= generated < 800, generated
    assert any("finish cancelled" in line for line in server.log), "".join(server.log[-20:])
    assert_served(port)


def test_disconnect_while_queued(server, eos):
    """A stream that disconnects while waiting behind another is dropped without ever being prefilled."""
    port = server.port
    wait_idle(port)
    running_body = long_chat(eos, "The running one.")
    probe = dict(running_body, stream=False, max_tokens=1)
    prompt_a = post(port, CHAT, probe).json()["usage"]["prompt_tokens"]
    wait_idle(port)
    before = metrics(port)
    running = open_stream(port, CHAT, running_body)
    try:
        assert running.response.status == 200
        delta_events(running, 1)
        queued = open_stream(port, CHAT, long_chat(eos, "The queued one, which has a longer prompt than the other."))
        assert queued.response.status == 200
        assert health(port)["queue_depth"] == 1
        queued.close()
        # Its handler notices at the next keep-alive (100 ms); the job stays queued until popped.
        time.sleep(1.5)
        h = health(port)
        assert h["busy"] and h["queue_depth"] == 1, h
    finally:
        running.close()
    wait_idle(port, timeout=15)
    after = metrics(port)
    assert after['dsv4_errors_total{kind="cancelled"}'] - before.get('dsv4_errors_total{kind="cancelled"}', 0) == 2
    assert after["dsv4_generations_total"] - before["dsv4_generations_total"] == 2
    # Only the running request's prompt was ever seen by the engine.
    assert after["dsv4_prompt_tokens_total"] - before["dsv4_prompt_tokens_total"] == prompt_a
    assert after["dsv4_completion_tokens_total"] - before["dsv4_completion_tokens_total"] < 800
    assert_served(port)


def test_disconnect_before_reading_anything(server, eos):
    """A client that sends a streaming request and hangs up at once (never reads the head)."""
    port = server.port
    wait_idle(port)
    before = metrics(port)
    for route, body in ((CHAT, long_chat(eos)),
                        (MESSAGES, {"model": "m", "max_tokens": 800, "stream": True, "messages": HI,
                                    "thinking": NO_THINK})):
        c = Conn(port)
        c.send("POST", route, body)
        c.close()
    wait_until(lambda: metrics(port)["dsv4_generations_total"] - before["dsv4_generations_total"] >= 2, 60,
               "both abandoned requests to reach the worker")
    wait_idle(port, timeout=15)
    after = metrics(port)
    assert after['dsv4_errors_total{kind="cancelled"}'] - before.get('dsv4_errors_total{kind="cancelled"}', 0) == 2
    assert after["dsv4_completion_tokens_total"] - before["dsv4_completion_tokens_total"] < 1600
    assert_served(port)


# --- SSE comments -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chunky_server():
    s = Server("--prefill-chunk", "8", "--keepalive-ms", "50")
    yield s
    assert s.stop() == 0


def long_prompt(tag):
    return " ".join(f"{tag} item {i} is a {'red' if i % 2 else 'blue'} thing." for i in range(40))


def check_prefill_comments(comments, prompt_tokens):
    """': prefill D/T' lines: T is the prompt length, D steps by the chunk size from the cached
    length up to the last prompt token (which is forwarded alone)."""
    prefill = [c for c in comments if c.startswith("prefill ")]
    assert prefill, comments
    pairs = [tuple(int(x) for x in c[len("prefill "):].split("/")) for c in prefill]
    assert all(t == prompt_tokens for _, t in pairs), (pairs, prompt_tokens)
    done = [d for d, _ in pairs]
    assert done == list(range(done[0], prompt_tokens - 1, 8)), done
    assert len(done) >= 10, done  # a few hundred tokens in chunks of 8
    for c in comments:
        assert c.startswith("prefill ") or c == "keep-alive", c


def test_prefill_and_keepalive_comments_completions(chunky_server):
    port = chunky_server.port
    c = open_stream(port, COMPLETIONS, {"model": "m", "prompt": long_prompt("alpha"), "max_tokens": 4, "stream": True,
                                        "stream_options": {"include_usage": True}})
    try:
        assert c.response.status == 200
        items = list(c.sse())
    finally:
        c.close()
    first_data = next(i for i, it in enumerate(items) if it[0] == "event")
    comments = [it[1] for it in items[:first_data] if it[0] == "comment"]
    assert comments, "no ': prefill' / ': keep-alive' comment before the first data event"
    data = [json.loads(it[2]) for it in items if it[0] == "event" and it[2] != "[DONE]"]
    assert items[-1] == ("event", None, "[DONE]")
    usage = data[-1]["usage"]
    assert usage["prompt_tokens"] >= 200, usage
    check_prefill_comments([it[1] for it in items if it[0] == "comment"], usage["prompt_tokens"])


def test_prefill_and_keepalive_comments_chat(chunky_server):
    port = chunky_server.port
    body = {"model": "m", "messages": [{"role": "user", "content": long_prompt("beta")}], "max_tokens": 4,
            "stream": True, "stream_options": {"include_usage": True}, "thinking": NO_THINK}
    c = open_stream(port, CHAT, body)
    try:
        items = list(c.sse())
    finally:
        c.close()
    data = [(i, json.loads(it[2])) for i, it in enumerate(items) if it[0] == "event" and it[2] != "[DONE]"]
    # The role chunk comes first, then the prefill progress, then the first generated text.
    assert data[0][1]["choices"][0]["delta"].get("role") == "assistant"
    first_text = next(i for i, d in data if d["choices"] and d["choices"][0]["delta"].get("content") is not None
                      and i > data[0][0])
    between = [it[1] for it in items[data[0][0]:first_text] if it[0] == "comment"]
    assert between, "no comment between the role chunk and the first content"
    usage = data[-1][1]["usage"]
    check_prefill_comments([it[1] for it in items if it[0] == "comment"], usage["prompt_tokens"])


def test_anthropic_stream_has_prefill_comments(chunky_server):
    port = chunky_server.port
    body = {"model": "m", "max_tokens": 4, "stream": True, "thinking": NO_THINK,
            "messages": [{"role": "user", "content": long_prompt("gamma")}]}
    c = open_stream(port, MESSAGES, body)
    try:
        items = list(c.sse())
    finally:
        c.close()
    names = [it[1] for it in items if it[0] == "event"]
    assert names[0] == "message_start" and names[-1] == "message_stop", names
    start = json.loads(next(it[2] for it in items if it[0] == "event"))
    comments = [it[1] for it in items if it[0] == "comment"]
    check_prefill_comments(comments, start["message"]["usage"]["input_tokens"])


# --- context limits -------------------------------------------------------------------------------

def test_context_limits(server, eos):
    port = server.port
    ctx = get_json(port, "/v1/models")["data"][0]["context_length"]
    assert ctx == 1024
    wait_idle(port)
    n = post(port, CHAT, small_chat(max_tokens=1)).json()["usage"]["prompt_tokens"]
    c = open_stream(port, CHAT, long_chat(eos, "hi", max_tokens=ctx + 1 - n))
    try:
        assert c.response.status == 200, c.read_body()  # exactly at the limit: accepted
        delta_events(c, 1)
    finally:
        c.close()
    wait_idle(port, timeout=15)
    # (max_tokens beyond the limit is clamped: test_max_tokens_beyond_the_context_is_clamped.)

    # A prompt longer than the context, on every route.
    long = "word " * (2 * ctx)
    r = post(port, CHAT, {"model": "m", "messages": [{"role": "user", "content": long}], "max_tokens": 4})
    check_error(CHAT, r, 400, "invalid_request_error", param="messages", code="context_length_exceeded")
    r = post(port, CHAT, {"model": "m", "messages": [{"role": "user", "content": long}]})  # no max_tokens
    check_error(CHAT, r, 400, "invalid_request_error", code="context_length_exceeded")
    r = post(port, COMPLETIONS, {"model": "m", "prompt": long, "max_tokens": 4})
    check_error(COMPLETIONS, r, 400, "invalid_request_error", param="prompt", code="context_length_exceeded")
    r = post(port, MESSAGES, {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": long}]})
    check_error(MESSAGES, r, 400, "invalid_request_error", message_contains="context length")
    r = post(port, CHAT, {"model": "m", "messages": HI * 5000, "max_tokens": 4})
    check_error(CHAT, r, 400, "invalid_request_error", code="context_length_exceeded")
    m = metrics(port)
    assert m['dsv4_errors_total{kind="context"}'] >= 5
    assert_served(port)


def test_max_tokens_beyond_the_context_is_clamped():
    """max_tokens beyond the room the prompt leaves is clamped to it, not a 400 (issue #15 §3: clients
    send 4096 by default). A 64-token context keeps it quick; EOS banned, so the generation fills the
    context exactly: prompt + completion = ctx + 1 (the last sampled token is never forwarded)."""
    s = Server("--ctx", "64")
    try:
        port = s.port
        eos = eos_token_id(port)
        ban_eos = {str(eos): -100}
        n = post(port, CHAT, small_chat(max_tokens=1)).json()["usage"]["prompt_tokens"]
        room = 64 + 1 - n
        for body in (small_chat(max_tokens=4096, logit_bias=ban_eos, temperature=0),
                     small_chat(max_completion_tokens=2147483647, logit_bias=ban_eos, temperature=0)):
            r = post(port, CHAT, body, timeout=300)
            assert r.status == 200, r
            assert r.json()["choices"][0]["finish_reason"] == "length"
            assert r.json()["usage"]["completion_tokens"] == room
        r = post(port, MESSAGES, {"model": "m", "max_tokens": 4096, "messages": HI, "thinking": NO_THINK,
                                  "temperature": 0}, timeout=300)
        assert r.status == 200, r
        assert r.json()["usage"]["output_tokens"] <= room
        r = post(port, COMPLETIONS, {"model": "m", "prompt": "hi", "max_tokens": 2147483647, "temperature": 0,
                                     "logit_bias": ban_eos}, timeout=300)
        assert r.status == 200, r
        u = r.json()["usage"]
        assert r.json()["choices"][0]["finish_reason"] == "length" and u["prompt_tokens"] + u["completion_tokens"] == 65
    finally:
        assert s.stop() == 0


# --- absurd values, routes, methods, malformed HTTP ----------------------------------------------

ABSURD = [
    # (route, body, status, param) — rejections the corpus (parser-level) does not cover, and
    # extreme values that must simply work.
    (CHAT, small_chat(logit_bias={"999999": 1}), 400, "logit_bias"),
    (CHAT, small_chat(logit_bias={"2147483647": -100}), 400, "logit_bias"),
    (COMPLETIONS, {"model": "m", "prompt": "p", "logit_bias": {"129280": 1}}, 400, "logit_bias"),
    (CHAT, small_chat(seed=18446744073709551616), 400, "seed"),
    (CHAT, small_chat(seed=1e300), 400, "seed"),
    (CHAT, small_chat(max_tokens=2 ** 63), 400, "max_tokens"),
    (CHAT, json.dumps(small_chat()).replace('"max_tokens"', '"temperature": 1e999, "max_tokens"'), 400, None),
    (CHAT, json.dumps(small_chat()).replace('"max_tokens"', '"top_p": -0.0, "max_tokens"'), 400, "top_p"),
    (CHAT, small_chat(seed=2 ** 63 - 1), 200, None),
    (CHAT, small_chat(seed=0), 200, None),
    (CHAT, small_chat(top_k=2147483647, temperature=2, top_p=1e-9, min_p=0), 200, None),
    (CHAT, small_chat(temperature=1e-300), 200, None),
    (CHAT, small_chat(stop=["x" * 100000] * 16), 200, None),
    (CHAT, small_chat(logprobs=True, top_logprobs=20), 200, None),
    (CHAT, small_chat(logit_bias={str(i): -100 for i in range(300)}), 200, None),
    (CHAT, small_chat(user="\u0000\uffff" * 1000, metadata={"k" * 1000: "v"}), 200, None),
    (CHAT, small_chat(messages=[{"role": "user", "content": "\u0000 \ud83d\ude00 \u202e \ufeff"}]), 200, None),
    (COMPLETIONS, {"model": "m", "prompt": "<｜end▁of▁sentence｜><｜begin▁of▁sentence｜>", "max_tokens": 2}, 200, None),
    (MESSAGES, {"model": "m", "max_tokens": 2, "messages": HI, "top_k": 2147483647, "temperature": 1}, 200, None),
    (MESSAGES, {"model": "m", "max_tokens": 2 ** 40, "messages": HI}, 400, None),
]


@pytest.mark.parametrize("case", range(len(ABSURD)))
def test_absurd_values(server, case):
    route, body, status, param = ABSURD[case]
    r = post(server.port, route, body.encode() if isinstance(body, str) else body)
    if status == 200:
        assert r.status == 200, r
        out = r.json()
        assert out["object" if route != MESSAGES else "type"] in ("chat.completion", "text_completion", "message")
    else:
        check_error(route, r, status, "invalid_request_error", param=param)


def test_unknown_routes_are_404_json(server):
    port = server.port
    for method, path, body in (("GET", "/nope", None), ("POST", "/v1/embeddings", {"input": "x"}),
                               ("GET", "/v1/chat/completions/extra", None), ("POST", "/v2/messages", {}),
                               ("GET", b"/v1/\xff\xfe%FF", None)):
        r = request(port, method, path, body)
        check_error(path if isinstance(path, str) else "/v1/x", r, 404, "invalid_request_error")
    r = request(port, "GET", "/v1/messages/batches")
    check_error(MESSAGES, r, 404, "not_found_error")
    r = request(port, "POST", b"/v1/messages/\xc3\x28", {})
    err = check_error(MESSAGES, r, 404, "not_found_error")
    assert "\ufffd" in err["message"], err  # the invalid byte is replaced, the body stays UTF-8
    assert metrics(port)['dsv4_errors_total{kind="not_found"}'] >= 7


def test_metrics_survive_hostile_paths(server):
    """Unknown paths are counted under route="other": raw client bytes never reach the exposition
    (no label injection, no invalid UTF-8, no new series per path)."""
    port = server.port
    before = metrics(port)
    hostile = ["/x%22%7D%201%0Adsv4_busy%201%0A%23", "/%FF%FE", "/a%5C%22b"] + [f"/scan/{i}" for i in range(20)]
    for path in hostile:
        assert request(port, "GET", path).status == 404
    for i in range(5):  # model ids are a templated route: one series, whatever the id
        request(port, "GET", f"/v1/models/x{i}%22%0A")
    key = 'dsv4_requests_total{route="other",status="404"}'

    def counted(m):  # (metrics() parses every line strictly, as UTF-8)
        assert m[key] - before.get(key, 0) == len(hostile), m.get(key)
    after = wait_metrics(port, counted)
    new_series = set(after) - set(before)
    assert all(k == key or k.startswith('dsv4_requests_total{route="/v1/models/:id",') for k in new_series), new_series
    assert after["dsv4_busy"] == 0


def test_401_is_counted_once():
    s = Server("--api-key", "sekrit")
    try:
        port = s.port
        for route, etype in ((CHAT, "invalid_request_error"), (MESSAGES, "authentication_error")):
            r = post(port, route, small_chat())
            check_error(route, r, 401, etype)
        assert request(port, "GET", "/v1/models", headers={"x-api-key": "wrong"}).status == 401
        expected = {f'dsv4_requests_total{{route="{CHAT}",status="401"}}': 1,
                    f'dsv4_requests_total{{route="{MESSAGES}",status="401"}}': 1,
                    'dsv4_requests_total{route="/v1/models",status="401"}': 1, 'dsv4_errors_total{kind="auth"}': 3}
        # (request counts move just after the response is written: poll briefly, then compare exactly)
        wait_until(lambda: all(k in metrics_with_key(port, "sekrit") for k in expected), 10, "the 401 counts")
        time.sleep(0.2)
        m = metrics_with_key(port, "sekrit")
        assert {k: m.get(k) for k in expected} == expected, m
        assert health(port)["status"] == "ok"  # /health needs no key
    finally:
        assert s.stop() == 0


def metrics_with_key(port, key):
    r = request(port, "GET", "/metrics", headers={"Authorization": f"Bearer {key}"})
    assert r.status == 200, r
    out = {}
    for line in r.body.decode("utf-8").splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_wrong_methods(server):
    port = server.port
    for method, path in (("GET", CHAT), ("PUT", CHAT), ("DELETE", COMPLETIONS), ("GET", MESSAGES),
                         ("PATCH", MESSAGES), ("POST", "/health"), ("POST", "/v1/models"), ("DELETE", "/metrics")):
        r = request(port, method, path, b"{}" if method in ("PUT", "POST", "PATCH") else None)
        assert r.status in (404, 405), (method, path, r)
        err = check_error(path, r, r.status)
        assert path in err["message"], err
    assert_served(port)


def test_malformed_http(server):
    port = server.port
    for raw in (b"GARBAGE\r\n\r\n", b"POST\r\n\r\n", b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}"):
        c = Conn(port, timeout=60)
        try:
            c.sock.sendall(raw)
            try:
                c.read_head()
                r = c.read_body()
            except ConnectionError:
                continue  # closing the connection is an acceptable answer to garbage
        finally:
            c.close()
        assert 400 <= r.status < 500, (raw, r)
        if r.body:
            r.json()  # any body is JSON
    assert_served(port)


# --- CORS -----------------------------------------------------------------------------------------

def test_no_cors_headers_by_default(server):
    port = server.port
    r = request(port, "GET", "/v1/models", headers={"Origin": "http://evil.test"})
    assert r.status == 200 and r.header("access-control-allow-origin") is None, r.headers
    r = post(port, CHAT, small_chat(), headers={"Origin": "http://evil.test"})
    assert r.status == 200 and r.header("access-control-allow-origin") is None, r.headers
    r = request(port, "OPTIONS", CHAT, headers={"Origin": "http://evil.test", "Access-Control-Request-Method": "POST"})
    assert r.status != 204 and r.header("access-control-allow-origin") is None, r


def test_cors_preflight_and_headers():
    s = Server("--cors", "http://x.test")
    try:
        port = s.port
        r = request(port, "OPTIONS", CHAT, headers={"Origin": "http://x.test", "Access-Control-Request-Method": "POST",
                                                     "Access-Control-Request-Headers": "authorization, content-type"})
        assert r.status == 204, r
        assert r.header("access-control-allow-origin") == "http://x.test"
        assert "POST" in r.header("access-control-allow-methods")
        allowed = r.header("access-control-allow-headers").lower()
        for h in ("authorization", "content-type", "x-api-key", "anthropic-version"):
            assert h in allowed, allowed
        r = request(port, "OPTIONS", MESSAGES, headers={"Origin": "http://x.test"})
        assert r.status == 204 and r.header("access-control-allow-origin") == "http://x.test"
        r = post(port, CHAT, small_chat(), headers={"Origin": "http://x.test"})
        assert r.status == 200 and r.header("access-control-allow-origin") == "http://x.test", r.headers
        r = post(port, CHAT, b"{", headers={"Origin": "http://x.test"})
        assert r.status == 400 and r.header("access-control-allow-origin") == "http://x.test", r.headers
        r = request(port, "GET", "/nope", headers={"Origin": "http://x.test"})
        assert r.status == 404 and r.header("access-control-allow-origin") == "http://x.test", r.headers
    finally:
        assert s.stop() == 0


# --- graceful stop --------------------------------------------------------------------------------

def test_sigterm_during_streaming_generation():
    s = Server("--keepalive-ms", "100")
    stopped = False
    try:
        port = s.port
        eos = eos_token_id(port)
        running = open_stream(port, CHAT, long_chat(eos, "Keep talking."))
        queued = open_stream(port, MESSAGES, {"model": "m", "max_tokens": 800, "stream": True, "messages": HI,
                                              "thinking": NO_THINK})
        assert running.response.status == 200 and queued.response.status == 200
        delta_events(running, 2)
        assert health(port)["queue_depth"] == 1
        # The clients keep both connections open: the stop must not wait for them to go away.
        assert s.stop(timeout=20) == 0
        stopped = True
        assert any("stopped" in line for line in s.log)
        # Both streams were ended properly (no hang): the running one finished, the queued one got an error.
        rest = list(running.sse())
        assert rest and rest[-1] == ("event", None, "[DONE]"), rest[-3:]
        q = [it for it in queued.sse() if it[0] == "event"]
        assert q and q[-1][1] == "error", q[-3:]
        running.close()
        queued.close()
    finally:
        if not stopped:
            s.stop()
