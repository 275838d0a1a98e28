// backend/cuda/matmul_float.cu — float-weight (F32 / F16 / BF16) products of many activation rows
// (prefill chunks) by register tiles, with the bits of numerics/dot.h's order for every element.
//
// The order. Element (o, r) is 32 fma chains, lane l's over columns l, l + 32, … in ascending order
// (p = fma(w[o][j], x[r][j], p) from +0), then Partials32::reduce's tree (the warp's shuffle-down
// 16 … 1). A chain depends only on its own columns, so a lane may run the chains of several elements
// side by side: here each lane runs 4 weight rows × 16 activation rows = 64 chains, and every column it
// loads feeds 4 or 16 fmas (the general product_kernel runs 8 chains per lane and reads both operands
// from shared memory once per fma).
//
// Layout. A CTA of 8 warps computes 32 weight rows (4 per warp) × 16 activation rows. The columns go
// in chunks of 128 through shared memory, two buffers: the next chunk's loads are issued into registers
// before the current chunk's fmas and stored after them (one barrier per chunk). A chunk is stored
// permuted, column j at [j % 32][j / 32], so lane l's 4 columns of the chunk (l, l + 32, l + 64, l + 96,
// in its chain's order) are one 16-byte read per row. Weights are widened to float when stored.
// Bank layout: a staged row is kFPitch = 144 floats, float4 slot s at float 4s + 4·(s / 8) (a 16-byte gap
// after every 8 slots; rows 16 banks apart). The stores write one float at a time: a warp's 32 lanes hold
// two weight rows' 16-byte loads (F16: lanes 0-15 columns 8q … 8q + 7 of one row) or one activation row's,
// and without the gaps a store's lanes hit 4 (weights) or 8 (activations) banks: 8- and 4-way conflicts,
// ~1,300 shared-memory wavefronts per CTA and chunk against 512 cycles of fmas. With them every store is
// one wavefront and the reads (a row's 32 slots, 16 bytes each) stay at four.
// Applies to rows of a multiple of 128 columns, 16-byte aligned rows and activations, no expert ids;
// the rest goes to product_kernel.
#include <cstdint>

#include "backend/cuda/matmul.cuh"
#include "backend/cuda/matmul_types.cuh"
#include "numerics/hd.h"

namespace dsv4::cuda {

namespace {

using namespace detail;

constexpr int kFWarps = 8;
constexpr int kFThreads = 32 * kFWarps;
constexpr int kFRowsPerWarp = 4;
constexpr int kFRows = kFWarps * kFRowsPerWarp;  // weight rows per CTA
constexpr int kFCols = 16;                       // activation rows per CTA
constexpr int kFChunk = 128;                     // columns per shared-memory chunk
constexpr int64_t kFMinRows = 16;                // activation rows from which this form is used
constexpr int64_t kFMaxGridY = 65535;

constexpr int kFPitch = 144;  // floats per staged row: 32 float4 slots and a 4-float gap after every 8
static_assert(kFPitch % 32 == 16 && kFPitch >= 32 * 4 + 4 * 4, "rows 16 banks apart; the gaps fit");
struct FloatStage {
  float x[kFCols * kFPitch];  // row r's slot l = columns l, l + 32, l + 64, l + 96 of the chunk
  float w[kFRows * kFPitch];
};
constexpr int kFSmemBytes = 2 * static_cast<int>(sizeof(FloatStage));  // dynamic: over the 48 KiB static limit

// Float index of slot l of a staged row.
__device__ __forceinline__ int slot_at(int l) { return 4 * l + 4 * (l >> 3); }
// Column c of a chunk in staged row `row` (its float index).
__device__ __forceinline__ float& slot(float* rows, int row, int c) {
  return rows[row * kFPitch + slot_at(c & 31) + (c >> 5)];
}
// Slot l of staged row `row` as one 16-byte read.
__device__ __forceinline__ float4 slot4(const float* rows, int row, int l) {
  return *reinterpret_cast<const float4*>(rows + row * kFPitch + slot_at(l));
}

template <typename Ops>
__global__ void __launch_bounds__(kFThreads, 2) product_float_tile_kernel(ProductArgs a) {
  extern __shared__ __align__(16) unsigned char float_smem[];
  FloatStage* stage = reinterpret_cast<FloatStage*>(float_smem);
  prefetch_weight_rows(a, blockIdx.x * static_cast<int64_t>(kFRows), kFRows);
  wait_for_producer();
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kFRows;
  const uint8_t* w = static_cast<const uint8_t*>(a.w);
  const int64_t group = a.act_group_rows > 0 ? (o0 / a.act_group_rows) * a.act_group_bytes : 0;
  const int64_t last_row = a.out - 1;
  constexpr int kWLoads = kFRows * kFChunk / Ops::kVec / kFThreads;  // 16-byte weight loads per thread
  constexpr int kXLoads = kFCols * kFChunk / 4 / kFThreads;           // 16-byte activation loads per thread
  static_assert(kWLoads >= 1 && kXLoads >= 1, "the chunk's loads divide among the threads");
  constexpr int kWPerRow = kFChunk / Ops::kVec;  // 16-byte loads per weight row of a chunk

  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * kFCols; r0 < a.rows;
       r0 += static_cast<int64_t>(gridDim.y) * kFCols) {
    uint4 wv[kWLoads];
    float4 xv[kXLoads];
    const auto load = [&](int64_t c0) {
#pragma unroll
      for (int k = 0; k < kWLoads; ++k) {
        const int item = tid + k * kFThreads, row = item / kWPerRow, q = item % kWPerRow;
        const int64_t o = o0 + row < last_row ? o0 + row : last_row;
        wv[k] = __ldg(reinterpret_cast<const uint4*>(w + o * a.w_row_bytes + (c0 + q * Ops::kVec) * Ops::kBlockBytes));
      }
#pragma unroll
      for (int k = 0; k < kXLoads; ++k) {
        const int item = tid + k * kFThreads, t = item / (kFChunk / 4), q = item % (kFChunk / 4);
        const int64_t r = r0 + t < a.rows ? r0 + t : a.rows - 1;
        const float* x = reinterpret_cast<const float*>(static_cast<const uint8_t*>(a.act) + group +
                                                        (r / a.act_div) * a.act_stride);
        xv[k] = __ldg(reinterpret_cast<const float4*>(x + c0) + q);
      }
    };
    const auto store = [&](FloatStage& s) {
#pragma unroll
      for (int k = 0; k < kWLoads; ++k) {
        const int item = tid + k * kFThreads, row = item / kWPerRow, q = item % kWPerRow;
        float v[Ops::kVec];
        Ops::unpack(wv[k], v);
#pragma unroll
        for (int u = 0; u < Ops::kVec; ++u) slot(s.w, row, q * Ops::kVec + u) = v[u];
      }
#pragma unroll
      for (int k = 0; k < kXLoads; ++k) {
        const int item = tid + k * kFThreads, t = item / (kFChunk / 4), q = item % (kFChunk / 4);
        slot(s.x, t, 4 * q + 0) = xv[k].x;
        slot(s.x, t, 4 * q + 1) = xv[k].y;
        slot(s.x, t, 4 * q + 2) = xv[k].z;
        slot(s.x, t, 4 * q + 3) = xv[k].w;
      }
    };

    float p[kFRowsPerWarp][kFCols];
#pragma unroll
    for (int i = 0; i < kFRowsPerWarp; ++i)
#pragma unroll
      for (int t = 0; t < kFCols; ++t) p[i][t] = 0.0f;

    __syncthreads();  // the previous row tile's last chunk is read before the buffers are refilled
    load(0);
    store(stage[0]);
    __syncthreads();
    int buf = 0;
    for (int64_t c0 = 0; c0 < a.in; c0 += kFChunk) {
      const bool more = c0 + kFChunk < a.in;
      if (more) load(c0 + kFChunk);
      const FloatStage& s = stage[buf];
      float4 wr[kFRowsPerWarp];
#pragma unroll
      for (int i = 0; i < kFRowsPerWarp; ++i) wr[i] = slot4(s.w, kFRowsPerWarp * warp + i, lane);
#pragma unroll
      for (int t = 0; t < kFCols; ++t) {
        const float4 xr = slot4(s.x, t, lane);
#pragma unroll
        for (int i = 0; i < kFRowsPerWarp; ++i) {  // columns lane, +32, +64, +96: the chain's order
          p[i][t] = hd::fma(wr[i].x, xr.x, p[i][t]);
          p[i][t] = hd::fma(wr[i].y, xr.y, p[i][t]);
          p[i][t] = hd::fma(wr[i].z, xr.z, p[i][t]);
          p[i][t] = hd::fma(wr[i].w, xr.w, p[i][t]);
        }
      }
      if (more) store(stage[buf ^ 1]);
      __syncthreads();
      buf ^= 1;
    }

#pragma unroll
    for (int i = 0; i < kFRowsPerWarp; ++i) {
      const int64_t o = o0 + kFRowsPerWarp * warp + i;
#pragma unroll
      for (int t = 0; t < kFCols; ++t) {
        float v = p[i][t];
        for (int s = 16; s >= 1; s >>= 1) v = v + __shfl_down_sync(0xffffffffu, v, s);
        if (lane == 0 && o < a.out && r0 + t < a.rows) a.y[(r0 + t) * a.y_stride + o] = v;
      }
    }
  }
}

}  // namespace

namespace detail {

bool enqueue_float_tile_product(CudaBackend& be, const ProductArgs& p) {
  if (!be.forms().float_tiles || act_format(p.type) != ActFormat::kF32 || p.ids != nullptr || p.hc_out != nullptr ||
      p.w_z1 != nullptr || p.rows < kFMinRows || p.in <= 0 || p.in % kFChunk != 0)
    return false;
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (!aligned(p.w) || p.w_row_bytes % 16 != 0 || !aligned(p.act) || p.act_stride % 16 != 0 ||
      p.act_group_bytes % 16 != 0 || (p.act_group_rows > 0 && p.act_group_rows % kFRows != 0) || p.act_div <= 0)
    return false;
  const int64_t col_tiles = (p.rows + kFCols - 1) / kFCols;
  const dim3 grid(static_cast<unsigned>(blocks_for(p.out, kFRows)),
                  static_cast<unsigned>(col_tiles < kFMaxGridY ? col_tiles : kFMaxGridY), 1u);
  bool launched = false;
  dispatch_type(p.type, [&](auto ops) {
    using Ops = decltype(ops);
    if constexpr (Ops::kLanes == 0) {
      static const cudaError_t attr = cudaFuncSetAttribute(product_float_tile_kernel<Ops>,
                                                           cudaFuncAttributeMaxDynamicSharedMemorySize, kFSmemBytes);
      launched = true;
      if (attr != cudaSuccess) return be.check(attr, "cudaFuncSetAttribute (product_float_tile_kernel)");
      be.launch("product_float_tile_kernel", product_float_tile_kernel<Ops>, grid, kFThreads, kFSmemBytes, p);
    }
  });
  return launched;
}

}  // namespace detail

}  // namespace dsv4::cuda
