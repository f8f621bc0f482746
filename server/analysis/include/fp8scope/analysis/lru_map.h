// A map bounded to a number of entries that forgets the least recently used one first, every
// operation O(1): per-tensor state must neither grow nor slow down with the number of tensors
// clients name (40,000 invented layers made a tree walk 88% of the daemon's CPU).
#pragma once

#include <algorithm>
#include <cstddef>
#include <list>
#include <unordered_map>
#include <utility>

namespace fp8scope::server {

template <class Key, class Value>
class LruMap {
 public:
  explicit LruMap(std::size_t capacity) : capacity_(std::max<std::size_t>(capacity, 1)) {}

  // The entry for key, now the most recent; made by make() when absent, after forgetting the
  // least recent entry if the map is full.
  template <class Make>
  Value& get_or_insert(const Key& key, Make make) {
    if (auto it = index_.find(key); it != index_.end()) {
      order_.splice(order_.end(), order_, it->second);
      return it->second->second;
    }
    if (order_.size() >= capacity_) {
      index_.erase(order_.front().first);
      order_.pop_front();
    }
    order_.emplace_back(key, make());
    index_.emplace(key, std::prev(order_.end()));
    return order_.back().second;
  }

  // Least recent first.
  template <class F>
  void for_each(F f) const {
    for (const auto& [key, value] : order_) f(key, value);
  }

  std::size_t size() const { return order_.size(); }

 private:
  std::size_t capacity_;
  std::list<std::pair<Key, Value>> order_;
  std::unordered_map<Key, typename std::list<std::pair<Key, Value>>::iterator> index_;
};

}  // namespace fp8scope::server
