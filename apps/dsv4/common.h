// apps/dsv4/common.h — process-wide settings shared by subcommands (backend, threads, SIMD level).
#pragma once

#include "backend/registry/registry.h"
#include "base/cpu_features.h"
#include "base/status.h"

namespace dsv4::app {

// --threads / DSV4_THREADS (0 = all online CPUs).
Result<int> threads_from_flags();
// --simd / DSV4_SIMD: auto = detected; asking for more than the CPU has is an error.
Result<SimdLevel> simd_level_from_flags();
// --amx resolved for the given SIMD level: true when "auto", the level is AVX-512 and the CPU/OS allow AMX.
Result<bool> amx_from_flags(SimdLevel level);
// --backend cpu|cuda|auto with the CPU settings above: what create_backend() takes.
Result<backend::BackendOptions> backend_options_from_flags();

}  // namespace dsv4::app
