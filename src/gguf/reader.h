// gguf/reader.h — GGUF v3 reader: validated, zero-copy views into a memory-mapped file.
//
// Owns: parsing and validating the container (header, metadata KV, tensor infos, data layout).
// Must not: know DSV4 tensor names or keys, print, or trust any byte of the file. Every violation
// of the format is returned as a kCorrupt/kUnsupported Status naming the file, the key or tensor,
// and what was expected; counts and lengths are checked against the bytes that remain before
// anything is allocated, so no input can crash, hang or make us allocate more than a small
// multiple of the file size.
//
//   DSV4_ASSIGN_OR_RETURN(gguf::GgufFile f, gguf::GgufFile::open("model.gguf"));
//   DSV4_ASSIGN_OR_RETURN(uint32_t n_layer, f.get_u32("deepseek4.block_count"));
//   const gguf::TensorInfo* t = f.find_tensor("token_embd.weight");   // t->data: the bytes
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "base/tensor_type.h"
#include "gguf/value.h"

namespace dsv4::gguf {

struct KeyValue {
  std::string_view key;
  Value value;
  uint64_t file_offset = 0;  // where the key's length field starts
};

struct TensorInfo {
  std::string_view name;
  TensorType type = TensorType::kF32;
  uint32_t n_dims = 0;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};  // dims past n_dims are 1
  int64_t n_elements = 0;
  uint64_t n_bytes = 0;       // exact data size (no padding)
  uint64_t offset = 0;        // relative to data_offset() (a multiple of alignment())
  const uint8_t* data = nullptr;  // into the mapping; n_bytes long
};

class GgufFile {
 public:
  GgufFile() = default;
  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  // Maps `path` read-only and parses it; tensor data stays in the mapping (no copy).
  static Result<GgufFile> open(const std::string& path);
  // Parses an in-memory image (copied once); `name` is used in error messages.
  static Result<GgufFile> parse(std::span<const uint8_t> bytes, std::string name);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  uint32_t alignment() const { return alignment_; }
  // Start of the tensor data section (aligned end of the tensor infos).
  uint64_t data_offset() const { return data_offset_; }

  // Metadata, in file order.
  std::span<const KeyValue> metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Exact-type getters: kNotFound when the key is missing, kInvalidArgument when it has another
  // type (the message names the key, the expected and the actual type).
  Result<uint8_t> get_u8(std::string_view key) const;
  Result<int8_t> get_i8(std::string_view key) const;
  Result<uint16_t> get_u16(std::string_view key) const;
  Result<int16_t> get_i16(std::string_view key) const;
  Result<uint32_t> get_u32(std::string_view key) const;
  Result<int32_t> get_i32(std::string_view key) const;
  Result<uint64_t> get_u64(std::string_view key) const;
  Result<int64_t> get_i64(std::string_view key) const;
  Result<float> get_f32(std::string_view key) const;
  Result<double> get_f64(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string_view> get_string(std::string_view key) const;
  // Any array; `elem` (if given) must match its element type.
  Result<const Value*> get_array(std::string_view key) const;
  Result<const Value*> get_array(std::string_view key, ValueType elem) const;
  Result<std::span<const std::string_view>> get_string_array(std::string_view key) const;

  // Lenient getters: any integer type whose value fits (e.g. u32 or u64 counts, i32 or u32
  // arrays); any float or integer type for doubles.
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  Result<std::vector<double>> get_float_array(std::string_view key) const;

  // Tensors, in file order.
  std::span<const TensorInfo> tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  Status parse_image();

  std::string name_;
  MappedFile map_;                // open(): the mapping
  std::vector<uint8_t> owned_;    // parse(): the copy
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kv_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> kv_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace dsv4::gguf
