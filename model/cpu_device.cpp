#include "model/cpu_forward.hpp"
#include "model/prefill_device.hpp"

namespace layerstream {

caf::expected<std::unique_ptr<cpu_device>> cpu_device::create(const model_config& model,
                                                              uint64_t pages) {
  auto wait = parse_compute_wait(model.compute_wait);
  if (!wait)
    return wait.error();
  auto pool = kv_pool::create(model, pages);
  if (!pool)
    return pool.error();
  return std::unique_ptr<cpu_device>(new cpu_device(std::move(*pool), *wait));
}

caf::expected<std::unique_ptr<forward_runner>>
cpu_device::make_forward(std::chrono::microseconds layer_compute, forward_runner::notify_fn notify,
                         forward_runner::done_fn done) {
  return std::unique_ptr<forward_runner>(std::make_unique<cpu_forward>(
      *pool_, layer_compute, wait_, std::move(notify), std::move(done)));
}

} // namespace layerstream
