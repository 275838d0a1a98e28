// server/serve/generation.cpp — the three generation routes: parse → prepare → queue → stream
// (SSE) or wait → serialise. Engine deltas become api::OutputEvent / TokenLogprobInfo here, on
// the HTTP thread; the worker only moves native structs.
#include <chrono>
#include <ctime>

#include "base/log.h"
#include "server/serve/assembler.h"
#include "server/serve/server_impl.h"

namespace dsv4::server::serve {
namespace {

// Per-stream state, owned by the chunked content provider.
struct StreamState {
  std::shared_ptr<Job> job;
  PreparedRequest prep;
  api::ResponseMeta meta;
  std::unique_ptr<Assembler> assembler;
  std::unique_ptr<api::OpenAiChatStream> chat;
  std::unique_ptr<api::OpenAiCompletionStream> completion;
  std::unique_ptr<api::AnthropicStream> anthropic;
};

}  // namespace

// Queues the prepared generation; nullptr when the queue is full (429 with Retry-After answered).
std::shared_ptr<Job> Server::Impl::submit_job(ApiKind kind, const PreparedRequest& prep, const http::Request& req,
                                              http::Response& res) {
  auto job = std::make_shared<Job>();
  job->request = prep.gen;
  job->route = req.path;
  if (worker->submit(job)) return job;
  api::ApiError e;
  e.http_status = 429;
  e.type = kind == ApiKind::kAnthropic ? "rate_limit_error" : "rate_limit_exceeded";
  e.message = "The server is busy: " + std::to_string(options.max_queue) +
              " requests are already waiting. Retry after a moment.";
  e.code = "queue_full";
  res.set_header("Retry-After", "1");
  send_error(kind, res, e, "queue_full");
  return nullptr;
}

// A non-streamed generation to its end: deltas go through `assembler`. Nothing is written before the
// end, so the socket is watched (every 100 ms): a client that hangs up cancels its generation instead
// of letting it run to max_tokens (it gets a 499 nobody reads: the log and metrics see it). An engine
// error or unparsable model output is answered here. true: `*out` is the finished generation.
bool Server::Impl::await_unstreamed(ApiKind kind, Job& job, Assembler& assembler, const http::Request& req,
                                    http::Response& res, GenerationResult* out) {
  std::vector<api::OutputEvent> ev;
  std::vector<api::TokenLogprobInfo> lps;
  std::string text;
  auto next_check = std::chrono::steady_clock::now();
  for (;;) {
    auto msg = job.channel.pop(std::chrono::milliseconds(100));
    if (std::chrono::steady_clock::now() >= next_check) {
      next_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
      if (!req.client_connected()) {
        job.cancelled = true;
        api::ApiError e;
        e.http_status = 499;
        e.type = "client_closed_request";
        e.message = "The client closed the connection; the generation was cancelled.";
        send_error(kind, res, e, "");
        return false;
      }
    }
    if (!msg) continue;
    if (auto* d = std::get_if<GenerationDelta>(&*msg)) {
      assembler.add(*d, ev, lps, text);
      ev.clear();
      lps.clear();
      continue;
    }
    if (auto* done = std::get_if<JobDone>(&*msg)) {
      if (!done->result.ok()) {
        send_error(kind, res, api::api_error_from_status(done->result.status()), "engine");
        return false;
      }
      const GenerationResult& r = *done->result;
      if (!r.output_error.ok() && r.finish != FinishReason::kLength) {
        send_error(kind, res, output_error(r.output_error), "model_output");
        return false;
      }
      *out = r;
      return true;
    }
  }
}

void Server::Impl::handle_generation(ApiKind kind, const http::Request& req, http::Response& res) {
  if (rejected_form_body(kind, req, res)) return;
  PreparedRequest prep;
  std::optional<api::ApiError> err;
  if (kind == ApiKind::kCompletion) {
    auto parsed = api::parse_completion_request(req.body);
    if (!parsed.ok()) return send_error(kind, res, api::api_error_from_status(parsed.status()), "bad_request");
    err = prepare_completion(engine, *parsed, prep);
  } else {
    auto parsed = kind == ApiKind::kChat ? api::parse_chat_completion_request(req.body)
                                         : api::parse_anthropic_messages_request(req.body);
    if (!parsed.ok()) return send_error(kind, res, api::api_error_from_status(parsed.status()), "bad_request");
    err = prepare_chat(engine, *parsed, kind, options.default_system_prompt, prep);
  }
  if (err) return send_error(kind, res, *err, err->code == "context_length_exceeded" ? "context" : "bad_request");

  apply_replay(prep);
  const std::shared_ptr<Job> job = submit_job(kind, prep, req, res);
  if (job == nullptr) return;

  api::ResponseMeta meta;
  meta.id = new_id(kind == ApiKind::kAnthropic ? "msg_" : kind == ApiKind::kCompletion ? "cmpl-" : "chatcmpl-");
  meta.model = prep.model.empty() ? model_id() : prep.model;
  meta.created = static_cast<int64_t>(std::time(nullptr));
  const std::string call_prefix = kind == ApiKind::kAnthropic ? "toolu_" + meta.id.substr(4) + "_" : "call_" + meta.id.substr(9) + "_";

  if (!prep.stream) {
    Assembler assembler(engine, prep, call_prefix);
    GenerationResult r;
    if (!await_unstreamed(kind, *job, assembler, req, res, &r)) return;
    const api::CompletionOutput out = assembler.finish(r);
    std::string body = kind == ApiKind::kChat         ? api::openai_chat_response_json(meta, out, prep.logprobs)
                       : kind == ApiKind::kCompletion ? api::openai_completion_response_json(meta, out, prep.logprobs)
                                                      : api::anthropic_message_response_json(meta, out);
    res.set_content(std::move(body), "application/json");
    return;
  }

  auto st = std::make_shared<StreamState>();
  st->job = job;
  st->prep = std::move(prep);
  st->meta = meta;
  st->assembler = std::make_unique<Assembler>(engine, st->prep, call_prefix);
  if (kind == ApiKind::kChat) st->chat = std::make_unique<api::OpenAiChatStream>(meta, st->prep.include_usage, st->prep.logprobs);
  if (kind == ApiKind::kCompletion)
    st->completion = std::make_unique<api::OpenAiCompletionStream>(meta, st->prep.include_usage, st->prep.logprobs);
  if (kind == ApiKind::kAnthropic) st->anthropic = std::make_unique<api::AnthropicStream>(meta);
  StreamRender render;
  render.begin = [st] {
    if (st->chat) return st->chat->begin();
    if (st->anthropic) {
      api::Usage u;
      u.prompt_tokens = static_cast<int64_t>(st->prep.gen.prompt.size());
      return st->anthropic->begin(u);
    }
    if (st->completion && !st->prep.echo_text.empty()) return st->completion->text(st->prep.echo_text, {});
    return std::string();
  };
  render.delta = [st](const std::vector<api::OutputEvent>& ev, const std::vector<api::TokenLogprobInfo>& lps,
                      const std::string& text) {
    if (st->chat) return st->chat->events(ev, lps);
    if (st->completion) return st->completion->text(text, lps);
    return st->anthropic->events(ev);
  };
  render.error = [st](const api::ApiError& e) {
    return st->chat ? st->chat->error(e) : st->completion ? st->completion->error(e) : st->anthropic->error(e);
  };
  render.finish = [st](const api::CompletionOutput& o) {
    return st->chat ? st->chat->finish(o) : st->completion ? st->completion->finish(o) : st->anthropic->finish(o);
  };
  stream_job(res, job, st->assembler.get(), st, std::move(render));
}

void Server::Impl::stream_job(http::Response& res, std::shared_ptr<Job> job, Assembler* assembler,
                              std::shared_ptr<void> owner, StreamRender render) {
  struct Driver {
    std::shared_ptr<Job> job;
    Assembler* assembler;
    std::shared_ptr<void> owner;
    StreamRender render;
    bool started = false, finished = false;
  };
  auto d = std::make_shared<Driver>(Driver{std::move(job), assembler, std::move(owner), std::move(render)});
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  const int keepalive_ms = options.keepalive_ms;
  auto* counters = &metrics;  // the server's: it outlives its HTTP threads
  res.set_chunked_content_provider(
      "text/event-stream",
      [d, keepalive_ms, counters](size_t, http::DataSink& sink) -> bool {
        auto write = [&](const std::string& s) {
          if (s.empty()) return true;
          if (!sink.is_writable() || !sink.write(s.data(), s.size())) {
            d->job->cancelled = true;  // the client is gone: stop generating within one token
            return false;
          }
          return true;
        };
        if (!d->started) {
          d->started = true;
          return write(d->render.begin());
        }
        auto msg = d->job->channel.pop(std::chrono::milliseconds(keepalive_ms));
        if (!msg) return write(": keep-alive\n\n");
        if (auto* p = std::get_if<PrefillProgress>(&*msg))
          return write(": prefill " + std::to_string(p->done) + "/" + std::to_string(p->total) + "\n\n");
        if (auto* delta = std::get_if<GenerationDelta>(&*msg)) {
          std::vector<api::OutputEvent> ev;
          std::vector<api::TokenLogprobInfo> lps;
          std::string text;
          d->assembler->add(*delta, ev, lps, text);
          return write(d->render.delta(ev, lps, text));
        }
        auto& done = std::get<JobDone>(*msg);
        std::string out;
        if (!done.result.ok() || (!done.result->output_error.ok() && done.result->finish != FinishReason::kLength)) {
          // (an engine failure is counted by the worker; an unparseable output here, as the
          // non-streamed path counts it)
          if (done.result.ok()) counters->error("model_output");
          out = d->render.error(done.result.ok() ? output_error(done.result->output_error)
                                                 : api::api_error_from_status(done.result.status()));
        } else {
          out = d->render.finish(d->assembler->finish(*done.result));
        }
        d->finished = true;
        const bool ok = write(out);
        sink.done();
        return ok;
      },
      [d](bool success) {
        if (!success || !d->finished) d->job->cancelled = true;
      });
}

}  // namespace dsv4::server::serve
