// backend/cuda/cuda_backend.h — the CUDA implementation of backend::Backend, as seen by host C++ (the
// registry): no CUDA header here. The implementation (cuda_backend.cuh and the *.cu op families)
// gives backend.h's bits: every kernel computes each output element in the op's documented order with
// the shared numerics (src/numerics, compiled as device code with -fmad=false), and the conformance
// suite (tests/unit/backend) checks it against the scalar references with a bound of zero bits.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "base/status.h"

namespace dsv4::cuda {

// Optional kernel forms (--cuda-disable; each gives the same bits as the general kernels it replaces).
struct CudaKernelForms {
  bool staged_loads = true;  // one-lane block types staged through shared memory in runs of 32 blocks
  bool hc_cluster = true;    // hc_pre_norm as one cluster kernel
  bool attn_decode = true;   // attention's decode forms for passes of up to 16 queries
  bool attn_wide = true;     // attention of passes of ≥ 16 queries: scores of 32 dots per warp, softmax once, outputs by 64 × 64 tiles
  bool stream_products = true;  // many-row one-row products streamed by a resident grid (with staged_loads)
  bool fused_quant = true;  // producers given MatmulConsumers quantize their output for them (no extra kernel)
  bool hc_side = true;      // hc_pre_norm's Sinkhorn as a side launch beside the chain (with hc_cluster)
  bool moe_side = true;     // decode: the shared expert as side launches beside the routed experts
  bool norm_rope_batch = true;  // norm_rope's jobs in one launch (the query heads, kv row, indexer queries)
  bool indexer_tile = true;     // indexer scores by CTA tiles of entries with the query staged once
  bool float_tiles = true;      // float-weight products of ≥ 16 activation rows by register tiles (matmul_float.cu)
  bool grouped_experts = true;  // prefill's routed IQ2_XXS / Q2_K pairs grouped by expert on the tensor cores (moe_mma.cu)
  bool mma_products = true;     // Q8_0 products of ≥ 64 activation rows on the tensor cores (matmul_mma.cu)
  bool routed_staged = true;    // routed K/IQ products with each warp's rows staged whole by cp.async
};

struct CudaBackendOptions {
  int device = 0;      // CUDA device ordinal
  bool graphs = true;  // run each step's kernels as one CUDA graph (same bits as launching them one by one)
  bool pdl = true;     // in those graphs, programmatic dependent launch between consecutive kernels (same bits)
  CudaKernelForms forms;
};

// A CUDA backend on `device`. Errors name the cause: no driver, no device, a device that is not
// sm_90-compatible, or a CUDA runtime failure.
Result<std::unique_ptr<backend::Backend>> create_cuda_backend(const CudaBackendOptions& options);

// Whether a usable CUDA device is present (for --backend auto); never fails.
bool cuda_device_available();

}  // namespace dsv4::cuda
