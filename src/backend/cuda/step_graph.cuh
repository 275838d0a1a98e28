// backend/cuda/step_graph.cuh — the kernel launches of a step, collected and run as one CUDA graph.
//
// Why: launched one by one, each kernel costs ~3.3 µs of GPU-side serialization (docs/cuda.md
// "Platform"); a decode step of the full DS4 Flash is ~2,000 kernels. In a graph the gap is ~1 µs.
//
// How: every kernel of the backend is launched through CudaBackend::launch(), which appends a
// KernelLaunch (function, grid, block, shared memory, a copy of the arguments) to the pending list
// instead of launching. Anything else that touches the stream (an upload, a download, a memset, a
// free, end_step, finish) first flushes the pending list, so the device sees every operation in the
// order the ops were called, exactly as when launching directly. A flush runs the list as a linear
// graph (a chain: node i depends on node i-1, the stream's own order; side launches, begin_side_launch,
// hang off the chain and are joined where an op says):
// - the cache holds executable graphs keyed by the sequence of kernel functions (and side launches); a step with the same
//   sequence (every decode step of a session: only positions, key counts and grids change) reuses
//   one, and only the nodes whose launch differs from the last replay are patched
//   (cudaGraphExecKernelNodeSetParams: every field but the device may change);
// - a new sequence is built as a graph and instantiated once (the cache keeps the most recently used).
// The kernels and their arguments are the same as launched eagerly, so the bits are too (a test runs
// whole models both ways and compares them bitwise).
//
// Programmatic dependent launch (set_programmatic, on by default): the chain's edges are programmatic,
// so kernel i+1's blocks may be scheduled as soon as every block of kernel i has started and said so
// (griddepcontrol.launch_dependents), instead of after kernel i has drained: the launch latency between
// two kernels (~1 µs each, ~2,000 kernels per Flash decode step) overlaps the work. Every kernel calls
// wait_for_producer(), which waits (griddepcontrol.wait) until the kernel before it has completed and
// its writes are visible, before it touches anything but weights (preload.cuh: weights, never written
// by a step, may be loaded before the wait), so no kernel reads or writes activations, state or
// scratch before its predecessor is done: the order of memory effects is exactly the chain's.
// Launched outside a graph (eager, or the first node) the wait returns at once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "backend/backend.h"

namespace dsv4::cuda {

// The first statement of every kernel (see above): wait for the kernel before it in the step's graph,
// then allow the next one's blocks to be scheduled (they wait in their own first statement).
__device__ __forceinline__ void wait_for_producer() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// One recorded launch; its arguments are bytes [bytes_begin, bytes_end) of StepGraph's argument
// buffer, parameter k at offset arg_offsets[arg_begin + k].
struct KernelLaunch {
  const void* func = nullptr;
  dim3 grid, block;
  unsigned smem = 0;
  const char* name = nullptr;
  uint32_t arg_begin = 0, arg_count = 0;
  uint32_t bytes_begin = 0, bytes_end = 0;
  // A side launch (begin_side_launch) is off the chain; after_side ≥ 0: this launch also waits for the
  // side launch of that index (full completion).
  bool side = false;
  int32_t after_side = -1;
};


// The pending launches of the current step and the cache of executable graphs.
class StepGraph {
 public:
  StepGraph() = default;
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Starts a launch record; its arguments follow with add_arg, in the kernel's parameter order.
  void begin_launch(const void* func, dim3 grid, dim3 block, unsigned smem, const char* name);
  // Starts a side launch: a kernel off the chain, for work whose result is read several launches later
  // (hc_pre_norm's Sinkhorn: only the block's hc_post reads comb). It starts once the chain launch
  // before it has completed (and the previous side launch not yet joined, if any: side launches are
  // ordered among themselves), runs beside the chain's next kernels, and the chain waits for it only
  // where join_side() says. In eager runs (no graph) it runs in the stream's order like any launch.
  void begin_side_launch(const void* func, dim3 grid, dim3 block, unsigned smem, const char* name);
  // The next chain launch waits for the last side launch (and so for every earlier one) to complete; no
  // effect when none is open. Called by every op that reads what a side launch writes.
  void join_side() { join_next_ = open_side_ >= 0; }
  // Appends one argument (already converted to the parameter's type).
  template <typename T>
  void add_arg(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "kernel arguments are copied as bytes");
    size_t at = (bytes_.size() + alignof(T) - 1) / alignof(T) * alignof(T);
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &value, sizeof(T));
    offsets_.push_back(static_cast<uint32_t>(at));
    KernelLaunch& k = pending_.back();
    ++k.arg_count;
    k.bytes_end = static_cast<uint32_t>(bytes_.size());
  }
  bool empty() const { return pending_.empty(); }
  // Programmatic edges in graphs built from now on (the cache is cleared when this changes).
  void set_programmatic(bool on);
  bool programmatic() const { return programmatic_; }

  // Runs the pending launches on `stream` (as a graph when `graphs`, else one by one) and clears
  // them. On a CUDA error: its code and the operation ("cudaGraphLaunch", a kernel's name).
  struct Error {
    cudaError_t code = cudaSuccess;
    const char* what = nullptr;
  };
  Error flush(cudaStream_t stream, bool graphs);

  const backend::LaunchStats& stats() const { return stats_; }

 private:
  struct Cached {
    uint64_t key = 0;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    std::vector<cudaGraphNode_t> nodes;
    // The launches as the executable graph holds them now (to patch only what differs).
    std::vector<KernelLaunch> launches;
    std::vector<uint8_t> bytes;
    uint64_t last_use = 0;
  };
  static constexpr size_t kCacheSize = 8;

  Error run_eager(cudaStream_t stream);
  Error run_graph(cudaStream_t stream);
  // A new cached graph for the pending launches (nullptr when CUDA refused to build it).
  Cached* build(bool programmatic_joins);
  static void destroy(Cached& c);
  void clear();
  // The kernelParams array of pending launch i (pointers into bytes_).
  void** params(const KernelLaunch& k);

  std::vector<KernelLaunch> pending_;
  std::vector<uint8_t> bytes_;
  std::vector<uint32_t> offsets_;
  std::vector<void*> param_ptrs_;
  std::vector<std::unique_ptr<Cached>> cache_;
  uint64_t clock_ = 0;
  int32_t open_side_ = -1;  // the last side launch not yet joined
  bool join_next_ = false;
  bool programmatic_ = true;
  backend::LaunchStats stats_;
};

}  // namespace dsv4::cuda
