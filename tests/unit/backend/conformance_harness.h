// tests/unit/backend/conformance_harness.h — what the op-conformance suite needs around the
// reference: the targets (backend × SIMD level × threads), a per-case context that owns backend
// buffers and host weight bytes and talks to the backend only through backend.h, bit-exact
// comparison with poison checks, seeded data generators, and the per-op case-count summary.
#pragma once

#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/quant.h"
#include "backend/registry/registry.h"
#include "base/cpu_features.h"
#include "numerics/half.h"

namespace dsv4::conformance {

using backend::Backend;
using backend::BackendKind;
using backend::Buffer;
using backend::Tensor;

// --- targets --------------------------------------------------------------------------------------

struct Target {
  BackendKind kind = BackendKind::kCpu;
  SimdLevel level = SimdLevel::kScalar;
  int threads = 3;
  bool amx = false;
  std::string name;
};
inline void PrintTo(const Target& t, std::ostream* os) { *os << t.name; }

// --- poison ---------------------------------------------------------------------------------------

// Every output byte range is filled with this 32-bit pattern before an op (a signalling NaN as F32,
// an out-of-range id as I32); regions an op must not write are checked to still hold it.
inline constexpr uint32_t kPoison = 0x7fbadbadu;

inline std::vector<uint8_t> poison_bytes(int64_t bytes) {
  std::vector<uint8_t> v(static_cast<size_t>(bytes));
  for (size_t i = 0; i + 4 <= v.size(); i += 4) std::memcpy(v.data() + i, &kPoison, 4);
  return v;
}
inline float poison_f32() { return f32_from_bits(kPoison); }
inline std::vector<float> poison_bytes_f32(int64_t n) { return std::vector<float>(static_cast<size_t>(n), poison_f32()); }

// --- summary --------------------------------------------------------------------------------------

// Cases run per (op, target), and which targets ran or were skipped (printed at the end).
class Summary {
 public:
  static Summary& get() {
    static Summary s;
    return s;
  }
  void count(const std::string& op, const std::string& target, int64_t n = 1) {
    std::lock_guard<std::mutex> lock(mu_);
    cases_[op][target] += n;
  }
  void target_status(const std::string& target, const std::string& status) {
    std::lock_guard<std::mutex> lock(mu_);
    status_[target] = status;
  }
  void skipped_case(const std::string& op, const std::string& target, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    skipped_[op + " @ " + target + ": " + why] += 1;
  }
  void print() const {
    std::printf("\n[conformance] cases per op and target (each compared bit for bit with the scalar reference)\n");
    std::map<std::string, int> targets;
    for (const auto& [op, m] : cases_)
      for (const auto& [t, n] : m) targets[t] = 1;
    std::printf("[conformance] %-34s", "op");
    for (const auto& [t, one] : targets) std::printf(" %16s", t.c_str());
    std::printf("\n");
    for (const auto& [op, m] : cases_) {
      std::printf("[conformance] %-34s", op.c_str());
      for (const auto& [t, one] : targets) {
        auto it = m.find(t);
        std::printf(" %16" PRId64, it == m.end() ? int64_t{0} : it->second);
      }
      std::printf("\n");
    }
    for (const auto& [t, st] : status_) std::printf("[conformance] target %-16s %s\n", t.c_str(), st.c_str());
    for (const auto& [why, n] : skipped_) std::printf("[conformance] skipped %d case(s): %s\n", n, why.c_str());
    if (!mutation_name().empty()) std::printf("[conformance] reference MUTATED: %s\n", mutation_name().c_str());
    std::fflush(stdout);
  }
  static std::string mutation_name() {
    const char* e = std::getenv("DSV4_CONFORMANCE_MUTATION");
    return e != nullptr ? e : "";
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::map<std::string, int64_t>> cases_;
  std::map<std::string, std::string> status_;
  std::map<std::string, int> skipped_;
};

class SummaryPrinter : public ::testing::Environment {
 public:
  void TearDown() override { Summary::get().print(); }
};

// --- random data ----------------------------------------------------------------------------------

struct Rng {
  explicit Rng(uint64_t seed) : g(static_cast<std::mt19937::result_type>(seed * 2654435761u + 12345u)) {}
  std::mt19937 g;
  float normal(float sigma = 1.0f) { return std::normal_distribution<float>(0.0f, sigma)(g); }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(g); }
  int64_t range(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); }  // inclusive
  uint8_t byte() { return static_cast<uint8_t>(g() & 0xff); }
  std::vector<float> normals(int64_t n, float sigma = 1.0f) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = normal(sigma);
    return v;
  }
};

inline float f_nan() { return std::numeric_limits<float>::quiet_NaN(); }
inline float f_inf() { return std::numeric_limits<float>::infinity(); }

// Writes NaN, ±inf, −0, a subnormal, a huge value and their neighbours at `count` random places.
inline void inject_specials(std::vector<float>& v, Rng& rng, int count) {
  const float specials[] = {f_nan(), f_inf(), -f_inf(), -0.0f, 1e-40f, -3e38f, 1e30f, 0.0f};
  for (int i = 0; i < count && !v.empty(); ++i)
    v[static_cast<size_t>(rng.range(0, static_cast<int64_t>(v.size()) - 1))] = specials[i % 8];
}

// Host bytes of `rows` weight rows of n elements of type t.
enum class WeightGen {
  kRandom,     // floats: normal·sigma; quants: random bytes with sane scales
  kQuantized,  // floats: normal·sigma; quants: the type's reference quantizer of normal·sigma rows
  kExtreme,    // floats: normal·sigma plus NaN / ±inf / huge; quants: extreme scales (max / subnormal f16, e8m0 ends)
};

inline void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

inline uint16_t random_scale_f16(Rng& rng, int lo_exp, int hi_exp) {
  return f32_to_f16(std::exp2(rng.uniform(static_cast<float>(lo_exp), static_cast<float>(hi_exp))));
}

inline std::vector<uint8_t> weight_bytes(TensorType t, int64_t n, int64_t rows, Rng& rng, WeightGen gen,
                                         float sigma = 1.0f) {
  const int64_t rb = tensor_row_bytes(t, n);
  std::vector<uint8_t> out(static_cast<size_t>(rb * rows));
  if (t == TensorType::kF32 || t == TensorType::kF16 || t == TensorType::kBF16) {
    std::vector<float> v = rng.normals(n * rows, sigma);
    if (gen == WeightGen::kExtreme) inject_specials(v, rng, static_cast<int>(std::max<int64_t>(8, rows)));
    for (int64_t i = 0; i < n * rows; ++i) {
      const float x = v[static_cast<size_t>(i)];
      if (t == TensorType::kF32) std::memcpy(out.data() + 4 * i, &x, 4);
      else put16(out.data() + 2 * i, t == TensorType::kF16 ? f32_to_f16(x) : f32_to_bf16(x));
    }
    return out;
  }
  if (gen == WeightGen::kQuantized) {
    const cpu::TypeKernels* k = cpu::type_kernels(t);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> v = rng.normals(n, sigma);
      k->quantize_row(v.data(), out.data() + r * rb, n, nullptr);
    }
    return out;
  }
  for (auto& b : out) b = rng.byte();
  const TensorTypeInfo& info = tensor_type_info(t);
  const int64_t nblocks = rb * rows / info.block_bytes;
  const bool ext = gen == WeightGen::kExtreme;
  auto scale = [&](int64_t b) -> uint16_t {
    if (ext) return (b % 3 == 0) ? uint16_t{0x7bff} : (b % 3 == 1) ? uint16_t{0x0001} : random_scale_f16(rng, -14, 4);
    return random_scale_f16(rng, -12, -4);
  };
  for (int64_t b = 0; b < nblocks; ++b) {
    uint8_t* blk = out.data() + b * info.block_bytes;
    switch (t) {
      case TensorType::kQ8_0: put16(blk, scale(b)); break;
      case TensorType::kQ2_K: put16(blk + 80, scale(b)); put16(blk + 82, scale(b + 1)); break;
      case TensorType::kQ4_K: put16(blk, scale(b)); put16(blk + 2, scale(b + 1)); break;
      case TensorType::kIQ2_XXS: put16(blk, scale(b)); break;
      case TensorType::kMXFP4:
        blk[0] = ext ? static_cast<uint8_t>((b % 3 == 0) ? 254 : (b % 3 == 1) ? 1 : rng.range(0, 255))
                     : static_cast<uint8_t>(rng.range(112, 124));
        break;
      default: break;
    }
  }
  return out;
}

// --- the per-case backend context -----------------------------------------------------------------

// Owns the buffers, weight keeps and host weight bytes of one case; every backend access goes
// through backend.h. Infrastructure failures (allocation, upload) are fatal for the case.
class Ctx {
 public:
  explicit Ctx(Backend& be) : be_(be) {}

  Backend& be() { return be_; }

  // A contiguous tensor of dims ne[0..n_dims) (zero-filled by allocate, then poisoned).
  Tensor alloc_nd(TensorType t, int n_dims, const int64_t* ne) {
    Tensor probe = backend::make_nd(t, nullptr, n_dims, ne);
    const int64_t bytes = std::max<int64_t>(probe.bytes(), 4);
    Result<Buffer> b = be_.allocate(bytes);
    if (!b.ok()) {
      ADD_FAILURE() << "allocate(" << bytes << "): " << b.status().message();
      std::abort();
    }
    Tensor out = backend::make_nd(t, b->data(), n_dims, ne);
    bufs_.push_back(std::move(b).value());
    poison(out);
    return out;
  }
  Tensor alloc(TensorType t, int64_t cols, int64_t rows) {
    const int64_t ne[2] = {cols, rows};
    return alloc_nd(t, 2, ne);
  }
  Tensor f32(const std::vector<float>& v, int64_t cols, int64_t rows) {
    Tensor t = alloc(TensorType::kF32, cols, rows);
    put(t, v.data(), cols * rows * 4);
    return t;
  }
  Tensor f32_1d(const std::vector<float>& v) {
    const int64_t ne[1] = {static_cast<int64_t>(v.size())};
    Tensor t = alloc_nd(TensorType::kF32, 1, ne);
    put(t, v.data(), ne[0] * 4);
    return t;
  }
  Tensor i32(const std::vector<int32_t>& v, int64_t cols, int64_t rows) {
    Tensor t = alloc(TensorType::kI32, cols, rows);
    put(t, v.data(), cols * rows * 4);
    return t;
  }
  Tensor i32_1d(const std::vector<int32_t>& v) {
    const int64_t ne[1] = {static_cast<int64_t>(v.size())};
    Tensor t = alloc_nd(TensorType::kI32, 1, ne);
    put(t, v.data(), ne[0] * 4);
    return t;
  }
  void put(const Tensor& t, const void* src, int64_t bytes) { be_.upload(t, src, bytes); }
  void poison(const Tensor& t) {
    const std::vector<uint8_t> p = poison_bytes(t.bytes());
    be_.upload(t, p.data(), t.bytes());
  }

  // A weight of dims ne (GGUF order) from host bytes kept alive for the case (the CPU uses them in place).
  Tensor weight(TensorType t, std::vector<uint8_t> bytes, int n_dims, const int64_t* ne) {
    host_.push_back(std::make_unique<std::vector<uint8_t>>(std::move(bytes)));
    Tensor host = backend::make_nd(t, host_.back()->data(), n_dims, ne);
    Result<Tensor> w = be_.load_weight(host, keep_);
    if (!w.ok()) {
      ADD_FAILURE() << "load_weight(" << tensor_type_name(t) << "): " << w.status().message();
      std::abort();
    }
    return *w;
  }
  const uint8_t* host_bytes_of_last() const { return host_.back()->data(); }

  template <typename T>
  std::vector<T> get(const Tensor& t) {
    std::vector<T> v(static_cast<size_t>(t.bytes() / static_cast<int64_t>(sizeof(T))));
    const Status st = be_.download(t, v.data(), t.bytes());
    EXPECT_TRUE(st.ok()) << "download: " << st.message();
    return v;
  }

  // begin_step, the ops, end_step; false (with a failure) when end_step reports an error.
  bool step(const std::function<void()>& ops) {
    be_.begin_step();
    ops();
    const Status st = be_.end_step();
    EXPECT_TRUE(st.ok()) << "end_step: " << st.message();
    return st.ok();
  }

 private:
  Backend& be_;
  std::vector<Buffer> bufs_;
  std::vector<Buffer> keep_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> host_;
};

// --- bit-exact comparison -------------------------------------------------------------------------

inline std::string describe_f32(float v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g (0x%08x)", static_cast<double>(v), f32_bits(v));
  return buf;
}

// The contract (backend.h): every number bit for bit; a NaN where the reference has a NaN, its sign
// and payload unspecified (IEEE operations do not pin which operand's NaN they return). The poison
// NaN never counts as a computed NaN: where the reference expects the poison (an element the op must
// not write) the backend must have left exactly the poison.
inline bool same_f32_bits(float ref, float got) {
  if (f32_bits(ref) == kPoison || f32_bits(got) == kPoison || ref == ref) return f32_bits(ref) == f32_bits(got);
  return got != got;
}

// Compares a rows × cols block: ref dense ([r·cols + c]) against got ([r·got_stride + got_off + c]),
// bit for bit (NaN as NaN, see same_f32_bits). Reports how many differ and the first difference.
inline ::testing::AssertionResult same_f32(const std::string& what, const std::vector<float>& ref,
                                           const std::vector<float>& got, int64_t rows, int64_t cols,
                                           int64_t got_stride = -1, int64_t got_off = 0) {
  if (got_stride < 0) got_stride = cols;
  int64_t bad = 0, first = -1;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      if (!same_f32_bits(ref[static_cast<size_t>(r * cols + c)], got[static_cast<size_t>(r * got_stride + got_off + c)])) {
        if (first < 0) first = r * cols + c;
        ++bad;
      }
  if (bad == 0) return ::testing::AssertionSuccess();
  const int64_t r = first / cols, c = first % cols;
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << rows * cols << " elements differ; first at [row " << r << "][col " << c
         << "]: reference " << describe_f32(ref[static_cast<size_t>(first)]) << ", backend "
         << describe_f32(got[static_cast<size_t>(r * got_stride + got_off + c)]);
}

inline ::testing::AssertionResult same_i32(const std::string& what, const std::vector<int32_t>& ref,
                                           const std::vector<int32_t>& got, int64_t rows, int64_t cols) {
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < rows * cols; ++i)
    if (ref[static_cast<size_t>(i)] != got[static_cast<size_t>(i)]) {
      if (first < 0) first = i;
      ++bad;
    }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::string ref_row, got_row;
  const int64_t r = first / cols;
  for (int64_t c = 0; c < std::min<int64_t>(cols, 24); ++c) {
    ref_row += std::to_string(ref[static_cast<size_t>(r * cols + c)]) + " ";
    got_row += std::to_string(got[static_cast<size_t>(r * cols + c)]) + " ";
  }
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << rows * cols << " ids differ; first at [row "
                                       << r << "][col " << first % cols << "]: reference "
                                       << ref[static_cast<size_t>(first)] << ", backend " << got[static_cast<size_t>(first)]
                                       << "\n  reference row: " << ref_row << "\n  backend row:   " << got_row;
}

// Every element of got outside columns [off, off + cols) of each of `rows` rows of `stride` floats
// (and every row ≥ rows) still holds the poison.
inline ::testing::AssertionResult poison_outside(const std::string& what, const std::vector<float>& got, int64_t rows,
                                                 int64_t stride, int64_t off, int64_t cols) {
  for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
    const int64_t r = i / stride, c = i % stride;
    if (r < rows && c >= off && c < off + cols) continue;
    if (f32_bits(got[static_cast<size_t>(i)]) != kPoison)
      return ::testing::AssertionFailure() << what << ": element [row " << r << "][col " << c
                                           << "] outside the op's output was written: " << describe_f32(got[static_cast<size_t>(i)]);
  }
  return ::testing::AssertionSuccess();
}

// Rows [begin, end) of got (stride floats each) still hold the poison.
inline ::testing::AssertionResult poison_rows(const std::string& what, const std::vector<float>& got, int64_t stride,
                                              int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r)
    for (int64_t c = 0; c < stride; ++c)
      if (f32_bits(got[static_cast<size_t>(r * stride + c)]) != kPoison)
        return ::testing::AssertionFailure() << what << ": row " << r << " must stay untouched, col " << c << " = "
                                             << describe_f32(got[static_cast<size_t>(r * stride + c)]);
  return ::testing::AssertionSuccess();
}

}  // namespace dsv4::conformance
