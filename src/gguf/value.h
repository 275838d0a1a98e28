// gguf/value.h — GGUF metadata value types and the Value view shared by the reader and writer.
//
// A Value is a view: strings and numeric arrays point into the bytes they were parsed from (the
// mapped file), so reading the 129280-entry token array copies no string bytes. Values built by
// hand for GgufWriter::add_value() must likewise point at memory that outlives the call.
// Owns: the value-type table (ids, names, element sizes) and decoding of array elements.
// Must not: know any model-specific key.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace dsv4::gguf {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian; so are our targets");

inline constexpr uint32_t kMagic = 0x46554747u;  // "GGUF" as bytes 47 47 55 46
inline constexpr uint32_t kVersion = 3;
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr int kMaxArrayDepth = 8;   // arrays nested deeper than this are rejected
inline constexpr int kMaxDims = 4;

enum class ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// The type for a raw id from a file; nullopt for ids outside 0..12.
std::optional<ValueType> value_type_from_id(uint32_t id);
// "u8", "i32", "f32", "bool", "string", "array", ...
std::string_view value_type_name(ValueType type);
// Bytes of one element of a fixed-size type (1..8); 0 for kString and kArray.
uint32_t value_type_size(ValueType type);
bool is_unsigned_int(ValueType type);
bool is_signed_int(ValueType type);
bool is_float(ValueType type);

struct Value {
  ValueType type = ValueType::kU8;
  uint64_t u64 = 0;       // kU8, kU16, kU32, kU64
  int64_t i64 = 0;        // kI8, kI16, kI32, kI64
  double f64 = 0;         // kF32 (widened exactly), kF64
  bool b = false;         // kBool
  std::string_view str;   // kString
  // kArray only:
  ValueType elem_type = ValueType::kU8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;           // fixed-size elements: count * value_type_size(elem_type) LE bytes, unaligned
  std::vector<std::string_view> strings;  // elem_type == kString: count entries
  std::vector<Value> items;               // elem_type == kArray: count entries

  static Value make_u8(uint8_t v) { Value x; x.type = ValueType::kU8; x.u64 = v; return x; }
  static Value make_i8(int8_t v) { Value x; x.type = ValueType::kI8; x.i64 = v; return x; }
  static Value make_u16(uint16_t v) { Value x; x.type = ValueType::kU16; x.u64 = v; return x; }
  static Value make_i16(int16_t v) { Value x; x.type = ValueType::kI16; x.i64 = v; return x; }
  static Value make_u32(uint32_t v) { Value x; x.type = ValueType::kU32; x.u64 = v; return x; }
  static Value make_i32(int32_t v) { Value x; x.type = ValueType::kI32; x.i64 = v; return x; }
  static Value make_u64(uint64_t v) { Value x; x.type = ValueType::kU64; x.u64 = v; return x; }
  static Value make_i64(int64_t v) { Value x; x.type = ValueType::kI64; x.i64 = v; return x; }
  static Value make_f32(float v) { Value x; x.type = ValueType::kF32; x.f64 = v; return x; }
  static Value make_f64(double v) { Value x; x.type = ValueType::kF64; x.f64 = v; return x; }
  static Value make_bool(bool v) { Value x; x.type = ValueType::kBool; x.b = v; return x; }
  static Value make_string(std::string_view v) { Value x; x.type = ValueType::kString; x.str = v; return x; }
  // Array of fixed-size elements from `count` little-endian elements at `raw`.
  static Value make_raw_array(ValueType elem, uint64_t n, const void* raw_bytes);
  static Value make_string_array(std::vector<std::string_view> v);
  static Value make_array_of_arrays(std::vector<Value> v);
};

// Element i (< count) of an array as a scalar, string or array Value. For fixed-size elements
// the Value is decoded from `raw`; for strings and arrays it is a copy of the view.
Value array_element(const Value& array, uint64_t i);

// Scalar conversions used by lenient getters: any integer type (value must fit), or any float.
std::optional<int64_t> value_as_int(const Value& v);
std::optional<uint64_t> value_as_uint(const Value& v);
std::optional<double> value_as_double(const Value& v);  // f32, f64, or any integer

// Valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF)?
bool is_valid_utf8(std::string_view s);

}  // namespace dsv4::gguf
