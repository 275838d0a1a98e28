// Unit tests for the one JSON body parser every route uses (request_json.h): its limits (depth,
// keys per object, values in all, string bytes), linear time in the number of keys, key order and
// duplicate keys, and the routes that used to parse on their own (count_tokens, /tokenize,
// /detokenize).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "server/api/anthropic.h"
#include "server/api/request_json.h"
#include "server/api/utility_requests.h"

namespace dsv4::server::api {
namespace {

std::string object_with_keys(size_t n, size_t start = 0) {
  std::string s = "{";
  for (size_t i = 0; i < n; ++i) {
    if (i) s += ',';
    s += "\"k" + std::to_string(start + i) + "\":" + std::to_string(i);
  }
  return s + "}";
}

// Sanitizer builds run several times slower; the quadratic builder took 13 s for the test below
// in a Release build (nlohmann::ordered_json::parse on this machine), the linear one 0.3 s.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kSlowdown = 2.0;
#else
constexpr double kSlowdown = 1.0;
#endif

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(JsonLimits, KeyOrderIsKeptAndTheLastDuplicateWins) {
  auto r = parse_json_body(R"({"b":1,"a":{"y":1,"x":2},"b":3,"c":[1,{"z":null}]})", Dialect::kOpenAi);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->dump(), R"({"b":3,"a":{"y":1,"x":2},"c":[1,{"z":null}]})");
}

TEST(JsonLimits, ScalarsAndNestingRoundTrip) {
  const std::string body = R"({"s":"h\u00e9","i":-5,"u":18446744073709551615,"f":1.5,"t":true,"n":null,"e":{},"a":[[],[{}]]})";
  auto r = parse_json_body(body, Dialect::kOpenAi);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->dump(), R"({"s":"hé","i":-5,"u":18446744073709551615,"f":1.5,"t":true,"n":null,"e":{},"a":[[],[{}]]})");
}

TEST(JsonLimits, ObjectWithTooManyKeysIsRejectedFast) {
  const std::string body = object_with_keys(80000);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = parse_json_body(body, Dialect::kOpenAi);
  EXPECT_LT(seconds_since(t0), 2.0 * kSlowdown);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than 4096 keys"), std::string::npos) << r.status().message();
  auto a = parse_json_body(object_with_keys(kMaxJsonObjectKeys + 1), Dialect::kAnthropic);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message(), "An object in the request body has more than 4096 keys.");
  EXPECT_TRUE(parse_json_body(object_with_keys(kMaxJsonObjectKeys), Dialect::kOpenAi).ok());
}

TEST(JsonLimits, AMillionKeysParseInLinearTime) {
  // 250 objects of 4000 keys: nlohmann's ordered_json builder scans each object on every insert
  // (250 × 4000² / 2 = 2e9 key compares, seconds); the hash index makes it one pass.
  std::string body = "{\"objects\":[";
  for (size_t i = 0; i < 250; ++i) {
    if (i) body += ',';
    body += object_with_keys(4000, i * 4000);
  }
  body += "]}";
  const auto t0 = std::chrono::steady_clock::now();
  auto r = parse_json_body(body, Dialect::kOpenAi);
  const double s = seconds_since(t0);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)["objects"].size(), 250u);
  EXPECT_EQ((*r)["objects"][249]["k999999"], 3999);
  EXPECT_LT(s, 4.0 * kSlowdown) << "1e6 keys took " << s << " s";
}

TEST(JsonLimits, TooManyValuesInAllIsRejected) {
  std::string body = "{\"a\":[";
  for (size_t i = 0; i <= kMaxJsonValues; ++i) body += i ? ",0" : "0";
  body += "]}";
  auto r = parse_json_body(body, Dialect::kOpenAi);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than 4194304 JSON values"), std::string::npos) << r.status().message();
}

TEST(JsonLimits, DeepNestingIsRejectedOnEveryRoute) {
  const std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto r = parse_json_body(deep, Dialect::kOpenAi);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nested more than 256 levels"), std::string::npos);
  // count_tokens used to re-parse the body without the limit (and a deep body crashed the server).
  const std::string count = R"({"model":"m","messages":[{"role":"user","content":"hi"}],"x":)" +
                            std::string(100000, '[') + std::string(100000, ']') + "}";
  auto c = parse_anthropic_count_tokens_request(count);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("nested more than 256 levels"), std::string::npos) << c.status().message();
  auto t = parse_tokenize_request("{\"content\":\"x\",\"y\":" + std::string(100000, '[') + std::string(100000, ']') + "}");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nested more than 256 levels"), std::string::npos);
  auto d = parse_detokenize_request(object_with_keys(80000), 100);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("more than 4096 keys"), std::string::npos);
  // Exactly the limit is fine.
  EXPECT_TRUE(parse_json_body("{\"a\":" + std::string(255, '[') + std::string(255, ']') + "}", Dialect::kOpenAi).ok());
}

TEST(JsonLimits, LongStringsAndKeysAreRejected) {
  const std::string big(kMaxJsonStringBytes + 1, 'x');
  auto r = parse_json_body("{\"a\":\"" + big + "\"}", Dialect::kOpenAi);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("longer than 16777216 bytes"), std::string::npos);
  auto k = parse_json_body("{\"" + big + "\":1}", Dialect::kOpenAi);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("longer than 16777216 bytes"), std::string::npos);
}

TEST(JsonLimits, CountTokensBodyParsesWithoutMaxTokens) {
  auto c = parse_anthropic_count_tokens_request(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->messages.size(), 1u);
  auto bad = parse_anthropic_count_tokens_request(R"({"model":"m","messages":"x"})");
  EXPECT_FALSE(bad.ok());
}

TEST(JsonLimits, TokenizeAndDetokenizeBodies) {
  auto t = parse_tokenize_request(R"({"content":"hello"})");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "hello");
  EXPECT_EQ(parse_tokenize_request(R"({"content":1})").status().message(), "Expected {\"content\": \"text\"}.");
  auto d = parse_detokenize_request(R"({"tokens":[1,2,99]})", 100);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, (std::vector<int32_t>{1, 2, 99}));
  EXPECT_FALSE(parse_detokenize_request(R"({"tokens":[100]})", 100).ok());
  EXPECT_FALSE(parse_detokenize_request(R"({"tokens":[-1]})", 100).ok());
  EXPECT_FALSE(parse_detokenize_request(R"({"tokens":[1.5]})", 100).ok());
  EXPECT_FALSE(parse_detokenize_request("[1]", 100).ok());
}

}  // namespace
}  // namespace dsv4::server::api
