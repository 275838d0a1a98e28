// backend/cuda/matmul.cu — CudaBackend::embed, matmul, matmul_batch, and the shared product machinery
// of matmul.cuh (activation quantization, weight × activation products; moe.cu uses them too).
//
// Decomposition:
//   act quant: one warp per activation block (BlockQ8_0Act per 32, BlockQ8_K per 256), the type's
//              activation quantizer split over lanes; F32/F16/BF16 read the F32 rows in place.
//   product:   grid (⌈out/8⌉, row groups), one warp per weight row o and a tile of up to 8 activation
//              rows (1 when rows pick experts); float weights go through shared memory (16-byte loads).
//   embed:     one thread per (token, weight block) dequantizing the block into each copy.
//   decode forms (one activation row): products split over warps for few output rows, float rows held
//              whole in shared memory, routed K/IQ experts with the pair's activation in shared memory.
//
// Over 800 lines on purpose, for now: every product form is a specialisation of the same TypeOps table
// (anonymous namespace here), and moving them to their own .cu means moving that table into a header
// and re-validating every kernel on a GPU; the split (type table → matmul_types.cuh, decode forms →
// matmul_decode.cu) is due with the next GPU session, whose device minutes can re-run scripts/test-cuda.sh.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "backend/cuda/matmul.cuh"
#include "backend/cuda/quant_dots.cuh"
#include "numerics/blocks.h"
#include "numerics/hd.h"
#include "numerics/quant_ref.h"
#include "numerics/quant_ref_iq2_xxs.h"
#include "numerics/quant_ref_k.h"
#include "numerics/quant_ref_mxfp4.h"
#include "numerics/quant_ref_rocmfpx.h"

namespace dsv4::cuda {

using backend::Tensor;

namespace {

constexpr int kThreads = 128;
constexpr int64_t kMaxGridY = 65535;

__device__ inline float nan_f32() { return hd::f32_from_bits(0x7fc00000u); }

std::string dims(const Tensor& t) {
  std::string s = "[";
  for (int i = 0; i < (t.n_dims > 0 ? t.n_dims : 1); ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
  return s + "]";
}

int64_t blocks_for(int64_t items, int threads) { return (items + threads - 1) / threads; }

// --- per-type device operations -------------------------------------------------------------------
//
// TypeOps<T>: kAct (activation format), kBlock (weight elements per block), kBlockBytes,
// dot(n, w_row, act_row) = the scalar vec_dot, dequant_block(block, out) = kBlock floats.

// The dots and dequantizers are numerics/quant_ref.h's scalar references (the CPU's vec_dot[0]).
template <TensorType T>
struct TypeOps;

template <>
struct TypeOps<TensorType::kF32> {
  static constexpr ActFormat kAct = ActFormat::kF32;
  static constexpr int kBlock = 1, kBlockBytes = 4;
  static constexpr int kLanes = 0;  // element-wise fma (numerics/dot.h's order)
  static constexpr int kVec = 4;     // elements per 16-byte load
  __device__ static float load(const uint8_t* w, int64_t i) { return qref::load_f32(w, i); }
  __device__ static void unpack(const uint4& v, float* out) {
    out[0] = __uint_as_float(v.x);
    out[1] = __uint_as_float(v.y);
    out[2] = __uint_as_float(v.z);
    out[3] = __uint_as_float(v.w);
  }
  __device__ static float dot(int64_t n, const uint8_t* w, const uint8_t* act) {
    return qref::vec_dot_f32(n, w, reinterpret_cast<const float*>(act));
  }
  __device__ static void dequant_block(const uint8_t* blk, float* out) { out[0] = qref::load_f32(blk, 0); }
};
template <>
struct TypeOps<TensorType::kF16> {
  static constexpr ActFormat kAct = ActFormat::kF32;
  static constexpr int kBlock = 1, kBlockBytes = 2;
  static constexpr int kLanes = 0;
  static constexpr int kVec = 8;
  // cvt.f32.f16: IEEE's exact widening, the same number as numerics/half.h's f16_to_f32 for every
  // input (a NaN stays a NaN, the contract's rule); the bit-twiddling reference is a slow branchy
  // path on the device.
  __device__ static float from_bits(uint32_t h) { return __half2float(__ushort_as_half(static_cast<unsigned short>(h))); }
  __device__ static float load(const uint8_t* w, int64_t i) {
    return from_bits(*reinterpret_cast<const unsigned short*>(w + 2 * i));
  }
  __device__ static void unpack(const uint4& v, float* out) {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    for (int k = 0; k < 4; ++k) {
      out[2 * k] = from_bits(words[k] & 0xffffu);
      out[2 * k + 1] = from_bits(words[k] >> 16);
    }
  }
  __device__ static float dot(int64_t n, const uint8_t* w, const uint8_t* act) {
    return qref::vec_dot_f16(n, w, reinterpret_cast<const float*>(act));
  }
  __device__ static void dequant_block(const uint8_t* blk, float* out) { out[0] = qref::load_f16(blk, 0); }
};
template <>
struct TypeOps<TensorType::kBF16> {
  static constexpr ActFormat kAct = ActFormat::kF32;
  static constexpr int kBlock = 1, kBlockBytes = 2;
  static constexpr int kLanes = 0;
  static constexpr int kVec = 8;
  __device__ static float load(const uint8_t* w, int64_t i) { return qref::load_bf16(w, i); }
  __device__ static void unpack(const uint4& v, float* out) {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    for (int k = 0; k < 4; ++k) {
      out[2 * k] = __uint_as_float(words[k] << 16);
      out[2 * k + 1] = __uint_as_float(words[k] & 0xffff0000u);
    }
  }
  __device__ static float dot(int64_t n, const uint8_t* w, const uint8_t* act) {
    return qref::vec_dot_bf16(n, w, reinterpret_cast<const float*>(act));
  }
  __device__ static void dequant_block(const uint8_t* blk, float* out) { out[0] = qref::load_bf16(blk, 0); }
};
template <>
struct TypeOps<TensorType::kQ8_0> {
  static constexpr ActFormat kAct = ActFormat::kQ8_0;
  static constexpr int kBlock = 32, kBlockBytes = sizeof(BlockQ8_0);
  static constexpr int kLanes = 1;  // one lane per block
  __device__ static float block_dot(const uint8_t* w, const uint8_t* a) {
    const auto& act = *reinterpret_cast<const BlockQ8_0Act*>(a);
    return qref::q8_0_finish(*reinterpret_cast<const BlockQ8_0*>(w), act, qdot::q8_0_isum(w, act));
  }
  __device__ static float dot(int64_t n, const uint8_t* w, const uint8_t* act) {
    return qref::vec_dot_q8_0(n, reinterpret_cast<const BlockQ8_0*>(w), reinterpret_cast<const BlockQ8_0Act*>(act));
  }
  __device__ static void dequant_block(const uint8_t* blk, float* out) {
    qref::dequantize_block_q8_0(reinterpret_cast<const BlockQ8_0*>(blk), out);
  }
};
template <>
struct TypeOps<TensorType::kQ2_K> {
  static constexpr ActFormat kAct = ActFormat::kQ8_K;
  static constexpr int kBlock = 256, kBlockBytes = sizeof(BlockQ2_K);
  static constexpr int kLanes = 4;  // four lanes per super-block: sub-blocks 4s … 4s+3
  using Isum = qref::KQuantIsums;
  __device__ static Isum part(const uint8_t* w, const uint8_t* a, int s) {
    const auto& blk = *reinterpret_cast<const BlockQ2_K*>(w);
    const auto& act = *reinterpret_cast<const BlockQ8_K*>(a);
    if (reinterpret_cast<uintptr_t>(w) % 4 == 0) return qdot::q2_k_isums(blk, act, 4 * s, 4 * s + 4);
    return qref::q2_k_isums(blk, act, 4 * s, 4 * s + 4);
  }
  __device__ static Isum add(Isum x, Isum y) { return {x.sc + y.sc, x.m + y.m}; }
  __device__ static Isum shfl_xor(Isum x, int m) {
    return {__shfl_xor_sync(0xffffffffu, x.sc, m), __shfl_xor_sync(0xffffffffu, x.m, m)};
  }
  __device__ static float finish(const uint8_t* w, const uint8_t* a, Isum s) {
    return qref::q2_k_finish(*reinterpret_cast<const BlockQ2_K*>(w), *reinterpret_cast<const BlockQ8_K*>(a), s);
  }
  __device__ static float dot(int64_t n, const uint8_t* w, const uint8_t* act) {
    return qref::vec_dot_q2_k(n, reinterpret_cast<const BlockQ2_K*>(w), reinterpret_cast<const BlockQ8_K*>(act));
  }
  __device__ static void dequant_block(const uint8_t* blk, float* out) {
    qref::dequantize_block_q2_k(reinterpret_cast<const BlockQ2_K*>(blk), out);
  }
};
template <>
struct TypeOps<TensorType::kQ4_K> {
  static constexpr ActFormat kAct = ActFormat::kQ8_K;
  static constexpr int kBlock = 256, kBlockBytes = sizeof(BlockQ4_K);
  static constexpr int kLanes = 4;  // sub-blocks 2s, 2s+1
  using Isum = qref::KQuantIsums;
  __device__ static Isum part(const uint8_t* w, const uint8_t* a, int s) {
    return qref::q4_k_isums(*reinterpret_cast<const BlockQ4_K*>(w), *reinterpret_cast<const BlockQ8_K*>(a), 2 * s, 2 * s + 2);
  }
  __device__ static Isum add(Isum x, Isum y) { return {x.sc + y.sc, x.m + y.m}; }
  __device__ static Isum shfl_xor(Isum x, int m) {
    return {__shfl_xor_sync(0xffffffffu, x.sc, m), __shfl_xor_sync(0xffffffffu, x.m, m)};
  }
  __device__ static float finish(const uint8_t* w, const uint8_t* a, Isum s) {
    return qref::q4_k_finish(*reinterpret_cast<const BlockQ4_K*>(w), *reinterpret_cast<const BlockQ8_K*>(a), s);
  }
  __device__ static float dot(int64_t n, const uint8_t* w, const uint8_t* act) {
    return qref::vec_dot_q4_k(n, reinterpret_cast<const BlockQ4_K*>(w), reinterpret_cast<const BlockQ8_K*>(act));
  }
  __device__ static void dequant_block(const uint8_t* blk, float* out) {
    qref::dequantize_block_q4_k(reinterpret_cast<const BlockQ4_K*>(blk), out);
  }
};
template <>
struct TypeOps<TensorType::kMXFP4> {
  static constexpr ActFormat kAct = ActFormat::kQ8_0;
  static constexpr int kBlock = 32, kBlockBytes = sizeof(BlockMxfp4);
  static constexpr int kLanes = 1;
  __device__ static float block_dot(const uint8_t* w, const uint8_t* a) {
    return qref::dot_block_mxfp4(*reinterpret_cast<const BlockMxfp4*>(w), *reinterpret_cast<const BlockQ8_0Act*>(a));
  }
  __device__ static float dot(int64_t n, const uint8_t* w, const uint8_t* act) {
    return qref::vec_dot_mxfp4(n, reinterpret_cast<const BlockMxfp4*>(w), reinterpret_cast<const BlockQ8_0Act*>(act));
  }
  __device__ static void dequant_block(const uint8_t* blk, float* out) {
    qref::dequantize_block_mxfp4(reinterpret_cast<const BlockMxfp4*>(blk), out);
  }
};

// IQ2_XXS grid and sign tables in device global memory, statically initialised from
// numerics/iq2_xxs_grid.h's constexpr arrays (part of the module image: no runtime copy, every device).
struct Iq2xxsDeviceTables {
  uint64_t grid[256];
  uint8_t signs[128];
};
constexpr Iq2xxsDeviceTables make_iq2xxs_tables() {
  Iq2xxsDeviceTables t{};
  for (int i = 0; i < 256; ++i) t.grid[i] = qref::kIq2xxsGrid[i];
  for (int i = 0; i < 128; ++i) t.signs[i] = qref::kIq2xxsSigns[i];
  return t;
}
__device__ const Iq2xxsDeviceTables d_iq2xxs = make_iq2xxs_tables();

template <>
struct TypeOps<TensorType::kIQ2_XXS> {
  static constexpr ActFormat kAct = ActFormat::kQ8_K;
  static constexpr int kBlock = 256, kBlockBytes = sizeof(BlockIq2Xxs);
  static constexpr int kLanes = 4;  // groups 2s, 2s+1
  __device__ static qref::Iq2xxsTables tables() { return {d_iq2xxs.grid, d_iq2xxs.signs}; }
  using Isum = int32_t;
  __device__ static Isum part(const uint8_t* w, const uint8_t* a, int s) {
    return qdot::iq2_xxs_isum(*reinterpret_cast<const BlockIq2Xxs*>(w), *reinterpret_cast<const BlockQ8_K*>(a),
                              d_iq2xxs.grid, d_iq2xxs.signs, 2 * s, 2 * s + 2);
  }
  // The same with the tables at `t` (a copy in shared memory).
  static constexpr bool kHasTables = true;
  __device__ static Isum part_with(const uint8_t* w, const uint8_t* a, int s, const Iq2xxsDeviceTables& t) {
    return qdot::iq2_xxs_isum(*reinterpret_cast<const BlockIq2Xxs*>(w), *reinterpret_cast<const BlockQ8_K*>(a), t.grid,
                              t.signs, 2 * s, 2 * s + 2);
  }
  __device__ static Isum add(Isum x, Isum y) { return x + y; }
  __device__ static Isum shfl_xor(Isum x, int m) { return __shfl_xor_sync(0xffffffffu, x, m); }
  __device__ static float finish(const uint8_t* w, const uint8_t* a, Isum s) {
    return qref::iq2_xxs_finish(*reinterpret_cast<const BlockIq2Xxs*>(w), *reinterpret_cast<const BlockQ8_K*>(a), s);
  }
  __device__ static float dot(int64_t n, const uint8_t* w, const uint8_t* act) {
    return qref::vec_dot_iq2_xxs(n, reinterpret_cast<const BlockIq2Xxs*>(w), reinterpret_cast<const BlockQ8_K*>(act),
                                 tables());
  }
  __device__ static void dequant_block(const uint8_t* blk, float* out) {
    qref::dequantize_block_iq2_xxs(reinterpret_cast<const BlockIq2Xxs*>(blk), out, tables());
  }
};

// lucebox's ROCmFPx family (types 100-104, 107): 32-weight blocks with UE4M3 scales and BlockQ8_0Act
// activations (numerics/quant_ref_rocmfpx.h), one lane per block.
template <int kType>
struct RocmfpxOps {
  static constexpr ActFormat kAct = ActFormat::kQ8_0;
  static constexpr int kBlock = 32, kBlockBytes = qref::rocmfpx_block_bytes<kType>();
  static constexpr int kLanes = 1;
  __device__ static float block_dot(const uint8_t* w, const uint8_t* a) {
    return qref::dot_block_rocmfpx<kType>(w, *reinterpret_cast<const BlockQ8_0Act*>(a));
  }
  __device__ static void dequant_block(const uint8_t* blk, float* out) { qref::dequantize_block_rocmfpx<kType>(blk, out); }
};
template <TensorType T>
  requires((static_cast<int>(T) >= 100 && static_cast<int>(T) <= 104) || static_cast<int>(T) == 107)
struct TypeOps<T> : RocmfpxOps<static_cast<int>(T)> {};

// Calls f(TypeOps<T>{}) for a product type; returns false for a type without device kernels.
template <typename F>
bool dispatch_type(TensorType type, F&& f) {
  switch (type) {
    case TensorType::kF32: f(TypeOps<TensorType::kF32>{}); return true;
    case TensorType::kF16: f(TypeOps<TensorType::kF16>{}); return true;
    case TensorType::kBF16: f(TypeOps<TensorType::kBF16>{}); return true;
    case TensorType::kQ8_0: f(TypeOps<TensorType::kQ8_0>{}); return true;
    case TensorType::kQ2_K: f(TypeOps<TensorType::kQ2_K>{}); return true;
    case TensorType::kQ4_K: f(TypeOps<TensorType::kQ4_K>{}); return true;
    case TensorType::kIQ2_XXS: f(TypeOps<TensorType::kIQ2_XXS>{}); return true;
    case TensorType::kMXFP4: f(TypeOps<TensorType::kMXFP4>{}); return true;
    case TensorType::kQ4_0_ROCMFP4: f(TypeOps<TensorType::kQ4_0_ROCMFP4>{}); return true;
    case TensorType::kQ4_0_ROCMFP4_FAST: f(TypeOps<TensorType::kQ4_0_ROCMFP4_FAST>{}); return true;
    case TensorType::kQ6_0_ROCMFPX: f(TypeOps<TensorType::kQ6_0_ROCMFPX>{}); return true;
    case TensorType::kQ8_0_ROCMFPX: f(TypeOps<TensorType::kQ8_0_ROCMFPX>{}); return true;
    case TensorType::kQ3_0_ROCMFPX: f(TypeOps<TensorType::kQ3_0_ROCMFPX>{}); return true;
    case TensorType::kQ2_0_ROCMFP2: f(TypeOps<TensorType::kQ2_0_ROCMFP2>{}); return true;
    default: return false;
  }
}

// --- activation quantizers ------------------------------------------------------------------------

// ActOps<F>::kBytes: bytes of one activation block (numerics/blocks.h).
template <ActFormat F>
struct ActOps;
template <>
struct ActOps<ActFormat::kQ8_0> {
  static constexpr int kBytes = sizeof(BlockQ8_0Act);
};
template <>
struct ActOps<ActFormat::kQ8_K> {
  static constexpr int kBytes = sizeof(BlockQ8_K);
};

// One warp per activation block (numerics/quant_ref.h's quantize_act_q8_0_block and
// quantize_act_q8_k_block, which one thread per block would walk serially: a decode row of 4096 is
// then 16 threads of 256 elements each). Same bits: the block's max is an order-free
// reduction once ties carry their index (Q8_K keeps the first element of largest magnitude), the
// per-element rounding is the reference's, and bsums are exact integer sums.
__global__ void act_quant_q8_0_warp_kernel(const float* x, int64_t x_stride, int64_t rows, int64_t n, uint8_t* dst) {
  const int lane = threadIdx.x & 31;
  const int64_t per_row = n / 32;
  const int64_t gw = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  if (gw >= rows * per_row) return;
  const int64_t r = gw / per_row, b = gw % per_row;
  const float v = qref::finite_or_zero(x[r * x_stride + b * 32 + lane]);
  float amax = qref::f32_abs(v);
  for (int m = 16; m >= 1; m >>= 1) amax = qref::fmax_c(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  const float d = hd::div(amax, 127.0f);
  const float id = d != 0.0f ? hd::div(1.0f, d) : 0.0f;
  auto* out = reinterpret_cast<BlockQ8_0Act*>(dst + r * (per_row * static_cast<int64_t>(sizeof(BlockQ8_0Act))) +
                                              b * static_cast<int64_t>(sizeof(BlockQ8_0Act)));
  float q = qref::round_half_away(v * id);
  q = qref::fmin_c(127.0f, qref::fmax_c(-127.0f, q));
  out->qs[lane] = static_cast<int8_t>(q);
  if (lane == 0) out->d = d;
}

__global__ void act_quant_q8_k_warp_kernel(const float* x, int64_t x_stride, int64_t rows, int64_t n, uint8_t* dst) {
  const int lane = threadIdx.x & 31;
  const int64_t per_row = n / 256;
  const int64_t gw = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  if (gw >= rows * per_row) return;
  const int64_t r = gw / per_row, b = gw % per_row;
  const float* xb = x + r * x_stride + b * 256 + lane * 8;
  float v[8];
  float amax = 0.0f, max = 0.0f;
  int at = 256;
  for (int k = 0; k < 8; ++k) {
    v[k] = qref::finite_or_zero(xb[k]);
    const float ax = qref::f32_abs(v[k]);
    if (ax > amax) {
      amax = ax;
      max = v[k];
      at = lane * 8 + k;
    }
  }
  for (int m = 16; m >= 1; m >>= 1) {
    const float o_amax = __shfl_xor_sync(0xffffffffu, amax, m), o_max = __shfl_xor_sync(0xffffffffu, max, m);
    const int o_at = __shfl_xor_sync(0xffffffffu, at, m);
    if (o_amax > amax || (o_amax == amax && o_at < at)) {
      amax = o_amax;
      max = o_max;
      at = o_at;
    }
  }
  auto* out = reinterpret_cast<BlockQ8_K*>(dst + r * (per_row * static_cast<int64_t>(sizeof(BlockQ8_K))) +
                                           b * static_cast<int64_t>(sizeof(BlockQ8_K)));
  if (amax == 0.0f) {
    for (int k = 0; k < 8; ++k) out->qs[lane * 8 + k] = 0;
    if (lane < 16) out->bsums[lane] = 0;
    if (lane == 0) out->d = 0.0f;
    return;
  }
  const float iscale = hd::div(-127.0f, max);
  int sum = 0;
  for (int k = 0; k < 8; ++k) {
    float q = static_cast<float>(hd::round_even(static_cast<double>(iscale * v[k])));
    q = qref::fmin_c(127.0f, qref::fmax_c(-128.0f, q));
    out->qs[lane * 8 + k] = static_cast<int8_t>(q);
    sum += static_cast<int>(static_cast<int8_t>(q));
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // lanes 2k, 2k+1 hold sub-block k
  if ((lane & 1) == 0) out->bsums[lane / 2] = static_cast<int16_t>(sum);
  if (lane == 0) out->d = hd::div(1.0f, iscale);
}

// --- products ----------------------------------------------------------------------------------------

// One warp per weight row o and a tile of up to kTile activation rows (kTile = 1 when rows pick
// experts: each row may use another matrix). Lane l holds partial[l] of numerics/accumulate.h for
// every row of the tile and folds into it, in ascending order, exactly the items the scalar reference
// puts there: float weights the fma of elements l, l+32, …; block types the values v_b of blocks
// b ≡ l (mod 32). A block's v_b is computed by one lane (kLanes = 1) or by kLanes lanes that split its
// exact integer sums and combine them with xor-shuffles (order-free integers) before the one float
// finish; v_b is then shuffled to lane b mod 32. The warp's shuffle-down 16…1 is Partials32::reduce.
constexpr int kProductWarps = 8;   // output rows per CTA
constexpr int kProductTile = 8;    // activation rows per warp (dense products)

template <typename Ops, int kTile>
__device__ void product_rows(const ProductArgs& a, const uint8_t* w, float* y, int64_t r0, int nt, int64_t o, int lane) {
  float p[kTile];
  for (int t = 0; t < kTile; ++t) p[t] = 0.0f;
  const uint8_t* act[kTile];
  const int64_t group = a.act_group_rows > 0 ? (o / a.act_group_rows) * a.act_group_bytes : 0;
  for (int t = 0; t < kTile; ++t)
    act[t] = static_cast<const uint8_t*>(a.act) + group + ((r0 + (t < nt ? t : 0)) / a.act_div) * a.act_stride;
  if constexpr (Ops::kLanes == 1) {
    constexpr int64_t kActBytes = ActOps<Ops::kAct>::kBytes;
    const int64_t nb = a.in / Ops::kBlock;
#pragma unroll 4
    for (int64_t b = lane; b < nb; b += 32)
      for (int t = 0; t < kTile; ++t)
        if (t < nt) p[t] = p[t] + Ops::block_dot(w + b * Ops::kBlockBytes, act[t] + b * kActBytes);
  } else {
    constexpr int kL = Ops::kLanes, kPerChunk = 32 / kL;
    constexpr int64_t kActBytes = ActOps<Ops::kAct>::kBytes;
    const int64_t nb = a.in / Ops::kBlock;
    const int sub = lane % kL;
    for (int64_t b0 = 0; b0 < nb; b0 += kPerChunk) {
      const int64_t b = b0 + lane / kL;
      const int rel = lane - static_cast<int>(b0 % 32);  // this lane's partial gets block b0 + rel
      const bool mine = rel >= 0 && rel < kPerChunk && b0 + rel < nb;
      for (int t = 0; t < kTile; ++t) {
        if (t >= nt) break;  // nt is the same for the whole warp
        typename Ops::Isum s{};
        if (b < nb) s = Ops::part(w + b * Ops::kBlockBytes, act[t] + b * kActBytes, sub);
        for (int m = 1; m < kL; m <<= 1) s = Ops::add(s, Ops::shfl_xor(s, m));
        const float v = b < nb ? Ops::finish(w + b * Ops::kBlockBytes, act[t] + b * kActBytes, s) : 0.0f;
        const float vb = __shfl_sync(0xffffffffu, v, mine ? rel * kL : 0);
        if (mine) p[t] = p[t] + vb;
      }
    }
  }
  for (int t = 0; t < kTile; ++t) {
    if (t >= nt) break;
    float v = p[t];
    for (int s = 16; s >= 1; s >>= 1) v = v + __shfl_down_sync(0xffffffffu, v, s);
    if (lane == 0) y[(r0 + t) * a.y_stride + o] = v;
  }
}

// Float weights (kLanes == 0): the CTA stages kStage columns of its activation rows in shared memory
// and each warp its weight row's kStage elements (all loads issued before any fma), then lane l runs
// its fma chain over elements l, l+32, … of the chunk: the order of numerics/dot.h, fed at bandwidth
// rather than one memory latency per element.
constexpr int kStage = 512;

template <typename Ops, int kTile>
__device__ void product_float_rows(const ProductArgs& a, int64_t o, int warp, int lane) {
  __shared__ float xs[kTile][kStage];
  __shared__ float ws[kProductWarps][kStage];
  for (int64_t r0 = blockIdx.y * static_cast<int64_t>(kTile); r0 < a.rows; r0 += static_cast<int64_t>(gridDim.y) * kTile) {
    const int nt = static_cast<int>(a.rows - r0 < kTile ? a.rows - r0 : kTile);
    const uint8_t* w = o < a.out ? static_cast<const uint8_t*>(a.w) + o * a.w_row_bytes : nullptr;
    if (w != nullptr && a.ids != nullptr) {  // kTile == 1
      const int32_t e = a.ids[(r0 / a.id_k) * a.id_stride + r0 % a.id_k];
      if (e < 0 || e >= a.n_expert) {
        if (lane == 0) a.y[r0 * a.y_stride + o] = nan_f32();
        w = nullptr;
      } else {
        w += e * a.expert_bytes;
      }
    }
    float p[kTile];
    for (int t = 0; t < kTile; ++t) p[t] = 0.0f;
    for (int64_t c0 = 0; c0 < a.in; c0 += kStage) {
      const int len = static_cast<int>(a.in - c0 < kStage ? a.in - c0 : kStage);
      // 16-byte loads where the rows allow (whole chunks of aligned rows), else element loads.
      for (int t = 0; t < nt; ++t) {
        const float* x = reinterpret_cast<const float*>(static_cast<const uint8_t*>(a.act) +
                                                        ((r0 + t) / a.act_div) * a.act_stride) + c0;
        if (len == kStage && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
          for (int q = threadIdx.x; q < kStage / 4; q += blockDim.x)
            *reinterpret_cast<float4*>(&xs[t][4 * q]) = __ldg(reinterpret_cast<const float4*>(x) + q);
        } else {
          for (int j = threadIdx.x; j < len; j += blockDim.x) xs[t][j] = x[j];
        }
      }
      if (w != nullptr) {
        const uint8_t* src = w + c0 * Ops::kBlockBytes;
        if (len == kStage && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
          for (int q = lane; q < kStage / Ops::kVec; q += 32)
            Ops::unpack(__ldg(reinterpret_cast<const uint4*>(src) + q), &ws[warp][Ops::kVec * q]);
        } else {
          for (int j = lane; j < len; j += 32) ws[warp][j] = Ops::load(w, c0 + j);
        }
      }
      __syncthreads();
      if (w != nullptr)
        for (int j = lane; j < len; j += 32) {
          const float wj = ws[warp][j];
          for (int t = 0; t < kTile; ++t)
            if (t < nt) p[t] = hd::fma(wj, xs[t][j], p[t]);
        }
      __syncthreads();
    }
    if (w == nullptr) continue;
    for (int t = 0; t < kTile; ++t) {
      if (t >= nt) break;
      float v = p[t];
      for (int s = 16; s >= 1; s >>= 1) v = v + __shfl_down_sync(0xffffffffu, v, s);
      if (lane == 0) a.y[(r0 + t) * a.y_stride + o] = v;
    }
  }
}

template <typename Ops, int kTile>
__global__ void __launch_bounds__(32 * kProductWarps) product_kernel(ProductArgs a) {
  const int lane = threadIdx.x & 31, warp = static_cast<int>(threadIdx.x / 32);
  const int64_t o = blockIdx.x * static_cast<int64_t>(kProductWarps) + warp;
  if constexpr (Ops::kLanes == 0) {
    product_float_rows<Ops, kTile>(a, o, warp, lane);  // every warp takes part in the staging
  } else {
    if (o >= a.out) return;  // the whole warp leaves together
    const uint8_t* wz = static_cast<const uint8_t*>(blockIdx.z == 0 ? a.w : a.w_z1);
    float* yz = blockIdx.z == 0 ? a.y : a.y_z1;
    for (int64_t r0 = blockIdx.y * static_cast<int64_t>(kTile); r0 < a.rows;
         r0 += static_cast<int64_t>(gridDim.y) * kTile) {
      const int nt = static_cast<int>(a.rows - r0 < kTile ? a.rows - r0 : kTile);
      const uint8_t* w = wz + o * a.w_row_bytes;
      if (a.ids != nullptr) {  // kTile == 1
        const int32_t e = a.ids[(r0 / a.id_k) * a.id_stride + r0 % a.id_k];
        if (e < 0 || e >= a.n_expert) {
          if (lane == 0) yz[r0 * a.y_stride + o] = nan_f32();
          continue;
        }
        w += e * a.expert_bytes;
      }
      product_rows<Ops, kTile>(a, w, yz, r0, nt, o, lane);
    }
  }
}

// One activation row × float weights with long rows (decode: the HC mixes over 16384 inputs, the
// router and the compressor projections over 4096): one CTA of kLongThreads per output row. The row
// streams through shared memory kLongStage elements at a time; every thread loads its share of the next
// stage (x as float4, the weight as 16-byte words widened by Ops::unpack) into registers while warp 0
// runs the 32 lane chains over the current one (lane l: elements l, l+32, … in order, numerics/dot.h's
// order, then the shuffle tree): one memory latency per 4096 elements instead of per 512, and every
// CTA's loads in flight together. Needs 16-byte aligned x and weight rows and in % kLongStage == 0.
constexpr int kLongStage = 4096;
constexpr int kLongThreads = 256;

template <typename Ops>
__global__ void __launch_bounds__(kLongThreads) product_long_row_kernel(ProductArgs a) {
  static_assert(Ops::kLanes == 0, "float weights only");
  constexpr int kXLoads = kLongStage / 4 / kLongThreads;         // float4 per thread per stage
  constexpr int kWLoads = kLongStage / Ops::kVec / kLongThreads;  // 16-byte weight words per thread
  __shared__ __align__(16) float xs[kLongStage];
  __shared__ __align__(16) float ws[kLongStage];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31;
  const int64_t o = blockIdx.x;
  const auto* x4 = static_cast<const float4*>(a.act);
  const auto* w4 = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(a.w) + o * a.w_row_bytes);
  const int64_t stages = a.in / kLongStage;
  float4 xr[kXLoads];
  uint4 wr[kWLoads];
  auto fetch = [&](int64_t s) {
#pragma unroll
    for (int k = 0; k < kXLoads; ++k) xr[k] = __ldg(x4 + s * (kLongStage / 4) + tid + k * kLongThreads);
#pragma unroll
    for (int k = 0; k < kWLoads; ++k) wr[k] = __ldcs(w4 + s * (kLongStage / Ops::kVec) + tid + k * kLongThreads);
  };
  fetch(0);
  float p = 0.0f;
  for (int64_t s = 0; s < stages; ++s) {
#pragma unroll
    for (int k = 0; k < kXLoads; ++k) *reinterpret_cast<float4*>(&xs[4 * (tid + k * kLongThreads)]) = xr[k];
#pragma unroll
    for (int k = 0; k < kWLoads; ++k) Ops::unpack(wr[k], &ws[Ops::kVec * (tid + k * kLongThreads)]);
    __syncthreads();
    if (s + 1 < stages) fetch(s + 1);  // in flight while warp 0 folds this stage
    if (tid < 32) {
      constexpr int kBatch = 16;
      for (int j = lane; j < kLongStage; j += 32 * kBatch) {
        float wv[kBatch], xv[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          wv[k] = ws[j + 32 * k];
          xv[k] = xs[j + 32 * k];
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) p = hd::fma(wv[k], xv[k], p);
      }
    }
    __syncthreads();  // the stage is overwritten next
  }
  if (tid < 32) {
    for (int sh = 16; sh >= 1; sh >>= 1) p = p + __shfl_down_sync(0xffffffffu, p, sh);
    if (lane == 0) a.y[o] = p;
  }
}

// The same for rows that fit whole in (dynamic) shared memory (x as floats, the weight row as its raw
// bytes): every thread issues all its loads at once, so a row costs one memory latency, then warp 0
// runs the lane chains (weights widened from shared memory as they are used). Same bits as above.
constexpr int64_t kWholeRowMaxBytes = 112 * 1024;

template <typename Ops>
__global__ void __launch_bounds__(kLongThreads) product_whole_row_kernel(ProductArgs a) {
  static_assert(Ops::kLanes == 0, "float weights only");
  extern __shared__ __align__(16) unsigned char whole_smem[];
  float* xs = reinterpret_cast<float*>(whole_smem);
  uint8_t* ws = whole_smem + a.in * 4;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31;
  const int64_t o = blockIdx.x;
  const auto* x4 = static_cast<const float4*>(a.act);
  const auto* w4 = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(a.w) + o * a.w_row_bytes);
  const int nx = static_cast<int>(a.in / 4), nw = static_cast<int>(a.in * Ops::kBlockBytes / 16);
  constexpr int kBatch = 8;
  for (int q0 = tid; q0 < nx; q0 += kLongThreads * kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k)
      if (q0 + k * kLongThreads < nx) v[k] = __ldg(x4 + q0 + k * kLongThreads);
#pragma unroll
    for (int k = 0; k < kBatch; ++k)
      if (q0 + k * kLongThreads < nx) reinterpret_cast<float4*>(xs)[q0 + k * kLongThreads] = v[k];
  }
  for (int q0 = tid; q0 < nw; q0 += kLongThreads * kBatch) {
    uint4 v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k)
      if (q0 + k * kLongThreads < nw) v[k] = __ldcs(w4 + q0 + k * kLongThreads);
#pragma unroll
    for (int k = 0; k < kBatch; ++k)
      if (q0 + k * kLongThreads < nw) reinterpret_cast<uint4*>(ws)[q0 + k * kLongThreads] = v[k];
  }
  __syncthreads();
  if (tid >= 32) return;
  const int n = static_cast<int>(a.in);
  float p = 0.0f;
  constexpr int kChain = 16;
  int j = lane;
  for (; j + 32 * (kChain - 1) < n; j += 32 * kChain) {
    float wv[kChain], xv[kChain];
#pragma unroll
    for (int k = 0; k < kChain; ++k) {
      wv[k] = Ops::load(ws, j + 32 * k);
      xv[k] = xs[j + 32 * k];
    }
#pragma unroll
    for (int k = 0; k < kChain; ++k) p = hd::fma(wv[k], xv[k], p);
  }
  for (; j < n; j += 32) p = hd::fma(Ops::load(ws, j), xs[j], p);
  for (int sh = 16; sh >= 1; sh >>= 1) p = p + __shfl_down_sync(0xffffffffu, p, sh);
  if (lane == 0) a.y[o] = p;
}

// Routed experts of the K/IQ types (moe's pairs: expert ids, kLanes > 1): a CTA's warps are output rows
// of one pair, so the CTA copies that pair's activation row (and the IQ2_XXS tables) into shared memory
// once and every warp reads them there instead of each warp re-reading them through L1. The chunk loop
// is product_rows's (same lanes, same partial order, same bits).
constexpr int64_t kRoutedActMax = 8192;  // activation bytes of one row held in shared memory

// Whether Ops decodes through the IQ2_XXS tables (part_with).
template <typename Ops>
constexpr bool has_tables() {
  if constexpr (requires { Ops::kHasTables; })
    return Ops::kHasTables;
  else
    return false;
}

template <typename Ops>
__global__ void __launch_bounds__(32 * kProductWarps) product_routed_kernel(ProductArgs a) {
  static_assert(Ops::kLanes > 1, "K/IQ types");
  constexpr int kL = Ops::kLanes, kPerChunk = 32 / kL;
  constexpr int64_t kActBytes = ActOps<Ops::kAct>::kBytes;
  __shared__ __align__(16) uint8_t act_s[kRoutedActMax];
  __shared__ Iq2xxsDeviceTables tab_s;
  constexpr bool kTables = has_tables<Ops>();
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid / 32;
  const int64_t o = blockIdx.x * static_cast<int64_t>(kProductWarps) + warp;
  const int64_t nb = a.in / Ops::kBlock, act_bytes = nb * kActBytes;
  if constexpr (kTables) {
    for (int i = tid; i < 256; i += blockDim.x) tab_s.grid[i] = d_iq2xxs.grid[i];
    for (int i = tid; i < 128; i += blockDim.x) tab_s.signs[i] = d_iq2xxs.signs[i];
  }
  const uint8_t* wz = static_cast<const uint8_t*>(blockIdx.z == 0 ? a.w : a.w_z1);
  float* yz = blockIdx.z == 0 ? a.y : a.y_z1;
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    const uint8_t* src = static_cast<const uint8_t*>(a.act) + (r / a.act_div) * a.act_stride;
    if (reinterpret_cast<uintptr_t>(src) % 16 == 0 && act_bytes % 16 == 0) {
      for (int64_t q = tid; q < act_bytes / 16; q += blockDim.x)
        reinterpret_cast<uint4*>(act_s)[q] = __ldg(reinterpret_cast<const uint4*>(src) + q);
    } else {
      for (int64_t q = tid; q < act_bytes; q += blockDim.x) act_s[q] = src[q];
    }
    __syncthreads();
    const int32_t e = a.ids[(r / a.id_k) * a.id_stride + r % a.id_k];
    if (o < a.out) {
      if (e < 0 || e >= a.n_expert) {
        if (lane == 0) yz[r * a.y_stride + o] = nan_f32();
      } else {
        const uint8_t* w = wz + e * a.expert_bytes + o * a.w_row_bytes;
        const int sub = lane % kL;
        float p = 0.0f;
        for (int64_t b0 = 0; b0 < nb; b0 += kPerChunk) {
          const int64_t b = b0 + lane / kL;
          const int rel = lane - static_cast<int>(b0 % 32);
          const bool mine = rel >= 0 && rel < kPerChunk && b0 + rel < nb;
          typename Ops::Isum is{};
          if (b < nb) {
            if constexpr (kTables)
              is = Ops::part_with(w + b * Ops::kBlockBytes, act_s + b * kActBytes, sub, tab_s);
            else
              is = Ops::part(w + b * Ops::kBlockBytes, act_s + b * kActBytes, sub);
          }
          for (int m = 1; m < kL; m <<= 1) is = Ops::add(is, Ops::shfl_xor(is, m));
          const float v = b < nb ? Ops::finish(w + b * Ops::kBlockBytes, act_s + b * kActBytes, is) : 0.0f;
          const float vb = __shfl_sync(0xffffffffu, v, mine ? rel * kL : 0);
          if (mine) p = p + vb;
        }
        for (int sh = 16; sh >= 1; sh >>= 1) p = p + __shfl_down_sync(0xffffffffu, p, sh);
        if (lane == 0) yz[r * a.y_stride + o] = p;
      }
    }
    __syncthreads();  // act_s is refilled for the next pair
  }
}

// One activation row × quantized weights with few output rows (decode's q_a, kv, W_oa groups, W_ob, the
// shared expert): kSplit warps share an output row so that enough warps stream the weights. Warp `part`
// of a row computes the block values of chunks part, part + kSplit, … (a chunk = the 32 blocks one
// warp-iteration of product_rows covers, or kPerChunk super-blocks for the K/IQ types) into shared
// memory; then the row's first warp adds them lane by lane in block order (lane l: blocks l, l+32, …
// from 0, one plain add each, exactly product_rows's partials) and runs the shuffle tree: the bits of
// product_rows, whose lanes add the same values in the same order.
constexpr int kSplitMaxBlocks = 1024;  // blocks per row this kernel holds in shared memory

template <typename Ops, int kSplit>
__global__ void __launch_bounds__(32 * kProductWarps) product_split_kernel(ProductArgs a) {
  static_assert(Ops::kLanes > 0 && kProductWarps % kSplit == 0, "quantized weights; warps divide into rows");
  constexpr int kRows = kProductWarps / kSplit;
  __shared__ float vals[kRows][kSplitMaxBlocks];
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x / 32);
  const int slot = warp / kSplit, part = warp % kSplit;
  const int64_t o = blockIdx.x * static_cast<int64_t>(kRows) + slot;
  const int64_t nb = a.in / Ops::kBlock;
  constexpr int64_t kActBytes = ActOps<Ops::kAct>::kBytes;
  const uint8_t* act =
      static_cast<const uint8_t*>(a.act) + (a.act_group_rows > 0 ? (o / a.act_group_rows) * a.act_group_bytes : 0);
  if (o < a.out) {
    const uint8_t* w = static_cast<const uint8_t*>(blockIdx.z == 0 ? a.w : a.w_z1) + o * a.w_row_bytes;
    if constexpr (Ops::kLanes == 1) {
#pragma unroll 4
      for (int64_t b = 32 * part + lane; b < nb; b += 32 * kSplit)
        vals[slot][b] = Ops::block_dot(w + b * Ops::kBlockBytes, act + b * kActBytes);
      // (blocks past nb in the last chunk: nothing to compute)
    } else {
      constexpr int kL = Ops::kLanes, kPerChunk = 32 / kL;
      const int sub = lane % kL;
      for (int64_t b0 = static_cast<int64_t>(part) * kPerChunk; b0 < nb; b0 += static_cast<int64_t>(kPerChunk) * kSplit) {
        const int64_t b = b0 + lane / kL;
        typename Ops::Isum s{};
        if (b < nb) s = Ops::part(w + b * Ops::kBlockBytes, act + b * kActBytes, sub);
        for (int m = 1; m < kL; m <<= 1) s = Ops::add(s, Ops::shfl_xor(s, m));
        if (b < nb && sub == 0) vals[slot][b] = Ops::finish(w + b * Ops::kBlockBytes, act + b * kActBytes, s);
      }
    }
  }
  __syncthreads();
  if (part != 0 || o >= a.out) return;
  float p = 0.0f;
  for (int64_t b = lane; b < nb; b += 32) p = p + vals[slot][b];
  for (int sh = 16; sh >= 1; sh >>= 1) p = p + __shfl_down_sync(0xffffffffu, p, sh);
  if (lane == 0) (blockIdx.z == 0 ? a.y : a.y_z1)[o] = p;
}

// --- embed ---------------------------------------------------------------------------------------------

template <typename Ops>
__global__ void embed_kernel(const uint8_t* table, int64_t row_bytes, int64_t vocab, int64_t D, const int32_t* tokens,
                             int64_t n, int64_t copies, float* out, int64_t out_stride) {
  const int64_t per_row = D / Ops::kBlock;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * per_row) return;
  const int64_t t = i / per_row, b = i % per_row;
  const int32_t tok = tokens[t];
  float v[Ops::kBlock];
  if (tok < 0 || tok >= vocab) {  // the CPU reports out_of_range; without a sync the row is poisoned
    for (int j = 0; j < Ops::kBlock; ++j) v[j] = nan_f32();
  } else {
    Ops::dequant_block(table + tok * row_bytes + b * Ops::kBlockBytes, v);
  }
  float* dst = out + t * out_stride + b * Ops::kBlock;
  for (int64_t c = 0; c < copies; ++c)
    for (int j = 0; j < Ops::kBlock; ++j) dst[c * D + j] = v[j];
}

// dst row r (n floats at dst + r·n) = dequantized row r of src (rows row_bytes apart).
template <typename Ops>
__global__ void dequantize_rows_kernel(const uint8_t* src, int64_t row_bytes, int64_t n, int64_t rows, float* dst) {
  const int64_t per_row = n / Ops::kBlock;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * per_row) return;
  const int64_t r = i / per_row, b = i % per_row;
  float v[Ops::kBlock];
  Ops::dequant_block(src + r * row_bytes + b * Ops::kBlockBytes, v);
  for (int j = 0; j < Ops::kBlock; ++j) dst[r * n + b * Ops::kBlock + j] = v[j];
}

struct I32Ops {
  static constexpr int kBlock = 1;
  static constexpr int kBlockBytes = 4;
  __device__ static void dequant_block(const uint8_t* blk, float* out) {
    out[0] = static_cast<float>(*reinterpret_cast<const int32_t*>(blk));
  }
};

}  // namespace

// --- matmul.cuh -------------------------------------------------------------------------------------------

bool product_supported(TensorType type) {
  return dispatch_type(type, [](auto) {});
}

bool embed_supported(TensorType type) { return type == TensorType::kI32 || product_supported(type); }

ActFormat act_format(TensorType type) {
  ActFormat f = ActFormat::kF32;
  dispatch_type(type, [&](auto ops) { f = decltype(ops)::kAct; });
  return f;
}

int64_t act_block(ActFormat format) {
  switch (format) {
    case ActFormat::kQ8_0: return 32;
    case ActFormat::kQ8_K: return 256;
    default: return 1;
  }
}

int64_t act_row_bytes(ActFormat format, int64_t n) {
  switch (format) {
    case ActFormat::kQ8_0: return n / 32 * static_cast<int64_t>(sizeof(BlockQ8_0Act));
    case ActFormat::kQ8_K: return n / 256 * static_cast<int64_t>(sizeof(BlockQ8_K));
    default: return n * static_cast<int64_t>(sizeof(float));
  }
}

Status check_product(TensorType type, int64_t n) {
  if (!product_supported(type))
    return unsupported("matmul: no CUDA kernels for type " + std::string(tensor_type_name(type)));
  if (n <= 0) return invalid_argument("matmul: bad sizes");
  if (tensor_row_bytes(type, n) < 0)
    return invalid_argument("matmul: row length " + std::to_string(n) + " is not a multiple of the " +
                            std::string(tensor_type_name(type)) + " block size");
  if (n % act_block(act_format(type)) != 0)
    return invalid_argument("matmul: row length not a multiple of the activation block");
  return ok_status();
}

void enqueue_act_quant(CudaBackend& be, ActFormat format, const float* x, int64_t x_stride, int64_t rows, int64_t n,
                       void* dst) {
  const int64_t items = rows * (n / act_block(format));  // blocks: one warp each
  if (items <= 0 || format == ActFormat::kF32) return;
  const auto grid = static_cast<unsigned>(blocks_for(items * 32, kThreads));
  auto* out = static_cast<uint8_t*>(dst);
  switch (format) {
    case ActFormat::kQ8_0:
      be.launch("act_quant_q8_0_warp_kernel", act_quant_q8_0_warp_kernel, grid, kThreads, 0, x, x_stride, rows, n, out);
      break;
    case ActFormat::kQ8_K:
      be.launch("act_quant_q8_k_warp_kernel", act_quant_q8_k_warp_kernel, grid, kThreads, 0, x, x_stride, rows, n, out);
      break;
    default: return;
  }
}

void enqueue_product(CudaBackend& be, const ProductArgs& a) {
  if (a.rows <= 0 || a.out <= 0) return;
  const bool pair = a.w_z1 != nullptr;
  if (pair && act_format(a.type) == ActFormat::kF32) {  // float weights: the two products one after the other
    ProductArgs first = a, second = a;
    first.w_z1 = second.w_z1 = nullptr;
    first.y_z1 = second.y_z1 = nullptr;
    second.w = a.w_z1;
    second.y = a.y_z1;
    enqueue_product(be, first);
    enqueue_product(be, second);
    return;
  }
  const bool tiled = a.ids == nullptr && a.rows > 1;
  const int64_t tile = tiled ? kProductTile : 1;
  const int64_t groups = (a.rows + tile - 1) / tile;
  const dim3 grid(static_cast<unsigned>(blocks_for(a.out, kProductWarps)),
                  static_cast<unsigned>(groups < kMaxGridY ? groups : kMaxGridY), pair ? 2u : 1u);
  // One activation row of float weights with long aligned rows: a CTA per output row (above).
  const bool long_row = a.rows == 1 && a.ids == nullptr && a.act_group_rows == 0 && a.in >= kLongStage && a.in % kLongStage == 0 &&
                        reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && a.w_row_bytes % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(a.act) % 16 == 0 && a.out <= INT32_MAX;
  const bool known = dispatch_type(a.type, [&](auto ops) {
    if constexpr (decltype(ops)::kLanes == 0) {
      using Ops = decltype(ops);
      const int64_t whole_bytes = a.in * (4 + Ops::kBlockBytes);
      if (long_row && whole_bytes <= kWholeRowMaxBytes) {
        static const cudaError_t attr = cudaFuncSetAttribute(
            product_whole_row_kernel<Ops>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kWholeRowMaxBytes));
        if (attr != cudaSuccess) return be.check(attr, "cudaFuncSetAttribute (product_whole_row_kernel)");
        be.launch("product_whole_row_kernel", product_whole_row_kernel<Ops>, static_cast<unsigned>(a.out), kLongThreads,
                  static_cast<size_t>(whole_bytes), a);
        return;
      }
      if (long_row) {
        be.launch("product_long_row_kernel", product_long_row_kernel<decltype(ops)>, static_cast<unsigned>(a.out),
                  kLongThreads, 0, a);
        return;
      }
    }
    if constexpr (decltype(ops)::kLanes > 1) {
      using Ops = decltype(ops);
      if (a.ids != nullptr && a.in / Ops::kBlock * ActOps<Ops::kAct>::kBytes <= kRoutedActMax) {
        be.launch("product_routed_kernel", product_routed_kernel<Ops>, grid, 32 * kProductWarps, 0, a);
        return;
      }
    }
    if constexpr (decltype(ops)::kLanes > 0) {
      // Few output rows of one activation row: split each row over several warps (above) so that at
      // least ~32 warps per SM stream the weights, as far as the row's chunks allow.
      const int64_t per_chunk = decltype(ops)::kLanes == 1 ? 32 : 32 / decltype(ops)::kLanes;
      const int64_t nb = a.in / decltype(ops)::kBlock, chunks = (nb + per_chunk - 1) / per_chunk;
      int split = 1;
      while (split < kProductWarps && split * 2 <= chunks && a.out * split < 32 * be.sm_count()) split *= 2;
      if (a.rows == 1 && a.ids == nullptr && split > 1 && nb <= kSplitMaxBlocks) {
        const dim3 g(static_cast<unsigned>(blocks_for(a.out, kProductWarps / split)), 1u, pair ? 2u : 1u);
        if (split == 2) be.launch("product_split_kernel<2>", product_split_kernel<decltype(ops), 2>, g, 32 * kProductWarps, 0, a);
        else if (split == 4) be.launch("product_split_kernel<4>", product_split_kernel<decltype(ops), 4>, g, 32 * kProductWarps, 0, a);
        else be.launch("product_split_kernel<8>", product_split_kernel<decltype(ops), 8>, g, 32 * kProductWarps, 0, a);
        return;
      }
    }
    if (tiled)
      be.launch("product_kernel (tiled)", product_kernel<decltype(ops), kProductTile>, grid, 32 * kProductWarps, 0, a);
    else
      be.launch("product_kernel", product_kernel<decltype(ops), 1>, grid, 32 * kProductWarps, 0, a);
  });
  if (!known) be.fail(unsupported("matmul: no CUDA kernels for type " + std::string(tensor_type_name(a.type))));
}

void enqueue_dequantize_rows(CudaBackend& be, TensorType type, const void* src, int64_t row_bytes, int64_t n,
                             int64_t rows, float* dst) {
  if (!embed_supported(type)) {
    be.fail(unsupported("dequantize: no CUDA kernels for tensor type " + std::string(tensor_type_name(type))));
    return;
  }
  if (type != TensorType::kI32 && tensor_row_bytes(type, n) < 0) {
    be.fail(invalid_argument("dequantize: row length " + std::to_string(n) + " is not a multiple of the " +
                             std::string(tensor_type_name(type)) + " block size"));
    return;
  }
  if (rows <= 0 || n <= 0) return;
  auto enqueue = [&](auto ops) {
    using Ops = decltype(ops);
    const int64_t items = rows * (n / Ops::kBlock);
    be.launch("dequantize_rows_kernel", dequantize_rows_kernel<Ops>, static_cast<unsigned>(blocks_for(items, kThreads)),
              kThreads, 0, static_cast<const uint8_t*>(src), row_bytes, n, rows, dst);
  };
  if (type == TensorType::kI32) {
    enqueue(I32Ops{});
  } else {
    dispatch_type(type, enqueue);
  }
}

// --- CudaBackend ops --------------------------------------------------------------------------------------

void CudaBackend::embed(const Tensor& table, const Tensor& tokens, int64_t copies, const Tensor& out) {
  const int64_t D = table.ne[0], vocab = table.ne[1], n = tokens.ne[0] * tokens.ne[1] * tokens.ne[2] * tokens.ne[3];
  if (out.ne[0] != copies * D || out.ne[1] != n) {
    fail(invalid_argument("embed: out " + dims(out) + " for " + std::to_string(n) + " tokens of " +
                          std::to_string(copies) + " x " + std::to_string(D)));
    return;
  }
  if (!embed_supported(table.type)) {
    fail(unsupported("embed: no CUDA kernels for tensor type " + std::string(tensor_type_name(table.type))));
    return;
  }
  if (table.type != TensorType::kI32 && tensor_row_bytes(table.type, D) < 0) {
    fail(invalid_argument("embed: row length " + std::to_string(D) + " is not a multiple of the " +
                          std::string(tensor_type_name(table.type)) + " block size"));
    return;
  }
  if (n <= 0 || D <= 0) return;
  const auto* tab = static_cast<const uint8_t*>(table.data);
  const auto* tok = static_cast<const int32_t*>(tokens.data);
  float* o = static_cast<float*>(out.data);
  const int64_t os = out.nb[1] / 4;
  auto enqueue = [&](auto ops) {
    using Ops = decltype(ops);
    const int64_t items = n * (D / Ops::kBlock);
    launch("embed_kernel", embed_kernel<Ops>, static_cast<unsigned>(blocks_for(items, kThreads)), kThreads, 0, tab,
           table.nb[1], vocab, D, tok, n, copies, o, os);
  };
  if (table.type == TensorType::kI32) {
    enqueue(I32Ops{});
  } else {
    dispatch_type(table.type, enqueue);
  }
}

namespace {

// One validated job: the CPU's add_job + check_shape.
bool validate_job(CudaBackend& be, const backend::MatmulJob& j) {
  const Tensor &w = j.w, &x = j.x, &y = j.y;
  if (w.ne[2] != 1 || w.ne[3] != 1 || !w.contiguous_rows() || x.type != TensorType::kF32 ||
      y.type != TensorType::kF32 || x.ne[0] != w.ne[0] || y.ne[0] != w.ne[1] || y.ne[1] != x.ne[1]) {
    be.fail(invalid_argument("matmul: weight " + std::string(tensor_type_name(w.type)) + " " + dims(w) + ", x " +
                             dims(x) + ", y " + dims(y) +
                             " do not fit (2-D weight with contiguous rows, F32 x [n][in], y [n][out])"));
    return false;
  }
  Status s = w.ne[1] < 0 || x.ne[1] < 0 ? invalid_argument("matmul: bad sizes") : check_product(w.type, w.ne[0]);
  if (!s.ok()) {
    be.fail(std::move(s));
    return false;
  }
  return true;
}

}  // namespace

void CudaBackend::matmul(const Tensor& w, const Tensor& x, const Tensor& y) {
  const backend::MatmulJob job{w, x, y};
  matmul_batch(std::span<const backend::MatmulJob>(&job, 1));
}

void CudaBackend::matmul_batch(std::span<const backend::MatmulJob> jobs) {
  for (const backend::MatmulJob& j : jobs)
    if (!validate_job(*this, j)) return;
  // Activation regions: one per job with a quantized format (jobs on the same x rows and format share
  // one; the bits are the same either way).
  // Sized for max(rows, the reserved step's tokens) so that later (larger) steps do not grow it.
  int64_t total = 0;
  for (const backend::MatmulJob& j : jobs) {
    const ActFormat f = act_format(j.w.type);
    const int64_t rows = j.x.ne[1] > bounds().tokens ? j.x.ne[1] : bounds().tokens;
    if (f != ActFormat::kF32 && j.x.ne[1] > 0) total += align256(act_row_bytes(f, j.w.ne[0]) * rows);
  }
  uint8_t* scratch = nullptr;
  if (total > 0) {
    scratch = static_cast<uint8_t*>(grow(act_scratch, total));
    if (scratch == nullptr) return;
  }
  // Jobs reading column slices of the same activation rows at block-aligned offsets (the grouped
  // output projection: 8 slices of one row) share one quantization of the span they cover: each block
  // is quantized alone, so a block's bits do not depend on the row around it.
  if (jobs.size() >= 2) {
    const backend::MatmulJob& j0 = jobs[0];
    const ActFormat f = act_format(j0.w.type);
    const int64_t blk = act_block(f), rows = j0.x.ne[1], stride = j0.x.nb[1];
    bool span = f != ActFormat::kF32 && rows > 0 && stride % 4 == 0;
    int64_t lo = 0, hi = 0;
    bool distinct = false;
    for (const backend::MatmulJob& j : jobs) {
      if (!span) break;
      const int64_t off = (static_cast<const char*>(j.x.data) - static_cast<const char*>(j0.x.data)) / 4;
      span = act_format(j.w.type) == f && j.x.ne[1] == rows && j.x.nb[1] == stride &&
             (static_cast<const char*>(j.x.data) - static_cast<const char*>(j0.x.data)) % 4 == 0 && off % blk == 0;
      distinct = distinct || off != 0;
      lo = std::min(lo, off);
      hi = std::max(hi, off + j.w.ne[0]);
    }
    if (span && distinct && hi - lo <= stride / 4 && (hi - lo) % blk == 0) {
      const int64_t n = hi - lo, row_bytes = act_row_bytes(f, n);
      const int64_t cap = std::max(rows, bounds().tokens);
      auto* scratch = static_cast<uint8_t*>(grow(act_scratch, align256(row_bytes * cap)));
      if (scratch == nullptr) return;
      const float* base = static_cast<const float*>(j0.x.data) + lo;
      enqueue_act_quant(*this, f, base, stride / 4, rows, n, scratch);
      // Groups of one weight (job k: rows [k·R, (k+1)·R) of it, x columns [k·in, (k+1)·in), y columns
      // [k·R, (k+1)·R)): one product over all G·R rows, row o reading activation group o / R.
      const int64_t R = j0.w.ne[1], in = j0.w.ne[0], G = static_cast<int64_t>(jobs.size());
      bool grouped = lo == 0 && j0.w.contiguous_rows() && j0.y.nb[1] % 4 == 0;
      for (int64_t k = 0; k < G && grouped; ++k) {
        const backend::MatmulJob& j = jobs[static_cast<size_t>(k)];
        grouped = j.w.type == j0.w.type && j.w.ne[0] == in && j.w.ne[1] == R && j.w.nb[1] == j0.w.nb[1] &&
                  static_cast<const char*>(j.w.data) == static_cast<const char*>(j0.w.data) + k * R * j0.w.nb[1] &&
                  static_cast<const char*>(j.x.data) == static_cast<const char*>(j0.x.data) + k * in * 4 &&
                  static_cast<const char*>(j.y.data) == static_cast<const char*>(j0.y.data) + k * R * 4 &&
                  j.y.nb[1] == j0.y.nb[1] && in % blk == 0;
      }
      if (grouped) {
        ProductArgs a;
        a.type = j0.w.type;
        a.w = j0.w.data;
        a.w_row_bytes = j0.w.nb[1];
        a.in = in;
        a.out = G * R;
        a.rows = rows;
        a.y = static_cast<float*>(j0.y.data);
        a.y_stride = j0.y.nb[1] / 4;
        a.act = scratch;
        a.act_stride = row_bytes;
        a.act_group_rows = R;
        a.act_group_bytes = in / blk * act_row_bytes(f, blk);
        enqueue_product(*this, a);
        return;
      }
      for (const backend::MatmulJob& j : jobs) {
        const int64_t off = (static_cast<const char*>(j.x.data) - static_cast<const char*>(j0.x.data)) / 4 - lo;
        ProductArgs a;
        a.type = j.w.type;
        a.w = j.w.data;
        a.w_row_bytes = j.w.nb[1];
        a.in = j.w.ne[0];
        a.out = j.w.ne[1];
        a.rows = rows;
        a.y = static_cast<float*>(j.y.data);
        a.y_stride = j.y.nb[1] / 4;
        a.act = scratch + off / blk * act_row_bytes(f, blk);
        a.act_stride = row_bytes;
        enqueue_product(*this, a);
      }
      return;
    }
  }
  struct Region {
    const void* x;
    int64_t stride, n, rows;
    ActFormat f;
    int64_t offset;
  };
  // Small fixed list for sharing; beyond it every job quantizes its own copy.
  constexpr int kMaxShared = 64;
  Region seen[kMaxShared];
  int n_seen = 0;
  int64_t offset = 0;
  for (const backend::MatmulJob& j : jobs) {
    const ActFormat f = act_format(j.w.type);
    const int64_t in = j.w.ne[0], rows = j.x.ne[1], xs = j.x.nb[1] / 4;
    ProductArgs a;
    a.type = j.w.type;
    a.w = j.w.data;
    a.w_row_bytes = j.w.nb[1];
    a.in = in;
    a.out = j.w.ne[1];
    a.rows = rows;
    a.y = static_cast<float*>(j.y.data);
    a.y_stride = j.y.nb[1] / 4;
    if (f == ActFormat::kF32) {
      a.act = j.x.data;
      a.act_stride = j.x.nb[1];
    } else {
      int64_t at = -1;
      for (int i = 0; i < n_seen && at < 0; ++i)
        if (seen[i].x == j.x.data && seen[i].stride == xs && seen[i].n == in && seen[i].rows == rows && seen[i].f == f)
          at = seen[i].offset;
      if (at < 0) {
        at = offset;
        offset += align256(act_row_bytes(f, in) * rows);
        enqueue_act_quant(*this, f, static_cast<const float*>(j.x.data), xs, rows, in, scratch + at);
        if (n_seen < kMaxShared) seen[n_seen++] = {j.x.data, xs, in, rows, f, at};
      }
      a.act = scratch + at;
      a.act_stride = act_row_bytes(f, in);
    }
    enqueue_product(*this, a);
  }
}

}  // namespace dsv4::cuda
