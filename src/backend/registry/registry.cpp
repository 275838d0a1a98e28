// backend/registry/registry.cpp — the backend kinds of this build.
#include "backend/registry/registry.h"

#include "backend/cpu/cpu_backend.h"

namespace dsv4::backend {

Result<std::unique_ptr<Backend>> create_backend(const BackendOptions& options) {
  switch (options.kind) {
    case BackendKind::kCuda:
      return unsupported(
          "--backend cuda: this dsv4 was built without the CUDA backend (it is not implemented yet); use "
          "--backend cpu");
    case BackendKind::kAuto:
    case BackendKind::kCpu:
      break;
  }
  cpu::CpuBackendOptions cpu_options;
  cpu_options.threads = options.threads;
  cpu_options.simd = options.simd;
  cpu_options.amx = options.amx;
  return std::unique_ptr<Backend>(std::make_unique<cpu::CpuBackend>(cpu_options));
}

std::vector<BackendKind> built_backends() { return {BackendKind::kCpu}; }

}  // namespace dsv4::backend
