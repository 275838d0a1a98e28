// backend/cuda/step_graph.cu — StepGraph: pending launches run as a cached, patched CUDA graph
// (step_graph.cuh says why and how).
#include <algorithm>

#include "backend/cuda/step_graph.cuh"

namespace dsv4::cuda {

namespace {

// FNV-1a over the kernel functions of a sequence: the cache key (equal keys are checked in full).
uint64_t sequence_key(const std::vector<KernelLaunch>& launches) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(launches.size());
  for (const KernelLaunch& k : launches) {
    mix(reinterpret_cast<uintptr_t>(k.func));
    if (k.side || k.after_side >= 0) mix((static_cast<uint64_t>(k.side) << 32) ^ static_cast<uint32_t>(k.after_side));
  }
  return h;
}

// Whether two launch lists have the same kernels and the same graph shape (side launches and joins).
bool same_shape(const std::vector<KernelLaunch>& a, const std::vector<KernelLaunch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].func != b[i].func || a[i].side != b[i].side || a[i].after_side != b[i].after_side) return false;
  return true;
}

bool same_dim(const dim3& a, const dim3& b) { return a.x == b.x && a.y == b.y && a.z == b.z; }

}  // namespace

StepGraph::~StepGraph() {
  for (auto& c : cache_) destroy(*c);
}

void StepGraph::begin_launch(const void* func, dim3 grid, dim3 block, unsigned smem, const char* name) {
  KernelLaunch k;
  k.func = func;
  k.grid = grid;
  k.block = block;
  k.smem = smem;
  k.name = name;
  k.arg_begin = static_cast<uint32_t>(offsets_.size());
  k.bytes_begin = k.bytes_end = static_cast<uint32_t>(bytes_.size());
  if (join_next_) {
    k.after_side = open_side_;
    open_side_ = -1;
    join_next_ = false;
  }
  pending_.push_back(k);
}

void StepGraph::begin_side_launch(const void* func, dim3 grid, dim3 block, unsigned smem, const char* name) {
  const int32_t previous_side = open_side_;
  // begin_launch must not consume a pending join for this side launch: it stays for the next chain
  // launch, which then waits for this side launch (and through it for the previous one).
  const bool join_pending = join_next_;
  join_next_ = false;
  begin_launch(func, grid, block, smem, name);
  join_next_ = join_pending;
  KernelLaunch& k = pending_.back();
  k.side = true;
  k.after_side = previous_side;
  open_side_ = static_cast<int32_t>(pending_.size() - 1);
}

void** StepGraph::params(const KernelLaunch& k) { return param_ptrs_.data() + k.arg_begin; }

void StepGraph::set_programmatic(bool on) {
  if (on == programmatic_) return;
  programmatic_ = on;
  for (auto& c : cache_) destroy(*c);
  cache_.clear();
}

void StepGraph::clear() {
  pending_.clear();
  bytes_.clear();
  offsets_.clear();
  param_ptrs_.clear();
  open_side_ = -1;
  join_next_ = false;
}

void StepGraph::destroy(Cached& c) {
  // An executable graph still running is freed when it completes (cudaGraphExecDestroy's contract).
  if (c.exec != nullptr) (void)cudaGraphExecDestroy(c.exec);
  if (c.graph != nullptr) (void)cudaGraphDestroy(c.graph);
  c.exec = nullptr;
  c.graph = nullptr;
}

StepGraph::Error StepGraph::flush(cudaStream_t stream, bool graphs) {
  if (pending_.empty()) return {};
  // Argument pointers: the buffer no longer grows until clear().
  param_ptrs_.resize(offsets_.size());
  for (size_t i = 0; i < offsets_.size(); ++i) param_ptrs_[i] = bytes_.data() + offsets_[i];
  // A lone kernel gains nothing from a graph.
  const Error e = graphs && pending_.size() >= 2 ? run_graph(stream) : run_eager(stream);
  clear();
  return e;
}

StepGraph::Error StepGraph::run_eager(cudaStream_t stream) {
  for (const KernelLaunch& k : pending_) {
    ++stats_.eager_launches;
    const cudaError_t err = cudaLaunchKernel(k.func, k.grid, k.block, params(k), k.smem, stream);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return {err, k.name};
    }
  }
  return {};
}

StepGraph::Cached* StepGraph::build(bool programmatic_joins) {
  auto c = std::make_unique<Cached>();
  if (cudaGraphCreate(&c->graph, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  c->nodes.resize(pending_.size());
  // The chain: a chain node depends on the chain node before it, programmatically when PDL is on (the
  // header says why that keeps the order of memory effects). A side node depends on the chain node
  // before it by a full edge (it starts once that kernel has completed); a node with after_side also
  // on that side node, programmatically when programmatic_joins (its wait_for_producer then waits for
  // both kernels, and its blocks may still be scheduled early: a full edge would cost the chain the
  // launch overlap at every join), else by a full edge.
  cudaGraphEdgeData programmatic_edge{};
  programmatic_edge.from_port = cudaGraphKernelNodePortProgrammatic;
  programmatic_edge.type = cudaGraphDependencyTypeProgrammatic;
  const cudaGraphEdgeData full_edge{};
  const cudaGraphEdgeData join_edge = programmatic_ && programmatic_joins ? programmatic_edge : full_edge;
  int64_t last_chain = -1;
  for (size_t i = 0; i < pending_.size(); ++i) {
    const KernelLaunch& k = pending_[i];
    cudaKernelNodeParams p{};
    p.func = const_cast<void*>(k.func);
    p.gridDim = k.grid;
    p.blockDim = k.block;
    p.sharedMemBytes = k.smem;
    p.kernelParams = params(k);
    const cudaGraphEdgeData chain_edge = programmatic_ && !k.side ? programmatic_edge : full_edge;
    bool ok = cudaGraphAddKernelNode(&c->nodes[i], c->graph, nullptr, 0, &p) == cudaSuccess;
    if (ok && last_chain >= 0)
      ok = cudaGraphAddDependencies(c->graph, &c->nodes[static_cast<size_t>(last_chain)], &c->nodes[i], &chain_edge, 1) ==
           cudaSuccess;
    if (ok && k.after_side >= 0)
      ok = cudaGraphAddDependencies(c->graph, &c->nodes[static_cast<size_t>(k.after_side)], &c->nodes[i], &join_edge,
                                    1) == cudaSuccess;
    if (!ok) {
      (void)cudaGetLastError();
      destroy(*c);
      return nullptr;
    }
    if (!k.side) last_chain = static_cast<int64_t>(i);
  }
  if (cudaGraphInstantiate(&c->exec, c->graph, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    destroy(*c);
    return nullptr;
  }
  ++stats_.graphs_built;
  c->key = sequence_key(pending_);
  c->launches = pending_;
  c->bytes = bytes_;
  if (cache_.size() >= kCacheSize) {
    auto lru = std::min_element(cache_.begin(), cache_.end(),
                                [](const auto& a, const auto& b) { return a->last_use < b->last_use; });
    destroy(**lru);
    cache_.erase(lru);
  }
  cache_.push_back(std::move(c));
  return cache_.back().get();
}

StepGraph::Error StepGraph::run_graph(cudaStream_t stream) {
  const uint64_t key = sequence_key(pending_);
  Cached* hit = nullptr;
  for (auto& c : cache_) {
    if (c->key != key) continue;
    if (same_shape(c->launches, pending_)) {
      hit = c.get();
      break;
    }
  }
  if (hit != nullptr) {
    // Patch the nodes whose launch differs from what the executable graph holds.
    for (size_t i = 0; i < pending_.size(); ++i) {
      const KernelLaunch& k = pending_[i];
      const KernelLaunch& h = hit->launches[i];
      const uint32_t len = k.bytes_end - k.bytes_begin;
      const bool same = same_dim(k.grid, h.grid) && same_dim(k.block, h.block) && k.smem == h.smem &&
                        len == h.bytes_end - h.bytes_begin &&
                        std::memcmp(bytes_.data() + k.bytes_begin, hit->bytes.data() + h.bytes_begin, len) == 0;
      if (same) continue;
      cudaKernelNodeParams p{};
      p.func = const_cast<void*>(k.func);
      p.gridDim = k.grid;
      p.blockDim = k.block;
      p.sharedMemBytes = k.smem;
      p.kernelParams = params(k);
      const cudaError_t err = cudaGraphExecKernelNodeSetParams(hit->exec, hit->nodes[i], &p);
      if (err != cudaSuccess) {
        // The executable graph may now hold some of this step's parameters: forget it.
        (void)cudaGetLastError();
        destroy(*hit);
        cache_.erase(std::find_if(cache_.begin(), cache_.end(), [hit](const auto& c) { return c.get() == hit; }));
        return {err, k.name};
      }
      ++stats_.nodes_patched;
    }
    hit->launches = pending_;
    hit->bytes = bytes_;
  } else {
    hit = build(true);
    // (A driver that refuses a second programmatic edge into a node: the joins as full edges.)
    if (hit == nullptr) hit = build(false);
    // CUDA refused the graph (a launch configuration it rejects): launch one by one, which names the
    // kernel in the error.
    if (hit == nullptr) return run_eager(stream);
  }
  hit->last_use = ++clock_;
  ++stats_.graph_launches;
  stats_.nodes_launched += static_cast<int64_t>(pending_.size());
  const cudaError_t err = cudaGraphLaunch(hit->exec, stream);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return {err, "cudaGraphLaunch"};
  }
  return {};
}

}  // namespace dsv4::cuda
