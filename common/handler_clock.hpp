// Optional CPU accounting of actor message handlers, for benchmarks:
// `bench tail` gives the manager and the contexts one shared counter and
// reports their handling per layer and per room, apart from the CAF
// runtime's own polling. A null counter costs one branch.
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>
#include <memory>

namespace layerstream {

using handler_cpu_counter = std::shared_ptr<std::atomic<int64_t>>;

/// Adds the calling thread's CPU time between construction and destruction
/// to `counter` (when set).
class handler_clock {
 public:
  explicit handler_clock(const handler_cpu_counter& counter) : counter_{counter.get()} {
    if (counter_)
      start_ = thread_cpu_ns();
  }
  ~handler_clock() {
    if (counter_)
      counter_->fetch_add(thread_cpu_ns() - start_, std::memory_order_relaxed);
  }
  handler_clock(const handler_clock&) = delete;
  handler_clock& operator=(const handler_clock&) = delete;

  static int64_t thread_cpu_ns() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }

 private:
  std::atomic<int64_t>* counter_;
  int64_t start_ = 0;
};

} // namespace layerstream
