// engine/engine.cpp — Engine: loading (backend, model, tokenizer, session), model
// info, and the thread-safe text helpers. generate() lives in generate.cpp.
#include <algorithm>
#include <filesystem>

#include "backend/registry/registry.h"
#include "engine/engine_impl.h"

namespace dsv4 {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kEos: return "eos";
    case FinishReason::kStopString: return "stop_string";
    case FinishReason::kLength: return "length";
    case FinishReason::kToolCalls: return "tool_calls";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "?";
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::load(const EngineOptions& options) {
  if (options.ctx < 0) return invalid_argument("ctx must be at least 1 (or 0 for the default), got " +
                                               std::to_string(options.ctx));
  if (options.prefill_chunk < 1) return invalid_argument("prefill chunk must be at least 1");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  backend::BackendOptions bo;
  bo.kind = options.backend;
  bo.threads = options.threads;
  bo.simd = options.simd;
  bo.amx = options.amx;
  DSV4_ASSIGN_OR_RETURN(impl->backend, backend::create_backend(bo));
  DSV4_ASSIGN_OR_RETURN(impl->model, model::Model::load(options.model_path, *impl->backend));
  auto tok = tokenizer::Tokenizer::from_gguf(impl->model->file());
  if (!tok.ok()) return tok.status().with_context(options.model_path);
  impl->tokenizer = std::move(*tok);
  DSV4_RETURN_IF_ERROR(impl->tokenizer.require_ds4_specials().with_context(options.model_path));
  const model::Ds4Shape& s = impl->model->shape();
  if (impl->tokenizer.n_tokens() > s.n_vocab)
    return invalid_argument(options.model_path + ": the tokenizer has " + std::to_string(impl->tokenizer.n_tokens()) +
                            " tokens but the model's vocabulary is " + std::to_string(s.n_vocab));
  DSV4_ASSIGN_OR_RETURN(impl->eos, impl->tokenizer.eos_id());
  DSV4_ASSIGN_OR_RETURN(impl->think_end, impl->tokenizer.require_special("</think>"));
  if (impl->options.ctx == 0)
    impl->options.ctx = s.n_ctx_train > 0 ? std::min(s.n_ctx_train, kDefaultCtx) : kDefaultCtx;
  impl->session = std::make_unique<model::Session>(*impl->model, impl->options.ctx, options.prefill_chunk);
  DSV4_RETURN_IF_ERROR(impl->session->status());
  impl->session->set_timing(options.timing);
  impl->cache = std::make_unique<engine::PrefixCache>(options.max_checkpoints);

  ModelInfo& mi = impl->info;
  mi.path = options.model_path;
  mi.name = std::filesystem::path(options.model_path).stem().string();
  mi.description = impl->model->describe();
  mi.is_ds4_flash = model::is_ds4_flash(s);
  mi.n_layer = s.n_layer;
  mi.n_embd = s.n_embd;
  mi.n_vocab = s.n_vocab;
  mi.n_expert = s.n_expert;
  mi.n_expert_used = s.n_expert_used;
  mi.n_ctx_train = s.n_ctx_train;
  mi.ctx = impl->options.ctx;
  for (const auto& t : impl->model->file().tensors()) mi.n_params += t.n_elements;
  mi.file_bytes = impl->model->file().file_size();
  mi.session_bytes = impl->session->reserved_bytes();
  mi.session_bytes_per_token = impl->session->bytes_per_token();
  auto bos = impl->tokenizer.bos_id();
  mi.bos_id = bos.ok() ? *bos : -1;
  mi.eos_id = impl->eos;
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const ModelInfo& Engine::info() const { return impl_->info; }
const EngineOptions& Engine::options() const { return impl_->options; }

Result<tokenizer::RenderedPrompt> Engine::render_chat(const tokenizer::ChatRequest& request) const {
  return tokenizer::render_chat(request);
}

std::vector<int32_t> Engine::tokenize(std::string_view text, bool parse_special) const {
  return impl_->tokenizer.encode(text, parse_special);
}

std::vector<int32_t> Engine::tokenize_chat(const tokenizer::RenderedPrompt& prompt) const {
  return impl_->tokenizer.encode_chat(prompt);
}

std::string_view Engine::token_bytes(int32_t id) const {
  if (id < 0 || id >= impl_->tokenizer.n_tokens()) return {};
  return impl_->tokenizer.token_bytes(id);
}

std::string Engine::token_text(int32_t id) const {
  const int32_t one[1] = {id};
  auto t = impl_->tokenizer.decode(std::span<const int32_t>(one, 1));
  return t.ok() ? *t : std::string();
}

Result<std::string> Engine::detokenize(const std::vector<int32_t>& ids) const { return impl_->tokenizer.decode(ids); }

void Engine::reset() {
  impl_->session->reset();
  impl_->cache->clear();
}

CacheStats Engine::cache_stats() const {
  CacheStats c;
  c.live_tokens = impl_->cache->live_tokens();
  c.checkpoints = impl_->cache->n_checkpoints();
  c.checkpoint_bytes = impl_->cache->checkpoint_bytes();
  return c;
}

}  // namespace dsv4
