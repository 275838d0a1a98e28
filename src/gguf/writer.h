// gguf/writer.h — streaming GGUF v3 writer.
//
// Owns: serialising metadata and tensor infos, and streaming tensor data to disk one tensor at a
// time in declared order, each padded to the alignment (32, or a custom general.alignment).
// Must not: hold tensor data (memory use is the metadata plus one I/O buffer, so 80+ GB files are
// fine), or leave a file that looks complete when a write failed: everything goes to
// `<path>.tmp`, which finish() renames to `path` only after every declared tensor received exactly
// its byte size; a writer destroyed before finish() deletes the temp file.
//
//   gguf::GgufWriter w("out.gguf");
//   DSV4_RETURN_IF_ERROR(w.add_string("general.architecture", "deepseek4"));
//   DSV4_RETURN_IF_ERROR(w.add_tensor("a.weight", TensorType::kQ8_0, {{4096, 1024}}));
//   DSV4_RETURN_IF_ERROR(w.write_tensor(bytes));            // or write_tensor_chunk() / _stream()
//   DSV4_RETURN_IF_ERROR(w.finish());
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "base/status.h"
#include "base/tensor_type.h"
#include "gguf/value.h"

namespace dsv4::gguf {

class GgufWriter {
 public:
  explicit GgufWriter(std::string path);
  ~GgufWriter();
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Metadata, written in the order added. Keys must be non-empty, valid UTF-8 and unique; string
  // values valid UTF-8. "general.alignment" must be a u32 power of two and sets the alignment.
  Status add_value(std::string_view key, const Value& value);
  Status add_u8(std::string_view key, uint8_t v) { return add_value(key, Value::make_u8(v)); }
  Status add_i8(std::string_view key, int8_t v) { return add_value(key, Value::make_i8(v)); }
  Status add_u16(std::string_view key, uint16_t v) { return add_value(key, Value::make_u16(v)); }
  Status add_i16(std::string_view key, int16_t v) { return add_value(key, Value::make_i16(v)); }
  Status add_u32(std::string_view key, uint32_t v) { return add_value(key, Value::make_u32(v)); }
  Status add_i32(std::string_view key, int32_t v) { return add_value(key, Value::make_i32(v)); }
  Status add_u64(std::string_view key, uint64_t v) { return add_value(key, Value::make_u64(v)); }
  Status add_i64(std::string_view key, int64_t v) { return add_value(key, Value::make_i64(v)); }
  Status add_f32(std::string_view key, float v) { return add_value(key, Value::make_f32(v)); }
  Status add_f64(std::string_view key, double v) { return add_value(key, Value::make_f64(v)); }
  Status add_bool(std::string_view key, bool v) { return add_value(key, Value::make_bool(v)); }
  Status add_string(std::string_view key, std::string_view v) { return add_value(key, Value::make_string(v)); }
  Status add_array_u8(std::string_view key, std::span<const uint8_t> v);
  Status add_array_i8(std::string_view key, std::span<const int8_t> v);
  Status add_array_u16(std::string_view key, std::span<const uint16_t> v);
  Status add_array_i16(std::string_view key, std::span<const int16_t> v);
  Status add_array_u32(std::string_view key, std::span<const uint32_t> v);
  Status add_array_i32(std::string_view key, std::span<const int32_t> v);
  Status add_array_u64(std::string_view key, std::span<const uint64_t> v);
  Status add_array_i64(std::string_view key, std::span<const int64_t> v);
  Status add_array_f32(std::string_view key, std::span<const float> v);
  Status add_array_f64(std::string_view key, std::span<const double> v);
  Status add_array_bool(std::string_view key, std::span<const bool> v);
  Status add_array_string(std::string_view key, std::span<const std::string> v);
  Status add_array_string(std::string_view key, std::span<const std::string_view> v);

  // Declares the next tensor (ne[0] fastest; 1..4 dims, each >= 1, ne[0] a multiple of the
  // type's block size). Data must later be written in declaration order.
  Status add_tensor(std::string_view name, TensorType type, std::span<const int64_t> ne);

  // Writes header, metadata, tensor infos and padding. Called by the first tensor write if not
  // called explicitly; after it, no more metadata or tensors can be added.
  Status begin();
  // The whole data of the next tensor (must be exactly its byte size).
  Status write_tensor(std::span<const uint8_t> data);
  // Part of the current tensor's data; the tensor is complete (and padded) once its byte size has
  // been written, and the next chunk starts the next tensor.
  Status write_tensor_chunk(std::span<const uint8_t> chunk);
  // Calls producer(sink) once; the producer passes the next tensor's data to sink in chunks of
  // any size. The tensor must be complete when the producer returns.
  using ChunkSink = std::function<Status(std::span<const uint8_t>)>;
  Status write_tensor_stream(const std::function<Status(const ChunkSink&)>& producer);
  // Checks every tensor is complete, flushes, fsyncs, and renames <path>.tmp to path.
  Status finish();

  uint32_t alignment() const { return alignment_; }
  size_t tensor_count() const { return tensors_.size(); }
  // Byte size of a declared tensor's data (no padding).
  uint64_t tensor_bytes(size_t i) const { return tensors_[i].n_bytes; }

 private:
  struct PendingTensor {
    std::string name;
    TensorType type;
    uint32_t n_dims;
    int64_t ne[kMaxDims];
    uint64_t n_bytes;
    uint64_t offset;
  };

  Status check_key(std::string_view key) const;
  Status serialize_value(std::string_view key, const Value& v, int depth, std::vector<uint8_t>& out) const;
  Status raw(const void* p, size_t n);
  Status pad_to(uint64_t multiple);
  Status flush();
  Status fail(Status s);
  void discard();

  std::string path_;
  std::string tmp_path_;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t n_kv_ = 0;
  std::vector<uint8_t> kv_bytes_;  // serialised metadata entries
  std::unordered_set<std::string> keys_;
  std::vector<PendingTensor> tensors_;
  std::unordered_set<std::string> tensor_names_;

  int fd_ = -1;
  bool begun_ = false;
  bool finished_ = false;
  Status error_;                 // sticky: once an I/O error happens every later call returns it
  std::vector<uint8_t> buf_;     // output buffer
  uint64_t pos_ = 0;             // bytes handed to raw() so far
  uint64_t data_start_ = 0;
  size_t cur_tensor_ = 0;        // next tensor to receive data
  uint64_t cur_written_ = 0;     // bytes of cur_tensor_ written so far
};

}  // namespace dsv4::gguf
