// tests/fuzz/dsml_parser_fuzz.cpp — libFuzzer target: DsmlParser on arbitrary text with arbitrary
// chunking must not crash, hang or read out of bounds; whatever it reports must be consistent:
// every complete call's arguments are valid JSON, no content event carries DSML markup, and the
// result does not depend on how the text was chunked.
// Input layout: byte 0 = flags (bit 0 thinking), byte 1 = chunking seed, the rest = generated text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/dsml_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

struct Outcome {
  bool ok = false;
  dsv4::tokenizer::ParsedOutput out;
};

Outcome run(std::string_view text, bool thinking, uint8_t seed) {
  dsv4::tokenizer::DsmlParser p(thinking);
  std::vector<dsv4::tokenizer::DsmlEvent> ev;
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < text.size();) {
    s = s * 1103515245u + 12345u;
    size_t n = seed == 0 ? text.size() : 1 + (s >> 16) % 17;
    p.feed(text.substr(i, n), ev);
    i += n;
  }
  auto r = p.finish(ev);
  Outcome o;
  o.ok = r.ok();
  if (o.ok) dsv4::tokenizer::apply_dsml_events(ev, o.out);
  for (const auto& e : ev) {
    if (e.kind == dsv4::tokenizer::DsmlEvent::Kind::kContent && e.text.find("｜DSML｜invoke") != std::string::npos &&
        text.find("｜DSML｜invoke") == std::string_view::npos)
      __builtin_trap();  // markup the input never had
  }
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool thinking = (data[0] & 1) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  Outcome whole = run(text, thinking, 0);
  Outcome chunked = run(text, thinking, data[1] == 0 ? 1 : data[1]);
  if (whole.ok != chunked.ok) __builtin_trap();
  if (!whole.ok) return 0;
  if (whole.out.content != chunked.out.content || whole.out.reasoning != chunked.out.reasoning) __builtin_trap();
  if (whole.out.tool_calls.size() != chunked.out.tool_calls.size()) __builtin_trap();
  for (size_t i = 0; i < whole.out.tool_calls.size(); ++i) {
    const auto& a = whole.out.tool_calls[i];
    const auto& b = chunked.out.tool_calls[i];
    if (a.name != b.name || a.arguments_json != b.arguments_json) __builtin_trap();
    if (a.arguments_json.empty() || a.arguments_json.front() != '{' ||
        !dsv4::tokenizer::is_valid_json(a.arguments_json))
      __builtin_trap();
  }
  return 0;
}
