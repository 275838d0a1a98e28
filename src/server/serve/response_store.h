// server/serve/response_store.h — the last N responses of /v1/responses, in memory, for
// previous_response_id and GET/DELETE /v1/responses/{id}.
//
// Owns: a bounded map id → stored response (its final `response` object JSON and the whole
// conversation that led to it: every input message of the chain and this response's output as an
// assistant message, without instructions). Capacity = `dsv4 serve --response-store N` (flag
// registry, default 100); beyond it the oldest entry is dropped; 0 stores nothing. Nothing is
// written to disk; a restart forgets everything. Thread-safe (HTTP threads read and write it).
//
//   ResponseStore store(100);
//   store.put({id, json, conversation});
//   if (auto r = store.get(prev_id)) messages = r->conversation;
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/api/openai_chat.h"

namespace dsv4::server::serve {

struct StoredResponse {
  std::string id;
  std::string response_json;                  // the final response object (what GET returns)
  std::vector<api::ApiMessage> conversation;  // the chain's messages incl. this response's output
};

class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}

  void put(StoredResponse r);  // replaces an entry with the same id; evicts the oldest beyond capacity
  std::shared_ptr<const StoredResponse> get(const std::string& id) const;
  bool erase(const std::string& id);
  size_t size() const;
  size_t capacity() const { return capacity_; }

 private:
  using Entry = std::shared_ptr<const StoredResponse>;
  mutable std::mutex mu_;
  size_t capacity_;
  std::list<Entry> order_;  // oldest first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_id_;
};

}  // namespace dsv4::server::serve
