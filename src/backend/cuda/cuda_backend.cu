// backend/cuda/cuda_backend.cu — CudaBackend's non-op parts: creation (driver, device and compute
// capability checks), memory (allocate / release / grow-only scratch), weights (upload of the GGUF
// mapping; small parameters dequantized on the host with the shared numerics), host transfers and the
// step's sticky error. The ops are in the op-family files (norm_rope_hc.cu, attention.cu, matmul.cu,
// moe.cu).
//
// One stream (non-blocking: no implicit ordering with the legacy default stream), so everything this
// backend does to device memory goes through it: allocate() zero-fills with cudaMemsetAsync on it,
// uploads and weight copies are cudaMemcpyAsync on it, and release() / grow() drain it before
// cudaFree. download() is the only call that waits for the device on purpose (counted in syncs()).
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.cuh"
#include "numerics/half.h"
#include "numerics/quant_ref.h"
#include "numerics/quant_ref_iq2_xxs.h"
#include "numerics/quant_ref_k.h"
#include "numerics/quant_ref_mxfp4.h"

namespace dsv4::cuda {

using backend::Tensor;

namespace {

constexpr int kMinMajor = 9;  // sm_90 (Hopper) and newer

std::string mib(int64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

std::string cuda_error_text(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ")";
}

// "F bytes free of T" for messages (or why it is unknown).
std::string free_text() {
  size_t free_b = 0, total_b = 0;
  const cudaError_t err = cudaMemGetInfo(&free_b, &total_b);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return "device free memory unknown: " + cuda_error_text(err);
  }
  return std::to_string(free_b) + " bytes free of " + std::to_string(total_b) + " (" +
         mib(static_cast<int64_t>(free_b)) + " of " + mib(static_cast<int64_t>(total_b)) + ")";
}

// Why there is no usable device, or ok with the device count.
Result<int> device_count() {
  int driver = 0;
  (void)cudaDriverGetVersion(&driver);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    const std::string built = std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
    if (driver == 0)
      return unsupported("cuda backend: no NVIDIA driver found (libcuda.so.1 could not be loaded): " +
                         cuda_error_text(err));
    if (err == cudaErrorInsufficientDriver || driver < CUDART_VERSION)
      return unsupported("cuda backend: the NVIDIA driver supports CUDA " + std::to_string(driver / 1000) + "." +
                         std::to_string(driver % 1000 / 10) + " but this dsv4 was built with CUDA " + built +
                         "; update the driver (" + cuda_error_text(err) + ")");
    if (err == cudaErrorNoDevice)
      return unsupported("cuda backend: no CUDA device visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
    return unsupported("cuda backend: cudaGetDeviceCount failed: " + cuda_error_text(err));
  }
  if (count <= 0) return unsupported("cuda backend: no CUDA device visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
  return count;
}

// A kernel that does nothing: init() asks for its attributes to learn whether this binary has code
// the device can run (sm_90 SASS or compute_90 PTX the driver can JIT).
__global__ void probe_kernel() { wait_for_producer(); }

bool weight_type(TensorType t) {
  switch (t) {
    case TensorType::kF32:
    case TensorType::kF16:
    case TensorType::kBF16:
    case TensorType::kQ8_0:
    case TensorType::kQ2_K:
    case TensorType::kQ4_K:
    case TensorType::kIQ2_XXS:
    case TensorType::kMXFP4:
    case TensorType::kQ4_0_ROCMFP4:
    case TensorType::kQ4_0_ROCMFP4_FAST:
    case TensorType::kQ6_0_ROCMFPX:
    case TensorType::kQ8_0_ROCMFPX:
    case TensorType::kQ3_0_ROCMFPX:
    case TensorType::kQ2_0_ROCMFP2:
      return true;
    default:
      return false;
  }
}

std::string dims(const Tensor& t) {
  std::string s = "[";
  for (int i = 0; i < std::max(t.n_dims, 1); ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
  return s + "]";
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// A row of n elements of quant blocks dequantized with the shared scalar reference (each block copied
// out first: a mapping's blocks need not be aligned as their struct).
template <typename Block, int kElems, typename F>
void dequantize_row(const uint8_t* src, float* out, int64_t n, F dequantize_block) {
  for (int64_t b = 0; b < n / kElems; ++b) {
    Block blk;
    std::memcpy(&blk, src + b * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
    dequantize_block(&blk, out + b * kElems);
  }
}

}  // namespace

// --- creation -------------------------------------------------------------------------------------

CudaBackend::CudaBackend(const CudaBackendOptions& options)
    : device_(options.device), graphs_(options.graphs), forms_(options.forms) {
  steps_.set_programmatic(options.pdl);
}

CudaBackend::~CudaBackend() {
  if (stream_ == nullptr) return;
  (void)cudaSetDevice(device_);
  flush_launches();
  staging_.release();
  (void)cudaStreamSynchronize(stream_);
  for_each_scratch([](DeviceScratch& s) {
    if (s.data != nullptr) (void)cudaFree(s.data);
    s = {};
  });
  (void)cudaStreamDestroy(stream_);
  (void)cudaGetLastError();
}

Status CudaBackend::init() {
  DSV4_ASSIGN_OR_RETURN(const int count, device_count());
  if (device_ < 0 || device_ >= count)
    return invalid_argument("cuda backend: device " + std::to_string(device_) + " does not exist (" +
                            std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") + " visible)");
  cudaError_t err = cudaSetDevice(device_);
  if (err != cudaSuccess) return unsupported("cuda backend: cudaSetDevice(" + std::to_string(device_) + "): " + cuda_error_text(err));
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, device_);
  if (err != cudaSuccess) return unsupported("cuda backend: cudaGetDeviceProperties: " + cuda_error_text(err));
  device_name_ = prop.name;
  cc_major_ = prop.major;
  cc_minor_ = prop.minor;
  sm_count_ = prop.multiProcessorCount;
  total_bytes_ = static_cast<int64_t>(prop.totalGlobalMem);
  if (prop.major < kMinMajor)
    return unsupported("cuda backend: device " + std::to_string(device_) + " (" + device_name_ + ") has compute capability " +
                       std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                       "; dsv4's CUDA kernels need 9.0 (Hopper, sm_90) or newer; use --backend cpu");
  cudaFuncAttributes attr{};
  err = cudaFuncGetAttributes(&attr, probe_kernel);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return unsupported("cuda backend: this dsv4 has no kernel code for " + device_name_ + " (compute capability " +
                       std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                       "; built for CMAKE_CUDA_ARCHITECTURES): " + cuda_error_text(err));
  }
  err = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    stream_ = nullptr;
    (void)cudaGetLastError();
    return internal_error("cuda backend: cudaStreamCreate: " + cuda_error_text(err));
  }
  return ok_status();
}

Result<std::unique_ptr<backend::Backend>> create_cuda_backend(const CudaBackendOptions& options) {
  auto b = std::make_unique<CudaBackend>(options);
  DSV4_RETURN_IF_ERROR(b->init());
  return std::unique_ptr<backend::Backend>(std::move(b));
}

bool cuda_device_available() {
  auto count = device_count();
  if (!count.ok()) return false;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return prop.major >= kMinMajor;
}

std::string CudaBackend::describe() const {
  std::string s = "cuda: device " + std::to_string(device_) + " " + device_name_ + " (sm_" + std::to_string(cc_major_) +
                  std::to_string(cc_minor_) + ", " + std::to_string(sm_count_) + " SMs), " + mib(total_bytes_);
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
    s += ", " + mib(static_cast<int64_t>(free_b)) + " free";
  } else {
    (void)cudaGetLastError();
  }
  if (weight_bytes_ > 0) s += ", weights " + mib(weight_bytes_);
  s += graphs_ ? (steps_.programmatic() ? ", a CUDA graph per step (programmatic dependent launch)" : ", a CUDA graph per step")
               : ", kernels launched one by one";
  return s;
}

bool CudaBackend::supports(backend::Op op, TensorType type) const {
  switch (op) {
    case backend::Op::kEmbed:
      return type == TensorType::kI32 || weight_type(type);
    case backend::Op::kMatmul:
    case backend::Op::kMoe:
      return weight_type(type);
    case backend::Op::kRoute:  // logits and bias F32; the hash table I32
      return type == TensorType::kF32 || type == TensorType::kI32;
    default:
      return type == TensorType::kF32;
  }
}

// --- memory ---------------------------------------------------------------------------------------

Result<void*> CudaBackend::device_alloc(int64_t bytes, const char* what) {
  if (bytes < 0) return invalid_argument(std::string("cuda backend: ") + what + " of " + std::to_string(bytes) + " bytes");
  const int64_t size = std::max<int64_t>(256, round_up(bytes, 256));
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, static_cast<size_t>(size));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // out of memory is not sticky: clear it so the next step does not see it
    const std::string msg = std::string("cuda backend: cannot allocate ") + std::to_string(bytes) + " bytes for " +
                            what + " on " + device_name_ + ": " + cuda_error_text(err) + "; " + free_text();
    return err == cudaErrorMemoryAllocation ? resource_exhausted(msg) : internal_error(msg);
  }
  in_use_bytes_ += size;
  peak_bytes_ = std::max(peak_bytes_, in_use_bytes_);
  return p;
}

void CudaBackend::device_free(void* p, int64_t bytes) {
  check(cudaFree(p), "cudaFree");
  in_use_bytes_ -= std::max<int64_t>(256, round_up(bytes, 256));
}

Result<backend::Buffer> CudaBackend::allocate(int64_t bytes) {
  DSV4_ASSIGN_OR_RETURN(void* p, device_alloc(bytes, "a buffer"));
  flush_launches();
  const cudaError_t err = cudaMemsetAsync(p, 0, static_cast<size_t>(std::max<int64_t>(256, round_up(bytes, 256))), stream_);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    device_free(p, bytes);
    return internal_error("cuda backend: zero-filling " + std::to_string(bytes) + " bytes: " + cuda_error_text(err));
  }
  return backend::Buffer(this, p, bytes);
}

void CudaBackend::release(void* data, int64_t bytes) {
  // Ops enqueued earlier may still read or write it.
  flush_launches();
  check(cudaStreamSynchronize(stream_), "stream synchronize before cudaFree");
  device_free(data, bytes);
}

void* CudaBackend::grow(DeviceScratch& s, int64_t bytes) {
  if (bytes <= s.bytes) return s.data;
  if (s.data != nullptr) {
    // Launches collected so far use the old allocation: run them before it goes.
    flush_launches();
    check(cudaStreamSynchronize(stream_), "stream synchronize before growing scratch");
    device_free(s.data, s.bytes);
    s = {};
  }
  // Whole MiB above 1 MiB, so that a few growing calls settle quickly.
  const int64_t size = bytes > (1 << 20) ? round_up(bytes, 1 << 20) : round_up(bytes, 256);
  auto p = device_alloc(size, "scratch");
  if (!p.ok()) {
    fail(p.status());
    return nullptr;
  }
  s.data = *p;
  s.bytes = size;
  return s.data;
}

Status CudaBackend::reserve(const backend::StepBounds& b) {
  if (b.tokens < 0 || b.heads < 0 || b.keys < 0 || b.index_entries < 0) return invalid_argument("reserve: negative bounds");
  // Only recorded: each op family sizes its own scratch from bounds() on first use (it alone knows
  // its layout), so memory is taken only for ops that need it.
  bounds_.tokens = std::max(bounds_.tokens, b.tokens);
  bounds_.heads = std::max(bounds_.heads, b.heads);
  bounds_.keys = std::max(bounds_.keys, b.keys);
  bounds_.index_entries = std::max(bounds_.index_entries, b.index_entries);
  return ok_status();
}

// --- weights --------------------------------------------------------------------------------------

Result<Tensor> CudaBackend::load_weight(const Tensor& host, std::vector<backend::Buffer>& keep) {
  if (host.type != TensorType::kI32 && !weight_type(host.type))
    return unsupported("cuda backend: no CUDA kernels for tensor type " + std::string(tensor_type_name(host.type)));
  if (!host.valid()) return invalid_argument("cuda backend: load_weight of a tensor without data");
  if (host.row_bytes() < 0 || !host.contiguous_rows())
    return invalid_argument("cuda backend: load_weight of a tensor " + dims(host) + " without contiguous rows");
  const int64_t bytes = host.bytes();
  auto p = device_alloc(bytes, "a weight");
  if (!p.ok())
    return Status(p.status().code(), p.status().message() + "; " + std::to_string(weight_bytes_) +
                                         " bytes of weights already loaded: the model does not fit on this device");
  backend::Buffer buf(this, *p, bytes);
  flush_launches();
  // Through pinned staging buffers (host copy, page faults and DMA overlap); without pinned memory the
  // driver stages the pageable mapping itself, slower.
  const char* what = "";
  cudaError_t err = staging_.copy(buf.data(), host.data, bytes, stream_, &what);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    what = "cudaMemcpyAsync (weight upload from pageable memory)";
    err = cudaMemcpyAsync(buf.data(), host.data, static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                          stream_);
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return internal_error("cuda backend: copying a weight of " + std::to_string(bytes) + " bytes: " + what + ": " +
                          cuda_error_text(err));
  }
  Tensor t = host;
  t.data = buf.data();
  weight_bytes_ += bytes;
  keep.push_back(std::move(buf));
  return t;
}

Result<Tensor> CudaBackend::load_weight_f32(const Tensor& host, std::vector<backend::Buffer>& keep) {
  if (!host.valid()) return invalid_argument("cuda backend: load_weight_f32 of a tensor without data");
  const int64_t rows = host.rows(), n = host.ne[0], row_bytes = host.row_bytes();
  if (row_bytes < 0) return invalid_argument("cuda backend: load_weight_f32 of a tensor " + dims(host) + " with partial blocks");
  std::vector<float> f(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = static_cast<const uint8_t*>(host.data) + r * row_bytes;
    float* out = f.data() + r * n;
    switch (host.type) {
      case TensorType::kF32:
        std::memcpy(out, src, static_cast<size_t>(n) * sizeof(float));
        break;
      case TensorType::kI32:
        for (int64_t i = 0; i < n; ++i) {
          int32_t v;
          std::memcpy(&v, src + 4 * i, 4);
          out[i] = static_cast<float>(v);
        }
        break;
      case TensorType::kF16:
      case TensorType::kBF16:
        for (int64_t i = 0; i < n; ++i) {
          uint16_t h;
          std::memcpy(&h, src + 2 * i, 2);
          out[i] = host.type == TensorType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
        break;
      case TensorType::kQ8_0:
        dequantize_row<BlockQ8_0, 32>(src, out, n, [](const BlockQ8_0* b, float* o) { qref::dequantize_block_q8_0(b, o); });
        break;
      case TensorType::kQ2_K:
        dequantize_row<BlockQ2_K, 256>(src, out, n, [](const BlockQ2_K* b, float* o) { qref::dequantize_block_q2_k(b, o); });
        break;
      case TensorType::kQ4_K:
        dequantize_row<BlockQ4_K, 256>(src, out, n, [](const BlockQ4_K* b, float* o) { qref::dequantize_block_q4_k(b, o); });
        break;
      case TensorType::kIQ2_XXS:
        dequantize_row<BlockIq2Xxs, 256>(src, out, n, [](const BlockIq2Xxs* b, float* o) {
          qref::dequantize_block_iq2_xxs(b, o, qref::kIq2xxsHostTables);
        });
        break;
      case TensorType::kMXFP4:
        dequantize_row<BlockMxfp4, 32>(src, out, n, [](const BlockMxfp4* b, float* o) { qref::dequantize_block_mxfp4(b, o); });
        break;
      default:
        return unsupported("cuda backend: load_weight_f32 of tensor type " + std::string(tensor_type_name(host.type)));
    }
  }
  const int64_t bytes = rows * n * static_cast<int64_t>(sizeof(float));
  DSV4_ASSIGN_OR_RETURN(backend::Buffer buf, allocate(bytes));
  if (bytes > 0) {
    flush_launches();
    const cudaError_t err = cudaMemcpyAsync(buf.data(), f.data(), static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return internal_error("cuda backend: copying a parameter of " + std::to_string(bytes) + " bytes: " + cuda_error_text(err));
    }
  }
  Tensor t = backend::make_nd(TensorType::kF32, buf.data(), std::max(host.n_dims, 1), host.ne);
  weight_bytes_ += bytes;
  keep.push_back(std::move(buf));
  return t;
}

// --- host transfers -------------------------------------------------------------------------------

void CudaBackend::upload(const Tensor& dst, const void* src, int64_t bytes) {
  n_twins = 0;  // the bytes may be a twin's rows
  if (bytes <= 0) return;
  flush_launches();
  // From pageable memory the driver stages the bytes before returning, so src may be reused at once.
  check(cudaMemcpyAsync(dst.data, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_), "upload (cudaMemcpyAsync)");
}

Status CudaBackend::download(const Tensor& src, void* dst, int64_t bytes) {
  ++syncs_;
  flush_launches();
  if (bytes > 0) check(cudaMemcpyAsync(dst, src.data, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_), "download (cudaMemcpyAsync)");
  check(cudaStreamSynchronize(stream_), "download (stream synchronize)");
  check(cudaGetLastError(), "an earlier asynchronous operation");
  return std::exchange(error_, Status());
}

// --- steps ----------------------------------------------------------------------------------------

// An error recorded outside a step (an upload between steps) is kept: the next end_step reports it.
void CudaBackend::begin_step() { n_twins = 0; }

void CudaBackend::twins_note_write(const Tensor& y) {
  if (n_twins == 0 || y.data == nullptr) return;
  if (y.ne[2] * y.ne[3] != 1) {  // (3-D outputs: not worth an exact extent)
    n_twins = 0;
    return;
  }
  const auto* y0 = static_cast<const char*>(y.data);
  const char* y1 = y0 + (y.ne[1] > 0 ? (y.ne[1] - 1) * y.nb[1] : 0) + y.ne[0] * static_cast<int64_t>(sizeof(float));
  for (int i = 0; i < n_twins; ++i) {
    const auto* x0 = static_cast<const char*>(twins[i].x);
    const char* x1 = x0 + (twins[i].rows > 0 ? (twins[i].rows - 1) * twins[i].x_nb : 0) + twins[i].n * 4;
    if (y0 < x1 && x0 < y1) {
      n_twins = 0;
      return;
    }
  }
}

Status CudaBackend::end_step() {
  flush_launches();
  staging_.release();  // a step runs: loading is over (a later load_weight stages again)
  // No synchronisation: errors of kernels still running surface at the next download.
  check(cudaGetLastError(), "a launch of this step");
  return std::exchange(error_, Status());
}

void CudaBackend::flush_launches() {
  if (steps_.empty()) return;
  const StepGraph::Error e = steps_.flush(stream_, graphs_);
  if (e.code != cudaSuccess) check(e.code, e.what);
}

backend::LaunchStats CudaBackend::launch_stats() const { return steps_.stats(); }

void CudaBackend::fail(Status status) {
  // (swap, not `error_ = status`: nvcc's front end warns about assigning a [[nodiscard]] class.)
  if (error_.ok() && !status.ok()) std::swap(error_, status);
}

void CudaBackend::check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  const std::string msg = std::string("CUDA ") + what + ": " + cuda_error_text(err);
  fail(err == cudaErrorMemoryAllocation ? resource_exhausted(msg) : internal_error(msg));
}

}  // namespace dsv4::cuda
