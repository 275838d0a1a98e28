"""The official `anthropic` Python SDK against a real `dsv4 serve` (built-in tiny random model):
messages with and without thinking, the streaming event sequence vs the non-streamed message,
tool_use / tool_result round trip (model side replayed with --replay), errors and x-api-key.
"""
import json

import anthropic
import pytest

from dsv4_server import Server

TOOL_CALL_TEXT = (
    "Need the weather.</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Oslo</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>")
TOOLS = [{"name": "get_weather", "description": "Weather for a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120)


def ask(client, temperature=None, **kw):
    # anthropic 2.x dropped temperature/top_p/top_k from create(); the API still takes them.
    if temperature is not None:
        kw["extra_body"] = {"temperature": temperature}
    kw.setdefault("model", "dsv4")
    kw.setdefault("max_tokens", 24)
    kw.setdefault("messages", [{"role": "user", "content": "Name a colour."}])
    return client.messages.create(**kw)


def test_message_without_thinking(client):
    m = ask(client, thinking={"type": "disabled"}, temperature=0)
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert all(b.type == "text" for b in m.content)
    assert m.usage.input_tokens > 0 and 1 <= m.usage.output_tokens <= 24


def test_message_with_thinking_has_a_thinking_block(client):
    m = ask(client, thinking={"type": "enabled", "budget_tokens": 1024}, max_tokens=30,
            system="You are terse.")
    a = ask(client, thinking={"type": "adaptive"}, output_config={"effort": "high"}, max_tokens=5)
    assert a.content and a.content[0].type == "thinking"
    kinds = [b.type for b in m.content]
    assert kinds and kinds[0] == "thinking"  # a random model rarely closes </think>: reasoning first
    assert set(kinds) <= {"thinking", "text"}


def test_stream_matches_non_stream_greedy(client):
    kw = dict(thinking={"type": "disabled"}, extra_body={"temperature": 0}, max_tokens=20)
    whole = ask(client, **kw)
    with client.messages.stream(model="dsv4", messages=[{"role": "user", "content": "Name a colour."}], **kw) as st:
        events = [e.type for e in st]
        final = st.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert "message_delta" in events
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in whole.content]
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_stop_sequences(client):
    full = ask(client, thinking={"type": "disabled"}, temperature=0, max_tokens=30)
    text = "".join(b.text for b in full.content if b.type == "text")
    if len(text) < 6:
        pytest.skip("the random model ended its turn too early")
    stop = text[len(text) // 2: len(text) // 2 + 2]
    m = ask(client, thinking={"type": "disabled"}, temperature=0, max_tokens=30, stop_sequences=[stop])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert "".join(b.text for b in m.content if b.type == "text") == text[: text.index(stop)]


def test_errors_are_anthropic_shaped(client):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model="dsv4", max_tokens=10, messages=[])
    assert e.value.body["type"] == "error"
    with pytest.raises(anthropic.BadRequestError):
        ask(client, temperature=3)
    with pytest.raises(anthropic.BadRequestError):
        ask(client, messages=[{"role": "system", "content": "x"}])
    assert ask(client, max_tokens=2).stop_reason in ("end_turn", "max_tokens")


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory):
    replay = tmp_path_factory.mktemp("areplay") / "replay.jsonl"
    lines = [TOOL_CALL_TEXT, TOOL_CALL_TEXT, "Cold.</think>It is cold in Oslo."]
    replay.write_text("".join(json.dumps(l) + "\n" for l in lines))
    s = Server("--replay", replay, "--api-key", "k2")
    yield s
    assert s.stop() == 0


def test_tool_use_round_trip(tool_server):
    client = anthropic.Anthropic(base_url=tool_server.url, api_key="k2", max_retries=0)
    msgs = [{"role": "user", "content": "Weather in Oslo?"}]
    with client.messages.stream(model="m", max_tokens=200, messages=msgs, tools=TOOLS) as st:
        types = [e.type for e in st]
        streamed = st.get_final_message()
    assert "content_block_start" in types and "content_block_delta" in types
    assert streamed.stop_reason == "tool_use"
    tool = [b for b in streamed.content if b.type == "tool_use"]
    assert len(tool) == 1 and tool[0].name == "get_weather" and tool[0].input == {"city": "Oslo"}
    m = client.messages.create(model="m", max_tokens=200, messages=msgs, tools=TOOLS)
    assert m.stop_reason == "tool_use"
    assert [b.type for b in m.content] == ["thinking", "tool_use"]
    assert m.content[0].thinking == "Need the weather."
    use = m.content[1]
    msgs += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "-5 C"}]}]
    r = client.messages.create(model="m", max_tokens=200, messages=msgs, tools=TOOLS)
    assert r.stop_reason == "end_turn"
    assert [b.type for b in r.content] == ["thinking", "text"]
    assert r.content[1].text == "It is cold in Oslo."
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=tool_server.url, api_key="nope", max_retries=0).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])


def test_count_tokens(client):
    msgs = [{"role": "user", "content": "Name a colour."}]
    n = client.messages.count_tokens(model="dsv4", messages=msgs)
    m = ask(client, messages=msgs, max_tokens=1, thinking={"type": "enabled", "budget_tokens": 1024})
    assert n.input_tokens == m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)
    longer = client.messages.count_tokens(model="dsv4", messages=msgs, system="Be brief. " * 20)
    assert longer.input_tokens > n.input_tokens


# --- issue #15 §3: client sampling wins in thinking mode; tool_choice is enforced ------------------

def test_thinking_with_temperature_0_is_greedy(client):
    kw = dict(thinking={"type": "enabled", "budget_tokens": 1024}, temperature=0, max_tokens=30)
    a, b = ask(client, **kw), ask(client, **kw)
    assert a.content[0].type == "thinking"
    assert [blk.model_dump() for blk in a.content] == [blk.model_dump() for blk in b.content]


CLOCK = {"name": "get_time", "description": "The current time", "input_schema": {"type": "object", "properties": {}}}
DATE = {"name": "get_date", "description": "Today's date", "input_schema": {"type": "object"}}


def test_tool_choice_any_tool_and_none(client):
    no_think = {"type": "disabled"}
    # (Tools without parameters: a random model would never close a free-text argument value.)
    m = ask(client, tools=[CLOCK, DATE], tool_choice={"type": "any", "disable_parallel_tool_use": True},
            thinking=no_think, temperature=0, max_tokens=200)
    uses = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and len(uses) == 1 and uses[0].name in ("get_date", "get_time")
    m = ask(client, tools=TOOLS + [CLOCK], tool_choice={"type": "tool", "name": "get_time"}, thinking=no_think,
            temperature=0, max_tokens=200)
    assert [(b.name, b.input) for b in m.content if b.type == "tool_use"] == [("get_time", {})]
    m = ask(client, tools=[CLOCK], tool_choice={"type": "none"}, thinking=no_think, temperature=0, max_tokens=20)
    assert not [b for b in m.content if b.type == "tool_use"] and m.stop_reason != "tool_use"
    with pytest.raises(anthropic.BadRequestError) as e:
        ask(client, tool_choice={"type": "any"}, max_tokens=5)
    assert "tool_choice" in str(e.value)
    with pytest.raises(anthropic.BadRequestError):
        ask(client, tools=[CLOCK], tool_choice={"type": "tool", "name": "nope"}, max_tokens=5)
