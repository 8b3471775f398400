#include "device/host_event.hpp"

namespace layerstream {

host_event::host_event(caf::error status) : done_(true), status_(std::move(status)) {
  // nop
}

void host_event::on_complete(callback done) {
  std::unique_lock<std::mutex> guard{mtx_};
  if (!done_) {
    waiting_.push_back(std::move(done));
    return;
  }
  auto status = status_;
  guard.unlock();
  done(status);
}

void host_event::signal(caf::error status) {
  std::vector<callback> to_run;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (done_)
      return;
    done_ = true;
    status_ = std::move(status);
    to_run.swap(waiting_);
  }
  for (auto& f : to_run)
    f(status_);
}

bool host_event::done() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return done_;
}

size_t host_event::waiting() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return waiting_.size();
}

namespace {

/// Immortal (reachable from this static, never freed), so that contexts may
/// hold it after the source is gone, and shared through an aliasing pointer
/// without a control block: copies touch no counter.
host_event* immortal_completed_event() {
  static host_event* const done = new host_event(caf::error{});
  return done;
}

} // namespace

completed_event_source::completed_event_source() : done_(event_ptr{}, immortal_completed_event()) {
  // nop
}

event_ptr completed_event_source::record(stream_handle) {
  // A copy of a member: the line the virtual call already read. (The
  // function-local static's guard sat on a line of its own, a cache miss
  // on every call after a layer's compute.)
  return done_;
}

event_ptr scripted_event_source::record(stream_handle) {
  auto ev = std::make_shared<host_event>();
  std::lock_guard<std::mutex> guard{mtx_};
  recorded_.push_back(ev);
  return ev;
}

std::shared_ptr<host_event> scripted_event_source::recorded(size_t i) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return i < recorded_.size() ? recorded_[i] : nullptr;
}

size_t scripted_event_source::count() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return recorded_.size();
}

} // namespace layerstream
