// backend/registry/registry.h — creates a Backend of the kind a run asks for (--backend auto|cpu|cuda)
// from the backends this build has. The one room that knows every backend implementation; the
// engine, apps and tools create backends here and otherwise see only backend/backend.h.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "base/cpu_features.h"

namespace dsv4::backend {

struct BackendOptions {
  BackendKind kind = BackendKind::kAuto;
  int threads = 0;                          // CPU worker threads; <= 0: every online CPU
  SimdLevel simd = detected_simd_level();   // highest SIMD level the CPU kernels may use
  bool amx = false;                         // AMX tiles for CPU matrix x matrix (where usable)
  bool cuda_graphs = true;                  // CUDA: each step's kernels as one graph (same bits)
  bool cuda_pdl = true;                     // CUDA: programmatic dependent launch inside the graphs (same bits)
  // CUDA: optional kernel forms (--cuda-disable; same bits with or without each).
  bool cuda_staged_loads = true, cuda_hc_cluster = true, cuda_attn_decode = true, cuda_stream_products = true,
       cuda_fused_quant = true, cuda_hc_side = true, cuda_norm_rope_batch = true,
       cuda_indexer_tile = true, cuda_routed_staged = true,
       cuda_mma_products = true, cuda_grouped_experts = true, cuda_float_tiles = true, cuda_attn_wide = true, cuda_moe_side = true;
  bool verify = false;                      // --verify cpu: check every op against a CPU backend
};

// kCpu: the CPU backend. kCuda: unavailable in this build (an unsupported Status that says so).
// kAuto: the best backend built and usable here (the CPU backend for now).
Result<std::unique_ptr<Backend>> create_backend(const BackendOptions& options);

// The kinds this build can create (never kAuto), in preference order.
std::vector<BackendKind> built_backends();

}  // namespace dsv4::backend
