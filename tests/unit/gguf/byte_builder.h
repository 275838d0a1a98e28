// tests/unit/gguf/byte_builder.h — builds GGUF images byte by byte, so tests can lie (bad counts,
// bad types, overlapping offsets) in ways the writer refuses to.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/value.h"

namespace dsv4::gguf::test {

class ByteBuilder {
 public:
  template <typename T>
  ByteBuilder& put(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
    return *this;
  }
  ByteBuilder& u8(uint8_t v) { return put(v); }
  ByteBuilder& u32(uint32_t v) { return put(v); }
  ByteBuilder& u64(uint64_t v) { return put(v); }
  ByteBuilder& str(std::string_view s) {
    u64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  ByteBuilder& zeros(size_t n) {
    bytes_.insert(bytes_.end(), n, 0);
    return *this;
  }
  ByteBuilder& pad_to(size_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
    return *this;
  }
  ByteBuilder& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return u32(kMagic).u32(version).u64(n_tensors).u64(n_kv);
  }
  ByteBuilder& kv_u32(std::string_view key, uint32_t v) {
    return str(key).u32(static_cast<uint32_t>(ValueType::kU32)).u32(v);
  }
  ByteBuilder& kv_string(std::string_view key, std::string_view v) {
    return str(key).u32(static_cast<uint32_t>(ValueType::kString)).str(v);
  }
  ByteBuilder& tensor(std::string_view name, std::initializer_list<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t n : ne) u64(n);
    return u32(type).u64(offset);
  }

  size_t size() const { return bytes_.size(); }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace dsv4::gguf::test
