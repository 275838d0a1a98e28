// server/serve/assembler.h — engine deltas → API-neutral output (shared by every generation route).
//
// Owns: converting tokenizer::DsmlEvent into api::OutputEvent (tool-call ids get the route's
// prefix), accumulating a response from deltas in both modes (the whole CompletionOutput for a
// non-streamed answer, the tail of a stream), and the error for unparsable model output. Runs on
// HTTP threads; never touches the engine's timeline.
#pragma once

#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "server/api/output.h"
#include "server/serve/prepare.h"

namespace dsv4::server::serve {

api::OutputEvent to_api(const tokenizer::DsmlEvent& e);

// Accumulates a response from deltas (both modes) and converts each delta for streaming.
class Assembler {
 public:
  Assembler(const Engine& engine, const PreparedRequest& p, std::string call_id_prefix)
      : engine_(engine), p_(p), call_prefix_(std::move(call_id_prefix)) {}

  // Converts one delta; appends to the whole output.
  void add(const GenerationDelta& d, std::vector<api::OutputEvent>& events, std::vector<api::TokenLogprobInfo>& lps,
           std::string& text) {
    for (const tokenizer::DsmlEvent& e : d.events) {
      api::OutputEvent o = to_api(e);
      if (o.kind == api::OutputEvent::Kind::kToolCallBegin) o.id = call_prefix_ + std::to_string(o.index);
      switch (o.kind) {
        case api::OutputEvent::Kind::kReasoning: out_.reasoning += o.text; break;
        case api::OutputEvent::Kind::kContent: out_.content += o.text; break;
        case api::OutputEvent::Kind::kToolCallBegin: calls_.push_back({o.id, o.name, "", false}); break;
        case api::OutputEvent::Kind::kToolCallArguments:
          if (!calls_.empty()) calls_.back().args += o.text;
          break;
        case api::OutputEvent::Kind::kToolCallEnd:
          if (!calls_.empty()) calls_.back().done = true;
          break;
      }
      events.push_back(std::move(o));
    }
    if (!p_.gen.chat) {
      out_.content += d.text;
      text += d.text;
    }
    if (p_.logprobs)
      for (const GeneratedToken& t : d.tokens) {
        api::TokenLogprobInfo info;
        info.token = engine_.token_text(t.id);
        info.bytes = std::string(engine_.token_bytes(t.id));
        info.logprob = t.logprob;
        for (const sampling::TokenLogprob& tl : t.top)
          info.top.push_back({engine_.token_text(tl.id), std::string(engine_.token_bytes(tl.id)), tl.logprob});
        out_.logprobs.push_back(info);
        lps.push_back(std::move(info));
      }
  }

  // The final output; only complete tool calls are reported (never a partial call).
  api::CompletionOutput finish(const GenerationResult& r) {
    for (const Call& c : calls_)
      if (c.done) out_.tool_calls.push_back({c.id, c.name, c.args});
    switch (r.finish) {
      case FinishReason::kEos: out_.finish = api::FinishReason::kStop; break;
      case FinishReason::kStopString:
        out_.finish = api::FinishReason::kStop;
        out_.stop_sequence = r.stop_string;
        break;
      case FinishReason::kLength: out_.finish = api::FinishReason::kLength; break;
      case FinishReason::kToolCalls: out_.finish = api::FinishReason::kToolCalls; break;
      case FinishReason::kCancelled: out_.finish = api::FinishReason::kCancelled; break;
    }
    if (!out_.tool_calls.empty() && out_.finish == api::FinishReason::kStop && out_.stop_sequence.empty())
      out_.finish = api::FinishReason::kToolCalls;
    const GenerationStats& s = r.stats;
    out_.usage.prompt_tokens = s.prompt_tokens;
    out_.usage.cached_tokens = s.cached_tokens;
    out_.usage.completion_tokens = s.completion_tokens;
    out_.usage.reasoning_tokens = s.reasoning_tokens;
    out_.usage.prefill_ms = s.prefill_ms;
    out_.usage.decode_ms = s.decode_ms;
    out_.usage.decode_tokens_per_s =
        s.decode_ms > 0 ? static_cast<double>(s.completion_tokens) / (s.decode_ms / 1e3) : 0.0;
    if (!p_.echo_text.empty()) out_.content = p_.echo_text + out_.content;
    return out_;
  }

 private:
  struct Call {
    std::string id, name, args;
    bool done = false;
  };
  const Engine& engine_;
  const PreparedRequest& p_;
  std::string call_prefix_;
  api::CompletionOutput out_;
  std::vector<Call> calls_;
};

// The 500 sent when the model's output cannot be parsed (EOS inside a tool call).
api::ApiError output_error(const Status& s);

}  // namespace dsv4::server::serve
