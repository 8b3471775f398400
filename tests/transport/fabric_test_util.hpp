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
#include <rdma/fabric.h>

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

/// Whether libfabric offers `provider` here for RMA on a reliable datagram
/// endpoint at all: hints as loose as can be (every mode and MR mode bit
/// allowed), so that a provider the endpoint's stricter hints miss counts
/// as offered and its failure to open fails the test.
inline bool provider_offered(const std::string& provider) {
  fi_info* hints = fi_allocinfo();
  if (!hints)
    return false;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_RMA;
  hints->mode = ~uint64_t{0};
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                FI_MR_ENDPOINT | FI_MR_RAW | FI_MR_MMU_NOTIFY | FI_MR_RMA_EVENT;
  fi_info* info = nullptr;
  const int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
  fi_freeinfo(hints);
  if (info)
    fi_freeinfo(info);
  return rc == 0;
}

/// After `provider` failed to open (`why`): a skip only where libfabric
/// does not offer it, and never for tcp;ofi_rxm, which every machine this
/// runs on must have (libfabric-dev). Otherwise a broken endpoint or target
/// would turn a whole suite into skips. Call from a test body or a helper
/// run under ASSERT_NO_FATAL_FAILURE, then return if IsSkipped().
#define LS_SKIP_IF_PROVIDER_MISSING(provider, why)                                                 \
  do {                                                                                             \
    const std::string ls_provider_{provider};                                                      \
    if (::layerstream::test::provider_offered(ls_provider_))                                       \
      FAIL() << "provider \"" << ls_provider_ << "\" is offered here but did not open: " << (why); \
    if (ls_provider_ == "tcp;ofi_rxm")                                                             \
      FAIL() << "tcp;ofi_rxm is not offered here, and every test machine must have it: " << (why); \
    GTEST_SKIP() << "provider \"" << ls_provider_ << "\" not offered here: " << (why);             \
  } while (0)

/// gtest parameter name of a provider: "tcp;ofi_rxm" -> "tcp_ofi_rxm".
inline std::string provider_test_name(const ::testing::TestParamInfo<std::string>& param) {
  std::string name = param.param;
  for (char& c : name)
    if (c == ';')
      c = '_';
  return name;
}

} // namespace layerstream::test
