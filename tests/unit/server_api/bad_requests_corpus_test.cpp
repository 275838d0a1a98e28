// Validates tests/data/server/bad_requests.jsonl (the bad-request corpus the live server tests
// replay): every entry's body goes through its route's parser and must be rejected with the
// entry's HTTP status, error type, `param` (when given) and message fragment (when given).
// Entries whose status depends on the server (413, 401, …) or that the parser accepts and serve
// refuses ("stage": "prepare", e.g. tool_choice required without tools) are skipped here.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api/anthropic.h"
#include "server/api/completions.h"
#include "server/api/openai_chat.h"
#include "server/api/output.h"
#include "server/api/responses.h"

namespace dsv4::server::api {
namespace {

using nlohmann::json;

std::string base64_decode(const std::string& in) {
  static const std::string kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const size_t v = kAlphabet.find(c);
    if (v == std::string::npos) continue;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

Status parse_for_route(const std::string& route, const std::string& body) {
  if (route == "/v1/chat/completions") return parse_chat_completion_request(body).status();
  if (route == "/v1/completions") return parse_completion_request(body).status();
  if (route == "/v1/messages") return parse_anthropic_messages_request(body).status();
  if (route == "/v1/responses") return parse_responses_request(body).status();
  return internal_error("unknown route " + route);
}

std::vector<json> load_corpus() {
  std::ifstream in(std::string(DSV4_TEST_DATA_DIR) + "/server/bad_requests.jsonl");
  EXPECT_TRUE(in.good()) << "cannot open bad_requests.jsonl";
  std::vector<json> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    rows.push_back(json::parse(line));
  }
  return rows;
}

TEST(BadRequestsCorpus, WellFormedAndLargeEnough) {
  const std::vector<json> rows = load_corpus();
  EXPECT_GE(rows.size(), 110u);
  std::set<std::string> names;
  std::map<std::string, int> per_route;
  for (const json& r : rows) {
    ASSERT_TRUE(r.contains("name") && r["name"].is_string()) << r.dump();
    EXPECT_TRUE(names.insert(r["name"].get<std::string>()).second) << "duplicate name " << r["name"];
    ASSERT_TRUE(r.contains("route") && r["route"].is_string()) << r.dump();
    per_route[r["route"].get<std::string>()]++;
    const int bodies = static_cast<int>(r.contains("body")) + static_cast<int>(r.contains("raw_body")) +
                       static_cast<int>(r.contains("raw_body_b64"));
    EXPECT_EQ(bodies, 1) << r["name"];
    EXPECT_TRUE(r.contains("status") && r["status"].is_number_integer()) << r["name"];
    EXPECT_TRUE(r.contains("error_type") && r["error_type"].is_string()) << r["name"];
  }
  EXPECT_GE(per_route["/v1/chat/completions"], 40);
  EXPECT_GE(per_route["/v1/completions"], 15);
  EXPECT_GE(per_route["/v1/messages"], 30);
  EXPECT_GE(per_route["/v1/responses"], 10);
  EXPECT_EQ(per_route.size(), 4u);
}

TEST(BadRequestsCorpus, EveryEntryIsRejectedAsDescribed) {
  int checked = 0;
  for (const json& r : load_corpus()) {
    const std::string name = r.value("name", "?");
    const int status = r.value("status", 0);
    if (status != 400) continue;  // depends on the server (body limits, auth, …)
    if (r.value("stage", "") == "prepare") continue;  // refused after parsing (serve/prepare.cpp)
    std::string body;
    if (r.contains("body")) body = r["body"].dump();
    else if (r.contains("raw_body")) body = r["raw_body"].get<std::string>();
    else body = base64_decode(r["raw_body_b64"].get<std::string>());
    const std::string route = r["route"].get<std::string>();
    const Status s = parse_for_route(route, body);
    ASSERT_FALSE(s.ok()) << name << ": accepted " << body.substr(0, 200);
    const ApiError e = api_error_from_status(s);
    EXPECT_EQ(e.http_status, status) << name << ": " << s.to_string();
    EXPECT_EQ(e.type, r["error_type"].get<std::string>()) << name;
    if (r.contains("param")) {
      EXPECT_EQ(e.param, r["param"].get<std::string>()) << name << ": " << s.message();
    }
    if (r.contains("message_contains")) {
      EXPECT_NE(s.message().find(r["message_contains"].get<std::string>()), std::string::npos)
          << name << ": " << s.message();
    }
    // Error bodies must serialise (invalid bytes never reach them: the UTF-8 check runs first).
    const std::string out = route == "/v1/messages" ? anthropic_error_json(e) : openai_error_json(e);
    EXPECT_TRUE(json::accept(out)) << name;
    ++checked;
  }
  EXPECT_GE(checked, 110);
}

}  // namespace
}  // namespace dsv4::server::api
