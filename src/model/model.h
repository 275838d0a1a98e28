// model/model.h — a loaded DS4 model (mapping + shape + weights on a backend) and one inference
// timeline over it (Session). The forward pass is written once, against backend::Backend.
//
//   DSV4_ASSIGN_OR_RETURN(auto backend, backend::create_backend(options));
//   DSV4_ASSIGN_OR_RETURN(auto model, Model::load("m.gguf", *backend));
//   Session s(*model, /*ctx=*/4096);
//   DSV4_RETURN_IF_ERROR(s.forward(tokens, logits.data(), /*all_logits=*/true));
//
// Session state (docs/spec/architecture.md §9) lives on the backend, allocated once at construction:
// per layer the raw window as a ring of W rows indexed by position, and per compressor (CSA/HCA
// entries, CSA indexer keys) a ring of the last coff·ratio token rows and the compressed entries.
// The host keeps only the position: every count (ring fill, entries) follows from it. Bit-identical
// logits for a position whatever the chunking: every op computes each output element from the same
// inputs in the same order whatever else is in the batch.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gguf/reader.h"
#include "model/shape.h"
#include "model/weights.h"

namespace dsv4::model {

class Model {
 public:
  // Weights go to `backend`, which must outlive the model.
  static Result<std::unique_ptr<Model>> load(const std::string& path, backend::Backend& backend);
  const Ds4Shape& shape() const { return shape_; }
  const ModelWeights& weights() const { return weights_; }
  const gguf::GgufFile& file() const { return file_; }
  backend::Backend& backend() const { return *backend_; }
  // Per-pair RoPE frequencies [n_rot/2] on the backend: main (sliding layers) and compress (CSA/HCA, YaRN).
  const backend::Tensor& freqs(bool compress) const { return compress ? compress_freqs_ : main_freqs_; }
  // "DeepSeek V4 Flash" for the real shape, else a description of the shape.
  std::string describe() const;

 private:
  gguf::GgufFile file_;
  Ds4Shape shape_;
  backend::Backend* backend_ = nullptr;
  std::vector<backend::Buffer> storage_;  // backend memory the weights and frequencies live in
  ModelWeights weights_;
  backend::Tensor main_freqs_, compress_freqs_;
};

// Both frequency sets of spec §2, computed in double and rounded once.
std::vector<float> rope_freqs(const Ds4Shape& s, bool compress);

// One layer's timeline state: backend tensors inside the session's state buffer.
struct LayerState {
  backend::Tensor raw;                 // [W][head_dim] ring: kv row of position p at slot p mod W
  backend::CompressorTensors comp;     // CSA/HCA compressor (entries [ctx/r + 1][head_dim])
  backend::CompressorTensors idx;      // CSA indexer compressor (entries [ctx/r + 1][idx_head_dim])
};

// A cheap rewind point on a session's timeline: the position and host copies of the rings (raw
// window, compressor pending rows). Compressed entries are append-only and their count follows
// from the position, so a checkpoint needs none of them: rewinding restores the rings and the
// position, and entries past ⌊pos/r⌋ are never read again before they are rewritten.
// Size: n_layer · W · head_dim floats plus the compressor rings (≈ 11 MB for the real Flash),
// independent of the context length (a full snapshot() grows with it).
struct SessionCheckpoint {
  int64_t pos = 0;
  std::vector<float> rings;  // every layer's rings, in LayerState order
  int64_t bytes() const;
};

// Wall time per phase, accumulated over forward() calls while timing is on (--timing).
struct PhaseTimes {
  double hc = 0, attention = 0, compressor = 0, moe = 0, head = 0, embed = 0;  // seconds
  int64_t tokens = 0;
};

class Session {
 public:
  // ctx: the most tokens this timeline may hold; max_chunk: the most tokens one step computes
  // (0: min(ctx, 512)); longer forward() calls run in steps of max_chunk. State and activations
  // are allocated on the model's backend here, once: check ok() before use.
  Session(const Model& model, int64_t ctx, int64_t max_chunk = 0);
  ~Session();
  // The allocation's result (an out-of-memory error names the bytes).
  const Status& status() const { return status_; }

  // Back to exactly the initial state (position 0, every ring cleared; entries past the position
  // are never read).
  void reset();
  int64_t position() const { return pos_; }
  int64_t ctx() const { return ctx_; }
  int64_t max_chunk() const { return max_chunk_; }

  // Appends tokens to the timeline. logits: null, or [n][vocab] (all_logits) / [vocab] (last only).
  Status forward(std::span<const int32_t> tokens, float* logits, bool all_logits);
  // forward() of `tokens`, then *next = the greedy choice after the last one (sampling::argmax of
  // its logits, computed where the logits are: only 4 bytes come back from a device backend).
  Status forward_greedy(std::span<const int32_t> tokens, int32_t* next);
  // forward() of `tokens`, then *next = the sampler's choice after the last one (backend::SampleArgs:
  // the rule of sampling::Sampler with the caller's draw; its logits/id tensors are ignored), made
  // where the logits are: 4 bytes come back from a device backend. When the backend answers
  // backend::kSampleOnHost, *next is that and the last row's logits are in `logits` [vocab] for the
  // caller to sample with the same draw.
  Status forward_sample(std::span<const int32_t> tokens, const backend::SampleArgs& params, int32_t* next,
                        float* logits);

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

  // Backend memory reserved for the whole context (state + activations), and the growth per token at
  // full use.
  int64_t reserved_bytes() const;
  double bytes_per_token() const;

 private:
  struct Activations;
  Status allocate();
  // What a step's head produces: nothing, logits of the last row or all rows, or the last row's
  // greedy id.
  struct HeadOut {
    float* logits = nullptr;
    bool all_logits = false;
    int32_t* greedy = nullptr;                     // the last row's choice: argmax, or sample's
    const backend::SampleArgs* sample = nullptr;   // with greedy: sample instead of argmax
  };
  Status check_tokens(std::span<const int32_t> tokens) const;
  Status forward_step(std::span<const int32_t> tokens, const HeadOut& out);
  // forward_step over max_chunk_ pieces of `tokens`, the head giving `last` after the last piece only.
  Status forward_to_last(std::span<const int32_t> tokens, const HeadOut& last);
  void attention_block(int64_t layer, int64_t p0, int64_t n);
  void ffn_block(int64_t layer, int64_t n);
  void hc_pre_block(const Weight& fn, const backend::Tensor& scale, const backend::Tensor& base,
                    const backend::Tensor& norm, int64_t n,
                    const backend::MatmulConsumers& x_consumers);
  void compressor_block(const backend::CompressorTensors& state, const backend::Tensor& a, const backend::Tensor& z,
                        const backend::Tensor& ape, const backend::Tensor& norm, int64_t p0, int64_t ratio,
                        int64_t coff, int64_t d);
  Status head(int64_t n, const HeadOut& out);
  // The backend when --timing is on (phase timers drain it), else null.
  backend::Backend* timed() const { return timing_ ? &backend_ : nullptr; }

  static constexpr int64_t kDefaultMaxChunk = 512;
  static constexpr int64_t kLogitRows = 64;

  const Model& model_;
  backend::Backend& backend_;
  int64_t ctx_;
  int64_t max_chunk_;
  int64_t logit_rows_;  // rows of logits computed per download
  int64_t pos_ = 0;
  Status status_;
  backend::Buffer state_buf_, arena_buf_;
  backend::Tensor rings_;     // F32 [1][ring floats]: every layer's rings, one region of state_buf_
  std::vector<float> zeros_;  // host zeros the size of rings_ (reset)
  std::vector<LayerState> layers_;
  std::unique_ptr<Activations> act_;
  std::vector<backend::MatmulJob> jobs_;  // reused job list (output groups, projections)
  bool timing_ = false;
  PhaseTimes times_;
};

}  // namespace dsv4::model
