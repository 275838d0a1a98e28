// tools/convert.cpp — imatrix reader and the streaming checkpoint → GGUF pipeline.
#include "tools/convert.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "backend/cpu/quant.h"
#include "base/mapped_file.h"
#include "gguf/writer.h"
#include "model/shape.h"
#include "model/tensor_manifest.h"
#include "tools/hf_config.h"
#include "tools/hf_tensors.h"
#include "tools/metadata.h"
#include "tools/safetensors.h"
#include "tools/vocab.h"

namespace dsv4::tools {
namespace {

namespace fs = std::filesystem;

bool file_exists(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// The importance vector (ne[0] floats) for expert `expert` (-1 for 2-D tensors), or null.
Result<const float*> importance_for(const Imatrix& im, const model::TensorSpec& spec, int64_t expert) {
  const int64_t n = spec.ne[0];
  auto it = im.find(spec.name);
  if (it != im.end()) {
    const int64_t got = static_cast<int64_t>(it->second.size());
    if (got == n) return it->second.data();
    if (expert >= 0 && got == n * spec.ne[2]) return it->second.data() + expert * n;
    return invalid_argument("imatrix entry '" + spec.name + "' has " + std::to_string(got) + " values, expected " +
                            std::to_string(n) + (expert >= 0 ? " or " + std::to_string(n * spec.ne[2]) : std::string()));
  }
  if (expert >= 0) {
    for (const std::string& k : {spec.name + ".expert." + std::to_string(expert), spec.name + ".expert_" + std::to_string(expert)}) {
      auto e = im.find(k);
      if (e == im.end()) continue;
      if (static_cast<int64_t>(e->second.size()) != n)
        return invalid_argument("imatrix entry '" + k + "' has " + std::to_string(e->second.size()) + " values, expected " +
                                std::to_string(n));
      return e->second.data();
    }
  }
  return static_cast<const float*>(nullptr);
}

std::string general_name(const model::Ds4Shape& s) {
  return model::is_ds4_flash(s) ? "DeepSeek V4 Flash" : "DeepSeek V4 (dsv4 convert)";
}

// The tokenizer (nullopt when it is optional and absent).
Result<std::optional<Vocab>> find_and_load_vocab(const ConvertOptions& o, int64_t n_vocab, bool required,
                                                 const ConvertCallbacks& cb) {
  fs::path tok = o.tokenizer.empty() ? fs::path(o.hf_dir) / "tokenizer.json" : fs::path(o.tokenizer);
  if (!file_exists(tok)) {
    if (required || !o.tokenizer.empty()) return not_found(tok.string() + ": no tokenizer.json (use --tokenizer)");
    if (cb.note) cb.note("no tokenizer.json in " + o.hf_dir + ": the GGUF gets no tokenizer keys");
    return std::optional<Vocab>();
  }
  const fs::path cfg = tok.parent_path() / "tokenizer_config.json";
  DSV4_ASSIGN_OR_RETURN(Vocab v, load_vocab(tok.string(), file_exists(cfg) ? cfg.string() : std::string(), n_vocab));
  return std::optional<Vocab>(std::move(v));
}

Status write_vocab_only(const ConvertOptions& o, const ConvertCallbacks& cb, ConvertSummary& sum) {
  int64_t n_vocab = 0;
  const fs::path cfg = fs::path(o.hf_dir) / "config.json";
  if (!o.hf_dir.empty() && file_exists(cfg)) {
    DSV4_ASSIGN_OR_RETURN(model::Ds4Shape s, load_hf_config(cfg.string()));
    n_vocab = s.n_vocab;
  }
  DSV4_ASSIGN_OR_RETURN(std::optional<Vocab> v, find_and_load_vocab(o, n_vocab, /*required=*/true, cb));
  gguf::GgufWriter w(o.out);
  DSV4_RETURN_IF_ERROR(w.add_string("general.architecture", "deepseek4"));
  DSV4_RETURN_IF_ERROR(w.add_string("general.name", "DeepSeek V4 vocabulary"));
  DSV4_RETURN_IF_ERROR(write_vocab_metadata(w, *v));
  DSV4_RETURN_IF_ERROR(w.finish());
  sum.tensor_count = 0;
  return ok_status();
}

}  // namespace

Result<Imatrix> load_imatrix(const std::string& path) {
  DSV4_ASSIGN_OR_RETURN(MappedFile m, MappedFile::open(path));
  const uint8_t* p = m.data();
  const size_t size = m.size();
  size_t pos = 0;
  auto read_i32 = [&](int32_t& v, const char* what) -> Status {
    if (size - pos < 4) return corrupt(path + ": truncated imatrix (reading " + what + " at byte " + std::to_string(pos) + ")");
    std::memcpy(&v, p + pos, 4);
    pos += 4;
    return ok_status();
  };
  int32_t n = 0;
  DSV4_RETURN_IF_ERROR(read_i32(n, "the entry count"));
  if (n < 0 || static_cast<uint64_t>(n) > size / 12) return corrupt(path + ": implausible imatrix entry count " + std::to_string(n));
  Imatrix im;
  for (int32_t i = 0; i < n; ++i) {
    int32_t len = 0, ncall = 0, nval = 0;
    DSV4_RETURN_IF_ERROR(read_i32(len, "a name length"));
    if (len <= 0 || len > 4096 || size - pos < static_cast<size_t>(len))
      return corrupt(path + ": imatrix entry " + std::to_string(i) + " has a bad name length " + std::to_string(len));
    std::string name(reinterpret_cast<const char*>(p + pos), static_cast<size_t>(len));
    pos += static_cast<size_t>(len);
    DSV4_RETURN_IF_ERROR(read_i32(ncall, "ncall"));
    DSV4_RETURN_IF_ERROR(read_i32(nval, "nval"));
    if (nval < 0 || (size - pos) / 4 < static_cast<size_t>(nval))
      return corrupt(path + ": imatrix entry '" + name + "' claims " + std::to_string(nval) + " values past the end");
    std::vector<float> v(static_cast<size_t>(nval));
    std::memcpy(v.data(), p + pos, v.size() * 4);
    pos += v.size() * 4;
    if (ncall > 0)
      for (float& x : v) x /= static_cast<float>(ncall);
    if (!im.emplace(name, std::move(v)).second) return corrupt(path + ": imatrix entry '" + name + "' appears twice");
  }
  return im;  // trailing chunk count / dataset name are optional and not needed
}

Result<ConvertSummary> convert_checkpoint(const ConvertOptions& o, ThreadPool& pool, const ConvertCallbacks& cb) {
  ConvertSummary sum;
  auto note = [&](const std::string& s) {
    if (cb.note) cb.note(s);
  };
  if (o.out.empty()) return invalid_argument("convert: no output path");
  if (o.vocab_only) {
    DSV4_RETURN_IF_ERROR(write_vocab_only(o, cb, sum));
    return sum;
  }
  DSV4_ASSIGN_OR_RETURN(model::Ds4Shape shape, load_hf_config((fs::path(o.hf_dir) / "config.json").string()));
  DSV4_ASSIGN_OR_RETURN(SafetensorsSet st, SafetensorsSet::open_dir(o.hf_dir));
  const std::vector<model::TensorSpec> manifest = model::ds4_tensor_manifest(shape);
  DSV4_ASSIGN_OR_RETURN(SourceMap sources, map_sources(st, shape, manifest));
  sum.ignored_sources = sources.ignored.size();
  if (!sources.ignored.empty()) {
    std::string list;
    for (size_t i = 0; i < sources.ignored.size() && i < 8; ++i) list += (i ? ", " : "") + sources.ignored[i];
    note("dropping " + std::to_string(sources.ignored.size()) + " source tensor(s) not in the DS4 GGUF (MTP, rotary buffers): " +
         list + (sources.ignored.size() > 8 ? ", ..." : ""));
  }
  DSV4_ASSIGN_OR_RETURN(std::optional<Vocab> vocab, find_and_load_vocab(o, shape.n_vocab, /*required=*/false, cb));
  Imatrix im;
  if (!o.imatrix.empty()) {
    DSV4_ASSIGN_OR_RETURN(im, load_imatrix(o.imatrix));
  }

  // Types and sizes.
  std::vector<TensorType> types;
  uint64_t total = 0;
  for (const model::TensorSpec& t : manifest) {
    const model::TypeChoice c = model::choose_tensor_type(o.mix, t);
    if (c.fell_back) {
      ++sum.fallbacks;
      note(t.name + ": row length " + std::to_string(t.ne[0]) + " does not fit " + std::string(tensor_type_name(c.wanted)) +
           "; using " + std::string(tensor_type_name(c.type)));
    }
    if (c.type != TensorType::kI32) {
      const cpu::TypeKernels* k = cpu::type_kernels(c.type);
      if (k == nullptr || k->quantize_row == nullptr)
        return unsupported("convert: no quantizer for " + std::string(tensor_type_name(c.type)) + " (tensor " + t.name + ")");
    }
    types.push_back(c.type);
    total += static_cast<uint64_t>(tensor_row_bytes(c.type, t.ne[0]) * t.ne[1] * t.ne[2] * t.ne[3]);
  }

  gguf::GgufWriter w(o.out);
  DSV4_RETURN_IF_ERROR(write_ds4_metadata(w, shape, general_name(shape)));
  if (vocab) DSV4_RETURN_IF_ERROR(write_vocab_metadata(w, *vocab));
  if (!o.imatrix.empty()) {
    DSV4_RETURN_IF_ERROR(w.add_string("quantize.imatrix.file", fs::path(o.imatrix).filename().string()));
    DSV4_RETURN_IF_ERROR(w.add_u64("quantize.imatrix.entries_count", im.size()));
  }
  for (size_t i = 0; i < manifest.size(); ++i)
    DSV4_RETURN_IF_ERROR(w.add_tensor(manifest[i].name, types[i],
                                      std::span<const int64_t>(manifest[i].ne, static_cast<size_t>(manifest[i].n_dims))));
  DSV4_RETURN_IF_ERROR(w.begin());

  uint64_t done = 0;
  std::vector<float> f32;
  std::vector<uint8_t> out;
  for (size_t ti = 0; ti < manifest.size(); ++ti) {
    const model::TensorSpec& spec = manifest[ti];
    const TensorSource& src = sources.tensors[ti];
    const TensorType type = types[ti];
    const int64_t n = spec.ne[0];
    const int64_t row_bytes = tensor_row_bytes(type, n);
    const int64_t chunk_rows = std::max<int64_t>(1, o.chunk_bytes / (n * 4));
    const cpu::TypeKernels* k = type == TensorType::kI32 ? nullptr : cpu::type_kernels(type);
    bool used_imatrix = false;
    for (size_t pi = 0; pi < src.parts.size(); ++pi) {
      const SourcePart& part = src.parts[pi];
      const float* imp = nullptr;
      if (!im.empty() && k != nullptr) {
        auto r = importance_for(im, spec, spec.n_dims == 3 ? static_cast<int64_t>(pi) : -1);
        if (!r.ok()) return r.status().with_context(o.imatrix);
        imp = *r;
        used_imatrix |= imp != nullptr;
      }
      for (int64_t r0 = 0; r0 < part.rows; r0 += chunk_rows) {
        const int64_t nr = std::min(chunk_rows, part.rows - r0);
        out.resize(static_cast<size_t>(nr * row_bytes));
        if (k == nullptr) {
          DSV4_RETURN_IF_ERROR(
              decode_rows_i32(part, r0, nr, shape.n_expert, reinterpret_cast<int32_t*>(out.data())));
        } else {
          f32.resize(static_cast<size_t>(nr * n));
          pool.parallel_for(nr, [&](int64_t b, int64_t e, int) {
            if (b >= e) return;
            decode_rows_f32(part, r0 + b, e - b, f32.data() + b * n);
            for (int64_t r = b; r < e; ++r) k->quantize_row(f32.data() + r * n, out.data() + r * row_bytes, n, imp);
          });
        }
        DSV4_RETURN_IF_ERROR(w.write_tensor_chunk(out));
        done += out.size();
        if (cb.progress) cb.progress({done, total, ti, manifest.size(), &spec.name});
      }
    }
    sum.imatrix_used += used_imatrix ? 1 : 0;
    for (const SourcePart& part : src.parts) {
      part.tensor->release_pages();
      if (part.scale) part.scale->release_pages();
    }
  }
  DSV4_RETURN_IF_ERROR(w.finish());
  sum.tensor_count = manifest.size();
  sum.bytes = total;
  if (!im.empty() && sum.imatrix_used == 0) note("the imatrix matched no tensor names");
  return sum;
}

}  // namespace dsv4::tools
