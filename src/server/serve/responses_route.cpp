// server/serve/responses_route.cpp — POST /v1/responses (parse → conversation from the store →
// prepare → queue → stream or wait → store) and GET/DELETE /v1/responses/{id}.
//
// A follow-up (previous_response_id) renders the stored conversation followed by its own input,
// so its prompt starts with the previous prompt token for token and the engine's prefix cache
// continues from there (checkpoint one token before the previous prompt's end, or in place when
// the previous output re-tokenizes identically): usage.input_tokens_details.cached_tokens tells.
#include <chrono>
#include <ctime>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "server/api/responses.h"
#include "server/serve/assembler.h"
#include "server/serve/server_impl.h"

namespace dsv4::server::serve {
namespace {

api::ApiError not_found_error(const std::string& message, const std::string& param) {
  api::ApiError e;
  e.http_status = 404;
  e.type = "invalid_request_error";
  e.message = message;
  e.param = param;
  return e;
}

// This response's output as the assistant turn a follow-up renders.
api::ApiMessage assistant_turn(const api::CompletionOutput& out) {
  api::ApiMessage m;
  m.role = "assistant";
  m.content = out.content;
  m.reasoning_content = out.reasoning;
  for (const api::ToolCallOut& tc : out.tool_calls) m.tool_calls.push_back({tc.id, tc.name, tc.arguments});
  return m;
}

struct ResponsesStreamState {
  std::shared_ptr<Job> job;
  PreparedRequest prep;
  std::unique_ptr<Assembler> assembler;
  std::unique_ptr<api::ResponsesStream> stream;
  std::vector<api::ApiMessage> conversation;  // without this response's output yet
  std::string id;
  bool store = false;
};

}  // namespace

void Server::Impl::apply_replay(PreparedRequest& prep) {
  if (options.replay_outputs.empty()) return;
  const size_t k = replay_next.fetch_add(1);
  if (k < options.replay_outputs.size()) {
    prep.gen.forced_output = engine.tokenize(options.replay_outputs[k], /*parse_special=*/true);
    prep.gen.forced_output.push_back(engine.info().eos_id);
  }
}

void Server::Impl::handle_responses(const http::Request& req, http::Response& res) {
  const ApiKind kind = ApiKind::kChat;  // OpenAI error shapes
  if (rejected_form_body(kind, req, res)) return;
  auto parsed = api::parse_responses_request(req.body);
  if (!parsed.ok()) return send_error(kind, res, api::api_error_from_status(parsed.status()), "bad_request");
  api::ResponsesRequest& r = *parsed;

  // The conversation: the stored chain, then this input. Instructions go first, unstored.
  std::vector<api::ApiMessage> conversation;
  if (!r.previous_response_id.empty()) {
    auto prev = response_store->get(r.previous_response_id);
    if (!prev)
      return send_error(kind, res,
                        not_found_error("Previous response with id '" + r.previous_response_id + "' not found." +
                                            (response_store->capacity() == 0 ? " (This server stores no responses: "
                                                                               "--response-store is 0.)"
                                                                             : ""),
                                        "previous_response_id"),
                        "not_found");
    conversation = prev->conversation;
  }
  conversation.insert(conversation.end(), r.chat.messages.begin(), r.chat.messages.end());
  api::ChatCompletionRequest chat = r.chat;
  chat.messages.clear();
  if (r.instructions && !r.instructions->empty()) {
    api::ApiMessage sys;
    sys.role = "system";
    sys.content = *r.instructions;
    chat.messages.push_back(std::move(sys));
  }
  chat.messages.insert(chat.messages.end(), conversation.begin(), conversation.end());

  PreparedRequest prep;
  if (auto err = prepare_chat(engine, chat, kind, options.default_system_prompt, prep))
    return send_error(kind, res, *err, err->code == "context_length_exceeded" ? "context" : "bad_request");
  apply_replay(prep);

  const std::shared_ptr<Job> job = submit_job(kind, prep, req, res);
  if (job == nullptr) return;

  api::ResponsesMeta meta;
  meta.id = new_id("resp_");
  meta.created_at = static_cast<int64_t>(std::time(nullptr));
  meta.echo = api::responses_echo(r);
  if (meta.echo.model.empty()) meta.echo.model = model_id();
  const std::string call_prefix = "call_" + meta.id.substr(5) + "_";
  const bool store = r.store;

  if (!prep.stream) {
    Assembler assembler(engine, prep, call_prefix);
    GenerationResult g;
    if (!await_unstreamed(kind, *job, assembler, req, res, &g)) return;  // as on the other routes
    const api::CompletionOutput out = assembler.finish(g);
    std::string body = api::responses_response_json(meta, out);
    if (store) {
      conversation.push_back(assistant_turn(out));
      response_store->put({meta.id, body, std::move(conversation)});
    }
    res.set_content(std::move(body), "application/json");
    return;
  }

  auto st = std::make_shared<ResponsesStreamState>();
  st->job = job;
  st->prep = std::move(prep);
  st->assembler = std::make_unique<Assembler>(engine, st->prep, call_prefix);
  st->stream = std::make_unique<api::ResponsesStream>(meta);
  st->conversation = std::move(conversation);
  st->store = store;
  st->id = meta.id;
  ResponseStore* store_ptr = response_store.get();
  StreamRender render;
  render.begin = [st] { return st->stream->begin(); };
  render.delta = [st](const std::vector<api::OutputEvent>& ev, const std::vector<api::TokenLogprobInfo>&,
                      const std::string&) { return st->stream->events(ev); };
  render.error = [st](const api::ApiError& e) { return st->stream->fail(e); };
  render.finish = [st, store_ptr](const api::CompletionOutput& o) {
    std::string out = st->stream->finish(o);
    if (st->store) {
      st->conversation.push_back(assistant_turn(o));
      store_ptr->put({st->id, st->stream->final_json(), std::move(st->conversation)});
    }
    return out;
  };
  stream_job(res, job, st->assembler.get(), st, std::move(render));
}

void Server::Impl::handle_response_lookup(const http::Request& req, http::Response& res, bool erase) {
  const std::string id = req.matches[1];
  if (erase) {
    if (!response_store->erase(id))
      return send_error(ApiKind::kChat, res, not_found_error("Response with id '" + id + "' not found.", "response_id"),
                        "not_found");
    const nlohmann::json body = {{"id", id}, {"object", "response"}, {"deleted", true}};
    res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
    return;
  }
  auto r = response_store->get(id);
  if (!r)
    return send_error(ApiKind::kChat, res, not_found_error("Response with id '" + id + "' not found.", "response_id"),
                      "not_found");
  res.set_content(r->response_json, "application/json");
}

}  // namespace dsv4::server::serve
