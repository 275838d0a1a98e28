// tests/cuda/quant_ref_device_bits.cu — runs numerics/quant_ref.h on a GPU and compares every result
// with the same functions on the host, bit for bit (NaN counts as equal to NaN): the activation
// quantizers, every type's row dot and one-block dequantizer. Needs a GPU, so it is not a ctest; build
// and run by hand:
// (ROCmFPx types 100-107 included.)
//   nvcc -std=c++20 -arch=sm_90 -fmad=false -Isrc tests/cuda/quant_ref_device_bits.cu -o qref_bits && ./qref_bits
// Exit status 0 = identical everywhere.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "numerics/quant_ref.h"

namespace q = dsv4::qref;

namespace {

constexpr int kRows = 64;
constexpr int64_t kN = 8192;  // 256 Q8_0 blocks / 32 super-blocks per row: 8 / 1 rounds of the 32 partials

enum Kind { kF32, kF16, kBF16, kQ8_0, kQ2_K, kQ4_K, kIQ2_XXS, kMXFP4, kR100, kR101, kR102, kR103, kR104, kR107, kKinds };
const char* const kNames[kKinds] = {"F32", "F16", "BF16", "Q8_0", "Q2_K", "Q4_K", "IQ2_XXS", "MXFP4",
                                    "FPX100", "FPX101", "FPX102", "FPX103", "FPX104", "FPX107"};
// Bytes of one row of kN elements.
int64_t row_bytes(int k) {
  switch (k) {
    case kF32: return kN * 4;
    case kF16: case kBF16: return kN * 2;
    case kQ8_0: return kN / 32 * sizeof(dsv4::BlockQ8_0);
    case kQ2_K: return kN / 256 * sizeof(dsv4::BlockQ2_K);
    case kQ4_K: return kN / 256 * sizeof(dsv4::BlockQ4_K);
    case kIQ2_XXS: return kN / 256 * sizeof(dsv4::BlockIq2Xxs);
    case kMXFP4: return kN / 32 * sizeof(dsv4::BlockMxfp4);
    case kR100: return kN / 32 * q::rocmfpx_block_bytes<100>();
    case kR101: return kN / 32 * q::rocmfpx_block_bytes<101>();
    case kR102: return kN / 32 * q::rocmfpx_block_bytes<102>();
    case kR103: return kN / 32 * q::rocmfpx_block_bytes<103>();
    case kR104: return kN / 32 * q::rocmfpx_block_bytes<104>();
    default: return kN / 32 * q::rocmfpx_block_bytes<107>();
  }
}
int block_elems(int k) { return k == kQ2_K || k == kQ4_K || k == kIQ2_XXS ? 256 : 32; }
int64_t block_bytes(int k) { return row_bytes(k) / (kN / block_elems(k)); }

__host__ __device__ float row_dot(int k, const uint8_t* w, const float* xf, const dsv4::BlockQ8_0Act* a0,
                                  const dsv4::BlockQ8_K* ak, const q::Iq2xxsTables& t) {
  switch (k) {
    case kF32: return q::vec_dot_f32(kN, w, xf);
    case kF16: return q::vec_dot_f16(kN, w, xf);
    case kBF16: return q::vec_dot_bf16(kN, w, xf);
    case kQ8_0: return q::vec_dot_q8_0(kN, reinterpret_cast<const dsv4::BlockQ8_0*>(w), a0);
    case kQ2_K: return q::vec_dot_q2_k(kN, reinterpret_cast<const dsv4::BlockQ2_K*>(w), ak);
    case kQ4_K: return q::vec_dot_q4_k(kN, reinterpret_cast<const dsv4::BlockQ4_K*>(w), ak);
    case kIQ2_XXS: return q::vec_dot_iq2_xxs(kN, reinterpret_cast<const dsv4::BlockIq2Xxs*>(w), ak, t);
    case kMXFP4: return q::vec_dot_mxfp4(kN, reinterpret_cast<const dsv4::BlockMxfp4*>(w), a0);
    case kR100: return q::vec_dot_rocmfpx<100>(kN, w, a0);
    case kR101: return q::vec_dot_rocmfpx<101>(kN, w, a0);
    case kR102: return q::vec_dot_rocmfpx<102>(kN, w, a0);
    case kR103: return q::vec_dot_rocmfpx<103>(kN, w, a0);
    case kR104: return q::vec_dot_rocmfpx<104>(kN, w, a0);
    default: return q::vec_dot_rocmfpx<107>(kN, w, a0);
  }
}

// out: block_elems(k) floats; for float types the block is 32 elements loaded one by one.
__host__ __device__ void dequant_block(int k, const uint8_t* blk, float* out, const q::Iq2xxsTables& t) {
  switch (k) {
    case kF32: for (int i = 0; i < 32; ++i) out[i] = q::load_f32(blk, i); break;
    case kF16: for (int i = 0; i < 32; ++i) out[i] = q::load_f16(blk, i); break;
    case kBF16: for (int i = 0; i < 32; ++i) out[i] = q::load_bf16(blk, i); break;
    case kQ8_0: q::dequantize_block_q8_0(reinterpret_cast<const dsv4::BlockQ8_0*>(blk), out); break;
    case kQ2_K: q::dequantize_block_q2_k(reinterpret_cast<const dsv4::BlockQ2_K*>(blk), out); break;
    case kQ4_K: q::dequantize_block_q4_k(reinterpret_cast<const dsv4::BlockQ4_K*>(blk), out); break;
    case kIQ2_XXS: q::dequantize_block_iq2_xxs(reinterpret_cast<const dsv4::BlockIq2Xxs*>(blk), out, t); break;
    case kMXFP4: q::dequantize_block_mxfp4(reinterpret_cast<const dsv4::BlockMxfp4*>(blk), out); break;
    case kR100: q::dequantize_block_rocmfpx<100>(blk, out); break;
    case kR101: q::dequantize_block_rocmfpx<101>(blk, out); break;
    case kR102: q::dequantize_block_rocmfpx<102>(blk, out); break;
    case kR103: q::dequantize_block_rocmfpx<103>(blk, out); break;
    case kR104: q::dequantize_block_rocmfpx<104>(blk, out); break;
    default: q::dequantize_block_rocmfpx<107>(blk, out); break;
  }
}

__constant__ uint64_t d_grid[256];
__constant__ uint8_t d_signs[128];

__global__ void act_kernel(const float* x, dsv4::BlockQ8_0Act* a0, dsv4::BlockQ8_K* ak, int64_t n) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b < n / 32) q::quantize_act_q8_0_block(x + 32 * b, a0 + b);
  if (b < n / 256) q::quantize_act_q8_k_block(x + 256 * b, ak + b);
}

__global__ void dot_kernel(int k, const uint8_t* w, int64_t rb, const float* xf, const dsv4::BlockQ8_0Act* a0,
                           const dsv4::BlockQ8_K* ak, float* out) {
  const int r = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (r >= kRows) return;
  const q::Iq2xxsTables t = {d_grid, d_signs};
  out[r] = row_dot(k, w + r * rb, xf, a0, ak, t);
}

__global__ void dequant_kernel(int k, const uint8_t* w, int64_t bb, int64_t nblocks, float* out) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= nblocks) return;
  const q::Iq2xxsTables t = {d_grid, d_signs};
  const int be = k == kQ2_K || k == kQ4_K || k == kIQ2_XXS ? 256 : 32;
  dequant_block(k, w + b * bb, out + b * be, t);
}

bool same(float a, float b) {
  if (a != a && b != b) return true;
  return dsv4::hd::f32_bits(a) == dsv4::hd::f32_bits(b);
}

int g_fail = 0;
#define CK(x)                                                                    \
  do {                                                                           \
    cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                     \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                              \
    }                                                                            \
  } while (0)

template <typename T>
T* to_device(const void* p, size_t bytes) {
  void* d = nullptr;
  CK(cudaMalloc(&d, bytes));
  CK(cudaMemcpy(d, p, bytes, cudaMemcpyHostToDevice));
  return static_cast<T*>(d);
}

}  // namespace

int main() {
  CK(cudaMemcpyToSymbol(d_grid, q::kIq2xxsGrid, sizeof(q::kIq2xxsGrid)));
  CK(cudaMemcpyToSymbol(d_signs, q::kIq2xxsSigns, sizeof(q::kIq2xxsSigns)));
  std::mt19937 rng(12345);
  std::normal_distribution<float> normal(0.0f, 1.0f);

  // Activations: several sets (ordinary, ties, specials, subnormal block maxima).
  for (int set = 0; set < 4; ++set) {
    std::vector<float> x(kN);
    for (int64_t i = 0; i < kN; ++i) x[i] = normal(rng) * std::ldexp(1.0f, static_cast<int>(i / 256) - 16);
    if (set == 1) for (auto& v : x) v = static_cast<float>(static_cast<int>(rng() % 255) - 127) * 0.5f;
    if (set == 2) for (int64_t i = 0; i < kN; i += 97) x[i] = (i / 97) % 3 == 0 ? NAN : ((i / 97) % 3 == 1 ? INFINITY : -INFINITY);
    if (set == 3)  // subnormal block maxima: d = amax / 127 subnormal, 1 / d = inf (0 * inf = NaN -> -127)
      for (int64_t i = 0; i < kN; ++i)
        x[i] = (i % 7 == 0) ? ((i / 7) % 2 ? 1e-38f : -2e-43f) * static_cast<float>(i % 5) : 0.0f;

    std::vector<dsv4::BlockQ8_0Act> h0(kN / 32);
    std::vector<dsv4::BlockQ8_K> hk(kN / 256);
    for (int64_t b = 0; b < kN / 32; ++b) q::quantize_act_q8_0_block(x.data() + 32 * b, &h0[b]);
    for (int64_t b = 0; b < kN / 256; ++b) q::quantize_act_q8_k_block(x.data() + 256 * b, &hk[b]);
    float* dx = to_device<float>(x.data(), kN * 4);
    dsv4::BlockQ8_0Act* d0 = nullptr;
    dsv4::BlockQ8_K* dk = nullptr;
    CK(cudaMalloc(&d0, h0.size() * sizeof(h0[0])));
    CK(cudaMalloc(&dk, hk.size() * sizeof(hk[0])));
    act_kernel<<<(kN / 32 + 127) / 128, 128>>>(dx, d0, dk, kN);
    CK(cudaDeviceSynchronize());
    std::vector<dsv4::BlockQ8_0Act> g0(h0.size());
    std::vector<dsv4::BlockQ8_K> gk(hk.size());
    CK(cudaMemcpy(g0.data(), d0, g0.size() * sizeof(g0[0]), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gk.data(), dk, gk.size() * sizeof(gk[0]), cudaMemcpyDeviceToHost));
    const bool a0ok = std::memcmp(g0.data(), h0.data(), g0.size() * sizeof(g0[0])) == 0;
    const bool akok = std::memcmp(gk.data(), hk.data(), gk.size() * sizeof(gk[0])) == 0;
    std::printf("act set %d: Q8_0Act %s, Q8_K %s\n", set, a0ok ? "identical" : "DIFFERENT", akok ? "identical" : "DIFFERENT");
    g_fail += !a0ok + !akok;

    // Row dots for every type on random weights (f16 scales mostly sane, some random bits).
    for (int k = 0; k < kKinds; ++k) {
      const int64_t rb = row_bytes(k), bb = block_bytes(k);
      std::vector<uint8_t> w(rb * kRows);
      for (auto& byte : w) byte = static_cast<uint8_t>(rng());
      if (k == kF32)
        for (int64_t i = 0; i < kN * kRows; ++i) {
          const float v = normal(rng);
          std::memcpy(&w[4 * i], &v, 4);
        }
      if (k == kQ8_0 || k == kQ2_K || k == kQ4_K || k == kIQ2_XXS) {  // f16 d (and dmin) at the block offsets
        const int64_t off = k == kQ2_K ? 80 : 0;
        for (int64_t b = 0; b < rb * kRows / bb; ++b) {
          if (rng() % 16 == 0) continue;  // keep random bits (inf/NaN/subnormal scales) now and then
          const uint16_t d = dsv4::f32_to_f16(std::fabs(normal(rng)) * 0.01f);
          const uint16_t m = dsv4::f32_to_f16(std::fabs(normal(rng)) * 0.01f);
          std::memcpy(&w[b * bb + off], &d, 2);
          if (k == kQ2_K || k == kQ4_K) std::memcpy(&w[b * bb + off + 2], &m, 2);
        }
      }
      if (k == kMXFP4)
        for (int64_t b = 0; b < rb * kRows / bb; ++b)
          if (rng() % 8 != 0) w[b * bb] = static_cast<uint8_t>(110 + rng() % 30);
      if (k >= kR100)  // scale bytes: mostly valid (<= 0x7E), some invalid (decode to 0)
        for (int64_t b = 0; b < rb * kRows / bb; ++b)
          for (int64_t j = (k == kR101 || k == kR103) ? bb - 1 : bb - 2; j < bb; ++j)
            if (rng() % 8 != 0) w[b * bb + j] = static_cast<uint8_t>(rng() % 0x7f);
      uint8_t* dw = to_device<uint8_t>(w.data(), w.size());
      float* dout = nullptr;
      CK(cudaMalloc(&dout, kRows * 4));
      dot_kernel<<<1, kRows>>>(k, dw, rb, dx, d0, dk, dout);
      CK(cudaDeviceSynchronize());
      std::vector<float> got(kRows);
      CK(cudaMemcpy(got.data(), dout, kRows * 4, cudaMemcpyDeviceToHost));
      int bad = 0;
      for (int r = 0; r < kRows; ++r) {
        const float want = row_dot(k, w.data() + r * rb, x.data(), h0.data(), hk.data(), q::kIq2xxsHostTables);
        if (!same(got[r], want)) {
          if (bad < 3) std::printf("  %s row %d: device %a host %a\n", kNames[k], r, got[r], want);
          ++bad;
        }
      }
      // Dequantize every block of the first rows.
      const int64_t nblocks = rb * 4 / bb;
      const int be = (k == kQ2_K || k == kQ4_K || k == kIQ2_XXS) ? 256 : 32;
      float* ddq = nullptr;
      CK(cudaMalloc(&ddq, nblocks * be * 4));
      dequant_kernel<<<(nblocks + 127) / 128, 128>>>(k, dw, bb, nblocks, ddq);
      CK(cudaDeviceSynchronize());
      std::vector<float> gd(nblocks * be), hdq(be);
      CK(cudaMemcpy(gd.data(), ddq, gd.size() * 4, cudaMemcpyDeviceToHost));
      int dbad = 0;
      for (int64_t b = 0; b < nblocks; ++b) {
        dequant_block(k, w.data() + b * bb, hdq.data(), q::kIq2xxsHostTables);
        for (int e = 0; e < be; ++e) dbad += !same(gd[b * be + e], hdq[e]);
      }
      // Float types dequantize 32 elements per 64/128-byte "block" here: only the first 32 are compared.
      std::printf("act set %d %-8s dots %s (%d/%d differ), dequant %s (%d differ)\n", set, kNames[k],
                  bad ? "DIFFERENT" : "identical", bad, kRows, dbad ? "DIFFERENT" : "identical", dbad);
      g_fail += bad + dbad;
      CK(cudaFree(dw));
      CK(cudaFree(dout));
      CK(cudaFree(ddq));
    }
    CK(cudaFree(dx));
    CK(cudaFree(d0));
    CK(cudaFree(dk));
  }
  std::printf(g_fail ? "FAIL\n" : "ALL IDENTICAL\n");
  return g_fail ? 1 : 0;
}
