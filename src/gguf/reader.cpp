// gguf/reader.cpp — parsing and validation of GGUF v3 files, and the typed metadata getters.
//
// Bounds discipline: every read goes through Cursor, which checks the bytes that remain first.
// Counts read from the file (n_kv, n_tensors, array lengths) are checked against the minimum
// bytes each entry needs before any loop runs, and vectors grow with what was actually parsed
// (reservations are capped), so memory stays proportional to bytes really present.
#include "gguf/reader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <numeric>

namespace dsv4::gguf {
namespace {

constexpr uint64_t kMinKvBytes = 8 + 4 + 1;  // key length, value type, smallest value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, one dim, type, offset
constexpr uint64_t kMaxReserve = uint64_t{1} << 16;  // cap on reservations driven by file counts

std::string quoted(std::string_view s) {
  // Names are shown as-is when valid UTF-8; invalid ones are shown with hex escapes.
  std::string out = "'";
  if (is_valid_utf8(s)) {
    out.append(s.substr(0, 200));
    if (s.size() > 200) out += "...";
  } else {
    static const char* kHex = "0123456789abcdef";
    for (size_t i = 0; i < s.size() && i < 64; ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      if (c >= 0x20 && c < 0x7f) {
        out += static_cast<char>(c);
      } else {
        out += "\\x";
        out += kHex[c >> 4];
        out += kHex[c & 15];
      }
    }
  }
  return out + "'";
}

class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size, const std::string& name) : base_(base), size_(size), name_(name) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  Status truncated(uint64_t need, const std::string& what) const {
    return corrupt(name_ + ": truncated at offset " + std::to_string(pos_) + " reading " + what + " (need " +
                   std::to_string(need) + " bytes, " + std::to_string(remaining()) + " remain)");
  }

  Status bytes(uint64_t n, const uint8_t** out, const std::string& what) {
    if (n > remaining()) return truncated(n, what);
    *out = base_ + pos_;
    pos_ += n;
    return ok_status();
  }

  template <typename T>
  Status scalar(T* out, const std::string& what) {
    const uint8_t* p = nullptr;
    DSV4_RETURN_IF_ERROR(bytes(sizeof(T), &p, what));
    std::memcpy(out, p, sizeof(T));
    return ok_status();
  }

  // A gguf_string: u64 length + bytes, which must be valid UTF-8.
  Status string(std::string_view* out, const std::string& what) {
    uint64_t len = 0;
    DSV4_RETURN_IF_ERROR(scalar(&len, what + " length"));
    if (len > remaining())
      return corrupt(name_ + ": " + what + " at offset " + std::to_string(pos_ - 8) + " has length " +
                     std::to_string(len) + " but only " + std::to_string(remaining()) + " bytes remain in the file");
    const uint8_t* p = nullptr;
    DSV4_RETURN_IF_ERROR(bytes(len, &p, what));
    *out = std::string_view(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
    if (!is_valid_utf8(*out)) return corrupt(name_ + ": " + what + " " + quoted(*out) + " is not valid UTF-8");
    return ok_status();
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& name_;
};

Status parse_value(Cursor& c, const std::string& name, std::string_view key, ValueType type, int depth, Value* out);

Status parse_array(Cursor& c, const std::string& name, std::string_view key, int depth, Value* out) {
  const std::string ctx = "key " + quoted(key);
  uint32_t elem_id = 0;
  DSV4_RETURN_IF_ERROR(c.scalar(&elem_id, ctx + ": array element type"));
  const auto elem = value_type_from_id(elem_id);
  if (!elem)
    return corrupt(name + ": " + ctx + ": unknown array element type " + std::to_string(elem_id) +
                   " (expected 0..12)");
  if (*elem == ValueType::kArray && depth + 1 >= kMaxArrayDepth)
    return corrupt(name + ": " + ctx + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
  uint64_t count = 0;
  DSV4_RETURN_IF_ERROR(c.scalar(&count, ctx + ": array count"));
  const uint64_t min_elem = *elem == ValueType::kString ? 8 : *elem == ValueType::kArray ? 12 : value_type_size(*elem);
  if (count > c.remaining() / min_elem)
    return corrupt(name + ": " + ctx + ": array of " + std::to_string(count) + " " +
                   std::string(value_type_name(*elem)) + " needs at least " + std::to_string(min_elem) +
                   " bytes per element but only " + std::to_string(c.remaining()) + " bytes remain");
  out->type = ValueType::kArray;
  out->elem_type = *elem;
  out->count = count;
  if (*elem == ValueType::kString) {
    out->strings.reserve(static_cast<size_t>(std::min(count, kMaxReserve)));
    for (uint64_t i = 0; i < count; ++i) {
      std::string_view s;
      DSV4_RETURN_IF_ERROR(c.string(&s, ctx + ": string element " + std::to_string(i)));
      out->strings.push_back(s);
    }
  } else if (*elem == ValueType::kArray) {
    out->items.reserve(static_cast<size_t>(std::min(count, kMaxReserve)));
    for (uint64_t i = 0; i < count; ++i) {
      Value v;
      DSV4_RETURN_IF_ERROR(parse_value(c, name, key, ValueType::kArray, depth + 1, &v));
      out->items.push_back(std::move(v));
    }
  } else {
    DSV4_RETURN_IF_ERROR(c.bytes(count * min_elem, &out->raw, ctx + ": array data"));
  }
  return ok_status();
}

Status parse_value(Cursor& c, const std::string& name, std::string_view key, ValueType type, int depth, Value* out) {
  const std::string what = "value of key " + quoted(key);
  out->type = type;
  switch (type) {
    case ValueType::kU8: { uint8_t v = 0; DSV4_RETURN_IF_ERROR(c.scalar(&v, what)); out->u64 = v; break; }
    case ValueType::kI8: { int8_t v = 0; DSV4_RETURN_IF_ERROR(c.scalar(&v, what)); out->i64 = v; break; }
    case ValueType::kU16: { uint16_t v = 0; DSV4_RETURN_IF_ERROR(c.scalar(&v, what)); out->u64 = v; break; }
    case ValueType::kI16: { int16_t v = 0; DSV4_RETURN_IF_ERROR(c.scalar(&v, what)); out->i64 = v; break; }
    case ValueType::kU32: { uint32_t v = 0; DSV4_RETURN_IF_ERROR(c.scalar(&v, what)); out->u64 = v; break; }
    case ValueType::kI32: { int32_t v = 0; DSV4_RETURN_IF_ERROR(c.scalar(&v, what)); out->i64 = v; break; }
    case ValueType::kU64: { DSV4_RETURN_IF_ERROR(c.scalar(&out->u64, what)); break; }
    case ValueType::kI64: { DSV4_RETURN_IF_ERROR(c.scalar(&out->i64, what)); break; }
    case ValueType::kF32: { float v = 0; DSV4_RETURN_IF_ERROR(c.scalar(&v, what)); out->f64 = v; break; }
    case ValueType::kF64: { DSV4_RETURN_IF_ERROR(c.scalar(&out->f64, what)); break; }
    case ValueType::kBool: { uint8_t v = 0; DSV4_RETURN_IF_ERROR(c.scalar(&v, what)); out->b = v != 0; break; }
    case ValueType::kString: DSV4_RETURN_IF_ERROR(c.string(&out->str, what)); break;
    case ValueType::kArray: DSV4_RETURN_IF_ERROR(parse_array(c, name, key, depth, out)); break;
  }
  return ok_status();
}

bool mul_overflows(int64_t a, int64_t b, int64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

}  // namespace

Result<GgufFile> GgufFile::open(const std::string& path) {
  try {
    DSV4_ASSIGN_OR_RETURN(MappedFile map, MappedFile::open(path));
    GgufFile f;
    f.name_ = path;
    f.map_ = std::move(map);
    f.base_ = f.map_.data();
    f.size_ = f.map_.size();
    DSV4_RETURN_IF_ERROR(f.parse_image());
    return f;
  } catch (const std::bad_alloc&) {
    return resource_exhausted(path + ": out of memory while parsing GGUF metadata");
  }
}

Result<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, std::string name) {
  try {
    GgufFile f;
    f.name_ = std::move(name);
    f.owned_.assign(bytes.begin(), bytes.end());
    f.base_ = f.owned_.data();
    f.size_ = f.owned_.size();
    DSV4_RETURN_IF_ERROR(f.parse_image());
    return f;
  } catch (const std::bad_alloc&) {
    return resource_exhausted(name + ": out of memory while parsing GGUF metadata");
  }
}

Status GgufFile::parse_image() {
  Cursor c(base_, size_, name_);
  uint32_t magic = 0;
  DSV4_RETURN_IF_ERROR(c.scalar(&magic, "header: magic"));
  if (magic != kMagic) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08x", magic);
    return corrupt(name_ + ": bad magic " + buf + " (expected 0x46554747, \"GGUF\"): not a GGUF file");
  }
  DSV4_RETURN_IF_ERROR(c.scalar(&version_, "header: version"));
  if (version_ != kVersion)
    return unsupported(name_ + ": GGUF version " + std::to_string(version_) + " is not supported (expected 3)");
  uint64_t n_tensors = 0, n_kv = 0;
  DSV4_RETURN_IF_ERROR(c.scalar(&n_tensors, "header: tensor count"));
  DSV4_RETURN_IF_ERROR(c.scalar(&n_kv, "header: metadata count"));
  const uint64_t rest = c.remaining();
  if (n_kv > rest / kMinKvBytes)
    return corrupt(name_ + ": header: metadata count " + std::to_string(n_kv) + " cannot fit in the " +
                   std::to_string(rest) + " bytes after the header (each entry needs at least " +
                   std::to_string(kMinKvBytes) + ")");
  if (n_tensors > rest / kMinTensorInfoBytes || n_kv * kMinKvBytes + n_tensors * kMinTensorInfoBytes > rest)
    return corrupt(name_ + ": header: tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                   std::to_string(rest) + " bytes after the header (each tensor info needs at least " +
                   std::to_string(kMinTensorInfoBytes) + ")");

  // Metadata.
  for (uint64_t i = 0; i < n_kv; ++i) {
    KeyValue kv;
    kv.file_offset = c.pos();
    DSV4_RETURN_IF_ERROR(c.string(&kv.key, "metadata key " + std::to_string(i)));
    if (kv.key.empty()) return corrupt(name_ + ": metadata key " + std::to_string(i) + " is empty");
    if (kv_index_.count(kv.key) != 0) return corrupt(name_ + ": duplicate metadata key " + quoted(kv.key));
    uint32_t type_id = 0;
    DSV4_RETURN_IF_ERROR(c.scalar(&type_id, "value type of key " + quoted(kv.key)));
    const auto type = value_type_from_id(type_id);
    if (!type)
      return corrupt(name_ + ": key " + quoted(kv.key) + ": unknown value type " + std::to_string(type_id) +
                     " (expected 0..12)");
    DSV4_RETURN_IF_ERROR(parse_value(c, name_, kv.key, *type, 0, &kv.value));
    kv_index_.emplace(kv.key, kv_.size());
    kv_.push_back(std::move(kv));
  }

  if (const Value* a = find("general.alignment")) {
    if (a->type != ValueType::kU32)
      return corrupt(name_ + ": key 'general.alignment': expected u32, found " +
                     std::string(value_type_name(a->type)));
    if (a->u64 == 0 || (a->u64 & (a->u64 - 1)) != 0)
      return corrupt(name_ + ": key 'general.alignment': " + std::to_string(a->u64) +
                     " is not a non-zero power of two");
    alignment_ = static_cast<uint32_t>(a->u64);
  }

  // Tensor infos.
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    DSV4_RETURN_IF_ERROR(c.string(&t.name, "name of tensor " + std::to_string(i)));
    const std::string tn = "tensor " + quoted(t.name);
    if (t.name.empty()) return corrupt(name_ + ": tensor " + std::to_string(i) + " has an empty name");
    if (tensor_index_.count(t.name) != 0) return corrupt(name_ + ": duplicate tensor name " + quoted(t.name));
    DSV4_RETURN_IF_ERROR(c.scalar(&t.n_dims, tn + ": n_dims"));
    if (t.n_dims == 0 || t.n_dims > static_cast<uint32_t>(kMaxDims))
      return corrupt(name_ + ": " + tn + ": n_dims " + std::to_string(t.n_dims) + " (expected 1.." +
                     std::to_string(kMaxDims) + ")");
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      uint64_t ne = 0;
      DSV4_RETURN_IF_ERROR(c.scalar(&ne, tn + ": ne[" + std::to_string(d) + "]"));
      if (ne == 0) return corrupt(name_ + ": " + tn + ": ne[" + std::to_string(d) + "] is 0 (expected >= 1)");
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return corrupt(name_ + ": " + tn + ": ne[" + std::to_string(d) + "] = " + std::to_string(ne) +
                       " does not fit in int64");
      t.ne[d] = static_cast<int64_t>(ne);
    }
    uint32_t type_id = 0;
    DSV4_RETURN_IF_ERROR(c.scalar(&type_id, tn + ": type"));
    const auto info = tensor_type_info(type_id);
    if (!info) return unsupported(name_ + ": " + tn + ": unknown tensor type id " + std::to_string(type_id));
    t.type = info->type;
    DSV4_RETURN_IF_ERROR(c.scalar(&t.offset, tn + ": data offset"));

    int64_t n = 1;
    for (int d = 0; d < kMaxDims; ++d)
      if (mul_overflows(n, t.ne[d], &n))
        return corrupt(name_ + ": " + tn + ": element count overflows int64");
    t.n_elements = n;
    if (t.ne[0] % info->block_elems != 0)
      return corrupt(name_ + ": " + tn + ": row length ne[0] = " + std::to_string(t.ne[0]) +
                     " is not a multiple of the " + std::string(info->name) + " block size " +
                     std::to_string(info->block_elems));
    int64_t bytes = 0;
    const int64_t row = tensor_row_bytes(t.type, t.ne[0]);
    if (row < 0 || mul_overflows(row, n / t.ne[0], &bytes))
      return corrupt(name_ + ": " + tn + ": byte size overflows int64");
    t.n_bytes = static_cast<uint64_t>(bytes);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(t);
  }

  // Data layout.
  const uint64_t end_of_infos = c.pos();
  data_offset_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_offset_ > size_)
    return corrupt(name_ + ": tensor data would start at offset " + std::to_string(data_offset_) +
                   " (alignment " + std::to_string(alignment_) + "), beyond the end of the file at " +
                   std::to_string(size_));
  const uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  for (auto& t : tensors_) {
    const std::string tn = "tensor " + quoted(t.name);
    if (t.offset % alignment_ != 0)
      return corrupt(name_ + ": " + tn + ": data offset " + std::to_string(t.offset) +
                     " is not a multiple of alignment " + std::to_string(alignment_));
    if (t.offset > data_size)
      return corrupt(name_ + ": " + tn + ": data offset " + std::to_string(t.offset) +
                     " is outside the file (data section is " + std::to_string(data_size) + " bytes)");
    if (t.n_bytes > data_size - t.offset)
      return corrupt(name_ + ": " + tn + ": data [" + std::to_string(t.offset) + ", +" + std::to_string(t.n_bytes) +
                     ") extends beyond the end of the file (data section is " + std::to_string(data_size) +
                     " bytes; truncated?)");
    t.data = base_ + data_offset_ + t.offset;
  }
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& a = tensors_[order[k - 1]];
    const TensorInfo& b = tensors_[order[k]];
    if (a.offset + a.n_bytes > b.offset)
      return corrupt(name_ + ": tensor " + quoted(a.name) + " [" + std::to_string(a.offset) + ", +" +
                     std::to_string(a.n_bytes) + ") overlaps tensor " + quoted(b.name) + " at offset " +
                     std::to_string(b.offset));
  }
  return ok_status();
}

const Value* GgufFile::find(std::string_view key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Status missing(const std::string& file, std::string_view key) {
  return not_found(file + ": metadata key '" + std::string(key) + "' not found");
}

Status wrong_type(const std::string& file, std::string_view key, std::string_view expected, const Value& v) {
  std::string found(value_type_name(v.type));
  if (v.type == ValueType::kArray) found = "array of " + std::string(value_type_name(v.elem_type));
  return invalid_argument(file + ": metadata key '" + std::string(key) + "': expected " + std::string(expected) +
                          ", found " + found);
}

}  // namespace

#define DSV4_GGUF_GETTER(fn, T, vtype, field)                                             \
  Result<T> GgufFile::fn(std::string_view key) const {                                   \
    const Value* v = find(key);                                                          \
    if (v == nullptr) return missing(name_, key);                                        \
    if (v->type != ValueType::vtype) return wrong_type(name_, key, value_type_name(ValueType::vtype), *v); \
    return static_cast<T>(v->field);                                                     \
  }

DSV4_GGUF_GETTER(get_u8, uint8_t, kU8, u64)
DSV4_GGUF_GETTER(get_i8, int8_t, kI8, i64)
DSV4_GGUF_GETTER(get_u16, uint16_t, kU16, u64)
DSV4_GGUF_GETTER(get_i16, int16_t, kI16, i64)
DSV4_GGUF_GETTER(get_u32, uint32_t, kU32, u64)
DSV4_GGUF_GETTER(get_i32, int32_t, kI32, i64)
DSV4_GGUF_GETTER(get_u64, uint64_t, kU64, u64)
DSV4_GGUF_GETTER(get_i64, int64_t, kI64, i64)
DSV4_GGUF_GETTER(get_f32, float, kF32, f64)
DSV4_GGUF_GETTER(get_f64, double, kF64, f64)
DSV4_GGUF_GETTER(get_bool, bool, kBool, b)
DSV4_GGUF_GETTER(get_string, std::string_view, kString, str)
#undef DSV4_GGUF_GETTER

Result<const Value*> GgufFile::get_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(name_, key);
  if (v->type != ValueType::kArray) return wrong_type(name_, key, "array", *v);
  return v;
}

Result<const Value*> GgufFile::get_array(std::string_view key, ValueType elem) const {
  DSV4_ASSIGN_OR_RETURN(const Value* v, get_array(key));
  if (v->elem_type != elem) return wrong_type(name_, key, "array of " + std::string(value_type_name(elem)), *v);
  return v;
}

Result<std::span<const std::string_view>> GgufFile::get_string_array(std::string_view key) const {
  DSV4_ASSIGN_OR_RETURN(const Value* v, get_array(key, ValueType::kString));
  return std::span<const std::string_view>(v->strings);
}

Result<int64_t> GgufFile::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(name_, key);
  const auto x = value_as_int(*v);
  if (!x) {
    if (v->type == ValueType::kU64)
      return out_of_range(name_ + ": metadata key '" + std::string(key) + "': " + std::to_string(v->u64) +
                          " does not fit in int64");
    return wrong_type(name_, key, "an integer", *v);
  }
  return *x;
}

Result<double> GgufFile::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(name_, key);
  const auto x = value_as_double(*v);
  if (!x) return wrong_type(name_, key, "a number", *v);
  return *x;
}

Result<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  DSV4_ASSIGN_OR_RETURN(const Value* v, get_array(key));
  if (!is_signed_int(v->elem_type) && !is_unsigned_int(v->elem_type))
    return wrong_type(name_, key, "array of integers", *v);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(v->count));
  for (uint64_t i = 0; i < v->count; ++i) {
    const auto x = value_as_int(array_element(*v, i));
    if (!x)
      return out_of_range(name_ + ": metadata key '" + std::string(key) + "': element " + std::to_string(i) +
                          " does not fit in int64");
    out.push_back(*x);
  }
  return out;
}

Result<std::vector<double>> GgufFile::get_float_array(std::string_view key) const {
  DSV4_ASSIGN_OR_RETURN(const Value* v, get_array(key));
  if (!is_float(v->elem_type) && !is_signed_int(v->elem_type) && !is_unsigned_int(v->elem_type))
    return wrong_type(name_, key, "array of numbers", *v);
  std::vector<double> out;
  out.reserve(static_cast<size_t>(v->count));
  for (uint64_t i = 0; i < v->count; ++i) out.push_back(*value_as_double(array_element(*v, i)));
  return out;
}

}  // namespace dsv4::gguf
