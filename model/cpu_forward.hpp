// The simulated forward pass on the CPU: one thread that runs forward
// batches layer by layer.
//
// For each layer it spins for the configured compute time, writes the
// layer's KV rows of every request in the batch into the prefill pool
// (kv_pattern bytes), then calls the notifier, which records one event and
// sends one layer_end. After the last layer it reports the batch as done.
// The forward thread never waits for a transfer and is not an actor.
//
// Thread contract: forward_runner's (model/forward.hpp); the thread and
// queue are forward_thread's.
#pragma once

#include <chrono>
#include <cstdint>

#include "model/forward_thread.hpp"
#include "model/kv_pool.hpp"

namespace layerstream {

class cpu_forward final : public forward_thread {
 public:
  cpu_forward(kv_pool& pool, std::chrono::microseconds layer_compute, notify_fn notify,
              done_fn done);
  ~cpu_forward() override;

 private:
  void execute(const forward_batch& batch) override;

  kv_pool& pool_;
  std::chrono::microseconds layer_compute_;
};

/// Busy-waits for `d` (a stand-in for GPU work that keeps the thread busy).
void spin_for(std::chrono::microseconds d);

} // namespace layerstream
