// tools/hf_tensors.h — checkpoint tensor names → DS4 manifest tensors, and source decoding to f32.
//
// Owns: the name table (official DeepSeek names such as layers.N.attn.wq_a.weight, with or without
// a `model.` prefix, and the transformers save_pretrained names such as
// model.layers.N.self_attn.q_a_proj.weight / mlp.experts.gate_up_proj), the shape checks (GGUF ne
// is the reversed source shape; experts stack to [E, out, in] = ne [in, out, E]), the detection of
// unknown / missing tensors, and decoding of every source encoding to f32 rows:
//   F32 / F16 / BF16                  direct
//   F8_E4M3 + 128×128 block scales    `<base>.scale` (E8M0) or HF `<name>_scale_inv` (F32/BF16/E8M0)
//   FP4 E2M1 in I8/U8 (2 per byte,    low nibble = even column, `<base>.scale` E8M0 per 32 columns
//     low nibble first)
//   I64 / I32 tid2eid                 → I32, every id range-checked against the expert count
// Must not: hold decoded tensors (callers decode row chunks into their own buffers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/shape.h"
#include "model/tensor_manifest.h"
#include "tools/safetensors.h"

namespace dsv4::tools {

enum class SourceEncoding { kPlain, kFp8Block, kFp4, kIndex };

// A run of consecutive GGUF rows taken from one source matrix: the rows
// [row_begin, row_begin + rows) of matrix `expert` (or the only matrix) of `tensor`.
struct SourcePart {
  const StTensor* tensor = nullptr;
  const StTensor* scale = nullptr;  // FP8 block scale or FP4 group scale; null for plain
  SourceEncoding encoding = SourceEncoding::kPlain;
  int64_t expert = -1;     // index into a stacked tensor's leading dim; -1: not stacked
  int64_t matrix_rows = 0; // rows of one source matrix (1 for 1-D sources)
  int64_t row_begin = 0;
  int64_t rows = 0;
  int64_t cols = 0;        // logical columns (= GGUF ne[0])
  int64_t fp8_block = 128; // tile size of FP8 block scales
};

struct TensorSource {
  model::TensorSpec spec;
  std::vector<SourcePart> parts;  // in GGUF row order; their rows sum to ne[1]·ne[2]·ne[3]
  uint64_t source_bytes = 0;      // bytes of source data (incl. scales) read for it
};

struct SourceMap {
  std::vector<TensorSource> tensors;     // manifest order
  std::vector<std::string> ignored;      // source tensors deliberately dropped (mtp.*, rotary buffers)
};

// Finds and checks the sources of every manifest tensor. Errors list every missing tensor, every
// shape / dtype mismatch, and every source tensor that nothing consumed (other than mtp.* and
// rotary inv_freq buffers, which are reported in `ignored`).
Result<SourceMap> map_sources(const SafetensorsSet& st, const model::Ds4Shape& shape,
                              const std::vector<model::TensorSpec>& manifest);

// Decodes rows [r0, r0 + nr) of a part (relative to row_begin) to f32: out is nr × cols.
// Not valid for kIndex parts.
void decode_rows_f32(const SourcePart& p, int64_t r0, int64_t nr, float* out);
// Decodes rows of a kIndex part to int32, checking 0 <= id < n_expert.
Status decode_rows_i32(const SourcePart& p, int64_t r0, int64_t nr, int64_t n_expert, int32_t* out);

// Single-value decoders (exposed for tests).
float fp8_e4m3_to_f32(uint8_t b);
float e8m0_to_f32(uint8_t e);
float fp4_e2m1_to_f32(uint8_t nibble);

}  // namespace dsv4::tools
