// apps/dsv4/cmd_inspect.cpp — `dsv4 inspect FILE.gguf [--json] [--no-tokens]`: a gguf-dump.
//
// Prints the header (version, counts, alignment, data offset, file size), every metadata key with
// its type and value, the tensor table (index, name, type, ne, bytes, offset), totals per type and
// the total parameter count / bytes.
//   text mode:  arrays show their first 8 elements and the count; strings over 160 bytes are cut.
//   --json:     one JSON document on stdout with FULL values (every array element, whole strings),
//               so scripts can read e.g. the token list; u64 stays exact.
//   --no-tokens: leaves out the values of tokenizer.ggml.* arrays (tokens, merges, token_type,
//               scores: 100k+ entries) in both modes; their type and count are still shown.
// Errors go to stderr as the Status message, exit code 1.
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "dsv4/commands.h"
#include "gguf/reader.h"

namespace dsv4::app {
namespace {

using gguf::Value;
using gguf::ValueType;

constexpr uint64_t kTextArrayItems = 8;
constexpr size_t kTextStringBytes = 160;

struct InspectOptions {
  std::string path;
  bool json = false;
  bool no_tokens = false;
};

bool is_token_array(std::string_view key, const Value& v) {
  return v.type == ValueType::kArray && key.substr(0, 15) == "tokenizer.ggml.";
}

std::string type_label(const Value& v) {
  if (v.type != ValueType::kArray) return std::string(gguf::value_type_name(v.type));
  return "array[" + std::string(gguf::value_type_name(v.elem_type)) + "," + std::to_string(v.count) + "]";
}

std::string quote_text(std::string_view s, size_t max_bytes) {
  std::string out = "\"";
  const size_t n = s.size() < max_bytes ? s.size() : max_bytes;
  for (size_t i = 0; i < n; ++i) {
    const char c = s[i];
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
  if (n < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string scalar_text(const Value& v) {
  char buf[64];
  switch (v.type) {
    case ValueType::kU8:
    case ValueType::kU16:
    case ValueType::kU32:
    case ValueType::kU64: return std::to_string(v.u64);
    case ValueType::kI8:
    case ValueType::kI16:
    case ValueType::kI32:
    case ValueType::kI64: return std::to_string(v.i64);
    case ValueType::kF32: std::snprintf(buf, sizeof buf, "%.9g", v.f64); return buf;
    case ValueType::kF64: std::snprintf(buf, sizeof buf, "%.17g", v.f64); return buf;
    case ValueType::kBool: return v.b ? "true" : "false";
    case ValueType::kString: return quote_text(v.str, kTextStringBytes);
    case ValueType::kArray: break;
  }
  return "?";
}

std::string value_text(const Value& v, bool abbreviated) {
  if (v.type != ValueType::kArray) return scalar_text(v);
  if (abbreviated) return "(" + std::to_string(v.count) + " values omitted: --no-tokens)";
  std::string out = "[";
  const uint64_t n = v.count < kTextArrayItems ? v.count : kTextArrayItems;
  for (uint64_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    out += value_text(gguf::array_element(v, i), false);
  }
  if (n < v.count) out += ", ... (" + std::to_string(v.count) + " total)";
  return out + "]";
}

nlohmann::json value_json(const Value& v) {
  switch (v.type) {
    case ValueType::kU8:
    case ValueType::kU16:
    case ValueType::kU32:
    case ValueType::kU64: return v.u64;
    case ValueType::kI8:
    case ValueType::kI16:
    case ValueType::kI32:
    case ValueType::kI64: return v.i64;
    case ValueType::kF32:
    case ValueType::kF64: return v.f64;
    case ValueType::kBool: return v.b;
    case ValueType::kString: return std::string(v.str);
    case ValueType::kArray: {
      nlohmann::json a = nlohmann::json::array();
      for (uint64_t i = 0; i < v.count; ++i) a.push_back(value_json(gguf::array_element(v, i)));
      return a;
    }
  }
  return nullptr;
}

std::string shape_text(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (uint32_t d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

struct TypeTotal {
  uint64_t count = 0, bytes = 0;
  int64_t elements = 0;
};

int run_inspect(const InspectOptions& opt) {
  auto opened = gguf::GgufFile::open(opt.path);
  if (!opened.ok()) {
    std::fprintf(stderr, "dsv4 inspect: %s\n", opened.status().to_string().c_str());
    return 1;
  }
  const gguf::GgufFile& f = *opened;
  std::map<std::string, TypeTotal> totals;
  uint64_t total_bytes = 0;
  int64_t total_params = 0;
  for (const auto& t : f.tensors()) {
    TypeTotal& tt = totals[std::string(tensor_type_name(t.type))];
    ++tt.count;
    tt.bytes += t.n_bytes;
    tt.elements += t.n_elements;
    total_bytes += t.n_bytes;
    total_params += t.n_elements;
  }

  if (opt.json) {
    nlohmann::json j;
    j["file"] = f.name();
    j["version"] = f.version();
    j["tensor_count"] = f.tensors().size();
    j["kv_count"] = f.metadata().size();
    j["alignment"] = f.alignment();
    j["data_offset"] = f.data_offset();
    j["file_size"] = f.file_size();
    nlohmann::json md = nlohmann::json::array();
    for (const auto& kv : f.metadata()) {
      nlohmann::json e;
      e["key"] = std::string(kv.key);
      e["type"] = std::string(gguf::value_type_name(kv.value.type));
      if (kv.value.type == ValueType::kArray) {
        e["elem_type"] = std::string(gguf::value_type_name(kv.value.elem_type));
        e["count"] = kv.value.count;
      }
      if (!(opt.no_tokens && is_token_array(kv.key, kv.value))) e["value"] = value_json(kv.value);
      md.push_back(std::move(e));
    }
    j["metadata"] = std::move(md);
    nlohmann::json ts = nlohmann::json::array();
    size_t index = 0;
    for (const auto& t : f.tensors()) {
      nlohmann::json e;
      e["index"] = index++;
      e["name"] = std::string(t.name);
      e["type"] = std::string(tensor_type_name(t.type));
      e["type_id"] = static_cast<uint32_t>(t.type);
      e["ne"] = std::vector<int64_t>(t.ne, t.ne + t.n_dims);
      e["n_elements"] = t.n_elements;
      e["bytes"] = t.n_bytes;
      e["offset"] = t.offset;
      e["file_offset"] = f.data_offset() + t.offset;
      ts.push_back(std::move(e));
    }
    j["tensors"] = std::move(ts);
    nlohmann::json types = nlohmann::json::array();
    for (const auto& [name, tt] : totals)
      types.push_back({{"type", name}, {"count", tt.count}, {"bytes", tt.bytes}, {"elements", tt.elements}});
    j["types"] = std::move(types);
    j["total_parameters"] = total_params;
    j["total_bytes"] = total_bytes;
    const std::string out = j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }

  std::printf("%s: GGUF v%u, %zu tensors, %zu metadata keys, alignment %u, data offset %" PRIu64
              ", file size %" PRIu64 "\n",
              f.name().c_str(), f.version(), f.tensors().size(), f.metadata().size(), f.alignment(),
              f.data_offset(), f.file_size());
  std::printf("\nmetadata (%zu):\n", f.metadata().size());
  size_t i = 0;
  for (const auto& kv : f.metadata()) {
    const bool omit = opt.no_tokens && is_token_array(kv.key, kv.value);
    std::printf("  %4zu  %-48.*s %-22s = %s\n", i++, static_cast<int>(kv.key.size()), kv.key.data(),
                type_label(kv.value).c_str(), value_text(kv.value, omit).c_str());
  }
  std::printf("\ntensors (%zu):\n", f.tensors().size());
  std::printf("  %5s  %-18s %-28s %14s %14s  %s\n", "index", "type", "ne", "bytes", "offset", "name");
  i = 0;
  for (const auto& t : f.tensors())
    std::printf("  %5zu  %-18s %-28s %14" PRIu64 " %14" PRIu64 "  %.*s\n", i++,
                std::string(tensor_type_name(t.type)).c_str(), shape_text(t).c_str(), t.n_bytes, t.offset,
                static_cast<int>(t.name.size()), t.name.data());
  std::printf("\ntotals per type:\n");
  std::printf("  %-18s %8s %18s %18s\n", "type", "tensors", "elements", "bytes");
  for (const auto& [name, tt] : totals)
    std::printf("  %-18s %8" PRIu64 " %18" PRId64 " %18" PRIu64 "\n", name.c_str(), tt.count, tt.elements, tt.bytes);
  std::printf("\ntotal: %zu tensors, %" PRId64 " parameters, %" PRIu64 " bytes (%.3f GB)\n", f.tensors().size(),
              total_params, total_bytes, static_cast<double>(total_bytes) / 1e9);
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand("inspect", "Print a GGUF file's header, metadata, tensor table and totals");
  cmd->add_option("file", opt->path, "GGUF file")->required();
  cmd->add_flag("--json", opt->json, "One JSON document with full metadata values (for scripts)");
  cmd->add_flag("--no-tokens", opt->no_tokens, "Leave out the values of tokenizer.ggml.* arrays");
  cmd->callback([opt, &exit_code] { exit_code = run_inspect(*opt); });
}

}  // namespace dsv4::app
