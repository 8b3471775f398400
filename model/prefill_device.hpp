// prefill_device: what a prefill rank's scheduler needs from the device that
// runs its forward, and nothing more:
//   - the pool's geometry (kv_layout: layers, pages, item_len, ...);
//   - the src pointer lists the transfer writes from, and the one memory
//     range they lie in (the transport registers it);
//   - the event source and the stream the notifier records each layer on;
//   - a forward maker (the thread that writes the KV layer by layer).
//
// cpu_device (here) is the host pool, cpu_forward and already-complete host
// events. gpu_device (device/gpu_device.hpp, CUDA builds only) is a pool in
// device memory, a kernel per layer, CUDA events and a kv_export (staging
// through pinned host memory, or direct FI_HMEM). node/device_select.hpp
// picks one from the config.
//
// Lifecycle: the device outlives the scheduler and the transport that use
// it (prefill_node declares it first). The forward it makes must be stopped
// before the device goes away (the scheduler's state destroys it first).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/error.hpp"
#include "common/memory_span.hpp"
#include "config/config.hpp"
#include "device/event.hpp"
#include "device/host_event.hpp"
#include "model/cpu_forward.hpp"
#include "model/forward.hpp"
#include "model/kv_pool.hpp"

namespace layerstream {

class prefill_device {
 public:
  virtual ~prefill_device() = default;

  /// "cpu", "gpu (staging)", "gpu (hmem)": logs and bench output.
  virtual std::string name() const = 0;

  /// The pool's geometry (sizes and checks; its base may be device memory).
  virtual const kv_layout& layout() const = 0;

  /// Per-layer src base pointers, as transfer math uses them (for staging:
  /// the host mirror's addresses).
  virtual std::vector<uint64_t> src_k_ptrs() const = 0;
  virtual std::vector<uint64_t> src_v_ptrs() const = 0;
  /// The memory the transport registers and writes from.
  virtual memory_span src() const = 0;

  /// The notifier's event source and stream.
  virtual event_source& events() = 0;
  virtual stream_handle notify_stream() const = 0;

  /// The forward thread: `layer_compute` of compute per layer, then the
  /// layer's KV write, then `notify(layer)`; `done` after each batch.
  virtual caf::expected<std::unique_ptr<forward_runner>>
  make_forward(std::chrono::microseconds layer_compute, forward_runner::notify_fn notify,
               forward_runner::done_fn done) = 0;
};

/// The host pool, cpu_forward and already-complete host events.
class cpu_device final : public prefill_device {
 public:
  static caf::expected<std::unique_ptr<cpu_device>> create(const model_config& model,
                                                           uint64_t pages);

  std::string name() const override { return "cpu"; }
  const kv_layout& layout() const override { return *pool_; }
  std::vector<uint64_t> src_k_ptrs() const override { return pool_->k_ptrs(); }
  std::vector<uint64_t> src_v_ptrs() const override { return pool_->v_ptrs(); }
  memory_span src() const override { return {pool_->base(), pool_->bytes(), false, 0}; }
  event_source& events() override { return events_; }
  stream_handle notify_stream() const override { return 0; }
  caf::expected<std::unique_ptr<forward_runner>>
  make_forward(std::chrono::microseconds layer_compute, forward_runner::notify_fn notify,
               forward_runner::done_fn done) override;

  /// The host pool (tests and the bench read it).
  kv_pool& pool() { return *pool_; }

 private:
  cpu_device(std::unique_ptr<kv_pool> pool, compute_wait wait)
      : pool_(std::move(pool)), wait_(wait) {}
  std::unique_ptr<kv_pool> pool_;
  compute_wait wait_;
  completed_event_source events_;
};

} // namespace layerstream
