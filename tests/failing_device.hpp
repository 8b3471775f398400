// failing_device: a cpu_device whose forward fails chosen batches, for the
// tests of what a failed forward does to its rooms (equivalence_test,
// scheduler_test); stalling_device: one whose forward hangs in a batch until
// the test lets it go (scheduler_test).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "model/prefill_device.hpp"

namespace layerstream::testing {

/// A cpu_device with a forward of its own: everything but the name and the
/// forward is the inner device's.
class wrapped_cpu_device : public prefill_device {
 public:
  explicit wrapped_cpu_device(std::unique_ptr<cpu_device> inner) : inner_(std::move(inner)) {}

  const kv_layout& layout() const override { return inner_->layout(); }
  std::vector<uint64_t> src_k_ptrs() const override { return inner_->src_k_ptrs(); }
  std::vector<uint64_t> src_v_ptrs() const override { return inner_->src_v_ptrs(); }
  memory_span src() const override { return inner_->src(); }
  event_source& events() override { return inner_->events(); }
  stream_handle notify_stream() const override { return inner_->notify_stream(); }

 protected:
  std::unique_ptr<cpu_device> inner_;
};

/// Holds a forward thread until the test opens it, or for 30 s at most.
class forward_gate {
 public:
  void open() {
    {
      std::lock_guard<std::mutex> guard{mutex_};
      open_ = true;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock{mutex_};
    cv_.wait_for(lock, std::chrono::seconds{30}, [this] { return open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

/// A cpu_device whose forward reports a device error for the batches in
/// `fail` (the rank's batch ids are 1, 2, ... in the order they run) after
/// notifying only the first `notified` layers of them, as a GPU forward does
/// when a kernel launch fails mid-batch. Its KV writes still happen: a room
/// of a failed batch must fail although its bytes would check out. `code`:
/// lserr::device_lost plays a sticky CUDA error (no forward can run again).
/// With a `gate`, a failing batch reports only once the gate opens.
class failing_device final : public wrapped_cpu_device {
 public:
  failing_device(std::unique_ptr<cpu_device> inner, std::vector<uint64_t> fail, uint32_t notified,
                 lserr code = lserr::event_failed, std::shared_ptr<forward_gate> gate = nullptr)
      : wrapped_cpu_device(std::move(inner)), fail_(std::move(fail)), notified_(notified),
        code_(code), gate_(std::move(gate)) {}

  std::string name() const override { return "cpu (failing)"; }

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
        [done, failing, running, code = code_, gate = gate_](uint64_t batch,
                                                             forward_timing timing) {
          if (failing()) {
            if (gate)
              gate->wait();
            timing.status = make_error(code, "kv_fill launch failed (test)");
          }
          ++*running;
          done(batch, std::move(timing));
        });
  }

 private:
  std::vector<uint64_t> fail_;
  uint32_t notified_;
  lserr code_;
  std::shared_ptr<forward_gate> gate_;
};

/// A cpu_device whose forward hangs in batch `stall_batch` (the rank's batch
/// ids are 1, 2, ... in the order they run) before it notifies layer
/// `stall_layer`, until `gate` opens: a device that does not come back, as
/// a kernel that never ends holds a GPU forward in cudaStreamSynchronize.
class stalling_device final : public wrapped_cpu_device {
 public:
  stalling_device(std::unique_ptr<cpu_device> inner, uint64_t stall_batch, uint32_t stall_layer,
                  std::shared_ptr<forward_gate> gate)
      : wrapped_cpu_device(std::move(inner)), stall_batch_(stall_batch), stall_layer_(stall_layer),
        gate_(std::move(gate)) {}

  std::string name() const override { return "cpu (stalling)"; }

  caf::expected<std::unique_ptr<forward_runner>>
  make_forward(std::chrono::microseconds layer_compute, forward_runner::notify_fn notify,
               forward_runner::done_fn done) override {
    auto running = std::make_shared<std::atomic<uint64_t>>(1);
    return inner_->make_forward(
        layer_compute,
        [notify, running, batch = stall_batch_, layer = stall_layer_, gate = gate_](uint32_t l) {
          if (running->load() == batch && l == layer)
            gate->wait();
          notify(l);
        },
        [done, running](uint64_t batch, forward_timing timing) {
          ++*running;
          done(batch, std::move(timing));
        });
  }

 private:
  uint64_t stall_batch_;
  uint32_t stall_layer_;
  std::shared_ptr<forward_gate> gate_;
};

} // namespace layerstream::testing
