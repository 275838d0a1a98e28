// tokenizer/tool_call_grammar.cpp — the tool_choice automaton (see the header for the grammar).
//
// A choice node holds a set of candidate strings sorted by bytes and prefix-free (each ends in a
// delimiter that cannot occur inside a name), so the candidates still possible after `depth`
// bytes are one contiguous range [lo, hi): feeding a byte narrows the range, and a range of one
// fully matched candidate takes that candidate's action.
#include "tokenizer/tool_call_grammar.h"

#include <algorithm>

namespace dsv4::tokenizer {
namespace {

constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kParamClose = "</｜DSML｜parameter>";
constexpr std::string_view kDsmlWord = "DSML";
constexpr int32_t kKeysFree = -1, kKeysNone = -2;
constexpr int32_t kMaxCalls = 16;  // invokes in one block (required + parallel)

bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
// Bytes the parser tolerates between '<' and "DSML": whitespace, '/', ASCII '|', and the bytes
// of U+FF5C '｜' (EF BD 9C).
bool is_tag_gap(unsigned char c) { return is_ws(c) || c == '/' || c == '|' || c == 0xEF || c == 0xBD || c == 0x9C; }

// A name usable inside name="…": no quote, newline or '<' (the parser would end the attribute).
bool plain_name(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c == '"' || c == '\n' || c == '<') return false;
  return true;
}

}  // namespace

int32_t ToolCallGrammar::add_set(std::vector<Candidate> cands) {
  std::sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) { return a.text < b.text; });
  cands.erase(std::unique(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) { return a.text == b.text; }),
              cands.end());
  sets_.push_back(std::move(cands));
  return static_cast<int32_t>(sets_.size()) - 1;
}

ToolCallGrammar::ToolCallGrammar(const ToolChoiceSpec& spec, bool thinking) : mode_(spec.mode) {
  if (mode_ == ToolChoiceMode::kRequired || mode_ == ToolChoiceMode::kFunction) {
    std::vector<Candidate> names;
    for (size_t i = 0; i < spec.tools.size(); ++i) {
      const ToolGrammarTool& t = spec.tools[i];
      if (!plain_name(t.name)) continue;
      names.push_back({t.name + "\">\n", Action::kToParamOrEnd, static_cast<int32_t>(i)});
    }
    if (names.empty()) {
      mode_ = ToolChoiceMode::kAuto;  // nothing callable: the API layer refuses this before
      return;
    }
    parallel_ = mode_ == ToolChoiceMode::kRequired && spec.parallel;
    open_set_ = add_set({{"\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"", Action::kToNames}});
    names_set_ = add_set(std::move(names));
    param_or_end_set_ = add_set({{"<｜DSML｜parameter name=\"", Action::kToKey},
                                 {"</｜DSML｜invoke>\n", Action::kToAfterInvoke}});
    end_invoke_set_ = add_set({{"</｜DSML｜invoke>\n", Action::kToAfterInvoke}});
    key_tail_set_ = add_set({{"\" string=\"", Action::kToBool}});
    bool_set_ = add_set({{"true\">", Action::kToValue}, {"false\">", Action::kToValue}});
    newline_set_ = add_set({{"\n", Action::kToParamOrEnd}});
    after_invoke_set_ = add_set({{"<｜DSML｜invoke name=\"", Action::kToNames},
                                 {"</｜DSML｜tool_calls>", Action::kToDone}});
    after_invoke_last_set_ = add_set({{"</｜DSML｜tool_calls>", Action::kToDone}});
    for (const ToolGrammarTool& t : spec.tools) {
      if (!t.params_known) {
        key_sets_.push_back(kKeysFree);
        continue;
      }
      std::vector<Candidate> keys;
      for (const std::string& k : t.params)
        if (plain_name(k)) keys.push_back({k + "\" string=\"", Action::kToBool});
      key_sets_.push_back(keys.empty() ? kKeysNone : add_set(std::move(keys)));
    }
    // KMP failure function of the close tag (kValue).
    close_fail_.assign(kParamClose.size() + 1, 0);
    close_fail_[0] = -1;
    for (size_t i = 1; i <= kParamClose.size(); ++i) {
      int32_t k = close_fail_[i - 1];
      while (k >= 0 && kParamClose[static_cast<size_t>(k)] != kParamClose[i - 1]) k = close_fail_[static_cast<size_t>(k)];
      close_fail_[i] = k + 1;
    }
  }
  if (mode_ == ToolChoiceMode::kAuto) return;
  if (thinking) {
    start_.node = Node::kReasoning;
  } else if (mode_ == ToolChoiceMode::kNone) {
    start_.node = Node::kNoneContent;
  } else {
    enter_set(start_, open_set_);
  }
}

void ToolCallGrammar::enter_set(State& s, int32_t set) const {
  s.node = Node::kChoice;
  s.set = set;
  s.lo = 0;
  s.hi = static_cast<int32_t>(sets_[static_cast<size_t>(set)].size());
  s.depth = 0;
}

void ToolCallGrammar::take(State& s, const Candidate& c) const {
  switch (c.action) {
    case Action::kToNames:
      ++s.calls;
      enter_set(s, names_set_);
      break;
    case Action::kToParamOrEnd:
      if (c.tool >= 0) s.tool = c.tool;
      enter_set(s, key_sets_[static_cast<size_t>(s.tool)] == kKeysNone ? end_invoke_set_ : param_or_end_set_);
      break;
    case Action::kToKey: {
      const int32_t keys = key_sets_[static_cast<size_t>(s.tool)];
      if (keys >= 0) {
        enter_set(s, keys);
      } else {
        s.node = Node::kFreeKey;
        s.depth = 0;
      }
      break;
    }
    case Action::kToBool: enter_set(s, bool_set_); break;
    case Action::kToValue:
      s.node = Node::kValue;
      s.match = 0;
      break;
    case Action::kToAfterInvoke:
      enter_set(s, parallel_ && s.calls < kMaxCalls ? after_invoke_set_ : after_invoke_last_set_);
      break;
    case Action::kToDone: s.node = Node::kDone; break;
  }
}

bool ToolCallGrammar::feed_byte(State& s, unsigned char c) const {
  switch (s.node) {
    case Node::kDone: return mode_ == ToolChoiceMode::kNone;  // nothing may follow the closed block

    case Node::kReasoning: {
      if (static_cast<unsigned char>(kThinkEnd[s.match]) == c) {
        if (static_cast<size_t>(++s.match) == kThinkEnd.size()) {
          s.match = 0;
          if (mode_ == ToolChoiceMode::kNone) {
            s.node = Node::kNoneContent;
          } else {
            enter_set(s, open_set_);
          }
        }
      } else {
        s.match = c == '<' ? 1 : 0;
      }
      return true;
    }
    case Node::kNoneContent: {
      if (s.match == 0) {
        if (c == '<') s.match = 1;
        return true;
      }
      if (s.match == 1) {
        if (c == 'D') s.match = 2;
        else if (c == '<') s.match = 1;
        else if (!is_tag_gap(c)) s.match = 0;
        return true;
      }
      // s.match - 1 letters of "DSML" matched.
      if (static_cast<unsigned char>(kDsmlWord[static_cast<size_t>(s.match - 1)]) == c) {
        if (static_cast<size_t>(++s.match) == kDsmlWord.size() + 1) return false;  // "<…DSML": a DSML tag would open
      } else {
        s.match = c == '<' ? 1 : 0;
      }
      return true;
    }
    case Node::kChoice: {
      const std::vector<Candidate>& cands = sets_[static_cast<size_t>(s.set)];
      int32_t lo = s.hi, hi = s.lo;
      for (int32_t i = s.lo; i < s.hi; ++i) {
        const std::string& t = cands[static_cast<size_t>(i)].text;
        if (t.size() > static_cast<size_t>(s.depth) && static_cast<unsigned char>(t[s.depth]) == c) {
          lo = std::min(lo, i);
          hi = std::max(hi, i + 1);
        }
      }
      if (lo >= hi) return false;
      s.lo = lo;
      s.hi = hi;
      ++s.depth;
      const Candidate& first = cands[static_cast<size_t>(lo)];
      if (hi - lo == 1 && first.text.size() == static_cast<size_t>(s.depth)) take(s, first);
      return true;
    }
    case Node::kFreeKey: {
      if (c == '"') {
        enter_set(s, key_tail_set_);
        return feed_byte(s, c);
      }
      if (c == '\n' || c == '<' || s.depth >= kMaxFreeKeyBytes) return false;
      ++s.depth;
      return true;
    }
    case Node::kValue: {
      int32_t k = s.match;
      while (k >= 0 && static_cast<unsigned char>(kParamClose[static_cast<size_t>(k)]) != c)
        k = close_fail_[static_cast<size_t>(k)];
      s.match = static_cast<uint8_t>(k + 1);
      if (static_cast<size_t>(s.match) == kParamClose.size()) enter_set(s, newline_set_);
      return true;
    }
  }
  return false;
}

bool ToolCallGrammar::feed(State& s, std::string_view bytes) const {
  if (!active()) return true;
  if (bytes.empty())
    return s.node == Node::kReasoning || s.node == Node::kNoneContent || s.node == Node::kValue || s.node == Node::kDone;
  // Fast path: with no partial match open, bytes without '<' neither complete "</think>" or a
  // DSML opener nor start the parameter close tag.
  if (lt_only(s) && bytes.find('<') == std::string_view::npos) return true;
  for (char ch : bytes)
    if (!feed_byte(s, static_cast<unsigned char>(ch))) return false;
  return true;
}

bool ToolCallGrammar::end_allowed(const State& s) const {
  if (mode_ == ToolChoiceMode::kRequired || mode_ == ToolChoiceMode::kFunction) return s.node == Node::kDone;
  return true;
}

bool ToolCallGrammar::free(const State& s) const { return !active() || s.node == Node::kDone; }

bool ToolCallGrammar::lt_only(const State& s) const {
  return active() && s.match == 0 &&
         (s.node == Node::kReasoning || s.node == Node::kNoneContent || s.node == Node::kValue);
}

}  // namespace dsv4::tokenizer
