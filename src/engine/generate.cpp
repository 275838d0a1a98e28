// engine/generate.cpp — Engine::generate: prefix reuse, chunked prefill with checkpoints, the
// decode loop (sample → text → stop checks → forward), cancellation and per-request stats.
//
// Order inside one decode step: logits of the last forwarded token → logprobs (raw logits, when
// asked) → sample (on a copy; or on the backend, inside the forward, when nothing needs the logits
// on the host: Session::forward_sample) → EOS ends the turn (not decoded, not forwarded) → the id is
// decoded, stop strings and the DSML parser run → the observer sees the delta (may cancel) →
// unless finished, the id is forwarded. The last sampled id is therefore never forwarded: the
// next request's prompt decides what follows it (the prefix cache then extends or rewinds).
// With a tool_choice constraint, the ids the grammar refuses get -inf before sampling (the
// logprobs stay the model's raw distribution).
#include <chrono>
#include <limits>

#include "engine/engine_impl.h"
#include "engine/output_text.h"

namespace dsv4 {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

Status validate(const GenerateRequest& r, const ModelInfo& info) {
  if (r.prompt.empty()) return invalid_argument("the prompt has no tokens");
  if (r.max_tokens < 1) return invalid_argument("max_tokens must be at least 1");
  for (int32_t t : r.prompt)
    if (t < 0 || t >= info.n_vocab)
      return out_of_range("prompt token id " + std::to_string(t) + " is outside the vocabulary of " +
                          std::to_string(info.n_vocab));
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  if (n + r.max_tokens > info.ctx + 1)  // the last sampled token is never forwarded
    return resource_exhausted("the prompt (" + std::to_string(n) + " tokens) plus max_tokens (" +
                              std::to_string(r.max_tokens) + ") exceeds the context of " + std::to_string(info.ctx) +
                              " tokens");
  if (r.top_logprobs > 20) return out_of_range("top_logprobs must be at most 20");
  for (int32_t t : r.forced_output)
    if (t < 0 || t >= info.n_vocab) return out_of_range("forced token id " + std::to_string(t) + " is outside the vocabulary");
  for (const auto& [id, bias] : r.sampler.logit_bias) {
    (void)bias;
    if (id < 0 || id >= info.n_vocab) return out_of_range("logit_bias token id " + std::to_string(id) + " is outside the vocabulary");
  }
  return ok_status();
}

// Sets the logit of every id the grammar refuses in `state` to -inf (EOS: end_allowed). Free
// states refuse nothing but maybe EOS; lt_only states only ids whose bytes contain '<'
// (`ids_with_lt`, a few thousand of the vocabulary). When nothing would be left, nothing but a
// refused EOS is masked (the model then decides; the parser reports what it wrote).
void mask_by_grammar(const tokenizer::ToolCallGrammar& g, const tokenizer::ToolCallGrammar::State& state,
                     const engine::OutputText& text, int32_t eos, const std::vector<int32_t>& ids_with_lt,
                     std::vector<float>& logits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const bool eos_ok = g.end_allowed(state);
  if (!eos_ok && eos >= 0) logits[static_cast<size_t>(eos)] = kNegInf;
  if (g.free(state)) return;
  auto refused = [&](int32_t id) {
    if (id == eos) return !eos_ok;
    tokenizer::ToolCallGrammar::State t = state;
    return !g.feed(t, text.visible_bytes(id));
  };
  if (g.lt_only(state)) {
    for (int32_t id : ids_with_lt)
      if (refused(id)) logits[static_cast<size_t>(id)] = kNegInf;
    return;
  }
  const int32_t n = static_cast<int32_t>(logits.size());
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id)
    if (refused(id)) out.push_back(id);
  if (out.size() == static_cast<size_t>(n)) return;  // nothing would be left: only EOS stays refused
  for (int32_t id : out) logits[static_cast<size_t>(id)] = kNegInf;
}

}  // namespace

Result<GenerationResult> Engine::generate(const GenerateRequest& req, GenerationObserver& observer) {
  Impl& m = *impl_;
  DSV4_RETURN_IF_ERROR(validate(req, m.info));
  const int64_t V = m.info.n_vocab;
  const int64_t n = static_cast<int64_t>(req.prompt.size());
  m.logits.resize(static_cast<size_t>(V));
  m.scratch.resize(static_cast<size_t>(V));
  m.session->clear_times();

  GenerationResult res;
  GenerationStats& st = res.stats;
  st.prompt_tokens = n;
  const auto t_prefill = Clock::now();
  // A failed forward leaves the session somewhere unknown: forget it rather than trust it.
  auto fail = [&](const Status& s) -> Status {
    m.session->reset();
    m.cache->clear();
    return s;
  };

  DSV4_ASSIGN_OR_RETURN(const int64_t cached, m.cache->prepare(*m.session, req.prompt));
  st.cached_tokens = cached;
  // Prefill prompt[cached, n−1) in chunks, cutting at checkpoint positions (multiples of the
  // interval, and n−1: a chat's next turn usually diverges right after the prompt's end), then
  // the last prompt token alone for its logits.
  int64_t pos = cached;
  const int64_t interval = std::max<int64_t>(m.options.checkpoint_interval, 1);
  while (pos < n - 1) {
    if (!observer.on_prefill(pos, n)) {
      res.finish = FinishReason::kCancelled;
      st.prefill_ms = ms_since(t_prefill);
      return res;
    }
    int64_t end = std::min(n - 1, pos + m.options.prefill_chunk);
    const int64_t next_cp = (pos / interval + 1) * interval;
    if (next_cp < end) end = next_cp;
    const std::span<const int32_t> chunk(req.prompt.data() + pos, static_cast<size_t>(end - pos));
    if (Status s = m.session->forward(chunk, nullptr, false); !s.ok()) return fail(s);
    m.cache->on_forward(chunk);
    pos = end;
    if (pos % interval == 0 || pos == n - 1) m.cache->checkpoint(*m.session);
  }
  sampling::Sampler sampler(req.sampler, static_cast<int32_t>(V));
  // tool_choice: tokens that would leave the grammar are masked (-inf) before sampling. A forced
  // (replayed) id outside the grammar turns the constraint off for the rest of the request.
  const tokenizer::ToolCallGrammar grammar =
      req.chat ? tokenizer::ToolCallGrammar(req.tool_choice, req.thinking) : tokenizer::ToolCallGrammar();
  bool constrained = grammar.active();
  // Forwards `tokens` and prepares the choice of output token `index`: where the logits are
  // (Session::forward_sample: the backend samples, one id comes back) unless the choice needs the
  // host's logits (forced, grammar-masked, or logprobs asked); then m.logits holds them and
  // `chosen` is −1. Either way the sampler draws exactly as Sampler::sample would.
  int32_t chosen = -1;
  auto forward_to_choice = [&](std::span<const int32_t> tokens, int64_t index) -> Status {
    chosen = -1;
    const bool on_host = constrained || req.top_logprobs >= 0 || static_cast<size_t>(index) < req.forced_output.size();
    if (on_host) return m.session->forward(tokens, m.logits.data(), false);
    const sampling::Sampler::Draw draw = sampler.take_draw();
    const sampling::SamplerConfig& c = sampler.config();
    backend::SampleArgs args;
    args.temperature = c.temperature;
    args.top_k = c.top_k;
    args.top_p = c.top_p;
    args.min_p = c.min_p;
    args.repetition_penalty = c.repetition_penalty;
    args.presence_penalty = c.presence_penalty;
    args.frequency_penalty = c.frequency_penalty;
    args.u = draw.u;
    args.logit_bias = c.logit_bias;
    args.seen_ids = draw.seen_ids;
    args.seen_counts = draw.seen_counts;
    int32_t id = -1;
    DSV4_RETURN_IF_ERROR(m.session->forward_sample(tokens, args, &id, m.logits.data()));
    if (id == backend::kSampleOnHost) {  // the backend left it to us: the same draw on the host
      std::copy(m.logits.begin(), m.logits.end(), m.scratch.begin());
      id = sampler.sample_drawn(m.scratch, draw);
    }
    chosen = id;
    return ok_status();
  };
  {
    const std::span<const int32_t> last(req.prompt.data() + n - 1, 1);
    if (Status s = forward_to_choice(last, 0); !s.ok()) return fail(s);
    m.cache->on_forward(last);
  }
  st.prefill_ms = ms_since(t_prefill);

  engine::OutputText text(m.tokenizer, req);
  bool in_reasoning = req.chat && req.thinking;
  if (constrained && !m.ids_with_lt_ready) {
    for (int32_t id = 0; id < static_cast<int32_t>(V); ++id)
      if (m.tokenizer.token_bytes(id).find('<') != std::string_view::npos) m.ids_with_lt.push_back(id);
    m.ids_with_lt_ready = true;
  }
  tokenizer::ToolCallGrammar::State gstate = grammar.start();
  const auto t_decode = Clock::now();
  double sampling_ms = 0;
  res.finish = FinishReason::kLength;
  for (int64_t i = 0; i < req.max_tokens; ++i) {
    GenerationDelta delta;
    GeneratedToken tok;
    const auto t_sample = Clock::now();
    if (static_cast<size_t>(i) < req.forced_output.size()) {
      tok.id = req.forced_output[static_cast<size_t>(i)];
    } else if (chosen >= 0) {
      tok.id = chosen;
    } else {
      std::copy(m.logits.begin(), m.logits.end(), m.scratch.begin());
      if (constrained) mask_by_grammar(grammar, gstate, text, m.eos, m.ids_with_lt, m.scratch);
      tok.id = sampler.sample(m.scratch);
    }
    sampler.accept(tok.id);
    if (req.top_logprobs >= 0) tok.logprob = sampling::logprob_of(m.logits, tok.id, req.top_logprobs, tok.top).logprob;
    sampling_ms += ms_since(t_sample);
    if (tok.id == m.eos) {
      res.finish = FinishReason::kEos;
      break;
    }
    if (constrained && !grammar.feed(gstate, text.visible_bytes(tok.id))) constrained = false;
    ++st.completion_tokens;
    if (in_reasoning) {
      ++st.reasoning_tokens;
      if (tok.id == m.think_end) in_reasoning = false;
    }
    if (Status s = text.push(tok.id, delta); !s.ok()) return fail(s);
    delta.tokens.push_back(std::move(tok));
    const bool stop_string = text.stopped();
    const bool tool_calls = text.tool_block_closed();
    const bool keep_going = observer.on_delta(delta);
    if (stop_string || tool_calls || !keep_going) {
      res.finish = stop_string ? FinishReason::kStopString
                   : tool_calls ? FinishReason::kToolCalls
                                : FinishReason::kCancelled;
      break;
    }
    if (i + 1 == req.max_tokens) break;
    const int32_t id = delta.tokens.back().id;
    if (Status s = forward_to_choice(std::span<const int32_t>(&id, 1), i + 1); !s.ok()) return fail(s);
    m.cache->on_forward(std::span<const int32_t>(&id, 1));
    if (m.session->position() % interval == 0) m.cache->checkpoint(*m.session);
  }
  if (res.finish == FinishReason::kStopString) res.stop_string = text.matched_stop();
  GenerationDelta tail;
  text.finish(tail, res.output_error, res.warnings);
  if (!tail.text.empty() || !tail.events.empty()) (void)observer.on_delta(tail);
  st.decode_ms = ms_since(t_decode);

  if (m.options.timing) {
    const model::PhaseTimes& t = m.session->times();
    st.phases = PhaseMillis{t.hc * 1e3, t.attention * 1e3, t.compressor * 1e3, t.moe * 1e3, t.head * 1e3,
                            t.embed * 1e3, sampling_ms};
  }
  return res;
}

}  // namespace dsv4
