#!/usr/bin/env python3
"""Independent HF checkpoint -> f32 GGUF writer for the forward-pass tests (uses llama.cpp's gguf-py,
not dsv4's converter), so the engine is checked against HF through a path that shares no code with
`dsv4 convert`. Handles the tiny fp32 checkpoints of tests/data/hf (official tensor names as
transformers 5.17 save_pretrained writes them).  Usage: hf_to_gguf_f32.py HF_DIR OUT.gguf
"""
import json, struct, sys, numpy as np, gguf
d = sys.argv[1]; out = sys.argv[2]
cfg = json.load(open(d + '/config.json'))
raw = open(d + '/model.safetensors', 'rb').read()
hl = struct.unpack('<Q', raw[:8])[0]; hdr = json.loads(raw[8:8+hl]); base = 8 + hl
T = {}
for k, v in hdr.items():
    if k == '__metadata__': continue
    s, e = v['data_offsets']
    if v['dtype'] == 'BF16':  # widen exactly: bf16 bits are the top half of the f32 bits
        b16 = np.frombuffer(raw[base+s:base+e], dtype=np.uint16).astype(np.uint32) << 16
        T[k] = b16.view(np.float32).reshape(v['shape'])
    else:
        dt = {'F32': np.float32, 'I64': np.int64, 'I32': np.int32}[v['dtype']]
        T[k] = np.frombuffer(raw[base+s:base+e], dtype=dt).reshape(v['shape'])
L = cfg['num_hidden_layers']
rates = cfg['compress_rates']; lt = cfg['layer_types']
ratio = [0 if t == 'sliding_attention' else rates[t] for t in lt]
hash_n = sum(1 for t in cfg['mlp_layer_types'] if t == 'hash_moe')
w = gguf.GGUFWriter(out, 'deepseek4')
A = 'deepseek4.'
w.add_uint32(A+'block_count', L); w.add_uint32(A+'context_length', cfg['max_position_embeddings'])
w.add_uint32(A+'embedding_length', cfg['hidden_size']); w.add_uint32(A+'vocab_size', cfg['vocab_size'])
w.add_uint32(A+'attention.head_count', cfg['num_attention_heads']); w.add_uint32(A+'attention.head_count_kv', 1)
w.add_uint32(A+'attention.key_length', cfg['head_dim']); w.add_uint32(A+'attention.value_length', cfg['head_dim'])
w.add_uint32(A+'rope.dimension_count', cfg['qk_rope_head_dim']); w.add_float32(A+'rope.freq_base', cfg['rope_theta'])
w.add_float32(A+'attention.compress_rope_freq_base', cfg['compress_rope_theta'])
rp = cfg.get('rope_parameters', {}).get('compress', {})
if rp.get('rope_type') == 'yarn':
    w.add_float32(A+'rope.scaling.factor', rp['factor']); w.add_uint32(A+'rope.scaling.original_context_length', rp['original_max_position_embeddings'])
    w.add_float32(A+'rope.scaling.yarn_beta_fast', rp['beta_fast']); w.add_float32(A+'rope.scaling.yarn_beta_slow', rp['beta_slow'])
w.add_float32(A+'attention.layer_norm_rms_epsilon', cfg['rms_norm_eps'])
w.add_uint32(A+'attention.q_lora_rank', cfg['q_lora_rank']); w.add_uint32(A+'attention.output_lora_rank', cfg['o_lora_rank'])
w.add_uint32(A+'attention.output_group_count', cfg['o_groups']); w.add_uint32(A+'attention.sliding_window', cfg['sliding_window'])
w.add_array(A+'attention.compress_ratios', ratio)
w.add_uint32(A+'attention.indexer.head_count', cfg['index_n_heads']); w.add_uint32(A+'attention.indexer.key_length', cfg['index_head_dim'])
w.add_uint32(A+'attention.indexer.top_k', cfg['index_topk'])
w.add_uint32(A+'expert_count', cfg['n_routed_experts']); w.add_uint32(A+'expert_used_count', cfg['num_experts_per_tok'])
w.add_uint32(A+'expert_shared_count', cfg['n_shared_experts']); w.add_uint32(A+'expert_feed_forward_length', cfg['moe_intermediate_size'])
w.add_float32(A+'expert_weights_scale', cfg['routed_scaling_factor']); w.add_bool(A+'expert_weights_norm', True)
w.add_uint32(A+'hash_layer_count', hash_n); w.add_array(A+'swiglu_clamp_exp', [float(cfg['swiglu_limit'])]*L)
w.add_uint32(A+'hyper_connection.count', cfg['hc_mult']); w.add_uint32(A+'hyper_connection.sinkhorn_iterations', cfg['hc_sinkhorn_iters'])
w.add_float32(A+'hyper_connection.epsilon', cfg['hc_eps'])
def add(name, arr):
    if arr.dtype == np.int64: arr = arr.astype(np.int32)
    w.add_tensor(name, np.ascontiguousarray(arr))
add('token_embd.weight', T['model.embed_tokens.weight']); add('output.weight', T['head.weight'])
add('output_norm.weight', T['model.norm.weight'])
add('output_hc_fn.weight', T['model.hc_head.hc_fn']); add('output_hc_base.weight', T['model.hc_head.hc_base']); add('output_hc_scale.weight', T['model.hc_head.hc_scale'])
for i in range(L):
    p = f'model.layers.{i}.'; b = f'blk.{i}.'
    m = {'hc_attn_fn':'hc_attn_fn.weight','hc_attn_base':'hc_attn_base.weight','hc_attn_scale':'hc_attn_scale.weight',
         'hc_ffn_fn':'hc_ffn_fn.weight','hc_ffn_base':'hc_ffn_base.weight','hc_ffn_scale':'hc_ffn_scale.weight',
         'attn_norm.weight':'attn_norm.weight','ffn_norm.weight':'ffn_norm.weight',
         'attn.wq_a.weight':'attn_q_a.weight','attn.q_norm.weight':'attn_q_a_norm.weight','attn.wq_b.weight':'attn_q_b.weight',
         'attn.wkv.weight':'attn_kv.weight','attn.norm.weight':'attn_kv_a_norm.weight','attn.attn_sink':'attn_sinks.weight',
         'attn.wo_a.weight':'attn_output_a.weight','attn.wo_b.weight':'attn_output_b.weight',
         'attn.compressor.ape':'attn_compressor_ape.weight','attn.compressor.wkv.weight':'attn_compressor_kv.weight',
         'attn.compressor.wgate.weight':'attn_compressor_gate.weight','attn.compressor.norm.weight':'attn_compressor_norm.weight',
         'attn.indexer.wq_b.weight':'indexer.attn_q_b.weight','attn.indexer.weights_proj.weight':'indexer.proj.weight',
         'attn.indexer.compressor.ape':'indexer_compressor_ape.weight','attn.indexer.compressor.wkv.weight':'indexer_compressor_kv.weight',
         'attn.indexer.compressor.wgate.weight':'indexer_compressor_gate.weight','attn.indexer.compressor.norm.weight':'indexer_compressor_norm.weight',
         'ffn.gate.weight':'ffn_gate_inp.weight','ffn.gate.bias':'exp_probs_b.bias','ffn.gate.tid2eid':'ffn_gate_tid2eid.weight',
         'ffn.shared_experts.w1.weight':'ffn_gate_shexp.weight','ffn.shared_experts.w3.weight':'ffn_up_shexp.weight','ffn.shared_experts.w2.weight':'ffn_down_shexp.weight'}
    for k, g in m.items():
        if p + k in T: add(b + g, T[p + k])
    E = cfg['n_routed_experts']
    for hn, gn in (('w1','ffn_gate_exps.weight'),('w3','ffn_up_exps.weight'),('w2','ffn_down_exps.weight')):
        add(b + gn, np.stack([T[f'{p}ffn.experts.{e}.{hn}.weight'] for e in range(E)]))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
