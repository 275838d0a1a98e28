// apps/dsv4/common.cpp
#include "dsv4/common.h"

#include <algorithm>
#include <string>

#include "base/cpu_features.h"
#include "base/flags.h"
#include "base/thread_pool.h"

namespace dsv4::app {

Result<int> threads_from_flags() {
  DSV4_ASSIGN_OR_RETURN(int64_t t, flag_int("threads"));
  if (t < 0 || t > 1024) return out_of_range("--threads: expected 0..1024, got " + std::to_string(t));
  return t == 0 ? ThreadPool::hardware_threads() : static_cast<int>(t);
}

Result<SimdLevel> simd_level_from_flags() {
  const std::string v = flag_value("simd");
  const SimdLevel detected = detected_simd_level();
  SimdLevel want;
  if (v == "auto") return detected;
  if (v == "scalar") want = SimdLevel::kScalar;
  else if (v == "avx2") want = SimdLevel::kAvx2;
  else if (v == "avx512") want = SimdLevel::kAvx512;
  else if (v == "avx512vbmi") want = SimdLevel::kAvx512Vbmi;
  else return invalid_argument("--simd: expected auto, avx512vbmi, avx512, avx2 or scalar, got '" + v + "'");
  if (static_cast<int>(want) > static_cast<int>(detected))
    return unsupported(std::string("--simd ") + v + ": this CPU supports at most " + simd_level_name(detected));
  return want;
}

Result<bool> amx_from_flags(SimdLevel level) {
  const std::string v = flag_value("amx");
  if (v == "off") return false;
  if (v != "auto") return invalid_argument("--amx: expected auto or off, got '" + v + "'");
  return has_avx512(level) && amx_int8_usable();
}

Result<backend::BackendOptions> backend_options_from_flags() {
  backend::BackendOptions o;
  DSV4_ASSIGN_OR_RETURN(o.kind, backend::parse_backend_kind(flag_value("backend")));
  DSV4_ASSIGN_OR_RETURN(o.threads, threads_from_flags());
  DSV4_ASSIGN_OR_RETURN(o.simd, simd_level_from_flags());
  DSV4_ASSIGN_OR_RETURN(o.amx, amx_from_flags(o.simd));
  const std::string graphs = flag_value("cuda-graphs");
  if (graphs != "on" && graphs != "off")
    return invalid_argument("--cuda-graphs: expected on or off, got '" + graphs + "'");
  o.cuda_graphs = graphs == "on";
  const std::string pdl = flag_value("cuda-pdl");
  if (pdl != "on" && pdl != "off") return invalid_argument("--cuda-pdl: expected on or off, got '" + pdl + "'");
  o.cuda_pdl = pdl == "on";
  const std::string disable = flag_value("cuda-disable");
  if (disable != "none") {
    size_t at = 0;
    while (at <= disable.size()) {
      const size_t comma = std::min(disable.find(',', at), disable.size());
      const std::string form = disable.substr(at, comma - at);
      if (form == "staged-loads") o.cuda_staged_loads = false;
      else if (form == "hc-cluster") o.cuda_hc_cluster = false;
      else if (form == "hc-side") o.cuda_hc_side = false;
      else if (form == "moe-side") o.cuda_moe_side = false;
      else if (form == "attn-decode") o.cuda_attn_decode = false;
      else if (form == "attn-wide") o.cuda_attn_wide = false;
      else if (form == "stream-products") o.cuda_stream_products = false;
      else if (form == "fused-quant") o.cuda_fused_quant = false;
      else if (form == "norm-rope-batch") o.cuda_norm_rope_batch = false;
      else if (form == "indexer-tile") o.cuda_indexer_tile = false;
      else if (form == "mma-products") o.cuda_mma_products = false;
      else if (form == "grouped-experts") o.cuda_grouped_experts = false;
      else if (form == "float-tiles") o.cuda_float_tiles = false;
      else if (form == "routed-staged") o.cuda_routed_staged = false;
      else
        return invalid_argument("--cuda-disable: expected none or a comma-separated list of staged-loads, "
                                "hc-cluster, hc-side, moe-side, attn-decode, attn-wide, stream-products, fused-quant, norm-rope-batch, indexer-tile, routed-staged, mma-products, grouped-experts, float-tiles; got '" + form + "'");
      at = comma + 1;
    }
  }
  const std::string verify = flag_value("verify");
  if (verify != "off" && verify != "cpu") return invalid_argument("--verify: expected off or cpu, got '" + verify + "'");
  o.verify = verify == "cpu";
  return o;
}

}  // namespace dsv4::app
