// The forward pass as the scheduler sees it: a thread that runs forward
// batches layer by layer, calls `notify(layer)` once a layer's KV write is
// enqueued (the notifier records one event on the device's notify stream),
// and reports each batch as done. Two implementations: cpu_forward
// (model/cpu_forward.hpp) and the GPU forward (device/gpu_device.hpp), both
// on forward_thread (model/forward_thread.hpp: the thread, queue and
// notify steps they share).
//
// Thread contract: run() may be called from any thread (the scheduler
// actor); batches run one after the other on the forward thread; stop()
// (and the destructor) ends the running batch (the cpu forward cuts it
// short inside a layer's compute and answers it `cancelled`; the GPU
// forward, which only enqueues, finishes it), drops queued ones and joins. set_trace /
// set_skip_notify are called before the first run().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <caf/error.hpp>

#include "common/trace.hpp"

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
  /// Per layer: when its KV write was enqueued (just before the notifier call).
  std::vector<std::chrono::steady_clock::time_point> layer_written;
  /// Per layer: how long the notifier call took, ns (the forward thread's cost).
  std::vector<int64_t> notify_ns;
  /// Set when the forward did not write the batch's KV (a failed kernel
  /// launch or copy, a device error at the end of the batch): the scheduler
  /// fails every room of the batch, and none goes by the bulk path.
  caf::error status;
};

class forward_runner {
 public:
  using notify_fn = std::function<void(uint32_t layer)>;
  using done_fn = std::function<void(uint64_t batch_id, forward_timing timing)>;

  virtual ~forward_runner() = default;

  /// Queues a batch; it runs after the ones queued before it.
  virtual void run(forward_batch batch) = 0;

  /// Ends the running batch (see the thread contract above), drops queued
  /// ones, joins the thread.
  virtual void stop() = 0;

  /// Records compute spans into `trace` as process `pid`.
  virtual void set_trace(std::shared_ptr<trace_recorder> trace, uint32_t pid) = 0;

  /// TESTING ONLY (workload.skip_notify_layers): the forward writes these
  /// layers but never calls the notifier for them, as if their layer_end were
  /// lost; the scheduler's reconcile must send them by the bulk path.
  virtual void set_skip_notify(std::vector<uint32_t> layers) = 0;
};

} // namespace layerstream
