// server/serve/response_store.cpp — the bounded response store (FIFO eviction).
#include "server/serve/response_store.h"

namespace dsv4::server::serve {

void ResponseStore::put(StoredResponse r) {
  if (capacity_ == 0) return;
  auto entry = std::make_shared<const StoredResponse>(std::move(r));
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = by_id_.find(entry->id); it != by_id_.end()) {
    order_.erase(it->second);
    by_id_.erase(it);
  }
  order_.push_back(entry);
  by_id_[entry->id] = std::prev(order_.end());
  while (order_.size() > capacity_) {
    by_id_.erase(order_.front()->id);
    order_.pop_front();
  }
}

std::shared_ptr<const StoredResponse> ResponseStore::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : *it->second;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  order_.erase(it->second);
  by_id_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return order_.size();
}

}  // namespace dsv4::server::serve
