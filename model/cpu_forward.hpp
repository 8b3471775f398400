// The simulated forward pass on the CPU: one thread that runs forward
// batches layer by layer.
//
// For each layer it spins for the configured compute time, writes the
// layer's KV rows of every request in the batch into the prefill pool
// (kv_pattern bytes), then calls the notifier, which records one event and
// sends one layer_end. After the last layer it reports the batch as done.
// The forward thread never waits for a transfer and is not an actor.
//
// Thread contract: run() may be called from any thread (the scheduler
// actor); batches run one after the other on the forward thread; stop()
// (and the destructor) finishes the running batch and joins.
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
#include "model/kv_pool.hpp"

namespace layerstream {

/// The tokens one request writes in one forward batch (its owned part of the chunk).
struct forward_item {
  uint64_t room = 0;
  /// Request pages, one entry per request page (entries outside [first, last) unused).
  std::vector<uint64_t> pages;
  uint64_t first_token = 0;
  uint64_t last_token = 0;
  uint64_t prompt_tokens = 0;
};

struct forward_batch {
  uint64_t id = 0;
  std::vector<forward_item> items;
};

/// Timestamps of one finished batch (steady clock).
struct forward_timing {
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point end;
  /// Per layer: when its KV write finished (just before the notifier call).
  std::vector<std::chrono::steady_clock::time_point> layer_written;
  /// Per layer: how long the notifier call took, ns (the forward thread's cost).
  std::vector<int64_t> notify_ns;
};

class cpu_forward {
 public:
  using notify_fn = std::function<void(uint32_t layer)>;
  using done_fn = std::function<void(uint64_t batch_id, forward_timing timing)>;

  cpu_forward(kv_pool& pool, std::chrono::microseconds layer_compute, notify_fn notify,
              done_fn done);
  ~cpu_forward();
  cpu_forward(const cpu_forward&) = delete;
  cpu_forward& operator=(const cpu_forward&) = delete;

  /// Queues a batch; it runs after the ones queued before it.
  void run(forward_batch batch);

  /// Finishes the running batch, drops queued ones, joins the thread.
  void stop();

  /// Records compute spans into `trace` as process `pid`; call before run().
  void set_trace(std::shared_ptr<trace_recorder> trace, uint32_t pid);

  /// TESTING ONLY (workload.skip_notify_layers): the forward writes these
  /// layers but never calls the notifier for them, as if their layer_end were
  /// lost; the scheduler's reconcile must send them by the bulk path. Call
  /// before run().
  void set_skip_notify(std::vector<uint32_t> layers);

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
