"""The OpenAI Responses API (/v1/responses) with the official `openai` SDK and the `openai-agents`
framework (whose default model speaks this API), against a real `dsv4 serve` on the built-in tiny
model (random weights: these tests check protocol shape, determinism, the stored chain and the
prefix cache, never answer quality). Tool calls: the model's side replayed with --replay, or
forced by tool_choice; everything else real.
"""
import asyncio
import json
import urllib.request

import openai
import pytest

from dsv4_server import Server

NO_THINK = {"effort": "none"}
TOOL_CALL_TEXT = (
    "I should look it up.</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>")
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather forecast for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
# Tools without parameters for tool_choice tests: a random model would never close a free-text value.
CLOCK = {"type": "function", "name": "get_time", "description": "The current time",
         "parameters": {"type": "object", "properties": {}}}
DATE = {"type": "function", "name": "get_date", "description": "Today's date"}


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def create(client, **kw):
    kw.setdefault("model", "dsv4")
    kw.setdefault("input", "Write one sentence about the sea.")
    return client.responses.create(**kw)


def test_non_stream_shape_and_greedy_determinism(client):
    a = create(client, max_output_tokens=12, temperature=0, reasoning=NO_THINK, metadata={"k": "v"}, user="u1")
    b = create(client, max_output_tokens=12, temperature=0, reasoning=NO_THINK)
    assert a.object == "response" and a.id.startswith("resp_")
    assert a.status in ("completed", "incomplete")
    if a.status == "incomplete":
        assert a.incomplete_details.reason == "max_output_tokens"
    assert [o.type for o in a.output] == ["message"]
    msg = a.output[0]
    assert msg.role == "assistant" and msg.content[0].type == "output_text"
    assert a.output_text == msg.content[0].text == b.output_text  # greedy: the same bytes
    assert a.metadata == {"k": "v"} and a.user == "u1" and a.max_output_tokens == 12
    assert a.reasoning.effort == "none" and a.store is True
    u = a.usage
    assert u.input_tokens > 0 and 1 <= u.output_tokens <= 12
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert u.output_tokens_details.reasoning_tokens == 0


def test_thinking_gives_a_reasoning_item_and_usage(client):
    r = create(client, max_output_tokens=30, temperature=0, reasoning={"effort": "high"})
    assert r.output[0].type == "reasoning"
    assert r.output[0].content[0].type == "reasoning_text" and r.output[0].content[0].text
    assert r.usage.output_tokens_details.reasoning_tokens > 0
    assert r.reasoning.effort == "high"


@pytest.mark.parametrize("reasoning", [NO_THINK, {"effort": "medium"}])
def test_stream_event_sequence_equals_non_stream(client, reasoning):
    kw = dict(max_output_tokens=25, temperature=0, reasoning=reasoning, input="Why is the sky blue?")
    whole = create(client, **kw)
    events = list(create(client, stream=True, **kw))
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[1] == "response.in_progress"
    assert types[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    # Every item is added, then done; text arrives as deltas that add up to the .done text.
    added = [e for e in events if e.type == "response.output_item.added"]
    done = [e for e in events if e.type == "response.output_item.done"]
    assert [e.output_index for e in added] == [e.output_index for e in done] == list(range(len(added)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    reasoning_text = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    final = events[-1].response
    assert final.output_text == whole.output_text == text
    got_reasoning = "".join(c.text for o in final.output if o.type == "reasoning" for c in o.content)
    want_reasoning = "".join(c.text for o in whole.output if o.type == "reasoning" for c in o.content)
    assert got_reasoning == want_reasoning == reasoning_text
    assert final.status == whole.status
    assert final.usage.output_tokens == whole.usage.output_tokens
    for e in events:
        if e.type == "response.output_text.done":
            assert e.text == text


def test_previous_response_id_chain_reuses_the_cache_and_get(client, server):
    first = create(client, input="My name is Ada.", max_output_tokens=8, temperature=0, reasoning=NO_THINK)
    second = create(client, input="What is my name?", previous_response_id=first.id, max_output_tokens=8,
                    temperature=0, reasoning=NO_THINK)
    assert second.previous_response_id == first.id
    # The follow-up's prompt is the stored conversation + the new input: longer than the first one,
    # and everything the first request prefilled comes from the engine's cache (the checkpoint one
    # token before the previous prompt's end).
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - 1
    third = create(client, input="And again?", previous_response_id=second.id, max_output_tokens=4,
                   temperature=0, reasoning=NO_THINK)
    assert third.usage.input_tokens_details.cached_tokens >= second.usage.input_tokens - 1
    # The chain is the same prompt as sending the whole conversation by hand.
    manual = create(client, input=[
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": [{"type": "output_text", "text": first.output_text}]},
        {"role": "user", "content": "What is my name?"},
        {"role": "assistant", "content": second.output_text},
        {"role": "user", "content": "And again?"}], max_output_tokens=4, temperature=0, reasoning=NO_THINK)
    assert manual.usage.input_tokens == third.usage.input_tokens
    assert manual.output_text == third.output_text
    # GET returns the stored object; DELETE forgets it.
    got = client.responses.retrieve(second.id)
    assert got.id == second.id and got.output_text == second.output_text and got.usage == second.usage
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        create(client, input="x", previous_response_id=first.id, max_output_tokens=2)
    # store=false: answered, not kept.
    gone = create(client, input="hi", store=False, max_output_tokens=2, reasoning=NO_THINK)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(gone.id)


def test_stream_is_stored_too(client):
    events = list(create(client, stream=True, max_output_tokens=5, temperature=0, reasoning=NO_THINK))
    final = events[-1].response
    got = client.responses.retrieve(final.id)
    assert got.output_text == final.output_text and got.status == final.status


def test_tool_choice_required_and_named(client):
    r = create(client, input="What time is it?", tools=[DATE, CLOCK], tool_choice="required",
               parallel_tool_calls=False, max_output_tokens=200, temperature=0, reasoning=NO_THINK)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name in ("get_date", "get_time")
    assert r.status == "completed", r.output
    r = create(client, input="What time is it?", tools=[WEATHER, CLOCK],
               tool_choice={"type": "function", "name": "get_time"}, max_output_tokens=200, temperature=0,
               reasoning=NO_THINK)
    calls = [o for o in r.output if o.type == "function_call"]
    assert [(c.name, c.arguments) for c in calls] == [("get_time", "{}")]
    assert calls[0].call_id.startswith("call_") and calls[0].status == "completed"
    r = create(client, input="What time is it?", tools=[CLOCK], tool_choice="none", max_output_tokens=20,
               temperature=0, reasoning=NO_THINK)
    assert not [o for o in r.output if o.type == "function_call"]


def test_errors(client):
    with pytest.raises(openai.BadRequestError) as e:
        create(client, tool_choice="required", max_output_tokens=2)
    assert e.value.param == "tool_choice"
    with pytest.raises(openai.BadRequestError) as e:
        create(client, tools=[CLOCK], tool_choice={"type": "function", "name": "nope"}, max_output_tokens=2)
    with pytest.raises(openai.BadRequestError) as e:
        create(client, tools=[{"type": "web_search"}])
    assert e.value.param == "tools[0].type"
    with pytest.raises(openai.BadRequestError) as e:
        create(client, input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}])
    assert "input[0].content[0].type" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        create(client, input=[])
    with pytest.raises(openai.BadRequestError) as e:
        create(client, reasoning={"effort": "extreme"})
    assert e.value.param == "reasoning.effort"
    with pytest.raises(openai.BadRequestError):
        create(client, max_output_tokens=0)
    with pytest.raises(openai.NotFoundError):
        create(client, previous_response_id="resp_missing")
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_missing")
    # The server is fine.
    assert create(client, max_output_tokens=2, reasoning=NO_THINK).status in ("completed", "incomplete")


def test_text_format_json_schema_renders_like_chat(client, server):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    r = create(client, text={"format": {"type": "json_schema", "name": "out", "schema": schema}},
               max_output_tokens=2, reasoning=NO_THINK)
    chat = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0).chat.completions.create(
        model="dsv4", messages=[{"role": "user", "content": "Write one sentence about the sea."}], max_tokens=2,
        response_format={"type": "json_schema", "json_schema": {"name": "out", "schema": schema}},
        extra_body={"thinking": {"type": "disabled"}})
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.text.format.type == "json_schema"


def test_raw_sse_over_curl(server):
    import subprocess
    body = json.dumps({"model": "x", "input": "hi", "max_output_tokens": 3, "stream": True,
                       "reasoning": {"effort": "none"}})
    out = subprocess.run(["curl", "-sS", "-N", "-H", "Content-Type: application/json", "-d", body,
                          server.url + "/v1/responses"], capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    events = [l[7:] for l in lines if l.startswith("event: ")]
    datas = [json.loads(l[6:]) for l in lines if l.startswith("data: ")]
    assert events[0] == "response.created" and events[-1] in ("response.completed", "response.incomplete")
    assert [d["type"] for d in datas] == events


# --- tools round trip: the model's turn replayed, the rest real ------------------------------------

@pytest.fixture(scope="module")
def tool_server(tmp_path_factory):
    replay = tmp_path_factory.mktemp("replay") / "replay.jsonl"
    lines = [TOOL_CALL_TEXT, "It is sunny.</think>It will be sunny in Paris.",
             TOOL_CALL_TEXT, "It is sunny.</think>It will be sunny in Paris.",
             TOOL_CALL_TEXT, "Done.</think>Sunny, says the tool."]
    replay.write_text("".join(json.dumps(l) + "\n" for l in lines))
    s = Server("--replay", replay)
    yield s
    assert s.stop() == 0


def test_tool_round_trip_with_previous_response_id_and_with_items(tool_server):
    client = openai.OpenAI(base_url=tool_server.url + "/v1", api_key="unused", max_retries=0)
    # 1. streamed: the call is announced, its arguments arrive as deltas.
    events = list(client.responses.create(model="m", input="Weather in Paris?", tools=[WEATHER], stream=True))
    types = [e.type for e in events]
    assert "response.function_call_arguments.delta" in types and "response.function_call_arguments.done" in types
    final = events[-1].response
    assert final.status == "completed"
    call = [o for o in final.output if o.type == "function_call"][0]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert [o.type for o in final.output] == ["reasoning", "function_call"]
    assert final.output[0].content[0].text == "I should look it up."
    # 2. the result goes back through previous_response_id; the model answers.
    r2 = client.responses.create(model="m", previous_response_id=final.id, tools=[WEATHER], input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "{\"forecast\": \"sunny\"}"}])
    assert r2.output_text == "It will be sunny in Paris."
    assert r2.output[0].type == "reasoning" and r2.output[0].content[0].text == "It is sunny."
    # The follow-up continues the engine's timeline in place: nothing the first response computed
    # (its prompt and its output) is prefilled again.
    assert r2.usage.input_tokens_details.cached_tokens == final.usage.input_tokens + final.usage.output_tokens - 1
    # 3. the same conversation sent as items (output items of the first response fed back as input).
    r3 = client.responses.create(model="m", input="Weather in Paris?", tools=[WEATHER])
    call3 = [o for o in r3.output if o.type == "function_call"][0]
    items = [{"role": "user", "content": "Weather in Paris?"}] + [o.model_dump(exclude_none=True) for o in r3.output]
    items.append({"type": "function_call_output", "call_id": call3.call_id, "output": "sunny"})
    r4 = client.responses.create(model="m", input=items, tools=[WEATHER])
    assert r4.output_text == "It will be sunny in Paris."
    assert [o.type for o in r4.output] == ["reasoning", "message"]
    assert r4.usage.input_tokens_details.cached_tokens > 0  # r3's prompt is r4's prefix


def test_openai_agents_default_model(tool_server):
    """openai-agents' default model is the Responses API: an agent with a function tool runs a
    full loop (call → tool → answer) against the server."""
    from agents import Agent, Runner, function_tool, set_tracing_disabled, OpenAIResponsesModel
    set_tracing_disabled(True)
    seen = []

    @function_tool
    def get_weather(city: str) -> str:
        """Weather forecast for a city."""
        seen.append(city)
        return "sunny"

    client = openai.AsyncOpenAI(base_url=tool_server.url + "/v1", api_key="unused", max_retries=0)
    agent = Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather],
                  model=OpenAIResponsesModel(model="dsv4", openai_client=client))
    result = asyncio.run(Runner.run(agent, "Weather in Paris?"))
    assert seen == ["Paris"]
    assert result.final_output == "Sunny, says the tool."


def test_store_is_bounded_by_the_flag():
    s = Server("--response-store", "2")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
        ids = [create(client, input=f"n{i}", max_output_tokens=1, reasoning=NO_THINK).id for i in range(3)]
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(ids[0])  # the oldest was dropped
        assert [client.responses.retrieve(i).id for i in ids[1:]] == ids[1:]
        props = json.load(urllib.request.urlopen(s.url + "/props"))
        assert props["server"]["response_store"] == 2
    finally:
        assert s.stop() == 0
    # A bad value is refused at start-up, before the model loads.
    import subprocess
    from dsv4_server import dsv4_bin
    out = subprocess.run([dsv4_bin(), "serve", "--port", "0", "--response-store", "-1"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and "--response-store" in out.stderr
