// apps/dsv4/serve_common.cpp — engine loading for serve and chat.
#include "dsv4/serve_common.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "base/log.h"
#include "dsv4/common.h"

#ifndef DSV4_DEFAULT_MODEL
#define DSV4_DEFAULT_MODEL ""
#endif

namespace dsv4::app {

std::string default_model_path() { return DSV4_DEFAULT_MODEL; }

Result<std::unique_ptr<Engine>> load_engine(const EngineLoadArgs& a, const char* cmd) {
  EngineOptions o;
  o.model_path = a.model.empty() ? default_model_path() : a.model;
  if (o.model_path.empty() || !std::filesystem::exists(o.model_path)) {
    if (a.model.empty())
      return not_found("no -m MODEL given and the default model '" + o.model_path +
                       "' was not built (run scripts/setup.sh, then cmake --build build)");
    return not_found(o.model_path + ": no such file");
  }
  DSV4_ASSIGN_OR_RETURN(const backend::BackendOptions bo, backend_options_from_flags());
  o.backend = bo.kind;
  o.threads = bo.threads;
  o.simd = bo.simd;
  o.amx = bo.amx;
  o.timing = a.timing;
  o.prefill_chunk = a.prefill_chunk;
  o.checkpoint_interval = a.checkpoint_interval;
  o.max_checkpoints = a.max_checkpoints;
  o.ctx = a.ctx;  // 0: the engine picks min(the model's training context, 32768)
  const bool tty = isatty(STDERR_FILENO) != 0;
  if (tty) std::fprintf(stderr, "dsv4 %s: loading %s ...\r", cmd, o.model_path.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  auto engine = Engine::load(o);
  if (!engine.ok()) return engine.status();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ModelInfo& mi = (*engine)->info();
  if (tty) std::fprintf(stderr, "\033[K");
  log_info("loaded %s: %s, %.2f B parameters, %.2f GiB, ctx %lld (%.1f MiB session state), %.1f s%s",
           mi.path.c_str(), mi.description.c_str(), static_cast<double>(mi.n_params) / 1e9,
           static_cast<double>(mi.file_bytes) / (1 << 30), static_cast<long long>(mi.ctx),
           static_cast<double>(mi.session_bytes) / (1 << 20), s,
           o.model_path == default_model_path() ? " — the built-in default model: RANDOM weights, output is noise" : "");
  return std::move(*engine);
}

}  // namespace dsv4::app
