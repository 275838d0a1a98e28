// engine/output_text.h — from sampled ids to released text and chat events.
//
// Owns: UTF-8-safe detokenization (tokenizer::StreamDecoder), dropping generated special tokens
// that are not output markup, stop strings (text that may still
// become a stop string is held back; a match ends generation and is not part of the output; a
// stop string never splits a UTF-8 sequence because matching runs on whole decoded code points)
// and, in chat mode, the DSML/reasoning parser over the released text.
// Must not: sample, touch the session, or know HTTP/JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "tokenizer/dsml_parser.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::engine {

class OutputText {
 public:
  OutputText(const tokenizer::Tokenizer& tok, const GenerateRequest& req);

  // The bytes `id` would add to the output now: its bytes, or nothing for a special token that is
  // not output markup (see GenerationDelta). Depends on what was pushed before.
  std::string_view visible_bytes(int32_t id) const;
  // Decodes `id` and appends what became releasable to `delta`. Sets stopped() on a stop string.
  Status push(int32_t id, GenerationDelta& delta);
  // End of generation (EOS, length, cancel): releases held text (a partial stop string is
  // ordinary text after all) and closes the parser. The parser's complaint, if any, is returned
  // as output_error (an open tool call at the end).
  void finish(GenerationDelta& delta, Status& output_error, std::vector<std::string>& warnings);

  bool stopped() const { return stopped_; }
  const std::string& matched_stop() const { return matched_; }
  bool tool_block_closed() const { return parser_ && parser_->block_closed(); }

 private:
  void release(std::string_view text, GenerationDelta& delta);

  bool passes_special(int32_t id) const;

  const tokenizer::Tokenizer& tok_;
  bool chat_, thinking_;
  bool think_closed_ = false;  // chat: `</think>` was released (a second one is dropped)
  int32_t think_start_ = -1, think_end_ = -1, dsml_ = -1;
  tokenizer::StreamDecoder decoder_;
  std::vector<std::string> stop_;
  size_t max_stop_ = 0;
  std::string held_;     // decoded, not yet released (a possible stop-string prefix)
  bool stopped_ = false;
  std::string matched_;
  std::unique_ptr<tokenizer::DsmlParser> parser_;  // chat mode only
};

}  // namespace dsv4::engine
