// tools/safetensors.h — validated, zero-copy reader for .safetensors checkpoints (single or sharded).
//
// Owns: parsing the container (8-byte LE header length, JSON header of {name: {dtype, shape,
// data_offsets}} plus an optional __metadata__ string map) and the shard index
// (model.safetensors.index.json weight_map). Every byte is distrusted: the header length must fit
// the file, the JSON must be well formed, dtypes known, shape × element size must equal the offset
// span, spans must lie inside the data section and must not overlap; shards named by the index must
// exist and hold exactly the tensors the index assigns them. Errors name the file and the tensor.
// Must not: know DS4 names (hf_tensors.h maps them) or copy tensor data (views point into the maps).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"

namespace dsv4::tools {

enum class StDtype { kF32, kF16, kBF16, kF8_E4M3, kF8_E8M0, kI8, kU8, kI32, kI64 };

std::optional<StDtype> st_dtype_from_name(std::string_view name);
const char* st_dtype_name(StDtype d);
int64_t st_dtype_size(StDtype d);

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;     // row-major, outermost first (PyTorch order)
  const uint8_t* data = nullptr;  // into the file's mapping
  uint64_t n_bytes = 0;
  const std::string* file = nullptr;  // path of the file holding it (for messages)

  int64_t n_elements() const;
  std::string shape_string() const;  // "[8, 64, 32]"
  // Drops this tensor's resident pages from the process (they are re-read from disk if touched
  // again); keeps the RSS of a whole-model conversion bounded.
  void release_pages() const;
};

// One .safetensors file.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);
  // Parses an image already in memory (used for tests of the validator); `bytes` must outlive it.
  static Result<SafetensorsFile> parse(const uint8_t* bytes, size_t size, std::string name);

  const std::string& path() const { return *path_; }
  const std::vector<StTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::unique_ptr<std::string> path_;  // stable address for StTensor::file
  std::unique_ptr<MappedFile> map_;
  std::vector<StTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint: every tensor of one or more files, looked up by name.
class SafetensorsSet {
 public:
  // DIR/model.safetensors.index.json when present (its weight_map decides the shards), else
  // DIR/model.safetensors, else every DIR/*.safetensors (sorted). Duplicate names are an error.
  static Result<SafetensorsSet> open_dir(const std::string& dir);
  static Result<SafetensorsSet> open_files(const std::vector<std::string>& paths);

  const StTensor* find(std::string_view name) const;
  // All tensors, sorted by name.
  std::vector<const StTensor*> all() const;
  size_t file_count() const { return files_.size(); }
  size_t tensor_count() const { return index_.size(); }
  uint64_t total_bytes() const;

 private:
  Status add_file(SafetensorsFile f);

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string_view, const StTensor*> index_;
};

}  // namespace dsv4::tools
