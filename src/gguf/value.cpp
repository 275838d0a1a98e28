// gguf/value.cpp — the value-type table, array element decoding, UTF-8 validation.
#include "gguf/value.h"

#include <cstring>
#include <limits>

namespace dsv4::gguf {

std::optional<ValueType> value_type_from_id(uint32_t id) {
  if (id > static_cast<uint32_t>(ValueType::kF64)) return std::nullopt;
  return static_cast<ValueType>(id);
}

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::kU8: return "u8";
    case ValueType::kI8: return "i8";
    case ValueType::kU16: return "u16";
    case ValueType::kI16: return "i16";
    case ValueType::kU32: return "u32";
    case ValueType::kI32: return "i32";
    case ValueType::kF32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kU64: return "u64";
    case ValueType::kI64: return "i64";
    case ValueType::kF64: return "f64";
  }
  return "?";
}

uint32_t value_type_size(ValueType type) {
  switch (type) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool: return 1;
    case ValueType::kU16:
    case ValueType::kI16: return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32: return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64: return 8;
    case ValueType::kString:
    case ValueType::kArray: return 0;
  }
  return 0;
}

bool is_unsigned_int(ValueType t) {
  return t == ValueType::kU8 || t == ValueType::kU16 || t == ValueType::kU32 || t == ValueType::kU64;
}
bool is_signed_int(ValueType t) {
  return t == ValueType::kI8 || t == ValueType::kI16 || t == ValueType::kI32 || t == ValueType::kI64;
}
bool is_float(ValueType t) { return t == ValueType::kF32 || t == ValueType::kF64; }

Value Value::make_raw_array(ValueType elem, uint64_t n, const void* raw_bytes) {
  Value x;
  x.type = ValueType::kArray;
  x.elem_type = elem;
  x.count = n;
  x.raw = static_cast<const uint8_t*>(raw_bytes);
  return x;
}

Value Value::make_string_array(std::vector<std::string_view> v) {
  Value x;
  x.type = ValueType::kArray;
  x.elem_type = ValueType::kString;
  x.count = v.size();
  x.strings = std::move(v);
  return x;
}

Value Value::make_array_of_arrays(std::vector<Value> v) {
  Value x;
  x.type = ValueType::kArray;
  x.elem_type = ValueType::kArray;
  x.count = v.size();
  x.items = std::move(v);
  return x;
}

namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

Value array_element(const Value& a, uint64_t i) {
  if (a.elem_type == ValueType::kString) return Value::make_string(a.strings[i]);
  if (a.elem_type == ValueType::kArray) return a.items[i];
  const uint8_t* p = a.raw + i * value_type_size(a.elem_type);
  switch (a.elem_type) {
    case ValueType::kU8: return Value::make_u8(load<uint8_t>(p));
    case ValueType::kI8: return Value::make_i8(load<int8_t>(p));
    case ValueType::kU16: return Value::make_u16(load<uint16_t>(p));
    case ValueType::kI16: return Value::make_i16(load<int16_t>(p));
    case ValueType::kU32: return Value::make_u32(load<uint32_t>(p));
    case ValueType::kI32: return Value::make_i32(load<int32_t>(p));
    case ValueType::kF32: return Value::make_f32(load<float>(p));
    case ValueType::kBool: return Value::make_bool(load<uint8_t>(p) != 0);
    case ValueType::kU64: return Value::make_u64(load<uint64_t>(p));
    case ValueType::kI64: return Value::make_i64(load<int64_t>(p));
    case ValueType::kF64: return Value::make_f64(load<double>(p));
    case ValueType::kString:
    case ValueType::kArray: break;
  }
  return Value{};
}

std::optional<int64_t> value_as_int(const Value& v) {
  if (is_signed_int(v.type)) return v.i64;
  if (is_unsigned_int(v.type)) {
    if (v.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(v.u64);
  }
  return std::nullopt;
}

std::optional<uint64_t> value_as_uint(const Value& v) {
  if (is_unsigned_int(v.type)) return v.u64;
  if (is_signed_int(v.type) && v.i64 >= 0) return static_cast<uint64_t>(v.i64);
  return std::nullopt;
}

std::optional<double> value_as_double(const Value& v) {
  if (is_float(v.type)) return v.f64;
  if (is_signed_int(v.type)) return static_cast<double>(v.i64);
  if (is_unsigned_int(v.type)) return static_cast<double>(v.u64);
  return std::nullopt;
}

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1fu;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0fu;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07u;
    } else {
      return false;  // continuation byte, overlong lead (c0/c1) or > f4
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      const unsigned cc = p[i + k];
      if ((cc & 0xc0u) != 0x80u) return false;
      cp = (cp << 6) | (cc & 0x3fu);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return false;  // overlong
    if (cp >= 0xd800 && cp <= 0xdfff) return false;                            // surrogate
    if (cp > 0x10ffff) return false;
    i += len;
  }
  return true;
}

}  // namespace dsv4::gguf
