#!/usr/bin/env python3
"""Writes a vocab-only GGUF (no tensors) from an HF tokenizer.json, with gguf-py's GGUFWriter.

Independent of dsv4's own converter, so the conformance test checks our tokenizer against HF
`tokenizers` through a file neither side wrote. Follows llama.cpp's convert_hf_to_gguf.py
conventions (get_vocab_base / _set_vocab_gpt2):
  - tokens: model vocab strings (GPT-2 byte-encoded) and added tokens as their raw content;
    ids missing from both become "[PAD<id>]" with type UNUSED;
  - token_type: CONTROL for special added tokens and for ones that look special
    ("<|...|>", "<｜...｜>"), USER_DEFINED for the other added tokens, NORMAL otherwise;
  - merges: "left right" strings in rank order; bos/eos ids from tokenizer_config.json
    (default: the ids of <｜begin▁of▁sentence｜>/<｜end▁of▁sentence｜>).

Usage: make_vocab_gguf.py TOKENIZER_JSON OUT.gguf [--pre joyai-llm]
"""
import argparse
import json
import os
import sys

import gguf


def looks_special(tok: str) -> bool:
    return (tok.startswith("<|") and tok.endswith("|>")) or (tok.startswith("<｜") and tok.endswith("｜>"))


def build(tokenizer_json: str):
    with open(tokenizer_json, encoding="utf-8") as f:
        tj = json.load(f)
    model = tj["model"]
    if model.get("type") != "BPE":
        raise SystemExit(f"{tokenizer_json}: model type {model.get('type')!r} is not BPE")
    vocab = model["vocab"]
    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    n = max(max(vocab.values()), max(added) if added else -1) + 1
    rev = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(n):
        if i in added:
            a = added[i]
            tokens.append(a["content"])
            types.append(gguf.TokenType.CONTROL if a["special"] or looks_special(a["content"])
                         else gguf.TokenType.USER_DEFINED)
        elif i in rev:
            tokens.append(rev[i])
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, types, merges


def special_id(tokens, cfg, key, default):
    v = cfg.get(key)
    content = v.get("content") if isinstance(v, dict) else (v if isinstance(v, str) else default)
    return tokens.index(content) if content in tokens else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokenizer_json")
    ap.add_argument("out")
    ap.add_argument("--pre", default="joyai-llm")
    args = ap.parse_args()
    tokens, types, merges = build(args.tokenizer_json)
    cfg_path = os.path.join(os.path.dirname(args.tokenizer_json), "tokenizer_config.json")
    cfg = {}
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
    bos = special_id(tokens, cfg, "bos_token", "<｜begin▁of▁sentence｜>")
    eos = special_id(tokens, cfg, "eos_token", "<｜end▁of▁sentence｜>")

    tmp = args.out + ".tmp"
    w = gguf.GGUFWriter(tmp, arch="deepseek4")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(args.pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    w.add_add_bos_token(bool(cfg.get("add_bos_token", False)))
    w.add_add_eos_token(bool(cfg.get("add_eos_token", False)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, args.out)
    print(f"{args.out}: {len(tokens)} tokens, {len(merges)} merges, bos={bos} eos={eos}", file=sys.stderr)


if __name__ == "__main__":
    main()
