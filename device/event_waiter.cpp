#include "device/event_waiter.hpp"

namespace layerstream {

event_waiter::event_waiter(wait_fn wait, release_fn release)
    : wait_(std::move(wait)), release_(std::move(release)), thread_([this] { loop(); }) {
  // nop
}

event_waiter::~event_waiter() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void event_waiter::push(handle h, std::shared_ptr<host_event> ev) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    queue_.push_back(entry{h, std::move(ev)});
  }
  cv_.notify_one();
}

size_t event_waiter::pending() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return queue_.size() + in_wait_;
}

void event_waiter::loop() {
  for (;;) {
    entry e;
    {
      std::unique_lock<std::mutex> guard{mtx_};
      cv_.wait(guard, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty())
        return; // stopping, and everything queued has completed
      e = std::move(queue_.front());
      queue_.pop_front();
      in_wait_ = 1;
    }
    // In record order: events on one stream complete in that order, so the
    // head is always the next to finish; across streams a later event waits
    // behind an earlier one (late, never lost).
    auto status = wait_(e.h);
    e.ev->signal(std::move(status)); // runs the callbacks registered so far
    e.ev.reset();
    release_(e.h);
    std::lock_guard<std::mutex> guard{mtx_};
    in_wait_ = 0;
  }
}

} // namespace layerstream
