// model/model.h — a loaded DS4 model (mapping + shape + bound weights) and one inference
// timeline over it (Session). The forward pass is written once, against backend::Ops.
//
//   DSV4_ASSIGN_OR_RETURN(auto model, Model::load("m.gguf", ops));
//   Session s(*model, ops, /*ctx=*/4096);
//   DSV4_RETURN_IF_ERROR(s.forward(tokens, logits.data(), /*all_logits=*/true));
//
// Session state (spec/architecture.md §9): per layer the raw window (last W−1 kv rows), the
// compressor's pending token rows (a, z+ape) for the open window and, for CSA, the previous
// window (overlap), the compressed entries, and for CSA the indexer's own compressor state and
// keys. Bit-identical logits for a position whatever the chunking: every op computes each output
// element from the same inputs in the same order whatever else is in the batch.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "gguf/reader.h"
#include "model/shape.h"
#include "model/weights.h"

namespace dsv4::model {

class Model {
 public:
  static Result<std::unique_ptr<Model>> load(const std::string& path, backend::Ops& ops);
  const Ds4Shape& shape() const { return shape_; }
  const ModelWeights& weights() const { return weights_; }
  const gguf::GgufFile& file() const { return file_; }
  // Per-pair RoPE frequencies [n_rot/2]: main (sliding layers) and compress (CSA/HCA, YaRN).
  const std::vector<float>& freqs(bool compress) const { return compress ? compress_freqs_ : main_freqs_; }
  // "DeepSeek V4 Flash" for the real shape, else a description of the shape.
  std::string describe() const;

 private:
  gguf::GgufFile file_;
  Ds4Shape shape_;
  ModelWeights weights_;
  std::vector<float> main_freqs_, compress_freqs_;
};

// Both frequency sets of spec §2, computed in double and rounded once.
std::vector<float> rope_freqs(const Ds4Shape& s, bool compress);

struct CompressorState {
  std::vector<float> a, z;         // [n_rows][width] pending token rows (z includes ape)
  int64_t first_pos = 0;           // position of row 0
  int64_t n_rows = 0;
  std::vector<float> entries;      // [n_entries][d] compressed rows (normed, roped)
  int64_t n_entries = 0;
};

struct LayerState {
  std::vector<float> raw;          // [raw_rows][head_dim] last ≤ W−1 kv rows, oldest first
  int64_t raw_rows = 0;
  CompressorState comp, idx;
};

// A cheap rewind point on a session's timeline. Compressed rows (entries) are append-only, so a
// checkpoint keeps only what later tokens overwrite or consume — the raw window, the compressors'
// pending rows — plus the entry counts; rewinding truncates the entries back to those counts.
// Size: n_layer · (W−1) · head_dim floats plus the pending rows (≈ 20 MB for the real Flash),
// independent of the context length (a full snapshot() grows with it).
struct SessionCheckpoint {
  int64_t pos = 0;
  std::vector<LayerState> layers;  // entries vectors left empty; n_entries holds the counts
  int64_t bytes() const;
};

// Wall time per phase, accumulated over forward() calls while timing is on (--timing).
struct PhaseTimes {
  double hc = 0, attention = 0, compressor = 0, moe = 0, head = 0, embed = 0;  // seconds
  int64_t tokens = 0;
};

class Session {
 public:
  // ctx: the most tokens this timeline may hold; entry storage is reserved for it up front.
  Session(const Model& model, backend::Ops& ops, int64_t ctx);

  // Back to exactly the initial state (all buffers cleared, not only counters).
  void reset();
  int64_t position() const { return pos_; }
  int64_t ctx() const { return ctx_; }

  // Appends tokens to the timeline. logits: null, or [n][vocab] (all_logits) / [vocab] (last only).
  Status forward(std::span<const int32_t> tokens, float* logits, bool all_logits);

  // Rewind points (see SessionCheckpoint). rewind() requires a checkpoint taken on this
  // timeline at or before the current position, with no rewind past it in between (the caller
  // tracks that — the engine's prefix cache keeps only checkpoints that are prefixes of the live
  // tokens); counts that do not fit are an error. Bits after a rewind equal a fresh run.
  SessionCheckpoint checkpoint() const;
  Status rewind(const SessionCheckpoint& c);

  // Complete state (position and every layer buffer) with a versioned header.
  std::vector<uint8_t> snapshot() const;
  Status restore(std::span<const uint8_t> bytes);
  Status save(const std::string& path) const;
  Status load(const std::string& path);

  void set_timing(bool on) { timing_ = on; }
  const PhaseTimes& times() const { return times_; }
  void clear_times() { times_ = PhaseTimes{}; }

  // Memory reserved for the whole context, and the growth per token at full use.
  int64_t reserved_bytes() const;
  double bytes_per_token() const;

 private:
  Status forward_chunk(std::span<const int32_t> tokens, float* logits, bool all_logits);
  Status attention_block(int64_t layer, const std::vector<int64_t>& pos, std::vector<float>& X);
  Status ffn_block(int64_t layer, std::span<const int32_t> tokens, std::vector<float>& X);
  Status compressor_step(CompressorState& st, const std::vector<float>& x, const std::vector<int64_t>& pos,
                         int64_t ratio, int64_t coff, int64_t d, const Weight& kv_w, const Weight& gate_w,
                         const std::vector<float>& ape, const std::vector<float>& norm);
  Status hc_pre_block(const Weight& fn, const std::vector<float>& scale, const std::vector<float>& base,
                      const std::vector<float>& X, int64_t n, std::vector<float>& x, std::vector<float>& post,
                      std::vector<float>& comb);

  const Model& model_;
  backend::Ops& ops_;
  int64_t ctx_;
  int64_t pos_ = 0;
  std::vector<LayerState> layers_;
  bool timing_ = false;
  PhaseTimes times_;
  // The largest per-chunk buffers, kept between calls so that every chunk does not allocate, fault in
  // and zero them again (a 512-token chunk of the real Flash: attention's queries and outputs 64 MiB
  // each, the routed experts' rows 25-50 MiB each). Scratch only: no state, each element written
  // before it is read within a call.
  struct Scratch {
    std::vector<float> q, o;                 // attention: n × heads × head_dim
    std::vector<float> xe, ge, ue, he, ye, y;  // MoE: (token, expert) pairs × width
  } scratch_;
};

}  // namespace dsv4::model
