// backend/registry/registry.cpp — the backend kinds of this build.
#include "backend/registry/registry.h"

#include "backend/cpu/cpu_backend.h"
#include "backend/registry/verify_backend.h"
#if DSV4_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace dsv4::backend {
namespace {

std::unique_ptr<Backend> make_cpu(const BackendOptions& options) {
  cpu::CpuBackendOptions cpu_options;
  cpu_options.threads = options.threads;
  cpu_options.simd = options.simd;
  cpu_options.amx = options.amx;
  return std::make_unique<cpu::CpuBackend>(cpu_options);
}

#if DSV4_HAVE_CUDA
cuda::CudaBackendOptions cuda_options(const BackendOptions& options) {
  cuda::CudaBackendOptions o;
  o.graphs = options.cuda_graphs;
  o.pdl = options.cuda_pdl;
  o.forms.staged_loads = options.cuda_staged_loads;
  o.forms.hc_cluster = options.cuda_hc_cluster;
  o.forms.attn_decode = options.cuda_attn_decode;
  o.forms.attn_wide = options.cuda_attn_wide;
  o.forms.stream_products = options.cuda_stream_products;
  o.forms.fused_quant = options.cuda_fused_quant;
  o.forms.hc_side = options.cuda_hc_side;
  o.forms.moe_side = options.cuda_moe_side;
  o.forms.norm_rope_batch = options.cuda_norm_rope_batch;
  o.forms.indexer_tile = options.cuda_indexer_tile;
  o.forms.mma_products = options.cuda_mma_products;
  o.forms.grouped_experts = options.cuda_grouped_experts;
  o.forms.float_tiles = options.cuda_float_tiles;
  o.forms.routed_staged = options.cuda_routed_staged;
  return o;
}
#endif

}  // namespace

Result<std::unique_ptr<Backend>> create_backend(const BackendOptions& options) {
  if (options.verify) {
    BackendOptions plain = options;
    plain.verify = false;
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<Backend> primary, create_backend(plain));
    return make_verifying_backend(std::move(primary), make_cpu(options));
  }
  switch (options.kind) {
    case BackendKind::kCuda:
#if DSV4_HAVE_CUDA
      return cuda::create_cuda_backend(cuda_options(options));
#else
      return unsupported(
          "--backend cuda: this dsv4 was built without the CUDA backend (configure with -DDSV4_CUDA=ON where nvcc "
          "is installed); use --backend cpu");
#endif
    case BackendKind::kAuto:
#if DSV4_HAVE_CUDA
      if (cuda::cuda_device_available()) return cuda::create_cuda_backend(cuda_options(options));
#endif
      return make_cpu(options);
    case BackendKind::kCpu:
      break;
  }
  return make_cpu(options);
}

std::vector<BackendKind> built_backends() {
#if DSV4_HAVE_CUDA
  return {BackendKind::kCpu, BackendKind::kCuda};
#else
  return {BackendKind::kCpu};
#endif
}

}  // namespace dsv4::backend
