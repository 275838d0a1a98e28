// tests/unit/gguf/malformed_test.cpp — the reader rejects every malformed file with a message that
// names the offending key or tensor, and never crashes (truncation at every offset, byte flips).
#include <gtest/gtest.h>

#include <string>

#include "gguf/reader.h"
#include "unit/gguf/byte_builder.h"

namespace dsv4::gguf {
namespace {

using test::ByteBuilder;
constexpr uint32_t kF32 = 0, kQ8_0 = 8;

Status parse(ByteBuilder& b) {
  auto r = GgufFile::parse(b.bytes(), "bad.gguf");
  return r.ok() ? ok_status() : r.status();
}

// Expects an error whose message contains the file name and every needle.
void expect_error(ByteBuilder& b, std::initializer_list<std::string_view> needles) {
  const Status s = parse(b);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad.gguf"), std::string::npos) << s.message();
  for (std::string_view n : needles) EXPECT_NE(s.message().find(n), std::string::npos) << "'" << n << "' not in: " << s.message();
}

// One KV and two F32 tensors (4 and 8 elements), 32-aligned data.
ByteBuilder valid_file() {
  ByteBuilder b;
  b.header(2, 1).kv_string("general.architecture", "test");
  b.tensor("a", {4}, kF32, 0).tensor("b", {4, 2}, kF32, 32).pad_to(32);
  for (int i = 0; i < 4; ++i) b.put<float>(static_cast<float>(i));
  b.zeros(16);  // pad a (16 bytes) to 32
  for (int i = 0; i < 8; ++i) b.put<float>(static_cast<float>(10 + i));
  return b;
}

// A file with one tensor `name` of the given dims/type at offset, data section of data_bytes.
ByteBuilder one_tensor(std::initializer_list<uint64_t> ne, uint32_t type, uint64_t offset = 0,
                       size_t data_bytes = 64, std::string_view name = "w") {
  ByteBuilder b;
  b.header(1, 0).tensor(name, ne, type, offset).pad_to(32).zeros(data_bytes);
  return b;
}

TEST(GgufMalformed, ValidBaseParses) {
  ByteBuilder b = valid_file();
  auto r = GgufFile::parse(b.bytes(), "ok.gguf");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->tensors().size(), 2u);
  EXPECT_EQ(r->tensors()[1].n_bytes, 32u);
}

TEST(GgufMalformed, EmptyFile) {
  ByteBuilder b;
  expect_error(b, {"truncated", "magic"});
}

TEST(GgufMalformed, TruncatedHeader) {
  ByteBuilder b;
  b.header(0, 0);
  b.bytes().resize(20);
  expect_error(b, {"truncated", "metadata count"});
}

TEST(GgufMalformed, BadMagic) {
  ByteBuilder b;
  b.u32(0x46554748).u32(3).u64(0).u64(0);
  expect_error(b, {"bad magic", "0x46554748"});
}

TEST(GgufMalformed, BadVersion) {
  ByteBuilder b;
  b.header(0, 0, 2);
  expect_error(b, {"version 2", "expected 3"});
}

TEST(GgufMalformed, KvCountOverflow) {
  ByteBuilder b;
  b.header(0, uint64_t{1} << 60).kv_u32("x", 1);
  expect_error(b, {"metadata count 1152921504606846976", "cannot fit"});
}

TEST(GgufMalformed, TensorCountOverflow) {
  ByteBuilder b;
  b.header(uint64_t{1} << 63, 0).tensor("w", {4}, kF32, 0);
  expect_error(b, {"tensor count 9223372036854775808", "cannot fit"});
}

TEST(GgufMalformed, TruncatedInKvKey) {
  ByteBuilder b;
  b.header(0, 1).u64(20).zeros(5);  // key claims 20 bytes, 5 present
  expect_error(b, {"metadata key 0", "length 20"});
}

TEST(GgufMalformed, TruncatedInKvValue) {
  ByteBuilder b;
  b.header(0, 1).str("my.key").u32(static_cast<uint32_t>(ValueType::kU64)).u32(7);  // u64 cut short
  expect_error(b, {"truncated", "'my.key'"});
}

TEST(GgufMalformed, StringLengthOverflow) {
  ByteBuilder b;
  b.header(0, 1).str("my.name").u32(static_cast<uint32_t>(ValueType::kString)).u64(~uint64_t{0}).zeros(16);
  expect_error(b, {"'my.name'", "length 18446744073709551615"});
}

TEST(GgufMalformed, BadValueType) {
  ByteBuilder b;
  b.header(0, 1).str("my.key").u32(13).u32(0);
  expect_error(b, {"'my.key'", "unknown value type 13"});
}

TEST(GgufMalformed, BadArrayElementType) {
  ByteBuilder b;
  b.header(0, 1).str("my.arr").u32(static_cast<uint32_t>(ValueType::kArray)).u32(99).u64(1).zeros(8);
  expect_error(b, {"'my.arr'", "unknown array element type 99"});
}

TEST(GgufMalformed, ArrayCountOverflow) {
  // count * 4 wraps around 2^64: must be caught before multiplying.
  ByteBuilder b;
  b.header(0, 1).str("my.arr").u32(static_cast<uint32_t>(ValueType::kArray));
  b.u32(static_cast<uint32_t>(ValueType::kU32)).u64((uint64_t{1} << 62) + 1).zeros(16);
  expect_error(b, {"'my.arr'", "array of 4611686018427387905 u32"});
}

TEST(GgufMalformed, HugeArray) {
  // A billion strings claimed in a 60-byte file: rejected before reserving anything.
  ByteBuilder b;
  b.header(0, 1).str("tokenizer.ggml.tokens").u32(static_cast<uint32_t>(ValueType::kArray));
  b.u32(static_cast<uint32_t>(ValueType::kString)).u64(1000000000).str("a");
  expect_error(b, {"'tokenizer.ggml.tokens'", "array of 1000000000 string"});
}

TEST(GgufMalformed, TruncatedInStringArray) {
  ByteBuilder b;
  b.header(0, 1).str("my.strs").u32(static_cast<uint32_t>(ValueType::kArray));
  b.u32(static_cast<uint32_t>(ValueType::kString)).u64(2).str("abc").u64(100).zeros(8);
  expect_error(b, {"'my.strs'", "string element 1"});
}

TEST(GgufMalformed, DeepNesting) {
  ByteBuilder b;
  b.header(0, 1).str("my.deep").u32(static_cast<uint32_t>(ValueType::kArray));
  for (int i = 0; i < 9; ++i) b.u32(static_cast<uint32_t>(ValueType::kArray)).u64(1);
  b.u32(static_cast<uint32_t>(ValueType::kU8)).u64(0);
  expect_error(b, {"'my.deep'", "nested deeper than 8"});
}

TEST(GgufMalformed, DuplicateKey) {
  ByteBuilder b;
  b.header(0, 2).kv_u32("dup.key", 1).kv_u32("dup.key", 2);
  expect_error(b, {"duplicate metadata key 'dup.key'"});
}

TEST(GgufMalformed, EmptyKey) {
  ByteBuilder b;
  b.header(0, 1).kv_u32("", 1);
  expect_error(b, {"metadata key 0 is empty"});
}

TEST(GgufMalformed, InvalidUtf8Key) {
  ByteBuilder b;
  b.header(0, 1).kv_u32("bad\xff" "key", 1);
  expect_error(b, {"not valid UTF-8", "bad\\xffkey"});
}

TEST(GgufMalformed, InvalidUtf8StringValue) {
  ByteBuilder b;
  b.header(0, 1).kv_string("my.text", "caf\xc3");  // truncated 2-byte sequence
  expect_error(b, {"'my.text'", "not valid UTF-8"});
}

TEST(GgufMalformed, OverlongUtf8Name) {
  ByteBuilder b = one_tensor({4}, kF32, 0, 64, "x\xc0\xaf");  // overlong '/'
  expect_error(b, {"name of tensor 0", "not valid UTF-8"});
}

TEST(GgufMalformed, InvalidUtf8Name) {
  ByteBuilder b = one_tensor({4}, kF32, 0, 64, "blk.\xed\xa0\x80.w");  // UTF-16 surrogate
  expect_error(b, {"name of tensor 0", "not valid UTF-8"});
}

TEST(GgufMalformed, BadAlignmentType) {
  ByteBuilder b;
  b.header(0, 1).str("general.alignment").u32(static_cast<uint32_t>(ValueType::kU64)).u64(32);
  expect_error(b, {"'general.alignment'", "expected u32, found u64"});
}

TEST(GgufMalformed, BadAlignmentNotPowerOfTwo) {
  ByteBuilder b;
  b.header(0, 1).kv_u32("general.alignment", 48);
  expect_error(b, {"'general.alignment'", "48 is not a non-zero power of two"});
}

TEST(GgufMalformed, BadAlignmentZero) {
  ByteBuilder b;
  b.header(0, 1).kv_u32("general.alignment", 0);
  expect_error(b, {"'general.alignment'", "0 is not a non-zero power of two"});
}

TEST(GgufMalformed, TruncatedInTensorInfo) {
  ByteBuilder b;
  b.header(1, 0).str("blk.0.w").u32(2).u64(4);  // second dim, type and offset missing
  b.zeros(3);
  // The count check needs 32 bytes per info; keep it satisfied by a long-enough tail.
  b.bytes().resize(24 + 32);
  expect_error(b, {"'blk.0.w'", "truncated"});
}

TEST(GgufMalformed, UnknownTensorType) {
  ByteBuilder b = one_tensor({4}, 42, 0, 64, "blk.3.ffn");
  expect_error(b, {"'blk.3.ffn'", "unknown tensor type id 42"});
}

TEST(GgufMalformed, TooManyDims) {
  ByteBuilder b = one_tensor({1, 1, 1, 1, 4}, kF32, 0, 64, "t5");
  expect_error(b, {"'t5'", "n_dims 5"});
}

TEST(GgufMalformed, ZeroDims) {
  ByteBuilder b;
  b.header(1, 0).str("t0").u32(0).u32(kF32).u64(0).zeros(64);
  expect_error(b, {"'t0'", "n_dims 0"});
}

TEST(GgufMalformed, ZeroDim) {
  ByteBuilder b = one_tensor({4, 0}, kF32, 0, 64, "tz");
  expect_error(b, {"'tz'", "ne[1] is 0"});
}

TEST(GgufMalformed, DimTooLarge) {
  ByteBuilder b = one_tensor({uint64_t{1} << 63}, kF32, 0, 64, "tbig");
  expect_error(b, {"'tbig'", "does not fit in int64"});
}

TEST(GgufMalformed, ElementCountOverflow) {
  ByteBuilder b = one_tensor({uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0, 64, "tov");
  expect_error(b, {"'tov'", "element count overflows"});
}

TEST(GgufMalformed, ByteSizeOverflow) {
  ByteBuilder b = one_tensor({uint64_t{1} << 62}, kF32, 0, 64, "tbytes");
  expect_error(b, {"'tbytes'", "byte size overflows"});
}

TEST(GgufMalformed, RowNotBlockMultiple) {
  ByteBuilder b = one_tensor({33, 2}, kQ8_0, 0, 128, "q.w");
  expect_error(b, {"'q.w'", "ne[0] = 33", "block size 32"});
}

TEST(GgufMalformed, MisalignedOffset) {
  ByteBuilder b = one_tensor({4}, kF32, 8, 64, "mis");
  expect_error(b, {"'mis'", "offset 8 is not a multiple of alignment 32"});
}

TEST(GgufMalformed, OffsetOutsideFile) {
  ByteBuilder b = one_tensor({4}, kF32, 1 << 20, 64, "far");
  expect_error(b, {"'far'", "outside the file"});
}

TEST(GgufMalformed, TruncatedTensorData) {
  ByteBuilder b = one_tensor({64}, kF32, 0, 100, "short");  // needs 256 bytes
  expect_error(b, {"'short'", "extends beyond the end of the file"});
}

TEST(GgufMalformed, DataStartBeyondFile) {
  ByteBuilder b;
  b.header(1, 0).tensor("w", {1}, kF32, 0);  // no padding, no data
  expect_error(b, {"tensor data would start at offset", "beyond the end of the file"});
}

TEST(GgufMalformed, OverlappingTensors) {
  ByteBuilder b;
  b.header(2, 0).tensor("first", {16}, kF32, 0).tensor("second", {4}, kF32, 32).pad_to(32).zeros(128);
  expect_error(b, {"'first'", "overlaps tensor 'second'"});
}

TEST(GgufMalformed, DuplicateTensorName) {
  ByteBuilder b;
  b.header(2, 0).tensor("same", {4}, kF32, 0).tensor("same", {4}, kF32, 32).pad_to(32).zeros(64);
  expect_error(b, {"duplicate tensor name 'same'"});
}

TEST(GgufMalformed, EmptyTensorName) {
  ByteBuilder b = one_tensor({4}, kF32, 0, 64, "");
  expect_error(b, {"tensor 0 has an empty name"});
}

TEST(GgufMalformed, TruncatedAtEveryOffset) {
  ByteBuilder b = valid_file();
  const std::vector<uint8_t>& full = b.bytes();
  for (size_t n = 0; n < full.size(); ++n) {
    auto r = GgufFile::parse(std::span<const uint8_t>(full.data(), n), "cut.gguf");
    ASSERT_FALSE(r.ok()) << "a prefix of " << n << " bytes parsed";
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().message();
    EXPECT_NE(r.status().message().find("cut.gguf"), std::string::npos);
  }
  EXPECT_TRUE(GgufFile::parse(full, "full.gguf").ok());
}

TEST(GgufMalformed, EveryByteFlippedNeverCrashes) {
  ByteBuilder b = valid_file();
  const std::vector<uint8_t> full = b.bytes();
  for (size_t i = 0; i < full.size(); ++i) {
    for (uint8_t x : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> m = full;
      m[i] ^= x;
      auto r = GgufFile::parse(m, "flip.gguf");
      if (!r.ok()) {
        EXPECT_FALSE(r.status().message().empty());
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::gguf
