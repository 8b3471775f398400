// A first-in-first-out queue whose entries can also be found and taken out
// by key. Rooms waiting for pages use it (the prefill scheduler's src pages,
// the decode receiver's dst pages): they take pages in arrival order, head
// first, and any one of them may leave early in O(1) (its deadline, a close,
// a failure), which a plain deque would make a linear search each time. The
// control-plane gate keeps its challenges and sessions in it: oldest dropped
// first, and a used challenge or a replaced session taken out at once.
//
// Not thread-safe: each actor owns its own.
#pragma once

#include <cstddef>
#include <functional>
#include <iterator>
#include <list>
#include <optional>
#include <unordered_map>
#include <utility>

namespace layerstream {

template <class Key, class Value, class Hash = std::hash<Key>>
class keyed_fifo {
  using entries = std::list<std::pair<Key, Value>>;

 public:
  keyed_fifo() = default;
  // The index holds iterators into the list: a copy would point into the
  // original, a move keeps them valid.
  keyed_fifo(const keyed_fifo&) = delete;
  keyed_fifo& operator=(const keyed_fifo&) = delete;
  keyed_fifo(keyed_fifo&&) noexcept = default;
  keyed_fifo& operator=(keyed_fifo&&) noexcept = default;
  ~keyed_fifo() = default;

  [[nodiscard]] bool empty() const { return order_.empty(); }
  [[nodiscard]] size_t size() const { return order_.size(); }
  [[nodiscard]] bool contains(const Key& key) const { return where_.count(key) > 0; }

  /// Appends `value` under `key`; false (and `value` dropped) if `key` is
  /// in already.
  [[nodiscard]] bool push_back(const Key& key, Value value) {
    if (contains(key))
      return false;
    order_.emplace_back(key, std::move(value));
    where_.emplace(key, std::prev(order_.end()));
    return true;
  }

  /// The head, oldest first. Only when not empty.
  [[nodiscard]] const Key& front_key() const { return order_.front().first; }
  [[nodiscard]] Value& front() { return order_.front().second; }

  /// Takes the head out. Only when not empty.
  Value pop_front() {
    auto value = std::move(order_.front().second);
    where_.erase(order_.front().first);
    order_.pop_front();
    return value;
  }

  /// `key`'s value, or null.
  [[nodiscard]] Value* find(const Key& key) {
    auto i = where_.find(key);
    return i == where_.end() ? nullptr : &i->second->second;
  }

  /// Takes `key`'s entry out wherever it is; none if it is not in.
  std::optional<Value> take(const Key& key) {
    auto i = where_.find(key);
    if (i == where_.end())
      return std::nullopt;
    std::optional<Value> value{std::move(i->second->second)};
    order_.erase(i->second);
    where_.erase(i);
    return value;
  }

  /// How many entries are ahead of `key` (linear: for status replies, not
  /// for the wait itself); none if it is not in.
  [[nodiscard]] std::optional<size_t> position(const Key& key) const {
    auto i = where_.find(key);
    if (i == where_.end())
      return std::nullopt;
    return static_cast<size_t>(
        std::distance(order_.begin(), typename entries::const_iterator{i->second}));
  }

  /// Calls `fn(key, value)` for each entry, head first.
  template <class F>
  void for_each(F&& fn) {
    for (auto& [key, value] : order_)
      fn(key, value);
  }

 private:
  entries order_;
  std::unordered_map<Key, typename entries::iterator, Hash> where_;
};

} // namespace layerstream
