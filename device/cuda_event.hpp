// CUDA implementation of the device-event interface, and the RAII owner of
// a CUDA stream.
//
// cuda_event_source owns a pool of cudaEvent_t (created once, with
// cudaEventDisableTiming | cudaEventBlockingSync) and one event_waiter
// thread. record(stream) takes a free event from the pool, records it on
// the caller's compute stream (cudaEventRecord: enqueues, never waits) and
// queues it to the waiter; the returned device_event is a host_event that the
// waiter completes. The waiter blocks in cudaEventSynchronize on its own
// thread (BlockingSync: it sleeps instead of spinning a core), completes the
// host_event (the contexts' callbacks send event_ready) and then puts the
// cudaEvent_t back in the pool.
//
// Why a waiter thread, not cudaStreamWaitEvent + cudaLaunchHostFunc on a
// watcher stream: a host function may not call CUDA, runs on the driver's
// own thread (which then runs our actor sends), and after a sticky error
// (a kernel fault) it is never called at all, so the layer would hang. A
// waiter's cudaEventSynchronize returns that error instead, and it becomes a
// failed layer: lserr::event_failed with cudaGetErrorString's text.
//
// A failed cudaEventRecord (e.g. the context already has a sticky error)
// gives an event that is already failed with the same kind of error. An
// empty pool grows by one event (cudaEventCreate does not wait for the
// device); `capacity` is sized so that this does not happen in steady state
// (layers in flight x pipelined batches).
//
// Lifecycle: create() makes the pool; the destructor first stops the waiter
// (which waits for every recorded event), then destroys every event it
// created. Threading: record() from one or more threads (a lock around the
// free list); the waiter thread runs the callbacks.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/error.hpp"
#include "device/event.hpp"
#include "device/event_waiter.hpp"

namespace layerstream {

/// Owns one CUDA stream (non-blocking w.r.t. the legacy default stream).
class cuda_stream {
 public:
  static caf::expected<cuda_stream> create();
  cuda_stream() = default;
  ~cuda_stream();
  cuda_stream(cuda_stream&& other) noexcept;
  cuda_stream& operator=(cuda_stream&& other) noexcept;
  cuda_stream(const cuda_stream&) = delete;
  cuda_stream& operator=(const cuda_stream&) = delete;

  /// The cudaStream_t, as the event interface carries it.
  stream_handle handle() const { return handle_; }

  /// Waits for everything enqueued so far (tests and shutdown, never the forward thread).
  caf::error synchronize() const;

 private:
  stream_handle handle_ = 0;
};

/// Counters of the pool (tests check reuse with them).
struct cuda_event_counters {
  uint64_t created = 0;  ///< cudaEvent_t created in all (capacity + growth)
  uint64_t recorded = 0; ///< record() calls that recorded an event
  uint64_t failed = 0;   ///< record() calls whose cudaEventRecord failed
  uint64_t free = 0;     ///< events in the pool now
};

class cuda_event_source final : public event_source {
 public:
  /// Creates `capacity` events up front. Fails if CUDA has no usable device.
  static caf::expected<std::unique_ptr<cuda_event_source>> create(size_t capacity = 256);
  ~cuda_event_source() override;
  cuda_event_source(const cuda_event_source&) = delete;
  cuda_event_source& operator=(const cuda_event_source&) = delete;

  /// Records one pooled event on `stream` (a cudaStream_t; 0 = the legacy
  /// default stream). Never blocks on the device.
  event_ptr record(stream_handle stream) override;

  cuda_event_counters counters() const;

  /// Events recorded and not yet completed and returned.
  size_t pending() const { return waiter_ ? waiter_->pending() : 0; }

 private:
  cuda_event_source() = default;
  caf::expected<std::uintptr_t> take();
  void give_back(std::uintptr_t ev);

  mutable std::mutex mtx_;
  std::vector<std::uintptr_t> all_;  // every event created: the owner list
  std::vector<std::uintptr_t> free_; // those in the pool now
  uint64_t recorded_ = 0;
  uint64_t failed_ = 0;
  std::unique_ptr<event_waiter> waiter_; // stopped first (destructor)
};

/// Number of CUDA devices; an error (with cudaGetErrorString's text) when the
/// runtime has none or no driver. Tests skip on an error or 0.
caf::expected<int> cuda_device_count();

} // namespace layerstream
