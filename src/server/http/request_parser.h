// server/http/request_parser.h — the HTTP/1.1 request parser (RFC 9112), pure functions over
// bytes: no sockets, no threads, so it is unit-tested and fuzzed (tests/fuzz/http_request_fuzz.cpp).
//
// A request arrives in two steps: the head (request line + header fields, up to the empty line),
// then the body, framed by Content-Length or chunked Transfer-Encoding and decoded incrementally
// into a bounded buffer. Strictness, each of which closes the connection after the error answer:
//   request line: METHOD SP origin-form|absolute-form|* SP HTTP/1.0|HTTP/1.1 CRLF; control bytes or
//     spaces in the target → 400; a line longer than max_request_line → 414;
//   header fields: token ":" OWS value OWS CRLF; whitespace before the colon (`Transfer-Encoding :`),
//     obs-fold continuation lines, bare CR/LF or control bytes in a value → 400; more than
//     max_header_count fields or a head larger than max_head_bytes → 431;
//   framing: Content-Length must be 1*DIGIT, given once (a repeat, even identical, or a list → 400);
//     Content-Length together with Transfer-Encoding → 400; Transfer-Encoding other than exactly
//     "chunked" (or on HTTP/1.0) → 400; a declared or decoded body over max_body_bytes → 413;
//     POST/PUT/PATCH with neither → 411;
//   chunked: hex sizes (at most 15 digits), extensions and trailer fields bounded and ignored.
// Line ends are CRLF (a bare LF ends a line too, as RFC 9112 §2.2 allows; a bare CR is an error).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::server::http {

struct ParserLimits {
  size_t max_request_line = 8 << 10;   // method + target + version; longer → 414
  size_t max_head_bytes = 64 << 10;    // request line + all header fields; larger → 431
  size_t max_header_count = 100;       // header fields; more → 431
  size_t max_body_bytes = 32u << 20;   // decoded body; larger → 413
  size_t max_chunk_line = 4096;        // chunk size line with extensions, and each trailer field
};

struct Header {
  std::string name, value;
};

enum class BodyFraming { kNone, kLength, kChunked };

struct RequestHead {
  std::string method;
  std::string target;  // as sent
  std::string path;    // percent-decoded path of the target (no query)
  std::string query;   // after '?', as sent
  int minor_version = 1;  // HTTP/1.<minor>
  std::vector<Header> headers;
  BodyFraming framing = BodyFraming::kNone;
  uint64_t content_length = 0;
  bool keep_alive = true;       // HTTP/1.1 without "Connection: close", or 1.0 with "keep-alive"
  bool expect_continue = false; // "Expect: 100-continue"

  // First value of a field (case-insensitive name), or nullptr.
  const std::string* find(std::string_view name) const;
};

// An error to answer with `status` (400, 408, 411, 413, 414, 415, 431) and then close.
struct HttpError {
  int status = 400;
  std::string message;
};

enum class ParseResult { kNeedMore, kComplete, kError };

// Bytes of empty lines (CRLF or LF) before a request line: skipped (RFC 9112 §2.2).
size_t leading_empty_lines(std::string_view in);

// The length of the head that starts `in` (through its empty line), or 0 if the empty line has not
// arrived yet. `scan_from` lets a caller that appends bytes resume the search (linear overall);
// pass the previous in.size(). `in` must not start with an empty line (leading_empty_lines()).
size_t find_head_end(std::string_view in, size_t scan_from = 0);

// Parses a complete head (the bytes find_head_end() measured). kComplete or kError only.
ParseResult parse_request_head(std::string_view head, const ParserLimits& limits, RequestHead& out, HttpError& err);

// The error for bytes that have no complete head yet but can never become a valid one: a request
// line over max_request_line (414) or a head over max_head_bytes (431). nullopt = keep reading.
std::optional<HttpError> check_partial_head(std::string_view in, const ParserLimits& limits);

// Case-insensitive ASCII comparison of header names and tokens.
bool iequals(std::string_view a, std::string_view b);

// Decodes a body incrementally: feed() takes the bytes read so far, appends the decoded body to
// `body` and says how many input bytes it used (the rest belongs to the next pipelined request).
class BodyDecoder {
 public:
  BodyDecoder(const RequestHead& head, const ParserLimits& limits);
  ParseResult feed(std::string_view in, size_t& consumed, std::string& body, HttpError& err);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kLength, kChunkSize, kChunkData, kChunkDataEnd, kTrailer, kDone };
  ParseResult fail(HttpError& err, int status, std::string message);
  State state_;
  uint64_t remaining_ = 0;  // kLength: body bytes left; kChunkData: chunk bytes left
  size_t max_body_;
  size_t max_line_;
  size_t max_trailers_;
  size_t trailers_ = 0;
  std::string line_;        // a partial size or trailer line
  bool cr_seen_ = false;    // kChunkDataEnd: the CR of the CRLF after a chunk's data was read
};

}  // namespace dsv4::server::http
