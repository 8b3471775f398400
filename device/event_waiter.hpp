// event_waiter: one thread that completes recorded device events in order.
//
// The CUDA event source (device/cuda_event.hpp) hands every event it records
// to a waiter: the handle of the device event (a cudaEvent_t) plus the
// host_event that contexts hold. The waiter thread takes them in record
// order, blocks in `wait(handle)` (cudaEventSynchronize on its own thread,
// never the forward thread's), completes the host_event with the outcome
// (which runs the contexts' callbacks: each sends one event_ready), and then
// gives the handle back through `release(handle)` (to the event pool). So a
// handle returns to the pool only after every callback registered before the
// completion ran; callbacks registered later run at once on their own thread
// and never touch the handle.
//
// Kept free of CUDA so that its ordering, once-only and failure rules are
// tested on machines without a GPU (tests/gpu/event_waiter_test.cpp).
//
// Threading: push() from any thread (the forward thread): it takes a short
// lock and wakes the waiter; it never waits for the device. The destructor
// waits for every queued event (they are on a stream; they finish), then joins.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "device/host_event.hpp"

namespace layerstream {

class event_waiter {
 public:
  using handle = std::uintptr_t;
  /// Blocks until `handle`'s device work finished; no error = success.
  using wait_fn = std::function<caf::error(handle)>;
  /// Takes `handle` back once its event completed and its callbacks ran.
  using release_fn = std::function<void(handle)>;

  event_waiter(wait_fn wait, release_fn release);
  ~event_waiter();
  event_waiter(const event_waiter&) = delete;
  event_waiter& operator=(const event_waiter&) = delete;

  /// Queues `h` (already recorded on its stream) to complete `ev`.
  void push(handle h, std::shared_ptr<host_event> ev);

  /// Events queued and not yet completed.
  size_t pending() const;

 private:
  struct entry {
    handle h = 0;
    std::shared_ptr<host_event> ev;
  };

  void loop();

  wait_fn wait_;
  release_fn release_;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<entry> queue_;
  size_t in_wait_ = 0; // 1 while the thread waits for an entry it took off the queue
  bool stopping_ = false;
  std::thread thread_; // last: starts after everything it uses
};

} // namespace layerstream
