// tests/tools/gguf_samples.cpp — writes sample GGUF files for tests/python/test_gguf_crosscheck.py.
//
//   gguf_samples OUT_DIR [SEED]
// writes
//   OUT_DIR/meta.gguf      metadata of every value type (scalars, arrays of each, strings, nested)
//                          plus tensors of several types with patterned bytes;
//   OUT_DIR/quants.gguf    (general.alignment = 64) for every type whose CPU kernel table has a
//                          dequantize_row (except lucebox ids >= 100, which gguf-py cannot open): "q.<type>" = random valid blocks (scale fields patched to
//                          finite values) and "deq.<type>" = F32 holding OUR dequantized values;
//   OUT_DIR/manifest.json  what was written (keys, types, values; tensor names, types, ne, bytes)
//                          and what our reader reports back (offsets, data offset).
// The Python test reads the files with llama.cpp's gguf package and compares everything,
// dequantized values bit for bit.
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/quant.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "numerics/half.h"

namespace {

using dsv4::Status;
using dsv4::TensorType;
using dsv4::gguf::GgufWriter;
using dsv4::gguf::Value;
using dsv4::gguf::ValueType;
using nlohmann::json;

struct Sample {
  std::string name;
  TensorType type;
  std::vector<int64_t> ne;
  std::vector<uint8_t> data;
};

// A random f16 that is finite (exponent != 31).
uint16_t finite_f16(std::mt19937_64& rng) {
  for (;;) {
    const auto h = static_cast<uint16_t>(rng());
    if ((h & 0x7c00u) != 0x7c00u) return h;
  }
}

void put_f16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

// Random bytes that are a valid encoding of `type`: f16/bf16/f32 elements and f16 scales finite.
std::vector<uint8_t> random_blocks(TensorType type, int64_t n_elements, std::mt19937_64& rng) {
  const auto& info = dsv4::tensor_type_info(type);
  const int64_t n_blocks = n_elements / info.block_elems;
  std::vector<uint8_t> out(static_cast<size_t>(n_blocks * info.block_bytes));
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* blk = out.data() + i * info.block_bytes;
    switch (type) {
      case TensorType::kF32: {
        float f = std::uniform_real_distribution<float>(-8.0f, 8.0f)(rng);
        if (i % 7 == 0) f = dsv4::f32_from_bits(static_cast<uint32_t>(rng()) & 0x807fffffu);  // subnormal / zero
        std::memcpy(blk, &f, 4);
        break;
      }
      case TensorType::kF16: put_f16(blk, finite_f16(rng)); break;
      case TensorType::kBF16:
        for (;;) {
          const auto b = static_cast<uint16_t>(rng());
          if ((b & 0x7f80u) != 0x7f80u) {
            put_f16(blk, b);
            break;
          }
        }
        break;
      case TensorType::kQ8_0:  // { f16 d; int8 qs[32]; }
      case TensorType::kIQ2_XXS:  // { f16 d; u16 qs[32]; }
        put_f16(blk, finite_f16(rng));
        break;
      case TensorType::kQ2_K:  // { u8 scales[16]; u8 qs[64]; f16 d; f16 dmin; }
        put_f16(blk + 80, finite_f16(rng));
        put_f16(blk + 82, finite_f16(rng));
        break;
      case TensorType::kQ4_K:  // { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; }
        put_f16(blk, finite_f16(rng));
        put_f16(blk + 2, finite_f16(rng));
        break;
      case TensorType::kMXFP4:  // { u8 e; u8 qs[16]; }: keep 12 * 2^(e-128) finite
        blk[0] = static_cast<uint8_t>(rng() % 250);
        break;
      default: break;  // ROCmFPx: every scale byte decodes to a finite value (invalid ones to 0)
    }
  }
  return out;
}

json value_json(const Value& v) {
  json j;
  j["type"] = std::string(dsv4::gguf::value_type_name(v.type));
  switch (v.type) {
    case ValueType::kU8: case ValueType::kU16: case ValueType::kU32: case ValueType::kU64: j["value"] = v.u64; break;
    case ValueType::kI8: case ValueType::kI16: case ValueType::kI32: case ValueType::kI64: j["value"] = v.i64; break;
    case ValueType::kF32: case ValueType::kF64: j["value"] = v.f64; break;
    case ValueType::kBool: j["value"] = v.b; break;
    case ValueType::kString: j["value"] = std::string(v.str); break;
    case ValueType::kArray: {
      j["elem_type"] = std::string(dsv4::gguf::value_type_name(v.elem_type));
      json a = json::array();
      for (uint64_t i = 0; i < v.count; ++i) {
        const Value e = dsv4::gguf::array_element(v, i);
        a.push_back(e.type == ValueType::kArray ? value_json(e) : value_json(e)["value"]);
      }
      j["value"] = std::move(a);
      break;
    }
  }
  return j;
}

Status write_file(const std::string& path, const std::vector<std::pair<std::string, Value>>& kvs,
                  const std::vector<Sample>& tensors) {
  GgufWriter w(path);
  for (const auto& [k, v] : kvs) DSV4_RETURN_IF_ERROR(w.add_value(k, v));
  for (const auto& t : tensors) DSV4_RETURN_IF_ERROR(w.add_tensor(t.name, t.type, t.ne));
  for (const auto& t : tensors) DSV4_RETURN_IF_ERROR(w.write_tensor(t.data));
  return w.finish();
}

// Describes a written file: metadata as written, tensors as declared + offsets our reader reports.
dsv4::Result<json> describe(const std::string& path, const std::vector<std::pair<std::string, Value>>& kvs,
                            const std::vector<Sample>& tensors) {
  DSV4_ASSIGN_OR_RETURN(dsv4::gguf::GgufFile f, dsv4::gguf::GgufFile::open(path));
  json j;
  j["path"] = path;
  j["alignment"] = f.alignment();
  j["data_offset"] = f.data_offset();
  j["file_size"] = f.file_size();
  json md = json::array();
  for (const auto& [k, v] : kvs) {
    json e = value_json(v);
    e["key"] = k;
    md.push_back(std::move(e));
  }
  j["metadata"] = std::move(md);
  json ts = json::array();
  for (const auto& t : tensors) {
    const dsv4::gguf::TensorInfo* info = f.find_tensor(t.name);
    if (info == nullptr) return dsv4::internal_error(path + ": tensor '" + t.name + "' not read back");
    ts.push_back({{"name", t.name}, {"type", std::string(dsv4::tensor_type_name(t.type))},
                  {"type_id", static_cast<uint32_t>(t.type)}, {"ne", t.ne}, {"bytes", t.data.size()},
                  {"offset", info->offset}, {"file_offset", f.data_offset() + info->offset}});
  }
  j["tensors"] = std::move(ts);
  return j;
}

Status run(const std::string& dir, uint64_t seed) {
  std::mt19937_64 rng(seed);
  // (a) every metadata value type.
  static const uint8_t u8s[] = {0, 1, 255};
  static const int8_t i8s[] = {-128, -1, 127};
  static const uint16_t u16s[] = {0, 65535, 12345};
  static const int16_t i16s[] = {-32768, 32767};
  static const uint32_t u32s[] = {0, 4294967295u, 65536};
  static const int32_t i32s[] = {0, 0, 4, 128, 4, 128, -1};
  static const uint64_t u64s[] = {0, 18446744073709551615ull};
  static const int64_t i64s[] = {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  static const float f32s[] = {10.0f, 1e-6f, -0.0f, 3.4028234663852886e38f, 1.4e-45f};
  static const double f64s[] = {0.1, -1e300, 5e-324};
  static const uint8_t bools[] = {1, 0, 1, 1};
  static const uint32_t inner[] = {7, 8, 9};
  std::vector<std::pair<std::string, Value>> kvs = {
      {"general.architecture", Value::make_string("deepseek4")},
      {"general.name", Value::make_string("DeepSeek V4 Flash — sample ✓ <｜User｜>")},
      {"test.u8", Value::make_u8(250)},
      {"test.i8", Value::make_i8(-120)},
      {"test.u16", Value::make_u16(65000)},
      {"test.i16", Value::make_i16(-32000)},
      {"test.u32", Value::make_u32(4000000000u)},
      {"test.i32", Value::make_i32(-2000000000)},
      {"test.f32", Value::make_f32(1e-6f)},
      {"test.bool", Value::make_bool(true)},
      {"test.bool_false", Value::make_bool(false)},
      {"test.string", Value::make_string("line1\nline2\t\"quoted\"")},
      {"test.empty_string", Value::make_string("")},
      {"test.u64", Value::make_u64(18446744073709551615ull)},
      {"test.i64", Value::make_i64(std::numeric_limits<int64_t>::min())},
      {"test.f64", Value::make_f64(2.718281828459045)},
      {"arr.u8", Value::make_raw_array(ValueType::kU8, 3, u8s)},
      {"arr.i8", Value::make_raw_array(ValueType::kI8, 3, i8s)},
      {"arr.u16", Value::make_raw_array(ValueType::kU16, 3, u16s)},
      {"arr.i16", Value::make_raw_array(ValueType::kI16, 2, i16s)},
      {"arr.u32", Value::make_raw_array(ValueType::kU32, 3, u32s)},
      {"arr.i32", Value::make_raw_array(ValueType::kI32, 7, i32s)},
      {"arr.u64", Value::make_raw_array(ValueType::kU64, 2, u64s)},
      {"arr.i64", Value::make_raw_array(ValueType::kI64, 2, i64s)},
      {"arr.f32", Value::make_raw_array(ValueType::kF32, 5, f32s)},
      {"arr.f64", Value::make_raw_array(ValueType::kF64, 3, f64s)},
      {"arr.bool", Value::make_raw_array(ValueType::kBool, 4, bools)},
      {"arr.string", Value::make_string_array({"<｜begin▁of▁sentence｜>", "Ġthe", "", "a b"})},
      {"arr.empty", Value::make_raw_array(ValueType::kF32, 0, nullptr)},
      // Last: gguf-py reads nested arrays' layout but not their contents (the test checks types).
      {"arr.nested", Value::make_array_of_arrays({Value::make_raw_array(ValueType::kU32, 3, inner),
                                                  Value::make_string_array({"x", "yz"})})},
  };
  std::vector<Sample> meta_tensors = {
      {"token_embd.weight", TensorType::kF16, {64, 10}, {}},
      {"blk.0.attn_norm.weight", TensorType::kF32, {64}, {}},
      {"blk.0.ffn_gate_exps.weight", TensorType::kQ8_0, {64, 4, 3}, {}},
      {"blk.0.ffn_down.weight", TensorType::kQ4_K, {256, 2}, {}},
      {"blk.0.ffn_gate_tid2eid", TensorType::kI32, {6, 5}, {}},
      {"output.weight", TensorType::kBF16, {64, 3, 1, 2}, {}},
  };
  for (auto& t : meta_tensors) {
    int64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    t.data = random_blocks(t.type, n, rng);
  }
  const std::string meta_path = dir + "/meta.gguf";
  DSV4_RETURN_IF_ERROR(write_file(meta_path, kvs, meta_tensors));

  // (b) every type with a dequantizer: random blocks + our dequantized values.
  constexpr int64_t kRow = 512, kRows = 4;
  std::vector<std::pair<std::string, Value>> qkvs = {{"general.alignment", Value::make_u32(64)},
                                                     {"test.seed", Value::make_u64(seed)}};
  std::vector<Sample> qt;
  json pairs = json::array();
  json skipped = json::array();
  json skipped_rocm = json::array();
  for (const auto& info : dsv4::all_tensor_types()) {
    const dsv4::cpu::TypeKernels* k = dsv4::cpu::type_kernels(info.type);
    if (k == nullptr || k->dequantize_row == nullptr) {
      if (info.has_kernels) skipped.push_back(std::string(info.name));
      continue;
    }
    if (static_cast<uint32_t>(info.type) >= 100) {  // lucebox-only ids: gguf-py cannot even open such a file
      skipped_rocm.push_back(std::string(info.name));
      continue;
    }
    Sample q{"q." + std::string(info.name), info.type, {kRow, kRows}, random_blocks(info.type, kRow * kRows, rng)};
    std::vector<float> deq(static_cast<size_t>(kRow * kRows));
    const int64_t row_bytes = dsv4::tensor_row_bytes(info.type, kRow);
    for (int64_t r = 0; r < kRows; ++r) k->dequantize_row(q.data.data() + r * row_bytes, deq.data() + r * kRow, kRow);
    Sample d{"deq." + std::string(info.name), TensorType::kF32, {kRow, kRows}, {}};
    d.data.resize(deq.size() * 4);
    std::memcpy(d.data.data(), deq.data(), d.data.size());
    pairs.push_back({{"type", std::string(info.name)}, {"type_id", static_cast<uint32_t>(info.type)},
                     {"quant", q.name}, {"dequant", d.name}});
    qt.push_back(std::move(q));
    qt.push_back(std::move(d));
  }
  const std::string quant_path = dir + "/quants.gguf";
  DSV4_RETURN_IF_ERROR(write_file(quant_path, qkvs, qt));

  json manifest;
  manifest["seed"] = seed;
  DSV4_ASSIGN_OR_RETURN(manifest["meta"], describe(meta_path, kvs, meta_tensors));
  DSV4_ASSIGN_OR_RETURN(manifest["quants"], describe(quant_path, qkvs, qt));
  manifest["quants"]["pairs"] = std::move(pairs);
  manifest["quants"]["skipped_no_dequantizer"] = std::move(skipped);
  manifest["quants"]["skipped_not_in_gguf_py"] = std::move(skipped_rocm);
  const std::string out = manifest.dump(1);
  std::FILE* fp = std::fopen((dir + "/manifest.json").c_str(), "wb");
  if (fp == nullptr) return dsv4::io_error(dir + "/manifest.json: cannot create");
  const bool ok = std::fwrite(out.data(), 1, out.size(), fp) == out.size();
  if (std::fclose(fp) != 0 || !ok) return dsv4::io_error(dir + "/manifest.json: write failed");
  return dsv4::ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: gguf_samples OUT_DIR [SEED]\n");
    return 2;
  }
  const uint64_t seed = argc == 3 ? std::strtoull(argv[2], nullptr, 10) : 20260521;
  const Status s = run(argv[1], seed);
  if (!s.ok()) {
    std::fprintf(stderr, "gguf_samples: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}
