// Shared helpers of the transport tests: a completion collector, random
// bytes, and opening an endpoint or skipping when a provider is missing here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "transport/fabric/engine.hpp"

namespace layerstream::test {

/// Collects the engine's job results (called on the worker thread).
class completions {
 public:
  void push(fabric::job_result r) {
    std::lock_guard<std::mutex> guard{mutex_};
    ++calls_[r.id];
    results_[r.id] = std::move(r);
    cv_.notify_all();
  }

  /// The result of job `id`, or nothing after `timeout`.
  std::optional<fabric::job_result> wait(uint64_t id, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock{mutex_};
    if (!cv_.wait_for(lock, timeout, [&] { return results_.count(id) > 0; }))
      return std::nullopt;
    return results_[id];
  }

  /// Waits until `n` distinct jobs reported; false after `timeout`.
  bool wait_count(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock{mutex_};
    return cv_.wait_for(lock, timeout, [&] { return results_.size() >= n; });
  }

  /// How many callbacks job `id` got (must be 1).
  int calls(uint64_t id) {
    std::lock_guard<std::mutex> guard{mutex_};
    return calls_.count(id) > 0 ? calls_[id] : 0;
  }

  fabric::completion_fn callback() {
    return [this](fabric::job_result r) { push(std::move(r)); };
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<uint64_t, fabric::job_result> results_;
  std::map<uint64_t, int> calls_;
};

inline void fill_random(std::vector<uint8_t>& buf, std::mt19937_64& rng) {
  size_t i = 0;
  for (; i + 8 <= buf.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(buf.data() + i, &v, 8);
  }
  for (; i < buf.size(); ++i)
    buf[i] = static_cast<uint8_t>(rng());
}

inline uint64_t addr_of(const std::vector<uint8_t>& buf, uint64_t offset = 0) {
  return reinterpret_cast<uint64_t>(buf.data()) + offset;
}

/// gtest parameter name of a provider: "tcp;ofi_rxm" -> "tcp_ofi_rxm".
inline std::string provider_test_name(const ::testing::TestParamInfo<std::string>& param) {
  std::string name = param.param;
  for (char& c : name)
    if (c == ';')
      c = '_';
  return name;
}

} // namespace layerstream::test
