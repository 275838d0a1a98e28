#!/usr/bin/env python3
"""Writes HF transformers goldens for tiny random DeepSeek V4 models (run on the GPU/device machine).

  python3 tests/reference/make_hf_goldens.py OUT_DIR

For each case: OUT_DIR/<case>/{config.json, model.safetensors} (HF save_pretrained, bf16 — every
weight is rounded to bf16 first, so the fp32 goldens are exact for the bf16 file), tokens.json
(prompt ids), logits.npy (float32 [L, vocab], HF eager fp32, use_cache=False), logits_decode.npy
(HF token-by-token with a DynamicCache, to show HF's own drift), greedy.json (prompt = first half
of tokens.json, then 48 greedy tokens with a fresh DynamicCache), and manifest.json (every saved
tensor: name, dtype, shape). The model construction follows
docs/spec/architecture.md §12: HF's init leaves sinks, position biases, HC bases, tid2eid and the
router correction bias at 0/1, so every parameter and those buffers are re-randomised.
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM, DynamicCache

OUT = sys.argv[1] if len(sys.argv) > 1 else "hf-goldens"
torch.set_num_threads(8)


def build(kw, seed):
    cfg = DeepseekV4Config(**kw)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = DeepseekV4ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.5 if p.dim() <= 1 else 0.15))
        for n, b in model.named_buffers():
            if n.endswith("tid2eid"):
                b.copy_(torch.randint(0, cfg.n_routed_experts, b.shape, generator=g))
            elif n.endswith("e_score_correction_bias"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.3)
        for n, p in model.named_parameters():
            if n.endswith("norm.weight") or n.endswith("layernorm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
        # Exactly representable in bf16, so the bf16 checkpoint and the fp32 model agree.
        for n, p in model.named_parameters():
            p.copy_(p.bfloat16().float())
        for n, b in model.named_buffers():  # only saved buffers: never the RoPE inv_freq tables
            if n.endswith("e_score_correction_bias"):
                b.copy_(b.bfloat16().float())
    return cfg, model, g


BASE = dict(vocab_size=97, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=1, head_dim=32, q_lora_rank=24,
            partial_rotary_factor=0.5, num_experts_per_tok=2, n_routed_experts=8, n_shared_experts=1,
            routed_scaling_factor=1.5, scoring_func="sqrtsoftplus",
            layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                         "compressed_sparse_attention"],
            compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
            mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
            sliding_window=8, o_groups=2, o_lora_rank=12, index_n_heads=8, index_head_dim=32, index_topk=3,
            hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6, swiglu_limit=10.0,
            rope_theta=10000.0, compress_rope_theta=160000.0, max_position_embeddings=64 * 16,
            rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 64,
                             "beta_fast": 32.0, "beta_slow": 1.0},
            tie_word_embeddings=False, initializer_range=0.1)

CASES = []
a = dict(BASE)
a.update(o_groups=4, o_lora_rank=8)
CASES.append(("tiny_a", a, 48, 0))
d = dict(BASE)
d.update(compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
         sliding_window=16, index_topk=8,
         layer_types=["sliding_attention", "sliding_attention", "compressed_sparse_attention",
                      "heavily_compressed_attention"],
         mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe"])
CASES.append(("tiny_d", d, 300, 5))
e = dict(BASE)
e.pop("rope_parameters")
CASES.append(("tiny_e", e, 24, 7))

summary = {"transformers": transformers.__version__, "torch": torch.__version__, "cases": {}}
for name, kw, L, seed in CASES:
    cfg, model, g = build(kw, seed)
    ids = torch.randint(0, cfg.vocab_size, (1, L), generator=g)
    d_out = os.path.join(OUT, name)
    os.makedirs(d_out, exist_ok=True)
    with torch.no_grad():
        full = model(input_ids=ids, use_cache=False).logits[0].float()
        pkv = DynamicCache(config=cfg)
        dec = []
        for t in range(L):
            dec.append(model(input_ids=ids[:, t:t + 1], past_key_values=pkv, use_cache=True).logits[0].float())
        dec = torch.cat(dec, 0)
        half = L // 2
        pkv = DynamicCache(config=cfg)
        out = model(input_ids=ids[:, :half], past_key_values=pkv, use_cache=True).logits[0, -1]
        greedy = []
        for _ in range(48):
            nxt = int(out.argmax())
            greedy.append(nxt)
            out = model(input_ids=torch.tensor([[nxt]]), past_key_values=pkv, use_cache=True).logits[0, -1]
    with open(os.path.join(d_out, "greedy.json"), "w") as f:
        json.dump({"prompt_tokens": half, "generated": greedy}, f)
    model.to(torch.bfloat16).save_pretrained(d_out, safe_serialization=True)
    np.save(os.path.join(d_out, "logits.npy"), full.numpy().astype(np.float32))
    np.save(os.path.join(d_out, "logits_decode.npy"), dec.numpy().astype(np.float32))
    with open(os.path.join(d_out, "tokens.json"), "w") as f:
        json.dump(ids[0].tolist(), f)
    from safetensors import safe_open
    tensors = {}
    for fn in sorted(os.listdir(d_out)):
        if fn.endswith(".safetensors"):
            with safe_open(os.path.join(d_out, fn), "pt") as sf:
                for k in sf.keys():
                    t = sf.get_tensor(k)
                    tensors[k] = {"dtype": str(t.dtype), "shape": list(t.shape), "file": fn}
    with open(os.path.join(d_out, "manifest.json"), "w") as f:
        json.dump(tensors, f, indent=1, sort_keys=True)
    buffers = sorted(n for n, _ in model.named_buffers())
    summary["cases"][name] = {"L": L, "seed": seed, "n_tensors": len(tensors),
                              "max_abs_logit": float(full.abs().max()),
                              "hf_full_vs_decode_max_diff": float((full - dec).abs().max()),
                              "buffers": buffers}
    print(name, summary["cases"][name]["n_tensors"], "tensors; full vs decode",
          summary["cases"][name]["hf_full_vs_decode_max_diff"])
with open(os.path.join(OUT, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
print(json.dumps(summary, indent=1))
