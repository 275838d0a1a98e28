// server/serve/assembler.cpp — DsmlEvent → OutputEvent and the output_error body.
#include "server/serve/assembler.h"

namespace dsv4::server::serve {

api::OutputEvent to_api(const tokenizer::DsmlEvent& e) {
  api::OutputEvent o;
  switch (e.kind) {
    case tokenizer::DsmlEvent::Kind::kReasoning: o.kind = api::OutputEvent::Kind::kReasoning; break;
    case tokenizer::DsmlEvent::Kind::kContent: o.kind = api::OutputEvent::Kind::kContent; break;
    case tokenizer::DsmlEvent::Kind::kToolCallBegin: o.kind = api::OutputEvent::Kind::kToolCallBegin; break;
    case tokenizer::DsmlEvent::Kind::kToolCallArguments: o.kind = api::OutputEvent::Kind::kToolCallArguments; break;
    case tokenizer::DsmlEvent::Kind::kToolCallEnd: o.kind = api::OutputEvent::Kind::kToolCallEnd; break;
  }
  o.text = e.text;
  o.index = e.index;
  o.id = e.id;
  o.name = e.name;
  return o;
}

api::ApiError output_error(const Status& s) {
  api::ApiError e;
  e.http_status = 500;
  e.type = "server_error";
  e.message = "The model's output could not be parsed: " + s.message();
  e.code = "invalid_model_output";
  return e;
}

}  // namespace dsv4::server::serve
