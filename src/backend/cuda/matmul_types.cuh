// backend/cuda/matmul_types.cuh — the per-weight-type device operations of the products, shared by
// matmul.cu (activation quantization, the general product, embed, dequantize) and matmul_decode.cu (the
// one-activation-row decode forms): TypeOps<T>, ActOps<F>, dispatch_type, and the few pieces both
// files' kernels and launchers use (nan_f32, blocks_for, kProductWarps). Included by .cu files only
// (device code, -fmad=false).
//
// Decomposition:
//   TypeOps<T>: kAct (activation format), kBlock / kBlockBytes (weight block), kLanes (0: float weights
//               read element-wise; 1: one lane per block; 4: four lanes split a super-block's integer
//               sums), the scalar vec_dot, the block dequantizer, and the per-form pieces (float
//               load / unpack, block_dot, part / add / shfl_xor / finish) — numerics/quant_ref*.h's
//               references, with quant_dots.cuh's dp4a integer sums where those are the same integers.
//   ActOps<F>:  bytes of one activation block.
//   dispatch_type: a runtime TensorType to its TypeOps (false for types without device kernels).
//
// Why a header: every product form (matmul.cu's product_kernel, matmul_decode.cu's split / long-row /
// whole-row / routed kernels) is a specialisation over this one table, so both translation units
// instantiate it; it lives in the named namespace dsv4::cuda::detail (an anonymous namespace would give
// each file its own, differently named copy of every template).
//
// The IQ2_XXS tables (d_iq2xxs) are a `static __device__` variable on purpose: the library is built
// without relocatable device code (CMakeLists.txt: CUDA_SEPARABLE_COMPILATION OFF), so each .cu is its
// own device module and its kernels can only read a variable of that module. Every including .cu gets
// its own statically initialised copy in its module image (as matmul.cu had before the split: no
// runtime copy), and internal linkage keeps the host-side shadow symbols of the two copies apart.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "backend/cuda/matmul.cuh"
#include "backend/cuda/preload.cuh"
#include "backend/cuda/quant_dots.cuh"
#include "numerics/blocks.h"
#include "numerics/det_math.h"
#include "numerics/hd.h"
#include "numerics/quant_ref.h"
#include "numerics/quant_ref_iq2_xxs.h"
#include "numerics/quant_ref_k.h"
#include "numerics/quant_ref_mxfp4.h"
#include "numerics/quant_ref_rocmfpx.h"

namespace dsv4::cuda::detail {

__device__ inline float nan_f32() { return hd::f32_from_bits(0x7fc00000u); }

inline int64_t blocks_for(int64_t items, int threads) { return (items + threads - 1) / threads; }

// Warps per CTA of every product form (matmul.cu's product_kernel, matmul_decode.cu's split and routed).
constexpr int kProductWarps = 8;   // output rows per CTA

// Before wait_for_producer() (preload.cuh): weight rows [o0, o0 + rows) of this CTA's product (grid z)
// into L2, so that their HBM latency and part of their stream overlap the kernel before. Not for
// routed products (the expert comes from ids, which the producer writes) and only from the first
// CTA of a column of row tiles (grid y) that share the rows.
__device__ __forceinline__ void prefetch_weight_rows(const ProductArgs& a, int64_t o0, int64_t rows) {
  if (a.ids != nullptr || o0 >= a.out || blockIdx.y != 0) return;
  if (o0 + rows > a.out) rows = a.out - o0;
  const uint8_t* w = static_cast<const uint8_t*>(blockIdx.z == 0 ? a.w : a.w_z1) + o0 * a.w_row_bytes;
  preload::prefetch_l2(w, rows * a.w_row_bytes, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
}

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
  // part against a lane's activation words (lane_act: loaded once for several weight rows).
  using LaneAct = qdot::LaneAct64;
  __device__ static LaneAct lane_act(const uint8_t* a, int s) {
    return qdot::lane_act64(*reinterpret_cast<const BlockQ8_K*>(a), s);
  }
  static constexpr int kLaneAlign = 4;  // part_lane reads 32-bit words: every block 4-byte aligned
  template <typename Tables>
  __device__ static Isum part_lane(const uint8_t* w, const LaneAct& act, int s, const Tables&) {
    return qdot::q2_k_isums_lane(*reinterpret_cast<const BlockQ2_K*>(w), act, s);
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
// numerics/iq2_xxs_grid.h's constexpr arrays (part of the module image: no runtime copy, every device;
// one copy per including .cu: see the banner).
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
static __device__ const Iq2xxsDeviceTables d_iq2xxs = make_iq2xxs_tables();

template <>
struct TypeOps<TensorType::kIQ2_XXS> {
  static constexpr ActFormat kAct = ActFormat::kQ8_K;
  static constexpr int kBlock = 256, kBlockBytes = sizeof(BlockIq2Xxs);
  static constexpr int kLanes = 4;  // groups 2s, 2s+1
  __device__ static qref::Iq2xxsTables tables() { return {d_iq2xxs.grid, d_iq2xxs.signs}; }
  using Isum = int32_t;
  __device__ static Isum part(const uint8_t* w, const uint8_t* a, int s) {
    return qdot::iq2_xxs_isum(*reinterpret_cast<const BlockIq2Xxs*>(w), *reinterpret_cast<const BlockQ8_K*>(a),
                              d_iq2xxs.grid, 2 * s, 2 * s + 2);
  }
  // The same with the tables at `t` (a copy in shared memory).
  static constexpr bool kHasTables = true;
  __device__ static Isum part_with(const uint8_t* w, const uint8_t* a, int s, const Iq2xxsDeviceTables& t) {
    return qdot::iq2_xxs_isum(*reinterpret_cast<const BlockIq2Xxs*>(w), *reinterpret_cast<const BlockQ8_K*>(a), t.grid,
                              2 * s, 2 * s + 2);
  }
  // part_with against a lane's activation words (lane_act: loaded once for several weight rows).
  using LaneAct = qdot::LaneAct64;
  __device__ static LaneAct lane_act(const uint8_t* a, int s) {
    return qdot::lane_act64(*reinterpret_cast<const BlockQ8_K*>(a), s);
  }
  static constexpr int kLaneAlign = 2;  // part_lane's load_words4_align2
  __device__ static Isum part_lane(const uint8_t* w, const LaneAct& act, int s, const Iq2xxsDeviceTables& t) {
    return qdot::iq2_xxs_isum_lane(w, act, t.grid, s);
  }
  // part_lane for a block in shared memory.
  __device__ static Isum part_lane_shared(const uint8_t* w, const LaneAct& act, int s, const Iq2xxsDeviceTables& t) {
    return qdot::iq2_xxs_isum_lane_shared(w, act, t.grid, s);
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

// ActOps<F>::kBytes: bytes of one activation block (numerics/blocks.h).
template <ActFormat F>
struct ActOps;
template <>
struct ActOps<ActFormat::kQ8_0> {
  static constexpr int kBlock = 32;
  static constexpr int kBytes = sizeof(BlockQ8_0Act);
};
template <>
struct ActOps<ActFormat::kQ8_K> {
  static constexpr int kBlock = 256;
  static constexpr int kBytes = sizeof(BlockQ8_K);
};

// --- activation quantizers on one warp per block ----------------------------------------------------
//
// numerics/quant_ref.h's quantize_act_q8_0_block and quantize_act_q8_k_block, which one thread per block
// would walk serially, on the 32 lanes of a warp. Same bits: the block's max is an order-free reduction
// once ties carry their index (Q8_K keeps the first element of largest magnitude), the per-element
// rounding is the reference's, and bsums are exact integer sums. Used by matmul.cu's act-quant kernels
// and by the decode forms that quantize their own activation row (matmul_decode.cu). Block b of the
// row x (with u set, element i is swiglu_clamp(x[i], u[i], limit): the float a swiglu kernel stores).
__device__ __forceinline__ float act_input(const float* x, const float* u, float limit, int64_t i) {
  return u != nullptr ? det::swiglu_clamp(x[i], u[i], limit) : x[i];
}

// One Q8_0 block from its 32 values, value `lane` in lane `lane` (finite_or_zero already applied).
__device__ __forceinline__ void quantize_q8_0_values_warp(float v, uint8_t* dst, int lane) {
  float amax = qref::f32_abs(v);
  for (int m = 16; m >= 1; m >>= 1) amax = qref::fmax_c(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  const float d = hd::div(amax, 127.0f);
  const float id = d != 0.0f ? hd::div(1.0f, d) : 0.0f;
  auto* out = reinterpret_cast<BlockQ8_0Act*>(dst);
  float q = qref::round_half_away(v * id);
  q = qref::fmin_c(127.0f, qref::fmax_c(-127.0f, q));
  out->qs[lane] = static_cast<int8_t>(q);
  if (lane == 0) out->d = d;
}

template <ActFormat F>
__device__ __forceinline__ void quantize_block_warp(const float* x, const float* u, float limit, int64_t b, uint8_t* dst,
                                                    int lane) {
  if constexpr (F == ActFormat::kQ8_0) {
    quantize_q8_0_values_warp(qref::finite_or_zero(act_input(x, u, limit, b * 32 + lane)), dst, lane);
  } else {
    static_assert(F == ActFormat::kQ8_K, "Q8_0 or Q8_K");
    const int64_t xb = b * 256 + lane * 8;
    float v[8];
    float amax = 0.0f, max = 0.0f;
    int at = 256;
    for (int k = 0; k < 8; ++k) {
      v[k] = qref::finite_or_zero(act_input(x, u, limit, xb + k));
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
    auto* out = reinterpret_cast<BlockQ8_K*>(dst);
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
}

// --- staged runs of one-lane blocks -------------------------------------------------------------------
//
// A weight type with one lane per block (Q8_0, MXFP4, the ROCm FP4 types) read in place costs each lane
// one load per 2 bytes of its block (Q8_0: 17 loads of 16 bits, the blocks are only 2-byte aligned),
// so a warp's loads, not the bandwidth, limit the product. Instead a warp copies runs of 32 blocks (a
// whole number of 16-byte words: 1088 bytes for Q8_0) with 16-byte streaming loads into its own
// shared-memory stage, up to kRuns runs at a time (4 in product_kernel: stage_runs; the decode forms keep
// a ring of runs in flight instead: ring_fold), and lane l then reads block l of each run there. Same
// blocks, same block_dot, same order of the lane partials: the same bits.

template <typename Ops>
constexpr bool stageable() {
  return Ops::kLanes == 1 && (32 * Ops::kBlockBytes) % 16 == 0;
}

// Stage bytes per warp for Ops (kRuns runs of 32 blocks).
template <typename Ops, int kRuns>
constexpr int stage_bytes() {
  return kRuns * 32 * Ops::kBlockBytes;
}

// st[r·32·kBlockBytes, …) = run r (32 blocks at run(r), 16-byte aligned) for r < runs ≤ kRuns, by the
// lanes' 16-byte streaming loads, once the warp's earlier reads of st are complete. Every lane calls it.
template <typename Ops, int kRuns, typename RunPtr>
__device__ __forceinline__ void stage_runs(uint8_t* st, RunPtr run, int runs, int lane) {
  constexpr int kWords = 32 * Ops::kBlockBytes / 16, kPerLane = (kRuns * kWords + 31) / 32;
  uint4 v[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int q = lane + 32 * i, r = q / kWords;
    if (r < runs) v[i] = __ldcs(reinterpret_cast<const uint4*>(run(r)) + (q - r * kWords));
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int q = lane + 32 * i;
    if (q / kWords < runs) reinterpret_cast<uint4*>(st)[q] = v[i];
  }
  __syncwarp();
}

// A warp's ring of kRing run slots in shared memory (ring_bytes<Ops, kRing>(), 16-byte aligned), filled
// by cp.async: no registers hold the loads in flight, so kRing − 1 runs are in flight per warp while one
// is folded (a register double buffer held one chunk, and for rows of one Q8_0 run a chunk was ~1 KB).
// The warp's runs come from next_run() in order (the caller's counters); ring_start issues the first
// kRing − 1 (weights only: allowed before wait_for_producer), ring_fold then, for i < n, issues run
// i + kRing − 1, waits for run i and calls fold(run i's slot). The folds see the same bytes at the same
// offsets as a stage: the same bits. Every lane calls both.
template <typename Ops, int kRing>
constexpr int ring_bytes() {
  return kRing * 32 * Ops::kBlockBytes;
}

template <typename Ops>
__device__ __forceinline__ void ring_issue(uint8_t* slot, const uint8_t* run, int lane) {
  constexpr int kWords = 32 * Ops::kBlockBytes / 16;
#pragma unroll
  for (int k = 0; k < (kWords + 31) / 32; ++k) {
    const int q = lane + 32 * k;
    if (q < kWords) preload::cp_async16(slot + 16 * q, run + 16 * q);
  }
}

template <typename Ops, int kRing, typename NextRun>
__device__ __forceinline__ void ring_start(uint8_t* ring, int n, NextRun& next_run, int lane) {
  static_assert(stageable<Ops>() && kRing >= 2, "whole 16-byte runs; one slot folded, the others in flight");
#pragma unroll
  for (int i = 0; i < kRing - 1; ++i) {
    if (i < n) ring_issue<Ops>(ring + i * (32 * Ops::kBlockBytes), next_run(), lane);
    preload::cp_async_commit();  // one group per run (empty past n): ring_fold counts on it
  }
}

template <typename Ops, int kRing, typename NextRun, typename Fold>
__device__ __forceinline__ void ring_fold(uint8_t* ring, int n, NextRun& next_run, Fold&& fold, int lane) {
  constexpr int kRunBytes = 32 * Ops::kBlockBytes;
  int slot = 0;
  for (int i = 0; i < n; ++i) {
    const int refill = slot == 0 ? kRing - 1 : slot - 1;  // (i + kRing − 1) % kRing: run i − 1's slot
    __syncwarp();                                        // every lane's reads of run i − 1 are done
    if (i + kRing - 1 < n) ring_issue<Ops>(ring + refill * kRunBytes, next_run(), lane);
    preload::cp_async_commit();
    preload::cp_async_wait_group<kRing - 1>();  // groups 0 … i (runs ≤ i) of this lane have landed
    __syncwarp();                               // … and of every lane
    fold(ring + slot * kRunBytes);
    slot = slot + 1 == kRing ? 0 : slot + 1;
  }
}

// matmul_decode.cu: launches the decode form that enqueue_product (matmul.cu) would pick for `a`
// before its general product_kernel — whole-row / long-row for one row of float weights, routed for
// the K/IQ types' expert pairs, split for few output rows of one quantized activation row — and
// returns true (also when it recorded an error instead of launching); false when none applies (or
// the type has no device kernels), so that the caller launches product_kernel. `grid` is the general
// product's grid (the routed form uses it as is).
bool enqueue_decode_product(CudaBackend& be, const ProductArgs& a, dim3 grid);

// matmul_mma.cu: launches the tensor-core form for `a` (Q8_0 weights, at least 64 activation rows, no
// expert ids; the same bits) and returns true, or false when it does not apply.
bool enqueue_mma_product(CudaBackend& be, const ProductArgs& a);

// matmul_float.cu: launches the register-tile form for `a` (F32 / F16 / BF16 weights, at least 16
// activation rows, rows of a multiple of 128 columns, 16-byte aligned, no expert ids; the same bits) and
// returns true, or false when it does not apply.
bool enqueue_float_tile_product(CudaBackend& be, const ProductArgs& a);

// Up to kWholeRowJobs float-weight products of one activation row (the same act, in and type; each
// one the whole-row form would take) as one launch: the number of jobs launched (all of them), or 0
// when they do not qualify and the caller enqueues them one by one. Same bits per job.
constexpr int kWholeRowJobs = 8;
struct WholeRowJobs {
  const void* act = nullptr;
  int64_t in = 0;
  int n_jobs = 0;
  int rows_per_cta = 1;                    // R: CTA b holds rows b·R … b·R + R − 1 of the jobs' rows
  uint32_t begin[kWholeRowJobs + 1] = {};  // row g is row g − begin[j] of job j (begin[n_jobs]: all rows)
  const void* w[kWholeRowJobs] = {};
  int64_t w_row_bytes[kWholeRowJobs] = {};
  float* y[kWholeRowJobs] = {};
};
int enqueue_whole_row_products(CudaBackend& be, std::span<const ProductArgs> jobs);

}  // namespace dsv4::cuda::detail
