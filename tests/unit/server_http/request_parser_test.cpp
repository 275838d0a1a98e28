// Unit tests for server/http/request_parser: the request line, header fields, the framing rules
// that block request smuggling (RFC 9112 §6), limits (414/431/413/411), keep-alive and chunked
// decoding (whole, byte by byte, and with a pipelined request behind it).
#include "server/http/request_parser.h"

#include <gtest/gtest.h>

#include <string>

namespace dsv4::server::http {
namespace {

struct Parsed {
  ParseResult result;
  RequestHead head;
  HttpError err;
};

Parsed parse(const std::string& text, ParserLimits limits = {}) {
  Parsed p;
  const size_t end = find_head_end(text);
  EXPECT_GT(end, 0u) << "no complete head in: " << text;
  p.result = parse_request_head(std::string_view(text).substr(0, end), limits, p.head, p.err);
  return p;
}

int error_status(const std::string& text, ParserLimits limits = {}) {
  Parsed p = parse(text, limits);
  EXPECT_EQ(p.result, ParseResult::kError) << text;
  EXPECT_FALSE(p.err.message.empty());
  return p.result == ParseResult::kError ? p.err.status : 0;
}

// Decodes `in` as the body of `head` feeding `step` bytes at a time; returns the result, the body
// and how many bytes of `in` it used.
ParseResult decode(const RequestHead& head, const std::string& in, size_t step, std::string& body, size_t& used,
                   HttpError& err, ParserLimits limits = {}) {
  BodyDecoder d(head, limits);
  std::string pending;
  used = 0;
  size_t fed = 0;
  for (;;) {
    const size_t n = std::min(step, in.size() - fed);
    pending.append(in, fed, n);
    fed += n;
    size_t consumed = 0;
    const ParseResult r = d.feed(pending, consumed, body, err);
    pending.erase(0, consumed);
    used += consumed;
    if (r != ParseResult::kNeedMore || fed == in.size()) return r;
  }
}

TEST(RequestParser, SimpleGetAndPost) {
  Parsed g = parse("GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  ASSERT_EQ(g.result, ParseResult::kComplete) << g.err.message;
  EXPECT_EQ(g.head.method, "GET");
  EXPECT_EQ(g.head.path, "/v1/models");
  EXPECT_EQ(g.head.query, "x=1");
  EXPECT_EQ(g.head.framing, BodyFraming::kNone);
  EXPECT_TRUE(g.head.keep_alive);
  ASSERT_NE(g.head.find("host"), nullptr);
  EXPECT_EQ(*g.head.find("HOST"), "a");

  Parsed p = parse("POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 12\r\nX-A:  spaced value \t\r\n\r\n");
  ASSERT_EQ(p.result, ParseResult::kComplete) << p.err.message;
  EXPECT_EQ(p.head.framing, BodyFraming::kLength);
  EXPECT_EQ(p.head.content_length, 12u);
  EXPECT_EQ(*p.head.find("x-a"), "spaced value");
}

TEST(RequestParser, TargetsAndVersions) {
  EXPECT_EQ(parse("GET /a%20b%2Fc%zz HTTP/1.1\r\n\r\n").head.path, "/a b/c%zz");
  EXPECT_EQ(parse("GET http://h:1/v1/models?q HTTP/1.1\r\n\r\n").head.path, "/v1/models");
  EXPECT_EQ(parse("OPTIONS * HTTP/1.1\r\n\r\n").head.path, "*");
  EXPECT_EQ(parse("GET /\xff\xfe HTTP/1.1\r\n\r\n").result, ParseResult::kComplete);  // routes just do not match
  Parsed old = parse("GET / HTTP/1.0\r\n\r\n");
  EXPECT_FALSE(old.head.keep_alive);
  EXPECT_TRUE(parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").head.keep_alive);
  EXPECT_FALSE(parse("GET / HTTP/1.1\r\nConnection: foo, close\r\n\r\n").head.keep_alive);
  // Bare LF line ends are accepted (RFC 9112 §2.2); leading empty lines are skipped by the caller.
  EXPECT_EQ(parse("GET /x HTTP/1.1\nHost: a\n\n").head.path, "/x");
  EXPECT_EQ(leading_empty_lines("\r\n\nGET"), 3u);

  EXPECT_EQ(error_status("GET / HTTP/9.9\r\n\r\n"), 400);
  EXPECT_EQ(error_status("GET /  HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(error_status("GET / HTTP/1.1 x\r\n\r\n"), 400);
  EXPECT_EQ(error_status("G(T / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(error_status("GARBAGE\r\n\r\n"), 400);
  EXPECT_EQ(error_status("GET /a\x01 HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(error_status("GET a/b HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(error_status("GET /\rx HTTP/1.1\r\n\r\n"), 400);
}

TEST(RequestParser, MalformedHeaderFields) {
  EXPECT_EQ(error_status("GET / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n"), 400);  // space before ':'
  EXPECT_EQ(error_status("GET / HTTP/1.1\r\nA: b\r\n continued\r\n\r\n"), 400);          // obs-fold
  EXPECT_EQ(error_status("GET / HTTP/1.1\r\nNoColon\r\n\r\n"), 400);
  EXPECT_EQ(error_status("GET / HTTP/1.1\r\n: empty\r\n\r\n"), 400);
  EXPECT_EQ(error_status("GET / HTTP/1.1\r\nA: b\rc\r\n\r\n"), 400);  // bare CR
  EXPECT_EQ(error_status(std::string("GET / HTTP/1.1\r\nA: b\0c\r\n\r\n", 26)), 400);
  EXPECT_EQ(error_status("GET / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n"), 417);
  EXPECT_TRUE(parse("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n").head.expect_continue);
}

TEST(RequestParser, SmugglingBuildingBlocksAreRejected) {
  EXPECT_EQ(error_status("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(error_status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"), 400);
  EXPECT_EQ(error_status("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"), 400);
  EXPECT_EQ(error_status("POST / HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 6\r\n\r\n"), 400);
  EXPECT_EQ(error_status("POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n"), 400);
  EXPECT_EQ(error_status("POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n"), 400);
  EXPECT_EQ(error_status("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(error_status("POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n"), 400);
  EXPECT_EQ(error_status("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n"), 400);
  EXPECT_EQ(error_status("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 400);
  EXPECT_EQ(error_status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(error_status("POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n"), 400);
  EXPECT_EQ(error_status("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n").head.framing, BodyFraming::kChunked);
  // Found by the fuzzer: the coding must survive the header list growing after it (ASan).
  std::string later = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n";
  for (int i = 0; i < 40; ++i) later += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(parse(later + "\r\n").head.framing, BodyFraming::kChunked);
}

TEST(RequestParser, LengthRequiredAndLimits) {
  EXPECT_EQ(error_status("POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\n\r\n"), 411);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n").head.framing, BodyFraming::kNone);
  ParserLimits small;
  small.max_body_bytes = 100;
  EXPECT_EQ(error_status("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", small), 413);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n", small).result, ParseResult::kComplete);

  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 101; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(error_status(many + "\r\n"), 431);
  std::string hundred = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 100; ++i) hundred += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(parse(hundred + "\r\n").result, ParseResult::kComplete);

  ParserLimits lim;
  const std::string huge_header = "GET / HTTP/1.1\r\nX: " + std::string(lim.max_head_bytes, 'a');
  auto e = check_partial_head(huge_header, lim);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 431);
  auto u = check_partial_head("GET /" + std::string(lim.max_request_line, 'a'), lim);
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->status, 414);
  EXPECT_FALSE(check_partial_head("GET / HTTP/1.1\r\nX: 1\r\n", lim).has_value());
}

TEST(RequestParser, FindHeadEndResumes) {
  const std::string text = "GET / HTTP/1.1\r\nA: b\r\n\r\nNEXT";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const size_t first = find_head_end(std::string_view(text).substr(0, cut));
    const size_t resumed = first > 0 ? first : find_head_end(text, cut);
    EXPECT_EQ(resumed, text.size() - 4) << cut;
  }
  EXPECT_EQ(find_head_end("GET / HTTP/1.1\nA: b\n\nX"), 21u);
  EXPECT_EQ(find_head_end("GET / HTTP/1.1\r\nA: b\r\n"), 0u);
}

TEST(RequestParser, ContentLengthBodyLeavesThePipelinedRequest) {
  Parsed p = parse("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n");
  std::string body;
  size_t used = 0;
  HttpError err;
  for (size_t step : {1, 2, 100}) {
    body.clear();
    EXPECT_EQ(decode(p.head, "hello" "GET / HTTP/1.1\r\n\r\n", step, body, used, err), ParseResult::kComplete);
    EXPECT_EQ(body, "hello");
    EXPECT_EQ(used, 5u);
  }
}

TEST(RequestParser, ChunkedBodies) {
  Parsed p = parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  ASSERT_EQ(p.head.framing, BodyFraming::kChunked);
  const std::string wire = "5;ext=1\r\nhello\r\n6 ; a=\"b\"\r\n world\r\n0\r\nTrailer-A: x\r\n\r\n";
  const std::string next = "GET / HTTP/1.1\r\n\r\n";
  for (size_t step : {1, 3, 7, 1000}) {
    std::string body;
    size_t used = 0;
    HttpError err;
    ASSERT_EQ(decode(p.head, wire + next, step, body, used, err), ParseResult::kComplete) << err.message;
    EXPECT_EQ(body, "hello world");
    EXPECT_EQ(used, wire.size()) << step;
  }
  std::string body;
  size_t used = 0;
  HttpError err;
  EXPECT_EQ(decode(p.head, "a\nhelloworld\n0\n\n", 1, body, used, err), ParseResult::kComplete);  // bare LF
  EXPECT_EQ(body, "helloworld");

  auto status = [&](const std::string& in, ParserLimits limits = {}) {
    std::string b;
    size_t u = 0;
    HttpError e;
    const ParseResult r = decode(p.head, in, 1000, b, u, e, limits);
    EXPECT_EQ(r, ParseResult::kError) << in;
    return r == ParseResult::kError ? e.status : 0;
  };
  EXPECT_EQ(status("x\r\n"), 400);
  EXPECT_EQ(status("-1\r\n"), 400);
  EXPECT_EQ(status("5\r\nhelloX\r\n"), 400);        // data longer than its size
  EXPECT_EQ(status("5 x\r\nhello\r\n"), 400);       // junk after the size
  EXPECT_EQ(status("5\rx\r\n"), 400);               // bare CR
  EXPECT_EQ(status("fffffffffffffffff\r\n"), 400);  // 17 hex digits
  EXPECT_EQ(status("0\r\nbad trailer\r\n\r\n"), 400);
  EXPECT_EQ(status(std::string(5000, '1') + "\r\n"), 400);  // size line over max_chunk_line
  ParserLimits small;
  small.max_body_bytes = 10;
  EXPECT_EQ(status("b\r\n", small), 413);  // one chunk over the limit: refused before its data
  EXPECT_EQ(status("6\r\nhello \r\n6\r\nworld!\r\n", small), 413);  // the sum over the limit
  EXPECT_EQ(status("ffffffffffffff\r\n", small), 413);
}

}  // namespace
}  // namespace dsv4::server::http
