// tests/unit/server_api/parse_test_util.h — the accept/reject helpers the request-parser tests
// share: parse_ok(parser, body) expects success and returns the value; parse_err expects failure
// and returns the Status; EXPECT_PARSE_ERR checks its code and exact message.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "base/status.h"

namespace dsv4::server::api::testing {

template <typename Parser>
auto parse_ok(Parser parse, const std::string& body, const std::string& label) {
  auto r = parse(body);
  EXPECT_TRUE(r.ok()) << label << " → " << r.status().to_string();
  using T = std::decay_t<decltype(r.value())>;
  return r.ok() ? r.value() : T{};
}

template <typename Parser>
Status parse_err(Parser parse, const std::string& body, const std::string& label) {
  auto r = parse(body);
  EXPECT_FALSE(r.ok()) << label;
  return r.ok() ? Status(StatusCode::kInternal, "parsed") : r.status();
}

}  // namespace dsv4::server::api::testing

// err(x) must be defined by the test file (it picks the parser and builds the body).
#define EXPECT_ERR(input, status_code, text)                         \
  do {                                                               \
    ::dsv4::Status s_ = err(input);                                  \
    EXPECT_EQ(s_.code(), ::dsv4::StatusCode::status_code) << s_.to_string(); \
    EXPECT_EQ(s_.message(), text);                                   \
  } while (0)
