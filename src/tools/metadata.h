// tools/metadata.h — the deepseek4.* GGUF metadata block, shared by synth and convert.
//
// Writes general.architecture, general.name and every deepseek4.* key of docs/spec/gguf.md §2.1 from a
// Ds4Shape, in one fixed order (so two tools describing the same shape write the same bytes).
#pragma once

#include <string_view>

#include "base/status.h"
#include "gguf/writer.h"
#include "model/shape.h"

namespace dsv4::tools {

Status write_ds4_metadata(gguf::GgufWriter& w, const model::Ds4Shape& s, std::string_view general_name);

}  // namespace dsv4::tools
