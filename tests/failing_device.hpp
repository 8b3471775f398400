// failing_device: a cpu_device whose forward fails chosen batches, for the
// tests of what a failed forward does to its rooms (equivalence_test,
// scheduler_test).
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "model/prefill_device.hpp"

namespace layerstream::testing {

/// A cpu_device whose forward reports a device error for the batches in
/// `fail` (the rank's batch ids are 1, 2, ... in the order they run) after
/// notifying only the first `notified` layers of them, as a GPU forward does
/// when a kernel launch fails mid-batch. Its KV writes still happen: a room
/// of a failed batch must fail although its bytes would check out.
class failing_device final : public prefill_device {
 public:
  failing_device(std::unique_ptr<cpu_device> inner, std::vector<uint64_t> fail, uint32_t notified)
      : inner_(std::move(inner)), fail_(std::move(fail)), notified_(notified) {}

  std::string name() const override { return "cpu (failing)"; }
  const kv_layout& layout() const override { return inner_->layout(); }
  std::vector<uint64_t> src_k_ptrs() const override { return inner_->src_k_ptrs(); }
  std::vector<uint64_t> src_v_ptrs() const override { return inner_->src_v_ptrs(); }
  memory_span src() const override { return inner_->src(); }
  event_source& events() override { return inner_->events(); }
  stream_handle notify_stream() const override { return inner_->notify_stream(); }

  caf::expected<std::unique_ptr<forward_runner>>
  make_forward(std::chrono::microseconds layer_compute, forward_runner::notify_fn notify,
               forward_runner::done_fn done) override {
    // Batches run one after the other on the forward thread: the count of
    // done calls so far names the running batch.
    auto running = std::make_shared<std::atomic<uint64_t>>(1);
    auto failing = [fail = fail_, running] {
      return std::find(fail.begin(), fail.end(), running->load()) != fail.end();
    };
    return inner_->make_forward(
        layer_compute,
        [notify, failing, notified = notified_](uint32_t layer) {
          if (!failing() || layer < notified)
            notify(layer);
        },
        [done, failing, running](uint64_t batch, forward_timing timing) {
          if (failing())
            timing.status = make_error(lserr::event_failed, "kv_fill launch failed (test)");
          ++*running;
          done(batch, std::move(timing));
        });
  }

 private:
  std::unique_ptr<cpu_device> inner_;
  std::vector<uint64_t> fail_;
  uint32_t notified_;
};

} // namespace layerstream::testing
