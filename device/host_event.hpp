// Host (CPU) implementation of the device-event interface.
//
// host_event completes when signal() is called, from any thread. Used by the
// CPU model (whose layer write is done before the notifier runs, so its
// source records events that are already complete) and by tests, which keep
// every recorded event and complete or fail each one by hand.
#pragma once

#include <mutex>
#include <vector>

#include "device/event.hpp"

namespace layerstream {

class host_event final : public device_event {
 public:
  host_event() = default;

  /// An event that is already complete with `status`.
  explicit host_event(caf::error status);

  void on_complete(callback done) override;

  /// Completes the event (no error = success) and runs every callback once,
  /// on this thread, outside the lock. Later calls are ignored.
  void signal(caf::error status = caf::error{});

  bool done() const;

  /// How many callbacks wait for this event (tests use it to see who asked).
  size_t waiting() const;

 private:
  mutable std::mutex mtx_;
  bool done_ = false;
  caf::error status_;
  std::vector<callback> waiting_;
};

/// Source for CPU runs: the simulated layer wrote its KV synchronously
/// before notifying, so each recorded event is already complete. One
/// process-wide event serves every record() call: no allocation per layer,
/// and no reference count either (it never dies), so that copies held by
/// many contexts on other cores do not make the forward thread's record()
/// wait for a contended cache line.
class completed_event_source final : public event_source {
 public:
  completed_event_source();

  event_ptr record(stream_handle stream) override;

 private:
  event_ptr done_;
};

/// Source for tests: every recorded event stays pending until the test
/// signals it. Thread-safe.
class scripted_event_source final : public event_source {
 public:
  event_ptr record(stream_handle stream) override;

  /// The i-th recorded event (0-based), or nullptr if none.
  std::shared_ptr<host_event> recorded(size_t i) const;
  size_t count() const;

 private:
  mutable std::mutex mtx_;
  std::vector<std::shared_ptr<host_event>> recorded_;
};

} // namespace layerstream
