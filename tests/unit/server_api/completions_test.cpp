// Unit tests for server/api/completions: the /v1/completions request (prompt forms, echo,
// integer logprobs, the max_tokens default, unsupported fields) and the shared body checks
// (empty body, invalid UTF-8, syntax errors with offsets, nesting depth, unpaired surrogates).
#include "server/api/completions.h"

#include <gtest/gtest.h>

#include "parse_test_util.h"

#include "server/api/openai_chat.h"

namespace dsv4::server::api {
namespace {

CompletionRequest ok(const std::string& body) { return testing::parse_ok(parse_completion_request, body, body); }

Status err(const std::string& body) { return testing::parse_err(parse_completion_request, body, body); }

TEST(Completions, PromptFormsAndDefaults) {
  auto r = ok(R"({"model":"m","prompt":"Once upon"})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "Once upon");
  EXPECT_FALSE(r.echo);
  EXPECT_EQ(*r.params.max_tokens, 16);  // OpenAI's default for this route
  EXPECT_FALSE(r.params.logprobs);
  EXPECT_EQ(ok(R"({"prompt":["only one"]})").prompt, "only one");
  EXPECT_EQ(*ok(R"({"prompt":"p","max_tokens":null})").params.max_tokens, 16);
  EXPECT_EQ(*ok(R"({"prompt":"p","max_tokens":300})").params.max_tokens, 300);
}

TEST(Completions, FieldsReachTheRequest) {
  auto r = ok(R"({"prompt":"p","echo":true,"suffix":"","best_of":1,"n":1,"temperature":0.2,"stop":["\n"],
                 "seed":7,"stream":true,"stream_options":{"include_usage":true},"logit_bias":{"1":-1}})");
  EXPECT_TRUE(r.echo);
  EXPECT_DOUBLE_EQ(*r.params.temperature, 0.2);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"\n"}));
  EXPECT_EQ(*r.params.seed, 7u);
  EXPECT_TRUE(r.params.stream);
  EXPECT_TRUE(r.params.include_usage);
  EXPECT_EQ(r.params.logit_bias.size(), 1u);
}

TEST(Completions, IntegerLogprobs) {
  auto r = ok(R"({"prompt":"p","logprobs":3})");
  EXPECT_TRUE(r.params.logprobs);
  EXPECT_EQ(r.params.top_logprobs, 3);
  auto z = ok(R"({"prompt":"p","logprobs":0})");
  EXPECT_TRUE(z.params.logprobs);
  EXPECT_EQ(z.params.top_logprobs, 0);
  EXPECT_FALSE(ok(R"({"prompt":"p","logprobs":null})").params.logprobs);
  EXPECT_ERR(R"({"prompt":"p","logprobs":6})", kOutOfRange,
             "Invalid 'logprobs': integer above maximum value. Expected a value <= 5, but got 6 instead.");
  EXPECT_ERR(R"({"prompt":"p","logprobs":-1})", kOutOfRange,
             "Invalid 'logprobs': integer below minimum value. Expected a value >= 0, but got -1 instead.");
  EXPECT_ERR(R"({"prompt":"p","logprobs":true})", kInvalidArgument,
             "Invalid type for 'logprobs': expected an integer, but got a boolean instead.");
  EXPECT_ERR(R"({"prompt":"p","logprobs":2,"echo":true})", kUnsupported,
             "Unsupported parameter: 'echo': echo together with logprobs (prompt token logprobs) is not supported.");
}

TEST(Completions, PromptErrors) {
  EXPECT_ERR(R"({"model":"m"})", kInvalidArgument, "Missing required parameter: 'prompt'.");
  EXPECT_ERR(R"({"prompt":null})", kInvalidArgument, "Missing required parameter: 'prompt'.");
  EXPECT_ERR(R"({"prompt":""})", kInvalidArgument,
             "Invalid 'prompt': empty string. Expected a string with minimum length 1, but got an empty string "
             "instead.");
  EXPECT_ERR(R"({"prompt":[""]})", kInvalidArgument,
             "Invalid 'prompt': empty string. Expected a string with minimum length 1, but got an empty string "
             "instead.");
  EXPECT_ERR(R"({"prompt":[]})", kInvalidArgument,
             "Invalid 'prompt': empty array. Expected an array with minimum length 1, but got an empty array instead.");
  EXPECT_ERR(R"({"prompt":[1,2,3]})", kUnsupported,
             "Unsupported parameter: 'prompt': token-id prompts are not supported; send the prompt as a string.");
  EXPECT_ERR(R"({"prompt":[[1,2]]})", kUnsupported,
             "Unsupported parameter: 'prompt': token-id prompts are not supported; send the prompt as a string.");
  EXPECT_ERR(R"({"prompt":["a","b"]})", kUnsupported,
             "Unsupported parameter: 'prompt': several prompts in one request are not supported (got 2); send one "
             "request per prompt.");
  EXPECT_ERR(R"({"prompt":[{"text":"a"}]})", kInvalidArgument,
             "Invalid type for 'prompt[0]': expected a string, but got an object instead.");
  EXPECT_ERR(R"({"prompt":5})", kInvalidArgument,
             "Invalid type for 'prompt': expected a string or an array of strings, but got an integer instead.");
}

TEST(Completions, OtherErrors) {
  EXPECT_ERR(R"({"prompt":"p","suffix":"end"})", kUnsupported,
             "Unsupported parameter: 'suffix': insertion (a prompt suffix) is not supported by this server.");
  EXPECT_ERR(R"({"prompt":"p","suffix":3})", kInvalidArgument,
             "Invalid type for 'suffix': expected a string, but got an integer instead.");
  EXPECT_ERR(R"({"prompt":"p","best_of":3})", kUnsupported, "Invalid value for 'best_of': best_of > 1 is not supported (got 3).");
  EXPECT_ERR(R"({"prompt":"p","best_of":0})", kOutOfRange,
             "Invalid 'best_of': integer below minimum value. Expected a value >= 1, but got 0 instead.");
  EXPECT_ERR(R"({"prompt":"p","n":4})", kUnsupported,
             "Invalid value for 'n': n > 1 is not supported (got 4); send one request per choice.");
  EXPECT_ERR(R"({"prompt":"p","echo":"yes"})", kInvalidArgument,
             "Invalid type for 'echo': expected a boolean, but got a string instead.");
  EXPECT_ERR(R"({"prompt":"p","model":5})", kInvalidArgument,
             "Invalid type for 'model': expected a string, but got an integer instead.");
  EXPECT_ERR(R"({"prompt":"p","max_tokens":0})", kOutOfRange,
             "Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got 0 instead.");
  EXPECT_ERR(R"({"prompt":"p","temperature":9})", kOutOfRange,
             "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 9 instead.");
  // Chat-only fields are not read here: top_logprobs is an unknown (ignored) key on this route.
  EXPECT_FALSE(ok(R"({"prompt":"p","top_logprobs":3})").params.logprobs);
}

TEST(RequestBody, MalformedBodies) {
  const std::string pre = "We could not parse the JSON body of your request. (";
  EXPECT_ERR("", kInvalidArgument, pre + "The request body is empty; expected a JSON object.)");
  EXPECT_ERR(" \n", kInvalidArgument, pre + "The request body is empty; expected a JSON object.)");
  EXPECT_ERR(R"({"prompt":"p")", kInvalidArgument,
             pre + "The request body is not valid JSON: unexpected end of input at offset 13.)");
  EXPECT_ERR(R"({"prompt":"p"} x)", kInvalidArgument,
             pre + "The request body is not valid JSON: unexpected data after the JSON value at offset 15.)");
  EXPECT_ERR(R"({"prompt":'p'})", kInvalidArgument, pre + "The request body is not valid JSON: syntax error at offset 10.)");
  EXPECT_ERR("{\"prompt\":\"a\nb\"}", kInvalidArgument,
             pre + "The request body is not valid JSON: unescaped control character in a string at offset 12.)");
  EXPECT_ERR(R"({"prompt":"\ud800"})", kInvalidArgument,
             pre + "The request body is not valid JSON: invalid \\u escape (an unpaired UTF-16 surrogate) at offset 17.)");
  EXPECT_ERR("{\"prompt\":\"\xff\"}", kInvalidArgument,
             pre + "The request body is not valid UTF-8: invalid byte 0xff at offset 11.)");
  EXPECT_ERR("{\"prompt\":\"\xc0\xaf\"}", kInvalidArgument,  // overlong '/'
             pre + "The request body is not valid UTF-8: invalid byte 0xc0 at offset 11.)");
  EXPECT_ERR("{\"prompt\":\"\xed\xa0\x80\"}", kInvalidArgument,  // CESU surrogate
             pre + "The request body is not valid UTF-8: invalid byte 0xed at offset 11.)");
  EXPECT_ERR("{\"prompt\":\"\xe2\x82\"}", kInvalidArgument,  // truncated sequence
             pre + "The request body is not valid UTF-8: invalid byte 0xe2 at offset 11.)");
  EXPECT_ERR("[1]", kInvalidArgument, "Invalid type for 'body': expected an object, but got an array instead.");
  EXPECT_ERR("\"text\"", kInvalidArgument, "Invalid type for 'body': expected an object, but got a string instead.");
  EXPECT_ERR("null", kInvalidArgument, "Invalid type for 'body': expected an object, but got null instead.");
  // Valid multi-byte UTF-8 and escaped surrogate pairs are fine.
  EXPECT_EQ(ok("{\"prompt\":\"h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \\ud83d\\ude00\"}").prompt,
            "h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf0\x9f\x98\x80");
}

TEST(RequestBody, NestingLimit) {
  std::string ok_deep = R"({"prompt":"p","x":)" + std::string(255, '[') + std::string(255, ']') + "}";
  ok(ok_deep);  // 256 levels including the body object
  std::string deep = R"({"prompt":"p","x":)" + std::string(256, '[') + std::string(256, ']') + "}";
  EXPECT_ERR(deep, kInvalidArgument,
             "We could not parse the JSON body of your request. (The request body is nested more than 256 levels "
             "deep.)");
  std::string huge(200000, '[');  // never builds (or recursively destroys) a 200k-deep value
  EXPECT_EQ(err(huge).code(), StatusCode::kInvalidArgument);
}

TEST(RequestBody, ChatUsesTheSameChecks) {
  auto r = parse_chat_completion_request("{\"messages\":[{\"role\":\"user\",\"content\":\"\xfe\"}]}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "We could not parse the JSON body of your request. (The request body is not valid UTF-8: invalid byte 0xfe "
            "at offset 39.)");
}

}  // namespace
}  // namespace dsv4::server::api
