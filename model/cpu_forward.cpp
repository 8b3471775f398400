#include "model/cpu_forward.hpp"

#include <algorithm>

namespace layerstream {

void spin_for(std::chrono::microseconds d) {
  auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
    // busy
  }
}

cpu_forward::cpu_forward(kv_pool& pool, std::chrono::microseconds layer_compute, notify_fn notify,
                         done_fn done)
    : pool_(pool), layer_compute_(layer_compute), notify_(std::move(notify)),
      done_(std::move(done)), thread_([this] { loop(); }) {
  // nop
}

cpu_forward::~cpu_forward() {
  stop();
}

void cpu_forward::run(forward_batch batch) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    queue_.push_back(std::move(batch));
  }
  cv_.notify_one();
}

void cpu_forward::stop() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
    queue_.clear();
  }
  cv_.notify_one();
  if (thread_.joinable())
    thread_.join();
}

void cpu_forward::set_trace(std::shared_ptr<trace_recorder> trace, uint32_t pid) {
  std::lock_guard<std::mutex> guard{mtx_}; // published to the forward thread by the queue's lock
  trace_ = std::move(trace);
  trace_pid_ = pid;
}

void cpu_forward::set_skip_notify(std::vector<uint32_t> layers) {
  std::lock_guard<std::mutex> guard{mtx_}; // published like the trace
  skip_notify_ = std::move(layers);
}

void cpu_forward::loop() {
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

void cpu_forward::execute(const forward_batch& batch) {
  forward_timing timing;
  timing.start = std::chrono::steady_clock::now();
  timing.layer_written.reserve(pool_.layers());
  timing.notify_ns.reserve(pool_.layers());
  for (uint32_t layer = 0; layer < pool_.layers(); ++layer) {
    auto t0 = steady_ns();
    spin_for(layer_compute_);
    for (auto& item : batch.items)
      pool_.write_layer(item.room, layer, item.pages, item.first_token, item.last_token,
                        item.prompt_tokens);
    const auto written = std::chrono::steady_clock::now();
    timing.layer_written.push_back(written);
    if (std::find(skip_notify_.begin(), skip_notify_.end(), layer) == skip_notify_.end())
      notify_(layer);
    timing.notify_ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now() - written)
                                   .count());
    if (trace_)
      trace_->span("compute " + std::to_string(layer), "forward", trace_pid_, 0, t0, steady_ns());
  }
  timing.end = std::chrono::steady_clock::now();
  done_(batch.id, std::move(timing));
}

} // namespace layerstream
