// tests/unit/backend/conformance_attention_test.cpp — op conformance (see conformance_test.cpp) of the
// stateful attention ops: compressor_update, indexer_topk, attention + kv_store and kv_store alone.
#include "conformance_fixture.h"

namespace dsv4::conformance {
namespace {

// ================================================================================================
// compressor_update (stateful: chunk sequences vs the reference and a whole-prompt call)
// ================================================================================================

struct CompCase {
  std::string name;
  int64_t ratio, coff, d, n_rot;
  std::vector<int64_t> chunks;
  bool views = false;  // a and z as column slices of one [n][2·coff·d] tensor
  int specials = 0;    // 1: NaN / ±inf in z and a, 2: z spread wide (exp underflow)
};

std::vector<CompCase> comp_cases() {
  return {
      {"csa_real_r4_d512", 4, 2, 512, 64, {1, 3, 4, 9, 2, 5, 8}},
      {"csa_indexer_r4_d128", 4, 2, 128, 64, {7, 1, 1, 1, 12, 3}, true},
      {"hca_real_r128_d512", 128, 1, 512, 64, {1, 3, 124, 128, 257, 5}},
      {"csa_r8_d24", 8, 2, 24, 8, {1, 3, 8, 17, 2, 1, 9, 7}},
      {"hca_r4_d20", 4, 1, 20, 4, {1, 3, 4, 9, 2, 13}, true},
      {"hca_r5_odd", 5, 1, 12, 4, {2, 3, 11, 1, 1, 4}},
      {"csa_r3_odd", 3, 2, 10, 2, {1, 3, 7, 2, 6}},
      {"csa_r128_d16", 128, 2, 16, 8, {1, 128, 257, 3}},
      {"csa_specials", 4, 2, 32, 8, {5, 4, 9, 6}, false, 1},
      {"hca_wide_z", 4, 1, 32, 8, {4, 8, 5}, false, 2},
  };
}

struct CompRun {
  Tensor ring_a, ring_z, entries;
  int64_t capacity;
};

TEST_P(Conformance, CompressorUpdate) {
  uint64_t seed = 1000;
  for (const CompCase& c : comp_cases()) {
    SCOPED_TRACE("compressor_update case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    const int64_t width = c.coff * c.d, rr = c.coff * c.ratio;
    const int64_t P = std::accumulate(c.chunks.begin(), c.chunks.end(), int64_t{0});
    std::vector<float> a_all = rng.normals(P * width), z_all = rng.normals(P * width, 2.0f);
    if (c.specials == 1) {
      inject_specials(a_all, rng, 6);
      z_all[static_cast<size_t>(3 * width + 1)] = f_nan();
      for (int64_t p = 0; p < P; ++p) z_all[static_cast<size_t>(p * width + 2)] = -f_inf();  // every candidate −inf
      z_all[static_cast<size_t>(9 * width + 5)] = f_inf();
      z_all[static_cast<size_t>(10 * width + 6)] = -f_inf();
    } else if (c.specials == 2) {
      for (auto& z : z_all) z *= 40.0f;
    }
    const std::vector<float> ape = rng.normals(c.ratio * width, 0.5f);
    std::vector<float> norm = rng.normals(c.d, 0.2f);
    for (auto& v : norm) v += 1.0f;
    std::vector<float> fr(static_cast<size_t>(c.n_rot / 2));
    for (int64_t k = 0; k < c.n_rot / 2; ++k) fr[static_cast<size_t>(k)] = static_cast<float>(std::pow(160000.0, -2.0 * k / c.n_rot));
    const float eps = 1e-6f;
    const Tensor ape_t = x.f32(ape, width, c.ratio), norm_t = x.f32_1d(norm), fr_t = x.f32_1d(fr);

    CompressorHistory hist{c.ratio, c.coff, c.d, {}, {}};
    const int64_t capacity = P / c.ratio + 2;
    auto make_state = [&] {
      CompressorTensors s;
      s.ring_a = x.alloc(TensorType::kF32, width, rr);
      s.ring_z = x.alloc(TensorType::kF32, width, rr);
      s.entries = x.alloc(TensorType::kF32, c.d, capacity);
      return s;
    };
    auto update = [&](const CompressorTensors& s, int64_t p0, int64_t n) {
      CompressorUpdate u;
      std::vector<float> a(a_all.begin() + p0 * width, a_all.begin() + (p0 + n) * width),
          z(z_all.begin() + p0 * width, z_all.begin() + (p0 + n) * width);
      if (c.views) {
        std::vector<float> az(static_cast<size_t>(n * 2 * width));
        for (int64_t t = 0; t < n; ++t) {
          std::copy(a.begin() + t * width, a.begin() + (t + 1) * width, az.begin() + t * 2 * width);
          std::copy(z.begin() + t * width, z.begin() + (t + 1) * width, az.begin() + t * 2 * width + width);
        }
        const Tensor azt = x.f32(az, 2 * width, n);
        u.a = azt.cols(0, width);
        u.z = azt.cols(width, width);
      } else {
        u.a = x.f32(a, width, n);
        u.z = x.f32(z, width, n);
      }
      u.ape = ape_t;
      u.norm = norm_t;
      u.freqs = fr_t;
      u.p0 = p0;
      u.ratio = c.ratio;
      u.coff = c.coff;
      u.d = c.d;
      u.n_rot = c.n_rot;
      u.eps = eps;
      return x.step([&] { be().compressor_update(u, s); });
    };
    // Reference entries for every closed window.
    for (int64_t p = 0; p < P; ++p)
      hist.push(a_all.data() + p * width, z_all.data() + p * width, ape.data());
    std::vector<float> ref_entries(static_cast<size_t>((P / c.ratio) * c.d));
    for (int64_t w = 0; w < P / c.ratio; ++w)
      compressor_entry(hist, w, norm.data(), fr.data(), c.n_rot, eps, ref_entries.data() + w * c.d);

    auto check = [&](const CompressorTensors& s, int64_t pos, const std::string& when) {
      const int64_t closed = pos / c.ratio;
      const std::vector<float> got = x.get<float>(s.entries);
      const std::vector<float> ref(ref_entries.begin(), ref_entries.begin() + closed * c.d);
      bool ok = same_f32("entries " + when, ref, got, closed, c.d);
      EXPECT_TRUE(ok);
      ok = poison_rows("entries of windows not closed " + when, got, c.d, closed, capacity);
      EXPECT_TRUE(ok);
      // Ring rows: position p at slot p mod (coff·r) for the last coff·r positions; others untouched.
      const std::vector<float> ga = x.get<float>(s.ring_a), gz = x.get<float>(s.ring_z);
      std::vector<float> ra = poison_bytes_f32(rr * width), rz = ra;
      for (int64_t p = std::max<int64_t>(0, pos - rr); p < pos; ++p) {
        std::copy(hist.a_row(p), hist.a_row(p) + width, ra.begin() + (p % rr) * width);
        std::copy(hist.z_row(p), hist.z_row(p) + width, rz.begin() + (p % rr) * width);
      }
      EXPECT_TRUE(same_f32("ring_a " + when, ra, ga, rr, width));
      EXPECT_TRUE(same_f32("ring_z (z + ape) " + when, rz, gz, rr, width));
      return ok;
    };

    const CompressorTensors chunked = make_state();
    int64_t p0 = 0;
    bool ok = true;
    for (int64_t n : c.chunks) {
      const std::string when = "after chunk [" + std::to_string(p0) + ", " + std::to_string(p0 + n) + ")";
      ok = update(chunked, p0, n) && ok;
      count("compressor_update (chunk calls)");
      p0 += n;
      if (!check(chunked, p0, when)) break;
    }
    count("compressor_update");
    // The whole prompt as one call: same entries and ring as the chunks.
    const CompressorTensors whole = make_state();
    if (update(whole, 0, P)) {
      check(whole, P, "after the whole prompt in one call");
      EXPECT_TRUE(same_f32("whole-prompt entries vs chunked", x.get<float>(chunked.entries), x.get<float>(whole.entries),
                           capacity, c.d));
    }
    count("compressor_update");
  }
}

// ================================================================================================
// indexer_topk
// ================================================================================================

struct IdxCase {
  std::string name;
  int64_t nI, dI, top_k, ratio, p0, n, capacity;
  int keys = 0;  // 0 random, 1 all rows identical, 2 four distinct rows repeated, 3 some rows +inf,
                 // 4 unit rows (scores = the scaled g exactly; with g = 4), 5 queries with q[i] = q[i mod
                 // 32] and every key row 0's elements permuted within their classes mod 32: equal dots
                 // in exact arithmetic, so the float order alone ranks them (dI a multiple of 32)
  int g = 0;     // 0 random, 1 zero, 2 NaN for query 1, 3 query-dependent signs (inf / NaN scores),
                 // 4 adjacent g0 < g1 whose (g·gscale0)·gscale1 round to one value (a tie) while
                 //   g·(gscale0·gscale1) do not: only the defined association selects entries 0..4
  float gs0 = 0.0883883476f, gs1 = 0.125f;
};

std::vector<IdxCase> idx_cases() {
  return {
      {"real_visible_511_to_513", 64, 128, 512, 4, 2043, 12, 600},
      {"real_visible_far_above", 64, 128, 512, 4, 2399, 3, 610},
      {"p0_zero_visible_0_1", 64, 128, 512, 4, 0, 6, 4},
      {"small_crossing", 3, 16, 5, 2, 7, 9, 20},
      {"topk_ge_visible", 4, 32, 64, 4, 17, 5, 8},
      {"all_keys_equal", 4, 32, 5, 2, 20, 4, 16},
      {"dup_keys_ties", 4, 32, 7, 2, 30, 5, 24, 2},
      {"inf_nan_scores", 3, 16, 6, 2, 28, 4, 20, 3, 3},
      {"g_zero", 2, 16, 4, 3, 30, 3, 16, 0, 1},
      {"g_nan_query", 2, 16, 4, 2, 20, 3, 16, 0, 2},
      {"ratio128_visible_2", 8, 64, 1, 128, 383, 2, 4},
      {"gscale_rounding_ties", 2, 4, 5, 1, 9, 2, 12, 4, 4, 0.0883883476f, 0.57735026f},
      {"permuted_keys_real_decode", 64, 128, 512, 4, 4095, 1, 1030, 5},
      {"permuted_keys_real_three", 64, 128, 512, 4, 4093, 3, 1030, 5},
      {"permuted_keys_dI32", 8, 32, 20, 2, 99, 2, 60, 5},
      {"permuted_keys_dI256", 16, 256, 30, 4, 255, 2, 70, 5},
      {"permuted_keys_dI96", 8, 96, 20, 4, 170, 2, 50, 5},
  };
}

TEST_P(Conformance, IndexerTopk) {
  uint64_t seed = 1100;
  for (const IdxCase& c : idx_cases()) {
    SCOPED_TRACE("indexer_topk case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    std::vector<float> qI = rng.normals(c.n * c.nI * c.dI), g = rng.normals(c.n * c.nI);
    std::vector<float> keys = rng.normals(c.capacity * c.dI);
    const int64_t max_visible = (c.p0 + c.n) / c.ratio;
    if (c.keys == 1) {
      for (int64_t w = 1; w < c.capacity; ++w) std::copy(keys.begin(), keys.begin() + c.dI, keys.begin() + w * c.dI);
    } else if (c.keys == 2) {
      for (int64_t w = 4; w < c.capacity; ++w) {
        const int64_t src = rng.range(0, 3);
        std::copy(keys.begin() + src * c.dI, keys.begin() + (src + 1) * c.dI, keys.begin() + w * c.dI);
      }
    } else if (c.keys == 3) {
      for (int64_t w = 0; w < c.capacity; w += 3) keys[static_cast<size_t>(w * c.dI)] = f_inf();
      for (int64_t i = 0; i < c.n * c.nI; ++i) qI[static_cast<size_t>(i * c.dI)] = std::fabs(qI[static_cast<size_t>(i * c.dI)]) + 0.1f;
    }
    if (c.keys == 5) {
      for (int64_t r = 0; r < c.n * c.nI; ++r)
        for (int64_t i = 32; i < c.dI; ++i) qI[static_cast<size_t>(r * c.dI + i)] = qI[static_cast<size_t>(r * c.dI + i % 32)];
      std::vector<float> row(keys.begin(), keys.begin() + c.dI);
      const int64_t terms = c.dI / 32;
      for (int64_t w = 1; w < c.capacity; ++w) {
        for (int64_t l = 0; l < 32; ++l)
          for (int64_t k = terms - 1; k > 0; --k)
            std::swap(row[static_cast<size_t>(l + 32 * k)], row[static_cast<size_t>(l + 32 * rng.range(0, k))]);
        std::copy(row.begin(), row.end(), keys.begin() + w * c.dI);
      }
    }
    if (c.keys == 4) {
      std::fill(qI.begin(), qI.end(), 0.0f);
      std::fill(keys.begin(), keys.end(), 0.0f);
      for (int64_t t = 0; t < c.n; ++t)
        for (int64_t h = 0; h < c.nI; ++h) qI[static_cast<size_t>((t * c.nI + h) * c.dI + h)] = 1.0f;
      for (int64_t w = 0; w < c.capacity; ++w) keys[static_cast<size_t>(w * c.dI + (w < 5 ? 0 : 1))] = 1.0f;
    }
    if (c.g == 4) {
      float g0 = 1.0f, g1 = 1.0f;
      for (int i = 0; i < 1 << 22; ++i, g0 = g1) {
        g1 = std::nextafter(g0, 2.0f);
        if ((g0 * c.gs0) * c.gs1 == (g1 * c.gs0) * c.gs1 && g0 * (c.gs0 * c.gs1) != g1 * (c.gs0 * c.gs1)) break;
      }
      ASSERT_EQ((g0 * c.gs0) * c.gs1, (g1 * c.gs0) * c.gs1) << "no rounding tie found";
      for (int64_t t = 0; t < c.n; ++t) g[static_cast<size_t>(t * c.nI)] = g0, g[static_cast<size_t>(t * c.nI + 1)] = g1;
    }
    if (c.g == 1) std::fill(g.begin(), g.end(), 0.0f);
    if (c.g == 2) std::fill(g.begin() + c.nI, g.begin() + 2 * c.nI, f_nan());
    if (c.g == 3)
      for (int64_t t = 0; t < c.n; ++t)
        for (int64_t h = 0; h < c.nI; ++h) {
          float& v = g[static_cast<size_t>(t * c.nI + h)];
          v = (t % 2 == 0 || h == 0) ? std::fabs(v) : -std::fabs(v);  // even t: +inf scores; odd: NaN
        }
    // Rows beyond what any query sees hold poison (NaN): reading them may not change the result.
    for (int64_t i = max_visible * c.dI; i < c.capacity * c.dI; ++i) keys[static_cast<size_t>(i)] = poison_f32();
    const Tensor qt = x.f32(qI, c.nI * c.dI, c.n), gt = x.f32(g, c.nI, c.n), kt = x.f32(keys, c.dI, c.capacity);
    const Tensor out = x.alloc(TensorType::kI32, c.top_k, c.n);
    if (!x.step([&] { be().indexer_topk(qt, gt, c.gs0, c.gs1, kt, c.p0, c.ratio, out); })) continue;
    std::vector<int32_t> ref(static_cast<size_t>(c.n * c.top_k));
    for (int64_t t = 0; t < c.n; ++t)
      indexer_topk_query(qI.data() + t * c.nI * c.dI, g.data() + t * c.nI, c.nI, c.dI, c.gs0, c.gs1, keys.data(), c.p0 + t,
                         c.ratio, c.top_k, ref.data() + t * c.top_k);
    EXPECT_TRUE(same_i32("indexer_topk out", ref, x.get<int32_t>(out), c.n, c.top_k));
    count("indexer_topk");
  }
}

// Bad indexer_topk calls fail the step with an error that names the op (and leave the next step clean).
TEST_P(Conformance, IndexerShapeErrorsAreNamed) {
  struct Bad {
    std::string name;
    int64_t q_width, p0, capacity;
    TensorType out_type;
    std::string says;
  };
  const std::vector<Bad> bads = {
      {"qI width not nI·dI", 4 * 32 + 1, 40, 64, TensorType::kI32, "shapes do not fit"},
      {"out not I32", 4 * 32, 40, 64, TensorType::kF32, "shapes do not fit"},
      {"negative p0", 4 * 32, -1, 64, TensorType::kI32, "shapes do not fit"},
      {"visible beyond capacity", 4 * 32, 400, 64, TensorType::kI32, "beyond capacity"},
  };
  for (const Bad& b : bads) {
    SCOPED_TRACE(b.name);
    Ctx x(be());
    const int64_t n = 2, nI = 4, dI = 32;
    const Tensor qt = x.f32(std::vector<float>(static_cast<size_t>(n * b.q_width), 0.5f), b.q_width, n);
    const Tensor gt = x.f32(std::vector<float>(static_cast<size_t>(n * nI), 1.0f), nI, n);
    const Tensor kt = x.f32(std::vector<float>(static_cast<size_t>(b.capacity * dI), 0.25f), dI, b.capacity);
    const Tensor out = x.alloc(b.out_type, 8, n);
    be().begin_step();
    be().indexer_topk(qt, gt, 1.0f, 1.0f, kt, b.p0, 4, out);
    const Status st = be().end_step();
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("indexer_topk"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(b.says), std::string::npos) << st.message();
    be().begin_step();
    EXPECT_TRUE(be().end_step().ok()) << "end_step must clear the error";
    count("errors");
  }
}

// ================================================================================================
// attention + kv_store (chunk sequences over the ring)
// ================================================================================================

enum class AttnKind { kSliding, kHca, kCsa };

struct AttnCase {
  std::string name;
  AttnKind kind;
  int64_t H, d, W, ratio, top_k;
  int64_t start;                // first position; a ring of the earlier positions is uploaded when > 0
  std::vector<int64_t> chunks;  // attention + kv_store per chunk
  int specials = 0;             // 1: sinks ±inf / large, a NaN query element, huge logits
  bool unsorted = false;        // CSA: comp_index not ascending, with repeats
  int64_t unrope = 0;           // > 0: attention_unrope with this n_rot (o's heads rotated back) and store_kv
                                //      instead of attention and kv_store
};

std::vector<AttnCase> attn_cases() {
  return {
      {"real_csa_topk512_p2200", AttnKind::kCsa, 64, 512, 128, 4, 512, 2200, {3}},
      {"real_hca_r128_p300", AttnKind::kHca, 64, 512, 128, 128, 0, 300, {2}},
      {"real_sliding_p127", AttnKind::kSliding, 64, 512, 128, 0, 0, 127, {2}},
      {"sliding_W128_seq", AttnKind::kSliding, 8, 512, 128, 0, 0, 0, {1, 127, 128, 300, 3}},
      {"hca_W8_r4_seq", AttnKind::kHca, 4, 64, 8, 4, 0, 0, {1, 3, 4, 8, 9, 2, 16}},
      {"csa_W8_r2_seq", AttnKind::kCsa, 3, 40, 8, 2, 3, 0, {1, 7, 8, 17, 2}},
      {"csa_unsorted_index", AttnKind::kCsa, 2, 24, 4, 2, 5, 6, {5, 4}, 0, true},
      {"hca_odd_d7_W5", AttnKind::kHca, 5, 7, 5, 3, 0, 0, {2, 5, 6, 1, 11}},
      {"specials", AttnKind::kHca, 6, 32, 8, 4, 0, 9, {4, 9}, 1},
      {"one_head_W1", AttnKind::kSliding, 1, 16, 1, 0, 0, 0, {1, 2, 3}},
      // attention_unrope: decode-sized chunks (a GPU's fused form), prompt chunks, an odd head width, a
      // rotated tail across 32-column tiles (d 40, n_rot 16), the specials' NaN and infinite rows
      {"unrope_real_csa_p2200", AttnKind::kCsa, 64, 512, 128, 4, 512, 2200, {1}, 0, false, 64},
      {"unrope_real_sliding_p127", AttnKind::kSliding, 64, 512, 128, 0, 0, 127, {2}, 0, false, 64},
      {"unrope_sliding_W128_seq", AttnKind::kSliding, 8, 512, 128, 0, 0, 0, {1, 127, 300, 3}, 0, false, 64},
      {"unrope_csa_d40_tail16", AttnKind::kCsa, 3, 40, 8, 2, 3, 0, {1, 7, 17, 2}, 0, false, 16},
      {"unrope_hca_odd_d7", AttnKind::kHca, 5, 7, 5, 3, 0, 0, {2, 5, 1}, 0, false, 4},
      {"unrope_specials", AttnKind::kHca, 6, 32, 8, 4, 0, 9, {4, 9}, 1, false, 8},
      // one-query steps across the ring's wrap: each step's kv row stored while its attention runs (a
      // GPU's decode form) and read back from the ring by the next steps
      {"unrope_decode_steps_W8", AttnKind::kCsa, 4, 64, 8, 2, 3, 5, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, false, 16},
      {"unrope_decode_steps_sliding_W3", AttnKind::kSliding, 2, 32, 3, 0, 0, 0, {1, 1, 1, 1, 1, 2, 1, 1}, 0, false, 8},
  };
}

// The inputs of an attention case: every position's kv row, the queries of positions ≥ start,
// sinks, compressed entries and (CSA) each query's comp_index row.
struct AttnData {
  int64_t P = 0, capacity = 0;
  std::vector<float> kv_all, q_all, sinks, comp;
  std::vector<int32_t> index_all;
};

AttnData attn_data(const AttnCase& c, Rng& rng) {
  AttnData d;
  d.P = c.start + std::accumulate(c.chunks.begin(), c.chunks.end(), int64_t{0});
  const int64_t Hd = c.H * c.d;
  d.kv_all = rng.normals(d.P * c.d);
  d.sinks = rng.normals(c.H);
  d.q_all = rng.normals((d.P - c.start) * Hd);
  d.capacity = c.kind == AttnKind::kSliding ? 0 : d.P / c.ratio + 1;
  d.comp = rng.normals(d.capacity * c.d);
  if (c.specials == 1) {
    d.sinks[0] = -f_inf();
    d.sinks[1] = 30.0f;
    d.sinks[2] = f_inf();
    d.q_all[static_cast<size_t>(3 * c.d)] = f_nan();  // query 0 head 3
    for (int64_t i = 0; i < c.d; ++i) d.q_all[static_cast<size_t>(Hd + 4 * c.d + i)] *= 300.0f;  // query 1 head 4
    d.kv_all[static_cast<size_t>((c.start + 2) * c.d + 1)] = 1e30f;  // a key whose logits overflow
  }
  if (c.kind == AttnKind::kCsa) {  // a selection of visible entries (ascending unless unsorted), −1 padded
    d.index_all.assign(static_cast<size_t>((d.P - c.start) * c.top_k), -1);
    for (int64_t p = c.start; p < d.P; ++p) {
      const int64_t vis = (p + 1) / c.ratio;
      std::vector<int32_t> sel;
      for (int64_t w = 0; w < vis; ++w) sel.push_back(static_cast<int32_t>(w));
      std::shuffle(sel.begin(), sel.end(), rng.g);
      int64_t m = std::min(vis, c.top_k);
      if (p % 3 == 1) m = std::min<int64_t>(m, rng.range(0, m));  // fewer than top_k
      sel.resize(static_cast<size_t>(m));
      if (c.unsorted) {
        if (m > 0) sel.push_back(sel[0]);  // a repeat
        if (static_cast<int64_t>(sel.size()) > c.top_k) sel.resize(static_cast<size_t>(c.top_k));
      } else {
        std::sort(sel.begin(), sel.end());
      }
      std::copy(sel.begin(), sel.end(), d.index_all.begin() + (p - c.start) * c.top_k);
      if (c.unsorted && m < c.top_k - 1 && p % 2 == 0)  // entries after a −1 are never read
        d.index_all[static_cast<size_t>((p - c.start) * c.top_k + c.top_k - 1)] = 0;
    }
  }
  return d;
}

// Runs attention + kv_store over `chunks` (from c.start, with the ring of the earlier positions
// uploaded), checking each chunk's o and the ring against the reference; returns every chunk's o
// concatenated (empty on an op error).
std::vector<float> run_attention(Backend& be, const AttnCase& c, const AttnData& d, const std::vector<int64_t>& chunks,
                                 const std::function<void()>& counted) {
  Ctx x(be);
  const int64_t Hd = c.H * c.d;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)));
  const Tensor ring = x.alloc(TensorType::kF32, c.d, c.W);
  std::vector<float> ring_ref = poison_bytes_f32(c.W * c.d);
  for (int64_t p = std::max<int64_t>(0, c.start - c.W); p < c.start; ++p)
    std::copy(d.kv_all.begin() + p * c.d, d.kv_all.begin() + (p + 1) * c.d, ring_ref.begin() + (p % c.W) * c.d);
  x.put(ring, ring_ref.data(), c.W * c.d * 4);
  const Tensor sinks_t = x.f32_1d(d.sinks);
  const Tensor comp_t = d.capacity > 0 ? x.alloc(TensorType::kF32, c.d, d.capacity) : Tensor{};
  // attention_unrope's frequencies: RoPE's θ_k = 10000^(−2k/n_rot).
  std::vector<float> freqs(static_cast<size_t>(c.unrope / 2));
  for (int64_t k = 0; k < c.unrope / 2; ++k)
    freqs[static_cast<size_t>(k)] = static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(k) / static_cast<double>(c.unrope)));
  const Tensor freqs_t = c.unrope > 0 ? x.f32_1d(freqs) : Tensor{};
  std::vector<float> o_all;
  int64_t p0 = c.start;
  for (int64_t n : chunks) {
    SCOPED_TRACE("chunk [" + std::to_string(p0) + ", " + std::to_string(p0 + n) + ")");
    AttentionArgs a;
    a.q = x.f32(std::vector<float>(d.q_all.begin() + (p0 - c.start) * Hd, d.q_all.begin() + (p0 - c.start + n) * Hd), Hd, n);
    a.kv = x.f32(std::vector<float>(d.kv_all.begin() + p0 * c.d, d.kv_all.begin() + (p0 + n) * c.d), c.d, n);
    a.ring = ring;
    if (d.capacity > 0) {  // entries no query of the chunk may see are poisoned
      const int64_t vis = (p0 + n) / c.ratio;
      std::vector<float> cp = poison_bytes_f32(d.capacity * c.d);
      std::copy(d.comp.begin(), d.comp.begin() + vis * c.d, cp.begin());
      x.put(comp_t, cp.data(), d.capacity * c.d * 4);
      a.comp = comp_t;
    }
    if (c.kind == AttnKind::kCsa)
      a.comp_index = x.i32(std::vector<int32_t>(d.index_all.begin() + (p0 - c.start) * c.top_k,
                                                d.index_all.begin() + (p0 - c.start + n) * c.top_k),
                           c.top_k, n);
    a.sinks = sinks_t;
    a.o = x.alloc(TensorType::kF32, Hd, n);
    a.p0 = p0;
    a.n_head = c.H;
    a.window = c.W;
    a.ratio = c.ratio;
    a.scale = scale;
    const Tensor kv_t = a.kv;
    const int64_t chunk_p0 = p0;
    if (!x.step([&] {
          if (c.unrope > 0) {  // with its kv_store (store_kv: a GPU's one-query pass stores from its kernel)
            a.store_kv = true;
            be.attention_unrope(a, c.unrope, freqs_t);
          } else {
            be.attention(a);
            be.kv_store(kv_t, chunk_p0, ring);
          }
        }))
      return {};
    // Reference: the keys straight from the position history (no ring).
    std::vector<float> ref(static_cast<size_t>(n * Hd));
    for (int64_t t = 0; t < n; ++t) {
      const int64_t p = p0 + t;
      std::vector<const float*> keys;
      for (int64_t k = raw_first(p, c.W); k <= p; ++k) keys.push_back(d.kv_all.data() + k * c.d);
      if (c.kind == AttnKind::kHca)
        for (int64_t w = 0; w < (p + 1) / c.ratio; ++w) keys.push_back(d.comp.data() + w * c.d);
      if (c.kind == AttnKind::kCsa)
        for (int64_t i = 0; i < c.top_k; ++i) {
          const int32_t w = d.index_all[static_cast<size_t>((p - c.start) * c.top_k + i)];
          if (w < 0) break;
          keys.push_back(d.comp.data() + w * c.d);
        }
      attention_query(d.q_all.data() + (p - c.start) * Hd, c.H, c.d, keys, d.sinks.data(), scale, ref.data() + t * Hd);
      if (c.unrope > 0)  // then rope(o as [n·H][d], H, p0, n_rot, freqs, inverse)
        for (int64_t h = 0; h < c.H; ++h) rope_row(ref.data() + t * Hd + h * c.d, c.d, p, c.unrope, freqs.data(), true);
    }
    const std::vector<float> got = x.get<float>(a.o);
    EXPECT_TRUE(same_f32("attention o", ref, got, n, Hd));
    o_all.insert(o_all.end(), got.begin(), got.end());
    // kv_store: the rows of positions max(p0, p0 + n − W) … p0 + n − 1 at slot p mod W.
    for (int64_t p = std::max(p0, p0 + n - c.W); p < p0 + n; ++p) {
      const int64_t slot = (mutated("kvs_slot_shift") ? p + 1 : p) % c.W;
      std::copy(d.kv_all.begin() + p * c.d, d.kv_all.begin() + (p + 1) * c.d, ring_ref.begin() + slot * c.d);
    }
    EXPECT_TRUE(same_f32("ring after kv_store", ring_ref, x.get<float>(ring), c.W, c.d));
    p0 += n;
    counted();
  }
  return o_all;
}

TEST_P(Conformance, AttentionAndKvStore) {
  uint64_t seed = 1200;
  for (const AttnCase& c : attn_cases()) {
    SCOPED_TRACE("attention case " + c.name);
    Rng rng(++seed);
    const AttnData d = attn_data(c, rng);
    auto counted = [&] { count("attention+kv_store (chunk calls)"); };
    const std::vector<float> chunked = run_attention(be(), c, d, c.chunks, counted);
    count("attention");
    if (c.chunks.size() > 1 && !chunked.empty()) {  // the same positions as one chunk: the same bits
      SCOPED_TRACE("whole prompt in one chunk");
      const std::vector<float> whole = run_attention(be(), c, d, {d.P - c.start}, counted);
      EXPECT_TRUE(same_f32("attention o: whole prompt vs chunked", chunked, whole, d.P - c.start, c.H * c.d));
      count("attention");
    }
  }
}

struct KvsCase {
  std::string name;
  int64_t W, d, p0, n;
  bool prefilled;  // the ring holds earlier rows (else poison)
};

std::vector<KvsCase> kvs_cases() {
  return {
      {"first_chunk_short", 8, 5, 0, 3, false},
      {"wrap", 8, 5, 6, 5, true},
      {"longer_than_window", 8, 5, 3, 20, true},
      {"exactly_window", 8, 5, 16, 8, true},
      {"ends_at_window_close", 8, 5, 5, 3, true},
      {"real_W128_n300", 128, 512, 100, 300, true},
      {"real_W128_decode", 128, 512, 4095, 1, true},
      {"W1", 1, 3, 7, 4, true},
  };
}

TEST_P(Conformance, KvStore) {
  uint64_t seed = 1300;
  for (const KvsCase& c : kvs_cases()) {
    SCOPED_TRACE("kv_store case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    std::vector<float> ring_ref = c.prefilled ? rng.normals(c.W * c.d) : poison_bytes_f32(c.W * c.d);
    const Tensor ring = x.alloc(TensorType::kF32, c.d, c.W);
    x.put(ring, ring_ref.data(), c.W * c.d * 4);
    const std::vector<float> kv = rng.normals(c.n * c.d);
    const Tensor kv_t = x.f32(kv, c.d, c.n);
    if (!x.step([&] { be().kv_store(kv_t, c.p0, ring); })) continue;
    for (int64_t p = std::max(c.p0, c.p0 + c.n - c.W); p < c.p0 + c.n; ++p) {
      const int64_t slot = (mutated("kvs_slot_shift") ? p + 1 : p) % c.W;
      std::copy(kv.begin() + (p - c.p0) * c.d, kv.begin() + (p - c.p0 + 1) * c.d, ring_ref.begin() + slot * c.d);
    }
    EXPECT_TRUE(same_f32("ring (stored rows, the rest untouched)", ring_ref, x.get<float>(ring), c.W, c.d));
    count("kv_store");
  }
}

}  // namespace
}  // namespace dsv4::conformance
