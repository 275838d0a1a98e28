// tokenizer/chat_template.cpp — DeepSeek V4 prompt rendering (see chat_template.h for the rules).
//
// The pipeline mirrors the official encoder step by step (merge → sort → drop → render) so each
// rule can be checked against it; the golden test (tests/data/chat, `dsv4 render`) pins the bytes.
// The small JSON reader/printer here exists because the tokenizer room may not use a JSON
// library, and the encoder's output depends on Python's exact json.dumps formatting.
#include "tokenizer/chat_template.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>
#include <utility>

namespace dsv4::tokenizer {
namespace {

// ---------------------------------------------------------------------------------------------
// Python-compatible JSON: parse (json.loads) and print (json.dumps, ensure_ascii=False).

struct JValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = Kind::kNull;
  bool b = false;
  std::string text;  // kString: the decoded string; kNumber: its Python repr already
  std::vector<JValue> items;
  std::vector<std::pair<std::string, JValue>> members;
};

// Python float repr ('r' mode, Py_DTSF_ADD_DOT_0): shortest round-trip digits; exponent form when
// the decimal point position is <= -4 or > 16.
std::string python_float_repr(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  size_t e = s.find('e');
  std::string mant = s.substr(0, e);
  int exp10 = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exp10 + 1;
  int n = static_cast<int>(digits.size());
  std::string out;
  if (decpt <= -4 || decpt > 16) {
    out = digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    int x = decpt - 1;
    out += x < 0 ? "e-" : "e+";
    std::string xs = std::to_string(x < 0 ? -x : x);
    if (xs.size() < 2) xs = "0" + xs;
    out += xs;
  } else if (decpt <= 0) {
    out = "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (decpt >= n) {
    out = digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
  }
  return sign + out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class JsonReader {
 public:
  explicit JsonReader(std::string_view s) : s_(s) {}

  Result<JValue> parse_document() {
    skip_ws();
    JValue v;
    DSV4_RETURN_IF_ERROR(parse_value(v, 0));
    skip_ws();
    if (pos_ != s_.size()) return error("extra data after the JSON value");
    return v;
  }

 private:
  Status error(const std::string& what) const {
    return invalid_argument("invalid JSON at offset " + std::to_string(pos_) + ": " + what);
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool consume(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) == lit) {
      pos_ += lit.size();
      return true;
    }
    return false;
  }

  Status parse_value(JValue& v, int depth) {
    if (depth > 512) return error("nesting too deep");
    if (pos_ >= s_.size()) return error("unexpected end of input");
    char c = s_[pos_];
    if (c == '{') return parse_object(v, depth);
    if (c == '[') return parse_array(v, depth);
    if (c == '"') {
      v.kind = JValue::Kind::kString;
      return parse_string(v.text);
    }
    if (consume("null")) return ok_status();
    if (consume("true")) {
      v.kind = JValue::Kind::kBool;
      v.b = true;
      return ok_status();
    }
    if (consume("false")) {
      v.kind = JValue::Kind::kBool;
      return ok_status();
    }
    v.kind = JValue::Kind::kNumber;
    if (consume("NaN")) {
      v.text = "NaN";
      return ok_status();
    }
    if (consume("Infinity")) {
      v.text = "Infinity";
      return ok_status();
    }
    if (consume("-Infinity")) {
      v.text = "-Infinity";
      return ok_status();
    }
    return parse_number(v.text);
  }

  Status parse_number(std::string& out) {
    size_t start = pos_;
    auto digit = [&] { return pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9'; };
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    if (!digit()) return error("expected a value");
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      while (digit()) ++pos_;
    }
    bool is_float = false;
    if (pos_ + 1 < s_.size() && s_[pos_] == '.' && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9') {
      is_float = true;
      ++pos_;
      while (digit()) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      size_t save = pos_;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digit()) {
        is_float = true;
        while (digit()) ++pos_;
      } else {
        pos_ = save;  // Python's regex leaves a bare 'e' unconsumed (then: extra data)
      }
    }
    std::string lit(s_.substr(start, pos_ - start));
    if (!is_float) {
      out = (lit == "-0") ? "0" : lit;  // Python int: arbitrary precision, prints the digits
      return ok_status();
    }
    out = python_float_repr(std::strtod(lit.c_str(), nullptr));  // overflow → ±inf, like float()
    return ok_status();
  }

  Status parse_hex4(uint32_t& cp) {
    if (pos_ + 4 > s_.size()) return error("truncated \\u escape");
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      char h = s_[pos_++];
      cp <<= 4;
      if (h >= '0' && h <= '9') cp |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') cp |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') cp |= static_cast<uint32_t>(h - 'A' + 10);
      else return error("bad \\u escape");
    }
    return ok_status();
  }

  Status parse_string(std::string& out) {
    ++pos_;  // opening quote
    out.clear();
    while (true) {
      if (pos_ >= s_.size()) return error("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return ok_status();
      }
      if (c < 0x20) return error("control character in string");
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= s_.size()) return error("unterminated string");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          DSV4_RETURN_IF_ERROR(parse_hex4(cp));
          if (cp >= 0xD800 && cp < 0xDC00) {
            uint32_t lo = 0;
            if (!consume("\\u")) return error("lone surrogate in \\u escape");
            DSV4_RETURN_IF_ERROR(parse_hex4(lo));
            if (lo < 0xDC00 || lo >= 0xE000) return error("lone surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return error("lone surrogate in \\u escape");
          }
          append_utf8(out, cp);
          break;
        }
        default: return error("bad escape");
      }
    }
  }

  Status parse_array(JValue& v, int depth) {
    v.kind = JValue::Kind::kArray;
    ++pos_;
    skip_ws();
    if (consume("]")) return ok_status();
    while (true) {
      skip_ws();
      JValue item;
      DSV4_RETURN_IF_ERROR(parse_value(item, depth + 1));
      v.items.push_back(std::move(item));
      skip_ws();
      if (consume(",")) continue;
      if (consume("]")) return ok_status();
      return error("expected ',' or ']'");
    }
  }

  Status parse_object(JValue& v, int depth) {
    v.kind = JValue::Kind::kObject;
    ++pos_;
    skip_ws();
    if (consume("}")) return ok_status();
    while (true) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') return error("expected a string key");
      std::string key;
      DSV4_RETURN_IF_ERROR(parse_string(key));
      skip_ws();
      if (!consume(":")) return error("expected ':'");
      skip_ws();
      JValue item;
      DSV4_RETURN_IF_ERROR(parse_value(item, depth + 1));
      auto it = std::find_if(v.members.begin(), v.members.end(), [&](const auto& m) { return m.first == key; });
      if (it != v.members.end()) {
        it->second = std::move(item);  // Python dict: first position, last value
      } else {
        v.members.emplace_back(std::move(key), std::move(item));
      }
      skip_ws();
      if (consume(",")) continue;
      if (consume("}")) return ok_status();
      return error("expected ',' or '}'");
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

void dump_string(std::string& out, const std::string& s) {
  static const char* kHex = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void dump_value(std::string& out, const JValue& v) {
  switch (v.kind) {
    case JValue::Kind::kNull: out += "null"; break;
    case JValue::Kind::kBool: out += v.b ? "true" : "false"; break;
    case JValue::Kind::kNumber: out += v.text; break;
    case JValue::Kind::kString: dump_string(out, v.text); break;
    case JValue::Kind::kArray:
      out += '[';
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) out += ", ";
        dump_value(out, v.items[i]);
      }
      out += ']';
      break;
    case JValue::Kind::kObject:
      out += '{';
      for (size_t i = 0; i < v.members.size(); ++i) {
        if (i) out += ", ";
        dump_string(out, v.members[i].first);
        out += ": ";
        dump_value(out, v.members[i].second);
      }
      out += '}';
      break;
  }
}

std::string dumps(const JValue& v) {
  std::string out;
  dump_value(out, v);
  return out;
}

// ---------------------------------------------------------------------------------------------
// The encoder pipeline.

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kDsml = "｜DSML｜";
constexpr std::string_view kUserToken = "<｜User｜>";
constexpr std::string_view kAssistantToken = "<｜Assistant｜>";
constexpr std::string_view kLatestReminderToken = "<｜latest_reminder｜>";

constexpr std::string_view kResponseFormatPrefix =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

constexpr std::string_view kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

// The prompt text under construction, with the byte ranges that came from the request. Encoder
// markup (role markers, <think>, DSML tags, the tools template) goes in with markup(); everything
// the client sent (contents, reasoning, tool names, argument keys and values, schemas) with
// request(), so the tokenizer can keep it from ever becoming a special token.
class PromptBuilder {
 public:
  void markup(std::string_view s) { text_ += s; }
  void request(std::string_view s) {
    if (s.empty()) return;
    const size_t b = text_.size();
    text_ += s;
    if (!ranges_.empty() && ranges_.back().end == b) {
      ranges_.back().end = text_.size();
    } else {
      ranges_.push_back(TextRange{b, text_.size()});
    }
  }
  std::string& text() { return text_; }
  std::vector<TextRange>& ranges() { return ranges_; }

 private:
  std::string text_;
  std::vector<TextRange> ranges_;
};

void tools_block(PromptBuilder& out, const std::vector<std::string>& schemas) {
  const std::string d(kDsml);
  std::string s;
  s += "## Tools\n\n";
  s += "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a \"<" +
       d + "tool_calls>\" block like the following:\n\n";
  s += "<" + d + "tool_calls>\n";
  s += "<" + d + "invoke name=\"$TOOL_NAME\">\n";
  s += "<" + d + "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + d + "parameter>\n";
  s += "...\n";
  s += "</" + d + "invoke>\n";
  s += "<" + d + "invoke name=\"$TOOL_NAME2\">\n";
  s += "...\n";
  s += "</" + d + "invoke>\n";
  s += "</" + d + "tool_calls>\n\n";
  s += "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
       "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n";
  s += "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
       "<think>...</think> BEFORE any tool calls or final response.\n\n";
  s += "Otherwise, output directly after </think> with tool calls or final response.\n\n";
  s += "### Available Tool Schemas\n\n";
  out.markup(s);
  for (size_t i = 0; i < schemas.size(); ++i) {
    if (i) out.markup("\n");
    out.request(schemas[i]);
  }
  out.markup("\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n");
}

struct Block {
  bool is_tool_result = false;
  std::string text;  // text block text, or tool result content
  std::string tool_use_id;
};

// One message as the encoder sees it after merge_tool_messages.
struct Msg {
  ChatRole role = ChatRole::kUser;
  std::string content;
  std::string reasoning;
  std::vector<ChatToolCall> tool_calls;
  std::vector<Block> blocks;  // user only (always non-empty after the merge)
  bool has_tools = false;     // system: tools block attached
  bool has_response_format = false;
  size_t source_index = 0;    // index in ChatRequest::messages (error messages)
};

bool is_user_like(ChatRole r) { return r == ChatRole::kUser || r == ChatRole::kDeveloper; }

int find_last_user_index(const std::vector<Msg>& msgs) {
  for (int i = static_cast<int>(msgs.size()) - 1; i >= 0; --i)
    if (is_user_like(msgs[static_cast<size_t>(i)].role)) return i;
  return -1;
}

// encode_arguments_to_dsml: one <｜DSML｜parameter> line per key of the JSON object (the whole text
// as one string parameter "arguments" when it is not JSON). JSON that is not an object makes the
// encoder crash (`.items()` on a list/str/number/None), so it is rejected.
Status encode_arguments(PromptBuilder& out, const ChatToolCall& tc) {
  const std::string d(kDsml);
  auto parsed = JsonReader(tc.arguments_json).parse_document();
  bool first = true;
  auto add = [&](std::string_view key, bool is_str, std::string_view value) {
    if (!first) out.markup("\n");
    first = false;
    out.markup("<" + d + "parameter name=\"");
    out.request(key);
    out.markup(std::string("\" string=\"") + (is_str ? "true" : "false") + "\">");
    out.request(value);
    out.markup("</" + d + "parameter>");
  };
  if (!parsed.ok()) {
    add("arguments", true, tc.arguments_json);  // the encoder's fallback for non-JSON arguments
    return ok_status();
  }
  const JValue& v = parsed.value();
  if (v.kind != JValue::Kind::kObject)
    return invalid_argument("tool call '" + tc.name +
                            "': arguments are JSON but not an object (the official encoder cannot render them)");
  for (const auto& [k, val] : v.members) {
    const bool is_str = val.kind == JValue::Kind::kString;
    add(k, is_str, is_str ? val.text : dumps(val));
  }
  return ok_status();
}

// last_user: find_last_user_index(msgs), computed once by the caller (linear, not quadratic, in
// the number of messages).
Status render_message(PromptBuilder& out, size_t index, const std::vector<Msg>& msgs, int last_user, bool thinking,
                      bool drop_thinking, bool effort_max, const std::vector<std::string>& tool_schemas,
                      const std::string& response_format_text) {
  const Msg& m = msgs[index];
  const int idx = static_cast<int>(index);
  if (index == 0 && thinking && effort_max) out.markup(kReasoningEffortMax);
  switch (m.role) {
    case ChatRole::kSystem:
      out.request(m.content);
      if (m.has_tools) {
        out.markup("\n\n");
        tools_block(out, tool_schemas);
      }
      if (m.has_response_format) {
        out.markup("\n\n");
        out.markup(kResponseFormatPrefix);
        out.request(response_format_text);
      }
      break;
    case ChatRole::kDeveloper:
      // The encoder asserts a non-empty developer content (validate() checks the ones rendered).
      out.markup(kUserToken);
      out.request(m.content);
      break;
    case ChatRole::kUser:
      out.markup(kUserToken);
      for (size_t i = 0; i < m.blocks.size(); ++i) {
        if (i) out.markup("\n\n");
        const Block& b = m.blocks[i];
        if (b.is_tool_result) {
          out.markup("<tool_result>");
          out.request(b.text);
          out.markup("</tool_result>");
        } else {
          out.request(b.text);
        }
      }
      break;
    case ChatRole::kLatestReminder:
      out.markup(kLatestReminderToken);
      out.request(m.content);
      break;
    case ChatRole::kTool: return internal_error("tool message survived the merge");
    case ChatRole::kAssistant: {
      if (thinking && (!drop_thinking || idx > last_user)) {
        out.request(m.reasoning);
        out.markup(kThinkEnd);
      }
      out.request(m.content);
      if (!m.tool_calls.empty()) {
        const std::string d(kDsml);
        out.markup("\n\n<" + d + "tool_calls>\n");
        for (size_t i = 0; i < m.tool_calls.size(); ++i) {
          if (i) out.markup("\n");
          out.markup("<" + d + "invoke name=\"");
          out.request(m.tool_calls[i].name);
          out.markup("\">\n");
          DSV4_RETURN_IF_ERROR(encode_arguments(out, m.tool_calls[i]));
          out.markup("\n</" + d + "invoke>");
        }
        out.markup("\n</" + d + "tool_calls>");
      }
      out.markup(kEos);
      break;
    }
  }
  if (index + 1 < msgs.size() && msgs[index + 1].role != ChatRole::kAssistant &&
      msgs[index + 1].role != ChatRole::kLatestReminder)
    return ok_status();
  if (is_user_like(m.role)) {
    out.markup(kAssistantToken);
    if (thinking && (!drop_thinking || idx >= last_user)) {
      out.markup(kThinkStart);
    } else {
      out.markup(kThinkEnd);
    }
  }
  return ok_status();
}

// Rejections, each one a request the official encoder itself rejects (an assertion or a crash) or
// one that has no prompt at all. Everything else renders, as the encoder renders it (see
// chat_template.h). Rules that depend on what survives _drop_thinking_messages are checked at
// render time (render_chat).
Status validate(const ChatRequest& req) {
  if (req.messages.empty()) return invalid_argument("messages: at least one message is required");
  return ok_status();
}

// The encoder's `assert content` on a developer message it renders.
Status check_rendered_developers(const std::vector<Msg>& msgs) {
  for (const Msg& m : msgs)
    if (m.role == ChatRole::kDeveloper && m.content.empty())
      return invalid_argument("messages[" + std::to_string(m.source_index) +
                              "]: developer message content must not be empty");
  return ok_status();
}

}  // namespace

Result<ChatRole> parse_chat_role(std::string_view name) {
  if (name == "system") return ChatRole::kSystem;
  if (name == "user") return ChatRole::kUser;
  if (name == "developer") return ChatRole::kDeveloper;
  if (name == "assistant") return ChatRole::kAssistant;
  if (name == "tool") return ChatRole::kTool;
  if (name == "latest_reminder") return ChatRole::kLatestReminder;
  return invalid_argument("unknown role '" + std::string(name) +
                          "' (expected system, user, developer, assistant, tool or latest_reminder)");
}

const char* chat_role_name(ChatRole role) {
  switch (role) {
    case ChatRole::kSystem: return "system";
    case ChatRole::kUser: return "user";
    case ChatRole::kDeveloper: return "developer";
    case ChatRole::kAssistant: return "assistant";
    case ChatRole::kTool: return "tool";
    case ChatRole::kLatestReminder: return "latest_reminder";
  }
  return "?";
}

const char* thinking_mode_name(ThinkingMode mode) {
  switch (mode) {
    case ThinkingMode::kNone: return "none";
    case ThinkingMode::kHigh: return "high";
    case ThinkingMode::kMax: return "max";
  }
  return "?";
}

ThinkingMode effective_thinking_mode(ThinkingMode requested, int64_t context_size) {
  if (requested == ThinkingMode::kMax && context_size < kThinkMaxMinContext) return ThinkingMode::kHigh;
  return requested;
}

Result<std::string> python_json_dumps(std::string_view json_text) {
  DSV4_ASSIGN_OR_RETURN(JValue v, JsonReader(json_text).parse_document());
  return dumps(v);
}

Result<RenderedPrompt> render_chat(const ChatRequest& req) {
  DSV4_RETURN_IF_ERROR(validate(req));

  // Tools and response_format, printed once as the encoder's to_json does.
  std::vector<std::string> schemas;
  for (size_t i = 0; i < req.tools_json.size(); ++i) {
    auto s = python_json_dumps(req.tools_json[i]);
    if (!s.ok()) return invalid_argument("tools[" + std::to_string(i) + "]: " + s.status().message());
    schemas.push_back(std::move(s).value());
  }
  const bool has_tools = !schemas.empty();
  std::string rf_text;
  const bool has_rf = !req.response_format_json.empty();
  if (has_rf) {
    auto s = python_json_dumps(req.response_format_json);
    if (!s.ok()) return invalid_argument("response_format: " + s.status().message());
    rf_text = std::move(s).value();
  }

  // Attach tools/response_format to the first system message (insert an empty one if needed).
  std::vector<ChatMessage> input = req.messages;
  size_t inserted = 0;  // 1 when an empty system message was put in front
  if (has_tools || has_rf) {
    auto it = std::find_if(input.begin(), input.end(), [](const ChatMessage& m) { return m.role == ChatRole::kSystem; });
    if (it == input.end()) {
      ChatMessage sys;
      sys.role = ChatRole::kSystem;
      input.insert(input.begin(), std::move(sys));
      inserted = 1;
    }
  }
  bool attached = false;

  // merge_tool_messages: tool results and user text fold into the preceding user turn.
  std::vector<Msg> msgs;
  for (size_t mi = 0; mi < input.size(); ++mi) {
    const ChatMessage& m = input[mi];
    const size_t source_index = mi >= inserted ? mi - inserted : 0;
    if (m.role == ChatRole::kTool || m.role == ChatRole::kUser) {
      Block b;
      b.is_tool_result = m.role == ChatRole::kTool;
      b.text = m.content;
      b.tool_use_id = m.tool_call_id;
      if (!msgs.empty() && msgs.back().role == ChatRole::kUser) {
        msgs.back().blocks.push_back(std::move(b));
      } else {
        Msg u;
        u.role = ChatRole::kUser;
        u.source_index = source_index;
        u.blocks.push_back(std::move(b));
        msgs.push_back(std::move(u));
      }
      continue;
    }
    Msg x;
    x.role = m.role;
    x.content = m.content;
    x.reasoning = m.reasoning_content;
    x.tool_calls = m.tool_calls;
    x.source_index = source_index;
    if (m.role == ChatRole::kSystem && !attached && (has_tools || has_rf)) {
      x.has_tools = has_tools;
      x.has_response_format = has_rf;
      attached = true;
    }
    msgs.push_back(std::move(x));
  }

  // sort_tool_results_by_call_order: within a user turn, results follow the last call order.
  std::map<std::string, size_t> order;
  for (Msg& m : msgs) {
    if (m.role == ChatRole::kAssistant && !m.tool_calls.empty()) {
      order.clear();
      for (size_t i = 0; i < m.tool_calls.size(); ++i)
        if (!m.tool_calls[i].id.empty()) order[m.tool_calls[i].id] = i;
    } else if (m.role == ChatRole::kUser) {
      std::vector<Block> results;
      for (const Block& b : m.blocks)
        if (b.is_tool_result) results.push_back(b);
      if (results.size() > 1 && !order.empty()) {
        auto key = [&](const Block& b) {
          auto it = order.find(b.tool_use_id);
          return it == order.end() ? size_t{0} : it->second;
        };
        std::stable_sort(results.begin(), results.end(), [&](const Block& a, const Block& b) { return key(a) < key(b); });
        size_t k = 0;
        for (Block& b : m.blocks)
          if (b.is_tool_result) b = results[k++];
      }
    }
  }

  const ThinkingMode used = effective_thinking_mode(req.thinking, req.context_size);
  const bool thinking = used != ThinkingMode::kNone;
  const bool drop_thinking = !has_tools;  // tools anywhere force drop_thinking off

  if (thinking && drop_thinking) {
    // _drop_thinking_messages: before the last user turn, assistant reasoning is removed and
    // developer messages are dropped.
    const int last_user = find_last_user_index(msgs);
    std::vector<Msg> kept;
    for (size_t i = 0; i < msgs.size(); ++i) {
      Msg& m = msgs[i];
      if (m.role != ChatRole::kDeveloper && m.role != ChatRole::kAssistant) {
        kept.push_back(std::move(m));
      } else if (static_cast<int>(i) >= last_user) {
        kept.push_back(std::move(m));
      } else if (m.role == ChatRole::kAssistant) {
        m.reasoning.clear();
        kept.push_back(std::move(m));
      }
    }
    msgs = std::move(kept);
  }

  DSV4_RETURN_IF_ERROR(check_rendered_developers(msgs));

  PromptBuilder builder;
  builder.markup(kBos);
  const int last_user = find_last_user_index(msgs);
  for (size_t i = 0; i < msgs.size(); ++i) {
    DSV4_RETURN_IF_ERROR(render_message(builder, i, msgs, last_user, thinking, drop_thinking,
                                        used == ThinkingMode::kMax, schemas, rf_text));
  }
  RenderedPrompt out;
  out.thinking_used = used;
  out.text = std::move(builder.text());
  out.request_text = std::move(builder.ranges());
  return out;
}

bool apply_default_system_prompt(ChatRequest& request, std::string_view text) {
  if (text.empty()) return false;
  for (const ChatMessage& m : request.messages)
    if (m.role == ChatRole::kSystem) return false;
  ChatMessage sys;
  sys.role = ChatRole::kSystem;
  sys.content = std::string(text);
  request.messages.insert(request.messages.begin(), std::move(sys));
  return true;
}

Result<std::string> render_prompt(const ChatRequest& request) {
  DSV4_ASSIGN_OR_RETURN(RenderedPrompt p, render_chat(request));
  return std::move(p.text);
}

}  // namespace dsv4::tokenizer
