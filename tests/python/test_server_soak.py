"""Soak (label soak, not in the default run; scripts/test.sh runs it against the ASan build): one
real `dsv4 serve` (built-in tiny model) takes DSV4_SOAK_REQUESTS (default 500) mixed requests from
DSV4_SOAK_CLIENTS (default 8) concurrent client threads:

  OpenAI chat (streaming and not, thinking on/off, tools and tool-call histories, stop strings,
  logprobs, seeds), /v1/completions (streaming and not, logprobs, echo), Anthropic messages
  (streaming and not, thinking, tools and tool_use/tool_result histories, stop sequences), bad
  requests from tests/data/server/bad_requests.jsonl, and clients that hang up mid-stream (before
  the head, after the head, after a few events).

Every answer must have its expected status and a well-formed body (every SSE event parsed and
checked in order); a few seeded "golden" requests recur through the run, streamed and not, and
must give byte-identical output every time whatever the server did in between (prefix cache
state, queueing, cancellations). The one error a well-formed request may get is the documented
"invalid_model_output" (the random model opened a DSML tool call it did not close): 500 when not
streamed, an error event when streamed; it is counted, must stay rare, and must be in the metrics. At the end /health is idle, /metrics is scrapeable and agrees
with what the clients saw, and the server stops on SIGTERM with exit 0 and no sanitizer report.
Small max_tokens (4-40) keep it to a few minutes on 2 cores even under ASan.
"""
import collections
import json
import os
import random
import threading
import time

import pytest

from dsv4_server import Server
from server_http import (ANTHROPIC_ROUTE, NO_THINK, Conn, check_corpus_response, corpus_body, eos_token_id,
                         health, load_corpus, metrics, wait_idle, wait_metrics)

N_REQUESTS = int(os.environ.get("DSV4_SOAK_REQUESTS", "500"))
N_CLIENTS = int(os.environ.get("DSV4_SOAK_CLIENTS", "8"))
SEED = int(os.environ.get("DSV4_SOAK_SEED", "20261202"))
CHAT, COMPLETIONS, MESSAGES = "/v1/chat/completions", "/v1/completions", ANTHROPIC_ROUTE
TIMEOUT = 900  # per request: under ASan a request may wait behind 7 others

OPENAI_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather forecast for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "description": "Adds two numbers",
                                      "parameters": {"type": "object", "properties": {
                                          "a": {"type": "number"}, "b": {"type": "number"}}}}}]
ANTHROPIC_TOOLS = [{"name": "get_weather", "description": "Weather for a city",
                    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                     "required": ["city"]}}]
PROMPTS = ["Write one sentence about the sea.", "Name a colour.", "What is 2+2?", "Tell me a joke about cats.",
           "Translate 'good morning' to French.", "List three prime numbers.", "Why is the sky blue?",
           "Résumé en une phrase : le chat dort.", "用一句话介绍你自己。", "Say hi 👋 and nothing else."]
STOPS = ["e", " the", "\n", "a", "。", "ing"]


def n_tokens(rng):
    """max_tokens in 4..40, mostly small (the soak's cost is decode time)."""
    return rng.choice([4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40])


# --- the request plan -----------------------------------------------------------------------------

class Spec:
    """One planned request: what to send and what kind of answer to expect."""

    def __init__(self, kind, route, body, stream=False, expect=200, row=None, golden=None, disconnect=None):
        self.kind, self.route, self.body, self.stream = kind, route, body, stream
        self.expect, self.row, self.golden, self.disconnect = expect, row, golden, disconnect


def chat_messages(rng, tools_history):
    msgs = []
    if rng.random() < 0.3:
        msgs.append({"role": "system", "content": "You are terse."})
    if tools_history:
        msgs += [{"role": "user", "content": "What's the weather in Paris?"},
                 {"role": "assistant", "content": "", "reasoning_content": "Look it up.",
                  "tool_calls": [{"id": "call_1", "type": "function",
                                  "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                 {"role": "tool", "tool_call_id": "call_1", "content": "{\"forecast\": \"sunny\"}"}]
    elif rng.random() < 0.3:
        msgs += [{"role": "user", "content": rng.choice(PROMPTS)}, {"role": "assistant", "content": "Sure."}]
    msgs.append({"role": "user", "content": rng.choice(PROMPTS)})
    return msgs


def random_chat(rng, stream):
    tools = rng.random() < 0.15
    body = {"model": "dsv4", "messages": chat_messages(rng, tools and rng.random() < 0.5),
            "max_tokens": n_tokens(rng)}
    if rng.random() < 0.6:
        body["thinking"] = NO_THINK
        if rng.random() < 0.7:
            body["temperature"] = rng.choice([0, 0.3, 0.7, 1.0, 1.5])
        if rng.random() < 0.3:
            body["top_p"] = rng.choice([0.5, 0.9, 1.0])
        if rng.random() < 0.2:
            body["top_k"] = rng.choice([1, 5, 40])
    elif rng.random() < 0.3:
        body["reasoning_effort"] = "high"
    if tools:
        body["tools"] = OPENAI_TOOLS
        body["tool_choice"] = rng.choice(["auto", "none", {"type": "function", "function": {"name": "add"}}])
    if rng.random() < 0.3:
        body["seed"] = rng.randint(0, 2 ** 32)
    if rng.random() < 0.25:
        body["stop"] = rng.sample(STOPS, rng.randint(1, 3))
    if rng.random() < 0.25:
        body["logprobs"] = True
        if rng.random() < 0.7:
            body["top_logprobs"] = rng.randint(0, 5)
    if rng.random() < 0.2:
        body["presence_penalty"] = 0.5
    if stream:
        body["stream"] = True
        if rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
    return body


def random_completion(rng, stream):
    body = {"model": "dsv4", "prompt": rng.choice(PROMPTS), "max_tokens": n_tokens(rng),
            "temperature": rng.choice([0, 0.5, 1.0])}
    if rng.random() < 0.3:
        body["seed"] = rng.randint(0, 2 ** 32)
    if rng.random() < 0.3:
        body["logprobs"] = rng.randint(0, 5)
    elif rng.random() < 0.2:
        body["echo"] = True
    if rng.random() < 0.2:
        body["stop"] = rng.sample(STOPS, 1)
    if stream:
        body["stream"] = True
        if rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
    return body


def random_message(rng, stream):
    body = {"model": "dsv4", "max_tokens": n_tokens(rng)}
    msgs = [{"role": "user", "content": rng.choice(PROMPTS)}]
    tools = rng.random() < 0.15
    if tools:
        body["tools"] = ANTHROPIC_TOOLS
        if rng.random() < 0.5:
            msgs = [{"role": "user", "content": "Weather in Oslo?"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                                       "input": {"city": "Oslo"}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                  "content": "rain"}]}]
    elif rng.random() < 0.3:
        msgs = [{"role": "user", "content": [{"type": "text", "text": rng.choice(PROMPTS)}]},
                {"role": "assistant", "content": "OK."}, {"role": "user", "content": rng.choice(PROMPTS)}]
    body["messages"] = msgs
    if rng.random() < 0.3:
        body["system"] = "You are terse."
    r = rng.random()
    if r < 0.5:
        body["thinking"] = NO_THINK
        if rng.random() < 0.6:
            body["temperature"] = rng.choice([0, 0.5, 1.0])
    elif r < 0.8:
        body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    if rng.random() < 0.25:
        body["stop_sequences"] = rng.sample(STOPS, rng.randint(1, 2))
    if stream:
        body["stream"] = True
    return body


# Golden requests: each recurs through the run (streamed and not) and must give the same bytes.
GOLDEN = {
    "chat-nothink-seed": (CHAT, {"model": "dsv4", "messages": [{"role": "user", "content": "Tell me about rivers."}],
                                 "max_tokens": 24, "thinking": NO_THINK, "temperature": 0.9, "seed": 11}),
    "chat-thinking-seed": (CHAT, {"model": "dsv4", "messages": [{"role": "user", "content": "Why do birds sing?"}],
                                  "max_tokens": 16, "seed": 22}),
    "chat-logprobs-greedy": (CHAT, {"model": "dsv4", "messages": [{"role": "user", "content": "Count to five."}],
                                    "max_tokens": 12, "thinking": NO_THINK, "temperature": 0, "logprobs": True,
                                    "top_logprobs": 3}),
    "chat-stop-seed": (CHAT, {"model": "dsv4", "messages": [{"role": "user", "content": "Describe a forest."}],
                              "max_tokens": 30, "thinking": NO_THINK, "temperature": 1.0, "seed": 44,
                              "stop": ["e"]}),
    "chat-tools-seed": (CHAT, {"model": "dsv4", "messages": [{"role": "user", "content": "Weather in Rome?"}],
                               "max_tokens": 16, "tools": OPENAI_TOOLS, "seed": 55}),
    "completion-seed": (COMPLETIONS, {"model": "dsv4", "prompt": "Once upon a time", "max_tokens": 20,
                                      "temperature": 1.0, "seed": 33, "logprobs": 2}),
    "messages-greedy": (MESSAGES, {"model": "dsv4", "max_tokens": 16, "temperature": 0, "thinking": NO_THINK,
                                   "messages": [{"role": "user", "content": "Name a mountain."}]}),
    # (Anthropic has no seed: greedy, no thinking.)
    "messages-tools-greedy": (MESSAGES, {"model": "dsv4", "max_tokens": 12, "temperature": 0, "thinking": NO_THINK,
                                         "tools": ANTHROPIC_TOOLS, "system": "You are terse.",
                                         "messages": [{"role": "user", "content": "Name a planet."}]}),
}


def plan(n, corpus, eos):
    rng = random.Random(SEED)
    kinds = (["chat"] * 16 + ["chat_stream"] * 14 + ["completion"] * 8 + ["completion_stream"] * 6 +
             ["messages"] * 10 + ["messages_stream"] * 10 + ["bad"] * 14 + ["disconnect"] * 10)
    specs = []
    for _ in range(n):
        kind = rng.choice(kinds)
        stream = kind.endswith("_stream")
        if kind.startswith("chat"):
            specs.append(Spec(kind, CHAT, random_chat(rng, stream), stream))
        elif kind.startswith("completion"):
            specs.append(Spec(kind, COMPLETIONS, random_completion(rng, stream), stream))
        elif kind.startswith("messages"):
            specs.append(Spec(kind, MESSAGES, random_message(rng, stream), stream))
        elif kind == "bad":
            row = rng.choice(corpus)
            specs.append(Spec("bad", row["route"], corpus_body(row), expect=row["status"], row=row))
        else:
            route = rng.choice([CHAT, CHAT, COMPLETIONS, MESSAGES])
            body = {CHAT: lambda: random_chat(rng, True), COMPLETIONS: lambda: random_completion(rng, True),
                    MESSAGES: lambda: random_message(rng, True)}[route]()
            body["max_tokens"] = 40
            if route != MESSAGES:
                body["logit_bias"] = {str(eos): -100}  # long enough to still be running at the hang-up
                body.pop("stop", None)
            specs.append(Spec("disconnect", route, body, True,
                              disconnect=rng.choice(["at_once", "after_head", "after_events"])))
    # Goldens: each at least 4 times (alternately streamed), spread over the whole run.
    per = 4
    for name, (route, body) in GOLDEN.items():
        for k in range(per):
            b = dict(body, stream=True) if k % 2 else dict(body)
            pos = (k * len(specs)) // per + rng.randint(0, max(len(specs) // per - 1, 0))
            specs.insert(min(pos, len(specs)), Spec("golden", route, b, k % 2 == 1, golden=name))
    return specs


# --- response checks ------------------------------------------------------------------------------

def check_usage_openai(u, max_tokens):
    assert u["prompt_tokens"] > 0 and 0 <= u["completion_tokens"] <= max_tokens, u
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u
    assert 0 <= u["prompt_tokens_details"]["cached_tokens"] < u["prompt_tokens"], u
    assert 0 <= u["completion_tokens_details"]["reasoning_tokens"] <= u["completion_tokens"], u


def check_stop(text, stops):
    for s in stops or []:
        assert s not in text, f"stop string {s!r} in the output {text!r}"


def chat_output(body, resp):
    """Checks a non-streamed chat completion; returns its canonical output."""
    out = resp.json()
    assert out["object"] == "chat.completion" and out["id"].startswith("chatcmpl-"), out
    assert isinstance(out["created"], int) and out["model"] == body["model"], out
    assert len(out["choices"]) == 1, out
    c = out["choices"][0]
    m = c["message"]
    assert c["index"] == 0 and m["role"] == "assistant", out
    assert c["finish_reason"] in ("stop", "length", "tool_calls"), out
    content, reasoning = m.get("content") or "", m.get("reasoning_content") or ""
    assert isinstance(content, str) and isinstance(reasoning, str), out
    check_usage_openai(out["usage"], body["max_tokens"])
    if c["finish_reason"] == "length":
        assert out["usage"]["completion_tokens"] == body["max_tokens"], out
    check_stop(content, body.get("stop"))
    calls = m.get("tool_calls") or []
    for tc in calls:
        assert tc["type"] == "function" and tc["id"] and tc["function"]["name"], tc
        json.loads(tc["function"]["arguments"])
    lps = None
    if body.get("logprobs"):
        lps = c["logprobs"]["content"]
        for lp in lps:
            assert lp["logprob"] <= 0 and isinstance(lp["token"], str) and isinstance(lp["bytes"], list), lp
            assert len(lp["top_logprobs"]) == body.get("top_logprobs", 0), lp
        if body.get("thinking") == NO_THINK and not body.get("stop"):
            assert len(lps) == out["usage"]["completion_tokens"], (len(lps), out["usage"])
        lps = [(lp["token"], lp["logprob"], [(t["token"], t["logprob"]) for t in lp["top_logprobs"]]) for lp in lps]
    else:
        assert c.get("logprobs") is None, out
    return {"reasoning": reasoning, "content": content, "finish": c["finish_reason"],
            "tool_calls": [(t["function"]["name"], t["function"]["arguments"]) for t in calls], "logprobs": lps,
            "completion_tokens": out["usage"]["completion_tokens"]}


def chat_stream_output(body, events):
    assert events and events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(e) for e in events[:-1]]
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1 and next(iter(ids)).startswith("chatcmpl-"), ids
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant", chunks[0]
    usage = None
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = chunks[-1]["usage"]
        assert chunks[-1]["choices"] == [] and usage is not None, chunks[-1]
        check_usage_openai(usage, body["max_tokens"])
        chunks = chunks[:-1]
    assert all(c.get("usage") is None for c in chunks), "usage before the end"
    finishes = [c["choices"][0]["finish_reason"] for c in chunks]
    assert all(f is None for f in finishes[:-1]) and finishes[-1] in ("stop", "length", "tool_calls"), finishes
    content = reasoning = ""
    calls, lps = {}, []
    for c in chunks:
        assert len(c["choices"]) == 1 and c["choices"][0]["index"] == 0, c
        d = c["choices"][0]["delta"]
        content += d.get("content") or ""
        reasoning += d.get("reasoning_content") or ""
        for tc in d.get("tool_calls") or []:
            slot = calls.setdefault(tc["index"], [tc.get("function", {}).get("name"), ""])
            slot[1] += tc.get("function", {}).get("arguments") or ""
        if c["choices"][0].get("logprobs"):
            lps += c["choices"][0]["logprobs"]["content"]
    check_stop(content, body.get("stop"))
    if body.get("logprobs"):
        lps = [(lp["token"], lp["logprob"], [(t["token"], t["logprob"]) for t in lp["top_logprobs"]]) for lp in lps]
    else:
        assert not lps
        lps = None
    if usage and finishes[-1] == "length":
        assert usage["completion_tokens"] == body["max_tokens"], usage
    return {"reasoning": reasoning, "content": content, "finish": finishes[-1],
            "tool_calls": [tuple(v) for _, v in sorted(calls.items())], "logprobs": lps,
            "completion_tokens": usage["completion_tokens"] if usage else None}


def completion_output(body, resp):
    out = resp.json()
    assert out["object"] == "text_completion" and out["id"].startswith("cmpl-"), out
    c = out["choices"][0]
    assert len(out["choices"]) == 1 and c["finish_reason"] in ("stop", "length"), out
    assert isinstance(c["text"], str), out
    check_usage_openai(out["usage"], body["max_tokens"])
    text = c["text"]
    if body.get("echo"):
        assert text.startswith(body["prompt"]), out
        text = text[len(body["prompt"]):]
    check_stop(text, body.get("stop"))
    lps = None
    if "logprobs" in body:
        lp = c["logprobs"]
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"])
        assert all(len(t) <= body["logprobs"] for t in lp["top_logprobs"]), lp
        lps = (lp["tokens"], lp["token_logprobs"], lp["top_logprobs"])
    return {"text": text, "finish": c["finish_reason"], "logprobs": lps}


def completion_stream_output(body, events):
    assert events and events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(e) for e in events[:-1]]
    assert len({c["id"] for c in chunks}) == 1 and all(c["object"] == "text_completion" for c in chunks)
    if (body.get("stream_options") or {}).get("include_usage"):
        assert chunks[-1]["choices"] == [], chunks[-1]
        check_usage_openai(chunks[-1]["usage"], body["max_tokens"])
        chunks = chunks[:-1]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks]
    assert all(f is None for f in finishes[:-1]) and finishes[-1] in ("stop", "length"), finishes
    text = "".join(c["choices"][0]["text"] for c in chunks)
    if body.get("echo"):
        assert text.startswith(body["prompt"]), text
        text = text[len(body["prompt"]):]
    check_stop(text, body.get("stop"))
    lps = None
    if "logprobs" in body:
        parts = [c["choices"][0]["logprobs"] for c in chunks if c["choices"][0]["logprobs"]]
        lps = ([t for p in parts for t in p["tokens"]], [t for p in parts for t in p["token_logprobs"]],
               [t for p in parts for t in p["top_logprobs"]])
    return {"text": text, "finish": finishes[-1], "logprobs": lps}


ANTHROPIC_STOPS = ("end_turn", "max_tokens", "stop_sequence", "tool_use")


def message_output(body, resp):
    out = resp.json()
    assert out["type"] == "message" and out["role"] == "assistant" and out["id"].startswith("msg_"), out
    assert out["stop_reason"] in ANTHROPIC_STOPS, out
    u = out["usage"]
    assert u["input_tokens"] + u["cache_read_input_tokens"] > 0 and 0 <= u["output_tokens"] <= body["max_tokens"], u
    if out["stop_reason"] == "stop_sequence":
        assert out["stop_sequence"] in body.get("stop_sequences", []), out
    else:
        assert out["stop_sequence"] is None, out
    blocks = []
    for b in out["content"]:
        assert b["type"] in ("text", "thinking", "tool_use"), b
        if b["type"] == "text":
            check_stop(b["text"], body.get("stop_sequences"))
            blocks.append(("text", b["text"]))
        elif b["type"] == "thinking":
            blocks.append(("thinking", b["thinking"]))
        else:
            assert isinstance(b["input"], dict) and b["name"] and b["id"], b
            blocks.append(("tool_use", b["name"], json.dumps(b["input"], sort_keys=True)))
    return {"blocks": blocks, "stop": out["stop_reason"], "stop_sequence": out["stop_sequence"]}


def message_stream_output(body, events):
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-1] == "message_stop", names
    datas = []
    for name, data in events:
        d = json.loads(data)
        assert d["type"] == name, (name, d)
        datas.append(d)
    start = datas[0]["message"]
    assert start["role"] == "assistant" and start["content"] == [] and start["id"].startswith("msg_"), start
    deltas = [d for d in datas if d["type"] == "message_delta"]
    assert len(deltas) == 1 and names[-2] == "message_delta", names
    stop = deltas[0]["delta"]["stop_reason"]
    assert stop in ANTHROPIC_STOPS, deltas
    assert deltas[0]["usage"]["output_tokens"] <= body["max_tokens"], deltas
    blocks, open_index = [], None
    for d in datas[1:-2]:
        t = d["type"]
        if t == "ping":
            continue
        if t == "content_block_start":
            assert open_index is None and d["index"] == len(blocks), (d, names)
            open_index = d["index"]
            cb = d["content_block"]
            blocks.append([cb["type"], "", cb.get("name")])
        elif t == "content_block_delta":
            assert d["index"] == open_index, (d, names)
            delta = d["delta"]
            kind = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "thinking",
                    "input_json_delta": "tool_use"}[delta["type"]]
            assert blocks[-1][0] == kind, (blocks[-1], delta)
            blocks[-1][1] += delta.get("text") or delta.get("thinking") or delta.get("partial_json") or ""
        elif t == "content_block_stop":
            assert d["index"] == open_index, (d, names)
            open_index = None
        else:
            raise AssertionError(f"unexpected event {t} in {names}")
    assert open_index is None, names
    out = []
    for kind, text, name in blocks:
        if kind == "text":
            check_stop(text, body.get("stop_sequences"))
        out.append((kind, text) if kind != "tool_use" else (kind, name, json.dumps(json.loads(text), sort_keys=True)))
    return {"blocks": out, "stop": stop, "stop_sequence": deltas[0]["delta"]["stop_sequence"]}


MODEL_OUTPUT = "invalid_model_output"  # run_one's output for the documented model-output error


def model_output_error(spec, err):
    """Whether `err` (an error object) is the model-output error, which only chat requests can get."""
    return spec.route in (CHAT, MESSAGES) and not spec.golden and MODEL_OUTPUT in json.dumps(err)


def run_one(port, spec):
    """Sends one request; checks it; returns (status, canonical output, MODEL_OUTPUT or None)."""
    c = Conn(port, timeout=TIMEOUT)
    try:
        c.send("POST", spec.route, spec.body)
        if spec.disconnect == "at_once":
            return 200, None  # (the server's count of it is checked at the end)
        r = c.read_head()
        if spec.kind == "bad":
            c.read_body()
            check_corpus_response(spec.row, r)
            return r.status, None
        if r.status == 500 and spec.expect == 200 and not spec.stream:
            body = c.read_body()
            assert model_output_error(spec, json.loads(body)), (spec.kind, spec.route, body)
            return r.status, MODEL_OUTPUT
        assert r.status == spec.expect, (spec.kind, spec.route, c.read_body())
        if not spec.stream:
            c.read_body()
            fn = {CHAT: chat_output, COMPLETIONS: completion_output, MESSAGES: message_output}[spec.route]
            return r.status, fn(spec.body, r)
        assert r.header("content-type").startswith("text/event-stream"), r.headers
        if spec.disconnect == "after_head":
            return r.status, None
        events = []
        for item in c.sse():
            if item[0] == "comment":
                assert item[1] == "keep-alive" or item[1].startswith("prefill "), item
                continue
            events.append(item[2] if spec.route != MESSAGES else (item[1], item[2]))
            if spec.disconnect == "after_events" and len(events) >= 3:
                for e in events:  # what was read is well-formed
                    if e != "[DONE]":
                        json.loads(e if isinstance(e, str) else e[1])
                return r.status, None
        last = events[-2] if spec.route != MESSAGES and len(events) >= 2 else (events[-1] if events else None)
        if last is not None and spec.route == MESSAGES and last[0] == "error":
            assert model_output_error(spec, json.loads(last[1])), last
            return r.status, MODEL_OUTPUT
        if last is not None and spec.route == CHAT and events[-1] == "[DONE]" and '"error"' in last:
            assert model_output_error(spec, json.loads(last)), last
            return r.status, MODEL_OUTPUT
        fn = {CHAT: chat_stream_output, COMPLETIONS: completion_stream_output,
              MESSAGES: message_stream_output}[spec.route]
        return r.status, fn(spec.body, events)
    finally:
        c.close()


# --- the soak -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server():
    s = Server("--max-queue", "64", "--keepalive-ms", "250", "--prefill-chunk", "32")
    yield s
    assert s.stop() == 0, "".join(s.log[-50:])


def test_soak(server):
    port = server.port
    corpus = [r for r in load_corpus(min_entries=100)]
    eos = eos_token_id(port)
    specs = plan(N_REQUESTS, corpus, eos)
    before = metrics(port)
    lock = threading.Lock()
    next_index = [0]
    results = [None] * len(specs)
    failures = []

    def client():
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(specs) or len(failures) > 20:
                return
            spec = specs[i]
            t0 = time.time()
            try:
                status, output = run_one(port, spec)
                results[i] = (status, output, time.time() - t0)
            except Exception as e:  # noqa: BLE001 - collected and reported below
                with lock:
                    failures.append(f"#{i} {spec.kind} {spec.route} {json.dumps(spec.body)[:300] if isinstance(spec.body, dict) else spec.row['name']}: {type(e).__name__}: {e}")

    t0 = time.time()
    threads = [threading.Thread(target=client, daemon=True) for _ in range(N_CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 2)
    duration = time.time() - t0
    assert not any(t.is_alive() for t in threads), "clients still running (a hang)"
    assert not failures, f"{len(failures)} failed requests:\n" + "\n".join(failures[:20])
    assert server.alive(), "".join(server.log[-50:])

    # Summary (shown with -s or on failure).
    by_kind = collections.Counter((s.kind, s.route) for s in specs)
    statuses = collections.Counter((s.kind, results[i][0]) for i, s in enumerate(specs))
    latencies = sorted(r[2] for r in results)
    print(f"\nsoak: {len(specs)} requests from {N_CLIENTS} clients in {duration:.1f}s; "
          f"p50 {latencies[len(latencies) // 2]:.2f}s, max {latencies[-1]:.2f}s")
    for k, v in sorted(by_kind.items()):
        print(f"  {k[0]:<18} {k[1]:<22} {v}")
    print("  statuses:", dict(sorted(statuses.items())))

    # Goldens: byte-identical every time, streamed or not.
    groups = collections.defaultdict(list)
    for i, s in enumerate(specs):
        if s.golden:
            out = dict(results[i][1])
            out.pop("completion_tokens", None)
            groups[s.golden].append((i, s.stream, out))
    assert set(groups) == set(GOLDEN)
    for name, outs in groups.items():
        first = outs[0][2]
        for i, stream, out in outs[1:]:
            assert out == first, f"golden {name}: request #{i} (stream={stream}) differs:\n{out}\nvs\n{first}"
        assert {st for _, st, _ in outs} == {False, True}, name
    print("  goldens:", {k: len(v) for k, v in groups.items()})

    # The server is idle, and its metrics agree with what the clients saw.
    wait_idle(port, timeout=120)
    h = health(port)
    assert h == {"status": "ok", "busy": False, "queue_depth": 0}, h
    sent = collections.Counter((s.route, results[i][0]) for i, s in enumerate(specs))

    def counted(m):  # (request counts move just after each response is written)
        for (route, status), n in sent.items():
            key = f'dsv4_requests_total{{route="{route}",status="{status}"}}'
            assert m.get(key, 0) - before.get(key, 0) == n, (route, status, n, m.get(key, 0) - before.get(key, 0))
    after = wait_metrics(port, counted, timeout=30)

    def delta(key):
        return after.get(key, 0) - before.get(key, 0)
    model_output = sum(1 for r in results if r[1] == MODEL_OUTPUT)
    unstreamed_model_output = sum(1 for i, s in enumerate(specs) if results[i][1] == MODEL_OUTPUT and not s.stream)
    assert model_output <= max(2, len(specs) // 100), f"{model_output} model-output errors"
    accepted = sum(n for (route, status), n in sent.items() if status == 200) + unstreamed_model_output
    bad = sum(1 for s in specs if s.kind == "bad")
    disconnects = sum(1 for s in specs if s.kind == "disconnect")
    assert delta("dsv4_generations_total") == accepted
    assert delta('dsv4_errors_total{kind="bad_request"}') == bad
    cancelled = delta('dsv4_errors_total{kind="cancelled"}')
    assert cancelled <= disconnects, (cancelled, disconnects)
    assert delta('dsv4_errors_total{kind="model_output"}') == model_output
    assert not any(k.startswith("dsv4_errors_total") and delta(k) for k in after
                   if k not in ('dsv4_errors_total{kind="bad_request"}', 'dsv4_errors_total{kind="cancelled"}',
                                'dsv4_errors_total{kind="model_output"}')), after
    assert after["dsv4_queue_depth"] == 0 and after["dsv4_busy"] == 0
    print(f"  generations {accepted}, bad requests {bad}, disconnects {disconnects} (cancelled {int(cancelled)}), "
          f"tokens in {int(delta('dsv4_prompt_tokens_total'))} (cached {int(delta('dsv4_prompt_tokens_cached_total'))}), "
          f"out {int(delta('dsv4_completion_tokens_total'))}")
    for line in server.log:
        assert "generation failed" not in line and "internal error" not in line, line
