// tools/safetensors.cpp — header parsing and validation, shard index, page release.
#include "tools/safetensors.h"
#include "base/mapped_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace dsv4::tools {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t{256} << 20;  // real headers are < 1 MB

struct DtypeInfo {
  StDtype d;
  const char* name;
  int64_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {StDtype::kF32, "F32", 4},         {StDtype::kF16, "F16", 2}, {StDtype::kBF16, "BF16", 2},
    {StDtype::kF8_E4M3, "F8_E4M3", 1}, {StDtype::kF8_E8M0, "F8_E8M0", 1}, {StDtype::kI8, "I8", 1},
    {StDtype::kU8, "U8", 1},           {StDtype::kI32, "I32", 4}, {StDtype::kI64, "I64", 8},
};

// Reads a JSON non-negative integer (signed or unsigned storage).
std::optional<uint64_t> json_uint(const Json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v >= 0) return static_cast<uint64_t>(v);
  }
  return std::nullopt;
}

}  // namespace

std::optional<StDtype> st_dtype_from_name(std::string_view name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d.d;
  return std::nullopt;
}
const char* st_dtype_name(StDtype d) {
  for (const auto& x : kDtypes)
    if (x.d == d) return x.name;
  return "?";
}
int64_t st_dtype_size(StDtype d) {
  for (const auto& x : kDtypes)
    if (x.d == d) return x.size;
  return 0;
}

int64_t StTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string StTensor::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void StTensor::release_pages() const {
  if (data == nullptr || n_bytes == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(data) + n_bytes;
  // Advisory: a read-only shared file mapping refaults from the file if touched again.
  (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  DSV4_ASSIGN_OR_RETURN(MappedFile m, MappedFile::open(path));
  auto map = std::make_unique<MappedFile>(std::move(m));
  DSV4_ASSIGN_OR_RETURN(SafetensorsFile f, parse(map->data(), map->size(), path));
  f.map_ = std::move(map);
  return f;
}

Result<SafetensorsFile> SafetensorsFile::parse(const uint8_t* bytes, size_t size, std::string name) {
  SafetensorsFile f;
  f.path_ = std::make_unique<std::string>(std::move(name));
  const std::string& fname = *f.path_;
  if (size < 8)
    return corrupt(fname + ": " + std::to_string(size) + " bytes is too short for a safetensors header length");
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes, 8);  // little-endian (asserted for our targets in gguf/value.h)
  if (hlen > size - 8)
    return corrupt(fname + ": header length " + std::to_string(hlen) + " exceeds the " + std::to_string(size - 8) +
                   " bytes after it (truncated file?)");
  if (hlen > kMaxHeaderBytes) return corrupt(fname + ": header length " + std::to_string(hlen) + " is implausibly large");
  const char* hp = reinterpret_cast<const char*>(bytes + 8);
  Json h = Json::parse(hp, hp + hlen, nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded()) return corrupt(fname + ": the JSON header is not well-formed");
  if (!h.is_object()) return corrupt(fname + ": the JSON header is not an object");
  const uint64_t data_start = 8 + hlen;
  const uint64_t data_size = size - data_start;
  const uint8_t* data = bytes + data_start;
  struct Span {
    uint64_t b, e;
    size_t idx;
  };
  std::vector<Span> spans;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& tname = it.key();
    const Json& v = it.value();
    if (tname == "__metadata__") {
      if (!v.is_object()) return corrupt(fname + ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return corrupt(fname + ": __metadata__ value '" + m.key() + "' is not a string");
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = fname + ": tensor '" + tname + "'";
    if (!v.is_object()) return corrupt(where + ": entry is not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) return corrupt(where + ": missing or non-string dtype");
    if (sh == v.end() || !sh->is_array()) return corrupt(where + ": missing or non-array shape");
    if (off == v.end() || !off->is_array() || off->size() != 2) return corrupt(where + ": data_offsets must be [begin, end]");
    StTensor t;
    t.name = tname;
    const auto dtype = st_dtype_from_name(dt->get<std::string>());
    if (!dtype) return unsupported(where + ": unknown dtype '" + dt->get<std::string>() + "'");
    t.dtype = *dtype;
    if (sh->size() > 8) return corrupt(where + ": " + std::to_string(sh->size()) + " dims");
    uint64_t n = 1;
    for (const Json& d : *sh) {
      const auto dim = json_uint(d);
      if (!dim || *dim > (uint64_t{1} << 40)) return corrupt(where + ": shape entries must be non-negative integers");
      t.shape.push_back(static_cast<int64_t>(*dim));
      if (*dim != 0 && n > (uint64_t{1} << 50) / *dim) return corrupt(where + ": shape " + t.shape_string() + " overflows");
      n *= *dim;
    }
    const auto b = json_uint((*off)[0]), e = json_uint((*off)[1]);
    if (!b || !e || *b > *e) return corrupt(where + ": data_offsets must be non-negative with begin <= end");
    const uint64_t want = n * static_cast<uint64_t>(st_dtype_size(t.dtype));
    if (*e - *b != want)
      return corrupt(where + ": shape " + t.shape_string() + " of " + st_dtype_name(t.dtype) + " needs " +
                     std::to_string(want) + " bytes but data_offsets span " + std::to_string(*e - *b));
    if (*e > data_size)
      return corrupt(where + ": data_offsets end " + std::to_string(*e) + " is past the " + std::to_string(data_size) +
                     "-byte data section (truncated file?)");
    t.data = data + *b;
    t.n_bytes = want;
    spans.push_back({*b, *e, f.tensors_.size()});
    f.tensors_.push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.b < b.b || (a.b == b.b && a.e < b.e); });
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].b < spans[i - 1].e && spans[i].e > spans[i].b)
      return corrupt(fname + ": tensors '" + f.tensors_[spans[i - 1].idx].name + "' and '" + f.tensors_[spans[i].idx].name +
                     "' overlap");
  for (StTensor& t : f.tensors_) t.file = f.path_.get();
  return f;
}

Status SafetensorsSet::add_file(SafetensorsFile f) {
  files_.push_back(std::make_unique<SafetensorsFile>(std::move(f)));
  const SafetensorsFile& sf = *files_.back();
  for (const StTensor& t : sf.tensors()) {
    auto [it, inserted] = index_.emplace(std::string_view(t.name), &t);
    if (!inserted)
      return corrupt("tensor '" + t.name + "' appears in both " + *it->second->file + " and " + sf.path());
  }
  return ok_status();
}

Result<SafetensorsSet> SafetensorsSet::open_files(const std::vector<std::string>& paths) {
  SafetensorsSet s;
  for (const std::string& p : paths) {
    DSV4_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(p));
    DSV4_RETURN_IF_ERROR(s.add_file(std::move(f)));
  }
  return s;
}

Result<SafetensorsSet> SafetensorsSet::open_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found(dir + ": not a directory");
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index_path, ec)) {
    const std::string ip = index_path.string();
    DSV4_ASSIGN_OR_RETURN(std::string text, read_text_file(ip));
    Json j = Json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return corrupt(ip + ": not a well-formed JSON object");
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object()) return corrupt(ip + ": missing weight_map object");
    std::map<std::string, std::set<std::string>> by_file;  // shard -> tensors it should hold
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string()) return corrupt(ip + ": weight_map['" + it.key() + "'] is not a string");
      const std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "..")
        return corrupt(ip + ": weight_map['" + it.key() + "'] names an invalid shard '" + shard + "'");
      by_file[shard].insert(it.key());
    }
    if (by_file.empty()) return corrupt(ip + ": weight_map is empty");
    SafetensorsSet s;
    for (const auto& [shard, names] : by_file) {
      const std::string sp = (fs::path(dir) / shard).string();
      auto f = SafetensorsFile::open(sp);
      if (!f.ok()) return f.status().with_context(ip + ": shard '" + shard + "'");
      for (const StTensor& t : f->tensors())
        if (!names.count(t.name))
          return corrupt(sp + ": tensor '" + t.name + "' is not assigned to this shard by " + ip);
      std::set<std::string> present;
      for (const StTensor& t : f->tensors()) present.insert(t.name);
      for (const std::string& n : names)
        if (!present.count(n)) return not_found(sp + ": tensor '" + n + "' listed by " + ip + " is missing");
      DSV4_RETURN_IF_ERROR(s.add_file(std::move(f).value()));
    }
    return s;
  }
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(single, ec)) return open_files({single.string()});
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") paths.push_back(e.path().string());
  if (ec) return io_error(dir + ": cannot list: " + ec.message());
  if (paths.empty()) return not_found(dir + ": no model.safetensors.index.json and no .safetensors files");
  std::sort(paths.begin(), paths.end());
  return open_files(paths);
}

const StTensor* SafetensorsSet::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<const StTensor*> SafetensorsSet::all() const {
  std::vector<const StTensor*> v;
  v.reserve(index_.size());
  for (const auto& [n, t] : index_) v.push_back(t);
  std::sort(v.begin(), v.end(), [](const StTensor* a, const StTensor* b) { return a->name < b->name; });
  return v;
}

uint64_t SafetensorsSet::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, t] : index_) n += t->n_bytes;
  return n;
}

}  // namespace dsv4::tools
