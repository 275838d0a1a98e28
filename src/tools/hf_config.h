// tools/hf_config.h — HF config.json → model::Ds4Shape.
//
// Accepts both spellings of a DeepSeek V4 config (docs/spec/architecture.md §1.1, docs/spec/gguf.md §2.1):
//   current transformers keys  layer_types + compress_rates {kind: rate}, mlp_layer_types
//                              ("hash_moe" prefix), rope_parameters (nested {"main", "compress"}
//                              or one flat yarn dict = the compress rope), partial_rotary_factor
//   legacy shipped keys        compress_ratios (may carry one extra MTP entry), num_hash_layers,
//                              qk_rope_head_dim, rope_scaling {type|rope_type: yarn, ...}
// The same model written either way gives the same Ds4Shape. Malformed JSON, a missing required key
// or a value of the wrong type is an error naming the file and the key; nothing throws.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "model/shape.h"

namespace dsv4::tools {

// Parses config.json text; `name` (the path) prefixes error messages. The result is validated.
Result<model::Ds4Shape> shape_from_hf_config(std::string_view json_text, const std::string& name);
// Reads and parses a config.json file.
Result<model::Ds4Shape> load_hf_config(const std::string& path);

}  // namespace dsv4::tools
