// backend/cuda/matmul.cuh — the weight-type side of the CUDA backend, shared by matmul.cu (embed,
// matmul, matmul_batch) and moe.cu (route, moe): which types have device kernels, their activation
// formats, and host-side launchers for activation quantization and for weight × activation products.
//
// Numerics: every product element is one warp whose lane l holds partial[l] of numerics/accumulate.h
// and folds into it exactly the items the scalar vec_dot (numerics/quant_ref.h) puts there, in the
// same order (float weights: the fma of elements l, l+32, …; block types: the values v_b of blocks
// b ≡ l mod 32, each v_b from the exact integer sums of one lane or of four lanes); the warp's
// shuffle-down tree is Partials32::reduce. Activations are quantized with the types' quantizers (one
// warp per block). The CPU backend's bits for any number of rows, experts or batch layout.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cuda/cuda_backend.cuh"
#include "base/status.h"
#include "base/tensor_type.h"

namespace dsv4::cuda {

// The activation formats of backend/cpu/quant.h ActFormat (same layouts: numerics/blocks.h).
enum class ActFormat {
  kF32,   // plain float rows, read in place (F32 / F16 / BF16 weights)
  kQ8_0,  // BlockQ8_0Act per 32 (Q8_0, MXFP4)
  kQ8_K,  // BlockQ8_K per 256 (Q2_K, Q4_K, IQ2_XXS)
};

// Whether matmul / moe (products) have device kernels for weights of `type`.
bool product_supported(TensorType type);
// Whether embed has a device dequantizer for tables of `type` (the product types and I32).
bool embed_supported(TensorType type);
// The activation format of a product type (kF32 for unsupported types).
ActFormat act_format(TensorType type);
// Elements per activation block (1, 32, 256).
int64_t act_block(ActFormat format);
// Bytes of one activation row of n elements (n a multiple of act_block; kF32: n·4).
int64_t act_row_bytes(ActFormat format, int64_t n);
// The CPU's product checks (matmul.cpp check_shape): a type with kernels, n > 0, n a multiple of the
// weight block and of the activation block.
Status check_product(TensorType type, int64_t n);

// Quantizes `rows` activation rows of n floats (row r at x + r·x_stride floats) into dst (row r at
// dst + r·act_row_bytes(format, n)); one warp per activation block. format != kF32.
void enqueue_act_quant(CudaBackend& be, ActFormat format, const float* x, int64_t x_stride, int64_t rows, int64_t n,
                       void* dst);
// Producer side of the backend's twins (cuda_backend.cuh QuantTwin): replaces them with one per distinct
// quantized format among `consumers` (at most kMaxTwins) for the float rows y [rows][n], scratch grown for
// the reserved step; only formats whose block divides `unit` (the producer quantizes whole blocks of its
// units of columns). Returns how many; the producer's kernel must then write each twin's rows (format,
// act) in the same launch sequence, inside a TwinScope. 0 when no consumer reads y quantized.
int plan_quant_twins(CudaBackend& be, const backend::Tensor& y, const backend::MatmulConsumers& consumers, int64_t unit);
// Consumer side: the twin of x (the same rows, length and stride) in format f, or null.
const CudaBackend::QuantTwin* find_quant_twin(const CudaBackend& be, const backend::Tensor& x, ActFormat f);

// One quantization as data: rows g (n floats, x_stride apart) or, with u set, h = swiglu_clamp(g, u,
// limit) (numerics/det_math.h) without storing h — each element the float swiglu_clamp returns, so the
// bits of storing h and quantizing it (moe's step 3) — into dst (act_row_bytes(format, n) per row).
struct ActQuantJob {
  ActFormat format = ActFormat::kF32;  // kF32: nothing to do
  const float* g = nullptr;
  const float* u = nullptr;
  float limit = 0;
  int64_t x_stride = 0, rows = 0, n = 0;
  void* dst = nullptr;
};
// The jobs two per launch (independent rows: the same bits as one launch each).
void enqueue_act_quant_jobs(CudaBackend& be, std::span<const ActQuantJob> jobs);

// y[r·y_stride + o] = vec_dot(weight row o of product r, activation row r / act_div) for r < rows,
// o < out. Weight row o of product r is at w + e(r)·expert_bytes + o·w_row_bytes, where
// e(r) = ids[(r / id_k)·id_stride + r % id_k] when ids is set (moe's pairs: r = t·K + k) and 0
// otherwise; an id outside [0, n_expert) makes the product's row NaN (no host sync to report it).
// Activation row j is at act + j·act_stride bytes: the quantized rows, or for kF32 the F32 rows.
struct ProductArgs {
  TensorType type = TensorType::kF32;
  const void* w = nullptr;
  int64_t w_row_bytes = 0;
  int64_t in = 0, out = 0;
  const int32_t* ids = nullptr;
  int64_t id_k = 1, id_stride = 0, n_expert = 1, expert_bytes = 0;
  const void* act = nullptr;
  int64_t act_stride = 0;  // bytes
  int64_t act_div = 1;
  // Grouped products (act_group_rows > 0): output row o reads its activation row
  // act_group_bytes · (o / act_group_rows) bytes further (the grouped output projection as one product).
  int64_t act_group_rows = 0, act_group_bytes = 0;
  // A second product of the same shape, type, activations and expert ids in the same launch (moe's gate
  // and up): grid z = 1 reads weight w_z1 and writes y_z1 (quantized weights only; else two launches).
  const void* w_z1 = nullptr;
  float* y_z1 = nullptr;
  int64_t rows = 0;
  float* y = nullptr;
  int64_t y_stride = 0;  // floats
  // One-lane block types may stage runs of 32 blocks through shared memory (set by enqueue_product from
  // CudaBackend::forms(); the same blocks in the same order either way).
  bool staged_loads = true;
  // hc_out set (one activation row, the split form; matmul_hc_post): where y[o] is written, also
  // hc_out[j·out + o] = hc_post[j]·y[o], then + hc_comb[i·hc + j]·hc_X[i·out + o] (fma, i ascending) for
  // j < hc — hc_post_kernel's arithmetic on the product's value.
  const float* hc_X = nullptr;
  const float* hc_post = nullptr;
  const float* hc_comb = nullptr;
  float* hc_out = nullptr;
  int64_t hc = 0;
};
void enqueue_product(CudaBackend& be, const ProductArgs& a);

// moe's routed pairs grouped by expert on the device (moe.cu group_pairs_kernel): order lists the pair
// indices expert by expert; tile i < *n_tiles is `count` (≤ kGroupTile) entries of order from `first`,
// all of expert `expert` (−1: ids outside [0, n_expert), whose rows are NaN). max_tiles bounds *n_tiles
// (the grid is launched for it: the host never learns the routing).
constexpr int kGroupTile = 32;
struct PairTile {
  int32_t expert = 0, first = 0, count = 0, pad = 0;
};
struct GroupedPairs {
  const int32_t* order = nullptr;
  const PairTile* tiles = nullptr;
  const int32_t* n_tiles = nullptr;
  int64_t max_tiles = 0;
};
// Whether the grouped tensor-core form (moe_mma.cu) takes routed weights of `type` with rows of `in`.
bool grouped_product_supported(TensorType type, int64_t in);
// The routed product `a` (ids set) over the grouped pairs, on the tensor cores: the same bits as
// enqueue_product(a). Returns false (nothing launched) when it does not apply (type, row length,
// alignment, more tiles than a grid holds).
bool enqueue_grouped_product(CudaBackend& be, const ProductArgs& a, const GroupedPairs& g);

// dst row r (n floats at dst + r·n) = row r of a device weight of `type` (rows row_bytes apart)
// dequantized as the CPU's dequantize_row (quant_ref.h's block dequantizers; I32 converted to float);
// one thread per weight block. For load_weight_f32 of quantized parameters.
void enqueue_dequantize_rows(CudaBackend& be, TensorType type, const void* src, int64_t row_bytes, int64_t n,
                             int64_t rows, float* dst);

// Rounds a byte count up to 256 (carving several regions out of one scratch allocation).
inline int64_t align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace dsv4::cuda
