// forward_thread: what every forward_runner shares, written once. It owns
// the thread that runs queued batches one after the other, stop(), the trace
// and skip-notify settings, and the steps after a layer's KV write was
// enqueued (layer_written: timestamp, notify unless skipped, the notifier's
// cost, the trace span). A device's forward (cpu_forward, the GPU forward in
// device/gpu_device.cpp) derives from it and implements execute().
//
// Lifecycle: the derived constructor calls start() last (the thread calls
// execute(), so the derived object must be complete) and the derived
// destructor calls stop() first (before the members execute() uses go).
// Thread contract: forward_runner's (model/forward.hpp).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/trace.hpp"
#include "model/forward.hpp"

namespace layerstream {

class forward_thread : public forward_runner {
 public:
  ~forward_thread() override;
  forward_thread(const forward_thread&) = delete;
  forward_thread& operator=(const forward_thread&) = delete;

  void run(forward_batch batch) final;
  void stop() final;
  void set_trace(std::shared_ptr<trace_recorder> trace, uint32_t pid) final;
  void set_skip_notify(std::vector<uint32_t> layers) final;

 protected:
  forward_thread(notify_fn notify, done_fn done);

  /// Starts the forward thread (the derived constructor's last step).
  void start();

  /// Runs one batch on the forward thread and ends with finish().
  virtual void execute(const forward_batch& batch) = 0;

  /// `layer`'s KV write is enqueued: records when, calls the notifier
  /// (unless the layer is in skip_notify), records the notifier's cost and
  /// the trace span "<what> <layer>" from `t0` (steady_ns).
  void layer_written(forward_timing& timing, uint32_t layer, int64_t t0, const char* what);

  /// Reports the batch as done.
  void finish(uint64_t batch_id, forward_timing timing);

  /// stop() was called: the cpu forward checks it during each layer's
  /// compute and ends its batch there, so stop() does not wait it out.
  bool stop_requested() const { return stop_requested_.load(std::memory_order_relaxed); }

 private:
  void loop();

  notify_fn notify_;
  done_fn done_;
  std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<forward_batch> queue_;
  bool stopping_ = false;
  std::atomic<bool> stop_requested_{false};
  std::shared_ptr<trace_recorder> trace_;
  uint32_t trace_pid_ = 0;
  std::vector<uint32_t> skip_notify_;
  std::thread thread_;
};

} // namespace layerstream
