// gpu_device: a prefill rank whose forward runs on a CUDA device.
//
//   - the KV pool in device memory (gpu_kv_pool, one cudaMalloc);
//   - a compute stream the forward enqueues on, per layer: the layer's
//     compute (a kernel that waits layer_compute on the device's timer),
//     then kv_fill for every request of the batch, then the export's stage;
//   - a kv_export: staging (a pinned host mirror; the transport registers
//     and writes from it) or, where the fabric registers CUDA memory, hmem;
//   - CUDA events (cuda_event_source) recorded on the export's notify stream.
//
// The forward thread (gpu_forward, gpu_device.cpp) never waits for the
// device inside a batch: it enqueues and notifies. Before the batch it
// uploads the requests' page tables (a synchronous copy); after the last
// layer it synchronizes the compute stream once, so batch_done's end time
// is when the device finished the forward and a sticky CUDA error becomes
// the batch's status. The last layers' staging copies may still be running
// then: that is the exposed tail, and their events report them. batch_done
// itself goes out once the export's copies landed too: the bulk path, sent
// at batch_done, reads them.
//
// No CUDA types here: node/device_select.cpp (g++) includes it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/error.hpp"
#include "config/config.hpp"
#include "device/cuda_event.hpp"
#include "device/kv_export.hpp"
#include "model/gpu_kv_pool.hpp"
#include "model/prefill_device.hpp"

namespace layerstream {

/// Whether the fabric registers [ptr, ptr + len) of CUDA device `device`
/// (an empty error), or why not. node/device_select.cpp supplies one that
/// tries the registration on the rank's provider.
using registration_probe = std::function<caf::error(void* ptr, uint64_t len, int device)>;

class gpu_device final : public prefill_device {
 public:
  /// Opens the current CUDA device: pool, compute stream, export and events.
  /// `kv_export` (prefill.kv_export): "staging"; "hmem", refused with the
  /// probe's reason where the fabric cannot register the pool; "auto", hmem
  /// where the probe succeeds, staging otherwise (the reason is logged).
  /// Fails with the reason where there is no usable device.
  static caf::expected<std::unique_ptr<gpu_device>>
  create(const model_config& model, uint64_t pages, const std::string& kv_export = "staging",
         const registration_probe& probe = nullptr);
  ~gpu_device() override;
  gpu_device(const gpu_device&) = delete;
  gpu_device& operator=(const gpu_device&) = delete;

  std::string name() const override { return std::string{"gpu ("} + export_->name() + ")"; }
  const kv_layout& layout() const override { return *pool_; }
  std::vector<uint64_t> src_k_ptrs() const override { return export_->k_ptrs(); }
  std::vector<uint64_t> src_v_ptrs() const override { return export_->v_ptrs(); }
  memory_span src() const override;
  event_source& events() override { return *events_; }
  stream_handle notify_stream() const override { return export_->notify_stream(); }
  caf::expected<std::unique_ptr<forward_runner>>
  make_forward(std::chrono::microseconds layer_compute, forward_runner::notify_fn notify,
               forward_runner::done_fn done) override;

  /// The device pool (tests copy it to the host to check its bytes).
  const gpu_kv_pool& pool() const { return *pool_; }

 private:
  gpu_device() = default;

  int cuda_device_ = 0;
  // Destroyed in reverse: events (their waiter), the export (synchronizes
  // its copy stream), the compute stream, then the pool.
  std::unique_ptr<gpu_kv_pool> pool_;
  cuda_stream compute_;
  std::unique_ptr<kv_export> export_;
  std::unique_ptr<cuda_event_source> events_;
};

} // namespace layerstream
