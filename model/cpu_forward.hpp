// The simulated forward pass on the CPU: one thread that runs forward
// batches layer by layer.
//
// For each layer it passes the configured compute time (busy, or asleep
// like a host waiting for a GPU: compute_wait), writes the layer's KV rows
// of every request in the batch into the prefill pool (kv_pattern bytes),
// then calls the notifier, which records one event and sends one layer_end.
// After the last layer it reports the batch as done. The forward thread
// never waits for a transfer and is not an actor.
//
// Thread contract: forward_runner's (model/forward.hpp); the thread and
// queue are forward_thread's.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <caf/expected.hpp>

#include "model/forward_thread.hpp"
#include "model/kv_pool.hpp"

namespace layerstream {

/// How the simulated forward thread passes a layer's compute time
/// (model.compute_wait).
enum class compute_wait {
  /// Busy the whole time: a host that computes, and keeps its core.
  spin,
  /// Asleep until `sleep_margin` before the layer's end, then busy: a host
  /// thread that waits for a GPU leaves its core to other threads. The short
  /// spin keeps the layer's end on time (a sleep here overshoots by ~80 us).
  sleep,
};

/// "spin" or "sleep"; any other text is bad_input.
caf::expected<compute_wait> parse_compute_wait(const std::string& text);

class cpu_forward final : public forward_thread {
 public:
  /// How early a sleeping layer wakes to spin to its end.
  static constexpr std::chrono::microseconds sleep_margin{150};

  cpu_forward(kv_pool& pool, std::chrono::microseconds layer_compute, compute_wait wait,
              notify_fn notify, done_fn done);
  ~cpu_forward() override;

 private:
  void execute(const forward_batch& batch) override;

  kv_pool& pool_;
  std::chrono::microseconds layer_compute_;
  compute_wait wait_;
};

/// Busy-waits until `until` (a stand-in for GPU work that keeps the thread busy).
void spin_until(std::chrono::steady_clock::time_point until);

/// Busy-waits for `d`.
void spin_for(std::chrono::microseconds d);

} // namespace layerstream
