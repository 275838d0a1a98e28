// tests/fuzz/gguf_reader_fuzz.cpp — libFuzzer target: GgufFile::parse on arbitrary bytes must
// return (ok or an error Status) without crashing, leaking, hanging or reading out of bounds; on
// success every view it hands out (strings, arrays, tensor data) must be readable.
#include <cstddef>
#include <cstdint>
#include <span>

#include "gguf/reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

volatile uint64_t g_sink = 0;

void touch(const dsv4::gguf::Value& v, int depth) {
  using dsv4::gguf::ValueType;
  uint64_t acc = v.u64 ^ static_cast<uint64_t>(v.i64) ^ (v.b ? 1u : 0u);
  for (char c : v.str) acc += static_cast<unsigned char>(c);
  if (v.type == ValueType::kArray) {
    if (v.elem_type == ValueType::kString && v.strings.size() != v.count) __builtin_trap();
    if (v.elem_type == ValueType::kArray && v.items.size() != v.count) __builtin_trap();
    for (uint64_t i = 0; i < v.count && i < 4096; ++i) {
      const dsv4::gguf::Value e = dsv4::gguf::array_element(v, i);
      if (depth > dsv4::gguf::kMaxArrayDepth) __builtin_trap();
      touch(e, depth + 1);
    }
  }
  g_sink = g_sink + acc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = dsv4::gguf::GgufFile::parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!r.ok()) {
    if (r.status().message().empty()) __builtin_trap();
    return 0;
  }
  const auto& f = *r;
  for (const auto& kv : f.metadata()) {
    touch(kv.value, 0);
    if (f.find(kv.key) != &kv.value) __builtin_trap();
    (void)f.get_int(kv.key);
    (void)f.get_float(kv.key);
    (void)f.get_string(kv.key);
    (void)f.get_int_array(kv.key);
    (void)f.get_float_array(kv.key);
    (void)f.get_string_array(kv.key);
  }
  for (const auto& t : f.tensors()) {
    if (t.offset + t.n_bytes > f.file_size() - f.data_offset()) __builtin_trap();
    if (t.n_bytes > 0) g_sink = g_sink + t.data[0] + t.data[t.n_bytes - 1];
    if (f.find_tensor(t.name) != &t) __builtin_trap();
  }
  return 0;
}
