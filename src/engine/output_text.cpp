// engine/output_text.cpp — stop-string hold back and the chat parser over released text.
#include "engine/output_text.h"

#include <algorithm>

namespace dsv4::engine {

OutputText::OutputText(const tokenizer::Tokenizer& tok, const GenerateRequest& req)
    : tok_(tok), chat_(req.chat), thinking_(req.thinking), decoder_(tok, /*skip_special=*/false) {
  think_start_ = tok.find_token("<think>");
  think_end_ = tok.find_token("</think>");
  dsml_ = tok.find_token("｜DSML｜");
  for (const std::string& s : req.stop)
    if (!s.empty()) {
      stop_.push_back(s);
      max_stop_ = std::max(max_stop_, s.size());
    }
  if (req.chat) parser_ = std::make_unique<tokenizer::DsmlParser>(req.thinking);
}

bool OutputText::passes_special(int32_t id) const {
  if (id == dsml_) return true;
  if (!chat_) return id == think_start_ || id == think_end_;
  return id == think_end_ && thinking_ && !think_closed_;
}

std::string_view OutputText::visible_bytes(int32_t id) const {
  if (tok_.is_special(id) && !passes_special(id)) return {};
  return tok_.token_bytes(id);
}

void OutputText::release(std::string_view text, GenerationDelta& delta) {
  if (text.empty()) return;
  delta.text.append(text);
  if (parser_) parser_->feed(text, delta.events);
}

Status OutputText::push(int32_t id, GenerationDelta& delta) {
  if (stopped_) return ok_status();
  if (tok_.is_special(id)) {
    if (!passes_special(id)) return ok_status();  // never released as text
    if (chat_ && id == think_end_) think_closed_ = true;
  }
  DSV4_ASSIGN_OR_RETURN(std::string piece, decoder_.push(id));
  if (stop_.empty()) {
    release(piece, delta);
    return ok_status();
  }
  held_ += piece;
  // The earliest full match wins (ties: the longer string, so "ab" beats "a" at the same place).
  size_t best = std::string::npos, best_len = 0;
  for (const std::string& s : stop_) {
    const size_t at = held_.find(s);
    if (at != std::string::npos && (at < best || (at == best && s.size() > best_len))) {
      best = at;
      best_len = s.size();
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    release(std::string_view(held_).substr(0, best), delta);
    held_.clear();
    stopped_ = true;
    return ok_status();
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  const size_t longest = std::min(held_.size(), max_stop_ - 1);
  for (size_t k = longest; k > 0 && keep == 0; --k) {
    const std::string_view tail = std::string_view(held_).substr(held_.size() - k);
    for (const std::string& s : stop_)
      if (s.size() > k && std::string_view(s).substr(0, k) == tail) {
        keep = k;
        break;
      }
  }
  release(std::string_view(held_).substr(0, held_.size() - keep), delta);
  held_.erase(0, held_.size() - keep);
  return ok_status();
}

void OutputText::finish(GenerationDelta& delta, Status& output_error, std::vector<std::string>& warnings) {
  if (!stopped_) {
    held_ += decoder_.flush();
    release(held_, delta);
    held_.clear();
  }
  if (parser_) {
    auto summary = parser_->finish(delta.events);
    if (!summary.ok()) {
      output_error = summary.status();
    } else {
      warnings = summary->warnings;
    }
  }
}

}  // namespace dsv4::engine
