// backend/backend.h — the seam between the one DS4 forward pass (model/forward.cpp) and the
// machines it runs on. A backend owns every byte the forward pass computes with (weights, session
// state, activations) and implements the op vocabulary below; the CPU backend (backend/cpu) is the
// reference, a CUDA backend is a second implementation of the same interface with the same bits.
//
// Rules every backend follows (docs/architecture.md "Backend seam"):
// - Tensors are descriptors: only the backend that made a tensor dereferences its `data`. The host
//   moves bytes in or out only with upload()/download(); download() is the one host-visible
//   synchronisation and is counted (syncs()).
// - Ops are enqueued in call order and are void: a failure (a type without a kernel, a bad shape)
//   is sticky and end_step() returns the first one. Shapes of every op in a DS4 step depend only on
//   (first position p0, token count n); data-dependent choices (routing, indexer top-k) have fixed
//   output sizes. So a step is a static op sequence a GPU can capture once per (n) and replay.
// - Every op defines the order of its arithmetic below; every backend computes each output element
//   from the same inputs in that order (one canonical order per op, shared numerics in numerics/),
//   so outputs are bit-identical across backends, SIMD levels, thread counts, chunk sizes and batch
//   composition. tests/unit/backend/conformance_test.cpp holds a scalar reference of each op and
//   checks every backend the build has against it with a bound of zero bits. NaN: where the order
//   produces a NaN every backend produces a NaN, but its sign and payload are not part of the
//   contract (IEEE operations, C++ and CUDA do not pin which operand's NaN a result carries).
// - max(m, v) in these comments is std::max's order: a running max that a NaN v never replaces;
//   ReLU(v) = v > 0 ? v : 0 (a NaN counts as 0).
// - Activations are F32 row-major 2-D tensors ([rows][cols]: ne[0] = cols, ne[1] = rows, nb[1] the
//   row stride in bytes, which may exceed ne[0]·4 for a column slice). Index tensors are I32.
// - Weights are 2-D [in, out] (ne[0] = in features, one row per output) or 3-D [in, out, expert]
//   with contiguous rows of their GGUF type.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/tensor_type.h"

namespace dsv4::backend {

class Backend;

// A view of backend-owned bytes: type, up to 4 dims (ne[0] innermost), byte strides nb[].
struct Tensor {
  TensorType type = TensorType::kF32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};
  int64_t nb[4] = {0, 0, 0, 0};  // bytes between consecutive elements (nb[0]; blocks for quants) / rows / ...
  void* data = nullptr;          // opaque: the owning backend's address

  bool valid() const { return data != nullptr; }
  int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
  int64_t row_bytes() const { return tensor_row_bytes(type, ne[0]); }
  bool contiguous_rows() const { return nb[1] == row_bytes(); }
  int64_t bytes() const { return nb[1] * ne[1] * ne[2] * ne[3]; }  // for contiguous tensors

  // Rows [begin, begin + n) of a 2-D tensor (same row stride).
  Tensor rows(int64_t begin, int64_t n) const;
  // Columns [begin, begin + n) of a 2-D F32/I32 tensor (a strided view: row stride unchanged).
  Tensor cols(int64_t begin, int64_t n) const;
  // Expert e of a 3-D weight [in, out, n_expert] as a 2-D weight.
  Tensor expert(int64_t e) const;
  // A 2-D tensor with contiguous rows seen as rows of `cols` elements (e.g. [n][H·d] as [n·H][d]).
  Tensor as_rows(int64_t cols) const {
    Tensor t = *this;
    const int64_t total = ne[0] * rows();
    t.n_dims = 2;
    t.ne[0] = cols;
    t.ne[1] = total / cols;
    t.ne[2] = t.ne[3] = 1;
    t.nb[1] = tensor_row_bytes(type, cols);
    t.nb[2] = t.nb[3] = t.nb[1] * t.ne[1];
    return t;
  }
};

// A 2-D tensor [rows][cols] of `type` with contiguous rows at `data`.
Tensor make_2d(TensorType type, void* data, int64_t cols, int64_t rows);
// Same, with GGUF dims (ne[0..n_dims)) and contiguous rows.
Tensor make_nd(TensorType type, void* data, int n_dims, const int64_t* ne);

// An allocation on a backend; freed by the backend when the Buffer goes away. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* owner, void* data, int64_t bytes) : owner_(owner), data_(data), bytes_(bytes) {}
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  bool valid() const { return data_ != nullptr; }

 private:
  Backend* owner_ = nullptr;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// Carves a list of tensors out of one allocation (the session's activation arena, its state):
// plan every tensor first, then allocate() once and bind() the views.
class ArenaPlan {
 public:
  // Reserves a 2-D [rows][cols] tensor of `type` (256-byte aligned) and returns its slot.
  int add(TensorType type, int64_t cols, int64_t rows);
  int64_t bytes() const { return bytes_; }
  // Allocates the arena on `backend` (zero-filled) and returns the buffer; views are then at(slot).
  Result<Buffer> allocate(Backend& backend);
  Tensor at(const Buffer& arena, int slot) const;

 private:
  struct Slot {
    TensorType type;
    int64_t cols, rows, offset;
  };
  std::vector<Slot> slots_;
  int64_t bytes_ = 0;
};

// What a backend can do, per op and weight type (replaces the base room's has_kernels).
enum class Op {
  kEmbed, kMatmul, kRmsNorm, kRope, kHcPre, kHcPost, kHcHead, kCompressorUpdate, kIndexerTopk,
  kAttention, kKvStore, kRoute, kMoe, kArgmax, kSample, kCount
};
const char* op_name(Op op);

// One product of matmul_batch: y = W·x for each row of x (y[t][o] = Σ_i W[o][i]·x[t][i]).
struct MatmulJob {
  Tensor w;  // 2-D weight (or expert view)
  Tensor x;  // [n][in] F32 (row stride may exceed in: a column slice)
  Tensor y;  // [n][out] F32
};

// One job of norm_rope: rms_norm(x, w, eps, x) when `norm` (in place; w may be invalid: no weight), then
// rope(x, rows_per_pos, p0, n_rot, freqs, false) — exactly those ops in that order, their bits in x.
struct NormRopeJob {
  Tensor x;  // [rows][n] F32, rewritten in place
  Tensor w;  // [n] F32 or invalid (norm only)
  bool norm = true;
  float eps = 0.0f;
  int64_t rows_per_pos = 1, p0 = 0, n_rot = 0;
  Tensor freqs;  // [≥ n_rot / 2] F32
};

// Compressor state of one layer and kind (spec §5): the pending token rows of the last coff·ratio
// positions as a ring (row of position p at slot p mod (coff·ratio)), and the compressed entries
// (entry w pools positions [w·r, (w+1)·r) and, for CSA, the A-half of [(w−1)·r, w·r)).
struct CompressorTensors {
  Tensor ring_a, ring_z;  // [coff·ratio][coff·d] F32: a = kv projection, z = gate projection + ape
  Tensor entries;         // [capacity][d] F32: rows [0, ⌊pos/ratio⌋) are valid
};

struct CompressorUpdate {
  Tensor a, z;          // [n][coff·d] this chunk's kv / gate projections (z without ape)
  Tensor ape;           // [ratio][coff·d] position bias, F32
  Tensor norm;          // [d] F32 entry rms-norm weight
  Tensor freqs;         // [n_rot/2] F32 RoPE frequencies (compress set)
  int64_t p0 = 0;       // position of row 0
  int64_t ratio = 0;    // r
  int64_t coff = 1;     // 2 = CSA (overlapping windows), 1 = HCA
  int64_t d = 0;        // entry width
  int64_t n_rot = 0;
  float eps = 0;
};

// The weight types of the matmuls (matmul, matmul_batch, moe) that read an op's output next, as their
// x: a backend may quantize the output for them in the producing kernel (the same quantizer, the same
// bits) and hand that copy to those matmuls instead of quantizing x again. The caller promises that
// only matmul, matmul_batch, route and moe run between the producer and those matmuls and that none of
// them writes the output. Backends that quantize inside their matmuls ignore it.
struct MatmulConsumers {
  static constexpr int kMax = 4;
  std::array<TensorType, kMax> types{};
  int count = 0;
  // Adds `type` once; beyond kMax distinct types the rest are left to the matmuls.
  void add(TensorType type) {
    for (int i = 0; i < count; ++i)
      if (types[i] == type) return;
    if (count < kMax) types[count++] = type;
  }
};

// One block's HC pre mixing with the norms around it (Backend::hc_pre_norm).
struct HcPreNormArgs {
  Tensor X;              // [n][hc·D] residual streams, F32
  Tensor fn;             // [hc·D → (2+hc)·hc] HC mix weight
  Tensor scale, base;    // hc_pre's [3] and [(2+hc)·hc]
  float hc_eps = 0;      // hc_pre's eps
  int64_t iters = 0;     // Sinkhorn iterations
  Tensor norm;           // [D] the block's input rms_norm weight
  float rms_eps = 0;     // both rms_norms
  Tensor streams;        // [n][hc·D] scratch (contents afterwards unspecified)
  Tensor mix;            // [n][(2+hc)·hc] out
  Tensor collapsed;      // [n][D] scratch (contents afterwards unspecified)
  Tensor x, post, comb;  // [n][D], [n][hc], [n][hc·hc] out
  MatmulConsumers x_consumers;  // the matmuls that read x next (may be empty)
};

struct AttentionArgs {
  Tensor q;             // [n][H·d] queries (normed, roped)
  Tensor kv;            // [n][d] this chunk's key = value rows (normed, roped)
  Tensor ring;          // [window][d] earlier rows: position p at slot p mod window (p < p0)
  Tensor comp;          // [capacity][d] compressed entries, or invalid (sliding layer)
  Tensor comp_index;    // [n][top_k] I32 selected entries (CSA), or invalid: all visible entries (HCA)
  Tensor sinks;         // [H] F32
  Tensor o;             // [n][H·d] output
  int64_t p0 = 0;
  int64_t n_head = 0;
  int64_t window = 0;   // W: raw keys of position p are max(0, p−W+1) … p
  int64_t ratio = 0;    // compressed entry w is visible to position p iff w < ⌊(p+1)/ratio⌋
  float scale = 0;
  bool store_kv = false;  // attention_unrope only: then kv_store(kv, p0, ring) (attention() ignores it)
};

// sample(): the next token chosen where the logits are. The rule is sampling::Sampler::sample's
// (src/sampling/sampler.h: logit bias, penalties, greedy, top-k, softmax at the temperature, top-p,
// min-p, the draw), with the caller's Sampler having taken the draw (Sampler::take_draw) and named
// the penalty history, so a backend needs no RNG state and the n-th token uses the n-th draw.
inline constexpr int32_t kSampleOnHost = -2;  // the id a backend writes when the caller must sample
struct SampleArgs {
  Tensor logits;  // [V] F32, one row; read only (the raw logits stay for the caller)
  Tensor id;      // [1] I32: the chosen id, or kSampleOnHost
  float temperature = 0.0f;  // not > 0 (NaN included): greedy, sampling::argmax's rule
  int32_t top_k = 0;
  float top_p = 1.0f, min_p = 0.0f;
  float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  double u = 0.0;  // the draw in [0, 1)
  std::span<const std::pair<int32_t, float>> logit_bias;  // host memory, read during the call
  std::span<const int32_t> seen_ids, seen_counts;           // host memory, read during the call
};

struct RouteArgs {
  Tensor logits;        // [n][E] router logits
  Tensor bias;          // [E] F32 selection bias, or invalid
  Tensor tid2eid;       // I32 hash table, one row of K expert ids per token ([vocab][K]: ne[0] = K), or invalid
  Tensor tokens;        // [n] I32 (hash layers)
  Tensor ids;           // [n][K] I32 out
  Tensor weights;       // [n][K] F32 out
  int64_t k = 0;
  bool norm = true;
  float scale = 1;
};

struct MoeArgs {
  Tensor x;                         // [n][D] normed input
  Tensor ids, weights;              // [n][K] from route
  Tensor gate_exps, up_exps;        // [D, I, E]
  Tensor down_exps;                 // [I, D, E]
  Tensor gate_sh, up_sh, down_sh;   // shared expert [D, I] / [I, D], or invalid
  Tensor out;                       // [n][D]
  float limit_exp = 0, limit_sh = 0;  // SwiGLU clamps
};

struct StepBounds {
  int64_t tokens = 0;         // rows of one step
  int64_t heads = 0;          // attention query heads
  int64_t keys = 0;           // keys of one attention query (raw window + compressed entries)
  int64_t index_entries = 0;  // compressed entries one indexer query scores
};

// What a benchmark compares the backend's speed with (dsv4 bench): the measured streaming-read
// bandwidth of the memory the weights live in and the f32 FMA peak of the compute that runs the ops.
struct BackendLimits {
  double read_gbps = 0;
  double fma_gflops = 0;
  std::string what;  // how they were measured, e.g. "16 threads, avx512" or "H200, 132 SMs"
};

// How a backend ran its kernels (dsv4 bench prints it; tests check the graph path is taken). A CPU
// backend runs ops directly and reports zeros.
struct LaunchStats {
  int64_t graphs_built = 0;    // step graphs instantiated (a new kernel sequence)
  int64_t graph_launches = 0;  // steps (or parts of steps) run as a graph
  int64_t nodes_launched = 0;  // kernels run inside graphs
  int64_t nodes_patched = 0;   // graph nodes whose parameters changed before a replay
  int64_t eager_launches = 0;  // kernels launched one by one
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // A line for logs: device, SIMD level, threads / SMs, memory.
  virtual std::string describe() const = 0;

  // --- capability and memory -----------------------------------------------------------------
  // Whether `op` runs with weights (matmul, embed, moe) of `type` on this backend.
  virtual bool supports(Op op, TensorType type) const = 0;
  // A zero-filled allocation of `bytes` on the backend (errors name the bytes and what is free).
  virtual Result<Buffer> allocate(int64_t bytes) = 0;
  // Makes a weight usable by the ops from its host bytes (a GGUF mapping that outlives the model):
  // the CPU uses the mapping in place; a device uploads (and may repack) into `keep`.
  virtual Result<Tensor> load_weight(const Tensor& host, std::vector<Buffer>& keep) = 0;
  // A small parameter (norm weights, biases, HC scale/base, sinks, ape) dequantized once to F32
  // [rows][ne[0]] into `keep`.
  virtual Result<Tensor> load_weight_f32(const Tensor& host, std::vector<Buffer>& keep) = 0;

  // The largest sizes a session's steps reach, so that the backend sizes its internal scratch once:
  // a decode step then allocates nothing, however long the context grows. Sessions call it when
  // they are created; calling it again only grows.
  virtual Status reserve(const StepBounds& bounds) = 0;

  // --- host transfers ---------------------------------------------------------------------------
  // dst's first `bytes` (contiguous) = src. Ordered with the ops; never waits for them.
  virtual void upload(const Tensor& dst, const void* src, int64_t bytes) = 0;
  // dst = src's first `bytes` (contiguous) after every op enqueued so far: one synchronisation.
  virtual Status download(const Tensor& src, void* dst, int64_t bytes) = 0;
  // Host-visible synchronisations so far (download calls).
  int64_t syncs() const { return syncs_; }

  // Waits until every op enqueued so far has run (timing only: `--timing` brackets each phase with
  // it, so that wall time is the backend's time; never on the normal path, not counted in syncs()).
  virtual Status finish() = 0;
  // Measures the limits a benchmark reports against (seconds of work; never on a hot path).
  virtual Result<BackendLimits> measure_limits() = 0;
  // Backend memory in use by this process (weights, sessions, scratch) and the most it ever was.
  virtual int64_t memory_in_use() const = 0;
  virtual int64_t memory_peak() const = 0;
  virtual LaunchStats launch_stats() const { return {}; }

  // --- steps ------------------------------------------------------------------------------------
  // Between begin_step and end_step the host touches no backend data; end_step returns the first
  // error of the ops enqueued since begin_step (and clears it).
  virtual void begin_step() = 0;
  virtual Status end_step() = 0;

  // --- ops --------------------------------------------------------------------------------------
  // out[t][c·D + i] = dequantized row tokens[t] of table [D, vocab], for each of `copies` c.
  virtual void embed(const Tensor& table, const Tensor& tokens, int64_t copies, const Tensor& out) = 0;

  // y[t][o] = Σ_i W[o][i]·x[t][i]: one vec_dot of the weight type per element (activations
  // quantized per row to the type's dot partner, blocks in order, 32 partials + fixed tree):
  // bit-identical for any number of rows.
  virtual void matmul(const Tensor& w, const Tensor& x, const Tensor& y) = 0;
  // Every job exactly as matmul computes it, in any order. No job's y overlaps any job's x.
  virtual void matmul_batch(std::span<const MatmulJob> jobs) = 0;

  // y[r][i] = (x[r][i] · inv) · w[i] (or x[r][i] · inv without w), inv = 1 / sqrt(ss / n + eps),
  // ss = the F32 vec_dot of the row with itself (32 fma partials + fixed tree). y may alias x.
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& y) = 0;
  // rms_norm whose y the matmuls of `consumers` read next (MatmulConsumers: a backend may quantize y for
  // them in the norm's kernel). This default runs rms_norm.
  virtual void rms_norm_for(const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                            const MatmulConsumers& consumers);

  // In place on the trailing n_rot columns of each row, adjacent pairs (x0, x1) → (x0·c − x1·s,
  // x0·s + x1·c). Row r has position p0 + r / rows_per_pos; angle = (float)position · freqs[k]
  // (f32 multiply); c, s = cos, sin of that angle in double (det::sincos) rounded to f32;
  // inverse: s = −s.
  virtual void rope(const Tensor& x, int64_t rows_per_pos, int64_t p0, int64_t n_rot, const Tensor& freqs,
                    bool inverse) = 0;
  // The attention block's query heads, key = value row and indexer queries: every job (NormRopeJob: the
  // norm, then the rotation, in place), in any order; no two jobs' x overlap. This default runs each job's
  // ops; a backend may override it with a fused kernel (CUDA: one launch for all jobs, one warp per row,
  // the rotated tail taken from the normalized values).
  virtual void norm_rope(std::span<const NormRopeJob> jobs);
  // norm_rope of one job with norm.
  void rms_norm_rope(const Tensor& x, const Tensor& w, float eps, int64_t rows_per_pos, int64_t p0, int64_t n_rot,
                     const Tensor& freqs);

  // HC pre mixing (spec §4.1 steps 3-7) per token t, hc streams of width D:
  //   mix [n][(2+hc)·hc], scale [3], base [(2+hc)·hc], X [n][hc·D] →
  //   pre_i = σ(mix_i·scale0 + base_i) + eps; post [n][hc]: post_i = 2·σ(mix_{hc+i}·scale1 + base_{hc+i});
  //   comb [n][hc·hc] ([src][dst]): row softmax of mix·scale2 + base (max, exp(v − max), sequential
  //   sum, v / sum + eps), then column norm (v / (sequential column sum + eps)), then (iters − 1) ×
  //   (row norm, column norm) the same way;
  //   x [n][D] = Σ_i pre_i·X[i] (i ascending, one fma per element starting from 0).
  virtual void hc_pre(const Tensor& mix, const Tensor& scale, const Tensor& base, float eps, int64_t iters,
                      const Tensor& X, const Tensor& x, const Tensor& post, const Tensor& comb) = 0;
  // A block's input: streams = rms_norm(X) (no weight), mix = matmul(fn, streams), hc_pre(mix, …, X) →
  // collapsed, post, comb, then x = rms_norm(collapsed, norm, rms_eps): exactly those four ops in
  // that order, with their bits in mix, x, post and comb. This default runs the four ops; a backend
  // may override it with fused kernels (CUDA: one cluster kernel per token).
  virtual void hc_pre_norm(const HcPreNormArgs& a);
  // X_out[t][j] = post[t][j]·y[t] (one multiply), then + comb[t][i][j]·X[t][i] for i ascending
  // (fma each). X_out must not alias X.
  virtual void hc_post(const Tensor& X, const Tensor& y, const Tensor& post, const Tensor& comb,
                       const Tensor& X_out) = 0;
  // The attention block's end: matmul(w, x, y), then hc_post(X, y, post, comb, X_out): exactly those two
  // ops in that order, with their bits in y and X_out. This default runs the two ops; a backend may
  // compute HC post where each y element is written (CUDA: the decode product's epilogue).
  virtual void matmul_hc_post(const Tensor& w, const Tensor& x, const Tensor& y, const Tensor& X, const Tensor& post,
                              const Tensor& comb, const Tensor& X_out);
  // HC head: pre_i = σ(mix[t][i]·scale[0] + base_i) + eps; y[t] = Σ_i pre_i·X[t][i] (fma, i ascending).
  virtual void hc_head(const Tensor& mix, const Tensor& scale, const Tensor& base, float eps, const Tensor& X,
                       const Tensor& y) = 0;

  // Appends a chunk to a compressor (spec §5). For each token t (position p = p0 + t) in order:
  // ring row p mod (coff·r) = (a[t], z[t] + ape[p mod r]) (one add per element); when p + 1 is a
  // multiple of r, window w = p / r closes and entries[w] becomes:
  //   candidates c in order: (CSA) the A-half (columns [0, d)) of positions (w−1)·r + i, i < r,
  //   absent when w = 0; then the window's own positions w·r + i, i < r (columns [d, 2d) for CSA,
  //   [0, d) for HCA). Per channel j: m = max over present candidates of z; e_c = exp(z_c − m)
  //   (absent: 0); den = Σ_c e_c (32 partials + fixed tree, absent included as 0);
  //   acc = Σ_c e_c·a_c (fma chain over present c); P[j] = acc / den;
  // then rms_norm(P, norm, eps) and rope (one row at position w·r, compress frequencies).
  // (m is max(m, z_c) from −inf.)
  virtual void compressor_update(const CompressorUpdate& u, const CompressorTensors& state) = 0;

  // Lightning indexer top-k for n queries at positions p0 + t: visible = ⌊(p + 1)/ratio⌋ entries of
  // keys [capacity][dI]. If visible ≤ top_k: out[t] = 0, 1, …, visible−1, then −1 to top_k.
  // Otherwise score_w = Σ_h (g[t][h]·gscale0·gscale1)·ReLU(qI[t][h]·keys[w]) (g scaled as
  // (g·gscale0)·gscale1; the dot is the F32 vec_dot; fma chain over h ascending from 0); out[t] =
  // the top_k entries of highest score (ties → lower w; a NaN score ranks below every number, NaNs
  // among themselves by lower w), in ascending entry order.
  // qI [n][nI·dI], g [n][nI], out [n][top_k] I32.
  virtual void indexer_topk(const Tensor& qI, const Tensor& g, float gscale0, float gscale1, const Tensor& keys,
                            int64_t p0, int64_t ratio, const Tensor& out) = 0;

  // Attention with sinks, one shared key = value row set per query (MQA), H heads of dim d.
  // Keys of query t (position p = p0 + t), in this order: raw positions max(0, p−W+1) … p (from the
  // ring for positions < p0, from kv for ≥ p0), then compressed entries: HCA all w < ⌊(p+1)/r⌋
  // ascending, CSA comp_index[t][i] for i in order while ≥ 0. Per head h:
  //   l_j = (q_h · k_j)·scale (F32 vec_dot); M = max(sink_h, max_j l_j) (std::max order: running
  //   max from sink_h, NaN l never replaces it); p_j = exp(l_j − M);
  //   den = exp(sink_h − M) + Σ_j p_j (32 partials + fixed tree);
  //   o_h[c] = (Σ_j p_j·k_j[c]) / den (fma chain over j from 0, one division).
  virtual void attention(const AttentionArgs& a) = 0;
  // The attention block's output heads with their positions taken back out: attention(a), then
  // rope(o as [n·H][d] rows, H, a.p0, n_rot, freqs, inverse = true), then when a.store_kv
  // kv_store(a.kv, a.p0, a.ring): exactly those ops in that order, with their bits in a.o and the ring.
  // This default runs the ops; a backend may override it with fused kernels (CUDA: the decode form's
  // lanes hold adjacent columns, so a rotated pair is two lanes of a warp; a one-query pass stores its kv
  // row from the scores kernel, since the slot it overwrites holds position p0 − W, outside the window).
  virtual void attention_unrope(const AttentionArgs& a, int64_t n_rot, const Tensor& freqs);
  // Stores the chunk's kv rows [n][d] into the ring [W][d] (slot p mod W) for the next chunks: the
  // rows of positions max(p0, p0 + n − W) … p0 + n − 1.
  virtual void kv_store(const Tensor& kv, int64_t p0, const Tensor& ring) = 0;

  // MoE router (spec §6.2): s_e = sqrt(softplus(logits[t][e])) (softplus(NaN) = NaN); ids[t] = tid2eid[tokens[t]][0..K)
  // (hash layers: entries validated at load), else the K highest s_e + bias_e (or s_e) in
  // descending order (ties → lower e; NaN ranks below every number, NaNs by lower e);
  // sum = Σ_k s_{ids[k]} sequentially from 0;
  // weights[t][k] = (norm ? s_{ids[k]} / (sum + 1e-20f) : s_{ids[k]}) · scale.
  virtual void route(const RouteArgs& r) = 0;

  // Routed + shared experts (spec §6.3). For each (token t, slot k): g = W_gate[e]·x[t], u = W_up[e]·x[t]
  // (matmul bits), h = swiglu_clamp(g, u, limit_exp), y_tk = W_down[e]·h; the shared expert the same
  // with limit_sh. out[t] = 0, then + weights[t][k]·y_tk for k ascending (fma each; a weight of
  // exactly 1 is a plain add), then + y_shared (plain add).
  // swiglu_clamp(g, u, L) = silu(std::min(g, L)) · std::min(std::max(u, −L), L) (std::min/max
  // semantics: a NaN g or u passes through, min(NaN, L) = NaN, unlike CUDA's fminf);
  // silu(v) = v · det::sigmoid(v), sigmoid(v) = 1 / (1 + det::exp(−v)).
  virtual void moe(const MoeArgs& m) = 0;
  // The FFN block's end: moe(m), then hc_post(X, m.out, post, comb, X_out): exactly those two ops in that
  // order, with their bits in m.out and X_out. This default runs the two ops; a backend may fuse the
  // MoE's weighted sum into HC post (CUDA: one elementwise kernel instead of two).
  virtual void moe_hc_post(const MoeArgs& m, const Tensor& X, const Tensor& post, const Tensor& comb,
                           const Tensor& X_out);

  // Greedy choice per row: ids[t] = the index of the largest logits[t][i] (ties → lower i; NaN ranks
  // below every number; a row of NaNs gives 0), sampling::argmax's rule. logits [n][V] F32, ids [n] I32.
  virtual void argmax(const Tensor& logits, const Tensor& ids) = 0;
  // The sampler's choice (SampleArgs) without bringing the vocabulary's logits back. A backend that
  // cannot make it for these arguments writes kSampleOnHost and the caller samples the downloaded
  // logits with the same draw: the CPU backend always does (its logits are host memory already);
  // the CUDA backend when more candidates survive the cuts than it sorts on the device.
  virtual void sample(const SampleArgs& a) = 0;

 protected:
  int64_t syncs_ = 0;
  friend class Buffer;
  virtual void release(void* data, int64_t bytes) = 0;
};

// --- shape checks every backend shares (host-side, on the descriptors only) ------------------------

// Whether a moe / compressor_update / indexer_topk call's tensors fit each other; the error names the shapes.
Status check_moe_shapes(const MoeArgs& m);
Status check_compressor_shapes(const CompressorUpdate& u, const CompressorTensors& state);
Status check_indexer_shapes(const Tensor& qI, const Tensor& g, const Tensor& keys, int64_t p0, int64_t ratio,
                            const Tensor& out);

// --- the registry ---------------------------------------------------------------------------------

enum class BackendKind { kAuto, kCpu, kCuda };
Result<BackendKind> parse_backend_kind(std::string_view name);  // "auto" | "cpu" | "cuda"
const char* backend_kind_name(BackendKind kind);

}  // namespace dsv4::backend
