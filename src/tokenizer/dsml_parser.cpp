// tokenizer/dsml_parser.cpp — see dsml_parser.h.
#include "tokenizer/dsml_parser.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace dsv4::tokenizer {
namespace {

constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kFullBar = "｜";  // U+FF5C
constexpr size_t kMaxTagLen = 1024;          // a `<…DSML…` without `>` this far is text
constexpr int kMaxJsonDepth = 512;

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

enum class Match { kNo, kPartial, kYes };

struct Tag {
  bool closing = false;
  std::string name;   // tool_calls, function_calls, invoke, parameter
  std::string attrs;  // raw text between the name and '>'
  size_t len = 0;
};

constexpr std::string_view kTagNames[] = {"tool_calls", "function_calls", "invoke", "parameter"};

// s starts at '<'. kPartial: s ends before it can be decided.
Match match_tag(std::string_view s, Tag* t) {
  size_t i = 1;
  auto at_end = [&] { return i >= s.size(); };
  if (at_end()) return Match::kPartial;
  if (s[i] == '/') {
    t->closing = true;
    ++i;
  }
  // delimiters: one or more of ｜ or |, spaces allowed around
  auto delims = [&](bool& partial) -> int {
    int n = 0;
    partial = false;
    for (;;) {
      while (!at_end() && s[i] == ' ') ++i;
      if (at_end()) {
        partial = true;
        return n;
      }
      if (s[i] == '|') {
        ++i;
        ++n;
        continue;
      }
      std::string_view rest = s.substr(i);
      if (rest.size() < kFullBar.size() && kFullBar.substr(0, rest.size()) == rest) {
        partial = true;
        return n;
      }
      if (rest.substr(0, kFullBar.size()) == kFullBar) {
        i += kFullBar.size();
        ++n;
        continue;
      }
      return n;
    }
  };
  bool partial = false;
  int n = delims(partial);
  if (partial) return Match::kPartial;
  if (n == 0) return Match::kNo;
  constexpr std::string_view kWord = "DSML";
  std::string_view rest = s.substr(i);
  if (rest.size() < kWord.size()) return kWord.substr(0, rest.size()) == rest ? Match::kPartial : Match::kNo;
  if (rest.substr(0, kWord.size()) != kWord) return Match::kNo;
  i += kWord.size();
  n = delims(partial);
  if (partial) return Match::kPartial;
  if (n == 0) return Match::kNo;
  size_t name_start = i;
  while (!at_end() && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || s[i] == '_')) ++i;
  std::string_view name = s.substr(name_start, i - name_start);
  if (at_end()) {
    for (std::string_view k : kTagNames)
      if (k.substr(0, std::min(k.size(), name.size())) == name) return Match::kPartial;
    return Match::kNo;
  }
  bool known = false;
  for (std::string_view k : kTagNames) known = known || k == name;
  if (!known) return Match::kNo;
  if (s[i] != '>' && !is_ws(s[i]) && s[i] != '/') return Match::kNo;
  size_t attr_start = i;
  while (!at_end() && s[i] != '>' && s[i] != '<') {
    if (i > kMaxTagLen) return Match::kNo;
    ++i;
  }
  if (at_end()) return i > kMaxTagLen ? Match::kNo : Match::kPartial;
  if (s[i] == '<') return Match::kNo;
  t->name = std::string(name);
  t->attrs = std::string(s.substr(attr_start, i - attr_start));
  t->len = i + 1;
  return Match::kYes;
}

// Value of attribute `key` in `attrs` (quotes: " ' “ ” ＂ or none). Returns false when absent.
bool attr_value(std::string_view attrs, std::string_view key, std::string* value) {
  static const std::string_view kQuotes[] = {"\"", "'", "“", "”", "＂", "„"};
  size_t from = 0;
  while (from < attrs.size()) {
    size_t k = attrs.find(key, from);
    if (k == std::string_view::npos) return false;
    from = k + 1;
    if (k > 0 && !is_ws(attrs[k - 1]) && attrs[k - 1] != '/') continue;
    size_t i = k + key.size();
    while (i < attrs.size() && is_ws(attrs[i])) ++i;
    if (i >= attrs.size() || attrs[i] != '=') continue;
    ++i;
    while (i < attrs.size() && is_ws(attrs[i])) ++i;
    size_t qlen = 0;
    for (std::string_view q : kQuotes)
      if (attrs.substr(i, q.size()) == q) qlen = q.size();
    i += qlen;
    size_t end = i;
    while (end < attrs.size()) {
      bool close = false;
      if (qlen) {
        for (std::string_view q : kQuotes) close = close || attrs.substr(end, q.size()) == q;
      } else {
        close = is_ws(attrs[end]) || attrs[end] == '/';
      }
      if (close) break;
      ++end;
    }
    *value = std::string(attrs.substr(i, end - i));
    return true;
  }
  return false;
}

bool is_block_tag(const Tag& t) { return t.name == "tool_calls" || t.name == "function_calls"; }

// Length of the longest suffix of s that is a proper prefix of w.
size_t partial_suffix(std::string_view s, std::string_view w) {
  for (size_t n = std::min(s.size(), w.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == w.substr(0, n)) return n;
  return 0;
}

class JsonCheck {
 public:
  explicit JsonCheck(std::string_view s) : s_(s) {}
  bool document() {
    ws();
    if (!value(0)) return false;
    ws();
    return i_ == s_.size();
  }

 private:
  void ws() {
    while (i_ < s_.size() && is_ws(s_[i_])) ++i_;
  }
  bool lit(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  bool value(int depth) {
    if (depth > kMaxJsonDepth || i_ >= s_.size()) return false;
    char c = s_[i_];
    if (c == '{') {
      ++i_;
      ws();
      if (i_ < s_.size() && s_[i_] == '}') return ++i_, true;
      for (;;) {
        ws();
        if (!string()) return false;
        ws();
        if (!lit(":")) return false;
        ws();
        if (!value(depth + 1)) return false;
        ws();
        if (lit("}")) return true;
        if (!lit(",")) return false;
      }
    }
    if (c == '[') {
      ++i_;
      ws();
      if (i_ < s_.size() && s_[i_] == ']') return ++i_, true;
      for (;;) {
        ws();
        if (!value(depth + 1)) return false;
        ws();
        if (lit("]")) return true;
        if (!lit(",")) return false;
      }
    }
    if (c == '"') return string();
    if (c == 't') return lit("true");
    if (c == 'f') return lit("false");
    if (c == 'n') return lit("null");
    return number();
  }
  bool digits() {
    size_t st = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > st;
  }
  bool number() {
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (i_ >= s_.size()) return false;
    if (s_[i_] == '0') {
      ++i_;
    } else if (!digits()) {
      return false;
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!digits()) return false;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digits()) return false;
    }
    return true;
  }
  bool string() {
    if (!lit("\"")) return false;
    while (i_ < s_.size()) {
      auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c == '\\') {
        if (i_ >= s_.size()) return false;
        char e = s_[i_++];
        if (e == 'u') {
          for (int k = 0; k < 4; ++k, ++i_) {
            if (i_ >= s_.size()) return false;
            char h = s_[i_];
            if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F'))) return false;
          }
        } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
          return false;
        }
      }
    }
    return false;
  }
  std::string_view s_;
  size_t i_ = 0;
};

std::string json_escape_body(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
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
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += ch;
        }
    }
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

bool is_valid_json(std::string_view text) { return JsonCheck(text).document(); }

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  out.append(json_escape_body(s));
  out.push_back('"');
  return out;
}

DsmlParser::DsmlParser(bool thinking) : state_(thinking ? State::kReasoning : State::kContent) {}

void DsmlParser::emit_text(DsmlEvent::Kind kind, std::string_view text, std::vector<DsmlEvent>& out) {
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == kind &&
      (kind == DsmlEvent::Kind::kContent || kind == DsmlEvent::Kind::kReasoning)) {
    out.back().text += text;
    return;
  }
  DsmlEvent e;
  e.kind = kind;
  e.text = std::string(text);
  out.push_back(std::move(e));
}

void DsmlParser::emit_args(std::string_view text, std::vector<DsmlEvent>& out) {
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == DsmlEvent::Kind::kToolCallArguments && out.back().index == n_calls_ - 1) {
    out.back().text += text;
    return;
  }
  DsmlEvent e;
  e.kind = DsmlEvent::Kind::kToolCallArguments;
  e.index = n_calls_ - 1;
  e.text = std::string(text);
  out.push_back(std::move(e));
}

void DsmlParser::fail(std::string message) {
  if (state_ == State::kFailed) return;
  state_ = State::kFailed;
  error_ = std::move(message);
}

void DsmlParser::begin_call(const std::string& name, std::vector<DsmlEvent>& out) {
  DsmlEvent e;
  e.kind = DsmlEvent::Kind::kToolCallBegin;
  e.index = n_calls_;
  e.id = "call_" + std::to_string(n_calls_);
  e.name = name;
  out.push_back(std::move(e));
  ++n_calls_;
  n_params_ = 0;
  keys_.clear();
  call_name_ = name;
  state_ = State::kInvoke;
}

void DsmlParser::end_call(std::vector<DsmlEvent>& out) {
  emit_args(n_params_ == 0 ? "{}" : "}", out);
  DsmlEvent e;
  e.kind = DsmlEvent::Kind::kToolCallEnd;
  e.index = n_calls_ - 1;
  out.push_back(std::move(e));
  state_ = State::kBlock;
}

void DsmlParser::end_param(std::vector<DsmlEvent>& out) {
  if (!param_skip_) {
    if (param_string_) {
      emit_args("\"", out);
    } else {
      std::string_view v = trim(param_value_);
      std::string prefix = (n_params_ == 0 ? "{" : ", ") + json_quote(param_key_) + ": ";
      if (is_valid_json(v)) {
        emit_args(prefix + std::string(v), out);
      } else {
        warnings_.push_back("call " + std::to_string(n_calls_ - 1) + " parameter '" + param_key_ +
                            "': string=\"false\" value is not JSON; passed as a string");
        emit_args(prefix + json_quote(param_value_), out);
      }
    }
    ++n_params_;
  }
  param_value_.clear();
  state_ = State::kInvoke;
}

bool DsmlParser::step_reasoning(std::vector<DsmlEvent>& out, bool at_end) {
  std::string_view rest = std::string_view(buf_).substr(pos_);
  size_t k = rest.find(kThinkEnd);
  if (k != std::string_view::npos) {
    emit_text(DsmlEvent::Kind::kReasoning, rest.substr(0, k), out);
    pos_ += k + kThinkEnd.size();
    state_ = State::kContent;
    return true;
  }
  size_t hold = at_end ? 0 : partial_suffix(rest, kThinkEnd);
  emit_text(DsmlEvent::Kind::kReasoning, rest.substr(0, rest.size() - hold), out);
  pos_ += rest.size() - hold;
  return false;
}

bool DsmlParser::step_content(std::vector<DsmlEvent>& out, bool at_end) {
  std::string_view rest = std::string_view(buf_).substr(pos_);
  size_t scan = 0;
  for (;;) {
    size_t lt = rest.find('<', scan);
    if (lt == std::string_view::npos) {
      size_t keep = rest.size();
      if (!at_end)
        while (keep > 0 && is_ws(rest[keep - 1])) --keep;  // may be the "\n\n" before a block
      emit_text(DsmlEvent::Kind::kContent, rest.substr(0, keep), out);
      pos_ += keep;
      return false;
    }
    size_t ws_start = lt;
    while (ws_start > 0 && is_ws(rest[ws_start - 1])) --ws_start;
    Tag t;
    Match m = match_tag(rest.substr(lt), &t);
    if (m == Match::kNo) {
      scan = lt + 1;
      continue;
    }
    if (m == Match::kPartial) {
      if (at_end) {
        if (rest.substr(lt).find("DSML") != std::string_view::npos) {
          emit_text(DsmlEvent::Kind::kContent, rest.substr(0, ws_start), out);
          pos_ += rest.size();
          fail("generation ended inside a DSML tag; no partial tool call is reported");
          return false;
        }
        scan = lt + 1;
        continue;
      }
      emit_text(DsmlEvent::Kind::kContent, rest.substr(0, ws_start), out);
      pos_ += ws_start;
      return false;
    }
    if (!t.closing && (is_block_tag(t) || t.name == "invoke")) {
      emit_text(DsmlEvent::Kind::kContent, rest.substr(0, ws_start), out);
      block_closed_ = false;
      state_ = State::kBlock;
      if (is_block_tag(t)) {
        wrapper_ = true;
        if (t.name == "function_calls") warnings_.push_back("V3.2 block name function_calls accepted");
        pos_ += lt + t.len;
      } else {
        wrapper_ = false;
        warnings_.push_back("invoke without a tool_calls wrapper accepted");
        pos_ += lt;  // step_block reads the invoke
      }
      return true;
    }
    // A stray DSML tag in content (a closer, or a parameter outside any invoke): swallowed.
    warnings_.push_back("stray DSML tag <" + std::string(t.closing ? "/" : "") + t.name + "> dropped from content");
    emit_text(DsmlEvent::Kind::kContent, rest.substr(0, lt), out);
    pos_ += lt + t.len;
    return true;
  }
}

bool DsmlParser::step_block(std::vector<DsmlEvent>& out, bool at_end) {
  std::string_view rest = std::string_view(buf_).substr(pos_);
  size_t i = 0;
  while (i < rest.size() && is_ws(rest[i])) ++i;
  if (i == rest.size()) {
    pos_ += i;
    return false;
  }
  if (rest[i] != '<') {
    if (!wrapper_) {  // text after an unwrapped invoke: the calls are over, back to content
      pos_ += i;
      state_ = State::kContent;
      block_closed_ = true;
      return true;
    }
    size_t lt = rest.find('<', i);
    pos_ += lt == std::string_view::npos ? rest.size() : lt;  // junk between invokes: dropped
    return lt != std::string_view::npos;
  }
  Tag t;
  Match m = match_tag(rest.substr(i), &t);
  if (m == Match::kPartial) {
    pos_ += i;
    if (at_end) fail("generation ended inside a DSML tag; no partial tool call is reported");
    return false;
  }
  if (m == Match::kNo) {
    if (!wrapper_) {
      pos_ += i;
      state_ = State::kContent;
      block_closed_ = true;
      return true;
    }
    pos_ += i + 1;
    return true;
  }
  pos_ += i + t.len;
  if (t.name == "invoke" && !t.closing) {
    std::string name;
    if (!attr_value(t.attrs, "name", &name) || name.empty()) {
      fail("DSML invoke without a name");
      return false;
    }
    begin_call(name, out);
    return true;
  }
  if (is_block_tag(t) && t.closing) {
    state_ = State::kContent;
    block_closed_ = true;
    return true;
  }
  if (is_block_tag(t) && !t.closing) {
    if (wrapper_) warnings_.push_back("doubled tool_calls opener ignored");
    wrapper_ = true;
    return true;
  }
  warnings_.push_back("stray DSML tag <" + std::string(t.closing ? "/" : "") + t.name + "> between invokes dropped");
  return true;
}

bool DsmlParser::step_invoke(std::vector<DsmlEvent>& out, bool at_end) {
  std::string_view rest = std::string_view(buf_).substr(pos_);
  size_t lt = rest.find('<');
  if (lt == std::string_view::npos) {  // text between parameters: dropped
    pos_ += rest.size();
    return false;
  }
  Tag t;
  Match m = match_tag(rest.substr(lt), &t);
  if (m == Match::kPartial) {
    pos_ += lt;
    if (at_end) fail("generation ended inside tool call '" + call_name_ + "'; no partial tool call is reported");
    return false;
  }
  if (m == Match::kNo) {
    pos_ += lt + 1;
    return true;
  }
  if (t.name == "parameter" && !t.closing) {
    pos_ += lt + t.len;
    std::string key, str;
    if (!attr_value(t.attrs, "name", &key)) {
      warnings_.push_back("parameter without a name: key \"\"");
      key.clear();
    }
    param_string_ = attr_value(t.attrs, "string", &str) && str == "true";
    param_key_ = key;
    param_skip_ = std::find(keys_.begin(), keys_.end(), key) != keys_.end();
    if (param_skip_) {
      warnings_.push_back("call " + std::to_string(n_calls_ - 1) + ": duplicate parameter '" + key +
                          "' dropped (first value kept)");
    } else {
      keys_.push_back(key);
      if (param_string_) emit_args((n_params_ == 0 ? "{" : ", ") + json_quote(key) + ": \"", out);
    }
    param_value_.clear();
    state_ = State::kParam;
    return true;
  }
  if (t.name == "invoke" && t.closing) {
    pos_ += lt + t.len;
    end_call(out);
    return true;
  }
  if (t.name == "invoke" || is_block_tag(t)) {
    // Missing </invoke>: the next invoke or the block's end closes this call.
    warnings_.push_back("missing </invoke> implied for call " + std::to_string(n_calls_ - 1));
    pos_ += lt;
    end_call(out);
    return true;
  }
  pos_ += lt + t.len;  // stray </parameter>
  return true;
}

bool DsmlParser::step_param(std::vector<DsmlEvent>& out, bool at_end) {
  std::string_view rest = std::string_view(buf_).substr(pos_);
  size_t scan = 0;
  auto take = [&](size_t n) {
    std::string_view v = rest.substr(0, n);
    if (!param_skip_) {
      if (param_string_) {
        emit_args(json_escape_body(v), out);
      } else {
        param_value_ += v;
      }
    }
    pos_ += n;
  };
  for (;;) {
    size_t lt = rest.find('<', scan);
    if (lt == std::string_view::npos) {
      take(rest.size());
      return false;
    }
    Tag t;
    Match m = match_tag(rest.substr(lt), &t);
    if (m == Match::kNo) {
      scan = lt + 1;
      continue;
    }
    if (m == Match::kPartial) {
      take(lt);
      if (at_end) fail("generation ended inside tool call '" + call_name_ + "'; no partial tool call is reported");
      return false;
    }
    take(lt);
    if (t.name == "parameter" && t.closing) {
      pos_ += t.len;
    } else {
      warnings_.push_back("missing </parameter> implied for '" + param_key_ + "'");
    }
    end_param(out);
    return true;
  }
}

void DsmlParser::process(std::vector<DsmlEvent>& out, bool at_end) {
  for (;;) {
    bool more = false;
    switch (state_) {
      case State::kReasoning: more = step_reasoning(out, at_end); break;
      case State::kContent: more = step_content(out, at_end); break;
      case State::kBlock: more = step_block(out, at_end); break;
      case State::kInvoke: more = step_invoke(out, at_end); break;
      case State::kParam: more = step_param(out, at_end); break;
      case State::kFailed: pos_ = buf_.size(); break;
    }
    if (!more) break;
  }
  if (pos_ > 0) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
}

void DsmlParser::feed(std::string_view delta, std::vector<DsmlEvent>& out) {
  if (state_ == State::kFailed) return;
  buf_ += delta;
  process(out, false);
}

Result<DsmlSummary> DsmlParser::finish(std::vector<DsmlEvent>& out) {
  process(out, true);
  if (state_ == State::kInvoke || state_ == State::kParam)
    fail("generation ended inside tool call '" + call_name_ + "' (its DSML block is not closed); no partial tool "
         "call is reported");
  if (state_ == State::kFailed) return invalid_argument(error_);
  if (state_ == State::kBlock && wrapper_) warnings_.push_back("unterminated tool_calls block accepted at end");
  DsmlSummary s;
  s.n_calls = n_calls_;
  s.tool_calls = n_calls_ > 0;
  s.warnings = warnings_;
  return s;
}

void apply_dsml_events(const std::vector<DsmlEvent>& events, ParsedOutput& out) {
  for (const DsmlEvent& e : events) {
    switch (e.kind) {
      case DsmlEvent::Kind::kReasoning: out.reasoning += e.text; break;
      case DsmlEvent::Kind::kContent: out.content += e.text; break;
      case DsmlEvent::Kind::kToolCallBegin: out.tool_calls.push_back({e.id, e.name, ""}); break;
      case DsmlEvent::Kind::kToolCallArguments:
        if (!out.tool_calls.empty()) out.tool_calls.back().arguments_json += e.text;
        break;
      case DsmlEvent::Kind::kToolCallEnd: break;
    }
  }
}

Result<ParsedOutput> parse_dsml_output(std::string_view text, bool thinking) {
  DsmlParser p(thinking);
  std::vector<DsmlEvent> ev;
  p.feed(text, ev);
  DSV4_ASSIGN_OR_RETURN(DsmlSummary s, p.finish(ev));
  ParsedOutput out;
  apply_dsml_events(ev, out);
  out.finish_reason = s.tool_calls ? "tool_calls" : "stop";
  out.warnings = std::move(s.warnings);
  return out;
}

}  // namespace dsv4::tokenizer
