// The device-event interface: how the forward thread tells the transfer side
// that one layer's KV write has finished on the device.
//
// The notifier records ONE event per layer on the stream after which the
// layer's bytes are readable by the fabric (event_source::record): the
// compute stream, or the export's copy stream when it stages to a host
// mirror (device/kv_export.hpp); it hands the event to the manager; each context then asks
// the event for a completion callback (device_event::on_complete), which
// sends it `event_ready` from whatever thread sees the completion. Nothing
// ever waits on the forward thread or the compute stream.
//
// Implementations: host_event (CPU runs: complete once the simulated write is
// done, or signalled by hand in tests), cuda_event (device/cuda_event.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include <caf/error.hpp>

namespace layerstream {

class device_event {
 public:
  /// Called exactly once with the outcome: no error = the write completed.
  using callback = std::function<void(const caf::error&)>;

  virtual ~device_event() = default;

  /// Registers `done`. Thread-safe. If the event already completed, `done`
  /// runs at once on the calling thread; otherwise on the completing thread.
  /// Must not block.
  virtual void on_complete(callback done) = 0;
};

using event_ptr = std::shared_ptr<device_event>;

/// Opaque handle of a compute stream (a cudaStream_t for CUDA, unused on host).
using stream_handle = std::uintptr_t;

class event_source {
 public:
  virtual ~event_source() = default;

  /// Records one event on `stream` after the work enqueued so far. Called on
  /// the forward thread: must not block, must not wait for the device.
  virtual event_ptr record(stream_handle stream) = 0;
};

} // namespace layerstream
