"""The official `openai` Python SDK against a real `dsv4 serve` (the built-in tiny model: random
weights, real DeepSeek V4 tokenizer). Chat (thinking on/off), streaming vs non-streaming equality,
byte-identical repeats with prefix reuse, usage and logprobs, stop strings, /v1/completions, a
tool-call round trip (the model's side replayed with --replay, everything else real), errors, and
one plain-curl smoke test.
"""
import json
import subprocess

import openai
import pytest

from dsv4_server import Server

TOOL_CALL_TEXT = (
    "I should look it up.</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>")
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather forecast for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}]
NO_THINK = {"thinking": {"type": "disabled"}}


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def chat(client, **kw):
    kw.setdefault("model", "dsv4")
    kw.setdefault("messages", [{"role": "user", "content": "Write one sentence about the sea."}])
    return client.chat.completions.create(**kw)


def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["dsv4-tiny-random"]


def test_chat_thinking_off_greedy(client):
    r = chat(client, max_tokens=12, temperature=0, extra_body=NO_THINK)
    c = r.choices[0]
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert c.message.role == "assistant"
    assert isinstance(c.message.content, str)
    assert c.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 0
    assert 1 <= r.usage.completion_tokens <= 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert getattr(c.message, "reasoning_content", None) in (None, "")


def test_greedy_is_deterministic_and_reuses_prefix(client):
    a = chat(client, max_tokens=20, temperature=0, extra_body=NO_THINK)
    b = chat(client, max_tokens=20, temperature=0, extra_body=NO_THINK)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert b.usage.prompt_tokens_details.cached_tokens == b.usage.prompt_tokens - 1


def test_thinking_stream_equals_non_stream_with_seed(client):
    kw = dict(max_tokens=40, seed=1234, messages=[{"role": "user", "content": "Why is the sky blue?"}])
    whole = chat(client, **kw)
    reasoning, content, finish, chunks = "", "", None, 0
    for ch in chat(client, stream=True, **kw):
        chunks += 1
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        reasoning += getattr(d, "reasoning_content", None) or ""
        content += d.content or ""
        finish = ch.choices[0].finish_reason or finish
    m = whole.choices[0].message
    assert reasoning == (getattr(m, "reasoning_content", None) or "")
    assert content == (m.content or "")
    assert finish == whole.choices[0].finish_reason
    assert chunks >= 3
    # Thinking on (the default): a random model rarely closes </think>, so most text is reasoning.
    assert len(reasoning) + len(content) > 0


def test_same_seed_same_bytes_different_seed_differs(client):
    kw = dict(max_tokens=30, extra_body=NO_THINK, temperature=1.0)
    a = chat(client, seed=7, **kw).choices[0].message.content
    b = chat(client, seed=7, **kw).choices[0].message.content
    c = chat(client, seed=8, **kw).choices[0].message.content
    assert a == b
    assert a != c


def test_stream_usage_and_logprobs(client):
    chunks = list(chat(client, max_tokens=8, temperature=0, stream=True, logprobs=True, top_logprobs=3,
                       stream_options={"include_usage": True}, extra_body=NO_THINK))
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1 and chunks[-1].usage is not None and chunks[-1].choices == []
    lps = [lp for c in chunks if c.choices and c.choices[0].logprobs for lp in c.choices[0].logprobs.content]
    assert len(lps) == usage[0].completion_tokens
    for lp in lps:
        assert lp.logprob <= 0 and len(lp.top_logprobs) == 3
        assert lp.top_logprobs[0].token == lp.token  # greedy: the chosen token is the most likely


def test_stop_string_truncates(client):
    full = chat(client, max_tokens=30, temperature=0, extra_body=NO_THINK).choices[0].message.content
    if len(full) < 6:
        pytest.skip("the random model ended its turn too early for a stop-string check")
    stop = full[len(full) // 2: len(full) // 2 + 2]
    r = chat(client, max_tokens=30, temperature=0, stop=[stop], extra_body=NO_THINK)
    assert r.choices[0].message.content == full[: full.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_completions_raw_prompt(client):
    r = client.completions.create(model="dsv4", prompt="The capital of France is", max_tokens=6, temperature=0)
    assert r.object == "text_completion"
    assert isinstance(r.choices[0].text, str)
    assert r.choices[0].finish_reason in ("stop", "length")
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="dsv4", prompt="The capital of France is", max_tokens=6, temperature=0, stream=True) if c.choices)
    assert streamed == r.choices[0].text


def test_errors_are_openai_shaped(client):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, temperature=5)
    assert "temperature" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, messages=[])
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, messages=[{"role": "user", "content": "word " * 5000}], extra_body=NO_THINK)
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.NotFoundError):
        client.post("/nope", cast_to=object, body={})
    # The server is still fine.
    assert chat(client, max_tokens=2, extra_body=NO_THINK).choices[0].finish_reason in ("stop", "length")


def test_curl_smoke(server):
    body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                       "stream": True, "thinking": {"type": "disabled"}})
    out = subprocess.run(["curl", "-sS", "-N", "-H", "Content-Type: application/json", "-d", body,
                          server.url + "/v1/chat/completions"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    events = [l[6:] for l in out.stdout.splitlines() if l.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert json.loads(events[0])["object"] == "chat.completion.chunk"
    health = subprocess.run(["curl", "-sS", server.url + "/health"], capture_output=True, text=True, timeout=30)
    assert json.loads(health.stdout)["status"] == "ok"


# --- tool calls: the model's turn replayed, the rest real ---------------------------------------

@pytest.fixture(scope="module")
def tool_server(tmp_path_factory):
    replay = tmp_path_factory.mktemp("replay") / "replay.jsonl"
    lines = [TOOL_CALL_TEXT, TOOL_CALL_TEXT, "It is sunny.</think>It will be sunny in Paris."]
    replay.write_text("".join(json.dumps(l) + "\n" for l in lines))
    s = Server("--replay", replay)
    yield s
    assert s.stop() == 0


def test_tool_call_round_trip(tool_server):
    client = openai.OpenAI(base_url=tool_server.url + "/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    # 1. streamed: the call is announced with its name, arguments arrive as deltas.
    calls, finish, first_tool_chunk = {}, None, None
    for i, ch in enumerate(client.chat.completions.create(model="m", messages=messages, tools=TOOLS, stream=True)):
        if not ch.choices:
            continue
        for tc in ch.choices[0].delta.tool_calls or []:
            if first_tool_chunk is None:
                first_tool_chunk = i
                assert tc.function.name == "get_weather" and tc.id
            slot = calls.setdefault(tc.index, {"id": tc.id, "name": tc.function.name, "arguments": ""})
            slot["arguments"] += tc.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert list(calls) == [0]
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris", "days": 3}
    # 2. the same turn non-streamed.
    r = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert m.reasoning_content == "I should look it up."
    assert m.tool_calls[0].function.name == "get_weather"
    assert json.loads(m.tool_calls[0].function.arguments) == {"city": "Paris", "days": 3}
    # 3. the tool result goes back; the model answers.
    messages += [{"role": "assistant", "content": m.content, "reasoning_content": m.reasoning_content,
                  "tool_calls": [tc.model_dump() for tc in m.tool_calls]},
                 {"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": "{\"forecast\": \"sunny\"}"}]
    r2 = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    assert r2.choices[0].message.content == "It will be sunny in Paris."
    assert r2.choices[0].message.reasoning_content == "It is sunny."
    assert r2.choices[0].finish_reason == "stop"
    assert r2.usage.prompt_tokens_details.cached_tokens > 0  # the conversation's prefix was reused


def test_api_key(tmp_path):
    s = Server("--api-key", "sekrit")
    try:
        bad = openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
        good = openai.OpenAI(base_url=s.url + "/v1", api_key="sekrit", max_retries=0)
        assert good.models.list().data[0].id == "dsv4-tiny-random"
        out = subprocess.run(["curl", "-sS", s.url + "/health"], capture_output=True, text=True, timeout=30)
        assert json.loads(out.stdout)["status"] == "ok"  # /health stays open
    finally:
        assert s.stop() == 0


def test_model_retrieve_and_tokenize(client, server):
    assert client.models.retrieve("dsv4-tiny-random").id == "dsv4-tiny-random"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-9")
    import urllib.request
    req = urllib.request.Request(server.url + "/tokenize", data=json.dumps({"content": "Hello<｜end▁of▁sentence｜>"}).encode(),
                                 headers={"Content-Type": "application/json"})
    ids = json.load(urllib.request.urlopen(req))["tokens"]
    assert len(ids) >= 2
    req = urllib.request.Request(server.url + "/detokenize", data=json.dumps({"tokens": ids}).encode(),
                                 headers={"Content-Type": "application/json"})
    assert json.load(urllib.request.urlopen(req))["content"] == "Hello<｜end▁of▁sentence｜>"


# --- issue #15 §3: defaults that real clients trip on ----------------------------------------------

@pytest.mark.parametrize("knobs", [{"temperature": 0}, {"extra_body": {"top_k": 1}}])
def test_thinking_mode_honours_greedy_knobs(client, knobs):
    """Thinking mode used to ignore the client's sampler: explicit greedy must be deterministic
    in every mode, whatever the seed."""
    kw = dict(max_tokens=30, messages=[{"role": "user", "content": "Why is the sky blue?"}])
    extra = dict(knobs.get("extra_body", {}))
    kn = {k: v for k, v in knobs.items() if k != "extra_body"}
    a = chat(client, seed=1, extra_body=extra, **kn, **kw)
    b = chat(client, seed=2, extra_body=extra, **kn, **kw)
    ma, mb = a.choices[0].message, b.choices[0].message
    assert (getattr(ma, "reasoning_content", None), ma.content) == (getattr(mb, "reasoning_content", None), mb.content)
    assert getattr(ma, "reasoning_content", None)  # thinking really was on


def test_max_tokens_beyond_the_context_is_clamped(client):
    r = chat(client, max_tokens=10_000_000, stop=["e", " ", "a"], temperature=0, extra_body=NO_THINK)
    assert r.choices[0].finish_reason in ("stop", "length")


# Tools without parameters: a random model would never close a free-text argument value.
CLOCK = {"type": "function", "function": {"name": "get_time", "description": "The current time",
                                          "parameters": {"type": "object", "properties": {}}}}
DATE = {"type": "function", "function": {"name": "get_date", "description": "Today's date"}}


def test_tool_choice_required_named_and_none(client):
    kw = dict(messages=[{"role": "user", "content": "What time is it?"}], temperature=0, max_tokens=200,
              extra_body=NO_THINK)
    r = chat(client, tools=[CLOCK, DATE], tool_choice="required", parallel_tool_calls=False, **kw)
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and len(calls) == 1
    assert calls[0].function.name in ("get_date", "get_time") and calls[0].function.arguments == "{}"
    r = chat(client, tools=TOOLS + [CLOCK], tool_choice={"type": "function", "function": {"name": "get_time"}}, **kw)
    calls = r.choices[0].message.tool_calls
    assert [(c.function.name, c.function.arguments) for c in calls] == [("get_time", "{}")]
    assert not r.choices[0].message.content
    # Streamed the same way.
    names = [tc.function.name for ch in chat(client, stream=True, tools=[CLOCK], tool_choice="required", **kw)
             if ch.choices for tc in ch.choices[0].delta.tool_calls or [] if tc.function.name]
    assert names == ["get_time"]
    r = chat(client, tools=[CLOCK], tool_choice="none", **{**kw, "max_tokens": 30})
    assert not r.choices[0].message.tool_calls and r.choices[0].finish_reason != "tool_calls"


def test_tool_choice_required_without_tools_is_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, tool_choice="required", max_tokens=2)
    assert e.value.param == "tool_choice"
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, tools=[CLOCK], tool_choice={"type": "function", "function": {"name": "nope"}}, max_tokens=2)
    assert e.value.param == "tool_choice"


@pytest.fixture(scope="module")
def special_server(tmp_path_factory):
    replay = tmp_path_factory.mktemp("replay") / "replay.jsonl"
    lines = ["Hmm<｜place▁holder▁no▁7｜>.</think>Hi<｜User｜> there<｜place▁holder▁no▁1｜>!</think>",
             "Hmm<｜place▁holder▁no▁7｜>.</think>Hi<｜User｜> there<｜place▁holder▁no▁1｜>!</think>"]
    replay.write_text("".join(json.dumps(l) + "\n" for l in lines))
    s = Server("--replay", replay)
    yield s
    assert s.stop() == 0


def test_generated_special_tokens_are_not_sent(special_server):
    client = openai.OpenAI(base_url=special_server.url + "/v1", api_key="unused", max_retries=0)
    r = chat(client, max_tokens=50)
    m = r.choices[0].message
    assert (m.reasoning_content, m.content) == ("Hmm.", "Hi there!")
    assert r.usage.completion_tokens == 11  # the specials still count as generated tokens
    streamed = "".join((getattr(c.choices[0].delta, "reasoning_content", None) or "") + (c.choices[0].delta.content or "")
                       for c in chat(client, max_tokens=50, stream=True) if c.choices)
    assert streamed == "Hmm.Hi there!"

