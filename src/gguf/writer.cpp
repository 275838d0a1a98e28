// gguf/writer.cpp — GgufWriter: metadata serialisation and buffered streaming of tensor data.
#include "gguf/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

namespace dsv4::gguf {
namespace {

constexpr size_t kBufferBytes = size_t{4} << 20;

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

GgufWriter::GgufWriter(std::string path) : path_(std::move(path)), tmp_path_(path_ + ".tmp") {}

GgufWriter::~GgufWriter() {
  if (!finished_) discard();
}

void GgufWriter::discard() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(tmp_path_.c_str());
  }
}

Status GgufWriter::fail(Status s) {
  if (error_.ok()) error_ = s;
  discard();
  return s;
}

Status GgufWriter::check_key(std::string_view key) const {
  if (begun_) return invalid_argument(path_ + ": metadata key '" + std::string(key) + "' added after writing began");
  if (key.empty()) return invalid_argument(path_ + ": empty metadata key");
  if (!is_valid_utf8(key)) return invalid_argument(path_ + ": metadata key is not valid UTF-8");
  if (keys_.count(std::string(key)) != 0)
    return invalid_argument(path_ + ": duplicate metadata key '" + std::string(key) + "'");
  return ok_status();
}

Status GgufWriter::serialize_value(std::string_view key, const Value& v, int depth, std::vector<uint8_t>& out) const {
  const std::string ctx = path_ + ": key '" + std::string(key) + "': ";
  switch (v.type) {
    case ValueType::kU8: put<uint8_t>(out, static_cast<uint8_t>(v.u64)); break;
    case ValueType::kI8: put<int8_t>(out, static_cast<int8_t>(v.i64)); break;
    case ValueType::kU16: put<uint16_t>(out, static_cast<uint16_t>(v.u64)); break;
    case ValueType::kI16: put<int16_t>(out, static_cast<int16_t>(v.i64)); break;
    case ValueType::kU32: put<uint32_t>(out, static_cast<uint32_t>(v.u64)); break;
    case ValueType::kI32: put<int32_t>(out, static_cast<int32_t>(v.i64)); break;
    case ValueType::kU64: put<uint64_t>(out, v.u64); break;
    case ValueType::kI64: put<int64_t>(out, v.i64); break;
    case ValueType::kF32: put<float>(out, static_cast<float>(v.f64)); break;
    case ValueType::kF64: put<double>(out, v.f64); break;
    case ValueType::kBool: put<uint8_t>(out, v.b ? 1 : 0); break;
    case ValueType::kString:
      if (!is_valid_utf8(v.str)) return invalid_argument(ctx + "string value is not valid UTF-8");
      put_string(out, v.str);
      break;
    case ValueType::kArray: {
      if (depth + 1 > kMaxArrayDepth)
        return invalid_argument(ctx + "arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
      if (!value_type_from_id(static_cast<uint32_t>(v.elem_type)))
        return invalid_argument(ctx + "unknown array element type");
      put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
      put<uint64_t>(out, v.count);
      if (v.elem_type == ValueType::kString) {
        if (v.strings.size() != v.count) return invalid_argument(ctx + "string array count mismatch");
        for (std::string_view s : v.strings) {
          if (!is_valid_utf8(s)) return invalid_argument(ctx + "string array element is not valid UTF-8");
          put_string(out, s);
        }
      } else if (v.elem_type == ValueType::kArray) {
        if (v.items.size() != v.count) return invalid_argument(ctx + "nested array count mismatch");
        for (const Value& item : v.items) {
          if (item.type != ValueType::kArray) return invalid_argument(ctx + "nested array element is not an array");
          DSV4_RETURN_IF_ERROR(serialize_value(key, item, depth + 1, out));
        }
      } else {
        const uint64_t size = value_type_size(v.elem_type);
        if (v.count > std::numeric_limits<uint64_t>::max() / size || (v.count > 0 && v.raw == nullptr))
          return invalid_argument(ctx + "bad array data");
        out.insert(out.end(), v.raw, v.raw + v.count * size);
      }
      break;
    }
  }
  return ok_status();
}

Status GgufWriter::add_value(std::string_view key, const Value& value) {
  DSV4_RETURN_IF_ERROR(check_key(key));
  if (key == "general.alignment") {
    if (value.type != ValueType::kU32)
      return invalid_argument(path_ + ": key 'general.alignment': expected u32, found " +
                              std::string(value_type_name(value.type)));
    if (value.u64 == 0 || value.u64 > std::numeric_limits<uint32_t>::max() || (value.u64 & (value.u64 - 1)) != 0)
      return invalid_argument(path_ + ": key 'general.alignment': " + std::to_string(value.u64) +
                              " is not a non-zero power of two");
  }
  std::vector<uint8_t> entry;
  put_string(entry, key);
  put<uint32_t>(entry, static_cast<uint32_t>(value.type));
  DSV4_RETURN_IF_ERROR(serialize_value(key, value, 0, entry));
  if (key == "general.alignment") alignment_ = static_cast<uint32_t>(value.u64);
  kv_bytes_.insert(kv_bytes_.end(), entry.begin(), entry.end());
  keys_.emplace(key);
  ++n_kv_;
  return ok_status();
}

#define DSV4_GGUF_ARRAY_ADDER(fn, T, vtype)                                            \
  Status GgufWriter::fn(std::string_view key, std::span<const T> v) {                  \
    return add_value(key, Value::make_raw_array(ValueType::vtype, v.size(), v.data())); \
  }
DSV4_GGUF_ARRAY_ADDER(add_array_u8, uint8_t, kU8)
DSV4_GGUF_ARRAY_ADDER(add_array_i8, int8_t, kI8)
DSV4_GGUF_ARRAY_ADDER(add_array_u16, uint16_t, kU16)
DSV4_GGUF_ARRAY_ADDER(add_array_i16, int16_t, kI16)
DSV4_GGUF_ARRAY_ADDER(add_array_u32, uint32_t, kU32)
DSV4_GGUF_ARRAY_ADDER(add_array_i32, int32_t, kI32)
DSV4_GGUF_ARRAY_ADDER(add_array_u64, uint64_t, kU64)
DSV4_GGUF_ARRAY_ADDER(add_array_i64, int64_t, kI64)
DSV4_GGUF_ARRAY_ADDER(add_array_f32, float, kF32)
DSV4_GGUF_ARRAY_ADDER(add_array_f64, double, kF64)
#undef DSV4_GGUF_ARRAY_ADDER

Status GgufWriter::add_array_bool(std::string_view key, std::span<const bool> v) {
  std::vector<uint8_t> bytes(v.size());
  for (size_t i = 0; i < v.size(); ++i) bytes[i] = v[i] ? 1 : 0;
  return add_value(key, Value::make_raw_array(ValueType::kBool, bytes.size(), bytes.data()));
}

Status GgufWriter::add_array_string(std::string_view key, std::span<const std::string> v) {
  return add_value(key, Value::make_string_array(std::vector<std::string_view>(v.begin(), v.end())));
}

Status GgufWriter::add_array_string(std::string_view key, std::span<const std::string_view> v) {
  return add_value(key, Value::make_string_array(std::vector<std::string_view>(v.begin(), v.end())));
}

Status GgufWriter::add_tensor(std::string_view name, TensorType type, std::span<const int64_t> ne) {
  const std::string tn = path_ + ": tensor '" + std::string(name) + "': ";
  if (begun_) return invalid_argument(tn + "declared after writing began");
  if (name.empty()) return invalid_argument(path_ + ": empty tensor name");
  if (!is_valid_utf8(name)) return invalid_argument(path_ + ": tensor name is not valid UTF-8");
  if (tensor_names_.count(std::string(name)) != 0)
    return invalid_argument(path_ + ": duplicate tensor name '" + std::string(name) + "'");
  if (ne.empty() || ne.size() > static_cast<size_t>(kMaxDims))
    return invalid_argument(tn + std::to_string(ne.size()) + " dims (expected 1..4)");
  PendingTensor t{std::string(name), type, static_cast<uint32_t>(ne.size()), {1, 1, 1, 1}, 0, 0};
  int64_t n = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 1) return invalid_argument(tn + "ne[" + std::to_string(d) + "] = " + std::to_string(ne[d]) + " (expected >= 1)");
    t.ne[d] = ne[d];
    if (__builtin_mul_overflow(n, ne[d], &n)) return invalid_argument(tn + "element count overflows int64");
  }
  const int64_t row = tensor_row_bytes(type, t.ne[0]);
  if (row < 0)
    return invalid_argument(tn + "ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                            std::string(tensor_type_name(type)) + " block size " +
                            std::to_string(tensor_type_info(type).block_elems));
  int64_t bytes = 0;
  if (__builtin_mul_overflow(row, n / t.ne[0], &bytes)) return invalid_argument(tn + "byte size overflows int64");
  t.n_bytes = static_cast<uint64_t>(bytes);
  tensor_names_.emplace(name);
  tensors_.push_back(std::move(t));
  return ok_status();
}

Status GgufWriter::raw(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const size_t room = kBufferBytes - buf_.size();
    const size_t take = n < room ? n : room;
    buf_.insert(buf_.end(), b, b + take);
    b += take;
    n -= take;
    pos_ += take;
    if (buf_.size() == kBufferBytes) DSV4_RETURN_IF_ERROR(flush());
  }
  return ok_status();
}

Status GgufWriter::flush() {
  size_t done = 0;
  while (done < buf_.size()) {
    const ssize_t w = ::write(fd_, buf_.data() + done, buf_.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return fail(io_error(tmp_path_ + ": write failed: " + errno_text()));
    }
    done += static_cast<size_t>(w);
  }
  buf_.clear();
  return ok_status();
}

Status GgufWriter::pad_to(uint64_t multiple) {
  static const uint8_t kZeros[64] = {};
  uint64_t pad = (multiple - pos_ % multiple) % multiple;
  while (pad > 0) {
    const size_t take = pad < sizeof kZeros ? static_cast<size_t>(pad) : sizeof kZeros;
    DSV4_RETURN_IF_ERROR(raw(kZeros, take));
    pad -= take;
  }
  return ok_status();
}

Status GgufWriter::begin() {
  if (!error_.ok()) return error_;
  if (begun_) return ok_status();
  if (finished_) return invalid_argument(path_ + ": writer already finished");
  begun_ = true;
  uint64_t offset = 0;
  for (auto& t : tensors_) {
    t.offset = offset;
    const uint64_t padded = (t.n_bytes + alignment_ - 1) / alignment_ * alignment_;
    if (padded < t.n_bytes || offset + padded < offset) return fail(invalid_argument(path_ + ": total size overflows"));
    offset += padded;
  }
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return fail(io_error(tmp_path_ + ": cannot create: " + errno_text()));
  buf_.reserve(kBufferBytes);
  std::vector<uint8_t> head;
  put<uint32_t>(head, kMagic);
  put<uint32_t>(head, kVersion);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, n_kv_);
  DSV4_RETURN_IF_ERROR(raw(head.data(), head.size()));
  DSV4_RETURN_IF_ERROR(raw(kv_bytes_.data(), kv_bytes_.size()));
  std::vector<uint8_t>().swap(kv_bytes_);
  for (const auto& t : tensors_) {
    std::vector<uint8_t> info;
    put_string(info, t.name);
    put<uint32_t>(info, t.n_dims);
    for (uint32_t d = 0; d < t.n_dims; ++d) put<uint64_t>(info, static_cast<uint64_t>(t.ne[d]));
    put<uint32_t>(info, static_cast<uint32_t>(t.type));
    put<uint64_t>(info, t.offset);
    DSV4_RETURN_IF_ERROR(raw(info.data(), info.size()));
  }
  DSV4_RETURN_IF_ERROR(pad_to(alignment_));
  data_start_ = pos_;
  return ok_status();
}

Status GgufWriter::write_tensor_chunk(std::span<const uint8_t> chunk) {
  DSV4_RETURN_IF_ERROR(begin());
  while (!chunk.empty()) {
    if (cur_tensor_ >= tensors_.size())
      return fail(invalid_argument(path_ + ": " + std::to_string(chunk.size()) +
                                   " bytes of tensor data beyond the last declared tensor"));
    const PendingTensor& t = tensors_[cur_tensor_];
    const uint64_t left = t.n_bytes - cur_written_;
    const size_t take = chunk.size() < left ? chunk.size() : static_cast<size_t>(left);
    DSV4_RETURN_IF_ERROR(raw(chunk.data(), take));
    cur_written_ += take;
    chunk = chunk.subspan(take);
    if (cur_written_ == t.n_bytes) {
      DSV4_RETURN_IF_ERROR(pad_to(alignment_));
      if (pos_ != data_start_ + t.offset + (t.n_bytes + alignment_ - 1) / alignment_ * alignment_)
        return fail(internal_error(path_ + ": tensor '" + t.name + "': writer position out of step"));
      ++cur_tensor_;
      cur_written_ = 0;
    }
  }
  return ok_status();
}

Status GgufWriter::write_tensor(std::span<const uint8_t> data) {
  DSV4_RETURN_IF_ERROR(begin());
  if (cur_tensor_ >= tensors_.size())
    return fail(invalid_argument(path_ + ": write_tensor called after all tensors were written"));
  const PendingTensor& t = tensors_[cur_tensor_];
  if (cur_written_ != 0 || data.size() != t.n_bytes)
    return fail(invalid_argument(path_ + ": tensor '" + t.name + "': got " + std::to_string(data.size()) +
                                 " bytes, expected exactly " + std::to_string(t.n_bytes)));
  if (t.n_bytes == 0) return ok_status();
  return write_tensor_chunk(data);
}

Status GgufWriter::write_tensor_stream(const std::function<Status(const ChunkSink&)>& producer) {
  DSV4_RETURN_IF_ERROR(begin());
  if (cur_tensor_ >= tensors_.size())
    return fail(invalid_argument(path_ + ": write_tensor_stream called after all tensors were written"));
  const size_t index = cur_tensor_;
  const PendingTensor& t = tensors_[index];
  uint64_t got = 0;
  bool overflow = false;
  const ChunkSink sink = [&](std::span<const uint8_t> chunk) -> Status {
    if (chunk.size() > t.n_bytes - got) {
      overflow = true;
      return fail(invalid_argument(path_ + ": tensor '" + t.name + "': producer wrote more than its " +
                                   std::to_string(t.n_bytes) + " bytes"));
    }
    got += chunk.size();
    return write_tensor_chunk(chunk);
  };
  Status s = producer(sink);
  if (!s.ok()) return fail(s);
  if (overflow || !error_.ok()) return error_;
  if (got != t.n_bytes)
    return fail(invalid_argument(path_ + ": tensor '" + t.name + "': producer wrote " + std::to_string(got) +
                                 " bytes, expected " + std::to_string(t.n_bytes)));
  return ok_status();
}

Status GgufWriter::finish() {
  if (!error_.ok()) return error_;
  if (finished_) return invalid_argument(path_ + ": finish() called twice");
  DSV4_RETURN_IF_ERROR(begin());
  if (cur_tensor_ < tensors_.size()) {
    const PendingTensor& t = tensors_[cur_tensor_];
    return fail(invalid_argument(path_ + ": tensor '" + t.name + "' received " + std::to_string(cur_written_) +
                                 " of " + std::to_string(t.n_bytes) + " bytes (" +
                                 std::to_string(tensors_.size() - cur_tensor_) + " tensors incomplete)"));
  }
  DSV4_RETURN_IF_ERROR(flush());
  if (::fsync(fd_) != 0) return fail(io_error(tmp_path_ + ": fsync failed: " + errno_text()));
  if (::close(fd_) != 0) {
    fd_ = -1;
    ::unlink(tmp_path_.c_str());
    return fail(io_error(tmp_path_ + ": close failed: " + errno_text()));
  }
  fd_ = -1;
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const std::string err = errno_text();
    ::unlink(tmp_path_.c_str());
    return fail(io_error(path_ + ": cannot rename " + tmp_path_ + ": " + err));
  }
  finished_ = true;
  return ok_status();
}

}  // namespace dsv4::gguf
