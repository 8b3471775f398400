#include "model/forward_thread.hpp"

#include <algorithm>
#include <string>

namespace layerstream {

forward_thread::forward_thread(notify_fn notify, done_fn done)
    : notify_(std::move(notify)), done_(std::move(done)) {
  // nop
}

forward_thread::~forward_thread() {
  stop(); // a no-op after the derived destructor's stop()
}

void forward_thread::start() {
  thread_ = std::thread([this] { loop(); });
}

void forward_thread::run(forward_batch batch) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    queue_.push_back(std::move(batch));
  }
  cv_.notify_one();
}

void forward_thread::stop() {
  stop_requested_.store(true, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
    queue_.clear();
  }
  cv_.notify_one();
  if (thread_.joinable())
    thread_.join();
}

void forward_thread::set_trace(std::shared_ptr<trace_recorder> trace, uint32_t pid) {
  std::lock_guard<std::mutex> guard{mtx_}; // published to the forward thread by the queue's lock
  trace_ = std::move(trace);
  trace_pid_ = pid;
}

void forward_thread::set_skip_notify(std::vector<uint32_t> layers) {
  std::lock_guard<std::mutex> guard{mtx_}; // published like the trace
  skip_notify_ = std::move(layers);
}

void forward_thread::loop() {
  for (;;) {
    forward_batch batch;
    {
      std::unique_lock<std::mutex> guard{mtx_};
      cv_.wait(guard, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_)
        return;
      batch = std::move(queue_.front());
      queue_.pop_front();
    }
    execute(batch);
  }
}

void forward_thread::layer_written(forward_timing& timing, uint32_t layer, int64_t t0,
                                   const char* what) {
  const auto written = std::chrono::steady_clock::now();
  timing.layer_written.push_back(written);
  if (std::find(skip_notify_.begin(), skip_notify_.end(), layer) == skip_notify_.end())
    notify_(layer);
  timing.notify_ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now() - written)
                                 .count());
  if (trace_)
    trace_->span(std::string{what} + " " + std::to_string(layer), "forward", trace_pid_, 0, t0,
                 steady_ns());
}

void forward_thread::finish(uint64_t batch_id, forward_timing timing) {
  done_(batch_id, std::move(timing));
}

} // namespace layerstream
