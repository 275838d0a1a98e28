#!/usr/bin/env python3
"""Regenerates tests/data/chat/expected/*.txt with the OFFICIAL DeepSeek V4 encoder.

Usage: make_goldens.py PATH/TO/encoding_dsv4.py
  (the encoder is `encoding/encoding_dsv4.py` of the DeepSeek V4 Flash release; it is not
  committed here.)

Each tests/data/chat/requests/NAME.json is an OpenAI chat-completions body. It is converted to the
encoder's message format with the same conventions the server uses (src/server/api/openai_chat.h):
  - content-part arrays: text parts joined with "\\n\\n";
  - top-level tools ([{"type":"function","function":{...}}]) and response_format (type other than
    "text") attach to the first system message; with none, {"role":"system","content":""} is
    inserted at position 0;
  - thinking on by default; off by thinking.type "disabled", reasoning_effort "none" or
    chat_template_kwargs thinking/enable_thinking false; effort max/ultra -> "max", the rest -> high;
  - "max" is passed to the encoder only when the context size (ctx.json, default 1048576) is at
    least 393216, otherwise reasoning_effort=None (high), like ds4.
Then encode_messages(messages, thinking_mode, drop_thinking=True, reasoning_effort=...) is called
and its output is written as UTF-8 with nothing added.
"""
import copy
import importlib.util
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_CTX = 1048576
MAX_MIN_CTX = 393216


def load_encoder(path):
    spec = importlib.util.spec_from_file_location("encoding_dsv4", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def text_of(content):
    if content is None:
        return None
    if isinstance(content, str):
        return content
    return "\n\n".join(part["text"] for part in content)


def convert(req, ctx):
    messages = []
    for m in req["messages"]:
        m = copy.deepcopy(m)
        if "content" in m:
            m["content"] = text_of(m["content"])
        messages.append(m)
    rf = req.get("response_format")
    if rf is not None and rf.get("type") == "text":
        rf = None
    tools = req.get("tools") or None
    if tools or rf:
        idx = next((i for i, m in enumerate(messages) if m["role"] == "system"), None)
        if idx is None:
            messages.insert(0, {"role": "system", "content": ""})
            idx = 0
        if tools:
            messages[idx]["tools"] = tools
        if rf:
            messages[idx]["response_format"] = rf
    enabled, effort = True, "high"
    th = req.get("thinking")
    if isinstance(th, dict):
        enabled = th.get("type") == "enabled"
    elif isinstance(th, bool):
        enabled = th
    eff = req.get("reasoning_effort")
    kw = req.get("chat_template_kwargs") or {}
    for key in ("thinking", "enable_thinking"):
        if key in kw:
            enabled = kw[key]
    eff = kw.get("reasoning_effort", eff)
    if eff == "none":
        enabled = False
    elif eff in ("max", "ultra"):
        effort = "max"
    mode = "thinking" if enabled else "chat"
    reasoning_effort = "max" if (enabled and effort == "max" and ctx >= MAX_MIN_CTX) else None
    return messages, mode, reasoning_effort


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    enc = load_encoder(sys.argv[1])
    ctx_map = json.loads((HERE / "ctx.json").read_text())
    out_dir = HERE / "expected"
    out_dir.mkdir(exist_ok=True)
    n = 0
    for path in sorted((HERE / "requests").glob("*.json")):
        req = json.loads(path.read_text(encoding="utf-8"))
        ctx = ctx_map.get(path.stem, DEFAULT_CTX)
        messages, mode, effort = convert(req, ctx)
        prompt = enc.encode_messages(messages, thinking_mode=mode, drop_thinking=True, reasoning_effort=effort)
        (out_dir / (path.stem + ".txt")).write_bytes(prompt.encode("utf-8"))
        n += 1
    print(f"wrote {n} goldens to {out_dir}")


if __name__ == "__main__":
    main()
