// include/dsv4/engine.h — the public engine API: a loaded DS4 model with its tokenizer (Engine)
// and one inference timeline with prefix reuse, driven by generate(). The CLI and the server see
// only this header (plus the chat/sampling value types it re-exports); never tensors or sessions.
//
// Threading: info(), render_chat(), tokenize(), token_*() are const and thread-safe (HTTP threads
// render and tokenize). generate(), reset() and cache_stats() belong to ONE worker thread (the
// server's engine worker owns the engine's session and all its state).
//
// Prefix reuse (ds4's session_sync idea): generate() compares the new prompt with the tokens the
// session already holds and continues from the longest common prefix, rewinding to the nearest
// checkpoint at or before it (model::SessionCheckpoint; taken every checkpoint_interval tokens
// and one token before each prompt's end, which is where the next chat turn usually diverges).
// Reuse never changes bits: prefill is exact at any chunking, so a request gives the same output
// whether its prefix came from the cache or was recomputed (tested).
//
//   EngineOptions o; o.model_path = "m.gguf"; o.ctx = 8192;
//   DSV4_ASSIGN_OR_RETURN(auto engine, Engine::load(o));
//   GenerateRequest r; r.prompt = engine->tokenize(text, true); r.max_tokens = 64;
//   MyObserver obs;  // receives text/tool-call deltas; returns false to cancel
//   DSV4_ASSIGN_OR_RETURN(GenerationResult res, engine->generate(r, obs));
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "base/cpu_features.h"
#include "base/status.h"
#include "sampling/sampler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/dsml_parser.h"
#include "tokenizer/tool_call_grammar.h"

namespace dsv4 {

inline constexpr int64_t kDefaultCtx = 32768;

struct EngineOptions {
  std::string model_path;
  int64_t ctx = 32768;              // tokens one timeline may hold (prompt + completion);
                                    // 0 = min(the model's training context, kDefaultCtx)
  backend::BackendKind backend = backend::BackendKind::kAuto;  // --backend
  int threads = 0;                  // 0 = all CPUs
  SimdLevel simd = SimdLevel::kScalar;  // the app passes the resolved --simd level
  bool amx = false;                 // AMX tiles for matrix x matrix (the resolved --amx; needs simd avx512)
  bool timing = false;              // per-phase times in GenerationStats
  int64_t prefill_chunk = 512;      // tokens per prefill forward (speed only; bits never change)
  int64_t checkpoint_interval = 2048;
  int64_t max_checkpoints = 16;     // rewind points kept (≈ 20 MB each for the real Flash)
};

struct ModelInfo {
  std::string path;
  std::string name;         // file name without .gguf: the id /v1/models reports
  std::string description;  // "DeepSeek V4 Flash (…)" or the shape
  bool is_ds4_flash = false;
  int64_t n_layer = 0, n_embd = 0, n_vocab = 0, n_expert = 0, n_expert_used = 0;
  int64_t n_ctx_train = 0;  // from metadata
  int64_t ctx = 0;          // the session's context
  int64_t n_params = 0;
  uint64_t file_bytes = 0;
  int64_t session_bytes = 0;         // memory reserved for the context
  double session_bytes_per_token = 0;
  int32_t bos_id = -1, eos_id = -1;
};

struct GenerateRequest {
  std::vector<int32_t> prompt;       // non-empty; prompt + max_tokens <= ctx
  int64_t max_tokens = 1;            // >= 1
  sampling::SamplerConfig sampler;
  std::vector<std::string> stop;     // stop strings (never split a UTF-8 sequence; held back while partial)
  bool chat = true;                  // parse as DS4 chat output (reasoning, DSML tool calls); false = raw text
  bool thinking = false;             // chat: the prompt ended in <think> (text before </think> is reasoning)
  int32_t top_logprobs = -1;         // -1: no logprobs; 0..20: the chosen token's logprob and that many top ones
  // chat: tool_choice as a decoding constraint (tokenizer/tool_call_grammar.h): none bans opening
  // a DSML block, required/function force one block calling an allowed tool; auto (the default)
  // changes nothing. Tokens that would leave the grammar get -inf before sampling.
  tokenizer::ToolChoiceSpec tool_choice;
  // Replay (debugging and tests: `dsv4 serve --replay`): the first ids emitted regardless of the
  // logits — the forward pass, text pipeline, parser and stops run exactly as for sampled ids.
  // An EOS id in the list ends the turn there.
  std::vector<int32_t> forced_output;
};

struct GeneratedToken {
  int32_t id = -1;
  float logprob = 0;  // when asked
  std::vector<sampling::TokenLogprob> top;
};

// What one step released. Text held back (a partial stop string or DSML tag) comes in a later delta.
// Special tokens the model generates are never released as text, except the markup the output
// parser reads (chat: `</think>` while reasoning, `｜DSML｜`; raw: `<think>`, `</think>`,
// `｜DSML｜`): an unused placeholder or a role marker adds nothing (it still counts as a token).
struct GenerationDelta {
  std::string text;                          // raw released text (both modes)
  std::vector<tokenizer::DsmlEvent> events;  // chat mode: reasoning/content/tool-call events
  std::vector<GeneratedToken> tokens;        // tokens sampled in this step
};

enum class FinishReason {
  kEos,         // the model ended its turn
  kStopString,  // a stop string matched (it is not part of the text)
  kLength,      // max_tokens reached
  kToolCalls,   // a DSML tool-call block closed (decoding stops there, like ds4)
  kCancelled,   // the observer asked to stop (client gone)
};
const char* finish_reason_name(FinishReason r);

struct PhaseMillis {
  double hc = 0, attention = 0, compressor = 0, moe = 0, head = 0, embed = 0, sampling = 0;
};

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;      // prompt tokens whose state came from the previous timeline
  int64_t completion_tokens = 0;  // sampled tokens (the EOS that ended a turn is not counted)
  int64_t reasoning_tokens = 0;   // completion tokens up to and including </think>
  double prefill_ms = 0;
  double decode_ms = 0;           // from the first sampled token to the last
  PhaseMillis phases;             // when EngineOptions::timing
};

struct GenerationResult {
  FinishReason finish = FinishReason::kEos;
  std::string stop_string;        // kStopString: which one
  GenerationStats stats;
  Status output_error;            // chat output that cannot be parsed (EOS inside a tool call)
  std::vector<std::string> warnings;  // DSML recoveries applied
};

class GenerationObserver {
 public:
  virtual ~GenerationObserver() = default;
  // Between prefill chunks (done < total); return false to cancel.
  virtual bool on_prefill(int64_t done, int64_t total) {
    (void)done;
    (void)total;
    return true;
  }
  // After each sampled token (and once more for the final flush); return false to cancel.
  virtual bool on_delta(const GenerationDelta& delta) = 0;
};

struct CacheStats {
  int64_t live_tokens = 0;
  int64_t checkpoints = 0;
  int64_t checkpoint_bytes = 0;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> load(const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelInfo& info() const;
  const EngineOptions& options() const;

  // --- thread-safe ---
  Result<tokenizer::RenderedPrompt> render_chat(const tokenizer::ChatRequest& request) const;
  std::vector<int32_t> tokenize(std::string_view text, bool parse_special) const;
  // A rendered chat prompt: request text never becomes special tokens (Tokenizer::encode_chat).
  std::vector<int32_t> tokenize_chat(const tokenizer::RenderedPrompt& prompt) const;
  std::string_view token_bytes(int32_t id) const;  // raw bytes ("" for an id out of range)
  std::string token_text(int32_t id) const;        // valid UTF-8 (ill-formed bytes → U+FFFD)
  Result<std::string> detokenize(const std::vector<int32_t>& ids) const;

  // --- the worker thread only ---
  Result<GenerationResult> generate(const GenerateRequest& request, GenerationObserver& observer);
  void reset();  // forget the timeline and every checkpoint
  CacheStats cache_stats() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4
