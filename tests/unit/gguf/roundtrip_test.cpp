// tests/unit/gguf/roundtrip_test.cpp — GgufWriter -> GgufFile round trips (every value type,
// several tensor types, custom alignment, chunked/streamed data), getters, and writer failures.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "gguf/writer.h"

namespace dsv4::gguf {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("dsv4_gguf_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

#define ASSERT_OK(expr)                                  \
  do {                                                   \
    const ::dsv4::Status s_ = (expr);                    \
    ASSERT_TRUE(s_.ok()) << s_.to_string();              \
  } while (0)

struct Spec {
  std::string name;
  TensorType type;
  std::vector<int64_t> ne;
};

const std::vector<Spec>& tensor_specs() {
  static const std::vector<Spec> specs = {
      {"f32.vec", TensorType::kF32, {7}},
      {"f16.mat", TensorType::kF16, {5, 3}},
      {"bf16.mat", TensorType::kBF16, {8, 2, 1}},
      {"q8_0.w", TensorType::kQ8_0, {64, 3}},
      {"q4_k.w", TensorType::kQ4_K, {256, 2}},
      {"iq2_xxs.experts", TensorType::kIQ2_XXS, {256, 2, 3}},
      {"mxfp4.w", TensorType::kMXFP4, {32, 1, 1, 2}},
      {"i32.ids", TensorType::kI32, {3}},
      {"rocm.fp2", TensorType::kQ2_0_ROCMFP2, {32, 5}},
  };
  return specs;
}

TEST(GgufRoundTrip, EveryValueTypeAndTensorTypes) {
  const std::string path = temp_path("all.gguf");
  const std::vector<uint8_t> u8s = {0, 1, 255};
  const std::vector<int8_t> i8s = {-128, 0, 127};
  const std::vector<uint16_t> u16s = {0, 65535};
  const std::vector<int16_t> i16s = {-32768, 32767};
  const std::vector<uint32_t> u32s = {0, 4294967295u, 7};
  const std::vector<int32_t> i32s = {0, 0, 4, 128, -5};
  const std::vector<uint64_t> u64s = {~uint64_t{0}, 1};
  const std::vector<int64_t> i64s = {std::numeric_limits<int64_t>::min(), 42};
  const std::vector<float> f32s = {1.5f, -0.0f, 1e-6f, std::numeric_limits<float>::infinity()};
  const std::vector<double> f64s = {3.141592653589793, -1e300};
  const bool bools[] = {true, false, true};
  const std::vector<std::string> strs = {"<｜begin▁of▁sentence｜>", "", "Ġhello", "a b"};
  const uint32_t inner_a[] = {1, 2};
  const uint32_t inner_b[] = {3};
  {
    GgufWriter w(path);
    ASSERT_OK(w.add_u8("t.u8", 200));
    ASSERT_OK(w.add_i8("t.i8", -100));
    ASSERT_OK(w.add_u16("t.u16", 60000));
    ASSERT_OK(w.add_i16("t.i16", -30000));
    ASSERT_OK(w.add_u32("t.u32", 4000000000u));
    ASSERT_OK(w.add_i32("t.i32", -2000000000));
    ASSERT_OK(w.add_f32("t.f32", 1e-6f));
    ASSERT_OK(w.add_bool("t.bool", true));
    ASSERT_OK(w.add_string("t.string", "DeepSeek V4 Flash ✓"));
    ASSERT_OK(w.add_u64("t.u64", ~uint64_t{0}));
    ASSERT_OK(w.add_i64("t.i64", std::numeric_limits<int64_t>::min()));
    ASSERT_OK(w.add_f64("t.f64", 0.1));
    ASSERT_OK(w.add_array_u8("a.u8", u8s));
    ASSERT_OK(w.add_array_i8("a.i8", i8s));
    ASSERT_OK(w.add_array_u16("a.u16", u16s));
    ASSERT_OK(w.add_array_i16("a.i16", i16s));
    ASSERT_OK(w.add_array_u32("a.u32", u32s));
    ASSERT_OK(w.add_array_i32("a.i32", i32s));
    ASSERT_OK(w.add_array_u64("a.u64", u64s));
    ASSERT_OK(w.add_array_i64("a.i64", i64s));
    ASSERT_OK(w.add_array_f32("a.f32", f32s));
    ASSERT_OK(w.add_array_f64("a.f64", f64s));
    ASSERT_OK(w.add_array_bool("a.bool", bools));
    ASSERT_OK(w.add_array_string("a.string", strs));
    ASSERT_OK(w.add_array_u32("a.empty", std::span<const uint32_t>()));
    ASSERT_OK(w.add_value("a.nested", Value::make_array_of_arrays(
                                          {Value::make_raw_array(ValueType::kU32, 2, inner_a),
                                           Value::make_raw_array(ValueType::kU32, 1, inner_b),
                                           Value::make_string_array({"x", "yz"})})));
    for (const auto& s : tensor_specs()) ASSERT_OK(w.add_tensor(s.name, s.type, s.ne));
    for (size_t i = 0; i < w.tensor_count(); ++i) ASSERT_OK(w.write_tensor(pattern(w.tensor_bytes(i), i)));
    ASSERT_OK(w.finish());
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const GgufFile& f = *r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(f.file_size(), fs::file_size(path));

  EXPECT_EQ(*f.get_u8("t.u8"), 200);
  EXPECT_EQ(*f.get_i8("t.i8"), -100);
  EXPECT_EQ(*f.get_u16("t.u16"), 60000);
  EXPECT_EQ(*f.get_i16("t.i16"), -30000);
  EXPECT_EQ(*f.get_u32("t.u32"), 4000000000u);
  EXPECT_EQ(*f.get_i32("t.i32"), -2000000000);
  EXPECT_EQ(*f.get_f32("t.f32"), 1e-6f);
  EXPECT_EQ(*f.get_bool("t.bool"), true);
  EXPECT_EQ(*f.get_string("t.string"), "DeepSeek V4 Flash ✓");
  EXPECT_EQ(*f.get_u64("t.u64"), ~uint64_t{0});
  EXPECT_EQ(*f.get_i64("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*f.get_f64("t.f64"), 0.1);

  // File order is insertion order.
  ASSERT_EQ(f.metadata().size(), 26u);
  EXPECT_EQ(f.metadata()[0].key, "t.u8");
  EXPECT_EQ(f.metadata()[25].key, "a.nested");

  auto check_ints = [&](const char* key, ValueType elem, std::vector<int64_t> want) {
    auto a = f.get_array(key, elem);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    auto v = f.get_int_array(key);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    EXPECT_EQ(*v, want) << key;
  };
  check_ints("a.u8", ValueType::kU8, {0, 1, 255});
  check_ints("a.i8", ValueType::kI8, {-128, 0, 127});
  check_ints("a.u16", ValueType::kU16, {0, 65535});
  check_ints("a.i16", ValueType::kI16, {-32768, 32767});
  check_ints("a.u32", ValueType::kU32, {0, 4294967295ll, 7});
  check_ints("a.i32", ValueType::kI32, {0, 0, 4, 128, -5});
  check_ints("a.i64", ValueType::kI64, {std::numeric_limits<int64_t>::min(), 42});
  check_ints("a.empty", ValueType::kU32, {});
  EXPECT_FALSE(f.get_int_array("a.u64").ok());  // 2^64-1 does not fit in int64
  EXPECT_EQ(array_element(**f.get_array("a.u64"), 0).u64, ~uint64_t{0});
  auto fl = f.get_float_array("a.f32");
  ASSERT_TRUE(fl.ok());
  EXPECT_EQ((*fl)[0], 1.5);
  EXPECT_TRUE(std::signbit((*fl)[1]));
  EXPECT_EQ((*fl)[2], static_cast<double>(1e-6f));
  EXPECT_TRUE(std::isinf((*fl)[3]));
  EXPECT_EQ(*f.get_float_array("a.f64"), f64s);
  const Value* bv = *f.get_array("a.bool", ValueType::kBool);
  ASSERT_EQ(bv->count, 3u);
  EXPECT_TRUE(array_element(*bv, 0).b);
  EXPECT_FALSE(array_element(*bv, 1).b);
  auto ss = f.get_string_array("a.string");
  ASSERT_TRUE(ss.ok());
  ASSERT_EQ(ss->size(), strs.size());
  for (size_t i = 0; i < strs.size(); ++i) EXPECT_EQ((*ss)[i], strs[i]);
  const Value* nested = *f.get_array("a.nested", ValueType::kArray);
  ASSERT_EQ(nested->count, 3u);
  EXPECT_EQ(nested->items[0].count, 2u);
  EXPECT_EQ(array_element(nested->items[0], 1).u64, 2u);
  EXPECT_EQ(array_element(nested->items[1], 0).u64, 3u);
  EXPECT_EQ(nested->items[2].strings[1], "yz");

  ASSERT_EQ(f.tensors().size(), tensor_specs().size());
  uint64_t expect_offset = 0;
  for (size_t i = 0; i < tensor_specs().size(); ++i) {
    const Spec& s = tensor_specs()[i];
    const TensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, s.name);
    EXPECT_EQ(t.type, s.type);
    EXPECT_EQ(t.n_dims, s.ne.size());
    int64_t n = 1;
    for (size_t d = 0; d < 4; ++d) {
      EXPECT_EQ(t.ne[d], d < s.ne.size() ? s.ne[d] : 1);
      n *= t.ne[d];
    }
    EXPECT_EQ(t.n_elements, n);
    EXPECT_EQ(t.n_bytes, static_cast<uint64_t>(tensor_row_bytes(s.type, s.ne[0]) * (n / s.ne[0])));
    EXPECT_EQ(t.offset, expect_offset);
    expect_offset += (t.n_bytes + 31) / 32 * 32;
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.n_bytes), pattern(t.n_bytes, static_cast<uint32_t>(i))) << s.name;
    EXPECT_EQ(f.find_tensor(s.name), &t);
  }
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
  EXPECT_EQ(f.file_size(), f.data_offset() + expect_offset);
}

TEST(GgufRoundTrip, GettersReportMissingAndWrongType) {
  const std::string path = temp_path("getters.gguf");
  {
    GgufWriter w(path);
    ASSERT_OK(w.add_u32("n.layers", 43));
    ASSERT_OK(w.add_string("arch", "deepseek4"));
    ASSERT_OK(w.finish());
  }
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto missing = f->get_u32("n.heads");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'n.heads' not found"), std::string::npos);
  auto wrong = f->get_u64("n.layers");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("'n.layers': expected u64, found u32"), std::string::npos);
  EXPECT_EQ(*f->get_int("n.layers"), 43);
  EXPECT_EQ(*f->get_float("n.layers"), 43.0);
  EXPECT_FALSE(f->get_int("arch").ok());
  EXPECT_FALSE(f->get_array("arch").ok());
  EXPECT_TRUE(f->tensors().empty());
}

TEST(GgufRoundTrip, CustomAlignmentAndStreamedData) {
  const std::string path = temp_path("aligned.gguf");
  const auto a = pattern(34 * 3, 1);
  const auto b = pattern(4 * 100, 2);
  {
    GgufWriter w(path);
    ASSERT_OK(w.add_u32("general.alignment", 256));
    ASSERT_EQ(w.alignment(), 256u);
    const int64_t ne_a[] = {96};
    const int64_t ne_b[] = {100};
    ASSERT_OK(w.add_tensor("a", TensorType::kQ8_0, ne_a));
    ASSERT_OK(w.add_tensor("b", TensorType::kF32, ne_b));
    // a: streamed by a producer in odd chunks; b: raw chunks.
    ASSERT_OK(w.write_tensor_stream([&](const GgufWriter::ChunkSink& sink) -> Status {
      for (size_t at = 0; at < a.size(); at += 7)
        DSV4_RETURN_IF_ERROR(sink(std::span<const uint8_t>(a).subspan(at, std::min<size_t>(7, a.size() - at))));
      return ok_status();
    }));
    ASSERT_OK(w.write_tensor_chunk(std::span<const uint8_t>(b).first(13)));
    ASSERT_OK(w.write_tensor_chunk(std::span<const uint8_t>(b).subspan(13)));
    ASSERT_OK(w.finish());
  }
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->alignment(), 256u);
  EXPECT_EQ(f->data_offset() % 256, 0u);
  EXPECT_EQ(f->tensors()[1].offset, 256u);
  EXPECT_EQ(std::vector<uint8_t>(f->tensors()[0].data, f->tensors()[0].data + a.size()), a);
  EXPECT_EQ(std::vector<uint8_t>(f->tensors()[1].data, f->tensors()[1].data + b.size()), b);
  EXPECT_EQ(f->file_size(), f->data_offset() + 256 + 512);  // b (400 B) pads to 512
}

TEST(GgufWriterErrors, IncompleteTensorLeavesNoFile) {
  const std::string path = temp_path("incomplete.gguf");
  fs::remove(path);
  {
    GgufWriter w(path);
    const int64_t ne[] = {8};
    ASSERT_OK(w.add_tensor("x", TensorType::kF32, ne));
    ASSERT_OK(w.add_tensor("y", TensorType::kF32, ne));
    ASSERT_OK(w.write_tensor(pattern(32, 0)));
    ASSERT_OK(w.write_tensor_chunk(pattern(5, 0)));
    const Status s = w.finish();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("tensor 'y' received 5 of 32 bytes"), std::string::npos) << s.message();
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(GgufWriterErrors, WrongSizeIsRejected) {
  const std::string path = temp_path("wrongsize.gguf");
  GgufWriter w(path);
  const int64_t ne[] = {8};
  ASSERT_OK(w.add_tensor("x", TensorType::kF32, ne));
  const Status s = w.write_tensor(pattern(31, 0));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tensor 'x': got 31 bytes, expected exactly 32"), std::string::npos) << s.message();
  EXPECT_FALSE(w.finish().ok());  // sticky
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(GgufWriterErrors, ProducerOverrunAndTooMuchData) {
  const std::string path = temp_path("overrun.gguf");
  GgufWriter w(path);
  const int64_t ne[] = {8};
  ASSERT_OK(w.add_tensor("x", TensorType::kF32, ne));
  const Status s = w.write_tensor_stream([](const GgufWriter::ChunkSink& sink) { return sink(pattern(40, 0)); });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("producer wrote more than its 32 bytes"), std::string::npos) << s.message();
}

TEST(GgufWriterErrors, BadDeclarations) {
  GgufWriter w(temp_path("bad_decl.gguf"));
  ASSERT_OK(w.add_u32("k", 1));
  EXPECT_FALSE(w.add_u32("k", 2).ok());
  EXPECT_FALSE(w.add_u32("", 2).ok());
  EXPECT_FALSE(w.add_string("s", "\xff").ok());
  EXPECT_FALSE(w.add_u32("general.alignment", 24).ok());
  EXPECT_FALSE(w.add_u64("general.alignment", 32).ok());
  const int64_t bad_row[] = {33};
  const int64_t zero[] = {4, 0};
  const int64_t five[] = {1, 1, 1, 1, 1};
  const int64_t ok[] = {32};
  EXPECT_FALSE(w.add_tensor("q", TensorType::kQ8_0, bad_row).ok());
  EXPECT_FALSE(w.add_tensor("z", TensorType::kF32, zero).ok());
  EXPECT_FALSE(w.add_tensor("five", TensorType::kF32, five).ok());
  EXPECT_FALSE(w.add_tensor("none", TensorType::kF32, {}).ok());
  ASSERT_OK(w.add_tensor("t", TensorType::kQ8_0, ok));
  EXPECT_FALSE(w.add_tensor("t", TensorType::kQ8_0, ok).ok());
  std::vector<Value> deep;
  Value v = Value::make_raw_array(ValueType::kU8, 0, nullptr);
  for (int i = 0; i < 8; ++i) v = Value::make_array_of_arrays({v});
  EXPECT_FALSE(w.add_value("deep", v).ok());
}

TEST(GgufReader, OpenMissingFile) {
  auto r = GgufFile::open(temp_path("does_not_exist.gguf"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace dsv4::gguf
