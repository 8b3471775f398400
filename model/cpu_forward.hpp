// The simulated forward pass on the CPU: one thread that runs forward
// batches layer by layer.
//
// For each layer it spins for the configured compute time, writes the
// layer's KV rows of every request in the batch into the prefill pool
// (kv_pattern bytes), then calls the notifier, which records one event and
// sends one layer_end. After the last layer it reports the batch as done.
// The forward thread never waits for a transfer and is not an actor.
//
// Thread contract: forward_runner's (model/forward.hpp).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/trace.hpp"
#include "model/forward.hpp"
#include "model/kv_pool.hpp"

namespace layerstream {

class cpu_forward final : public forward_runner {
 public:
  cpu_forward(kv_pool& pool, std::chrono::microseconds layer_compute, notify_fn notify,
              done_fn done);
  ~cpu_forward() override;
  cpu_forward(const cpu_forward&) = delete;
  cpu_forward& operator=(const cpu_forward&) = delete;

  void run(forward_batch batch) override;
  void stop() override;
  void set_trace(std::shared_ptr<trace_recorder> trace, uint32_t pid) override;
  void set_skip_notify(std::vector<uint32_t> layers) override;

 private:
  void loop();
  void execute(const forward_batch& batch);

  kv_pool& pool_;
  std::chrono::microseconds layer_compute_;
  notify_fn notify_;
  done_fn done_;
  std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<forward_batch> queue_;
  bool stopping_ = false;
  std::shared_ptr<trace_recorder> trace_;
  uint32_t trace_pid_ = 0;
  std::vector<uint32_t> skip_notify_;
  std::thread thread_;
};

/// Busy-waits for `d` (a stand-in for GPU work that keeps the thread busy).
void spin_for(std::chrono::microseconds d);

} // namespace layerstream
