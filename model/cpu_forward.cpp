#include "model/cpu_forward.hpp"

namespace layerstream {

void spin_for(std::chrono::microseconds d) {
  auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
    // busy
  }
}

cpu_forward::cpu_forward(kv_pool& pool, std::chrono::microseconds layer_compute, notify_fn notify,
                         done_fn done)
    : forward_thread(std::move(notify), std::move(done)), pool_(pool),
      layer_compute_(layer_compute) {
  start();
}

cpu_forward::~cpu_forward() {
  stop();
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
    layer_written(timing, layer, t0, "compute");
  }
  timing.end = std::chrono::steady_clock::now();
  finish(batch.id, std::move(timing));
}

} // namespace layerstream
