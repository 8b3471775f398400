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

event_ptr completed_event_source::record(stream_handle) {
  // Immortal (reachable from this static, never freed) and shared through an
  // aliasing pointer without a control block: copies touch no counter.
  static host_event* const done = new host_event(caf::error{});
  return event_ptr{event_ptr{}, done};
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
