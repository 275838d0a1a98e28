// model/activations.h — the session's activation arena: every intermediate of one forward step as a
// typed 2-D view, planned once for max_chunk rows (tokens) and carved out of one backend allocation.
// A step of n ≤ max_chunk tokens uses the first n rows of each (rows(0, n)). Private to the model room.
#pragma once

#include "model/model.h"

namespace dsv4::model {

struct Session::Activations {
  // Shapes are [rows][cols] with rows = max_chunk tokens unless said otherwise; D = n_embd, hc = hc_mult,
  // H = n_head, d = head_dim, nI/dI = indexer heads/dim, K = experts per token, E = experts.
  backend::Tensor tokens;      // I32 [rows][1] this step's token ids
  backend::Tensor X, X_next;   // [rows][hc·D] residual streams (HC state); X_next is hc_post's output
  backend::Tensor streams;     // [rows][hc·D] rms-normed streams (HC mixing input)
  backend::Tensor mix;         // [rows][(2+hc)·hc] HC mixing coefficients
  backend::Tensor collapsed;   // [rows][D] Σ pre_i·X_i: the block input
  backend::Tensor post;        // [rows][hc] HC post weights
  backend::Tensor comb;        // [rows][hc·hc] HC combination matrix ([src][dst])
  backend::Tensor x;           // [rows][D] normed block input
  backend::Tensor cq;          // [rows][q_lora_rank] query latent
  backend::Tensor q;           // [rows][H·d] queries
  backend::Tensor kv;          // [rows][d] shared key = value rows
  backend::Tensor comp_a, comp_z;  // [rows][2·d] compressor kv / gate projections (CSA width; HCA uses d)
  backend::Tensor idx_a, idx_z;    // [rows][2·dI] indexer compressor projections
  backend::Tensor qI;          // [rows][nI·dI] indexer queries
  backend::Tensor gI;          // [rows][nI] indexer head weights
  backend::Tensor topk;        // I32 [rows][idx_topk] selected compressed entries (−1 padded)
  backend::Tensor o;           // [rows][H·d] attention output
  backend::Tensor v;           // [rows][o_groups·o_lora_rank] grouped low-rank output
  backend::Tensor y;           // [rows][D] block output (attention or MoE)
  backend::Tensor router;      // [rows][E] router logits
  backend::Tensor expert_ids;  // I32 [rows][K]
  backend::Tensor expert_w;    // [rows][K]
  backend::Tensor head_mix;    // [logit_rows][hc] output HC mixing
  backend::Tensor head_y;      // [logit_rows][D] output HC collapse
  backend::Tensor logits;      // [logit_rows][vocab]
  backend::Tensor greedy;      // I32 [logit_rows] argmax of the logits rows (forward_greedy)
};

}  // namespace dsv4::model
