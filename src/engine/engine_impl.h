// engine/engine_impl.h — Engine's private state (shared by engine.cpp and generate.cpp only).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "dsv4/engine.h"
#include "engine/prefix_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

struct Engine::Impl {
  EngineOptions options;
  ModelInfo info;
  std::unique_ptr<backend::Backend> backend;  // declared before the model and session it outlives
  std::unique_ptr<model::Model> model;
  tokenizer::Tokenizer tokenizer;
  std::unique_ptr<model::Session> session;
  std::unique_ptr<engine::PrefixCache> cache;
  int32_t eos = -1, think_end = -1;
  std::vector<float> logits, scratch;  // [n_vocab] the last position's logits, and the sampler's copy
  // Ids whose bytes contain '<' (filled on the first tool_choice-constrained request, on the
  // worker thread): in most grammar states only these can be refused (ToolCallGrammar::lt_only).
  std::vector<int32_t> ids_with_lt;
  bool ids_with_lt_ready = false;
};

}  // namespace dsv4
