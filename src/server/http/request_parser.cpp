// server/http/request_parser.cpp — request line, header fields, framing rules, body decoding.
#include "server/http/request_parser.h"

#include <algorithm>

namespace dsv4::server::http {
namespace {

// tchar (RFC 9110 §5.6.2).
bool is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-': case '.':
    case '^': case '_': case '`': case '|': case '~': return true;
    default: return false;
  }
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); });
}

// field-value bytes: VCHAR, obs-text, SP, HTAB (no other control bytes, no CR/LF, no DEL).
bool is_field_value(std::string_view s) {
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
  }
  return true;
}

// Request-target bytes: visible, no spaces or controls (bytes ≥ 0x80 are let through: they reach
// the router as they are and fail to match any route).
bool is_target_byte(unsigned char c) { return c > 0x20 && c != 0x7f; }

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

// Splits a comma-separated list into trimmed, non-empty elements.
std::vector<std::string_view> split_list(std::string_view v) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = v.find(',', start);
    if (comma == std::string_view::npos) comma = v.size();
    std::string_view item = trim_ows(v.substr(start, comma - start));
    if (!item.empty()) out.push_back(item);
    start = comma + 1;
  }
  return out;
}

// One line of `in` starting at `pos` without its line end; advances pos past the LF. False when a
// bare CR is inside the line.
bool next_line(std::string_view in, size_t& pos, std::string_view& line) {
  size_t lf = in.find('\n', pos);
  if (lf == std::string_view::npos) lf = in.size();
  line = in.substr(pos, lf - pos);
  pos = lf + 1;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line.find('\r') == std::string_view::npos;
}

ParseResult error(HttpError& err, int status, std::string message) {
  err.status = status;
  err.message = std::move(message);
  return ParseResult::kError;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

const std::string* RequestHead::find(std::string_view name) const {
  for (const Header& h : headers)
    if (iequals(h.name, name)) return &h.value;
  return nullptr;
}

size_t leading_empty_lines(std::string_view in) {
  size_t i = 0;
  for (;;) {
    if (i < in.size() && in[i] == '\n') {
      ++i;
    } else if (i + 1 < in.size() && in[i] == '\r' && in[i + 1] == '\n') {
      i += 2;
    } else {
      return i;
    }
  }
}

size_t find_head_end(std::string_view in, size_t scan_from) {
  // The head ends at LF followed by an empty line: "\n\n" or "\n\r\n". Resume 2 bytes early so a
  // terminator split across reads is found.
  size_t pos = scan_from >= 2 ? scan_from - 2 : 0;
  for (;;) {
    const size_t lf = in.find('\n', pos);
    if (lf == std::string_view::npos) return 0;
    if (lf + 1 < in.size() && in[lf + 1] == '\n') return lf + 2;
    if (lf + 2 < in.size() && in[lf + 1] == '\r' && in[lf + 2] == '\n') return lf + 3;
    pos = lf + 1;
  }
}

std::optional<HttpError> check_partial_head(std::string_view in, const ParserLimits& limits) {
  const size_t lf = in.find('\n');
  if ((lf == std::string_view::npos ? in.size() : lf) > limits.max_request_line)
    return HttpError{414, "The request line is longer than " + std::to_string(limits.max_request_line) + " bytes."};
  if (in.size() > limits.max_head_bytes)
    return HttpError{431, "The request header section is larger than " + std::to_string(limits.max_head_bytes) +
                              " bytes."};
  return std::nullopt;
}

ParseResult parse_request_head(std::string_view head, const ParserLimits& limits, RequestHead& out, HttpError& err) {
  out = RequestHead{};
  if (auto e = check_partial_head(head, limits)) return error(err, e->status, e->message);
  size_t pos = 0;
  std::string_view line;
  if (!next_line(head, pos, line)) return error(err, 400, "A bare CR in the request line.");

  // request-line = method SP request-target SP HTTP-version (exactly one space each).
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return error(err, 400, "Malformed request line: expected 'METHOD TARGET HTTP/1.1'.");
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method)) return error(err, 400, "Malformed request line: invalid method.");
  if (target.empty() || !std::all_of(target.begin(), target.end(),
                                     [](char c) { return is_target_byte(static_cast<unsigned char>(c)); }))
    return error(err, 400, "Malformed request line: invalid request target.");
  if (version == "HTTP/1.1") {
    out.minor_version = 1;
  } else if (version == "HTTP/1.0") {
    out.minor_version = 0;
  } else {
    return error(err, 400, "Unsupported HTTP version: this server speaks HTTP/1.1 and HTTP/1.0.");
  }
  out.method = std::string(method);
  out.target = std::string(target);

  // origin-form "/path?query", absolute-form "http://host/path?query", asterisk-form "*".
  std::string_view path_and_query = target;
  if (target.front() != '/' && target != "*") {
    const size_t scheme = target.find("://");
    if (scheme == std::string_view::npos || scheme == 0)
      return error(err, 400, "Malformed request line: the target must be an absolute path.");
    const size_t slash = target.find('/', scheme + 3);
    path_and_query = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
  }
  const size_t q = path_and_query.find('?');
  out.path = percent_decode(path_and_query.substr(0, q));
  if (q != std::string_view::npos) out.query = std::string(path_and_query.substr(q + 1));

  // Header fields.
  const std::string* content_length = nullptr;
  std::vector<std::string> transfer_codings;  // copies: out.headers reallocates while it grows
  bool has_transfer_encoding = false;
  bool connection_close = false, connection_keep_alive = false;
  while (pos < head.size()) {
    if (!next_line(head, pos, line)) return error(err, 400, "A bare CR in a header field.");
    if (line.empty()) break;  // the end of the head
    if (line.front() == ' ' || line.front() == '\t')
      return error(err, 400, "Obsolete line folding in a header field is not accepted.");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return error(err, 400, "A header field without ':'.");
    const std::string_view name = line.substr(0, colon);
    if (!is_token(name))
      return error(err, 400, "Invalid header field name (whitespace before ':' or a byte that is not a token).");
    const std::string_view value = trim_ows(line.substr(colon + 1));
    if (!is_field_value(value)) return error(err, 400, "A control character in a header field value.");
    if (out.headers.size() >= limits.max_header_count)
      return error(err, 431, "More than " + std::to_string(limits.max_header_count) + " header fields.");
    out.headers.push_back({std::string(name), std::string(value)});
    const std::string& stored = out.headers.back().value;
    if (iequals(name, "Content-Length")) {
      if (content_length != nullptr) return error(err, 400, "Content-Length is given more than once.");
      content_length = &stored;
    } else if (iequals(name, "Transfer-Encoding")) {
      has_transfer_encoding = true;
      for (std::string_view c : split_list(stored)) transfer_codings.emplace_back(c);
    } else if (iequals(name, "Connection")) {
      for (std::string_view c : split_list(stored)) {
        if (iequals(c, "close")) connection_close = true;
        if (iequals(c, "keep-alive")) connection_keep_alive = true;
      }
    } else if (iequals(name, "Expect")) {
      if (!iequals(stored, "100-continue")) return error(err, 417, "Unsupported Expect: only 100-continue is understood.");
      out.expect_continue = out.minor_version == 1;
    }
  }
  // Pointers into out.headers are stable now (no more push_back).
  content_length = out.find("Content-Length");
  out.keep_alive = out.minor_version == 1 ? !connection_close : connection_keep_alive && !connection_close;

  if (has_transfer_encoding) {
    if (content_length != nullptr)
      return error(err, 400, "Both Content-Length and Transfer-Encoding are present (RFC 9112 §6.3).");
    if (out.minor_version == 0) return error(err, 400, "Transfer-Encoding is not allowed in HTTP/1.0.");
    if (transfer_codings.size() != 1 || !iequals(transfer_codings[0], "chunked"))
      return error(err, 400, "Unsupported Transfer-Encoding: only 'chunked' is accepted.");
    out.framing = BodyFraming::kChunked;
  } else if (content_length != nullptr) {
    const std::string& v = *content_length;
    if (v.empty() || v.size() > 19 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return error(err, 400, "Invalid Content-Length: expected a decimal number of bytes.");
    out.content_length = std::stoull(v);
    if (out.content_length > limits.max_body_bytes)
      return error(err, 413, "The request body is larger than the server's limit of " +
                                 std::to_string(limits.max_body_bytes) + " bytes.");
    out.framing = out.content_length > 0 ? BodyFraming::kLength : BodyFraming::kNone;
  } else if (out.method == "POST" || out.method == "PUT" || out.method == "PATCH") {
    return error(err, 411, "A " + out.method + " request needs Content-Length or Transfer-Encoding: chunked.");
  }
  return ParseResult::kComplete;
}

BodyDecoder::BodyDecoder(const RequestHead& head, const ParserLimits& limits)
    : state_(head.framing == BodyFraming::kChunked  ? State::kChunkSize
             : head.framing == BodyFraming::kLength ? State::kLength
                                                    : State::kDone),
      remaining_(head.framing == BodyFraming::kLength ? head.content_length : 0),
      max_body_(limits.max_body_bytes),
      max_line_(limits.max_chunk_line),
      max_trailers_(limits.max_header_count) {}

ParseResult BodyDecoder::fail(HttpError& err, int status, std::string message) {
  state_ = State::kDone;
  return error(err, status, std::move(message));
}

ParseResult BodyDecoder::feed(std::string_view in, size_t& consumed, std::string& body, HttpError& err) {
  consumed = 0;
  while (state_ != State::kDone) {
    const std::string_view rest = in.substr(consumed);
    switch (state_) {
      case State::kLength: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, rest.size()));
        body.append(rest.data(), n);
        consumed += n;
        remaining_ -= n;
        if (remaining_ > 0) return ParseResult::kNeedMore;
        state_ = State::kDone;
        break;
      }
      case State::kChunkSize:
      case State::kTrailer: {
        const size_t lf = rest.find('\n');
        const size_t take = lf == std::string_view::npos ? rest.size() : lf + 1;
        if (line_.size() + take > max_line_ + 2)
          return fail(err, 400, state_ == State::kChunkSize ? "A chunk size line is too long."
                                                            : "A trailer field is too long.");
        line_.append(rest.data(), take);
        consumed += take;
        if (lf == std::string_view::npos) return ParseResult::kNeedMore;
        std::string_view line(line_);
        line.remove_suffix(1);  // LF
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.find('\r') != std::string_view::npos) return fail(err, 400, "A bare CR in chunked framing.");
        if (state_ == State::kTrailer) {
          if (line.empty()) {
            state_ = State::kDone;
          } else {
            const size_t colon = line.find(':');
            if (colon == std::string_view::npos || !is_token(line.substr(0, colon)) ||
                !is_field_value(trim_ows(line.substr(colon + 1))))
              return fail(err, 400, "A malformed trailer field.");
            if (++trailers_ > max_trailers_) return fail(err, 431, "Too many trailer fields.");
          }
          line_.clear();
          break;
        }
        // chunk-size [ BWS ";" chunk-ext ]
        size_t digits = 0;
        uint64_t size = 0;
        while (digits < line.size() && hex_value(line[digits]) >= 0) {
          if (digits == 15) return fail(err, 400, "A chunk size is too large.");
          size = size * 16 + static_cast<uint64_t>(hex_value(line[digits]));
          ++digits;
        }
        if (digits == 0) return fail(err, 400, "A chunk size is not a hexadecimal number.");
        const std::string_view ext = trim_ows(line.substr(digits));
        if (!ext.empty() && ext.front() != ';') return fail(err, 400, "Malformed chunk size line.");
        if (!is_field_value(ext)) return fail(err, 400, "A control character in a chunk extension.");
        line_.clear();
        if (size == 0) {
          state_ = State::kTrailer;
          break;
        }
        if (size > max_body_ || body.size() > max_body_ - size)
          return fail(err, 413, "The request body is larger than the server's limit of " + std::to_string(max_body_) +
                                    " bytes.");
        remaining_ = size;
        state_ = State::kChunkData;
        break;
      }
      case State::kChunkData: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, rest.size()));
        body.append(rest.data(), n);
        consumed += n;
        remaining_ -= n;
        if (remaining_ > 0) return ParseResult::kNeedMore;
        state_ = State::kChunkDataEnd;
        break;
      }
      case State::kChunkDataEnd: {
        // CRLF (or LF) after the chunk's data.
        if (rest.empty()) return ParseResult::kNeedMore;
        if (rest[0] == '\n') {
          consumed += 1;
          cr_seen_ = false;
          state_ = State::kChunkSize;
          break;
        }
        if (!cr_seen_ && rest[0] == '\r') {
          cr_seen_ = true;
          consumed += 1;
          break;
        }
        return fail(err, 400, "Chunk data is not followed by CRLF (its size does not match).");
      }
      case State::kDone: break;
    }
  }
  return ParseResult::kComplete;
}

}  // namespace dsv4::server::http
