// base/flags.cpp — flag declarations and their storage.
#include "base/flags.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

namespace dsv4 {
namespace {

constexpr FlagSpec kFlags[] = {
    {"backend", "DSV4_BACKEND", "auto",
     "where the model runs: auto (a GPU when this build has one and the machine has a GPU, else the CPU), cpu or cuda "
     "(results are identical; speed differs)"},
    {"threads", "DSV4_THREADS", "0", "CPU worker threads for kernels (0 = all online CPUs)"},
    {"simd", "DSV4_SIMD", "auto",
     "highest SIMD level kernels may use: auto, avx512vbmi, avx512, avx2 or scalar (results are identical; speed "
     "differs)"},
    {"amx", "DSV4_AMX", "auto",
     "AMX int8 tiles for matrix x matrix (prefill) where the CPU and OS allow them: auto or off (results are identical; "
     "speed differs; needs --simd auto, avx512vbmi or avx512)"},
    {"cuda-graphs", "DSV4_CUDA_GRAPHS", "on",
     "cuda backend: run each step's kernels as one CUDA graph (on) or launch them one by one (off); results are "
     "identical, graphs are faster"},
    {"cuda-pdl", "DSV4_CUDA_PDL", "on",
     "cuda backend: programmatic dependent launch between the kernels of a step's graph (on: a kernel's blocks are "
     "scheduled while the one before it finishes and wait for it on the device; off: each starts after the one "
     "before it); results are identical"},
    {"cuda-disable", "DSV4_CUDA_DISABLE", "none",
     "cuda backend: optional kernel forms to leave out, comma-separated: staged-loads (Q8_0 blocks staged through shared memory), hc-cluster (HC pre and "
     "the input norm as one cluster kernel), hc-side (that kernel's Sinkhorn as a side launch beside the next kernels), moe-side (decode: the shared expert's kernels as side launches beside the routed experts'), attn-decode (attention's decode forms), attn-wide (the attention of prefill chunks of 16 or more tokens: scores of 32 dots per warp, one softmax pass, outputs by 64 heads × 64 columns per CTA), stream-products (many-row "
     "decode products streamed by a resident grid), fused-quant (norms quantize their output for the matmuls "
     "that read it), norm-rope-batch (the attention block's norms and rotations as one launch), indexer-tile (the indexer's scores by tiles of entries), routed-staged (routed expert rows staged whole by cp.async), mma-products (Q8_0 products of 64 or more activation rows on the tensor cores), grouped-experts (prefill's routed IQ2_XXS / Q2_K experts on the tensor cores, pairs grouped by expert), float-tiles (F32/F16/BF16 products of 16 or more activation rows by register tiles); none = use all. Results are "
     "identical; for timing each form"},
    {"verify", "DSV4_VERIFY", "off",
     "debugging: cpu = run every op also on a CPU backend and compare its outputs bit for bit; the first difference "
     "stops the run with the step, op, layer and element (slow: one synchronisation per op)"},
    {"log-level", "DSV4_LOG_LEVEL", "info", "log verbosity on stderr: error, warn, info, debug"},
    {"response-store", "DSV4_RESPONSE_STORE", "100",
     "serve: how many /v1/responses results are kept in memory for previous_response_id and GET /v1/responses/{id} "
     "(the oldest is dropped beyond it; 0 = none)"},
};

std::mutex& overrides_mu() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, std::string, std::less<>>& overrides() {
  static std::map<std::string, std::string, std::less<>> m;
  return m;
}
const FlagSpec* find_spec(std::string_view name) {
  for (const auto& f : kFlags)
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace

std::span<const FlagSpec> flag_specs() { return kFlags; }

std::string flag_value(std::string_view name) {
  const FlagSpec* spec = find_spec(name);
  if (spec == nullptr) return {};
  {
    std::lock_guard<std::mutex> lock(overrides_mu());
    auto it = overrides().find(name);
    if (it != overrides().end()) return it->second;
  }
  if (!spec->env_alias.empty()) {
    if (const char* env = std::getenv(std::string(spec->env_alias).c_str()); env != nullptr) return env;
  }
  return std::string(spec->default_value);
}

Status set_flag(std::string_view name, std::string value) {
  if (find_spec(name) == nullptr) return invalid_argument("unknown flag '" + std::string(name) + "'");
  std::lock_guard<std::mutex> lock(overrides_mu());
  overrides()[std::string(name)] = std::move(value);
  return ok_status();
}

Result<int64_t> flag_int(std::string_view name) {
  const std::string v = flag_value(name);
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || end == nullptr || *end != '\0' || errno != 0)
    return invalid_argument("flag '" + std::string(name) + "': expected an integer, got '" + v + "'");
  return static_cast<int64_t>(x);
}

std::string flags_markdown() {
  // Built with append(): GCC 12 gives a false -Wrestrict on chained operator+ of std::string.
  std::string s = "| flag | env | default | meaning |\n|---|---|---|---|\n";
  for (const auto& f : kFlags) {
    s.append("| `--").append(f.name).append("` | ");
    if (!f.env_alias.empty()) s.append("`").append(f.env_alias).append("`");
    s.append(" | `").append(f.default_value).append("` | ").append(f.help).append(" |\n");
  }
  return s;
}

}  // namespace dsv4
