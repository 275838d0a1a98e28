// tests/fuzz/http_request_fuzz.cpp — libFuzzer target: the HTTP/1.1 request parser
// (server/http/request_parser) on arbitrary bytes, read as a stream of pipelined requests the way
// a connection does. It must never crash, hang or read out of bounds, and must agree with itself:
// feeding a body one byte at a time decodes the same bytes, uses the same input and ends the same
// way as feeding it whole. Small limits (a few KiB) so the fuzzer reaches them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/http/request_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using namespace dsv4::server::http;

struct Decoded {
  ParseResult result;
  std::string body;
  size_t used = 0;
  int status = 0;
};

Decoded decode(const RequestHead& head, const ParserLimits& limits, std::string_view in, size_t step) {
  BodyDecoder d(head, limits);
  Decoded out;
  std::string pending;
  size_t fed = 0;
  for (;;) {
    const size_t n = std::min(step, in.size() - fed);
    pending.append(in.substr(fed, n));
    fed += n;
    size_t consumed = 0;
    HttpError err;
    out.result = d.feed(pending, consumed, out.body, err);
    if (consumed > pending.size()) __builtin_trap();
    pending.erase(0, consumed);
    out.used += consumed;
    if (out.result == ParseResult::kError) {
      if (err.status < 400 || err.status > 499 || err.message.empty()) __builtin_trap();
      out.status = err.status;
    }
    if (out.result != ParseResult::kNeedMore || fed == in.size()) return out;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ParserLimits limits;
  limits.max_request_line = 512;
  limits.max_head_bytes = 2048;
  limits.max_header_count = 16;
  limits.max_body_bytes = 4096;
  limits.max_chunk_line = 64;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  for (int requests = 0; requests < 64 && !in.empty(); ++requests) {
    in.remove_prefix(leading_empty_lines(in));
    // The head end found in one pass equals the one found resuming after a cut.
    const size_t end = find_head_end(in);
    if (end > in.size()) __builtin_trap();
    const size_t cut = in.size() / 2;
    const size_t first = find_head_end(in.substr(0, cut));
    if ((first > 0 ? first : find_head_end(in, cut)) != end) __builtin_trap();
    if (end == 0) {
      (void)check_partial_head(in, limits);
      return 0;
    }
    RequestHead head;
    HttpError err;
    const ParseResult r = parse_request_head(in.substr(0, end), limits, head, err);
    if (r == ParseResult::kNeedMore) __builtin_trap();
    if (r == ParseResult::kError) {
      if (err.status < 400 || err.status > 499 || err.message.empty()) __builtin_trap();
      return 0;  // the connection would answer and close
    }
    if (head.headers.size() > limits.max_header_count) __builtin_trap();
    if (head.framing == BodyFraming::kLength && head.content_length > limits.max_body_bytes) __builtin_trap();
    in.remove_prefix(end);
    const Decoded whole = decode(head, limits, in, in.size() + 1);
    const Decoded bytewise = decode(head, limits, in, 1);
    if (whole.result != bytewise.result || whole.status != bytewise.status) __builtin_trap();
    if (whole.result == ParseResult::kComplete && (whole.body != bytewise.body || whole.used != bytewise.used))
      __builtin_trap();
    if (whole.body.size() > limits.max_body_bytes || whole.used > in.size()) __builtin_trap();
    if (whole.result != ParseResult::kComplete) return 0;
    in.remove_prefix(whole.used);
  }
  return 0;
}
