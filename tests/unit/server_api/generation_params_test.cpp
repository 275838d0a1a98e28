// Unit tests for the generation fields of the OpenAI chat route (server/api/generation_params.cpp
// and the chat-only checks in openai_chat.cpp): every range, type and unsupported-feature error
// with its exact StatusCode and message, and the values that reach GenerationParams.
#include <gtest/gtest.h>

#include "parse_test_util.h"

#include "server/api/openai_chat.h"
#include "server/api/output.h"

namespace dsv4::server::api {
namespace {

std::string body_with(const std::string& fields) {
  return std::string(R"({"messages":[{"role":"user","content":"x"}])") + (fields.empty() ? "" : "," + fields) + "}";
}

ChatCompletionRequest ok(const std::string& fields) {
  return testing::parse_ok(parse_chat_completion_request, body_with(fields), fields);
}

Status err(const std::string& fields) {
  return testing::parse_err(parse_chat_completion_request, body_with(fields), fields);
}

TEST(GenerationParams, DefaultsAreUnset) {
  auto r = ok("");
  const GenerationParams& p = r.params;
  EXPECT_FALSE(p.max_tokens || p.temperature || p.top_p || p.top_k || p.min_p || p.presence_penalty ||
               p.frequency_penalty || p.repetition_penalty || p.seed);
  EXPECT_TRUE(p.stop.empty());
  EXPECT_FALSE(p.logprobs || p.stream || p.include_usage);
  EXPECT_EQ(p.top_logprobs, 0);
  EXPECT_TRUE(p.logit_bias.empty());
}

TEST(GenerationParams, AllFieldsReachParams) {
  auto r = ok(R"("temperature":0.7,"top_p":0.9,"top_k":40,"min_p":0.05,"presence_penalty":-1.5,
      "frequency_penalty":2,"repetition_penalty":1.1,"seed":18446744073709551615,"stop":["a","b"],
      "logprobs":true,"top_logprobs":20,"logit_bias":{"15":-100,"007":2.5},"stream":true,
      "stream_options":{"include_usage":true},"n":1,"max_tokens":100,"user":"u","metadata":{"k":"v"},
      "store":false,"service_tier":"auto","parallel_tool_calls":false,"some_vendor_extra":{"x":[1]})");
  const GenerationParams& p = r.params;
  EXPECT_DOUBLE_EQ(*p.temperature, 0.7);
  EXPECT_DOUBLE_EQ(*p.top_p, 0.9);
  EXPECT_EQ(*p.top_k, 40);
  EXPECT_DOUBLE_EQ(*p.min_p, 0.05);
  EXPECT_DOUBLE_EQ(*p.presence_penalty, -1.5);
  EXPECT_DOUBLE_EQ(*p.frequency_penalty, 2);
  EXPECT_DOUBLE_EQ(*p.repetition_penalty, 1.1);
  EXPECT_EQ(*p.seed, 18446744073709551615ull);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(p.logprobs);
  EXPECT_EQ(p.top_logprobs, 20);
  ASSERT_EQ(p.logit_bias.size(), 2u);
  EXPECT_EQ(p.logit_bias[0], (std::pair<int32_t, double>{15, -100}));
  EXPECT_EQ(p.logit_bias[1], (std::pair<int32_t, double>{7, 2.5}));
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_EQ(*p.max_tokens, 100);
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(*r.max_tokens, 100);
}

TEST(GenerationParams, StreamAndMaxTokensMirrorTheRequest) {
  auto r = ok(R"("max_tokens":5,"max_completion_tokens":7)");
  EXPECT_EQ(*r.params.max_tokens, 7);  // the newer name wins
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_FALSE(r.stream);
  auto s = ok(R"("stream":true,"stream_options":null,"max_tokens":16.0)");
  EXPECT_TRUE(s.stream && s.params.stream);
  EXPECT_FALSE(s.params.include_usage);
  EXPECT_EQ(*s.max_tokens, 16);  // integral floats are integers
  EXPECT_EQ(ok(R"("stop":"END")").params.stop, (std::vector<std::string>{"END"}));
  EXPECT_TRUE(ok(R"("stop":null,"temperature":null,"seed":null,"n":null)").params.stop.empty());
  EXPECT_DOUBLE_EQ(*ok(R"("temperature":0,"top_p":1,"min_p":0)").params.temperature, 0);
}

TEST(GenerationParams, RangeErrors) {
  EXPECT_ERR(R"("temperature":2.5)", kOutOfRange,
             "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 2.5 instead.");
  EXPECT_ERR(R"("temperature":-0.1)", kOutOfRange,
             "Invalid 'temperature': decimal below minimum value. Expected a value >= 0, but got -0.1 instead.");
  EXPECT_ERR(R"("top_p":0)", kOutOfRange,
             "Invalid 'top_p': decimal below minimum value. Expected a value > 0, but got 0 instead.");
  EXPECT_ERR(R"("top_p":1.01)", kOutOfRange,
             "Invalid 'top_p': decimal above maximum value. Expected a value <= 1, but got 1.01 instead.");
  EXPECT_ERR(R"("min_p":1)", kOutOfRange,
             "Invalid 'min_p': decimal above maximum value. Expected a value < 1, but got 1 instead.");
  EXPECT_ERR(R"("top_k":-1)", kOutOfRange,
             "Invalid 'top_k': integer below minimum value. Expected a value >= 0, but got -1 instead.");
  EXPECT_ERR(R"("presence_penalty":-3)", kOutOfRange,
             "Invalid 'presence_penalty': decimal below minimum value. Expected a value >= -2, but got -3 instead.");
  EXPECT_ERR(R"("frequency_penalty":2.0001)", kOutOfRange,
             "Invalid 'frequency_penalty': decimal above maximum value. Expected a value <= 2, but got 2.0001 instead.");
  EXPECT_ERR(R"("repetition_penalty":0)", kOutOfRange,
             "Invalid 'repetition_penalty': decimal below minimum value. Expected a value > 0, but got 0 instead.");
  EXPECT_ERR(R"("repetition_penalty":11)", kOutOfRange,
             "Invalid 'repetition_penalty': decimal above maximum value. Expected a value <= 10, but got 11 instead.");
  EXPECT_ERR(R"("seed":-1)", kOutOfRange,
             "Invalid 'seed': integer below minimum value. Expected a value >= 0, but got -1 instead.");
  EXPECT_ERR(R"("max_tokens":0)", kOutOfRange,
             "Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got 0 instead.");
  EXPECT_ERR(R"("max_completion_tokens":-5)", kOutOfRange,
             "Invalid 'max_completion_tokens': integer below minimum value. Expected a value >= 1, but got -5 instead.");
  EXPECT_ERR(R"("max_tokens":2147483648)", kOutOfRange,
             "Invalid 'max_tokens': integer above maximum value. Expected a value <= 2147483647, but got 2147483648 "
             "instead.");
  EXPECT_ERR(R"("max_tokens":1e30)", kOutOfRange,
             "Invalid 'max_tokens': integer above maximum value. Expected a value <= 2147483647, but got 1e+30 instead.");
  EXPECT_ERR(R"("max_tokens":99999999999999999999999)", kOutOfRange,
             "Invalid 'max_tokens': integer above maximum value. Expected a value <= 2147483647, but got 1e+23 instead.");
  EXPECT_ERR(R"("top_logprobs":21,"logprobs":true)", kOutOfRange,
             "Invalid 'top_logprobs': integer above maximum value. Expected a value <= 20, but got 21 instead.");
  EXPECT_ERR(R"("n":0)", kOutOfRange,
             "Invalid 'n': integer below minimum value. Expected a value >= 1, but got 0 instead.");
}

TEST(GenerationParams, TypeErrors) {
  EXPECT_ERR(R"("temperature":"hot")", kInvalidArgument,
             "Invalid type for 'temperature': expected a number, but got a string instead.");
  EXPECT_ERR(R"("top_k":1.5)", kInvalidArgument,
             "Invalid type for 'top_k': expected an integer, but got a number instead.");
  EXPECT_ERR(R"("seed":"42")", kInvalidArgument, "Invalid type for 'seed': expected an integer, but got a string instead.");
  EXPECT_ERR(R"("seed":1.5)", kInvalidArgument, "Invalid type for 'seed': expected an integer, but got a number instead.");
  EXPECT_ERR(R"("max_tokens":true)", kInvalidArgument,
             "Invalid type for 'max_tokens': expected an integer, but got a boolean instead.");
  EXPECT_ERR(R"("stream":"true")", kInvalidArgument, "Invalid type for 'stream': expected a boolean, but got a string instead.");
  EXPECT_ERR(R"("logprobs":1)", kInvalidArgument, "Invalid type for 'logprobs': expected a boolean, but got an integer instead.");
  EXPECT_ERR(R"("stop":5)", kInvalidArgument,
             "Invalid type for 'stop': expected a string or an array of strings, but got an integer instead.");
  EXPECT_ERR(R"("stop":["a",3])", kInvalidArgument, "Invalid type for 'stop[1]': expected a string, but got an integer instead.");
  EXPECT_ERR(R"("logit_bias":[1])", kInvalidArgument,
             "Invalid type for 'logit_bias': expected an object, but got an array instead.");
  EXPECT_ERR(R"("logit_bias":{"5":"x"})", kInvalidArgument,
             "Invalid type for 'logit_bias.5': expected a number, but got a string instead.");
  EXPECT_ERR(R"("stream":true,"stream_options":true)", kInvalidArgument,
             "Invalid type for 'stream_options': expected an object, but got a boolean instead.");
  EXPECT_ERR(R"("stream":true,"stream_options":{"include_usage":"yes"})", kInvalidArgument,
             "Invalid type for 'stream_options.include_usage': expected a boolean, but got a string instead.");
  EXPECT_ERR(R"("n":"1")", kInvalidArgument, "Invalid type for 'n': expected an integer, but got a string instead.");
  EXPECT_ERR(R"("user":42)", kInvalidArgument, "Invalid type for 'user': expected a string, but got an integer instead.");
  EXPECT_ERR(R"("metadata":"m")", kInvalidArgument, "Invalid type for 'metadata': expected an object, but got a string instead.");
  EXPECT_ERR(R"("store":"no")", kInvalidArgument, "Invalid type for 'store': expected a boolean, but got a string instead.");
  EXPECT_ERR(R"("service_tier":1)", kInvalidArgument,
             "Invalid type for 'service_tier': expected a string, but got an integer instead.");
  EXPECT_ERR(R"("parallel_tool_calls":"yes")", kInvalidArgument,
             "Invalid type for 'parallel_tool_calls': expected a boolean, but got a string instead.");
  EXPECT_ERR(R"("modalities":"text")", kInvalidArgument,
             "Invalid type for 'modalities': expected an array, but got a string instead.");
}

TEST(GenerationParams, StopRules) {
  EXPECT_ERR(R"("stop":"")", kInvalidArgument,
             "Invalid 'stop': empty string. Expected a string with minimum length 1, but got an empty string instead.");
  EXPECT_ERR(R"("stop":["a",""])", kInvalidArgument,
             "Invalid 'stop[1]': empty string. Expected a string with minimum length 1, but got an empty string "
             "instead.");
  std::string seventeen = R"("stop":[)";
  for (int i = 0; i < 17; ++i) seventeen += std::string(i ? "," : "") + "\"s" + std::to_string(i) + "\"";
  EXPECT_ERR(seventeen + "]", kInvalidArgument,
             "Invalid 'stop': array too long. Expected an array with maximum length 16, but got an array with length 17 "
             "instead.");
  EXPECT_TRUE(ok(R"("stop":[])").params.stop.empty());
}

TEST(GenerationParams, LogitBiasRules) {
  EXPECT_ERR(R"("logit_bias":{"abc":1})", kInvalidArgument,
             "Invalid key in 'logit_bias': 'abc'. Keys must be token ids written as decimal integers (0 to 2147483647).");
  EXPECT_ERR(R"("logit_bias":{"-5":1})", kInvalidArgument,
             "Invalid key in 'logit_bias': '-5'. Keys must be token ids written as decimal integers (0 to 2147483647).");
  EXPECT_ERR(R"("logit_bias":{"2147483648":1})", kInvalidArgument,
             "Invalid key in 'logit_bias': '2147483648'. Keys must be token ids written as decimal integers (0 to "
             "2147483647).");
  EXPECT_ERR(R"("logit_bias":{"":1})", kInvalidArgument,
             "Invalid key in 'logit_bias': ''. Keys must be token ids written as decimal integers (0 to 2147483647).");
  EXPECT_ERR(R"("logit_bias":{"12":101})", kOutOfRange,
             "Invalid 'logit_bias.12': decimal above maximum value. Expected a value <= 100, but got 101 instead.");
  EXPECT_ERR(R"("logit_bias":{"12":-100.5})", kOutOfRange,
             "Invalid 'logit_bias.12': decimal below minimum value. Expected a value >= -100, but got -100.5 instead.");
  std::string many = R"("logit_bias":{)";
  for (int i = 0; i < 301; ++i) many += std::string(i ? "," : "") + "\"" + std::to_string(i) + "\":1";
  EXPECT_ERR(many + "}", kInvalidArgument,
             "Invalid 'logit_bias': too many entries. Expected at most 300 token ids, but got 301 instead.");
  std::string max = R"("logit_bias":{)";
  for (int i = 0; i < 300; ++i) max += std::string(i ? "," : "") + "\"" + std::to_string(i) + "\":1";
  EXPECT_EQ(ok(max + "}").params.logit_bias.size(), 300u);
}

TEST(GenerationParams, DependentFields) {
  EXPECT_ERR(R"("stream_options":{"include_usage":true})", kInvalidArgument,
             "Invalid value for 'stream_options': the 'stream_options' parameter is only allowed when 'stream' is "
             "enabled.");
  EXPECT_ERR(R"("stream":false,"stream_options":{})", kInvalidArgument,
             "Invalid value for 'stream_options': the 'stream_options' parameter is only allowed when 'stream' is "
             "enabled.");
  EXPECT_ERR(R"("top_logprobs":3)", kInvalidArgument,
             "Invalid value for 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used.");
  EXPECT_ERR(R"("top_logprobs":0,"logprobs":false)", kInvalidArgument,
             "Invalid value for 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used.");
  EXPECT_EQ(ok(R"("logprobs":true)").params.top_logprobs, 0);
}

TEST(GenerationParams, UnsupportedFeatures) {
  EXPECT_ERR(R"("n":2)", kUnsupported, "Invalid value for 'n': n > 1 is not supported (got 2); send one request per choice.");
  EXPECT_ERR(R"("audio":{"voice":"alloy","format":"wav"})", kUnsupported,
             "Unsupported parameter: 'audio': audio output is not supported by this server.");
  EXPECT_ERR(R"("modalities":["text","audio"])", kUnsupported,
             "Unsupported parameter: 'modalities[1]': audio output is not supported by this server.");
  EXPECT_ERR(R"("modalities":["video"])", kInvalidArgument,
             "Invalid value for 'modalities[0]': 'video'. Supported values are: 'text'.");
  EXPECT_ERR(R"("prediction":{"type":"content","content":"x"})", kUnsupported,
             "Unsupported parameter: 'prediction': predicted outputs are not supported by this server.");
  EXPECT_ERR(R"("web_search_options":{})", kUnsupported,
             "Unsupported parameter: 'web_search_options': web search is not supported by this server.");
  EXPECT_ERR(R"("functions":[{"name":"f"}])", kUnsupported,
             "Unsupported parameter: 'functions': the legacy 'functions' parameter is not supported; use 'tools' "
             "instead.");
  EXPECT_ERR(R"("function_call":"auto")", kUnsupported,
             "Unsupported parameter: 'function_call': the legacy 'function_call' parameter is not supported; use "
             "'tool_choice' instead.");
  // Accepted: text-only modalities, an empty legacy functions list, nulls.
  ok(R"("modalities":["text"],"functions":[],"audio":null,"prediction":null)");
}

TEST(GenerationParams, TooManyTools) {
  std::string tools = R"("tools":[)";
  for (int i = 0; i < 129; ++i)
    tools += std::string(i ? "," : "") + R"({"type":"function","function":{"name":"f)" + std::to_string(i) + "\"}}";
  EXPECT_ERR(tools + "]", kInvalidArgument,
             "Invalid 'tools': array too long. Expected an array with maximum length 128, but got an array with length "
             "129 instead.");
}

TEST(GenerationParams, ParamRecoveredForOpenAiErrors) {
  EXPECT_EQ(api_error_from_status(err(R"("temperature":3)")).param, "temperature");
  EXPECT_EQ(api_error_from_status(err(R"("logit_bias":{"x":1})")).param, "logit_bias");
  EXPECT_EQ(api_error_from_status(err(R"("top_logprobs":3)")).param, "top_logprobs");
  EXPECT_EQ(api_error_from_status(err(R"("stop":["a",""])")).param, "stop[1]");
  EXPECT_EQ(api_error_from_status(err(R"("n":3)")).param, "n");
}

}  // namespace
}  // namespace dsv4::server::api
